/*
 * kvtier.c - KV tiers: hot (backend buffers), warm (a bounded host pool),
 * cold (a file read by a prefetch thread).  See kvtier.h for the model and
 * docs/engine.md "KV tiers" for the policy and the figures.
 *
 * Residency is per block and per step.  Between steps a block's bytes are
 * hot (its buffer, pool->blocks[id]), warm (a slot of the warm pool) or
 * cold (the file).  In a step (k25_kv_tier_acquire) a warm or cold block
 * is either *streamed* - it gets no block buffer; before each layer's
 * attention (k25_kv_tier_layer) pool->stream[id] points at that layer of
 * its bytes: inside its warm slot, inside the staging slot the prefetch
 * thread read it into, or (a unit that was not staged) in a reused stream
 * area it is read into here - or, when the step may write it (the newest
 * slots, int8/int4 groups that close, or any block when compression may
 * compact it), made whole-hot in a block buffer.  So a step holds the hot
 * blocks, the warm pool and the staging area, never the sequence's whole
 * KV.  After the step (k25_kv_tier_release) a streamed block simply stops
 * streaming; a whole-hot block that need not stay hot gives its buffer back
 * to the pool's spares (clean: no bytes move; written: copied out first).
 * Block buffers and stream areas are reused from step to step: the hot
 * path neither allocates nor frees.  Pointing attention at host tier memory
 * is the CPU backend's path (k25_kv_layer is its host implementation of
 * the KV ops); the layer units a GPU backend streams would go through
 * buf_set into device memory.
 *
 * Eviction policy (warm -> cold when the warm pool is full): the warm block
 * read least recently goes first; among equals the one with the least
 * attention mass (mean compression score of its slots, where compression
 * still keeps scores for them; unknown counts as least), then the lowest id.
 * With kv_tier_policy hotness (issue 36) the block's rank comes first: its
 * span's mean decayed attention mass (sampled layers, every slot: forward.c
 * -> k25_kv_tier_observe), +inf for the sink and the recent window; after
 * each release the best-ranked span with cold blocks is promoted as a unit
 * when it beats the warm blocks it displaces by K25_KV_HOT_MARGIN and none
 * of them moved in the last K25_KV_HOT_DWELL steps (rebalance): the
 * displaced go cold at once, the promoted blocks are read into their warm
 * slots by the prefetch thread (after its staging units) and become warm
 * at a later step's end (promo_finish).  Spans: kvspan.c.
 *
 * Prefetch works in units of one layer of one block (layer_bytes).  The
 * staging area is the tail of the warm pool's memory, in units: at least 2
 * blocks' worth, grown between steps (warm slots give way, their blocks
 * going cold) until two layers of the cold blocks a step streams fit -
 * the layer being computed, held by attention, and the next one, loading -
 * so a sequence whose non-hot KV is S blocks, with W warm-pool blocks and
 * L layers, stages 2 (S - W) / (L - 2) blocks and keeps the rest warm.
 * The prefetch thread serves a FIFO of staging slots: the engine thread
 * queues the cold units a sequence reads next, layer after layer from the
 * layer it is about to compute, wrapping round to the next step's first
 * layers (a cold block's bytes do not change while it stays cold); the
 * thread preads them (QUEUED -> READING -> READY); the layer that needs a
 * unit holds it (HELD) until the next layer starts, and the freed slots
 * take the next units.  So layer l+1's cold units load while layer l
 * computes.  A unit that was not ready when its layer needed it makes the
 * block's read of that step a miss, and the wait is timed.  Everything the
 * two threads share is under t->mu.
 */
#include "kvtier.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { AT_HOT, AT_WARM, AT_COLD };
enum { ST_FREE, ST_QUEUED, ST_READING, ST_READY, ST_FAILED, ST_CANCEL, ST_HELD };
/* A promotion (hotness) reads a whole cold block into the warm slot it owns, by warm slot:
 * PR_FREE -> PR_QUEUED -> PR_READING -> PR_READY | PR_FAILED, under t->mu. */
enum { PR_FREE, PR_QUEUED, PR_READING, PR_READY, PR_FAILED };

/* Tier state of one pool block id. */
struct blk {
    int8_t where;      /* AT_*: where the block's current bytes are (hot: pool->blocks[id]) */
    bool cold_ok;      /* the cold file holds its current bytes */
    bool waited;       /* a read of it this step had to wait (the step's read is a miss) */
    bool streamed;     /* streamed through this step (no block buffer) */
    int32_t warm;      /* its warm slot (current bytes unless hot and written since), or -1 */
    uint64_t last_use; /* step of its last read */
    float mass;        /* mean attention score of its slots; -1 unknown */
    /* hotness policy */
    float heat;        /* decayed attention mass (k25_kv_heat_step) */
    float rank;        /* its span's mean heat at the last rebalance; +inf protected (sink, recent) */
    int32_t promo;     /* warm slot a pending promotion reads it into, or -1 */
    uint64_t moved;    /* step it was last promoted or demoted by hotness */
};
#define BLK_NEW \
    ((struct blk){.where = AT_HOT, .warm = -1, .mass = -1.0f, .promo = -1, .moved = 0})

struct stage {
    int state;          /* ST_* */
    int32_t id;         /* block of the unit being staged */
    int layer;          /* its layer */
    uint64_t qno;       /* FIFO order */
    unsigned char *buf; /* [layer_bytes] in the staging tail of warm_mem */
};

struct k25_kv_tier {
    struct k25_kv_pool *pool;
    struct k25_log *log;
    struct k25_mem_acct *acct;
    int hot_tokens, L;
    size_t lb;                /* layer_bytes: one prefetch unit */
    bool stream_ok;           /* blocks may stream (not with compression: compaction rewrites any block) */
    struct blk *b;            /* [nb] by block id (malloc'd) */
    int32_t *unit;            /* [nb][L] staging slot of each (block, layer) unit, or -1 (malloc'd) */
    int64_t nb;
    unsigned char *warm_mem;  /* [W][block_bytes] (k25_alloc_acct, K25_MEM_KV): warm slots [0, n_warm),
                               * the staging area's units from the end backwards */
    int32_t *warm_owner;      /* [W] block id or -1 (malloc'd) */
    int W, n_warm, sb;        /* slots in all; warm slots; staging blocks (W = n_warm + sb) */
    struct stage *st;         /* [W * L] (malloc'd); the first n_stage = sb * L are in use */
    int n_stage;
    struct k25_buf **ss;      /* [n_ss] stream areas of one layer (backend buffers, K25_MEM_KV), reused */
    int n_ss, ss_cap, ss_used, ss_peak; /* ss_peak: the most one layer of this step used */
    int cur_layer;            /* the layer the last k25_kv_tier_layer call was for, -1 between steps */
    int64_t step_streamed;    /* blocks streamed in the current step */
    unsigned char *tmp;       /* [block_bytes]: synchronous cold writes (K25_MEM_KV) */
    int fd;                   /* the cold file, -1 without kv_cold_dir */
    pthread_t thr;
    bool thr_on, quit, prefetch_on;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t qno, step;
    uint64_t step_wait_ns;    /* the wait of the current step so far */
    uint64_t thr_read_ns;     /* the prefetch thread's pread time (under mu) */
    /* hotness policy (issue 36) */
    bool hotness;
    int stride, n_sampled;    /* sampled layers: l % stride == stride - 1 */
    int recent_blocks;        /* the newest blocks of a sequence never demoted (kv_recent_tokens) */
    int8_t *pr_state;         /* [W] PR_* of the promotion into each warm slot (malloc'd) */
    int32_t *pr_id;           /* [W] its block */
    uint64_t *pr_qno;         /* [W] FIFO order */
    float *obs;               /* [obs_cap] host copy of a layer's scores (forward.c -> observe; malloc'd) */
    size_t obs_cap;
    double *span_sc;          /* [span_cap] rebalance scratch: heat sums by span (malloc'd) */
    int span_cap;
    struct k25_kv_spans plain; /* fixed plain-text spans, for sequences without a span table */
    struct k25_kv_tier_totals tot; /* the engine thread's */
};

static uint64_t nsec(void)
{
    return k25_now_ns();
}

/* pread/pwrite of bytes at off; false on error or short transfer. */
static bool io_at(int fd, bool write, off_t off, size_t bytes, unsigned char *buf)
{
    size_t done = 0;
    while (done < bytes) {
        ssize_t r = write ? pwrite(fd, buf + done, bytes - done, off + (off_t)done)
                          : pread(fd, buf + done, bytes - done, off + (off_t)done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return false;
        done += (size_t)r;
    }
    return true;
}

/* Offset of (block id, layer l) in the cold file: block id at id * block_bytes. */
static off_t unit_off(const struct k25_kv_tier *t, int32_t id, int l)
{
    return (off_t)id * (off_t)t->pool->block_bytes + (off_t)l * (off_t)t->lb;
}

static void *prefetch_main(void *arg)
{
    struct k25_kv_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        int pick = -1;
        for (int s = 0; s < t->n_stage; s++)
            if (t->st[s].state == ST_QUEUED && (pick < 0 || t->st[s].qno < t->st[pick].qno))
                pick = s;
        if (pick < 0) { /* staging units first: a promotion only moves a block for later steps */
            int w = -1;
            for (int x = 0; t->pr_state && x < t->W; x++)
                if (t->pr_state[x] == PR_QUEUED && (w < 0 || t->pr_qno[x] < t->pr_qno[w]))
                    w = x;
            if (w >= 0) {
                t->pr_state[w] = PR_READING;
                off_t off = unit_off(t, t->pr_id[w], 0);
                unsigned char *dst = t->warm_mem + t->pool->block_bytes * (size_t)w;
                pthread_mutex_unlock(&t->mu);
                uint64_t t0 = nsec();
                bool ok = io_at(t->fd, false, off, t->pool->block_bytes, dst);
                uint64_t dt = nsec() - t0;
                pthread_mutex_lock(&t->mu);
                t->thr_read_ns += dt;
                t->pr_state[w] = ok ? PR_READY : PR_FAILED;
                pthread_cond_broadcast(&t->cv_done);
                continue;
            }
            if (t->quit)
                break;
            pthread_cond_wait(&t->cv_work, &t->mu);
            continue;
        }
        struct stage *s = &t->st[pick];
        s->state = ST_READING;
        off_t off = unit_off(t, s->id, s->layer);
        pthread_mutex_unlock(&t->mu);
        uint64_t t0 = nsec();
        bool ok = io_at(t->fd, false, off, t->lb, s->buf);
        uint64_t dt = nsec() - t0;
        pthread_mutex_lock(&t->mu);
        t->thr_read_ns += dt;
        s->state = s->state == ST_CANCEL ? ST_FREE : ok ? ST_READY : ST_FAILED;
        pthread_cond_broadcast(&t->cv_done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* Staging units [from, to) start free; their buffers run backwards from the end of warm_mem. */
static void stage_init(struct k25_kv_tier *t, int from, int to)
{
    unsigned char *end = t->warm_mem + t->pool->block_bytes * (size_t)t->W;
    for (int u = from; u < to; u++)
        t->st[u] = (struct stage){ST_FREE, -1, 0, 0, end - t->lb * (size_t)(u + 1)};
}

int k25_kv_tier_create(struct k25_kv_pool *pool, const struct k25_config *cfg, struct k25_log *log,
                       struct k25_kv_tier **out, struct k25_error *err)
{
    *out = NULL;
    if (cfg->kv_hot_tokens <= 0)
        return K25_OK;
    K25_ASSERT(pool->be != NULL);
    const size_t bb = pool->block_bytes;
    int64_t slots = (int64_t)(cfg->kv_warm_budget_mb * 1048576.0) / (int64_t)bb;
    bool cold = cfg->kv_cold_dir[0] != '\0';
    if (slots > INT_MAX / (2 * pool->n_layers))
        slots = INT_MAX / (2 * pool->n_layers);
    if (cold && slots < 2)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_warm_budget_mb",
                             "%.3f MB holds %lld KV blocks of %zu bytes; the cold tier needs at least 2 "
                             "(its prefetch staging slots)",
                             cfg->kv_warm_budget_mb, (long long)slots, bb);
    if (cfg->kv_tier_policy == K25_TIER_HOTNESS && !k25_attn_impl_get(cfg->attention)->compression)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_tier_policy",
                             "hotness reads attention scores, which attention: %s does not give (use chunked)",
                             k25_attn_impl_name(cfg->attention));
    struct k25_kv_tier *t = calloc(1, sizeof(*t));
    if (!t)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV tiers)");
    int rc = K25_OK;
    t->pool = pool;
    t->log = log;
    t->acct = pool->be->acct;
    t->hot_tokens = cfg->kv_hot_tokens;
    t->L = pool->n_layers;
    t->lb = pool->layer_bytes;
    t->stream_ok = !pool->compress;
    t->fd = -1;
    t->prefetch_on = true;
    t->cur_layer = -1;
    t->W = (int)slots;
    t->hotness = cfg->kv_tier_policy == K25_TIER_HOTNESS;
    t->stride = k25_kv_hot_stride(t->L);
    t->n_sampled = t->L / t->stride;
    t->recent_blocks = (cfg->kv_recent_tokens + cfg->kv_block_size - 1) / cfg->kv_block_size;
    t->recent_blocks = t->recent_blocks > 0 ? t->recent_blocks : 1;
    t->plain.mode = K25_HINT_PLAIN_TEXT;
    t->plain.fixed_blocks = K25_KV_SPAN_PLAIN_TOKENS / cfg->kv_block_size > 0 ? K25_KV_SPAN_PLAIN_TOKENS / cfg->kv_block_size : 1;
    t->sb = cold ? 2 : 0; /* grown between steps to what the steps stream (above) */
    t->n_warm = t->W - t->sb;
    t->n_stage = t->sb * t->L;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_done, NULL);
    t->warm_owner = malloc(sizeof(int32_t) * (size_t)(t->W > 0 ? t->W : 1));
    t->st = calloc((size_t)(t->W > 0 ? t->W * t->L : 1), sizeof(*t->st));
    t->warm_mem = t->W > 0 ? k25_alloc_acct(t->acct, K25_MEM_KV, bb * (size_t)t->W) : NULL;
    t->tmp = k25_alloc_acct(t->acct, K25_MEM_KV, bb);
    if (t->hotness) {
        t->pr_state = calloc((size_t)(t->W > 0 ? t->W : 1), sizeof(*t->pr_state));
        t->pr_id = calloc((size_t)(t->W > 0 ? t->W : 1), sizeof(*t->pr_id));
        t->pr_qno = calloc((size_t)(t->W > 0 ? t->W : 1), sizeof(*t->pr_qno));
    }
    if (!t->warm_owner || !t->st || (t->W > 0 && !t->warm_mem) || !t->tmp ||
        (t->hotness && (!t->pr_state || !t->pr_id || !t->pr_qno))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, "kv_warm_budget_mb", "cannot allocate the warm KV pool (%.1f MB)",
                           cfg->kv_warm_budget_mb);
        goto out_destroy;
    }
    for (int i = 0; i < t->W; i++)
        t->warm_owner[i] = -1;
    stage_init(t, 0, t->n_stage);
    /* whole-hot buffers a step gives back wait for the next step, as many as the step took
     * (k25_kv_tier_end_step trims the rest): in decode the one written block or so */
    pool->spare_keep = INT_MAX;
    if (cold) {
        char path[1100];
        snprintf(path, sizeof(path), "%s/k25-kv-cold-XXXXXX", cfg->kv_cold_dir);
        if ((t->fd = mkstemp(path)) < 0) {
            rc = k25_error_set(err, K25_EIO, path, 0, "kv_cold_dir", "cannot create the cold KV file: %s",
                               strerror(errno));
            goto out_destroy;
        }
        (void)unlink(path); /* the file lives while the engine holds it open, and no longer */
        if (pthread_create(&t->thr, NULL, prefetch_main, t) != 0) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "cannot start the KV prefetch thread");
            goto out_destroy;
        }
        t->thr_on = true;
    }
    *out = t;
    return K25_OK;

out_destroy:
    k25_kv_tier_destroy(t);
    return rc;
}

void k25_kv_tier_destroy(struct k25_kv_tier *t)
{
    if (!t)
        return;
    if (t->thr_on) {
        pthread_mutex_lock(&t->mu);
        t->quit = true;
        for (int s = 0; s < t->n_stage; s++) /* nothing queued is needed any more */
            if (t->st[s].state == ST_QUEUED)
                t->st[s].state = ST_FREE;
        for (int w = 0; t->pr_state && w < t->W; w++)
            if (t->pr_state[w] == PR_QUEUED)
                t->pr_state[w] = PR_FREE;
        pthread_cond_broadcast(&t->cv_work);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thr, NULL);
    }
    if (t->fd >= 0)
        (void)close(t->fd); /* unlinked, read-only use from here: nothing to lose */
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_done);
    struct k25_kv_pool *p = t->pool;
    for (int i = 0; i < t->n_ss; i++)
        p->be->be->buf_free(p->be, t->ss[i]);
    free(p->stream); /* the pool outlives the tiers (engine.c destroys these first) */
    free(p->stream_l);
    p->stream = NULL;
    p->stream_l = NULL;
    free(t->ss);
    k25_free(t->warm_mem);
    k25_free(t->tmp);
    free(t->warm_owner);
    free(t->pr_state);
    free(t->pr_id);
    free(t->pr_qno);
    free(t->obs);
    free(t->span_sc);
    free(t->st);
    free(t->unit);
    free(t->b);
    free(t);
}

/* Grows the per-id state (and the pool's stream arrays) to the pool's ids; K25_ENOMEM on failure. */
static int ensure_ids(struct k25_kv_tier *t, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    if (t->nb >= p->n_alloc)
        return K25_OK;
    int64_t n = p->cap > p->n_alloc ? p->cap : p->n_alloc;
    struct blk *nb = realloc(t->b, sizeof(*nb) * (size_t)n);
    if (nb)
        t->b = nb;
    int32_t *nu = realloc(t->unit, sizeof(int32_t) * (size_t)n * (size_t)t->L);
    if (nu)
        t->unit = nu;
    unsigned char **ns = realloc(p->stream, sizeof(*ns) * (size_t)n);
    if (ns)
        p->stream = ns;
    int16_t *nl = realloc(p->stream_l, sizeof(*nl) * (size_t)n);
    if (nl)
        p->stream_l = nl;
    if (!nb || !nu || !ns || !nl)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV tier state)");
    pthread_mutex_lock(&t->mu); /* the thread reads t->unit only under mu, but the table moved */
    for (int64_t i = t->nb; i < n; i++) {
        nb[i] = BLK_NEW;
        ns[i] = NULL;
        nl[i] = -1;
        for (int l = 0; l < t->L; l++)
            nu[i * t->L + l] = -1;
    }
    t->nb = n;
    pthread_mutex_unlock(&t->mu);
    return K25_OK;
}

static const char *tier_name(int where)
{
    return where == AT_HOT ? "hot" : where == AT_WARM ? "warm" : "cold";
}

static void log_evict(struct k25_kv_tier *t, int32_t id, const char *reason, int from, int to)
{
    t->tot.evictions++;
    if (k25_log_on(t->log, K25_LOG_DEBUG))
        k25_log_write(t->log, K25_LOG_DEBUG, "KV_CACHE", "block_id=%d evict_reason=%s from=%s to=%s step=%llu", id, reason,
                      tier_name(from), tier_name(to), (unsigned long long)t->step);
}

/* Frees the staging slot of unit (id, l), if any (under t->mu); one being read is cancelled. */
static void unit_drop_locked(struct k25_kv_tier *t, int32_t id, int l)
{
    int32_t *u = &t->unit[(int64_t)id * t->L + l];
    if (*u < 0)
        return;
    struct stage *s = &t->st[*u];
    s->state = s->state == ST_READING ? ST_CANCEL : ST_FREE;
    *u = -1;
}

/* Drops every staged unit of block id (its cold copy is going out of date or away). */
static void block_drop_units(struct k25_kv_tier *t, int32_t id)
{
    pthread_mutex_lock(&t->mu);
    for (int l = 0; l < t->L; l++)
        unit_drop_locked(t, id, l);
    pthread_mutex_unlock(&t->mu);
}

/* Frees the staging slots attention held for a layer other than `keep` (-1: all) (under t->mu). */
static void release_held_locked(struct k25_kv_tier *t, int keep)
{
    for (int u = 0; u < t->n_stage; u++)
        if (t->st[u].state == ST_HELD && t->st[u].layer != keep) {
            t->unit[(int64_t)t->st[u].id * t->L + t->st[u].layer] = -1;
            t->st[u].state = ST_FREE;
        }
}

/* Cancels block id's pending promotion (hotness), waiting out a read in flight, and frees its
 * warm slot: its bytes are going out of date, or the slot is needed for something else. */
static void promo_cancel(struct k25_kv_tier *t, int32_t id)
{
    struct blk *k = &t->b[id];
    if (k->promo < 0)
        return;
    int w = k->promo;
    pthread_mutex_lock(&t->mu);
    while (t->pr_state[w] == PR_READING)
        pthread_cond_wait(&t->cv_done, &t->mu);
    t->pr_state[w] = PR_FREE;
    pthread_mutex_unlock(&t->mu);
    if (t->warm_owner[w] == id)
        t->warm_owner[w] = -1;
    k->promo = -1;
}

/* Writes warm slot w's block to the cold file (when not there yet) and frees the slot. */
static int warm_to_cold(struct k25_kv_tier *t, int w, const char *reason, struct k25_error *err)
{
    const size_t bb = t->pool->block_bytes;
    int32_t id = t->warm_owner[w];
    struct blk *k = &t->b[id];
    if (!k->cold_ok) {
        uint64_t t0 = nsec();
        if (!io_at(t->fd, true, unit_off(t, id, 0), bb, t->warm_mem + bb * (size_t)w))
            return k25_error_set(err, K25_EIO, NULL, 0, "kv_cold_dir", "cannot write KV block %d to the cold file: %s",
                                 id, strerror(errno));
        t->tot.copy_ns += nsec() - t0;
        t->tot.bytes_moved += (int64_t)bb;
        k->cold_ok = true;
    }
    k->warm = -1;
    t->warm_owner[w] = -1;
    if (k->where == AT_WARM) {
        k->where = AT_COLD;
        log_evict(t, id, reason, AT_WARM, AT_COLD);
    }
    return K25_OK;
}

/* Whether block a should leave the warm pool before block b (the eviction order above; the
 * hotness policy ranks by span score first). */
static bool evict_before(const struct k25_kv_tier *t, const struct blk *a, int32_t ida, const struct blk *b,
                         int32_t idb)
{
    if (t->hotness && a->rank != b->rank)
        return a->rank < b->rank;
    if (a->last_use != b->last_use)
        return a->last_use < b->last_use;
    if (a->mass != b->mass)
        return a->mass < b->mass;
    return ida < idb;
}

/*
 * A warm slot for block id: a free one, or the slot of the warm block that
 * goes first by the policy, whose bytes move cold (MEMORY_PRESSURE) - unless
 * id itself would go first, or there is no cold tier: then -1.
 */
static int warm_take(struct k25_kv_tier *t, int32_t id, struct k25_error *err, int *rc)
{
    int victim = -1;
    for (int w = 0; w < t->n_warm; w++) {
        int32_t o = t->warm_owner[w];
        if (o < 0)
            return w;
        if (t->b[o].where == AT_WARM && !t->b[o].streamed &&
            (victim < 0 || evict_before(t, &t->b[o], o, &t->b[t->warm_owner[victim]], t->warm_owner[victim])))
            victim = w;
    }
    if (victim < 0 || t->fd < 0 ||
        evict_before(t, &t->b[id], id, &t->b[t->warm_owner[victim]], t->warm_owner[victim]))
        return -1;
    if ((*rc = warm_to_cold(t, victim, "MEMORY_PRESSURE", err)) != K25_OK)
        return -1;
    return victim;
}

/*
 * Between steps: grows the staging area to `want` blocks (at most W), the
 * warm slots that give way sending their blocks cold (MEMORY_PRESSURE).
 */
static int grow_staging(struct k25_kv_tier *t, int want, struct k25_error *err)
{
    if (want > t->W)
        want = t->W;
    if (want <= t->sb)
        return K25_OK;
    for (int w = t->W - want; w < t->n_warm; w++)
        if (t->warm_owner[w] >= 0 && t->b[t->warm_owner[w]].promo == w)
            promo_cancel(t, t->warm_owner[w]);
    for (int w = t->W - want; w < t->n_warm; w++)
        if (t->warm_owner[w] >= 0) {
            int rc = warm_to_cold(t, w, "MEMORY_PRESSURE", err);
            if (rc != K25_OK)
                return rc;
        }
    pthread_mutex_lock(&t->mu);
    stage_init(t, t->n_stage, want * t->L);
    t->sb = want;
    t->n_warm = t->W - want;
    t->n_stage = want * t->L;
    pthread_mutex_unlock(&t->mu);
    return K25_OK;
}

/* Mean attention score of block i of seq where compression keeps scores for its slots, else -1. */
static float block_mass(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int i)
{
    if (!p->compress || !k25_kv_stats_host(p, seq))
        return -1.0f;
    int s0 = i * p->block_size, s1 = s0 + p->block_size;
    s0 = s0 > seq->comp_hi ? s0 : seq->comp_hi;
    s1 = s1 < seq->n_tokens ? s1 : seq->n_tokens;
    double score = 0.0, seen = 0.0;
    for (int s = s0; s < s1; s++) {
        for (int l = 0; l < p->n_layers; l++)
            for (int g = 0; g < p->n_kv_heads; g++)
                score += *k25_kv_slot_score(p, seq, l, g, s);
        seen += (double)*k25_kv_slot_seen(p, seq, s) * p->n_layers * p->n_kv_heads; /* each (layer, head) saw it */
    }
    return seen > 0.0 ? (float)(score / seen) : -1.0f;
}

/*
 * Queues seq's cold units on free staging slots (under t->mu): layer by
 * layer from l0, wrapping round to the next step's first layers, blocks in
 * order, each unit once.  Stops when the slots run out.
 */
static void prefetch_locked(struct k25_kv_tier *t, const struct k25_kv_seq *seq, int l0)
{
    if (!t->thr_on || !t->prefetch_on)
        return;
    int s = 0;
    bool queued = false;
    for (int d = 0; d < t->L; d++) {
        int l = (l0 + d) % t->L;
        for (int i = 0; i < seq->n_blocks; i++) {
            int32_t id = seq->ids[i];
            if (id >= t->nb || t->b[id].where != AT_COLD || t->unit[(int64_t)id * t->L + l] >= 0)
                continue;
            while (s < t->n_stage && t->st[s].state != ST_FREE)
                s++;
            if (s == t->n_stage)
                goto out_signal;
            t->st[s] = (struct stage){ST_QUEUED, id, l, t->qno++, t->st[s].buf};
            t->unit[(int64_t)id * t->L + l] = s;
            queued = true;
        }
    }
out_signal:
    if (queued)
        pthread_cond_signal(&t->cv_work);
}

void k25_kv_tier_prefetch(struct k25_kv_tier *t, const struct k25_kv_seq *seq)
{
    pthread_mutex_lock(&t->mu);
    prefetch_locked(t, seq, 0);
    pthread_mutex_unlock(&t->mu);
}

/* A read of block k in this step had to wait: the step's read of it is a miss. */
static void count_miss(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct blk *k)
{
    if (k->waited)
        return;
    k->waited = true;
    seq->tier_hits--;
    t->tot.hits--;
    seq->tier_step_hit = false;
}

/* Adds wait time to seq and the totals. */
static void add_wait(struct k25_kv_tier *t, struct k25_kv_seq *seq, uint64_t wait_ns)
{
    seq->tier_wait_ns += wait_ns;
    t->tot.wait_ns += wait_ns;
    t->step_wait_ns += wait_ns;
    if (t->step_wait_ns > t->tot.max_step_wait_ns)
        t->tot.max_step_wait_ns = t->step_wait_ns;
}

/* A stream area for the current layer (reused; a new one only when a layer streams more). */
static int stream_area(struct k25_kv_tier *t, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    if (t->ss_used == t->n_ss) {
        if (t->n_ss == t->ss_cap) {
            int ncap = t->ss_cap ? 2 * t->ss_cap : 16;
            struct k25_buf **n = realloc(t->ss, sizeof(*n) * (size_t)ncap);
            if (!n)
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV stream areas)");
            t->ss = n;
            t->ss_cap = ncap;
        }
        if (k25_buf_alloc_host(p->be, K25_MEM_KV, t->lb, &t->ss[t->n_ss], NULL) != K25_OK)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (a KV stream area of %zu bytes)",
                                 t->lb);
        t->n_ss++;
    }
    if (t->ss_used + 1 > t->ss_peak)
        t->ss_peak = t->ss_used + 1;
    return t->ss_used++;
}

/*
 * Layer l of warm or cold block id, for attention: *src points at it in
 * host memory - its warm slot, or its staging slot when the prefetch thread
 * has it (waiting if it is still being read: a miss), which is then HELD
 * until the next layer (hold) or freed (!hold: the caller copies it at
 * once); with no staged copy it is read here into dst (a miss).  Counts the
 * bytes a cold unit brought in.  K25_EIO when the cold file cannot be read.
 */
static int fetch_unit(struct k25_kv_tier *t, struct k25_kv_seq *seq, int32_t id, int l, bool hold,
                      unsigned char *dst, const unsigned char **src, uint64_t *wait_ns, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    struct blk *k = &t->b[id];
    *src = NULL;
    if (k->where == AT_WARM) {
        *src = t->warm_mem + p->block_bytes * (size_t)k->warm + t->lb * (size_t)l;
        return K25_OK;
    }
    K25_ASSERT(k->where == AT_COLD);
    pthread_mutex_lock(&t->mu);
    int32_t u = t->unit[(int64_t)id * t->L + l];
    if (u >= 0) {
        struct stage *s = &t->st[u];
        if (s->state == ST_QUEUED || s->state == ST_READING) {
            count_miss(t, seq, k);
            uint64_t t0 = nsec();
            while (s->state == ST_QUEUED || s->state == ST_READING)
                pthread_cond_wait(&t->cv_done, &t->mu);
            *wait_ns += nsec() - t0;
        }
        if (s->state == ST_READY) {
            *src = s->buf;
            /* not held: the slot is free again, but only this (engine) thread queues work into
             * slots, and the caller copies it out before it queues any */
            if (hold)
                s->state = ST_HELD;
            else
                unit_drop_locked(t, id, l);
        } else {
            unit_drop_locked(t, id, l); /* failed: read it here */
        }
    }
    pthread_mutex_unlock(&t->mu);
    if (!*src) {
        count_miss(t, seq, k);
        if (!dst) { /* streaming: a free staging slot, held like a staged unit, else a stream area */
            pthread_mutex_lock(&t->mu);
            for (int u = 0; u < t->n_stage && !dst; u++)
                if (t->st[u].state == ST_FREE) {
                    t->st[u] = (struct stage){ST_HELD, id, l, 0, t->st[u].buf};
                    t->unit[(int64_t)id * t->L + l] = u;
                    dst = t->st[u].buf;
                }
            pthread_mutex_unlock(&t->mu);
        }
        if (!dst) {
            int a = stream_area(t, err);
            if (a < 0)
                return a;
            dst = k25_buf_host(t->pool->be, t->ss[a]); /* a host buffer (buf_alloc_host) */
        }
        uint64_t t0 = nsec();
        if (!io_at(t->fd, false, unit_off(t, id, l), t->lb, dst))
            return k25_error_set(err, K25_EIO, NULL, 0, "kv_cold_dir",
                                 "cannot read layer %d of KV block %d from the cold file: %s", l, id, strerror(errno));
        uint64_t dt = nsec() - t0;
        *wait_ns += dt;
        t->tot.copy_ns += dt;
        *src = dst;
    }
    t->tot.bytes_moved += (int64_t)t->lb; /* a cold unit came in (here or by the prefetch thread) */
    seq->tier_bytes += (int64_t)t->lb;
    return K25_OK;
}

/* Loads all of a warm or cold block into its whole-hot buffer (buf_set, one layer at a time). */
static int load_whole_layer(struct k25_kv_tier *t, struct k25_kv_seq *seq, int32_t id, int l, uint64_t *wait_ns,
                            struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    const unsigned char *src;
    bool warm = t->b[id].where == AT_WARM;
    int rc = fetch_unit(t, seq, id, l, false, t->tmp, &src, wait_ns, err); /* tmp: a unit not staged */
    if (rc != K25_OK)
        return rc;
    uint64_t t0 = nsec();
    p->be->be->buf_set(p->be, p->blocks[id], t->lb * (size_t)l, src, t->lb);
    t->tot.copy_ns += nsec() - t0;
    if (warm) { /* a warm unit's copy is its move; a cold one's was counted where it was read */
        t->tot.bytes_moved += (int64_t)t->lb;
        seq->tier_bytes += (int64_t)t->lb;
    }
    return K25_OK;
}

static void stream_end(struct k25_kv_tier *t, int32_t id);

/* Whether block i of seq may have been written since its blocks were last released. */
static bool may_write(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int i)
{
    int64_t s0 = (int64_t)i * p->block_size, s1 = s0 + p->block_size;
    return s1 > seq->tier_dirty_from || (s1 > seq->tier_qdirty_lo && s0 < seq->tier_qdirty_hi);
}

/*
 * Prepares seq's blocks for a step writing from slot `first_written` on:
 * blocks new to seq start hot; warm and cold blocks the step may write
 * (and every one with compression) become whole-hot in a block buffer,
 * loaded layer-major so each layer's staged units are used in prefetch
 * order; the others stream (k25_kv_tier_layer).  Every block is read once
 * per step and counted a hit until one of its loads waits.
 */
int k25_kv_tier_acquire(struct k25_kv_tier *t, struct k25_kv_seq *seq, int first_written, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    int rc = ensure_ids(t, err);
    if (rc != K25_OK)
        return rc;
    /* what this step may write: its new slots, and for int8/int4 the residual's groups that
     * close - quantized into the blocks from n_quant on, which lags the newest slot by up to
     * the residual; a step of n new slots closes at most n / group + 1 groups per layer */
    if (first_written < seq->tier_dirty_from)
        seq->tier_dirty_from = first_written;
    if (p->quant && seq->n_quant) {
        int qlo = INT_MAX, qhi = 0;
        for (int l = 0; l < p->n_layers; l++) {
            qlo = seq->n_quant[l] < qlo ? seq->n_quant[l] : qlo;
            qhi = seq->n_quant[l] > qhi ? seq->n_quant[l] : qhi;
        }
        qhi += seq->n_tokens - first_written + p->group;
        if (seq->tier_qdirty_lo >= seq->tier_qdirty_hi) {
            seq->tier_qdirty_lo = qlo;
            seq->tier_qdirty_hi = qhi;
        } else {
            seq->tier_qdirty_lo = qlo < seq->tier_qdirty_lo ? qlo : seq->tier_qdirty_lo;
            seq->tier_qdirty_hi = qhi > seq->tier_qdirty_hi ? qhi : seq->tier_qdirty_hi;
        }
    }
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if ((int64_t)i * p->block_size >= first_written) { /* a block new to seq: no tier copy is its */
            promo_cancel(t, id);
            block_drop_units(t, id);
            if (k->warm >= 0 && t->warm_owner[k->warm] == id)
                t->warm_owner[k->warm] = -1;
            *k = BLK_NEW;
        }
    }
    seq->tier_step_hit = true;
    int access = AT_HOT, n_whole = 0;
    int32_t access_id = seq->ids[seq->n_blocks - 1];
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        bool shared_now = k->last_use == t->step && (k->where == AT_HOT || k->streamed);
        if (k->streamed && !shared_now) /* left over from a step that failed before its release */
            stream_end(t, id);
        if (!shared_now)
            k->waited = false;
        k->last_use = t->step;
        seq->tier_reads++;
        seq->tier_hits++;
        t->tot.reads++;
        t->tot.hits++;
        if (k->where == AT_HOT || k->streamed) /* hot, or streaming for another sequence already */
            continue;
        if (k->where > access) {
            access = k->where;
            access_id = id;
        }
        if (!t->stream_ok || may_write(p, seq, i)) {
            K25_ASSERT(p->blocks[id] == NULL);
            if ((rc = k25_kv_buf_take(p, &p->blocks[id], err)) != K25_OK)
                return rc;
            n_whole++;
        } else {
            k->streamed = true;
            p->stream[id] = NULL;
            p->stream_l[id] = -1;
            t->step_streamed++;
        }
    }
    /* whole-hot loads, layer-major (the order units are staged in) */
    uint64_t wait_ns = 0;
    for (int l = 0; n_whole > 0 && l < t->L; l++) {
        for (int i = 0; i < seq->n_blocks; i++) {
            int32_t id = seq->ids[i];
            struct blk *k = &t->b[id];
            if (k->where != AT_HOT && !k->streamed &&
                (rc = load_whole_layer(t, seq, id, l, &wait_ns, err)) != K25_OK)
                return rc;
        }
        pthread_mutex_lock(&t->mu);
        prefetch_locked(t, seq, l + 1);
        pthread_mutex_unlock(&t->mu);
    }
    for (int i = 0; n_whole > 0 && i < seq->n_blocks; i++) { /* loaded: hot until released */
        struct blk *k = &t->b[seq->ids[i]];
        if (k->where != AT_HOT && !k->streamed)
            k->where = AT_HOT;
    }
    add_wait(t, seq, wait_ns);
    seq->tier_access = access;
    seq->tier_access_id = access_id;
    return K25_OK;
}

/*
 * Before layer l's KV writes and attention: every block of seq streaming
 * this step points at its layer l (stream[id]); the staging slots held for
 * the previous layer are freed first, and the free slots then take the
 * next cold units (layer l+1 on, wrapping round to the next step).
 */
int k25_kv_tier_layer(struct k25_kv_tier *t, struct k25_kv_seq *seq, int l, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    if (l != t->cur_layer) { /* a new layer: the last one's attention is done */
        pthread_mutex_lock(&t->mu);
        release_held_locked(t, l);
        pthread_mutex_unlock(&t->mu);
        t->cur_layer = l;
        t->ss_used = 0;
    }
    uint64_t wait_ns = 0;
    bool any = false;
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if (!k->streamed || p->stream_l[id] == l) /* not streamed, or set for another sequence */
            continue;
        const unsigned char *src;
        int rc = fetch_unit(t, seq, id, l, true, NULL, &src, &wait_ns, err);
        if (rc != K25_OK)
            return rc;
        p->stream[id] = (unsigned char *)src;
        p->stream_l[id] = (int16_t)l;
        any = true;
    }
    if (any) {
        pthread_mutex_lock(&t->mu);
        prefetch_locked(t, seq, l + 1);
        pthread_mutex_unlock(&t->mu);
    }
    add_wait(t, seq, wait_ns);
    return K25_OK;
}

/* A block of seq stops streaming (its tier copy holds its bytes). */
static void stream_end(struct k25_kv_tier *t, int32_t id)
{
    t->b[id].streamed = false;
    t->pool->stream[id] = NULL;
    t->pool->stream_l[id] = -1;
}

/* ------------------------------------------------------------ hotness */

int k25_kv_hot_stride(int n_layers)
{
    int s = n_layers / 4;
    return s > 1 ? s : 1;
}

bool k25_kv_tier_observes(const struct k25_kv_tier *t, int layer)
{
    return t && t->hotness && layer % t->stride == t->stride - 1 && layer / t->stride < t->n_sampled;
}

float *k25_kv_tier_obs_buf(struct k25_kv_tier *t, size_t n)
{
    if (n > t->obs_cap) {
        float *o = realloc(t->obs, sizeof(float) * n);
        if (!o)
            return NULL;
        t->obs = o;
        t->obs_cap = n;
    }
    return t->obs;
}

int k25_kv_tier_observe(struct k25_kv_tier *t, struct k25_kv_seq *seq, const float *score, int n, int n_q,
                        int n_heads, struct k25_error *err)
{
    const struct k25_kv_pool *p = t->pool;
    if (seq->tier_mass_cap < seq->n_blocks) {
        int ncap = seq->n_blocks + 64;
        float *m = realloc(seq->tier_mass, sizeof(float) * (size_t)ncap);
        if (!m)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV hotness)");
        for (int i = seq->tier_mass_cap; i < ncap; i++)
            m[i] = 0.0f;
        seq->tier_mass = m;
        seq->tier_mass_cap = ncap;
    }
    /* each scoring query spreads a probability of 1 per query head: n_heads n_q per sampled layer */
    const double norm = 1.0 / ((double)n_heads * (n_q > 0 ? n_q : 1) * t->n_sampled);
    for (int b = 0; b * p->block_size < n; b++) {
        int s0 = b * p->block_size, s1 = s0 + p->block_size < n ? s0 + p->block_size : n;
        double m = 0.0;
        for (int g = 0; g < p->n_kv_heads; g++)
            for (int x = s0; x < s1; x++)
                m += score[(size_t)g * n + x];
        seq->tier_mass[b] += (float)(m * norm);
    }
    return K25_OK;
}

/* A span table for sequences without one: fixed plain-text spans. */
static const struct k25_kv_spans *spans_of(const struct k25_kv_tier *t, const struct k25_kv_seq *seq)
{
    return seq->tier_spans ? seq->tier_spans : &t->plain;
}

/*
 * End of a step, hotness: promotions the prefetch thread has finished
 * make their blocks warm (their bytes are the cold file's, which did not
 * change while the block stayed cold); a failed read leaves it cold.
 * Never waits: a promotion still being read finishes at a later step.
 */
static void promo_finish(struct k25_kv_tier *t)
{
    const size_t bb = t->pool->block_bytes;
    for (int w = 0; w < t->W; w++) {
        pthread_mutex_lock(&t->mu);
        int st = t->pr_state[w];
        if (st == PR_READY || st == PR_FAILED)
            t->pr_state[w] = PR_FREE;
        pthread_mutex_unlock(&t->mu);
        if (st != PR_READY && st != PR_FAILED)
            continue;
        int32_t id = t->pr_id[w];
        struct blk *k = &t->b[id];
        K25_ASSERT(k->promo == w && t->warm_owner[w] == id);
        k->promo = -1;
        if (st == PR_READY && k->where == AT_COLD && k->cold_ok) {
            block_drop_units(t, id); /* units staged while it was cold: it is read in place from now on */
            k->where = AT_WARM;
            k->warm = w;
            t->tot.promotions++;
            t->tot.bytes_moved += (int64_t)bb;
            if (k25_log_on(t->log, K25_LOG_DEBUG))
                k25_log_write(t->log, K25_LOG_DEBUG, "KV_CACHE",
                              "block_id=%d event=promote reason=HOT_ACCESS_PATTERN from=cold to=warm score=%.4f "
                              "queued_step=%llu step=%llu",
                              id, (double)k->rank, (unsigned long long)k->moved, (unsigned long long)t->step);
        } else {
            t->warm_owner[w] = -1;
        }
    }
}

/* Whether block i of seq is protected by the hotness policy: the hot sink, the recent window. */
static bool hot_protected(const struct k25_kv_tier *t, const struct k25_kv_seq *seq, int i)
{
    return (int64_t)i * t->pool->block_size < t->hot_tokens || i >= seq->n_blocks - t->recent_blocks;
}

/* Whether block k may move now (hysteresis in time: K25_KV_HOT_DWELL steps after its last move). */
static bool may_move(const struct k25_kv_tier *t, const struct blk *k)
{
    return k->moved == 0 || k->moved + K25_KV_HOT_DWELL <= t->step;
}

/*
 * Hotness, after seq's release: ranks its blocks by their span's mean
 * heat (protected blocks +inf), then promotes the best-ranked span that
 * has cold blocks, as one unit, when the warm pool has free slots or warm
 * blocks it displaces (k25_kv_hot_displaces: by the margin; neither side
 * moved in the last K25_KV_HOT_DWELL steps).  Displaced blocks go cold
 * now (STALE_ACCESS_PATTERN: written to the cold file if it lacks their
 * bytes); the promoted blocks' reads are queued on the prefetch thread
 * (promo_finish makes them warm).  One span per sequence per step, so the
 * moves of a step stay small.  K25_EIO when a demotion cannot be written.
 */
/*
 * Hotness: with update, this step's attention mass goes into each block's
 * decayed heat; then every block of seq gets its span's mean heat as its
 * rank (protected blocks +inf), which the eviction order and rebalance read.
 */
static int rank_blocks(struct k25_kv_tier *t, struct k25_kv_seq *seq, bool update, struct k25_error *err)
{
    const struct k25_kv_spans *sp = spans_of(t, seq);
    const int nb = seq->n_blocks;
    if (nb == 0)
        return K25_OK;
    const int ns = k25_kv_span_of(sp, nb - 1) + 1;
    if (ns > t->span_cap) {
        double *sc = realloc(t->span_sc, sizeof(double) * (size_t)ns);
        if (!sc)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV hotness)");
        t->span_sc = sc;
        t->span_cap = ns;
    }
    for (int x = 0; x < ns; x++)
        t->span_sc[x] = 0.0;
    for (int i = 0; i < nb; i++) {
        struct blk *k = &t->b[seq->ids[i]];
        if (update && i < seq->tier_mass_cap) {
            k->heat = k25_kv_heat_step(k->heat, seq->tier_mass[i]);
            seq->tier_mass[i] = 0.0f;
        }
        if (!hot_protected(t, seq, i)) /* the sink's heat would lift its span: protected blocks stay out */
            t->span_sc[k25_kv_span_of(sp, i)] += k->heat;
    }
    for (int x = 0; x < ns; x++) {
        int b0, b1, free_blocks = 0;
        k25_kv_span_range(sp, x, &b0, &b1);
        b1 = b1 < nb ? b1 : nb;
        for (int i = b0; i < b1; i++)
            free_blocks += !hot_protected(t, seq, i);
        t->span_sc[x] = free_blocks ? t->span_sc[x] / free_blocks : 0.0; /* the mean over its unprotected blocks */
        for (int i = b0; i < b1; i++)
            t->b[seq->ids[i]].rank = hot_protected(t, seq, i) ? INFINITY : (float)t->span_sc[x];
    }
    return K25_OK;
}

/* Whether block i of seq is a promotion candidate: cold, not moving, not shared, dwell over. */
static bool promotable(const struct k25_kv_tier *t, const struct k25_kv_seq *seq, int i)
{
    const struct blk *k = &t->b[seq->ids[i]];
    return k->where == AT_COLD && k->promo < 0 && k->cold_ok && !k->streamed && may_move(t, k) &&
           (!t->pool->refs || t->pool->refs[seq->ids[i]] <= 1);
}

static int rebalance(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err)
{
    const struct k25_kv_spans *sp = spans_of(t, seq);
    const int nb = seq->n_blocks;
    if (nb == 0 || t->fd < 0 || !t->thr_on)
        return K25_OK;
    int rc = rank_blocks(t, seq, false, err);
    if (rc != K25_OK)
        return rc;
    const int ns = k25_kv_span_of(sp, nb - 1) + 1;
    int best = -1, need = 0;
    float best_rank = -1.0f;
    for (int x = 0; x < ns; x++) {
        int b0, b1, cold = 0;
        k25_kv_span_range(sp, x, &b0, &b1);
        b1 = b1 < nb ? b1 : nb;
        for (int i = b0; i < b1; i++)
            cold += promotable(t, seq, i);
        float r = (float)t->span_sc[x]; /* rank_blocks' means */
        if (cold > 0 && isfinite(r) && r > best_rank) {
            best = x;
            best_rank = r;
            need = cold;
        }
    }
    if (best < 0 || need > t->n_warm)
        return K25_OK;
    /* slots: free ones, then the lowest-ranked displaceable warm blocks */
    int slots[need], got = 0;
    for (int w = 0; w < t->n_warm && got < need; w++)
        if (t->warm_owner[w] < 0)
            slots[got++] = w;
    while (got < need) {
        int v = -1;
        for (int w = 0; w < t->n_warm; w++) {
            int32_t o = t->warm_owner[w];
            if (o < 0 || t->b[o].where != AT_WARM || t->b[o].streamed || !may_move(t, &t->b[o]) ||
                !k25_kv_hot_displaces(best_rank, t->b[o].rank))
                continue;
            bool taken = false;
            for (int j = 0; j < got && !taken; j++)
                taken = slots[j] == w;
            if (!taken && (v < 0 || t->b[o].rank < t->b[t->warm_owner[v]].rank))
                v = w;
        }
        if (v < 0)
            return K25_OK; /* the span does not displace enough: it moves as a unit or not at all */
        slots[got++] = v;
    }
    for (int j = 0; j < got; j++) {
        int32_t o = t->warm_owner[slots[j]];
        if (o < 0)
            continue;
        rc = warm_to_cold(t, slots[j], "STALE_ACCESS_PATTERN", err);
        if (rc != K25_OK)
            return rc;
        t->b[o].moved = t->step;
        t->tot.demotions++;
    }
    int b0, b1, j = 0;
    k25_kv_span_range(sp, best, &b0, &b1);
    b1 = b1 < nb ? b1 : nb;
    pthread_mutex_lock(&t->mu);
    for (int i = b0; i < b1 && j < got; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if (!promotable(t, seq, i))
            continue;
        int w = slots[j++];
        t->warm_owner[w] = id;
        k->promo = w;
        k->moved = t->step;
        t->pr_id[w] = id;
        t->pr_qno[w] = t->qno++;
        t->pr_state[w] = PR_QUEUED;
    }
    pthread_cond_signal(&t->cv_work);
    pthread_mutex_unlock(&t->mu);
    return K25_OK;
}

int k25_kv_tier_release(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    const struct k25_backend *B = p->be->be;
    const size_t bb = p->block_bytes;
    int rc = ensure_ids(t, err);
    if (rc != K25_OK)
        return rc;
    pthread_mutex_lock(&t->mu);
    release_held_locked(t, -1);
    pthread_mutex_unlock(&t->mu);
    t->cur_layer = -1;
    if (t->hotness && (rc = rank_blocks(t, seq, true, err)) != K25_OK) /* before the demotions, which rank */
        return rc;
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        const int64_t s0 = (int64_t)i * p->block_size;
        bool dirty = may_write(p, seq, i);
        if (k->streamed) { /* only blocks the step could not write stream */
            K25_ASSERT(!dirty);
            stream_end(t, id);
            continue;
        }
        if (k->where != AT_HOT)
            continue;
        if (dirty) { /* its tier copies are out of date */
            promo_cancel(t, id);
            block_drop_units(t, id);
            k->cold_ok = false;
            if (k->warm >= 0 && t->warm_owner[k->warm] == id)
                t->warm_owner[k->warm] = -1;
            k->warm = -1;
        }
        if (s0 < t->hot_tokens || i == seq->n_blocks - 1) /* pinned hot; the newest is the next write target */
            continue;
        k->mass = block_mass(p, seq, i);
        if (k->warm < 0 && !k->cold_ok) { /* its bytes must go somewhere */
            int w = warm_take(t, id, err, &rc);
            if (rc != K25_OK)
                return rc;
            uint64_t t0 = nsec();
            if (w >= 0) {
                B->kv_block_get(p->be, p, id, t->warm_mem + bb * (size_t)w);
                t->warm_owner[w] = id;
                k->warm = w;
                log_evict(t, id, "MEMORY_PRESSURE", AT_HOT, AT_WARM);
            } else if (t->fd >= 0) {
                B->kv_block_get(p->be, p, id, t->tmp);
                if (!io_at(t->fd, true, unit_off(t, id, 0), bb, t->tmp))
                    return k25_error_set(err, K25_EIO, NULL, 0, "kv_cold_dir",
                                         "cannot write KV block %d to the cold file: %s", id, strerror(errno));
                k->cold_ok = true;
                log_evict(t, id, "MEMORY_PRESSURE", AT_HOT, AT_COLD);
            } else {
                return k25_error_set(err, K25_ENOMEM, NULL, 0, "kv_warm_budget_mb",
                                     "the warm KV pool (%d blocks) is full and there is no kv_cold_dir", t->n_warm);
            }
            t->tot.copy_ns += nsec() - t0;
            t->tot.bytes_moved += (int64_t)bb;
            seq->tier_bytes += (int64_t)bb;
        }
        k25_kv_buf_give(p, p->blocks[id]);
        p->blocks[id] = NULL;
        k->where = k->warm >= 0 ? AT_WARM : AT_COLD;
    }
    seq->tier_dirty_from = INT_MAX;
    seq->tier_qdirty_lo = seq->tier_qdirty_hi = 0;
    return t->hotness ? rebalance(t, seq, err) : K25_OK;
}

/*
 * End of a step: the staging area grows to two layers of the cold blocks
 * the step streamed (see the top), warm blocks unread for
 * K25_KV_STALE_STEPS steps go cold (STALE_ACCESS_PATTERN).
 */
int k25_kv_tier_end_step(struct k25_kv_tier *t, struct k25_error *err)
{
    if (t->hotness)
        promo_finish(t);
    t->step++;
    t->step_wait_ns = 0;
    int64_t streamed = t->step_streamed;
    t->step_streamed = 0;
    k25_kv_spare_trim(t->pool, 1);
    while (t->n_ss > t->ss_peak) /* stream areas the step did not need (the staging area grew) */
        t->pool->be->be->buf_free(t->pool->be, t->ss[--t->n_ss]);
    t->ss_peak = 0;
    if (t->fd < 0)
        return K25_OK;
    if (streamed > t->W && t->sb < t->W) {
        /* two layers of the cold blocks (prefetch); with prefetch off, one (the reads of a layer) */
        int64_t layers = t->prefetch_on ? 2 : 1, want = t->W;
        if (t->L > layers)
            want = (layers * (streamed - t->W) + t->L - layers - 1) / (t->L - layers);
        int rc = grow_staging(t, want > t->W ? t->W : (int)want, err);
        if (rc != K25_OK)
            return rc;
    }
    if (t->step <= K25_KV_STALE_STEPS)
        return K25_OK;
    for (int w = 0; w < t->n_warm; w++) {
        int32_t o = t->warm_owner[w];
        if (o >= 0 && t->b[o].where == AT_WARM && t->b[o].last_use + K25_KV_STALE_STEPS < t->step) {
            int rc = warm_to_cold(t, w, "STALE_ACCESS_PATTERN", err);
            if (rc != K25_OK)
                return rc;
        }
    }
    return K25_OK;
}

/*
 * Before k25_kv_seq_release.  A block another sequence still holds (prefix
 * caching shares blocks) keeps its tier state.  Of the others, with prefix
 * caching on a released block may stay cached for later requests, so one
 * in the warm or cold tier comes back whole-hot first (the cache never sees
 * a block without its bytes); without it the block goes to the free list
 * and its tier copies are simply dropped (the pool gives it a spare buffer
 * when it reuses the id).  K25_ENOMEM / K25_EIO when a block cannot come back.
 */
int k25_kv_tier_forget(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    int rc = ensure_ids(t, err);
    if (rc != K25_OK)
        return rc;
    pthread_mutex_lock(&t->mu);
    release_held_locked(t, -1); /* finishing comes after the step's layers */
    pthread_mutex_unlock(&t->mu);
    t->cur_layer = -1;
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if (p->refs && p->refs[id] > 1)
            continue;
        if (k->streamed)
            stream_end(t, id);
        if (p->px && k->where != AT_HOT) {
            K25_ASSERT(p->blocks[id] == NULL);
            if ((rc = k25_kv_buf_take(p, &p->blocks[id], err)) != K25_OK)
                return rc;
            uint64_t wait_ns = 0;
            bool was = k->waited;
            for (int l = 0; l < t->L; l++)
                if ((rc = load_whole_layer(t, seq, id, l, &wait_ns, err)) != K25_OK)
                    return rc;
            if (k->waited && !was) { /* not a step's read: the request's figures are final */
                seq->tier_hits++;
                t->tot.hits++;
            }
        }
        promo_cancel(t, id);
        block_drop_units(t, id);
        if (k->warm >= 0 && t->warm_owner[k->warm] == id)
            t->warm_owner[k->warm] = -1;
        *k = BLK_NEW;
    }
    return K25_OK;
}

int64_t k25_kv_tier_hot_blocks(const struct k25_config *cfg)
{
    const int bs = cfg->kv_block_size;
    int chunk = cfg->prefill_chunk_size < cfg->max_num_batched_tokens ? cfg->prefill_chunk_size
                                                                      : cfg->max_num_batched_tokens;
    return ((int64_t)cfg->kv_hot_tokens + bs - 1) / bs + ((int64_t)chunk + bs - 1) / bs + 2;
}

int k25_kv_tier_block_cap(const struct k25_config *cfg, size_t block_bytes, int64_t *max_blocks,
                          struct k25_error *err)
{
    if (cfg->kv_hot_tokens <= 0 || *max_blocks <= 0)
        return K25_OK;
    int64_t warm = (int64_t)(cfg->kv_warm_budget_mb * 1048576.0) / (int64_t)block_bytes;
    int64_t need = warm + k25_kv_tier_hot_blocks(cfg) + 1; /* + the copy buffer */
    if (*max_blocks < need)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "kv_warm_budget_mb",
                             "the memory budget leaves %lld KV blocks of %zu bytes; the warm pool (%lld), one "
                             "sequence's hot blocks and a prefill chunk's (%lld) and the copy buffer need %lld",
                             (long long)*max_blocks, block_bytes, (long long)warm,
                             (long long)k25_kv_tier_hot_blocks(cfg), (long long)need);
    /* block ids past RAM: with a cold tier the file holds any number; without, the warm slots */
    *max_blocks = cfg->kv_cold_dir[0] ? 0 : *max_blocks - 1;
    return K25_OK;
}

void k25_kv_tier_totals(const struct k25_kv_tier *t, struct k25_kv_tier_totals *out)
{
    struct k25_kv_tier *m = (struct k25_kv_tier *)t; /* the lock only */
    pthread_mutex_lock(&m->mu);
    *out = t->tot;
    out->copy_ns += t->thr_read_ns;
    out->staging_blocks = t->sb;
    out->warm_blocks = t->n_warm;
    pthread_mutex_unlock(&m->mu);
}

void k25_kv_tier_set_prefetch(struct k25_kv_tier *t, bool on)
{
    pthread_mutex_lock(&t->mu);
    t->prefetch_on = on;
    pthread_mutex_unlock(&t->mu);
}
