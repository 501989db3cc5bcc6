/*
 * engine.h - the engine object (engine-internal): request slots, the
 * waiting queue, the running batch, the KV pool and activation buffers.
 * engine.c steps the running batch, queue.c keeps the waiting requests
 * (queue.h), forward.c runs the model over one step's batch, sample.c
 * picks tokens.
 */
#ifndef K25_ENGINE_H
#define K25_ENGINE_H

#include "kvcache.h"
#include "kvtier.h"
#include "log.h"
#include "queue.h"

/* One submitted request. */
struct k25_slot {
    struct k25_result res;
    int32_t *prompt;          /* [res.n_input] (malloc'd copy) */
    int max_new;              /* tokens to generate */
    bool keep_logits;
    bool keep_attn;
    int32_t *forced;          /* [n_forced] teacher-forced output tokens (malloc'd copy) */
    int n_forced;
    int n_prefilled;          /* prompt tokens already in the KV cache */
    int64_t reserved_blocks;  /* promised by admission (budgeted pool) */
    int64_t admit_step;       /* stats.steps when admitted (degraded admission's service estimate) */
    struct k25_kv_seq seq;
    uint64_t rng;             /* sampling state, seeded from (seed, id) or the request's seed */
    double temperature, top_p; /* this request's sampling (request or config) */
    int32_t **stop;           /* [n_stop][stop_len[i]] stop sequences (malloc'd copies) */
    int *stop_len;            /* [n_stop] */
    int n_stop;
    bool ignore_eos;          /* request or config: the model's EOS ids do not end it */
    int out_cap;              /* capacity of output arrays */
    bool released;
    uint64_t spill_seq;       /* its record in the spill log, when spill_live */
    bool spill_live;          /* a spill record without its done record yet */
    struct k25_kv_spans spans; /* hotness policy: the request's tier spans (kvspan.c; owned) */
};

/* A contiguous run of one sequence's tokens in a forward pass. */
struct k25_span {
    struct k25_kv_seq *seq;
    const int32_t *tokens;    /* [n] */
    int n;
    int pos0;                 /* position of tokens[0] */
    float *logits;            /* [vocab] for the last token, or NULL */
    float *probe;             /* [n_probe][heads*head_dim] attention output of the last token, or NULL */
};

/* The weights of one layer as the backend holds them. */
struct k25_layer_w {
    struct k25_tensor attn_norm, wqkv, wo, ffn_norm, w_gate_up, w_down;
};

/* The model's weights in backend buffers (engine.c maps them at create). */
struct k25_weights {
    struct k25_tensor embed, final_norm, lm_head;
    struct k25_layer_w *layers; /* [n_layers] (malloc'd) */
    struct k25_buf **bufs;      /* [n_bufs] every buffer, freed at destroy (malloc'd) */
    int n_bufs;
    enum k25_dtype dtype;       /* the format the GEMMs read */
};

struct k25_engine {
    struct k25_config cfg;
    const struct k25_model *model;
    struct k25_mem_acct acct; /* this engine's memory (k25_engine_mem) */
    struct k25_bctx be;       /* the backend instance (cfg.backend) */
    struct k25_weights w;
    struct k25_kv_pool pool;
    struct k25_kv_tier *tier; /* KV tiers (kvtier.c), NULL when kv_hot_tokens is 0 (owned) */
    struct k25_log log;

    struct k25_slot **slots;  /* [n_slots], by handle */
    int n_slots, cap_slots;
    int *running;             /* handles in admission order [max_batch_size + q.deg_slots] */
    int n_running;            /* degraded ones included (q.n_running_deg of them) */
    struct k25_queue q;       /* elastic queue (queue.h, queue.c): waiting requests, spill log, breaker */
    int degraded_layers;      /* layers of the degraded (early-exit) model */
    k25_clock_fn clock;       /* queue, step and breaker times (TEST-ONLY replaceable) */
    void *clock_user;

    /* activation buffers (backend, K25_MEM_ACTIVATIONS) for t_cap tokens, fp32 */
    int t_cap;
    struct k25_buf *x;        /* [t][dim] residual stream */
    struct k25_buf *xn;       /* [t][dim] normalized */
    struct k25_buf *qkv;      /* [t][(heads+2*kv_heads)*head_dim] */
    struct k25_buf *att;      /* [t][heads*head_dim] */
    struct k25_buf *gu;       /* [t][2*ffn] */
    struct k25_buf *h;        /* [t][ffn] */
    struct k25_buf *cs;       /* [t][head_dim] cos|sin */
    struct k25_buf *last;     /* [t][dim] rows that need logits */
    struct k25_buf *logits;   /* [t][vocab] */
    int32_t *tok, *pos, *rows; /* [t] host: token ids, positions, gathered rows (malloc'd) */
    float *sample_work;       /* [vocab] */
    int32_t *sample_idx;      /* [vocab] */
    double *inv_freq;         /* [head_dim/2] */

    k25_event_cb cb;
    void *cb_user;
    k25_step_hook step_hook;
    void *step_user;
    struct k25_engine_stats stats;
    int threads;              /* the configured thread count */
};

/* Activation bytes forward.c allocates for steps of step_tokens tokens
 * (rows grow from 64 by doubling; *cap_out gets the row count, may be NULL). */
int64_t k25_activation_bytes(const struct k25_model_shape *s, int64_t step_tokens, int64_t *cap_out);

/*
 * Runs the model over spans (one step); fills each span's logits.  Only
 * the first n_layers layers run (the full model: shape.n_layers; the
 * degraded early-exit model: fewer), then the final norm and head; the
 * spans' sequences get KV for those layers only.
 */
int k25_forward(struct k25_engine *e, struct k25_span *spans, int n_spans, int n_layers, struct k25_error *err);

/* Next token from logits[vocab]: argmax when temperature == 0, else
 * temperature + top-p sampling with the xorshift state *rng.  Scratch:
 * the engine's sample_work/sample_idx (no state outside the engine). */
int32_t k25_sample(struct k25_engine *e, const float *logits, double temperature, double top_p, uint64_t *rng);

/* A seed for one request: mixes the run seed with the request id, so a
 * request samples the same tokens whatever else is in the batch. */
uint64_t k25_sample_seed(uint64_t seed, const char *id);

/* The backend's function table of engine e. */
#define K25_BE(e) ((e)->be.be)

#endif
