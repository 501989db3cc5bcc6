/*
 * serve_api.c - the OpenAI wire format of `k25 serve` (docs/serve.md):
 * validating request bodies into a struct sreq, the JSON of answers, stream
 * chunks and errors, and the Prometheus text of /metrics.  No threads and
 * no engine calls here: serve.c owns both.
 */
#include "serve_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 414, 431 and 505 come only from libmicrohttpd itself (counted from its log line: serve.c mhd_log) */
const int k25_serve_http_codes[SERVE_N_CODES] = {200, 400, 401, 404, 405, 413, 414, 429, 431, 500, 503, 505};

/* ------------------------------------------------------------ errors */

static const char *error_type(int status)
{
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 500: return "internal_server_error";
    case 503: return "service_unavailable";
    default: return "invalid_request_error";
    }
}

/* OpenAI-style {"error": {message, type, param, code}}. */
json_t *k25_serve_error_json(int status, const char *param, const char *msg)
{
    return json_pack("{s:{s:s, s:s, s:s?, s:i}}", "error", "message", msg, "type", error_type(status), "param",
                     param, "code", status);
}

static int bad(struct k25_serve_bad *b, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int bad(struct k25_serve_bad *b, int status, const char *param, const char *fmt, ...)
{
    b->status = status;
    snprintf(b->param, sizeof(b->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof(b->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* Appends text bytes to a growing id array. */
static int push_bytes(int32_t **ids, int *n, int *cap, const char *s, size_t len)
{
    if ((size_t)*n + len > (size_t)INT32_MAX / 8)
        return -1;
    if (*n + (int)len > *cap) {
        int nc = *cap ? *cap : 256;
        while (nc < *n + (int)len)
            nc *= 2;
        int32_t *ni = realloc(*ids, sizeof(int32_t) * (size_t)nc);
        if (!ni)
            return -1;
        *ids = ni;
        *cap = nc;
    }
    for (size_t i = 0; i < len; i++)
        (*ids)[(*n)++] = (unsigned char)s[i];
    return 0;
}

/* The completions prompt: a string, one-element [string], or [token ids]. */
static int parse_prompt(struct k25_serve *S, json_t *p, struct sreq *r, struct k25_serve_bad *b)
{
    int cap = 0;
    if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
        p = json_array_get(p, 0);
    if (json_is_string(p) && S->text_err[0]) {
        return bad(b, 400, "prompt", "%s", S->text_err);
    } else if (json_is_string(p) && S->tok) { /* the model's tokenizer, with its BOS template */
        struct k25_error e;
        if (k25_tokenizer_encode(S->tok, json_string_value(p), json_string_length(p), K25_TOK_ADD_SPECIAL, &r->ids,
                                 &r->n_ids, &e) != K25_OK)
            return bad(b, e.code == K25_ENOMEM ? 413 : 400, "prompt", "%s", e.msg);
    } else if (json_is_string(p)) {
        if (push_bytes(&r->ids, &r->n_ids, &cap, json_string_value(p), json_string_length(p)) != 0)
            return bad(b, 413, "prompt", "prompt too long");
    } else if (json_is_array(p) && json_array_size(p) > 0 && json_is_integer(json_array_get(p, 0))) {
        size_t n = json_array_size(p);
        if (n > (size_t)INT32_MAX / 8 || !(r->ids = malloc(sizeof(int32_t) * n)))
            return bad(b, 413, "prompt", "prompt too long");
        for (size_t i = 0; i < n; i++) {
            json_t *t = json_array_get(p, i);
            json_int_t v = json_is_integer(t) ? json_integer_value(t) : -1;
            if (v < 0 || v >= S->vocab)
                return bad(b, 400, "prompt", "prompt token %zu is not a token id in [0, %d)", i, S->vocab);
            r->ids[i] = (int32_t)v;
        }
        r->n_ids = (int)n;
    } else if (json_is_array(p) && json_array_size(p) > 1) {
        return bad(b, 400, "prompt", "batched prompts are not supported: send one prompt per request");
    } else {
        return bad(b, 400, "prompt", "'prompt' must be a string or an array of token ids");
    }
    return 0;
}

/*
 * The chat prompt of a real model folder: the messages (string content, or
 * text parts concatenated) rendered through the folder's named chat template
 * (docs/models.md "Chat templates") with the assistant header to continue
 * from, encoded with its tokenizer.  An unrecognised template is a 400 that
 * names tokenizer_config.json and --chat-template.
 */
static int parse_messages_tok(struct k25_serve *S, json_t *m, struct sreq *r, struct k25_serve_bad *b)
{
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad(b, 400, "messages", "'messages' must be a non-empty array");
    if (S->chat_tpl == K25_CHAT_NONE)
        return bad(b, 400, "messages", "%s", S->chat_err);
    size_t n = json_array_size(m);
    if (n > 100000)
        return bad(b, 413, "messages", "at most 100000 messages");
    struct k25_chat_msg *msgs = calloc(n, sizeof(*msgs));
    char **owned = calloc(n, sizeof(*owned));
    int rc = -1;
    if (!msgs || !owned) {
        bad(b, 503, "messages", "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i), *role = json_object_get(msg, "role"),
               *content = json_object_get(msg, "content");
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(msg) || !json_is_string(role)) {
            bad(b, 400, param, "messages[%zu] needs a string 'role'", i);
            goto out;
        }
        msgs[i].role = json_string_value(role);
        if (json_is_string(content)) {
            msgs[i].content = json_string_value(content);
            if (strlen(msgs[i].content) != json_string_length(content)) {
                bad(b, 400, param, "messages[%zu].content contains a NUL character", i);
                goto out;
            }
        } else if (json_is_array(content)) {
            size_t len = 0;
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *part = json_array_get(content, k), *text = json_object_get(part, "text");
                const char *type = json_string_value(json_object_get(part, "type"));
                if (!type || strcmp(type, "text") || !json_is_string(text)) {
                    bad(b, 400, param, "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                        "parts are supported", i, k);
                    goto out;
                }
                len += json_string_length(text);
            }
            if (!(owned[i] = malloc(len + 1))) {
                bad(b, 413, param, "prompt too long");
                goto out;
            }
            len = 0;
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *text = json_object_get(json_array_get(content, k), "text");
                memcpy(owned[i] + len, json_string_value(text), json_string_length(text));
                len += json_string_length(text);
            }
            owned[i][len] = '\0';
            msgs[i].content = owned[i];
        } else if (json_is_null(content) && !strcmp(msgs[i].role, "assistant")) {
            msgs[i].content = "";
        } else {
            bad(b, 400, param, "messages[%zu].content must be a string or an array of text parts", i);
            goto out;
        }
    }
    struct k25_error e;
    if (k25_chat_encode(S->tok, S->chat_tpl, msgs, (int)n, true, &r->ids, &r->n_ids, &e) != K25_OK) {
        bad(b, e.code == K25_ENOMEM ? 413 : 400, "messages", "%s", e.msg);
        goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; owned && i < n; i++)
        free(owned[i]);
    free(owned);
    free(msgs);
    return rc;
}

/*
 * The chat prompt for a byte-level model (no chat template in C): every
 * message as "ROLE: CONTENT\n", then "assistant: ".  docs/serve.md says so.
 */
static int parse_messages(json_t *m, struct sreq *r, struct k25_serve_bad *b)
{
    int cap = 0;
    if (!json_is_array(m) || json_array_size(m) == 0)
        return bad(b, 400, "messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < json_array_size(m); i++) {
        json_t *msg = json_array_get(m, i), *role = json_object_get(msg, "role"),
               *content = json_object_get(msg, "content");
        char param[64];
        snprintf(param, sizeof(param), "messages[%zu]", i);
        if (!json_is_object(msg) || !json_is_string(role))
            return bad(b, 400, param, "messages[%zu] needs a string 'role'", i);
        if (push_bytes(&r->ids, &r->n_ids, &cap, json_string_value(role), json_string_length(role)) != 0 ||
            push_bytes(&r->ids, &r->n_ids, &cap, ": ", 2) != 0)
            return bad(b, 413, param, "prompt too long");
        if (json_is_string(content)) {
            if (push_bytes(&r->ids, &r->n_ids, &cap, json_string_value(content), json_string_length(content)) != 0)
                return bad(b, 413, param, "prompt too long");
        } else if (json_is_array(content)) {
            for (size_t k = 0; k < json_array_size(content); k++) {
                json_t *part = json_array_get(content, k), *text = json_object_get(part, "text");
                const char *type = json_string_value(json_object_get(part, "type"));
                if (!type || strcmp(type, "text") || !json_is_string(text))
                    return bad(b, 400, param, "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": ...} "
                               "parts are supported", i, k);
                if (push_bytes(&r->ids, &r->n_ids, &cap, json_string_value(text), json_string_length(text)) != 0)
                    return bad(b, 413, param, "prompt too long");
            }
        } else if (!json_is_null(content) || strcmp(json_string_value(role), "assistant")) {
            return bad(b, 400, param, "messages[%zu].content must be a string or an array of text parts", i);
        }
        if (push_bytes(&r->ids, &r->n_ids, &cap, "\n", 1) != 0)
            return bad(b, 413, param, "prompt too long");
    }
    if (push_bytes(&r->ids, &r->n_ids, &cap, "assistant: ", 11) != 0)
        return bad(b, 413, "messages", "prompt too long");
    return 0;
}

static int parse_stop(json_t *s, struct sreq *r, struct k25_serve_bad *b)
{
    json_t *one[1] = {s};
    json_t **items = one;
    size_t n = 1;
    if (!s || json_is_null(s))
        return 0;
    if (json_is_array(s)) {
        n = json_array_size(s);
        if (n > SERVE_MAX_STOP)
            return bad(b, 400, "stop", "at most %d stop sequences", SERVE_MAX_STOP);
    } else if (!json_is_string(s)) {
        return bad(b, 400, "stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *it = json_is_array(s) ? json_array_get(s, i) : items[0];
        size_t len = json_string_length(it);
        if (!json_is_string(it) || len == 0 || len > SERVE_MAX_STOP_BYTES)
            return bad(b, 400, "stop", "stop sequences must be non-empty strings of at most %d bytes",
                       SERVE_MAX_STOP_BYTES);
        int cap = 0;
        if (push_bytes(&r->stop[r->n_stop], &r->stop_len[r->n_stop], &cap, json_string_value(it), len) != 0)
            return bad(b, 500, "stop", "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* A number field: absent/null leaves *out; otherwise it must be a number in [lo, hi]. */
static int get_num(json_t *o, const char *key, double lo, double hi, bool lo_open, double *out, bool *present,
                   struct k25_serve_bad *b)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    double x = json_number_value(v);
    if (!json_is_number(v) || !(lo_open ? x > lo : x >= lo) || !(x <= hi))
        return bad(b, 400, key, "'%s' must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = x;
    if (present)
        *present = true;
    return 0;
}

static int get_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, json_int_t *out, bool *present,
                   struct k25_serve_bad *b)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return bad(b, 400, key, "'%s' must be an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    if (present)
        *present = true;
    return 0;
}

/* Validates a completion request body into r.  -1 with *b filled on a bad request. */
int k25_serve_parse(struct k25_serve *S, const char *body, size_t n, bool chat, struct sreq *r,
                            struct k25_serve_bad *b)
{
    json_error_t je;
    json_t *j = json_loadb(body, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    int rc = -1;
    if (!j)
        return bad(b, 400, NULL, "the body is not valid JSON: line %d, column %d: %s", je.line, je.column, je.text);
    if (!json_is_object(j)) {
        bad(b, 400, NULL, "the body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(j, "model");
    if (model && !json_is_null(model)) {
        if (!json_is_string(model)) {
            bad(b, 400, "model", "'model' must be a string");
            goto out;
        }
        if (strcmp(json_string_value(model), S->model_name)) {
            bad(b, 404, "model", "the model '%s' does not exist (this server serves '%s')", json_string_value(model),
                S->model_name);
            goto out;
        }
    }
    if (chat && S->text_err[0]) {
        bad(b, 400, "messages", "%s", S->text_err);
        goto out;
    }
    if (chat ? (S->tok ? parse_messages_tok(S, json_object_get(j, "messages"), r, b)
                       : parse_messages(json_object_get(j, "messages"), r, b)) != 0
             : parse_prompt(S, json_object_get(j, "prompt"), r, b) != 0)
        goto out;
    if (r->n_ids == 0) {
        bad(b, 400, chat ? "messages" : "prompt", "the prompt is empty");
        goto out;
    }
    json_int_t mt = 0, nn = 1, seed = 0;
    bool have_seed = false, have_t = false, have_p = false;
    r->temperature = S->cfg.temperature;
    r->top_p = S->cfg.top_p;
    const char *mt_key = chat && json_object_get(j, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if (get_int(j, mt_key, 1, INT32_MAX, &mt, NULL, b) || get_int(j, "n", 1, 1, &nn, NULL, b) ||
        get_int(j, "seed", 0, INT64_MAX, &seed, &have_seed, b) ||
        get_num(j, "temperature", 0, 100, false, &r->temperature, &have_t, b) ||
        get_num(j, "top_p", 0, 1, true, &r->top_p, &have_p, b) || parse_stop(json_object_get(j, "stop"), r, b))
        goto out;
    json_t *ie = json_object_get(j, "ignore_eos"); /* vLLM's extension: generate past the model's EOS */
    if (ie && !json_is_null(ie) && !json_is_boolean(ie)) {
        bad(b, 400, "ignore_eos", "'ignore_eos' must be true or false");
        goto out;
    }
    r->ignore_eos = json_is_true(ie);
    json_t *st = json_object_get(j, "stream"), *so = json_object_get(j, "stream_options");
    if (st && !json_is_null(st) && !json_is_boolean(st)) {
        bad(b, 400, "stream", "'stream' must be true or false");
        goto out;
    }
    r->stream = json_is_true(st);
    if (so && !json_is_null(so)) {
        json_t *iu = json_object_get(so, "include_usage");
        if (!json_is_object(so) || (iu && !json_is_boolean(iu))) {
            bad(b, 400, "stream_options", "'stream_options' must be an object {\"include_usage\": bool}");
            goto out;
        }
        r->include_usage = json_is_true(iu);
    }
    /* k25 extension: the request's priority in the elastic queue (high never spills) */
    json_t *pr = json_object_get(j, "priority");
    if (pr && !json_is_null(pr)) {
        struct k25_error perr;
        if (!json_is_string(pr) || k25_priority_parse(json_string_value(pr), &r->priority, &perr) != K25_OK) {
            bad(b, 400, "priority", "'priority' must be \"high\", \"standard\" or \"low\"");
            goto out;
        }
    }
    r->max_tokens = (int)mt; /* 0: the server's cap (decode_max_tokens); larger ones are capped to it */
    r->has_sampling = have_t || have_p || have_seed;
    r->seed = have_seed ? (uint64_t)seed : S->cfg.seed;
    r->chat = chat;
    if (S->tok) {
        r->text_mode = true;
        struct k25_error e;
        if (k25_tok_stream_create(S->tok, K25_TOK_SKIP_SPECIAL, &r->dec, &e) != K25_OK) {
            bad(b, 503, NULL, "%s", e.msg);
            goto out;
        }
    }
    if (k25_serve_parse_extras(j, chat, r, b) != 0)
        goto out;
    r->lp_tok = S->tok;
    rc = 0;
out:
    json_decref(j);
    return rc;
}

int k25_serve_check_len(struct k25_serve *S, const struct sreq *r, bool chat, struct k25_serve_bad *b)
{
    const int limit = k25_engine_max_model_len(S->eng);
    if (k25_engine_fit_max_new(S->eng, r->n_ids, r->max_tokens) >= 0)
        return 0;
    const char *mt = chat ? "max_completion_tokens" : "max_tokens";
    if (r->max_tokens > 0 && r->n_ids < limit)
        return bad(b, 400, "prompt", "the prompt is %d tokens and %s is %d: %lld tokens exceed the context limit "
                   "of %d tokens (max_model_len); shorten the prompt or lower %s", r->n_ids, mt, r->max_tokens,
                   (long long)r->n_ids + r->max_tokens, limit, mt);
    return bad(b, 400, "prompt", "the prompt is %d tokens; the context limit is %d tokens (max_model_len), "
               "with room for at least one generated token", r->n_ids, limit);
}

void k25_serve_req_clear(struct sreq *r)
{
    free(r->ids);
    free(r->out);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->obuf);
    k25_tok_stream_destroy(r->dec);
    free(r->text);
    r->dec = NULL;
    r->text = NULL;
    r->ids = r->out = NULL;
    r->obuf = NULL;
    r->n_stop = 0;
}

/* ------------------------------------------------------------ answers */

/* A stream chunk: text (may be NULL for the role chunk), token ids, finish reason. */
json_t *k25_serve_chunk_json(const struct sreq *r, const char *model, const char *text, size_t text_len,
                          const int32_t *ids, int n_ids, const char *finish, bool role)
{
    json_t *choice = json_object(), *tid = json_array();
    for (int i = 0; i < n_ids; i++)
        json_array_append_new(tid, json_integer(ids[i]));
    json_object_set_new(choice, "index", json_integer(0));
    if (r->chat) {
        json_t *delta = json_object();
        if (role)
            json_object_set_new(delta, "role", json_string("assistant"));
        json_object_set_new(delta, "content", json_stringn(text ? text : "", text ? text_len : 0));
        json_object_set_new(choice, "delta", delta);
        if (r->logprobs >= 0 && n_ids > 0)
            json_object_set_new(choice, "logprobs", k25_serve_logprobs_json(r, (int)(ids - r->out), n_ids));
    } else {
        json_object_set_new(choice, "text", json_stringn(text ? text : "", text ? text_len : 0));
        json_object_set_new(choice, "logprobs", n_ids > 0 ? k25_serve_logprobs_json(r, (int)(ids - r->out), n_ids)
                                                          : json_null());
    }
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(choice, "token_ids", tid);
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", r->id, "object",
                          r->chat ? "chat.completion.chunk" : "text_completion", "created", (json_int_t)r->created,
                          "model", model, "choices", choice);
    if (j && finish) /* the final chunk says how the request was served */
        json_object_set_new(j, "k25", k25_serve_ext_json(r));
    return j;
}

json_t *k25_serve_ext_json(const struct sreq *r)
{
    return json_pack("{s:s, s:b, s:b, s:i}", "priority", k25_priority_name(r->priority), "degraded", r->degraded,
                     "spilled", r->spilled, "ttft_sla_ms", r->ttft_sla_ms);
}

json_t *k25_serve_usage_json(const struct sreq *r)
{
    return json_pack("{s:i, s:i, s:i}", "prompt_tokens", r->n_prompt, "completion_tokens", r->n_out,
                     "total_tokens", r->n_prompt + r->n_out);
}

const char *k25_serve_finish_name(const struct sreq *r)
{
    return r->finish == K25_FINISH_STOP ? "stop" : r->finish == K25_FINISH_CANCELLED ? "cancelled" : "length";
}

json_t *k25_serve_result_json(const struct sreq *r, const char *model)
{
    char *text = malloc(r->text_mode ? r->text_len + 1 : (size_t)r->n_out * 3 + 8);
    size_t n = 0;
    struct k25_utf8 u = {0};
    int end = r->n_out;
    if (r->finish == K25_FINISH_STOP) /* the matched stop sequence is not part of the text */
        for (int s = 0; s < r->n_stop; s++)
            if (end >= r->stop_len[s] &&
                !memcmp(r->out + end - r->stop_len[s], r->stop[s], sizeof(int32_t) * (size_t)r->stop_len[s])) {
                end -= r->stop_len[s];
                break;
            }
    if (!text)
        return NULL;
    if (r->text_mode) { /* decoded with the model's tokenizer, a matched stop string already cut off */
        memcpy(text, r->text ? r->text : "", r->text_len);
        n = r->text_len;
    } else {
        for (int i = 0; i < end; i++)
            k25_utf8_push(&u, r->out[i] >= 0 && r->out[i] < 256 ? (unsigned char)r->out[i] : (unsigned char)'?',
                          text, &n);
        k25_utf8_flush(&u, text, &n);
    }
    json_t *tid = json_array(), *choice = json_object();
    for (int i = 0; i < r->n_out; i++)
        json_array_append_new(tid, json_integer(r->out[i]));
    json_object_set_new(choice, "index", json_integer(0));
    if (r->chat)
        json_object_set_new(choice, "message", json_pack("{s:s, s:s%}", "role", "assistant", "content", text, n));
    else
        json_object_set_new(choice, "text", json_stringn(text, n));
    json_object_set_new(choice, "logprobs", k25_serve_logprobs_json(r, 0, r->n_out));
    free(text);
    json_object_set_new(choice, "finish_reason", json_string(k25_serve_finish_name(r)));
    json_object_set_new(choice, "token_ids", tid);
    return json_pack("{s:s, s:s, s:I, s:s, s:[o], s:o, s:o}", "id", r->id, "object",
                     r->chat ? "chat.completion" : "text_completion", "created", (json_int_t)r->created, "model",
                     model, "choices", choice, "usage", k25_serve_usage_json(r), "k25", k25_serve_ext_json(r));
}

/* ------------------------------------------------------------ /metrics */

/* GET /metrics: Prometheus text exposition format. */
char *k25_serve_metrics_text(struct k25_serve *S)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    pthread_mutex_lock(&S->mu);
    struct k25_engine_stats st = S->st;
    fprintf(f, "# HELP k25_requests_running Requests admitted by the engine (prefill or decode).\n"
               "# TYPE k25_requests_running gauge\nk25_requests_running %d\n", st.n_running);
    fprintf(f, "# HELP k25_requests_waiting Requests queued: not yet admitted by the engine.\n"
               "# TYPE k25_requests_waiting gauge\nk25_requests_waiting %d\n", st.n_waiting + S->n_pend);
    fprintf(f, "# HELP k25_kv_blocks_used KV cache blocks in use.\n# TYPE k25_kv_blocks_used gauge\n"
               "k25_kv_blocks_used %lld\n", (long long)st.kv_blocks_in_use);
    fprintf(f, "# HELP k25_kv_blocks_peak Most KV cache blocks in use at once since the start.\n"
               "# TYPE k25_kv_blocks_peak gauge\nk25_kv_blocks_peak %lld\n", (long long)st.kv_blocks_peak);
    fprintf(f, "# HELP k25_kv_blocks_total KV cache blocks the pool may hold (+Inf: no memory_budget_mb).\n"
               "# TYPE k25_kv_blocks_total gauge\n");
    if (st.kv_blocks_capacity > 0)
        fprintf(f, "k25_kv_blocks_total %lld\n", (long long)st.kv_blocks_capacity);
    else
        fprintf(f, "k25_kv_blocks_total +Inf\n");
    fprintf(f, "# HELP k25_prompt_tokens_total Prompt tokens of finished requests.\n"
               "# TYPE k25_prompt_tokens_total counter\nk25_prompt_tokens_total %lld\n", (long long)S->prompt_tokens);
    fprintf(f, "# HELP k25_generation_tokens_total Tokens generated.\n"
               "# TYPE k25_generation_tokens_total counter\nk25_generation_tokens_total %lld\n",
            (long long)S->gen_tokens);
    fprintf(f, "# HELP k25_requests_finished_total Requests finished, by reason (rejected: never ran).\n"
               "# TYPE k25_requests_finished_total counter\n");
    static const char *const fin[4] = {"rejected", "length", "stop", "cancelled"};
    for (int i = 0; i < 4; i++)
        fprintf(f, "k25_requests_finished_total{finish_reason=\"%s\"} %lld\n", fin[i], (long long)S->finished[i]);
    fprintf(f, "# HELP k25_http_responses_total HTTP responses by status code.\n"
               "# TYPE k25_http_responses_total counter\n");
    for (int i = 0; i < SERVE_N_CODES; i++)
        fprintf(f, "k25_http_responses_total{code=\"%d\"} %lld\n", k25_serve_http_codes[i], (long long)S->http[i]);
    /* the elastic queue (docs/engine.md "Elastic request queue") */
    fprintf(f, "# HELP k25_queue_waiting Requests waiting, by queue (memory, spill: the durable disk queue).\n"
               "# TYPE k25_queue_waiting gauge\nk25_queue_waiting{queue=\"memory\"} %d\n"
               "k25_queue_waiting{queue=\"spill\"} %d\n", st.n_waiting_memory, st.n_waiting_spill);
    fprintf(f, "# HELP k25_breaker_open 1 while the circuit breaker routes new requests to the degraded model.\n"
               "# TYPE k25_breaker_open gauge\nk25_breaker_open %d\n", st.breaker_open ? 1 : 0);
    fprintf(f, "# HELP k25_breaker_opens_total Transitions of the circuit breaker to open.\n"
               "# TYPE k25_breaker_opens_total counter\nk25_breaker_opens_total %lld\n", (long long)st.breaker_opens);
    const struct { const char *name, *help; long long v; } qc[] = {
        {"k25_degraded_requests_total", "Requests submitted to the degraded model.", (long long)st.degraded_requests},
        {"k25_spilled_requests_total", "Requests written to the disk queue.", (long long)st.spilled_requests},
        {"k25_replayed_requests_total", "Requests replayed from the spill log at start.", (long long)S->replayed},
        {"k25_timed_out_requests_total", "Requests that waited longer than queue_timeout_ms.",
         (long long)st.timed_out_requests},
        {"k25_rejected_queue_full_total", "Requests rejected on arrival: memory queue full, no spill folder.",
         (long long)st.rejected_queue_full},
    };
    for (size_t i = 0; i < sizeof(qc) / sizeof(qc[0]); i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %lld\n", qc[i].name, qc[i].help, qc[i].name, qc[i].name,
                qc[i].v);
    /* the HTTP layer (docs/serve.md "Limits and hostile clients") */
    const struct { const char *name, *help; long long v; } hc[] = {
        {"k25_http_layer_errors_total",
         "Requests libmicrohttpd answered or dropped itself after their request line (bad header, 431, 505, "
         "bad chunked framing), or whose client left before k25 answered.", (long long)S->http_layer_errors},
        {"k25_http_deadline_closes_total", "Connections closed for missing the header or body deadline.",
         (long long)S->deadline_closes},
        {"k25_http_disconnect_cancels_total", "Requests cancelled because their client closed the connection "
         "while they waited.", (long long)S->disconnect_cancels},
    };
    for (size_t i = 0; i < sizeof(hc) / sizeof(hc[0]); i++)
        fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s %lld\n", hc[i].name, hc[i].help, hc[i].name, hc[i].name,
                hc[i].v);
    fprintf(f, "# HELP k25_http_connections Open HTTP connections.\n# TYPE k25_http_connections gauge\n"
               "k25_http_connections %d\n", S->n_conns);
    fprintf(f, "# HELP k25_engine_busy_seconds_total Time the engine spent in steps.\n"
               "# TYPE k25_engine_busy_seconds_total counter\nk25_engine_busy_seconds_total %.6f\n",
            (double)st.busy_ns / 1e9);
    const struct hist *hs[2] = {&S->ttft, &S->itl};
    static const char *const hn[2] = {"k25_time_to_first_token_seconds", "k25_inter_token_latency_seconds"};
    static const char *const hh[2] = {"Time from the complete request body to the first generated token.",
                                      "Time between consecutive generated tokens of a request."};
    for (int k = 0; k < 2; k++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", hn[k], hh[k], hn[k]);
        uint64_t cum = 0;
        for (int i = 0; i < hs[k]->n; i++) {
            cum += hs[k]->count[i];
            fprintf(f, "%s_bucket{le=\"%g\"} %llu\n", hn[k], hs[k]->le[i], (unsigned long long)cum);
        }
        fprintf(f, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9f\n%s_count %llu\n", hn[k],
                (unsigned long long)hs[k]->total, hn[k], hs[k]->sum, hn[k], (unsigned long long)hs[k]->total);
    }
    pthread_mutex_unlock(&S->mu);
    k25_gputel_metrics(S->gpu, f); /* NVML's last sample of each GPU (its own lock) */
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
