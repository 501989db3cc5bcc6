/*
 * fidelity.c - what a lossy engine setting costs, measured against the
 * exact engine on the same inputs (`k25 bench --fidelity`, docs/cli.md).
 *
 * The exact engine is the configured one with unquantized weights (the
 * loaded model's weight_dtype: quantize_weights int8/int4 is measured
 * against it), fp32 KV, kv_compression_ratio
 * 1 and one-pass prefill.  For each selected request (greedy decoding in
 * both engines, whatever the configured temperature):
 *   1. the exact engine generates F tokens E (logits and the attention
 *      output at the probe layers of every generated position kept);
 *   2. the configured engine is teacher-forced with E: its logits at the
 *      same positions give the next-token KL divergence KL(exact || conf),
 *      top-1 agreement (same argmax) and the change of the exact top
 *      token's probability (RMS); its attention outputs give the relative
 *      error ||a_conf - a_exact|| / ||a_exact|| at the probe layers;
 *   3. the configured engine generates F tokens freely: greedy-token
 *      agreement is the fraction of the F positions where it emits E's token.
 * Run figures pool every compared position (KL mean, 99.9th percentile by
 * nearest rank, max; top-1 agreement; top-prob RMS; attention error mean)
 * and every request's token agreement (mean).
 */
#include "fidelity.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* log-softmax of x[V] into out[V] (double). */
static void log_softmax(const float *x, int V, double *out)
{
    double mx = x[0];
    for (int i = 1; i < V; i++)
        mx = x[i] > mx ? x[i] : mx;
    double s = 0;
    for (int i = 0; i < V; i++)
        s += exp((double)x[i] - mx);
    double lse = mx + log(s);
    for (int i = 0; i < V; i++)
        out[i] = (double)x[i] - lse;
}

double k25_fid_kl(const float *p_logits, const float *q_logits, int V)
{
    double *lp = malloc(sizeof(double) * 2 * (size_t)V);
    if (!lp)
        return NAN;
    double *lq = lp + V, kl = 0;
    log_softmax(p_logits, V, lp);
    log_softmax(q_logits, V, lq);
    for (int i = 0; i < V; i++)
        kl += exp(lp[i]) * (lp[i] - lq[i]);
    free(lp);
    return kl > 0 ? kl : 0; /* rounding can leave -1e-17 */
}

static int argmax(const float *x, int V)
{
    int b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

double k25_fid_top_prob_delta(const float *p_logits, const float *q_logits, int V, bool *same_top)
{
    int t = argmax(p_logits, V);
    *same_top = argmax(q_logits, V) == t;
    double *l = malloc(sizeof(double) * (size_t)V);
    if (!l)
        return NAN;
    log_softmax(p_logits, V, l);
    double pp = exp(l[t]);
    log_softmax(q_logits, V, l);
    double qq = exp(l[t]);
    free(l);
    return qq - pp;
}

double k25_fid_rel_err(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void k25_fidelity_free(struct k25_fidelity *f)
{
    free(f->reqs);
    free(f->kl);
    if (f->degraded) {
        k25_fidelity_free(f->degraded);
        free(f->degraded);
    }
    memset(f, 0, sizeof(*f));
}

/* Runs one request alone on e (on its degraded model when `degraded`); returns its result (owned by e).
 * keep: logits; keep_attn: the probe layers' attention too. */
static int run1x(k25_engine_t *e, const struct k25_bench_input *in, int max_new, const int32_t *forced,
                 int n_forced, bool keep, bool keep_attn, bool degraded, int *handle, struct k25_error *err)
{
    struct k25_request r = {.id = in->id, .input_ids = in->ids, .n_input = in->n_ids, .max_new_tokens = max_new,
                            .keep_logits = keep, .forced_ids = forced, .n_forced = n_forced, .keep_attn = keep_attn,
                            .force_degraded = degraded};
    int rc = k25_engine_submit(e, &r, handle, err);
    if (rc == K25_OK)
        rc = k25_engine_run(e, err);
    if (rc == K25_OK && k25_engine_result(e, *handle)->state != K25_REQ_COMPLETED)
        rc = k25_error_set(err, K25_EINVAL, NULL, 0, "fidelity", "request '%s' did not complete: %s", in->id,
                           k25_engine_result(e, *handle)->reason);
    if (rc == K25_OK && k25_engine_result(e, *handle)->degraded != degraded)
        rc = k25_error_set(err, K25_EINTERNAL, NULL, 0, "fidelity", "request '%s' ran on the %s model, not the %s",
                           in->id, degraded ? "full" : "degraded", degraded ? "degraded" : "full");
    return rc;
}

/* Runs one request alone on e on the full model (keep_attn follows keep). */
static int run1(k25_engine_t *e, const struct k25_bench_input *in, int max_new, const int32_t *forced,
                int n_forced, bool keep, int *handle, struct k25_error *err)
{
    return run1x(e, in, max_new, forced, n_forced, keep, keep, false, handle, err);
}

/* The per-request and per-position arrays of f for n_inputs requests of up to tokens positions. */
static int fid_alloc(struct k25_fidelity *f, size_t n_inputs, int tokens, struct k25_error *err)
{
    if (!(f->reqs = calloc(n_inputs ? n_inputs : 1, sizeof(*f->reqs))) ||
        !(f->kl = malloc(sizeof(double) * (n_inputs ? n_inputs : 1) * (size_t)tokens)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (fidelity)");
    return K25_OK;
}

int k25_fidelity_finish(struct k25_fidelity *f)
{
    f->n_positions = (int64_t)f->n_kl;
    double kl = 0, top1 = 0, rms = 0, tok = 0, attn = 0;
    size_t n_attn = 0;
    for (size_t i = 0; i < f->n_reqs; i++) {
        const struct k25_fid_req *r = &f->reqs[i];
        kl += r->kl_mean * r->n_pos;
        top1 += r->top1_agreement * r->n_pos;
        rms += r->top_prob_rms * r->top_prob_rms * r->n_pos;
        tok += r->token_agreement;
        if (!isnan(r->attn_rel_err)) {
            attn += r->attn_rel_err * r->n_pos;
            n_attn += (size_t)r->n_pos;
        }
    }
    double n = (double)f->n_kl;
    f->kl_mean = n > 0 ? kl / n : NAN;
    f->top1_agreement = n > 0 ? top1 / n : NAN;
    f->top_prob_rms = n > 0 ? sqrt(rms / n) : NAN;
    f->token_agreement = f->n_reqs ? tok / (double)f->n_reqs : NAN;
    f->attn_rel_err = n_attn ? attn / (double)n_attn : NAN;
    f->kl_p999 = f->kl_max = NAN;
    if (f->n_kl > 0) {
        double *v = malloc(sizeof(double) * f->n_kl);
        if (!v)
            return K25_ENOMEM;
        memcpy(v, f->kl, sizeof(double) * f->n_kl);
        qsort(v, f->n_kl, sizeof(double), cmp_double);
        size_t rank = (size_t)ceil(0.999 * (double)f->n_kl); /* nearest rank */
        f->kl_p999 = v[(rank ? rank : 1) - 1];
        f->kl_max = v[f->n_kl - 1];
        free(v);
    }
    f->n_requests = (int64_t)f->n_reqs;
    return K25_OK;
}

/*
 * One request's figures: ref is the reference run (its tokens), forced the candidate teacher-forced
 * on them (logits compared position by position), free_run the candidate generating on its own
 * (token agreement, KV bytes).  np attention probes of pw floats per position (hw per probe) are
 * compared when np > 0; otherwise attn_rel_err is NaN.  Appends one entry to f->reqs and the
 * per-position KL values to f->kl (both sized by the caller).
 */
static void compare_request(struct k25_fidelity *f, const struct k25_bench_input *in, const struct k25_result *ref,
                            const struct k25_result *forced, const struct k25_result *free_run, int V, int np,
                            size_t pw, size_t hw)
{
    struct k25_fid_req *q = &f->reqs[f->n_reqs++];
    snprintf(q->id, sizeof(q->id), "%s", in->id);
    q->n_input = in->n_ids;
    q->n_pos = ref->n_output;
    double klsum = 0, klmax = 0, top1 = 0, d2 = 0, ae = 0, agree = 0;
    for (int t = 0; t < ref->n_output; t++) {
        const float *pe = ref->logits + (size_t)t * V, *pf = forced->logits + (size_t)t * V;
        double kl = k25_fid_kl(pe, pf, V);
        bool same;
        double d = k25_fid_top_prob_delta(pe, pf, V, &same);
        f->kl[f->n_kl++] = kl;
        klsum += kl;
        klmax = kl > klmax ? kl : klmax;
        top1 += same;
        d2 += d * d;
        for (int k = 0; k < np; k++)
            ae += k25_fid_rel_err(forced->attn_probe + t * pw + k * hw, ref->attn_probe + t * pw + k * hw, hw);
        agree += t < free_run->n_output && free_run->output_ids[t] == ref->output_ids[t];
    }
    double n = ref->n_output > 0 ? ref->n_output : NAN;
    q->kl_mean = klsum / n;
    q->kl_max = klmax;
    q->top1_agreement = top1 / n;
    q->top_prob_rms = sqrt(d2 / n);
    q->attn_rel_err = np > 0 ? ae / (n * np) : NAN;
    q->token_agreement = agree / n;
    q->kv_bytes_exact = ref->kv_bytes_after;
    q->kv_bytes = free_run->kv_bytes_after;
}

int k25_fidelity_measure(const struct k25_config *cfg, const k25_model_t *model, const struct k25_bench_input *inputs,
                         size_t n_inputs, int tokens, struct k25_fidelity *f, struct k25_error *err)
{
    memset(f, 0, sizeof(*f));
    f->tokens = tokens;
    struct k25_config ce = *cfg, cc = *cfg;
    ce.kv_cache_dtype = K25_DTYPE_FP32;
    ce.quantize_weights = K25_WQUANT_NONE; /* the loaded weights (fp32/bf16/fp16), unquantized */
    ce.kv_compression_ratio = 1.0;
    ce.disable_prefill_optimization = true;
    ce.attention = K25_ATTN_CHUNKED;
    ce.memory_budget_mb = 0;
    ce.temperature = cc.temperature = 0.0;
    ce.log_level = cc.log_level = K25_LOG_OFF;
    ce.max_batch_size = 1;
    if (ce.max_num_batched_tokens < 1)
        ce.max_num_batched_tokens = 1;
    const struct k25_model_shape *s = k25_model_get_shape(model);
    const int V = s->vocab_size;
    int pl[3], np = k25_attn_probe_layers(s->n_layers, pl);
    const size_t pw = (size_t)np * s->n_heads * s->head_dim, hw = (size_t)s->n_heads * s->head_dim;
    k25_engine_t *ee = NULL, *ec = NULL;
    int rc;
    if ((rc = k25_engine_create(&ce, model, &ee, err)) != K25_OK ||
        (rc = k25_engine_create(&cc, model, &ec, err)) != K25_OK)
        goto out;
    k25_testknob_install(ee);
    k25_testknob_install(ec);
    if ((rc = fid_alloc(f, n_inputs, tokens, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < n_inputs; i++) {
        const struct k25_bench_input *in = &inputs[i];
        int he, hf, hc;
        if ((rc = run1(ee, in, tokens, NULL, 0, true, &he, err)) != K25_OK)
            goto out;
        const struct k25_result *re = k25_engine_result(ee, he);
        if ((rc = run1(ec, in, re->n_output, re->output_ids, re->n_output, true, &hf, err)) != K25_OK)
            goto out;
        const struct k25_result *rf = k25_engine_result(ec, hf);
        if ((rc = run1(ec, in, re->n_output, NULL, 0, false, &hc, err)) != K25_OK)
            goto out;
        const struct k25_result *rc_ = k25_engine_result(ec, hc);
        compare_request(f, in, re, rf, rc_, V, np, pw, hw);
        k25_engine_release(ee, he);
        k25_engine_release(ec, hf);
        k25_engine_release(ec, hc);
    }
    if (k25_fidelity_finish(f) != K25_OK)
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (fidelity)");
out:
    k25_engine_destroy(ee);
    k25_engine_destroy(ec);
    if (rc != K25_OK)
        k25_fidelity_free(f);
    return rc;
}

int k25_fidelity_measure_degraded(const struct k25_config *cfg, const k25_model_t *model,
                                  const struct k25_bench_input *inputs, size_t n_inputs, int tokens,
                                  struct k25_fidelity **out, struct k25_error *err)
{
    *out = NULL;
    struct k25_fidelity *f = calloc(1, sizeof(*f));
    if (!f)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (fidelity)");
    f->tokens = tokens;
    struct k25_config c = *cfg;
    c.temperature = 0.0;
    c.log_level = K25_LOG_OFF;
    c.breaker_enabled = false;   /* the full model runs as the full model: routing is by the request's flag */
    c.queue_spill_dir[0] = '\0'; /* the run's spill log is not this engine's */
    c.enable_prefix_caching = false; /* each pass prefills its own prompt */
    const int V = k25_model_get_shape(model)->vocab_size;
    k25_engine_t *e = NULL;
    int rc;
    if ((rc = k25_engine_create(&c, model, &e, err)) != K25_OK)
        goto out;
    k25_testknob_install(e);
    if ((rc = fid_alloc(f, n_inputs, tokens, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < n_inputs; i++) {
        const struct k25_bench_input *in = &inputs[i];
        int hf, hd, hc;
        if ((rc = run1x(e, in, tokens, NULL, 0, true, false, false, &hf, err)) != K25_OK)
            goto out;
        const struct k25_result *rf = k25_engine_result(e, hf);
        if ((rc = run1x(e, in, rf->n_output, rf->output_ids, rf->n_output, true, false, true, &hd, err)) != K25_OK)
            goto out;
        const struct k25_result *rd = k25_engine_result(e, hd);
        if ((rc = run1x(e, in, rf->n_output, NULL, 0, false, false, true, &hc, err)) != K25_OK)
            goto out;
        const struct k25_result *rc_ = k25_engine_result(e, hc);
        compare_request(f, in, rf, rd, rc_, V, 0, 0, 0);
        k25_engine_release(e, hf);
        k25_engine_release(e, hd);
        k25_engine_release(e, hc);
    }
    if (k25_fidelity_finish(f) != K25_OK)
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (fidelity)");
out:
    k25_engine_destroy(e);
    if (rc != K25_OK) {
        k25_fidelity_free(f);
        free(f);
        return rc;
    }
    *out = f;
    return K25_OK;
}

/* NaN-safe JSON number (null for NaN). */
static json_t *num(double x)
{
    return isnan(x) || isinf(x) ? json_null() : json_real(x);
}

json_t *k25_fidelity_json(const struct k25_fidelity *f)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "tokens", json_integer(f->tokens));
    json_object_set_new(o, "n_requests", json_integer(f->n_requests));
    json_object_set_new(o, "n_positions", json_integer(f->n_positions));
    json_object_set_new(o, "kl_mean", num(f->kl_mean));
    json_object_set_new(o, "kl_p999", num(f->kl_p999));
    json_object_set_new(o, "kl_max", num(f->kl_max));
    json_object_set_new(o, "top1_agreement", num(f->top1_agreement));
    json_object_set_new(o, "top_prob_rms", num(f->top_prob_rms));
    json_object_set_new(o, "token_agreement", num(f->token_agreement));
    json_object_set_new(o, "attn_rel_err", num(f->attn_rel_err));
    if (f->degraded) { /* the elastic queue's early-exit model against the full one */
        json_t *d = k25_fidelity_json(f->degraded);
        json_object_del(d, "attn_rel_err");
        json_object_set_new(d, "layers", json_integer(f->degraded_layers));
        json_object_set_new(d, "against", json_string("the configured engine's full model"));
        json_object_set_new(o, "degraded", d);
    }
    return o;
}
