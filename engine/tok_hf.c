/*
 * tok_hf.c - a model folder's Hugging Face tokenizer.json (k25_tok.h):
 * loading (every component checked, errors with the file and JSON path),
 * the encode pipeline, and the public entry points, which also serve the
 * byte tokenizer of the presets when the handle is NULL.
 *
 * Encode, as HF's Tokenizer::encode(text, add_special_tokens):
 *   1. added tokens with normalized=false are cut out of the text;
 *   2. each piece between them is normalized, then added tokens with
 *      normalized=true are cut out of the normalized piece;
 *   3. each remaining piece is pre-tokenized into words and each word goes
 *      through the BPE model;
 *   4. with K25_TOK_ADD_SPECIAL the post-processor's template wraps the ids.
 */
#include "tok_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int oom(struct k25_error *err)
{
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

/* ------------------------------------------------------------ loading */

/* A whole file; *missing when it does not exist (k25_file_read). */
static char *slurp(const char *path, size_t *len, bool *missing, struct k25_error *err)
{
    char *buf = k25_file_read(path, len, err);
    *missing = !buf && err && err->code == K25_ENOTFOUND;
    return buf;
}

/* Refuses a top-level member that would change the ids and that k25 does not implement. */
static int refuse_if_set(const struct tok_ctx *c, json_t *root, const char *key, const char *what,
                         struct k25_error *err)
{
    json_t *v = json_object_get(root, key);
    if (v && !json_is_null(v)) {
        char p[64];
        snprintf(p, sizeof(p), "/%s", key);
        return tok_fail(err, K25_EUNSUPPORTED, c->file, 0, p, "%s: %s: %s is not supported (null only)", c->file,
                             p, what);
    }
    return K25_OK;
}

/* The id -> string table over the vocab and the added tokens. */
static int build_id_table(struct k25_tokenizer *t, struct k25_error *err)
{
    int32_t n = t->bpe.n_ids;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.v[i].id + 1 > n)
            n = t->added.v[i].id + 1;
    t->n_ids = n;
    t->id_tok = calloc((size_t)n + 1, sizeof(char *));
    t->id_len = calloc((size_t)n + 1, sizeof(uint32_t));
    t->id_special = calloc((size_t)n + 1, 1);
    t->id_added = calloc((size_t)n + 1, 1);
    if (!t->id_tok || !t->id_len || !t->id_special || !t->id_added)
        return oom(err);
    for (int32_t i = 0; i < t->bpe.n_ids; i++) {
        t->id_tok[i] = t->bpe.str[i];
        t->id_len[i] = t->bpe.len[i];
    }
    for (int i = 0; i < t->added.n; i++) {
        const struct tok_added *a = &t->added.v[i];
        t->id_tok[a->id] = a->content;
        t->id_len[a->id] = (uint32_t)a->len;
        t->id_special[a->id] = a->special;
        t->id_added[a->id] = 1;
    }
    return K25_OK;
}

/* tokenizer_config.json: the chat template (a string, or a list of {name, template}). */
static void load_config(struct k25_tokenizer *t, const char *cfg, size_t len, const char *name)
{
    json_error_t je;
    t->chat = K25_CHAT_NONE;
    if (!cfg) {
        snprintf(t->chat_why, sizeof(t->chat_why), "%s is absent", name);
        return;
    }
    /* as real ones have: "model_max_length": 1000000000000000019884624838656 (no int64): a real number */
    json_t *root = json_loadb(cfg, len, JSON_DECODE_INT_AS_REAL, &je);
    if (!root) {
        snprintf(t->chat_why, sizeof(t->chat_why), "%s:%d:%d: %s", name, je.line, je.column, je.text);
        return;
    }
    json_t *ct = json_object_get(root, "chat_template");
    const char *tpl = json_is_string(ct) ? json_string_value(ct) : NULL;
    if (json_is_array(ct)) {
        for (size_t i = 0; i < json_array_size(ct); i++) {
            json_t *e = json_array_get(ct, i);
            if (json_is_string(json_object_get(e, "name")) && !strcmp(json_string_value(json_object_get(e, "name")), "default"))
                tpl = json_string_value(json_object_get(e, "template"));
        }
    }
    if (!tpl)
        snprintf(t->chat_why, sizeof(t->chat_why), "%s has no chat_template", name);
    else if ((t->chat = tok_chat_recognise(tpl)) == K25_CHAT_NONE)
        snprintf(t->chat_why, sizeof(t->chat_why), "%s: chat_template is not one of the named templates (%s)", name,
                 k25_chat_template_names());
    json_decref(root);
}

int k25_tokenizer_load_mem(const char *json, size_t len, const char *config, size_t config_len, const char *name,
                           k25_tokenizer_t **out, struct k25_error *err)
{
    *out = NULL;
    struct k25_tokenizer *t = calloc(1, sizeof(*t));
    if (!t)
        return oom(err);
    snprintf(t->source, sizeof(t->source), "%s", name ? name : "tokenizer.json");
    struct tok_ctx c = {t->source};
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &je);
    int rc;
    if (!root) {
        rc = tok_fail(err, K25_EFORMAT, t->source, je.line, NULL, "%s:%d:%d: %s", t->source, je.line, je.column,
                           je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = tok_err_type(&c, "/", "an object", err);
        goto fail;
    }
    json_t *v;
    if ((rc = refuse_if_set(&c, root, "truncation", "truncation", err)) != K25_OK ||
        (rc = refuse_if_set(&c, root, "padding", "padding", err)) != K25_OK)
        goto fail;
    if ((rc = tok_get(&c, root, "", "model", true, &v, err)) != K25_OK || (rc = tok_bpe_load(&t->bpe, &c, v, err)))
        goto fail;
    if ((rc = tok_get(&c, root, "", "normalizer", false, &v, err)) != K25_OK ||
        (rc = tok_norms_load(&t->norms, &c, v, "/normalizer", err)) != K25_OK)
        goto fail;
    if ((rc = tok_get(&c, root, "", "pre_tokenizer", false, &v, err)) != K25_OK ||
        (rc = tok_pres_load(&t->pres, &c, v, "/pre_tokenizer", err)) != K25_OK)
        goto fail;
    if ((rc = tok_get(&c, root, "", "added_tokens", false, &v, err)) != K25_OK ||
        (rc = tok_addeds_load(&t->added, &c, v, &t->norms, err)) != K25_OK)
        goto fail;
    if ((rc = tok_get(&c, root, "", "post_processor", false, &v, err)) != K25_OK ||
        (rc = tok_post_load(&t->post, &c, v, "/post_processor", err)) != K25_OK)
        goto fail;
    if ((rc = tok_get(&c, root, "", "decoder", false, &v, err)) != K25_OK ||
        (rc = tok_decs_load(&t->decs, &c, v, "/decoder", err)) != K25_OK)
        goto fail;
    if ((rc = build_id_table(t, err)) != K25_OK)
        goto fail;
    for (int i = 0; i < t->post.before.n + t->post.after.n; i++) {
        int32_t id = i < t->post.before.n ? t->post.before.v[i] : t->post.after.v[i - t->post.before.n];
        if (id >= t->n_ids || !t->id_tok[id]) {
            rc = tok_fail(err, K25_EFORMAT, t->source, 0, "/post_processor",
                               "%s: /post_processor: the template's token id %d is in neither /model/vocab nor "
                               "/added_tokens", t->source, id);
            goto fail;
        }
    }
    json_decref(root);
    load_config(t, config, config_len, "tokenizer_config.json");
    *out = t;
    return K25_OK;
fail:
    json_decref(root);
    k25_tokenizer_destroy(t);
    return rc;
}

int k25_tokenizer_load(const char *dir, k25_tokenizer_t **out, struct k25_error *err)
{
    char path[1100], cpath[1100], jpath[1100];
    size_t len, clen = 0, jlen = 0;
    bool missing;
    *out = NULL;
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    snprintf(cpath, sizeof(cpath), "%s/tokenizer_config.json", dir);
    snprintf(jpath, sizeof(jpath), "%s/chat_template.jinja", dir);
    char *json = slurp(path, &len, &missing, err);
    if (!json) {
        if (missing)
            tok_fail(err, K25_ENOTFOUND, path, 0, NULL,
                          "%s: file not found (a model folder needs a Hugging Face tokenizer.json for text)", path);
        return err->code;
    }
    struct k25_error cerr;
    char *cfg = slurp(cpath, &clen, &missing, &cerr);
    int rc = k25_tokenizer_load_mem(json, len, cfg, clen, path, out, err);
    if (rc == K25_OK) {
        struct k25_tokenizer *t = *out;
        snprintf(t->config_path, sizeof(t->config_path), "%s", cpath);
        load_config(t, cfg, clen, cpath);
        if (t->chat == K25_CHAT_NONE) { /* newer folders keep the template in its own file */
            char *jt = slurp(jpath, &jlen, &missing, &cerr);
            if (jt && (t->chat = tok_chat_recognise(jt)) == K25_CHAT_NONE)
                snprintf(t->chat_why, sizeof(t->chat_why), "%s: the template is not one of the named templates (%s)",
                         jpath, k25_chat_template_names());
            free(jt);
        }
    }
    free(json);
    free(cfg);
    return rc;
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int k25_tokenizer_for_model(const struct k25_config *cfg, k25_tokenizer_t **out, struct k25_error *err)
{
    struct k25_model_shape sh;
    *out = NULL;
    if (k25_model_preset(cfg->model, &sh) == K25_OK)
        return K25_OK; /* a preset (before a folder of that name, as k25_model_load): bytes */
    if (!is_dir(cfg->model))
        return k25_error_set(err, K25_ENOTFOUND, NULL, 0, "model", "'%s' is neither a preset (%s) nor a model directory",
                             cfg->model, k25_model_preset_names());
    return k25_tokenizer_load(cfg->model, out, err);
}

void k25_tokenizer_destroy(k25_tokenizer_t *t)
{
    if (!t)
        return;
    tok_bpe_free(&t->bpe);
    tok_norms_free(&t->norms);
    tok_pres_free(&t->pres);
    tok_addeds_free(&t->added);
    tok_decs_free(&t->decs);
    tok_post_free(&t->post);
    free(t->id_tok);
    free(t->id_len);
    free(t->id_special);
    free(t->id_added);
    free(t);
}

int32_t k25_tokenizer_vocab_size(const k25_tokenizer_t *t)
{
    return t ? t->n_ids : 256;
}

const char *k25_tokenizer_source(const k25_tokenizer_t *t)
{
    return t ? t->source : "bytes";
}

const char *k25_tokenizer_id_to_token(const k25_tokenizer_t *t, int32_t id)
{
    if (!t || id < 0 || id >= t->n_ids)
        return NULL;
    return t->id_tok[id];
}

int32_t k25_tokenizer_token_to_id(const k25_tokenizer_t *t, const char *token, size_t len)
{
    if (!t)
        return len == 1 ? (unsigned char)token[0] : -1;
    for (int i = 0; i < t->added.n; i++)
        if (t->added.v[i].len == len && !memcmp(t->added.v[i].content, token, len))
            return t->added.v[i].id;
    return tok_strmap_get(&t->bpe.vocab, token, len);
}

bool k25_tokenizer_is_special(const k25_tokenizer_t *t, int32_t id)
{
    return t && id >= 0 && id < t->n_ids && t->id_special[id];
}

/* ------------------------------------------------------------ encode */

struct enc {
    const struct k25_tokenizer *t;
    pcre2_match_data *md;
    struct tok_buf norm;
    struct tok_words words, scratch;
    struct tok_ids *out;
};

/* Step 3: pre-tokenize s[n] and run the model over its words. */
static int enc_words(struct enc *e, const char *s, size_t n, bool at_start, struct k25_error *err)
{
    int rc;
    if (n == 0)
        return K25_OK;
    if ((rc = tok_pres_apply(&e->t->pres, s, n, at_start, e->md, &e->words, &e->scratch, err)) != K25_OK)
        return rc;
    for (int i = 0; i < e->words.n; i++)
        if (tok_bpe_word(&e->t->bpe, e->words.buf.data + e->words.off[i], e->words.len[i], e->out))
            return oom(err);
    return K25_OK;
}

/* Step 2 for one piece s[n] of the input (at_start: it begins the text). */
static int enc_piece(struct enc *e, const char *s, size_t n, bool at_start, struct k25_error *err)
{
    int rc;
    if (n == 0)
        return K25_OK;
    if (e->t->norms.n == 0 && tok_trie_empty(e->t->added.norm))
        return enc_words(e, s, n, at_start, err);
    if ((rc = tok_norms_apply(&e->t->norms, s, n, e->md, &e->norm, err)) != K25_OK)
        return rc;
    /* the normalized text lives in e->norm until this piece is done: move it out */
    struct tok_buf nb = e->norm;
    memset(&e->norm, 0, sizeof(e->norm));
    struct tok_match *m = NULL;
    int nm = 0;
    if (!tok_trie_empty(e->t->added.norm) && tok_addeds_find(&e->t->added, e->t->added.norm, nb.data, nb.len, &m, &nm)) {
        tok_buf_free(&nb);
        return oom(err);
    }
    size_t pos = 0;
    rc = K25_OK;
    for (int i = 0; i <= nm && rc == K25_OK; i++) {
        size_t end = i < nm ? m[i].start : nb.len;
        if (end > pos)
            rc = enc_words(e, nb.data + pos, end - pos, at_start && pos == 0, err);
        if (i < nm && rc == K25_OK) {
            if (tok_ids_push(e->out, e->t->added.v[m[i].index].id))
                rc = oom(err);
            pos = m[i].end;
        }
    }
    free(m);
    tok_buf_free(&nb);
    return rc;
}

int k25_tokenizer_encode(const k25_tokenizer_t *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                         int *n_ids, struct k25_error *err)
{
    *ids = NULL;
    *n_ids = 0;
    if (len > (size_t)INT32_MAX / 2)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "text", "text of %zu bytes is too long", len);
    if (!t)
        return k25_tok_encode(text, len, ids, n_ids, err);
    size_t bad = tok_utf8_check(text, len);
    if (bad != len)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "text", "text is not valid UTF-8 (byte %zu)", bad);
    struct tok_ids out = {0};
    struct enc e = {.t = t, .out = &out};
    int rc = K25_OK;
    e.md = pcre2_match_data_create(32, NULL);
    struct tok_match *m = NULL;
    int nm = 0;
    if (!e.md || tok_ids_push(&out, 0) || (out.n = 0, 0)) {
        rc = oom(err);
        goto out;
    }
    if ((flags & K25_TOK_ADD_SPECIAL) && t->post.before.n && tok_ids_put(&out, t->post.before.v, t->post.before.n)) {
        rc = oom(err);
        goto out;
    }
    if (!tok_trie_empty(t->added.raw) && tok_addeds_find(&t->added, t->added.raw, text, len, &m, &nm)) {
        rc = oom(err);
        goto out;
    }
    size_t pos = 0;
    for (int i = 0; i <= nm && rc == K25_OK; i++) {
        size_t end = i < nm ? m[i].start : len;
        if (end > pos)
            rc = enc_piece(&e, text + pos, end - pos, pos == 0, err);
        if (i < nm && rc == K25_OK) {
            if (tok_ids_push(&out, t->added.v[m[i].index].id))
                rc = oom(err);
            pos = m[i].end;
        }
    }
    if (rc == K25_OK && (flags & K25_TOK_ADD_SPECIAL) && t->post.after.n &&
        tok_ids_put(&out, t->post.after.v, t->post.after.n))
        rc = oom(err);
out:
    free(m);
    pcre2_match_data_free(e.md);
    tok_buf_free(&e.norm);
    tok_words_free(&e.words);
    tok_words_free(&e.scratch);
    if (rc != K25_OK) {
        free(out.v);
        return rc;
    }
    *ids = out.v;
    *n_ids = out.n;
    return K25_OK;
}

int k25_tokenizer_decode(const k25_tokenizer_t *t, const int32_t *ids, int n_ids, unsigned flags, char **text,
                         size_t *len, struct k25_error *err)
{
    struct tok_buf out = {0};
    *text = NULL;
    if (len)
        *len = 0;
    int rc;
    if (!t) {
        char *b = malloc((size_t)n_ids + 1);
        if (!b)
            return oom(err);
        for (int i = 0; i < n_ids; i++) {
            if (ids[i] < 0 || ids[i] > 255) {
                free(b);
                return k25_error_set(err, K25_EINVAL, NULL, 0, "ids",
                                     "token id %d is outside the byte tokenizer's vocabulary (0..255)", ids[i]);
            }
            b[i] = (char)ids[i];
        }
        rc = tok_buf_put(&out, "", 0) || tok_utf8_lossy(&out, b, (size_t)n_ids) ? oom(err) : K25_OK;
        free(b);
    } else {
        rc = tok_decode_into(t, ids, n_ids, flags, &out, err);
    }
    if (rc != K25_OK) {
        tok_buf_free(&out);
        return rc;
    }
    *text = out.data;
    if (len)
        *len = out.len;
    return K25_OK;
}
