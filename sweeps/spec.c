/*
 * spec.c - sweep specs: YAML parsing and validation, grid expansion,
 * stable point ids, --only expressions and constraints.
 *
 * The spec is read with libyaml's document API so every error can name
 * the line of the node at fault.  Axis and fixed values are validated by
 * the engine's own config parser (k25_config_set), so a sweep accepts
 * exactly what `--config` accepts.
 */
#include "sweep.h"

#include "harness.h"

#include "gold.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define LINE(n) ((int)(n)->start_mark.line + 1)

static const char *scalar(const yaml_node_t *n)
{
    return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

static int expect_scalar(const char *path, const yaml_node_t *n, const char *key, const char **out,
                         struct k25_error *err)
{
    *out = scalar(n);
    if (!*out)
        return k25_error_set(err, K25_EINVAL, path, LINE(n), key, "expected a single value");
    return K25_OK;
}

static int parse_int64(const char *path, const yaml_node_t *n, const char *key, int64_t lo, int64_t *out,
                       struct k25_error *err)
{
    const char *s;
    int rc = expect_scalar(path, n, key, &s, err);
    if (rc)
        return rc;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno)
        return k25_error_set(err, K25_EINVAL, path, LINE(n), key, "expected an integer, got \"%s\"", s);
    if (v < lo)
        return k25_error_set(err, K25_ERANGE, path, LINE(n), key, "must be at least %lld, got %lld",
                             (long long)lo, v);
    *out = v;
    return K25_OK;
}

static int parse_double(const char *path, const yaml_node_t *n, const char *key, double lo, double *out,
                        struct k25_error *err)
{
    const char *s;
    int rc = expect_scalar(path, n, key, &s, err);
    if (rc)
        return rc;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v))
        return k25_error_set(err, K25_EINVAL, path, LINE(n), key, "expected a number, got \"%s\"", s);
    if (v < lo)
        return k25_error_set(err, K25_ERANGE, path, LINE(n), key, "must be at least %g, got %g", lo, v);
    *out = v;
    return K25_OK;
}

static int parse_bool(const char *path, const yaml_node_t *n, const char *key, bool *out, struct k25_error *err)
{
    const char *s;
    int rc = expect_scalar(path, n, key, &s, err);
    if (rc)
        return rc;
    if (!strcmp(s, "true") || !strcmp(s, "yes") || !strcmp(s, "on"))
        *out = true;
    else if (!strcmp(s, "false") || !strcmp(s, "no") || !strcmp(s, "off"))
        *out = false;
    else
        return k25_error_set(err, K25_EINVAL, path, LINE(n), key, "expected true or false, got \"%s\"", s);
    return K25_OK;
}

/* Validates "key: value" against the engine's config parser. */
static int check_config_value(const char *path, int line, const char *key, const char *value,
                              struct k25_error *err)
{
    struct k25_config scratch;
    k25_config_init(&scratch);
    return k25_config_set(&scratch, key, value, path, line, err);
}

bool k25_sweep_axis_is_client(const char *key)
{
    return !strcmp(key, "concurrency") || !strcmp(key, "rate");
}

/* A client axis value: concurrency an integer in 1..100000, rate a number > 0 (requests/s). */
static int check_client_value(const char *path, int line, const char *key, const char *value, struct k25_error *err)
{
    char *end;
    errno = 0;
    if (!strcmp(key, "concurrency")) {
        long long v = strtoll(value, &end, 10);
        if (end == value || *end || errno || v < 1 || v > 100000)
            return k25_error_set(err, K25_EINVAL, path, line, key, "expected an integer in 1..100000, got \"%s\"",
                                 value);
    } else {
        double v = strtod(value, &end);
        if (end == value || *end || errno || !(v > 0) || !isfinite(v))
            return k25_error_set(err, K25_EINVAL, path, line, key,
                                 "expected a positive request rate (requests/s), got \"%s\"", value);
    }
    return K25_OK;
}

void k25_sweep_point_workload(const struct k25_sweep_spec *s, const struct k25_sweep_point *p,
                              struct k25_sweep_workload *w)
{
    *w = s->wl;
    for (int a = 0; a < s->n_axes; a++) {
        if (!s->axes[a].client || p->reference || p->idx[a] < 0)
            continue;
        const char *v = s->axes[a].values[p->idx[a]];
        if (!strcmp(s->axes[a].key, "concurrency")) {
            w->concurrency = atoi(v);
            w->concurrency_set = true;
        } else {
            w->rate_rps = strtod(v, NULL);
        }
    }
}

/* Concurrency as the run uses it: open loop without a given cap means none (0). */
static int effective_concurrency(const struct k25_sweep_workload *w)
{
    bool open = w->search || w->rate_rps > 0;
    return open && !w->concurrency_set ? 0 : w->concurrency;
}

bool k25_sweep_point_client_default(const struct k25_sweep_spec *s, const struct k25_sweep_point *p)
{
    struct k25_sweep_workload w;
    k25_sweep_point_workload(s, p, &w);
    return w.rate_rps == s->wl.rate_rps && effective_concurrency(&w) == effective_concurrency(&s->wl);
}

/* ---------------------------------------------------- target: endpoint, launch */

/* The config key a {name} hole of a launch command names (port and k25 are the runner's). */
static bool launch_hole_known(const char *name)
{
    if (!strcmp(name, "port") || !strcmp(name, "k25"))
        return true;
    for (int i = 0; i < k25_config_key_count(); i++)
        if (!strcmp(k25_config_key(i)->key, name))
            return true;
    return false;
}

/* Does the launch command have the hole {key}? */
static bool launch_has_hole(const char *cmd, const char *key)
{
    char hole[80];
    snprintf(hole, sizeof(hole), "{%s}", key);
    return strstr(cmd, hole) != NULL;
}

/*
 * What the target allows.  A launch: command must take {port}, name only
 * known holes, and pass every engine axis and fixed key to the server
 * (else the sweep would vary a setting the server never sees).  A fixed
 * endpoint allows client axes only.  Neither measures fidelity.
 */
static int check_target(const struct k25_sweep_spec *s, struct k25_error *err)
{
    if (!s->endpoint[0] && !s->launch[0])
        return K25_OK;
    if (s->endpoint[0] && s->launch[0])
        return k25_error_set(err, K25_EINVAL, s->path, s->launch_line, "launch",
                             "give endpoint: (a running server) or launch: (a server per point), not both");
    int line = s->launch[0] ? s->launch_line : s->endpoint_line;
    if (s->fidelity)
        return k25_error_set(err, K25_EINVAL, s->path, line, "fidelity",
                             "fidelity compares the in-process engine with the exact one: not with a server");
    if (s->launch[0]) {
        if (!launch_has_hole(s->launch, "port"))
            return k25_error_set(err, K25_EINVAL, s->path, s->launch_line, "launch",
                                 "the command must take the port the runner picks: {port}");
        for (const char *p = strchr(s->launch, '{'); p; p = strchr(p + 1, '{')) {
            const char *e = strchr(p, '}');
            char name[64];
            if (!e || (size_t)(e - p - 1) >= sizeof(name))
                return k25_error_set(err, K25_EINVAL, s->path, s->launch_line, "launch",
                                     "unterminated or overlong {hole} at column %d", (int)(p - s->launch) + 1);
            snprintf(name, sizeof(name), "%.*s", (int)(e - p - 1), p + 1);
            if (!launch_hole_known(name))
                return k25_error_set(err, K25_EINVAL, s->path, s->launch_line, "launch",
                                     "unknown hole {%s}: {port}, {k25} or a config key (k25 config --keys)", name);
        }
    }
    for (int a = 0; a < s->n_axes; a++) {
        if (s->axes[a].client)
            continue;
        if (!s->launch[0])
            return k25_error_set(err, K25_EINVAL, s->path, s->axes[a].line, s->axes[a].key,
                                 "'%s' is an engine setting: against a fixed endpoint only the client axes "
                                 "(concurrency, rate) can vary; sweep it with the in-process engine or a launch: "
                                 "command that starts the server per point with {%s}",
                                 s->axes[a].key, s->axes[a].key);
        if (!launch_has_hole(s->launch, s->axes[a].key))
            return k25_error_set(err, K25_EINVAL, s->path, s->axes[a].line, s->axes[a].key,
                                 "the launch: command never passes this axis to the server: add {%s} to it",
                                 s->axes[a].key);
    }
    for (int f = 0; f < s->n_fixed; f++) {
        if (!s->launch[0])
            return k25_error_set(err, K25_EINVAL, s->path, 0, s->fixed_key[f],
                                 "fixed: '%s' is an engine setting a fixed endpoint does not take from us: "
                                 "configure the server, or use a launch: command with {%s}",
                                 s->fixed_key[f], s->fixed_key[f]);
        if (!launch_has_hole(s->launch, s->fixed_key[f]))
            return k25_error_set(err, K25_EINVAL, s->path, 0, s->fixed_key[f],
                                 "fixed: the launch: command never passes '%s' to the server: add {%s} to it",
                                 s->fixed_key[f], s->fixed_key[f]);
    }
    return K25_OK;
}

int k25_sweep_spec_set_endpoint(struct k25_sweep_spec *s, const char *url, struct k25_error *err)
{
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--endpoint",
                             "expected an http:// or https:// URL, got \"%s\"", url);
    if ((size_t)snprintf(s->endpoint, sizeof(s->endpoint), "%s", url) >= sizeof(s->endpoint))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--endpoint", "URL too long");
    s->endpoint_line = 0;
    s->launch[0] = '\0'; /* the command line's server replaces the spec's */
    return check_target(s, err);
}

static int parse_launch(struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    s->launch_line = LINE(n);
    const char *cmd = scalar(n);
    if (cmd) {
        snprintf(s->launch, sizeof(s->launch), "%s", cmd);
        return K25_OK;
    }
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "launch",
                             "expected a command, or {command: ..., health_timeout_s: S, stop_grace_s: S}");
    int rc = K25_OK;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k), *sv;
        if (key && !strcmp(key, "command")) {
            if (!(rc = expect_scalar(s->path, v, key, &sv, err)))
                snprintf(s->launch, sizeof(s->launch), "%s", sv);
        } else if (key && !strcmp(key, "health_timeout_s")) {
            rc = parse_double(s->path, v, key, 0.1, &s->launch_timeout_s, err);
        } else if (key && !strcmp(key, "stop_grace_s")) {
            rc = parse_double(s->path, v, key, 0.0, &s->launch_grace_s, err);
        } else {
            return k25_error_set(err, K25_ENOTFOUND, s->path, LINE(k), key ? key : "launch",
                                 "unknown launch key (command, health_timeout_s, stop_grace_s)");
        }
    }
    if (!rc && !s->launch[0])
        rc = k25_error_set(err, K25_EINVAL, s->path, LINE(n), "launch", "needs a command");
    return rc;
}

static int parse_workload(struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    struct k25_sweep_workload *w = &s->wl;
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "workload", "expected a mapping");
    w->line = LINE(n);
    int rc = K25_OK;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k);
        int64_t iv;
        if (!key)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(k), "workload", "keys must be names");
        if (!strcmp(key, "concurrency")) {
            if (!(rc = parse_int64(s->path, v, key, 1, &iv, err))) {
                w->concurrency = (int)iv;
                w->concurrency_set = true;
            }
        } else if (!strcmp(key, "requests")) {
            rc = parse_int64(s->path, v, key, 1, &w->requests, err);
        } else if (!strcmp(key, "duration_s")) {
            rc = parse_double(s->path, v, key, 0.001, &w->duration_s, err);
        } else if (!strcmp(key, "rate")) {
            rc = parse_double(s->path, v, key, 0.0, &w->rate_rps, err);
        } else if (!strcmp(key, "burstiness")) {
            rc = parse_double(s->path, v, key, 0.01, &w->burstiness, err);
        } else if (!strcmp(key, "warmup")) {
            rc = parse_int64(s->path, v, key, 0, &w->warmup, err);
        } else if (!strcmp(key, "slo")) {
            const char *sv;
            if (!(rc = expect_scalar(s->path, v, key, &sv, err)))
                snprintf(w->slo, sizeof(w->slo), "%s", sv);
        } else if (!strcmp(key, "search")) {
            const char *sv;
            if ((rc = expect_scalar(s->path, v, key, &sv, err)))
                break;
            if (strcmp(sv, "max_rate") != 0)
                return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key,
                                     "the only search is max_rate, got \"%s\"", sv);
            w->search = true;
        } else if (!strcmp(key, "search_slo")) {
            /* search_slo: {ttft_p99_ms: 1200} - the metric the rate may push to its limit */
            w->search_line = LINE(v);
            if (v->type != YAML_MAPPING_NODE || v->data.mapping.pairs.top - v->data.mapping.pairs.start != 1)
                return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key,
                                     "expected one `metric: limit`, e.g. {ttft_p99_ms: 1200}");
            yaml_node_pair_t *q = v->data.mapping.pairs.start;
            const char *m = scalar(yaml_document_get_node(doc, q->key));
            if (!m || !k25_sweep_metric_known(m))
                return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key, "unknown metric '%s'", m ? m : "?");
            snprintf(w->search_metric, sizeof(w->search_metric), "%s", m);
            rc = parse_double(s->path, yaml_document_get_node(doc, q->value), m, 0.0, &w->search_limit, err);
        } else if (!strcmp(key, "rate_lo")) {
            rc = parse_double(s->path, v, key, 0.0001, &w->rate_lo, err);
        } else if (!strcmp(key, "rate_hi")) {
            rc = parse_double(s->path, v, key, 0.0001, &w->rate_hi, err);
        } else if (!strcmp(key, "precision")) {
            rc = parse_double(s->path, v, key, 0.001, &w->precision, err);
        } else {
            return k25_error_set(err, K25_ENOTFOUND, s->path, LINE(k), key,
                                 "unknown workload key (concurrency, requests, duration_s, rate, burstiness, "
                                 "warmup, slo, search, search_slo, rate_lo, rate_hi, precision)");
        }
    }
    if (rc)
        return rc;
    if (w->requests > 0 && w->duration_s > 0)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "workload", "give requests or duration_s, not both");
    if (w->requests == 0 && w->duration_s == 0 && !w->search)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "workload", "needs requests or duration_s");
    if (w->search) {
        if (!w->search_metric[0])
            return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "workload",
                                 "search: max_rate needs search_slo: {metric: limit}");
        if (w->rate_hi <= w->rate_lo)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "workload",
                                 "search needs rate_lo < rate_hi (requests/s)");
        if (w->requests == 0 && w->duration_s == 0)
            w->requests = 32;
    }
    return K25_OK;
}

static int parse_axes(struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "axes", "expected a mapping of key: [values]");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k);
        if (!key)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(k), "axes", "axis names must be config keys");
        if (s->n_axes == K25_SWEEP_MAX_AXES)
            return k25_error_set(err, K25_ERANGE, s->path, LINE(k), key, "more than %d axes", K25_SWEEP_MAX_AXES);
        for (int i = 0; i < s->n_axes; i++)
            if (!strcmp(s->axes[i].key, key))
                return k25_error_set(err, K25_EINVAL, s->path, LINE(k), key, "axis given twice");
        struct k25_sweep_axis *a = &s->axes[s->n_axes];
        snprintf(a->key, sizeof(a->key), "%s", key);
        a->line = LINE(k);
        a->client = k25_sweep_axis_is_client(key);
        if (v->type != YAML_SEQUENCE_NODE)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key, "expected a list of values, e.g. [512, 1024]");
        for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
            yaml_node_t *e = yaml_document_get_node(doc, *it);
            const char *val = scalar(e);
            if (!val)
                return k25_error_set(err, K25_EINVAL, s->path, LINE(e), key, "axis values must be single values");
            if (a->n == K25_SWEEP_MAX_VALUES)
                return k25_error_set(err, K25_ERANGE, s->path, LINE(e), key, "more than %d values",
                                     K25_SWEEP_MAX_VALUES);
            int rc = a->client ? check_client_value(s->path, LINE(e), key, val, err)
                               : check_config_value(s->path, LINE(e), key, val, err);
            if (rc)
                return rc;
            for (int i = 0; i < a->n; i++)
                if (!strcmp(a->values[i], val))
                    return k25_error_set(err, K25_EINVAL, s->path, LINE(e), key, "value %s listed twice", val);
            snprintf(a->values[a->n++], sizeof(a->values[0]), "%s", val);
        }
        if (a->n == 0)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key, "axis with no values");
        s->n_axes++;
    }
    return K25_OK;
}

static int parse_fixed(struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "fixed", "expected a mapping of key: value");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k), *val = scalar(v);
        if (!key || !val)
            return k25_error_set(err, K25_EINVAL, s->path, LINE(k), "fixed", "expected key: value");
        if (s->n_fixed == K25_SWEEP_MAX_FIXED)
            return k25_error_set(err, K25_ERANGE, s->path, LINE(k), key, "too many fixed keys");
        int rc = check_config_value(s->path, LINE(v), key, val, err);
        if (rc)
            return rc;
        snprintf(s->fixed_key[s->n_fixed], sizeof(s->fixed_key[0]), "%s", key);
        snprintf(s->fixed_val[s->n_fixed++], sizeof(s->fixed_val[0]), "%s", val);
    }
    return K25_OK;
}

static int parse_objective(struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *n, struct k25_error *err)
{
    if (n->type != YAML_MAPPING_NODE)
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "objective",
                             "expected {minimize: METRIC, subject_to: [...]}");
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key), *v = yaml_document_get_node(doc, p->value);
        const char *key = scalar(k);
        if (key && (!strcmp(key, "minimize") || !strcmp(key, "maximize"))) {
            const char *m;
            int rc = expect_scalar(s->path, v, key, &m, err);
            if (rc)
                return rc;
            if (!k25_sweep_metric_known(m))
                return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key,
                                     "unknown metric '%s' (see docs/sweeps.md for the list)", m);
            snprintf(s->objective, sizeof(s->objective), "%s", m);
            s->maximize = key[1] == 'a';
        } else if (key && !strcmp(key, "subject_to")) {
            if (v->type != YAML_SEQUENCE_NODE)
                return k25_error_set(err, K25_EINVAL, s->path, LINE(v), key,
                                     "expected a list, e.g. [\"fidelity_kl_mean <= 0.05\"]");
            for (yaml_node_item_t *it = v->data.sequence.items.start; it < v->data.sequence.items.top; it++) {
                yaml_node_t *e = yaml_document_get_node(doc, *it);
                const char *c = scalar(e);
                if (!c)
                    return k25_error_set(err, K25_EINVAL, s->path, LINE(e), key, "expected \"metric op value\"");
                if (s->n_cons == K25_SWEEP_MAX_CONS)
                    return k25_error_set(err, K25_ERANGE, s->path, LINE(e), key, "too many constraints");
                int rc = k25_sweep_constraint_parse(c, s->path, LINE(e), &s->cons[s->n_cons], err);
                if (rc)
                    return rc;
                s->n_cons++;
            }
        } else {
            return k25_error_set(err, K25_ENOTFOUND, s->path, LINE(k), key ? key : "objective",
                                 "unknown objective key (minimize, maximize, subject_to)");
        }
    }
    if (!s->objective[0])
        return k25_error_set(err, K25_EINVAL, s->path, LINE(n), "objective", "needs minimize: or maximize:");
    return K25_OK;
}

/* The quantile a metric name stands for (ttft_p99_ms: 0.99), 0 when it is no percentile. */
static double metric_quantile(const char *name)
{
    static const struct { const char *suffix; double q; } pq[] = {
        {"_p50_ms", 0.50}, {"_p90_ms", 0.90}, {"_p95_ms", 0.95}, {"_p99_ms", 0.99}};
    size_t ln = strlen(name);
    for (size_t i = 0; i < sizeof(pq) / sizeof(pq[0]); i++) {
        size_t ls = strlen(pq[i].suffix);
        if (ln > ls && !strcmp(name + ln - ls, pq[i].suffix))
            return pq[i].q;
    }
    return 0;
}

/* Fewest samples that support quantile q (the harness's rule: n (1 - q) >= 1). */
static int64_t min_requests(double q)
{
    int64_t n = 1;
    while (!k25_stats_supported((size_t)n, q))
        n++;
    return n;
}

/*
 * A percentile a run cannot measure is a run that cannot pass: refuse a
 * spec whose search SLO, objective or constraint names a percentile its
 * request count does not support (P99 of 32 requests), with the count it
 * needs.  The search with duration_s is judged on the lowest probe rate
 * (rate_lo x duration_s requests expected); a closed loop with duration_s
 * has no count known in advance and is not checked.
 */
static int check_percentiles(const struct k25_sweep_spec *s, struct k25_error *err)
{
    const struct k25_sweep_workload *w = &s->wl;
    int64_t have = w->requests;
    const char *what = "workload.requests";
    if (have <= 0 && w->duration_s > 0) {
        double rate = w->search ? w->rate_lo : w->rate_rps;
        if (rate <= 0)
            return K25_OK;
        have = (int64_t)floor(rate * w->duration_s);
        what = w->search ? "workload.rate_lo x workload.duration_s" : "workload.rate x workload.duration_s";
    }
    struct use {
        const char *metric, *field;
        int line;
    } uses[2 + K25_SWEEP_MAX_CONS];
    int nu = 0;
    if (w->search)
        uses[nu++] = (struct use){w->search_metric, "search_slo", w->search_line};
    uses[nu++] = (struct use){s->objective, "objective", s->objective_line};
    for (int c = 0; c < s->n_cons; c++)
        uses[nu++] = (struct use){s->cons[c].metric, "subject_to", s->cons[c].line};
    for (int i = 0; i < nu; i++) {
        double q = metric_quantile(uses[i].metric);
        if (q <= 0)
            continue;
        int64_t need = min_requests(q);
        if (have >= need)
            continue;
        return k25_error_set(err, K25_EINVAL, s->path, uses[i].line, uses[i].field,
                             "%s needs at least %lld measured requests per %s (P%g of n requests is measured "
                             "only when n x %g >= 1), but %s gives %lld: raise it to %lld or pick a lower percentile",
                             uses[i].metric, (long long)need, w->search ? "probe" : "repetition", q * 100,
                             1 - q, what, (long long)have, (long long)need);
    }
    return K25_OK;
}

/* Lines of the top-level keys that later checks point at (0: key absent). */
struct spec_lines {
    int objective, dataset, filter;
};

/* Parses one top-level key k: v of a sweep spec into s, noting its line in ln where later checks need it.
 * Returns K25_OK, or the error set in err naming path, the line and the key. */
static int parse_top_key(const char *path, struct k25_sweep_spec *s, yaml_document_t *doc, yaml_node_t *k,
                         yaml_node_t *v, struct spec_lines *ln, struct k25_error *err)
{
    const char *key = scalar(k), *sv = NULL;
    int rc = K25_OK;
    int64_t iv;
    if (!key) {
        rc = k25_error_set(err, K25_EINVAL, path, LINE(k), NULL, "keys must be names");
    } else if (!strcmp(key, "name")) {
        if (!(rc = expect_scalar(path, v, key, &sv, err))) {
            snprintf(s->name, sizeof(s->name), "%s", sv);
            if (strpbrk(sv, "/ \t") || !*sv)
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), key, "a name without '/' or spaces");
        }
    } else if (!strcmp(key, "model")) {
        if (!(rc = expect_scalar(path, v, key, &sv, err)))
            snprintf(s->model, sizeof(s->model), "%s", sv);
    } else if (!strcmp(key, "dataset")) {
        if (!(rc = expect_scalar(path, v, key, &sv, err)))
            snprintf(s->dataset, sizeof(s->dataset), "%s", sv);
        ln->dataset = LINE(v);
    } else if (!strcmp(key, "filter")) {
        if (!(rc = expect_scalar(path, v, key, &sv, err)))
            snprintf(s->filter, sizeof(s->filter), "%s", sv);
        ln->filter = LINE(v);
    } else if (!strcmp(key, "workload")) {
        rc = parse_workload(s, doc, v, err);
    } else if (!strcmp(key, "repeats")) {
        s->repeats_line = LINE(v);
        if (!(rc = parse_int64(path, v, key, 1, &iv, err))) {
            if (iv > K25_SWEEP_MAX_REPEATS)
                rc = k25_error_set(err, K25_ERANGE, path, LINE(v), key, "at most %d repeats",
                                   K25_SWEEP_MAX_REPEATS);
            s->repeats = (int)iv;
        }
    } else if (!strcmp(key, "seed")) {
        if (!(rc = parse_int64(path, v, key, 0, &iv, err)))
            s->seed = (uint64_t)iv;
    } else if (!strcmp(key, "axes")) {
        rc = parse_axes(s, doc, v, err);
    } else if (!strcmp(key, "fixed")) {
        rc = parse_fixed(s, doc, v, err);
    } else if (!strcmp(key, "fidelity")) {
        rc = parse_bool(path, v, key, &s->fidelity, err);
    } else if (!strcmp(key, "endpoint")) {
        if (!(rc = expect_scalar(path, v, key, &sv, err))) {
            snprintf(s->endpoint, sizeof(s->endpoint), "%s", sv);
            s->endpoint_line = LINE(v);
            if (strncmp(sv, "http://", 7) != 0 && strncmp(sv, "https://", 8) != 0)
                rc = k25_error_set(err, K25_EINVAL, path, LINE(v), key, "expected an http:// or https:// URL");
        }
    } else if (!strcmp(key, "launch")) {
        rc = parse_launch(s, doc, v, err);
    } else if (!strcmp(key, "objective")) {
        ln->objective = LINE(k);
        s->objective_line = ln->objective;
        rc = parse_objective(s, doc, v, err);
    } else {
        rc = k25_error_set(err, K25_ENOTFOUND, path, LINE(k), key,
                           "unknown key (name, model, dataset, filter, workload, repeats, seed, axes, fixed, "
                           "fidelity, objective, endpoint, launch)");
    }
    return rc;
}

/* The spec's dataset must load through its filter and select at least one request; its hash goes into
 * every point id, so it is recorded in s with the dataset's absolute path. */
static int check_dataset(const char *path, struct k25_sweep_spec *s, const struct spec_lines *ln,
                         struct k25_error *err)
{
    struct k25_gold_opts go;
    k25_gold_opts_init(&go);
    struct k25_gold_set set;
    struct k25_error ge;
    k25_gold_filter_t *flt = NULL;
    if (s->filter[0] && k25_gold_filter_parse(s->filter, &flt, NULL, &ge) != K25_OK)
        return k25_error_set(err, K25_EINVAL, path, ln->filter, "filter", "%s", ge.msg);
    go.filter = flt;
    int lrc = k25_gold_load(s->dataset, &go, &set, &ge);
    k25_gold_filter_destroy(flt);
    if (lrc != K25_OK)
        return k25_error_set(err, K25_EINVAL, path, ln->dataset, "dataset", "%s", ge.msg);
    size_t n = set.n;
    snprintf(s->dataset_sha256, sizeof(s->dataset_sha256), "%s", set.sha256);
    char abs[PATH_MAX];
    snprintf(s->dataset_abs, sizeof(s->dataset_abs), "%s", realpath(s->dataset, abs) ? abs : s->dataset);
    k25_gold_set_free(&set);
    if (n == 0)
        return k25_error_set(err, K25_EINVAL, path, ln->filter ? ln->filter : ln->dataset, "filter",
                             "selects no request of %s", s->dataset);
    return K25_OK;
}

int k25_sweep_spec_load(const char *path, struct k25_sweep_spec *s, struct k25_error *err)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->path, sizeof(s->path), "%s", path);
    snprintf(s->model, sizeof(s->model), "tiny");
    s->repeats = 1;
    s->wl.concurrency = 1;
    s->wl.burstiness = 1.0;
    s->wl.precision = 0.05;
    s->launch_timeout_s = 120;
    s->launch_grace_s = 10;
    snprintf(s->objective, sizeof(s->objective), "%s", "");
    yaml_document_t doc;
    int rc = k25_yaml_load(path, &doc, err);
    if (rc)
        return rc;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    struct spec_lines ln = {0, 0, 0};
    if (!root || root->type != YAML_MAPPING_NODE) {
        rc = k25_error_set(err, K25_EFORMAT, path, root ? LINE(root) : 1, NULL, "a sweep spec is a mapping of keys");
        goto out_doc;
    }
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top && !rc; p++) {
        yaml_node_t *k = yaml_document_get_node(&doc, p->key), *v = yaml_document_get_node(&doc, p->value);
        rc = parse_top_key(path, s, &doc, k, v, &ln, err);
    }
    if (rc)
        goto out_doc;
    if (!s->dataset[0]) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, "dataset", "a spec needs a dataset");
        goto out_doc;
    }
    if (!ln.objective) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, "objective", "a spec needs an objective");
        goto out_doc;
    }
    if (!s->name[0]) { /* default: the spec's file name without .yaml */
        const char *b = strrchr(path, '/');
        snprintf(s->name, sizeof(s->name), "%s", b ? b + 1 : path);
        char *dot = strrchr(s->name, '.');
        if (dot)
            *dot = 0;
    }
    /* metrics that need fidelity measured */
    bool needs_fid = !strncmp(s->objective, "fidelity_", 9);
    for (int i = 0; i < s->n_cons; i++)
        needs_fid |= !strncmp(s->cons[i].metric, "fidelity_", 9);
    if (needs_fid && !s->fidelity) {
        rc = k25_error_set(err, K25_EINVAL, path, ln.objective, "fidelity",
                           "the objective uses a fidelity metric: set `fidelity: true`");
        goto out_doc;
    }
    /* the dataset must validate (and its hash goes into every point id) */
    if ((rc = check_dataset(path, s, &ln, err)))
        goto out_doc;

    if ((rc = check_target(s, err)))
        goto out_doc;
    for (int a = 0; a < s->n_axes; a++)
        if (s->axes[a].client && !strcmp(s->axes[a].key, "rate") && s->wl.search) {
            rc = k25_error_set(err, K25_EINVAL, path, s->axes[a].line, "rate",
                               "a rate axis and search: max_rate both set the rate: keep one");
            goto out_doc;
        }
    rc = check_percentiles(s, err);

out_doc:
    yaml_document_delete(&doc);
    return rc;
}

/* Applies model, fixed keys and the point's axis values to a fresh config. */
static int point_config(const struct k25_sweep_spec *s, const int *idx, struct k25_config *cfg,
                        struct k25_error *err)
{
    k25_config_init(cfg);
    snprintf(cfg->model, sizeof(cfg->model), "%s", s->model);
    cfg->seed = s->seed;
    for (int i = 0; i < s->n_fixed; i++) {
        int rc = k25_config_set(cfg, s->fixed_key[i], s->fixed_val[i], s->path, 0, err);
        if (rc)
            return rc;
    }
    for (int a = 0; a < s->n_axes; a++) {
        if (idx[a] < 0 || s->axes[a].client)
            continue; /* reference point: the default; a client axis is the workload's */
        int rc = k25_config_set(cfg, s->axes[a].key, s->axes[a].values[idx[a]], s->path, s->axes[a].line, err);
        if (rc)
            return rc;
    }
    return k25_config_validate(cfg, err);
}

/*
 * Stable id: SHA-256 of (config JSON, the point's workload, repeats-independent dataset hash, filter,
 * fidelity, and the target when it is a server: points of an endpoint or launch: sweep never share
 * an id with the in-process engine's).
 */
static int point_id(const struct k25_sweep_spec *s, const struct k25_sweep_point *p, char id[17])
{
    char *cj = k25_config_to_json(&p->cfg);
    if (!cj)
        return K25_ENOMEM;
    char *buf = NULL;
    struct k25_sweep_workload wl;
    k25_sweep_point_workload(s, p, &wl);
    const struct k25_sweep_workload *w = &wl;
    /* open loop: concurrency is a cap on requests in flight, none unless the spec gives one */
    int conc = effective_concurrency(w);
    int n = asprintf(&buf, "%s|c=%d r=%lld d=%.17g rate=%.17g b=%.17g wu=%lld slo=%s search=%d:%s:%.17g:%.17g:%.17g:%.17g"
                           "|ds=%s|f=%s|fid=%d%s%s%s%s",
                     cj, conc, (long long)w->requests, w->duration_s, w->rate_rps, w->burstiness,
                     (long long)w->warmup, w->slo, w->search, w->search_metric, w->search_limit, w->rate_lo,
                     w->rate_hi, w->precision, s->dataset_sha256, s->filter, s->fidelity,
                     s->endpoint[0] ? "|endpoint=" : "", s->endpoint, s->launch[0] ? "|launch=" : "", s->launch);
    free(cj);
    if (n < 0)
        return K25_ENOMEM;
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dn = 0;
    int ok = EVP_Digest(buf, (size_t)n, d, &dn, EVP_sha256(), NULL) == 1;
    free(buf);
    if (!ok)
        return K25_EINTERNAL;
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", d[i]);
    return K25_OK;
}

int k25_sweep_expand(const struct k25_sweep_spec *s, struct k25_sweep_point **points, int *n_points,
                     struct k25_error *err)
{
    int64_t total = 1;
    for (int a = 0; a < s->n_axes; a++)
        total *= s->axes[a].n;
    if (total > 100000)
        return k25_error_set(err, K25_ERANGE, s->path, 0, "axes", "the grid has %lld points (limit 100000)",
                             (long long)total);
    struct k25_sweep_point *p = calloc((size_t)total + 1, sizeof(*p));
    if (!p)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int rc = K25_OK, n = 0;
    struct k25_config defaults;
    int none[K25_SWEEP_MAX_AXES];
    for (int a = 0; a < K25_SWEEP_MAX_AXES; a++)
        none[a] = -1;
    if ((rc = point_config(s, none, &defaults, err)))
        goto out_fail;
    bool grid_has_defaults = false;
    for (int64_t i = 0; i < total; i++) {
        int64_t r = i;
        for (int a = s->n_axes - 1; a >= 0; a--) { /* last axis varies fastest */
            p[n].idx[a] = (int)(r % s->axes[a].n);
            r /= s->axes[a].n;
        }
        if ((rc = point_config(s, p[n].idx, &p[n].cfg, err)) || (rc = point_id(s, &p[n], p[n].id)))
            goto out_fail;
        if (!memcmp(&p[n].cfg, &defaults, sizeof(defaults)) && k25_sweep_point_client_default(s, &p[n]))
            grid_has_defaults = true;
        n++;
    }
    if (!grid_has_defaults && s->n_axes > 0) {
        memcpy(p[n].idx, none, sizeof(none));
        p[n].reference = true;
        p[n].cfg = defaults;
        if ((rc = point_id(s, &p[n], p[n].id)))
            goto out_fail;
        n++;
    }
    *points = p;
    *n_points = n;
    return K25_OK;

out_fail:
    free(p);
    return rc ? rc : K25_EINTERNAL;
}

void k25_sweep_points_free(struct k25_sweep_point *points, int n)
{
    if (!points)
        return;
    for (int i = 0; i < n; i++) {
        json_decref(points[i].metrics);
        json_decref(points[i].metrics_ci);
    }
    free(points);
}

void k25_sweep_point_label(const struct k25_sweep_spec *s, const struct k25_sweep_point *p, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = 0;
    if (p->reference || s->n_axes == 0) {
        snprintf(buf, n, "defaults");
        return;
    }
    for (int a = 0; a < s->n_axes && used < n; a++)
        used += (size_t)snprintf(buf + used, n - used, "%s%s=%s", a ? " " : "", s->axes[a].key,
                                 s->axes[a].values[p->idx[a]]);
}

/* ---------------------------------------------------- small expressions */

/* Constraints and --only are util's expression language (k25util.h); the operators line up. */
_Static_assert((int)K25_OP_LT == (int)K25_EXPR_LT && (int)K25_OP_LE == (int)K25_EXPR_LE &&
                   (int)K25_OP_GT == (int)K25_EXPR_GT && (int)K25_OP_GE == (int)K25_EXPR_GE &&
                   (int)K25_OP_EQ == (int)K25_EXPR_EQ && (int)K25_OP_NE == (int)K25_EXPR_NE,
               "k25_sweep_op and k25_expr_op differ");

/* A constraint's name: a metric the sweep knows, a number. */
static bool metric_resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    (void)ctx;
    *slot = -1;
    *type = K25_EXPR_NUM;
    if (k25_sweep_metric_known(name))
        return true;
    snprintf(why, n, "unknown metric '%.63s' (see docs/sweeps.md for the list)", name);
    return false;
}

int k25_sweep_constraint_parse(const char *text, const char *file, int line, struct k25_sweep_constraint *c,
                               struct k25_error *err)
{
    memset(c, 0, sizeof(*c));
    snprintf(c->text, sizeof(c->text), "%s", text);
    c->line = line;
    char what[200];
    snprintf(what, sizeof(what), "\"%.160s\"", text);
    const struct k25_expr_opts o = {
        .what = what, .file = file, .line = line, .field = "subject_to", .names = "a metric name",
        .resolve = metric_resolve,
    };
    struct k25_expr *e;
    int rc = k25_expr_parse(text, &o, &e, NULL, NULL, err);
    if (rc < 0)
        return rc;
    if (e->kind != K25_EXPR_CMP) {
        rc = k25_error_set(err, K25_EINVAL, file, line, "subject_to",
                           "%s: column %d: a constraint is one comparison `METRIC OP NUMBER`, got '%s'", what, e->col,
                           e->kind == K25_EXPR_NOT ? "!" : e->kind == K25_EXPR_AND ? "&&" : "||");
        goto out_free;
    }
    snprintf(c->metric, sizeof(c->metric), "%s", e->name);
    c->op = (enum k25_sweep_op)e->op;
    c->value = e->num;
out_free:
    k25_expr_free(e);
    return rc;
}

bool k25_sweep_constraint_holds(const struct k25_sweep_constraint *c, double v)
{
    const struct k25_expr cmp = {.kind = K25_EXPR_CMP, .op = (enum k25_expr_op)c->op,
                                 .value_type = K25_EXPR_NUM, .num = c->value};
    return k25_expr_cmp_holds(&cmp, (struct k25_expr_value){.type = K25_EXPR_NUM, .num = v});
}

/* Does s read as a number (the way --only compares an axis value)? */
static bool axis_number(const char *s, double *v)
{
    return k25_expr_number(s, v);
}

/* --only's names: the spec's axes; a number when every value of the axis is one, text when none is. */
static bool axis_resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    const struct k25_sweep_spec *s = ctx;
    for (int a = 0; a < s->n_axes; a++) {
        if (strcmp(s->axes[a].key, name) != 0)
            continue;
        int nums = 0;
        double v;
        for (int i = 0; i < s->axes[a].n; i++)
            nums += axis_number(s->axes[a].values[i], &v);
        *slot = a;
        *type = nums == s->axes[a].n ? K25_EXPR_NUM : nums == 0 ? K25_EXPR_STR : K25_EXPR_ANY;
        return true;
    }
    size_t k = (size_t)snprintf(why, n, "unknown axis '%.63s' (axes:", name);
    for (int a = 0; a < s->n_axes && k < n; a++)
        k += (size_t)snprintf(why + k, n - k, "%s %s", a ? "," : "", s->axes[a].key);
    if (k < n)
        snprintf(why + k, n - k, "%s)", s->n_axes ? "" : " none");
    return false;
}

struct only_ctx {
    const struct k25_sweep_spec *s;
    const struct k25_sweep_point *pt;
};

/* A point's value of an axis (the reference point has none: absent). */
static struct k25_expr_value axis_lookup(void *ctx, const char *name, int slot)
{
    (void)name;
    const struct only_ctx *c = ctx;
    struct k25_expr_value v = {.type = K25_EXPR_ANY};
    if (c->pt->reference || c->pt->idx[slot] < 0)
        return v;
    v.str = c->s->axes[slot].values[c->pt->idx[slot]];
    v.type = axis_number(v.str, &v.num) ? K25_EXPR_NUM : K25_EXPR_STR;
    return v;
}

int k25_sweep_only_match(const struct k25_sweep_spec *s, const struct k25_sweep_point *pt, const char *expr,
                         bool *match, struct k25_error *err)
{
    const struct k25_expr_opts o = {.what = "--only", .names = "an axis name", .resolve = axis_resolve, .ctx = (void *)s};
    struct k25_expr *e;
    *match = true;
    int rc = k25_expr_parse(expr, &o, &e, NULL, NULL, err);
    if (rc < 0)
        return rc;
    struct only_ctx c = {s, pt};
    *match = k25_expr_eval(e, axis_lookup, &c);
    k25_expr_free(e);
    return K25_OK;
}
