/*
 * cli_inspect.c - `k25 inspect run.h5 [--json] [--chrome-trace out.json]`:
 * prints the provenance and summary of a stored run, or exports it as a
 * Chrome/Perfetto trace.  Refuses files that are not k25 run traces or
 * have an unknown schema version (k25_h5_open_read says which).
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <string.h>

static const char *js(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "-";
}

static void print_num(FILE *out, const json_t *v, const char *fmt)
{
    if (json_is_number(v))
        fprintf(out, fmt, json_number_value(v));
    else
        fprintf(out, "n/a");
}

/* One figure's {max, mean} as "NAME max X, mean Y", or nothing when null. */
static void print_fig(FILE *out, const json_t *o, const char *name, const char *label, bool *any)
{
    const json_t *f = json_object_get(o, name);
    if (!json_is_object(f))
        return;
    fprintf(out, "%s%s max ", *any ? "; " : "", label);
    print_num(out, json_object_get(f, "max"), "%.3g");
    fprintf(out, ", mean ");
    print_num(out, json_object_get(f, "mean"), "%.3g");
    *any = true;
}

/* The trace's /server_metrics and /gpu_timeline read back (schema 6): what they hold, or why nothing. */
static void print_telemetry(FILE *out, const struct k25_trace *t, const json_t *sm, const json_t *gpu)
{
    if (t->schema_version < 6) {
        fprintf(out, "\nserver metrics and GPU telemetry: not in this trace (schema %lld; recorded from schema 6)\n",
                (long long)t->schema_version);
        return;
    }
    fprintf(out, "\nserver metrics (/server_metrics)\n");
    if (!json_is_object(sm)) {
        fprintf(out, "  none: the run did not scrape them (k25 bench --endpoint URL --server-metrics)\n");
    } else {
        fprintf(out, "  %s: %lld scrapes (%lld answered 200) every %.3g s, %lld raw series, family %s\n",
                js(sm, "url"), (long long)json_integer_value(json_object_get(sm, "scrapes")),
                (long long)json_integer_value(json_object_get(sm, "scrapes_ok")),
                json_number_value(json_object_get(sm, "period_s")),
                (long long)json_integer_value(json_object_get(sm, "series")),
                json_is_string(json_object_get(sm, "family")) ? js(sm, "family") : "none k25 knows");
        if (json_is_string(json_object_get(sm, "note")))
            fprintf(out, "  note: %s\n", js(sm, "note"));
        bool any = false;
        fprintf(out, "  ");
        print_fig(out, sm, "kv_usage_ratio", "KV usage", &any);
        print_fig(out, sm, "n_running", "running", &any);
        print_fig(out, sm, "n_waiting", "waiting", &any);
        print_fig(out, sm, "prefix_cache_hit_rate", "prefix-cache hit rate", &any);
        if (json_is_number(json_object_get(sm, "preemptions"))) {
            fprintf(out, "%spreemptions ", any ? "; " : "");
            print_num(out, json_object_get(sm, "preemptions"), "%.0f");
            any = true;
        }
        fprintf(out, "%s\n", any ? "" : "no figure k25 maps (raw series only)");
        if (!json_is_object(json_object_get(sm, "kv_usage_ratio")))
            fprintf(out, "  KV usage: not measured: %s\n", k25_srvmet_kv_why(sm));
    }
    fprintf(out, "GPU telemetry (/gpu_timeline)\n");
    if (!t->gpu_telemetry) {
        fprintf(out, "  not recorded\n");
    } else if (strcmp(t->gpu_telemetry, "NVML") != 0) {
        fprintf(out, "  none: %s\n", t->gpu_telemetry);
    } else {
        fprintf(out, "  NVML: %zu samples over %lld device(s); utilization P95 ", t->n_gpu,
                (long long)json_integer_value(json_object_get(gpu, "devices")));
        print_num(out, json_object_get(gpu, "gpu_utilization_p95"), "%.3f");
        fprintf(out, ", SM clock ");
        print_num(out, json_object_get(gpu, "sm_clock_min_mhz"), "%.0f");
        fprintf(out, "..");
        print_num(out, json_object_get(gpu, "sm_clock_max_mhz"), "%.0f");
        fprintf(out, " MHz%s, power max ", json_is_true(json_object_get(gpu, "clocks_moved")) ? " (MOVED)" : "");
        print_num(out, json_object_get(gpu, "power_max_w"), "%.0f W");
        fprintf(out, ", temperature max ");
        print_num(out, json_object_get(gpu, "temperature_max_c"), "%.0f C");
        json_int_t thr = json_integer_value(json_object_get(gpu, "throttle_reasons"));
        if (thr)
            fprintf(out, ", throttle reasons 0x%llx", (unsigned long long)thr);
        fputc('\n', out);
    }
}

static void print_text(FILE *out, const char *path, bool interrupted, json_t *prov, json_t *wl, json_t *sum)
{
    const json_t *b = json_object_get(prov, "build"), *m = json_object_get(prov, "machine"),
                 *d = json_object_get(prov, "dataset"), *c = json_object_get(prov, "config");
    fprintf(out, "k25 run trace %s\n", path);
    if (interrupted)
        fprintf(out, "INTERRUPTED: the run was stopped by a signal; this holds only the requests that finished\n");
    fprintf(out, "\nprovenance\n");
    fprintf(out, "  k25bench     %s (git %s%s)\n", js(b, "k25_version"), js(b, "git"),
            json_is_true(json_object_get(b, "git_dirty")) ? ", dirty tree" : "");
    fprintf(out, "  compiler     %s, flags '%s', BLAS core %s\n", js(b, "compiler"), js(b, "cflags"), js(b, "blas_core"));
    fprintf(out, "  machine      %s on %s, %lld cores online, %lld threads used\n", js(m, "cpu_model"),
            js(m, "hostname"), (long long)json_integer_value(json_object_get(m, "cores_online")),
            (long long)json_integer_value(json_object_get(m, "threads_used")));
    const json_t *k = json_object_get(m, "kernel");
    fprintf(out, "  kernel       %s %s %s\n", js(k, "sysname"), js(k, "release"), js(k, "machine"));
    fprintf(out, "  cpufreq      governor %s, boost %s\n", js(m, "cpufreq_governor"),
            json_is_null(json_object_get(m, "boost")) || !json_object_get(m, "boost")
                ? "unknown"
                : (json_is_true(json_object_get(m, "boost")) ? "on" : "off"));
    const json_t *la = json_object_get(m, "loadavg_start");
    fprintf(out, "  load average ");
    print_num(out, json_array_get(la, 0), "%.2f");
    fprintf(out, " at start, ");
    print_num(out, json_array_get(json_object_get(m, "loadavg_end"), 0), "%.2f");
    fprintf(out, " at end\n");
    size_t ng = json_array_size(json_object_get(m, "gpus"));
    fprintf(out, "  GPUs         %zu%s%s\n", ng, ng ? ", driver: " : "", ng ? js(m, "gpu_driver") : "");
    fprintf(out, "  dataset      %s (sha256 %s), filter %s\n", js(d, "path"), js(d, "sha256"),
            json_is_string(json_object_get(d, "filter")) ? js(d, "filter") : "none");
    fprintf(out, "  model        %s, seed %lld, time %s .. %s\n", js(c, "model"),
            (long long)json_integer_value(json_object_get(prov, "seed")), js(prov, "start_time_utc"),
            js(prov, "end_time_utc"));
    const json_t *ep = json_object_get(prov, "endpoint");
    if (ep) { /* an endpoint run: the server measured, and what the client sent it */
        const json_t *h = json_object_get(ep, "response_headers");
        fprintf(out, "  server       %s (%s), model sent %s, served model %s%s%s\n", js(ep, "url"),
                js(ep, "endpoint_type"), js(ep, "model"), js(ep, "served_model"),
                json_is_string(json_object_get(h, "server")) ? ", server header " : "",
                json_is_string(json_object_get(h, "server")) ? js(h, "server") : "");
        fprintf(out, "  engine       the server's settings are %s; the config holds what was sent\n",
                K25_NOT_VISIBLE);
    }
    fprintf(out, "  command      %s\n", js(prov, "command_line"));
    fprintf(out, "\nworkload: %s loop, concurrency %lld, ", js(wl, "mode"),
            (long long)json_integer_value(json_object_get(wl, "concurrency")));
    if (json_is_number(json_object_get(wl, "rate_rps"))) {
        print_num(out, json_object_get(wl, "rate_rps"), "rate %.3f req/s, ");
        print_num(out, json_object_get(wl, "burstiness"), "burstiness %.2f, ");
    }
    fprintf(out, "%lld warm-up, %lld repetition(s)\n", (long long)json_integer_value(json_object_get(wl, "warmup")),
            (long long)json_integer_value(json_object_get(wl, "repeat")));

    const json_t *rq = json_object_get(sum, "requests");
    fprintf(out, "\nsummary: %lld requests (%lld completed, %lld rejected) in ",
            (long long)json_integer_value(json_object_get(rq, "total")),
            (long long)json_integer_value(json_object_get(rq, "completed")),
            (long long)json_integer_value(json_object_get(rq, "rejected")));
    print_num(out, json_object_get(sum, "duration_s"), "%.2f s\n");
    fprintf(out, "  ");
    print_num(out, json_object_get(sum, "requests_per_s"), "%.3f req/s, ");
    print_num(out, json_object_get(sum, "output_tok_per_s"), "%.1f output tok/s, goodput ");
    print_num(out, json_object_get(sum, "goodput_rps"), "%.3f req/s");
    fprintf(out, "\n  %-13s %7s %9s %9s %9s %9s %9s %9s\n", "metric", "n", "mean", "P50", "P90", "P95", "P99", "max");
    static const char *const names[] = {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "sched_lag_ms",
                                        "busy_fraction"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const json_t *x = json_object_get(sum, names[i]);
        fprintf(out, "  %-13s %7lld", names[i], (long long)json_integer_value(json_object_get(x, "n")));
        static const char *const cols[] = {"mean", "p50", "p90", "p95", "p99", "max"};
        for (size_t j = 0; j < 6; j++) {
            const json_t *v = json_object_get(x, cols[j]);
            if (json_is_number(v))
                fprintf(out, " %9.2f", json_number_value(v));
            else
                fprintf(out, " %9s", "n/a");
        }
        fputc('\n', out);
    }
    const json_t *h = json_object_get(sum, "harness");
    fprintf(out, "  harness overhead: ");
    if (json_is_string(json_object_get(h, "note"))) { /* an endpoint run */
        fprintf(out, "%s\n", json_string_value(json_object_get(h, "note")));
    } else {
        print_num(out, json_object_get(h, "overhead_per_request_us"), "%.1f us/request, ");
        print_num(out, json_object_get(h, "overhead_per_token_us"), "%.3f us/token\n");
    }
}

int k25_cmd_inspect(int argc, char **argv)
{
    const char *path = NULL, *chrome = NULL;
    bool as_json = false;
    struct k25_trace t;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &as_json,
         .help = "print {provenance, workload, summary, interrupted, queue, server_metrics,\n"
                 "gpu_timeline} as one JSON object (queue: the elastic queue's depths over the\n"
                 "timeline; server_metrics and gpu_timeline: /server_metrics and /gpu_timeline\n"
                 "read back, null where the trace holds none)"},
        {.names = {"--chrome-trace"}, .type = K25_OPT_PATH, .dest = &chrome,
         .help = "export every request's queue, prefill chunks and decode tokens,\n"
                 "and the engine timeline, as a Chrome/Perfetto trace\n"
                 "(open in https://ui.perfetto.dev or chrome://tracing)"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "inspect",
        .usage = "inspect RUN.h5 [--json] [--chrome-trace OUT.json]",
        .about = "Prints the provenance and summary of a run stored by `k25 bench`.\n",
        .opts = opts,
        .epilog = "Exit status: 0 done; 2 not a readable k25 run trace (missing, damaged, another kind,\n"
                  "an unknown schema version) or an unusable output path; 1 a failure while writing.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 inspect: %s\n", err.msg);
        return 2;
    }
    if (argc > 2) {
        fprintf(stderr, "k25 inspect: unexpected argument '%s' (k25 inspect --help)\n", argv[2]);
        return 2;
    }
    if (argc < 2) {
        k25_cliopt_print_help(&cmd, stderr);
        return 2;
    }
    path = argv[1];
    if (chrome && k25_output_file_check(chrome, "--chrome-trace", &err) != K25_OK) {
        fprintf(stderr, "k25 inspect: %s\n", err.msg);
        return 2;
    }
    if (k25_trace_read(path, &t, &err) != K25_OK) {
        fprintf(stderr, "k25 inspect: %s\n", err.msg);
        return err.code == K25_ENOMEM ? 1 : 2;
    }
    int status = 0;
    json_t *prov = json_loads(t.provenance_json, 0, NULL), *wl = json_loads(t.workload_json, 0, NULL),
           *sum = json_loads(t.summary_json, 0, NULL), *sm = NULL, *gpu = NULL;
    /* read back from /server_metrics and /gpu_timeline (schema 6), not from the summary */
    sm = k25_trace_srvmet_json(t.srvmet);
    gpu = t.schema_version >= 6 && t.gpu_telemetry
              ? k25_gputel_rows_summary_json(t.gpu, t.n_gpu, strcmp(t.gpu_telemetry, "NVML") ? t.gpu_telemetry : NULL)
              : json_null();
    if (!prov || !wl || !sum || !sm || !gpu) {
        fprintf(stderr, "k25 inspect: %s: /meta or /summary holds malformed JSON\n", path);
        status = 2;
        goto out;
    }
    if (chrome) {
        if (k25_trace_export_chrome(&t, chrome, &err) != K25_OK) {
            fprintf(stderr, "k25 inspect: %s\n", err.msg);
            status = err.code == K25_EINVAL ? 2 : 1;
            goto out;
        }
        fprintf(stderr, "k25 inspect: %zu requests exported to %s\n", t.run.n_reqs, chrome);
    } else if (as_json) {
        json_t *o = json_pack("{s:O, s:O, s:O, s:b, s:o, s:O, s:O}", "provenance", prov, "workload", wl, "summary",
                              sum, "interrupted", t.run.interrupted, "queue", k25_trace_queue_json(&t),
                              "server_metrics", sm, "gpu_timeline", gpu);
        if (!o || json_dumpf(o, stdout, JSON_INDENT(2)) != 0 || fputc('\n', stdout) == EOF)
            status = 1;
        json_decref(o);
    } else {
        print_text(stdout, path, t.run.interrupted, prov, wl, sum);
        print_telemetry(stdout, &t, sm, gpu);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "k25 inspect: writing the output failed: %s\n", strerror(errno));
        status = 1;
    }
out:
    json_decref(sm);
    json_decref(gpu);
    json_decref(prov);
    json_decref(wl);
    json_decref(sum);
    k25_trace_free(&t);
    return status;
}
