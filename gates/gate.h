/*
 * gate.h - public interface of gates/, the regression gate behind
 * `k25 gate` (the command front end, k25_cmd_gate, is in cli/); it builds
 * on harness/ (runs, their calibration).  docs/gates.md is the user's view.
 *
 * The pieces, one file each:
 *   gate_policy.c  the policy file (ci/gate-policy.yaml): metrics, direction,
 *                  tolerance, how to compare
 *   gate_input.c   loading what is compared: bench runs (.h5 / .json), sweep
 *                  folders, folders of runs; pairing baseline with candidate
 *   gate_stats.c   the statistics: best-replicate log-ratios per request,
 *                  their median and its hierarchical bootstrap interval
 *   gate.c         the comparison of two sets under a policy, the table,
 *                  the JSON, and interleaved A/B runs
 */
#ifndef K25_GATE_H
#define K25_GATE_H

#include "k25.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* --------------------------------------------------------------- policy */

enum k25_gate_compare { K25_GATE_STATISTICAL, K25_GATE_THRESHOLD, K25_GATE_EXACT };

/* When timing ratios are divided by the runs' calibration ratio. */
enum k25_gate_norm {
    K25_NORM_NONE,
    K25_NORM_OTHER_MACHINE, /* only across machines (default: on one machine it only adds noise) */
    K25_NORM_ALWAYS,
};

/* Where a metric's values come from. */
enum k25_gate_source {
    K25_GATE_SRC_REQUEST, /* one value per completed request (the trace's /requests) */
    K25_GATE_SRC_SUMMARY, /* one value per run: a path in the bench summary */
    K25_GATE_SRC_TOKENS,  /* the generated token ids of every request */
};

struct k25_gate_metric {
    char name[64];
    enum k25_gate_source src;
    char path[128];          /* request column or summary path ("memory.peak_tracked_bytes") */
    enum k25_gate_compare cmp;
    bool lower_better;
    bool relative;           /* tolerance is a fraction (10% = 0.10) or an absolute amount */
    double tol;              /* same machine */
    double tol_other;        /* another machine; NaN = advisory there (never fails) */
    enum k25_gate_norm norm; /* statistical timing: divide by the run's calibration when */
    bool timing;             /* verdict words FASTER/SLOWER instead of BETTER/WORSE */
    bool gate;               /* false: reported, never fails the gate */
    int line;                /* in the policy file */
};

/* What a gated metric left UNSURE (too noisy to tell) makes of the gate (`unsure:` in the policy). */
enum k25_gate_unsure {
    K25_UNSURE_INCONCLUSIVE, /* default: the gate is INCONCLUSIVE (exit 3), never "passed" */
    K25_UNSURE_PASS,         /* passes, saying which metrics were UNSURE */
    K25_UNSURE_FAIL,         /* fails like a regression */
};

#define K25_GATE_MAX_METRICS 48
struct k25_gate_policy {
    char path[1024];
    double confidence;       /* of the bootstrap interval (0.95) */
    int resamples;           /* bootstrap resamples (2000) */
    enum k25_gate_unsure unsure;
    uint64_t seed;           /* bootstrap seed: same inputs, same verdicts */
    int n;
    struct k25_gate_metric m[K25_GATE_MAX_METRICS];
};

/* The built-in default (what ci/gate-policy.yaml ships). */
void k25_gate_policy_default(struct k25_gate_policy *p);
/* Loads a policy file; errors name the file, line and key. */
int k25_gate_policy_load(const char *path, struct k25_gate_policy *p, struct k25_error *err);

/* ---------------------------------------------------------------- input */

enum { K25_GATE_REQ_TTFT, K25_GATE_REQ_TPOT, K25_GATE_REQ_E2E, K25_GATE_REQ_QUEUE, K25_GATE_REQ_TPS,
       K25_GATE_NREQ };
extern const char *const k25_gate_req_names[K25_GATE_NREQ]; /* "ttft_ms", ... */

/* One measured request of a run. */
struct k25_gate_req {
    char id[64];
    int64_t seq;
    int32_t rep;
    bool completed;
    double v[K25_GATE_NREQ];  /* NaN where undefined */
    int32_t *tok;             /* [n_tok] generated ids, owned */
    float *margin;            /* [n_tok] their top-1 margins (token-identity rule), owned;
                                 NULL when the trace has none (schema 1): compared strictly */
    int n_tok;
};

/* One `k25 bench` run (one repetition file of a sweep, one A/B round). */
struct k25_gate_run {
    char key[160];            /* pairing key: "POINT/rep-K", "round-K", "run" */
    char label[160];          /* what to call it in messages */
    char file[1024];
    json_t *doc;              /* the bench JSON document {workload, summary, provenance} (owned) */
    char *identity;           /* canonical JSON of what must match: config, workload, dataset (owned) */
    char machine[512];        /* cpu model, cores, build flags: "same machine" test */
    double calib_ms;          /* fastest calibration trial (machine speed); NaN when none */
    double calib_spread;      /* (median - fastest) / fastest trial: how steady the machine was; NaN when none */
    bool has_trace;           /* per-request values and tokens available */
    struct k25_gate_req *req; /* [n_req], owned */
    int n_req;
};

struct k25_gate_set {
    char path[1024];
    char kind[16];            /* "sweep", "runs", "run" */
    struct k25_gate_run *runs; /* [n_runs], owned */
    int n_runs;
};

/* Loads a bench run (.h5 or .json), a sweep folder or a folder of runs.
 * K25_ENOENT / K25_EINVAL / K25_EIO with a message naming the path. */
int k25_gate_set_load(const char *path, struct k25_gate_set *s, struct k25_error *err);
void k25_gate_set_free(struct k25_gate_set *s);

/* --------------------------------------------------------------- result */

enum k25_gate_verdict { K25_V_SAME, K25_V_BETTER, K25_V_WORSE, K25_V_UNSURE, K25_V_NA };

/* Exit statuses of `k25 gate` (and of what k25_gate_exit_status returns). */
enum {
    K25_GATE_EXIT_PASS = 0,
    K25_GATE_EXIT_REGRESSION = 1,
    K25_GATE_EXIT_UNUSABLE = 2,     /* unreadable, mismatched, bad policy */
    K25_GATE_EXIT_INCONCLUSIVE = 3, /* no regression, but a gated metric UNSURE (unsure: inconclusive) */
};

struct k25_gate_row {
    const struct k25_gate_metric *m;
    enum k25_gate_verdict verdict;
    bool fails;               /* counts as a regression */
    bool advisory;            /* other machine, advisory there */
    double base, cand;        /* typical values (medians; normalized figures are not shown here) */
    double ratio, lo, hi;     /* statistical: candidate/baseline, bootstrap interval: the figure the
                                 verdict was computed from (normalized when `normalized`, else raw) */
    double change;            /* threshold/exact: worst relative (or absolute) change */
    double tol;               /* tolerance applied */
    double noise;             /* statistical: interval half-width, max(hi/ratio, ratio/lo) - 1 */
    double norm_factor;       /* statistical, normalized: candidate/baseline calibration ratio the raw
                                 ratios were divided by (geometric mean over groups); NaN when not */
    double raw_ratio;         /* statistical: the estimate before that division (NaN when no calibration) */
    double calib_spread;      /* the largest calibration spread of the runs it used (NaN: none) */
    bool normalized;          /* ratio is divided by the calibration factor */
    bool calib_untrusted;     /* normalize asked for, but the calibration spread too much: raw judged */
    int n;                    /* pairs (requests) or runs compared */
    bool paired;
    char note[512];
    char unsure_why[192];     /* UNSURE: why, in a few words (for the INCONCLUSIVE summary) */
};

struct k25_gate_result {
    struct k25_gate_row rows[K25_GATE_MAX_METRICS];
    int n_rows;
    int n_pairs;              /* runs paired */
    bool other_machine;
    bool mismatch;            /* configs/datasets differ (allowed with allow_mismatch) */
    char mismatch_msg[1024];
    int n_fail, n_unsure;
    int n_gated_unsure;       /* UNSURE on a gated, not advisory metric that did not fail */
    bool inconclusive;        /* no regression, n_gated_unsure > 0 and the policy says inconclusive */
    bool unsure_passed;       /* the same, but the policy says `unsure: pass` */
    char settle[1536];        /* inconclusive: the command that would settle it */
};


struct k25_gate_opts {
    bool allow_mismatch;
    /* --ab: the commands and rounds measured (NULL: stored results), for the settle command */
    const char *ab_cmd_a, *ab_cmd_b;
    int ab_rounds, ab_max_rounds;
};

/* The exit status the result calls for: K25_GATE_EXIT_PASS, _REGRESSION or _INCONCLUSIVE. */
int k25_gate_exit_status(const struct k25_gate_result *res);

/*
 * Compares candidate c with baseline b under policy p.  Returns K25_OK
 * with res filled (res->n_fail > 0: a regression), or K25_EINVAL when the
 * two cannot be compared (nothing pairs; configs or datasets differ and
 * !o->allow_mismatch), with the reason in err.
 */
int k25_gate_compare(const struct k25_gate_set *b, const struct k25_gate_set *c, const struct k25_gate_policy *p,
                     const struct k25_gate_opts *o, struct k25_gate_result *res, struct k25_error *err);

const char *k25_gate_verdict_name(const struct k25_gate_row *r);
void k25_gate_print(FILE *out, const struct k25_gate_set *b, const struct k25_gate_set *c,
                    const struct k25_gate_result *res);
json_t *k25_gate_json(const struct k25_gate_set *b, const struct k25_gate_set *c, const struct k25_gate_policy *p,
                      const struct k25_gate_result *res);

/* ---------------------------------------------------------------- stats */

/*
 * One group of replicates (runs of the same benchmark: a sweep point's
 * repetitions, the rounds of an A/B measurement) and its cells (request
 * positions, or whole runs): b and c hold [n_runs][n_cells] values of the
 * baseline and candidate (NaN where missing); norm is subtracted from every
 * cell's log-ratio (the calibration-floor ratio when normalized, else 0).
 */
struct k25_gate_cells {
    int n_runs, n_cells;
    double *b, *c;
    double norm;
};

/*
 * The statistical comparison's estimate: each cell's
 * log(best candidate replicate / best baseline replicate) - norm ("best":
 * the lowest for lower-is-better metrics, the highest otherwise), pooled over
 * all groups' cells; *est is their median, [*lo, *hi] its `conf` bootstrap
 * interval (resampling groups, then each side's replicates, then cells, with
 * replacement; NaN with a single value).  Deterministic for a seed.
 * Returns the number of cells with a value on both sides.
 */
int k25_gate_best_ratio(const struct k25_gate_cells *g, int n_groups, bool lower_better, int resamples, double conf,
                        uint64_t seed, double *est, double *lo, double *hi);

/* ------------------------------------------------------------------ A/B */

struct k25_gate_ab_opts {
    const char *cmd_a, *cmd_b; /* shell commands; {h5} and {json} name the outputs */
    int first_round;           /* rounds [first_round, rounds) are run (more rounds append) */
    int rounds;                /* A B B A ...: 2 * rounds runs in all */
    const char *dir;           /* where the runs go: DIR/a/round-K.*, DIR/b/round-K.* */
    bool quiet;
};

/* Runs the interleaved A/B measurement; fails (naming the command and its
 * log) when a run fails. */
int k25_gate_ab_run(const struct k25_gate_ab_opts *o, struct k25_error *err);

#endif /* K25_GATE_H */
