/*
 * queue.h - the elastic request queue's parts (engine-internal).
 *
 * engine.c keeps the memory queue (the waiting FIFO, queue_memory_capacity)
 * and the order of the disk queue; spill.c makes the disk queue durable
 * (an append-only, fsync'd, checksummed log replayed at create); breaker.c
 * decides when new requests go to the degraded model.  The test-only
 * setters at the end replace the engine's clock and the spill log's
 * write/fsync so tests run hysteresis in milliseconds and inject I/O
 * faults; the library itself reads no environment.
 */
#ifndef K25_QUEUE_H
#define K25_QUEUE_H

#include "k25.h"

#include <sys/types.h>

/* ------------------------------------------------------------ spill log */

/* The calls the spill log makes to write; tests replace them. */
struct k25_spill_io {
    ssize_t (*write)(int fd, const void *buf, size_t n, void *user);
    int (*fsync)(int fd, void *user);
    void *user;
};

/* An open spill log: <queue_spill_dir>/queue.log. */
struct k25_spill_log {
    int fd;               /* -1: no spill tier */
    char path[1100];
    int64_t end;          /* bytes of whole, valid records */
    uint64_t next_seq;    /* number of the next request record */
    int64_t live;         /* request records not yet marked done */
    bool broken;          /* a failed append could not be undone: no more spills */
    struct k25_spill_io io;
};

/* An unfinished request read back from the log (its arrays malloc'd). */
struct k25_spill_entry {
    uint64_t seq;
    uint64_t arrival_unix_ns; /* wall clock when it was spilled (information) */
    char id[64];
    struct k25_request req;   /* points into the arrays below and id */
    int32_t *tokens;          /* [req.n_input] */
    int32_t **stop;           /* [req.n_stop][stop_lens[i]] */
    int *stop_lens;           /* [req.n_stop] */
};

/* What opening the log found. */
struct k25_spill_replay {
    struct k25_spill_entry *pend; /* [n_pend] unfinished, in log (arrival) order (malloc'd) */
    int n_pend;
    int n_records, n_done;
    int64_t torn_bytes;       /* dropped tail */
    char warning[256];
};

/*
 * Opens (creating the folder and file as needed) the log in dir, reads
 * every record, truncates a torn tail (a record cut short or failing its
 * CRC, and whatever follows it) with a warning in *rep, and compacts the
 * log to empty when no request in it is unfinished.  io NULL: the
 * system's write and fsync.  K25_EIO naming the path on failure.
 */
int k25_spill_open(struct k25_spill_log *lg, const char *dir, const struct k25_spill_io *io,
                   struct k25_spill_replay *rep, struct k25_error *err);
void k25_spill_replay_free(struct k25_spill_replay *rep);
/*
 * Appends req's record and fsyncs; *seq gets its number.  On a failed
 * write or fsync the log is cut back to its previous end (so the record
 * never comes back) and K25_EIO names the call and errno.
 */
int k25_spill_append(struct k25_spill_log *lg, const struct k25_request *req, uint64_t *seq,
                     struct k25_error *err);
/* Appends a done record for seq and fsyncs; compacts when none is left live. */
int k25_spill_done(struct k25_spill_log *lg, uint64_t seq, struct k25_error *err);
void k25_spill_close(struct k25_spill_log *lg);
/* Replaces the write/fsync calls (NULL members or io: the system's). */
void k25_spill_set_io(struct k25_spill_log *lg, const struct k25_spill_io *io);

/* -------------------------------------------------------- circuit breaker */

#define K25_BREAKER_WINDOW_NS 1000000000ull /* busy fraction over the last second */
#define K25_BREAKER_BUCKETS 20
#define K25_BREAKER_MARGIN 0.05             /* close below threshold - margin */

struct k25_breaker {
    bool enabled, open;
    double busy_thr, mem_thr;
    uint64_t hold_ns;         /* breaker_busy_seconds */
    int64_t mem_limit_bytes;  /* memory_budget_mb, else cgroup limit, else MemAvailable at start */
    uint64_t t_start;         /* first time seen */
    uint64_t bucket_ns;
    uint64_t bucket_busy[K25_BREAKER_BUCKETS];
    uint64_t bucket_epoch[K25_BREAKER_BUCKETS]; /* (t / bucket_ns) + 1 the bucket holds; 0 = empty */
    uint64_t over_since, under_since;           /* 0 = not in that condition */
    double busy, mem;         /* last measured fractions */
};

/* Sets the thresholds from cfg; reads the memory limit when enabled. */
void k25_breaker_init(struct k25_breaker *b, const struct k25_config *cfg, uint64_t now_ns);
/* Counts one engine step [t0, t1) as busy in proportion to occupancy in [0, 1]: the share of
 * the engine's capacity it used (1 when requests wait; else running / max_batch_size). */
void k25_breaker_record(struct k25_breaker *b, uint64_t t0, uint64_t t1, double occupancy);
/* Re-evaluates at now with the engine holding mem_bytes: +1 opened, -1 closed, 0 no change. */
int k25_breaker_update(struct k25_breaker *b, uint64_t now_ns, int64_t mem_bytes);

/* -------------------------------------------------------- TEST-ONLY hooks */

/* The engine's clock for queue times, timeouts, step times and the breaker
 * (default k25_now_ns).  NULL restores it. */
typedef uint64_t (*k25_clock_fn)(void *user);
void k25_engine_set_clock(k25_engine_t *e, k25_clock_fn fn, void *user);
/* The spill log's write/fsync (fault injection).  NULL restores the system's. */
void k25_engine_set_spill_io(k25_engine_t *e, const struct k25_spill_io *io);
/* Like k25_engine_create, with the spill log opened through io (replay included). */
int k25_engine_create_io(const struct k25_config *cfg, const k25_model_t *model, const struct k25_spill_io *io,
                         k25_engine_t **out, struct k25_error *err);

#endif
