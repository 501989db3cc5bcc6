/*
 * config.c - the engine's settings (struct k25_config): defaults, the key
 * table, parsing one key from text, loading a YAML file, cross-key checks
 * and the JSON form recorded in every result's provenance.
 *
 * Every key lives in one static table (keys[] below) that says its type,
 * where it sits in struct k25_config, its default as text, its allowed
 * range and a one-line help.  Everything else (k25_config_set, the YAML
 * loader, k25_config_validate, k25_config_to_json, the CLI flags and
 * `k25 config --keys` in harness/) walks that table, so a new key is one
 * struct field plus one table row.
 *
 * Sources are layered by the caller: k25_config_init (defaults), then
 * k25_config_load_yaml (file), then k25_config_set per CLI flag (CLI wins),
 * then k25_config_validate.  Errors name the source ("k25.yaml:7" or
 * "command line"), the key, and what was expected.
 */
#include "k25.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <jansson.h>
#include <yaml.h>

/* ------------------------------------------------------------ key table */

enum key_kind {
    KIND_INT,      /* int field */
    KIND_I64,      /* int64_t field */
    KIND_U64,      /* uint64_t field (range kept within int64 for JSON) */
    KIND_FLOAT,    /* double field */
    KIND_BOOL,     /* bool field */
    KIND_STR,      /* char[] field */
    KIND_ENUM,     /* enum field, values 0..n_names-1 named by names[] */
};

struct key_def {
    struct k25_config_key_info info;
    enum key_kind kind;
    size_t off;            /* offsetof(struct k25_config, field) */
    size_t size;           /* sizeof the field (strings: buffer size) */
    int64_t ilo, ihi;      /* integer range, inclusive */
    double flo, fhi;       /* float range */
    bool flo_open;         /* float range excludes flo */
    bool str_nonempty;     /* string must not be empty */
    const char *const *names; /* enum names, index = enum value */
    int n_names;
};

static const char *const dtype_names[] = {"fp32", "fp16", "int8", "int4"};
static const char *const hint_names[] = {"auto", "legal_doc", "plain_text"};
static const char *const tier_policy_names[] = {"positional", "hotness"};
static const char *const log_level_names[] = {"off", "info", "debug"};
static const char *const attn_names[] = {"chunked", "flash2", "naive"};
static const char *const wdtype_names[] = {"fp32", "bf16", "fp16"};
static const char *const wquant_names[] = {"none", "int8", "int4"};
static const char *const cpu_kernel_names[] = {"auto", "avx512", "avx2", "scalar"};
static const char *const cuda_gemm_names[] = {"exact", "fast"};

#define F(field) offsetof(struct k25_config, field), sizeof(((struct k25_config *)0)->field)
#define NAMES(a) (a), (int)(sizeof(a) / sizeof((a)[0]))
/* memory_budget_mb * 2^20 must fit in int64_t bytes. */
#define MEM_MB_MAX ((INT64_C(1) << 43) - 1)

static const struct key_def keys[] = {
    {{"model", "string", "tiny",
      "a preset name (tiny, small, llama3-8b) or a directory with config.json + safetensors",
      "non-empty, < 1024 bytes"},
     KIND_STR, F(model), 0, 0, 0, 0, false, true, NULL, 0},
    {{"max_batch_size", "int", "8", "sequences per decode batch", ">= 1"},
     KIND_INT, F(max_batch_size), 1, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"kv_cache_dtype", "enum", "fp32",
      "KV storage precision: int8/int4 quantize keys per channel and values per token in groups",
      "fp32|fp16|int8|int4"},
     KIND_ENUM, F(kv_cache_dtype), 0, 0, 0, 0, false, false, NAMES(dtype_names)},
    {{"prefill_chunk_size", "int", "2048", "tokens per prefill chunk", ">= 1"},
     KIND_INT, F(prefill_chunk_size), 1, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"decode_max_tokens", "int", "1024", "cap on generated tokens per request", ">= 1"},
     KIND_INT, F(decode_max_tokens), 1, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"max_model_len", "int", "0",
      "context limit of one request: prompt + max_tokens; longer requests are refused with the "
      "length and the limit.  0 = the model's (config.json max_position_embeddings; presets 131072)",
      ">= 0, at most the model's"},
     KIND_INT, F(max_model_len), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"queue_timeout_ms", "int", "30000",
      "how long a request may wait in the queue; longer ones end timed_out with a reason, 0 = no limit",
      ">= 0"},
     KIND_INT, F(queue_timeout_ms), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"max_num_batched_tokens", "int", "8192", "token budget per engine step", ">= 1"},
     KIND_INT, F(max_num_batched_tokens), 1, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"kv_compression_ratio", "float", "0.85",
      "fraction of KV tokens kept per layer and KV head (pruning + merging), 1 = keep all; "
      "the baselines and one-pass prefill keep all", "(0, 1]"},
     KIND_FLOAT, F(kv_compression_ratio), 0, 0, 0.0, 1.0, true, false, NULL, 0},
    {{"kv_merge_threshold", "float", "0.92",
      "cosine similarity above which neighbouring keys merge into a weighted prototype",
      "[0, 1]"},
     KIND_FLOAT, F(kv_merge_threshold), 0, 0, 0.0, 1.0, false, false, NULL, 0},
    {{"kv_block_size", "int", "256", "tokens per KV cache block", "1..65536"},
     KIND_INT, F(kv_block_size), 1, 65536, 0, 0, false, false, NULL, 0},
    {{"kv_quant_group", "int", "32",
      "int8/int4 KV: tokens per key scale group (per channel), values per value scale group "
      "(per token, capped at head_dim); must divide kv_block_size",
      "1..4096"},
     KIND_INT, F(kv_quant_group), 1, 4096, 0, 0, false, false, NULL, 0},
    {{"kv_quant_residual", "int", "128",
      "int8/int4 KV: most recent tokens kept in fp16 until their group closes", ">= 0"},
     KIND_INT, F(kv_quant_residual), 0, 1 << 20, 0, 0, false, false, NULL, 0},
    {{"kv_sink_tokens", "int", "64", "KV compression: first tokens of a sequence never pruned or merged",
      ">= 0"},
     KIND_INT, F(kv_sink_tokens), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"kv_recent_tokens", "int", "512",
      "KV compression: most recent tokens of a sequence never pruned or merged", ">= 0"},
     KIND_INT, F(kv_recent_tokens), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"kv_hot_tokens", "int", "0",
      "KV tiers: tokens at the start of each sequence whose blocks stay hot (backend memory); the "
      "rest live in the warm pool or the cold file between steps and are brought back before "
      "attention reads them, 0 = tiers off", ">= 0"},
     KIND_INT, F(kv_hot_tokens), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"kv_warm_budget_mb", "float", "0",
      "KV tiers: host-memory pool in MiB for blocks that are not hot (with a cold tier, at least 2 "
      "blocks of it are prefetch staging, grown to what the steps stream)", "0..8796093022207"},
     KIND_FLOAT, F(kv_warm_budget_mb), 0, 0, 0.0, (double)MEM_MB_MAX, false, false, NULL, 0},
    {{"kv_cold_dir", "string", "",
      "KV tiers: folder of the cold tier (an unlinked file read by a prefetch thread); empty = no "
      "cold tier", "< 1024 bytes"},
     KIND_STR, F(kv_cold_dir), 0, 0, 0, 0, false, false, NULL, 0},
    {{"kv_tier_policy", "enum", "positional",
      "KV tiers: which blocks stay warm when the warm pool is full: positional (the blocks read "
      "most recently, then by id) or hotness (spans ranked by the attention mass they received, "
      "decayed per step; promotions through the prefetch thread, with hysteresis)",
      "positional|hotness"},
     KIND_ENUM, F(kv_tier_policy), 0, 0, 0, 0, false, false, NAMES(tier_policy_names)},
    {{"block_pattern_hint", "enum", "auto",
      "KV tiers, hotness policy: the spans it scores and moves as one unit: legal_doc cuts at "
      "section headings (Article N, Section N, \u00a7 N, \u7b2cN\u6761), plain_text fixed spans, auto "
      "picks from the density of headings; with auto a gold set's field applies per request",
      "auto|legal_doc|plain_text"},
     KIND_ENUM, F(block_pattern_hint), 0, 0, 0, 0, false, false, NAMES(hint_names)},
    {{"memory_budget_mb", "int", "0",
      "KV + activation budget in MiB the engine must live within, 0 = no budget", ">= 0"},
     KIND_I64, F(memory_budget_mb), 0, MEM_MB_MAX, 0, 0, false, false, NULL, 0},
    {{"disable_prefill_optimization", "bool", "false",
      "prefill in one pass over uncompressed KV instead of in chunks (diagnosis)", "true|false"},
     KIND_BOOL, F(disable_prefill_optimization), 0, 0, 0, 0, false, false, NULL, 0},
    {{"enable_prefix_caching", "bool", "false",
      "reuse the full KV blocks of finished requests whose tokens match a new prompt's prefix "
      "(needs uncompressed KV: kv_compression_ratio 1)",
      "true|false"},
     KIND_BOOL, F(enable_prefix_caching), 0, 0, 0, 0, false, false, NULL, 0},
    {{"ignore_eos", "bool", "false",
      "generate past the model's end-of-sequence ids (generation_config.json / config.json "
      "eos_token_id) up to the token cap, as benchmarks of fixed output lengths do",
      "true|false"},
     KIND_BOOL, F(ignore_eos), 0, 0, 0, 0, false, false, NULL, 0},
    {{"backend", "string", "cpu",
      "where the engine computes: a backend built into this binary (CUDA: make CUDA=1)",
      "cpu"}, /* the range shown is the registry's (k25_config_key) */
     KIND_STR, F(backend), 0, 0, 0, 0, false, true, NULL, 0},
    {{"attention", "enum", "chunked",
      "attention kernels: the engine's ChunkedAttention, or a baseline (FlashAttention-2-style "
      "tiles, naive full score matrix)",
      "chunked|flash2|naive"},
     KIND_ENUM, F(attention), 0, 0, 0, 0, false, false, NAMES(attn_names)},
    {{"rope_theta", "float", "0", "RoPE base frequency, 0 = the model's own", ">= 0"},
     KIND_FLOAT, F(rope_theta), 0, 0, 0.0, HUGE_VAL, false, false, NULL, 0},
    {{"seed", "int", "0", "sampling seed", "0..9223372036854775807"},
     KIND_U64, F(seed), 0, INT64_MAX, 0, 0, false, false, NULL, 0},
    {{"threads", "int", "0", "CPU threads for BLAS and kernels, 0 = all cores", ">= 0"},
     KIND_INT, F(threads), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"temperature", "float", "0", "sampling temperature, 0 = greedy", ">= 0"},
     KIND_FLOAT, F(temperature), 0, 0, 0.0, HUGE_VAL, false, false, NULL, 0},
    {{"top_p", "float", "1", "nucleus sampling probability mass", "(0, 1]"},
     KIND_FLOAT, F(top_p), 0, 0, 0.0, 1.0, true, false, NULL, 0},
    {{"log_level", "enum", "off", "structured engine log level", "off|info|debug"},
     KIND_ENUM, F(log_level), 0, 0, 0, 0, false, false, NAMES(log_level_names)},
    {{"log_file", "string", "", "structured log destination, empty = stderr", "< 1024 bytes"},
     KIND_STR, F(log_file), 0, 0, 0, 0, false, false, NULL, 0},
    {{"queue_memory_capacity", "int", "128",
      "requests waiting in memory; beyond it new ones spill to queue_spill_dir or are rejected "
      "(high priority never spills)", ">= 1"},
     KIND_INT, F(queue_memory_capacity), 1, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"queue_spill_dir", "string", "",
      "folder of the durable disk queue (fsync'd log, replayed at start); empty = no spill tier, "
      "arrivals beyond capacity are rejected with a reason", "< 1024 bytes"},
     KIND_STR, F(queue_spill_dir), 0, 0, 0, 0, false, false, NULL, 0},
    {{"queue_low_priority_ttft_ms", "int", "1500",
      "first-token SLA of low-priority (spilled) requests", ">= 0"},
     KIND_INT, F(queue_low_priority_ttft_ms), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"breaker_enabled", "bool", "false",
      "circuit breaker: under pressure new requests run on the degraded model (k25 serve turns it on)",
      "true|false"},
     KIND_BOOL, F(breaker_enabled), 0, 0, 0, 0, false, false, NULL, 0},
    {{"breaker_busy_threshold", "float", "0.95",
      "engine busy fraction above which (for breaker_busy_seconds) the breaker opens", "(0, 1]"},
     KIND_FLOAT, F(breaker_busy_threshold), 0, 0, 0.0, 1.0, true, false, NULL, 0},
    {{"breaker_busy_seconds", "float", "5",
      "how long busy must stay above its threshold to open, and pressure below (threshold - 0.05) to close",
      "0..86400"},
     KIND_FLOAT, F(breaker_busy_seconds), 0, 0, 0.0, 86400.0, false, false, NULL, 0},
    {{"breaker_memory_threshold", "float", "0.92",
      "engine memory fraction (of memory_budget_mb, else the cgroup limit or MemAvailable at start) "
      "above which the breaker opens", "(0, 1]"},
     KIND_FLOAT, F(breaker_memory_threshold), 0, 0, 0.0, 1.0, true, false, NULL, 0},
    {{"degraded_layer_fraction", "float", "0.30",
      "layers the degraded (early-exit) model runs: the first ceil(f * n_layers), at least 1", "(0, 1]"},
     KIND_FLOAT, F(degraded_layer_fraction), 0, 0, 0.0, 1.0, true, false, NULL, 0},
    {{"degraded_ttft_ms", "int", "1200", "first-token SLA of degraded requests", ">= 0"},
     KIND_INT, F(degraded_ttft_ms), 0, INT_MAX, 0, 0, false, false, NULL, 0},
    {{"weight_dtype", "enum", "fp32",
      "how the loaded model holds its matrices: dummy weights are generated in it, safetensors "
      "tensors kept (same dtype) or converted; norms stay fp32", "fp32|bf16|fp16"},
     KIND_ENUM, F(weight_dtype), 0, 0, 0, 0, false, false, NAMES(wdtype_names)},
    {{"quantize_weights", "enum", "none",
      "group-wise symmetric weight quantization at engine create (GEMMs and embeddings read it; "
      "scales count in the weight bytes)", "none|int8|int4"},
     KIND_ENUM, F(quantize_weights), 0, 0, 0, 0, false, false, NAMES(wquant_names)},
    {{"weight_quant_group", "int", "32",
      "int8/int4 weights: values per fp32 scale along a row; must divide dim and ffn_dim",
      "32..4096, a multiple of 32"},
     KIND_INT, F(weight_quant_group), 32, 4096, 0, 0, false, false, NULL, 0},
    {{"cpu_kernels", "enum", "auto",
      "CPU backend decode kernels (GEMV / small-M GEMM): auto = the widest the CPU has; a path "
      "the CPU lacks is refused", "auto|avx512|avx2|scalar"},
     KIND_ENUM, F(cpu_kernels), 0, 0, 0, 0, false, false, NAMES(cpu_kernel_names)},
    {{"cuda_gemm", "enum", "exact",
      "CUDA backend prefill GEMMs on fp16/bf16 weights: exact = weights widened to fp32, fp32 GEMM "
      "(CPU parity); fast = activations rounded to the weights' type, tensor cores, fp32 accumulate",
      "exact|fast"},
     KIND_ENUM, F(cuda_gemm), 0, 0, 0, 0, false, false, NAMES(cuda_gemm_names)},
};

#define NKEYS ((int)(sizeof(keys) / sizeof(keys[0])))

/* ------------------------------------------------------------- defaults */

void k25_config_init(struct k25_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->model, sizeof(cfg->model), "tiny");
    cfg->max_batch_size = 8;
    cfg->kv_cache_dtype = K25_DTYPE_FP32;
    cfg->prefill_chunk_size = 2048;
    cfg->decode_max_tokens = 1024;
    cfg->queue_timeout_ms = 30000;
    cfg->max_num_batched_tokens = 8192;
    cfg->kv_compression_ratio = 0.85;
    cfg->kv_merge_threshold = 0.92;
    cfg->kv_block_size = 256;
    cfg->kv_quant_group = 32;
    cfg->kv_quant_residual = 128;
    cfg->kv_sink_tokens = 64;
    cfg->kv_recent_tokens = 512;
    cfg->kv_hot_tokens = 0;
    cfg->kv_warm_budget_mb = 0.0;
    cfg->kv_cold_dir[0] = '\0';
    cfg->memory_budget_mb = 0;
    cfg->disable_prefill_optimization = false;
    cfg->enable_prefix_caching = false;
    cfg->ignore_eos = false;
    cfg->attention = K25_ATTN_CHUNKED;
    cfg->rope_theta = 0.0;
    cfg->seed = 0;
    cfg->threads = 0;
    cfg->temperature = 0.0;
    cfg->top_p = 1.0;
    cfg->log_level = K25_LOG_OFF;
    cfg->log_file[0] = '\0';
    snprintf(cfg->backend, sizeof(cfg->backend), "cpu");
    cfg->queue_memory_capacity = 128;
    cfg->queue_spill_dir[0] = '\0';
    cfg->queue_low_priority_ttft_ms = 1500;
    cfg->breaker_enabled = false;
    cfg->breaker_busy_threshold = 0.95;
    cfg->breaker_busy_seconds = 5.0;
    cfg->breaker_memory_threshold = 0.92;
    cfg->degraded_layer_fraction = 0.30;
    cfg->degraded_ttft_ms = 1200;
    cfg->weight_dtype = K25_WEIGHT_FP32;
    cfg->quantize_weights = K25_WQUANT_NONE;
    cfg->weight_quant_group = 32;
    cfg->cpu_kernels = K25_CPU_KERNELS_AUTO;
    cfg->cuda_gemm = K25_CUDA_GEMM_EXACT;
}

int k25_config_key_count(void)
{
    return NKEYS;
}

const struct k25_config_key_info *k25_config_key(int i)
{
    if (i < 0 || i >= NKEYS)
        return NULL;
    if (!strcmp(keys[i].info.key, "backend")) { /* the backends built in, from the registry */
        static char range[128];
        static struct k25_config_key_info info;
        if (!range[0] && k25_backend_names(range, sizeof(range)) != K25_OK)
            snprintf(range, sizeof(range), "cpu");
        info = keys[i].info;
        info.range = range;
        return &info;
    }
    return &keys[i].info;
}

const char *k25_dtype_name(enum k25_dtype d)
{
    if (d == K25_DTYPE_BF16) /* a weight format, not a kv_cache_dtype value */
        return "bf16";
    return (unsigned)d < sizeof(dtype_names) / sizeof(dtype_names[0]) ? dtype_names[d] : "?";
}

enum k25_dtype k25_weight_dtype_of(enum k25_weight_dtype w)
{
    return w == K25_WEIGHT_BF16 ? K25_DTYPE_BF16 : w == K25_WEIGHT_FP16 ? K25_DTYPE_FP16 : K25_DTYPE_FP32;
}

enum k25_dtype k25_weight_quant_dtype(enum k25_weight_quant q, enum k25_dtype unquantized)
{
    return q == K25_WQUANT_INT8 ? K25_DTYPE_INT8 : q == K25_WQUANT_INT4 ? K25_DTYPE_INT4 : unquantized;
}

const char *k25_cpu_kernels_name(enum k25_cpu_kernels k)
{
    return (unsigned)k < sizeof(cpu_kernel_names) / sizeof(cpu_kernel_names[0]) ? cpu_kernel_names[k] : "?";
}

const char *k25_hint_name(enum k25_hint h)
{
    return (unsigned)h < sizeof(hint_names) / sizeof(hint_names[0]) ? hint_names[h] : "?";
}

const char *k25_tier_policy_name(enum k25_tier_policy p)
{
    return (unsigned)p < sizeof(tier_policy_names) / sizeof(tier_policy_names[0]) ? tier_policy_names[p] : "?";
}

const char *k25_attn_impl_name(enum k25_attn_impl a)
{
    return (unsigned)a < sizeof(attn_names) / sizeof(attn_names[0]) ? attn_names[a] : "?";
}

int k25_attn_impl_parse(const char *name, enum k25_attn_impl *out, struct k25_error *err)
{
    for (int i = 0; i < (int)(sizeof(attn_names) / sizeof(attn_names[0])); i++)
        if (strcmp(name, attn_names[i]) == 0) {
            *out = (enum k25_attn_impl)i;
            return K25_OK;
        }
    return k25_error_set(err, K25_ENOTFOUND, NULL, 0, "attention",
                         "unknown attention implementation '%s' (chunked, flash2 or naive)", name);
}

static const struct key_def *find_key(const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(keys[i].info.key, key) == 0)
            return &keys[i];
    return NULL;
}

/* ------------------------------------------------------- "did you mean" */

/*
 * Optimal-string-alignment distance (Levenshtein plus adjacent
 * transpositions), case-insensitive, so "prefill_chunk_szie" is 1 away.
 * Strings longer than 63 bytes count as far from everything.
 */
static int edit_distance(const char *a, const char *b)
{
    enum { MAXL = 64 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAXL || m >= MAXL)
        return INT_MAX;
    int d[MAXL][MAXL];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            int cost = ca != cb;
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    }
    return d[n][m];
}

/*
 * The closest known key within edit distance 3 (and closer than the
 * length of what was typed, so "x" suggests nothing); first in table
 * order on ties; NULL when nothing is close.
 */
const char *k25_config_suggest(const char *key)
{
    if (!key)
        return NULL;
    int best = 4;
    const char *found = NULL;
    for (int i = 0; i < NKEYS; i++) {
        int dist = edit_distance(key, keys[i].info.key);
        if (dist < best && (size_t)dist < strlen(key)) {
            best = dist;
            found = keys[i].info.key;
        }
    }
    return found;
}

/* ------------------------------------------------------------- parsing */

/* Long values are shortened in messages so one bad line stays one line. */
#define VAL_FMT "\"%.60s%s\""
#define VAL_ARG(v) (v), (strlen(v) > 60 ? "..." : "")

/* What an integer key expects, for "expected ..., got" messages. */
static const char *int_expect(const struct key_def *d)
{
    if (d->ilo == 1)
        return "a positive integer";
    if (d->ilo == 0)
        return "a non-negative integer";
    return "an integer";
}

/*
 * Out-of-range message for integer keys (K25_ERANGE): "must be >= 1" for
 * keys bounded only below, "must be between A and B" otherwise.
 */
static int int_range_error(const struct key_def *d, const char *vtext, bool too_low,
                           const char *file, int line, const char *field, struct k25_error *err)
{
    if (d->kind == KIND_INT && d->ihi == INT_MAX) {
        if (too_low)
            return k25_error_set(err, K25_ERANGE, file, line, field, "must be >= %lld, got %s",
                                 (long long)d->ilo, vtext);
        return k25_error_set(err, K25_ERANGE, file, line, field, "must be at most %d, got %s",
                             INT_MAX, vtext);
    }
    return k25_error_set(err, K25_ERANGE, file, line, field, "must be between %lld and %lld, got %s",
                         (long long)d->ilo, (long long)d->ihi, vtext);
}

/* A double as the shortest of %.15g / %.17g that reads back the same. */
static void fmt_double(char *buf, size_t cap, double v)
{
    snprintf(buf, cap, "%.15g", v);
    if (strtod(buf, NULL) != v)
        snprintf(buf, cap, "%.17g", v);
}

/* Checks a double against a float key's range: 0 or K25_ERANGE. */
static int float_check(const struct key_def *d, double v, const char *file, int line,
                       const char *field, struct k25_error *err)
{
    bool ok = isfinite(v) && (d->flo_open ? v > d->flo : v >= d->flo) && v <= d->fhi;
    if (ok)
        return 0;
    char vtext[40];
    fmt_double(vtext, sizeof(vtext), v);
    if (isinf(d->fhi))
        return k25_error_set(err, K25_ERANGE, file, line, field,
                             "must be a finite number >= %g, got %s", d->flo, vtext);
    return k25_error_set(err, K25_ERANGE, file, line, field, "must be in %s, got %s", d->info.range,
                         vtext);
}

/*
 * Strict integer syntax: optional sign, decimal digits, nothing else (no
 * spaces, no "1e3", no "4096.0").  Returns false for bad syntax; sets
 * *overflow when the digits do not fit in long long.
 */
static bool parse_int_text(const char *s, long long *out, bool *overflow)
{
    const char *p = s;
    *overflow = false;
    if (*p == '+' || *p == '-')
        p++;
    if (!isdigit((unsigned char)*p))
        return false;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q))
            return false;
    errno = 0;
    *out = strtoll(s, NULL, 10);
    if (errno == ERANGE)
        *overflow = true;
    return true;
}

/*
 * Strict float syntax: digits, sign, point and exponent only (no "inf",
 * "nan", hex or spaces), all of it consumed by strtod.  Returns false for
 * bad syntax; sets *overflow when the magnitude is beyond double.
 */
static bool parse_float_text(const char *s, double *out, bool *overflow)
{
    *overflow = false;
    if (!*s)
        return false;
    bool digit = false;
    for (const char *q = s; *q; q++) {
        if (isdigit((unsigned char)*q))
            digit = true;
        else if (!strchr("+-.eE", *q))
            return false;
    }
    if (!digit)
        return false;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end)
        return false;
    if (errno == ERANGE && isinf(v))
        *overflow = true;
    *out = v;
    return true;
}

static bool parse_bool_text(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

/*
 * Parses value for key def and stores it in cfg.  Errors carry file, line
 * and field as given; cfg is untouched on failure.
 */
static int set_value(struct k25_config *cfg, const struct key_def *d, const char *value,
                     const char *file, int line, const char *field, struct k25_error *err)
{
    char *base = (char *)cfg + d->off;

    switch (d->kind) {
    case KIND_INT:
    case KIND_I64:
    case KIND_U64: {
        long long v = 0;
        bool overflow = false;
        if (!parse_int_text(value, &v, &overflow))
            return k25_error_set(err, K25_EINVAL, file, line, field, "expected %s, got " VAL_FMT,
                                 int_expect(d), VAL_ARG(value));
        if (overflow || v < d->ilo || v > d->ihi) {
            char vtext[80];
            snprintf(vtext, sizeof(vtext), "%.60s%s", value, strlen(value) > 60 ? "..." : "");
            return int_range_error(d, vtext, overflow ? value[0] == '-' : v < d->ilo, file, line,
                                   field, err);
        }
        if (d->kind == KIND_INT) {
            int iv = (int)v;
            memcpy(base, &iv, sizeof(iv));
        } else if (d->kind == KIND_I64) {
            int64_t iv = (int64_t)v;
            memcpy(base, &iv, sizeof(iv));
        } else {
            uint64_t uv = (uint64_t)v;
            memcpy(base, &uv, sizeof(uv));
        }
        return 0;
    }
    case KIND_FLOAT: {
        double v = 0;
        bool overflow = false;
        if (!parse_float_text(value, &v, &overflow))
            return k25_error_set(err, K25_EINVAL, file, line, field,
                                 "expected a number, got " VAL_FMT, VAL_ARG(value));
        if (overflow)
            return k25_error_set(err, K25_ERANGE, file, line, field,
                                 "number " VAL_FMT " is too large (must be %s%s)", VAL_ARG(value),
                                 isinf(d->fhi) ? "finite and " : "in ", d->info.range);
        int rc = float_check(d, v, file, line, field, err);
        if (rc)
            return rc;
        memcpy(base, &v, sizeof(v));
        return 0;
    }
    case KIND_BOOL: {
        bool v;
        if (!parse_bool_text(value, &v))
            return k25_error_set(err, K25_EINVAL, file, line, field,
                                 "expected a boolean (true/false, yes/no, on/off, 1/0), got " VAL_FMT,
                                 VAL_ARG(value));
        memcpy(base, &v, sizeof(v));
        return 0;
    }
    case KIND_STR: {
        size_t n = strlen(value);
        if (d->str_nonempty && n == 0)
            return k25_error_set(err, K25_EINVAL, file, line, field, "must not be empty");
        if (n >= d->size)
            return k25_error_set(err, K25_ERANGE, file, line, field,
                                 "is too long (%zu bytes, at most %zu)", n, d->size - 1);
        memcpy(base, value, n + 1);
        return 0;
    }
    case KIND_ENUM: {
        for (int i = 0; i < d->n_names; i++) {
            if (strcasecmp(value, d->names[i]) == 0) {
                /* Every config enum is an int-sized C enum. */
                int ev = i;
                K25_ASSERT(d->size == sizeof(int));
                memcpy(base, &ev, sizeof(ev));
                return 0;
            }
        }
        char choices[128] = "";
        size_t used = 0;
        for (int i = 0; i < d->n_names && used < sizeof(choices); i++)
            used += (size_t)snprintf(choices + used, sizeof(choices) - used, "%s%s",
                                     i ? ", " : "", d->names[i]);
        if (d->names == attn_names && strcasecmp(value, "cudnn") == 0) /* issue 37: named, not built */
            return k25_error_set(err, K25_EINVAL, file, line, field,
                                 "cudnn (cuDNN's fused SDPA on the CUDA backend) is not built yet; expected one "
                                 "of %s", choices);
        return k25_error_set(err, K25_EINVAL, file, line, field, "expected one of %s, got " VAL_FMT,
                             choices, VAL_ARG(value));
    }
    }
    return k25_error_set(err, K25_EINTERNAL, file, line, field, "unhandled key kind");
}

/* "unknown key" with a suggestion when one is close: K25_ENOTFOUND. */
static int unknown_key_error(const char *key, const char *file, int line, struct k25_error *err)
{
    const char *sug = k25_config_suggest(key);
    if (sug)
        return k25_error_set(err, K25_ENOTFOUND, file, line, key,
                             "unknown key (did you mean '%s'?)", sug);
    return k25_error_set(err, K25_ENOTFOUND, file, line, key,
                         "unknown key ('k25 config --keys' lists them)");
}

int k25_config_set(struct k25_config *cfg, const char *key, const char *value,
                   const char *src_file, int src_line, struct k25_error *err)
{
    K25_ASSERT(cfg && key && value);
    const struct key_def *d = find_key(key);
    if (!d)
        return unknown_key_error(key, src_file, src_line, err);
    return set_value(cfg, d, value, src_file, src_line, key, err);
}

/* ----------------------------------------------------------------- YAML */

/* The loader's state: parser, the current event, where errors point. */
struct yaml_load {
    yaml_parser_t parser;
    yaml_event_t ev;
    bool have_ev;       /* ev holds an event that must be deleted */
    const char *path;
};

/*
 * Fetches the next event into ld->ev (deleting the previous one).  A
 * syntax error becomes K25_EFORMAT at the 1-based line libyaml marks; an
 * undecodable byte K25_EFORMAT with its offset.
 */
static int yaml_next(struct yaml_load *ld, struct k25_error *err)
{
    if (ld->have_ev) {
        yaml_event_delete(&ld->ev);
        ld->have_ev = false;
    }
    if (yaml_parser_parse(&ld->parser, &ld->ev)) {
        ld->have_ev = true;
        return 0;
    }
    yaml_parser_t *p = &ld->parser;
    const char *problem = p->problem ? p->problem : "unknown problem";
    switch (p->error) {
    case YAML_MEMORY_ERROR:
        return k25_error_set(err, K25_ENOMEM, ld->path, 0, NULL, "out of memory parsing YAML");
    case YAML_READER_ERROR:
        return k25_error_set(err, K25_EFORMAT, ld->path, 0, NULL,
                             "YAML read error at byte %zu: %s", p->problem_offset, problem);
    default:
        if (p->context)
            return k25_error_set(err, K25_EFORMAT, ld->path, (int)p->problem_mark.line + 1, NULL,
                                 "YAML syntax error: %s (%s that starts on line %d)", problem,
                                 p->context, (int)p->context_mark.line + 1);
        return k25_error_set(err, K25_EFORMAT, ld->path, (int)p->problem_mark.line + 1, NULL,
                             "YAML syntax error: %s", problem);
    }
}

/* 1-based line of the current event. */
static int ev_line(const struct yaml_load *ld)
{
    return (int)ld->ev.start_mark.line + 1;
}

/* A plain (unquoted) scalar that YAML reads as null: "", "~", "null". */
static bool scalar_is_null(const yaml_event_t *ev)
{
    if (ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = (const char *)ev->data.scalar.value;
    return !*v || !strcmp(v, "~") || !strcmp(v, "null") || !strcmp(v, "Null") ||
           !strcmp(v, "NULL");
}

static const char *event_what(yaml_event_type_t t)
{
    switch (t) {
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_ALIAS_EVENT: return "an alias (*name; aliases are not supported)";
    default: return "something else";
    }
}

/*
 * Reads the pairs of the top-level mapping (its MAPPING_START consumed)
 * into cfg.  first_line[i] remembers where key i was set, for duplicates.
 */
static int yaml_read_mapping(struct yaml_load *ld, struct k25_config *cfg, int *first_line,
                             struct k25_error *err)
{
    char key[128];
    int rc;

    for (;;) {
        if ((rc = yaml_next(ld, err)))
            return rc;
        if (ld->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        if (ld->ev.type != YAML_SCALAR_EVENT)
            return k25_error_set(err, K25_EFORMAT, ld->path, ev_line(ld), NULL,
                                 "expected a key name, got %s", event_what(ld->ev.type));

        /* Key: known, not seen before. */
        const char *k = (const char *)ld->ev.data.scalar.value;
        int kline = ev_line(ld);
        if (strlen(k) != ld->ev.data.scalar.length)
            return k25_error_set(err, K25_EFORMAT, ld->path, kline, NULL, "key contains a NUL byte");
        snprintf(key, sizeof(key), "%s", k);
        const struct key_def *d = find_key(key);
        if (!d)
            return unknown_key_error(key, ld->path, kline, err);
        int idx = (int)(d - keys);
        if (first_line[idx])
            return k25_error_set(err, K25_EFORMAT, ld->path, kline, key,
                                 "duplicate key (first set on line %d)", first_line[idx]);
        first_line[idx] = kline;

        /* Value: one scalar. */
        if ((rc = yaml_next(ld, err)))
            return rc;
        int vline = ev_line(ld);
        if (ld->ev.type != YAML_SCALAR_EVENT)
            return k25_error_set(err, K25_EINVAL, ld->path, vline, key,
                                 "expected a single %s value, got %s", d->info.type,
                                 event_what(ld->ev.type));
        if (scalar_is_null(&ld->ev))
            return k25_error_set(err, K25_EINVAL, ld->path, vline, key,
                                 "has no value (give one, or remove the line for the default %s%s%s)",
                                 d->kind == KIND_STR ? "\"" : "", d->info.deflt,
                                 d->kind == KIND_STR ? "\"" : "");
        const char *v = (const char *)ld->ev.data.scalar.value;
        if (strlen(v) != ld->ev.data.scalar.length)
            return k25_error_set(err, K25_EINVAL, ld->path, vline, key, "value contains a NUL byte");
        if ((rc = set_value(cfg, d, v, ld->path, vline, key, err)))
            return rc;
    }
}

/*
 * Loads a YAML file holding one mapping of key: value scalars on top of
 * cfg.  An empty file (or one of only comments) changes nothing.  On any
 * error cfg is left as it was and err names the file and 1-based line.
 */
int k25_config_load_yaml(struct k25_config *cfg, const char *path, struct k25_error *err)
{
    K25_ASSERT(cfg && path);
    int rc = 0;
    int first_line[NKEYS];
    memset(first_line, 0, sizeof(first_line));
    struct k25_config tmp = *cfg;
    struct yaml_load ld;
    memset(&ld, 0, sizeof(ld));
    ld.path = path;

    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        return k25_error_set(err, e == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL,
                             "cannot open config file: %s", strerror(e));
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot stat config file: %s",
                           strerror(errno));
        goto out_close_file;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "is a directory, not a config file");
        goto out_close_file;
    }
    if (!yaml_parser_initialize(&ld.parser)) {
        rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory starting the YAML parser");
        goto out_close_file;
    }
    yaml_parser_set_input_file(&ld.parser, f);

    int docs = 0;
    for (;;) {
        if ((rc = yaml_next(&ld, err)))
            goto out_delete_parser;
        yaml_event_type_t t = ld.ev.type;
        if (t == YAML_STREAM_END_EVENT)
            break;
        if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_END_EVENT)
            continue;
        if (t == YAML_DOCUMENT_START_EVENT) {
            if (++docs > 1) {
                rc = k25_error_set(err, K25_EFORMAT, path, ev_line(&ld), NULL,
                                   "more than one YAML document; a config file holds one mapping");
                goto out_delete_parser;
            }
            continue;
        }
        /* The document's root node. */
        if (t == YAML_MAPPING_START_EVENT) {
            if ((rc = yaml_read_mapping(&ld, &tmp, first_line, err)))
                goto out_delete_parser;
        } else if (t == YAML_SCALAR_EVENT && scalar_is_null(&ld.ev)) {
            /* "---" alone: an empty document, nothing to set. */
        } else {
            rc = k25_error_set(err, K25_EFORMAT, path, ev_line(&ld), NULL,
                               "expected a mapping of key: value pairs at the top level, got %s",
                               t == YAML_SCALAR_EVENT ? "a single value" : event_what(t));
            goto out_delete_parser;
        }
    }
    *cfg = tmp;

out_delete_parser:
    if (ld.have_ev)
        yaml_event_delete(&ld.ev);
    yaml_parser_delete(&ld.parser);
out_close_file:
    fclose(f); /* read-only: nothing to lose on close */
    return rc;
}

/* ----------------------------------------------------------- validation */

/*
 * Checks every key's own range (the struct may have been filled by code,
 * not by k25_config_set), then the one real constraint between keys:
 * max_batch_size <= max_num_batched_tokens, since a decode step of a full
 * batch needs one token of the step budget per sequence (otherwise the
 * last sequences of the batch starve; vLLM refuses the same setting).
 * prefill_chunk_size above max_num_batched_tokens is allowed: the
 * scheduler clips a chunk to the budget left in the step.
 * Errors carry the key as field and no file (the value may come from any
 * source).
 */
int k25_config_validate(const struct k25_config *cfg, struct k25_error *err)
{
    K25_ASSERT(cfg);
    int rc;
    for (int i = 0; i < NKEYS; i++) {
        const struct key_def *d = &keys[i];
        const char *base = (const char *)cfg + d->off;
        const char *k = d->info.key;
        char vtext[32];
        switch (d->kind) {
        case KIND_INT: {
            int v;
            memcpy(&v, base, sizeof(v));
            snprintf(vtext, sizeof(vtext), "%d", v);
            if (v < d->ilo || v > d->ihi)
                return int_range_error(d, vtext, v < d->ilo, NULL, 0, k, err);
            break;
        }
        case KIND_I64: {
            int64_t v;
            memcpy(&v, base, sizeof(v));
            snprintf(vtext, sizeof(vtext), "%lld", (long long)v);
            if (v < d->ilo || v > d->ihi)
                return int_range_error(d, vtext, v < d->ilo, NULL, 0, k, err);
            break;
        }
        case KIND_U64: {
            uint64_t v;
            memcpy(&v, base, sizeof(v));
            snprintf(vtext, sizeof(vtext), "%llu", (unsigned long long)v);
            if (v > (uint64_t)d->ihi)
                return int_range_error(d, vtext, false, NULL, 0, k, err);
            break;
        }
        case KIND_FLOAT: {
            double v;
            memcpy(&v, base, sizeof(v));
            if ((rc = float_check(d, v, NULL, 0, k, err)))
                return rc;
            break;
        }
        case KIND_BOOL:
            break;
        case KIND_STR:
            if (!memchr(base, '\0', d->size))
                return k25_error_set(err, K25_EINVAL, NULL, 0, k, "is not NUL-terminated");
            if (d->str_nonempty && !*base)
                return k25_error_set(err, K25_EINVAL, NULL, 0, k, "must not be empty");
            break;
        case KIND_ENUM: {
            int v;
            memcpy(&v, base, sizeof(v));
            if (v < 0 || v >= d->n_names)
                return k25_error_set(err, K25_EINVAL, NULL, 0, k, "invalid value %d", v);
            break;
        }
        }
    }

    if (!k25_backend_find_name(cfg->backend)) {
        char names[128];
        if (k25_backend_names(names, sizeof(names)) != K25_OK)
            names[0] = '\0';
        return k25_error_set(err, K25_ENOTFOUND, NULL, 0, "backend",
                             "'%s' is not built into this binary (built in: %s)%s", cfg->backend, names,
                             !strcmp(cfg->backend, "cuda") ? "; build with make CUDA=1 on a machine with nvcc" : "");
    }
    if (cfg->max_batch_size > cfg->max_num_batched_tokens)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "max_batch_size",
                             "%d exceeds max_num_batched_tokens (%d): a full decode batch needs "
                             "one token of the step budget per sequence",
                             cfg->max_batch_size, cfg->max_num_batched_tokens);
    if ((cfg->kv_cache_dtype == K25_DTYPE_INT8 || cfg->kv_cache_dtype == K25_DTYPE_INT4) &&
        cfg->kv_block_size % cfg->kv_quant_group != 0)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "kv_quant_group",
                             "%d does not divide kv_block_size (%d): a key scale group must lie in one block",
                             cfg->kv_quant_group, cfg->kv_block_size);
    if (cfg->kv_tier_policy == K25_TIER_HOTNESS && cfg->kv_hot_tokens == 0)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_tier_policy",
                             "hotness takes effect only with KV tiers on: set kv_hot_tokens > 0");
    if (cfg->kv_tier_policy == K25_TIER_HOTNESS && !cfg->kv_cold_dir[0])
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_tier_policy",
                             "hotness moves blocks between the warm pool and the cold tier: set kv_cold_dir");
    if (cfg->block_pattern_hint != K25_HINT_AUTO && cfg->kv_tier_policy != K25_TIER_HOTNESS)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "block_pattern_hint",
                             "%s takes effect only with kv_tier_policy: hotness (the spans it scores and moves)",
                             k25_hint_name(cfg->block_pattern_hint));
    if (cfg->kv_hot_tokens == 0 && (cfg->kv_warm_budget_mb > 0.0 || cfg->kv_cold_dir[0]))
        return k25_error_set(err, K25_EINVAL, NULL, 0, cfg->kv_cold_dir[0] ? "kv_cold_dir" : "kv_warm_budget_mb",
                             "takes effect only with KV tiers on: set kv_hot_tokens > 0");
    if (cfg->kv_hot_tokens > 0 && cfg->kv_warm_budget_mb <= 0.0 && !cfg->kv_cold_dir[0])
        return k25_error_set(err, K25_EINVAL, NULL, 0, "kv_hot_tokens",
                             "KV tiers need somewhere for the blocks that are not hot: set kv_warm_budget_mb "
                             "and/or kv_cold_dir");
    if (cfg->enable_prefix_caching && k25_kv_compress_active(cfg))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "enable_prefix_caching",
                             "needs uncompressed KV: set kv_compression_ratio to 1 (%g compresses; a compressed "
                             "block's slots are not its tokens, so it is never shared)",
                             cfg->kv_compression_ratio);
    if (cfg->quantize_weights != K25_WQUANT_NONE && cfg->weight_quant_group % 32 != 0)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "weight_quant_group",
                             "%d is not a multiple of 32 (the kernels' block of values)", cfg->weight_quant_group);
    return 0;
}

/* ----------------------------------------------------------------- JSON */

/* The JSON value of key d in cfg (new reference), NULL on allocation failure. */
static json_t *key_to_json(const struct k25_config *cfg, const struct key_def *d)
{
    const char *base = (const char *)cfg + d->off;
    switch (d->kind) {
    case KIND_INT: {
        int v;
        memcpy(&v, base, sizeof(v));
        return json_integer(v);
    }
    case KIND_I64: {
        int64_t v;
        memcpy(&v, base, sizeof(v));
        return json_integer((json_int_t)v);
    }
    case KIND_U64: {
        uint64_t v;
        memcpy(&v, base, sizeof(v));
        /* Valid configs keep this within int64 (range of the key). */
        return json_integer((json_int_t)(v > (uint64_t)INT64_MAX ? (uint64_t)INT64_MAX : v));
    }
    case KIND_FLOAT: {
        double v;
        memcpy(&v, base, sizeof(v));
        return json_real(isfinite(v) ? v : 0.0);
    }
    case KIND_BOOL: {
        bool v;
        memcpy(&v, base, sizeof(v));
        return json_boolean(v);
    }
    case KIND_STR:
        return json_stringn(base, strnlen(base, d->size));
    case KIND_ENUM: {
        int v;
        memcpy(&v, base, sizeof(v));
        return json_string(v >= 0 && v < d->n_names ? d->names[v] : "?");
    }
    }
    return NULL;
}

/* True when text reloads to a JSON value equal to obj (every real exact). */
static bool reals_round_trip(json_t *obj, const char *text)
{
    json_t *back = json_loads(text, 0, NULL);
    if (!back)
        return false;
    bool ok = json_equal(obj, back);
    json_decref(back);
    return ok;
}

/*
 * The config as one JSON object, keys in table order, enums as names.
 * Reals are written with 15 significant digits ("0.85", not
 * "0.84999999999999998") when that reloads to the same doubles, else 17.
 */
char *k25_config_to_json(const struct k25_config *cfg)
{
    K25_ASSERT(cfg);
    char *text = NULL;
    json_t *obj = json_object();
    if (!obj)
        return NULL;
    for (int i = 0; i < NKEYS; i++) {
        json_t *v = key_to_json(cfg, &keys[i]);
        if (!v || json_object_set_new(obj, keys[i].info.key, v) != 0)
            goto out_decref;
    }
    text = json_dumps(obj, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    if (text && !reals_round_trip(obj, text)) {
        free(text);
        text = json_dumps(obj, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    }
out_decref:
    json_decref(obj);
    return text;
}
