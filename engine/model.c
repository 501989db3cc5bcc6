/*
 * model.c - model shapes, weight buffers and dummy weights.
 *
 * A model is a Llama-family decoder held on the CPU, its matrices in
 * weight_dtype (fp32 by default, bf16 or fp16: generated or loaded
 * directly in that format, never through an fp32 copy), its norms in fp32.  Presets name
 * shapes; `--model tiny` means dummy weights of that shape: seeded,
 * deterministic, independent of the thread count, and scaled like a
 * standard initialisation (variance 1/fan_in) so that activations stay
 * O(1) through every layer at any context length.  A directory means real
 * weights (safetensors.c).
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const struct k25_model_shape presets[] = {
    /* name        dim  layers heads kv hd  ffn    vocab   theta     eps   tied  eos  n_eos max_position */
    {"tiny", 256, 4, 8, 2, 32, 768, 256, 10000.0, 1e-5f, false, {0}, 0, K25_PRESET_MAX_POSITION},
    {"small", 512, 8, 8, 2, 64, 1536, 256, 10000.0, 1e-5f, false, {0}, 0, K25_PRESET_MAX_POSITION},
    {"llama3-8b", 4096, 32, 32, 8, 128, 14336, 128256, 500000.0, 1e-5f, false, {0}, 0, K25_PRESET_MAX_POSITION},
    {"llama3-70b", 8192, 80, 64, 8, 128, 28672, 128256, 500000.0, 1e-5f, false, {0}, 0, K25_PRESET_MAX_POSITION},
};
#define NPRESETS (sizeof(presets) / sizeof(presets[0]))

int k25_model_preset(const char *name, struct k25_model_shape *out)
{
    for (size_t i = 0; i < NPRESETS; i++) {
        if (!strcmp(name, presets[i].name)) {
            *out = presets[i];
            return K25_OK;
        }
    }
    return K25_ENOTFOUND;
}

const char *k25_model_preset_names(void)
{
    return "tiny, small, llama3-8b, llama3-70b";
}

int64_t k25_model_param_count(const struct k25_model_shape *s)
{
    int64_t d = s->dim, hd = s->head_dim;
    int64_t per_layer = 2 * d                                    /* norms */
                        + (int64_t)(s->n_heads + 2 * s->n_kv_heads) * hd * d /* qkv */
                        + d * s->n_heads * hd                     /* o */
                        + 3 * d * (int64_t)s->ffn_dim;            /* gate, up, down */
    int64_t emb = (int64_t)s->vocab_size * d;
    return emb * (s->tied_embeddings ? 1 : 2) + d + per_layer * s->n_layers;
}

/* Allocates one weight tensor of n elements of dt (4 or 2 bytes); NULL on failure. */
static float *walloc_dt(int64_t n, enum k25_dtype dt)
{
    return k25_alloc(K25_MEM_WEIGHTS, (size_t)n * (dt == K25_DTYPE_FP32 ? 4 : 2));
}

/* A norm (always fp32). */
static float *walloc(int64_t n)
{
    return walloc_dt(n, K25_DTYPE_FP32);
}

int64_t k25_model_weight_bytes(const struct k25_model_shape *s, const struct k25_config *cfg)
{
    const int64_t d = s->dim, att = (int64_t)s->n_heads * s->head_dim, ffn = s->ffn_dim;
    const int64_t qkv = (int64_t)(s->n_heads + 2 * s->n_kv_heads) * s->head_dim;
    const int64_t norms = d * (1 + 2 * (int64_t)s->n_layers);
    /* matrices: [rows][cols] */
    const int64_t mats[][3] = {{s->vocab_size, d, 1}, {s->vocab_size, d, s->tied_embeddings ? 0 : 1},
                               {qkv, d, s->n_layers}, {d, att, s->n_layers},
                               {2 * ffn, d, s->n_layers}, {d, ffn, s->n_layers}};
    const enum k25_dtype dt = k25_weight_dtype_of(cfg->weight_dtype);
    const enum k25_dtype q = k25_weight_quant_dtype(cfg->quantize_weights, dt);
    const int g = cfg->weight_quant_group;
    int64_t bytes = 4 * norms;
    for (size_t i = 0; i < sizeof(mats) / sizeof(mats[0]); i++) {
        int64_t rows = mats[i][0], cols = mats[i][1], n = mats[i][2], row;
        if (q == K25_DTYPE_INT8 || q == K25_DTYPE_INT4) /* 4-byte scales per group of g */
            row = 4 * ((cols + g - 1) / g) + (q == K25_DTYPE_INT8 ? cols : (cols + 1) / 2);
        else
            row = cols * (q == K25_DTYPE_FP32 ? 4 : 2);
        bytes += rows * row * n;
    }
    return bytes;
}

int k25_model_alloc_weights(struct k25_model *m, struct k25_error *err)
{
    const struct k25_model_shape *s = &m->shape;
    int64_t d = s->dim, hd = s->head_dim;
    m->layers = k25_alloc(K25_MEM_WEIGHTS, sizeof(struct k25_layer) * (size_t)s->n_layers);
    if (!m->layers)
        goto out_nomem;
    const enum k25_dtype dt = m->wdtype;
    m->embed = walloc_dt((int64_t)s->vocab_size * d, dt);
    m->final_norm = walloc(d);
    if (!m->embed || !m->final_norm)
        goto out_nomem;
    if (s->tied_embeddings) {
        m->lm_head = m->embed;
    } else if (!(m->lm_head = walloc_dt((int64_t)s->vocab_size * d, dt))) {
        goto out_nomem;
    }
    for (int l = 0; l < s->n_layers; l++) {
        struct k25_layer *L = &m->layers[l];
        L->attn_norm = walloc(d);
        L->ffn_norm = walloc(d);
        L->wqkv = walloc_dt((int64_t)(s->n_heads + 2 * s->n_kv_heads) * hd * d, dt);
        L->wo = walloc_dt(d * s->n_heads * hd, dt);
        L->w_gate_up = walloc_dt(2 * (int64_t)s->ffn_dim * d, dt);
        L->w_down = walloc_dt(d * s->ffn_dim, dt);
        if (!L->attn_norm || !L->ffn_norm || !L->wqkv || !L->wo || !L->w_gate_up || !L->w_down)
            goto out_nomem;
    }
    return K25_OK;

out_nomem:
    k25_model_free_weights(m);
    return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL,
                         "cannot allocate the weights of model '%s' (%lld parameters, %.1f GiB %s)",
                         s->name, (long long)k25_model_param_count(s),
                         (double)k25_model_param_count(s) * (m->wdtype == K25_DTYPE_FP32 ? 4.0 : 2.0) / (1 << 30),
                         k25_dtype_name(m->wdtype));
}

void k25_model_free_weights(struct k25_model *m)
{
    if (m->layers) {
        for (int l = 0; l < m->shape.n_layers; l++) {
            struct k25_layer *L = &m->layers[l];
            k25_free(L->attn_norm);
            k25_free(L->ffn_norm);
            k25_free(L->wqkv);
            k25_free(L->wo);
            k25_free(L->w_gate_up);
            k25_free(L->w_down);
        }
        k25_free(m->layers);
        m->layers = NULL;
    }
    if (m->lm_head != m->embed)
        k25_free(m->lm_head);
    k25_free(m->embed);
    k25_free(m->final_norm);
    m->embed = m->lm_head = m->final_norm = NULL;
}

/* splitmix64: small, well-mixed, good enough to seed and fill weights. */
static inline uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/*
 * Fills w[n] with uniform values in [-a, a), stored as dt (fp32, or bf16 /
 * fp16 rounded to nearest even: the fp32 values' nearest neighbours, so a
 * bf16 dummy model is the fp32 one rounded).  The tensor is cut in blocks
 * of 64K values, each seeded from (seed, tensor id, block index), so the
 * result does not depend on how OpenMP shares the blocks out.
 */
static void fill_uniform(void *w, enum k25_dtype dt, int64_t n, float a, uint64_t seed, uint64_t tensor_id)
{
    const int64_t B = 65536;
    int64_t nblocks = (n + B - 1) / B;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < nblocks; b++) {
        uint64_t s = seed ^ (tensor_id * 0x100000001b3ull) ^ ((uint64_t)b << 32);
        splitmix64(&s);
        int64_t end = (b + 1) * B < n ? (b + 1) * B : n;
        for (int64_t i = b * B; i < end; i++) {
            /* 24 random bits -> [0,1) -> [-a, a) */
            float u = (float)(splitmix64(&s) >> 40) * (1.0f / 16777216.0f);
            float v = (2.0f * u - 1.0f) * a;
            if (dt == K25_DTYPE_FP32)
                ((float *)w)[i] = v;
            else
                ((uint16_t *)w)[i] = dt == K25_DTYPE_BF16 ? k25_fp32_to_bf16(v) : k25_fp32_to_fp16(v);
        }
    }
}

static void fill_const(float *w, int64_t n, float v)
{
    for (int64_t i = 0; i < n; i++)
        w[i] = v;
}

/*
 * Dummy weights.  Uniform(-a, a) has variance a^2/3, so a = sqrt(3/fan_in)
 * gives variance 1/fan_in: each projection keeps the RMS of its input.
 * Output projections (wo, w_down) are scaled down by sqrt(2*n_layers) so
 * the residual stream grows slowly with depth; embeddings are O(1).
 */
static void init_dummy(struct k25_model *m, uint64_t seed)
{
    const struct k25_model_shape *s = &m->shape;
    int64_t d = s->dim, hd = s->head_dim;
    float depth = sqrtf(2.0f * (float)s->n_layers);
    uint64_t id = 0;
    const enum k25_dtype dt = m->wdtype;
    fill_uniform(m->embed, dt, (int64_t)s->vocab_size * d, sqrtf(3.0f), seed, id++);
    fill_const(m->final_norm, d, 1.0f);
    if (!s->tied_embeddings)
        fill_uniform(m->lm_head, dt, (int64_t)s->vocab_size * d, sqrtf(3.0f / (float)d), seed, id++);
    for (int l = 0; l < s->n_layers; l++) {
        struct k25_layer *L = &m->layers[l];
        fill_const(L->attn_norm, d, 1.0f);
        fill_const(L->ffn_norm, d, 1.0f);
        fill_uniform(L->wqkv, dt, (int64_t)(s->n_heads + 2 * s->n_kv_heads) * hd * d,
                     sqrtf(3.0f / (float)d), seed, id++);
        fill_uniform(L->wo, dt, d * s->n_heads * hd, sqrtf(3.0f / (float)(s->n_heads * hd)) / depth,
                     seed, id++);
        fill_uniform(L->w_gate_up, dt, 2 * (int64_t)s->ffn_dim * d, sqrtf(3.0f / (float)d), seed, id++);
        fill_uniform(L->w_down, dt, d * s->ffn_dim, sqrtf(3.0f / (float)s->ffn_dim) / depth, seed, id++);
    }
}

static bool is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int k25_model_load(const struct k25_config *cfg, k25_model_t **out, struct k25_error *err)
{
    *out = NULL;
    struct k25_model *m = k25_alloc(K25_MEM_OTHER, sizeof(*m));
    if (!m)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int rc;
    memset(m, 0, sizeof(*m));
    m->wdtype = k25_weight_dtype_of(cfg->weight_dtype);
    const double esize = m->wdtype == K25_DTYPE_FP32 ? 4.0 : 2.0;
    if (k25_model_preset(cfg->model, &m->shape) == K25_OK) {
        /* Refuse up front what cannot fit, instead of swapping for minutes. */
        double need = (double)k25_model_param_count(&m->shape) * esize;
        double phys = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
        if (phys > 0 && need > 0.9 * phys) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, "model",
                               "preset '%s' needs %.1f GiB of %s weights; this machine has %.1f GiB "
                               "(use it as a shape with `k25 mem`, weight_dtype bf16, or a larger machine)",
                               cfg->model, need / (1 << 30), k25_dtype_name(m->wdtype), phys / (1 << 30));
            goto out_free;
        }
        if ((rc = k25_model_alloc_weights(m, err)) != K25_OK)
            goto out_free;
        init_dummy(m, K25_DUMMY_WEIGHT_SEED);
        if (m->wdtype == K25_DTYPE_FP32)
            snprintf(m->source, sizeof(m->source), "dummy(%s, seed=0x%llx)", cfg->model,
                     (unsigned long long)K25_DUMMY_WEIGHT_SEED);
        else
            snprintf(m->source, sizeof(m->source), "dummy(%s, seed=0x%llx, %s)", cfg->model,
                     (unsigned long long)K25_DUMMY_WEIGHT_SEED, k25_dtype_name(m->wdtype));
    } else if (is_dir(cfg->model)) {
        if ((rc = k25_model_load_safetensors(cfg->model, m, err)) != K25_OK)
            goto out_free;
        snprintf(m->source, sizeof(m->source), "%s", cfg->model);
    } else {
        rc = k25_error_set(err, K25_ENOTFOUND, NULL, 0, "model",
                           "'%s' is neither a preset (%s) nor a model directory", cfg->model,
                           k25_model_preset_names());
        goto out_free;
    }
    if (cfg->rope_theta > 0)
        m->shape.rope_theta = cfg->rope_theta;
    *out = m;
    return K25_OK;

out_free:
    k25_free(m);
    return rc;
}

void k25_model_destroy(k25_model_t *m)
{
    if (!m)
        return;
    k25_model_free_weights(m);
    k25_free(m);
}

const struct k25_model_shape *k25_model_get_shape(const k25_model_t *m)
{
    return &m->shape;
}

const char *k25_model_source(const k25_model_t *m)
{
    return m->source;
}
