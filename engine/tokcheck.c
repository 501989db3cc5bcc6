/*
 * tokcheck.c - the token-identity rule (k25.h, docs/engine.md): when two
 * runs count as having produced "the same tokens".
 *
 * Bit-identical tokens are promised only for the same arithmetic in the
 * same order: same binary, config, seed, thread count and batch shapes.
 * Anything else that is still a correct fp32 implementation of the model -
 * another OpenBLAS kernel set (SkylakeX, Haswell/Zen, Prescott), another
 * thread count or GEMM row count (OpenBLAS's Haswell and Prescott SGEMMs
 * round differently for each), another chunking, batch or attention kernel,
 * later a GPU backend in fp32 - sums in another order and moves every
 * logit by rounding.  Greedy tokens then differ only where the top two
 * logits were nearly tied, and this file decides which differences those
 * are.
 *
 * The tolerance, K25_TOK_TAU = 1e-3 (logit units), and how it was derived.
 *   1. Two summation orders of n products differ by at most about
 *      2 n u sum|terms| (u = 2^-24 = 6.0e-8), typically sqrt(n) u sum|terms|:
 *      the difference grows with the dot-product lengths (hidden size,
 *      attention context) and with the logits' magnitude.
 *   2. Measured on `tiny` (hidden 256, 4 layers; 24 teacher-forced
 *      positions after a 72-token and a 6000-token prompt): logits compared
 *      across the Haswell/Zen and Prescott kernels, threads 1 and 2,
 *      prefill chunks 64 / 1000 / 2048 / one-pass, chunked / flash2 / naive
 *      attention, and batched against solo runs differ by at most 2.6e-6,
 *      with |logits| <= 3.9: 7e-7 of the largest logit, about 11 u.  (An
 *      AVX2 machine: the SkylakeX kernels were not measured; `make test`
 *      runs the checks under them wherever the CPU has AVX-512.)
 *   3. Scaled to the models k25bench serves: logits up to ~30 (x8), hidden
 *      sizes up to 8192 (sqrt(8192/256) = 5.7x) and contexts to 128K
 *      (sqrt(128K/6K) = 4.6x): 2.6e-6 x 8 x 5.7 x 4.6 = 5.5e-4, rounded up
 *      to tau = 1e-3.  The bound 2 tau = 2e-3 is ~400x what tiny shows, and
 *      cheap: tiny's golden sequence has its smallest margin at 0.022.
 *   4. Not covered: settings that are lossy by design (fp16/int8/int4 KV,
 *      KV compression, quantized weights, TF32 or fp16 GEMMs).  Their
 *      logits move by more than tau; the fidelity metrics (KL, top-1
 *      agreement) measure them, not this rule.
 * If every logit of two runs differs by at most tau, the argmax can differ
 * only where top1 - top2 <= 2 tau: the leader can lose at most tau and the
 * runner-up gain at most tau.
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double k25_tok_bound(double tau)
{
    return 2.0 * tau;
}

/* k25_tok_margin (k25.h) is the sampler's: engine/sample.c. */

/* Whether position k had to agree: strict (no margins, or NaN: a sampled
 * token, which no argmax margin excuses) or a margin above the bound. */
static bool must_agree(const float *margins, int k, double bound)
{
    return !margins || !(margins[k] <= bound);
}

bool k25_tok_check(const int32_t *tokens, const float *margins, int n, const float *logits, int V, double tau,
                   struct k25_tok_report *rep)
{
    memset(rep, 0, sizeof(*rep));
    rep->tau = tau;
    rep->bound = k25_tok_bound(tau);
    rep->strict = margins == NULL;
    rep->first_mismatch = -1;
    rep->mismatch_margin = NAN;
    rep->want = rep->got = -1;
    rep->n_positions = n;
    for (int k = 0; k < n; k++) {
        int32_t top;
        float m = k25_tok_margin(logits + (size_t)k * V, V, &top);
        if (!must_agree(margins, k, rep->bound)) {
            rep->n_near_tie++;
            continue;
        }
        rep->n_checked++;
        if (top == tokens[k]) {
            if (margins && isfinite(margins[k]) && isfinite(m) && fabs((double)m - margins[k]) > rep->max_margin_drift)
                rep->max_margin_drift = fabs((double)m - margins[k]);
            continue;
        }
        if (rep->n_mismatch++ == 0) {
            rep->first_mismatch = k;
            rep->mismatch_margin = margins ? margins[k] : NAN;
            rep->want = tokens[k];
            rep->got = top;
        }
    }
    return rep->n_mismatch == 0;
}

int k25_tok_verify(k25_engine_t *e, const char *id, const int32_t *prompt, int n_prompt, const int32_t *tokens,
                   const float *margins, int n, double tau, struct k25_tok_report *rep, struct k25_error *err)
{
    const struct k25_config *cfg = k25_engine_config(e);
    if (cfg->temperature >= K25_SAMPLE_GREEDY_BELOW)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "temperature",
                             "token-identity replay needs greedy decoding (temperature 0, not %g)", cfg->temperature);
    if (n <= 0)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "tokens", "nothing to replay (%d tokens)", n);
    if (n > cfg->decode_max_tokens)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "decode_max_tokens",
                             "%d stored tokens, the engine generates at most %d", n, cfg->decode_max_tokens);
    struct k25_request req = {.id = id, .input_ids = prompt, .n_input = n_prompt, .max_new_tokens = n,
                              .keep_logits = true, .forced_ids = tokens, .n_forced = n};
    int h, rc = k25_engine_submit(e, &req, &h, err);
    if (rc != K25_OK)
        return rc;
    if ((rc = k25_engine_run(e, err)) != K25_OK)
        return rc;
    const struct k25_result *r = k25_engine_result(e, h);
    if (r->state != K25_REQ_COMPLETED || r->n_output != n) {
        rc = k25_error_set(err, K25_EINVAL, NULL, 0, "tokens", "replay of '%s' did not complete (%s, %d of %d tokens)",
                           r->id, r->reason[0] ? r->reason : k25_req_state_name(r->state), r->n_output, n);
    } else {
        k25_tok_check(tokens, margins, n, r->logits, e->model->shape.vocab_size, tau, rep);
    }
    k25_engine_release(e, h);
    return rc;
}

bool k25_tok_report_ok(const struct k25_tok_report *rep)
{
    return rep->n_mismatch == 0;
}

void k25_tok_report_format(const struct k25_tok_report *rep, char *buf, size_t n)
{
    int w = snprintf(buf, n, "%d positions: %d checked, %d near-tie skipped (margin <= %.3g)%s", rep->n_positions,
                     rep->n_checked, rep->n_near_tie, rep->bound, rep->strict ? " [strict: no stored margins]" : "");
    if (w < 0 || (size_t)w >= n)
        return;
    if (rep->n_mismatch == 0)
        snprintf(buf + w, n - (size_t)w, "; all agree (max margin drift %.2g)", rep->max_margin_drift);
    else
        snprintf(buf + w, n - (size_t)w, "; %d mismatch%s, first at position %d: stored %d (margin %.4g), replay %d",
                 rep->n_mismatch, rep->n_mismatch == 1 ? "" : "es", rep->first_mismatch, rep->want,
                 (double)rep->mismatch_margin, rep->got);
}

void k25_tok_compare(const int32_t *ref, const float *ref_margins, int n_ref, const int32_t *cand,
                     const float *cand_margins, int n_cand, double tau, struct k25_tok_cmp *out)
{
    memset(out, 0, sizeof(*out));
    out->tau = tau;
    out->bound = k25_tok_bound(tau);
    out->strict = ref_margins == NULL;
    out->n_ref = n_ref;
    out->n_cand = n_cand;
    out->margin_ref = out->margin_cand = NAN;
    int common = n_ref < n_cand ? n_ref : n_cand, k = 0;
    while (k < common && ref[k] == cand[k])
        k++;
    out->n_same = k;
    if (k == common && n_ref == n_cand) {
        out->diverged_at = -1;
        out->pass = true;
        return;
    }
    out->diverged_at = k;
    if (k == common) /* one ends early: generation length is not a rounding matter */
        return;
    if (ref_margins)
        out->margin_ref = ref_margins[k];
    if (cand_margins)
        out->margin_cand = cand_margins[k];
    /* both runs saw the same prefix up to k, so the rule holds exactly here */
    out->near_tie = !out->strict && out->margin_ref <= out->bound && (!cand_margins || out->margin_cand <= out->bound);
    if (out->near_tie && n_ref == n_cand) {
        out->pass = true;
        out->n_unverified = n_ref - k - 1;
    }
}
