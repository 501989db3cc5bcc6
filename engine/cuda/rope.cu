/*
 * rope.cu - the RoPE cache (cos, sin of position times inverse frequency,
 * in double as the CPU computes it) and the "rotate half" rotation of every
 * head of every row, in place (k25cm_rope_pair).
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define ROPE_THREADS 256

/* cs[i][j] = cos(pos[i] f_j), cs[i][half + j] = sin(pos[i] f_j): one thread per (row, j). */
__global__ void rope_cache_kernel(const int32_t *__restrict__ pos, const double *__restrict__ inv_freq,
                                  float *__restrict__ cs, size_t css, int m, int half)
{
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)m * half)
        return;
    int i = (int)(t / half), j = (int)(t % half);
    double a = k25cm_rope_angle(pos[i], inv_freq[j]);
    cs[(size_t)i * css + j] = (float)cos(a);
    cs[(size_t)i * css + half + j] = (float)sin(a);
}

/* One thread per (row, head, j < half): rotates the pair (j, j + half). */
__global__ void rope_kernel(float *__restrict__ x, size_t xs, int m, int n_heads, int hd,
                            const float *__restrict__ cs, size_t css)
{
    const int half = hd / 2;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)m * n_heads * half)
        return;
    int j = (int)(t % half), h = (int)(t / half % n_heads), i = (int)(t / half / n_heads);
    float *v = x + (size_t)i * xs + (size_t)h * hd;
    const float *c = cs + (size_t)i * css;
    float ra, rb;
    k25cm_rope_pair(v[j], v[j + half], c[j], c[half + j], &ra, &rb);
    v[j] = ra;
    v[j + half] = rb;
}

extern "C" bool k25cu_rope_cache(struct k25cu_err *e, cudaStream_t s, const int32_t *pos, const double *inv_freq,
                                 float *cs, size_t css, int m, int hd)
{
    if (m <= 0)
        return true;
    rope_cache_kernel<<<k25cm_grid1((int64_t)m * (hd / 2), ROPE_THREADS), ROPE_THREADS, 0, s>>>(pos, inv_freq, cs,
                                                                                               css, m, hd / 2);
    return K25_LAUNCHED(e);
}

extern "C" bool k25cu_rope(struct k25cu_err *e, cudaStream_t s, float *x, size_t xs, int m, int n_heads, int hd,
                           const float *cs, size_t css)
{
    if (m <= 0)
        return true;
    rope_kernel<<<k25cm_grid1((int64_t)m * n_heads * (hd / 2), ROPE_THREADS), ROPE_THREADS, 0, s>>>(
        x, xs, m, n_heads, hd, cs, css);
    return K25_LAUNCHED(e);
}
