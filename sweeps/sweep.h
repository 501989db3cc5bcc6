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
 * skips every finished one.  Repetitions are interleaved round-robin over
 * the points.  At the end: OUT/sweep.h5 (the index), OUT/summary.json
 * (best feasible point, Pareto front, violations).
 */
#ifndef K25_SWEEP_H
#define K25_SWEEP_H

#include "k25.h"

#include <jansson.h>
#include <stdio.h>

#define K25_SWEEP_MAX_AXES 16
#define K25_SWEEP_MAX_VALUES 64
#define K25_SWEEP_MAX_FIXED 32
#define K25_SWEEP_MAX_CONS 16

struct k25_sweep_axis {
    char key[64];
    int line;                                 /* spec line of the axis */
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
    int concurrency;          /* closed-loop users (default 1) */
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
    double rate_lo, rate_hi, precision;
};

struct k25_sweep_spec {
    char path[1024];
    char name[128];
    char model[1024];
    char dataset[1024];
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
};

/* One point of the grid (or the reference point with default settings). */
struct k25_sweep_point {
    char id[17];                          /* 16 hex digits */
    int idx[K25_SWEEP_MAX_AXES];          /* value index per axis; -1: the default (reference) */
    bool reference;                       /* the defaults, added when the grid lacks them */
    struct k25_config cfg;                /* effective engine config */
    /* results, filled by k25_sweep_collect */
    int reps_done;
    json_t *metrics;                      /* {name: mean} over repetitions (owned) */
    json_t *metrics_ci;                   /* {name: [lo, hi]} 95% across repetitions (owned) */
    bool feasible;
    char violations[512];
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
 * Expands the grid (axes in spec order, the last varying fastest), plus a
 * reference point with every axis at its default when the grid lacks it.
 * *points is malloc'd; caller frees with k25_sweep_points_free.
 */
int k25_sweep_expand(const struct k25_sweep_spec *spec, struct k25_sweep_point **points, int *n_points,
                     struct k25_error *err);
void k25_sweep_points_free(struct k25_sweep_point *points, int n);

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
    const char *only;         /* --only expression or NULL */
    bool progress;
    bool quiet;
    const char *k25_path;     /* binary to run points with (default /proc/self/exe) */
    int task;                 /* >= 0: run only this task index (cluster array), then stop */
};

/*
 * Runs the sweep: every (point, repetition) not already complete under
 * opts->out, interleaved, opts->jobs at a time, then collects the results
 * and writes sweep.h5 and summary.json.  Prints progress to stderr.
 */
int k25_sweep_run(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *opts, struct k25_error *err);

/*
 * Reads every point's repetition summaries under out, averages the
 * metrics, evaluates the constraints; then picks the best feasible point
 * (*best, -1 when none) and marks the Pareto front over (objective,
 * fidelity_kl_mean when measured, peak_memory_mb) in pareto[n].
 */
int k25_sweep_collect(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *points,
                      int n, struct k25_error *err);
void k25_sweep_analyze(const struct k25_sweep_spec *spec, struct k25_sweep_point *points, int n, int *best,
                       bool *pareto);

/* Writes OUT/sweep.h5 and OUT/summary.json (atomically). */
int k25_sweep_write_results(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *points,
                            int n, struct k25_error *err);

/* Extracts the sweep metrics from one `k25 bench --json` summary (new reference). */
json_t *k25_sweep_metrics_from_bench(const json_t *bench_summary);

#endif
