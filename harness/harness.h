/*
 * harness.h - public interface of harness/, the measurement layer: what
 * `k25 bench`, `k25 serve`, `k25 attn-bench`, `k25 inspect` and
 * `k25 checksum` do, callable without a process (the commands themselves
 * are in cli/).  Sweeps, reports, gates and the CLI build on it.
 *
 * The pieces, one file each:
 *   stats.c       percentiles (nearest rank or linear), order-statistic
 *                 confidence intervals, moments, Student-t intervals for
 *                 repetitions
 *   loadgen.c     request order, open-loop arrival schedules, and the event
 *                 loop that drives the engine from the calling thread
 *   arrivals.c    the other arrival processes: constant, linear ramp, trace replay
 *   progress.c    the progress reporter of every long command (bar or lines)
 *   metrics.c     per-request metrics and the run summary (struct
 *                 k25_bench_summary) computed from the recorded events
 *   bench_json.c  the summary as JSON and as text
 *   csv.c         the per-request CSV (`k25 bench --csv`)
 *   provenance.c  what ran where: build, machine, dataset, config
 *   calib.c       the calibration workload every run measures beside its
 *                 own measurement (k25 gate normalizes by it)
 *   trace.c       the HDF5 trace file (through util's HDF5 store) and
 *                 reading it back
 *   fidelity.c    lossy settings against the exact engine (fidelity.h)
 *   endpoint.c    the load generator against an OpenAI-compatible server
 *                 (endpoint.h, sse.c)
 *   servermetrics.c  the server's Prometheus metrics beside an endpoint run
 *   gputelemetry.c   NVML samples, GPU provenance and gpu_utilization_p95
 *   vllm_result.c    --save-result's vLLM field names
 *   inspect.c     `k25 inspect`: printing a stored run, Chrome trace export
 *   bench.c       k25_bench_run: the whole measurement, start to finish
 *   serve.c, serve_api.c, serve_limits.c, serve_logprobs.c  `k25 serve` (serve_int.h;
 *                 serve_logprobs.c: logprobs; serve_limits.c: connection
 *                 deadlines, per-connection watchdog, API key check)
 *   attnbench.c   the attention microbenchmark (`k25 attn-bench`)
 *   checksum.c    `k25 checksum`: a model directory's hashes and shapes
 *   testknob.c    TEST-ONLY degradation knobs and the hold before measuring
 *
 * fidelity.h, endpoint.h, sse.h and serve_int.h are internal to harness/:
 * the build gives folders above only this header (README.md, "Source
 * layout").
 *
 * Times inside a run are nanoseconds relative to the run's origin t0_ns
 * (a k25_now_ns() stamp taken when the first measured repetition starts).
 */
#ifndef K25_HARNESS_H
#define K25_HARNESS_H

#include "k25.h"

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------ percentiles (stats.c, metrics.c) */

/*
 * How a percentile is read off n sorted samples x[0..n-1]:
 *   K25_PCTL_NEAREST_RANK  x[ceil(q n) - 1], always an observed value (k25's default);
 *   K25_PCTL_LINEAR        x[h] + (h - floor h)(x[floor h + 1] - x[floor h]), h = (n - 1) q:
 *                          numpy.percentile's default ("linear", Hyndman & Fan type 7),
 *                          for comparing figures with numpy-based tools (vLLM, GenAI-Perf).
 * Either way a percentile the sample cannot support (n (1 - q) < 1) is NaN.
 */
enum k25_pctl_method { K25_PCTL_NEAREST_RANK, K25_PCTL_LINEAR };
/* "nearest-rank" or "linear" (what outputs print); 0 / K25_EINVAL naming --percentile-method. */
const char *k25_pctl_method_name(enum k25_pctl_method m);
int k25_pctl_method_parse(const char *s, enum k25_pctl_method *out, struct k25_error *err);
/* Quantile q in (0, 1) of sorted[n] by method m (no support check); NaN for n == 0. */
double k25_stats_quantile(const double *sorted, size_t n, double q, enum k25_pctl_method m);

/*
 * Which percentiles a run reports, and of which metrics: vLLM's
 * --metric-percentiles "50,90,99" and --percentile-metrics "ttft,tpot,itl,e2el".
 * k25_pctl_spec_init gives today's report: nearest rank; P50, P90, P95, P99;
 * every latency metric (ttft_ms, tpot_ms, itl_ms, e2e_ms, queue_ms, sched_lag_ms).
 */
#define K25_PCTL_MAX 16
#define K25_PCTL_MAX_METRICS 8
struct k25_pctl_spec {
    enum k25_pctl_method method;
    int n_q;
    double q[K25_PCTL_MAX];             /* in (0, 1), ascending, distinct */
    int n_metrics;
    int metric[K25_PCTL_MAX_METRICS];   /* K25_M_* (below) */
};
void k25_pctl_spec_init(struct k25_pctl_spec *s);
/* "50,90,99.9" (percent, each in (0, 100)) into s->q, sorted; K25_EINVAL naming --metric-percentiles. */
int k25_pctl_spec_parse_list(struct k25_pctl_spec *s, const char *list, struct k25_error *err);
/* "ttft,tpot,itl,e2el" (vLLM names) or k25 names (ttft_ms, e2e_ms, queue_ms, sched_lag_ms);
 * K25_EINVAL naming --percentile-metrics and listing the names. */
int k25_pctl_spec_parse_metrics(struct k25_pctl_spec *s, const char *list, struct k25_error *err);
/* "p50", "p99.9": the key of quantile q in JSON and tables. */
void k25_pctl_label(double q, char *buf, size_t n);

/* k25_stats_describe (below) with the percentiles read by method m (the intervals stay
 * order statistics); k25_stats_describe is this with K25_PCTL_NEAREST_RANK. */
struct k25_dist;
void k25_stats_describe_method(double *v, size_t n, enum k25_pctl_method m, struct k25_dist *out);
/* k25_bench_summarize (below) with every percentile of the summary read by method m;
 * k25_bench_summarize is this with K25_PCTL_NEAREST_RANK. */
struct k25_bench_run;
struct k25_bench_slo;
struct k25_bench_summary;
int k25_bench_summarize_method(const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                               enum k25_pctl_method m, struct k25_bench_summary *out, struct k25_error *err);

/* The chosen percentiles of a run's metrics (the same samples as the summary's). */
struct k25_pctl_table {
    struct k25_pctl_spec spec;
    struct {
        int64_t n;                      /* samples */
        double value[K25_PCTL_MAX];     /* NaN where unsupported */
    } row[K25_PCTL_MAX_METRICS];        /* in spec.metric order */
};
/* Computes tab from a run's completed requests, all repetitions pooled.  0 or K25_ENOMEM. */
int k25_bench_percentiles(const struct k25_bench_run *run, const struct k25_pctl_spec *spec,
                          struct k25_pctl_table *tab, struct k25_error *err);
/* {"method": "linear", "percentiles": [50, 99], "ttft_ms": {"n": 12, "p50": .., "p99": null}, ...}
 * (new reference; NULL when out of memory). */
json_t *k25_pctl_table_json(const struct k25_pctl_table *tab);
/* "percentiles (linear interpolation, as numpy's default):" then one line per metric. */
void k25_pctl_table_print(FILE *out, const struct k25_pctl_table *tab);

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

/* ------------------------------------------------------------ progress (progress.c) */

/*
 * Progress of a long command on stderr (docs/cli.md "Progress"): --progress auto (a bar on a
 * terminal, plain lines when stderr is a pipe or a file), bar, lines, off.  Lines: at the start,
 * every K25_PROGRESS_LINE_S seconds (K25_PROGRESS_INTERVAL_S in the environment overrides) with
 * done/total, rate, elapsed and ETA, and at the end.
 */
enum k25_progress_mode { K25_PROGRESS_AUTO, K25_PROGRESS_BAR, K25_PROGRESS_LINES, K25_PROGRESS_OFF };
#define K25_PROGRESS_LINE_S 10.0
#define K25_PROGRESS_BAR_S 0.5
struct k25_progress {
    enum k25_progress_mode mode;  /* resolved: bar, lines or off */
    FILE *out;                    /* stderr */
    char what[64];                /* "k25 bench" */
    char unit[24];                /* "requests" */
    int64_t total;                /* 0: unknown (then duration_s, if any, gives the ETA) */
    double duration_s;
    uint64_t start_ns, last_ns, period_ns;
    int lines;                    /* updates printed */
};
extern const char *const k25_progress_mode_names[]; /* in enum order, NULL-terminated (an option's choices) */
const char *k25_progress_mode_name(enum k25_progress_mode m);
/* "auto", "bar", "lines", "off"; K25_EINVAL naming --progress. */
int k25_progress_mode_parse(const char *s, enum k25_progress_mode *out, struct k25_error *err);
/* off with quiet; auto -> bar when stderr is a terminal, else lines. */
enum k25_progress_mode k25_progress_resolve(enum k25_progress_mode m, bool quiet);
/* Starts reporting (lines: prints the starting line).  mode is resolved here (auto as above). */
void k25_progress_begin(struct k25_progress *p, enum k25_progress_mode mode, const char *what, const char *unit,
                        int64_t total, double duration_s);
/* done so far; prints when the period has passed (a printf-style note after the figures; fmt may be NULL).
 * p may be NULL (no progress). */
void k25_progress_update(struct k25_progress *p, int64_t done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether an update now would print (so a caller computes its note only then).  NULL: false. */
bool k25_progress_due(const struct k25_progress *p);
/* The final line (lines) or clears the bar; later calls print nothing.  p may be NULL. */
void k25_progress_end(struct k25_progress *p, int64_t done, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------ workload */

enum k25_bench_mode { K25_BENCH_CLOSED, K25_BENCH_OPEN };

/* Open-loop arrival processes (arrivals.c; docs/metrics.md "Arrival"). */
enum k25_arrival_kind { K25_ARR_GAMMA, K25_ARR_CONSTANT, K25_ARR_RAMP, K25_ARR_TRACE };
extern const char *const k25_arrival_names[]; /* "gamma", "constant", "ramp", "trace", NULL */
/* Evenly spaced: request i at (i + 1) / rate_rps; max_n of them, or every one before duration_ns. */
int k25_arrivals_constant(double rate_rps, int64_t max_n, int64_t duration_ns, int64_t **out, size_t *n_out,
                          struct k25_error *err);
/* vLLM's linear ramp: request i at rate start + (end - start) i / (n - 1), gamma(burstiness) intervals. */
int k25_arrivals_ramp(double start_rps, double end_rps, double burstiness, uint64_t seed, int64_t n_req,
                      int64_t **out, size_t *n_out, struct k25_error *err);
/* Offsets from a JSONL trace's "timestamp" (ms; Mooncake layout), from its first line, in order; at most
 * max_n (0: all).  K25_EFORMAT naming the file, line and field. */
int k25_arrivals_trace(const char *path, int64_t max_n, int64_t **out, size_t *n_out, struct k25_error *err);
/*
 * The request shapes of the same trace (Mooncake layout): each line's input_length and output_length
 * (tokens) and hash_ids (ids of K25_TRACE_BLOCK_TOKENS-token prompt blocks; equal ids, equal blocks: the
 * shared prefixes a prefix cache reuses).  Either every line has both lengths or none has (then *out is
 * NULL: arrivals only); a length without the other, a length <= 0 (input) or < 1 (output), or hash_ids
 * that are not an array of integers >= 0 is K25_EFORMAT naming the file, line and field.
 */
#define K25_TRACE_BLOCK_TOKENS 512
struct k25_trace_shape {
    int32_t input_length, output_length;
    int64_t *hash_ids; /* [n_hash], owned (NULL: none) */
    int n_hash;
};
int k25_arrivals_trace_shapes(const char *path, int64_t max_n, struct k25_trace_shape **out, size_t *n_out,
                              struct k25_error *err);
void k25_trace_shapes_free(struct k25_trace_shape *s, size_t n);

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
    enum k25_arrival_kind arrivals; /* open loop: gamma (default), constant, ramp, trace */
    double ramp_start_rps, ramp_end_rps; /* K25_ARR_RAMP */
    const char *trace_file;     /* K25_ARR_TRACE: JSONL of arrival timestamps */
    int64_t warmup;             /* requests run (closed loop) and discarded first */
    int repeat;                 /* measurement repetitions */
    struct k25_bench_slo slo;
    enum k25_progress_mode progress; /* on stderr (progress.c); k25_bench_opts_init: off */
    struct k25_progress *prog;  /* the run's reporter (bench.c sets it; NULL: none) */
    const char *cmdline;        /* for provenance; may be NULL */
    volatile sig_atomic_t *stop; /* set non-zero (a signal) to end the run early; may be NULL */
    /* Test hook: sleep stall_ns before the first engine step that starts
     * at or after stall_at_ns into the first repetition (-1: never).  It is
     * counted as engine time, as a real stall would be. */
    int64_t stall_at_ns;
    int64_t stall_ns;
    bool fidelity;              /* measure fidelity against the exact engine (fidelity.c) */
    int fidelity_tokens;        /* generated positions compared per request (default 64) */
    bool fidelity_degraded;     /* measure the degraded model against the full one, breaker or not */
    /* k25 bench --endpoint (endpoint.c): an OpenAI-compatible server instead of the engine */
    const char *endpoint;       /* base URL (http://host:port[/v1]) or NULL: the in-process engine */
    const char *endpoint_model; /* model name sent; NULL = the first of the server's GET /v1/models */
    const char *api_key;        /* sent as "Authorization: Bearer KEY" when not NULL */
    bool endpoint_chat;         /* POST /v1/chat/completions instead of /v1/completions */
    bool ignore_eos;            /* send "ignore_eos": true (vLLM, llama.cpp): generate max_tokens */
    const char *tokenizer;      /* --endpoint --tokenizer DIR: each prompt counted client-side with DIR's
                                   tokenizer.json (chat: through its chat template) beside the server's
                                   usage.prompt_tokens; NULL: not counted */
    const char *chat_template;  /* with tokenizer: a named template instead of the recognised one */
    const char *server_metrics; /* --server-metrics: "auto" (the endpoint's /metrics) or a URL; NULL: none */
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
    bool vllm_result;           /* --save-result: vLLM's result fields beside k25's (vllm_result.c) */
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
    enum k25_hint hint;  /* the gold set's `block_pattern_hint` (auto when absent) */
    int32_t *sections;   /* [n_sections] token positions of section starts in ids (owned; NULL when none or
                          * pretokenized: the text is not known) */
    int n_sections;
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

/* A recorded request's reason: the engine's (K25_REASON_MAX) or "HTTP 503: " and a server's message. */
#define K25_REQ_REASON_MAX 1280

/* One measured request, as recorded.  Times relative to the run's t0. */
struct k25_bench_req {
    char id[64];
    int64_t seq;             /* position in the repetition's request sequence */
    int32_t rep;             /* repetition (0-based) */
    int32_t user;            /* closed loop: user; open loop: -1 */
    int64_t line;            /* gold-set line */
    enum k25_req_state state;
    char reason[K25_REQ_REASON_MAX]; /* whole (a server's message included); stored whole in the trace */
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
    int32_t client_input;    /* --tokenizer: the prompt's tokens counted client-side (0: not counted);
                                n_input is then the server's usage.prompt_tokens */
    /* Elastic queue (k25_result; schema 3, false/standard in older traces) */
    enum k25_priority priority; /* the priority it ran at (low once spilled) */
    bool spilled, replayed, degraded;
    int32_t ttft_sla_ms;     /* its first-token SLA (degraded / low priority), 0: the run's own */
    /* Prefix caching (k25_result.cached_tokens): prompt tokens reused from the cache.  In-process
     * engine only; stored in the trace from schema 4 (0 for requests read back from older ones). */
    int32_t cached_tokens;
    /* KV tiers (k25_result; schema 4, 0 in older traces and with tiers off): block reads of the
     * request's steps, those served without waiting, the time its steps waited for the cold tier
     * and the bytes its blocks moved between tiers.  Its hit rate is hits / reads. */
    int64_t kv_block_reads, kv_block_hits;
    int64_t kv_tier_wait_ns;
    int64_t kv_tier_bytes_moved;
};

/*
 * Run-level figures of the engine's KV tiers and elastic queue over the
 * measured repetitions (k25_engine_stats after minus before; schema 4 /summary
 * attributes).  kv_tiers: the run had tiers on (kv_hot_tokens > 0); measured:
 * the figures are known (false for an endpoint run or a trace older than schema 4).
 */
struct k25_bench_engine_totals {
    bool measured;
    bool kv_tiers;
    int64_t kv_block_reads, kv_block_hits;
    int64_t kv_tier_wait_ns, kv_tier_max_step_wait_ns; /* max: the longest of one step (whole run, warm-up too) */
    int64_t kv_tier_bytes_moved, kv_tier_copy_ns, kv_tier_evictions;
    int64_t kv_tier_promotions, kv_tier_demotions; /* hotness policy's moves (0: positional) */
    int64_t prefix_hit_tokens;
    int64_t rejected_degraded, spill_fsyncs, breaker_opens;
};
/* totals = after - before (max_step_wait: after's). */
void k25_bench_engine_totals_diff(const struct k25_engine_stats *before, const struct k25_engine_stats *after,
                                  bool kv_tiers, struct k25_bench_engine_totals *out);

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
    int32_t n_waiting_degraded; /* in the degraded queue (schema 5, -1 in older traces) */
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
    struct k25_bench_engine_totals eng; /* KV tiers and queue, run level (schema 4) */
};
#define K25_BENCH_MAX_REPEAT 64

void k25_bench_run_free(struct k25_bench_run *r);

/* The settings of one repetition (or the warm-up when record is false).  The caller owns every pointer. */
struct k25_loadgen_settings {
    const struct k25_bench_opts *opts;
    const struct k25_bench_input *inputs; /* [n_inputs] */
    size_t n_inputs;
    const size_t *order;                  /* [n_inputs]: inputs[order[(first + i) % n_inputs]] is request i */
    size_t first;
    int64_t n_requests;                   /* 0: a closed loop for opts->duration_s */
    int rep;
    bool record;                          /* false: the warm-up, nothing recorded, always a closed loop */
    uint64_t seed;                        /* the open loop's arrival schedule */
};

/*
 * One repetition in progress: the part both event loops (the in-process
 * engine's, loadgen.c, and the HTTP client's, endpoint.c) share — the
 * arrival clock, the counts, and the records.  begin → (take_due, retire)*
 * → end; free always.
 */
struct k25_loadgen {
    const struct k25_loadgen_settings *s; /* the caller's */
    struct k25_bench_run *run;            /* the caller's */
    struct k25_arrivals arrivals;
    bool open;
    int cap;                              /* requests in flight at most; 0 = no cap (open loop) */
    int64_t issued, inflight, done;
    uint64_t start_ns;
    int64_t rep_start_ns;                 /* relative to run->t0_ns */
    size_t first_rec;                     /* the repetition's first record in run->reqs */
};
/* A request that is due: its input, its record in run->reqs (-1: not recorded), its user (-1: open loop). */
struct k25_loadgen_due {
    size_t input;
    long rec;
    int user;
};
/* Starts the repetition at now (run->t0_ns too for repetition 0).  K25_EINVAL or K25_ENOMEM. */
int k25_loadgen_begin(struct k25_loadgen *g, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                      struct k25_error *err);
/* Whether requests remain to be issued at now. */
bool k25_loadgen_more(const struct k25_loadgen *g, uint64_t now_ns);
/* The next request if one is due at now and the in-flight cap allows: 1 (and *d, counted issued and in
 * flight, its record made with its intended arrival), 0 when none is, K25_ENOMEM. */
int k25_loadgen_take_due(struct k25_loadgen *g, uint64_t now_ns, struct k25_loadgen_due *d,
                         struct k25_error *err);
/* A request taken from take_due ended at t_ns (finished, or rejected at submission): its user is free. */
void k25_loadgen_retire(struct k25_loadgen *g, int user, int64_t t_ns);
/* Prints the run's progress line when it is due (opts->prog; nothing for the warm-up). */
void k25_loadgen_progress(const struct k25_loadgen *g);
/* Ends a recorded repetition: its interval from its records. */
void k25_loadgen_end(struct k25_loadgen *g);
void k25_loadgen_free(struct k25_loadgen *g);

/*
 * Runs one repetition (or the warm-up) on engine e: the event loop of
 * loadgen.c (issue the due requests in one k25_engine_submit_batch, step
 * once, collect what finished).  Fails on engine errors, or K25_EIO when
 * *s->opts->stop is set.
 */
int k25_loadgen_run(k25_engine_t *e, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                    struct k25_error *err);

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
    /* KV tiers (docs/metrics.md "KV tiers"): kv_cache_hit_rate = block reads served without waiting /
     * all block reads of the measured requests (NaN with tiers off or not measured); wait and bytes moved
     * per completed request (distributions) and for the run (eng) */
    bool kv_tiers;
    double kv_cache_hit_rate;
    int64_t kv_block_reads, kv_block_hits, kv_tier_wait_ns, kv_tier_bytes_moved;
    struct k25_dist kv_wait_ms, kv_bytes_moved, kv_hit_rate_req;
    struct k25_bench_engine_totals eng;
    /* Elastic queue: TTFT of completed requests by priority (K25_PRIORITY_*) and degraded (1) or not (0) */
    struct k25_dist ttft_prio[3][2];
    /* An endpoint run: measured from the client, so the engine's memory, busy fraction and the
     * harness's split of the loop are not visible (null in JSON with K25_NOT_VISIBLE, never 0) */
    bool client_view;
};
#define K25_NOT_VISIBLE "not visible from the client"

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
/* KV block hits / reads of its steps; 1 when it read no block with tiers on, NaN with tiers off
 * (the trace's and the CSV's kv_cache_hit_rate; trace.c). */
double k25_bench_req_kv_hit_rate(const struct k25_bench_req *r, bool kv_tiers);
bool k25_bench_req_meets_slo(const struct k25_bench_req *r, const struct k25_bench_slo *slo);

/* Computes the summary of a run.  K25_ENOMEM on allocation failure. */
int k25_bench_summarize(const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                        struct k25_bench_summary *out, struct k25_error *err);

/* The summary as a JSON object (new reference; NULL on allocation failure). */
json_t *k25_bench_summary_json(const struct k25_bench_summary *s);
/* Workload settings as a JSON object. */
json_t *k25_bench_workload_json(const struct k25_bench_opts *o, uint64_t seed, size_t n_selected);
/* `vllm bench serve`'s result fields (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, request_throughput,
 * output_throughput, ...; vllm_result.c) from a run and its summary (new reference; NULL: no memory). */
json_t *k25_bench_vllm_fields(const struct k25_bench_run *run, const struct k25_bench_summary *s,
                              const struct k25_bench_opts *o);
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
/* NUMA and affinity (provenance.machine.numa): {cpuset, cpuset_cpus, nodes: [{node, cpus, cpus_in_cpuset}],
 * nodes_in_cpuset, memory_policy, mems_allowed, threads, threads_span_nodes}, from sched_getaffinity,
 * /sys/devices/system/node and get_mempolicy (no libnuma); warn (may be NULL / 0) gets a warning when
 * `threads` must span nodes.  New reference. */
json_t *k25_provenance_numa(int threads, char *warn, size_t warn_n);
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

/* A calibration (calib.c) whose trials spread by more than this ((median - fastest) /
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

/* /server_metrics read back (schema 6, `--server-metrics` runs; servermetrics.c writes and reads it). */
#define K25_SRVMET_NFIG 5 /* kv_usage_ratio, n_running, n_waiting, preemptions_total, prefix_cache_hit_rate */
struct k25_srvmet_scrape {
    int64_t t_ns;        /* from the run's origin */
    int32_t http_status; /* 0: no answer */
    double fig[K25_SRVMET_NFIG]; /* NaN where the server exposes none */
};
struct k25_srvmet_value {
    int32_t scrape, series; /* row of scrapes, index into series */
    double value;
};
struct k25_trace_srvmet {
    char *url, *family, *note; /* owned; family "" (no names k25 knows), note "" (metrics came) */
    double period_s;
    struct k25_srvmet_scrape *scrapes;
    size_t n_scrapes;
    char **series; /* [n_series] raw series names (name{labels} as exposed), owned */
    size_t n_series;
    struct k25_srvmet_value *values;
    size_t n_values;
};
/* The k25_srvmet_scrape.fig names, in order ("kv_usage_ratio", ...). */
extern const char *const k25_srvmet_fig_names[K25_SRVMET_NFIG];

/* A stored run read back. */
struct k25_trace {
    char *provenance_json, *config_json, *workload_json, *summary_json; /* owned */
    int64_t schema_version;
    struct k25_bench_run run;  /* reqs (with token and chunk arrays), win, n_reps */
    /* schema 6: the server's metrics (NULL: none were scraped, or an older trace) */
    struct k25_trace_srvmet *srvmet;
    /* schema 6: /gpu_timeline's rows (t_ns from the run's origin; throttle_known false where the
     * trace says unknown) and /meta gpu_telemetry ("NVML", or why there was none; NULL: older trace) */
    struct k25_gpu_sample *gpu;
    size_t n_gpu;
    char *gpu_telemetry;
};
int k25_trace_read(const char *path, struct k25_trace *t, struct k25_error *err);
/* The same from a file image in memory (buf[len]; the HDF5 core driver; name for messages). */
int k25_trace_read_image(const void *buf, size_t len, const char *name, struct k25_trace *t, struct k25_error *err);
void k25_trace_free(struct k25_trace *t);

/* Writes a run as Chrome/Perfetto trace-event JSON (temporary + rename). */
int k25_trace_export_chrome(const struct k25_trace *t, const char *path, struct k25_error *err);
/*
 * The elastic queue's depths over the run's sampled /timeline windows (inspect.c; `k25 inspect`):
 * {windows, waiting_memory, waiting_spill, waiting_degraded: {max, mean}, breaker_open_windows}.
 * A depth the trace does not hold (schema 3 and 4 have no degraded depth; older ones none) is null;
 * the whole object is null when no window was sampled (an endpoint run).  New reference.
 */
json_t *k25_trace_queue_json(const struct k25_trace *t);

/* ------------------------------------------------------- GPU telemetry (gputelemetry.c) */

/*
 * Every GPU NVML sees (util's k25_nvml_*), sampled every K25_GPU_SAMPLE_NS on its own thread during
 * the measured repetitions of `k25 bench` (in-process, or an endpoint on this host): /gpu_timeline in
 * the trace, summary.gpu (gpu_utilization_p95, clocks, throttle reasons), provenance.machine.gpu_nvml
 * (start and end).  Without NVML: no samples, figures null with the reason.
 */
#define K25_GPU_SAMPLE_NS 100000000LL
#define K25_GPU_CLOCK_MOVED 0.05 /* the SM clock's max over its min beyond 1 + this: "clocks moved" */
typedef struct k25_gputel k25_gputel_t;
/* Opens NVML and starts sampling (nothing to sample is not an error); K25_ENOMEM / K25_EINTERNAL. */
int k25_gputel_start(k25_gputel_t **out, struct k25_error *err);
/* The same for `k25 serve`: no history, each device's last sample only (for /metrics). */
int k25_gputel_start_latest(k25_gputel_t **out, struct k25_error *err);
/* k25 serve's /metrics: k25_gpu_telemetry_available and (NVML) each device's last sample as k25_gpu_*
 * gauges labelled gpu="INDEX" (docs/serve.md).  NULL: nothing. */
void k25_gputel_metrics(k25_gputel_t *g, FILE *f);
/* One line for a start message: "NVML, 1 device(s): NAME, driver X, ..." or "none (why)"; returns buf. */
const char *k25_gputel_describe(const k25_gputel_t *g, char *buf, size_t n);
/* Stops sampling (a last sample and the end provenance).  NULL: no-op. */
void k25_gputel_stop(k25_gputel_t *g);
void k25_gputel_destroy(k25_gputel_t *g);
/* {available, source, start, end} or {available: false, reason} (new reference). */
json_t *k25_gputel_provenance(const k25_gputel_t *g);
/* {gpu_utilization_p95, samples, devices, period_ms, sm_clock_min/max_mhz, clocks_moved, throttle_reasons,
 *  power_max_w, temperature_max_c} or {gpu_utilization_p95: null, reason}; warn gets a warning ("" none). */
json_t *k25_gputel_summary_json(const k25_gputel_t *g, char *warn, size_t warn_n);
/* /gpu_timeline (one row per device and sample) and /meta gpu_telemetry. */
struct k25_h5;
int k25_gputel_write(const k25_gputel_t *g, struct k25_h5 *h, uint64_t t0_ns, struct k25_error *err);
/* Reads /gpu_timeline and /meta gpu_telemetry of a schema-6 trace into t (trace.c calls it). */
int k25_gputel_read(struct k25_h5 *h, struct k25_trace *t, struct k25_error *err);
/* The same summary as k25_gputel_summary_json from rows read back (inspect; null figures without rows). */
json_t *k25_gputel_rows_summary_json(const struct k25_gpu_sample *s, size_t n, const char *why);
/* Reads /server_metrics of a schema-6 trace into t->srvmet (absent: NULL; trace.c calls it). */
int k25_srvmet_read(struct k25_h5 *h, struct k25_trace *t, struct k25_error *err);
void k25_trace_srvmet_free(struct k25_trace_srvmet *m);
/* {url, family, note, scrapes, scrapes_ok, series, and each figure's {max, mean, n} (preemptions: the
 * counter's increase)} of what was read back; null for NULL (new reference). */
json_t *k25_trace_srvmet_json(const struct k25_trace_srvmet *m);
/* Why a server-metrics summary (k25_trace_srvmet_json or summary.server_metrics) has no kv_usage_ratio:
 * no answer, no names k25 knows, or (k25 serve) a KV pool without a bound.  Static text. */
const char *k25_srvmet_kv_why(const json_t *sm);

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

/* ---------------------------------------------------------- calibration */

/*
 * A fixed arithmetic workload (a blocked single-precision matrix product
 * and a streaming pass, on every engine thread) timed a few times before
 * and after a benchmark.  Its median time says how fast this machine was
 * during the run, so timing metrics can be compared as ratios to it: a
 * machine (or a moment) twice as slow doubles both.  The workload is in
 * the harness, not the engine, so an engine change cannot move it.
 */
#define K25_CALIB_MAX 32
struct k25_calib {
    double ms[K25_CALIB_MAX]; /* one time per trial */
    int n;
    int threads;
};

/* (median - fastest) / fastest of the trials; NaN without trials. */
double k25_calib_spread(const struct k25_calib *c);

/* Appends `trials` timed trials (after one untimed one) to c. */
void k25_calib_measure(struct k25_calib *c, int trials);
/* {"workload": "...", "version": 1, "threads": T, "trials_ms": [...], "median_ms": x}
 * (new reference; NULL when out of memory). */
json_t *k25_calib_json(const struct k25_calib *c);

/* ------------------------------------------------ per-request CSV (csv.c) */

/*
 * Writes one CSV row per recorded request of run (the rows of the trace's
 * /requests table, `k25 bench --csv FILE`): a header row, then id, rep,
 * seq, user, line, state, reason, input_tokens, output_tokens,
 * max_new_tokens, prefill_chunks, arrival/submit/admit/first_token/finish
 * times in ms from the run's origin (empty when the event did not happen),
 * queue_ms, ttft_ms, tpot_ms, itl_mean_ms, itl_max_ms, e2e_ms, sched_lag_ms,
 * output_tok_s (empty where undefined) and meets_slo (empty without an
 * SLO; slo may be NULL).  RFC 4180: CRLF line ends, fields holding a comma,
 * quote, CR or LF quoted with quotes doubled.  Written to PATH.tmp.PID and
 * renamed when complete: on failure nothing is left under either name.
 */
int k25_bench_csv_write(const char *path, const struct k25_bench_run *run, const struct k25_bench_slo *slo,
                        struct k25_error *err);

/* ------------------------------------------- attention microbenchmark */
/* (attnbench.c; `k25 attn-bench`, docs/attention.md) */

/* The machine's own limits, measured on the benchmark's threads. */
struct k25_attn_machine {
    int threads;
    double fma_peak_gflops;     /* FP32 FMA probe, all threads */
    double triad_gbps;          /* STREAM triad, 12 bytes per element */
    int64_t triad_array_bytes;  /* size of each triad array */
    int64_t llc_bytes;          /* last-level cache (0 = unknown) */
};

/* Measures both limits (quick: small sizes, for tests).  0 or K25_EINTERNAL. */
int k25_attn_bench_probe(struct k25_attn_machine *m, int threads, bool quick);

struct k25_attn_bench_opts {
    enum k25_attn_impl impls[K25_ATTN_NIMPL];
    int n_impls;
    int contexts[16];
    int n_contexts;
    int chunks[8];
    int n_chunks;
    enum k25_dtype dtypes[4]; /* fp32, fp16, int8, int4 (each at most once) */
    int n_dtypes;
    int heads, kv_heads, head_dim, block_size;
    bool decode;               /* decode settings instead of prefill */
    int repeat, warmup;
    uint64_t seed;
    int64_t mem_limit_bytes;   /* skip settings needing more; 0 = 90% of MemAvailable */
    enum k25_progress_mode progress; /* on stderr (progress.c); 0 (auto) resolves like the CLI's */
};

/* One measured (or skipped) setting. */
struct k25_attn_bench_row {
    char impl[16], mode[16], dtype[8];
    int64_t context, chunk;          /* chunk 0: the whole context in one call */
    int heads, kv_heads, head_dim, threads, repeat, layers;
    char status[16];                 /* "ok" or "skipped" */
    char reason[256];                /* why skipped */
    double median_ms, min_ms, max_ms, spread_pct;
    double gflop, gflops, kv_bytes, gbps, frac_fma_peak, frac_bandwidth;
    int64_t scratch_peak_bytes;      /* measured: K25_MEM_ATTN_SCRATCH peak of one pass */
    int64_t calc_scratch_bytes;      /* the calculator's figure */
    int64_t work_bytes;              /* scratch + Q and O rows held at once */
    double checksum;
};

/* Chunked prefill at one chunk size against flash2 and one-pass prefill. */
struct k25_attn_bench_cmp {
    char dtype[8];
    int64_t context, chunk;
    double time_vs_flash2, work_bytes_vs_flash2, scratch_vs_flash2, overhead_vs_onepass_pct;
};

struct k25_attn_bench_result {
    struct k25_attn_machine machine;
    struct k25_attn_bench_row *rows;   /* [n_rows], malloc'd */
    int n_rows, cap_rows;
    struct k25_attn_bench_cmp cmp[64];
    int n_cmp;
};

/* Runs every setting of o on machine m (measured first).  The caller frees
 * res with k25_attn_bench_result_free (also after a failure). */
int k25_attn_bench_run(const struct k25_attn_bench_opts *o, const struct k25_attn_machine *m,
                       struct k25_attn_bench_result *res, struct k25_error *err);
void k25_attn_bench_result_free(struct k25_attn_bench_result *res);
void k25_attn_bench_print(FILE *out, const struct k25_attn_bench_result *res);
/* The JSON summary (malloc'd text, caller frees; NULL when out of memory). */
char *k25_attn_bench_json(const struct k25_attn_bench_opts *o, const struct k25_attn_bench_result *res);
/* Writes the HDF5 file (docs/trace-schema.md, kind "attn-bench"), atomically. */
int k25_attn_bench_write_h5(const char *path, const struct k25_attn_bench_opts *o,
                            const struct k25_attn_bench_result *res, const char *cmdline,
                            struct k25_error *err);

/* ------------------------------------------------ k25 checksum (checksum.c) */

/*
 * Checks a safetensors model directory (docs/models.md): SHA-256 of every
 * shard, config.json and model.safetensors.index.json; every listed shard
 * present and every indexed tensor in its shard's header; headers
 * consistent with the files; every tensor the engine reads shaped (and
 * typed, when config.json has torch_dtype) as config.json implies; with
 * opts->manifest, every file's size and hash equal to the manifest's.
 */
struct k25_checksum_opts {
    const char *manifest; /* a manifest from --write to verify against, or NULL */
    /* Called after each read of a file being hashed (done of total bytes); may be NULL. */
    void (*progress)(const char *file, int64_t done, int64_t total, void *user);
    void *user;
};

/* What the check found.  json is owned by the report (k25_checksum_report_free):
 * {model, ok, shards, tensors, tensors_checked_against_config, bytes,
 *  files: [{name, role, bytes, sha256}], problems: [{kind, file, tensor, message}],
 *  notes: [..], manifest: {path, files_matched} (with a manifest)}. */
struct k25_checksum_report {
    int n_shards;      /* shards listed (the index) or 1 */
    int64_t n_tensors; /* entries in the shard headers that were read */
    int n_checked;     /* tensors checked against config.json */
    int n_verified;    /* files equal to the manifest's */
    int n_problems;    /* 0: the model passed */
    int64_t total_bytes;
    json_t *json;
};

/*
 * Runs the check.  Returns 0 when it ran (r->n_problems says whether the
 * model passed; each problem names its file and tensor), or a negative
 * code when it could not: dir is not a directory or holds neither
 * model.safetensors nor an index (K25_ENOTFOUND), the manifest is missing
 * or malformed (K25_ENOTFOUND / K25_EFORMAT), out of memory.  The caller
 * frees r with k25_checksum_report_free in every case.
 */
int k25_checksum_model(const char *dir, const struct k25_checksum_opts *opts, struct k25_checksum_report *r,
                       struct k25_error *err);
void k25_checksum_report_free(struct k25_checksum_report *r);
/* Writes the manifest of r's files ({format, version, created, model, files: [{name, bytes, sha256}]}),
 * atomically. */
int k25_checksum_manifest_write(const struct k25_checksum_report *r, const char *path, struct k25_error *err);


/*
 * TEST-ONLY degradation knobs (testknob.c): installs K25_TEST_SLOWDOWN /
 * K25_TEST_LOSSY on engine e when set in the environment (off otherwise).
 * Every engine the harness creates gets them.
 */
void k25_testknob_install(k25_engine_t *e);
/*
 * TEST-ONLY K25_TEST_HOLD=PREFIX[@N] (testknob.c): k25_testknob_hold
 * writes PREFIX.ready and blocks until PREFIX.release exists; returns at
 * once when unset.  Fails (an interruption) when *stop is set by a signal
 * meanwhile.  k25_testknob_hold_at: where the hold is, -1 none, 0 before
 * the measurement (bench.c calls the hold there), N >= 1 once N requests
 * of the first measured repetition have ended (loadgen.c).
 */
long k25_testknob_hold_at(void);
/* K25_OK unless K25_TEST_HOLD is set but malformed (refused by name; k25 bench checks it first). */
int k25_testknob_hold_check(struct k25_error *err);
int k25_testknob_hold(volatile sig_atomic_t *stop, struct k25_error *err);

/* ------------------------------------------------- k25 serve (serve.c) */

/*
 * `k25 serve`: the reference engine behind an OpenAI-compatible HTTP API
 * (libmicrohttpd); the API is documented in docs/serve.md.
 *
 * Threads: libmicrohttpd's polling threads (a pool of http_threads) read,
 * parse and validate requests, put them on a queue (mutex + condition
 * variable) and stream what the engine produced; a connection waiting for
 * the engine is suspended, never a blocked thread.  One engine thread owns
 * the engine (engine calls are not thread-safe): it submits queued
 * requests, steps, cancels requests whose client went away, and publishes
 * tokens and statistics under the same mutex.
 */
struct k25_serve_opts {
    const char *host;          /* address to bind (default "127.0.0.1") */
    int port;                  /* 0 = a free port (k25_serve_port tells which) */
    const char *api_key;       /* required as "Authorization: Bearer KEY" when not NULL */
    const char *model_name;    /* the name clients use; default: cfg->model's last path part */
    size_t max_body_bytes;     /* larger request bodies get 413 (default 8 MiB) */
    int max_waiting;           /* requests queued beyond the running batch; more get 429 (default 256) */
    int max_connections;       /* concurrent HTTP connections (default 512) */
    int max_connections_per_ip; /* concurrent connections from one client address; 0 = half of
                                   max_connections (at least 1) */
    int header_timeout_s;      /* a request's header must be complete this long after the connection
                                  opened or its previous request ended (default 20) */
    int body_timeout_s;        /* its body, this long after the header (default 120) */
    int idle_timeout_s;        /* a connection with no traffic is closed (default 120) */
    int http_threads;          /* libmicrohttpd's polling threads (default 4) */
    const char *chat_template; /* a named chat template (k25_chat_template_parse) instead of the one
                                  recognised from the folder's tokenizer_config.json; NULL = that one */
};

void k25_serve_opts_init(struct k25_serve_opts *o);

typedef struct k25_serve k25_serve_t;

/*
 * Loads the model (cfg->model), creates the engine, starts the engine
 * thread and the HTTP daemon.  cfg and o are copied.  On failure nothing
 * is left running; err says why (a port in use, a bad host, a bad model).
 */
int k25_serve_start(const struct k25_config *cfg, const struct k25_serve_opts *o, k25_serve_t **out,
                    struct k25_error *err);
/* The port bound (the chosen one when o->port was 0). */
int k25_serve_port(const k25_serve_t *s);
/*
 * Stops accepting work (new requests get 503), cancels what is queued or
 * running (open streams end with finish_reason "cancelled"), stops the
 * HTTP daemon and the engine thread, frees everything.  NULL is a no-op.
 */
void k25_serve_stop(k25_serve_t *s);

#endif /* K25_HARNESS_H */
