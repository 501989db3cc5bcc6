/*
 * queue.h - the elastic request queue's parts (engine-internal).
 *
 * queue.c keeps the request queues (the memory queue of
 * queue_memory_capacity requests, the disk queue's order, the degraded
 * queue), routes submissions, admits waiting requests into the running
 * batch, and reports finished ones; spill.c makes the disk queue durable
 * (an append-only, fsync'd, checksummed log replayed at create, with
 * group commit); breaker.c decides when new requests go to the degraded
 * model.  engine.c steps the batch and calls queue.c at the points listed
 * under "engine glue".  The test-only setters at the end replace the
 * engine's clock and the spill log's write/fsync so tests run hysteresis
 * in milliseconds and inject I/O faults; the library itself reads no
 * environment.
 */
#ifndef K25_QUEUE_H
#define K25_QUEUE_H

#include "k25.h"

#include <pthread.h>
#include <sys/types.h>

/* ------------------------------------------------------------ spill log */

/* The calls the spill log makes to write; tests replace them. */
struct k25_spill_io {
    ssize_t (*write)(int fd, const void *buf, size_t n, void *user);
    int (*fsync)(int fd, void *user);
    void *user;
};

/* Records lost to a failed fsync: logical positions (lo, hi] (see k25_spill_sync). */
struct k25_spill_lost {
    uint64_t lo, hi;
    char why[200];
};

/*
 * An open spill log: <queue_spill_dir>/queue.log.  Appends and syncs are
 * thread-safe (mu): records are written at once and made durable by group
 * commit (k25_spill_sync).  Positions: "end" counts bytes in the file;
 * "written"/"durable" are logical positions (bytes ever appended, never
 * reused after a cut-back), so a record lost to a failed fsync can be told
 * from a later one at the same file offset.
 */
struct k25_spill_log {
    int fd;               /* -1: no spill tier */
    char path[1100];
    pthread_mutex_t mu;   /* guards everything below (initialised by k25_spill_open) */
    pthread_cond_t cv;    /* a group commit finished */
    bool mu_init;
    bool syncing;         /* a leader is in fsync (outside mu) */
    int64_t end;          /* bytes of whole records in the file */
    int64_t durable_end;  /* bytes of the durable prefix */
    uint64_t written;     /* logical end of what was written */
    uint64_t durable;     /* logical end of what is durable */
    struct k25_spill_lost *lost; /* [n_lost] ranges cut back after failed fsyncs (malloc'd) */
    int n_lost, cap_lost;
    uint64_t next_seq;    /* number of the next request record */
    int64_t live;         /* request records without a durable done record */
    bool broken;          /* a failed append could not be undone: no more spills */
    int64_t n_fsyncs;     /* fsyncs issued (group commits and compactions), for tests and stats */
    /* room for done records (issue 33): every live request has one reserved in the file (fallocate
     * FALLOC_FL_KEEP_SIZE past the end), so a full disk refuses new requests, never a done record */
    int64_t reserved_end; /* the file's blocks are allocated up to here */
    bool no_prealloc;     /* the filesystem cannot preallocate: no reservation (docs/serve.md) */
    uint64_t *owed;       /* [n_owed] requests answered whose done record could not be made durable:
                             retried at every flush and at shutdown, dropped by the shutdown compaction */
    int n_owed, cap_owed;
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
 * Writes req's record (one write, not yet durable); *seq gets its number
 * and *lsn the logical position after it, to pass to k25_spill_sync.  On a
 * failed write the record is cut back at once (the records before it stay)
 * and K25_EIO names the call and errno.  Thread-safe.
 */
int k25_spill_append(struct k25_spill_log *lg, const struct k25_request *req, uint64_t *seq, uint64_t *lsn,
                     struct k25_error *err);
/* Writes a done record for seq (not yet durable); *lsn as above.  Thread-safe. */
int k25_spill_append_done(struct k25_spill_log *lg, uint64_t seq, uint64_t *lsn, struct k25_error *err);
/*
 * Group commit: returns once every record up to lsn is durable.  When no
 * fsync is running the caller leads one covering everything written so
 * far; otherwise it waits for the running one and, if that did not cover
 * lsn, leads the next - so concurrent callers share fsyncs.  When the
 * fsync fails, every record it was to cover (and any written meanwhile) is
 * cut off the file and each caller waiting for one of them gets K25_EIO
 * with the reason: none of them may be acknowledged.  Thread-safe.
 */
int k25_spill_sync(struct k25_spill_log *lg, uint64_t lsn, struct k25_error *err);
/* n requests are no longer live: their done records are durable, or their
 * request records were lost to a failed k25_spill_sync (the caller of that
 * sync retires them).  When none is left live and nothing is pending, the
 * log is truncated to empty (compaction). */
void k25_spill_retire(struct k25_spill_log *lg, int64_t n);
/* append_done + sync + retire for one request (replay). */
int k25_spill_done(struct k25_spill_log *lg, uint64_t seq, struct k25_error *err);
void k25_spill_close(struct k25_spill_log *lg);
/* seq ended but its done record failed: remembered, retried by k25_spill_pay_owed. */
void k25_spill_owe(struct k25_spill_log *lg, uint64_t seq);
/* Writes and syncs the owed done records; they retire on success.  0, or K25_EIO and they stay owed. */
int k25_spill_pay_owed(struct k25_spill_log *lg, struct k25_error *err);
/*
 * At shutdown: pays the owed done records, then compacts - truncates the log when nothing in it is
 * live, otherwise rewrites it (temporary file, fsync, rename) with only the request records that
 * have no done record and are not owed: an answered request never runs again, even when its done
 * record could not be written.  *n_kept gets the requests left for replay.  0 or K25_EIO (the log
 * is then as it was: whole records, replayable).
 */
int k25_spill_shutdown(struct k25_spill_log *lg, int *n_kept, struct k25_error *err);
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

/* ------------------------------------------------------ request queues */

/* A FIFO of request handles: h[head, end) of a growable array (malloc'd). */
struct k25_fifo {
    int *h;
    int head, end, cap;
};

/* A submission routed but not yet acknowledged (group commit, queue.c). */
struct k25_staged {
    int handle;
    int route;            /* queue.c's enum route */
    uint64_t lsn;         /* its spill record's end, 0 when it has none */
};

/*
 * The engine's elastic queue state (struct k25_engine.q).  Every array is
 * malloc'd and freed by k25_queue_free; handles index the engine's slots.
 */
#define K25_QUEUE_STEP_WINDOW 33 /* 32 step periods */

struct k25_queue {
    struct k25_fifo mem;      /* memory queue (full model): high first, then arrival order */
    struct k25_fifo disk;     /* disk queue: spilled requests, arrival order */
    struct k25_fifo deg;      /* degraded queue (breaker open at arrival): high first, then arrival order */
    int n_running_deg;        /* degraded requests in the running batch */
    int deg_slots;            /* batch slots of the degraded model, beside max_batch_size */
    int *announce;            /* rejected on arrival: FINISH events due at the next step */
    int n_announce, announce_cap;
    int *fin;                 /* ended: FINISH events due once their done records are durable */
    int n_fin, fin_cap;
    uint64_t fin_lsn;         /* logical end of the pending done records */
    struct k25_staged *staged; /* [n_staged] submissions of the batch being committed */
    int n_staged, staged_cap;
    struct k25_spill_log spill; /* fd -1 without queue_spill_dir */
    struct k25_replay_info replay; /* what create found in the log; handles -> replayed */
    int *replayed;            /* [replay.n_replayed] */
    struct k25_breaker breaker;
    /* degraded service (admission control), in engine steps: moving means over finished
     * degraded requests of the steps from admission to first token and to finish; and the
     * engine clock's moving mean of one step's period (end to end while steps run back to
     * back, so it includes submission and spill fsyncs between them) */
    double deg_first_steps, deg_service_steps;
    int64_t deg_samples;
    double step_period_ns;
    uint64_t step_ends[K25_QUEUE_STEP_WINDOW]; /* ring: end times of the last steps run back to back */
    int64_t n_step_ends;
    bool chained;             /* work was running or waiting as this step began */
    int64_t rejected_degraded; /* degraded arrivals turned away (their SLA could not be met) */
};

/* ------------------------------------------------------------ engine glue */

struct k25_engine;
struct k25_slot;

/* queue.c: the engine's clock (k25_now_ns unless a test replaced it). */
uint64_t k25_queue_now(const struct k25_engine *e);
/* Sizes the queue for cfg (degraded slots); the breaker starts at now. */
void k25_queue_init(struct k25_engine *e);
/* Opens the spill log and re-submits its unfinished requests (create). */
int k25_queue_spill_start(struct k25_engine *e, const struct k25_spill_io *io, struct k25_error *err);
void k25_queue_free(struct k25_engine *e);
/* Step start: FINISH events of requests rejected on arrival, timeouts, then admission. */
void k25_queue_announce(struct k25_engine *e);
void k25_queue_admit(struct k25_engine *e);
/* Whether any request waits (memory, disk or degraded queue). */
bool k25_queue_waiting(const struct k25_engine *e);
/* A step ran from t0 to t1 on the engine clock: the step-period estimate. */
void k25_queue_step_timed(struct k25_engine *e, uint64_t t0, uint64_t t1);
/* Re-evaluates the circuit breaker at now and logs a transition. */
void k25_queue_breaker_tick(struct k25_engine *e, uint64_t now);
/* A request ended (its blocks are back): writes its done record; its FINISH
 * event waits for k25_queue_flush.  now: the engine clock, for the
 * degraded service estimate (0: not a service sample). */
void k25_queue_ended(struct k25_engine *e, int h, uint64_t now);
/* Makes the pending done records durable (one fsync) and emits their FINISH events. */
void k25_queue_flush(struct k25_engine *e);
/* Queue depths and counts into the engine's stats. */
void k25_queue_stats(const struct k25_engine *e, struct k25_engine_stats *out);

/* engine.c: what queue.c needs from the engine. */
void k25_engine_slot_free(struct k25_engine *e, struct k25_slot *sl);
void k25_engine_emit(struct k25_engine *e, enum k25_event_type type, int handle, int32_t tok, int index,
                     uint64_t t_ns);
/* Completes a running request (result figures, blocks back); its FINISH follows k25_queue_flush. */
void k25_engine_finish(struct k25_engine *e, int h, enum k25_finish_reason f, uint64_t now);
/* Prefix caching at admission: the request takes the cached blocks of its prompt. */
void k25_engine_prefix_attach(struct k25_engine *e, struct k25_slot *sl);

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
