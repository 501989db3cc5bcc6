/*
 * kvtier.c - KV tiers: hot (backend buffers), warm (a bounded host pool),
 * cold (a file read by a prefetch thread).  See kvtier.h for the model and
 * docs/engine.md "KV tiers" for the policy and the figures.
 *
 * Residency is per block and per step: a step makes the blocks of the
 * sequences it runs hot (k25_kv_tier_acquire), and afterwards every block
 * that need not stay hot goes back to its host tier (k25_kv_tier_release).
 * A block keeps its warm slot or cold copy while hot, so a block the step
 * did not write goes back by dropping its hot copy, without a byte moved.
 *
 * Eviction policy (warm -> cold when the warm pool is full): the warm block
 * read least recently goes first; among equals the one with the least
 * attention mass (mean compression score of its slots, where compression
 * still keeps scores for them; unknown counts as least), then the lowest id.
 *
 * The prefetch thread serves a FIFO of staging slots: the engine thread
 * queues a cold block on a free slot (state QUEUED), the thread preads it
 * (READING -> READY), the engine thread copies it hot and frees the slot,
 * queueing the next cold block at once (double buffering).  Everything the
 * two threads share is under t->mu.
 */
#include "kvtier.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { AT_HOT, AT_WARM, AT_COLD };
enum { ST_FREE, ST_QUEUED, ST_READING, ST_READY, ST_FAILED, ST_CANCEL };

/* Tier state of one pool block id. */
struct blk {
    int8_t where;      /* AT_*: where the block's current bytes are (hot: pool->blocks[id]) */
    bool cold_ok;      /* the cold file holds its current bytes */
    int32_t warm;      /* its warm slot (current bytes unless hot and written since), or -1 */
    int32_t stage;     /* the staging slot prefetching it, or -1 */
    uint64_t last_use; /* step of its last read */
    float mass;        /* mean attention score of its slots; -1 unknown */
};

struct stage {
    int state;         /* ST_* */
    int32_t id;        /* block being staged */
    uint64_t qno;      /* FIFO order */
    unsigned char *buf; /* [block_bytes] inside stage_mem */
};

struct k25_kv_tier {
    struct k25_kv_pool *pool;
    struct k25_log *log;
    struct k25_mem_acct *acct;
    int hot_tokens;
    struct blk *b;            /* [nb] by block id (malloc'd) */
    int64_t nb;
    unsigned char *warm_mem;  /* [n_warm][block_bytes] (k25_alloc_acct, K25_MEM_KV) */
    int32_t *warm_owner;      /* [n_warm] block id or -1 (malloc'd) */
    int n_warm;
    struct stage *st;         /* [n_stage] (malloc'd) */
    unsigned char *stage_mem; /* [n_stage][block_bytes] (k25_alloc_acct, K25_MEM_KV) */
    int n_stage;
    unsigned char *tmp;       /* [block_bytes]: synchronous cold reads and writes (K25_MEM_KV) */
    int fd;                   /* the cold file, -1 without kv_cold_dir */
    pthread_t thr;
    bool thr_on, quit, prefetch_on;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    uint64_t qno, step;
    uint64_t thr_read_ns;     /* the prefetch thread's pread time (under mu) */
    struct k25_kv_tier_totals tot; /* the engine thread's */
};

static uint64_t nsec(void)
{
    return k25_now_ns();
}

/* pread/pwrite of a whole block at its id's offset; false on error or short transfer. */
static bool io_block(int fd, bool write, int32_t id, size_t bytes, unsigned char *buf)
{
    off_t off = (off_t)id * (off_t)bytes;
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

static void *prefetch_main(void *arg)
{
    struct k25_kv_tier *t = arg;
    const size_t bb = t->pool->block_bytes;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        int pick = -1;
        for (int s = 0; s < t->n_stage; s++)
            if (t->st[s].state == ST_QUEUED && (pick < 0 || t->st[s].qno < t->st[pick].qno))
                pick = s;
        if (pick < 0) {
            if (t->quit)
                break;
            pthread_cond_wait(&t->cv_work, &t->mu);
            continue;
        }
        struct stage *s = &t->st[pick];
        s->state = ST_READING;
        int32_t id = s->id;
        pthread_mutex_unlock(&t->mu);
        uint64_t t0 = nsec();
        bool ok = io_block(t->fd, false, id, bb, s->buf);
        uint64_t dt = nsec() - t0;
        pthread_mutex_lock(&t->mu);
        t->thr_read_ns += dt;
        s->state = s->state == ST_CANCEL ? ST_FREE : ok ? ST_READY : ST_FAILED;
        pthread_cond_broadcast(&t->cv_done);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
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
    if (slots > INT_MAX / 2)
        slots = INT_MAX / 2;
    if (cold && slots < 2)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_warm_budget_mb",
                             "%.3f MB holds %lld KV blocks of %zu bytes; the cold tier needs at least 2 "
                             "(its prefetch staging slots)",
                             cfg->kv_warm_budget_mb, (long long)slots, bb);
    struct k25_kv_tier *t = calloc(1, sizeof(*t));
    if (!t)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV tiers)");
    int rc = K25_OK;
    t->pool = pool;
    t->log = log;
    t->acct = pool->be->acct;
    t->hot_tokens = cfg->kv_hot_tokens;
    t->fd = -1;
    t->prefetch_on = true;
    /* a quarter of the warm budget (at least 2 slots) is the prefetch staging area when there is a cold tier */
    t->n_stage = cold ? (int)(slots / 4 > 2 ? slots / 4 : 2) : 0;
    t->n_warm = (int)slots - t->n_stage;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_done, NULL);
    t->warm_owner = malloc(sizeof(int32_t) * (size_t)(t->n_warm > 0 ? t->n_warm : 1));
    t->st = calloc((size_t)(t->n_stage > 0 ? t->n_stage : 1), sizeof(*t->st));
    t->warm_mem = t->n_warm > 0 ? k25_alloc_acct(t->acct, K25_MEM_KV, bb * (size_t)t->n_warm) : NULL;
    t->stage_mem = t->n_stage > 0 ? k25_alloc_acct(t->acct, K25_MEM_KV, bb * (size_t)t->n_stage) : NULL;
    t->tmp = k25_alloc_acct(t->acct, K25_MEM_KV, bb);
    if (!t->warm_owner || !t->st || (t->n_warm > 0 && !t->warm_mem) || (t->n_stage > 0 && !t->stage_mem) ||
        !t->tmp) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, "kv_warm_budget_mb", "cannot allocate the warm KV pool (%.1f MB)",
                           cfg->kv_warm_budget_mb);
        goto out_destroy;
    }
    for (int i = 0; i < t->n_warm; i++)
        t->warm_owner[i] = -1;
    for (int i = 0; i < t->n_stage; i++)
        t->st[i] = (struct stage){ST_FREE, -1, 0, t->stage_mem + bb * (size_t)i};
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
        pthread_cond_broadcast(&t->cv_work);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thr, NULL);
    }
    if (t->fd >= 0)
        (void)close(t->fd); /* unlinked, read-only use from here: nothing to lose */
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_done);
    k25_free(t->warm_mem);
    k25_free(t->stage_mem);
    k25_free(t->tmp);
    free(t->warm_owner);
    free(t->st);
    free(t->b);
    free(t);
}

/* Grows the per-id state to the pool's ids; K25_ENOMEM on failure. */
static int ensure_ids(struct k25_kv_tier *t, struct k25_error *err)
{
    if (t->nb >= t->pool->n_alloc)
        return K25_OK;
    int64_t n = t->pool->cap > t->pool->n_alloc ? t->pool->cap : t->pool->n_alloc;
    struct blk *nb = realloc(t->b, sizeof(*nb) * (size_t)n);
    if (!nb)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV tier state)");
    for (int64_t i = t->nb; i < n; i++)
        nb[i] = (struct blk){AT_HOT, false, -1, -1, 0, -1.0f};
    t->b = nb;
    t->nb = n;
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
        k25_log_write(t->log, K25_LOG_DEBUG, "KV_CACHE", "block_id=%d evict_reason=%s from=%s to=%s", id, reason,
                      tier_name(from), tier_name(to));
}

/* Frees a staging slot a block holds (under t->mu); one being read is cancelled. */
static void stage_drop_locked(struct k25_kv_tier *t, struct blk *k)
{
    if (k->stage < 0)
        return;
    struct stage *s = &t->st[k->stage];
    s->state = s->state == ST_READING ? ST_CANCEL : ST_FREE;
    k->stage = -1;
}

/* Writes warm slot w's block to the cold file (when not there yet) and frees the slot. */
static int warm_to_cold(struct k25_kv_tier *t, int w, const char *reason, struct k25_error *err)
{
    const size_t bb = t->pool->block_bytes;
    int32_t id = t->warm_owner[w];
    struct blk *k = &t->b[id];
    if (!k->cold_ok) {
        uint64_t t0 = nsec();
        if (!io_block(t->fd, true, id, bb, t->warm_mem + bb * (size_t)w))
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

/* Whether block a should leave the warm pool before block b (the eviction order above). */
static bool evict_before(const struct blk *a, int32_t ida, const struct blk *b, int32_t idb)
{
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
        if (t->b[o].where == AT_WARM &&
            (victim < 0 || evict_before(&t->b[o], o, &t->b[t->warm_owner[victim]], t->warm_owner[victim])))
            victim = w;
    }
    if (victim < 0 || t->fd < 0 || evict_before(&t->b[id], id, &t->b[t->warm_owner[victim]], t->warm_owner[victim]))
        return -1;
    if ((*rc = warm_to_cold(t, victim, "MEMORY_PRESSURE", err)) != K25_OK)
        return -1;
    return victim;
}

/* Mean attention score of block i of seq where compression keeps scores for its slots, else -1. */
static float block_mass(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int i)
{
    if (!p->compress || !seq->stats)
        return -1.0f;
    int s0 = i * p->block_size, s1 = s0 + p->block_size;
    s0 = s0 > seq->comp_hi ? s0 : seq->comp_hi;
    s1 = s1 < seq->n_tokens ? s1 : seq->n_tokens;
    double score = 0.0, seen = 0.0;
    for (int s = s0; s < s1; s++)
        for (int l = 0; l < p->n_layers; l++)
            for (int g = 0; g < p->n_kv_heads; g++) {
                const float *st = k25_kv_slot_stat(p, seq, l, g, s);
                score += st[0];
                seen += st[1];
            }
    return seen > 0.0 ? (float)(score / seen) : -1.0f;
}

/* Queues seq's cold blocks that are not staged yet on free staging slots (under t->mu). */
static void prefetch_locked(struct k25_kv_tier *t, const struct k25_kv_seq *seq)
{
    if (!t->thr_on || !t->prefetch_on)
        return;
    int s = 0;
    bool queued = false;
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        if (id >= t->nb)
            continue;
        struct blk *k = &t->b[id];
        if (k->where != AT_COLD || k->stage >= 0)
            continue;
        while (s < t->n_stage && t->st[s].state != ST_FREE)
            s++;
        if (s == t->n_stage)
            break;
        t->st[s].state = ST_QUEUED;
        t->st[s].id = id;
        t->st[s].qno = t->qno++;
        k->stage = s;
        queued = true;
    }
    if (queued)
        pthread_cond_signal(&t->cv_work);
}

void k25_kv_tier_prefetch(struct k25_kv_tier *t, const struct k25_kv_seq *seq)
{
    pthread_mutex_lock(&t->mu);
    prefetch_locked(t, seq);
    pthread_mutex_unlock(&t->mu);
}

/*
 * Brings a cold block hot: from its staging slot when the prefetch thread
 * has it (waiting if it is still being read), else by a pread here.  Sets
 * *waited when the block was not ready on arrival (a miss).
 */
static int cold_to_hot(struct k25_kv_tier *t, const struct k25_kv_seq *seq, int32_t id, bool *waited,
                       uint64_t *wait_ns, struct k25_error *err)
{
    const struct k25_backend *B = t->pool->be->be;
    const size_t bb = t->pool->block_bytes;
    struct blk *k = &t->b[id];
    const unsigned char *src = NULL;
    pthread_mutex_lock(&t->mu);
    if (k->stage >= 0) {
        struct stage *s = &t->st[k->stage];
        if (s->state == ST_QUEUED || s->state == ST_READING) {
            *waited = true;
            uint64_t t0 = nsec();
            while (s->state == ST_QUEUED || s->state == ST_READING)
                pthread_cond_wait(&t->cv_done, &t->mu);
            *wait_ns += nsec() - t0;
        }
        if (s->state == ST_READY)
            src = s->buf;
        else
            stage_drop_locked(t, k); /* failed: read it here */
    }
    pthread_mutex_unlock(&t->mu);
    if (!src) {
        *waited = true;
        uint64_t t0 = nsec();
        if (!io_block(t->fd, false, id, bb, t->tmp))
            return k25_error_set(err, K25_EIO, NULL, 0, "kv_cold_dir", "cannot read KV block %d from the cold file: %s",
                                 id, strerror(errno));
        uint64_t dt = nsec() - t0;
        *wait_ns += dt;
        t->tot.copy_ns += dt;
        src = t->tmp;
    }
    uint64_t t0 = nsec();
    B->kv_block_set(t->pool->be, t->pool, id, src);
    t->tot.copy_ns += nsec() - t0;
    pthread_mutex_lock(&t->mu);
    stage_drop_locked(t, k);
    prefetch_locked(t, seq); /* the freed slot takes the next cold block */
    pthread_mutex_unlock(&t->mu);
    return K25_OK;
}

/*
 * Makes blocks hot in three passes: state of the blocks new to seq reset
 * and the prefetch queue topped up; hot and warm blocks (the warm copies
 * give the prefetch thread time); then cold blocks in block order, each
 * from its staging slot when ready (a hit) or after a wait (a miss).
 */
int k25_kv_tier_acquire(struct k25_kv_tier *t, struct k25_kv_seq *seq, int first_written, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    const struct k25_backend *B = p->be->be;
    int rc = ensure_ids(t, err);
    if (rc != K25_OK)
        return rc;
    /* what this step may write: its new slots, and for int8/int4 the residual's groups that
     * close (quantized into the blocks from n_quant on, which lags the newest slot) */
    int dirty = first_written;
    for (int l = 0; p->quant && seq->n_quant && l < p->n_layers; l++)
        dirty = seq->n_quant[l] < dirty ? seq->n_quant[l] : dirty;
    if (dirty < seq->tier_dirty_from)
        seq->tier_dirty_from = dirty;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if ((int64_t)i * p->block_size >= first_written) { /* a block new to seq: no tier copy is its */
            stage_drop_locked(t, k);
            if (k->warm >= 0 && t->warm_owner[k->warm] == id)
                t->warm_owner[k->warm] = -1;
            *k = (struct blk){AT_HOT, false, -1, -1, 0, -1.0f};
        }
    }
    prefetch_locked(t, seq);
    pthread_mutex_unlock(&t->mu);

    bool waited_any = false;
    uint64_t wait_ns = 0;
    int access = AT_HOT;
    int32_t access_id = seq->ids[seq->n_blocks - 1];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < seq->n_blocks; i++) {
            int32_t id = seq->ids[i];
            struct blk *k = &t->b[id];
            if (pass == 0) { /* every block is read once per step: count it here */
                k->last_use = t->step;
                seq->tier_reads++;
                t->tot.reads++;
            }
            if (k->where == AT_HOT) {
                if (pass == 0) {
                    seq->tier_hits++;
                    t->tot.hits++;
                }
                continue;
            }
            if ((pass == 0) != (k->where == AT_WARM))
                continue;
            K25_ASSERT(p->blocks[id] == NULL);
            if (B->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, &p->blocks[id], err) != K25_OK)
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV block %d back to hot)", id);
            bool waited = false;
            if (k->where == AT_WARM) {
                uint64_t t0 = nsec();
                B->kv_block_set(p->be, p, id, t->warm_mem + p->block_bytes * (size_t)k->warm);
                t->tot.copy_ns += nsec() - t0;
            } else if ((rc = cold_to_hot(t, seq, id, &waited, &wait_ns, err)) != K25_OK) {
                return rc;
            }
            if (k->where > access) {
                access = k->where;
                access_id = id;
            }
            k->where = AT_HOT;
            t->tot.bytes_moved += (int64_t)p->block_bytes;
            seq->tier_bytes += (int64_t)p->block_bytes;
            if (waited) {
                waited_any = true;
            } else {
                seq->tier_hits++;
                t->tot.hits++;
            }
        }
    seq->tier_wait_ns += wait_ns;
    t->tot.wait_ns += wait_ns;
    if (wait_ns > t->tot.max_step_wait_ns)
        t->tot.max_step_wait_ns = wait_ns;
    seq->tier_access = access;
    seq->tier_access_id = access_id;
    seq->tier_step_hit = !waited_any;
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
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if (k->where != AT_HOT)
            continue;
        const int64_t s0 = (int64_t)i * p->block_size;
        bool dirty = s0 + p->block_size > seq->tier_dirty_from;
        if (dirty) { /* its tier copies are out of date */
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
                if (!io_block(t->fd, true, id, bb, t->tmp))
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
        B->buf_free(p->be, p->blocks[id]);
        p->blocks[id] = NULL;
        k->where = k->warm >= 0 ? AT_WARM : AT_COLD;
    }
    seq->tier_dirty_from = INT_MAX;
    return K25_OK;
}

int k25_kv_tier_end_step(struct k25_kv_tier *t, struct k25_error *err)
{
    t->step++;
    if (t->fd < 0 || t->step <= K25_KV_STALE_STEPS)
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
 * in the warm or cold tier comes back hot first (the cache never sees a
 * block without its bytes); without it the block goes to the free list and
 * its tier copies are simply dropped (the pool allocates a hot buffer when
 * it reuses the id).  K25_ENOMEM / K25_EIO when a block cannot come back.
 */
int k25_kv_tier_forget(struct k25_kv_tier *t, struct k25_kv_seq *seq, struct k25_error *err)
{
    struct k25_kv_pool *p = t->pool;
    const struct k25_backend *B = p->be->be;
    int rc = ensure_ids(t, err);
    if (rc != K25_OK)
        return rc;
    for (int i = 0; i < seq->n_blocks; i++) {
        int32_t id = seq->ids[i];
        struct blk *k = &t->b[id];
        if (p->refs && p->refs[id] > 1)
            continue;
        if (p->px && k->where != AT_HOT) {
            if (B->buf_alloc(p->be, K25_MEM_KV, p->block_bytes, &p->blocks[id], err) != K25_OK)
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV block %d back to hot)", id);
            bool waited = false;
            uint64_t wait_ns = 0;
            if (k->where == AT_WARM)
                B->kv_block_set(p->be, p, id, t->warm_mem + p->block_bytes * (size_t)k->warm);
            else if ((rc = cold_to_hot(t, seq, id, &waited, &wait_ns, err)) != K25_OK)
                return rc;
            t->tot.bytes_moved += (int64_t)p->block_bytes;
        }
        pthread_mutex_lock(&t->mu);
        stage_drop_locked(t, k);
        pthread_mutex_unlock(&t->mu);
        if (k->warm >= 0 && t->warm_owner[k->warm] == id)
            t->warm_owner[k->warm] = -1;
        *k = (struct blk){AT_HOT, false, -1, -1, 0, -1.0f};
    }
    return K25_OK;
}

void k25_kv_tier_totals(const struct k25_kv_tier *t, struct k25_kv_tier_totals *out)
{
    struct k25_kv_tier *m = (struct k25_kv_tier *)t; /* the lock only */
    pthread_mutex_lock(&m->mu);
    *out = t->tot;
    out->copy_ns += t->thr_read_ns;
    pthread_mutex_unlock(&m->mu);
}

void k25_kv_tier_set_prefetch(struct k25_kv_tier *t, bool on)
{
    pthread_mutex_lock(&t->mu);
    t->prefetch_on = on;
    pthread_mutex_unlock(&t->mu);
}
