/*
 * k25.h - public interface of libk25, the k25bench reference engine.
 *
 * The engine is a Llama-family decoder (RMSNorm, RoPE, grouped-query
 * attention, SwiGLU) served the way a long-context runtime serves it:
 * prompts are prefilled in chunks (ChunkedAttention), keys and values live
 * in a paged KV cache, and a continuous-batching scheduler mixes prefill
 * chunks with decode steps under a token budget.  The harness (harness/)
 * drives it; nothing in engine/ depends on harness/.
 *
 * Conventions (see shared STYLE.md): functions that can fail return 0 or a
 * negative K25_E* code and fill a caller-provided struct k25_error.
 */
#ifndef K25_H
#define K25_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Status codes (K25_E*), struct k25_error, K25_ASSERT, k25_now_ns and K25_VERSION come
 * from util/ (k25util.h), the layer below the engine. */
#include "k25util.h"

/* ------------------------------------------------------- memory tracking */

enum k25_mem_cat {
    K25_MEM_WEIGHTS,
    K25_MEM_KV,
    K25_MEM_ACTIVATIONS,
    K25_MEM_ATTN_SCRATCH,
    K25_MEM_OTHER,
    K25_MEM_NCAT
};

struct k25_mem_stats {
    int64_t cur_bytes[K25_MEM_NCAT];
    int64_t peak_bytes[K25_MEM_NCAT];
    int64_t total_cur_bytes;
    int64_t total_peak_bytes;
};

/* 64-byte aligned, zeroed; NULL on failure.  Free with k25_free. */
void *k25_alloc(enum k25_mem_cat cat, size_t bytes);
void k25_free(void *p);
void k25_mem_get(struct k25_mem_stats *out);
void k25_mem_reset_peak(void); /* peak := current, for every category */
const char *k25_mem_cat_name(enum k25_mem_cat cat);

/*
 * Memory of one engine (its own accounting, beside the process-wide
 * figures above): what its backend allocated for it by category - KV
 * blocks, activations, attention scratch, other - and, under weights, the
 * weight bytes its backend holds or maps (two engines on one model both
 * count the model's weights; k25_mem_get counts them once).
 */
typedef struct k25_engine k25_engine_t;
void k25_engine_mem(const k25_engine_t *e, struct k25_mem_stats *out);
void k25_engine_mem_reset_peak(k25_engine_t *e);

/* IEEE half and bfloat16 <-> float, exact rounding to nearest even (half.c). */
float k25_fp16_to_fp32(uint16_t h);
uint16_t k25_fp32_to_fp16(float f);
float k25_bf16_to_fp32(uint16_t h);

/* ------------------------------------------------------------ backends */

/* The backends built into this binary, "cpu|cuda" style, into buf.
 * K25_ERANGE when buf is too small. */
int k25_backend_names(char *buf, size_t size);
/* Whether a backend of that name is built in. */
bool k25_backend_find_name(const char *name);

/* What a device backend's probe measured (k25 device-probe; the device check's reference figures). */
struct k25_device_probe {
    char device[256];        /* model and compute capability */
    double bf16_gemm_tflops; /* a large bf16 GEMM (fp32 accumulate), best of a few */
    double mem_bw_gbs;       /* device-memory bandwidth: bytes read + written per second */
    /* the decode GEMM (bf16 weights, 14336 x 4096) at m = 1 and 16: the backend's GEMV kernel and
     * cuBLASLt, microseconds (0 when the backend has neither) */
    double gemv_us[2], lt_us[2];
};
/* Measures backend `name`'s device (seconds of work).  K25_ENOTFOUND when not built in,
 * K25_EUNSUPPORTED when it has no probe (the CPU) or no usable device, K25_EIO on a device error. */
int k25_device_probe(const char *name, struct k25_device_probe *out, struct k25_error *err);

/* ------------------------------------------------------------ config */

/* Element types.  KV storage uses the first four (kv_cache_dtype); BF16 is
 * a weight format (backend supports(), issue 16). */
enum k25_dtype { K25_DTYPE_FP32, K25_DTYPE_FP16, K25_DTYPE_INT8, K25_DTYPE_INT4, K25_DTYPE_BF16, K25_DTYPE_N };
/* block_pattern_hint (issue 36): how the KV tiers cut a sequence into spans, the unit the
 * hotness policy scores and moves (docs/engine.md "KV tiers"); also a gold set's per-document
 * field (datasets/), which applies to its request when the config's is auto. */
enum k25_hint { K25_HINT_AUTO, K25_HINT_LEGAL_DOC, K25_HINT_PLAIN_TEXT };
/* kv_tier_policy: which blocks stay resident (warm) when the warm pool is full. */
enum k25_tier_policy { K25_TIER_POSITIONAL, K25_TIER_HOTNESS };
/* Weight storage (issue 16, docs/engine.md "Weight formats").  weight_dtype: how the loaded
 * model holds its matrices (dummy weights are generated in it, safetensors converted to it);
 * quantize_weights: what the engine's GEMMs read, quantized group-wise from the loaded
 * weights at engine create; cpu_kernels: the CPU backend's GEMV/small-M kernels. */
enum k25_weight_dtype { K25_WEIGHT_FP32, K25_WEIGHT_BF16, K25_WEIGHT_FP16 };
enum k25_weight_quant { K25_WQUANT_NONE, K25_WQUANT_INT8, K25_WQUANT_INT4 };
enum k25_cpu_kernels { K25_CPU_KERNELS_AUTO, K25_CPU_KERNELS_AVX512, K25_CPU_KERNELS_AVX2, K25_CPU_KERNELS_SCALAR };
/* cuda_gemm: the CUDA backend's prefill GEMMs on fp16/bf16 weights - exact: weight tiles widened to
 * fp32, fp32 GEMM (parity with the CPU); fast: activations rounded to the weights' type, tensor-core
 * GEMM with fp32 accumulation (lossy by the rounding). */
enum k25_cuda_gemm { K25_CUDA_GEMM_EXACT, K25_CUDA_GEMM_FAST };
/* The element type of a weight_dtype / quantize_weights value. */
enum k25_dtype k25_weight_dtype_of(enum k25_weight_dtype w);
enum k25_dtype k25_weight_quant_dtype(enum k25_weight_quant q, enum k25_dtype unquantized);
const char *k25_cpu_kernels_name(enum k25_cpu_kernels k);
enum k25_log_level { K25_LOG_OFF, K25_LOG_INFO, K25_LOG_DEBUG };
/* Attention implementation: the engine's ChunkedAttention kernels, or one
 * of the baselines (baselines/): FlashAttention-2-style tiles, naive. */
enum k25_attn_impl { K25_ATTN_CHUNKED, K25_ATTN_FLASH2, K25_ATTN_NAIVE, K25_ATTN_NIMPL };

/*
 * The engine's settings.  k25_config_init fills the defaults (docs/config.md,
 * one row per key); a YAML file and CLI flags override them (CLI wins, applied last).
 * Plain struct: the caller holds it, no heap memory inside.
 */
struct k25_config {
    char model[1024];            /* preset name (tiny, small, llama3-8b) or directory */
    int max_batch_size;          /* sequences per decode batch */
    enum k25_dtype kv_cache_dtype;
    int prefill_chunk_size;      /* tokens per prefill chunk */
    int decode_max_tokens;       /* cap on generated tokens per request */
    int max_model_len;           /* context limit: prompt + generated tokens of one request;
                                    0 = the model's (k25_model_shape.max_position) */
    int queue_timeout_ms;        /* how long a request may wait */
    int max_num_batched_tokens;  /* token budget per engine step */
    double kv_compression_ratio; /* fraction of KV tokens kept */
    double kv_merge_threshold;   /* cosine threshold for merging */
    int kv_block_size;           /* tokens per KV block */
    int kv_quant_group;          /* int8/int4: tokens per key scale group, values per value group */
    int kv_quant_residual;       /* int8/int4: most recent tokens kept in fp32 until their group closes */
    int kv_sink_tokens;          /* compression: first tokens never pruned or merged */
    int kv_recent_tokens;        /* compression: most recent tokens never pruned or merged */
    /* KV tiers (issue 18, docs/engine.md "KV tiers"). */
    int kv_hot_tokens;           /* first tokens of a sequence kept hot; 0 = tiers off */
    double kv_warm_budget_mb;    /* host pool for blocks that are not hot (MiB) */
    char kv_cold_dir[1024];      /* folder of the cold tier's file; "" = no cold tier */
    enum k25_tier_policy kv_tier_policy; /* positional|hotness (issue 36) */
    enum k25_hint block_pattern_hint;    /* auto|legal_doc|plain_text: spans of the hotness policy */
    int64_t memory_budget_mb;    /* 0 = no budget (all memory) */
    bool disable_prefill_optimization; /* one-pass prefill */
    bool enable_prefix_caching;  /* reuse finished requests' full KV blocks for matching prompt prefixes */
    enum k25_attn_impl attention;      /* attention kernels (chunked|flash2|naive) */
    char backend[32];            /* backend name in the registry (cpu; cuda with make CUDA=1) */
    double rope_theta;           /* 0 = the model's own */
    uint64_t seed;               /* sampling seed */
    int threads;                 /* 0 = all cores */
    double temperature;          /* 0 = greedy */
    double top_p;                /* nucleus sampling mass, (0, 1] */
    enum k25_log_level log_level;
    char log_file[1024];         /* "" = stderr */
    /* Elastic request queue (issue 17, docs/engine.md "Elastic request queue"). */
    int queue_memory_capacity;   /* requests waiting in memory; beyond it they spill or are rejected */
    char queue_spill_dir[1024];  /* durable disk queue for overflow; "" = none (reject with a reason) */
    int queue_low_priority_ttft_ms; /* first-token SLA of low-priority (spilled) requests */
    bool breaker_enabled;        /* circuit breaker routes new requests to the degraded model */
    double breaker_busy_threshold;   /* busy fraction that opens the breaker ... */
    double breaker_busy_seconds;     /* ... when exceeded this long (and the close hold time) */
    double breaker_memory_threshold; /* memory fraction of the budget that opens it at once */
    double degraded_layer_fraction;  /* layers the degraded (early-exit) model runs, rounded up */
    int degraded_ttft_ms;        /* first-token SLA of degraded requests */
    /* Weight formats and decode kernels (issue 16). */
    enum k25_weight_dtype weight_dtype;   /* fp32|bf16|fp16: the loaded model's matrices */
    enum k25_weight_quant quantize_weights; /* none|int8|int4: group-wise at engine create */
    int weight_quant_group;      /* int8/int4 weights: values per scale (a multiple of 32) */
    enum k25_cpu_kernels cpu_kernels;     /* auto|avx512|avx2|scalar (CPU backend) */
    enum k25_cuda_gemm cuda_gemm;         /* exact|fast (CUDA backend) */
    bool ignore_eos;             /* generate past the model's EOS ids (issue 30) */
};

/* Describes one config key, for --help, docs and tests. */
struct k25_config_key_info {
    const char *key;     /* YAML key, e.g. "prefill_chunk_size" */
    const char *type;    /* "int", "float", "bool", "string", "enum" */
    const char *deflt;   /* default as text */
    const char *help;    /* one line */
    const char *range;   /* allowed values as text, e.g. "1..65536", "fp32|fp16|int8|int4" */
};

void k25_config_init(struct k25_config *cfg);

/* Number of keys and the i-th key's description. */
int k25_config_key_count(void);
const struct k25_config_key_info *k25_config_key(int i);

/* The known key closest to key (edit distance <= 3) for "did you mean", or NULL. */
const char *k25_config_suggest(const char *key);

/*
 * Sets one key from text.  src_file/src_line name where the value came
 * from, for the error message ("k25.yaml:7: key 'x': ..." or
 * "command line: key 'x': ...").  Unknown keys, wrong types and
 * out-of-range values fail with K25_ENOTFOUND / K25_EINVAL / K25_ERANGE.
 */
int k25_config_set(struct k25_config *cfg, const char *key, const char *value,
                   const char *src_file, int src_line, struct k25_error *err);

/* Loads a YAML mapping of key: value into cfg (on top of what it holds). */
int k25_config_load_yaml(struct k25_config *cfg, const char *path, struct k25_error *err);

/* Cross-key checks (e.g. chunk > 0); call after all sources are applied. */
int k25_config_validate(const struct k25_config *cfg, struct k25_error *err);

/*
 * The effective config as a JSON object text (keys in table order).
 * Returns a malloc'd string the caller frees, NULL on allocation failure.
 */
char *k25_config_to_json(const struct k25_config *cfg);

const char *k25_dtype_name(enum k25_dtype d);
const char *k25_hint_name(enum k25_hint h);
const char *k25_tier_policy_name(enum k25_tier_policy p);
const char *k25_attn_impl_name(enum k25_attn_impl a);
/* K25_ENOTFOUND (err names the valid ones) for an unknown name. */
int k25_attn_impl_parse(const char *name, enum k25_attn_impl *out, struct k25_error *err);

/* -------------------------------------------------------------- model */

#define K25_MAX_EOS 8 /* end-of-sequence ids a model may name */
struct k25_model_shape {
    char name[64];       /* preset name, or the directory's model_type */
    int dim;             /* hidden size */
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn_dim;         /* intermediate size */
    int vocab_size;
    double rope_theta;
    float norm_eps;
    bool tied_embeddings;
    /* End-of-sequence ids (a directory's generation_config.json eos_token_id, else
     * config.json's; one id or a list): generation stops at the first one with
     * finish reason "stop" unless ignore_eos.  Presets have none (n_eos 0). */
    int32_t eos_ids[K25_MAX_EOS];
    int n_eos;
    int max_position;    /* context the model supports: config.json max_position_embeddings;
                            presets: K25_PRESET_MAX_POSITION */
};

/* Temperatures below this (denormals included) sample greedily: 1/temperature would overflow
 * the exponent of the softmax (vLLM uses the same 1e-5). */
#define K25_SAMPLE_GREEDY_BELOW 1e-5

/* The presets' context limit (131072 = 128K tokens, the long-context length the harness signs
 * off at; Llama 3.1's max_position_embeddings).  Dummy weights have no learned limit. */
#define K25_PRESET_MAX_POSITION 131072

/* Fills out with a named shape preset; K25_ENOTFOUND for unknown names. */
int k25_model_preset(const char *name, struct k25_model_shape *out);
/* Comma-separated list of preset names, for help texts. */
const char *k25_model_preset_names(void);
/* Parameter count of a shape (embeddings and head included). */
int64_t k25_model_param_count(const struct k25_model_shape *s);
/* Bytes of a shape's weights as an engine with cfg reads them: matrices in weight_dtype, or
 * quantize_weights' int8/int4 rows with their scales; norms fp32. */
int64_t k25_model_weight_bytes(const struct k25_model_shape *s, const struct k25_config *cfg);

#define K25_DUMMY_WEIGHT_SEED 0x6b32356265ULL

typedef struct k25_model k25_model_t;

/*
 * Loads cfg->model: a preset name gives dummy weights of that shape,
 * drawn from a fixed weight seed (K25_DUMMY_WEIGHT_SEED, not cfg->seed,
 * so every run of a preset serves the same model); a directory gives real
 * weights from config.json + model.safetensors (or shards with
 * model.safetensors.index.json).  cfg->rope_theta, when set, overrides
 * the model's own.
 * The caller owns *out and frees it with k25_model_destroy.
 */
int k25_model_load(const struct k25_config *cfg, k25_model_t **out, struct k25_error *err);
void k25_model_destroy(k25_model_t *m);
const struct k25_model_shape *k25_model_get_shape(const k25_model_t *m);
/* Where the weights came from: "dummy(seed=...)" or the directory path. */
const char *k25_model_source(const k25_model_t *m);

/* ---------------------------------------------------------- tokenizer */

/*
 * Real tokenizers (tokenizer.json) and the byte tokenizer behind one handle: k25_tok.h.
 * Byte tokenizer of the presets: token id = byte value.  Encodes text into
 * ids (caller frees *ids with free()); decode writes bytes of ids < 256.
 */
int k25_tok_encode(const char *text, size_t len, int32_t **ids, int *n_ids, struct k25_error *err);
/* Decodes ids into a malloc'd NUL-terminated string; ids >= 256 become '?' */
char *k25_tok_decode(const int32_t *ids, int n_ids);

/* ------------------------------------------------------------- engine */

enum k25_req_state {
    K25_REQ_WAITING,   /* submitted, not yet admitted */
    K25_REQ_PREFILL,   /* admitted, prompt being prefilled */
    K25_REQ_DECODE,    /* generating */
    K25_REQ_COMPLETED, /* finished normally */
    K25_REQ_REJECTED,  /* could never fit, or the queue was full (reason in result) */
    K25_REQ_TIMED_OUT, /* waited longer than queue_timeout_ms (reason in result) */
};

/*
 * Request priority.  Zero is standard, so a zero-initialized request is
 * standard.  High never spills to disk; a request that spills becomes low.
 */
enum k25_priority {
    K25_PRIORITY_STANDARD = 0,
    K25_PRIORITY_HIGH = 1,
    K25_PRIORITY_LOW = 2,
};
const char *k25_priority_name(enum k25_priority p); /* "high", "standard", "low" */
/* K25_EINVAL (naming the valid ones) for an unknown name. */
int k25_priority_parse(const char *name, enum k25_priority *out, struct k25_error *err);

const char *k25_req_state_name(enum k25_req_state s);

/* A request as submitted.  The engine copies everything it needs. */
struct k25_request {
    const char *id;            /* caller's id, copied (truncated to 63 chars) */
    const int32_t *input_ids;  /* [n_input], each < vocab_size */
    int n_input;
    int max_new_tokens;        /* 0 = decode_max_tokens; capped by it */
    bool keep_logits;          /* store logits of every generated position */
    /* Teacher forcing (fidelity): when n_forced > 0 the k-th output token is
     * forced_ids[k] (k < n_forced) instead of the sampled one; the logits are
     * still those the model produced.  Borrowed until the request finishes. */
    const int32_t *forced_ids; /* [n_forced] */
    int n_forced;
    /* Store the attention output of the row that produced each output token
     * at the probe layers (k25_attn_probe_layers) in result.attn_probe. */
    bool keep_attn;
    /* Per-request sampling (k25 serve): when has_sampling, temperature, top_p
     * and seed replace the config's for this request (temperature 0 =
     * greedy).  Otherwise the config's apply, with the run seed mixed with
     * the request id. */
    bool has_sampling;
    double temperature;        /* [0, 100]; below K25_SAMPLE_GREEDY_BELOW: greedy */
    double top_p;              /* (0, 1] */
    uint64_t seed;
    /* Stop sequences as token ids: generation ends (finish K25_FINISH_STOP)
     * as soon as the output ends with one of them; the stop tokens stay in
     * output_ids (a server trims them from its text).  Copied at submit. */
    const int32_t *const *stop_ids; /* [n_stop][stop_lens[i]] */
    const int *stop_lens;           /* [n_stop], each >= 1 */
    int n_stop;
    enum k25_priority priority;     /* default (0) standard */
    /* Run on the degraded (early-exit) model whatever the circuit breaker says, skipping its
     * first-token admission check (`k25 bench --fidelity` measures that model against the full
     * one with it).  Not kept in the spill log: a replayed request is routed as usual. */
    bool force_degraded;
    /* KV tiers, hotness policy (issue 36; docs/engine.md "KV tiers"): the token positions where
     * sections of the prompt start (strictly ascending, < n_input), computed by the caller from
     * the text and its tokenizer's offsets (datasets: k25_gold_section_starts, then
     * k25_gold_sections_to_tokens), and the request's block_pattern_hint (used when the config's
     * is auto; a hint set in the config or by its flag wins).
     * They choose the spans the tiers score and move; copied at submit. */
    const int32_t *section_starts; /* [n_section_starts] */
    int n_section_starts;
    enum k25_hint block_pattern_hint;
    /* Generate past the model's EOS ids (k25_model_shape.eos_ids), as cfg->ignore_eos does for
     * every request; either one set ignores them. */
    bool ignore_eos;
};

/* Why a completed request stopped generating. */
enum k25_finish_reason {
    K25_FINISH_NONE,      /* not finished, or rejected */
    K25_FINISH_LENGTH,    /* reached max_new_tokens */
    K25_FINISH_STOP,      /* output ended with a stop sequence or an EOS id of the model */
    K25_FINISH_CANCELLED, /* k25_engine_cancel */
};
const char *k25_finish_reason_name(enum k25_finish_reason f);

/* The layers whose attention output keep_attn records: first, middle, last
 * (deduplicated, ascending).  Writes up to 3 indices, returns the count. */
int k25_attn_probe_layers(int n_layers, int out[3]);

/* Room for a request's reason: every reason the engine composes fits whole (none is cut). */
#define K25_REASON_MAX 512

/*
 * What happened to a request.  Owned by the engine; valid until
 * k25_engine_release(handle) or k25_engine_destroy.
 * Times are k25_now_ns() stamps.
 */
struct k25_result {
    char id[64];
    enum k25_req_state state;
    enum k25_finish_reason finish; /* set when state is K25_REQ_COMPLETED */
    char reason[K25_REASON_MAX]; /* why it was rejected or cancelled, whole; "" otherwise */
    int n_input;
    int n_output;
    int32_t *output_ids;       /* [n_output] */
    uint64_t *token_t_ns;      /* [n_output], when each token was produced */
    float *logits;             /* [n_output][vocab] when keep_logits, else NULL */
    /* Top-1 margin of every position: top-1 logit - top-2 logit of the logits
     * the token was chosen from (k25_tok_margin), the input of the
     * token-identity rule (below).  NaN where the token was sampled
     * (temperature > 0): no argmax margin describes a sampled choice. */
    float *margins;            /* [n_output] */
    float *attn_probe;         /* [n_output][n_probe][n_heads*head_dim] when keep_attn, else NULL */
    int n_probe;               /* probe layers (k25_attn_probe_layers) when keep_attn */
    /* KV compression (kv_compression_ratio < 1), per request: token-equivalents
     * (slots over layers x KV heads, averaged) pruned and merged away, and the
     * KV bytes the sequence would hold uncompressed vs holds (data, scales,
     * slot metadata) when it finished. */
    double kv_tokens_pruned;
    double kv_tokens_merged;
    int64_t kv_bytes_before;
    int64_t kv_bytes_after;
    int kv_slots;              /* KV slots per (layer, KV head) at the end */
    /* KV tiers (kv_hot_tokens > 0; docs/engine.md "KV tiers"): block reads by the request's
     * steps (one per block per step), those served without waiting for the cold tier,
     * kv_cache_hit_rate = hits / reads (1 with tiers off: every block is hot), the time its
     * steps waited, and the bytes its blocks moved between tiers. */
    int64_t kv_block_reads;
    int64_t kv_block_hits;
    double kv_cache_hit_rate;
    uint64_t kv_tier_wait_ns;
    int64_t kv_tier_bytes_moved;
    /* KV tiers, hotness policy: how its KV was cut into spans (kvspan.c): the mode used (auto
     * resolved; K25_HINT_AUTO when the policy is positional), whether auto chose it, the spans
     * over the prompt and the section starts the request supplied. */
    enum k25_hint kv_span_mode;
    bool kv_span_auto;
    int kv_spans;
    int kv_sections;
    int cached_tokens;         /* prompt tokens reused from the prefix cache (not prefilled) */
    uint64_t submit_t_ns;
    uint64_t admit_t_ns;       /* left the waiting queue */
    uint64_t prefill_done_t_ns;
    uint64_t finish_t_ns;
    int prefill_chunks;
    uint64_t prefill_ns;       /* sum of the prefill chunks' step times */
    /* Elastic queue: the priority it ran at (low once spilled), whether it
     * waited in the disk queue, came back from the log at engine create,
     * ran on the degraded model, and its first-token SLA in ms (degraded:
     * degraded_ttft_ms; low: queue_low_priority_ttft_ms; 0: the run's own). */
    enum k25_priority priority;
    bool spilled;
    bool replayed;
    int64_t spill_seq;         /* its record's number in the spill log (queue_spill_dir), -1: none */
    bool degraded;
    int ttft_sla_ms;
};

/* Event delivered to the callback as it happens (from k25_engine_step). */
enum k25_event_type { K25_EV_ADMIT, K25_EV_PREFILL_CHUNK, K25_EV_TOKEN, K25_EV_FINISH };
struct k25_event {
    enum k25_event_type type;
    int handle;
    const char *req_id;
    int32_t token_id;      /* K25_EV_TOKEN */
    int index;             /* token index (K25_EV_TOKEN) or chunk index */
    uint64_t t_ns;
};
typedef void (*k25_event_cb)(const struct k25_event *ev, void *user);

/* Per-step and cumulative counters, for progress and results. */
struct k25_engine_stats {
    int64_t steps;
    int64_t prefill_tokens;
    int64_t decode_tokens;
    uint64_t prefill_ns;   /* time in steps that carried prefill work */
    uint64_t decode_ns;    /* time in decode-only steps */
    uint64_t busy_ns;      /* all step time */
    int64_t kv_blocks_in_use;
    int64_t kv_blocks_peak;
    int64_t kv_blocks_capacity; /* blocks the memory budget allows; 0 = no cap (the pool grows) */
    int64_t kv_block_accesses;
    int n_waiting;             /* memory + spill queue */
    int n_running;
    /* elastic queue */
    int n_waiting_memory;      /* in the memory queue */
    int n_waiting_spill;       /* in the disk queue */
    bool breaker_open;
    double busy_fraction;      /* over the breaker's sliding window (when enabled) */
    double memory_fraction;    /* engine memory / the breaker's limit (when enabled) */
    int64_t breaker_opens;     /* transitions to open */
    int64_t degraded_requests; /* submitted to the degraded model */
    int64_t spilled_requests;  /* written to the disk queue (replayed ones included) */
    int64_t replayed_requests; /* re-submitted from the log at create */
    int64_t timed_out_requests;
    int64_t rejected_queue_full; /* rejected on arrival: their queue was full (memory queue without a
                                  * spill tier, or the degraded queue: rejected_degraded of them) */
    int n_waiting_degraded;    /* in the degraded queue (also in n_waiting) */
    int64_t rejected_degraded; /* degraded arrivals whose first token could not meet degraded_ttft_ms */
    int64_t spill_fsyncs;      /* fsyncs of the spill log (group commit: fewer than its records) */
    /* KV tiers (per run; per request in struct k25_result).  kv_cache_hit_rate = hits / reads
     * (1 when there were no reads); wait: total and the longest of one sequence in one step;
     * bytes moved between tiers, and the time the copies took (bytes / copy_ns = tier-copy
     * bandwidth); evictions: blocks moved down a tier. */
    int64_t kv_block_reads;
    int64_t kv_block_hits;
    double kv_cache_hit_rate;
    uint64_t kv_tier_wait_ns;
    uint64_t kv_tier_max_step_wait_ns;
    int64_t kv_tier_bytes_moved;
    uint64_t kv_tier_copy_ns;
    int64_t kv_tier_evictions;
    int64_t kv_tier_promotions;  /* hotness: cold blocks read into the warm pool (HOT_ACCESS_PATTERN) */
    int64_t kv_tier_demotions;   /* hotness: warm blocks sent cold for a hotter span (STALE_ACCESS_PATTERN) */
    /* prefix caching (enable_prefix_caching; docs/engine.md "Prefix caching") */
    int64_t prefix_lookups;      /* admitted requests looked up */
    int64_t prefix_hits;         /* of them, those that reused at least one block */
    int64_t prefix_hit_tokens;   /* prompt tokens served from the cache, not prefilled */
    int64_t prefix_cached_blocks; /* blocks in the cache now (held by requests or idle) */
    int64_t prefix_evictions;    /* idle cached blocks evicted for memory */
};

/*
 * Creates an engine serving model (borrowed: must outlive the engine) with
 * settings cfg (copied).  Opens the log named by cfg.  Sets the thread count.
 */
int k25_engine_create(const struct k25_config *cfg, const k25_model_t *model,
                      k25_engine_t **out, struct k25_error *err);
void k25_engine_destroy(k25_engine_t *e);

void k25_engine_set_event_cb(k25_engine_t *e, k25_event_cb cb, void *user);

/*
 * A hook called after every forward pass, before sampling, with the rows
 * whose tokens are about to be sampled.  It may change the logits (the
 * harness's TEST-ONLY degradation knobs, harness/testknob.c, do) and may
 * take time (counted as the step's).  The engine itself reads no
 * environment: whoever creates an engine installs what it wants.
 */
struct k25_step_info {
    int n;                   /* rows */
    float *const *logits;    /* [n] host rows of vocab_size values */
    const int *next_pos;     /* [n] the position each row's token will take */
    int vocab;
    uint64_t t0_ns;          /* when the step's forward pass started */
};
typedef void (*k25_step_hook)(const struct k25_step_info *info, void *user);
void k25_engine_set_step_hook(k25_engine_t *e, k25_step_hook fn, void *user);

/*
 * Queues a request; *handle identifies it afterwards.  Bad requests
 * (token id out of vocabulary, empty prompt) fail with K25_EINVAL.
 *
 * Elastic queue: while fewer than queue_memory_capacity requests wait in
 * memory (high priority always), the request joins the memory queue.
 * Otherwise, with queue_spill_dir set, its record is appended to the disk
 * log and fsync'd before this returns 0 (the caller may then acknowledge
 * it); it becomes low priority.  When that write or fsync fails, submit
 * fails with K25_EIO and a reason, and nothing was accepted.  Without a
 * spill folder it gets a handle in state K25_REQ_REJECTED with a reason
 * (its K25_EV_FINISH event comes with the next k25_engine_step).  While
 * the circuit breaker is open the request runs on the degraded model, in
 * the degraded queue with its own batch slots; a degraded arrival whose
 * first token is predicted later than degraded_ttft_ms gets a handle in
 * state K25_REQ_REJECTED with the reason (high priority never does).
 * With queue_spill_dir a request's K25_EV_FINISH event comes only once
 * its done record is durable.
 */
int k25_engine_submit(k25_engine_t *e, const struct k25_request *req, int *handle,
                      struct k25_error *err);
/*
 * Submits n requests as n k25_engine_submit calls would, in order, except
 * that with queue_spill_dir their records share one fsync (group commit):
 * a server submits every request that arrived during a step at once and
 * acknowledges each whose rcs[i] is 0.  handles[i] is -1 and errs[i] (may
 * be NULL) says why when rcs[i] is not 0; when the shared fsync fails,
 * every request of the batch that had a record gets K25_EIO with the
 * reason and none of them was accepted.  Returns 0 or the first failure.
 */
int k25_engine_submit_batch(k25_engine_t *e, const struct k25_request *reqs, int n, int *handles, int *rcs,
                            struct k25_error *errs);

/*
 * Runs one engine step: admits waiting requests, builds a batch of decode
 * tokens and prefill chunks within max_num_batched_tokens, runs the model
 * once over it, samples, and retires finished requests.  Returns 0 (also
 * when there was nothing to do) or a negative code.
 */
int k25_engine_step(k25_engine_t *e, struct k25_error *err);

/* Steps until no request is waiting or running. */
int k25_engine_run(k25_engine_t *e, struct k25_error *err);

bool k25_engine_idle(const k25_engine_t *e);
/* The context limit requests are checked against at submit: max_model_len, or the model's. */
int k25_engine_max_model_len(const k25_engine_t *e);
/*
 * The generated-token cap a request with max_new_tokens (0 = the default) and an n_input-token
 * prompt gets, and whether it fits the context limit: a request fits when n_input + its explicit
 * max_new_tokens <= max_model_len, or, without one, when n_input < max_model_len (the default cap
 * decode_max_tokens is then lowered to the room left).  Returns the cap, or -1 when it does not fit.
 */
int k25_engine_fit_max_new(const k25_engine_t *e, int n_input, int max_new_tokens);
const struct k25_result *k25_engine_result(const k25_engine_t *e, int handle);
/*
 * Cancels a waiting or running request (a client went away): its KV blocks
 * are freed at once, it completes with finish K25_FINISH_CANCELLED and the
 * tokens made so far, and a K25_EV_FINISH event is emitted.  No-op for a
 * finished request or an invalid handle.  Like every engine call, from the
 * thread that steps the engine.
 */
void k25_engine_cancel(k25_engine_t *e, int handle, const char *reason);
/* Frees a finished request's result; the handle is invalid afterwards. */
void k25_engine_release(k25_engine_t *e, int handle);
void k25_engine_get_stats(const k25_engine_t *e, struct k25_engine_stats *out);
const struct k25_config *k25_engine_config(const k25_engine_t *e);

/*
 * What k25_engine_create found in the spill log (queue_spill_dir): request
 * records read, those already done, and the unfinished ones it
 * re-submitted (handles, in arrival order; owned by the engine, valid
 * until destroy).  A torn tail (a last record cut short or failing its
 * checksum) is dropped: torn_bytes and warning say so, the engine log
 * gets a `[QUEUE] event=torn_record` line, and k25_engine_create leaves
 * the warning in err->msg with err->code K25_OK.
 */
struct k25_replay_info {
    int n_records;
    int n_done;
    int n_replayed;
    const int *handles;  /* [n_replayed] */
    int64_t torn_bytes;  /* 0: none */
    char warning[256];   /* "" or what was dropped */
};
void k25_engine_replay_info(const k25_engine_t *e, struct k25_replay_info *out);

/* ------------------------------------------------ token-identity rule */

/*
 * One rule for "are these the same tokens?" wherever the project compares
 * generated tokens (golden test, gate, parity tests); engine/tokcheck.c,
 * docs/engine.md.
 *
 * Two correct fp32 implementations of the model (another BLAS kernel set,
 * thread count, batch composition, chunking, attention kernel) sum in
 * different orders, so their logits differ by rounding: by at most
 * K25_TOK_TAU each (derivation in tokcheck.c).  Greedy decoding picks the
 * argmax, which can then differ only where the top-1 margin (top-1 logit -
 * top-2 logit) is at most 2 tau, the near-tie bound.  So a reference stores
 * each position's margin beside its token, and a candidate is verified by
 * replaying the reference tokens with teacher forcing (every position sees
 * the reference prefix) and requiring the same argmax wherever the stored
 * margin exceeds the bound.  Free-running sequences cannot be compared
 * token by token past their first difference (one flip changes every later
 * token), so k25_tok_compare applies the rule only at the first divergence.
 * Without stored margins (old traces) both fall back to exact equality.
 */
#define K25_TOK_TAU 1e-3 /* logits: largest difference between two correct fp32 implementations */

/* The near-tie bound of a tolerance tau: an argmax can flip only where margin <= 2 tau. */
double k25_tok_bound(double tau);

/* Top-1 margin of logits[V] (V >= 1): top-1 - top-2 (0 on an exact tie,
 * +inf when V == 1); *top1 (may be NULL) gets the argmax, lowest id on
 * ties, as greedy sampling picks it. */
float k25_tok_margin(const float *logits, int V, int32_t *top1);

/* What a teacher-forced replay found (k25_tok_check, k25_tok_verify). */
struct k25_tok_report {
    double tau, bound;        /* the tolerance used and 2 tau */
    bool strict;              /* no stored margins: every position had to agree */
    int n_positions;          /* positions replayed */
    int n_checked;            /* positions whose argmax had to agree (margin > bound, or strict) */
    int n_near_tie;           /* positions skipped: stored margin <= bound */
    int n_mismatch;           /* checked positions whose argmax differed */
    int first_mismatch;       /* position of the first one, -1 when none */
    float mismatch_margin;    /* the stored margin there (NaN when unknown) */
    int32_t want, got;        /* stored token and the replay's argmax there */
    double max_margin_drift;  /* largest |replay margin - stored margin| where the argmax agreed
                                 (information: <= 2 tau when the logits are within tau) */
};

/*
 * The rule on a replay: tokens[n] and margins[n] (NULL: none stored, strict)
 * as stored, logits[n][V] of the replay teacher-forced with tokens.  Fills
 * rep; returns true when no checked position disagrees.
 */
bool k25_tok_check(const int32_t *tokens, const float *margins, int n, const float *logits, int V, double tau,
                   struct k25_tok_report *rep);

/*
 * Replays tokens[n] (margins[n] or NULL, as stored) after prompt[n_prompt]
 * on engine e with teacher forcing, greedy, and applies k25_tok_check.
 * Runs e until idle (submit it alone) and releases the request.  Returns 0
 * with *rep filled whatever the verdict (k25_tok_report_ok), or a negative
 * code when the replay itself failed (bad ids, n above decode_max_tokens,
 * out of memory).
 */
int k25_tok_verify(k25_engine_t *e, const char *id, const int32_t *prompt, int n_prompt, const int32_t *tokens,
                   const float *margins, int n, double tau, struct k25_tok_report *rep, struct k25_error *err);

bool k25_tok_report_ok(const struct k25_tok_report *rep);
/* One line: "32 positions: 31 checked, 1 near-tie skipped (margin <= 0.002); first mismatch ...". */
void k25_tok_report_format(const struct k25_tok_report *rep, char *buf, size_t n);

/* Two free-running sequences under the rule (k25_tok_compare). */
struct k25_tok_cmp {
    double tau, bound;
    bool strict;              /* the reference has no margins: exact equality required */
    int n_ref, n_cand;        /* lengths */
    int n_same;               /* identical leading tokens */
    int diverged_at;          /* first position that differs (or where the shorter ends), -1 when identical */
    float margin_ref, margin_cand; /* the margins there (NaN when unknown) */
    bool near_tie;            /* diverged at a near-tie: accepted */
    int n_unverified;         /* tokens after an accepted divergence (longer sequence) */
    bool pass;                /* identical, or diverged at a near-tie */
};

/*
 * Compares a candidate's free-running tokens with a reference's (same
 * prompt, greedy).  They must agree up to their first divergence; there
 * both runs saw the same prefix, so the rule applies exactly: the
 * divergence is accepted when the reference's margin there (and the
 * candidate's, when cand_margins is not NULL) is <= the bound, and every
 * later token is unverified (not comparable free-running).  Otherwise, or
 * when the lengths differ, it fails.  ref_margins NULL (an old trace):
 * strict exact equality.
 */
void k25_tok_compare(const int32_t *ref, const float *ref_margins, int n_ref, const int32_t *cand,
                     const float *cand_margins, int n_cand, double tau, struct k25_tok_cmp *out);

/* -------------------------------------------------- memory calculator */

/*
 * What the engine will hold for a setting, by the same arithmetic its
 * allocations follow (engine/memcalc.c): `batch` sequences of `context`
 * tokens each (prompt + output) served with cfg (chunk size, step budget,
 * KV dtype and block size, attention implementation, threads).
 * bytes[] uses the k25_mem_cat categories; recommended_bytes adds the
 * safety margin to the total.  attn_q_rows/attn_kv_tokens describe the
 * largest attention call (the one that sets the scratch peak).
 */
#define K25_MEM_SAFETY_MARGIN 0.15
struct k25_mem_estimate {
    int64_t bytes[K25_MEM_NCAT];
    int64_t total_bytes;
    int64_t recommended_bytes;  /* total * (1 + K25_MEM_SAFETY_MARGIN) */
    int64_t kv_blocks;          /* KV blocks of all sequences */
    int64_t step_tokens;        /* tokens of the largest engine step */
    int64_t act_token_cap;      /* activation rows allocated (power-of-two growth) */
    int64_t attn_q_rows;        /* queries of the largest attention call */
    int64_t attn_kv_tokens;     /* keys it reads */
    int threads;                /* thread count the scratch figure assumes */
    /* KV tiers (kv_hot_tokens > 0): bytes[K25_MEM_KV] is what RAM holds - the hot blocks
     * (k25_kv_tier_hot_blocks per sequence) + the warm pool + the copy buffer - and the
     * blocks beyond them live in the cold file (at least kv_cold_bytes; not in total_bytes) */
    int64_t kv_hot_bytes, kv_warm_bytes, kv_cold_bytes;
};

/* Fails with K25_EINVAL (naming the argument) for context or batch < 1. */
int k25_mem_estimate(const struct k25_config *cfg, const struct k25_model_shape *shape,
                     int64_t context, int batch, struct k25_mem_estimate *out,
                     struct k25_error *err);

/* The free and total memory of backend `name` (its memory_info: the CPU's is the host's
 * MemAvailable and MemTotal, a GPU's the device's), read through a short-lived instance;
 * `k25 mem` prints it beside the estimate.  K25_EUNSUPPORTED where the backend cannot tell. */
int k25_backend_memory(const char *name, size_t *free_bytes, size_t *total_bytes, struct k25_error *err);

/*
 * Attention scratch (K25_MEM_ATTN_SCRATCH bytes) one call of implementation
 * impl allocates for n_seqs sequences of n_q queries each attending to
 * n_kv keys, on `threads` threads.  Used by the estimate above and by
 * `k25 attn-bench` to skip settings that cannot fit.
 */
int64_t k25_attn_scratch_bytes(enum k25_attn_impl impl, int n_heads, int n_kv_heads, int head_dim,
                               int block_size, enum k25_dtype kv_dtype, int n_seqs, int64_t n_q,
                               int64_t n_kv, int threads);

/* Bytes of one KV block (every layer, K and V) for this shape and dtype,
 * with the default quantization group (32) and no compression metadata. */
int64_t k25_kv_block_bytes(const struct k25_model_shape *shape, int block_size, enum k25_dtype dtype);

/*
 * KV storage figures of a config (engine/kvcache.c arithmetic): bytes of
 * one block as the engine allocates it (data, int8/int4 scales and zero
 * points, compression slot metadata when kv_compression_ratio < 1), the
 * fp16 residual window one sequence holds (int8/int4), the bits per stored
 * value with the quantization metadata, and the bytes per token (every
 * layer, K and V) with and without the slot metadata.
 */
struct k25_kv_layout {
    int64_t block_bytes;
    int64_t residual_bytes;       /* per sequence */
    double bits_per_value;        /* data + scales + zero points */
    double bytes_per_token;       /* data + scales */
    double meta_bytes_per_token;  /* compression slot metadata (0 when r = 1) */
    bool compress;                /* pruning/merging active for this config */
};
void k25_kv_layout(const struct k25_config *cfg, const struct k25_model_shape *shape,
                   struct k25_kv_layout *out);

/* KV slots a sequence of n positions keeps under cfg's compression:
 * max(round(r n), min(n, sink + recent)); n when compression is off. */
int64_t k25_kv_kept_tokens(const struct k25_config *cfg, int64_t n);

/* Whether cfg compresses KV (r < 1 with the ChunkedAttention kernels and
 * chunked prefill; the baselines and one-pass prefill keep every token). */
bool k25_kv_compress_active(const struct k25_config *cfg);

/* ------------------------------------------------------------ threads */

/* Sets OpenMP and OpenBLAS threads (n <= 0: all cores); returns the count. */
int k25_set_threads(int n);
int k25_get_threads(void);

/* The OpenBLAS kernel set in use (e.g. "SkylakeX"), for provenance. */
const char *k25_blas_corename(void);
/* The kernel set this CPU supports when OpenBLAS fell back to a generic one
 * (a CPU newer than the library), else NULL. */
const char *k25_blas_better_coretype(void);
/*
 * When k25_blas_better_coretype() is not NULL and the user has not set
 * OPENBLAS_CORETYPE, re-executes the program with it set (OpenBLAS reads it
 * only at load time).  Returns only if nothing needed doing or exec failed.
 * Call first thing in main().  K25_NO_BLAS_REEXEC=1 disables it.
 */
void k25_blas_reexec(char **argv);

#endif /* K25_H */
