/*
 * tok_added.c - tokenizer.json's added_tokens: the special and added
 * tokens that are cut out of the text before the model sees it, as HF's
 * AddedVocabulary does:
 *
 *   - tokens with "normalized": false are found in the input text, those with
 *     true in the normalized text (their content normalized the same way);
 *   - leftmost-longest, non-overlapping matches (a byte trie walked from
 *     each position: the first position where a token starts wins, the
 *     longest token there);
 *   - single_word: a match touching a word character (letter, digit, '_')
 *     on either side is no match (it still consumes its bytes, as HF's
 *     Aho-Corasick iterator does);
 *   - lstrip / rstrip: the match takes the whitespace to its left (not past
 *     the previous match) / right.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct tok_trie {
    int32_t root[256];  /* child of the root by byte, -1 none */
    int32_t *term;      /* [n_nodes] added-token index ending at the node, -1 none */
    int n_nodes, cap_nodes;
    /* children of other nodes: (node << 8 | byte) + 1 -> child, open addressing */
    uint64_t *key;
    int32_t *val;
    uint32_t cap;
    uint32_t n_edges;
};

bool tok_trie_empty(const struct tok_trie *t)
{
    return t->n_nodes == 0;
}

static uint32_t edge_slot(const struct tok_trie *t, uint64_t k)
{
    uint64_t h = k * 0x9e3779b97f4a7c15ULL;
    return (uint32_t)(h >> 32) & (t->cap - 1);
}

static int32_t child(const struct tok_trie *t, int32_t node, unsigned char b)
{
    if (node < 0)
        return t->root[b];
    if (!t->cap)
        return -1;
    uint64_t k = (((uint64_t)node << 8) | b) + 1;
    for (uint32_t i = edge_slot(t, k);; i = (i + 1) & (t->cap - 1)) {
        if (t->key[i] == 0)
            return -1;
        if (t->key[i] == k)
            return t->val[i];
    }
}

static int new_node(struct tok_trie *t)
{
    if (t->n_nodes == t->cap_nodes) {
        int cap = t->cap_nodes ? t->cap_nodes * 2 : 256;
        int32_t *v = realloc(t->term, sizeof(int32_t) * (size_t)cap);
        if (!v)
            return -1;
        t->term = v;
        t->cap_nodes = cap;
    }
    t->term[t->n_nodes] = -1;
    return t->n_nodes++;
}

static int edge_put(struct tok_trie *t, int32_t node, unsigned char b, int32_t to)
{
    if ((t->n_edges + 1) * 2 > t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        uint64_t *key = calloc(cap, sizeof(uint64_t));
        int32_t *val = malloc(sizeof(int32_t) * cap);
        if (!key || !val) {
            free(key);
            free(val);
            return K25_ENOMEM;
        }
        struct tok_trie old = *t;
        t->key = key;
        t->val = val;
        t->cap = cap;
        for (uint32_t i = 0; i < old.cap; i++) {
            if (!old.key[i])
                continue;
            uint32_t j = edge_slot(t, old.key[i]);
            while (t->key[j])
                j = (j + 1) & (cap - 1);
            t->key[j] = old.key[i];
            t->val[j] = old.val[i];
        }
        free(old.key);
        free(old.val);
    }
    uint64_t k = (((uint64_t)node << 8) | b) + 1;
    uint32_t j = edge_slot(t, k);
    while (t->key[j])
        j = (j + 1) & (t->cap - 1);
    t->key[j] = k;
    t->val[j] = to;
    t->n_edges++;
    return K25_OK;
}

static int trie_add(struct tok_trie *t, const char *s, size_t n, int index)
{
    int32_t node = -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = child(t, node, b);
        if (c < 0) {
            if ((c = new_node(t)) < 0)
                return K25_ENOMEM;
            if (node < 0)
                t->root[b] = c;
            else if (edge_put(t, node, b, c))
                return K25_ENOMEM;
        }
        node = c;
    }
    if (node >= 0 && t->term[node] < 0) /* the first of equal contents wins */
        t->term[node] = index;
    return K25_OK;
}

static void trie_free(struct tok_trie *t)
{
    if (!t)
        return;
    free(t->term);
    free(t->key);
    free(t->val);
    free(t);
}

static struct tok_trie *trie_new(void)
{
    struct tok_trie *t = calloc(1, sizeof(*t));
    if (t)
        memset(t->root, 0xff, sizeof(t->root));
    return t;
}

/* ------------------------------------------------------------ loading */

int tok_addeds_load(struct tok_addeds *a, const struct tok_ctx *c, json_t *j, const struct tok_norms *ns,
                    struct k25_error *err)
{
    memset(a, 0, sizeof(*a));
    a->raw = trie_new();
    a->norm = trie_new();
    if (!a->raw || !a->norm)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if (!j)
        return K25_OK;
    if (!json_is_array(j))
        return tok_err_type(c, "/added_tokens", "an array", err);
    size_t n = json_array_size(j);
    a->v = calloc(n + 1, sizeof(*a->v));
    if (!a->v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    pcre2_match_data *md = pcre2_match_data_create(32, NULL);
    struct tok_buf norm = {0};
    int rc = K25_OK;
    for (size_t i = 0; i < n && rc == K25_OK; i++) {
        char p[64];
        snprintf(p, sizeof(p), "/added_tokens/%zu", i);
        json_t *e = json_array_get(j, i);
        struct tok_added *t = &a->v[a->n];
        const char *content;
        int64_t id;
        if (!json_is_object(e)) {
            rc = tok_err_type(c, p, "an object", err);
            break;
        }
        if ((rc = tok_get_int(c, e, p, "id", true, 0, &id, err)) != K25_OK ||
            (rc = tok_get_str(c, e, p, "content", true, &content, err)) != K25_OK ||
            (rc = tok_get_bool(c, e, p, "special", false, &t->special, err)) != K25_OK ||
            (rc = tok_get_bool(c, e, p, "lstrip", false, &t->lstrip, err)) != K25_OK ||
            (rc = tok_get_bool(c, e, p, "rstrip", false, &t->rstrip, err)) != K25_OK ||
            (rc = tok_get_bool(c, e, p, "single_word", false, &t->single_word, err)) != K25_OK ||
            (rc = tok_get_bool(c, e, p, "normalized", !t->special, &t->normalized, err)) != K25_OK)
            break;
        if (id < 0 || id >= INT32_MAX / 2) {
            rc = tok_fail(err, K25_EFORMAT, c->file, 0, p, "%s: %s/id: %lld is not a valid id", c->file, p,
                               (long long)id);
            break;
        }
        for (int k = 0; k < a->n; k++) {
            if (a->v[k].id == id) {
                rc = tok_fail(err, K25_EFORMAT, c->file, 0, p,
                                   "%s: %s/id: duplicate id %lld (also /added_tokens/%d)", c->file, p,
                                   (long long)id, k);
                break;
            }
        }
        if (rc != K25_OK)
            break;
        t->id = (int32_t)id;
        t->len = strlen(content);
        if (t->len == 0) {
            rc = tok_fail(err, K25_EFORMAT, c->file, 0, p, "%s: %s/content: empty", c->file, p);
            break;
        }
        if (!(t->content = strdup(content))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            break;
        }
        a->n++;
        if (t->normalized && ns->n > 0) {
            if ((rc = tok_norms_apply(ns, t->content, t->len, md, &norm, err)) != K25_OK)
                break;
            if (norm.len && trie_add(a->norm, norm.data, norm.len, a->n - 1))
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        } else if (trie_add(t->normalized ? a->norm : a->raw, t->content, t->len, a->n - 1)) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
    }
    tok_buf_free(&norm);
    pcre2_match_data_free(md);
    return rc;
}

void tok_addeds_free(struct tok_addeds *a)
{
    for (int i = 0; i < a->n; i++)
        free(a->v[i].content);
    free(a->v);
    trie_free(a->raw);
    trie_free(a->norm);
    memset(a, 0, sizeof(*a));
}

/* ------------------------------------------------------------ matching */

static bool is_space_cp(uint32_t cp)
{
    if ((cp >= 9 && cp <= 13) || cp == 0x85)
        return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

static bool is_word_cp(uint32_t cp)
{
    if (cp == '_')
        return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The code point ending at s[i] (i > 0), and its start. */
static uint32_t cp_before(const char *s, size_t i, size_t *start)
{
    size_t k = i - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80)
        k--;
    int l;
    *start = k;
    return tok_utf8_decode(s + k, &l);
}

int tok_addeds_find(const struct tok_addeds *a, const struct tok_trie *trie, const char *s, size_t n,
                    struct tok_match **out, int *n_out)
{
    struct tok_match *v = NULL;
    int cnt = 0, cap = 0;
    size_t last = 0; /* end of the previous accepted match */
    size_t i = 0;
    *out = NULL;
    *n_out = 0;
    while (i < n) {
        int32_t node = trie->root[(unsigned char)s[i]];
        if (node < 0) {
            i++;
            continue;
        }
        int best = -1;
        size_t best_end = 0, k = i + 1;
        for (;;) {
            if (trie->term[node] >= 0) {
                best = trie->term[node];
                best_end = k;
            }
            if (k >= n)
                break;
            node = child(trie, node, (unsigned char)s[k]);
            if (node < 0)
                break;
            k++;
        }
        if (best < 0) {
            i++;
            continue;
        }
        const struct tok_added *t = &a->v[best];
        size_t ms = i, me = best_end;
        i = best_end; /* the iterator moves past the match whatever the flags say */
        int l;
        if (t->single_word) {
            size_t st;
            bool left_word = ms > 0 && is_word_cp(cp_before(s, ms, &st));
            bool right_word = me < n && is_word_cp(tok_utf8_decode(s + me, &l));
            if (left_word || right_word)
                continue;
        }
        if (t->lstrip) {
            while (ms > last) {
                size_t st;
                if (!is_space_cp(cp_before(s, ms, &st)))
                    break;
                ms = st;
            }
        }
        if (t->rstrip) {
            while (me < n) {
                uint32_t cp = tok_utf8_decode(s + me, &l);
                if (!is_space_cp(cp))
                    break;
                me += (size_t)l;
            }
            i = me;
        }
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            struct tok_match *nv = realloc(v, sizeof(*v) * (size_t)cap);
            if (!nv) {
                free(v);
                return K25_ENOMEM;
            }
            v = nv;
        }
        v[cnt++] = (struct tok_match){ms, me, best};
        last = me;
    }
    *out = v;
    *n_out = cnt;
    return K25_OK;
}
