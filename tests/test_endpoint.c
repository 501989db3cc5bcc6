/*
 * test_endpoint.c - `k25 bench --endpoint` against a scripted server.
 *
 * The server here is plain sockets on loopback, one thread per connection,
 * and answers each request by the scenario its prompt names, with known
 * delays between chunks.  That proves the client's arithmetic (TTFT from
 * the scheduled send to the first content chunk, ITL between chunks, E2E,
 * output tokens from usage or counted) against delays the test chose, and
 * that every broken answer - HTTP 500, a line that is not SSE, truncated
 * JSON, a stream that ends before [DONE], a stall - is recorded as a failed
 * request with its reason while the run finishes.  Unit tests of the UTF-8
 * repair and the SSE reader come first.
 */
#include "testutil.h"

#include "harness.h"
#include "k25util.h"
#include "servermetrics.h"
#include "sse.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

/* ------------------------------------------------------------ UTF-8 / SSE */

static void push_all(const unsigned char *b, size_t n, char *out, size_t *len)
{
    struct k25_utf8 u = {0};
    *len = 0;
    for (size_t i = 0; i < n; i++)
        k25_utf8_push(&u, b[i], out, len);
    k25_utf8_flush(&u, out, len);
    out[*len] = '\0';
}

static void test_utf8_repair(void **state)
{
    (void)state;
    char out[256];
    size_t n;
    /* valid multi-byte text passes through unchanged, byte by byte */
    const char *ok = "na\xc3\xafve \xe2\x82\xac \xf0\x9f\x98\x80";
    push_all((const unsigned char *)ok, strlen(ok), out, &n);
    assert_string_equal(out, ok);
    assert_true(k25_utf8_valid(out, n));
    /* a lone continuation byte, an overlong, a surrogate, a truncated sequence at the end */
    const unsigned char bad[] = {'a', 0x80, 'b', 0xc0, 0xaf, 'c', 0xed, 0xa0, 0x80, 'd', 0xe2, 0x82};
    push_all(bad, sizeof(bad), out, &n);
    assert_true(k25_utf8_valid(out, n));
    assert_string_equal(out, "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd" "c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                             "d\xef\xbf\xbd");
    assert_false(k25_utf8_valid("\xed\xa0\x80", 3));
    assert_false(k25_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
}

struct evlog {
    char ev[8][64];
    int n;
};

static int log_ev(const char *d, size_t n, void *u)
{
    struct evlog *l = u;
    assert_true(n < 64);
    memcpy(l->ev[l->n], d, n + 1);
    l->n++;
    return 0;
}

static void test_sse_reader(void **state)
{
    (void)state;
    struct k25_sse p;
    struct evlog l = {0};
    k25_sse_init(&p);
    /* split anywhere, CRLF and LF, comments, two data lines joined, event/id fields */
    const char *s = ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\nid: 7\ndata: one\ndata:two\n\ndata: [DONE]\n\n";
    for (size_t i = 0; s[i]; i++)
        assert_int_equal(k25_sse_feed(&p, s + i, 1, log_ev, &l), 0);
    assert_int_equal(l.n, 3);
    assert_string_equal(l.ev[0], "{\"a\":1}");
    assert_string_equal(l.ev[1], "one\ntwo");
    assert_string_equal(l.ev[2], "[DONE]");
    assert_false(k25_sse_pending(&p));
    assert_int_equal(k25_sse_feed(&p, "data: {\"tr", 10, log_ev, &l), 0);
    assert_true(k25_sse_pending(&p)); /* a truncated event */
    k25_sse_free(&p);
    /* not SSE */
    k25_sse_init(&p);
    assert_int_equal(k25_sse_feed(&p, "{\"choices\": []}\n\n", 17, log_ev, &l), -1);
    assert_non_null(strstr(p.error, "malformed SSE line"));
    k25_sse_free(&p);
}

/* ------------------------------------------------------------ the server */

static int g_port;
static int g_listen = -1;
static int g_scrapes; /* GET /metrics answered (the counters below grow with it) */

/* Delays of the "ok" scenario, milliseconds. */
#define FIRST_MS 200
#define GAP_MS 50
#define N_TOK 5

static void msleep(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void send_all(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n > 0) {
        ssize_t w = send(fd, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the client went away: fine for the stall scenario */
        s += w;
        n -= (size_t)w;
    }
}

static void send_head(int fd, int status, const char *ctype)
{
    char h[256];
    snprintf(h, sizeof(h), "HTTP/1.1 %d X\r\nContent-Type: %s\r\nConnection: close\r\n\r\n", status, ctype);
    send_all(fd, h);
}

static void chunk(int fd, const char *text, int id)
{
    char b[256];
    snprintf(b, sizeof(b), "data: {\"choices\":[{\"index\":0,\"text\":\"%s\",\"finish_reason\":null%s%d%s}]}\n\n", text,
             id >= 0 ? ",\"token_ids\":[" : "", id >= 0 ? id : 0, id >= 0 ? "]" : "");
    if (id < 0) /* no ids: plain OpenAI chunks */
        snprintf(b, sizeof(b), "data: {\"choices\":[{\"index\":0,\"text\":\"%s\",\"finish_reason\":null}]}\n\n", text);
    send_all(fd, b);
}

/* One connection: read the request, answer by the scenario the prompt names. */
static void *serve_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char req[65536];
    size_t n = 0;
    ssize_t r;
    char *body = NULL;
    while (n < sizeof(req) - 1 && (r = recv(fd, req + n, sizeof(req) - 1 - n, 0)) > 0) {
        n += (size_t)r;
        req[n] = '\0';
        char *e = strstr(req, "\r\n\r\n");
        if (!e)
            continue;
        char *cl = strcasestr(req, "Content-Length:");
        size_t want = cl ? (size_t)atol(cl + 15) : 0;
        if (n >= (size_t)(e + 4 - req) + want) {
            body = e + 4;
            break;
        }
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (!strncmp(req, "GET /metrics", 12)) {
        /* a vLLM-shaped target: two engines' gauges (summed), counters growing by scrape */
        int k = __atomic_add_fetch(&g_scrapes, 1, __ATOMIC_SEQ_CST);
        char m[1024];
        snprintf(m, sizeof(m),
                 "# HELP vllm:num_requests_running Number of requests running.\n"
                 "# TYPE vllm:num_requests_running gauge\n"
                 "vllm:num_requests_running{engine=\"0\",model_name=\"a}b\"} 1\n"
                 "vllm:num_requests_running{engine=\"1\",model_name=\"a}b\"} 2\n"
                 "vllm:num_requests_waiting{engine=\"0\"} 4\n"
                 "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
                 "vllm:num_preemptions_total{engine=\"0\"} %d\n"
                 "vllm:prefix_cache_hits_total{engine=\"0\"} %d\n"
                 "vllm:prefix_cache_queries_total{engine=\"0\"} %d\n"
                 "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 7\n",
                 k, 3 * k, 4 * k);
        send_head(fd, 200, "text/plain; version=0.0.4");
        send_all(fd, m);
    } else if (!strncmp(req, "GET /nometrics", 14)) {
        send_head(fd, 404, "text/plain");
        send_all(fd, "not here");
    } else if (!strncmp(req, "GET /v1/models", 14)) {
        send_head(fd, 200, "application/json");
        send_all(fd, "{\"object\":\"list\",\"data\":[{\"id\":\"scripted\",\"object\":\"model\"}]}");
    } else if (body && strstr(body, "scenario-ok")) {
        send_head(fd, 200, "text/event-stream");
        msleep(FIRST_MS);
        for (int i = 0; i < N_TOK; i++) {
            if (i)
                msleep(GAP_MS);
            chunk(fd, "x", 100 + i);
        }
        send_all(fd, "data: {\"model\":\"scripted-8b\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n"
                     "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"total_tokens\":8}}\n\n"
                     "data: [DONE]\n\n");
    } else if (body && strstr(body, "scenario-nousage")) {
        send_head(fd, 200, "text/event-stream");
        for (int i = 0; i < 3; i++) {
            msleep(GAP_MS);
            chunk(fd, "y", -1);
        }
        send_all(fd, "data: [DONE]\n\n");
    } else if (body && strstr(body, "scenario-http500")) {
        send_head(fd, 500, "application/json");
        send_all(fd, "{\"error\":{\"message\":\"scripted failure\",\"type\":\"server_error\"}}");
    } else if (body && strstr(body, "scenario-http503long")) {
        /* a reason far longer than any fixed field: it must come back whole */
        char msg[1100];
        int k = snprintf(msg, sizeof(msg), "{\"error\":{\"message\":\"overloaded:");
        for (int i = 0; i < 60; i++)
            k += snprintf(msg + k, sizeof(msg) - (size_t)k, " part%02d", i);
        snprintf(msg + k, sizeof(msg) - (size_t)k, " END\"}}");
        send_head(fd, 503, "application/json");
        send_all(fd, msg);
    } else if (body && strstr(body, "scenario-badsse")) {
        send_head(fd, 200, "text/event-stream");
        chunk(fd, "z", 1);
        send_all(fd, "this is not server-sent events\n\n");
        msleep(200);
    } else if (body && strstr(body, "scenario-truncjson")) {
        send_head(fd, 200, "text/event-stream");
        send_all(fd, "data: {\"choices\":[{\"index\":0,\"text\":\"a\"\n\ndata: [DONE]\n\n");
    } else if (body && strstr(body, "scenario-truncated")) {
        send_head(fd, 200, "text/event-stream");
        chunk(fd, "a", 1);
        chunk(fd, "b", 2);
    } else if (body && strstr(body, "scenario-stall")) {
        send_head(fd, 200, "text/event-stream");
        chunk(fd, "a", 1);
        msleep(3500); /* longer than the client's --stall-timeout 1 */
        send_all(fd, "data: [DONE]\n\n");
    } else {
        send_head(fd, 404, "application/json");
        send_all(fd, "{\"error\":{\"message\":\"no scenario\"}}");
    }
    close(fd);
    return NULL;
}

static void *accept_loop(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(g_listen, NULL, NULL);
        if (fd < 0)
            return NULL; /* closed at teardown */
        pthread_t t;
        if (pthread_create(&t, NULL, serve_conn, (void *)(intptr_t)fd) == 0)
            pthread_detach(t);
        else
            close(fd);
    }
}

static int group_setup(void **state)
{
    if (tu_group_setup(state) != 0)
        return -1;
    signal(SIGPIPE, SIG_IGN);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    g_listen = socket(AF_INET, SOCK_STREAM, 0);
    if (g_listen < 0 || bind(g_listen, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(g_listen, 64) != 0 ||
        getsockname(g_listen, (struct sockaddr *)&a, &al) != 0)
        return -1;
    g_port = ntohs(a.sin_port);
    pthread_t t;
    if (pthread_create(&t, NULL, accept_loop, NULL) != 0)
        return -1;
    pthread_detach(t);
    return 0;
}

static int group_teardown(void **state)
{
    shutdown(g_listen, SHUT_RDWR);
    close(g_listen);
    return tu_group_teardown(state);
}

/* A gold set whose requests name scenarios; returns its path (static buffer). */
static const char *gold(const char *name, const char *const *scen, int n)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s.jsonl", tu_dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < n; i++)
        fprintf(f, "{\"id\":\"%s\",\"text\":\"please run scenario-%s now\",\"expected_output_length\":%d}\n", scen[i],
                scen[i], N_TOK);
    assert_int_equal(fclose(f), 0);
    return path;
}

/* The request of a trace by id. */
static const struct k25_bench_req *by_id(const struct k25_trace *t, const char *id)
{
    for (size_t i = 0; i < t->run.n_reqs; i++)
        if (!strcmp(t->run.reqs[i].id, id))
            return &t->run.reqs[i];
    fail_msg("no request '%s' in the trace", id);
    return NULL;
}

static void bench(const char *args, char **out, int want)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s bench --endpoint http://127.0.0.1:%d %s --quiet", tu_k25(), g_port, args);
    int st = tu_run(cmd, out);
    if (st != want)
        fail_msg("%s\n  exit %d (want %d):\n%s", cmd, st, want, *out);
}

/* TTFT/ITL/E2E from chunk arrivals, against the delays the server used. */
static void test_arithmetic(void **state)
{
    (void)state;
    static const char *const sc[] = {"ok", "nousage"};
    char args[2048], h5[512], js[512], *out;
    snprintf(h5, sizeof(h5), "%s/ok.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/ok.json", tu_dir);
    snprintf(args, sizeof(args), "--dataset %s --concurrency 1 --out %s --json %s", gold("ok", sc, 2), h5, js);
    bench(args, &out, 0);
    free(out);
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(h5, &t, &err), K25_OK);
    const struct k25_bench_req *q = by_id(&t, "ok");
    assert_int_equal(q->state, K25_REQ_COMPLETED);
    assert_int_equal(q->n_output, N_TOK); /* from usage */
    assert_int_equal(q->n_input, 3);      /* usage's prompt_tokens */
    for (int i = 0; i < N_TOK; i++)
        assert_int_equal(q->token_ids[i], 100 + i); /* the token_ids extension */
    /* The server sleeps FIRST_MS before the first chunk and GAP_MS before each next one, so chunk i
     * cannot reach the client before FIRST_MS + i * GAP_MS after the request left: only lower bounds
     * hold on every machine (a loaded one is later by any amount; no upper bound is asserted). The
     * figures themselves are checked as arithmetic on the recorded arrival times. */
    double ttft = k25_bench_req_ttft_ms(q), e2e = k25_bench_req_e2e_ms(q);
    assert_true(q->first_ns == q->token_ns[0]);
    assert_true(fabs(ttft - (double)(q->token_ns[0] - q->arrival_ns) / 1e6) < 1e-6);
    assert_true(fabs(e2e - (double)(q->token_ns[N_TOK - 1] - q->arrival_ns) / 1e6) < 1e-6);
    for (int i = 0; i < N_TOK; i++) {
        double at = (double)(q->token_ns[i] - q->arrival_ns) / 1e6, min_ms = FIRST_MS + (double)i * GAP_MS;
        if (at < min_ms - 1) /* 1 ms: the two clocks' reading order */
            fail_msg("chunk %d seen %.1f ms after the request, but the server sent it after %.0f ms", i, at, min_ms);
        if (i > 0 && q->token_ns[i] < q->token_ns[i - 1])
            fail_msg("chunk %d seen before chunk %d", i, i - 1);
    }
    assert_true(q->finish_ns >= q->token_ns[N_TOK - 1]);
    /* no usage: tokens counted from the chunks, flagged, ids unknown */
    const struct k25_bench_req *c = by_id(&t, "nousage");
    assert_int_equal(c->state, K25_REQ_COMPLETED);
    assert_int_equal(c->n_output, 3);
    assert_int_equal(c->token_ids[0], -1);
    k25_trace_free(&t);
    /* the JSON: target, the server's model list, the flag, the response headers */
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(k25_json_path(j, "provenance.target")), "endpoint");
    assert_string_equal(json_string_value(k25_json_path(j, "summary.target")), "endpoint");
    assert_string_equal(json_string_value(k25_json_path(j, "provenance.endpoint.model")), "scripted");
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(k25_json_path(j, "provenance.endpoint.models.data"), 0), "id")),
        "scripted");
    assert_string_equal(json_string_value(k25_json_path(j, "provenance.endpoint.response_headers.content-type")),
                        "text/event-stream");
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.endpoint.requests_tokens_counted")), 1);
    /* the server's own name for its model (the answers' "model"), counted */
    assert_string_equal(json_string_value(k25_json_path(j, "provenance.endpoint.served_model")), "scripted-8b");
    assert_int_equal(json_integer_value(k25_json_path(j, "provenance.endpoint.response_models.scripted-8b")), 1);
    /* the config is what was sent: the model, no engine key the client never sent */
    assert_string_equal(json_string_value(k25_json_path(j, "provenance.config.model")), "scripted");
    assert_null(k25_json_path(j, "provenance.config.kv_compression_ratio"));
    assert_null(k25_json_path(j, "provenance.config.prefill_chunk_size"));
    assert_true(json_is_integer(k25_json_path(j, "provenance.client.seed")));
    /* what a client cannot see is null with the reason, never 0 */
    assert_true(json_is_null(k25_json_path(j, "summary.memory.peak_tracked_bytes")));
    assert_string_equal(json_string_value(k25_json_path(j, "summary.memory.note")), "not visible from the client");
    assert_true(json_is_null(k25_json_path(j, "summary.harness.overhead_per_request_us")));
    assert_string_equal(json_string_value(k25_json_path(j, "summary.endpoint.output_tokens_from")), "mixed");
    json_decref(j);
}

/* The Prometheus text reader: names, labels holding '}' and escapes, special values, comments, bad lines. */
struct prom_log {
    char series[8][128];
    double v[8];
    int n;
};

static void prom_cb(const char *series, size_t sl, const char *name, size_t nl, double v, void *u)
{
    struct prom_log *l = u;
    assert_true(nl <= sl && !memcmp(series, name, nl));
    if (l->n < 8) {
        snprintf(l->series[l->n], sizeof(l->series[0]), "%.*s", (int)sl, series);
        l->v[l->n++] = v;
    }
}

static void test_prom_parse(void **state)
{
    (void)state;
    const char *t = "# HELP a_total x\n# TYPE a_total counter\na_total 3\n"
                    "b{l=\"x}y\",m=\"q\\\"r\"} +Inf 1700000000\n"
                    "\n   c:d NaN\n"
                    "bad line here\n{nolabel} 1\ne 2.5e-3\r\n";
    struct prom_log l = {0};
    assert_int_equal(k25_prom_parse(t, strlen(t), prom_cb, &l), 2); /* the two bad lines */
    assert_int_equal(l.n, 4);
    assert_string_equal(l.series[0], "a_total");
    assert_true(l.v[0] == 3);
    assert_string_equal(l.series[1], "b{l=\"x}y\",m=\"q\\\"r\"}");
    assert_true(isinf(l.v[1]));
    assert_string_equal(l.series[2], "c:d");
    assert_true(isnan(l.v[2]));
    assert_string_equal(l.series[3], "e");
    assert_true(fabs(l.v[3] - 2.5e-3) < 1e-12);
}

/*
 * --server-metrics: the scripted vLLM-shaped /metrics scraped during the run (a first scrape at
 * once, a last at the end: at least 2), mapped (running summed over engines, the preemption counter's
 * increase, the prefix hit rate from the counters' increases), raw series kept in the trace; a target
 * without metrics is a note, not a failure.
 */
static void test_server_metrics(void **state)
{
    (void)state;
    static const char *const sc[] = {"ok"};
    char args[2048], h5[512], js[512], *out;
    snprintf(h5, sizeof(h5), "%s/sm.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/sm.json", tu_dir);
    snprintf(args, sizeof(args), "--dataset %s --requests 2 --rate 20 --server-metrics --out %s --json %s",
             gold("sm", sc, 1), h5, js);
    bench(args, &out, 0);
    free(out);
    json_t *j = json_load_file(js, 0, NULL);
    assert_non_null(j);
    const json_t *sm = k25_json_path(j, "summary.server_metrics");
    int n = (int)json_integer_value(json_object_get(sm, "scrapes"));
    assert_true(n >= 2);
    assert_int_equal(json_integer_value(json_object_get(sm, "scrapes_ok")), n);
    assert_string_equal(json_string_value(json_object_get(sm, "family")), "vllm");
    assert_true(json_is_null(json_object_get(sm, "note")));
    assert_true(json_number_value(k25_json_path(sm, "n_running.max")) == 3);
    assert_true(json_number_value(k25_json_path(sm, "n_waiting.max")) == 4);
    assert_true(json_number_value(k25_json_path(sm, "kv_usage_ratio.max")) == 0.5);
    assert_true(json_number_value(k25_json_path(j, "summary.kv_usage_ratio.max")) == 0.5); /* for the health check */
    assert_true(json_number_value(json_object_get(sm, "preemptions")) == n - 1);
    assert_true(fabs(json_number_value(k25_json_path(sm, "prefix_cache_hit_rate.mean")) - 0.75) < 1e-12);
    assert_int_equal(json_integer_value(json_object_get(sm, "series")), 8);
    /* the queue-depth health check's figure: the server's own gauge */
    assert_string_equal(json_string_value(k25_json_path(j, "summary.queue_waiting.source")), "server_metrics");
    assert_true(json_number_value(k25_json_path(j, "summary.queue_waiting.max")) == 4);
    double qmean = json_number_value(k25_json_path(j, "summary.queue_waiting.mean"));
    /* /server_metrics read back (k25_trace_read): the same scrapes, figures and raw series */
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(h5, &t, &err), K25_OK);
    assert_non_null(t.srvmet);
    assert_int_equal(t.srvmet->n_scrapes, n);
    assert_int_equal(t.srvmet->n_series, 8);
    assert_int_equal(t.srvmet->n_values, 8 * n);
    assert_string_equal(t.srvmet->family, "vllm");
    assert_non_null(strstr(t.srvmet->url, "/metrics"));
    for (size_t i = 0; i < t.srvmet->n_values; i++)
        assert_true(t.srvmet->values[i].scrape >= 0 && t.srvmet->values[i].scrape < n);
    json_t *back = k25_trace_srvmet_json(t.srvmet);
    assert_true(json_equal(json_object_get(back, "kv_usage_ratio"), json_object_get(sm, "kv_usage_ratio")));
    assert_true(json_equal(json_object_get(back, "n_waiting"), json_object_get(sm, "n_waiting")));
    assert_true(json_number_value(json_object_get(back, "preemptions")) == n - 1);
    json_decref(back);
    k25_trace_free(&t);
    json_decref(j);
    /* k25 inspect shows them, its --json carries them */
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), "%s inspect %s", tu_k25(), h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "server metrics (/server_metrics)"));
    assert_non_null(strstr(out, "answered 200) every 1 s, 8 raw series, family vllm"));
    assert_non_null(strstr(out, "KV usage max 0.5"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s inspect --json %s | jq -e '.server_metrics.series == 8 and "
                               ".server_metrics.kv_usage_ratio.max == 0.5'", tu_k25(), h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    /* the report's health checks apply to the endpoint run: KV usage (0.5, OK) and the queue (its mean) */
    char rep[600], md[700];
    snprintf(rep, sizeof(rep), "%s/sm-rep", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s --quiet", tu_k25(), h5, rep);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    snprintf(md, sizeof(md), "%s/report.md", rep);
    FILE *mf = fopen(md, "r");
    assert_non_null(mf);
    static char mdt[1 << 16];
    size_t ml = fread(mdt, 1, sizeof(mdt) - 1, mf);
    mdt[ml] = 0;
    fclose(mf);
    if (!strstr(mdt, "| kv_usage_ratio | <= 0.92 | **OK** 0.5 |"))
        fail_msg("no OK kv_usage_ratio row in %s:\n%.1500s", md,
                 strstr(mdt, "## Health") ? strstr(mdt, "## Health") : mdt);
    char qrow[128];
    snprintf(qrow, sizeof(qrow), "| queue_waiting_mean | <= 1; fail above 4 | **%s**",
             qmean > 4 ? "FAIL" : qmean > 1 ? "WARN" : "OK");
    assert_non_null(strstr(mdt, qrow));
    /* what the client cannot see is named with the reason, never OK */
    assert_non_null(strstr(mdt, "`busy_p95` (the server's busy fraction is not visible from the client)"));
    /* the trace: one samples row per scrape, every raw value */
    hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t d = H5Dopen2(f, "/server_metrics/samples", H5P_DEFAULT), sp = H5Dget_space(d);
    assert_int_equal(H5Sget_simple_extent_npoints(sp), n);
    H5Sclose(sp);
    H5Dclose(d);
    d = H5Dopen2(f, "/server_metrics/values", H5P_DEFAULT);
    sp = H5Dget_space(d);
    assert_int_equal(H5Sget_simple_extent_npoints(sp), 8 * n);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    /* no metrics there: a note, the run succeeds */
    snprintf(args, sizeof(args), "--dataset %s --requests 1 --rate 20 --server-metrics http://127.0.0.1:%d/nometrics "
             "--out %s --json %s", gold("sm", sc, 1), g_port, h5, js);
    bench(args, &out, 0);
    assert_non_null(strstr(out, "note: no server metrics at http://127.0.0.1:"));
    free(out);
    j = json_load_file(js, 0, NULL);
    assert_non_null(strstr(json_string_value(k25_json_path(j, "summary.server_metrics.note")), "HTTP 404"));
    assert_true(json_is_null(k25_json_path(j, "summary.server_metrics.kv_usage_ratio")));
    assert_true(json_is_null(k25_json_path(j, "summary.queue_waiting.mean")));
    json_decref(j);
    /* the report: KV usage and queue depth not measured, each with why (no answered scrape), never OK */
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s --quiet", tu_k25(), h5, rep);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    mf = fopen(md, "r");
    assert_non_null(mf);
    ml = fread(mdt, 1, sizeof(mdt) - 1, mf);
    mdt[ml] = 0;
    fclose(mf);
    assert_null(strstr(mdt, "| kv_usage_ratio |"));
    assert_non_null(strstr(mdt, "`kv_usage_ratio` (no scrape of the server's metrics was answered"));
    assert_non_null(strstr(mdt, "`queue_waiting_mean` (the server's metrics expose no queue depth k25 knows)"));
}

/* A Mooncake trace's lengths are tokens: without --tokenizer, or on a chat endpoint, the run refuses them
 * by name (instead of sending prompts of another length); a trace of arrivals alone replays. */
static void test_trace_shapes_refused(void **state)
{
    (void)state;
    static const char *const sc[] = {"ok"};
    char args[2048], tr[512], h5[512], *out;
    snprintf(tr, sizeof(tr), "%s/mooncake.jsonl", tu_dir);
    snprintf(h5, sizeof(h5), "%s/mc.h5", tu_dir);
    tu_write_file(tr, "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [0]}\n");
    snprintf(args, sizeof(args), "--dataset %s --arrivals trace --trace-file %s --out %s", gold("mc", sc, 1), tr, h5);
    bench(args, &out, 2);
    assert_non_null(strstr(out, "mooncake.jsonl:1: 'input_length': the trace's lengths are tokens"));
    assert_non_null(strstr(out, "--tokenizer DIR"));
    free(out);
    snprintf(args, sizeof(args), "--dataset %s --arrivals trace --trace-file %s --endpoint-type chat --tokenizer %s "
             "--out %s", gold("mc", sc, 1), tr, tu_dir, h5);
    bench(args, &out, 2);
    assert_non_null(strstr(out, "a chat endpoint takes text"));
    free(out);
    tu_write_file(tr, "{\"timestamp\": 0}\n{\"timestamp\": 20}\n");
    snprintf(args, sizeof(args), "--dataset %s --arrivals trace --trace-file %s --out %s", gold("mc", sc, 1), tr, h5);
    bench(args, &out, 0);
    free(out);
}

/* Every broken answer is one failed request with its reason; the run finishes. */
static void test_failures(void **state)
{
    (void)state;
    static const char *const sc[] = {"ok", "http500", "badsse", "truncjson", "truncated", "stall", "missing",
                                     "http503long"};
    static const struct {
        const char *id, *reason;
        int status;
    } want[] = {
        {"http500", "HTTP 500: scripted failure", 500},
        {"badsse", "malformed SSE line: 'this is not server-sent events'", 200},
        {"truncjson", "malformed JSON in an SSE event", 200},
        {"truncated", "truncated stream: it ended before data: [DONE]", 200},
        {"stall", "stalled: no data for 1 s", 200},
        {"missing", "HTTP 404: no scenario", 404},
    };
    char args[2048], h5[512], js[512], *out;
    snprintf(h5, sizeof(h5), "%s/fail.h5", tu_dir);
    snprintf(js, sizeof(js), "%s/fail.json", tu_dir);
    snprintf(args, sizeof(args), "--dataset %s --concurrency 8 --stall-timeout 1 --out %s --json %s",
             gold("fail", sc, 8), h5, js);
    uint64_t t0 = k25_now_ns();
    bench(args, &out, 0);
    double wall_s = (double)(k25_now_ns() - t0) / 1e9;
    char *summary_line = strstr(out, "8 requests (");
    assert_true(wall_s < 10); /* the stall ended by the timeout, not by the server */
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(h5, &t, &err), K25_OK);
    assert_int_equal(t.run.n_reqs, 8);
    assert_int_equal(by_id(&t, "ok")->state, K25_REQ_COMPLETED);
    /* a long reason is stored whole (schema 6 /reasons), not cut at the /requests column's width */
    const char *lr = by_id(&t, "http503long")->reason;
    assert_true(strlen(lr) > 400);
    assert_non_null(strstr(lr, "part59 END"));
    assert_int_equal(strncmp(lr, "HTTP 503: overloaded: part00", 28), 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const struct k25_bench_req *q = by_id(&t, want[i].id);
        assert_int_equal(q->state, K25_REQ_REJECTED);
        if (strncmp(q->reason, want[i].reason, strlen(want[i].reason)))
            fail_msg("%s: reason \"%s\", want \"%s...\"", want[i].id, q->reason, want[i].reason);
    }
    k25_trace_free(&t);
    if (!summary_line || strncmp(summary_line, "8 requests (1 completed, 7 rejected)", 36))
        fail_msg("output:\n%s", out);
    free(out);
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    assert_non_null(j);
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.endpoint.failed")), 7);
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.endpoint.failed_by_http_status.200")), 4);
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.endpoint.failed_by_http_status.500")), 1);
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.requests.rejected")), 7);
    json_decref(j);
}

/* Open loop: each request leaves at its scheduled time, latency counts from it. */
static void test_open_loop(void **state)
{
    (void)state;
    static const char *const sc[] = {"ok"};
    char args[2048], h5[512], *out;
    snprintf(h5, sizeof(h5), "%s/open.h5", tu_dir);
    snprintf(args, sizeof(args), "--dataset %s --rate 20 --requests 6 --seed 3 --out %s", gold("open", sc, 1), h5);
    bench(args, &out, 0);
    free(out);
    struct k25_trace t;
    struct k25_error err;
    int64_t *sched;
    size_t n;
    assert_int_equal(k25_trace_read(h5, &t, &err), K25_OK);
    assert_int_equal(k25_loadgen_schedule(20, 1, 3, 6, 0, &sched, &n, &err), K25_OK);
    assert_int_equal(t.run.n_reqs, 6);
    for (size_t i = 0; i < n; i++) {
        const struct k25_bench_req *q = &t.run.reqs[i];
        assert_int_equal(q->user, -1);
        /* arrivals are the seeded schedule (the run's origin is its start) */
        if (llabs(q->arrival_ns - sched[q->seq]) > 2000000)
            fail_msg("request %lld arrived at %lld ns, scheduled %lld", (long long)q->seq, (long long)q->arrival_ns,
                     (long long)sched[q->seq]);
        assert_true(q->submit_ns >= q->arrival_ns);
        assert_true(k25_bench_req_ttft_ms(q) >= FIRST_MS);
    }
    free(sched);
    k25_trace_free(&t);
}

/* Bad use: an unreachable server, a bad URL, chat with --fidelity-only options. */
static void test_bad_input(void **state)
{
    (void)state;
    char cmd[2048], *out, h5[512];
    snprintf(h5, sizeof(h5), "%s/bad.h5", tu_dir);
    /* a port nobody listens on: bind one, close it */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &al), 0);
    close(s);
    snprintf(cmd, sizeof(cmd), "%s bench --endpoint http://127.0.0.1:%d --dataset datasets/gold/ci-small.jsonl --out %s",
             tu_k25(), ntohs(a.sin_port), h5);
    assert_int_equal(tu_run(cmd, &out), 1);
    assert_non_null(strstr(out, "cannot reach http://127.0.0.1:"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s bench --endpoint ftp://x --dataset datasets/gold/ci-small.jsonl --out %s", tu_k25(),
             h5);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--endpoint"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s bench --endpoint http://127.0.0.1:%d --fidelity --dataset "
             "datasets/gold/ci-small.jsonl --out %s", tu_k25(), g_port, h5);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "not available with --endpoint"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s bench --endpoint-type chat --dataset datasets/gold/ci-small.jsonl --out %s", tu_k25(),
             h5);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--endpoint runs only"));
    free(out);
    assert_int_equal(access(h5, F_OK), -1); /* nothing written */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_repair), cmocka_unit_test(test_sse_reader), cmocka_unit_test(test_arithmetic),
        cmocka_unit_test(test_failures),    cmocka_unit_test(test_open_loop),  cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_prom_parse),  cmocka_unit_test(test_server_metrics), cmocka_unit_test(test_trace_shapes_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
