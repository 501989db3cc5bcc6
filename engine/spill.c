/*
 * spill.c - the durable disk queue of the elastic request queue: an
 * append-only log, <queue_spill_dir>/queue.log.
 *
 * Every accepted request gets one record, written with one write() and
 * made durable before k25_engine_submit(_batch) returns success, so a
 * caller that acknowledges after submit never acknowledges a request a
 * crash can lose.  When the request reaches a final state a small "done"
 * record follows, durable before its FINISH event.
 *
 * Group commit: writing and syncing are separate calls.  k25_spill_sync
 * is leader/follower: the first caller fsyncs everything written so far
 * while later callers wait on a condition variable; when the fsync
 * returns, every caller whose record it covered is done, and the next
 * uncovered one leads the next fsync.  So requests written while an fsync
 * runs - a batch submitted together, or appenders on other threads - share
 * the following one.
 * At engine create the log is read back: requests without a done record
 * are re-submitted in log (arrival) order.  When every request in the log
 * is done the file is truncated to empty (compaction).
 *
 * Record: u32 magic "K25Q", u32 payload length, u32 CRC-32 of the payload,
 * payload.  Payload, host byte order (the log is read back on the machine
 * that wrote it):
 *   request: u8 1, u64 seq, u64 arrival_unix_ns, u8 priority, u8 flags (bit 0 has_sampling, bit 1 ignore_eos),
 *            i32 max_new_tokens, f64 temperature, f64 top_p, u64 seed,
 *            u8 id_len, id bytes, i32 n_input, i32 tokens[n_input],
 *            i32 n_stop, n_stop x (i32 len, i32 ids[len])
 *   done:    u8 2, u64 seq
 * A crash during an append leaves a short or corrupt last record: its
 * length runs past the end of the file or its CRC fails.  Reading stops
 * there; the tail is cut off and reported, never fatal.  A failed write is
 * cut back at once; a failed fsync cuts back everything it was to cover
 * (and whatever was written meanwhile), and every caller waiting for one
 * of those records is told: a request the caller was told failed cannot
 * come back at replay.
 */
#include "queue.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/falloc.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SPILL_MAGIC 0x5132354bu /* "K25Q" little-endian */
#define SPILL_REQ 1
#define SPILL_DONE 2
#define SPILL_HDR 12
#define SPILL_MAX_PAYLOAD (1u << 30)
#define SPILL_DONE_BYTES (SPILL_HDR + 9)
#define SPILL_RESERVE_ALIGN 4096

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32). */
static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    static uint32_t table[256];
    static bool ready;
    if (!ready) {
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
        ready = true;
    }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

static ssize_t sys_write(int fd, const void *buf, size_t n, void *user)
{
    (void)user;
    return write(fd, buf, n);
}

static int sys_fsync(int fd, void *user)
{
    (void)user;
    return fsync(fd);
}

void k25_spill_set_io(struct k25_spill_log *lg, const struct k25_spill_io *io)
{
    lg->io = io ? *io : (struct k25_spill_io){NULL, NULL, NULL};
    if (!lg->io.write)
        lg->io.write = sys_write;
    if (!lg->io.fsync)
        lg->io.fsync = sys_fsync;
}

/* A growable byte buffer for building one record. */
struct wbuf {
    unsigned char *p;
    size_t n, cap;
    bool oom;
};

static void put(struct wbuf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

#define PUT(b, v) put((b), &(v), sizeof(v))

/* Frames payload [SPILL_HDR reserved bytes + payload] in place: magic, length, CRC. */
static void frame(struct wbuf *b)
{
    uint32_t magic = SPILL_MAGIC, len = (uint32_t)(b->n - SPILL_HDR), crc = crc32_of(b->p + SPILL_HDR, len);
    memcpy(b->p, &magic, 4);
    memcpy(b->p + 4, &len, 4);
    memcpy(b->p + 8, &crc, 4);
}

/*
 * Makes sure the file's blocks are allocated for `extra` more bytes at its end plus one done record
 * per live request (lg->mu held): fallocate(FALLOC_FL_KEEP_SIZE) past the end, so the size is
 * unchanged and later writes into that range need no new block.  A filesystem that cannot
 * preallocate (EOPNOTSUPP) turns reservation off for the log's life.  K25_EIO (ENOSPC mostly)
 * when the room is not there: the caller refuses the request before writing anything.
 */
static int reserve(struct k25_spill_log *lg, int64_t extra, const char *what, struct k25_error *err)
{
    int64_t need = lg->end + extra + lg->live * SPILL_DONE_BYTES;
    if (lg->no_prealloc || need <= lg->reserved_end)
        return K25_OK;
    int64_t from = lg->reserved_end > lg->end ? lg->reserved_end : lg->end;
    int64_t to = (need + SPILL_RESERVE_ALIGN - 1) / SPILL_RESERVE_ALIGN * SPILL_RESERVE_ALIGN;
    int r = fallocate(lg->fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)(to - from));
    if (r != 0 && errno == ENOSPC && to > need) /* the rounding may be what does not fit */
        r = fallocate(lg->fd, FALLOC_FL_KEEP_SIZE, (off_t)from, (off_t)((to = need) - from));
    if (r == 0) {
        lg->reserved_end = to;
        return K25_OK;
    }
    if (errno == EOPNOTSUPP || errno == ENOSYS) {
        lg->no_prealloc = true;
        return K25_OK;
    }
    return k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir",
                         "cannot spill %s: no room for its record and its done record: %s", what, strerror(errno));
}

/* After a truncation (lg->mu held): the blocks past the new end are gone; reserve again for the
 * live requests (best effort: a request whose done record then fails is owed, k25_spill_owe). */
static void truncated(struct k25_spill_log *lg)
{
    lg->reserved_end = lg->end;
    reserve(lg, 0, "done records", NULL);
}

/*
 * Writes one framed record at the end of the file (lg->mu held), not yet
 * durable; *lsn gets the logical position after it.  On a failed write
 * cuts the file back to lg->end so no part of the record survives; if even
 * that fails the log is marked broken (later appends fail) since a half
 * record followed by good ones would hide the good ones at replay.
 */
static int write_raw(struct k25_spill_log *lg, const unsigned char *p, size_t n, const char *what, uint64_t *lsn,
                     struct k25_error *err)
{
    if (lg->broken)
        return k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir",
                             "the spill log is unusable after an earlier write failure");
    size_t done = 0;
    int e = 0;
    while (done < n) {
        ssize_t w = lg->io.write(lg->fd, p + done, n - done, lg->io.user);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)w;
    }
    if (done == n) {
        lg->end += (int64_t)n;
        lg->written += n;
        *lsn = lg->written;
        return K25_OK;
    }
    if (ftruncate(lg->fd, lg->end) != 0 || lseek(lg->fd, lg->end, SEEK_SET) != lg->end)
        lg->broken = true;
    truncated(lg);
    return k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot spill %s: write failed: %s%s", what,
                         strerror(e), lg->broken ? " (and the log could not be cut back)" : "");
}

/* The lost range holding lsn, or NULL. */
static const struct k25_spill_lost *lost_range(const struct k25_spill_log *lg, uint64_t lsn)
{
    for (int i = lg->n_lost - 1; i >= 0; i--)
        if (lsn > lg->lost[i].lo && lsn <= lg->lost[i].hi)
            return &lg->lost[i];
    return NULL;
}

/*
 * A failed fsync (lg->mu held): the records since the durable prefix may
 * or may not be on disk, so they are cut off and (durable, written]
 * becomes a lost range that every waiter for one of them is told about.
 */
static void sync_failed(struct k25_spill_log *lg, int e)
{
    struct k25_spill_lost lost = {lg->durable, lg->written, ""};
    if (ftruncate(lg->fd, lg->durable_end) != 0 || lseek(lg->fd, lg->durable_end, SEEK_SET) != lg->durable_end)
        lg->broken = true;
    lg->end = lg->durable_end;
    truncated(lg);
    snprintf(lost.why, sizeof(lost.why), "cannot make the spill record durable: fsync failed: %s%s", strerror(e),
             lg->broken ? " (and the log could not be cut back)" : "");
    if (lg->n_lost == lg->cap_lost) {
        int ncap = lg->cap_lost ? 2 * lg->cap_lost : 8;
        struct k25_spill_lost *nl = realloc(lg->lost, sizeof(*nl) * (size_t)ncap);
        if (!nl) { /* cannot remember which records were lost: refuse everything from now on */
            lg->broken = true;
            return;
        }
        lg->lost = nl;
        lg->cap_lost = ncap;
    }
    lg->lost[lg->n_lost++] = lost;
}

int k25_spill_sync(struct k25_spill_log *lg, uint64_t lsn, struct k25_error *err)
{
    int rc = K25_OK;
    pthread_mutex_lock(&lg->mu);
    for (;;) {
        const struct k25_spill_lost *l = lost_range(lg, lsn);
        if (l) {
            rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "%s", l->why);
            break;
        }
        if (lg->durable >= lsn)
            break;
        if (lg->broken) {
            rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir",
                               "the spill log is unusable after an earlier write failure");
            break;
        }
        if (lg->syncing) { /* follower: the running fsync may cover lsn */
            pthread_cond_wait(&lg->cv, &lg->mu);
            continue;
        }
        /* leader: one fsync for everything written so far */
        uint64_t target = lg->written;
        int64_t target_end = lg->end;
        lg->syncing = true;
        pthread_mutex_unlock(&lg->mu);
        errno = 0;
        int r = lg->io.fsync(lg->fd, lg->io.user), e = r != 0 ? (errno ? errno : EIO) : 0;
        pthread_mutex_lock(&lg->mu);
        lg->syncing = false;
        lg->n_fsyncs++;
        if (r == 0) {
            lg->durable = target;
            lg->durable_end = target_end;
        } else {
            sync_failed(lg, e);
        }
        pthread_cond_broadcast(&lg->cv);
    }
    pthread_mutex_unlock(&lg->mu);
    return rc;
}

/* Compaction (lg->mu held): every request in the log is done and durable so, nothing is pending. */
static void compact(struct k25_spill_log *lg)
{
    if (lg->live > 0 || lg->durable != lg->written || lg->syncing || lg->end == 0)
        return;
    /* no fsync of its own: a crash before the next one leaves a log whose records are all
     * done (nothing to replay), and the next fsync of the file makes the truncation durable */
    if (ftruncate(lg->fd, 0) != 0 || lseek(lg->fd, 0, SEEK_SET) != 0) {
        lg->broken = true; /* the file is in an unknown state */
        return;
    }
    lg->end = lg->durable_end = 0;
    lg->reserved_end = 0;
}

void k25_spill_retire(struct k25_spill_log *lg, int64_t n)
{
    pthread_mutex_lock(&lg->mu);
    lg->live -= n;
    compact(lg);
    pthread_mutex_unlock(&lg->mu);
}

int k25_spill_append(struct k25_spill_log *lg, const struct k25_request *req, uint64_t *seq, uint64_t *lsn,
                     struct k25_error *err)
{
    struct wbuf b = {0};
    unsigned char hdr[SPILL_HDR] = {0};
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* provenance only: order is the log's */
    uint64_t s = 0, arrival = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint8_t type = SPILL_REQ, prio = (uint8_t)req->priority,
            has = (uint8_t)((req->has_sampling ? 1 : 0) | (req->ignore_eos ? 2 : 0));
    int32_t max_new = req->max_new_tokens, n_input = req->n_input, n_stop = req->n_stop;
    const char *id = req->id ? req->id : "";
    size_t idl = strlen(id);
    uint8_t id_len = (uint8_t)(idl > 63 ? 63 : idl);
    put(&b, hdr, sizeof(hdr));
    PUT(&b, type);
    const size_t seq_at = b.n; /* the number is set under the lock, in write order */
    PUT(&b, s);
    PUT(&b, arrival);
    PUT(&b, prio);
    PUT(&b, has);
    PUT(&b, max_new);
    PUT(&b, req->temperature);
    PUT(&b, req->top_p);
    PUT(&b, req->seed);
    PUT(&b, id_len);
    put(&b, id, id_len);
    PUT(&b, n_input);
    put(&b, req->input_ids, sizeof(int32_t) * (size_t)req->n_input);
    PUT(&b, n_stop);
    for (int i = 0; i < req->n_stop; i++) {
        int32_t l = req->stop_lens[i];
        PUT(&b, l);
        put(&b, req->stop_ids[i], sizeof(int32_t) * (size_t)l);
    }
    int rc;
    if (b.oom || b.n - SPILL_HDR > SPILL_MAX_PAYLOAD) {
        rc = k25_error_set(err, K25_ENOMEM, lg->path, 0, "queue_spill_dir", "cannot build the spill record of '%s'",
                           id);
        goto out_free;
    }
    char what[96];
    snprintf(what, sizeof(what), "request '%s'", id);
    pthread_mutex_lock(&lg->mu);
    s = lg->next_seq;
    memcpy(b.p + seq_at, &s, sizeof(s));
    frame(&b);
    if ((rc = reserve(lg, (int64_t)b.n + SPILL_DONE_BYTES, what, err)) == K25_OK &&
        (rc = write_raw(lg, b.p, b.n, what, lsn, err)) == K25_OK) {
        lg->next_seq++;
        lg->live++;
        *seq = s;
    }
    pthread_mutex_unlock(&lg->mu);
out_free:
    free(b.p);
    return rc;
}

int k25_spill_append_done(struct k25_spill_log *lg, uint64_t seq, uint64_t *lsn, struct k25_error *err)
{
    unsigned char rec[SPILL_HDR + 9];
    uint8_t type = SPILL_DONE;
    memcpy(rec + SPILL_HDR, &type, 1);
    memcpy(rec + SPILL_HDR + 1, &seq, 8);
    struct wbuf b = {rec, sizeof(rec), sizeof(rec), false};
    frame(&b);
    pthread_mutex_lock(&lg->mu);
    int rc = write_raw(lg, rec, sizeof(rec), "a done record", lsn, err);
    pthread_mutex_unlock(&lg->mu);
    return rc;
}

int k25_spill_done(struct k25_spill_log *lg, uint64_t seq, struct k25_error *err)
{
    uint64_t lsn;
    int rc = k25_spill_append_done(lg, seq, &lsn, err);
    if (rc == K25_OK && (rc = k25_spill_sync(lg, lsn, err)) == K25_OK)
        k25_spill_retire(lg, 1);
    return rc;
}

/* A cursor over one record's payload. */
struct rbuf {
    const unsigned char *p;
    size_t n, off;
    bool bad;
};

static void get(struct rbuf *r, void *dst, size_t n)
{
    if (r->bad || r->off + n > r->n) {
        r->bad = true;
        memset(dst, 0, n);
        return;
    }
    memcpy(dst, r->p + r->off, n);
    r->off += n;
}

#define GET(r, v) get((r), &(v), sizeof(v))

/* Parses a request payload into *en (arrays malloc'd).  false when malformed. */
static bool parse_request(struct rbuf *r, struct k25_spill_entry *en)
{
    uint8_t prio = 0, has = 0, id_len = 0;
    int32_t max_new = 0, n_input = 0, n_stop = 0;
    memset(en, 0, sizeof(*en));
    GET(r, en->seq);
    GET(r, en->arrival_unix_ns);
    GET(r, prio);
    GET(r, has);
    GET(r, max_new);
    GET(r, en->req.temperature);
    GET(r, en->req.top_p);
    GET(r, en->req.seed);
    GET(r, id_len);
    if (id_len > 63)
        return false;
    get(r, en->id, id_len);
    GET(r, n_input);
    if (r->bad || n_input < 0 || (size_t)n_input > (r->n - r->off) / 4)
        return false;
    en->tokens = malloc(sizeof(int32_t) * (size_t)(n_input ? n_input : 1));
    if (!en->tokens)
        return false;
    get(r, en->tokens, sizeof(int32_t) * (size_t)n_input);
    GET(r, n_stop);
    if (r->bad || n_stop < 0 || (size_t)n_stop > (r->n - r->off) / 4)
        return false;
    if (n_stop > 0) {
        en->stop = calloc((size_t)n_stop, sizeof(*en->stop));
        en->stop_lens = calloc((size_t)n_stop, sizeof(int));
        if (!en->stop || !en->stop_lens)
            return false;
        for (int i = 0; i < n_stop; i++) {
            int32_t l = 0;
            GET(r, l);
            if (r->bad || l < 1 || (size_t)l > (r->n - r->off) / 4 || !(en->stop[i] = malloc(sizeof(int32_t) * (size_t)l)))
                return false;
            en->req.n_stop = i + 1;
            en->stop_lens[i] = l;
            get(r, en->stop[i], sizeof(int32_t) * (size_t)l);
        }
    }
    if (r->bad || prio > K25_PRIORITY_LOW)
        return false;
    en->req.id = en->id;
    en->req.input_ids = en->tokens;
    en->req.n_input = n_input;
    en->req.max_new_tokens = max_new;
    en->req.has_sampling = (has & 1) != 0;
    en->req.ignore_eos = (has & 2) != 0;
    en->req.priority = (enum k25_priority)prio;
    en->req.stop_ids = (const int32_t *const *)en->stop;
    en->req.stop_lens = en->stop_lens;
    en->req.n_stop = n_stop;
    return true;
}

static void entry_free(struct k25_spill_entry *en)
{
    free(en->tokens);
    for (int i = 0; i < en->req.n_stop; i++)
        free(en->stop[i]);
    free(en->stop);
    free(en->stop_lens);
}

void k25_spill_replay_free(struct k25_spill_replay *rep)
{
    for (int i = 0; i < rep->n_pend; i++)
        entry_free(&rep->pend[i]);
    free(rep->pend);
    memset(rep, 0, sizeof(*rep));
}

/* Reads the whole file into *buf (malloc'd). */
static int read_all(int fd, unsigned char **buf, size_t *n)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *n = (size_t)st.st_size;
    *buf = malloc(*n ? *n : 1);
    if (!*buf)
        return -1;
    size_t got = 0;
    while (got < *n) {
        ssize_t r = pread(fd, *buf + got, *n - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Marks seq done among the pending entries (removing it); false when unknown. */
static bool mark_done(struct k25_spill_replay *rep, uint64_t seq)
{
    for (int i = 0; i < rep->n_pend; i++)
        if (rep->pend[i].seq == seq) {
            entry_free(&rep->pend[i]);
            memmove(&rep->pend[i], &rep->pend[i + 1], sizeof(rep->pend[0]) * (size_t)(rep->n_pend - i - 1));
            rep->n_pend--;
            return true;
        }
    return false;
}

int k25_spill_open(struct k25_spill_log *lg, const char *dir, const struct k25_spill_io *io,
                   struct k25_spill_replay *rep, struct k25_error *err)
{
    memset(lg, 0, sizeof(*lg));
    memset(rep, 0, sizeof(*rep));
    lg->fd = -1;
    pthread_mutex_init(&lg->mu, NULL);
    pthread_cond_init(&lg->cv, NULL);
    lg->mu_init = true;
    k25_spill_set_io(lg, io);
    snprintf(lg->path, sizeof(lg->path), "%s/queue.log", dir);
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return k25_error_set(err, K25_EIO, dir, 0, "queue_spill_dir", "cannot create the spill folder: %s",
                             strerror(errno));
    int fd = open(lg->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot open the spill log: %s",
                             strerror(errno));
    unsigned char *buf = NULL;
    size_t n = 0;
    int rc = K25_OK;
    if (read_all(fd, &buf, &n) != 0) {
        rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot read the spill log: %s",
                           strerror(errno));
        goto out_close;
    }
    size_t off = 0;
    int cap = 0;
    while (off < n) {
        uint32_t magic = 0, len = 0, crc = 0;
        if (n - off < SPILL_HDR)
            break;
        memcpy(&magic, buf + off, 4);
        memcpy(&len, buf + off + 4, 4);
        memcpy(&crc, buf + off + 8, 4);
        if (magic != SPILL_MAGIC || len < 9 || len > n - off - SPILL_HDR || crc32_of(buf + off + SPILL_HDR, len) != crc)
            break;
        struct rbuf r = {buf + off + SPILL_HDR, len, 0, false};
        uint8_t type = 0;
        GET(&r, type);
        if (type == SPILL_DONE) {
            uint64_t seq = 0;
            GET(&r, seq);
            if (mark_done(rep, seq))
                rep->n_done++;
        } else if (type == SPILL_REQ) {
            if (rep->n_pend == cap) {
                cap = cap ? 2 * cap : 16;
                struct k25_spill_entry *np = realloc(rep->pend, sizeof(*np) * (size_t)cap);
                if (!np) {
                    rc = k25_error_set(err, K25_ENOMEM, lg->path, 0, "queue_spill_dir", "out of memory (replay)");
                    goto out_free;
                }
                rep->pend = np;
            }
            struct k25_spill_entry *en = &rep->pend[rep->n_pend];
            if (!parse_request(&r, en)) {
                entry_free(en);
                break; /* checksummed but malformed: treat as the torn end */
            }
            rep->n_pend++;
            rep->n_records++;
            if (en->seq >= lg->next_seq)
                lg->next_seq = en->seq + 1;
        } else {
            break;
        }
        off += SPILL_HDR + len;
    }
    if (off < n) { /* torn tail: cut it off so new records follow whole ones */
        rep->torn_bytes = (int64_t)(n - off);
        snprintf(rep->warning, sizeof(rep->warning),
                 "spill log: dropped a torn last record (%lld bytes at offset %zu: short or bad checksum)",
                 (long long)rep->torn_bytes, off);
        if (ftruncate(fd, (off_t)off) != 0 || fsync(fd) != 0) {
            rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot cut the torn tail: %s",
                               strerror(errno));
            goto out_free;
        }
    }
    for (int i = 0; i < rep->n_pend; i++) /* entries moved (realloc, removals): point at their own id */
        rep->pend[i].req.id = rep->pend[i].id;
    lg->live = rep->n_pend;
    lg->end = lg->durable_end = (int64_t)off;
    if (lg->live == 0 && off > 0) { /* compaction: everything in it is done */
        if (ftruncate(fd, 0) != 0 || fsync(fd) != 0) {
            rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot compact the spill log: %s",
                               strerror(errno));
            goto out_free;
        }
        lg->end = lg->durable_end = 0;
    }
    if (lseek(fd, lg->end, SEEK_SET) != lg->end) {
        rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot seek the spill log: %s",
                           strerror(errno));
        goto out_free;
    }
    free(buf);
    lg->fd = fd;
    return K25_OK;

out_free:
    k25_spill_replay_free(rep);
out_close:
    free(buf);
    close(fd);
    return rc;
}

void k25_spill_owe(struct k25_spill_log *lg, uint64_t seq)
{
    pthread_mutex_lock(&lg->mu);
    if (lg->n_owed == lg->cap_owed) {
        int nc = lg->cap_owed ? 2 * lg->cap_owed : 16;
        uint64_t *no = realloc(lg->owed, sizeof(*no) * (size_t)nc);
        if (!no) { /* cannot remember it: it may be replayed after a restart (logged by the caller) */
            pthread_mutex_unlock(&lg->mu);
            return;
        }
        lg->owed = no;
        lg->cap_owed = nc;
    }
    lg->owed[lg->n_owed++] = seq;
    pthread_mutex_unlock(&lg->mu);
}

int k25_spill_pay_owed(struct k25_spill_log *lg, struct k25_error *err)
{
    if (!lg->mu_init || lg->fd < 0)
        return K25_OK;
    pthread_mutex_lock(&lg->mu);
    int n = lg->n_owed;
    uint64_t owed[n > 0 ? n : 1];
    memcpy(owed, lg->owed, sizeof(uint64_t) * (size_t)n);
    pthread_mutex_unlock(&lg->mu);
    if (n == 0)
        return K25_OK;
    uint64_t lsn = 0;
    int rc = K25_OK;
    for (int i = 0; i < n && rc == K25_OK; i++)
        rc = k25_spill_append_done(lg, owed[i], &lsn, err);
    if (rc == K25_OK)
        rc = k25_spill_sync(lg, lsn, err);
    if (rc != K25_OK)
        return rc; /* a failed write or fsync cut them back: still owed */
    pthread_mutex_lock(&lg->mu);
    memmove(lg->owed, lg->owed + n, sizeof(uint64_t) * (size_t)(lg->n_owed - n)); /* owed meanwhile stay */
    lg->n_owed -= n;
    lg->live -= n;
    compact(lg);
    pthread_mutex_unlock(&lg->mu);
    return K25_OK;
}

static bool is_owed(const struct k25_spill_log *lg, uint64_t seq)
{
    for (int i = 0; i < lg->n_owed; i++)
        if (lg->owed[i] == seq)
            return true;
    return false;
}

/* One request record of the log being compacted: where it is, whether it is done. */
struct kept_rec {
    uint64_t seq;
    size_t off, len;
    bool done;
};

/*
 * Rewrites the log with its live, not owed request records (lg->mu held, no fsync running):
 * queue.log.tmp, fsync, rename over queue.log, fsync of the folder; then the descriptor follows the
 * new file.  On failure the temporary file is removed and the log is untouched.
 */
static int rewrite(struct k25_spill_log *lg, int *n_kept, struct k25_error *err)
{
    unsigned char *buf = NULL;
    size_t n = 0;
    struct kept_rec *recs = NULL;
    int nr = 0, cap = 0, rc = K25_OK, fd = -1;
    char tmp[1200], dir[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", lg->path);
    if (read_all(lg->fd, &buf, &n) != 0) {
        rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot read the spill log: %s",
                           strerror(errno));
        goto out;
    }
    for (size_t off = 0; off + SPILL_HDR <= (size_t)lg->end && off + SPILL_HDR <= n;) {
        uint32_t len = 0;
        uint8_t type = 0;
        uint64_t seq = 0;
        memcpy(&len, buf + off + 4, 4);
        if (len < 9 || off + SPILL_HDR + len > n)
            break;
        memcpy(&type, buf + off + SPILL_HDR, 1);
        memcpy(&seq, buf + off + SPILL_HDR + 1, 8);
        if (type == SPILL_REQ) {
            if (nr == cap) {
                cap = cap ? 2 * cap : 64;
                struct kept_rec *nrp = realloc(recs, sizeof(*nrp) * (size_t)cap);
                if (!nrp) {
                    rc = k25_error_set(err, K25_ENOMEM, lg->path, 0, "queue_spill_dir", "out of memory (compaction)");
                    goto out;
                }
                recs = nrp;
            }
            recs[nr++] = (struct kept_rec){seq, off, SPILL_HDR + len, is_owed(lg, seq)};
        } else if (type == SPILL_DONE) {
            for (int i = 0; i < nr; i++)
                if (recs[i].seq == seq)
                    recs[i].done = true;
        }
        off += SPILL_HDR + len;
    }
    if ((fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0) {
        rc = k25_error_set(err, K25_EIO, tmp, 0, "queue_spill_dir", "cannot compact the spill log: %s",
                           strerror(errno));
        goto out;
    }
    int64_t end = 0;
    int kept = 0;
    for (int i = 0; i < nr; i++) {
        if (recs[i].done)
            continue;
        size_t done = 0;
        while (done < recs[i].len) {
            ssize_t w = write(fd, buf + recs[i].off + done, recs[i].len - done);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0) {
                rc = k25_error_set(err, K25_EIO, tmp, 0, "queue_spill_dir", "cannot compact the spill log: %s",
                                   w < 0 ? strerror(errno) : "short write");
                goto out;
            }
            done += (size_t)w;
        }
        end += (int64_t)recs[i].len;
        kept++;
    }
    snprintf(dir, sizeof(dir), "%s", lg->path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    int dfd = -1;
    if (fsync(fd) != 0 || rename(tmp, lg->path) != 0 || (dfd = open(slash ? dir : ".", O_RDONLY | O_CLOEXEC)) < 0 ||
        fsync(dfd) != 0) {
        rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot compact the spill log: %s",
                           strerror(errno));
        if (dfd >= 0)
            close(dfd);
        goto out;
    }
    close(dfd);
    close(lg->fd);
    lg->fd = fd;
    fd = -1;
    lg->end = lg->durable_end = end;
    lg->reserved_end = end;
    lg->live = kept;
    lg->n_owed = 0;
    *n_kept = kept;
out:
    if (fd >= 0) {
        close(fd);
        unlink(tmp);
    }
    free(recs);
    free(buf);
    return rc;
}

int k25_spill_shutdown(struct k25_spill_log *lg, int *n_kept, struct k25_error *err)
{
    *n_kept = 0;
    if (lg->fd < 0)
        return K25_OK;
    struct k25_error perr;
    int prc = k25_spill_pay_owed(lg, &perr); /* a failure here: the rewrite drops them instead */
    pthread_mutex_lock(&lg->mu);
    int rc = K25_OK;
    if (lg->live == 0 && lg->end > 0) {
        compact(lg);
        if (!lg->broken && lg->io.fsync(lg->fd, lg->io.user) != 0)
            rc = k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "cannot compact the spill log: %s",
                               strerror(errno));
    } else if (lg->end > 0 && !lg->broken) {
        rc = rewrite(lg, n_kept, err);
    }
    if (rc != K25_OK && prc != K25_OK)
        k25_error_set(err, K25_EIO, lg->path, 0, "queue_spill_dir", "%s; and %d done records could not be written: %s",
                      err->msg, lg->n_owed, perr.msg);
    pthread_mutex_unlock(&lg->mu);
    return rc;
}

void k25_spill_close(struct k25_spill_log *lg)
{
    if (lg->fd >= 0)
        close(lg->fd);
    lg->fd = -1;
    free(lg->lost);
    lg->lost = NULL;
    free(lg->owed);
    lg->owed = NULL;
    lg->n_owed = lg->cap_owed = 0;
    lg->n_lost = lg->cap_lost = 0;
    if (lg->mu_init) {
        pthread_mutex_destroy(&lg->mu);
        pthread_cond_destroy(&lg->cv);
        lg->mu_init = false;
    }
}
