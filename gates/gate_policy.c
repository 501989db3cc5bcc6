/*
 * gate_policy.c - the gate policy (ci/gate-policy.yaml, docs/gates.md):
 * which metrics gate, which way is better, how much change is tolerated,
 * and how each is compared.
 *
 *   confidence: 0.95          # bootstrap interval
 *   resamples: 2000
 *   unsure: inconclusive      # inconclusive (exit 3) | pass | fail
 *   seed: 1                   # bootstrap seed (same inputs, same verdicts)
 *   metrics:
 *     ttft_ms: {from: request.ttft_ms, compare: statistical, better: lower,
 *               tolerance: 10%, other_machine: 50%, normalize: other-machine}
 *     peak_memory: {from: summary.memory.peak_tracked_bytes, compare: threshold,
 *               better: lower, tolerance: 5%}
 *     generated_tokens: {from: tokens, compare: exact}
 *
 * Errors name the file, the line and the key.
 */
#include "gate.h"
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define LINE(n) ((int)(n)->start_mark.line + 1)

const char *const k25_gate_req_names[K25_GATE_NREQ] = {"ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "output_tok_s"};

static void metric_init(struct k25_gate_metric *m, const char *name)
{
    memset(m, 0, sizeof(*m));
    snprintf(m->name, sizeof(m->name), "%s", name);
    m->cmp = K25_GATE_STATISTICAL;
    m->lower_better = true;
    m->relative = true;
    m->tol = 0.10;
    m->tol_other = -1; /* unless given: the same-machine tolerance */
    m->gate = true;
    m->src = K25_GATE_SRC_SUMMARY;
    snprintf(m->path, sizeof(m->path), "%s", name);
    for (int i = 0; i < K25_GATE_NREQ; i++)
        if (!strcmp(name, k25_gate_req_names[i]))
            m->src = K25_GATE_SRC_REQUEST;
    if (!strcmp(name, "generated_tokens")) {
        m->src = K25_GATE_SRC_TOKENS;
        m->cmp = K25_GATE_EXACT;
    }
}

static struct k25_gate_metric *add(struct k25_gate_policy *p, const char *name, enum k25_gate_source src,
                                   const char *path, enum k25_gate_compare cmp, bool lower, double tol,
                                   double tol_other)
{
    struct k25_gate_metric *m = &p->m[p->n++];
    metric_init(m, name);
    m->src = src;
    snprintf(m->path, sizeof(m->path), "%s", path);
    m->cmp = cmp;
    m->lower_better = lower;
    m->tol = tol;
    m->tol_other = tol_other;
    m->timing = cmp == K25_GATE_STATISTICAL;
    m->norm = cmp == K25_GATE_STATISTICAL ? K25_NORM_ALWAYS : K25_NORM_NONE;
    m->relative = cmp != K25_GATE_EXACT;
    return m;
}

static void policy_init(struct k25_gate_policy *p)
{
    memset(p, 0, sizeof(*p));
    p->confidence = 0.95;
    p->resamples = 2000;
    p->seed = 1;
}

/* Keep in step with ci/gate-policy.yaml (tests/test_gate.c checks they agree). */
void k25_gate_policy_default(struct k25_gate_policy *p)
{
    policy_init(p);
    snprintf(p->path, sizeof(p->path), "(built-in default)");
    add(p, "ttft_ms", K25_GATE_SRC_REQUEST, "ttft_ms", K25_GATE_STATISTICAL, true, 0.10, 0.50);
    add(p, "tpot_ms", K25_GATE_SRC_REQUEST, "tpot_ms", K25_GATE_STATISTICAL, true, 0.10, 0.50);
    add(p, "e2e_ms", K25_GATE_SRC_REQUEST, "e2e_ms", K25_GATE_STATISTICAL, true, 0.10, 0.50);
    add(p, "output_tok_per_s", K25_GATE_SRC_SUMMARY, "output_tok_per_s", K25_GATE_STATISTICAL, false, 0.10, 0.50)
        ->gate = false;
    add(p, "generated_tokens", K25_GATE_SRC_TOKENS, "", K25_GATE_EXACT, true, 0, 0.05);
    add(p, "requests_completed", K25_GATE_SRC_SUMMARY, "requests.completed", K25_GATE_EXACT, false, 0, 0);
    add(p, "output_tokens", K25_GATE_SRC_SUMMARY, "output_tokens", K25_GATE_EXACT, false, 0, 0);
    /* the elastic queue (issue 17): a run that degraded requests when the baseline did not is a
     * regression; a baseline written before the field existed reads "not in the baseline" (n/a) */
    add(p, "degraded_requests_ratio", K25_GATE_SRC_SUMMARY, "degraded_requests_ratio", K25_GATE_EXACT, true, 0, 0);
    add(p, "peak_memory_bytes", K25_GATE_SRC_SUMMARY, "memory.peak_tracked_bytes", K25_GATE_THRESHOLD, true, 0.05,
        0.05);
    add(p, "kv_blocks_peak", K25_GATE_SRC_SUMMARY, "memory.kv_blocks_peak", K25_GATE_THRESHOLD, true, 0.05, 0.05);
    add(p, "fidelity_kl_mean", K25_GATE_SRC_SUMMARY, "fidelity.kl_mean", K25_GATE_THRESHOLD, true, 0.01, 0.01)
        ->relative = false;
    add(p, "fidelity_token_agreement", K25_GATE_SRC_SUMMARY, "fidelity.token_agreement", K25_GATE_THRESHOLD, false,
        0.02, 0.02)
        ->relative = false;
}

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* "10%" -> 0.10 relative; "0.01" -> 0.01 absolute (relative stays as the caller set it when no %). */
static int parse_tol(const char *path, const yaml_node_t *v, const char *key, double *out, bool *relative,
                     struct k25_error *err)
{
    const char *s = scalar(v);
    char *end;
    errno = 0;
    double x = s ? strtod(s, &end) : NAN;
    if (!s || end == s || errno || !(x >= 0) || isinf(x) || (*end && strcmp(end, "%") != 0))
        return k25_error_set(err, K25_EINVAL, path, v ? LINE(v) : 0, key,
                             "expected a tolerance such as 10%% (relative) or 0.01 (absolute), got \"%s\"",
                             s ? s : "(not a scalar)");
    if (*end == '%') {
        x /= 100;
        if (relative)
            *relative = true;
    } else if (relative) {
        *relative = false;
    }
    *out = x;
    return K25_OK;
}

static int parse_num(const char *path, const yaml_node_t *v, const char *key, double lo, double hi, double *out,
                     struct k25_error *err)
{
    const char *s = scalar(v);
    char *end;
    errno = 0;
    double x = s ? strtod(s, &end) : NAN;
    if (!s || end == s || *end || errno || !(x >= lo && x <= hi))
        return k25_error_set(err, K25_EINVAL, path, v ? LINE(v) : 0, key, "expected a number in [%g, %g], got \"%s\"",
                             lo, hi, s ? s : "(not a scalar)");
    *out = x;
    return K25_OK;
}

static int parse_enum(const char *path, const yaml_node_t *v, const char *key, const char *const *names, int n,
                      int *out, struct k25_error *err)
{
    const char *s = scalar(v);
    for (int i = 0; s && i < n; i++)
        if (!strcmp(s, names[i])) {
            *out = i;
            return K25_OK;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "", names[i]);
    return k25_error_set(err, K25_EINVAL, path, v ? LINE(v) : 0, key, "expected one of %s, got \"%s\"", list,
                         s ? s : "(not a scalar)");
}

static int parse_metric(const char *path, yaml_document_t *doc, const yaml_node_t *kn, const yaml_node_t *vn,
                        struct k25_gate_metric *m, struct k25_error *err)
{
    const char *name = scalar(kn);
    if (!name || !*name || strlen(name) >= sizeof(m->name))
        return k25_error_set(err, K25_EINVAL, path, LINE(kn), "metrics", "a metric needs a name (up to 63 characters)");
    metric_init(m, name);
    m->line = LINE(kn);
    if (vn->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, path, LINE(vn), name,
                             "expected a mapping, e.g. {compare: statistical, better: lower, tolerance: 10%%}");
    bool have_timing = false, have_norm = false;
    int rc = K25_OK;
    for (yaml_node_pair_t *p = vn->data.mapping.pairs.start; p < vn->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k), *s = scalar(v);
        char field[160];
        snprintf(field, sizeof(field), "%s.%s", name, key ? key : "?");
        int e = 0;
        if (!key) {
            rc = k25_error_set(err, K25_EINVAL, path, LINE(k), name, "keys must be names");
        } else if (!strcmp(key, "from")) {
            if (!s)
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), field, "expected request.COLUMN, summary.PATH or tokens");
            else if (!strcmp(s, "tokens")) {
                m->src = K25_GATE_SRC_TOKENS;
                m->path[0] = 0;
            } else if (!strncmp(s, "request.", 8)) {
                m->src = K25_GATE_SRC_REQUEST;
                bool known = false;
                for (int i = 0; i < K25_GATE_NREQ; i++)
                    known |= !strcmp(s + 8, k25_gate_req_names[i]);
                if (!known)
                    rc = k25_error_set(err, K25_EINVAL, path, LINE(v), field,
                                       "unknown request column '%s' (ttft_ms, tpot_ms, e2e_ms, queue_ms, output_tok_s)",
                                       s + 8);
                snprintf(m->path, sizeof(m->path), "%s", s + 8);
            } else if (!strncmp(s, "summary.", 8) && s[8]) {
                m->src = K25_GATE_SRC_SUMMARY;
                snprintf(m->path, sizeof(m->path), "%s", s + 8);
            } else {
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), field,
                                   "expected request.COLUMN, summary.PATH or tokens, got \"%s\"", s);
            }
        } else if (!strcmp(key, "compare")) {
            static const char *const n[] = {"statistical", "threshold", "exact"};
            if (!(rc = parse_enum(path, v, field, n, 3, &e, err)))
                m->cmp = (enum k25_gate_compare)e;
        } else if (!strcmp(key, "better")) {
            static const char *const n[] = {"lower", "higher"};
            if (!(rc = parse_enum(path, v, field, n, 2, &e, err)))
                m->lower_better = e == 0;
        } else if (!strcmp(key, "tolerance")) {
            rc = parse_tol(path, v, field, &m->tol, &m->relative, err);
        } else if (!strcmp(key, "other_machine")) {
            if (s && !strcmp(s, "advise"))
                m->tol_other = NAN;
            else if (s && !strcmp(s, "same"))
                m->tol_other = -1; /* resolved below: the same-machine tolerance */
            else
                rc = parse_tol(path, v, field, &m->tol_other, NULL, err);
        } else if (!strcmp(key, "normalize")) {
            static const char *const n[] = {"none", "other-machine", "always"};
            if (!(rc = parse_enum(path, v, field, n, 3, &e, err)))
                m->norm = (enum k25_gate_norm)e;
            have_norm = true;
        } else if (!strcmp(key, "gate")) {
            static const char *const n[] = {"false", "true"};
            if (!(rc = parse_enum(path, v, field, n, 2, &e, err)))
                m->gate = e == 1;
        } else if (!strcmp(key, "timing")) {
            static const char *const n[] = {"false", "true"};
            if (!(rc = parse_enum(path, v, field, n, 2, &e, err)))
                m->timing = e == 1;
            have_timing = true;
        } else {
            rc = k25_error_set(err, K25_EINVAL, path, LINE(k), field,
                               "'%s': unknown key (from, compare, better, tolerance, other_machine, normalize, "
                               "gate, timing)",
                               key);
        }
    }
    if (rc)
        return rc;
    if (m->cmp == K25_GATE_EXACT) {
        m->tol = 0;
        m->relative = false;
    }
    if (m->tol_other < 0)
        m->tol_other = m->tol;
    if (!have_timing)
        m->timing = m->cmp == K25_GATE_STATISTICAL;
    if (!have_norm)
        m->norm = m->cmp == K25_GATE_STATISTICAL ? K25_NORM_OTHER_MACHINE : K25_NORM_NONE;
    if (m->src == K25_GATE_SRC_TOKENS && m->cmp != K25_GATE_EXACT)
        return k25_error_set(err, K25_EINVAL, path, m->line, name, "generated tokens are compared exactly (compare: exact)");
    if (m->cmp == K25_GATE_STATISTICAL && !m->relative)
        return k25_error_set(err, K25_EINVAL, path, m->line, name,
                             "a statistical comparison is of ratios: give the tolerance in percent");
    if (m->norm != K25_NORM_NONE && m->cmp != K25_GATE_STATISTICAL)
        return k25_error_set(err, K25_EINVAL, path, m->line, name, "normalize applies to statistical comparisons");
    return K25_OK;
}

int k25_gate_policy_load(const char *path, struct k25_gate_policy *pol, struct k25_error *err)
{
    policy_init(pol);
    snprintf(pol->path, sizeof(pol->path), "%s", path);

    yaml_document_t doc;
    int rc = k25_yaml_load(path, &doc, err);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = k25_error_set(err, K25_EFORMAT, path, root ? LINE(root) : 1, NULL,
                           "a gate policy is a mapping with a `metrics:` mapping");
        goto out_doc;
    }
    bool have_metrics = false;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
        const char *key = scalar(k);
        double x = 0;
        int e = 0;
        if (!key) {
            rc = k25_error_set(err, K25_EINVAL, path, LINE(k), NULL, "keys must be names");
        } else if (!strcmp(key, "confidence")) {
            if (!(rc = parse_num(path, v, key, 0.5, 0.999, &x, err)))
                pol->confidence = x;
        } else if (!strcmp(key, "resamples")) {
            if (!(rc = parse_num(path, v, key, 100, 100000, &x, err)))
                pol->resamples = (int)x;
        } else if (!strcmp(key, "seed")) {
            if (!(rc = parse_num(path, v, key, 0, 9007199254740992.0, &x, err)))
                pol->seed = (uint64_t)x;
        } else if (!strcmp(key, "unsure")) {
            /* `warn` (before issue 29: UNSURE passed with a note) is refused by name rather than
             * quietly given a new meaning */
            static const char *const n[] = {"inconclusive", "pass", "fail"};
            const char *sv = scalar(v);
            if (sv && !strcmp(sv, "warn"))
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), key,
                                   "'warn' is no longer a setting: UNSURE now makes the gate INCONCLUSIVE "
                                   "(exit 3) by default; say `unsure: pass` to let it pass, `fail` to fail");
            else if (!(rc = parse_enum(path, v, key, n, 3, &e, err)))
                pol->unsure = (enum k25_gate_unsure)e;
        } else if (!strcmp(key, "metrics")) {
            have_metrics = true;
            if (v->type != YAML_MAPPING_NODE) {
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), key, "expected a mapping of metric name to settings");
                break;
            }
            for (yaml_node_pair_t *q = v->data.mapping.pairs.start; q < v->data.mapping.pairs.top && !rc; q++) {
                if (pol->n >= K25_GATE_MAX_METRICS) {
                    rc = k25_error_set(err, K25_ERANGE, path, LINE(v), key, "at most %d metrics", K25_GATE_MAX_METRICS);
                    break;
                }
                yaml_node_t *mk = yaml_document_get_node(&doc, q->key), *mv = yaml_document_get_node(&doc, q->value);
                rc = parse_metric(path, &doc, mk, mv, &pol->m[pol->n], err);
                for (int i = 0; !rc && i < pol->n; i++)
                    if (!strcmp(pol->m[i].name, pol->m[pol->n].name))
                        rc = k25_error_set(err, K25_EINVAL, path, LINE(mk), pol->m[i].name,
                                           "metric listed twice (first on line %d)", pol->m[i].line);
                if (!rc)
                    pol->n++;
            }
        } else {
            rc = k25_error_set(err, K25_EINVAL, path, LINE(k), key,
                               "'%s': unknown key (confidence, resamples, seed, unsure, metrics)", key);
        }
    }
    if (!rc && (!have_metrics || pol->n == 0))
        rc = k25_error_set(err, K25_EINVAL, path, LINE(root), "metrics", "the policy lists no metric");
out_doc:
    yaml_document_delete(&doc);
    return rc;
}
