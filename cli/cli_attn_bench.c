/*
 * cli_attn_bench.c - `k25 attn-bench`: the attention microbenchmark's
 * command line.  Parses the setting lists, measures the machine, runs the
 * settings (harness/attnbench.c) and prints a table, JSON, and writes the
 * HDF5 file.  See docs/attention.md for how to read the output.
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "1k,4k,17" into out[cap]; 0 or K25_EINVAL naming the flag. */
static int parse_counts(const char *flag, const char *s, int *out, int cap, int *n, int64_t max,
                        struct k25_error *err)
{
    *n = 0;
    const char *p = s;
    while (*p) {
        const char *end;
        int64_t v = k25_cli_parse_count(p, &end);
        if (v <= 0 || v > max || (*end && *end != ',') || *n == cap)
            return k25_error_set(err, K25_EINVAL, "command line", 0, flag,
                                 "expected up to %d comma-separated counts in 1..%lld (k = 1024), bad item at "
                                 "column %d of \"%s\"",
                                 cap, (long long)max, (int)(p - s) + 1, s);
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (*n == 0)
        return k25_error_set(err, K25_EINVAL, "command line", 0, flag, "empty list");
    return K25_OK;
}

/* --context: up to 16 counts. */
static int parse_contexts(void *dest, const char *name, const char *value, struct k25_error *err)
{
    struct k25_attn_bench_opts *o = dest;
    return parse_counts(name, value, o->contexts, 16, &o->n_contexts, 1 << 24, err);
}

/* --chunk: up to 8 counts. */
static int parse_chunks(void *dest, const char *name, const char *value, struct k25_error *err)
{
    struct k25_attn_bench_opts *o = dest;
    return parse_counts(name, value, o->chunks, 8, &o->n_chunks, 1 << 24, err);
}

/* --impl chunked,flash2,naive */
static int parse_impls(void *dest, const char *name, const char *value, struct k25_error *err)
{
    struct k25_attn_bench_opts *o = dest;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", value);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        enum k25_attn_impl im;
        if (n == K25_ATTN_NIMPL || k25_attn_impl_parse(tok, &im, err) != K25_OK)
            return k25_cliopt_error(err, K25_EINVAL, name, "expected a list of chunked, flash2, naive; got \"%s\"",
                                    value);
        o->impls[n++] = im;
    }
    if (n == 0)
        return k25_cliopt_error(err, K25_EINVAL, name, "empty list");
    o->n_impls = n;
    return K25_OK;
}

/* --dtype fp32,fp16,int8,int4 */
static int parse_dtypes(void *dest, const char *name, const char *value, struct k25_error *err)
{
    static const char *const names[] = {"fp32", "fp16", "int8", "int4"};
    static const enum k25_dtype types[] = {K25_DTYPE_FP32, K25_DTYPE_FP16, K25_DTYPE_INT8, K25_DTYPE_INT4};
    struct k25_attn_bench_opts *o = dest;
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", value);
    int n = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < 4 && strcmp(tok, names[k]))
            k++;
        for (int i = 0; k < 4 && i < n; i++)
            if (o->dtypes[i] == types[k])
                k = 4; /* named twice */
        if (k == 4)
            return k25_cliopt_error(err, K25_EINVAL, name,
                                    "expected a list of distinct fp32, fp16, int8, int4 (the KV cache's storage "
                                    "types); got \"%s\"",
                                    value);
        o->dtypes[n++] = types[k];
    }
    if (n == 0)
        return k25_cliopt_error(err, K25_EINVAL, name, "empty list");
    o->n_dtypes = n;
    return K25_OK;
}

/*
 * k25 attn-bench: parses the options (the table below, which --help
 * prints) and runs the micro-benchmark.  Over ~120 lines because the
 * option table and help text are a third of it.
 */
int k25_cmd_attn_bench(int argc, char **argv)
{
    struct k25_error err;
    k25_error_clear(&err);
    struct k25_attn_bench_opts o;
    memset(&o, 0, sizeof(o));
    o.impls[0] = K25_ATTN_CHUNKED, o.impls[1] = K25_ATTN_FLASH2, o.impls[2] = K25_ATTN_NAIVE, o.n_impls = 3;
    o.contexts[0] = 1024, o.contexts[1] = 4096, o.n_contexts = 2;
    o.chunks[0] = 512, o.chunks[1] = 2048, o.n_chunks = 2;
    o.dtypes[0] = K25_DTYPE_FP32, o.n_dtypes = 1;
    o.heads = 8, o.kv_heads = 2, o.head_dim = 128, o.block_size = 256;
    o.repeat = 3, o.warmup = 1, o.seed = 1;
    const char *out_path = NULL, *json_file = NULL;
    bool json = false, quiet = false, quick_probe = false;
    int progress = K25_PROGRESS_AUTO;
    int threads = 0;
    int64_t seed = 1, mem_limit_mb = 0;
    struct k25_attn_bench_result res;
    memset(&res, 0, sizeof(res));
    char *jtxt = NULL;
    int status = 2;
    const struct k25_opt opts[] = {
        {.names = {"--impl"}, .type = K25_OPT_CALL, .dest = &o, .parse = parse_impls, .metavar = "LIST",
         .deflt = "chunked,flash2,naive", .help = "implementations"},
        {.names = {"--context"}, .type = K25_OPT_CALL, .dest = &o, .parse = parse_contexts, .metavar = "LIST",
         .deflt = "1k,4k", .help = "tokens per sequence, k suffix = 1024"},
        {.names = {"--chunk"}, .type = K25_OPT_CALL, .dest = &o, .parse = parse_chunks, .metavar = "LIST",
         .deflt = "512,2048",
         .help = "chunk sizes for chunked prefill; chunked also\nruns one-pass (chunk = context) as its own reference"},
        {.names = {"--heads"}, .type = K25_OPT_INT, .dest = &o.heads, .min = 1, .max = 1024, .metavar = "H",
         .help = "query heads"},
        {.names = {"--kv-heads"}, .type = K25_OPT_INT, .dest = &o.kv_heads, .min = 1, .max = 1024, .metavar = "K",
         .help = "KV heads, H a multiple of K"},
        {.names = {"--head-dim"}, .type = K25_OPT_INT, .dest = &o.head_dim, .min = 1, .max = 1024, .metavar = "D",
         .help = "head dimension"},
        {.names = {"--dtype"}, .type = K25_OPT_CALL, .dest = &o, .parse = parse_dtypes, .metavar = "LIST",
         .deflt = "fp32",
         .help = "KV storage: fp32, fp16, int8, int4 (int8/int4 as the engine stores them: key groups of 32 slots, "
                 "value groups of 32 channels, the newest 128-160 slots in the fp16 residual)"},
        {.names = {"--decode"}, .type = K25_OPT_FLAG, .dest = &o.decode,
         .help = "one query at the end of the context (decode) instead of prefill"},
        {.names = {"--repeat"}, .type = K25_OPT_INT, .dest = &o.repeat, .min = 1, .max = 1000,
         .help = "timed repetitions, median reported"},
        {.names = {"--warmup"}, .type = K25_OPT_INT, .dest = &o.warmup, .min = 0, .max = 100,
         .help = "untimed runs first"},
        {.names = {"--block-size"}, .type = K25_OPT_INT, .dest = &o.block_size, .min = 1, .max = 65536,
         .help = "KV block size in tokens"},
        {.names = {"--threads"}, .type = K25_OPT_INT, .dest = &threads, .min = 0, .max = 4096,
         .deflt = "0: all cores", .help = "threads for kernels, BLAS and probes"},
        {.names = {"--seed"}, .type = K25_OPT_INT64, .dest = &seed, .min = 0, .max = INT32_MAX, .metavar = "S",
         .help = "data seed"},
        {.names = {"--mem-limit-mb"}, .type = K25_OPT_INT64, .dest = &mem_limit_mb, .min = 1, .max = 1LL << 40,
         .deflt = "90% of available memory", .help = "skip settings needing more"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &out_path,
         .help = "write the HDF5 file (docs/trace-schema.md)"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json,
         .help = "print the JSON summary on stdout instead of the table"},
        {.names = {"--json-file"}, .type = K25_OPT_PATH, .dest = &json_file,
         .help = "also write the JSON summary to FILE"},
        {.names = {"--quick-probe"}, .type = K25_OPT_FLAG, .dest = &quick_probe,
         .help = "short machine probes (for tests; less precise)"},
        {.names = {"--quiet"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no progress on stderr"},
        {.names = {"--progress"}, .type = K25_OPT_ENUM, .dest = &progress, .choices = k25_progress_mode_names,
         .help = "progress on stderr: auto (a bar on a terminal, else a plain line\n"
                 "every 10 s: settings done/total, rate, ETA), bar, lines, off"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "attn-bench",
        .usage = "attn-bench [--impl chunked,flash2,naive] [--context 1k,4k,16k,64k] [--chunk 512,2048]\n"
                 "                      [--heads H] [--kv-heads K] [--head-dim D] [--dtype fp32,fp16,int8,int4] [--decode]\n"
                 "                      [--repeat N] [--warmup N] [--block-size N] [--threads N] [--seed S]\n"
                 "                      [--mem-limit-mb N] [--out attn.h5] [--json] [--json-file F] [--quiet]",
        .about = "Times the attention implementations on random N(0,1) data in a paged KV cache, after\n"
                 "measuring this machine's FP32 FMA peak and STREAM-triad bandwidth on the same threads,\n"
                 "and reports every result also as a fraction of those limits (prefill against the FMA\n"
                 "peak, decode against the bandwidth) plus chunked-vs-flash2 and chunked-vs-one-pass ratios.\n",
        .opts = opts,
        .options_only = true,
    };
    /* the command line as given, for provenance (the parser compacts argv) */
    char cmdline[2048] = "";
    for (size_t i = 0, w = 0; i < (size_t)argc && w < sizeof(cmdline) - 1; i++)
        w += (size_t)snprintf(cmdline + w, sizeof(cmdline) - w, i ? " %s" : "%s", argv[i]);
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK)
        goto out_err;
    o.seed = (uint64_t)seed;
    o.mem_limit_bytes = mem_limit_mb << 20;
    if (o.heads % o.kv_heads) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--heads",
                      "%d query heads cannot share %d KV heads evenly", o.heads, o.kv_heads);
        goto out_err;
    }
    o.progress = k25_progress_resolve((enum k25_progress_mode)progress, quiet);
    /* output paths checked before anything is measured */
    if ((out_path && k25_output_file_check(out_path, "--out", &err) != K25_OK) ||
        (json_file && k25_output_file_check(json_file, "--json-file", &err) != K25_OK))
        goto out_err;

    int nthreads = k25_set_threads(threads);
    struct k25_attn_machine m;
    if (!quiet)
        fprintf(stderr, "attn-bench: measuring the machine (FMA peak, STREAM triad) on %d threads...\n", nthreads);
    if (k25_attn_bench_probe(&m, nthreads, quick_probe) != K25_OK) {
        k25_error_set(&err, K25_EINTERNAL, NULL, 0, NULL, "the machine probes failed (out of memory?)");
        goto out_err;
    }
    if (k25_attn_bench_run(&o, &m, &res, &err) != K25_OK)
        goto out_err;

    if (out_path) {
        if (k25_attn_bench_write_h5(out_path, &o, &res, cmdline, &err) != K25_OK) {
            status = err.code == K25_EINVAL ? 2 : 1;
            goto out_err;
        }
    }
    if (json || json_file) {
        if (!(jtxt = k25_attn_bench_json(&o, &res))) {
            k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "out of memory (JSON)");
            status = 1;
            goto out_err;
        }
        if (json_file && k25_write_text_atomic(json_file, jtxt, &err) != K25_OK) {
            status = err.code == K25_EINVAL ? 2 : 1;
            goto out_err;
        }
    }
    if (json)
        printf("%s\n", jtxt);
    else
        k25_attn_bench_print(stdout, &res);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "k25 attn-bench: writing the output failed: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    status = 0;
    goto out;

out_err:
    fprintf(stderr, "k25 attn-bench: %s\n", err.msg);
    if (err.code == K25_ENOMEM || err.code == K25_EIO)
        status = 1;
out:
    free(jtxt);
    k25_attn_bench_result_free(&res);
    return status;
}
