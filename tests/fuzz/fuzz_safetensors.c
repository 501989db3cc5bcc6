/*
 * fuzz_safetensors.c - model weights from a safetensors file
 * (engine/safetensors.c through k25_model_load): the input is
 * model.safetensors in a model folder whose config.json (written once) is a
 * tiny Llama shape, so a well-formed input loads in microseconds.
 *
 * K25_FUZZ_WRITE_SEED=PATH: write a valid model.safetensors for that shape
 * to PATH and exit (`make fuzz-smoke` makes its seed so).
 */
#include "fuzz_util.h"
#include "k25.h"

#include <sys/stat.h>

/* dim 8, 1 layer, 2 heads (head_dim 4), 1 KV head, ffn 16, vocab 8 */
enum { D = 8, NH = 2, NKV = 1, HD = 4, FFN = 16, V = 8 };
static char model_dir[400];

static void put_u64(FILE *f, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        fputc((int)((v >> (8 * k)) & 0xff), f);
}

static void write_seed(const char *path)
{
    static const struct { const char *name; int r, c; } t[] = {
        {"model.embed_tokens.weight", V, D},
        {"model.layers.0.input_layernorm.weight", D, 0},
        {"model.layers.0.self_attn.q_proj.weight", NH * HD, D},
        {"model.layers.0.self_attn.k_proj.weight", NKV * HD, D},
        {"model.layers.0.self_attn.v_proj.weight", NKV * HD, D},
        {"model.layers.0.self_attn.o_proj.weight", D, NH * HD},
        {"model.layers.0.post_attention_layernorm.weight", D, 0},
        {"model.layers.0.mlp.gate_proj.weight", FFN, D},
        {"model.layers.0.mlp.up_proj.weight", FFN, D},
        {"model.layers.0.mlp.down_proj.weight", D, FFN},
        {"model.norm.weight", D, 0},
        {"lm_head.weight", V, D},
    };
    char hdr[8192];
    size_t n = 0;
    uint64_t off = 0;
    n += (size_t)snprintf(hdr + n, sizeof(hdr) - n, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        uint64_t numel = (uint64_t)t[i].r * (uint64_t)(t[i].c ? t[i].c : 1);
        if (t[i].c)
            n += (size_t)snprintf(hdr + n, sizeof(hdr) - n,
                                  ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d,%d],\"data_offsets\":[%llu,%llu]}",
                                  t[i].name, t[i].r, t[i].c, (unsigned long long)off,
                                  (unsigned long long)(off + 4 * numel));
        else
            n += (size_t)snprintf(hdr + n, sizeof(hdr) - n,
                                  ",\"%s\":{\"dtype\":\"F32\",\"shape\":[%d],\"data_offsets\":[%llu,%llu]}",
                                  t[i].name, t[i].r, (unsigned long long)off, (unsigned long long)(off + 4 * numel));
        off += 4 * numel;
    }
    n += (size_t)snprintf(hdr + n, sizeof(hdr) - n, "}");
    while (n % 8)
        hdr[n++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    put_u64(f, n);
    fwrite(hdr, 1, n, f);
    for (uint64_t i = 0; i < off / 4; i++) {
        float x = 0.01f * (float)(i % 17);
        fwrite(&x, 4, 1, f);
    }
    if (fclose(f) != 0)
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *seed = getenv("K25_FUZZ_WRITE_SEED");
    if (seed && *seed) {
        write_seed(seed);
        exit(0);
    }
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(model_dir, sizeof(model_dir), "%s/k25fuzz-model-%ld", dir, (long)getpid());
    mkdir(model_dir, 0755);
    char p[512];
    snprintf(p, sizeof(p), "%s/config.json", model_dir);
    FILE *f = fopen(p, "w");
    if (!f)
        abort();
    fprintf(f, "{\"hidden_size\": %d, \"num_hidden_layers\": 1, \"num_attention_heads\": %d, "
               "\"num_key_value_heads\": %d, \"intermediate_size\": %d, \"vocab_size\": %d}\n",
            D, NH, NKV, FFN, V);
    if (fclose(f) != 0)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/model.safetensors", model_dir);
    FILE *f = fopen(p, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", model_dir);
    k25_model_t *m = NULL;
    if (k25_model_load(&cfg, &m, &err) == K25_OK)
        k25_model_destroy(m);
    return 0;
}
