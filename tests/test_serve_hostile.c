/*
 * test_serve_hostile.c - `k25 serve` under hostile clients (issue 33), on
 * loopback against a real `k25 serve --port 0`, every wait bounded in time
 * and count:
 *   - a prompt over the context limit gets 400 naming `prompt`, its length
 *     and the limit (the 1 MB prompt of the issue included);
 *   - a non-streamed request whose client hangs up is cancelled;
 *   - a short request is answered while a long prefill that fills the step
 *     budget is still running (no starvation);
 *   - slowloris: N sockets trickling header bytes from one address take at
 *     most the per-IP limit, /health answers from another address while
 *     they are open, and the header deadline closes them although they keep
 *     sending;
 *   - HTTP-layer refusals (505, bad chunked framing, bare request lines,
 *     non-ASCII paths) are counted and leave the server healthy;
 *   - an API key longer than 511 bytes is compared whole; an absurd one is
 *     refused at start;
 *   - every float field with denormal / huge / non-finite values: greedy
 *     below the threshold, 400 naming the field otherwise;
 *   - response ids differ across restarts;
 *   - a bounded mutation loop of request bodies (the campaign's fuzzer, in
 *     small) never gets a 5xx or a dead server.
 */
#include "testutil.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>

struct server {
    pid_t pid;
    int port;
};

/* Starts `k25 serve --model tiny --port 0 ARGS` and reads the port it prints; stderr to errfile. */
static int server_start_err(struct server *s, const char *args, const char *errfile)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "exec %s serve --model tiny --port 0 --threads 1 %s 2>%s", tu_k25(), args,
             errfile ? errfile : "/dev/null");
    s->pid = fork();
    if (s->pid < 0)
        return -1;
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[512];
    size_t n = 0;
    s->port = 0;
    for (int tries = 0; tries < 60 && n < sizeof(buf) - 1; tries++) { /* 60 x 1 s at most */
        struct pollfd p = {fd[0], POLLIN, 0};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t r = read(fd[0], buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        const char *l = strstr(buf, "listening on http://127.0.0.1:");
        if (l && strchr(l, '\n')) {
            s->port = atoi(l + strlen("listening on http://127.0.0.1:"));
            break;
        }
    }
    close(fd[0]);
    if (s->port <= 0) {
        int st;
        kill(s->pid, SIGKILL);
        waitpid(s->pid, &st, 0);
        s->pid = 0;
        return -1;
    }
    return 0;
}

static int server_start(struct server *s, const char *args)
{
    return server_start_err(s, args, NULL);
}

/* SIGTERM; the server must stop cleanly (exit 0). */
static int server_stop(struct server *s)
{
    if (s->pid <= 0)
        return 0;
    int st = 0;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
    s->pid = 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ raw HTTP */

/* A TCP connection to the server, from source address src ("127.0.0.1" when NULL). */
static int tcp_connect(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (src) {
        inet_pton(AF_INET, src, &a.sin_addr);
        assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    }
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return; /* the server may have closed it: the caller checks what it reads */
        p += w;
        n -= (size_t)w;
    }
}

/* Reads until the peer closes or timeout_ms passes without a byte; returns the bytes (malloc'd). */
static char *recv_all(int fd, int timeout_ms)
{
    size_t n = 0, cap = 4096;
    char *b = malloc(cap);
    assert_non_null(b);
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        if (n + 2048 > cap) {
            cap *= 2;
            b = realloc(b, cap);
            assert_non_null(b);
        }
        ssize_t r = recv(fd, b + n, cap - n - 1, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    b[n] = '\0';
    return b;
}

/* One request on a fresh connection ("Connection: close"); returns the status, *body the body (malloc'd). */
static int request(int port, const char *method, const char *path, const char *extra_headers, const char *body,
                   char **out)
{
    int fd = tcp_connect(port, NULL);
    assert_true(fd >= 0);
    size_t bl = body ? strlen(body) : 0;
    char *msg = malloc(bl + 1024 + (extra_headers ? strlen(extra_headers) : 0));
    assert_non_null(msg);
    int hl = sprintf(msg, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n", method, path, extra_headers ? extra_headers : "", bl);
    memcpy(msg + hl, body ? body : "", bl);
    send_all(fd, msg, (size_t)hl + bl);
    free(msg);
    char *r = recv_all(fd, 120000);
    close(fd);
    int status = 0;
    sscanf(r, "HTTP/1.%*d %d", &status);
    const char *b = strstr(r, "\r\n\r\n");
    *out = strdup(b ? b + 4 : "");
    free(r);
    return status;
}

static json_t *post(int port, const char *body, int want)
{
    char *out;
    int st = request(port, "POST", "/v1/completions", NULL, body, &out);
    if (st != want)
        fail_msg("POST %.200s: %d (want %d): %.400s", body, st, want, out);
    json_error_t je;
    json_t *j = json_loads(out, JSON_ALLOW_NUL, &je);
    if (!j)
        fail_msg("not JSON: %.400s", out);
    free(out);
    return j;
}

/* A metric's value from /metrics (NAN when absent). */
static double metric(int port, const char *name)
{
    char *out;
    assert_int_equal(request(port, "GET", "/metrics", NULL, NULL, &out), 200);
    double v = NAN;
    size_t nl = strlen(name);
    for (char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, nl) && l[nl] == ' ')
            v = strtod(l + nl + 1, NULL);
    free(out);
    return v;
}

static void health_ok(int port)
{
    char *out;
    assert_int_equal(request(port, "GET", "/health", NULL, NULL, &out), 200);
    free(out);
}

/* The error object's message and param of a 400 answer. */
static void expect_error(json_t *j, const char *param, const char *needle1, const char *needle2)
{
    json_t *e = json_object_get(j, "error");
    const char *m = json_string_value(json_object_get(e, "message")), *p = json_string_value(json_object_get(e, "param"));
    assert_non_null(m);
    if (param)
        assert_string_equal(p ? p : "(null)", param);
    if (needle1 && !strstr(m, needle1))
        fail_msg("'%s' not in: %s", needle1, m);
    if (needle2 && !strstr(m, needle2))
        fail_msg("'%s' not in: %s", needle2, m);
}

static char *repeat_body(const char *pre, char ch, size_t n, const char *post_s)
{
    size_t a = strlen(pre), c = strlen(post_s);
    char *b = malloc(a + n + c + 1);
    assert_non_null(b);
    memcpy(b, pre, a);
    memset(b + a, ch, n);
    memcpy(b + a + n, post_s, c + 1);
    return b;
}

/* ------------------------------------------------------------ tests */

/* Defect 1a: the context limit, the model's by default and --max-model-len. */
static void test_prompt_over_limit(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, ""), 0);
    /* the 1 MB prompt: beyond the preset's 131072 */
    char *big = repeat_body("{\"model\":\"tiny\",\"prompt\":\"", 'a', 1000000, "\",\"max_tokens\":1}");
    json_t *j = post(s.port, big, 400);
    expect_error(j, "prompt", "1000000", "131072");
    json_decref(j);
    free(big);
    health_ok(s.port);
    assert_int_equal(server_stop(&s), 0);

    assert_int_equal(server_start(&s, "--max-model-len 512"), 0);
    char *p600 = repeat_body("{\"prompt\":\"", 'b', 600, "\",\"max_tokens\":1}");
    j = post(s.port, p600, 400);
    expect_error(j, "prompt", "600", "512");
    json_decref(j);
    free(p600);
    char *p500 = repeat_body("{\"prompt\":\"", 'c', 500, "\",\"max_tokens\":13}");
    j = post(s.port, p500, 400); /* 500 + 13 > 512 */
    expect_error(j, "prompt", "513", "512");
    json_decref(j);
    free(p500);
    p500 = repeat_body("{\"prompt\":\"", 'c', 500, "\",\"max_tokens\":12}");
    j = post(s.port, p500, 200); /* exactly the limit */
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 12);
    json_decref(j);
    free(p500);
    /* no max_tokens: the default cap is lowered to the room left */
    char *p510 = repeat_body("{\"prompt\":\"", 'd', 510, "\"}");
    j = post(s.port, p510, 200);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "usage"), "completion_tokens")), 2);
    json_decref(j);
    free(p510);
    /* chat: the formatted prompt counts */
    char *chat = repeat_body("{\"messages\":[{\"role\":\"user\",\"content\":\"", 'e', 520, "\"}]}");
    char *out;
    assert_int_equal(request(s.port, "POST", "/v1/chat/completions", NULL, chat, &out), 400);
    assert_non_null(strstr(out, "\"param\":\"prompt\""));
    assert_non_null(strstr(out, "512"));
    free(out);
    free(chat);
    assert_int_equal(request(s.port, "GET", "/v1/models", NULL, NULL, &out), 200);
    assert_non_null(strstr(out, "\"max_model_len\":512"));
    free(out);
    assert_int_equal(server_stop(&s), 0);

    /* above the model's own limit: refused at start, naming the key */
    assert_int_equal(tu_run("build/k25 serve --model tiny --port 0 --max-model-len 200000 2>&1", &out), 2);
    assert_non_null(strstr(out, "max_model_len"));
    assert_non_null(strstr(out, "131072"));
    free(out);
}

/* Defect 1b: a non-streamed request whose client hangs up is cancelled, not run to its end. */
static void test_nonstream_disconnect_cancels(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, ""), 0);
    const char *body = "{\"prompt\":\"Tell me everything.\",\"max_tokens\":1000}";
    int fd = tcp_connect(s.port, NULL);
    char hdr[256];
    int hl = snprintf(hdr, sizeof(hdr), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                      strlen(body));
    send_all(fd, hdr, (size_t)hl);
    send_all(fd, body, strlen(body));
    double running = 0, gen = 0;
    for (int i = 0; i < 600 && (running < 1 || gen < 1); i++) { /* it runs: tokens come */
        usleep(20000);
        running = metric(s.port, "k25_requests_running");
        gen = metric(s.port, "k25_generation_tokens_total");
    }
    assert_true(running == 1);
    close(fd); /* the client leaves */
    double c = 0;
    for (int i = 0; i < 600 && (c < 1 || running > 0); i++) {
        usleep(20000);
        c = metric(s.port, "k25_requests_finished_total{finish_reason=\"cancelled\"}");
        running = metric(s.port, "k25_requests_running");
    }
    assert_true(c == 1);
    assert_true(running == 0);
    assert_true(metric(s.port, "k25_requests_finished_total{finish_reason=\"length\"}") == 0);
    assert_true(metric(s.port, "k25_generation_tokens_total") < 1000);
    assert_true(metric(s.port, "k25_http_disconnect_cancels_total") == 1);
    assert_true(metric(s.port, "k25_kv_blocks_used") == 0);
    assert_int_equal(server_stop(&s), 0);
}

/* Defect 1c: a short request behind a long prefill that fills the step budget is answered first. */
static void test_long_prefill_no_starvation(void **state)
{
    (void)state;
    struct server s;
    /* 8192-token prompt in 16 chunks of 512, each filling the 512-token step budget */
    assert_int_equal(server_start(&s, "--prefill-chunk-size 512 --max-num-batched-tokens 512"), 0);
    char *lb = repeat_body("{\"prompt\":\"", 'L', 8192, "\",\"max_tokens\":1,\"stream\":true}");
    int fd = tcp_connect(s.port, NULL);
    char hdr[256];
    int hl = snprintf(hdr, sizeof(hdr), "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n",
                      strlen(lb));
    send_all(fd, hdr, (size_t)hl);
    send_all(fd, lb, strlen(lb));
    free(lb);
    /* the stream's status line: the engine accepted it */
    char got[8192];
    size_t n = 0;
    for (int i = 0; i < 300 && !strstr(got, "\r\n\r\n"); i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) == 1) {
            ssize_t r = recv(fd, got + n, sizeof(got) - 1 - n, 0);
            assert_true(r > 0);
            n += (size_t)r;
        }
        got[n] = '\0';
    }
    assert_non_null(strstr(got, "200 OK"));
    json_t *j = post(s.port, "{\"prompt\":\"hi\",\"max_tokens\":1}", 200);
    json_decref(j);
    /* the short one is answered while the long prefill still runs: no token of the long one yet */
    ssize_t r = recv(fd, got + n, sizeof(got) - 1 - n, MSG_DONTWAIT);
    if (r > 0)
        n += (size_t)r;
    got[n] = '\0';
    if (strstr(got, "token_ids\":["))
        fail_msg("the long prompt's first token came before the short request's answer");
    /* and the long one completes */
    char *rest = recv_all(fd, 120000);
    assert_non_null(strstr(rest, "[DONE]"));
    free(rest);
    close(fd);
    assert_int_equal(server_stop(&s), 0);
}

/* Defect 2: slowloris. */
static void test_slowloris(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, "--max-connections 20 --max-connections-per-ip 8 --header-timeout 2 "
                                      "--http-threads 2"),
                     0);
    enum { N = 20 };
    int fds[N], open_n = 0;
    for (int i = 0; i < N; i++) {
        fds[i] = tcp_connect(s.port, "127.0.0.2");
        if (fds[i] >= 0)
            send_all(fds[i], "G", 1);
    }
    /* /health from another address answers while they trickle (only 8 can be held) */
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < N; i++)
            if (fds[i] >= 0)
                send_all(fds[i], "E", 1);
        health_ok(s.port);
        usleep(200000);
    }
    /* the header deadline: they are closed although they keep sending (bounded: 60 x 0.5 s) */
    for (int round = 0; round < 60; round++) {
        open_n = 0;
        for (int i = 0; i < N; i++) {
            if (fds[i] < 0)
                continue;
            char c;
            ssize_t r = recv(fds[i], &c, 1, MSG_DONTWAIT);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                close(fds[i]);
                fds[i] = -1;
                continue;
            }
            send_all(fds[i], "T", 1);
            open_n++;
        }
        if (open_n == 0)
            break;
        usleep(500000);
    }
    assert_int_equal(open_n, 0);
    double closes = metric(s.port, "k25_http_deadline_closes_total");
    assert_true(closes >= 1 && closes <= 8); /* at most the per-IP limit was ever accepted */
    health_ok(s.port);
    assert_int_equal(server_stop(&s), 0);
}

/* Defect 8: refusals of the HTTP layer are counted; the server stays up. */
static void test_http_layer(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, ""), 0);
    static const char *const bad[] = {
        "GET /health HTTP/9.9\r\nHost: x\r\n\r\n",                                         /* 505 */
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", /* 400 */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int fd = tcp_connect(s.port, NULL);
        send_all(fd, bad[i], strlen(bad[i]));
        char *r = recv_all(fd, 10000);
        assert_non_null(strstr(r, "HTTP/1.1 "));
        free(r);
        close(fd);
    }
    /* a path that is not ASCII reaches k25: its JSON 404 */
    char *out;
    assert_int_equal(request(s.port, "GET", "/h\xc3\xa9", NULL, NULL, &out), 404);
    assert_non_null(strstr(out, "\"error\""));
    free(out);
    /* what libmicrohttpd drops before any callback (docs/serve.md): the server stays up */
    static const char *const dropped[] = {"GET\r\n\r\n", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"};
    for (size_t i = 0; i < sizeof(dropped) / sizeof(dropped[0]); i++) {
        int fd = tcp_connect(s.port, NULL);
        send_all(fd, dropped[i], strlen(dropped[i]));
        free(recv_all(fd, 5000));
        close(fd);
    }
    double v = 0;
    for (int i = 0; i < 100 && v < 1; i++) { /* counted when MHD ends the request */
        v = metric(s.port, "k25_http_layer_errors_total");
        if (v < 1)
            usleep(20000);
    }
    assert_true(v >= 1); /* the chunked one: its request line was read (505 is refused before that) */
    /* too large for libmicrohttpd's connection memory: 414 (URI), 431 (a header), 413 (a chunk size) */
    char *big = malloc(80000);
    assert_non_null(big);
    int bl = sprintf(big, "GET /");
    memset(big + bl, 'a', 70000);
    sprintf(big + bl + 70000, " HTTP/1.1\r\nHost: x\r\n\r\n");
    static const char *const codes[] = {"414", "431", "413"};
    for (int k = 0; k < 3; k++) {
        if (k == 1) {
            bl = sprintf(big, "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ");
            memset(big + bl, 'b', 40000);
            sprintf(big + bl + 40000, "\r\n\r\n");
        } else if (k == 2) {
            sprintf(big, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                         "FFFFFFFFFFFFFFFFFFFF\r\n");
        }
        int fd = tcp_connect(s.port, NULL);
        send_all(fd, big, strlen(big));
        char *r = recv_all(fd, 10000);
        char want[32];
        snprintf(want, sizeof(want), "HTTP/1.1 %s", codes[k]);
        if (!strstr(r, want))
            fail_msg("want %s, got %.80s", want, r);
        free(r);
        close(fd);
        char name[64];
        snprintf(name, sizeof(name), "k25_http_responses_total{code=\"%s\"}", codes[k]);
        assert_true(metric(s.port, name) == 1);
    }
    free(big);
    assert_true(metric(s.port, "k25_http_responses_total{code=\"505\"}") == 1);
    assert_true(metric(s.port, "k25_http_responses_total{code=\"400\"}") >= 1);
    health_ok(s.port);
    assert_int_equal(server_stop(&s), 0);
}

/* Defect 4: the whole key, however long; an absurd length refused at start. */
static void test_long_api_key(void **state)
{
    (void)state;
    char key[601];
    for (int i = 0; i < 600; i++)
        key[i] = (char)('a' + i % 26);
    key[600] = '\0';
    char args[1024], auth[1024], *out;
    snprintf(args, sizeof(args), "--api-key %s", key);
    struct server s;
    assert_int_equal(server_start(&s, args), 0);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %.511s\r\n", key);
    assert_int_equal(request(s.port, "GET", "/v1/models", auth, NULL, &out), 401);
    free(out);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %sX\r\n", key);
    assert_int_equal(request(s.port, "GET", "/v1/models", auth, NULL, &out), 401);
    free(out);
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", key);
    assert_int_equal(request(s.port, "GET", "/v1/models", auth, NULL, &out), 200);
    free(out);
    assert_int_equal(server_stop(&s), 0);

    char *huge = malloc(5001 + 200);
    assert_non_null(huge);
    int hl = sprintf(huge, "K25_API_KEY=");
    memset(huge + hl, 'k', 5000);
    sprintf(huge + hl + 5000, " %s serve --model tiny --port 0 2>&1", tu_k25());
    assert_int_equal(tu_run(huge, &out), 2);
    assert_non_null(strstr(out, "--api-key"));
    assert_non_null(strstr(out, "5000 bytes"));
    free(out);
    free(huge);
}

/* The token ids of a non-streamed answer. */
static int answer_ids(json_t *j, int32_t *ids, int cap)
{
    json_t *a = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "token_ids");
    int n = (int)json_array_size(a);
    assert_true(n <= cap);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return n;
}

/* Defect 5: every float field with denormal, tiny, huge and non-finite values. */
static void test_float_fields(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, ""), 0);
    int32_t greedy[8], ids[8];
    json_t *j = post(s.port, "{\"prompt\":\"The contract\",\"max_tokens\":8}", 200);
    int ng = answer_ids(j, greedy, 8);
    json_decref(j);
    assert_int_equal(ng, 8);
    /* sampled greedily: below K25_SAMPLE_GREEDY_BELOW, denormals included */
    static const char *const greedy_t[] = {"5e-324", "4.9406564584124654e-324", "1e-310", "2.2250738585072014e-308",
                                           "1e-300", "9e-6", "-0.0", "0"};
    char body[512];
    for (size_t i = 0; i < sizeof(greedy_t) / sizeof(greedy_t[0]); i++) {
        snprintf(body, sizeof(body), "{\"prompt\":\"The contract\",\"max_tokens\":8,\"temperature\":%s,\"seed\":7}",
                 greedy_t[i]);
        j = post(s.port, body, 200);
        assert_int_equal(answer_ids(j, ids, 8), 8);
        if (memcmp(ids, greedy, sizeof(ids)))
            fail_msg("temperature %s: not the greedy tokens", greedy_t[i]);
        json_decref(j);
    }
    /* top_p: a denormal mass keeps one token (the most likely): greedy as well */
    static const char *const tiny_p[] = {"5e-324", "1e-310", "1e-300"};
    for (size_t i = 0; i < sizeof(tiny_p) / sizeof(tiny_p[0]); i++) {
        snprintf(body, sizeof(body),
                 "{\"prompt\":\"The contract\",\"max_tokens\":8,\"temperature\":1,\"top_p\":%s,\"seed\":7}", tiny_p[i]);
        j = post(s.port, body, 200);
        assert_int_equal(answer_ids(j, ids, 8), 8);
        if (memcmp(ids, greedy, sizeof(ids)))
            fail_msg("top_p %s: not the greedy tokens", tiny_p[i]);
        json_decref(j);
    }
    /* refused, naming the field: out of range, huge, not a number, not finite */
    static const struct { const char *field, *value, *param; } badv[] = {
        {"temperature", "1e308", "temperature"}, {"temperature", "-5e-324", "temperature"},
        {"temperature", "100.00000000000001", "temperature"}, {"temperature", "\"0.5\"", "temperature"},
        {"temperature", "1e999", NULL}, {"temperature", "NaN", NULL}, {"temperature", "Infinity", NULL},
        {"temperature", "-Infinity", NULL},
        {"top_p", "0", "top_p"}, {"top_p", "-0.0", "top_p"}, {"top_p", "1.0000000000000002", "top_p"},
        {"top_p", "1e308", "top_p"}, {"top_p", "-5e-324", "top_p"}, {"top_p", "true", "top_p"},
        {"top_p", "1e999", NULL}, {"top_p", "NaN", NULL}, {"top_p", "Infinity", NULL},
    };
    for (size_t i = 0; i < sizeof(badv) / sizeof(badv[0]); i++) {
        snprintf(body, sizeof(body), "{\"prompt\":\"x\",\"max_tokens\":2,\"%s\":%s}", badv[i].field, badv[i].value);
        j = post(s.port, body, 400);
        expect_error(j, badv[i].param, badv[i].param ? badv[i].param : "JSON", NULL);
        json_decref(j);
    }
    health_ok(s.port);
    assert_int_equal(server_stop(&s), 0);
}

/* Defect 6: ids differ across restarts. */
static void test_ids_across_restarts(void **state)
{
    (void)state;
    char ids[2][128];
    for (int k = 0; k < 2; k++) {
        struct server s;
        assert_int_equal(server_start(&s, ""), 0);
        json_t *j = post(s.port, "{\"prompt\":\"hi\",\"max_tokens\":1}", 200);
        snprintf(ids[k], sizeof(ids[k]), "%s", json_string_value(json_object_get(j, "id")));
        json_decref(j);
        assert_int_equal(server_stop(&s), 0);
    }
    assert_true(!strncmp(ids[0], "cmpl-", 5) && !strncmp(ids[1], "cmpl-", 5));
    if (!strcmp(ids[0], ids[1]))
        fail_msg("the same id after a restart: %s", ids[0]);
}

/* The campaign's body mutation fuzzer, bounded: 4xx JSON or 200, never 5xx, never a dead server. */
static void test_mutated_bodies(void **state)
{
    (void)state;
    struct server s;
    assert_int_equal(server_start(&s, "--decode-max-tokens 4"), 0);
    static const char *const seeds[] = {
        "{\"prompt\":\"hello\",\"max_tokens\":2,\"temperature\":0.5,\"top_p\":0.9,\"seed\":3,\"stop\":[\"a\"]}",
        "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":false}",
        "{\"prompt\":\"x\",\"max_tokens\":1,\"stream_options\":{\"include_usage\":true},\"priority\":\"low\"}",
    };
    static const char *const inserts[] = {"\xff", "\xc3", "\"", "{", "[", "]", "}", ",", ":", "null", "-1",
                                          "1e999", "5e-324", "\\u0000", "\\ud800", "9999999999999999999", "true"};
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    const int rounds = tu_quick() ? 60 : 300;
    for (int i = 0; i < rounds; i++) {
        const char *seed = seeds[i % 3];
        char body[1024];
        size_t n = strlen(seed);
        memcpy(body, seed, n + 1);
        for (int m = 0; m < 1 + i % 4; m++) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            size_t at = (size_t)(rng % (n + 1));
            int op = (int)((rng >> 20) % 3);
            if (op == 0 && n > 0) { /* delete a byte */
                memmove(body + at, body + at + 1, n - at);
                n--;
            } else if (op == 1 && n > 0 && at < n) { /* flip a byte */
                body[at] = (char)(body[at] ^ (1 << ((rng >> 30) % 8)));
            } else { /* insert a token */
                const char *ins = inserts[(rng >> 40) % (sizeof(inserts) / sizeof(inserts[0]))];
                size_t il = strlen(ins);
                if (n + il >= sizeof(body) || at > n)
                    continue;
                memmove(body + at + il, body + at, n - at + 1);
                memcpy(body + at, ins, il);
                n += il;
            }
            body[n] = '\0';
        }
        char *out;
        int st = request(s.port, "POST", "/v1/completions", NULL, body, &out);
        if (st != 200 && (st < 400 || st > 499))
            fail_msg("mutated body %d got %d: %.200s -> %.300s", i, st, body, out);
        if (st != 200 && !strstr(out, "\"error\""))
            fail_msg("mutated body %d: %d without an OpenAI error: %.300s", i, st, out);
        free(out);
    }
    health_ok(s.port);
    assert_int_equal(server_stop(&s), 0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompt_over_limit),     cmocka_unit_test(test_nonstream_disconnect_cancels),
        cmocka_unit_test(test_long_prefill_no_starvation), cmocka_unit_test(test_slowloris),
        cmocka_unit_test(test_http_layer),            cmocka_unit_test(test_long_api_key),
        cmocka_unit_test(test_float_fields),          cmocka_unit_test(test_ids_across_restarts),
        cmocka_unit_test(test_mutated_bodies),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
