/*
 * request.c - one gold-set request: freeing it, the input text the engine
 * sees (prompt + text), and writing it back as a JSONL line (used by
 * `k25 gold select` and the generator, so both emit the same schema).
 */
#include "gold.h"
#include "gold_internal.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void k25_gold_request_free(struct k25_gold_request *r)
{
    if (!r)
        return;
    free(r->id);
    free(r->text);
    free(r->input_ids);
    free(r->domain);
    free(r->prompt);
    free(r->prefix_id);
    free(r->meta_json);
    free(r->extra_json);
    memset(r, 0, sizeof(*r));
}

int k25_gold_request_input(const struct k25_gold_request *r, char **out, size_t *len,
                           struct k25_error *err)
{
    *out = NULL;
    *len = 0;
    if (!r->text)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "text",
                             "request '%s' has input_ids, not text", r->id ? r->id : "?");
    size_t plen = r->prompt ? strlen(r->prompt) : 0;
    size_t n = plen ? plen + K25_GOLD_PROMPT_SEP_LEN + r->text_len : r->text_len;
    char *s = malloc(n + 1);
    if (!s)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (%zu bytes)", n + 1);
    size_t w = 0;
    if (plen) {
        memcpy(s, r->prompt, plen);
        memcpy(s + plen, K25_GOLD_PROMPT_SEP, K25_GOLD_PROMPT_SEP_LEN);
        w = plen + K25_GOLD_PROMPT_SEP_LEN;
    }
    memcpy(s + w, r->text, r->text_len);
    s[n] = 0;
    *out = s;
    *len = n;
    return 0;
}

const char *k25_gold_hint_name(enum k25_hint h)
{
    switch (h) {
    case K25_HINT_AUTO: return "auto";
    case K25_HINT_LEGAL_DOC: return "legal_doc";
    case K25_HINT_PLAIN_TEXT: return "plain_text";
    }
    return "auto";
}

/* Adds key: JSON text (an object parsed back) to o; false on failure. */
static bool set_json_text(json_t *o, const char *key, const char *text)
{
    json_error_t je;
    json_t *v = json_loads(text, JSON_ALLOW_NUL, &je);
    return v && json_object_set_new(o, key, v) == 0;
}

/*
 * Builds the JSON object in schema order (id, text | input_ids,
 * expected_output_length, domain, prompt, block_pattern_hint, priority,
 * meta, then unknown fields as they were) and writes it compactly with a newline.
 * Strings are known-valid UTF-8 here, so the *_nocheck constructors spare
 * jansson a second validation of long texts.
 */
int k25_gold_request_write(FILE *out, const struct k25_gold_request *r, struct k25_error *err)
{
    int rc = K25_ENOMEM;
    char *s = NULL;
    json_t *o = json_object();
    if (!o)
        goto out_oom;
    if (json_object_set_new(o, "id", json_string_nocheck(r->id)))
        goto out_free_json;
    if (r->text) {
        if (json_object_set_new(o, "text", json_stringn_nocheck(r->text, r->text_len)))
            goto out_free_json;
    } else {
        json_t *a = json_array();
        if (!a || json_object_set_new(o, "input_ids", a))
            goto out_free_json;
        for (size_t i = 0; i < r->n_input_ids; i++)
            if (json_array_append_new(a, json_integer(r->input_ids[i])))
                goto out_free_json;
    }
    if (json_object_set_new(o, "expected_output_length", json_integer(r->expected_output_length)))
        goto out_free_json;
    if (r->domain && json_object_set_new(o, "domain", json_string_nocheck(r->domain)))
        goto out_free_json;
    if (r->prompt && json_object_set_new(o, "prompt", json_string_nocheck(r->prompt)))
        goto out_free_json;
    if (r->hint != K25_HINT_AUTO &&
        json_object_set_new(o, "block_pattern_hint", json_string(k25_gold_hint_name(r->hint))))
        goto out_free_json;
    if (r->priority != K25_PRIORITY_STANDARD &&
        json_object_set_new(o, "priority", json_string(k25_priority_name(r->priority))))
        goto out_free_json;
    if (r->prefix_id && json_object_set_new(o, "prefix_id", json_string_nocheck(r->prefix_id)))
        goto out_free_json;
    if (r->meta_json && !set_json_text(o, "meta", r->meta_json))
        goto out_free_json;
    if (r->extra_json) {
        json_error_t je;
        json_t *x = json_loads(r->extra_json, JSON_ALLOW_NUL, &je);
        if (!x)
            goto out_free_json;
        json_object_update(o, x);
        json_decref(x);
    }
    s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s)
        goto out_free_json;
    size_t n = strlen(s);
    if (fwrite(s, 1, n, out) != n || fputc('\n', out) == EOF) {
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "writing request '%s': write failed",
                           r->id);
        goto out_free_str;
    }
    rc = 0;
out_free_str:
    free(s);
out_free_json:
    json_decref(o);
    if (rc == K25_ENOMEM)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "writing request '%s': out of memory",
                             r->id ? r->id : "?");
    return rc;
out_oom:
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}
