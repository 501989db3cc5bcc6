/*
 * tok_decode.c - ids back to text, and the post-processor's template:
 *
 *   decoders        ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
 *                   Sequence, applied to the list of token strings in order as
 *                   HF's decode_chain does (no decoder: tokens joined with
 *                   spaces, as HF); the result is made valid UTF-8 the way
 *                   Rust's from_utf8_lossy does;
 *   post-processor  TemplateProcessing's "single" (ids before and after the
 *                   sequence), ByteLevel (no change to ids), Sequence;
 *   streaming       k25_tok_stream_*: HF's DecodeStream window (decode the
 *                   ids since the last chunk with the previous chunk's ids as
 *                   context; emit the difference unless the text ends with
 *                   U+FFFD, i.e. inside a character or a byte-fallback group).
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tok_parse_replacement(const struct tok_ctx *c, json_t *j, const char *path, char out[8], int *len,
                          struct k25_error *err);
int tok_parse_prepend(const struct tok_ctx *c, json_t *j, const char *path, enum tok_prepend *out,
                      struct k25_error *err);

static const char FFFD[3] = {(char)0xef, (char)0xbf, (char)0xbd};

/* ------------------------------------------------------------ decoders: loading */

static int push(struct tok_decs *d, struct tok_dec *x, struct k25_error *err)
{
    struct tok_dec *v = realloc(d->v, sizeof(*v) * (size_t)(d->n + 1));
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    d->v = v;
    d->v[d->n++] = *x;
    return K25_OK;
}

static int load_one(struct tok_decs *d, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    const char *type;
    char sub[512];
    int rc = tok_get_type(c, j, path, &type, err);
    if (rc != K25_OK)
        return rc;
    struct tok_dec x;
    memset(&x, 0, sizeof(x));
    if (!strcmp(type, "Sequence")) {
        json_t *list;
        if ((rc = tok_get(c, j, path, "decoders", true, &list, err)) != K25_OK)
            return rc;
        snprintf(sub, sizeof(sub), "%s/decoders", path);
        if (!json_is_array(list))
            return tok_err_type(c, sub, "an array", err);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char q[600];
            snprintf(q, sizeof(q), "%s/%zu", sub, i);
            if ((rc = load_one(d, c, json_array_get(list, i), q, err)) != K25_OK)
                return rc;
        }
        return K25_OK;
    }
    if (!strcmp(type, "ByteLevel")) {
        x.kind = TOK_DEC_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        x.kind = TOK_DEC_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        x.kind = TOK_DEC_FUSE;
    } else if (!strcmp(type, "Metaspace")) {
        x.kind = TOK_DEC_METASPACE;
        if ((rc = tok_parse_replacement(c, j, path, x.ch, &x.ch_len, err)) != K25_OK ||
            (rc = tok_parse_prepend(c, j, path, &x.prepend, err)) != K25_OK)
            return rc;
    } else if (!strcmp(type, "Strip")) {
        const char *s;
        int64_t a, b;
        x.kind = TOK_DEC_STRIP;
        if ((rc = tok_get_str(c, j, path, "content", true, &s, err)) != K25_OK ||
            (rc = tok_get_int(c, j, path, "start", true, 0, &a, err)) != K25_OK ||
            (rc = tok_get_int(c, j, path, "stop", true, 0, &b, err)) != K25_OK)
            return rc;
        size_t n = strlen(s);
        snprintf(sub, sizeof(sub), "%s/content", path);
        if (n == 0 || n > 4 || (size_t)tok_utf8_len((unsigned char)s[0]) != n)
            return tok_err_type(c, sub, "one character", err);
        if (a < 0 || b < 0 || a > 1 << 20 || b > 1 << 20)
            return tok_err_type(c, path, "start and stop in 0..1048576", err);
        memcpy(x.ch, s, n);
        x.ch_len = (int)n;
        x.start = (int)a;
        x.stop = (int)b;
    } else if (!strcmp(type, "Replace")) {
        const char *s;
        json_t *pat;
        x.kind = TOK_DEC_REPLACE;
        if ((rc = tok_get_str(c, j, path, "content", true, &s, err)) != K25_OK)
            return rc;
        snprintf(sub, sizeof(sub), "%s/pattern", path);
        if ((rc = tok_get(c, j, path, "pattern", true, &pat, err)) != K25_OK ||
            (rc = tok_pattern_parse(&x.pat, pat, c->file, sub, err)) != K25_OK)
            return rc;
        x.text_len = strlen(s);
        if (!(x.text = strdup(s))) {
            tok_pattern_free(&x.pat);
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
    } else {
        snprintf(sub, sizeof(sub), "%s/type", path);
        return tok_unsupported(c, sub, "decoder", type, err);
    }
    if ((rc = push(d, &x, err)) != K25_OK) {
        free(x.text);
        tok_pattern_free(&x.pat);
    }
    return rc;
}

int tok_decs_load(struct tok_decs *d, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    memset(d, 0, sizeof(*d));
    if (!j || json_is_null(j))
        return K25_OK;
    d->present = true;
    return load_one(d, c, j, path, err);
}

void tok_decs_free(struct tok_decs *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->v[i].text);
        tok_pattern_free(&d->v[i].pat);
    }
    free(d->v);
    memset(d, 0, sizeof(*d));
}

/* ------------------------------------------------------------ decoders: applying */

/* A list of byte strings: the token strings as the chain transforms them. */
struct pieces {
    struct tok_buf buf;
    size_t *off, *len;
    int n, cap;
};

static int pieces_add(struct pieces *p, const char *s, size_t n)
{
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 64;
        size_t *off = realloc(p->off, sizeof(size_t) * (size_t)cap);
        if (off)
            p->off = off;
        size_t *len = realloc(p->len, sizeof(size_t) * (size_t)cap);
        if (len)
            p->len = len;
        if (!off || !len)
            return K25_ENOMEM;
        p->cap = cap;
    }
    p->off[p->n] = p->buf.len;
    p->len[p->n] = n;
    p->n++;
    return tok_buf_put(&p->buf, s, n);
}

static void pieces_free(struct pieces *p)
{
    tok_buf_free(&p->buf);
    free(p->off);
    free(p->len);
    memset(p, 0, sizeof(*p));
}

#define PIECE(p, i) ((p)->buf.data + (p)->off[i])

/* "<0xXX>" -> the byte, -1 otherwise. */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char ch = s[i];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

struct repl_ctx {
    const char *s;
    size_t last;
    const struct tok_dec *d;
    struct tok_buf *out;
};

static int repl_match(void *user, size_t ms, size_t me)
{
    struct repl_ctx *r = user;
    if (tok_buf_put(r->out, r->s + r->last, ms - r->last) || tok_buf_put(r->out, r->d->text, r->d->text_len))
        return K25_ENOMEM;
    r->last = me;
    return K25_OK;
}

/* One decoder step: in -> out (out empty on entry). */
static int dec_step(const struct tok_dec *d, const struct pieces *in, struct pieces *out, pcre2_match_data *md,
                    struct k25_error *err)
{
    struct tok_buf tmp = {0};
    int rc = K25_OK;
    switch (d->kind) {
    case TOK_DEC_BYTELEVEL: {
        /* every token's characters back to bytes (a token with a character outside the alphabet
         * keeps its own bytes), one lossy UTF-8 string */
        struct tok_buf raw = {0};
        for (int i = 0; i < in->n && rc == K25_OK; i++) {
            const char *s = PIECE(in, i);
            size_t n = in->len[i], start = raw.len;
            bool ok = tok_utf8_check(s, n) == n;
            for (size_t k = 0; ok && k < n;) {
                int l;
                int b = tok_bytelevel_byte(tok_utf8_decode(s + k, &l));
                if (b < 0) {
                    ok = false;
                    break;
                }
                char ch = (char)b;
                if (tok_buf_put(&raw, &ch, 1))
                    rc = K25_ENOMEM;
                k += (size_t)l;
            }
            if (!ok) {
                raw.len = start;
                if (tok_buf_put(&raw, s, n))
                    rc = K25_ENOMEM;
            }
        }
        if (rc == K25_OK && (tok_utf8_lossy(&tmp, raw.data ? raw.data : "", raw.len) || pieces_add(out, tmp.data, tmp.len)))
            rc = K25_ENOMEM;
        tok_buf_free(&raw);
        break;
    }
    case TOK_DEC_BYTEFALLBACK: {
        struct tok_buf grp = {0};
        int ngrp = 0;
        for (int i = 0; i <= in->n && rc == K25_OK; i++) {
            int b = i < in->n ? fallback_byte(PIECE(in, i), in->len[i]) : -1;
            if (b >= 0) {
                char ch = (char)b;
                if (tok_buf_put(&grp, &ch, 1))
                    rc = K25_ENOMEM;
                ngrp++;
                continue;
            }
            if (ngrp) { /* a group ends: valid UTF-8 as it is, else one U+FFFD per byte (HF) */
                tmp.len = 0;
                if (tok_utf8_check(grp.data, grp.len) == grp.len) {
                    if (tok_buf_put(&tmp, grp.data, grp.len))
                        rc = K25_ENOMEM;
                } else {
                    for (int k = 0; k < ngrp && rc == K25_OK; k++)
                        if (tok_buf_put(&tmp, FFFD, 3))
                            rc = K25_ENOMEM;
                }
                if (rc == K25_OK && pieces_add(out, tmp.data, tmp.len))
                    rc = K25_ENOMEM;
                grp.len = 0;
                ngrp = 0;
            }
            if (i < in->n && rc == K25_OK && pieces_add(out, PIECE(in, i), in->len[i]))
                rc = K25_ENOMEM;
        }
        tok_buf_free(&grp);
        break;
    }
    case TOK_DEC_FUSE:
        for (int i = 0; i < in->n && rc == K25_OK; i++)
            if (tok_buf_put(&tmp, PIECE(in, i), in->len[i]))
                rc = K25_ENOMEM;
        if (rc == K25_OK && pieces_add(out, tmp.data ? tmp.data : "", tmp.len))
            rc = K25_ENOMEM;
        break;
    case TOK_DEC_STRIP:
        for (int i = 0; i < in->n && rc == K25_OK; i++) {
            const char *s = PIECE(in, i);
            size_t n = in->len[i], a = 0, b = n, cl = (size_t)d->ch_len;
            for (int k = 0; k < d->start && a + cl <= b && !memcmp(s + a, d->ch, cl); k++)
                a += cl;
            for (int k = 0; k < d->stop && b >= a + cl && !memcmp(s + b - cl, d->ch, cl); k++)
                b -= cl;
            if (pieces_add(out, s + a, b - a))
                rc = K25_ENOMEM;
        }
        break;
    case TOK_DEC_METASPACE:
        /* the replacement becomes a space; in the first token it is dropped (HF's decode_chain:
         * every replacement character of token 0, unless prepend_scheme is never) */
        for (int i = 0; i < in->n && rc == K25_OK; i++) {
            const char *s = PIECE(in, i);
            size_t n = in->len[i], cl = (size_t)d->ch_len;
            tmp.len = 0;
            for (size_t k = 0; k < n && rc == K25_OK;) {
                if (k + cl <= n && !memcmp(s + k, d->ch, cl)) {
                    if (!(i == 0 && d->prepend != TOK_PREPEND_NEVER) && tok_buf_put(&tmp, " ", 1))
                        rc = K25_ENOMEM;
                    k += cl;
                } else {
                    if (tok_buf_put(&tmp, s + k, 1))
                        rc = K25_ENOMEM;
                    k++;
                }
            }
            if (rc == K25_OK && pieces_add(out, tmp.data ? tmp.data : "", tmp.len))
                rc = K25_ENOMEM;
        }
        break;
    case TOK_DEC_REPLACE:
        for (int i = 0; i < in->n && rc == K25_OK; i++) {
            tmp.len = 0;
            struct repl_ctx r = {PIECE(in, i), 0, d, &tmp};
            rc = tok_pattern_each(&d->pat, PIECE(in, i), in->len[i], md, repl_match, &r, err);
            if (rc == K25_OK && (tok_buf_put(&tmp, PIECE(in, i) + r.last, in->len[i] - r.last) ||
                                 pieces_add(out, tmp.data, tmp.len)))
                rc = K25_ENOMEM;
        }
        break;
    }
    tok_buf_free(&tmp);
    if (rc == K25_ENOMEM)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    return rc;
}

int tok_decode_into(const struct k25_tokenizer *t, const int32_t *ids, int n, unsigned flags, struct tok_buf *out,
                    struct k25_error *err)
{
    struct pieces a = {0}, b = {0};
    int rc = K25_OK;
    out->len = 0;
    if (tok_buf_put(out, "", 0))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0) {
            rc = k25_error_set(err, K25_EINVAL, NULL, 0, "ids", "token id %d is negative", id);
            goto out;
        }
        if (id >= t->n_ids || !t->id_tok[id])
            continue; /* no token has the id (a model's padded vocab): nothing, as HF */
        if ((flags & K25_TOK_SKIP_SPECIAL) && t->id_special[id])
            continue;
        if (pieces_add(&a, t->id_tok[id], t->id_len[id]))
            goto oom;
    }
    if (!t->decs.present) {
        for (int i = 0; i < a.n; i++)
            if ((i && tok_buf_put(&b.buf, " ", 1)) || tok_buf_put(&b.buf, PIECE(&a, i), a.len[i]))
                goto oom;
        rc = tok_utf8_lossy(out, b.buf.data ? b.buf.data : "", b.buf.len) ? K25_ENOMEM : K25_OK;
        goto out;
    }
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    if (!md)
        goto oom;
    for (int k = 0; k < t->decs.n && rc == K25_OK; k++) {
        b.n = 0;
        b.buf.len = 0;
        rc = dec_step(&t->decs.v[k], &a, &b, md, err);
        struct pieces tmp = a;
        a = b;
        b = tmp;
    }
    pcre2_match_data_free(md);
    for (int i = 0; i < a.n && rc == K25_OK; i++)
        if (tok_utf8_lossy(out, PIECE(&a, i), a.len[i]))
            rc = K25_ENOMEM;
    if (rc == K25_ENOMEM)
        goto oom;
out:
    pieces_free(&a);
    pieces_free(&b);
    return rc;
oom:
    pieces_free(&a);
    pieces_free(&b);
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

/* ------------------------------------------------------------ post-processor */

static int post_one(struct tok_post *p, const struct tok_ctx *c, json_t *j, const char *path, bool *seen_tpl,
                    struct k25_error *err)
{
    const char *type;
    char sub[600];
    int rc = tok_get_type(c, j, path, &type, err);
    if (rc != K25_OK)
        return rc;
    if (!strcmp(type, "ByteLevel"))
        return K25_OK; /* offsets only: the ids are those of the sequence */
    if (!strcmp(type, "Sequence")) {
        json_t *list;
        if ((rc = tok_get(c, j, path, "processors", true, &list, err)) != K25_OK)
            return rc;
        snprintf(sub, sizeof(sub), "%s/processors", path);
        if (!json_is_array(list))
            return tok_err_type(c, sub, "an array", err);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char q[700];
            snprintf(q, sizeof(q), "%s/%zu", sub, i);
            if ((rc = post_one(p, c, json_array_get(list, i), q, seen_tpl, err)) != K25_OK)
                return rc;
        }
        return K25_OK;
    }
    if (strcmp(type, "TemplateProcessing")) {
        snprintf(sub, sizeof(sub), "%s/type", path);
        return tok_unsupported(c, sub, "post-processor", type, err);
    }
    if (*seen_tpl) {
        snprintf(sub, sizeof(sub), "%s", path);
        return tok_unsupported(c, sub, "post-processor", "a second TemplateProcessing", err);
    }
    *seen_tpl = true;
    json_t *single, *specials;
    if ((rc = tok_get(c, j, path, "single", true, &single, err)) != K25_OK ||
        (rc = tok_get(c, j, path, "special_tokens", false, &specials, err)) != K25_OK)
        return rc;
    snprintf(sub, sizeof(sub), "%s/single", path);
    if (!json_is_array(single))
        return tok_err_type(c, sub, "an array", err);
    bool seq_seen = false;
    for (size_t i = 0; i < json_array_size(single); i++) {
        char q[700];
        snprintf(q, sizeof(q), "%s/single/%zu", path, i);
        json_t *e = json_array_get(single, i), *st = json_object_get(e, "SpecialToken"),
               *sq = json_object_get(e, "Sequence");
        if (!json_is_object(e) || (st != NULL) == (sq != NULL))
            return tok_err_type(c, q, "{\"SpecialToken\": ...} or {\"Sequence\": ...}", err);
        if (sq) {
            const char *sid;
            if ((rc = tok_get_str(c, sq, q, "id", true, &sid, err)) != K25_OK)
                return rc;
            if (strcmp(sid, "A") || seq_seen) {
                return tok_fail(err, K25_EFORMAT, c->file, 0, q,
                                     "%s: %s/Sequence/id: a single-sequence template has one sequence \"A\"",
                                     c->file, q);
            }
            seq_seen = true;
            continue;
        }
        const char *name;
        json_t *tok, *ids;
        if ((rc = tok_get_str(c, st, q, "id", true, &name, err)) != K25_OK)
            return rc;
        tok = specials ? json_object_get(specials, name) : NULL;
        ids = tok ? json_object_get(tok, "ids") : NULL;
        if (!json_is_array(ids))
            return tok_fail(err, K25_EFORMAT, c->file, 0, q,
                                 "%s: %s/SpecialToken/id: \"%.200s\" has no ids in %s/special_tokens", c->file, q,
                                 name, path);
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *x = json_array_get(ids, k);
            if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= INT32_MAX / 2) {
                snprintf(q, sizeof(q), "%s/special_tokens/%.200s/ids/%zu", path, name, k);
                return tok_err_type(c, q, "a token id", err);
            }
            if (tok_ids_push(seq_seen ? &p->after : &p->before, (int32_t)json_integer_value(x)))
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
    }
    if (!seq_seen)
        return tok_fail(err, K25_EFORMAT, c->file, 0, sub, "%s: %s: no {\"Sequence\": {\"id\": \"A\"}}", c->file,
                             sub);
    return K25_OK;
}

int tok_post_load(struct tok_post *p, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    memset(p, 0, sizeof(*p));
    if (!j || json_is_null(j))
        return K25_OK;
    bool seen = false;
    return post_one(p, c, j, path, &seen, err);
}

void tok_post_free(struct tok_post *p)
{
    free(p->before.v);
    free(p->after.v);
    memset(p, 0, sizeof(*p));
}

/* ------------------------------------------------------------ streaming */

struct k25_tok_stream {
    const struct k25_tokenizer *t;
    unsigned flags;
    struct tok_ids ids;     /* context (prefix_n ids) + ids not yet emitted */
    int prefix_n;
    struct tok_buf prefix;  /* decode of the context */
    struct tok_buf text;    /* decode of the window */
    struct tok_buf chunk;   /* what the last call returned */
};

/* The window's text: decode through the tokenizer, or the bytes (NULL tokenizer) made lossy. */
static int window_decode(const struct k25_tok_stream *s, const int32_t *ids, int n, struct tok_buf *out,
                         struct k25_error *err)
{
    if (s->t)
        return tok_decode_into(s->t, ids, n, s->flags, out, err);
    char *b = malloc((size_t)n + 1);
    if (!b)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int i = 0; i < n; i++)
        b[i] = (char)ids[i];
    out->len = 0;
    int rc = tok_buf_put(out, "", 0) || tok_utf8_lossy(out, b, (size_t)n) ? K25_ENOMEM : K25_OK;
    free(b);
    return rc == K25_OK ? rc : k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

int k25_tok_stream_create(const k25_tokenizer_t *t, unsigned flags, k25_tok_stream_t **out, struct k25_error *err)
{
    struct k25_tok_stream *s = calloc(1, sizeof(*s));
    if (!s || tok_buf_put(&s->prefix, "", 0) || tok_buf_put(&s->chunk, "", 0)) {
        if (s)
            k25_tok_stream_destroy(s);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    s->t = t;
    s->flags = flags;
    *out = s;
    return K25_OK;
}

static bool ends_fffd(const struct tok_buf *b)
{
    return b->len >= 3 && !memcmp(b->data + b->len - 3, FFFD, 3);
}

/* Emits text beyond the context's (the common prefix, should the window's text not start
 * with it), then makes the window's new ids the next context. */
static int emit(struct k25_tok_stream *s, struct k25_error *err)
{
    size_t common = 0;
    while (common < s->prefix.len && common < s->text.len && s->prefix.data[common] == s->text.data[common])
        common++;
    if (common < s->prefix.len) /* not a prefix: back to a character boundary */
        while (common > 0 && ((unsigned char)s->text.data[common] & 0xc0) == 0x80)
            common--;
    s->chunk.len = 0;
    if (tok_buf_put(&s->chunk, s->text.data + common, s->text.len - common))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int keep = s->ids.n - s->prefix_n;
    memmove(s->ids.v, s->ids.v + s->prefix_n, sizeof(int32_t) * (size_t)keep);
    s->ids.n = keep;
    s->prefix_n = keep;
    return window_decode(s, s->ids.v, s->ids.n, &s->prefix, err);
}

int k25_tok_stream_push(k25_tok_stream_t *s, int32_t id, const char **text, size_t *len, struct k25_error *err)
{
    int rc;
    *text = "";
    *len = 0;
    if (s->t ? id < 0 : (id < 0 || id > 255))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "ids", "token id %d is outside the vocabulary", id);
    if (tok_ids_push(&s->ids, id))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if ((rc = window_decode(s, s->ids.v, s->ids.n, &s->text, err)) != K25_OK)
        return rc;
    if (s->text.len > s->prefix.len && !ends_fffd(&s->text)) {
        if ((rc = emit(s, err)) != K25_OK)
            return rc;
        *text = s->chunk.data;
        *len = s->chunk.len;
    }
    return K25_OK;
}

int k25_tok_stream_flush(k25_tok_stream_t *s, const char **text, size_t *len, struct k25_error *err)
{
    int rc;
    *text = "";
    *len = 0;
    if ((rc = window_decode(s, s->ids.v, s->ids.n, &s->text, err)) != K25_OK)
        return rc;
    if (s->text.len > s->prefix.len) {
        if ((rc = emit(s, err)) != K25_OK)
            return rc;
        *text = s->chunk.data;
        *len = s->chunk.len;
    }
    s->ids.n = 0;
    s->prefix_n = 0;
    s->prefix.len = 0;
    s->prefix.data[0] = 0;
    return K25_OK;
}

void k25_tok_stream_destroy(k25_tok_stream_t *s)
{
    if (!s)
        return;
    free(s->ids.v);
    tok_buf_free(&s->prefix);
    tok_buf_free(&s->text);
    tok_buf_free(&s->chunk);
    free(s);
}
