/*
 * test_checksum.c - `k25 checksum` on a tiny synthetic safetensors model
 * that the test writes itself: two shards, model.safetensors.index.json
 * and config.json (a 1-layer Llama of hidden size 8).  Each case breaks
 * one thing (a missing shard, a corrupted byte, a shape that disagrees with
 * config.json, a tensor missing from its shard, a truncated shard, a bad
 * manifest) and checks the exit status (0 ok, 1 mismatch, 2 bad input) and
 * that the message names the file and tensor.  Hashes are checked against
 * sha256sum, an independent implementation.
 */
#include "testutil.h"
#include "harness.h"

#include <jansson.h>
#include <sys/stat.h>

struct tdef {
    const char *name;
    int d0, d1; /* d1 = 0: 1-D */
    int shard;  /* 1 or 2 */
};

/* hidden 8, heads 2 (head_dim 4), kv heads 1, ffn 16, vocab 32, 1 layer. */
static const struct tdef tensors[] = {
    {"model.embed_tokens.weight", 32, 8, 1},
    {"model.layers.0.input_layernorm.weight", 8, 0, 1},
    {"model.layers.0.self_attn.q_proj.weight", 8, 8, 1},
    {"model.layers.0.self_attn.k_proj.weight", 4, 8, 1},
    {"model.layers.0.self_attn.v_proj.weight", 4, 8, 1},
    {"model.layers.0.self_attn.o_proj.weight", 8, 8, 1},
    {"model.layers.0.post_attention_layernorm.weight", 8, 0, 2},
    {"model.layers.0.mlp.gate_proj.weight", 16, 8, 2},
    {"model.layers.0.mlp.up_proj.weight", 16, 8, 2},
    {"model.layers.0.mlp.down_proj.weight", 8, 16, 2},
    {"model.norm.weight", 8, 0, 2},
    {"lm_head.weight", 32, 8, 2},
};
#define NT (sizeof(tensors) / sizeof(tensors[0]))
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"

static const char *CONFIG = "{\"model_type\": \"llama\", \"hidden_size\": 8, \"num_hidden_layers\": 1,\n"
                            " \"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"intermediate_size\": %d,\n"
                            " \"vocab_size\": 32, \"torch_dtype\": \"float32\", \"tie_word_embeddings\": false}\n";

/* Matrices (2-D tensors) as BF16, norms F32, as bf16 checkpoints are saved (test_bf16_with_f32_norms). */
static bool bf16_matrices;

/* Writes one F32 shard of the tensors with .shard == s; skip names one tensor to leave out. */
static void write_shard(const char *path, int s, const char *skip)
{
    json_t *h = json_object();
    size_t off = 0;
    for (size_t i = 0; i < NT; i++) {
        if (tensors[i].shard != s || (skip && !strcmp(skip, tensors[i].name)))
            continue;
        size_t n = (size_t)tensors[i].d0 * (tensors[i].d1 ? (size_t)tensors[i].d1 : 1);
        json_t *shape = tensors[i].d1 ? json_pack("[i,i]", tensors[i].d0, tensors[i].d1) : json_pack("[i]", tensors[i].d0);
        size_t es = bf16_matrices && tensors[i].d1 ? 2 : 4;
        json_object_set_new(h, tensors[i].name, json_pack("{s:s, s:o, s:[I,I]}", "dtype", es == 2 ? "BF16" : "F32",
                                                          "shape", shape, "data_offsets", (json_int_t)off,
                                                          (json_int_t)(off + es * n)));
        off += es * n;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    size_t hl = strlen(text);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++)
        lb[i] = (unsigned char)(((uint64_t)hl >> (8 * i)) & 0xff);
    assert_int_equal(fwrite(lb, 1, 8, f), 8);
    assert_int_equal(fwrite(text, 1, hl, f), hl);
    for (size_t i = 0; i < off / 2; i++) { /* bytes of a bf16 pattern, as many as the data has */
        uint16_t x = (uint16_t)(0x3f00 + (i * 7 + (size_t)s) % 13);
        assert_int_equal(fwrite(&x, 2, 1, f), 1);
    }
    assert_int_equal(fclose(f), 0);
    free(text);
}

/*
 * A fresh model directory tu_dir/NAME: both shards, the index, config.json
 * with intermediate_size ffn; shard 2 without tensor `skip` (may be NULL).
 */
static char *make_model(const char *name, int ffn, const char *skip)
{
    char *dir, path[1024];
    assert_true(asprintf(&dir, "%s/%s", tu_dir, name) > 0);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(path, sizeof(path), "%s/%s", dir, SHARD1);
    write_shard(path, 1, NULL);
    snprintf(path, sizeof(path), "%s/%s", dir, SHARD2);
    write_shard(path, 2, skip);
    json_t *wm = json_object();
    for (size_t i = 0; i < NT; i++)
        json_object_set_new(wm, tensors[i].name, json_string(tensors[i].shard == 1 ? SHARD1 : SHARD2));
    json_t *idx = json_pack("{s:{s:i}, s:o}", "metadata", "total_size", 1000, "weight_map", wm);
    snprintf(path, sizeof(path), "%s/model.safetensors.index.json", dir);
    assert_int_equal(json_dump_file(idx, path, JSON_INDENT(2)), 0);
    json_decref(idx);
    char cfg[512];
    snprintf(cfg, sizeof(cfg), CONFIG, ffn);
    snprintf(path, sizeof(path), "%s/config.json", dir);
    tu_write_file(path, cfg);
    return dir;
}

/* Runs `k25 checksum ARGS`, returns the status; *out gets stdout+stderr. */
static int ck(char **out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int ck(char **out, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd), "%s checksum %s", tu_k25(), args);
    return tu_run(cmd, out);
}

static void assert_has(const char *out, const char *want)
{
    if (!strstr(out, want))
        fail_msg("expected '%s' in:\n%s", want, out);
}

static void test_ok_matches_sha256sum(void **state)
{
    (void)state;
    char *dir = make_model("ok", 16, NULL), *out = NULL, *ref = NULL, cmd[2048];
    assert_int_equal(ck(&out, "'%s' --quiet 2>/dev/null", dir), 0);
    snprintf(cmd, sizeof(cmd), "cd '%s' && sha256sum %s %s config.json model.safetensors.index.json", dir, SHARD1,
             SHARD2);
    assert_int_equal(tu_run(cmd, &ref), 0);
    assert_string_equal(out, ref); /* sha256sum -c can check our output */
    free(out);
    assert_int_equal(ck(&out, "'%s'", dir), 0);
    assert_has(out, "ok: 2 shards complete, 12 tensors, 12 checked against config.json");
    free(out);
    free(ref);
    free(dir);
}

static void test_manifest_roundtrip_and_corrupted_byte(void **state)
{
    (void)state;
    char *dir = make_model("corrupt", 16, NULL), *out = NULL, man[1024], path[1024];
    snprintf(man, sizeof(man), "%s/corrupt.manifest.json", tu_dir);
    assert_int_equal(ck(&out, "'%s' --write '%s'", dir, man), 0);
    assert_has(out, "manifest written");
    free(out);
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 0);
    assert_has(out, "every file matches");
    free(out);

    /* Flip one byte of shard 2's data: the headers still agree, only the hash can tell. */
    snprintf(path, sizeof(path), "%s/%s", dir, SHARD2);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -5, SEEK_END), 0);
    int c = fgetc(f);
    assert_int_equal(fseek(f, -5, SEEK_END), 0);
    assert_int_equal(fputc(c ^ 0x10, f), c ^ 0x10);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(ck(&out, "'%s'", dir), 0);
    free(out);
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 1);
    assert_has(out, SHARD2 ": sha256 ");
    assert_has(out, "differs from the manifest");
    assert_has(out, "FAILED: 1 problem");
    free(out);
    /* The JSON report names the file and the kind. */
    assert_int_equal(ck(&out, "'%s' --verify '%s' --json 2>/dev/null", dir, man), 1);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    assert_non_null(j);
    assert_true(json_is_false(json_object_get(j, "ok")));
    json_t *p = json_array_get(json_object_get(j, "problems"), 0);
    assert_string_equal(json_string_value(json_object_get(p, "kind")), "hash");
    assert_string_equal(json_string_value(json_object_get(p, "file")), SHARD2);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "manifest"), "files_matched")), 3);
    json_decref(j);
    free(out);
    /* A broken model gets no manifest. */
    assert_int_equal(ck(&out, "'%s' --write '%s/x.json'", dir, tu_dir), 0);
    free(out);
    free(dir);
}

static void test_missing_shard(void **state)
{
    (void)state;
    char *dir = make_model("missing", 16, NULL), *out = NULL, path[1024], man[1024];
    snprintf(man, sizeof(man), "%s/missing.manifest.json", tu_dir);
    assert_int_equal(ck(&out, "'%s' --write '%s'", dir, man), 0);
    free(out);
    snprintf(path, sizeof(path), "%s/%s", dir, SHARD2);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, SHARD2 ": file not found");
    free(out);
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 1);
    assert_has(out, SHARD2 ": file not found");
    assert_true(strstr(out, "in the manifest, not in the model") == NULL); /* reported once */
    free(out);
    free(dir);
}

static void test_shape_mismatch_vs_config(void **state)
{
    (void)state;
    char *dir = make_model("shape", 12, NULL), *out = NULL;
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, SHARD2 ": tensor 'model.layers.0.mlp.gate_proj.weight': shape [16,8], config.json implies [12,8]");
    assert_has(out, "'model.layers.0.mlp.down_proj.weight': shape [8,16], config.json implies [8,12]");
    assert_has(out, "FAILED: 3 problems"); /* gate, up, down */
    free(out);
    free(dir);
}

/* BF16 matrices with F32 norms under torch_dtype bfloat16: information, not problems. */
static void test_bf16_with_f32_norms(void **state)
{
    (void)state;
    bf16_matrices = true;
    char *dir = make_model("bf16", 16, NULL), *out = NULL, path[1024];
    bf16_matrices = false;
    char cfg[512];
    snprintf(cfg, sizeof(cfg), CONFIG, 16);
    char *at = strstr(cfg, "float32");
    assert_non_null(at);
    char fixed[600];
    snprintf(fixed, sizeof(fixed), "%.*sbfloat16%s", (int)(at - cfg), cfg, at + strlen("float32"));
    snprintf(path, sizeof(path), "%s/config.json", dir);
    tu_write_file(path, fixed);
    assert_int_equal(ck(&out, "'%s'", dir), 0);
    assert_has(out, "note: 3 norm weights stored as F32 beside BF16 matrices (torch_dtype bfloat16)");
    assert_has(out, "ok: 2 shards complete");
    free(out);
    /* under torch_dtype float16 the BF16 matrices are still problems (the norms are not) */
    at = strstr(cfg, "float32");
    snprintf(fixed, sizeof(fixed), "%.*sfloat16%s", (int)(at - cfg), cfg, at + strlen("float32"));
    tu_write_file(path, fixed);
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, "'lm_head.weight': dtype BF16, config.json's torch_dtype float16 is F16");
    assert_has(out, "FAILED: 9 problems"); /* the 9 matrices, not the 3 norms */
    free(out);
    free(dir);
}

static void test_tensor_missing_from_shard(void **state)
{
    (void)state;
    char *dir = make_model("notensor", 16, "model.norm.weight"), *out = NULL;
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, SHARD2 ": tensor 'model.norm.weight' (placed here by model.safetensors.index.json) is not in the file");
    free(out);
    free(dir);
}

static void test_truncated_shard(void **state)
{
    (void)state;
    char *dir = make_model("trunc", 16, NULL), *out = NULL, path[1024];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, SHARD1);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(truncate(path, st.st_size - 100), 0); /* the last tensor's data cut short */
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, SHARD1 ": tensor 'model.layers.0.self_attn.o_proj.weight': bad shape or data_offsets");
    assert_has(out, "truncated?");
    free(out);
    assert_int_equal(truncate(path, 300), 0); /* inside the header */
    assert_int_equal(ck(&out, "'%s'", dir), 1);
    assert_has(out, SHARD1 ": header length ");
    assert_has(out, "truncated or not safetensors");
    free(out);
    free(dir);
}

static void test_bad_manifest(void **state)
{
    (void)state;
    char *dir = make_model("badman", 16, NULL), *out = NULL, man[1024];
    snprintf(man, sizeof(man), "%s/bad.manifest.json", tu_dir);
    tu_write_file(man, "{\"format\": \"k25-checksum-manifest\", \"files\": [");
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 2);
    assert_has(out, "bad.manifest.json:1: manifest is not valid JSON");
    free(out);
    tu_write_file(man, "{\"format\": \"k25-checksum-manifest\", \"files\": [{\"name\": \"a\", \"bytes\": 1, \"sha256\": \"xyz\"}]}");
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 2);
    assert_has(out, "files[0]: needs");
    free(out);
    tu_write_file(man, "{\"files\": []}");
    assert_int_equal(ck(&out, "'%s' --verify '%s'", dir, man), 2);
    assert_has(out, "not a k25 checksum manifest");
    free(out);
    assert_int_equal(ck(&out, "'%s' --verify '%s/none.json'", dir, tu_dir), 2);
    assert_has(out, "manifest not found");
    free(out);
    free(dir);
}

/* A manifest of another model: every differing file named, extra files too. */
static void test_manifest_of_other_model(void **state)
{
    (void)state;
    char *a = make_model("other_a", 16, NULL), *b = make_model("other_b", 12, NULL), *out = NULL, man[1024];
    snprintf(man, sizeof(man), "%s/other.manifest.json", tu_dir);
    assert_int_equal(ck(&out, "'%s' --write '%s'", a, man), 0);
    free(out);
    assert_int_equal(ck(&out, "'%s' --verify '%s'", b, man), 1);
    assert_has(out, "config.json: sha256 ");
    free(out);
    free(a);
    free(b);
}

static void test_bad_input(void **state)
{
    (void)state;
    char *out = NULL, empty[1024];
    assert_int_equal(ck(&out, "'%s/nonexistent'", tu_dir), 2);
    assert_has(out, "not a directory");
    free(out);
    snprintf(empty, sizeof(empty), "%s/empty", tu_dir);
    assert_int_equal(mkdir(empty, 0755), 0);
    assert_int_equal(ck(&out, "'%s'", empty), 2);
    assert_has(out, "not a safetensors model directory");
    free(out);
    assert_int_equal(ck(&out, "'%s' --write a.json --verify b.json", empty), 2);
    assert_has(out, "not both");
    free(out);
    assert_int_equal(ck(&out, "%s", ""), 2);
    assert_has(out, "give the model directory");
    free(out);
    assert_int_equal(ck(&out, "'%s' --verfy x", empty), 2);
    assert_has(out, "did you mean '--verify'");
    free(out);
}

/* The installed alias name dispatches to the command (cli/main.c). */
static void test_alias(void **state)
{
    (void)state;
    char *dir = make_model("alias", 16, NULL), *out = NULL, link[1024], k25[1024], cmd[4096];
    assert_non_null(realpath(tu_k25(), k25));
    snprintf(link, sizeof(link), "%s/k25-checksum", tu_dir);
    assert_int_equal(symlink(k25, link), 0);
    snprintf(cmd, sizeof(cmd), "'%s' '%s' --quiet", link, dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_has(out, SHARD1);
    free(out);
    free(dir);
}

/* The library call, without a process: a single-file model, progress reported. */
static void on_progress(const char *file, int64_t done, int64_t total, void *user)
{
    (void)file;
    assert_true(done <= total);
    ++*(int *)user;
}

static void test_library_single_file(void **state)
{
    (void)state;
    char *dir = make_model("single", 16, NULL), a[1100], b[1100];
    /* One file holding shard 1's tensors only; no index: the rest are missing. */
    snprintf(a, sizeof(a), "%s/%s", dir, SHARD1);
    snprintf(b, sizeof(b), "%s/model.safetensors", dir);
    assert_int_equal(rename(a, b), 0);
    snprintf(a, sizeof(a), "%s/model.safetensors.index.json", dir);
    assert_int_equal(unlink(a), 0);
    int calls = 0;
    struct k25_checksum_opts o = {NULL, on_progress, &calls};
    struct k25_checksum_report r;
    struct k25_error err;
    assert_int_equal(k25_checksum_model(dir, &o, &r, &err), K25_OK);
    assert_true(calls >= 2);
    assert_int_equal(r.n_shards, 1);
    assert_int_equal(r.n_tensors, 6);
    assert_int_equal(r.n_problems, 6); /* the six tensors of shard 2 */
    json_t *p = json_array_get(json_object_get(r.json, "problems"), 0);
    assert_string_equal(json_string_value(json_object_get(p, "kind")), "missing_tensor");
    assert_string_equal(json_string_value(json_object_get(p, "file")), "model.safetensors");
    assert_string_equal(json_string_value(json_object_get(p, "tensor")), "model.layers.0.post_attention_layernorm.weight");
    k25_checksum_report_free(&r);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ok_matches_sha256sum),
        cmocka_unit_test(test_manifest_roundtrip_and_corrupted_byte),
        cmocka_unit_test(test_missing_shard),
        cmocka_unit_test(test_shape_mismatch_vs_config),
        cmocka_unit_test(test_bf16_with_f32_norms),
        cmocka_unit_test(test_tensor_missing_from_shard),
        cmocka_unit_test(test_truncated_shard),
        cmocka_unit_test(test_bad_manifest),
        cmocka_unit_test(test_manifest_of_other_model),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_alias),
        cmocka_unit_test(test_library_single_file),
    };
    return cmocka_run_group_tests(tests, tu_group_setup, tu_group_teardown);
}
