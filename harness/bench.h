/*
 * bench.h - internal interface of `k25 bench` (harness-internal; the
 * command front ends are declared in harness.h).
 *
 * The pieces, one file each:
 *   stats.c       percentiles (nearest rank), order-statistic confidence
 *                 intervals, moments, Student-t intervals for repetitions
 *   loadgen.c     request order, open-loop arrival schedules, and the event
 *                 loop that drives the engine from the calling thread
 *   metrics.c     per-request metrics and the run summary (struct
 *                 k25_bench_summary) computed from the recorded events
 *   bench_json.c  the summary as JSON and as text
 *   provenance.c  what ran where: build, machine, dataset, config
 *   trace.c       the HDF5 trace file (through h5store) and reading it back
 *   inspect.c     `k25 inspect`: printing a stored run, Chrome trace export
 *   bench.c       k25_bench_run: the whole measurement, start to finish
 *
 * Times inside a run are nanoseconds relative to the run's origin t0_ns
 * (a k25_now_ns() stamp taken when the first measured repetition starts).
 */
#ifndef K25_BENCH_H
#define K25_BENCH_H

#include "k25.h"
#include "harness.h" /* enum k25_pctl_method, struct k25_pctl_spec */

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------- stats */

#define K25_NPCTL 4
extern const double k25_pctl_q[K25_NPCTL]; /* 0.50, 0.90, 0.95, 0.99 */

/* One percentile: NaN value/bounds where the sample cannot support them. */
struct k25_pctl {
    double q;         /* 0.5 for P50 */
    bool supported;   /* n >= ceil(1 / (1 - q)) */
    double value;     /* nearest-rank value, NaN when !supported */
    double ci_lo;     /* 95% distribution-free bounds (order statistics), NaN when the */
    double ci_hi;     /* sample has no order statistic far enough out */
    double coverage;  /* exact coverage of [ci_lo, ci_hi] (NaN when a bound is missing) */
};

/* A distribution of one metric.  NaN fields where n is too small. */
struct k25_dist {
    int64_t n;
    double mean, stdev, min, max; /* stdev: sample (n - 1); NaN for n < 2 */
    struct k25_pctl p[K25_NPCTL];
};

/* Nearest-rank rank (1-based) of quantile q in (0, 1] among n samples: ceil(q n). */
size_t k25_stats_rank(size_t n, double q);
/* Whether n samples support quantile q: n (1 - q) >= 1 (q = 1 never, use max). */
bool k25_stats_supported(size_t n, double q);
/*
 * Ranks (1-based) of the order statistics bounding quantile q with at least
 * `conf` confidence, whatever the distribution: lo is the largest rank with
 * P(Bin(n,q) <= lo-1) <= (1-conf)/2, hi the smallest with
 * P(Bin(n,q) >= hi) <= (1-conf)/2.  *lo = 0 or *hi = n+1 when no order
 * statistic is far enough out.  *coverage (may be NULL) is the exact
 * P(lo <= Bin < hi) (NaN when a bound is missing).
 */
void k25_stats_quantile_ci(size_t n, double q, double conf, size_t *lo, size_t *hi, double *coverage);
/* Sorts v[n] ascending in place and describes it.  NaN samples are not allowed. */
void k25_stats_describe(double *v, size_t n, struct k25_dist *out);
/* Two-sided Student t quantile: t such that P(T_df <= t) = p (p in [0.9, 0.9995]). */
double k25_stats_t_quantile(int df, double p);
/* Mean and 95% Student-t interval of v[n] (NaN values skipped); bounds NaN for n < 2. */
void k25_stats_mean_ci(const double *v, size_t n, double *mean, double *lo, double *hi, int *n_used);

/* ------------------------------------------------------------ workload */

enum k25_bench_mode { K25_BENCH_CLOSED, K25_BENCH_OPEN };

/* Service-level objectives for goodput; 0 = no objective on that metric. */
struct k25_bench_slo {
    double ttft_ms, tpot_ms, itl_ms, e2e_ms;
    bool any;
};

/* Parses "ttft_ms=500,tpot_ms=50" (keys ttft_ms, tpot_ms, itl_ms, e2e_ms). */
int k25_bench_slo_parse(const char *s, struct k25_bench_slo *out, struct k25_error *err);

/* What to run.  k25_bench_opts_init fills the defaults. */
struct k25_bench_opts {
    const char *dataset;        /* gold-set path (required) */
    const char *filter;         /* filter expression or NULL */
    const char *out;            /* HDF5 trace path (required) */
    const char *json_out;       /* JSON summary path or NULL */
    enum k25_bench_mode mode;   /* open when rate_rps > 0 */
    int concurrency;            /* closed: users; open: cap on requests in flight (0 = none) */
    int64_t requests;           /* measured requests per repetition (0 = use duration_s) */
    double duration_s;          /* 0 = use requests */
    double rate_rps;            /* open loop arrival rate */
    double burstiness;          /* gamma shape (1 = Poisson) */
    int64_t warmup;             /* requests run (closed loop) and discarded first */
    int repeat;                 /* measurement repetitions */
    struct k25_bench_slo slo;
    bool progress;              /* live progress line on stderr */
    const char *cmdline;        /* for provenance; may be NULL */
    volatile sig_atomic_t *stop; /* set non-zero (a signal) to end the run early; may be NULL */
    /* Test hook: sleep stall_ns before the first engine step that starts
     * at or after stall_at_ns into the first repetition (-1: never).  It is
     * counted as engine time, as a real stall would be. */
    int64_t stall_at_ns;
    int64_t stall_ns;
    bool fidelity;              /* measure fidelity against the exact engine (fidelity.c) */
    int fidelity_tokens;        /* generated positions compared per request (default 64) */
    /* k25 bench --endpoint (endpoint.c): an OpenAI-compatible server instead of the engine */
    const char *endpoint;       /* base URL (http://host:port[/v1]) or NULL: the in-process engine */
    const char *endpoint_model; /* model name sent; NULL = the first of the server's GET /v1/models */
    const char *api_key;        /* sent as "Authorization: Bearer KEY" when not NULL */
    bool endpoint_chat;         /* POST /v1/chat/completions instead of /v1/completions */
    bool ignore_eos;            /* send "ignore_eos": true (vLLM, llama.cpp): generate max_tokens */
    double stall_timeout_s;     /* a stream without a byte for this long fails (default 30) */
    double request_timeout_s;   /* a request taking longer fails (default 600) */
    /* --surge FACTOR:START_S:DURATION_S (open loop): the rate is rate_rps x
     * surge_factor from surge_start_s for surge_duration_s, rate_rps before
     * and after (surge_factor 0: no surge).  loadgen.c */
    double surge_factor;
    double surge_start_s;
    double surge_duration_s;
    /* how percentiles are read (--percentile-method; default nearest rank): the summary's and the table's */
    enum k25_pctl_method pctl_method;
    bool pctl_table;            /* --metric-percentiles / --percentile-metrics given: report pctl as well */
    struct k25_pctl_spec pctl;  /* the chosen percentiles and metrics (k25_pctl_spec_init by opts_init) */
    const char *csv_out;        /* --csv: one row per request (csv.c), or NULL */
};

void k25_bench_opts_init(struct k25_bench_opts *o);

/* One request ready to submit (a gold-set request, tokenized). */
struct k25_bench_input {
    char id[64];
    int32_t *ids;        /* [n_ids], owned */
    int n_ids;
    int max_new;         /* expected_output_length (the engine caps it at decode_max_tokens) */
    int64_t line;        /* line in the gold set */
    bool pretokenized;   /* from the line's input_ids (else ids are the text's bytes) */
    enum k25_priority priority; /* the gold set's `priority` (standard when absent) */
};

/* Deterministic order of n requests for a seed (Fisher-Yates, splitmix64); caller frees. */
size_t *k25_loadgen_order(size_t n, uint64_t seed);
/*
 * Open-loop arrivals: inter-arrival times drawn from a gamma distribution of
 * shape `burstiness` and mean 1/rate_rps (burstiness 1: exponential,
 * i.e. Poisson arrivals; below 1 burstier, above 1 more even).  The first
 * arrival is one interval after 0.  Generates max_n arrivals, or (max_n == 0)
 * every arrival before duration_ns.  *out is malloc'd nanoseconds.
 */
int k25_loadgen_schedule(double rate_rps, double burstiness, uint64_t seed, int64_t max_n,
                         int64_t duration_ns, int64_t **out, size_t *n_out, struct k25_error *err);
/*
 * The same with a surge: the rate is rate_rps x factor inside
 * [start_ns, start_ns + len_ns), rate_rps outside (time-varying rate: each
 * gamma draw is a unit-rate interval, stretched by the rate in force where
 * the previous arrival fell).  factor 0 or 1 is k25_loadgen_schedule.
 */
int k25_loadgen_schedule_surge(double rate_rps, double burstiness, double factor, int64_t start_ns, int64_t len_ns,
                               uint64_t seed, int64_t max_n, int64_t duration_ns, int64_t **out, size_t *n_out,
                               struct k25_error *err);
/*
 * The arrival clock both load generators share (the in-process engine's,
 * loadgen.c, and the HTTP client's, endpoint.c).  Open loop: the seeded
 * schedule of o (rate, burstiness, surge) from start_ns; closed loop:
 * `users` users, each sending its next request when its last one ended
 * (intended time = when it became free, so latencies count from there).
 */
struct k25_arrivals {
    bool open;
    int64_t start_ns;
    int64_t total;        /* requests to send; 0 = closed loop for duration_ns */
    int64_t duration_ns;
    int64_t *sched;       /* [n_sched] open loop: offsets from start_ns (malloc'd) */
    size_t n_sched;
    int64_t *free_at;     /* [users] closed loop: when each user is free, -1 busy (malloc'd) */
    int users, users_free;
};
/* K25_EINVAL for a surge without an open loop; K25_ENOMEM. */
int k25_arrivals_init(struct k25_arrivals *a, const struct k25_bench_opts *o, bool open, int users, uint64_t seed,
                      int64_t n_requests, uint64_t start_ns, struct k25_error *err);
void k25_arrivals_free(struct k25_arrivals *a);
/* Whether requests remain to be sent after `issued` of them, at now. */
bool k25_arrivals_more(const struct k25_arrivals *a, int64_t issued, uint64_t now_ns);
/* The next request is due at now: *intended gets its intended send time and *user the user that
 * sends it (-1 in an open loop); that user is busy until k25_arrivals_user_free. */
bool k25_arrivals_due(struct k25_arrivals *a, int64_t issued, uint64_t now_ns, int64_t *intended, int *user);
/* User `user` (ignored when < 0) finished its request at t_ns. */
void k25_arrivals_user_free(struct k25_arrivals *a, int user, int64_t t_ns);
/* Open loop: when the next arrival is due (ns), -1 when none is left or in a closed loop. */
int64_t k25_arrivals_next_ns(const struct k25_arrivals *a, int64_t issued);

/* Parses --surge "FACTOR:START_S:DURATION_S" (each > 0, FACTOR > 1; an empty FACTOR is 5,
 * i.e. +400%) into o->surge_*.  K25_EINVAL naming the part otherwise. */
int k25_bench_surge_parse(const char *s, struct k25_bench_opts *o, struct k25_error *err);

/* ------------------------------------------------------------- records */

/* One measured request, as recorded.  Times relative to the run's t0. */
struct k25_bench_req {
    char id[64];
    int64_t seq;             /* position in the repetition's request sequence */
    int32_t rep;             /* repetition (0-based) */
    int32_t user;            /* closed loop: user; open loop: -1 */
    int64_t line;            /* gold-set line */
    enum k25_req_state state;
    char reason[128];
    int32_t n_input, n_output, max_new;
    int64_t arrival_ns;      /* scheduled arrival (open) / when the user was ready (closed) */
    int64_t submit_ns;       /* when k25_engine_submit was called */
    int64_t admit_ns;        /* left the engine's waiting queue (-1 if never) */
    int64_t first_ns;        /* first token (-1 if none) */
    int64_t finish_ns;
    int64_t *token_ns;       /* [n_output], owned */
    int32_t *token_ids;      /* [n_output], owned */
    float *token_margins;    /* [n_output] top-1 margins (k25_result.margins: the token-identity rule's
                                input; NaN where sampled), owned; NULL when unknown (schema 1 traces) */
    int32_t n_chunks;
    int64_t *chunk_start_ns; /* [n_chunks] start of the engine step that ran the chunk, owned */
    int64_t *chunk_end_ns;   /* [n_chunks] */
    /* --endpoint only (not stored in the trace: the reason says it) */
    int32_t http_status;     /* 0: no response */
    bool tokens_counted;     /* n_output counted from the stream's chunks: the server sent no usage */
    /* Elastic queue (k25_result; schema 3, false/standard in older traces) */
    enum k25_priority priority; /* the priority it ran at (low once spilled) */
    bool spilled, replayed, degraded;
    int32_t ttft_sla_ms;     /* its first-token SLA (degraded / low priority), 0: the run's own */
    /* Prefix caching (k25_result.cached_tokens): prompt tokens reused from the cache.  In-process
     * engine only and not stored in the trace: 0 for requests read back from one. */
    int32_t cached_tokens;
};

/* The 100 ms timeline. */
#define K25_BENCH_WINDOW_NS 100000000LL
struct k25_bench_window {
    int64_t t_ns;            /* window start */
    int64_t len_ns;          /* K25_BENCH_WINDOW_NS, shorter for the last window */
    double busy_ns;          /* engine busy time inside the window */
    int32_t rep;
    int32_t n_waiting;       /* engine waiting queue + requests due but held back by the cap */
    int32_t n_running;
    int64_t kv_blocks;
    int64_t mem_bytes;       /* tracked engine memory */
    /* Elastic queue, sampled with n_waiting (k25_engine_get_stats; schema 3, -1 / NaN in older traces) */
    int32_t n_waiting_memory;
    int32_t n_waiting_spill;
    int32_t breaker_open;    /* 0 / 1 */
    double breaker_busy_fraction; /* the breaker's sliding-window busy fraction (NaN when disabled) */
};

/* Where the harness's own time went (nanoseconds, all repetitions). */
struct k25_bench_overhead {
    int64_t loop_ns;         /* wall time of the event loops */
    int64_t step_ns;         /* inside k25_engine_step (includes the event callbacks) */
    int64_t submit_ns;       /* inside k25_engine_submit */
    int64_t sleep_ns;        /* waiting for the next arrival */
    int64_t harness_ns;      /* loop - step - submit - sleep */
    int64_t busy_ns;         /* engine busy_ns over the loops (forward passes) */
    int64_t steps;
};

/* Everything a run recorded. */
struct k25_bench_run {
    uint64_t t0_ns;                /* k25_now_ns() origin */
    struct k25_bench_req *reqs;    /* [n_reqs], owned */
    size_t n_reqs, cap_reqs;
    struct k25_bench_window *win;  /* [n_win], owned */
    size_t n_win, cap_win;
    int n_reps;
    int64_t rep_start_ns[64];      /* per repetition, relative */
    int64_t rep_end_ns[64];        /* last finish */
    struct k25_bench_overhead ov;
    int64_t stall_start_ns, stall_end_ns; /* test hook, -1 when none */
    bool interrupted;
    struct k25_mem_stats mem;      /* peaks over the measurement */
    int64_t kv_blocks_peak;
    int64_t warmup_done;
    int64_t output_tokens;         /* sum of n_output (all requests incl. warmup excluded) */
};
#define K25_BENCH_MAX_REPEAT 64

void k25_bench_run_free(struct k25_bench_run *r);

/*
 * Runs one repetition (or the warm-up when record is false) on engine e:
 * the event loop of loadgen.c.  inputs[order[(first + i) % n_inputs]] is the
 * i-th request.  Fails on engine errors, or K25_EIO when *opts->stop is set.
 */
int k25_loadgen_run(k25_engine_t *e, const struct k25_bench_opts *opts, const struct k25_bench_input *inputs,
                    size_t n_inputs, const size_t *order, size_t first, int64_t n_requests, int rep,
                    bool record, struct k25_bench_run *run, struct k25_error *err);

/* ------------------------------------------------------------- summary */

enum { K25_M_TTFT, K25_M_TPOT, K25_M_ITL, K25_M_E2E, K25_M_QUEUE, K25_M_LAG, K25_M_NMETRICS };
extern const char *const k25_metric_names[K25_M_NMETRICS]; /* "ttft_ms", ... */

/* Headline figures, per repetition, for the across-repetition intervals. */
enum { K25_H_TTFT_P50, K25_H_TTFT_P99, K25_H_TPOT_P50, K25_H_E2E_P50, K25_H_OUT_TPS, K25_H_RPS,
       K25_H_GOODPUT, K25_H_NHEAD };
extern const char *const k25_headline_names[K25_H_NHEAD];

struct k25_bench_summary {
    int64_t n_total, n_completed, n_rejected, n_slo_ok;
    /* Elastic queue (docs/metrics.md "Accounting"): every request sent ends
     * completed, timed out or rejected with a reason; n_lost counts those
     * that did not (rejected without a reason, or no final state) and must
     * be 0.  Accepted = n_total - n_rejected. */
    int64_t n_timed_out, n_degraded, n_spilled, n_replayed, n_lost;
    double degraded_requests_ratio; /* n_degraded / accepted; NaN when none was accepted */
    int64_t input_tokens, output_tokens;  /* completed requests, engine counts */
    double duration_s;        /* sum over repetitions of (last finish - repetition start) */
    double requests_per_s, output_tok_per_s, input_tok_per_s;
    double goodput_rps;       /* NaN without an SLO */
    struct k25_dist d[K25_M_NMETRICS];   /* pooled over repetitions, completed requests */
    struct k25_dist busy;     /* busy fraction of the 100 ms windows */
    double head[K25_BENCH_MAX_REPEAT][K25_H_NHEAD]; /* per repetition (NaN: unsupported) */
    double head_mean[K25_H_NHEAD], head_lo[K25_H_NHEAD], head_hi[K25_H_NHEAD];
    int head_n[K25_H_NHEAD];
    int n_reps;
    struct k25_bench_overhead ov;
    double overhead_per_request_us, overhead_per_token_us;
    struct k25_mem_stats mem;
    int64_t kv_blocks_peak;
    /* open loop: the rate asked for, the rate served, and whether the engine kept up
     * (k25_bench_open_loop_check); offered_rps NaN in closed loop */
    double offered_rps, achieved_rps;
    bool fell_behind;
    enum k25_pctl_method pctl_method; /* how the percentiles above were read (zeroed: nearest rank) */
    /* prefix caching: completed requests that reused cached prompt tokens, those tokens, and TTFT
     * split by hit / miss (all zero without enable_prefix_caching) */
    int64_t n_prefix_hit, prefix_hit_tokens;
    struct k25_dist ttft_hit, ttft_miss;
};

/*
 * Open loop: did the system keep up with the offered rate?  It fell behind
 * when it served less than 90% of the offered rate AND requests waited in
 * the queue for more than 10% of their end-to-end latency (P50s): then the
 * run measured the queue's growth, not the engine.  (The first condition
 * alone trips on a short run's tail; the second alone on a burst.)
 */
#define K25_OPEN_LOOP_MIN_SERVED 0.90
#define K25_OPEN_LOOP_MAX_QUEUE_SHARE 0.10
void k25_bench_open_loop_check(struct k25_bench_summary *s, double offered_rps);

/* Per-request metrics (NaN where undefined, e.g. TPOT of a 1-token answer). */
double k25_bench_req_ttft_ms(const struct k25_bench_req *r);
double k25_bench_req_tpot_ms(const struct k25_bench_req *r);
double k25_bench_req_e2e_ms(const struct k25_bench_req *r);
double k25_bench_req_queue_ms(const struct k25_bench_req *r);
double k25_bench_req_lag_ms(const struct k25_bench_req *r);
double k25_bench_req_out_tps(const struct k25_bench_req *r);
bool k25_bench_req_meets_slo(const struct k25_bench_req *r, const struct k25_bench_slo *slo);

/* Computes the summary of a run.  K25_ENOMEM on allocation failure. */
int k25_bench_summarize(const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                        struct k25_bench_summary *out, struct k25_error *err);

/* The summary as a JSON object (new reference; NULL on allocation failure). */
json_t *k25_bench_summary_json(const struct k25_bench_summary *s);
/* Workload settings as a JSON object. */
json_t *k25_bench_workload_json(const struct k25_bench_opts *o, uint64_t seed, size_t n_selected);
/* Human-readable summary. */
void k25_bench_summary_print(FILE *out, const struct k25_bench_summary *s);

/* ----------------------------------------------------------- provenance */

/*
 * Provenance of a run as a JSON object: build (version, git, dirty,
 * compiler, flags), machine (CPU model, flags, cores, governor, boost, load
 * average, GPU/driver, kernel, hostname), threads, BLAS core, seed,
 * effective config, dataset path + SHA-256, filter, command line and the
 * UTC start time.  Fields the system does not expose are null.
 */
json_t *k25_provenance_collect(const struct k25_config *cfg, const char *dataset, const char *sha256,
                               const char *filter, const char *cmdline);
/* Adds end_time_utc (and the load average at the end) to a provenance object. */
void k25_provenance_finish(json_t *prov);
/* ISO 8601 UTC time of now: "2025-01-31T12:34:56Z". */
void k25_utc_now(char buf[32]);

/*
 * The load guard: how busy the machine was just before a measurement
 * started (docs/metrics.md).  Recorded in provenance.machine.load_guard;
 * a busy machine is warned about on stderr and in the report.
 */
struct k25_load_guard {
    int cores;
    double load_now;     /* runnable tasks of other work, mean of 5 samples over 100 ms */
    double loadavg_1m;   /* the kernel's 1-minute load average (lags: informative only) */
    double cpu_busy;     /* fraction of all CPU time busy in that window (other work) */
    double steal;        /* fraction of CPU time the hypervisor took (steal) in that window */
    double busy_limit;   /* 0.5 x cores */
    bool busy;
    char reason[160];    /* why busy */
};
/* Samples the guard (~100 ms); K25_EIO when /proc/stat is unreadable. */
int k25_load_guard_sample(struct k25_load_guard *g);
/* The guard as JSON (new reference). */
json_t *k25_load_guard_json(const struct k25_load_guard *g);

/* A calibration (gate_calib.c) whose trials spread by more than this ((median - fastest) /
 * fastest) cannot say how fast the machine was: `k25 bench` warns, the report says so,
 * and `k25 gate` makes metrics normalized by it UNSURE. */
#define K25_CALIB_MAX_SPREAD 0.10

/* ---------------------------------------------------------------- trace */

/*
 * The HDF5 run file (docs/trace-schema.md).  Creating it first proves the
 * output path is writable before any measurement; write_all fills it and
 * commits (rename into place).  On any failure the temporary file is removed.
 */
struct k25_h5;
int k25_trace_write(struct k25_h5 *h, const struct k25_bench_run *run, const struct k25_bench_summary *s,
                    const char *provenance_json, const char *config_json, const char *workload_json,
                    const char *summary_json, struct k25_error *err);

/* A stored run read back. */
struct k25_trace {
    char *provenance_json, *config_json, *workload_json, *summary_json; /* owned */
    int64_t schema_version;
    struct k25_bench_run run;  /* reqs (with token and chunk arrays), win, n_reps */
};
int k25_trace_read(const char *path, struct k25_trace *t, struct k25_error *err);
/* The same from a file image in memory (buf[len]; the HDF5 core driver; name for messages). */
int k25_trace_read_image(const void *buf, size_t len, const char *name, struct k25_trace *t, struct k25_error *err);
void k25_trace_free(struct k25_trace *t);

/* Writes a run as Chrome/Perfetto trace-event JSON (temporary + rename). */
int k25_trace_export_chrome(const struct k25_trace *t, const char *path, struct k25_error *err);

/* ---------------------------------------------------------------- bench */

/*
 * The whole `k25 bench`: loads and filters the gold set, tokenizes it,
 * creates the trace file (so an unwritable path fails before measuring),
 * loads the model, warms up, runs opts->repeat repetitions, summarizes,
 * writes the trace and the JSON summary, and prints the text summary to
 * `report` (may be NULL).  On failure nothing is left under the final
 * names.  cfg is the effective engine config (its seed seeds the order and
 * the schedule too).  *summary (may be NULL) receives the summary.
 */
int k25_bench_measure(const struct k25_bench_opts *opts, const struct k25_config *cfg, FILE *report,
                      struct k25_bench_summary *summary, struct k25_error *err);

#endif /* K25_BENCH_H */
