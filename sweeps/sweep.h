/*
 * sweep.h - the sweep runner: grid search over engine settings.
 *
 * A spec (YAML, sweeps/NAME.yaml) names the model, the gold set, the workload,
 * the repetitions, the axes to grid over and an objective with
 * constraints.  Every point of the grid gets a stable id (a hash of its
 * effective config, workload and dataset) and its own files under
 * OUT/points/ID/; each repetition is one `k25 bench` run in a child
 * process (rep-K.h5 + rep-K.json, written atomically by bench), so a
 * sweep killed at any moment loses only the runs in flight, and a re-run
 * skips every finished one.  Repetitions are interleaved: round k runs
 * every point once, in an order shuffled by the spec's seed; with --jobs N
 * every run has N-1 companions (filler runs keep the tail loaded).  At the
 * end: OUT/sweep.h5 (the index), OUT/summary.json (the verdict: a best
 * point only when it beats the reference significantly, paired by
 * repetition; the Pareto front with tolerances; violations).
 */
#ifndef K25_SWEEP_H
#define K25_SWEEP_H

#include "k25.h"
#include "harness.h"

#include <jansson.h>
#include <stdio.h>

#define K25_SWEEP_MAX_AXES 16
#define K25_SWEEP_MAX_VALUES 64
#define K25_SWEEP_MAX_FIXED 32
#define K25_SWEEP_MAX_CONS 16
#define K25_SWEEP_MAX_REPEATS 64

struct k25_sweep_axis {
    char key[64];
    int line;                                 /* spec line of the axis */
    bool client;                              /* a workload axis (concurrency, rate): the load, not the engine */
    int n;
    char values[K25_SWEEP_MAX_VALUES][128];   /* as written, validated */
};

enum k25_sweep_op { K25_OP_LT, K25_OP_LE, K25_OP_GT, K25_OP_GE, K25_OP_EQ, K25_OP_NE };

/* "metric op number", e.g. "fidelity_kl_mean <= 0.05". */
struct k25_sweep_constraint {
    char metric[64];
    enum k25_sweep_op op;
    double value;
    char text[160];
    int line;
};

struct k25_sweep_workload {
    int concurrency;          /* closed-loop users (default 1); open loop: cap on requests in flight */
    bool concurrency_set;     /* given in the spec (open loop passes --concurrency only then) */
    int line;                 /* spec line of `workload:` */
    int64_t requests;         /* measured requests per run (or duration_s) */
    double duration_s;
    double rate_rps;          /* > 0: open loop */
    double burstiness;        /* gamma shape, 1 = Poisson */
    int64_t warmup;
    char slo[256];            /* passed to bench --slo, "" for none */
    /* rate search: the highest open-loop rate whose `search_metric` stays
     * at or under `search_limit`, by bisection to a relative precision */
    bool search;
    char search_metric[64];
    double search_limit;
    int search_line;          /* spec line of `search_slo:` */
    double rate_lo, rate_hi, precision;
};

struct k25_sweep_spec {
    char path[1024];
    char name[128];
    char model[1024];
    char dataset[1024];       /* as written in the spec (relative to the working directory) */
    char dataset_abs[4096];   /* resolved when the spec loads: what the runs are given */
    char filter[512];
    struct k25_sweep_workload wl;
    int repeats;
    uint64_t seed;
    int n_axes;
    struct k25_sweep_axis axes[K25_SWEEP_MAX_AXES];
    int n_fixed;
    char fixed_key[K25_SWEEP_MAX_FIXED][64];
    char fixed_val[K25_SWEEP_MAX_FIXED][256];
    bool fidelity;
    char objective[64];
    bool maximize;
    int n_cons;
    struct k25_sweep_constraint cons[K25_SWEEP_MAX_CONS];
    char dataset_sha256[65];
    int repeats_line, objective_line;
    /* the system measured: the in-process engine (both empty), a running server (endpoint), or a
     * server the runner starts per point (launch: its command with {port} and {config_key} holes) */
    char endpoint[1024];      /* base URL every run's `k25 bench --endpoint` gets */
    char launch[2048];        /* command template, as written */
    int endpoint_line, launch_line;
    double launch_timeout_s;  /* how long GET /health may take to answer 200 (default 120) */
    double launch_grace_s;    /* SIGTERM, then SIGKILL after this long (default 10) */
};

/*
 * A point against the reference, paired by repetition: rep k of the point
 * with rep k of the reference (they ran in the same interleaved round).
 * ratio = point / reference of the objective (geometric mean of the
 * per-pair ratios; with a value <= 0, 1 + mean difference / reference
 * mean), with a Student-t interval at the family-wise level of the whole
 * sweep (Bonferroni over the points compared).
 */
struct k25_sweep_paired {
    int pairs;                /* repetitions both finished with a measured objective; 0: not compared */
    bool log_ratio;           /* false: differences (an objective value <= 0) */
    double ratio, lo, hi;     /* point / reference and its interval */
    bool better;              /* the interval lies wholly on the better side of 1 */
};

/* One point of the grid (or the reference point with default settings). */
struct k25_sweep_point {
    char id[17];                          /* 16 hex digits */
    int idx[K25_SWEEP_MAX_AXES];          /* value index per axis; -1: the default (reference) */
    bool reference;                       /* the defaults, added when the grid lacks them */
    struct k25_config cfg;                /* effective engine config */
    /* results, filled by k25_sweep_collect */
    int reps_done;
    uint64_t reps_mask;                   /* bit k: repetition k has a result */
    double rep_obj[K25_SWEEP_MAX_REPEATS]; /* objective per repetition, NaN where missing */
    json_t *metrics;                      /* {name: mean} over repetitions (owned) */
    json_t *metrics_ci;                   /* {name: [lo, hi]} 95% across repetitions (owned) */
    /* filled by k25_sweep_analyze */
    bool feasible;
    char violations[512];
    struct k25_sweep_paired vs_ref;       /* against the reference (pairs 0 for the reference itself) */
    char knob_warning[512];               /* a knob that did not change what it controls ("" when none) */
};

/* What k25_sweep_analyze concludes about "the best setting". */
enum k25_sweep_verdict_kind {
    K25_VERDICT_SIGNIFICANT,          /* best beats the reference; its interval excludes "no change" */
    K25_VERDICT_NOT_SIGNIFICANT,      /* no setting is significantly better than the reference */
    K25_VERDICT_ONE_REPETITION,       /* fewer than 2 paired repetitions: no significance can be claimed */
    K25_VERDICT_NO_REFERENCE,         /* the reference point has no complete result to compare with */
    K25_VERDICT_REFERENCE_INFEASIBLE, /* the reference breaks a constraint: any feasible point improves */
    K25_VERDICT_NO_FEASIBLE,          /* no point meets every constraint */
};

struct k25_sweep_verdict {
    enum k25_sweep_verdict_kind kind;
    int best;                 /* the point to recommend, -1: none */
    int leader;               /* feasible non-reference point with the best mean objective, -1: none */
    int reference;            /* the reference point (the defaults), -1: none */
    int comparisons;          /* points compared with the reference (the Bonferroni m) */
    double confidence;        /* family-wise confidence of the intervals (0.95) */
    char message[512];        /* one line saying what was concluded, for people */
};

/* Names of the metrics a spec may use (objective, constraints, search). */
int k25_sweep_metric_count(void);
const char *k25_sweep_metric_name(int i);
bool k25_sweep_metric_known(const char *name);
/* true when lower is better for this metric */
bool k25_sweep_metric_lower_better(const char *name);

/*
 * Parses and validates a spec: unknown keys, an axis with no values, a
 * value a config key refuses, a constraint on an unknown metric, a dataset
 * that does not validate: errors naming the spec file and line.
 */
int k25_sweep_spec_load(const char *path, struct k25_sweep_spec *spec, struct k25_error *err);

/*
 * Points the sweep at a running server (`k25 sweep --endpoint URL`,
 * overriding the spec's endpoint:) and checks what that allows: client
 * axes (concurrency, rate) only; an engine axis or fixed key needs the
 * in-process engine or a launch: command, and the error names it.
 */
int k25_sweep_spec_set_endpoint(struct k25_sweep_spec *spec, const char *url, struct k25_error *err);

/* Whether key is a client-side (workload) axis: concurrency, rate. */
bool k25_sweep_axis_is_client(const char *key);

/* The workload point p runs: the spec's, with p's client axis values applied. */
void k25_sweep_point_workload(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p,
                              struct k25_sweep_workload *w);

/* Whether p's client axes (if any) are at the spec workload's own values (the reference's load). */
bool k25_sweep_point_client_default(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p);

/*
 * Expands the grid (axes in spec order, the last varying fastest), plus a
 * reference point with every axis at its default when the grid lacks it.
 * *points is malloc'd; caller frees with k25_sweep_points_free.
 */
int k25_sweep_expand(const struct k25_sweep_spec *spec, struct k25_sweep_point **points, int *n_points,
                     struct k25_error *err);
void k25_sweep_points_free(struct k25_sweep_point *points, int n);

/*
 * The reference point: the one flagged `reference` (added by expand), or a
 * grid point whose effective config equals the defaults.  -1 when none.
 */
int k25_sweep_reference_index(const struct k25_sweep_spec *spec, const struct k25_sweep_point *points, int n);

/* "prefill_chunk_size=512 max_batch_size=8" (or "defaults"). */
void k25_sweep_point_label(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p, char *buf,
                           size_t n);

/*
 * Parses an --only expression: terms `axis op value` joined by `&&`
 * (e.g. "prefill_chunk_size >= 1024 && max_batch_size == 8") and tells
 * whether point p matches.  Errors name the column.
 */
int k25_sweep_only_match(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p, const char *expr,
                         bool *match, struct k25_error *err);

/* Parses "metric op number" into c (line for messages). */
int k25_sweep_constraint_parse(const char *text, const char *file, int line, struct k25_sweep_constraint *c,
                               struct k25_error *err);
bool k25_sweep_constraint_holds(const struct k25_sweep_constraint *c, double v);

struct k25_sweep_opts {
    const char *out;          /* results/NAME */
    int jobs;                 /* parallel runs (default 1) */
    bool dry_run;
    const char *only;         /* --only expression or NULL (the reference point always stays in) */
    enum k25_progress_mode progress; /* resolved (k25_progress_resolve): bar, lines or off */
    bool quiet;
    const char *k25_path;     /* binary to run points with (default /proc/self/exe) */
    int task;                 /* >= 0: run only this task index (cluster array), then stop */
    const char *endpoint;     /* URL the runs go to, overriding spec->endpoint (a launch: point's server); NULL */
};

/* One run: repetition `rep` of point `point`, run `index` of the sweep's order (what --task takes). */
struct k25_sweep_task {
    int point, rep, index;
};

/*
 * Selects the points (--only, the reference always included) into sel[n]
 * and lists every (point, repetition) in run order into tasks (room for
 * n * repeats): round k holds every selected point once, in an order
 * shuffled by a generator seeded with (spec seed, k), so every point meets
 * every position and the order is the same in every process (the task
 * indices of a cluster array).  Returns the number of tasks, or a negative
 * K25_E* (a bad --only expression) with err filled.
 */
int k25_sweep_tasks(const struct k25_sweep_spec *spec, const struct k25_sweep_point *points, int n,
                    const char *only, bool *sel, struct k25_sweep_task *tasks, struct k25_error *err);

/*
 * Runs the sweep: every (point, repetition) not already complete under
 * opts->out, interleaved, opts->jobs at a time, then collects the results
 * and writes sweep.h5 and summary.json.  Prints progress to stderr.
 */
/* snprintf into a message that may be cut short (labels can be long; a message is for people). */
void k25_sweep_msgf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The signal (SIGINT, SIGTERM) that stopped the last k25_sweep_run, 0 when none:
 * `k25 sweep` exits 128 + it (130, 143), as a shell does. */
int k25_sweep_stop_signal(void);
int k25_sweep_run(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *opts, struct k25_error *err);

/*
 * Reads every point's repetition summaries under out: the metrics averaged
 * over repetitions with 95% intervals, and the objective of each
 * repetition (for the paired comparison).
 */
int k25_sweep_collect(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *points,
                      int n, struct k25_error *err);

/*
 * Evaluates the constraints, compares every feasible point with the
 * reference (paired by repetition, Bonferroni over the comparisons, 95%
 * family-wise) and names a best point only when its interval lies wholly
 * on the better side (*v); marks the Pareto front over (objective,
 * fidelity_kl_mean when measured, peak_memory_mb) in pareto[n], where
 * objective values the paired repetitions cannot tell apart (95%) and
 * memory or KL within 1% are ties, not wins.
 */
void k25_sweep_analyze(const struct k25_sweep_spec *spec, struct k25_sweep_point *points, int n,
                       struct k25_sweep_verdict *v, bool *pareto);

/*
 * Writes OUT/sweep.h5 and OUT/summary.json (atomically).  missing: the
 * runs a partial merge went without (a JSON array recorded as
 * "missing_runs", the summary then says "partial": true), or NULL.
 */
int k25_sweep_write_results(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *points,
                            int n, const json_t *missing, struct k25_error *err);

/*
 * --merge: collects the runs of a cluster array into the results.  Every
 * run the array should have made (the points --only selects, the
 * reference included, times the repetitions) that has no result is listed
 * on `report` (point, label, repetition, array task index, and whether it
 * failed, was cut short or never ran).  With any missing and !allow_partial
 * nothing is written and K25_ENOTFOUND returns; with allow_partial the
 * results are written and marked partial.
 */
int k25_sweep_merge(const struct k25_sweep_spec *spec, const char *out, const char *only, bool allow_partial,
                    FILE *report, struct k25_error *err);

/*
 * --slurm: writes a job-array script to f.  Every path in it is absolute
 * and shell-quoted (the k25 binary, the spec, OUT, the dataset it checks),
 * `#SBATCH --chdir` is the directory the spec's relative paths mean, and
 * --only travels to every task.  Each task asks for cpus_per_task cores
 * and runs bench with that many threads.  Tasks may overlap on a node:
 * each cleans only its own run's leftovers.  Creates OUT and OUT/slurm/
 * (the tasks' Slurm logs).
 */
int k25_sweep_slurm_script(const struct k25_sweep_spec *spec, const char *out, const char *only,
                           const char *k25_path, int cpus_per_task, FILE *f, struct k25_error *err);

/* Extracts the sweep metrics from one `k25 bench --json` summary (new reference). */
json_t *k25_sweep_metrics_from_bench(const json_t *bench_summary);

#endif
