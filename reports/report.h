/*
 * report.h - public interface of reports/, the report generator behind
 * `k25 report` (the command front end, k25_cmd_report, is in cli/).  It
 * builds on harness/ (runs, traces, statistics) and reads sweep folders
 * through their files.
 *
 * A report turns stored results into pictures and a sign-off verdict:
 *
 *   report_input.c   what INPUT is (run file, sweep folder, attention
 *                    benchmark, several runs) and loading it
 *   report_data.c    the data files gnuplot reads (CDFs, histograms,
 *                    fits, timelines, heatmaps, Pareto front, attention)
 *   report_plot.c    rendering: fills reports/templates/NAME.gp and runs the
 *                    external gnuplot program (fork/exec, script on stdin)
 *   report_sla.c     sla.yaml: parsing (errors name file and line) and
 *                    evaluating each line against measured requests
 *   report_health.c  the health checks (docs/reports.md), overridable
 *   report_md.c      report.md
 *   report_html.c    report.html, self-contained (images base64-embedded)
 *   report.c         k25_report_generate: the whole report, start to end
 *
 * Ownership: every struct here is filled by a *_load / *_parse / *_init
 * function and released by the matching *_free; the caller holds the
 * struct itself.
 */
#ifndef K25_REPORT_H
#define K25_REPORT_H

#include "harness.h"

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

/* ------------------------------------------------------------- inputs */

enum k25_report_kind { K25_REPORT_RUN, K25_REPORT_SWEEP, K25_REPORT_ATTN, K25_REPORT_COMPARE };
const char *k25_report_kind_name(enum k25_report_kind k);

/* One `k25 bench` run file, read back. */
struct k25_report_run {
    char path[1024];
    char label[128];          /* short name for legends: the file name without .h5 */
    struct k25_trace t;       /* requests, tokens, timeline (owned) */
    json_t *summary;          /* parsed /summary json (owned) */
    json_t *provenance, *config, *workload; /* parsed /meta JSON (owned; may be NULL) */
};

/* One /attn/results row of an attention benchmark. */
struct k25_report_attn_row {
    char impl[16], mode[16], dtype[8];
    int64_t context, chunk;
    int32_t heads, kv_heads, head_dim, threads, repeat, layers;
    char status[16];
    char reason[256];
    double median_ms, min_ms, max_ms, spread_pct, gflops, kv_gbps, frac_fma_peak, frac_bandwidth;
    int64_t scratch_peak_bytes, calc_scratch_bytes, work_bytes;
};

struct k25_report_attn {
    char path[1024];
    struct k25_attn_machine machine;
    struct k25_report_attn_row *rows; /* [n_rows], owned */
    size_t n_rows;
    json_t *meta;                     /* {attribute: value} of /meta (owned) */
};

#define K25_REPORT_MAX_AXES 16

/* One point of a sweep, from summary.json. */
struct k25_report_point {
    char id[17];
    char label[512];
    char value[K25_REPORT_MAX_AXES][128]; /* effective value per axis, as text */
    const json_t *metrics, *ci;           /* borrowed from the sweep's summary */
    const json_t *obj_by_rep;             /* objective per repetition (borrowed; may be NULL) */
    const json_t *vs_ref;                 /* paired ratio to the reference (borrowed; may be NULL) */
    bool feasible, pareto, reference;
    int reps;
    char violations[512];
};

struct k25_report_sweep {
    char dir[1024];
    json_t *summary;                     /* summary.json (owned) */
    char name[128], objective[64];
    bool maximize;
    int n_axes;
    char axis[K25_REPORT_MAX_AXES][64];
    struct k25_report_point *pts;        /* [n_pts], owned */
    int n_pts;
    int best, reference;                 /* indices into pts, -1 when none */
    int leader;                          /* the best mean among the feasible points, the reference
                                            included (summary.json "leader"): every plot anchors on it */
    bool significant;                    /* summary.json names a best point (it beat the reference) */
    double confidence;                   /* the analysis's family-wise level (0.95) */
    int comparisons;                     /* points it compared with the reference (Bonferroni) */
    bool has_fidelity;                   /* some point measured fidelity_kl_mean */
    struct k25_report_run *best_runs;    /* the best point's repetitions (owned), may be 0 */
    int n_best_runs;
    struct k25_report_run *ref_runs;     /* the reference point's: the comparison, and what the SLA is
                                            judged on when no point is significantly better */
    int n_ref_runs;
    struct k25_report_run *any_run;      /* with neither: the first trace found under points/, for the
                                            provenance (owned, may be NULL) */
};

struct k25_report_input {
    enum k25_report_kind kind;
    struct k25_report_run *runs;   /* K25_REPORT_RUN (1) and K25_REPORT_COMPARE (>= 2), owned */
    int n_runs;
    struct k25_report_sweep *sweep;
    struct k25_report_attn *attn;
};

/*
 * Detects what each path is and loads it: a directory with summary.json is
 * a sweep; an HDF5 file of kind "run" a run, of kind "attn-bench" an
 * attention benchmark; two or more run files a comparison (the first is
 * the baseline).  Errors name the path and what is wrong with it.
 */
int k25_report_load(const char *const *paths, int n_paths, struct k25_report_input *in, struct k25_error *err);
void k25_report_input_free(struct k25_report_input *in);

/* Loads one run file into r (k25_report_run_free releases it, also after a failure). */
int k25_report_run_load(const char *path, struct k25_report_run *r, struct k25_error *err);
void k25_report_run_free(struct k25_report_run *r);

/* ---------------------------------------------------------------- SLA */

enum k25_sla_op { K25_SLA_LT, K25_SLA_LE, K25_SLA_GT, K25_SLA_GE, K25_SLA_EQ, K25_SLA_NE };
const char *k25_sla_op_text(enum k25_sla_op op);
bool k25_sla_op_holds(enum k25_sla_op op, double a, double b);

/* What a metric is computed from. */
enum k25_sla_src {
    K25_SLA_SRC_REQ,      /* a per-request distribution (ttft, tpot, e2e, queue) */
    K25_SLA_SRC_TOKEN,    /* inter-token latencies (itl) */
    K25_SLA_SRC_BUSY,     /* busy fraction of the 100 ms windows */
    K25_SLA_SRC_SCALAR,   /* one figure of the run summary (throughput, memory, ratios) */
};
/* Statistic of a distribution. */
enum k25_sla_stat { K25_SLA_QUANTILE, K25_SLA_MEAN, K25_SLA_MIN, K25_SLA_MAX };

#define K25_SLA_MAX_COND 4
struct k25_sla_cond {
    char field[16];         /* input_length, output_length (tokens) */
    enum k25_sla_op op;
    double value;
};

/* One SLA line: "ttft_p95_ms <= 500 at input_length >= 32768". */
struct k25_sla_line {
    char text[256];
    int line;                   /* in the SLA file (0: built by hand) */
    char metric[64];
    enum k25_sla_src src;
    int dist;                   /* K25_M_TTFT, ... for REQ/TOKEN */
    enum k25_sla_stat stat;
    double q;                   /* K25_SLA_QUANTILE: 0.95 for p95 */
    enum k25_sla_op op;
    double limit;
    int n_cond;
    struct k25_sla_cond cond[K25_SLA_MAX_COND];
};

/* Health checks (docs/reports.md, "Health checks"): levels around a metric; NaN = no bound. */
struct k25_health_check {
    char metric[64];
    bool enabled;
    double fail_below, warn_below, warn_above, fail_above;
    char advice_low[160], advice_high[160];
};

#define K25_SLA_MAX_LINES 64
#define K25_HEALTH_MAX 16
struct k25_sla {
    char path[1024];            /* "" when no file was given */
    char title[256];            /* optional `title:` */
    int n_lines;
    struct k25_sla_line lines[K25_SLA_MAX_LINES];
    int n_health;
    struct k25_health_check health[K25_HEALTH_MAX];
};

/* No SLA lines, the default health checks. */
void k25_sla_init(struct k25_sla *s);
/*
 * Reads sla.yaml (docs/reports.md): `sla:` a list of lines, `health:` a
 * mapping that overrides or turns off the default checks, optional
 * `title:`.  Errors name the file, the line and (for a bad SLA line) the
 * column.
 */
int k25_sla_load(const char *path, struct k25_sla *s, struct k25_error *err);
/* Parses one SLA line (file/line only for messages). */
int k25_sla_line_parse(const char *text, const char *file, int line, struct k25_sla_line *out,
                       struct k25_error *err);

enum k25_verdict { K25_VERDICT_PASS, K25_VERDICT_FAIL, K25_VERDICT_UNSUPPORTED };
const char *k25_verdict_name(enum k25_verdict v);

struct k25_sla_result {
    enum k25_verdict verdict;
    double value;              /* measured (NaN when unsupported) */
    double ci_lo, ci_hi;       /* 95% interval of a percentile (NaN when none) */
    double margin;             /* headroom, >= 0 when it holds with room (NaN for == / !=) */
    double margin_pct;         /* margin / |limit| x 100 */
    int64_t n;                 /* samples the figure came from */
    char note[512];            /* why unsupported, or what the sample was */
};

/*
 * Evaluates an SLA line on the requests of runs[0..n_runs) pooled (several
 * repetitions of one setting).  A percentile the sample cannot support,
 * an empty selection, or a figure the runs did not measure is
 * UNSUPPORTED, never PASS.
 */
void k25_sla_eval(const struct k25_sla_line *l, const struct k25_report_run *runs, int n_runs,
                  struct k25_sla_result *out);
/*
 * The same on an array of samples already selected (the core of
 * k25_sla_eval; exposed for tests).  v is sorted in place.
 */
void k25_sla_eval_samples(const struct k25_sla_line *l, double *v, size_t n, struct k25_sla_result *out);

/* A scalar figure of a run's summary by SLA/sweep metric name (NaN: not measured). */
double k25_report_scalar(const json_t *summary, const char *metric);

/* NA: the check does not apply to the run's mode (busy fraction of a closed loop). */
enum k25_health_level { K25_HEALTH_OK, K25_HEALTH_WARN, K25_HEALTH_FAIL, K25_HEALTH_NOT_MEASURED, K25_HEALTH_NA };
const char *k25_health_level_name(enum k25_health_level l);

struct k25_health_result {
    enum k25_health_level level;
    double value;
    char note[256];
};

/* The default checks (docs/reports.md; fills h[], returns how many). */
int k25_health_defaults(struct k25_health_check *h, int max);
/* Why check c has no value in runs[0..n_runs) (the first run's summary says: no NVML, no --server-metrics,
 * not visible from the client, ...), in a few words into buf. */
void k25_health_missing_why(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs,
                            char *buf, size_t n);
/* Evaluates one check on a measured value (NaN: not measured). */
void k25_health_eval(const struct k25_health_check *c, double value, struct k25_health_result *out);
/*
 * Whether check c applies to runs[0..n_runs): the busy-fraction checks do
 * not apply to closed-loop runs (a closed loop keeps the engine saturated,
 * busy near 1 by construction).  When not, why[] says so in a few words
 * ("closed loop").
 */
bool k25_health_applies(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs, char *why,
                        size_t n);
/* The value a health check reads from a run (NaN when the run did not measure it). */
double k25_health_value(const struct k25_health_check *c, const struct k25_report_run *runs, int n_runs);
/* "busy P95 between 0.75 and 0.85" */
void k25_health_describe(const struct k25_health_check *c, char *buf, size_t n);

/* ------------------------------------------------------------- plots */

enum k25_report_format { K25_FMT_PNG, K25_FMT_SVG, K25_FMT_PDF };

/* One picture of the report. */
struct k25_report_plot {
    char name[64];          /* file stem: "ttft_cdf" */
    char *title;            /* caption (owned by the plot list, whole: never cut to a buffer) */
    char section[32];       /* "run", "sweep", "attention", "comparison" */
    char file[96];          /* "plots/ttft_cdf.png" relative to the report folder */
    char html_file[96];     /* the image the HTML embeds (PNG for pdf reports) */
    char *note;             /* what to read in it (owned by the plot list) */
};

#define K25_REPORT_MAX_PLOTS 64

/* Everything one plot needs: a template and its @KEY@ values. */
struct k25_plot_job {
    char template_name[64]; /* reports/templates/NAME.gp */
    char stem[64];
    int n_vars;
    char key[24][32];
    char val[24][1536];
};

/* Adds KEY=VALUE to a job (values are code-made or sanitized; see report_plot.c). */
void k25_plot_set(struct k25_plot_job *j, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A gnuplot single-quoted string literal of free text (user titles, labels). */
void k25_plot_quote(const char *s, char *out, size_t n);

/*
 * Where gnuplot is: $K25_GNUPLOT, else `gnuplot` on PATH.  Fails with
 * K25_ENOTFOUND and a message saying how to install it.
 */
int k25_plot_find_gnuplot(char *path, size_t n, struct k25_error *err);
/* Where the templates are: $K25_REPORT_TEMPLATES, next to the binary, or ./reports/templates. */
int k25_plot_find_templates(char *dir, size_t n, struct k25_error *err);

/*
 * Renders jobs[0..n) into plot_dir/STEM+SUFFIX.EXT: writes plot_dir/STEM.gp
 * (the filled template, kept so users can re-render or restyle it) and
 * runs gnuplot on it with plot_dir as the working directory, several at a
 * time.  Fails naming the script and quoting gnuplot's own error (its
 * stderr stays in STEM.log).
 */
int k25_plot_render_all(const char *gnuplot, const char *tmpl_dir, const char *plot_dir,
                        const struct k25_plot_job *jobs, int n, enum k25_report_format fmt, const char *suffix,
                        struct k25_error *err);

/* --------------------------------------------------------- data files */

/* Writes data files under plot_dir/data and appends the plot jobs they feed. */
#define K25_REPORT_MAX_SKIPPED 16
struct k25_plot_list {
    struct k25_plot_job jobs[K25_REPORT_MAX_PLOTS];
    struct k25_report_plot plots[K25_REPORT_MAX_PLOTS];
    int n;
    char skipped[K25_REPORT_MAX_SKIPPED][512]; /* plots a reader would expect, and why they are not drawn */
    int n_skipped;
};
/* Frees the captions of pl's plots (the list itself is the caller's). */
void k25_plot_list_free(struct k25_plot_list *pl);

int k25_report_data_run(const struct k25_report_run *r, const char *plot_dir, const char *prefix,
                        const char *heading, struct k25_plot_list *pl, struct k25_error *err);
int k25_report_data_compare(const struct k25_report_run *runs, int n, const char *plot_dir, const char *prefix,
                            const char *heading, struct k25_plot_list *pl, struct k25_error *err);
int k25_report_data_sweep(const struct k25_report_sweep *s, const char *plot_dir, struct k25_plot_list *pl,
                          struct k25_error *err);
int k25_report_data_attn(const struct k25_report_attn *a, const char *plot_dir, struct k25_plot_list *pl,
                         struct k25_error *err);

/*
 * Least squares y = a + b x over n points given by their sums, with a >= 0
 * and b >= 0 (a TTFT trend's overhead and per-token cost); r2 of that fit
 * (NaN when y is constant).
 */
void k25_report_fit_nonneg(double sx, double sy, double sxx, double sxy, double syy, double n, double *a, double *b,
                           double *r2);

/* A comparison ratio within this of 1 is shown as no difference (0.998 peak memory is not "better"). */
#define K25_REPORT_SAME_TOL 0.02

/* Human axis label of a metric: "TTFT P50 (ms)". */
void k25_report_metric_label(const char *metric, char *buf, size_t n);

/* -------------------------------------------------------------- report */

struct k25_report_opts {
    const char *const *inputs;  /* paths */
    int n_inputs;
    const char *out;            /* report folder (created) */
    const char *sla_path;       /* NULL: no SLA lines, default health checks */
    enum k25_report_format format;
    const char *title;          /* NULL: made from the input */
    bool quiet;
    enum k25_progress_mode progress; /* stage lines on stderr (progress.c); zeroed: auto */
};

/* What was decided, for the caller (exit status) and verdict.json. */
struct k25_report_outcome {
    enum k25_verdict overall;   /* PASS when every SLA line passes (and there is at least one) */
    int n_pass, n_fail, n_unsupported;
    int health_fail, health_warn, health_not_measured;
    int n_plots;
    double seconds;
};

/* Everything the document needs (report_doc.c). */
#define K25_REPORT_MAX_COLS 8
struct k25_report_doc {
    const struct k25_report_opts *opts;
    const struct k25_report_input *in;
    const struct k25_sla *sla;
    char title[256];
    char generated_utc[32];
    /* verdicts per [line][column]: one column per compared run, else one */
    int n_cols;
    char col_label[K25_REPORT_MAX_COLS][128];
    const struct k25_report_run *col_runs[K25_REPORT_MAX_COLS]; /* first run of the column */
    int col_nruns[K25_REPORT_MAX_COLS];                         /* runs pooled in it */
    struct k25_sla_result sla_res[K25_SLA_MAX_LINES][K25_REPORT_MAX_COLS];
    struct k25_health_result health_res[K25_HEALTH_MAX][K25_REPORT_MAX_COLS];
    const struct k25_report_plot *plots;
    int n_plots;
    const char (*skipped)[512];  /* why an expected plot is missing ([n_skipped]) */
    int n_skipped;
    struct k25_report_outcome *outcome;
};

/*
 * A writer backend: report_md.c and report_html.c fill one; report_doc.c
 * writes the document once through it.  Text arguments are plain text
 * (the backend escapes them).  A table cell whose first word is a verdict
 * (PASS, FAIL, UNSUPPORTED, OK, WARN, INCONCLUSIVE) is shown as one.
 */
struct k25_doc_out {
    FILE *f;
    const char *out_dir;        /* report folder (images are read from here) */
    int rc;                     /* first failure (K25_E*), 0 while all is well */
    struct k25_error *err;
    void (*begin)(struct k25_doc_out *o, const char *title);
    void (*end)(struct k25_doc_out *o);
    void (*heading)(struct k25_doc_out *o, int level, const char *text);
    void (*para)(struct k25_doc_out *o, const char *text);
    void (*code)(struct k25_doc_out *o, const char *text);   /* a preformatted block */
    void (*table_begin)(struct k25_doc_out *o, int ncols, const char *const *head);
    void (*table_row)(struct k25_doc_out *o, int ncols, const char *const *cells);
    void (*table_end)(struct k25_doc_out *o);
    void (*image)(struct k25_doc_out *o, const struct k25_report_plot *p);
};

void k25_doc_out_md(struct k25_doc_out *o);
void k25_doc_out_html(struct k25_doc_out *o);

/* Writes the whole document through o (headline, verdicts, plots, provenance). */
void k25_report_doc_write(const struct k25_report_doc *d, struct k25_doc_out *o);

/* Writes data to path atomically (temporary name, fsync, rename). */
int k25_report_write_file(const char *path, const char *data, size_t len, struct k25_error *err);

/*
 * The report folder, all or nothing (report_out.c): _open checks --out (a
 * folder, new or holding only an earlier report; K25_EINVAL otherwise),
 * creates its parents and the work folder beside it (d->work, where
 * everything is rendered); _commit fsyncs the work folder and swaps it into
 * place (renameat2 RENAME_EXCHANGE, then the old report is removed);
 * _abort removes the work folder, leaving --out as it was.
 */
struct k25_report_dest {
    char final[PATH_MAX];     /* --out, without trailing slashes */
    char work[PATH_MAX + 32]; /* FINAL.tmp.PID while rendering; "" when none */
};
int k25_report_dest_open(struct k25_report_dest *d, const char *out, struct k25_error *err);
int k25_report_dest_commit(struct k25_report_dest *d, struct k25_error *err);
void k25_report_dest_abort(struct k25_report_dest *d);

/*
 * Whether path holds a complete picture of format fmt: a PNG whose chunks
 * run from the signature to IEND at the file's end, an SVG that ends with
 * </svg>, a PDF that starts with %PDF- and ends with %%EOF.  gnuplot exits 0
 * even when writing its output failed (a full disk): this is how the
 * report finds out.
 */
bool k25_plot_file_complete(const char *path, enum k25_report_format fmt);

/* The whole report.  *outcome (may be NULL) receives the verdict. */
int k25_report_generate(const struct k25_report_opts *o, struct k25_report_outcome *outcome, struct k25_error *err);

/* snprintf where cutting a long path or label is intended (never overflows; report_doc.c). */
void k25_report_sfmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Formats a figure compactly ("512", "0.0134", "1.23e+05"); "n/a" for NaN. */
void k25_report_fmt(double v, char *buf, size_t n);

#endif /* K25_REPORT_H */
