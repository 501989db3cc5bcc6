/*
 * rmsnorm.cu - y[i] = x[i] / rms(x[i]) * w, one block per row.  The sum of
 * squares is taken in double (as the CPU backend does, d up to 8K values),
 * each thread over a fixed stride then a fixed-shape tree, so a row's
 * result depends on the row only; the element formula is k25cm_rms_apply.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define RMS_THREADS 256

__global__ __launch_bounds__(RMS_THREADS) void rmsnorm_kernel(const float *__restrict__ x, size_t xs,
                                                              const float *__restrict__ w, float eps,
                                                              float *__restrict__ y, size_t ys, int d)
{
    __shared__ double part[RMS_THREADS];
    const float *xi = x + (size_t)blockIdx.x * xs;
    float *yi = y + (size_t)blockIdx.x * ys;
    double ss = 0.0;
    for (int j = threadIdx.x; j < d; j += RMS_THREADS)
        ss += (double)xi[j] * xi[j];
    part[threadIdx.x] = ss;
    __syncthreads();
    for (int h = RMS_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    const float inv = k25cm_rms_inv(part[0], d, eps);
    for (int j = threadIdx.x; j < d; j += RMS_THREADS)
        yi[j] = k25cm_rms_apply(xi[j], inv, w[j]);
}

extern "C" bool k25cu_rmsnorm(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, const float *w,
                              float eps, float *y, size_t ys, int m, int d)
{
    if (m <= 0)
        return true;
    rmsnorm_kernel<<<m, RMS_THREADS, 0, s>>>(x, xs, w, eps, y, ys, d);
    return K25_LAUNCHED(e);
}
