/*
 * stats.c - statistics of a gold set (what `k25 gold validate` prints):
 * line and request counts, input/output length distributions with
 * nearest-rank percentiles, domains, sanitized characters, and the
 * SHA-256 of the file that provenance records.  Also the whole-file
 * validate call that ties the streaming reader to the statistics.
 */
#include "gold.h"
#include "gold_internal.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

void k25_gold_stats_init(struct k25_gold_stats *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "%s", path ? path : "");
}

int k25_gold_stats_add(struct k25_gold_stats *s, const struct k25_gold_request *r)
{
    if (s->n_lens == s->cap_lens) {
        size_t ncap = s->cap_lens ? 2 * s->cap_lens : 256;
        int64_t *a = realloc(s->in_lens, ncap * sizeof(*a));
        if (!a)
            return K25_ENOMEM;
        s->in_lens = a;
        int64_t *b = realloc(s->out_lens, ncap * sizeof(*b));
        if (!b)
            return K25_ENOMEM;
        s->out_lens = b;
        s->cap_lens = ncap;
    }
    s->in_lens[s->n_lens] = r->input_length;
    s->out_lens[s->n_lens] = r->expected_output_length;
    s->n_lens++;
    if (r->text)
        s->text_requests++;
    else
        s->ids_requests++;

    const char *d = r->domain ? r->domain : "(none)";
    for (size_t i = 0; i < s->n_domains; i++) {
        if (!strcmp(s->domains[i].name, d)) {
            s->domains[i].n++;
            return 0;
        }
    }
    struct k25_gold_domain_count *nd = realloc(s->domains, (s->n_domains + 1) * sizeof(*nd));
    if (!nd)
        return K25_ENOMEM;
    s->domains = nd;
    nd[s->n_domains].name = strdup(d);
    if (!nd[s->n_domains].name)
        return K25_ENOMEM;
    nd[s->n_domains].n = 1;
    s->n_domains++;
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int cmp_domain(const void *a, const void *b)
{
    const struct k25_gold_domain_count *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Nearest rank: the smallest value with at least p% of values at or below it. */
int64_t k25_gold_percentile(const int64_t *sorted, size_t n, double p)
{
    if (n == 0)
        return 0;
    double rank = p / 100.0 * (double)n;
    size_t k = (size_t)rank;
    if ((double)k < rank)
        k++; /* ceil */
    if (k < 1)
        k = 1;
    if (k > n)
        k = n;
    return sorted[k - 1];
}

static void dist(int64_t *v, size_t n, struct k25_gold_dist *d)
{
    memset(d, 0, sizeof(*d));
    if (!n)
        return;
    qsort(v, n, sizeof(*v), cmp_i64);
    d->n = (int64_t)n;
    for (size_t i = 0; i < n; i++)
        d->total += v[i];
    d->min = v[0];
    d->max = v[n - 1];
    d->mean = (double)d->total / (double)n;
    d->p50 = k25_gold_percentile(v, n, 50);
    d->p90 = k25_gold_percentile(v, n, 90);
    d->p95 = k25_gold_percentile(v, n, 95);
    d->p99 = k25_gold_percentile(v, n, 99);
}

void k25_gold_stats_finish(struct k25_gold_stats *s, const struct k25_gold_counts *c,
                           const char sha256[65])
{
    if (c)
        s->counts = *c;
    if (sha256)
        snprintf(s->sha256, sizeof(s->sha256), "%s", sha256);
    dist(s->in_lens, s->n_lens, &s->input);
    dist(s->out_lens, s->n_lens, &s->output);
    if (s->n_domains > 1)
        qsort(s->domains, s->n_domains, sizeof(*s->domains), cmp_domain);
}

void k25_gold_stats_free(struct k25_gold_stats *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_domains; i++)
        free(s->domains[i].name);
    free(s->domains);
    free(s->in_lens);
    free(s->out_lens);
    memset(s, 0, sizeof(*s));
}

static void print_dist(FILE *out, const char *name, const struct k25_gold_dist *d)
{
    fprintf(out,
            "  %-15s total %lld  min %lld  p50 %lld  p90 %lld  p95 %lld  p99 %lld  max %lld  "
            "mean %.1f\n",
            name, (long long)d->total, (long long)d->min, (long long)d->p50, (long long)d->p90,
            (long long)d->p95, (long long)d->p99, (long long)d->max, d->mean);
}

int k25_gold_stats_print(FILE *out, const struct k25_gold_stats *s, const struct k25_gold_opts *o)
{
    const struct k25_gold_counts *c = &s->counts;
    bool valid = c->invalid_lines == 0;
    fprintf(out, "%s: %s, %lld request%s", s->path,
            valid ? "valid" : (o->on_error == K25_GOLD_ON_ERROR_SKIP ? "usable (invalid lines skipped)"
                                                                     : "INVALID"),
            (long long)c->requests, c->requests == 1 ? "" : "s");
    if (o->filter)
        fprintf(out, ", %lld selected by the filter", (long long)c->matched);
    fprintf(out, "\n");
    fprintf(out, "  %-15s %lld (%lld invalid%s), %lld bytes\n", "lines", (long long)c->lines,
            (long long)c->invalid_lines,
            o->on_error == K25_GOLD_ON_ERROR_SKIP && c->invalid_lines ? ", skipped" : "",
            (long long)c->bytes);
    fprintf(out, "  %-15s %lld errors, %lld warnings\n", "diagnostics", (long long)c->errors,
            (long long)c->warnings);
    fprintf(out, "  %-15s %s\n", "sha256", s->sha256);
    fprintf(out, "  %-15s %lld text (byte tokenizer), %lld input_ids\n", "requests",
            (long long)s->text_requests, (long long)s->ids_requests);
    print_dist(out, "input tokens", &s->input);
    print_dist(out, "output tokens", &s->output);
    fprintf(out, "  %-15s", "domains");
    for (size_t i = 0; i < s->n_domains; i++)
        fprintf(out, "%s %s %lld", i ? "," : "", s->domains[i].name, (long long)s->domains[i].n);
    fprintf(out, "%s\n", s->n_domains ? "" : " -");
    fprintf(out, "  %-15s %lld characters (%lld invisible, %lld control) on %lld lines, policy %s\n",
            "sanitized", (long long)c->sanitized_chars, (long long)c->invisible_chars,
            (long long)c->control_chars, (long long)c->sanitized_lines,
            k25_gold_sanitize_name(o->sanitize));
    if (fflush(out) != 0 || ferror(out))
        return K25_EIO;
    return 0;
}

static json_t *dist_json(const struct k25_gold_dist *d)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "n", (json_int_t)d->n, "total",
                     (json_int_t)d->total, "min", (json_int_t)d->min, "p50", (json_int_t)d->p50,
                     "p90", (json_int_t)d->p90, "p95", (json_int_t)d->p95, "p99",
                     (json_int_t)d->p99, "max", (json_int_t)d->max, "mean", d->mean);
}

char *k25_gold_stats_to_json(const struct k25_gold_stats *s, const struct k25_gold_opts *o,
                             const char *filter_expr)
{
    const struct k25_gold_counts *c = &s->counts;
    json_t *domains = json_object();
    if (!domains)
        return NULL;
    for (size_t i = 0; i < s->n_domains; i++)
        json_object_set_new(domains, s->domains[i].name, json_integer(s->domains[i].n));
    json_t *root = json_pack(
        "{s:s,s:b,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:{s:s,s:I,s:I,s:I,s:I},s:s,s:o,s:o,s:o,"
        "s:s?,s:I}",
        "file", s->path, "valid", c->invalid_lines == 0, "sha256", s->sha256, "bytes",
        (json_int_t)c->bytes, "lines", (json_int_t)c->lines, "requests", (json_int_t)c->requests,
        "matched", (json_int_t)c->matched, "invalid_lines", (json_int_t)c->invalid_lines,
        "errors", (json_int_t)c->errors, "warnings", (json_int_t)c->warnings, "text_requests",
        (json_int_t)s->text_requests, "ids_requests", (json_int_t)s->ids_requests, "sanitized",
        "policy", k25_gold_sanitize_name(o->sanitize), "chars", (json_int_t)c->sanitized_chars,
        "invisible", (json_int_t)c->invisible_chars, "control", (json_int_t)c->control_chars,
        "lines", (json_int_t)c->sanitized_lines, "on_error", k25_gold_on_error_name(o->on_error),
        "input_tokens", dist_json(&s->input), "output_tokens", dist_json(&s->output), "domains",
        domains, "filter", filter_expr, "max_line_bytes", (json_int_t)o->max_line_bytes);
    if (!root)
        return NULL;
    char *txt = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return txt;
}

/* ---------------------------------------------------------------- SHA-256 */

/* Lower-case hex of n digest bytes into hex[2n+1]. */
void k25_gold_hex(const unsigned char *d, size_t n, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n] = 0;
}

int k25_gold_sha256_hex(const void *data, size_t len, char hex[65], struct k25_error *err)
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(data, len, d, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "SHA-256 failed");
    k25_gold_hex(d, n, hex);
    return 0;
}

/* Streams the file through the digest in 1 MiB reads. */
int k25_gold_sha256_file(const char *path, char hex[65], struct k25_error *err)
{
    int rc = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL,
                             "cannot open: %s", strerror(errno));
    size_t cap = (size_t)1 << 20;
    char *buf = malloc(cap);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (!buf || !md) {
        rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
        goto out_free;
    }
    if (EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        rc = k25_error_set(err, K25_EINTERNAL, path, 0, NULL, "SHA-256 init failed");
        goto out_free;
    }
    size_t n;
    while ((n = fread(buf, 1, cap, f)) > 0) {
        if (EVP_DigestUpdate(md, buf, n) != 1) {
            rc = k25_error_set(err, K25_EINTERNAL, path, 0, NULL, "SHA-256 update failed");
            goto out_free;
        }
    }
    if (ferror(f)) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "read failed: %s", strerror(errno));
        goto out_free;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dn = 0;
    if (EVP_DigestFinal_ex(md, d, &dn) != 1 || dn != 32) {
        rc = k25_error_set(err, K25_EINTERNAL, path, 0, NULL, "SHA-256 final failed");
        goto out_free;
    }
    k25_gold_hex(d, dn, hex);
out_free:
    EVP_MD_CTX_free(md);
    free(buf);
    fclose(f); /* read-only */
    return rc;
}

/* ---------------------------------------------------------------- validate */

/*
 * Streams the whole file, adding each selected request to stats, and
 * finishes the statistics even when the set is invalid (so the report can
 * show them).  Returns the reader's verdict: 0, K25_EFORMAT (invalid lines
 * under abort) or an I/O error.
 */
int k25_gold_validate(const char *path, const struct k25_gold_opts *opts,
                      struct k25_gold_stats *stats, struct k25_error *err)
{
    k25_gold_stats_init(stats, path);
    k25_gold_reader_t *r = NULL;
    int rc = k25_gold_open(path, opts, &r, err);
    if (rc < 0)
        return rc;
    struct k25_gold_request req;
    while ((rc = k25_gold_next(r, &req, err)) == 1) {
        int arc = k25_gold_stats_add(stats, &req);
        k25_gold_request_free(&req);
        if (arc < 0) {
            rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory for statistics");
            break;
        }
    }
    char hex[65];
    k25_gold_reader_sha256(r, hex);
    const struct k25_gold_counts *c = k25_gold_reader_counts(r);
    k25_gold_stats_finish(stats, c, hex);
    /* a set with no request is no gold set (k25 bench refuses it too) */
    if (rc == 0 && c->requests == 0)
        rc = c->bytes == 0 ? k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                                           "empty file: a gold set holds at least one request")
                           : k25_error_set(err, K25_EFORMAT, path, 0, NULL, "no valid request in %lld lines",
                                           (long long)c->lines);
    k25_gold_close(r);
    return rc;
}
