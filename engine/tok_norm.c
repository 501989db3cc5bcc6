/*
 * tok_norm.c - tokenizer.json normalizers: NFC, NFD, NFKC, NFKD (through
 * utf8proc, no hand-written Unicode tables), Prepend, Replace (a literal or
 * a PCRE2 regex) and Sequence (flattened into one list).  Any other type is
 * refused by name with its JSON path.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static int load_one(struct tok_norms *ns, const struct tok_ctx *c, json_t *j, const char *path,
                    struct k25_error *err);

static int push(struct tok_norms *ns, struct tok_norm *n, struct k25_error *err)
{
    struct tok_norm *v = realloc(ns->v, sizeof(*v) * (size_t)(ns->n + 1));
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    ns->v = v;
    ns->v[ns->n++] = *n;
    return K25_OK;
}

static int load_one(struct tok_norms *ns, const struct tok_ctx *c, json_t *j, const char *path,
                    struct k25_error *err)
{
    const char *type;
    char sub[512];
    int rc = tok_get_type(c, j, path, &type, err);
    if (rc != K25_OK)
        return rc;
    struct tok_norm n;
    memset(&n, 0, sizeof(n));
    if (!strcmp(type, "Sequence")) {
        json_t *list;
        if ((rc = tok_get(c, j, path, "normalizers", true, &list, err)) != K25_OK)
            return rc;
        snprintf(sub, sizeof(sub), "%s/normalizers", path);
        if (!json_is_array(list))
            return tok_err_type(c, sub, "an array", err);
        for (size_t i = 0; i < json_array_size(list); i++) {
            char p[600];
            snprintf(p, sizeof(p), "%s/%zu", sub, i);
            if ((rc = load_one(ns, c, json_array_get(list, i), p, err)) != K25_OK)
                return rc;
        }
        return K25_OK;
    }
    if (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) {
        n.kind = !strcmp(type, "NFC") ? TOK_NORM_NFC : !strcmp(type, "NFD") ? TOK_NORM_NFD
               : !strcmp(type, "NFKC") ? TOK_NORM_NFKC : TOK_NORM_NFKD;
        return push(ns, &n, err);
    }
    if (!strcmp(type, "Prepend") || !strcmp(type, "Replace")) {
        const char *text;
        bool prep = !strcmp(type, "Prepend");
        if ((rc = tok_get_str(c, j, path, prep ? "prepend" : "content", true, &text, err)) != K25_OK)
            return rc;
        n.kind = prep ? TOK_NORM_PREPEND : TOK_NORM_REPLACE;
        n.text_len = strlen(text);
        if (!(n.text = strdup(text)))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        if (!prep) {
            json_t *pat;
            snprintf(sub, sizeof(sub), "%s/pattern", path);
            if ((rc = tok_get(c, j, path, "pattern", true, &pat, err)) != K25_OK ||
                (rc = tok_pattern_parse(&n.pat, pat, c->file, sub, err)) != K25_OK) {
                free(n.text);
                return rc;
            }
        }
        if ((rc = push(ns, &n, err)) != K25_OK) {
            free(n.text);
            tok_pattern_free(&n.pat);
        }
        return rc;
    }
    snprintf(sub, sizeof(sub), "%s/type", path);
    return tok_unsupported(c, sub, "normalizer", type, err);
}

int tok_norms_load(struct tok_norms *ns, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err)
{
    memset(ns, 0, sizeof(*ns));
    if (!j || json_is_null(j))
        return K25_OK;
    return load_one(ns, c, j, path, err);
}

void tok_norms_free(struct tok_norms *ns)
{
    for (int i = 0; i < ns->n; i++) {
        free(ns->v[i].text);
        tok_pattern_free(&ns->v[i].pat);
    }
    free(ns->v);
    memset(ns, 0, sizeof(*ns));
}

struct repl_ctx {
    const char *s;
    size_t last;
    const struct tok_norm *n;
    struct tok_buf *out;
};

static int repl_match(void *user, size_t ms, size_t me)
{
    struct repl_ctx *r = user;
    if (tok_buf_put(r->out, r->s + r->last, ms - r->last) || tok_buf_put(r->out, r->n->text, r->n->text_len))
        return K25_ENOMEM;
    r->last = me;
    return K25_OK;
}

/* One normalizer: src[n] -> dst (replaced). */
static int apply_one(const struct tok_norm *nm, const char *src, size_t n, pcre2_match_data *md, struct tok_buf *dst,
                     struct k25_error *err)
{
    dst->len = 0;
    int rc = tok_buf_put(dst, "", 0) ? K25_ENOMEM : K25_OK; /* data never NULL */
    switch (nm->kind) {
    case TOK_NORM_PREPEND:
        if (n && (tok_buf_put(dst, nm->text, nm->text_len) || tok_buf_put(dst, src, n)))
            rc = K25_ENOMEM;
        break;
    case TOK_NORM_REPLACE: {
        struct repl_ctx r = {src, 0, nm, dst};
        rc = tok_pattern_each(&nm->pat, src, n, md, repl_match, &r, err);
        if (rc == K25_OK && tok_buf_put(dst, src + r.last, n - r.last))
            rc = K25_ENOMEM;
        break;
    }
    default: {
        if (n == 0)
            break;
        int opt = UTF8PROC_STABLE | (nm->kind == TOK_NORM_NFC || nm->kind == TOK_NORM_NFKC ? UTF8PROC_COMPOSE
                                                                                           : UTF8PROC_DECOMPOSE);
        if (nm->kind == TOK_NORM_NFKC || nm->kind == TOK_NORM_NFKD)
            opt |= UTF8PROC_COMPAT;
        utf8proc_uint8_t *o = NULL;
        utf8proc_ssize_t l = utf8proc_map((const utf8proc_uint8_t *)src, (utf8proc_ssize_t)n, &o, opt);
        if (l < 0) {
            free(o);
            return k25_error_set(err, l == UTF8PROC_ERROR_NOMEM ? K25_ENOMEM : K25_EINVAL, NULL, 0, "text",
                                 "normalization failed: %s", utf8proc_errmsg(l));
        }
        rc = tok_buf_put(dst, o, (size_t)l) ? K25_ENOMEM : K25_OK;
        free(o);
    }
    }
    if (rc == K25_ENOMEM)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    return rc;
}

int tok_norms_apply(const struct tok_norms *ns, const char *s, size_t n, pcre2_match_data *md, struct tok_buf *out,
                    struct k25_error *err)
{
    out->len = 0;
    if (tok_buf_put(out, s, n))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    struct tok_buf tmp = {0};
    int rc = K25_OK;
    for (int i = 0; i < ns->n && rc == K25_OK; i++) {
        if ((rc = apply_one(&ns->v[i], out->data, out->len, md, &tmp, err)) == K25_OK) {
            struct tok_buf t = *out;
            *out = tmp;
            tmp = t;
        }
    }
    tok_buf_free(&tmp);
    return rc;
}
