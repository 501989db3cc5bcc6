/*
 * fidelity.h - fidelity of a lossy engine setting against the exact engine
 * (harness-internal; fidelity.c says how it is measured).
 */
#ifndef K25_FIDELITY_H
#define K25_FIDELITY_H

#include "harness.h"

/* One request's figures. */
struct k25_fid_req {
    char id[64];
    int32_t n_input, n_pos;      /* prompt tokens; compared positions */
    double kl_mean, kl_max;      /* nats */
    double top1_agreement, top_prob_rms, token_agreement, attn_rel_err;
    int64_t kv_bytes_exact, kv_bytes; /* KV bytes at the end: exact engine, configured one */
};

/* A run's fidelity.  reqs and kl are owned (k25_fidelity_free). */
struct k25_fidelity {
    int tokens;                  /* --fidelity-tokens */
    int64_t n_requests, n_positions;
    double kl_mean, kl_p999, kl_max, top1_agreement, top_prob_rms, token_agreement, attn_rel_err;
    struct k25_fid_req *reqs;
    size_t n_reqs;
    double *kl;                  /* [n_kl] every compared position's KL */
    size_t n_kl;
    /* The elastic queue's degraded (early-exit) model against the full model of the configured
     * engine (k25_fidelity_measure_degraded); NULL when not measured.  Owned.  Its
     * attn_rel_err is NaN (the early exit skips the later probe layers) and kv_bytes_exact
     * is the full model's. */
    struct k25_fidelity *degraded;
    int degraded_layers;         /* layers the degraded model runs (in *degraded) */
};

/* KL(softmax(p) || softmax(q)) in nats. */
double k25_fid_kl(const float *p_logits, const float *q_logits, int V);
/* softmax(q)[t] - softmax(p)[t] for t = argmax p; *same_top: argmax q == t. */
double k25_fid_top_prob_delta(const float *p_logits, const float *q_logits, int V, bool *same_top);
/* ||a - ref|| / ||ref|| (0 when both are zero). */
double k25_fid_rel_err(const float *a, const float *ref, size_t n);

/* Computes the run figures from reqs and kl (K25_ENOMEM on failure). */
int k25_fidelity_finish(struct k25_fidelity *f);

/*
 * Measures inputs[0..n) with cfg against the exact engine on model, over
 * `tokens` generated positions each.  On failure f is empty.
 */
int k25_fidelity_measure(const struct k25_config *cfg, const k25_model_t *model, const struct k25_bench_input *inputs,
                         size_t n_inputs, int tokens, struct k25_fidelity *f, struct k25_error *err);
/*
 * The degraded model's fidelity: for each input the configured engine generates `tokens` tokens
 * with its full model (greedy), then runs the same request on its degraded model
 * (k25_request.force_degraded) teacher-forced with them (KL, top-1 agreement, top-prob RMS)
 * and free-running (token agreement).  Fills *out (allocated here; NULL on failure).
 */
int k25_fidelity_measure_degraded(const struct k25_config *cfg, const k25_model_t *model,
                                  const struct k25_bench_input *inputs, size_t n_inputs, int tokens,
                                  struct k25_fidelity **out, struct k25_error *err);
void k25_fidelity_free(struct k25_fidelity *f);

/* The run figures as the summary's "fidelity" object (new reference). */
json_t *k25_fidelity_json(const struct k25_fidelity *f);

/* Writes /fidelity (attributes + per-request table) into an open trace. */
struct k25_h5;
int k25_trace_write_fidelity(struct k25_h5 *h, const struct k25_fidelity *f, struct k25_error *err);

#endif
