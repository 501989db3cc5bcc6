/*
 * argmax.cu - greedy sampling on the device: the index of each row's
 * largest logit, the lowest index among equal maxima (as the CPU's
 * sampler), one block per row; a fixed-shape reduction.
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define ARGMAX_THREADS 256

/* (v, i) beats (w, j): larger value, or equal value and lower index; NaN never wins. */
__device__ static inline bool better(float v, int i, float w, int j)
{
    return v > w || (v == w && i < j);
}

__global__ __launch_bounds__(ARGMAX_THREADS) void argmax_kernel(const float *__restrict__ x, size_t xs, int n,
                                                                int32_t *__restrict__ ids)
{
    __shared__ float bv[ARGMAX_THREADS];
    __shared__ int bi[ARGMAX_THREADS];
    const float *r = x + (size_t)blockIdx.x * xs;
    float v = -INFINITY;
    int i = n; /* none yet */
    for (int j = threadIdx.x; j < n; j += ARGMAX_THREADS)
        if (i == n || better(r[j], j, v, i))
            v = r[j], i = j;
    bv[threadIdx.x] = v;
    bi[threadIdx.x] = i;
    __syncthreads();
    for (int h = ARGMAX_THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) {
            float w = bv[threadIdx.x + h];
            int j = bi[threadIdx.x + h];
            if (j < n && (bi[threadIdx.x] >= n || better(w, j, bv[threadIdx.x], bi[threadIdx.x])))
                bv[threadIdx.x] = w, bi[threadIdx.x] = j;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        ids[blockIdx.x] = bi[0] < n ? bi[0] : 0;
}

extern "C" bool k25cu_argmax(struct k25cu_err *e, cudaStream_t s, const float *x, size_t xs, int m, int n,
                             int32_t *ids)
{
    if (m <= 0)
        return true;
    argmax_kernel<<<m, ARGMAX_THREADS, 0, s>>>(x, xs, n, ids);
    return K25_LAUNCHED(e);
}
