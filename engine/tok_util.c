/*
 * tok_util.c - what the tokenizer.json parts share (tok_internal.h): growable
 * buffers, UTF-8 checks and lossy conversion, a string->id hash map,
 * PCRE2 regexes and the {"String"|"Regex"} patterns, and JSON reading whose
 * errors name the file and the JSON path of the field.
 */
#include "tok_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ buffers */

int tok_buf_put(struct tok_buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return K25_ENOMEM;
        b->data = d;
        b->cap = cap;
    }
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return K25_OK;
}

void tok_buf_free(struct tok_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

int tok_ids_put(struct tok_ids *l, const int32_t *v, int n)
{
    if (l->n + n > l->cap) {
        int cap = l->cap ? l->cap : 16;
        while (cap < l->n + n)
            cap *= 2;
        int32_t *nv = realloc(l->v, sizeof(int32_t) * (size_t)cap);
        if (!nv)
            return K25_ENOMEM;
        l->v = nv;
        l->cap = cap;
    }
    memcpy(l->v + l->n, v, sizeof(int32_t) * (size_t)n);
    l->n += n;
    return K25_OK;
}

int tok_ids_push(struct tok_ids *l, int32_t id)
{
    return tok_ids_put(l, &id, 1);
}

/* ------------------------------------------------------------ UTF-8 */

int tok_utf8_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        return 2;
    if (c >= 0xe0 && c <= 0xef)
        return 3;
    if (c >= 0xf0 && c <= 0xf4)
        return 4;
    return 1;
}

/* Length of the valid sequence at s[0..n) (1..4), or -(bytes of its longest valid prefix, at
 * least 1) when it is invalid or cut short; *cut set when it is a valid prefix ended by n. */
static int seq_len(const unsigned char *s, size_t n, bool *cut)
{
    *cut = false;
    unsigned char c = s[0];
    if (c < 0x80)
        return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        need = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        need = 3;
        if (c == 0xe0)
            lo = 0xa0;
        else if (c == 0xed)
            hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f;
    } else
        return -1;
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= n) {
            *cut = true;
            return -i;
        }
        unsigned char x = s[i];
        if (x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xbf))
            return -i;
    }
    return need;
}

size_t tok_utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        bool cut;
        int l = seq_len(u + i, n - i, &cut);
        if (l < 0)
            return i;
        i += (size_t)l;
    }
    return n;
}

size_t k25_utf8_complete_len(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    /* an incomplete sequence is at most 3 bytes from the end */
    size_t from = n > 3 ? n - 3 : 0;
    for (size_t i = from; i < n; i++) {
        if (u[i] < 0x80 || u[i] > 0xbf) { /* a lead (or invalid) byte */
            bool cut;
            int l = seq_len(u + i, n - i, &cut);
            if (l < 0 && cut)
                return i;
        }
    }
    return n;
}

int tok_utf8_lossy(struct tok_buf *out, const char *s, size_t n)
{
    static const char fffd[3] = {(char)0xef, (char)0xbf, (char)0xbd};
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0; /* run: start of the valid bytes not yet copied */
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        bool cut;
        int l = seq_len(u + i, n - i, &cut);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        if (tok_buf_put(out, s + run, i - run) != K25_OK || tok_buf_put(out, fffd, 3) != K25_OK)
            return K25_ENOMEM;
        i += (size_t)(-l);
        run = i;
    }
    return tok_buf_put(out, s + run, n - run);
}

uint32_t tok_utf8_decode(const char *s, int *len)
{
    const unsigned char *u = (const unsigned char *)s;
    int l = tok_utf8_len(u[0]);
    *len = l;
    switch (l) {
    case 1: return u[0];
    case 2: return ((uint32_t)(u[0] & 0x1f) << 6) | (u[1] & 0x3f);
    case 3: return ((uint32_t)(u[0] & 0x0f) << 12) | ((uint32_t)(u[1] & 0x3f) << 6) | (u[2] & 0x3f);
    default:
        return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3f) << 12) | ((uint32_t)(u[2] & 0x3f) << 6) |
               (u[3] & 0x3f);
    }
}

int tok_utf8_encode(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* ------------------------------------------------------------ string map */

/* FNV-1a, 64 bit, with a final mix so the low bits (the slot) depend on every byte. */
uint64_t tok_hash(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 31;
    h *= 0x7fb5d329728ea185ULL;
    h ^= h >> 27;
    return h;
}

static int strmap_grow(struct tok_strmap *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 1024;
    uint32_t *slot = calloc(cap, sizeof(uint32_t));
    if (!slot)
        return K25_ENOMEM;
    for (uint32_t e = 0; e < m->n; e++) {
        uint32_t i = (uint32_t)m->hash[e] & (cap - 1);
        while (slot[i])
            i = (i + 1) & (cap - 1);
        slot[i] = e + 1;
    }
    free(m->slot);
    m->slot = slot;
    m->cap = cap;
    return K25_OK;
}

int tok_strmap_put(struct tok_strmap *m, const char *k, size_t n, int32_t v, bool *dup)
{
    *dup = false;
    if ((m->n + 1) * 2 > m->cap && strmap_grow(m) != K25_OK)
        return K25_ENOMEM;
    if (m->n == m->ecap) {
        uint32_t ecap = m->ecap ? m->ecap * 2 : 1024;
        uint64_t *h = realloc(m->hash, sizeof(uint64_t) * ecap);
        if (h)
            m->hash = h;
        uint32_t *ko = realloc(m->koff, sizeof(uint32_t) * ecap);
        if (ko)
            m->koff = ko;
        uint32_t *kl = realloc(m->klen, sizeof(uint32_t) * ecap);
        if (kl)
            m->klen = kl;
        int32_t *va = realloc(m->val, sizeof(int32_t) * ecap);
        if (va)
            m->val = va;
        if (!h || !ko || !kl || !va)
            return K25_ENOMEM;
        m->ecap = ecap;
    }
    if (m->keys.len + n >= UINT32_MAX)
        return K25_ENOMEM;
    uint64_t h = tok_hash(k, n);
    uint32_t i = (uint32_t)h & (m->cap - 1);
    while (m->slot[i]) {
        uint32_t e = m->slot[i] - 1;
        if (m->hash[e] == h && m->klen[e] == n && !memcmp(m->keys.data + m->koff[e], k, n)) {
            *dup = true;
            return K25_OK;
        }
        i = (i + 1) & (m->cap - 1);
    }
    uint32_t e = m->n;
    m->hash[e] = h;
    m->koff[e] = (uint32_t)m->keys.len;
    m->klen[e] = (uint32_t)n;
    m->val[e] = v;
    if (tok_buf_put(&m->keys, k, n) != K25_OK)
        return K25_ENOMEM;
    m->slot[i] = e + 1;
    m->n++;
    return K25_OK;
}

int32_t tok_strmap_get(const struct tok_strmap *m, const char *k, size_t n)
{
    if (!m->cap)
        return -1;
    uint64_t h = tok_hash(k, n);
    uint32_t i = (uint32_t)h & (m->cap - 1);
    while (m->slot[i]) {
        uint32_t e = m->slot[i] - 1;
        if (m->hash[e] == h && m->klen[e] == n && !memcmp(m->keys.data + m->koff[e], k, n))
            return m->val[e];
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

void tok_strmap_free(struct tok_strmap *m)
{
    free(m->slot);
    free(m->hash);
    free(m->koff);
    free(m->klen);
    free(m->val);
    tok_buf_free(&m->keys);
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------ regexes */

int tok_regex_compile(struct tok_regex *re, const char *pattern, size_t n, const char *file, const char *path,
                      struct k25_error *err)
{
    int code;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, n, PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &off, NULL);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        return tok_fail(err, K25_EFORMAT, file, 0, path, "%s: %s: regex error at offset %zu: %s", file, path,
                             (size_t)off, (const char *)msg);
    }
    /* JIT where the library has it; the interpreter matches the same strings otherwise */
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return K25_OK;
}

void tok_regex_free(struct tok_regex *re)
{
    pcre2_code_free(re->code);
    re->code = NULL;
}

int tok_regex_find(const struct tok_regex *re, const char *s, size_t n, size_t start, pcre2_match_data *md,
                   size_t *ms, size_t *me, struct k25_error *err)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH)
        return 1;
    if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof(msg));
        return k25_error_set(err, rc == PCRE2_ERROR_NOMEMORY ? K25_ENOMEM : K25_EINTERNAL, NULL, 0, "text",
                             "regex match failed: %s", (const char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 0;
}

int tok_pattern_parse(struct tok_pattern *p, json_t *j, const char *file, const char *path, struct k25_error *err)
{
    memset(p, 0, sizeof(*p));
    struct tok_ctx c = {file};
    char sub[512];
    if (!json_is_object(j))
        return tok_err_type(&c, path, "an object {\"String\": ...} or {\"Regex\": ...}", err);
    json_t *s = json_object_get(j, "String"), *r = json_object_get(j, "Regex");
    if ((s != NULL) == (r != NULL) || json_object_size(j) != 1)
        return tok_err_type(&c, path, "an object with one member, String or Regex", err);
    snprintf(sub, sizeof(sub), "%s/%s", path, s ? "String" : "Regex");
    json_t *v = s ? s : r;
    if (!json_is_string(v))
        return tok_err_type(&c, sub, "a string", err);
    const char *text = json_string_value(v);
    size_t n = json_string_length(v);
    if (s) {
        p->str = malloc(n + 1);
        if (!p->str)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        memcpy(p->str, text, n + 1);
        p->str_len = n;
        return K25_OK;
    }
    p->is_regex = true;
    return tok_regex_compile(&p->re, text, n, file, sub, err);
}

void tok_pattern_free(struct tok_pattern *p)
{
    free(p->str);
    if (p->is_regex)
        tok_regex_free(&p->re);
    memset(p, 0, sizeof(*p));
}

int tok_pattern_each(const struct tok_pattern *p, const char *s, size_t n, pcre2_match_data *md, tok_match_fn fn,
                     void *user, struct k25_error *err)
{
    int rc;
    if (!p->is_regex) {
        if (p->str_len == 0)
            return K25_OK; /* an empty literal matches nothing (HF: the whole text is one piece) */
        size_t i = 0;
        while (i + p->str_len <= n) {
            const char *hit = memmem(s + i, n - i, p->str, p->str_len);
            if (!hit)
                break;
            size_t ms = (size_t)(hit - s);
            if ((rc = fn(user, ms, ms + p->str_len)) != K25_OK)
                return rc;
            i = ms + p->str_len;
        }
        return K25_OK;
    }
    size_t at = 0;
    while (at <= n) {
        size_t ms, me;
        rc = tok_regex_find(&p->re, s, n, at, md, &ms, &me, err);
        if (rc == 1)
            break;
        if (rc < 0)
            return rc;
        if (me > ms && (rc = fn(user, ms, me)) != K25_OK)
            return rc;
        /* an empty match moves on by one character */
        at = me > ms ? me : me + (me < n ? (size_t)tok_utf8_len((unsigned char)s[me]) : 1);
    }
    return K25_OK;
}

/* ------------------------------------------------------------ JSON */

int tok_fail(struct k25_error *err, int code, const char *file, int line, const char *field, const char *fmt, ...)
{
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    k25_error_set(err, code, NULL, 0, NULL, "%s", what);
    if (err) {
        err->line = line;
        snprintf(err->file, sizeof(err->file), "%s", file ? file : "");
        snprintf(err->field, sizeof(err->field), "%s", field ? field : "");
    }
    return code;
}

int tok_err_type(const struct tok_ctx *c, const char *path, const char *want, struct k25_error *err)
{
    return tok_fail(err, K25_EFORMAT, c->file, 0, path, "%s: %s: expected %s", c->file, path, want);
}

int tok_unsupported(const struct tok_ctx *c, const char *path, const char *what, const char *name,
                    struct k25_error *err)
{
    return tok_fail(err, K25_EUNSUPPORTED, c->file, 0, path, "%s: %s: unsupported %s \"%s\"", c->file, path,
                         what, name);
}

int tok_get(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required, json_t **out,
            struct k25_error *err)
{
    json_t *v = o ? json_object_get(o, key) : NULL;
    *out = v && !json_is_null(v) ? v : NULL;
    if (!*out && required)
        return tok_fail(err, K25_EFORMAT, c->file, 0, path, "%s: %s/%s: missing", c->file, path, key);
    return K25_OK;
}

int tok_get_str(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required,
                const char **out, struct k25_error *err)
{
    json_t *v;
    int rc = tok_get(c, o, path, key, required, &v, err);
    *out = NULL;
    if (rc != K25_OK || !v)
        return rc;
    if (!json_is_string(v)) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", path, key);
        return tok_err_type(c, p, "a string", err);
    }
    *out = json_string_value(v);
    return K25_OK;
}

int tok_get_bool(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool deflt, bool *out,
                 struct k25_error *err)
{
    json_t *v;
    *out = deflt;
    int rc = tok_get(c, o, path, key, false, &v, err);
    if (rc != K25_OK || !v)
        return rc;
    if (!json_is_boolean(v)) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", path, key);
        return tok_err_type(c, p, "true or false", err);
    }
    *out = json_is_true(v);
    return K25_OK;
}

int tok_get_int(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required,
                int64_t deflt, int64_t *out, struct k25_error *err)
{
    json_t *v;
    *out = deflt;
    int rc = tok_get(c, o, path, key, required, &v, err);
    if (rc != K25_OK || !v)
        return rc;
    if (!json_is_integer(v)) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", path, key);
        return tok_err_type(c, p, "an integer", err);
    }
    *out = json_integer_value(v);
    return K25_OK;
}

int tok_get_type(const struct tok_ctx *c, json_t *o, const char *path, const char **out, struct k25_error *err)
{
    if (!json_is_object(o))
        return tok_err_type(c, path, "an object", err);
    return tok_get_str(c, o, path, "type", true, out, err);
}
