/*
 * endpoint.c - `k25 bench --endpoint URL`: gold-set load against an
 * OpenAI-compatible server through one libcurl multi handle (endpoint.h).
 *
 * Per request: a streaming POST ("stream": true, "stream_options":
 * {"include_usage": true}) whose body was built once up front, so the
 * loop only adds handles.  The write callback stamps each buffer of bytes
 * with k25_now_ns() and feeds the strict SSE reader (sse.c); every event
 * that carries content (text / delta.content, or "token_ids") is a token
 * arrival: one token per chunk, or one per id when the server sends
 * "token_ids" (k25 serve does).  Output tokens come from the final
 * `usage` when the server sends one, else from the counted chunks (the
 * request is then flagged); when the two differ, the counted arrivals are
 * spread over the usage count in order (docs/serve.md).
 *
 * A request fails - recorded as `rejected` with a reason, the run goes
 * on - on an HTTP status other than 200 ("HTTP 429: <the server's
 * message>"), an "error" event, a line that is not SSE, an event that is
 * not JSON, a stream that ends before `data: [DONE]`, no byte for
 * --stall-timeout seconds, or the --request-timeout.
 */
#include "endpoint.h"
#include "k25_tok.h"
#include "sse.h"

#include <curl/curl.h>
#include <pthread.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct k25_endpoint {
    char url[2100];         /* the completions URL */
    char models_url[2100];
    char metrics_url[2100]; /* the server's own /metrics (--server-metrics without a URL) */
    char model[512];
    bool chat;
    json_t *models;         /* GET /v1/models answer (or null) */
    json_t *resp_headers;   /* headers of the first streamed answer */
    json_t *resp_models;    /* {model name: answers} of the measured answers' "model" field */
    const struct k25_bench_input *in; /* [n_in] borrowed: must outlive the endpoint */
    char **bodies;          /* [n_in] request bodies */
    size_t *body_len;
    size_t n_in;
    struct curl_slist *hdrs;
    CURLM *multi;
    k25_tokenizer_t *tok;   /* --tokenizer, owned; NULL: prompts not counted client-side */
    enum k25_chat_template chat_tpl;
    int32_t *client_n;      /* [n_in] prompt tokens counted client-side (0: not counted) */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc; /* curl_global_init's result (it is not thread-safe: called once) */
static void curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ------------------------------------------------------------ setup */

/* GET url into a malloc'd body; *status the HTTP status (0: no answer). */
static int http_get(const char *url, const struct curl_slist *hdrs, char **body, long *status, json_t *headers,
                    char *errbuf);

struct membuf {
    char *p;
    size_t n, cap, limit;
};

static size_t membuf_write(char *p, size_t sz, size_t nm, void *u)
{
    struct membuf *m = u;
    size_t n = sz * nm, keep = m->n + n > m->limit ? m->limit - m->n : n;
    if (m->n + keep + 1 > m->cap) {
        size_t nc = m->cap ? m->cap : 4096;
        while (nc < m->n + keep + 1)
            nc *= 2;
        char *np = realloc(m->p, nc);
        if (!np)
            return 0;
        m->p = np;
        m->cap = nc;
    }
    memcpy(m->p + m->n, p, keep);
    m->n += keep;
    m->p[m->n] = '\0';
    return n;
}

/* Response header lines into a JSON object (lower-case names; repeated ones joined by ", "). */
static size_t header_line(char *p, size_t sz, size_t nm, void *u)
{
    json_t *h = u;
    size_t n = sz * nm;
    const char *colon = memchr(p, ':', n);
    if (!h || !colon || colon == p)
        return n;
    char name[128], val[1024];
    size_t nl = (size_t)(colon - p) < sizeof(name) - 1 ? (size_t)(colon - p) : sizeof(name) - 1;
    for (size_t i = 0; i < nl; i++)
        name[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
    name[nl] = '\0';
    const char *v = colon + 1, *e = p + n;
    while (v < e && (*v == ' ' || *v == '\t'))
        v++;
    while (e > v && (e[-1] == '\r' || e[-1] == '\n' || e[-1] == ' '))
        e--;
    size_t vl = (size_t)(e - v) < sizeof(val) - 1 ? (size_t)(e - v) : sizeof(val) - 1;
    memcpy(val, v, vl);
    val[vl] = '\0';
    if (!k25_utf8_valid(val, vl))
        return n;
    const char *old = json_string_value(json_object_get(h, name));
    if (old) {
        char *joined = NULL;
        if (asprintf(&joined, "%s, %s", old, val) >= 0) {
            json_object_set_new(h, name, json_string(joined));
            free(joined);
        }
    } else {
        json_object_set_new(h, name, json_string(val));
    }
    return n;
}

static int http_get(const char *url, const struct curl_slist *hdrs, char **body, long *status, json_t *headers,
                    char *errbuf)
{
    struct membuf m = {.limit = 16u << 20};
    CURL *h = curl_easy_init();
    *body = NULL;
    *status = 0;
    if (!h)
        return -1;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &m);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_line);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, headers);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    errbuf[0] = '\0';
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (rc != CURLE_OK && !errbuf[0])
        snprintf(errbuf, CURL_ERROR_SIZE, "%s", curl_easy_strerror(rc));
    curl_easy_cleanup(h);
    *body = m.p;
    return rc == CURLE_OK ? 0 : -1;
}

/* Completions URL and models URL from what the user gave. */
static int resolve_urls(struct k25_endpoint *ep, const char *base, struct k25_error *err)
{
    char b[2048];
    if (strlen(base) >= sizeof(b) - 32)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--endpoint", "the URL is too long");
    snprintf(b, sizeof(b), "%s", base);
    if (strncmp(b, "http://", 7) && strncmp(b, "https://", 8))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--endpoint",
                             "expected an http:// or https:// URL, got \"%s\"", base);
    size_t n = strlen(b);
    while (n > 0 && b[n - 1] == '/')
        b[--n] = '\0';
    /* a full completions URL: use it, and derive the base */
    const char *tails[] = {"/v1/chat/completions", "/v1/completions"};
    for (int i = 0; i < 2; i++) {
        size_t tl = strlen(tails[i]);
        if (n > tl && !strcmp(b + n - tl, tails[i])) {
            if (ep->chat != (i == 0))
                return k25_error_set(err, K25_EINVAL, "command line", 0, "--endpoint-type",
                                     "the URL ends in %s but --endpoint-type is %s", tails[i],
                                     ep->chat ? "chat" : "completions");
            b[n - tl] = '\0';
            n -= tl;
        }
    }
    if (n > 3 && !strcmp(b + n - 3, "/v1"))
        b[n -= 3] = '\0';
    snprintf(ep->url, sizeof(ep->url), "%s%s", b, ep->chat ? "/v1/chat/completions" : "/v1/completions");
    snprintf(ep->models_url, sizeof(ep->models_url), "%s/v1/models", b);
    snprintf(ep->metrics_url, sizeof(ep->metrics_url), "%s/metrics", b);
    return K25_OK;
}

/* The body of one request (new string), or NULL with err filled. */
static char *make_body(const struct k25_endpoint *ep, const struct k25_bench_opts *o, const struct k25_bench_input *bi,
                       int32_t *client_n, struct k25_error *err)
{
    json_t *prompt = NULL;
    bool bytes = true;
    for (int t = 0; t < bi->n_ids; t++)
        bytes &= bi->ids[t] >= 0 && bi->ids[t] < 256;
    char *text = bytes ? malloc((size_t)bi->n_ids + 1) : NULL;
    if (bytes && text) {
        for (int t = 0; t < bi->n_ids; t++)
            text[t] = (char)bi->ids[t];
        text[bi->n_ids] = '\0';
    }
    if (text && !bi->pretokenized && k25_utf8_valid(text, (size_t)bi->n_ids)) {
        prompt = json_stringn(text, (size_t)bi->n_ids);
    } else if (bi->pretokenized && !ep->chat) {
        prompt = json_array();
        for (int t = 0; t < bi->n_ids; t++)
            json_array_append_new(prompt, json_integer(bi->ids[t]));
    } else {
        free(text);
        k25_error_set(err, K25_EINVAL, o->dataset, (int)bi->line, bi->pretokenized ? "input_ids" : "text",
                      bi->pretokenized ? "request '%s' has input_ids: a chat endpoint needs text (use "
                                         "--endpoint-type completions, which sends the ids)"
                                       : "request '%s': the prompt is not valid UTF-8 and cannot be sent as text",
                      bi->id);
        return NULL;
    }
    if (ep->tok && bi->pretokenized) {
        *client_n = bi->n_ids; /* the ids go as they are */
    } else if (ep->tok) {
        /* what the server should count: the text with the BOS template, or the chat as rendered */
        struct k25_error e;
        int32_t *ids = NULL;
        int n = 0, trc;
        if (ep->chat) {
            struct k25_chat_msg m = {.role = "user", .content = text};
            trc = k25_chat_encode(ep->tok, ep->chat_tpl, &m, 1, true, &ids, &n, &e);
        } else {
            trc = k25_tokenizer_encode(ep->tok, text, (size_t)bi->n_ids, K25_TOK_ADD_SPECIAL, &ids, &n, &e);
        }
        free(ids);
        if (trc != K25_OK) {
            free(text);
            json_decref(prompt);
            k25_error_set(err, trc, o->dataset, (int)bi->line, "text", "request '%s': --tokenizer %s: %s", bi->id,
                          o->tokenizer, e.msg);
            return NULL;
        }
        *client_n = n;
    }
    free(text);
    json_t *j = json_pack("{s:s, s:i, s:f, s:b, s:{s:b}}", "model", ep->model, "max_tokens", bi->max_new,
                          "temperature", 0.0, "stream", 1, "stream_options", "include_usage", 1);
    if (!j || !prompt) {
        json_decref(j);
        json_decref(prompt);
        k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        return NULL;
    }
    if (ep->chat)
        json_object_set_new(j, "messages", json_pack("[{s:s, s:o}]", "role", "user", "content", prompt));
    else
        json_object_set_new(j, "prompt", prompt);
    if (o->ignore_eos)
        json_object_set_new(j, "ignore_eos", json_true());
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    return s;
}

int k25_endpoint_open(const struct k25_bench_opts *o, const struct k25_bench_input *in, size_t n_in,
                      k25_endpoint_t **out, struct k25_error *err)
{
    int rc = K25_OK;
    char errbuf[CURL_ERROR_SIZE], *body = NULL;
    long status = 0;
    pthread_once(&curl_once, curl_init_once); /* once per process; libcurl's global state is never torn down */
    if (curl_init_rc != 0)
        return k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "libcurl initialization failed");
    struct k25_endpoint *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    ep->chat = o->endpoint_chat;
    ep->resp_headers = json_null();
    ep->models = json_null();
    ep->resp_models = json_object();
    if ((rc = resolve_urls(ep, o->endpoint, err)) != K25_OK)
        goto out_fail;
    char auth[600];
    ep->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
    ep->hdrs = curl_slist_append(ep->hdrs, "Accept: text/event-stream");
    if (o->api_key) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o->api_key);
        ep->hdrs = curl_slist_append(ep->hdrs, auth);
    }
    if (!ep->hdrs || !(ep->multi = curl_multi_init())) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_fail;
    }

    /* the server's model list: provenance, and the model when none was given */
    if (http_get(ep->models_url, ep->hdrs, &body, &status, NULL, errbuf) != 0) {
        rc = k25_error_set(err, K25_EIO, "command line", 0, "--endpoint", "cannot reach %s: %s", ep->models_url,
                           errbuf);
        goto out_fail;
    }
    json_t *models = status == 200 && body ? json_loads(body, 0, NULL) : NULL;
    const char *first = json_string_value(json_object_get(json_array_get(json_object_get(models, "data"), 0), "id"));
    if (models) {
        json_decref(ep->models);
        ep->models = models;
    }
    if (status == 401 || status == 403) {
        rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--api-key", "%s answered HTTP %ld: %s",
                           ep->models_url, status, o->api_key ? "the API key was refused" : "it needs --api-key");
        goto out_fail;
    }
    if (o->endpoint_model)
        snprintf(ep->model, sizeof(ep->model), "%s", o->endpoint_model);
    else if (first)
        snprintf(ep->model, sizeof(ep->model), "%s", first);
    else {
        rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--model",
                           "%s answered HTTP %ld without a model list: name the model with --model", ep->models_url,
                           status);
        goto out_fail;
    }

    if (o->tokenizer) { /* the prompts counted client-side (docs/serve.md "Prompt counts") */
        if ((rc = k25_tokenizer_load(o->tokenizer, &ep->tok, err)) != K25_OK)
            goto out_fail;
        if (ep->chat && (rc = o->chat_template ? k25_chat_template_parse(o->chat_template, &ep->chat_tpl, err)
                                               : k25_tokenizer_chat_template(ep->tok, &ep->chat_tpl, err)) != K25_OK)
            goto out_fail;
    } else if (o->chat_template) {
        rc = k25_error_set(err, K25_EINVAL, "command line", 0, "--chat-template", "needs --tokenizer DIR");
        goto out_fail;
    }
    if (!(ep->bodies = calloc(n_in, sizeof(char *))) || !(ep->body_len = calloc(n_in, sizeof(size_t))) ||
        !(ep->client_n = calloc(n_in, sizeof(int32_t)))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_fail;
    }
    ep->n_in = n_in;
    ep->in = in;
    for (size_t i = 0; i < n_in; i++) {
        if (!(ep->bodies[i] = make_body(ep, o, &in[i], &ep->client_n[i], err))) {
            rc = err->code;
            goto out_fail;
        }
        ep->body_len[i] = strlen(ep->bodies[i]);
    }
    free(body);
    *out = ep;
    return K25_OK;

out_fail:
    free(body);
    k25_endpoint_close(ep);
    return rc;
}

void k25_endpoint_close(k25_endpoint_t *ep)
{
    if (!ep)
        return;
    for (size_t i = 0; ep->bodies && i < ep->n_in; i++)
        free(ep->bodies[i]);
    free(ep->bodies);
    free(ep->body_len);
    free(ep->client_n);
    k25_tokenizer_destroy(ep->tok);
    curl_slist_free_all(ep->hdrs);
    if (ep->multi)
        curl_multi_cleanup(ep->multi);
    json_decref(ep->models);
    json_decref(ep->resp_headers);
    json_decref(ep->resp_models);
    free(ep);
}

json_t *k25_endpoint_provenance(const k25_endpoint_t *ep)
{
    /* the server's own name for what it served: the answers' "model" (the most frequent), else the
     * model list's first entry */
    const char *served = NULL, *k;
    json_int_t best = 0;
    json_t *v;
    json_object_foreach(ep->resp_models, k, v)
        if (json_integer_value(v) > best) {
            best = json_integer_value(v);
            served = k;
        }
    if (!served)
        served = json_string_value(
            json_object_get(json_array_get(json_object_get(ep->models, "data"), 0), "id"));
    return json_pack("{s:s, s:s, s:s, s:o, s:O, s:O, s:O}", "url", ep->url, "endpoint_type",
                     ep->chat ? "chat" : "completions", "model", ep->model, "served_model",
                     served ? json_string(served) : json_null(), "models", ep->models, "response_models",
                     ep->resp_models, "response_headers", ep->resp_headers);
}

const char *k25_endpoint_metrics_url(const k25_endpoint_t *ep)
{
    return ep->metrics_url;
}

json_t *k25_endpoint_sent_config(const k25_endpoint_t *ep, const struct k25_bench_opts *o)
{
    return json_pack("{s:s, s:f, s:b, s:{s:b}, s:s, s:b}", "model", ep->model, "temperature", 0.0, "stream", 1,
                     "stream_options", "include_usage", 1, "max_tokens", "each request's expected_output_length",
                     "ignore_eos", o->ignore_eos);
}

/* ------------------------------------------------------------ transfers */

/* One request in flight. */
struct xfer {
    CURL *h;
    long rec;                /* index into run->reqs, -1 when not recorded */
    int user;
    int32_t n_input;
    int64_t *tns;            /* [n_tok] absolute arrival times of content */
    int32_t *tids;           /* [n_tok] ids (-1: the server sent none) */
    int n_tok, cap_tok;
    bool ids_missing, got_done, have_usage, failed;
    bool stalled;            /* no byte for --stall-timeout: ended by the loop */
    bool degraded;           /* the answer's "k25": {"degraded": true} (k25 serve's elastic queue) */
    char model[256];         /* the answer's "model" ("" when it named none) */
    int usage_out, usage_in;
    int32_t client_in;       /* the prompt counted client-side (0: not counted) */
    uint64_t now;            /* arrival time of the bytes being parsed */
    struct k25_sse sse;
    struct membuf errbody;   /* the body of a non-200 answer (first 4 KiB) */
    long status;
    json_t *headers;         /* capture the response headers (first recorded request), else NULL */
    char reason[K25_REQ_REASON_MAX];
    char curl_err[CURL_ERROR_SIZE];
    bool chat;
};

static void xfail(struct xfer *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void xfail(struct xfer *x, const char *fmt, ...)
{
    if (x->failed)
        return; /* the first reason is the one that matters */
    x->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->reason, sizeof(x->reason), fmt, ap);
    va_end(ap);
}

static int push_tok(struct xfer *x, int32_t id)
{
    if (x->n_tok == x->cap_tok) {
        int nc = x->cap_tok ? 2 * x->cap_tok : 64;
        int64_t *nt = realloc(x->tns, sizeof(int64_t) * (size_t)nc);
        if (nt)
            x->tns = nt;
        int32_t *ni = realloc(x->tids, sizeof(int32_t) * (size_t)nc);
        if (ni)
            x->tids = ni;
        if (!nt || !ni)
            return -1;
        x->cap_tok = nc;
    }
    x->tns[x->n_tok] = (int64_t)x->now;
    x->tids[x->n_tok++] = id;
    return 0;
}

/* One SSE event's data: [DONE], an error, or a chunk. */
static int on_event(const char *data, size_t n, void *user)
{
    struct xfer *x = user;
    if (x->got_done) {
        xfail(x, "data after data: [DONE]");
        return -1;
    }
    if (n == 6 && !memcmp(data, "[DONE]", 6)) {
        x->got_done = true;
        return 0;
    }
    json_error_t je;
    json_t *j = json_loadb(data, n, JSON_ALLOW_NUL, &je);
    if (!j || !json_is_object(j)) {
        xfail(x, "malformed JSON in an SSE event: %s (column %d)", j ? "not an object" : je.text, j ? 0 : je.column);
        json_decref(j);
        return -1;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        const char *m = json_string_value(json_object_get(e, "message"));
        xfail(x, "error event in the stream: %s", m ? m : json_string_value(e) ? json_string_value(e) : "(no message)");
        json_decref(j);
        return -1;
    }
    const char *model = json_string_value(json_object_get(j, "model"));
    if (model && !x->model[0])
        snprintf(x->model, sizeof(x->model), "%s", model);
    /* served on a degraded model: k25 serve's "k25" object (final chunk) */
    if (json_is_true(json_object_get(json_object_get(j, "k25"), "degraded")))
        x->degraded = true;
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u) && json_is_integer(json_object_get(u, "completion_tokens"))) {
        x->have_usage = true;
        x->usage_out = (int)json_integer_value(json_object_get(u, "completion_tokens"));
        x->usage_in = (int)json_integer_value(json_object_get(u, "prompt_tokens"));
    }
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    json_t *text = x->chat ? json_object_get(json_object_get(c0, "delta"), "content") : json_object_get(c0, "text");
    json_t *ids = json_object_get(c0, "token_ids");
    int rc = 0;
    if (json_is_array(ids) && json_array_size(ids) > 0) {
        for (size_t i = 0; i < json_array_size(ids) && rc == 0; i++)
            rc = push_tok(x, json_is_integer(json_array_get(ids, i)) ? (int32_t)json_integer_value(json_array_get(ids, i))
                                                                      : -1);
    } else if (json_is_string(text) && json_string_length(text) > 0) {
        x->ids_missing = true;
        rc = push_tok(x, -1);
    }
    json_decref(j);
    if (rc != 0)
        xfail(x, "out of memory");
    return rc;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *u)
{
    struct xfer *x = u;
    size_t n = sz * nm;
    x->now = k25_now_ns(); /* this buffer's arrival */
    if (x->status == 0)
        curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status != 200) {
        membuf_write(p, 1, n, &x->errbody);
        return n;
    }
    if (k25_sse_feed(&x->sse, p, n, on_event, x) != 0) {
        xfail(x, "%s", x->sse.error[0] ? x->sse.error : "malformed stream");
        return 0; /* abort the transfer: the server can stop generating */
    }
    return n;
}

static void xfer_free(struct xfer *x)
{
    if (!x)
        return;
    free(x->tns);
    free(x->tids);
    free(x->errbody.p);
    k25_sse_free(&x->sse);
    free(x);
}

/* Why a finished transfer failed ("" when it did not). */
static void diagnose(struct xfer *x, CURLcode res, double stall_s)
{
    curl_easy_getinfo(x->h, CURLINFO_RESPONSE_CODE, &x->status);
    if (x->status != 0 && x->status != 200) {
        json_t *j = x->errbody.p ? json_loads(x->errbody.p, 0, NULL) : NULL;
        const char *m = json_string_value(json_object_get(json_object_get(j, "error"), "message"));
        if (!m)
            m = json_string_value(json_object_get(j, "error"));
        char excerpt[80] = "";
        if (!m && x->errbody.p) {
            size_t k = 0;
            for (size_t i = 0; i < x->errbody.n && k + 1 < sizeof(excerpt); i++)
                excerpt[k++] = x->errbody.p[i] >= 0x20 && x->errbody.p[i] < 0x7f ? x->errbody.p[i] : ' ';
            excerpt[k] = '\0';
        }
        x->failed = false; /* the status is the reason */
        xfail(x, "HTTP %ld: %s", x->status, m ? m : excerpt[0] ? excerpt : "(empty body)");
        json_decref(j);
        return;
    }
    if (x->failed)
        return;
    if (x->stalled)
        xfail(x, "stalled: no data for %g s (--stall-timeout)", stall_s);
    else if (res != CURLE_OK)
        xfail(x, "transfer failed: %s", x->curl_err[0] ? x->curl_err : curl_easy_strerror(res));
    else if (k25_sse_pending(&x->sse))
        xfail(x, "truncated stream: it ended inside an SSE event");
    else if (!x->got_done)
        xfail(x, "truncated stream: it ended before data: [DONE]");
}

/* Copies a finished transfer into its record. */
static int record(struct xfer *x, struct k25_bench_run *run, uint64_t end_ns)
{
    struct k25_bench_req *q = &run->reqs[x->rec];
    uint64_t t0 = run->t0_ns;
    q->http_status = (int32_t)x->status;
    q->finish_ns = (int64_t)(end_ns - t0);
    if (x->failed) {
        q->state = K25_REQ_REJECTED;
        snprintf(q->reason, sizeof(q->reason), "%s", x->reason);
        return 0;
    }
    q->state = K25_REQ_COMPLETED;
    q->client_input = x->client_in;
    q->degraded = x->degraded;
    int n = x->have_usage ? x->usage_out : x->n_tok;
    q->tokens_counted = !x->have_usage;
    if (x->have_usage && x->usage_in > 0)
        q->n_input = x->usage_in;
    q->n_output = n;
    if (n > 0) {
        q->token_ns = malloc(sizeof(int64_t) * (size_t)n);
        q->token_ids = malloc(sizeof(int32_t) * (size_t)n);
        if (!q->token_ns || !q->token_ids)
            return -1;
        for (int i = 0; i < n; i++) {
            /* the i-th token arrived with the counted arrival it maps to (identity when they agree) */
            int k = x->n_tok == n ? i : x->n_tok > 0 ? (int)((int64_t)i * x->n_tok / n) : -1;
            q->token_ns[i] = k >= 0 ? x->tns[k] - (int64_t)t0 : q->finish_ns;
            q->token_ids[i] = k >= 0 && x->n_tok == n ? x->tids[k] : -1;
        }
        q->first_ns = q->token_ns[0];
    }
    run->output_tokens += n;
    return 0;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return -1;
    memset((char *)np + *cap * elem, 0, (nc - *cap) * elem);
    *p = np;
    *cap = nc;
    return 0;
}

/* Starts request `issued` (input bi) at its intended time; NULL when out of memory. */
static struct xfer *start(k25_endpoint_t *ep, const struct k25_bench_opts *o, size_t input, long rec, int user,
                          bool capture_headers)
{
    struct xfer *x = calloc(1, sizeof(*x));
    if (!x || !(x->h = curl_easy_init())) {
        free(x);
        return NULL;
    }
    x->rec = rec;
    x->user = user;
    x->client_in = ep->client_n[input];
    x->chat = ep->chat;
    x->errbody.limit = 4096;
    k25_sse_init(&x->sse);
    if (capture_headers && json_is_null(ep->resp_headers)) {
        json_decref(ep->resp_headers);
        ep->resp_headers = json_object();
        x->headers = ep->resp_headers;
    }
    x->now = k25_now_ns(); /* the stall clock starts with the request */
    CURL *h = x->h;
    curl_easy_setopt(h, CURLOPT_URL, ep->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, ep->hdrs);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, ep->bodies[input]);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)ep->body_len[input]);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    if (x->headers) {
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_line);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, x->headers);
    }
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(o->request_timeout_s * 1000.0));
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_err);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    if (curl_multi_add_handle(ep->multi, h) != CURLM_OK) {
        curl_easy_cleanup(h);
        xfer_free(x);
        return NULL;
    }
    return x;
}

/* The HTTP client's event loop: the shared generator (loadgen.c) plus the transfers in flight. */
struct client {
    k25_endpoint_t *ep;
    struct k25_loadgen g;
    struct xfer **live; /* [n_live] in flight, owned */
    size_t n_live, cap_live;
};

/*
 * Verb 1: starts a transfer for every request due at now (the same arrival
 * clock and in-flight cap as the in-process loop).  Fails only when a
 * transfer cannot be started (out of memory).
 */
static int client_issue_due(struct client *c, uint64_t now, struct k25_error *err)
{
    const struct k25_loadgen_settings *s = c->g.s;
    struct k25_bench_run *run = c->g.run;
    struct k25_loadgen_due d;
    int rc;
    while ((rc = k25_loadgen_take_due(&c->g, now, &d, err)) == 1) {
        if (d.rec >= 0) /* a server is not told a priority, and its queue is not visible: queue_ms is n/a */
            run->reqs[d.rec].priority = 0;
        struct xfer *x = grow((void **)&c->live, &c->cap_live, c->n_live + 1, sizeof(*c->live)) == 0
                             ? start(c->ep, s->opts, d.input, d.rec, d.user, s->record)
                             : NULL;
        if (!x)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "cannot start a libcurl transfer (out of memory)");
        c->live[c->n_live++] = x;
        if (d.rec >= 0)
            run->reqs[d.rec].submit_ns = (int64_t)(k25_now_ns() - run->t0_ns);
        now = k25_now_ns();
    }
    return rc;
}

/*
 * Verb 3 (verb 2, one step, is curl_multi_perform): records every finished
 * transfer, then ends the streams silent for --stall-timeout (ended here:
 * curl's low-speed limit averages over seconds, so a chunk just before a
 * stall hides it) as failed.  Fails only when out of memory.
 */
static int client_collect(struct client *c, struct k25_error *err)
{
    const struct k25_bench_opts *o = c->g.s->opts;
    CURLMsg *m;
    int left;
    uint64_t tnow = k25_now_ns();
    for (size_t si = 0;;) {
        struct xfer *x = NULL;
        CURLcode res = CURLE_OK;
        if ((m = curl_multi_info_read(c->ep->multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            res = m->data.result;
        } else {
            while (si < c->n_live && (double)(tnow - c->live[si]->now) / 1e9 <= o->stall_timeout_s)
                si++;
            if (si == c->n_live)
                break;
            x = c->live[si]; /* removed from live below: si now names the next one */
            x->stalled = true;
            res = CURLE_OPERATION_TIMEDOUT;
        }
        uint64_t end = k25_now_ns();
        diagnose(x, res, o->stall_timeout_s);
        curl_multi_remove_handle(c->ep->multi, x->h);
        curl_easy_cleanup(x->h);
        for (size_t i = 0; i < c->n_live; i++)
            if (c->live[i] == x) {
                c->live[i] = c->live[--c->n_live];
                break;
            }
        int rrc = x->rec >= 0 ? record(x, c->g.run, end) : 0;
        if (x->rec >= 0 && x->model[0]) {
            json_t *cnt = json_object_get(c->ep->resp_models, x->model);
            json_object_set_new(c->ep->resp_models, x->model, json_integer(json_integer_value(cnt) + 1));
        }
        k25_loadgen_retire(&c->g, x->user, (int64_t)end);
        xfer_free(x);
        if (rrc != 0)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    return K25_OK;
}

/* Waits for bytes, or until the next arrival is due (100 ms at most). */
static int client_wait(struct client *c, struct k25_error *err)
{
    const struct k25_loadgen *g = &c->g;
    int wait_ms = 100;
    int64_t next = k25_arrivals_next_ns(&g->arrivals, g->issued);
    if (next >= 0 && (g->cap == 0 || g->inflight < g->cap)) {
        int64_t dt = next - (int64_t)k25_now_ns();
        wait_ms = dt <= 0 ? 0 : (int)((dt + 999999) / 1000000);
        if (wait_ms > 100)
            wait_ms = 100;
    } else if (!g->open && k25_loadgen_more(g, k25_now_ns()) && g->arrivals.users_free > 0) {
        wait_ms = 0;
    }
    if (wait_ms > 0 && curl_multi_poll(c->ep->multi, NULL, 0, wait_ms, NULL) != CURLM_OK)
        return k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "libcurl multi interface failed");
    return K25_OK;
}

int k25_endpoint_run(k25_endpoint_t *ep, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                     struct k25_error *err)
{
    K25_ASSERT(s->n_inputs > 0 && s->n_inputs == ep->n_in);
    const struct k25_bench_opts *o = s->opts;
    struct client c = {.ep = ep};
    int rc = k25_loadgen_begin(&c.g, s, run, err);
    while (rc == K25_OK) {
        if (o->stop && *o->stop) {
            run->interrupted = true;
            rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "interrupted");
            break;
        }
        if ((rc = client_issue_due(&c, k25_now_ns(), err)) != K25_OK)
            break;
        bool can_issue = k25_loadgen_more(&c.g, k25_now_ns());
        int running = 0;
        if (curl_multi_perform(ep->multi, &running) != CURLM_OK) {
            rc = k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "libcurl multi interface failed");
            break;
        }
        if ((rc = client_collect(&c, err)) != K25_OK)
            break;
        k25_loadgen_progress(&c.g);
        if (!can_issue && c.g.inflight == 0) {
            k25_loadgen_end(&c.g);
            if (s->record)
                run->ov.loop_ns += (int64_t)(k25_now_ns() - c.g.start_ns);
            break;
        }
        rc = client_wait(&c, err);
    }
    /* an interruption or a failure: drop whatever is still in flight */
    for (size_t i = 0; i < c.n_live; i++) {
        curl_multi_remove_handle(ep->multi, c.live[i]->h);
        curl_easy_cleanup(c.live[i]->h);
        xfer_free(c.live[i]);
    }
    free(c.live);
    k25_loadgen_free(&c.g);
    return rc;
}

json_t *k25_endpoint_summary_json(const struct k25_bench_run *run)
{
    json_t *by_status = json_object(), *by_reason = json_object();
    int64_t failed = 0, counted = 0, completed = 0, client = 0, mismatch = 0;
    json_t *first_mm = json_null();
    for (size_t i = 0; i < run->n_reqs; i++) {
        const struct k25_bench_req *q = &run->reqs[i];
        if (q->state == K25_REQ_COMPLETED) {
            completed++;
            counted += q->tokens_counted;
            if (q->client_input > 0) { /* --tokenizer: the client's count beside the server's usage */
                client++;
                if (q->client_input != q->n_input && mismatch++ == 0) {
                    json_decref(first_mm);
                    first_mm = json_pack("{s:s, s:I, s:i, s:i}", "id", q->id, "line", (json_int_t)q->line,
                                         "client_prompt_tokens", q->client_input, "server_prompt_tokens", q->n_input);
                }
            }
            continue;
        }
        if (q->state != K25_REQ_REJECTED)
            continue;
        failed++;
        char key[32], kind[48];
        snprintf(key, sizeof(key), "%d", q->http_status);
        json_object_set_new(by_status, key, json_integer(json_integer_value(json_object_get(by_status, key)) + 1));
        /* the reason's kind: up to the first ':' ("HTTP 429", "truncated stream", "stalled", ...) */
        size_t k = strcspn(q->reason, ":");
        snprintf(kind, sizeof(kind), "%.*s", (int)(k < sizeof(kind) - 1 ? k : sizeof(kind) - 1), q->reason);
        json_object_set_new(by_reason, kind, json_integer(json_integer_value(json_object_get(by_reason, kind)) + 1));
    }
    json_t *j = json_pack("{s:I, s:o, s:o, s:s, s:I}", "failed", (json_int_t)failed, "failed_by_http_status",
                          by_status, "failed_by_reason", by_reason, "output_tokens_from",
                          counted == 0 ? "usage" : counted == completed ? "counted_chunks" : "mixed",
                          "requests_tokens_counted", (json_int_t)counted);
    if (j && client > 0)
        json_object_set_new(j, "prompt_tokens_check",
                            json_pack("{s:I, s:I, s:o}", "requests_counted", (json_int_t)client, "mismatches",
                                      (json_int_t)mismatch, "first_mismatch", first_mm));
    else
        json_decref(first_mm);
    return j;
}
