/*
 * serve_logprobs.c - `k25 serve`'s log probabilities (OpenAI's `logprobs`)
 * and its refusals of request fields it does not implement.
 *
 * Completions: "logprobs": k (0..20) returns, per generated token, its log
 * probability and the k most likely tokens' ({tokens, token_logprobs,
 * top_logprobs, text_offset}).  Chat: "logprobs": true (+ "top_logprobs":
 * 0..20) returns {content: [{token, logprob, bytes, top_logprobs}]}.  The
 * figures are log-softmax of the logits the engine chose the token from
 * (the model's distribution, before temperature or top_p), kept by the
 * engine for that request only (k25_request.keep_logits).  The engine
 * thread computes them as each token arrives (k25_serve_logprobs_add);
 * the HTTP threads format them.
 *
 * Fields the server does not implement are refused with a 400 naming the
 * field instead of being accepted and ignored: echo, suffix, best_of > 1,
 * tools, tool_choice, functions, function_call, logit_bias,
 * response_format other than text, non-zero presence/frequency penalties.
 */
#include "serve_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LOGPROBS_MAX 20

static int refuse(struct k25_serve_bad *b, const char *param, const char *msg)
{
    b->status = 400;
    snprintf(b->param, sizeof(b->param), "%s", param);
    snprintf(b->msg, sizeof(b->msg), "'%s' is not supported by k25 serve: %s", param, msg);
    return -1;
}

int k25_serve_parse_extras(json_t *j, bool chat, struct sreq *r, struct k25_serve_bad *b)
{
    r->logprobs = -1;
    json_t *v;
    /* what is not implemented, refused by name */
    if (json_is_true(json_object_get(j, "echo")))
        return refuse(b, "echo", "the prompt is not returned with the completion");
    if ((v = json_object_get(j, "suffix")) && !json_is_null(v))
        return refuse(b, "suffix", "no insertion completions");
    if ((v = json_object_get(j, "best_of")) && !json_is_null(v) && !(json_is_integer(v) && json_integer_value(v) == 1))
        return refuse(b, "best_of", "one completion per request (best_of 1)");
    static const char *const tools[] = {"tools", "tool_choice", "functions", "function_call", "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
        if ((v = json_object_get(j, tools[i])) && !json_is_null(v))
            return refuse(b, tools[i], "no tool or function calling");
    if ((v = json_object_get(j, "logit_bias")) && !json_is_null(v) && !(json_is_object(v) && json_object_size(v) == 0))
        return refuse(b, "logit_bias", "logits are not biased");
    if ((v = json_object_get(j, "response_format")) && !json_is_null(v)) {
        const char *t = json_string_value(json_object_get(v, "type"));
        if (!t || strcmp(t, "text"))
            return refuse(b, "response_format", "only {\"type\": \"text\"} (no JSON mode or schema)");
    }
    static const char *const pens[] = {"presence_penalty", "frequency_penalty"};
    for (size_t i = 0; i < 2; i++)
        if ((v = json_object_get(j, pens[i])) && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
            return refuse(b, pens[i], "no repetition penalties (0 only)");
    /* logprobs */
    v = json_object_get(j, "logprobs");
    json_t *top = json_object_get(j, "top_logprobs");
    if (chat) {
        if (v && !json_is_null(v) && !json_is_boolean(v)) {
            snprintf(b->param, sizeof(b->param), "logprobs");
            snprintf(b->msg, sizeof(b->msg), "'logprobs' must be true or false (chat; the count is top_logprobs)");
            b->status = 400;
            return -1;
        }
        if (top && !json_is_null(top)) {
            if (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > LOGPROBS_MAX) {
                b->status = 400;
                snprintf(b->param, sizeof(b->param), "top_logprobs");
                snprintf(b->msg, sizeof(b->msg), "'top_logprobs' must be an integer in [0, %d]", LOGPROBS_MAX);
                return -1;
            }
            if (!json_is_true(v)) {
                b->status = 400;
                snprintf(b->param, sizeof(b->param), "top_logprobs");
                snprintf(b->msg, sizeof(b->msg), "'top_logprobs' needs \"logprobs\": true");
                return -1;
            }
        }
        if (json_is_true(v))
            r->logprobs = top && json_is_integer(top) ? (int)json_integer_value(top) : 0;
    } else {
        if (top && !json_is_null(top))
            return refuse(b, "top_logprobs", "a chat field: completions take \"logprobs\": k");
        if (v && !json_is_null(v)) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > LOGPROBS_MAX) {
                b->status = 400;
                snprintf(b->param, sizeof(b->param), "logprobs");
                snprintf(b->msg, sizeof(b->msg), "'logprobs' must be an integer in [0, %d] (completions)",
                         LOGPROBS_MAX);
                return -1;
            }
            r->logprobs = (int)json_integer_value(v);
        }
    }
    return 0;
}

void k25_serve_logprobs_free(struct sreq *r)
{
    free(r->lp);
    free(r->top_id);
    free(r->top_lp);
    free(r->lp_off);
    r->lp_off = NULL;
    r->lp = NULL;
    r->top_id = NULL;
    r->top_lp = NULL;
}

/*
 * The token's string as OpenAI writes it, and (bytes non-NULL) its bytes.  With the server's tokenizer
 * (a model folder's tokenizer.json): the token decoded alone, special tokens shown ("<|eot_id|>"), its
 * UTF-8 bytes; a token that is part of a multi-byte character decodes to U+FFFD, as vLLM shows it.
 * Without one (the presets' byte vocabulary): the byte when it is ASCII, else "bytes:\xHH" (one byte
 * of a multi-byte character) with the byte itself.  *adv: the characters it adds to the completion's
 * text (0 for a special token, which the text leaves out).
 */
static json_t *tok_json(const k25_tokenizer_t *tok, int32_t id, json_t **bytes, int *adv)
{
    char buf[32];
    if (!tok) {
        if (id >= 0 && id < 0x80)
            snprintf(buf, sizeof(buf), "%c", (char)id);
        else if (id >= 0x80 && id < 256)
            snprintf(buf, sizeof(buf), "bytes:\\x%02x", (unsigned)id);
        else
            snprintf(buf, sizeof(buf), "<%d>", (int)id); /* beyond the byte vocabulary */
        if (bytes)
            *bytes = id >= 0 && id < 256 ? json_pack("[i]", (int)id) : json_null();
        if (adv)
            *adv = id >= 0 && id < 256 ? 1 : 0;
        return json_string(buf);
    }
    char *text = NULL;
    size_t len = 0;
    struct k25_error e;
    json_t *s;
    if (k25_tokenizer_decode(tok, &id, 1, 0, &text, &len, &e) == K25_OK && len > 0) {
        s = json_stringn(text, len);
    } else { /* an id no token has (a padded vocabulary): its vocabulary string, else its number */
        const char *v = k25_tokenizer_id_to_token(tok, id);
        snprintf(buf, sizeof(buf), "token_id:%d", (int)id);
        s = json_string(v ? v : buf);
        len = 0;
    }
    if (bytes) {
        *bytes = json_array();
        for (size_t i = 0; i < len; i++)
            json_array_append_new(*bytes, json_integer((unsigned char)text[i]));
    }
    if (adv)
        *adv = k25_tokenizer_is_special(tok, id) ? 0 : (int)len;
    free(text);
    return s ? s : json_string("");
}

int k25_serve_logprobs_add(struct k25_serve *S, struct sreq *r, int handle, int idx)
{
    if (r->logprobs < 0)
        return 0;
    const struct k25_result *res = k25_engine_result(S->eng, handle);
    if (!res || !res->logits || idx >= res->n_output)
        return -1;
    const int V = S->vocab, k = r->logprobs;
    if (idx >= r->cap_lp) {
        int nc = r->cap_lp ? 2 * r->cap_lp : 64;
        while (nc <= idx)
            nc *= 2;
        float *nl = realloc(r->lp, sizeof(float) * (size_t)nc);
        if (nl)
            r->lp = nl;
        int32_t *ni = realloc(r->top_id, sizeof(int32_t) * (size_t)nc * (size_t)(k ? k : 1));
        if (ni)
            r->top_id = ni;
        float *nt = realloc(r->top_lp, sizeof(float) * (size_t)nc * (size_t)(k ? k : 1));
        if (nt)
            r->top_lp = nt;
        int *no = realloc(r->lp_off, sizeof(int) * ((size_t)nc + 1));
        if (no) {
            if (!r->lp_off)
                no[0] = 0;
            r->lp_off = no;
        }
        if (!nl || !ni || !nt || !no)
            return -1;
        r->cap_lp = nc;
    }
    const float *lg = res->logits + (size_t)idx * (size_t)V; /* [vocab] the token was chosen from */
    float mx = -INFINITY;
    for (int t = 0; t < V; t++)
        mx = lg[t] > mx ? lg[t] : mx;
    double z = 0;
    for (int t = 0; t < V; t++)
        z += exp((double)(lg[t] - mx));
    const double lse = (double)mx + log(z); /* log-softmax: logit - logsumexp */
    r->lp[idx] = (float)((double)lg[res->output_ids[idx]] - lse);
    /* the k most likely, by a partial selection (k <= 20) */
    int32_t *ti = r->top_id + (size_t)idx * (size_t)(k ? k : 1);
    float *tl = r->top_lp + (size_t)idx * (size_t)(k ? k : 1);
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int t = 0; t < V; t++) {
            bool taken = false;
            for (int q = 0; q < s && !taken; q++)
                taken = ti[q] == t;
            if (!taken && (best < 0 || lg[t] > lg[best]))
                best = t;
        }
        ti[s] = best;
        tl[s] = (float)((double)lg[best] - lse);
    }
    int adv = 0;
    json_decref(tok_json(r->lp_tok, res->output_ids[idx], NULL, &adv));
    r->lp_off[idx + 1] = r->lp_off[idx] + adv;
    r->n_lp = idx + 1;
    return 0;
}

json_t *k25_serve_logprobs_json(const struct sreq *r, int from, int n)
{
    if (r->logprobs < 0)
        return json_null();
    if (from + n > r->n_lp)
        n = r->n_lp - from > 0 ? r->n_lp - from : 0;
    const int k = r->logprobs;
    const k25_tokenizer_t *tok = r->lp_tok;
    if (r->chat) {
        json_t *content = json_array();
        for (int i = from; i < from + n; i++) {
            json_t *bytes, *top = json_array();
            for (int s = 0; s < k; s++) {
                json_t *tb;
                int32_t id = r->top_id[(size_t)i * (size_t)k + (size_t)s];
                json_t *t = tok_json(tok, id, &tb, NULL);
                json_array_append_new(top, json_pack("{s:o, s:f, s:o}", "token", t, "logprob",
                                                     (double)r->top_lp[(size_t)i * (size_t)k + (size_t)s], "bytes",
                                                     tb));
            }
            json_t *t = tok_json(tok, r->out[i], &bytes, NULL);
            json_array_append_new(content, json_pack("{s:o, s:f, s:o, s:o}", "token", t, "logprob", (double)r->lp[i],
                                                     "bytes", bytes, "top_logprobs", top));
        }
        return json_pack("{s:o}", "content", content);
    }
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int i = from; i < from + n; i++) {
        json_array_append_new(toks, tok_json(tok, r->out[i], NULL, NULL));
        json_array_append_new(lps, json_real((double)r->lp[i]));
        json_t *top = json_object();
        for (int s = 0; s < k; s++) {
            json_t *t = tok_json(tok, r->top_id[(size_t)i * (size_t)k + (size_t)s], NULL, NULL);
            double x = (double)r->top_lp[(size_t)i * (size_t)k + (size_t)s];
            json_object_set_new(top, json_string_value(t), json_real(x));
            json_decref(t);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(r->lp_off[i])); /* into the whole completion's text */
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops,
                     "text_offset", offs);
}
