/*
 * harness.h - public interface of the harness: the command-line front end's
 * subcommands (each callable without a process, for tests) and the shared
 * command-line helpers.
 */
#ifndef K25_HARNESS_H
#define K25_HARNESS_H

#include "k25.h"

#include <jansson.h>
#include <stdio.h>
#include <yaml.h>

/* Subcommands: argv[0] is the subcommand name; return the exit status. */
int k25_cmd_run(int argc, char **argv);
int k25_cmd_gold(int argc, char **argv);
int k25_cmd_config(int argc, char **argv);
int k25_cmd_sweep(int argc, char **argv);
int k25_cmd_logs(int argc, char **argv);
int k25_cmd_bench(int argc, char **argv);   /* cli_bench.c; alias k25-benchmark */
int k25_cmd_inspect(int argc, char **argv); /* cli_inspect.c */
int k25_cmd_mem(int argc, char **argv);        /* cli_mem.c */
int k25_cmd_attn_bench(int argc, char **argv); /* cli_attn_bench.c */
int k25_cmd_report(int argc, char **argv);     /* cli_report.c; reports from runs, sweeps, attn-bench */
int k25_cmd_gate(int argc, char **argv);       /* cli_gate.c: 0 pass, 1 regression, 2 bad input */
int k25_cmd_serve(int argc, char **argv);      /* cli_serve.c: OpenAI-compatible HTTP server (docs/serve.md) */

/*
 * Applies engine configuration from the command line to cfg, in order:
 * first `--config FILE` (YAML), then every `--KEY VALUE` / `--KEY=VALUE`
 * flag naming a config key (underscores written as dashes; boolean keys
 * also accept the bare flag, e.g. `--disable-prefill-optimization`).
 * The CLI wins over the file.  Consumed arguments are removed from argv
 * (argc updated, argv[0] kept); the rest is left for the caller.
 * Errors name the file and line (YAML) or "command line" and the flag.
 */
int k25_cli_apply_config(int *argc, char **argv, struct k25_config *cfg, struct k25_error *err);

/*
 * A token count as users write it: "131072", "128k" (x1024), "1m" (x1024^2).
 * Returns 0 for a bad or non-positive value; *end points past what was read
 * (callers check it for "" or a list separator).
 */
int64_t k25_cli_parse_count(const char *s, const char **end);

/* Prints "  --key VALUE   help (default: X)" for every config key. */
void k25_cli_print_config_flags(FILE *out);

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
    int metric[K25_PCTL_MAX_METRICS];   /* K25_M_* (bench.h) */
};
void k25_pctl_spec_init(struct k25_pctl_spec *s);
/* "50,90,99.9" (percent, each in (0, 100)) into s->q, sorted; K25_EINVAL naming --metric-percentiles. */
int k25_pctl_spec_parse_list(struct k25_pctl_spec *s, const char *list, struct k25_error *err);
/* "ttft,tpot,itl,e2el" (vLLM names) or k25 names (ttft_ms, e2e_ms, queue_ms, sched_lag_ms);
 * K25_EINVAL naming --percentile-metrics and listing the names. */
int k25_pctl_spec_parse_metrics(struct k25_pctl_spec *s, const char *list, struct k25_error *err);
/* "p50", "p99.9": the key of quantile q in JSON and tables. */
void k25_pctl_label(double q, char *buf, size_t n);

/* k25_stats_describe (bench.h) with the percentiles read by method m (the intervals stay
 * order statistics); k25_stats_describe is this with K25_PCTL_NEAREST_RANK. */
struct k25_dist;
void k25_stats_describe_method(double *v, size_t n, enum k25_pctl_method m, struct k25_dist *out);
/* k25_bench_summarize (bench.h) with every percentile of the summary read by method m;
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
    enum k25_dtype dtypes[2];
    int n_dtypes;
    int heads, kv_heads, head_dim, block_size;
    bool decode;               /* decode settings instead of prefill */
    int repeat, warmup;
    uint64_t seed;
    int64_t mem_limit_bytes;   /* skip settings needing more; 0 = 90% of MemAvailable */
    bool progress;             /* progress line on stderr */
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

/* ------------------------------------------------ shared input/output */

/*
 * Loads a whole YAML file into *doc (the caller deletes it with
 * yaml_document_delete).  A missing file is K25_ENOTFOUND, a syntax error
 * K25_EFORMAT naming the file and line.
 */
int k25_yaml_load(const char *path, yaml_document_t *doc, struct k25_error *err);
/* v as the shortest decimal that reads back as the same double ("0.85"); .nan / .inf (yamldoc.c). */
void k25_fmt_double(double v, char *buf, size_t n);

/* The value at a dot-separated key path ("ttft_ms.p99") in o, or NULL. */
const json_t *k25_json_path(const json_t *o, const char *path);

/*
 * Checks, before any work is done, that path can be an output file: not a
 * directory, not a device or pipe (results are renamed into place, which
 * would replace it), and its folder exists and is writable.  K25_EINVAL
 * naming the path and the option (flag, may be NULL) otherwise: every
 * command exits 2 on it.  Creates nothing.
 */
int k25_output_file_check(const char *path, const char *flag, struct k25_error *err);

/*
 * Is the writer of a temporary NAME.tmp.PID (k25_afile, h5store, the report
 * folder) alive on this machine?  False for a name without a pid or a dead
 * pid; true for a live one (or one we may not signal).  Cleanups remove
 * only temporaries whose writer is gone, so a concurrent writer keeps its file.
 */
bool k25_tmp_writer_alive(const char *name);

/* The folder PATH is in: "." for a bare name, "/" for a top-level entry (cut to n - 1 bytes). */
void k25_path_parent(const char *path, char *out, size_t n);

/*
 * A result file written atomically: k25_afile_open creates PATH.tmp.PID
 * (a.f is the stream to write), k25_afile_commit checks, flushes, fsyncs,
 * closes and renames it onto PATH, k25_afile_abort removes it.  On a failed
 * commit nothing is left under either name.
 */
struct k25_afile {
    FILE *f;
    char path[1024];
    char tmp[1100];
};
int k25_afile_open(struct k25_afile *a, const char *path, struct k25_error *err);
int k25_afile_commit(struct k25_afile *a, struct k25_error *err);
void k25_afile_abort(struct k25_afile *a);
/* Whole text (a newline is added when missing) or JSON (indented) atomically. */
int k25_write_text_atomic(const char *path, const char *text, struct k25_error *err);
int k25_write_json_atomic(const char *path, const json_t *j, struct k25_error *err);

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

int k25_cmd_checksum(int argc, char **argv); /* cli_checksum.c: 0 ok, 1 mismatch, 2 bad input */

/*
 * TEST-ONLY degradation knobs (testknob.c): installs K25_TEST_SLOWDOWN /
 * K25_TEST_LOSSY on engine e when set in the environment (off otherwise).
 * Every engine the harness creates gets them.
 */
void k25_testknob_install(k25_engine_t *e);

#endif /* K25_HARNESS_H */
