/*
 * memcalc.c - the memory calculator: what the engine will hold, by
 * category, for a model, a context length, a batch and a config, computed
 * with the same arithmetic its allocations follow (forward.c activation
 * buffers, kvcache.c blocks, the attention kernels' scratch).  `k25 mem`
 * prints it; `k25 attn-bench` uses the attention-scratch figure to skip
 * settings that cannot fit; tests/test_mem.c holds it to within 10% of the
 * tracking allocator's measured peaks.  Figures only: the attention table
 * is attn_impl.c, the compression policy kvcompress.c.
 */
#include "engine.h"
#include "kvcache.h"
#include "kvtier.h"

#include <omp.h>
#include <string.h>

int64_t k25_kv_block_bytes(const struct k25_model_shape *s, int block_size, enum k25_dtype dtype)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    cfg.kv_block_size = block_size;
    cfg.kv_cache_dtype = dtype;
    cfg.kv_compression_ratio = 1.0;
    if (block_size % cfg.kv_quant_group)
        cfg.kv_quant_group = 1;
    struct k25_kv_layout lay;
    k25_kv_layout(&cfg, s, &lay);
    return lay.block_bytes;
}

void k25_kv_layout(const struct k25_config *cfg, const struct k25_model_shape *s, struct k25_kv_layout *out)
{
    memset(out, 0, sizeof(*out));
    struct k25_kv_pool p;
    struct k25_config c = *cfg;
    if (c.kv_block_size % c.kv_quant_group) /* invalid for int8/int4: figures for group 1 */
        c.kv_quant_group = 1;
    if (k25_kv_pool_init(&p, s, &c, 0, NULL, NULL) != K25_OK) { /* value groups that do not tile head_dim */
        c.kv_quant_group = 2;
        if (k25_kv_pool_init(&p, s, &c, 0, NULL, NULL) != K25_OK)
            return;
    }
    const double per_head_tokens = (double)s->n_layers * s->n_kv_heads; /* (layer, head) pairs */
    double data = 2.0 * (double)p.row_bytes;                             /* K and V of one token */
    double scales = ((double)p.ks_head_bytes + (double)p.vs_head_bytes) / p.block_size;
    out->block_bytes = (int64_t)p.block_bytes;
    out->residual_bytes = p.quant ? (int64_t)sizeof(uint16_t) * s->n_layers * 2 * s->n_kv_heads * p.res_cap * s->head_dim : 0;
    out->bits_per_value = (data + scales) * 8.0 / (2.0 * s->head_dim);
    out->bytes_per_token = (data + scales) * per_head_tokens;
    out->meta_bytes_per_token = (double)p.meta_head_bytes / p.block_size * per_head_tokens;
    out->compress = p.compress;
}

/* Floats per activation row: the buffers of forward.c's ensure_buffers. */
static int64_t activation_row_floats(const struct k25_model_shape *s)
{
    return 3 * (int64_t)s->dim + (int64_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim +
           (int64_t)s->n_heads * s->head_dim + 3 * (int64_t)s->ffn_dim + s->head_dim + s->vocab_size;
}

int64_t k25_activation_bytes(const struct k25_model_shape *s, int64_t step_tokens, int64_t *cap_out)
{
    int64_t cap = 64; /* forward.c: start at 64 rows, double until the step fits */
    while (cap < step_tokens)
        cap *= 2;
    if (cap_out)
        *cap_out = cap;
    return 4 * activation_row_floats(s) * cap;
}

/*
 * The scratch peak of attention for the setting: the largest call.  For
 * the baselines that keep per-job memory (naive), that is the job with the
 * most queries x keys: the last full chunk or the final partial chunk of a
 * prompt (the whole prompt in one-pass prefill).  For the tiled kernels it
 * is the per-thread tiles plus, in decode steps, the split partials of
 * every sequence.
 */
static int64_t attn_peak(const struct k25_config *cfg, const struct k25_model_shape *s, int64_t n,
                         int batch, int64_t chunk, int threads, int64_t *q_rows, int64_t *kv_tokens)
{
    int64_t best = 0;
    int64_t cand_q[3], cand_kv[3];
    int nc = 0;
    if (cfg->disable_prefill_optimization || chunk >= n) {
        cand_q[nc] = n, cand_kv[nc++] = n;
    } else {
        cand_q[nc] = chunk, cand_kv[nc++] = n / chunk * chunk;
        if (n % chunk)
            cand_q[nc] = n % chunk, cand_kv[nc++] = n;
    }
    for (int i = 0; i < nc; i++) {
        int64_t b = k25_attn_scratch_bytes(cfg->attention, s->n_heads, s->n_kv_heads, s->head_dim,
                                           cfg->kv_block_size, cfg->kv_cache_dtype, 1, cand_q[i], cand_kv[i],
                                           threads);
        if (b > best) {
            best = b;
            *q_rows = cand_q[i];
            *kv_tokens = cand_kv[i];
        }
    }
    /* a decode step of the whole batch at full context */
    int64_t dec = k25_attn_scratch_bytes(cfg->attention, s->n_heads, s->n_kv_heads, s->head_dim,
                                         cfg->kv_block_size, cfg->kv_cache_dtype, batch, 1, n, threads);
    if (dec > best) {
        best = dec;
        *q_rows = 1;
        *kv_tokens = n;
    }
    return best;
}

int k25_mem_estimate(const struct k25_config *cfg, const struct k25_model_shape *s, int64_t context,
                     int batch, struct k25_mem_estimate *out, struct k25_error *err)
{
    memset(out, 0, sizeof(*out));
    if (context < 1 || context > INT32_MAX)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "context",
                             "context must be between 1 and %d tokens, got %lld", INT32_MAX,
                             (long long)context);
    if (batch < 1)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "batch", "batch must be >= 1, got %d", batch);
    int threads = cfg->threads > 0 ? cfg->threads : omp_get_num_procs();
    out->threads = threads;

    /* the weights in the format the engine reads (weight_dtype, or quantize_weights' rows with their
     * scales); with quantize_weights the loaded model's unquantized copy is held besides (not counted) */
    out->bytes[K25_MEM_WEIGHTS] = k25_model_weight_bytes(s, cfg) + (int64_t)sizeof(struct k25_layer) * s->n_layers;

    /* KV: the slots a sequence holds at its peak.  Compressed sequences peak
     * right after a prefill chunk (the kept slots of what came before plus
     * the chunk) or between decode-time compressions (kept + slack). */
    struct k25_kv_layout lay;
    k25_kv_layout(cfg, s, &lay);
    int64_t slots = k25_kv_peak_slots(cfg, context, context); /* what admission reserves */
    out->kv_blocks = (int64_t)batch * ((slots + cfg->kv_block_size - 1) / cfg->kv_block_size);
    out->bytes[K25_MEM_KV] = out->kv_blocks * lay.block_bytes + (int64_t)batch * lay.residual_bytes;
    if (cfg->kv_hot_tokens > 0) { /* tiers (kvtier.c): RAM holds the hot blocks and the warm pool */
        int64_t per_seq = out->kv_blocks / batch, hot = k25_kv_tier_hot_blocks(cfg);
        hot = (hot < per_seq ? hot : per_seq) * batch;
        int64_t warm = (int64_t)(cfg->kv_warm_budget_mb * 1048576.0) / lay.block_bytes;
        int64_t cold = out->kv_blocks - hot - warm; /* staging slots hold no block between steps: at least */
        out->kv_hot_bytes = hot * lay.block_bytes;
        out->kv_warm_bytes = warm * lay.block_bytes;
        out->kv_cold_bytes = cold > 0 ? cold * lay.block_bytes : 0;
        out->bytes[K25_MEM_KV] = out->kv_hot_bytes + out->kv_warm_bytes + lay.block_bytes /* copy buffer */ +
                                 (int64_t)batch * lay.residual_bytes;
    }
    if (lay.compress) { /* pruning statistics of the uncompressed tail (kvcache.c: steps of 64 slots) */
        int64_t ch = cfg->prefill_chunk_size < context ? cfg->prefill_chunk_size : context;
        int64_t tail = (int64_t)cfg->kv_recent_tokens + ch + cfg->kv_quant_group + 32;
        tail = tail < context ? tail : context;
        int64_t cap = (tail + 63) / 64 * 64;
        out->bytes[K25_MEM_KV] += (int64_t)batch * cap * 4 * ((int64_t)s->n_layers * s->n_kv_heads + 1);
    }

    /* the largest step: every sequence's chunk within the token budget, or
     * one whole prompt plus the other sequences' decode tokens */
    int64_t chunk = cfg->prefill_chunk_size < context ? cfg->prefill_chunk_size : context;
    if (chunk > cfg->max_num_batched_tokens)
        chunk = cfg->max_num_batched_tokens;
    int64_t step;
    if (cfg->disable_prefill_optimization) {
        step = context + batch - 1;
    } else {
        step = (int64_t)batch * chunk;
        if (step > cfg->max_num_batched_tokens)
            step = cfg->max_num_batched_tokens;
    }
    out->step_tokens = step;
    out->bytes[K25_MEM_ACTIVATIONS] = k25_activation_bytes(s, step, &out->act_token_cap);

    out->bytes[K25_MEM_ATTN_SCRATCH] =
        attn_peak(cfg, s, context, batch, chunk, threads, &out->attn_q_rows, &out->attn_kv_tokens);
    if (lay.compress) { /* scoring: per-slot sums (forward.c), decode raw logits (attention.c) */
        int64_t group = s->n_heads / s->n_kv_heads;
        int64_t pre = 4 * (int64_t)s->n_kv_heads * (slots + 2 * chunk * group);
        int64_t dec = 4 * (int64_t)batch * s->n_kv_heads * slots * (1 + group);
        out->bytes[K25_MEM_ATTN_SCRATCH] += pre > dec ? pre : dec;
    }

    out->bytes[K25_MEM_OTHER] = (int64_t)sizeof(struct k25_engine) + (int64_t)sizeof(struct k25_model) +
                                8 * (int64_t)s->vocab_size + 8 * (int64_t)(s->head_dim / 2) +
                                4 * (int64_t)cfg->max_batch_size;
    for (int c = 0; c < K25_MEM_NCAT; c++)
        out->total_bytes += out->bytes[c];
    out->recommended_bytes = (int64_t)((double)out->total_bytes * (1.0 + K25_MEM_SAFETY_MARGIN) + 0.5);
    return K25_OK;
}
