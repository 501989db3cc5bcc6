/*
 * cli_serve.c - `k25 serve`: argument parsing (one option table,
 * cliopt.h) and the process's life (signals); the server itself
 * is harness/serve.c.
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int k25_cmd_serve(int argc, char **argv)
{
    struct k25_config cfg;
    struct k25_error err;
    struct k25_serve_opts o;
    k25_config_init(&cfg);
    /* a server keeps "predictably slow" under surges: the circuit breaker is on unless the config
     * file or a flag (parsed below, after this default) turns it off (docs/serve.md) */
    cfg.breaker_enabled = true;
    k25_error_clear(&err);
    k25_serve_opts_init(&o);
    o.port = 8000;
    o.api_key = getenv("K25_API_KEY");
    if (o.api_key && !*o.api_key)
        o.api_key = NULL;
    int64_t max_body = (int64_t)o.max_body_bytes;

    const struct k25_opt opts[] = {
        {.names = {"--host"}, .type = K25_OPT_STRING, .dest = &o.host, .metavar = "ADDR",
         .help = "address to bind (0.0.0.0 or :: for every interface: then use\n--api-key)"},
        {.names = {"--port"}, .type = K25_OPT_INT, .dest = &o.port, .min = 0, .max = 65535, .metavar = "P",
         .help = "TCP port (0 = pick a free one)"},
        {.names = {"--api-key"}, .type = K25_OPT_STRING, .dest = &o.api_key, .metavar = "KEY", .deflt = "$K25_API_KEY",
         .help = "require \"Authorization: Bearer KEY\" on /v1/*"},
        {.names = {"--served-model-name"}, .type = K25_OPT_STRING, .dest = &o.model_name, .metavar = "NAME",
         .deflt = "the --model name", .help = "the model name clients send"},
        {.names = {"--max-body-bytes"}, .type = K25_OPT_INT64, .dest = &max_body, .min = 1024, .max = 1LL << 34,
         .help = "larger request bodies get 413"},
        {.names = {"--max-waiting"}, .type = K25_OPT_INT, .dest = &o.max_waiting, .min = 0, .max = 1000000,
         .help = "requests queued beyond the running batch; more get 429"},
        {.names = {"--max-connections"}, .type = K25_OPT_INT, .dest = &o.max_connections, .min = 1, .max = 100000,
         .help = "concurrent HTTP connections"},
        {.names = {"--max-connections-per-ip"}, .type = K25_OPT_INT, .dest = &o.max_connections_per_ip, .min = 0,
         .max = 100000, .deflt = "half of --max-connections",
         .help = "concurrent connections from one client address (0 = the default)"},
        {.names = {"--header-timeout"}, .type = K25_OPT_INT, .dest = &o.header_timeout_s, .min = 1, .max = 86400,
         .metavar = "S",
         .help = "seconds a connection has to send a complete request header\n(from its start or its previous "
                 "request's end); then it is closed"},
        {.names = {"--body-timeout"}, .type = K25_OPT_INT, .dest = &o.body_timeout_s, .min = 1, .max = 86400,
         .metavar = "S", .help = "seconds a request has to send its whole body after the header"},
        {.names = {"--idle-timeout"}, .type = K25_OPT_INT, .dest = &o.idle_timeout_s, .min = 1, .max = 86400,
         .metavar = "S", .help = "seconds without traffic after which a connection is closed"},
        {.names = {"--http-threads"}, .type = K25_OPT_INT, .dest = &o.http_threads, .min = 1, .max = 1024,
         .metavar = "N",
         .help = "libmicrohttpd polling threads (connections that wait for the\nengine are suspended, not a thread "
                 "each)"},
        {.names = {"--chat-template"}, .type = K25_OPT_STRING, .dest = &o.chat_template, .metavar = "NAME",
         .deflt = "recognised from tokenizer_config.json",
         .help = "chat format of /v1/chat/completions for a model folder:\n"
                 "llama3|llama3.1|llama2|chatml|qwen2.5|qwen3|gemma (docs/models.md)"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "serve",
        .usage = "serve [--model tiny|small|DIR] [--config k25.yaml] [engine flags]\n"
                 "                 [--host ADDR] [--port P] [--api-key KEY] [--served-model-name NAME]\n"
                 "                 [--max-body-bytes N] [--max-waiting N] [--max-connections N]\n"
                 "                 [--max-connections-per-ip N] [--header-timeout S] [--body-timeout S]\n"
                 "                 [--idle-timeout S] [--http-threads N] [--max-model-len N]\n"
                 "                 [--chat-template NAME]",
        .about = "Serves the reference engine over an OpenAI-compatible HTTP API (docs/serve.md):\n"
                 "  POST /v1/completions, POST /v1/chat/completions   (\"stream\": true for SSE)\n"
                 "  GET  /v1/models, /health, /metrics                  (Prometheus text)\n"
                 "A model folder's tokenizer.json encodes text prompts (BOS template) and decodes the\n"
                 "output; chat goes through its named chat template.  Presets are bytes.  Streams carry\n"
                 "each token's id in \"token_ids\"; text never splits a UTF-8 character.  A client that\n"
                 "disconnects has its request cancelled.\n"
                 "A prompt + max_tokens over the context limit (--max-model-len; the model's by default)\n"
                 "gets 400.  Limits against hostile clients: docs/serve.md \"Limits and hostile clients\".\n",
        .opts = opts,
        .config = &cfg,
        .options_only = true,
        .epilog = "Prints \"k25 serve: listening on http://HOST:PORT (model NAME)\" on stdout when ready.\n"
                  "GPU telemetry: every GPU NVML sees is sampled every 100 ms and its last sample is on\n"
                  "/metrics (k25_gpu_*; k25_gpu_telemetry_available 0 with the reason without NVML).\n"
                  "SIGINT/SIGTERM: stops (in-flight streams end with finish_reason \"cancelled\"), exit 0.\n"
                  "Exit status: 0 stopped by a signal, 2 bad input (an option, the model, a port in use),\n"
                  "1 a failure while running.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK)
        goto out_err;
    if (o.api_key && !*o.api_key)
        o.api_key = NULL;
    o.max_body_bytes = (size_t)max_body;
    if (k25_config_validate(&cfg, &err) != K25_OK)
        goto out_err;

    /* Signals go to sigwait below: block them before any thread starts, so every thread inherits it. */
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    signal(SIGPIPE, SIG_IGN); /* a vanished client is an error on its socket, not a signal */
    k25_serve_t *S = NULL;
    if (k25_serve_start(&cfg, &o, &S, &err) != K25_OK) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        goto out_err;
    }
    const char *slash = strrchr(cfg.model, '/');
    int status = 0;
    if (printf("k25 serve: listening on http://%s%s%s:%d (model %s)\n", strchr(o.host, ':') ? "[" : "", o.host,
               strchr(o.host, ':') ? "]" : "", k25_serve_port(S),
               o.model_name ? o.model_name : slash && slash[1] ? slash + 1 : cfg.model) < 0 ||
        fflush(stdout) != 0) {
        fprintf(stderr, "k25 serve: writing to stdout failed: %s\n", strerror(errno));
        status = 1;
    }
    int sig = 0;
    if (status == 0)
        sigwait(&set, &sig);
    fprintf(stderr, "k25 serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "error");
    k25_serve_stop(S);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return status;

out_err:
    fprintf(stderr, "k25 serve: %s\n", err.msg);
    return err.code == K25_ENOMEM || err.code == K25_EIO ? (err.field[0] ? 2 : 1) : 2;
}
