/*
 * tok_pre.c - tokenizer.json pre-tokenizers: Split (the model's regex
 * through PCRE2 with UTF + UCP, or a literal; behaviors Removed, Isolated,
 * MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel
 * (GPT-2's byte -> character alphabet, optional prefix space and GPT-2
 * regex), Metaspace (replacement character, prepend_scheme, split) and
 * Sequence.  Each step turns the list of words into a new list, as HF's
 * PreTokenizedString::split does; empty words are dropped.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* GPT-2's pre-tokenization regex (ByteLevel with use_regex). */
static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* ------------------------------------------------------------ byte-level alphabet */

/* bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
 * U+0100.. in byte order. */
uint32_t tok_bytelevel_char(unsigned char b)
{
    static uint32_t map[256];
    static int ready;
    if (!__atomic_load_n(&ready, __ATOMIC_ACQUIRE)) {
        uint32_t m[256];
        int k = 0;
        for (int i = 0; i < 256; i++) {
            bool keep = (i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255);
            m[i] = keep ? (uint32_t)i : 256u + (uint32_t)k++;
        }
        memcpy(map, m, sizeof(map));
        __atomic_store_n(&ready, 1, __ATOMIC_RELEASE);
    }
    return map[b];
}

int tok_bytelevel_byte(uint32_t cp)
{
    if (cp < 256)
        return tok_bytelevel_char((unsigned char)cp) == cp ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    for (int b = 0; b < 256; b++)
        if (tok_bytelevel_char((unsigned char)b) == cp)
            return b;
    return -1;
}

static pthread_once_t bl_once = PTHREAD_ONCE_INIT;
static void bl_init(void);

/* ------------------------------------------------------------ words */

int tok_words_add(struct tok_words *w, const char *s, size_t n, bool first)
{
    if (n == 0)
        return K25_OK;
    if (w->n == w->cap) {
        int cap = w->cap ? w->cap * 2 : 64;
        size_t *off = realloc(w->off, sizeof(size_t) * (size_t)cap);
        if (off)
            w->off = off;
        size_t *len = realloc(w->len, sizeof(size_t) * (size_t)cap);
        if (len)
            w->len = len;
        bool *fi = realloc(w->first, sizeof(bool) * (size_t)cap);
        if (fi)
            w->first = fi;
        if (!off || !len || !fi)
            return K25_ENOMEM;
        w->cap = cap;
    }
    w->off[w->n] = w->buf.len;
    w->len[w->n] = n;
    w->first[w->n] = first;
    if (tok_buf_put(&w->buf, s, n))
        return K25_ENOMEM;
    w->n++;
    return K25_OK;
}

void tok_words_reset(struct tok_words *w)
{
    w->n = 0;
    w->buf.len = 0;
}

void tok_words_free(struct tok_words *w)
{
    tok_buf_free(&w->buf);
    free(w->off);
    free(w->len);
    free(w->first);
    memset(w, 0, sizeof(*w));
}

/* ------------------------------------------------------------ loading */

static int push(struct tok_pres *ps, struct tok_pre *p, struct k25_error *err)
{
    struct tok_pre *v = realloc(ps->v, sizeof(*v) * (size_t)(ps->n + 1));
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    ps->v = v;
    ps->v[ps->n++] = *p;
    return K25_OK;
}

static int parse_prepend(const struct tok_ctx *c, json_t *j, const char *path, enum tok_prepend *out,
                         struct k25_error *err)
{
    const char *s;
    char sub[512];
    int rc = tok_get_str(c, j, path, "prepend_scheme", false, &s, err);
    if (rc != K25_OK)
        return rc;
    if (!s) { /* older files: add_prefix_space */
        bool aps;
        if ((rc = tok_get_bool(c, j, path, "add_prefix_space", true, &aps, err)) != K25_OK)
            return rc;
        *out = aps ? TOK_PREPEND_ALWAYS : TOK_PREPEND_NEVER;
        return K25_OK;
    }
    snprintf(sub, sizeof(sub), "%s/prepend_scheme", path);
    if (!strcmp(s, "always"))
        *out = TOK_PREPEND_ALWAYS;
    else if (!strcmp(s, "first"))
        *out = TOK_PREPEND_FIRST;
    else if (!strcmp(s, "never"))
        *out = TOK_PREPEND_NEVER;
    else
        return tok_unsupported(c, sub, "prepend_scheme", s, err);
    return K25_OK;
}

/* The replacement character of Metaspace (decoder too): exactly one character. */
int tok_parse_replacement(const struct tok_ctx *c, json_t *j, const char *path, char out[8], int *len,
                          struct k25_error *err);
int tok_parse_replacement(const struct tok_ctx *c, json_t *j, const char *path, char out[8], int *len,
                          struct k25_error *err)
{
    const char *s;
    char sub[512];
    int rc = tok_get_str(c, j, path, "replacement", true, &s, err);
    if (rc != K25_OK)
        return rc;
    snprintf(sub, sizeof(sub), "%s/replacement", path);
    size_t n = strlen(s);
    if (n == 0 || n > 4 || (size_t)tok_utf8_len((unsigned char)s[0]) != n || tok_utf8_check(s, n) != n)
        return tok_err_type(c, sub, "one character", err);
    memcpy(out, s, n);
    *len = (int)n;
    return K25_OK;
}

int tok_parse_prepend(const struct tok_ctx *c, json_t *j, const char *path, enum tok_prepend *out,
                      struct k25_error *err);
int tok_parse_prepend(const struct tok_ctx *c, json_t *j, const char *path, enum tok_prepend *out,
                      struct k25_error *err)
{
    return parse_prepend(c, j, path, out, err);
}

static int load_one(struct tok_pres *ps, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    const char *type;
    char sub[512];
    int rc = tok_get_type(c, j, path, &type, err);
    if (rc != K25_OK)
        return rc;
    struct tok_pre p;
    memset(&p, 0, sizeof(p));
    if (!strcmp(type, "Sequence")) {
        json_t *list;
        if ((rc = tok_get(c, j, path, "pretokenizers", true, &list, err)) != K25_OK)
            return rc;
        snprintf(sub, sizeof(sub), "%s/pretokenizers", path);
        if (!json_is_array(list))
            return tok_err_type(c, sub, "an array", err);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char q[600];
            snprintf(q, sizeof(q), "%s/%zu", sub, i);
            if ((rc = load_one(ps, c, json_array_get(list, i), q, err)) != K25_OK)
                return rc;
        }
        return K25_OK;
    }
    if (!strcmp(type, "Split")) {
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                            "Contiguous"};
        const char *b;
        json_t *pat;
        p.kind = TOK_PRE_SPLIT;
        if ((rc = tok_get_str(c, j, path, "behavior", true, &b, err)) != K25_OK ||
            (rc = tok_get_bool(c, j, path, "invert", false, &p.invert, err)) != K25_OK)
            return rc;
        int k = 0;
        while (k < 5 && strcmp(names[k], b))
            k++;
        snprintf(sub, sizeof(sub), "%s/behavior", path);
        if (k == 5)
            return tok_unsupported(c, sub, "split behavior", b, err);
        p.behavior = (enum tok_split_behavior)k;
        snprintf(sub, sizeof(sub), "%s/pattern", path);
        if ((rc = tok_get(c, j, path, "pattern", true, &pat, err)) != K25_OK ||
            (rc = tok_pattern_parse(&p.pat, pat, c->file, sub, err)) != K25_OK)
            return rc;
    } else if (!strcmp(type, "ByteLevel")) {
        p.kind = TOK_PRE_BYTELEVEL;
        if ((rc = tok_get_bool(c, j, path, "add_prefix_space", true, &p.add_prefix_space, err)) != K25_OK ||
            (rc = tok_get_bool(c, j, path, "use_regex", true, &p.use_regex, err)) != K25_OK)
            return rc;
        if (p.use_regex) {
            p.pat.is_regex = true;
            if ((rc = tok_regex_compile(&p.pat.re, GPT2_RE, strlen(GPT2_RE), c->file, path, err)) != K25_OK)
                return rc;
        }
    } else if (!strcmp(type, "Metaspace")) {
        p.kind = TOK_PRE_METASPACE;
        if ((rc = tok_parse_replacement(c, j, path, p.repl, &p.repl_len, err)) != K25_OK ||
            (rc = parse_prepend(c, j, path, &p.prepend, err)) != K25_OK ||
            (rc = tok_get_bool(c, j, path, "split", true, &p.split, err)) != K25_OK)
            return rc;
    } else {
        snprintf(sub, sizeof(sub), "%s/type", path);
        return tok_unsupported(c, sub, "pre-tokenizer", type, err);
    }
    if ((rc = push(ps, &p, err)) != K25_OK)
        tok_pattern_free(&p.pat);
    return rc;
}

int tok_pres_load(struct tok_pres *ps, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    memset(ps, 0, sizeof(*ps));
    pthread_once(&bl_once, bl_init);
    if (!j || json_is_null(j))
        return K25_OK;
    return load_one(ps, c, j, path, err);
}

void tok_pres_free(struct tok_pres *ps)
{
    for (int i = 0; i < ps->n; i++)
        tok_pattern_free(&ps->v[i].pat);
    free(ps->v);
    memset(ps, 0, sizeof(*ps));
}

/* ------------------------------------------------------------ splitting */

struct seg {
    size_t s, e;
    bool match;
};
struct segs {
    struct seg *v;
    int n, cap;
    size_t prev;
};

static int seg_add(struct segs *g, size_t s, size_t e, bool match)
{
    if (g->n == g->cap) {
        int cap = g->cap ? g->cap * 2 : 32;
        struct seg *v = realloc(g->v, sizeof(*v) * (size_t)cap);
        if (!v)
            return K25_ENOMEM;
        g->v = v;
        g->cap = cap;
    }
    g->v[g->n++] = (struct seg){s, e, match};
    return K25_OK;
}

static int on_match(void *user, size_t ms, size_t me)
{
    struct segs *g = user;
    if (g->prev != ms && seg_add(g, g->prev, ms, false))
        return K25_ENOMEM;
    g->prev = me;
    return seg_add(g, ms, me, true);
}

/* Splits word w[n] by pattern with behavior (HF's NormalizedString::split) into out. */
static int split_word(const struct tok_pattern *pat, enum tok_split_behavior behavior, bool invert, const char *w,
                      size_t n, bool first, pcre2_match_data *md, struct segs *gs, struct tok_words *out,
                      struct k25_error *err)
{
    struct segs g = *gs; /* the caller's storage, reused word after word */
    g.n = 0;
    g.prev = 0;
    int rc = tok_pattern_each(pat, w, n, md, on_match, &g, err);
    if (rc == K25_OK && g.prev != n && seg_add(&g, g.prev, n, false))
        rc = K25_ENOMEM;
    if (rc != K25_OK)
        goto out;
    if (invert)
        for (int i = 0; i < g.n; i++)
            g.v[i].match = !g.v[i].match;
    /* merge per behavior, in place (k: segments kept) */
    int k = 0;
    bool prev_match = false;
    switch (behavior) {
    case TOK_SPLIT_ISOLATED:
        k = g.n;
        break;
    case TOK_SPLIT_REMOVED:
        for (int i = 0; i < g.n; i++)
            if (!g.v[i].match)
                g.v[k++] = g.v[i];
        break;
    case TOK_SPLIT_MERGED_PREV:
        for (int i = 0; i < g.n; i++) {
            if (g.v[i].match && !prev_match && k > 0)
                g.v[k - 1].e = g.v[i].e;
            else
                g.v[k++] = g.v[i];
            prev_match = g.v[i].match;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: { /* the same from the right */
        int j = g.n;
        for (int i = g.n - 1; i >= 0; i--) {
            if (g.v[i].match && !prev_match && j < g.n)
                g.v[j].s = g.v[i].s;
            else
                g.v[--j] = g.v[i];
            prev_match = g.v[i].match;
        }
        k = g.n - j;
        memmove(g.v, g.v + j, sizeof(struct seg) * (size_t)k);
        break;
    }
    case TOK_SPLIT_CONTIGUOUS:
        for (int i = 0; i < g.n; i++) {
            if (g.v[i].match == prev_match && k > 0)
                g.v[k - 1].e = g.v[i].e;
            else
                g.v[k++] = g.v[i];
            prev_match = g.v[i].match;
        }
        break;
    }
    for (int i = 0; i < k && rc == K25_OK; i++)
        if (tok_words_add(out, w + g.v[i].s, g.v[i].e - g.v[i].s, first && g.v[i].s == 0))
            rc = K25_ENOMEM;
out:
    *gs = g;
    if (rc == K25_ENOMEM)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    return rc;
}

/* UTF-8 of each byte's byte-level character (1 or 2 bytes), filled at load (bl_init). */
static char bl_utf8[256][2];
static uint8_t bl_len[256];

static void bl_init(void)
{
    for (int b = 0; b < 256; b++) {
        char u[4];
        bl_len[b] = (uint8_t)tok_utf8_encode(tok_bytelevel_char((unsigned char)b), u);
        memcpy(bl_utf8[b], u, 2);
    }
}

/* Appends the byte-level characters of s[n] to b. */
static int bytelevel_map(struct tok_buf *b, const char *s, size_t n)
{
    if (b->len + 2 * n + 1 > b->cap && tok_buf_put(b, "", 0) == K25_OK) {
        size_t cap = b->cap;
        while (cap < b->len + 2 * n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return K25_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (!b->data)
        return K25_ENOMEM;
    char *o = b->data + b->len;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        o[0] = bl_utf8[c][0];
        o[1] = bl_utf8[c][1];
        o += bl_len[c];
    }
    b->len = (size_t)(o - b->data);
    b->data[b->len] = 0;
    return K25_OK;
}

/* Per-call scratch of the pre-tokenizers, reused word after word. */
struct pre_scratch {
    struct segs g;
    struct tok_buf tmp, src;
    struct tok_words parts;
};

static int apply_one(const struct tok_pre *p, const char *w, size_t n, bool first, pcre2_match_data *md,
                     struct tok_words *out, struct pre_scratch *sc, struct k25_error *err)
{
    struct tok_buf *tmp = &sc->tmp;
    switch (p->kind) {
    case TOK_PRE_SPLIT:
        return split_word(&p->pat, p->behavior, p->invert, w, n, first, md, &sc->g, out, err);
    case TOK_PRE_BYTELEVEL: {
        tmp->len = 0;
        if (!p->add_prefix_space && !p->use_regex) { /* the common case: bytes to characters */
            if (bytelevel_map(tmp, w, n) || tok_words_add(out, tmp->data, tmp->len, first))
                goto oom;
            return K25_OK;
        }
        const char *s = w;
        size_t sn = n;
        if (p->add_prefix_space && (n == 0 || w[0] != ' ')) {
            sc->src.len = 0;
            if (tok_buf_put(&sc->src, " ", 1) || tok_buf_put(&sc->src, w, n))
                goto oom;
            s = sc->src.data;
            sn = sc->src.len;
        }
        struct tok_words *parts = &sc->parts;
        tok_words_reset(parts);
        int rc = K25_OK;
        if (p->use_regex)
            rc = split_word(&p->pat, TOK_SPLIT_ISOLATED, false, s, sn, first, md, &sc->g, parts, err);
        else if (tok_words_add(parts, s, sn, first))
            goto oom;
        for (int i = 0; i < parts->n && rc == K25_OK; i++) {
            tmp->len = 0;
            if (bytelevel_map(tmp, parts->buf.data + parts->off[i], parts->len[i]) ||
                tok_words_add(out, tmp->data, tmp->len, parts->first[i]))
                goto oom;
        }
        return rc;
    }
    case TOK_PRE_METASPACE: {
        tmp->len = 0;
        bool starts = n >= (size_t)p->repl_len && !memcmp(w, p->repl, (size_t)p->repl_len);
        /* ' ' -> the replacement first, then the prepend test (on the replaced text, as HF) */
        if (n > 0 && w[0] == ' ')
            starts = true;
        bool prep = !starts && (p->prepend == TOK_PREPEND_ALWAYS || (p->prepend == TOK_PREPEND_FIRST && first));
        if (prep && tok_buf_put(tmp, p->repl, (size_t)p->repl_len))
            goto oom;
        for (size_t i = 0; i < n; i++)
            if (w[i] == ' ' ? tok_buf_put(tmp, p->repl, (size_t)p->repl_len) : tok_buf_put(tmp, w + i, 1))
                goto oom;
        if (!p->split)
            return tok_words_add(out, tmp->data, tmp->len, first) ? K25_ENOMEM : K25_OK;
        struct tok_pattern lit = {.is_regex = false, .str = (char *)p->repl, .str_len = (size_t)p->repl_len};
        sc->src.len = 0;
        if (tok_buf_put(&sc->src, tmp->data, tmp->len))
            goto oom;
        return split_word(&lit, TOK_SPLIT_MERGED_NEXT, false, sc->src.data, sc->src.len, first, md, &sc->g, out, err);
    }
    }
    return K25_OK;
oom:
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

int tok_pres_apply(const struct tok_pres *ps, const char *s, size_t n, bool at_start, pcre2_match_data *md,
                   struct tok_words *out, struct tok_words *scratch, struct k25_error *err)
{
    tok_words_reset(out);
    if (tok_words_add(out, s, n, at_start))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    struct pre_scratch sc;
    memset(&sc, 0, sizeof(sc));
    int rc = K25_OK;
    for (int i = 0; i < ps->n && rc == K25_OK; i++) {
        tok_words_reset(scratch);
        for (int k = 0; k < out->n && rc == K25_OK; k++)
            rc = apply_one(&ps->v[i], out->buf.data + out->off[k], out->len[k], out->first[k], md, scratch, &sc, err);
        struct tok_words t = *out;
        *out = *scratch;
        *scratch = t;
    }
    free(sc.g.v);
    tok_buf_free(&sc.tmp);
    tok_buf_free(&sc.src);
    tok_words_free(&sc.parts);
    return rc;
}
