/*
 * tok_bpe.c - the BPE model of tokenizer.json ("model": {"type": "BPE"}):
 * vocab (token -> id), merges (pair -> rank), and the tokenization of one
 * pre-tokenized word as Hugging Face's tokenizers does it:
 *
 *   1. ignore_merges: a word that is itself a token is that token;
 *   2. the word is split into characters (continuing_subword_prefix before
 *      every character but the first, end_of_word_suffix after the last);
 *      a character that is no token becomes its <0xXX> byte tokens
 *      (byte_fallback) or unk_token (consecutive unks fused with fuse_unk),
 *      or is dropped where the model has neither;
 *   3. merges: the adjacent pair of lowest rank (leftmost among equals) is
 *      merged until no pair has a rank.  A binary heap of candidate pairs
 *      with lazy invalidation makes this O(n log n) in the word's length (a
 *      50 KB word without a space is one word), not O(n^2) rescans.
 *
 * Words of up to CACHE_MAX_WORD bytes are cached (word -> ids) in a
 * direct-mapped table behind a mutex, so repeated words skip 2 and 3.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS (1u << 16)
#define CACHE_MAX_WORD 48
#define CACHE_MAX_IDS 12

struct cache_slot {
    uint64_t hash;
    uint8_t klen, nids;
    char key[CACHE_MAX_WORD];
    int32_t ids[CACHE_MAX_IDS];
};
struct tok_bpe_cache {
    pthread_mutex_t mu;
    struct cache_slot slot[CACHE_SLOTS];
};

/* ------------------------------------------------------------ merges map */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

#define MKEY_EMPTY UINT64_MAX

/* The (rank << 32 | merged id) of pair (a, b), or UINT64_MAX. */
static inline uint64_t merge_get(const struct tok_bpe *m, int32_t a, int32_t b)
{
    if (!m->mcap)
        return UINT64_MAX;
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)mix64(k) & (m->mcap - 1);
    while (m->mkey[i] != MKEY_EMPTY) {
        if (m->mkey[i] == k)
            return m->mval[i];
        i = (i + 1) & (m->mcap - 1);
    }
    return UINT64_MAX;
}

/* Inserts unless present (HF keeps the first rank of a pair listed twice). */
static void merge_put(struct tok_bpe *m, int32_t a, int32_t b, uint64_t v)
{
    uint64_t k = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t i = (uint32_t)mix64(k) & (m->mcap - 1);
    while (m->mkey[i] != MKEY_EMPTY) {
        if (m->mkey[i] == k)
            return;
        i = (i + 1) & (m->mcap - 1);
    }
    m->mkey[i] = k;
    m->mval[i] = v;
}

/* ------------------------------------------------------------ loading */

static int oom(struct k25_error *err)
{
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
}

static int load_vocab(struct tok_bpe *m, const struct tok_ctx *c, json_t *vocab, struct k25_error *err)
{
    if (!json_is_object(vocab))
        return tok_err_type(c, "/model/vocab", "an object of token: id", err);
    const char *key;
    json_t *v;
    int64_t max_id = -1;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX / 2) {
            char p[600];
            snprintf(p, sizeof(p), "/model/vocab/%.500s", key);
            return tok_err_type(c, p, "a non-negative integer id", err);
        }
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    m->n_ids = (int32_t)(max_id + 1);
    m->str = calloc((size_t)m->n_ids + 1, sizeof(char *));
    m->len = calloc((size_t)m->n_ids + 1, sizeof(uint32_t));
    size_t *off = calloc((size_t)m->n_ids + 1, sizeof(size_t));
    if (!m->str || !m->len || !off) {
        free(off);
        return oom(err);
    }
    for (int i = 0; i < m->n_ids; i++)
        off[i] = SIZE_MAX;
    int rc = K25_OK;
    size_t klen;
    json_object_keylen_foreach(vocab, key, klen, v) {
        int32_t id = (int32_t)json_integer_value(v);
        bool dup;
        if (off[id] != SIZE_MAX) {
            rc = tok_fail(err, K25_EFORMAT, c->file, 0, "/model/vocab",
                               "%s: /model/vocab/%.300s: duplicate id %d (also \"%.300s\")", c->file, key, id,
                               m->strs.data + off[id]);
            goto out;
        }
        off[id] = m->strs.len;
        if (tok_buf_put(&m->strs, key, klen + 1) != K25_OK || tok_strmap_put(&m->vocab, key, klen, id, &dup)) {
            rc = oom(err);
            goto out;
        }
        m->len[id] = (uint32_t)klen;
    }
    for (int i = 0; i < m->n_ids; i++)
        m->str[i] = off[i] == SIZE_MAX ? NULL : m->strs.data + off[i];
out:
    free(off);
    return rc;
}

/* One merge, "a b" or ["a", "b"], at /model/merges/i into a[na], b[nb]. */
static int merge_parts(const struct tok_ctx *c, json_t *e, size_t i, const char **a, size_t *na, const char **b,
                       size_t *nb, struct k25_error *err)
{
    if (json_is_string(e)) {
        const char *s = json_string_value(e);
        size_t n = json_string_length(e);
        const char *sp = memchr(s, ' ', n);
        if (sp && sp != s && sp != s + n - 1) {
            *a = s;
            *na = (size_t)(sp - s);
            *b = sp + 1;
            *nb = n - *na - 1;
            return K25_OK;
        }
    } else if (json_is_array(e) && json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
               json_is_string(json_array_get(e, 1))) {
        *a = json_string_value(json_array_get(e, 0));
        *na = json_string_length(json_array_get(e, 0));
        *b = json_string_value(json_array_get(e, 1));
        *nb = json_string_length(json_array_get(e, 1));
        return K25_OK;
    }
    char p[64];
    snprintf(p, sizeof(p), "/model/merges/%zu", i);
    return tok_err_type(c, p, "a merge \"left right\" or [\"left\", \"right\"]", err);
}

static int load_merges(struct tok_bpe *m, const struct tok_ctx *c, json_t *merges, struct k25_error *err)
{
    if (!json_is_array(merges))
        return tok_err_type(c, "/model/merges", "an array", err);
    size_t n = json_array_size(merges);
    if (n >= (1u << 30))
        return tok_fail(err, K25_EFORMAT, c->file, 0, "/model/merges", "%s: /model/merges: too many", c->file);
    m->mcap = 1024;
    while (m->mcap < n * 2 + 2)
        m->mcap *= 2;
    m->mkey = malloc(sizeof(uint64_t) * m->mcap);
    m->mval = malloc(sizeof(uint64_t) * m->mcap);
    if (!m->mkey || !m->mval)
        return oom(err);
    memset(m->mkey, 0xff, sizeof(uint64_t) * m->mcap);
    struct tok_buf cat = {0};
    int rc = K25_OK;
    for (size_t i = 0; i < n; i++) {
        const char *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        if ((rc = merge_parts(c, json_array_get(merges, i), i, &a, &na, &b, &nb, err)) != K25_OK)
            break;
        int32_t ia = tok_strmap_get(&m->vocab, a, na), ib = tok_strmap_get(&m->vocab, b, nb);
        /* the merged token: a + b without b's continuing_subword_prefix */
        size_t skip = m->prefix && nb >= m->prefix_len && !memcmp(b, m->prefix, m->prefix_len) ? m->prefix_len : 0;
        cat.len = 0;
        if (tok_buf_put(&cat, a, na) != K25_OK || tok_buf_put(&cat, b + skip, nb - skip) != K25_OK) {
            rc = oom(err);
            break;
        }
        int32_t im = tok_strmap_get(&m->vocab, cat.data, cat.len);
        if (ia < 0 || ib < 0 || im < 0) {
            const char *what = ia < 0 ? a : ib < 0 ? b : cat.data;
            int wl = (int)(ia < 0 ? na : ib < 0 ? nb : cat.len);
            rc = tok_fail(err, K25_EFORMAT, c->file, 0, "/model/merges",
                               "%s: /model/merges/%zu: token \"%.*s\" is not in /model/vocab", c->file, i,
                               wl > 200 ? 200 : wl, what);
            break;
        }
        merge_put(m, ia, ib, ((uint64_t)i << 32) | (uint32_t)im);
    }
    tok_buf_free(&cat);
    return rc;
}

int tok_bpe_load(struct tok_bpe *m, const struct tok_ctx *c, json_t *model, struct k25_error *err)
{
    memset(m, 0, sizeof(*m));
    m->unk_id = -1;
    memset(m->char_id, 0xff, sizeof(m->char_id));
    memset(m->byte_id, 0xff, sizeof(m->byte_id));
    const char *type = NULL;
    int rc;
    if (!json_is_object(model))
        return tok_err_type(c, "/model", "an object", err);
    if ((rc = tok_get_str(c, model, "/model", "type", false, &type, err)) != K25_OK)
        return rc;
    if (type && strcmp(type, "BPE"))
        return tok_unsupported(c, "/model/type", "model", type, err);
    if (!type && !json_object_get(model, "merges")) /* HF infers the model from its fields */
        return tok_unsupported(c, "/model", "model", "(no type, no merges: not BPE)", err);
    json_t *v;
    if ((rc = tok_get(c, model, "/model", "dropout", false, &v, err)) != K25_OK)
        return rc;
    if (v && (!json_is_number(v) || json_number_value(v) != 0.0))
        return tok_fail(err, K25_EUNSUPPORTED, c->file, 0, "/model/dropout",
                             "%s: /model/dropout: BPE dropout is not supported (deterministic tokenization only)",
                             c->file);
    const char *s;
    if ((rc = tok_get_str(c, model, "/model", "continuing_subword_prefix", false, &s, err)) != K25_OK)
        return rc;
    if (s && *s) {
        m->prefix = strdup(s);
        m->prefix_len = strlen(s);
    }
    if ((rc = tok_get_str(c, model, "/model", "end_of_word_suffix", false, &s, err)) != K25_OK)
        return rc;
    if (s && *s) {
        m->suffix = strdup(s);
        m->suffix_len = strlen(s);
    }
    if ((m->prefix_len && !m->prefix) || (m->suffix_len && !m->suffix))
        return oom(err);
    if ((rc = tok_get_bool(c, model, "/model", "fuse_unk", false, &m->fuse_unk, err)) != K25_OK ||
        (rc = tok_get_bool(c, model, "/model", "byte_fallback", false, &m->byte_fallback, err)) != K25_OK ||
        (rc = tok_get_bool(c, model, "/model", "ignore_merges", false, &m->ignore_merges, err)) != K25_OK)
        return rc;
    if ((rc = tok_get(c, model, "/model", "vocab", true, &v, err)) != K25_OK || (rc = load_vocab(m, c, v, err)))
        return rc;
    if ((rc = tok_get_str(c, model, "/model", "unk_token", false, &s, err)) != K25_OK)
        return rc;
    if (s && (m->unk_id = tok_strmap_get(&m->vocab, s, strlen(s))) < 0)
        return tok_fail(err, K25_EFORMAT, c->file, 0, "/model/unk_token",
                             "%s: /model/unk_token: \"%.200s\" is not in /model/vocab", c->file, s);
    if ((rc = tok_get(c, model, "/model", "merges", true, &v, err)) != K25_OK || (rc = load_merges(m, c, v, err)))
        return rc;
    for (uint32_t cp = 0; cp < 2048; cp++) {
        char u[4];
        int l = tok_utf8_encode(cp, u);
        m->char_id[cp] = tok_strmap_get(&m->vocab, u, (size_t)l);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof(name), "<0x%02X>", b);
        m->byte_id[b] = tok_strmap_get(&m->vocab, name, 6);
    }
    m->cache = calloc(1, sizeof(*m->cache));
    if (!m->cache)
        return oom(err);
    pthread_mutex_init(&m->cache->mu, NULL);
    return K25_OK;
}

void tok_bpe_free(struct tok_bpe *m)
{
    free(m->str);
    free(m->len);
    tok_buf_free(&m->strs);
    tok_strmap_free(&m->vocab);
    free(m->mkey);
    free(m->mval);
    free(m->prefix);
    free(m->suffix);
    if (m->cache) {
        pthread_mutex_destroy(&m->cache->mu);
        free(m->cache);
    }
    memset(m, 0, sizeof(*m));
}

/* ------------------------------------------------------------ one word */

struct sym {
    int32_t id;
    int prev, next; /* -1 at the ends; next == -2: merged away */
};
struct cand {
    uint32_t rank;
    int pos;
    int32_t left, right; /* the ids the pair had when pushed (stale when they changed) */
    int32_t merged;
};

static inline bool cand_less(const struct cand *a, const struct cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

struct heap {
    struct cand *v;
    int n, cap;
};

static int heap_push(struct heap *h, struct cand c)
{
    if (h->n == h->cap) {
        int cap = h->cap ? h->cap * 2 : 64;
        struct cand *nv = realloc(h->v, sizeof(*nv) * (size_t)cap);
        if (!nv)
            return K25_ENOMEM;
        h->v = nv;
        h->cap = cap;
    }
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
    return K25_OK;
}

static struct cand heap_pop(struct heap *h)
{
    struct cand top = h->v[0], last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const struct cand *best = &last;
        if (l < h->n && cand_less(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (r < h->n && cand_less(&h->v[r], best))
            m = r;
        if (m == i)
            break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static int push_pair(const struct tok_bpe *m, struct heap *h, const struct sym *s, int pos)
{
    int nx = s[pos].next;
    if (nx < 0)
        return K25_OK;
    uint64_t v = merge_get(m, s[pos].id, s[nx].id);
    if (v == UINT64_MAX)
        return K25_OK;
    struct cand c = {(uint32_t)(v >> 32), pos, s[pos].id, s[nx].id, (int32_t)(uint32_t)v};
    return heap_push(h, c);
}

/* The id of one character c[n] (with prefix/suffix as its place asks), -1 when no token. */
static int32_t char_token(const struct tok_bpe *m, const char *c, size_t n, bool first, bool last,
                          struct tok_buf *tmp)
{
    bool pre = !first && m->prefix, suf = last && m->suffix;
    if (!pre && !suf) {
        if (n <= 2) {
            int l;
            uint32_t cp = tok_utf8_decode(c, &l);
            if (cp < 2048)
                return m->char_id[cp];
        }
        return tok_strmap_get(&m->vocab, c, n);
    }
    tmp->len = 0;
    if ((pre && tok_buf_put(tmp, m->prefix, m->prefix_len)) || tok_buf_put(tmp, c, n) ||
        (suf && tok_buf_put(tmp, m->suffix, m->suffix_len)))
        return -2;
    return tok_strmap_get(&m->vocab, tmp->data, tmp->len);
}

/* Step 2 of the header: the word's initial symbols. */
static int initial_symbols(const struct tok_bpe *m, const char *w, size_t n, struct sym **out, int *n_out)
{
    size_t cap = n + 1;
    struct sym *s = malloc(sizeof(*s) * cap);
    struct tok_buf tmp = {0};
    if (!s)
        return K25_ENOMEM;
    int ns = 0;
    int32_t unk = -1; /* a pending unk (fuse_unk extends it) */
    for (size_t i = 0; i < n;) {
        size_t l = (size_t)tok_utf8_len((unsigned char)w[i]);
        if (i + l > n)
            l = n - i;
        bool first = i == 0, last = i + l == n;
        int32_t id = char_token(m, w + i, l, first, last, &tmp);
        if (id == -2)
            goto oom;
        if (id >= 0) {
            if (unk >= 0) {
                s[ns++].id = unk;
                unk = -1;
            }
            s[ns++].id = id;
        } else {
            bool done = false;
            if (m->byte_fallback) {
                /* the bytes of the character as looked up (prefix/suffix included, as HF) */
                const char *bytes = w + i;
                size_t nb = l;
                if ((!first && m->prefix) || (last && m->suffix)) {
                    bytes = tmp.data;
                    nb = tmp.len;
                }
                bool all = true;
                for (size_t k = 0; k < nb; k++)
                    all = all && m->byte_id[(unsigned char)bytes[k]] >= 0;
                if (all) {
                    if ((size_t)ns + nb + (n - i) + 1 > cap) {
                        cap = (size_t)ns + nb + (n - i) + 1;
                        struct sym *ns2 = realloc(s, sizeof(*s) * cap);
                        if (!ns2)
                            goto oom;
                        s = ns2;
                    }
                    for (size_t k = 0; k < nb; k++)
                        s[ns++].id = m->byte_id[(unsigned char)bytes[k]];
                    done = true;
                }
            }
            if (!done && m->unk_id >= 0) {
                if (unk >= 0 && !m->fuse_unk)
                    s[ns++].id = unk;
                unk = m->unk_id;
            }
        }
        i += l;
    }
    if (unk >= 0)
        s[ns++].id = unk;
    for (int i = 0; i < ns; i++) {
        s[i].prev = i - 1;
        s[i].next = i + 1 < ns ? i + 1 : -1;
    }
    tok_buf_free(&tmp);
    *out = s;
    *n_out = ns;
    return K25_OK;
oom:
    tok_buf_free(&tmp);
    free(s);
    return K25_ENOMEM;
}

static int merge_word(const struct tok_bpe *m, const char *w, size_t n, struct tok_ids *out)
{
    struct sym *s;
    int ns, rc;
    if ((rc = initial_symbols(m, w, n, &s, &ns)) != K25_OK)
        return rc;
    struct heap h = {0};
    for (int i = 0; i + 1 < ns && rc == K25_OK; i++)
        rc = push_pair(m, &h, s, i);
    while (rc == K25_OK && h.n > 0) {
        struct cand c = heap_pop(&h);
        int nx = s[c.pos].next;
        if (nx < 0 || s[c.pos].id != c.left || s[nx].id != c.right)
            continue; /* stale: one side merged since */
        s[c.pos].id = c.merged;
        s[c.pos].next = s[nx].next;
        if (s[nx].next >= 0)
            s[s[nx].next].prev = c.pos;
        s[nx].next = -2;
        s[nx].id = -1;
        if (s[c.pos].prev >= 0)
            rc = push_pair(m, &h, s, s[c.pos].prev);
        if (rc == K25_OK)
            rc = push_pair(m, &h, s, c.pos);
    }
    for (int i = ns > 0 ? 0 : -1; rc == K25_OK && i >= 0; i = s[i].next)
        rc = tok_ids_push(out, s[i].id);
    free(h.v);
    free(s);
    return rc;
}

int tok_bpe_word(const struct tok_bpe *m, const char *w, size_t n, struct tok_ids *out)
{
    if (n == 0)
        return K25_OK;
    if (m->ignore_merges) {
        int32_t id = tok_strmap_get(&m->vocab, w, n);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    uint64_t h = 0;
    struct cache_slot *cs = NULL;
    if (n <= CACHE_MAX_WORD) {
        h = tok_hash(w, n);
        cs = &m->cache->slot[h & (CACHE_SLOTS - 1)];
        pthread_mutex_lock(&m->cache->mu);
        if (cs->klen == n && cs->hash == h && !memcmp(cs->key, w, n)) {
            int32_t ids[CACHE_MAX_IDS];
            int k = cs->nids;
            memcpy(ids, cs->ids, sizeof(int32_t) * (size_t)k);
            pthread_mutex_unlock(&m->cache->mu);
            return tok_ids_put(out, ids, k);
        }
        pthread_mutex_unlock(&m->cache->mu);
    }
    int before = out->n, rc = merge_word(m, w, n, out);
    if (rc == K25_OK && cs && out->n - before <= CACHE_MAX_IDS) {
        pthread_mutex_lock(&m->cache->mu);
        cs->hash = h;
        cs->klen = (uint8_t)n;
        cs->nids = (uint8_t)(out->n - before);
        memcpy(cs->key, w, n);
        memcpy(cs->ids, out->v + before, sizeof(int32_t) * (size_t)cs->nids);
        pthread_mutex_unlock(&m->cache->mu);
    }
    return rc;
}
