/*
 * engine.h - the engine object (engine-internal): request slots, the
 * waiting queue, the running batch, the KV pool and activation buffers.
 * engine.c schedules, forward.c runs the model over one step's batch,
 * sample.c picks tokens.
 */
#ifndef K25_ENGINE_H
#define K25_ENGINE_H

#include "kvcache.h"
#include "log.h"

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
    struct k25_kv_seq seq;
    uint64_t rng;             /* sampling state, seeded from (seed, id) or the request's seed */
    double temperature, top_p; /* this request's sampling (request or config) */
    int32_t **stop;           /* [n_stop][stop_len[i]] stop sequences (malloc'd copies) */
    int *stop_len;            /* [n_stop] */
    int n_stop;
    int out_cap;              /* capacity of output arrays */
    bool released;
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

struct k25_engine {
    struct k25_config cfg;
    const struct k25_model *model;
    const struct k25_backend *be;
    k25_attention_fn attn;    /* cfg.attention: the engine's kernels or a baseline */
    struct k25_kv_pool pool;
    struct k25_kv_compress_opts comp; /* compression settings (pool.compress) */
    struct k25_log log;

    struct k25_slot **slots;  /* [n_slots], by handle */
    int n_slots, cap_slots;
    int *waiting;             /* handles, FIFO: [wait_head, n_wait_end) */
    int wait_head, wait_end, wait_cap;
    int *running;             /* handles in admission order */
    int n_running;

    /* activation buffers, k25_alloc(K25_MEM_ACTIVATIONS), for t_cap tokens */
    int t_cap;
    float *x;                 /* [t][dim] residual stream */
    float *xn;                /* [t][dim] normalized */
    float *qkv;               /* [t][(heads+2*kv_heads)*head_dim] */
    float *att;               /* [t][heads*head_dim] */
    float *gu;                /* [t][2*ffn] */
    float *h;                 /* [t][ffn] */
    float *cs;                /* [t][head_dim] cos|sin */
    float *last;              /* [t][dim] rows that need logits */
    float *logits;            /* [t][vocab] */
    float *sample_work;       /* [vocab] */
    int32_t *sample_idx;      /* [vocab] */
    double *inv_freq;         /* [head_dim/2] */

    k25_event_cb cb;
    void *cb_user;
    struct k25_engine_stats stats;
    int threads;              /* the configured thread count */
};

/* Activation bytes forward.c allocates for steps of step_tokens tokens
 * (rows grow from 64 by doubling; *cap_out gets the row count, may be NULL). */
int64_t k25_activation_bytes(const struct k25_model_shape *s, int64_t step_tokens, int64_t *cap_out);

/* Runs the model over spans (one step); fills each span's logits. */
int k25_forward(struct k25_engine *e, struct k25_span *spans, int n_spans, struct k25_error *err);

/* Next token from logits[vocab]: argmax when temperature == 0, else
 * temperature + top-p sampling with the xorshift state *rng.  Scratch:
 * the engine's sample_work/sample_idx (no state outside the engine). */
int32_t k25_sample(struct k25_engine *e, const float *logits, double temperature, double top_p, uint64_t *rng);

/* A seed for one request: mixes the run seed with the request id, so a
 * request samples the same tokens whatever else is in the batch. */
uint64_t k25_sample_seed(uint64_t seed, const char *id);

/* TEST-ONLY degradation knobs (testknob.c: K25_TEST_SLOWDOWN, K25_TEST_LOSSY; off unless set). */
void k25_testknob_apply(const struct k25_span *spans, int n, int vocab, uint64_t t0_ns);

#endif
