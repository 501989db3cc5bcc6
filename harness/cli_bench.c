/*
 * cli_bench.c - `k25 bench` (alias `k25-benchmark`): argument parsing
 * only; the benchmark is k25_bench_measure (bench.c).
 */
#include "harness.h"
#include "bench.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop; /* the signal that asked to stop, 0 while none */

/* The first SIGINT/SIGTERM ends the run early (what was measured is kept);
 * a second one ends the process at once (no result under the final names). */
static void on_signal(int sig)
{
    if (g_stop) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_stop = sig;
}

static void bench_usage(FILE *out)
{
    fprintf(out,
            "usage: k25 bench --dataset FILE --out run.h5 [--config k25.yaml] [engine flags]\n"
            "                 [--concurrency N] [--requests N | --duration S] [--rate R [--burstiness B]]\n"
            "                 [--filter EXPR] [--warmup N] [--repeat K] [--seed S]\n"
            "                 [--slo ttft_ms=500,tpot_ms=50] [--json summary.json]\n"
            "                 [--fidelity [--fidelity-tokens N]] [--quiet]\n\n"
            "Drives the reference engine with a gold set under a chosen load and stores every\n"
            "request's trace (HDF5, docs/trace-schema.md) with the run's provenance.\n"
            "Metric definitions: docs/metrics.md.\n\n"
            "  --dataset FILE      JSONL gold set (requests cycle through it in a seeded order)\n"
            "  --out FILE          HDF5 trace, written under a temporary name, renamed when complete\n"
            "  --json FILE         also write the summary and provenance as JSON (for jq)\n"
            "  --concurrency N     closed loop: N users, each sends its next request when the last\n"
            "                      one ends (default 1); open loop: cap on requests in flight\n"
            "                      (default 0 = no cap)\n"
            "  --requests N        measured requests per repetition (default: one pass over the\n"
            "                      selected requests)\n"
            "  --duration S        instead: send requests for S seconds (in-flight ones finish)\n"
            "  --rate R            open loop: arrivals at R requests/s on a seeded schedule;\n"
            "                      latencies count from each scheduled arrival\n"
            "  --burstiness B      gamma shape of the inter-arrival times (1 = Poisson, < 1 burstier)\n"
            "  --filter EXPR       select requests, e.g. 'output_length > 1800 && domain == \"legal\"'\n"
            "  --warmup N          run N requests first (closed loop) and discard them\n"
            "  --repeat K          run the measurement K times (1..%d) for confidence intervals\n"
            "  --seed S            seeds sampling, the request order and the arrival schedule\n"
            "  --slo LIST          objectives for goodput: ttft_ms, tpot_ms, itl_ms, e2e_ms\n"
            "  --fidelity          after the measurement, compare every selected request against the\n"
            "                      exact engine (fp32 KV, kv_compression_ratio 1, one-pass prefill):\n"
            "                      next-token KL, top-1 and greedy-token agreement, attention error\n"
            "                      (summary.fidelity in the JSON, /fidelity in the trace)\n"
            "  --fidelity-tokens N generated positions compared per request (default 64)\n"
            "  --quiet             no progress line (it is shown only when stderr is a terminal)\n\n"
            "Ctrl-C (SIGINT) or SIGTERM ends the run early: the requests that finished are written,\n"
            "marked interrupted (/meta/interrupted, \"interrupted\": true), and k25 bench exits 130\n"
            "(SIGINT) or 143 (SIGTERM); a second signal stops at once, writing nothing.\n"
            "Exit status: 0 done, 2 bad input or an unusable output path, 1 a failure while running.\n\n"
            "Engine flags (each also a key of the YAML --config file; the command line wins):\n",
            K25_BENCH_MAX_REPEAT);
    k25_cli_print_config_flags(out);
}

static int parse_i64(const char *flag, const char *v, int64_t lo, int64_t *out, struct k25_error *err)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < lo)
        return k25_error_set(err, K25_EINVAL, "command line", 0, flag, "expected an integer >= %lld, got \"%s\"",
                             (long long)lo, v);
    *out = x;
    return K25_OK;
}

static int parse_pos_f64(const char *flag, const char *v, double *out, struct k25_error *err)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !(x > 0) || isinf(x))
        return k25_error_set(err, K25_EINVAL, "command line", 0, flag, "expected a positive number, got \"%s\"", v);
    *out = x;
    return K25_OK;
}

/* argv joined with spaces, arguments with spaces or quotes single-quoted. */
static char *join_cmdline(int argc, char **argv)
{
    size_t n = 1;
    for (int i = 0; i < argc; i++)
        n += 4 * strlen(argv[i]) + 3;
    char *s = malloc(n), *p = s;
    if (!s)
        return NULL;
    for (int i = 0; i < argc; i++) {
        bool q = strpbrk(argv[i], " \t'\"$&|<>;*?") != NULL || !*argv[i];
        if (i)
            *p++ = ' ';
        if (q)
            *p++ = '\'';
        for (const char *c = argv[i]; *c; c++) {
            if (*c == '\'') {
                memcpy(p, "'\\''", 4);
                p += 4;
            } else {
                *p++ = *c;
            }
        }
        if (q)
            *p++ = '\'';
    }
    *p = '\0';
    return s;
}

int k25_cmd_bench(int argc, char **argv)
{
    struct k25_config cfg;
    struct k25_error err;
    struct k25_bench_opts o;
    k25_config_init(&cfg);
    k25_error_clear(&err);
    k25_bench_opts_init(&o);
    char *cmdline = join_cmdline(argc, argv);
    bool quiet = false, have_conc = false, have_burst = false;
    int status = 2;

    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            bench_usage(stdout);
            free(cmdline);
            return 0;
        }
    if (k25_cli_apply_config(&argc, argv, &cfg, &err) != K25_OK)
        goto out_err;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--quiet")) {
            quiet = true;
            continue;
        }
        if (!strcmp(a, "--fidelity")) {
            o.fidelity = true;
            continue;
        }
        static const char *const valued[] = {"--dataset", "--out", "--json", "--concurrency", "--requests",
                                             "--duration", "--rate", "--burstiness", "--filter", "--warmup",
                                             "--repeat", "--slo", "--fidelity-tokens"};
        bool known = false;
        for (size_t k = 0; k < sizeof(valued) / sizeof(valued[0]); k++)
            known |= !strcmp(a, valued[k]);
        if (!known) {
            k25_error_set(&err, K25_EINVAL, "command line", 0, a, "unknown option (k25 bench --help)");
            goto out_err;
        }
        if (i + 1 >= argc) {
            k25_error_set(&err, K25_EINVAL, "command line", 0, a, "missing value");
            goto out_err;
        }
        const char *v = argv[++i];
        int64_t x = 0;
        int rc = K25_OK;
        if (!strcmp(a, "--dataset"))
            o.dataset = v;
        else if (!strcmp(a, "--out"))
            o.out = v;
        else if (!strcmp(a, "--json"))
            o.json_out = v;
        else if (!strcmp(a, "--filter"))
            o.filter = v;
        else if (!strcmp(a, "--slo"))
            rc = k25_bench_slo_parse(v, &o.slo, &err);
        else if (!strcmp(a, "--concurrency")) {
            if ((rc = parse_i64(a, v, 0, &x, &err)) == K25_OK) {
                if (x > 100000)
                    rc = k25_error_set(&err, K25_ERANGE, "command line", 0, a, "at most 100000");
                o.concurrency = (int)x;
                have_conc = true;
            }
        } else if (!strcmp(a, "--requests")) {
            if ((rc = parse_i64(a, v, 1, &x, &err)) == K25_OK)
                o.requests = x;
        } else if (!strcmp(a, "--warmup")) {
            if ((rc = parse_i64(a, v, 0, &x, &err)) == K25_OK)
                o.warmup = x;
        } else if (!strcmp(a, "--repeat")) {
            if ((rc = parse_i64(a, v, 1, &x, &err)) == K25_OK) {
                if (x > K25_BENCH_MAX_REPEAT)
                    rc = k25_error_set(&err, K25_ERANGE, "command line", 0, a, "at most %d", K25_BENCH_MAX_REPEAT);
                o.repeat = (int)x;
            }
        } else if (!strcmp(a, "--fidelity-tokens")) {
            if ((rc = parse_i64(a, v, 1, &x, &err)) == K25_OK) {
                if (x > 100000)
                    rc = k25_error_set(&err, K25_ERANGE, "command line", 0, a, "at most 100000");
                o.fidelity_tokens = (int)x;
            }
        } else if (!strcmp(a, "--duration"))
            rc = parse_pos_f64(a, v, &o.duration_s, &err);
        else if (!strcmp(a, "--rate")) {
            rc = parse_pos_f64(a, v, &o.rate_rps, &err);
            o.mode = K25_BENCH_OPEN;
        } else if (!strcmp(a, "--burstiness")) {
            rc = parse_pos_f64(a, v, &o.burstiness, &err);
            have_burst = true;
        }
        if (rc != K25_OK)
            goto out_err;
    }
    if (have_burst && o.mode != K25_BENCH_OPEN) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--burstiness",
                      "shapes open-loop arrivals: it needs --rate");
        goto out_err;
    }
    if (o.mode == K25_BENCH_OPEN && !have_conc)
        o.concurrency = 0; /* open loop: no cap unless asked */
    if (o.mode == K25_BENCH_CLOSED && have_conc && o.concurrency < 1) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--concurrency", "closed loop needs at least 1 user");
        goto out_err;
    }
    o.progress = !quiet && isatty(2);
    o.cmdline = cmdline;
    o.stop = &g_stop;

    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = k25_bench_measure(&o, &cfg, stdout, NULL, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc != K25_OK) {
        if (g_stop) {
            fprintf(stderr, "k25 bench: %s\n", err.msg);
            status = 128 + g_stop;
            goto out;
        }
        goto out_err;
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "k25 bench: writing the report failed: %s\n", strerror(errno));
        status = 1;
        goto out;
    }
    if (!quiet || g_stop)
        fprintf(stderr, "k25 bench: %strace written to %s%s%s\n", g_stop ? "interrupted: the finished requests' " : "",
                o.out, o.json_out ? ", summary to " : "", o.json_out ? o.json_out : "");
    status = g_stop ? 128 + g_stop : 0;
    goto out;

out_err:
    fprintf(stderr, "k25 bench: %s\n", err.msg);
    status = err.code == K25_ENOMEM || err.code == K25_EIO ? 1 : 2;
out:
    free(cmdline);
    return status;
}
