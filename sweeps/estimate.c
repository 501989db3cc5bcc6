/*
 * estimate.c - `k25 sweep --dry-run`'s time estimate before any run of the
 * sweep exists (issue 32: it said "unknown"): a probe measures the engine
 * on this machine, the gold set gives each run's size.
 *
 *   probe   the spec's model with the reference's config, loaded once and
 *           given one request of the gold set's median prompt length (at
 *           most 1024 tokens) and 8 new tokens: seconds to load, seconds
 *           per prefill token, seconds per decode step
 *   size    a run's requests (warm-up included) taken from the filtered
 *           gold set in order, as `k25 bench` takes them: their prompt
 *           tokens, and their replies capped by the point's decode_max_tokens
 *   run     load + prefill tokens x s/token + decode tokens x s/step shared
 *           by the sequences decoding together (min(concurrency,
 *           max_batch_size)); an open loop lasts at least requests / rate;
 *           a duration-bound run its duration
 *
 * Rough by design (attention cost grows with length, batching is not
 * free): the sweep's own measured pace replaces it once a run finished.
 * Only for sweeps of the in-process engine with presets of at most 2 GiB
 * of weights (a probe must not load a large model); otherwise the
 * estimate stays unknown, saying why.
 */
#include "sweep_run.h"

#include "gold.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PROBE_MAX_WEIGHTS (2LL << 30)
#define PROBE_MAX_PROMPT 1024
#define PROBE_NEW_TOKENS 8

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* The filtered gold set's prompt and expected reply lengths, in file order (malloc'd). */
static int gold_sizes(const struct k25_sweep_spec *spec, int64_t **in, int64_t **out, size_t *n,
                      struct k25_error *err)
{
    struct k25_gold_opts go;
    k25_gold_opts_init(&go);
    k25_gold_filter_t *flt = NULL;
    int rc;
    *in = *out = NULL;
    *n = 0;
    if (spec->filter[0] && (rc = k25_gold_filter_parse(spec->filter, &flt, NULL, err)))
        return rc;
    go.filter = flt;
    struct k25_gold_set set;
    rc = k25_gold_load(spec->dataset_abs[0] ? spec->dataset_abs : spec->dataset, &go, &set, err);
    k25_gold_filter_destroy(flt);
    if (rc)
        return rc;
    *in = malloc(sizeof(int64_t) * (set.n + 1));
    *out = malloc(sizeof(int64_t) * (set.n + 1));
    if (!*in || !*out) {
        free(*in);
        free(*out);
        *in = *out = NULL;
        k25_gold_set_free(&set);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    for (size_t i = 0; i < set.n; i++) {
        (*in)[i] = set.reqs[i].input_length;
        (*out)[i] = set.reqs[i].expected_output_length;
    }
    *n = set.n;
    k25_gold_set_free(&set);
    return K25_OK;
}

int k25_sweep_probe(const struct k25_sweep_spec *spec, const struct k25_sweep_point *ref,
                    struct k25_sweep_probe *pr, char *why, size_t why_n)
{
    struct k25_error err;
    k25_error_clear(&err);
    memset(pr, 0, sizeof(*pr));
    if (spec->endpoint[0] || spec->launch[0]) {
        snprintf(why, why_n, "the sweep measures a server, which a dry run does not start");
        return K25_EINVAL;
    }
    struct k25_model_shape shape;
    if (k25_model_preset(ref->cfg.model, &shape) != K25_OK) {
        snprintf(why, why_n, "the model is a folder, not a preset: a dry run does not load real weights");
        return K25_EINVAL;
    }
    if (k25_model_weight_bytes(&shape, &ref->cfg) > PROBE_MAX_WEIGHTS) {
        snprintf(why, why_n, "model %s has more than 2 GiB of weights: a dry run does not load it", ref->cfg.model);
        return K25_EINVAL;
    }
    int64_t *in = NULL, *out = NULL;
    size_t n = 0;
    int rc = gold_sizes(spec, &in, &out, &n, &err);
    if (rc || n == 0) {
        snprintf(why, why_n, "%s", rc ? err.msg : "the filter selects no request of the gold set");
        free(in);
        free(out);
        return rc ? rc : K25_EINVAL;
    }
    pr->in = in;
    pr->out = out;
    pr->n = n;
    int64_t *sorted = malloc(sizeof(int64_t) * n);
    if (!sorted) {
        snprintf(why, why_n, "out of memory");
        return K25_ENOMEM;
    }
    memcpy(sorted, in, sizeof(int64_t) * n);
    qsort(sorted, n, sizeof(int64_t), cmp_i64);
    int plen = (int)(sorted[n / 2] < PROBE_MAX_PROMPT ? sorted[n / 2] : PROBE_MAX_PROMPT);
    free(sorted);
    plen = plen < 16 ? 16 : plen;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)plen);
    if (!ids) {
        snprintf(why, why_n, "out of memory");
        return K25_ENOMEM;
    }
    for (int i = 0; i < plen; i++)
        ids[i] = 32 + i % (shape.vocab_size > 128 ? 95 : shape.vocab_size - 32 > 0 ? shape.vocab_size - 32 : 1);
    struct k25_config cfg = ref->cfg;
    k25_model_t *model = NULL;
    k25_engine_t *eng = NULL;
    uint64_t t0 = k25_now_ns();
    if ((rc = k25_model_load(&cfg, &model, &err)) || (rc = k25_engine_create(&cfg, model, &eng, &err))) {
        snprintf(why, why_n, "the probe could not start the engine: %s", err.msg);
        goto out;
    }
    uint64_t t1 = k25_now_ns();
    struct k25_request req = {.id = "probe", .input_ids = ids, .n_input = plen, .max_new_tokens = PROBE_NEW_TOKENS};
    int h;
    if ((rc = k25_engine_submit(eng, &req, &h, &err)) || (rc = k25_engine_run(eng, &err))) {
        snprintf(why, why_n, "the probe request failed: %s", err.msg);
        goto out;
    }
    const struct k25_result *r = k25_engine_result(eng, h);
    if (r->state != K25_REQ_COMPLETED || r->n_output < 2 || !r->token_t_ns) {
        snprintf(why, why_n, "the probe request did not complete");
        rc = K25_EINVAL;
        goto out;
    }
    pr->load_s = (double)(t1 - t0) / 1e9;
    pr->prefill_s_per_tok = (double)(r->token_t_ns[0] - t1) / 1e9 / plen;
    pr->decode_s_per_step = (double)(r->token_t_ns[r->n_output - 1] - r->token_t_ns[0]) / 1e9 / (r->n_output - 1);
    pr->probe_tokens = plen;
    rc = K25_OK;
out:
    k25_engine_destroy(eng);
    k25_model_destroy(model);
    free(ids);
    return rc;
}

void k25_sweep_probe_free(struct k25_sweep_probe *pr)
{
    free(pr->in);
    free(pr->out);
    memset(pr, 0, sizeof(*pr));
}

double k25_sweep_estimate_run_s(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p,
                                const struct k25_sweep_probe *pr)
{
    if (!pr->n)
        return NAN;
    struct k25_sweep_workload w;
    k25_sweep_point_workload(spec, p, &w);
    if (w.requests <= 0) /* duration-bound: the run lasts its duration */
        return pr->load_s + (w.duration_s > 0 ? w.duration_s : NAN);
    int64_t reqs = w.requests + (w.warmup > 0 ? w.warmup : 0);
    double pre = 0, dec = 0;
    for (int64_t k = 0; k < reqs; k++) {
        size_t i = (size_t)(k % (int64_t)pr->n);
        int64_t o = pr->out[i];
        if (p->cfg.decode_max_tokens > 0 && o > p->cfg.decode_max_tokens)
            o = p->cfg.decode_max_tokens;
        pre += (double)pr->in[i] * pr->prefill_s_per_tok;
        dec += (double)o * pr->decode_s_per_step;
    }
    int together = w.concurrency > 0 ? w.concurrency : 1;
    if (p->cfg.max_batch_size > 0 && together > p->cfg.max_batch_size)
        together = p->cfg.max_batch_size;
    double s = pre + dec / together;
    if (w.rate_rps > 0)
        s = fmax(s, (double)reqs / w.rate_rps);
    return pr->load_s + s;
}
