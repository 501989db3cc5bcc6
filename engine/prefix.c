/*
 * prefix.c - prefix caching: a hash table of full KV blocks keyed by a
 * hash chained over their tokens, with an LRU list of the cached blocks no
 * sequence references.  See prefix.h for the scheme; kvcache.c keeps the
 * reference counts and calls k25_prefix_park / k25_prefix_evict from its
 * block free and get paths.
 */
#include "prefix.h"

#include <stdlib.h>
#include <string.h>

struct k25_prefix {
    uint64_t seed;
    int bs;                  /* tokens per block */
    int64_t cap;             /* entries of the per-block arrays */
    uint64_t *hash;          /* [cap] chained hash of a cached block */
    uint64_t *parent;        /* [cap] the chain value before it */
    int32_t *tokens;         /* [cap][bs] the token ids it holds (checked on a hit) */
    uint8_t *cached;         /* [cap] in the table */
    int32_t *hnext;          /* [cap] next id in its bucket */
    int32_t *lru_prev, *lru_next; /* [cap] the unreferenced cached blocks, oldest first */
    int32_t lru_head, lru_tail;
    int64_t n_parked;        /* on the LRU list */
    int32_t *buckets;        /* [n_buckets] first id, -1 when empty (power of two) */
    int64_t n_buckets;
    void (*on_evict)(int32_t id, void *user);
    void *user;
    struct k25_prefix_stats st;
};

/* ------------------------------------------------------------- hashing */

static uint64_t mix64(uint64_t x) /* splitmix64's finalizer */
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
    const unsigned char *b = data;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* The chain value after a block holding tokens[0, bs) whose parent chain value is parent. */
static uint64_t chain(uint64_t parent, const int32_t *tokens, int bs)
{
    uint64_t h = fnv(0xcbf29ce484222325ull ^ parent, &parent, sizeof(parent));
    return mix64(fnv(h, tokens, sizeof(int32_t) * (size_t)bs));
}

uint64_t k25_prefix_seed(const struct k25_config *cfg, const struct k25_model_shape *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv(h, cfg->model, strnlen(cfg->model, sizeof(cfg->model)));
    h = fnv(h, s->name, strnlen(s->name, sizeof(s->name)));
    const int64_t ints[] = {s->dim, s->n_layers, s->n_heads, s->n_kv_heads, s->head_dim, s->ffn_dim,
                            s->vocab_size, s->tied_embeddings, cfg->kv_cache_dtype, cfg->kv_block_size,
                            cfg->kv_quant_group, cfg->kv_quant_residual, cfg->weight_dtype,
                            cfg->quantize_weights, cfg->weight_quant_group, cfg->kv_sink_tokens,
                            cfg->kv_recent_tokens};
    const double reals[] = {s->rope_theta, s->norm_eps, cfg->rope_theta, cfg->kv_compression_ratio,
                            cfg->kv_merge_threshold};
    h = fnv(h, ints, sizeof(ints));
    h = fnv(h, reals, sizeof(reals));
    return mix64(h);
}

/* --------------------------------------------------------------- table */

int k25_prefix_create(struct k25_kv_pool *p, uint64_t seed, void (*on_evict)(int32_t id, void *user), void *user,
                      struct k25_error *err)
{
    struct k25_prefix *px = calloc(1, sizeof(*px));
    if (!px)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (prefix cache)");
    px->seed = seed;
    px->bs = p->block_size;
    px->lru_head = px->lru_tail = -1;
    px->on_evict = on_evict;
    px->user = user;
    p->px = px;
    return K25_OK;
}

void k25_prefix_destroy(struct k25_kv_pool *p)
{
    struct k25_prefix *px = p->px;
    if (!px)
        return;
    free(px->hash);
    free(px->parent);
    free(px->tokens);
    free(px->cached);
    free(px->hnext);
    free(px->lru_prev);
    free(px->lru_next);
    free(px->buckets);
    free(px);
    p->px = NULL;
}

/* Grows the per-block arrays to hold ids < n.  false when out of memory (nothing lost). */
static bool grow(struct k25_prefix *px, int64_t n)
{
    if (n <= px->cap)
        return true;
    int64_t nc = px->cap ? px->cap : 64;
    while (nc < n)
        nc *= 2;
#define GROW(f)                                                                                                        \
    do {                                                                                                               \
        void *q = realloc(px->f, sizeof(*px->f) * (size_t)nc);                                                         \
        if (!q)                                                                                                        \
            return false;                                                                                              \
        px->f = q;                                                                                                     \
    } while (0)
    GROW(hash);
    GROW(parent);
    GROW(cached);
    GROW(hnext);
    GROW(lru_prev);
    GROW(lru_next);
#undef GROW
    int32_t *t = realloc(px->tokens, sizeof(int32_t) * (size_t)nc * px->bs);
    if (!t)
        return false;
    px->tokens = t;
    memset(px->cached + px->cap, 0, (size_t)(nc - px->cap));
    px->cap = nc;
    return true;
}

static int64_t bucket_of(const struct k25_prefix *px, uint64_t h)
{
    return (int64_t)(h & (uint64_t)(px->n_buckets - 1));
}

/* Doubles the bucket array (or makes the first) and rehashes.  false when out of memory. */
static bool rehash(struct k25_prefix *px)
{
    int64_t nb = px->n_buckets ? 2 * px->n_buckets : 64;
    int32_t *b = malloc(sizeof(int32_t) * (size_t)nb);
    if (!b)
        return false;
    for (int64_t i = 0; i < nb; i++)
        b[i] = -1;
    int32_t *old = px->buckets;
    int64_t on = px->n_buckets;
    px->buckets = b;
    px->n_buckets = nb;
    for (int64_t i = 0; i < on; i++)
        for (int32_t id = old[i], nx; id >= 0; id = nx) {
            nx = px->hnext[id];
            int64_t k = bucket_of(px, px->hash[id]);
            px->hnext[id] = b[k];
            b[k] = id;
        }
    free(old);
    return true;
}

/* The cached block with chain value h after parent holding tokens, or -1. */
static int32_t find(const struct k25_prefix *px, uint64_t h, uint64_t parent, const int32_t *tokens)
{
    if (!px->n_buckets)
        return -1;
    for (int32_t id = px->buckets[bucket_of(px, h)]; id >= 0; id = px->hnext[id])
        if (px->hash[id] == h && px->parent[id] == parent &&
            !memcmp(px->tokens + (size_t)id * px->bs, tokens, sizeof(int32_t) * (size_t)px->bs))
            return id;
    return -1;
}

static void unlink_table(struct k25_prefix *px, int32_t id)
{
    int32_t *pp = &px->buckets[bucket_of(px, px->hash[id])];
    while (*pp != id) {
        K25_ASSERT(*pp >= 0);
        pp = &px->hnext[*pp];
    }
    *pp = px->hnext[id];
    px->cached[id] = 0;
    px->st.cached_blocks--;
}

static void lru_remove(struct k25_prefix *px, int32_t id)
{
    int32_t pv = px->lru_prev[id], nx = px->lru_next[id];
    if (pv >= 0)
        px->lru_next[pv] = nx;
    else
        px->lru_head = nx;
    if (nx >= 0)
        px->lru_prev[nx] = pv;
    else
        px->lru_tail = pv;
    px->n_parked--;
}

bool k25_prefix_cached(const struct k25_kv_pool *p, int32_t id)
{
    return p->px && id < p->px->cap && p->px->cached[id];
}

int32_t k25_prefix_evict(struct k25_kv_pool *p)
{
    struct k25_prefix *px = p->px;
    int32_t id = px ? px->lru_head : -1;
    if (id < 0)
        return -1;
    K25_ASSERT(p->refs[id] == 0);
    lru_remove(px, id);
    unlink_table(px, id);
    px->st.evictions++;
    if (px->on_evict)
        px->on_evict(id, px->user);
    return id;
}

void k25_prefix_park(struct k25_kv_pool *p, int32_t id)
{
    struct k25_prefix *px = p->px;
    K25_ASSERT(px->cached[id] && p->refs[id] == 0);
    px->lru_prev[id] = px->lru_tail;
    px->lru_next[id] = -1;
    if (px->lru_tail >= 0)
        px->lru_next[px->lru_tail] = id;
    else
        px->lru_head = id;
    px->lru_tail = id;
    px->n_parked++;
    /* without a budget the pool never runs short: bound what the cache keeps idle */
    int64_t idle_cap = (int64_t)(K25_PREFIX_IDLE_BYTES / p->block_bytes);
    idle_cap = idle_cap > p->peak_in_use ? idle_cap : p->peak_in_use;
    while (p->max_blocks == 0 && px->n_parked > (idle_cap > 0 ? idle_cap : 1)) {
        int32_t old = k25_prefix_evict(p);
        p->free_ids[p->n_free++] = old;
    }
}

int k25_prefix_attach(struct k25_kv_pool *p, struct k25_kv_seq *seq, const int32_t *tokens, int n, int *matched,
                      struct k25_error *err)
{
    struct k25_prefix *px = p->px;
    const int bs = p->block_size;
    K25_ASSERT(seq->n_blocks == 0 && seq->n_tokens == 0);
    *matched = 0;
    px->st.lookups++;
    int k = 0;
    uint64_t h = px->seed;
    int32_t ids[64];
    int32_t *found = ids;
    int max_k = n / bs;
    if (max_k > 64 && !(found = malloc(sizeof(int32_t) * (size_t)max_k)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (prefix lookup)");
    for (; k < max_k; k++) {
        uint64_t nh = chain(h, tokens + (size_t)k * bs, bs);
        int32_t id = find(px, nh, h, tokens + (size_t)k * bs);
        if (id < 0)
            break;
        found[k] = id;
        h = nh;
    }
    int rc = K25_OK;
    if (k == 0)
        goto out;
    int cap = 16;
    while (cap < k)
        cap *= 2;
    if (!(seq->ids = malloc(sizeof(int32_t) * (size_t)cap))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (block table)");
        goto out;
    }
    seq->cap = cap;
    for (int i = 0; i < k; i++) {
        int32_t id = found[i];
        if (p->refs[id]++ == 0) { /* idle in the cache: in use again */
            lru_remove(px, id);
            if (++p->in_use > p->peak_in_use)
                p->peak_in_use = p->in_use;
        }
        seq->ids[seq->n_blocks++] = id;
    }
    seq->n_tokens = seq->n_pos = k * bs;
    if (p->quant) { /* the residual (reserve allocates it); every shared slot is quantized */
        if ((rc = k25_kv_seq_reserve(p, seq, 0, err)) != K25_OK) {
            k25_kv_seq_release(p, seq, NULL, NULL);
            goto out;
        }
        for (int l = 0; l < p->n_layers; l++)
            seq->n_quant[l] = k * bs;
    }
    *matched = k * bs;
    px->st.hits++;
    px->st.hit_tokens += k * bs;
out:
    if (found != ids)
        free(found);
    return rc;
}

void k25_prefix_publish(struct k25_kv_pool *p, const struct k25_kv_seq *seq, const int32_t *tokens, int n_written)
{
    struct k25_prefix *px = p->px;
    const int bs = p->block_size;
    int n = n_written < seq->n_tokens ? n_written : seq->n_tokens;
    if (seq->n_tokens != seq->n_pos) /* compressed: slots are not positions (never with the config check) */
        return;
    if (p->quant)
        for (int l = 0; l < p->n_layers; l++)
            n = seq->n_quant[l] < n ? seq->n_quant[l] : n;
    if (!grow(px, p->n_alloc))
        return;
    uint64_t h = px->seed;
    for (int b = 0; b < n / bs && b < seq->n_blocks; b++) {
        const int32_t *tk = tokens + (size_t)b * bs;
        uint64_t nh = chain(h, tk, bs);
        int32_t id = seq->ids[b];
        if (!px->cached[id] && find(px, nh, h, tk) < 0) {
            if (px->st.cached_blocks + 1 > px->n_buckets && !rehash(px))
                return;
            px->hash[id] = nh;
            px->parent[id] = h;
            memcpy(px->tokens + (size_t)id * bs, tk, sizeof(int32_t) * (size_t)bs);
            px->cached[id] = 1;
            int64_t kb = bucket_of(px, nh);
            px->hnext[id] = px->buckets[kb];
            px->buckets[kb] = id;
            px->st.cached_blocks++;
        }
        h = nh;
    }
}

void k25_prefix_get_stats(const struct k25_kv_pool *p, struct k25_prefix_stats *out)
{
    if (p->px)
        *out = p->px->st;
    else
        memset(out, 0, sizeof(*out));
}
