/*
 * cli_bench.c - `k25 bench` (alias `k25-benchmark`): argument parsing
 * only (one option table, cliopt.h); the benchmark is
 * k25_bench_measure (harness/bench.c).
 *
 * The vLLM benchmark's option names are aliases where they mean the same
 * (--request-rate, --num-prompts, --max-concurrency, --result-filename,
 * --percentile-metrics, --metric-percentiles, --goodput), so a command
 * line written for `vllm bench serve` mostly runs as it is.
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

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

/* ------------------------------------------------------------ option callbacks */

/* A finite number > 0 (rates, durations, timeouts, burstiness). */
static int opt_positive(void *dest, const char *name, const char *v, struct k25_error *err)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (end == v || *end || errno || !(x > 0) || isinf(x))
        return k25_cliopt_error(err, K25_EINVAL, name, "expected a positive number, got \"%s\"", v);
    *(double *)dest = x;
    return K25_OK;
}

/* --burstiness: a gamma shape > 0; 0 gets what it would mean (evenly spaced) named. */
static int opt_burstiness(void *dest, const char *name, const char *v, struct k25_error *err)
{
    char *end;
    double x = strtod(v, &end);
    if (end != v && !*end && x == 0)
        return k25_cliopt_error(err, K25_EINVAL, name,
                                "0 is no gamma shape (the shape must be > 0: 1 = Poisson, < 1 burstier, > 1 more "
                                "even, evenly spaced as it grows); for evenly spaced arrivals use --arrivals constant");
    return opt_positive(dest, name, v, err);
}

static int opt_slo(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_bench_slo_parse(v, dest, err);
}

/*
 * vLLM's --goodput "ttft:500 tpot:50" (milliseconds; items separated by
 * spaces or commas; vLLM's names ttft, tpot, e2el and k25's itl) as
 * k25_bench_slo_parse's "ttft_ms=500,tpot_ms=50".  Items may also follow
 * as separate words (--goodput ttft:500 tpot:50): k25_cmd_bench hands
 * those positional words to this function too.
 */
static int opt_goodput(void *dest, const char *name, const char *v, struct k25_error *err)
{
    static const struct {
        const char *vllm, *k25;
    } keys[] = {{"ttft", "ttft_ms"}, {"tpot", "tpot_ms"}, {"e2el", "e2e_ms"}, {"itl", "itl_ms"}};
    char buf[512], slo[1024];
    size_t w = 0;
    snprintf(buf, sizeof(buf), "%s", v);
    slo[0] = '\0';
    for (char *save = NULL, *tok = strtok_r(buf, " ,\t", &save); tok; tok = strtok_r(NULL, " ,\t", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon)
            return k25_cliopt_error(err, K25_EINVAL, name, "expected KEY:MILLISECONDS items (ttft:500 tpot:50), got \"%s\"",
                                    tok);
        *colon = '\0';
        const char *key = NULL;
        for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]) && !key; i++)
            if (!strcmp(tok, keys[i].vllm) || !strcmp(tok, keys[i].k25))
                key = keys[i].k25;
        if (!key)
            return k25_cliopt_error(err, K25_EINVAL, name, "unknown metric '%s' (ttft, tpot, e2el, itl)", tok);
        if (w < sizeof(slo))
            w += (size_t)snprintf(slo + w, sizeof(slo) - w, "%s%s=%s", w ? "," : "", key, colon + 1);
    }
    if (!slo[0])
        return k25_cliopt_error(err, K25_EINVAL, name, "expected KEY:MILLISECONDS items (ttft:500 tpot:50)");
    /* a later --goodput/--slo item adds to what an earlier one set */
    struct k25_bench_slo add, *out = dest;
    memset(&add, 0, sizeof(add));
    int rc = k25_bench_slo_parse(slo, &add, err);
    if (rc)
        return rc;
    if (add.ttft_ms > 0)
        out->ttft_ms = add.ttft_ms;
    if (add.tpot_ms > 0)
        out->tpot_ms = add.tpot_ms;
    if (add.itl_ms > 0)
        out->itl_ms = add.itl_ms;
    if (add.e2e_ms > 0)
        out->e2e_ms = add.e2e_ms;
    out->any = true;
    return K25_OK;
}

static int opt_pctl_list(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_pctl_spec_parse_list(dest, v, err);
}

static int opt_pctl_metrics(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_pctl_spec_parse_metrics(dest, v, err);
}

/* --surge (issue 17, loadgen.c): dest is the whole struct k25_bench_opts. */
static int opt_surge(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_bench_surge_parse(v, dest, err);
}

/* A word vLLM's --goodput may leave behind as its own argument: "ttft:500". */
static bool goodput_word(const char *a)
{
    const char *colon = strchr(a, ':');
    if (!colon || colon == a)
        return false;
    char *end;
    strtod(colon + 1, &end);
    return end != colon + 1 && !*end;
}

/* --save-result without a file name: the JSON beside the trace (run.h5 -> run.json), into buf. */
static const char *json_beside(const char *out, char *buf, size_t n)
{
    size_t len = strlen(out);
    if (len > 3 && !strcmp(out + len - 3, ".h5"))
        len -= 3;
    snprintf(buf, n, "%.*s.json", (int)len, out);
    return buf;
}

/* ------------------------------------------------------------ the command */

static const char *const endpoint_types[] = {"completions", "chat", NULL};
static const char *const pctl_methods[] = {"nearest-rank", "linear", NULL};
static const char *const ramp_strategies[] = {"linear", NULL};

/* The command's state: the options, where the table's flags land, and the table itself. */
struct bench_cli {
    struct k25_config cfg;
    struct k25_bench_opts o;
    bool quiet, have_conc, have_burst, have_model, have_rate;
    bool save_result, have_pctl_list, have_pctl_metrics, have_goodput;
    int endpoint_type, pctl_method, progress, arrivals, ramp_strategy;
    bool have_arrivals, have_ramp_start, have_ramp_end, have_ramp;
    char json_buf[4200]; /* --save-result's file name beside --out */
    struct k25_opt opts[40];
};

/* The option table (which --help prints), pointing into c; data, not logic. */
static void bench_options(struct bench_cli *c)
{
    const struct k25_opt table[] = {
        {.names = {"--dataset"}, .type = K25_OPT_PATH, .dest = &c->o.dataset,
         .help = "JSONL gold set (requests cycle through it in a seeded order)"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &c->o.out, .metavar = "FILE",
         .help = "HDF5 trace, written under a temporary name, renamed when complete"},
        {.names = {"--json", "--result-filename"}, .type = K25_OPT_PATH, .dest = &c->o.json_out,
         .help = "also write the summary and provenance as JSON (for jq)"},
        {.names = {"--save-result"}, .type = K25_OPT_FLAG, .dest = &c->save_result,
         .help = "(vLLM) write the JSON summary with vLLM's result fields beside\n"
                 "k25's (mean_ttft_ms, median_ttft_ms, p99_ttft_ms, request_throughput,\n"
                 "output_throughput, ...); without --json/--result-filename it goes\n"
                 "beside --out (run.h5 -> run.json)"},
        {.names = {"--csv"}, .type = K25_OPT_PATH, .dest = &c->o.csv_out,
         .help = "also write one CSV row per request (docs/cli.md lists the columns)"},
        {.names = {"--concurrency", "--max-concurrency"}, .type = K25_OPT_INT, .dest = &c->o.concurrency, .min = 0,
         .max = 100000, .seen = &c->have_conc, .deflt = "1; open loop: 0 = no cap",
         .help = "closed loop: N users, each sends its next request when the last\n"
                 "one ends; open loop: cap on requests in flight"},
        {.names = {"--requests", "--num-prompts"}, .type = K25_OPT_INT64, .dest = &c->o.requests, .min = 1,
         .max = INT64_MAX, .deflt = "one pass over the selected requests",
         .help = "measured requests per repetition"},
        {.names = {"--duration"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.duration_s, .metavar = "S",
         .help = "instead: send requests for S seconds (in-flight ones finish)"},
        {.names = {"--rate", "--request-rate"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.rate_rps,
         .metavar = "R", .seen = &c->have_rate,
         .help = "open loop: arrivals at R requests/s on a seeded schedule;\n"
                 "latencies count from each scheduled arrival"},
        {.names = {"--burstiness"}, .type = K25_OPT_CALL, .parse = opt_burstiness, .dest = &c->o.burstiness,
         .metavar = "B", .seen = &c->have_burst, .deflt = "1",
         .help = "gamma shape of the inter-arrival times (1 = Poisson, < 1 burstier,\n"
                 "> 1 more even); 0 is refused: evenly spaced is --arrivals constant"},
        {.names = {"--arrivals"}, .type = K25_OPT_ENUM, .dest = &c->arrivals, .choices = k25_arrival_names,
         .seen = &c->have_arrivals,
         .help = "open-loop arrival process: gamma (--burstiness; 1 = Poisson),\n"
                 "constant (one every 1/R s), ramp (--ramp-up-*), trace (--trace-file)"},
        {.names = {"--ramp-up-strategy"}, .type = K25_OPT_ENUM, .dest = &c->ramp_strategy, .choices = ramp_strategies,
         .seen = &c->have_ramp,
         .help = "(vLLM) linear: request i at rate START + (END - START) i / (n - 1)\n"
                 "(--ramp-up-start-rps, --ramp-up-end-rps; needs --requests)"},
        {.names = {"--ramp-up-start-rps"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.ramp_start_rps,
         .metavar = "A", .seen = &c->have_ramp_start, .help = "(vLLM) the ramp's first rate"},
        {.names = {"--ramp-up-end-rps"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.ramp_end_rps,
         .metavar = "B", .seen = &c->have_ramp_end, .help = "(vLLM) the ramp's last rate"},
        {.names = {"--trace-file"}, .type = K25_OPT_PATH, .dest = &c->o.trace_file,
         .help = "replay arrivals: JSONL with \"timestamp\" in ms per line (the Mooncake\n"
                 "layout: timestamp, input_length, output_length, hash_ids); the\n"
                 "gold set's requests are sent at those offsets. With input_length and\n"
                 "output_length each request is shaped to them (exact token lengths; hash_ids:\n"
                 "shared 512-token blocks); an endpoint needs --tokenizer DIR for that"},
        {.names = {"--filter"}, .type = K25_OPT_STRING, .dest = &c->o.filter, .metavar = "EXPR",
         .help = "select requests, e.g. 'output_length > 1800 && domain == \"legal\"'"},
        {.names = {"--warmup"}, .type = K25_OPT_INT64, .dest = &c->o.warmup, .min = 0, .max = INT64_MAX,
         .help = "run N requests first (closed loop) and discard them"},
        {.names = {"--repeat"}, .type = K25_OPT_INT, .dest = &c->o.repeat, .min = 1, .max = K25_BENCH_MAX_REPEAT,
         .metavar = "K", .help = "run the measurement K times for confidence intervals"},
        {.names = {"--slo"}, .type = K25_OPT_CALL, .parse = opt_slo, .dest = &c->o.slo, .metavar = "LIST",
         .help = "objectives for goodput: ttft_ms, tpot_ms, itl_ms, e2e_ms\n(e.g. ttft_ms=500,tpot_ms=50)"},
        {.names = {"--goodput"}, .type = K25_OPT_CALL, .parse = opt_goodput, .dest = &c->o.slo, .metavar = "'K:MS ...'",
         .seen = &c->have_goodput,
         .help = "(vLLM) the same objectives as vLLM writes them: 'ttft:500 tpot:50'\n(ttft, tpot, e2el, itl)"},
        {.names = {"--percentile-method"}, .type = K25_OPT_ENUM, .dest = &c->pctl_method, .choices = pctl_methods,
         .help = "how percentiles are read off the samples: nearest-rank (an observed\n"
                 "value) or linear (numpy's default, as vLLM and GenAI-Perf report)"},
        {.names = {"--metric-percentiles"}, .type = K25_OPT_CALL, .parse = opt_pctl_list, .dest = &c->o.pctl,
         .metavar = "LIST", .seen = &c->have_pctl_list, .deflt = "50,90,95,99",
         .help = "(vLLM) percentiles to report in a second table, e.g. 50,90,99.9\n"
                 "(summary.percentiles in the JSON)"},
        {.names = {"--percentile-metrics"}, .type = K25_OPT_CALL, .parse = opt_pctl_metrics, .dest = &c->o.pctl,
         .metavar = "LIST", .seen = &c->have_pctl_metrics, .deflt = "every latency metric",
         .help = "(vLLM) metrics of that table: ttft,tpot,itl,e2el (or queue, sched_lag,\n"
                 "or k25's names ttft_ms, ...)"},
        {.names = {"--fidelity"}, .type = K25_OPT_FLAG, .dest = &c->o.fidelity,
         .help = "after the measurement, compare every selected request against the\n"
                 "exact engine (fp32 KV, kv_compression_ratio 1, one-pass prefill):\n"
                 "next-token KL, top-1 and greedy-token agreement, attention error\n"
                 "(summary.fidelity in the JSON, /fidelity in the trace)"},
        {.names = {"--fidelity-degraded"}, .type = K25_OPT_FLAG, .dest = &c->o.fidelity_degraded,
         .help = "after the measurement, compare the elastic queue's degraded\n"
                 "(early-exit) model with the full one on every selected request,\n"
                 "whether or not the breaker was on (--fidelity alone does only when\n"
                 "the run degraded requests or had --breaker-enabled); without\n"
                 "--fidelity only this comparison runs\n"
                 "(summary.fidelity.degraded in the JSON, /fidelity_degraded in the trace)"},
        {.names = {"--fidelity-tokens"}, .type = K25_OPT_INT, .dest = &c->o.fidelity_tokens, .min = 1, .max = 100000,
         .help = "generated positions compared per request\n(--fidelity, --fidelity-degraded)"},
        {.names = {"--quiet"}, .type = K25_OPT_FLAG, .dest = &c->quiet,
         .help = "no progress and no closing note (--progress off)"},
        {.names = {"--progress"}, .type = K25_OPT_ENUM, .dest = &c->progress, .choices = k25_progress_mode_names,
         .help = "progress on stderr: auto (a bar on a terminal, else a plain line\n"
                 "every 10 s: done/total, rate, ETA), bar, lines, off"},
        {.names = {"--endpoint"}, .type = K25_OPT_STRING, .dest = &c->o.endpoint, .metavar = "URL",
         .help = "benchmark an OpenAI-compatible server instead of the engine:\n"
                 "http://HOST:PORT (or .../v1, or the full completions URL); every\n"
                 "request is a streaming POST at its scheduled time; TTFT = first\n"
                 "content chunk, ITL = gaps between chunks, output tokens from usage\n"
                 "(else counted chunks, flagged).  Engine flags are not sent.\n"
                 "With --endpoint, --model NAME is the served model name\n"
                 "(default: the first of GET /v1/models)"},
        {.names = {"--api-key"}, .type = K25_OPT_STRING, .dest = &c->o.api_key, .metavar = "KEY", .deflt = "$K25_API_KEY",
         .help = "(--endpoint) sent as Authorization: Bearer KEY"},
        {.names = {"--endpoint-type"}, .type = K25_OPT_ENUM, .dest = &c->endpoint_type, .choices = endpoint_types,
         .help = "(--endpoint) /v1/completions or /v1/chat/completions"},
        {.names = {"--tokenizer"}, .type = K25_OPT_STRING, .dest = &c->o.tokenizer, .metavar = "DIR",
         .help = "(--endpoint) count each prompt client-side with DIR's tokenizer.json\n(chat: through its chat "
                 "template) and report where the server's\nusage.prompt_tokens differs (summary: prompt_tokens_check)"},
        {.names = {"--chat-template"}, .type = K25_OPT_STRING, .dest = &c->o.chat_template, .metavar = "NAME",
         .help = "(--endpoint --tokenizer, chat) the named template to count with\ninstead of the one recognised "
                 "from tokenizer_config.json"},
        {.names = {"--ignore-eos"}, .type = K25_OPT_FLAG, .dest = &c->o.ignore_eos,
         .help = "(--endpoint) send \"ignore_eos\": true (vLLM, llama.cpp): always\ngenerate max_tokens"},
        {.names = {"--stall-timeout"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.stall_timeout_s,
         .metavar = "S", .deflt = "30", .help = "(--endpoint) a stream silent for S seconds fails"},
        {.names = {"--request-timeout"}, .type = K25_OPT_CALL, .parse = opt_positive, .dest = &c->o.request_timeout_s,
         .metavar = "S", .deflt = "600", .help = "(--endpoint) a request longer than S seconds fails"},
        {.names = {"--server-metrics"}, .type = K25_OPT_STRING, .dest = &c->o.server_metrics, .metavar = "[URL]",
         .deflt = "the endpoint's /metrics",
         .help = "(--endpoint) scrape the server's Prometheus metrics every second\n"
                 "into the trace (/server_metrics) and summary.server_metrics: raw\n"
                 "series by name, and KV usage, running, waiting, preemptions and\n"
                 "prefix-cache hit rate for vLLM, SGLang, TGI, llama.cpp, k25 serve"},
        {.names = {"--surge"}, .type = K25_OPT_CALL, .parse = opt_surge, .dest = &c->o, .metavar = "F:START_S:DUR_S",
         .help = "(open loop) the rate times F from START_S for DUR_S seconds\n(an empty F is 5, i.e. +400%)"},
        {.type = K25_OPT_END},
    };
    _Static_assert(sizeof(table) <= sizeof(c->opts), "bench_cli.opts is too small for the option table");
    memcpy(c->opts, table, sizeof(table));
}

/* The command's synopsis, prose and exit statuses around c's option table. */
static struct k25_cliopt_cmd bench_command(struct bench_cli *c)
{
    return (struct k25_cliopt_cmd){
        .name = "bench",
        .usage = "bench --dataset FILE --out run.h5 [--config k25.yaml] [engine flags]\n"
                 "                 [--concurrency N] [--requests N | --duration S] [--rate R [--burstiness B]]\n"
                 "                 [--filter EXPR] [--warmup N] [--repeat K] [--seed S]\n"
                 "                 [--slo ttft_ms=500,tpot_ms=50] [--json summary.json] [--csv requests.csv]\n"
                 "                 [--percentile-method nearest-rank|linear] [--metric-percentiles 50,90,99]\n"
                 "                 [--fidelity] [--fidelity-degraded] [--fidelity-tokens N]\n"
                 "                 [--progress auto|bar|lines|off] [--quiet]\n"
                 "       k25 bench --endpoint URL [--model NAME] [--api-key KEY] [--endpoint-type completions|chat]\n"
                 "                 [--server-metrics [URL]]\n"
                 "                 [--ignore-eos] [--stall-timeout S] [--request-timeout S] --dataset FILE --out run.h5 ...",
        .about = "Drives the reference engine (or, with --endpoint, an OpenAI-compatible server: vLLM,\n"
                 "SGLang, llama.cpp, k25 serve; docs/serve.md) with a gold set under a chosen load and\n"
                 "stores every request's trace (HDF5, docs/trace-schema.md) with the run's provenance.\n"
                 "Metric definitions: docs/metrics.md.  vLLM benchmark names are accepted where they\n"
                 "mean the same: --request-rate, --num-prompts, --max-concurrency, --result-filename,\n"
                 "--save-result, --goodput, --metric-percentiles, --percentile-metrics.\n",
        .opts = c->opts,
        .config = &c->cfg,
        .epilog = "A failed --endpoint request (HTTP error, malformed or truncated stream, stall) is recorded\n"
                  "as rejected with its reason; the run goes on.\n\n"
                  "Ctrl-C (SIGINT) or SIGTERM ends the run early: the requests that finished are written,\n"
                  "marked interrupted (/meta/interrupted, \"interrupted\": true), and k25 bench exits 130\n"
                  "(SIGINT) or 143 (SIGTERM); a second signal stops at once, writing nothing.\n"
                  "Exit status: 0 done, 2 bad input or an unusable output path, 1 a failure while running.\n",
    };
}

/*
 * After parsing: vLLM's separate --goodput words, then the options'
 * combinations (open/closed loop, --save-result, endpoint-only flags).
 */
static int finish_options(struct bench_cli *c, int argc, char **argv, struct k25_error *err)
{
    struct k25_bench_opts *o = &c->o;
    /* vLLM writes --goodput's items as separate words: take those, refuse anything else */
    for (int i = 1; i < argc; i++) {
        if (c->have_goodput && goodput_word(argv[i])) {
            int rc = opt_goodput(&o->slo, "--goodput", argv[i], err);
            if (rc != K25_OK)
                return rc;
            continue;
        }
        return k25_error_set(err, K25_EINVAL, "command line", 0, argv[i],
                             "unexpected argument (k25 bench takes options only; k25 bench --help)");
    }
    if (o->api_key && !*o->api_key)
        o->api_key = NULL;
    o->endpoint_chat = c->endpoint_type == 1;
    o->pctl_method = (enum k25_pctl_method)c->pctl_method;
    o->pctl.method = o->pctl_method;
    o->pctl_table = c->have_pctl_list || c->have_pctl_metrics;
    /* the arrival process: the ramp and the trace imply theirs, and an open loop */
    if (c->have_ramp || c->have_ramp_start || c->have_ramp_end) {
        if (!c->have_ramp || !c->have_ramp_start || !c->have_ramp_end)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--ramp-up-strategy",
                                 "a ramp needs --ramp-up-strategy linear, --ramp-up-start-rps and --ramp-up-end-rps");
        if (c->have_arrivals && c->arrivals != K25_ARR_RAMP)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--arrivals", "--ramp-up-* is --arrivals ramp");
        c->arrivals = K25_ARR_RAMP;
        c->have_arrivals = true;
    } else if (c->have_arrivals && c->arrivals == K25_ARR_RAMP) {
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--arrivals",
                             "ramp needs --ramp-up-strategy linear --ramp-up-start-rps A --ramp-up-end-rps B");
    }
    if (o->trace_file) {
        if (c->have_arrivals && c->arrivals != K25_ARR_TRACE)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--trace-file", "is --arrivals trace");
        c->arrivals = K25_ARR_TRACE;
        c->have_arrivals = true;
    } else if (c->have_arrivals && c->arrivals == K25_ARR_TRACE) {
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--arrivals", "trace needs --trace-file FILE");
    }
    o->arrivals = (enum k25_arrival_kind)c->arrivals;
    if ((o->arrivals == K25_ARR_RAMP || o->arrivals == K25_ARR_TRACE) && c->have_rate)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--rate",
                             "the %s sets the arrival times: no --rate", o->arrivals == K25_ARR_RAMP ? "ramp" : "trace");
    if (c->have_arrivals && o->arrivals == K25_ARR_CONSTANT && !c->have_rate)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--arrivals", "constant needs --rate R");
    if (c->have_rate || o->arrivals == K25_ARR_RAMP || o->arrivals == K25_ARR_TRACE)
        o->mode = K25_BENCH_OPEN;
    o->vllm_result = c->save_result;
    if (c->save_result && !o->json_out) {
        if (!o->out)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--save-result",
                                 "writes the JSON beside --out: give --out (or --result-filename FILE)");
        o->json_out = json_beside(o->out, c->json_buf, sizeof(c->json_buf));
    }
    if (c->have_burst && o->mode != K25_BENCH_OPEN)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--burstiness",
                             "shapes open-loop arrivals: it needs --rate");
    if (c->have_burst && (o->arrivals == K25_ARR_CONSTANT || o->arrivals == K25_ARR_TRACE))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--burstiness",
                             "shapes gamma intervals: --arrivals %s has none", k25_arrival_names[o->arrivals]);
    if (o->mode == K25_BENCH_OPEN && !c->have_conc)
        o->concurrency = 0; /* open loop: no cap unless asked */
    if (o->mode == K25_BENCH_CLOSED && c->have_conc && o->concurrency < 1)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--concurrency", "closed loop needs at least 1 user");
    if (!o->endpoint && (o->ignore_eos || o->endpoint_chat || o->tokenizer || o->chat_template))
        return k25_error_set(err, K25_EINVAL, "command line", 0,
                             o->ignore_eos ? "--ignore-eos" : o->endpoint_chat ? "--endpoint-type"
                             : o->tokenizer ? "--tokenizer" : "--chat-template",
                             "applies to --endpoint runs only");
    if (o->endpoint && c->have_model)
        o->endpoint_model = c->cfg.model;
    o->progress = k25_progress_resolve((enum k25_progress_mode)c->progress, c->quiet);
    return K25_OK;
}

/* Prints err; the exit status for it: 1 for a failure while running, 2 for bad input. */
static int fail_status(const struct k25_error *err)
{
    fprintf(stderr, "k25 bench: %s\n", err->msg);
    return err->code == K25_ENOMEM || err->code == K25_EIO ? 1 : 2;
}

/*
 * Runs k25_bench_measure with SIGINT/SIGTERM caught and says where the
 * results went.  Returns the exit status: 0, 1, 2, or 128 + the signal.
 */
static int measure_and_report(struct bench_cli *c, struct k25_error *err)
{
    const struct k25_bench_opts *o = &c->o;
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    int rc = k25_bench_measure(o, &c->cfg, stdout, NULL, err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (rc != K25_OK) {
        if (g_stop) {
            fprintf(stderr, "k25 bench: %s\n", err->msg);
            return 128 + g_stop;
        }
        return fail_status(err);
    }
    if (fflush(stdout) != 0) {
        fprintf(stderr, "k25 bench: writing the report failed: %s\n", strerror(errno));
        return 1;
    }
    if (!c->quiet || g_stop)
        fprintf(stderr, "k25 bench: %strace written to %s%s%s%s%s\n",
                g_stop ? "interrupted: the finished requests' " : "", o->out, o->json_out ? ", summary to " : "",
                o->json_out ? o->json_out : "", o->csv_out ? ", requests to " : "", o->csv_out ? o->csv_out : "");
    return g_stop ? 128 + g_stop : 0;
}

/*
 * k25 bench: parses the options (bench_options' table, which --help prints)
 * and their combinations, then runs k25_bench_measure with SIGINT/SIGTERM
 * caught.
 */
int k25_cmd_bench(int argc, char **argv)
{
    struct bench_cli c = {.pctl_method = K25_PCTL_NEAREST_RANK};
    struct k25_error err;
    k25_config_init(&c.cfg);
    k25_error_clear(&err);
    k25_bench_opts_init(&c.o);
    char *cmdline = join_cmdline(argc, argv);
    int status;
    c.o.api_key = getenv("K25_API_KEY");
    if (c.o.api_key && !*c.o.api_key)
        c.o.api_key = NULL;
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++) { /* --model names the served model with --endpoint */
        c.have_model |= !strcmp(argv[i], "--model") || !strncmp(argv[i], "--model=", 8);
        /* --server-metrics takes an optional URL: alone (last, or before another option) it means "auto" */
        static char sm_auto[] = "--server-metrics=auto";
        if (!strcmp(argv[i], "--server-metrics") && (i + 1 == argc || argv[i + 1][0] == '-'))
            argv[i] = sm_auto;
    }
    bench_options(&c);
    const struct k25_cliopt_cmd cmd = bench_command(&c);
    k25_pctl_spec_init(&c.o.pctl);
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP) {
        status = 0;
    } else if (prc != K25_OK || finish_options(&c, argc, argv, &err) != K25_OK) {
        status = fail_status(&err);
    } else {
        c.o.cmdline = cmdline;
        c.o.stop = &g_stop;
        status = measure_and_report(&c, &err);
    }
    free(cmdline);
    return status;
}
