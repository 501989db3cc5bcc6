/*
 * alloc.c - the tracking allocator.
 *
 * Every engine allocation names a category (weights, KV, activations,
 * attention scratch, other) so that memory figures in results are exact
 * byte counts of what the engine holds, not RSS guesses.  Each block
 * carries a 64-byte header (category and size) in front of the 64-byte
 * aligned payload.  Counters are atomics: kernels allocate scratch from
 * OpenMP threads.
 */
#include "k25.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define HDR 64

static _Atomic int64_t g_cur[K25_MEM_NCAT];
static _Atomic int64_t g_peak[K25_MEM_NCAT];
static _Atomic int64_t g_total_cur;
static _Atomic int64_t g_total_peak;

static void raise_peak(_Atomic int64_t *peak, int64_t v)
{
    int64_t p = atomic_load(peak);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
        ;
}

void *k25_alloc(enum k25_mem_cat cat, size_t bytes)
{
    K25_ASSERT(cat >= 0 && cat < K25_MEM_NCAT);
    if (bytes > SIZE_MAX - 2 * HDR)
        return NULL;
    size_t total = HDR + ((bytes + 63) & ~(size_t)63);
    unsigned char *raw = aligned_alloc(64, total);
    if (!raw)
        return NULL;
    memset(raw, 0, total);
    int64_t *h = (int64_t *)raw;
    h[0] = (int64_t)cat;
    h[1] = (int64_t)bytes;
    raise_peak(&g_peak[cat], atomic_fetch_add(&g_cur[cat], (int64_t)bytes) + (int64_t)bytes);
    raise_peak(&g_total_peak, atomic_fetch_add(&g_total_cur, (int64_t)bytes) + (int64_t)bytes);
    return raw + HDR;
}

void k25_free(void *p)
{
    if (!p)
        return;
    unsigned char *raw = (unsigned char *)p - HDR;
    int64_t *h = (int64_t *)raw;
    int cat = (int)h[0];
    K25_ASSERT(cat >= 0 && cat < K25_MEM_NCAT);
    atomic_fetch_sub(&g_cur[cat], h[1]);
    atomic_fetch_sub(&g_total_cur, h[1]);
    free(raw);
}

void k25_mem_get(struct k25_mem_stats *out)
{
    for (int i = 0; i < K25_MEM_NCAT; i++) {
        out->cur_bytes[i] = atomic_load(&g_cur[i]);
        out->peak_bytes[i] = atomic_load(&g_peak[i]);
    }
    out->total_cur_bytes = atomic_load(&g_total_cur);
    out->total_peak_bytes = atomic_load(&g_total_peak);
}

void k25_mem_reset_peak(void)
{
    for (int i = 0; i < K25_MEM_NCAT; i++)
        atomic_store(&g_peak[i], atomic_load(&g_cur[i]));
    atomic_store(&g_total_peak, atomic_load(&g_total_cur));
}

const char *k25_mem_cat_name(enum k25_mem_cat cat)
{
    static const char *names[K25_MEM_NCAT] = {"weights", "kv", "activations", "attn_scratch",
                                              "other"};
    return (cat >= 0 && cat < K25_MEM_NCAT) ? names[cat] : "?";
}
