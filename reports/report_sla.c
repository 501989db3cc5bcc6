/*
 * report_sla.c - the sign-off SLA: sla.yaml (libyaml, errors naming the
 * file, line and column), one line per objective
 *
 *     ttft_p95_ms <= 500 at input_length >= 32768
 *
 * and its evaluation on measured requests.  A metric is a distribution
 * statistic (ttft/tpot/itl/e2e/queue _p50.._p999/_mean/_min/_max _ms,
 * busy_p95, ...) or a summary figure (output_tok_per_s, peak_memory_mb,
 * ...); conditions (`at` / `where`, joined by `and`) select requests by
 * input_length / output_length.  A percentile is judged only where the
 * sample supports it (n (1 - q) >= 1, the harness's rule): otherwise the
 * verdict is UNSUPPORTED, never PASS.
 */
#include "report.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YLINE(n) ((int)(n)->start_mark.line + 1)

const char *k25_sla_op_text(enum k25_sla_op op)
{
    static const char *const t[] = {"<", "<=", ">", ">=", "==", "!="};
    return (unsigned)op < 6 ? t[op] : "?";
}

bool k25_sla_op_holds(enum k25_sla_op op, double a, double b)
{
    if (isnan(a) || isnan(b))
        return false;
    switch (op) {
    case K25_SLA_LT: return a < b;
    case K25_SLA_LE: return a <= b;
    case K25_SLA_GT: return a > b;
    case K25_SLA_GE: return a >= b;
    case K25_SLA_EQ: return a == b;
    case K25_SLA_NE: return a != b;
    }
    return false;
}

const char *k25_verdict_name(enum k25_verdict v)
{
    switch (v) {
    case K25_VERDICT_PASS: return "PASS";
    case K25_VERDICT_FAIL: return "FAIL";
    case K25_VERDICT_UNSUPPORTED: return "UNSUPPORTED";
    }
    return "?";
}

/* ------------------------------------------------------------ metrics */

/* Summary figures: where `k25 bench --json` keeps them (inside .summary), and the scale. */
static const struct {
    const char *name, *path;
    double scale;
} scalars[] = {
    {"output_tok_per_s", "output_tok_per_s", 1},
    {"input_tok_per_s", "input_tok_per_s", 1},
    {"requests_per_s", "requests_per_s", 1},
    {"goodput_rps", "goodput_rps", 1},
    {"peak_memory_mb", "memory.peak_tracked_bytes", 1.0 / 1048576.0},
    {"peak_kv_mb", "memory.peak_kv_bytes", 1.0 / 1048576.0},
    {"kv_blocks_peak", "memory.kv_blocks_peak", 1},
    {"kv_cache_hit_rate", "kv_cache_hit_rate", 1},
    {"degraded_requests_ratio", "degraded_requests_ratio", 1},
    {"kv_usage_ratio", "kv_usage_ratio", 1},
    {"busy_p95", "busy_fraction.p95", 1},
    {"gpu_utilization_p95", "gpu_utilization_p95", 1}, /* NVML (harness/gputelemetry.c); null without it */
    {"queue_waiting_mean", "queue_waiting.mean", 1},     /* in-process /timeline, or the server's gauge */
    {"fidelity_kl_mean", "fidelity.kl_mean", 1},
    {"fidelity_rel_err_mean", "fidelity.rel_err_mean", 1},
    {"fidelity_token_agreement", "fidelity.token_agreement", 1},
    {"rejected_ratio", NULL, 1}, /* computed from requests */
};
#define NSCALARS (sizeof(scalars) / sizeof(scalars[0]))

double k25_report_scalar(const json_t *summary, const char *metric)
{
    const json_t *s = json_object_get(summary, "summary");
    if (!s)
        s = summary;
    for (size_t i = 0; i < NSCALARS; i++) {
        if (strcmp(scalars[i].name, metric) != 0)
            continue;
        if (!scalars[i].path) {
            const json_t *rq = json_object_get(s, "requests");
            double tot = (double)json_integer_value(json_object_get(rq, "total"));
            double rej = (double)json_integer_value(json_object_get(rq, "rejected"));
            return rq && tot > 0 ? rej / tot : NAN;
        }
        const json_t *v = k25_json_path(s, scalars[i].path);
        /* a figure kept as a distribution object (e.g. kv_usage_ratio) counts by its peak */
        if (json_is_object(v))
            v = json_object_get(v, "max");
        return json_is_number(v) ? json_number_value(v) * scalars[i].scale : NAN;
    }
    return NAN;
}

/* "p95" -> 0.95, "p999" -> 0.999; false when not of that form. */
static bool parse_pctl(const char *s, size_t len, double *q)
{
    if (len < 3 || s[0] != 'p')
        return false;
    double v = 0, scale = 0.1;
    for (size_t i = 1; i < len; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v += (s[i] - '0') * scale;
        scale /= 10;
    }
    *q = v;
    return v > 0 && v < 1;
}

/* Fills the metric part of l from its name; false when unknown. */
static bool metric_resolve(const char *name, struct k25_sla_line *l)
{
    static const struct {
        const char *prefix;
        int dist;
        enum k25_sla_src src;
    } dists[] = {
        {"ttft", K25_M_TTFT, K25_SLA_SRC_REQ}, {"tpot", K25_M_TPOT, K25_SLA_SRC_REQ},
        {"e2e", K25_M_E2E, K25_SLA_SRC_REQ},   {"queue", K25_M_QUEUE, K25_SLA_SRC_REQ},
        {"itl", K25_M_ITL, K25_SLA_SRC_TOKEN},
    };
    for (size_t i = 0; i < NSCALARS; i++)
        if (!strcmp(name, scalars[i].name)) {
            l->src = K25_SLA_SRC_SCALAR;
            return true;
        }
    const char *us = strchr(name, '_');
    if (!us)
        return false;
    size_t plen = (size_t)(us - name);
    const char *stat = us + 1;
    size_t slen = strlen(stat);
    bool busy = plen == 4 && !strncmp(name, "busy", 4);
    if (!busy) {
        if (slen < 4 || strcmp(stat + slen - 3, "_ms") != 0)
            return false;
        slen -= 3;
        bool found = false;
        for (size_t i = 0; i < sizeof(dists) / sizeof(dists[0]); i++)
            if (strlen(dists[i].prefix) == plen && !strncmp(name, dists[i].prefix, plen)) {
                l->dist = dists[i].dist;
                l->src = dists[i].src;
                found = true;
            }
        if (!found)
            return false;
    } else {
        l->src = K25_SLA_SRC_BUSY;
    }
    if (slen == 4 && !strncmp(stat, "mean", 4))
        l->stat = K25_SLA_MEAN;
    else if (slen == 3 && !strncmp(stat, "max", 3))
        l->stat = K25_SLA_MAX;
    else if (slen == 3 && !strncmp(stat, "min", 3))
        l->stat = K25_SLA_MIN;
    else if (parse_pctl(stat, slen, &l->q))
        l->stat = K25_SLA_QUANTILE;
    else
        return false;
    return true;
}

/* ------------------------------------------------------------- parsing */

/*
 * A line is util's expression language (k25util.h) twice: the head
 * `METRIC OP NUMBER`, ended by a stop word (at / where / for), then the
 * conditions, comparisons of input_length / output_length joined by
 * `and` (&&).  The operators line up with util's.
 */
_Static_assert((int)K25_SLA_LT == (int)K25_EXPR_LT && (int)K25_SLA_LE == (int)K25_EXPR_LE &&
                   (int)K25_SLA_GT == (int)K25_EXPR_GT && (int)K25_SLA_GE == (int)K25_EXPR_GE &&
                   (int)K25_SLA_EQ == (int)K25_EXPR_EQ && (int)K25_SLA_NE == (int)K25_EXPR_NE,
               "k25_sla_op and k25_expr_op differ");

static bool head_resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    struct k25_sla_line *l = ctx;
    *type = K25_EXPR_NUM;
    *slot = -1;
    snprintf(l->metric, sizeof(l->metric), "%s", name);
    if (metric_resolve(name, l))
        return true;
    snprintf(why, n,
             "unknown metric '%.63s' (use ttft|tpot|itl|e2e|queue _p50|_p90|_p95|_p99|_mean|_max _ms, busy_p95, "
             "output_tok_per_s, requests_per_s, goodput_rps, peak_memory_mb, kv_cache_hit_rate, "
             "degraded_requests_ratio, kv_usage_ratio, gpu_utilization_p95, queue_waiting_mean, rejected_ratio)",
             name);
    return false;
}

static bool cond_resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    (void)ctx;
    *type = K25_EXPR_NUM;
    *slot = -1;
    if (!strcmp(name, "input_length") || !strcmp(name, "output_length"))
        return true;
    snprintf(why, n, "unknown field '%.63s': expected input_length or output_length", name);
    return false;
}

/* Adds the comparisons of the `and` chain e to l->cond; anything else is an error naming its column. */
static int add_conds(const struct k25_expr *e, const char *text, const char *what, const char *file, int line,
                     struct k25_sla_line *l, struct k25_error *err)
{
    int rc;
    switch (e->kind) {
    case K25_EXPR_AND:
        if ((rc = add_conds(e->a, text, what, file, line, l, err)) < 0)
            return rc;
        return add_conds(e->b, text, what, file, line, l, err);
    case K25_EXPR_OR:
        return k25_error_set(err, K25_EINVAL, file, line, "sla",
                             "%s: column %d: expected `and` between conditions, got '%s' (every condition must hold)",
                             what, e->col, text[e->col - 1] == '|' ? "||" : "or");
    case K25_EXPR_NOT:
        return k25_error_set(err, K25_EINVAL, file, line, "sla",
                             "%s: column %d: expected input_length or output_length, got '!'", what, e->col);
    case K25_EXPR_CMP: break;
    }
    if (l->n_cond == K25_SLA_MAX_COND)
        return k25_error_set(err, K25_EINVAL, file, line, "sla", "%s: at most %d conditions", what, K25_SLA_MAX_COND);
    struct k25_sla_cond *c = &l->cond[l->n_cond++];
    snprintf(c->field, sizeof(c->field), "%s", e->name);
    c->op = (enum k25_sla_op)e->op;
    c->value = e->num;
    return K25_OK;
}

int k25_sla_line_parse(const char *text, const char *file, int line, struct k25_sla_line *l, struct k25_error *err)
{
    static const char *const stops[] = {"at", "where", "for", NULL};
    memset(l, 0, sizeof(*l));
    snprintf(l->text, sizeof(l->text), "%s", text);
    l->line = line;
    char what[300];
    snprintf(what, sizeof(what), "\"%.250s\"", text);
    struct k25_expr_opts o = {
        .what = what, .file = file, .line = line, .field = "sla", .names = "a metric name, e.g. ttft_p95_ms",
        .resolve = head_resolve, .ctx = l, .stop_words = stops,
    };
    struct k25_expr *e = NULL;
    size_t end = 0;
    int rc = k25_expr_parse(text, &o, &e, &end, NULL, err);
    if (rc < 0)
        return rc;
#define BAD(...) k25_error_set(err, K25_EINVAL, file, line, "sla", __VA_ARGS__)
    if (e->kind != K25_EXPR_CMP) {
        rc = BAD("%s: column %d: an SLA line is `METRIC OP NUMBER [at CONDITIONS]`, got '%s'", what, e->col,
                 e->kind == K25_EXPR_NOT ? "!" : text[e->col - 1] == '&' || text[e->col - 1] == '|'
                                                     ? (text[e->col - 1] == '&' ? "&&" : "||")
                                                     : (e->kind == K25_EXPR_AND ? "and" : "or"));
        goto out_free;
    }
    snprintf(l->metric, sizeof(l->metric), "%s", e->name);
    metric_resolve(l->metric, l); /* the head's metric, after any resolver call */
    l->op = (enum k25_sla_op)e->op;
    l->limit = e->num;
    k25_expr_free(e);
    e = NULL;
    if (!text[end])
        return K25_OK;
    size_t wlen = strspn(text + end, "abcdefghijklmnopqrstuvwxyz");
    if (l->src != K25_SLA_SRC_REQ && l->src != K25_SLA_SRC_TOKEN)
        return BAD("%s: column %zu: conditions select requests, so they apply only to per-request metrics "
                   "(ttft, tpot, itl, e2e, queue), not to %s",
                   what, end + 1, l->metric);
    size_t rest = end + wlen;
    if (!text[rest + strspn(text + rest, " \t")])
        return BAD("%s: column %zu: expected a condition (input_length or output_length) after '%.*s', got the end",
                   what, rest + 1, (int)wlen, text + end);
    o.names = "input_length or output_length";
    o.resolve = cond_resolve;
    o.ctx = NULL;
    o.stop_words = NULL;
    o.col0 = (int)rest;
    if ((rc = k25_expr_parse(text + rest, &o, &e, NULL, NULL, err)) < 0)
        return rc;
    rc = add_conds(e, text, what, file, line, l, err);
out_free:
    k25_expr_free(e);
#undef BAD
    return rc;
}

/* ---------------------------------------------------------- the file */

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

void k25_sla_init(struct k25_sla *s)
{
    memset(s, 0, sizeof(*s));
    s->n_health = k25_health_defaults(s->health, K25_HEALTH_MAX);
}

static int parse_bound(const char *path, const yaml_node_t *v, const char *key, double *out, struct k25_error *err)
{
    const char *t = scalar(v);
    char *end;
    if (t && (!strcmp(t, "none") || !strcmp(t, "null") || !strcmp(t, "~"))) {
        *out = NAN;
        return K25_OK;
    }
    errno = 0;
    double d = t ? strtod(t, &end) : 0;
    if (!t || end == t || *end || errno || !isfinite(d))
        return k25_error_set(err, K25_EINVAL, path, YLINE(v), key, "expected a number (or none)");
    *out = d;
    return K25_OK;
}

/* `health:` mapping: NAME: off | {fail_below, warn_below, warn_above, fail_above, advice_low, advice_high} */
static int parse_health(struct k25_sla *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    const char *path = s->path;
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, path, YLINE(n), "health",
                             "expected a mapping of checks, e.g. {kv_cache_hit_rate: {warn_below: 0.95}}");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *name = scalar(k);
        struct k25_sla_line probe;
        if (!name)
            return k25_error_set(err, K25_EINVAL, path, YLINE(k), "health", "check names must be metric names");
        memset(&probe, 0, sizeof(probe));
        if (!metric_resolve(name, &probe) || probe.src != K25_SLA_SRC_SCALAR)
            return k25_error_set(err, K25_EINVAL, path, YLINE(k), name,
                                 "unknown health metric (kv_cache_hit_rate, busy_p95, degraded_requests_ratio, "
                                 "kv_usage_ratio, gpu_utilization_p95, queue_waiting_mean, or another summary figure such "
                                 "as peak_memory_mb)");
        struct k25_health_check *c = NULL;
        for (int i = 0; i < s->n_health; i++)
            if (!strcmp(s->health[i].metric, name))
                c = &s->health[i];
        if (!c) {
            if (s->n_health == K25_HEALTH_MAX)
                return k25_error_set(err, K25_ERANGE, path, YLINE(k), name, "at most %d health checks", K25_HEALTH_MAX);
            c = &s->health[s->n_health++];
            memset(c, 0, sizeof(*c));
            snprintf(c->metric, sizeof(c->metric), "%s", name);
            c->fail_below = c->warn_below = c->warn_above = c->fail_above = NAN;
        }
        const char *sv = scalar(v);
        if (sv) {
            if (!strcmp(sv, "off") || !strcmp(sv, "false") || !strcmp(sv, "no")) {
                c->enabled = false;
                continue;
            }
            if (!strcmp(sv, "on") || !strcmp(sv, "true") || !strcmp(sv, "yes") || !strcmp(sv, "default")) {
                c->enabled = true;
                continue;
            }
            return k25_error_set(err, K25_EINVAL, path, YLINE(v), name,
                                 "expected off, on, or a mapping {warn_below, fail_below, warn_above, fail_above}");
        }
        if (v->type != YAML_MAPPING_NODE)
            return k25_error_set(err, K25_EINVAL, path, YLINE(v), name,
                                 "expected off, on, or a mapping {warn_below, fail_below, warn_above, fail_above}");
        c->enabled = true;
        for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top; q++) {
            yaml_node_t *qk = yaml_document_get_node(doc, q->key), *qv = yaml_document_get_node(doc, q->value);
            const char *bk = scalar(qk);
            int rc = K25_OK;
            if (!bk)
                return k25_error_set(err, K25_EINVAL, path, YLINE(qk), name, "bound names must be names");
            if (!strcmp(bk, "fail_below"))
                rc = parse_bound(path, qv, bk, &c->fail_below, err);
            else if (!strcmp(bk, "warn_below"))
                rc = parse_bound(path, qv, bk, &c->warn_below, err);
            else if (!strcmp(bk, "warn_above"))
                rc = parse_bound(path, qv, bk, &c->warn_above, err);
            else if (!strcmp(bk, "fail_above"))
                rc = parse_bound(path, qv, bk, &c->fail_above, err);
            else if (!strcmp(bk, "advice_low") && scalar(qv))
                snprintf(c->advice_low, sizeof(c->advice_low), "%s", scalar(qv));
            else if (!strcmp(bk, "advice_high") && scalar(qv))
                snprintf(c->advice_high, sizeof(c->advice_high), "%s", scalar(qv));
            else
                return k25_error_set(err, K25_EINVAL, path, YLINE(qk), bk,
                                     "unknown key in health check '%s' (warn_below, fail_below, warn_above, "
                                     "fail_above, advice_low, advice_high)",
                                     name);
            if (rc)
                return rc;
        }
        if ((!isnan(c->fail_below) && !isnan(c->warn_below) && c->fail_below > c->warn_below) ||
            (!isnan(c->fail_above) && !isnan(c->warn_above) && c->fail_above < c->warn_above))
            return k25_error_set(err, K25_EINVAL, path, YLINE(v), name,
                                 "fail bounds must lie outside the warn bounds (fail_below <= warn_below, "
                                 "warn_above <= fail_above)");
    }
    return K25_OK;
}

int k25_sla_load(const char *path, struct k25_sla *s, struct k25_error *err)
{
    k25_sla_init(s);
    snprintf(s->path, sizeof(s->path), "%s", path);

    yaml_document_t doc;
    int rc = k25_yaml_load(path, &doc, err);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        rc = k25_error_set(err, K25_EFORMAT, path, 1, NULL, "empty file: expected `sla:` and/or `health:`");
        goto out_doc;
    }
    if (root->type != YAML_MAPPING_NODE) {
        rc = k25_error_set(err, K25_EFORMAT, path, YLINE(root), NULL,
                           "an SLA file is a mapping with `sla:` (a list of lines) and/or `health:`");
        goto out_doc;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
        const char *key = scalar(k);
        if (!key) {
            rc = k25_error_set(err, K25_EINVAL, path, YLINE(k), NULL, "keys must be names");
        } else if (!strcmp(key, "title")) {
            if (!scalar(v))
                rc = k25_error_set(err, K25_EINVAL, path, YLINE(v), key, "expected a single value");
            else
                snprintf(s->title, sizeof(s->title), "%s", scalar(v));
        } else if (!strcmp(key, "sla")) {
            if (v->type != YAML_SEQUENCE_NODE) {
                rc = k25_error_set(err, K25_EINVAL, path, YLINE(v), key,
                                   "expected a list, e.g. [\"ttft_p95_ms <= 500 at input_length >= 32768\"]");
                break;
            }
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top && !rc; it++) {
                yaml_node_t *e = yaml_document_get_node(&doc, *it);
                const char *t = scalar(e);
                if (!t)
                    rc = k25_error_set(err, K25_EINVAL, path, YLINE(e), key,
                                       "each SLA line is a string: \"METRIC OP NUMBER [at CONDITION]\"");
                else if (s->n_lines == K25_SLA_MAX_LINES)
                    rc = k25_error_set(err, K25_ERANGE, path, YLINE(e), key, "at most %d SLA lines",
                                       K25_SLA_MAX_LINES);
                else
                    rc = k25_sla_line_parse(t, path, YLINE(e), &s->lines[s->n_lines++], err);
            }
        } else if (!strcmp(key, "health")) {
            rc = parse_health(s, &doc, v, err);
        } else {
            rc = k25_error_set(err, K25_EINVAL, path, YLINE(k), key, "unknown key (sla, health, title)");
        }
    }
out_doc:
    yaml_document_delete(&doc);
    return rc;
}

/* --------------------------------------------------------- evaluation */

static const char *stat_name(const struct k25_sla_line *l, char *buf, size_t n)
{
    switch (l->stat) {
    case K25_SLA_MEAN: return "mean";
    case K25_SLA_MIN: return "min";
    case K25_SLA_MAX: return "max";
    case K25_SLA_QUANTILE: break;
    }
    char d[32];
    snprintf(d, sizeof(d), "%.6g", l->q * 100);
    k25_report_sfmt(buf, n, "P%s", d);
    return buf;
}

static void verdict_of(const struct k25_sla_line *l, struct k25_sla_result *r)
{
    r->verdict = k25_sla_op_holds(l->op, r->value, l->limit) ? K25_VERDICT_PASS : K25_VERDICT_FAIL;
    switch (l->op) {
    case K25_SLA_LT:
    case K25_SLA_LE: r->margin = l->limit - r->value; break;
    case K25_SLA_GT:
    case K25_SLA_GE: r->margin = r->value - l->limit; break;
    default: r->margin = NAN; break;
    }
    r->margin_pct = l->limit != 0 ? r->margin / fabs(l->limit) * 100.0 : NAN;
}

static void unsupported(struct k25_sla_result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void unsupported(struct k25_sla_result *r, const char *fmt, ...)
{
    r->verdict = K25_VERDICT_UNSUPPORTED;
    r->value = r->margin = r->margin_pct = NAN;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->note, sizeof(r->note), fmt, ap);
    va_end(ap);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void k25_sla_eval_samples(const struct k25_sla_line *l, double *v, size_t n, struct k25_sla_result *r)
{
    memset(r, 0, sizeof(*r));
    r->n = (int64_t)n;
    r->ci_lo = r->ci_hi = NAN;
    char sb[32];
    if (n == 0) {
        unsupported(r, "no sample%s", l->n_cond ? " matches the condition" : "");
        return;
    }
    qsort(v, n, sizeof(double), cmp_double);
    switch (l->stat) {
    case K25_SLA_MEAN: {
        double s = 0;
        for (size_t i = 0; i < n; i++)
            s += v[i];
        r->value = s / (double)n;
        break;
    }
    case K25_SLA_MIN: r->value = v[0]; break;
    case K25_SLA_MAX: r->value = v[n - 1]; break;
    case K25_SLA_QUANTILE: {
        if (!k25_stats_supported(n, l->q)) {
            size_t need = (size_t)ceil(1.0 / (1.0 - l->q) - 1e-9);
            unsupported(r, "%s needs at least %zu samples, the run has %zu", stat_name(l, sb, sizeof(sb)), need, n);
            r->n = (int64_t)n;
            return;
        }
        r->value = v[k25_stats_rank(n, l->q) - 1];
        size_t lo, hi;
        k25_stats_quantile_ci(n, l->q, 0.95, &lo, &hi, NULL);
        r->ci_lo = lo >= 1 ? v[lo - 1] : NAN;
        r->ci_hi = hi <= n ? v[hi - 1] : NAN;
        break;
    }
    }
    snprintf(r->note, sizeof(r->note), "n=%zu", n);
    verdict_of(l, r);
}

static bool cond_holds(const struct k25_sla_line *l, const struct k25_bench_req *q)
{
    for (int c = 0; c < l->n_cond; c++) {
        double x = !strcmp(l->cond[c].field, "input_length") ? q->n_input : q->n_output;
        if (!k25_sla_op_holds(l->cond[c].op, x, l->cond[c].value))
            return false;
    }
    return true;
}

/*
 * Why a line's conditions selected no request (issue 32: an SLA "at
 * input_length >= 32768" on a gold set whose longest prompt is 8191 tokens
 * is unsupported, and the reader must see why): the first condition that
 * no completed request meets on its own, with the range the runs covered;
 * else that no request meets them all at once.
 */
static void why_no_match(const struct k25_sla_line *l, const struct k25_report_run *runs, int n_runs,
                         struct k25_sla_result *out)
{
    size_t done = 0;
    for (int c = 0; c < l->n_cond; c++) {
        bool in = !strcmp(l->cond[c].field, "input_length");
        double lo = INFINITY, hi = -INFINITY;
        size_t match = 0;
        done = 0;
        for (int i = 0; i < n_runs; i++)
            for (size_t j = 0; j < runs[i].t.run.n_reqs; j++) {
                const struct k25_bench_req *q = &runs[i].t.run.reqs[j];
                if (q->state != K25_REQ_COMPLETED)
                    continue;
                double x = in ? q->n_input : q->n_output;
                lo = fmin(lo, x);
                hi = fmax(hi, x);
                match += k25_sla_op_holds(l->cond[c].op, x, l->cond[c].value);
                done++;
            }
        if (!done) {
            unsupported(out, "no completed request to select from");
            return;
        }
        if (!match) {
            unsupported(out, "no sample: no completed request has %s %s %.0f (the %zu completed requests have %s "
                             "%.0f to %.0f tokens; the gold set or --filter never reaches it)",
                        l->cond[c].field, k25_sla_op_text(l->cond[c].op), l->cond[c].value, done,
                        l->cond[c].field, lo, hi);
            return;
        }
    }
    unsupported(out, "no sample: each condition matches some of the %zu completed requests, but none matches all "
                     "at once", done);
}

void k25_sla_eval(const struct k25_sla_line *l, const struct k25_report_run *runs, int n_runs,
                  struct k25_sla_result *out)
{
    memset(out, 0, sizeof(*out));
    if (n_runs < 1) {
        unsupported(out, "no run to evaluate on");
        return;
    }
    if (l->src == K25_SLA_SRC_SCALAR) {
        /* a summary figure: the mean over repetition files */
        double s = 0;
        int k = 0;
        for (int i = 0; i < n_runs; i++) {
            double x = k25_report_scalar(runs[i].summary, l->metric);
            if (!isnan(x)) {
                s += x;
                k++;
            }
        }
        if (!k) {
            unsupported(out, "not measured by this run");
            out->ci_lo = out->ci_hi = NAN;
            return;
        }
        out->value = s / k;
        out->ci_lo = out->ci_hi = NAN;
        out->n = k;
        snprintf(out->note, sizeof(out->note), "%s", k > 1 ? "mean over the repetition files" : "run summary");
        verdict_of(l, out);
        return;
    }
    size_t cap = 0;
    for (int i = 0; i < n_runs; i++) {
        const struct k25_bench_run *r = &runs[i].t.run;
        cap += l->src == K25_SLA_SRC_BUSY ? r->n_win : r->n_reqs;
        if (l->src == K25_SLA_SRC_TOKEN)
            for (size_t j = 0; j < r->n_reqs; j++)
                cap += (size_t)(r->reqs[j].n_output > 0 ? r->reqs[j].n_output : 0);
    }
    double *v = malloc(sizeof(double) * (cap + 1));
    if (!v) {
        unsupported(out, "out of memory");
        return;
    }
    size_t n = 0;
    for (int i = 0; i < n_runs; i++) {
        const struct k25_bench_run *r = &runs[i].t.run;
        if (l->src == K25_SLA_SRC_BUSY) {
            /* as the bench summary: windows of at least half the 100 ms */
            for (size_t w = 0; w < r->n_win; w++) {
                const struct k25_bench_window *x = &r->win[w];
                if (x->len_ns < K25_BENCH_WINDOW_NS / 2)
                    continue;
                double f = x->busy_ns / (double)x->len_ns;
                v[n++] = f < 0 ? 0 : (f > 1 ? 1 : f);
            }
            continue;
        }
        for (size_t j = 0; j < r->n_reqs; j++) {
            const struct k25_bench_req *q = &r->reqs[j];
            if (q->state != K25_REQ_COMPLETED || !cond_holds(l, q))
                continue;
            if (l->src == K25_SLA_SRC_TOKEN) {
                for (int k = 1; k < q->n_output; k++)
                    v[n++] = (double)(q->token_ns[k] - q->token_ns[k - 1]) / 1e6;
                continue;
            }
            double x = NAN;
            switch (l->dist) {
            case K25_M_TTFT: x = k25_bench_req_ttft_ms(q); break;
            case K25_M_TPOT: x = k25_bench_req_tpot_ms(q); break;
            case K25_M_E2E: x = k25_bench_req_e2e_ms(q); break;
            case K25_M_QUEUE: x = k25_bench_req_queue_ms(q); break;
            default: break;
            }
            if (!isnan(x))
                v[n++] = x;
        }
    }
    k25_sla_eval_samples(l, v, n, out);
    if (n == 0 && l->n_cond)
        why_no_match(l, runs, n_runs, out);
    if (out->verdict != K25_VERDICT_UNSUPPORTED && l->n_cond) {
        char note[256];
        k25_report_sfmt(note, sizeof(note), "%s of the matching requests", out->note);
        snprintf(out->note, sizeof(out->note), "%s", note);
    }
    free(v);
}
