/*
 * kvwrite.cu - writes of the paged KV cache (layout: engine/kvcache.h).
 *
 * fp32/fp16 caches: each (row, KV head, channel) to its block row
 * (fp16 rounded to nearest even, k25cm_f2h = the CPU's conversion).
 * int8/int4 caches: rows go to the sequence's fp16 residual; when it fills,
 * its oldest group of `group` rows is quantized into the block
 * (k25cu_kv_quant_group): keys per channel over the group's tokens, values
 * per token over vgroup channels, with the CPU's grid and rounding
 * (k25cm_kvq_grid / k25cm_kvq_code: bit-identical codes and scales), then
 * the residual shifts down by one group (copies of at most a group of rows
 * each, in order, so no copy overlaps itself).
 */
#include "k25_cuda_math.h"
#include "k25_cuda_ops.h"

#define KVW_THREADS 256

/* One thread per (row, KV head, channel) of k and v. */
__global__ void kv_rows_kernel(struct k25cu_kv_layout L, unsigned char *const *__restrict__ table, int slot0, int n,
                               const float *__restrict__ k, const float *__restrict__ v, size_t stride)
{
    const int hd = L.head_dim, nkv = L.n_kv_heads;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n * nkv * hd)
        return;
    int d = (int)(t % hd), g = (int)(t / hd % nkv), i = (int)(t / hd / nkv);
    int slot = slot0 + i, b = slot / L.block_size - slot0 / L.block_size, o = slot % L.block_size;
    unsigned char *kb = table[b] + (size_t)g * L.head_bytes + (size_t)o * L.row_bytes;
    unsigned char *vb = kb + L.half_bytes;
    float kx = k[(size_t)i * stride + (size_t)g * hd + d], vx = v[(size_t)i * stride + (size_t)g * hd + d];
    if (L.elem_bytes == 4) {
        ((float *)kb)[d] = kx;
        ((float *)vb)[d] = vx;
    } else {
        ((uint16_t *)kb)[d] = k25cm_f2h(kx);
        ((uint16_t *)vb)[d] = k25cm_f2h(vx);
    }
}

/* One thread per (row, KV head, channel): fp16 residual rows idx0 + i. */
__global__ void kv_res_kernel(struct k25cu_kv_layout L, uint16_t *__restrict__ res, int idx0, int n,
                              const float *__restrict__ k, const float *__restrict__ v, size_t stride)
{
    const int hd = L.head_dim, nkv = L.n_kv_heads;
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= (int64_t)n * nkv * hd)
        return;
    int d = (int)(t % hd), g = (int)(t / hd % nkv), i = (int)(t / hd / nkv);
    size_t head = (size_t)L.res_cap * hd;
    size_t r = (size_t)(idx0 + i) * hd + d;
    res[(size_t)g * head + r] = k25cm_f2h(k[(size_t)i * stride + (size_t)g * hd + d]);
    res[((size_t)nkv + g) * head + r] = k25cm_f2h(v[(size_t)i * stride + (size_t)g * hd + d]);
}

/* Keys of the closing group: block g = KV head, a thread per code byte (k25cm_kvq_key_byte). */
__global__ void kv_quant_keys_kernel(struct k25cu_kv_layout L, const uint16_t *__restrict__ res,
                                     unsigned char *__restrict__ lay, int o)
{
    const int nbytes = L.bits == 8 ? L.head_dim : L.head_dim / 2;
    for (int byte = threadIdx.x; byte < nbytes; byte += blockDim.x)
        k25cm_kvq_key_byte(&L, res, lay, o, blockIdx.x, byte);
}

/* Values of the closing group: block g = KV head, a thread per (token, value group) (k25cm_kvq_value_group). */
__global__ void kv_quant_values_kernel(struct k25cu_kv_layout L, const uint16_t *__restrict__ res,
                                       unsigned char *__restrict__ lay, int o)
{
    const int nvg = L.head_dim / L.vgroup;
    for (int w = threadIdx.x; w < L.group * nvg; w += blockDim.x)
        k25cm_kvq_value_group(&L, res, lay, o, blockIdx.x, w / nvg, w % nvg);
}

extern "C" bool k25cu_kv_write_rows(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L,
                                    unsigned char *const *table, int slot0, int n, const float *k, const float *v,
                                    size_t stride)
{
    if (n <= 0)
        return true;
    int64_t nt = (int64_t)n * L->n_kv_heads * L->head_dim;
    kv_rows_kernel<<<k25cm_grid1(nt, KVW_THREADS), KVW_THREADS, 0, s>>>(*L, table, slot0, n, k, v, stride);
    return K25_LAUNCHED(e);
}

extern "C" bool k25cu_kv_write_res(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L,
                                   uint16_t *res, int idx0, int n, const float *k, const float *v, size_t stride)
{
    if (n <= 0)
        return true;
    int64_t nt = (int64_t)n * L->n_kv_heads * L->head_dim;
    kv_res_kernel<<<k25cm_grid1(nt, KVW_THREADS), KVW_THREADS, 0, s>>>(*L, res, idx0, n, k, v, stride);
    return K25_LAUNCHED(e);
}

extern "C" bool k25cu_kv_quant_group(struct k25cu_err *e, cudaStream_t s, const struct k25cu_kv_layout *L,
                                     uint16_t *res, unsigned char *lay, int o)
{
    kv_quant_keys_kernel<<<L->n_kv_heads, 128, 0, s>>>(*L, res, lay, o);
    if (!K25_LAUNCHED(e))
        return false;
    kv_quant_values_kernel<<<L->n_kv_heads, 128, 0, s>>>(*L, res, lay, o);
    if (!K25_LAUNCHED(e))
        return false;
    /* shift every (K|V, head) residual down by one group: rows [a, a+c) <- [a+G, a+G+c), c <= G */
    const int G = L->group, keep = L->res_cap - G;
    const size_t rowb = sizeof(uint16_t) * (size_t)L->head_dim, pitch = rowb * (size_t)L->res_cap;
    for (int a = 0; a < keep; a += G) {
        int c = keep - a < G ? keep - a : G;
        unsigned char *base = (unsigned char *)res;
        if (!K25_CUDA(e, cudaMemcpy2DAsync(base + rowb * (size_t)a, pitch, base + rowb * (size_t)(a + G), pitch,
                                           rowb * (size_t)c, 2 * (size_t)L->n_kv_heads, cudaMemcpyDeviceToDevice, s)))
            return false;
    }
    return true;
}
