/*
 * alloc.c - the tracking allocator.
 *
 * Every engine allocation names a category (weights, KV, activations,
 * attention scratch, other) so that memory figures in results are exact
 * byte counts of what the engine holds, not RSS guesses.  Each block
 * carries a 64-byte header (category, size, accounting context) in front
 * of the 64-byte aligned payload.  Two levels of counters: process-wide
 * (k25_mem_get) and per accounting context (struct k25_mem_acct, one per
 * engine, k25_engine_mem), so two engines in one process - the fidelity
 * run has two - each report their own memory.  Counters are atomics:
 * kernels allocate scratch from OpenMP threads.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define HDR 64

static struct k25_mem_acct g_proc; /* the process: every allocation */

static void raise_peak(_Atomic int64_t *peak, int64_t v)
{
    int64_t p = atomic_load(peak);
    while (v > p && !atomic_compare_exchange_weak(peak, &p, v))
        ;
}

void k25_mem_acct_add(struct k25_mem_acct *a, enum k25_mem_cat cat, int64_t bytes)
{
    K25_ASSERT(cat >= 0 && cat < K25_MEM_NCAT);
    int64_t cur = atomic_fetch_add(&a->cur[cat], bytes) + bytes;
    int64_t tot = atomic_fetch_add(&a->total_cur, bytes) + bytes;
    if (bytes > 0) {
        raise_peak(&a->peak[cat], cur);
        raise_peak(&a->total_peak, tot);
    }
}

void k25_mem_acct_get(const struct k25_mem_acct *a, struct k25_mem_stats *out)
{
    for (int i = 0; i < K25_MEM_NCAT; i++) {
        out->cur_bytes[i] = atomic_load(&a->cur[i]);
        out->peak_bytes[i] = atomic_load(&a->peak[i]);
    }
    out->total_cur_bytes = atomic_load(&a->total_cur);
    out->total_peak_bytes = atomic_load(&a->total_peak);
}

void k25_mem_acct_reset_peak(struct k25_mem_acct *a)
{
    for (int i = 0; i < K25_MEM_NCAT; i++)
        atomic_store(&a->peak[i], atomic_load(&a->cur[i]));
    atomic_store(&a->total_peak, atomic_load(&a->total_cur));
}

void *k25_alloc_acct(struct k25_mem_acct *acct, enum k25_mem_cat cat, size_t bytes)
{
    K25_ASSERT(cat >= 0 && cat < K25_MEM_NCAT);
    if (bytes > SIZE_MAX - 2 * HDR)
        return NULL;
    size_t total = HDR + ((bytes + 63) & ~(size_t)63);
    unsigned char *raw = aligned_alloc(64, total);
    if (!raw)
        return NULL;
    memset(raw, 0, total);
    struct {
        int64_t cat, bytes;
        struct k25_mem_acct *acct;
    } h = {cat, (int64_t)bytes, acct};
    _Static_assert(sizeof(h) <= HDR, "allocation header");
    memcpy(raw, &h, sizeof(h));
    k25_mem_acct_add(&g_proc, cat, (int64_t)bytes);
    if (acct)
        k25_mem_acct_add(acct, cat, (int64_t)bytes);
    return raw + HDR;
}

void *k25_alloc(enum k25_mem_cat cat, size_t bytes)
{
    return k25_alloc_acct(NULL, cat, bytes);
}

void k25_free(void *p)
{
    if (!p)
        return;
    unsigned char *raw = (unsigned char *)p - HDR;
    struct {
        int64_t cat, bytes;
        struct k25_mem_acct *acct;
    } h;
    memcpy(&h, raw, sizeof(h));
    K25_ASSERT(h.cat >= 0 && h.cat < K25_MEM_NCAT);
    k25_mem_acct_add(&g_proc, (enum k25_mem_cat)h.cat, -h.bytes);
    if (h.acct)
        k25_mem_acct_add(h.acct, (enum k25_mem_cat)h.cat, -h.bytes);
    free(raw);
}

void k25_mem_get(struct k25_mem_stats *out)
{
    k25_mem_acct_get(&g_proc, out);
}

void k25_mem_reset_peak(void)
{
    k25_mem_acct_reset_peak(&g_proc);
}

const char *k25_mem_cat_name(enum k25_mem_cat cat)
{
    static const char *names[K25_MEM_NCAT] = {"weights", "kv", "activations", "attn_scratch",
                                              "other"};
    return (cat >= 0 && cat < K25_MEM_NCAT) ? names[cat] : "?";
}
