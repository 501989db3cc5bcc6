/*
 * cli_attn_bench.c - `k25 attn-bench`: the attention microbenchmark's
 * command line.  Parses the setting lists, measures the machine, runs the
 * settings (harness/attnbench.c) and prints a table, JSON, and writes the
 * HDF5 file.  See docs/attention.md for how to read the output.
 */
#include "harness.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void ab_usage(FILE *out)
{
    fprintf(out,
            "usage: k25 attn-bench [--impl chunked,flash2,naive] [--context 1k,4k,16k,64k] [--chunk 512,2048]\n"
            "                      [--heads H] [--kv-heads K] [--head-dim D] [--dtype fp32,fp16] [--decode]\n"
            "                      [--repeat N] [--warmup N] [--block-size N] [--threads N] [--seed S]\n"
            "                      [--mem-limit-mb N] [--out attn.h5] [--json] [--json-file F] [--quiet]\n\n"
            "Times the attention implementations on random N(0,1) data in a paged KV cache, after\n"
            "measuring this machine's FP32 FMA peak and STREAM-triad bandwidth on the same threads,\n"
            "and reports every result also as a fraction of those limits (prefill against the FMA\n"
            "peak, decode against the bandwidth) plus chunked-vs-flash2 and chunked-vs-one-pass ratios.\n\n"
            "  --impl LIST        implementations (default chunked,flash2,naive)\n"
            "  --context LIST     tokens per sequence, k suffix = 1024 (default 1k,4k)\n"
            "  --chunk LIST       chunk sizes for chunked prefill (default 512,2048); chunked also\n"
            "                     runs one-pass (chunk = context) as its own reference\n"
            "  --heads H          query heads (default 8)\n"
            "  --kv-heads K       KV heads, H a multiple of K (default 2)\n"
            "  --head-dim D       head dimension (default 128)\n"
            "  --dtype LIST       KV storage: fp32, fp16 (default fp32)\n"
            "  --decode           one query at the end of the context (decode) instead of prefill\n"
            "  --repeat N         timed repetitions, median reported (default 3)\n"
            "  --warmup N         untimed runs first (default 1)\n"
            "  --block-size N     KV block size in tokens (default 256)\n"
            "  --threads N        threads for kernels, BLAS and probes (default: all cores)\n"
            "  --seed S           data seed (default 1)\n"
            "  --mem-limit-mb N   skip settings needing more (default: 90%% of available memory)\n"
            "  --out FILE         write the HDF5 file (docs/trace-schema.md)\n"
            "  --json             print the JSON summary on stdout instead of the table\n"
            "  --json-file FILE   also write the JSON summary to FILE\n"
            "  --quick-probe      short machine probes (for tests; less precise)\n"
            "  --quiet            no progress on stderr\n");
}

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

static int parse_int(const char *flag, const char *s, long lo, long hi, long *out, struct k25_error *err)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end || errno || v < lo || v > hi)
        return k25_error_set(err, K25_EINVAL, "command line", 0, flag,
                             "expected an integer in %ld..%ld, got \"%s\"", lo, hi, s);
    *out = v;
    return K25_OK;
}

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
    long threads = 0, v = 0;
    struct k25_attn_bench_result res;
    memset(&res, 0, sizeof(res));
    char *jtxt = NULL;
    int status = 2;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            ab_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--decode")) {
            o.decode = true;
            continue;
        }
        if (!strcmp(a, "--json")) {
            json = true;
            continue;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strcmp(a, "--quick-probe")) {
            quick_probe = true;
            continue;
        }
        static const char *const with_value[] = {"--impl", "--context", "--chunk", "--heads", "--kv-heads",
                                                 "--head-dim", "--dtype", "--repeat", "--warmup", "--block-size",
                                                 "--threads", "--seed", "--mem-limit-mb", "--out", "--json-file"};
        bool known = false;
        for (size_t k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++)
            known |= !strcmp(a, with_value[k]);
        if (!known) {
            k25_error_set(&err, K25_EINVAL, "command line", 0, a, "unknown option (k25 attn-bench --help)");
            goto out_err;
        }
        if (i + 1 >= argc) {
            k25_error_set(&err, K25_EINVAL, "command line", 0, a, "missing value");
            goto out_err;
        }
        const char *val = argv[++i];
        int rc = 0;
        if (!strcmp(a, "--impl") || !strcmp(a, "--dtype")) {
            char buf[256];
            snprintf(buf, sizeof(buf), "%s", val);
            int n = 0;
            for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (!strcmp(a, "--impl")) {
                    enum k25_attn_impl im;
                    if (n == K25_ATTN_NIMPL || k25_attn_impl_parse(tok, &im, &err) != K25_OK) {
                        k25_error_set(&err, K25_EINVAL, "command line", 0, a,
                                      "expected a list of chunked, flash2, naive; got \"%s\"", val);
                        goto out_err;
                    }
                    o.impls[n++] = im;
                } else {
                    if (n == 2 || (strcmp(tok, "fp32") && strcmp(tok, "fp16"))) {
                        k25_error_set(&err, K25_EINVAL, "command line", 0, a,
                                      "expected a list of fp32, fp16 (the KV cache's storage types); got \"%s\"",
                                      val);
                        goto out_err;
                    }
                    o.dtypes[n++] = strcmp(tok, "fp32") ? K25_DTYPE_FP16 : K25_DTYPE_FP32;
                }
            }
            if (n == 0) {
                k25_error_set(&err, K25_EINVAL, "command line", 0, a, "empty list");
                goto out_err;
            }
            *(!strcmp(a, "--impl") ? &o.n_impls : &o.n_dtypes) = n;
        } else if (!strcmp(a, "--context")) {
            rc = parse_counts(a, val, o.contexts, 16, &o.n_contexts, 1 << 24, &err);
        } else if (!strcmp(a, "--chunk")) {
            rc = parse_counts(a, val, o.chunks, 8, &o.n_chunks, 1 << 24, &err);
        } else if (!strcmp(a, "--heads") && !(rc = parse_int(a, val, 1, 1024, &v, &err))) {
            o.heads = (int)v;
        } else if (!strcmp(a, "--kv-heads") && !(rc = parse_int(a, val, 1, 1024, &v, &err))) {
            o.kv_heads = (int)v;
        } else if (!strcmp(a, "--head-dim") && !(rc = parse_int(a, val, 1, 1024, &v, &err))) {
            o.head_dim = (int)v;
        } else if (!strcmp(a, "--repeat") && !(rc = parse_int(a, val, 1, 1000, &v, &err))) {
            o.repeat = (int)v;
        } else if (!strcmp(a, "--warmup") && !(rc = parse_int(a, val, 0, 100, &v, &err))) {
            o.warmup = (int)v;
        } else if (!strcmp(a, "--block-size") && !(rc = parse_int(a, val, 1, 65536, &v, &err))) {
            o.block_size = (int)v;
        } else if (!strcmp(a, "--threads")) {
            rc = parse_int(a, val, 0, 4096, &threads, &err);
        } else if (!strcmp(a, "--seed") && !(rc = parse_int(a, val, 0, INT32_MAX, &v, &err))) {
            o.seed = (uint64_t)v;
        } else if (!strcmp(a, "--mem-limit-mb") && !(rc = parse_int(a, val, 1, 1L << 40, &v, &err))) {
            o.mem_limit_bytes = (int64_t)v << 20;
        } else if (!strcmp(a, "--out")) {
            out_path = val;
        } else if (!strcmp(a, "--json-file")) {
            json_file = val;
        }
        if (rc)
            goto out_err;
    }
    if (o.heads % o.kv_heads) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--heads",
                      "%d query heads cannot share %d KV heads evenly", o.heads, o.kv_heads);
        goto out_err;
    }
    o.progress = !quiet && isatty(2);
    /* output paths checked before anything is measured */
    if ((out_path && k25_output_file_check(out_path, "--out", &err) != K25_OK) ||
        (json_file && k25_output_file_check(json_file, "--json-file", &err) != K25_OK))
        goto out_err;

    int nthreads = k25_set_threads((int)threads);
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
        char cmd[2048] = "";
        size_t w = 0;
        for (int i = 0; i < argc && w < sizeof(cmd) - 1; i++)
            w += (size_t)snprintf(cmd + w, sizeof(cmd) - w, i ? " %s" : "%s", argv[i]);
        if (k25_attn_bench_write_h5(out_path, &o, &res, cmd, &err) != K25_OK) {
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
