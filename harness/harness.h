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

/*
 * TEST-ONLY degradation knobs (testknob.c): installs K25_TEST_SLOWDOWN /
 * K25_TEST_LOSSY on engine e when set in the environment (off otherwise).
 * Every engine the harness creates gets them.
 */
void k25_testknob_install(k25_engine_t *e);

#endif /* K25_HARNESS_H */
