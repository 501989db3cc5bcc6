/*
 * cli_mem.c - `k25 mem` (alias `k25-mem-calculator`): the memory
 * calculator.  Prints the bytes the engine will hold per category for a
 * model shape, a context length, a batch and a config (every engine key:
 * --attention, --kv-cache-dtype, --prefill-chunk-size, ...), and the
 * recommended budget with the safety margin, as a table or JSON.  The
 * arithmetic is libk25's (k25_mem_estimate); this file only parses.
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The estimate as the JSON object `k25 mem --json` prints (NULL when out of memory). */
static json_t *estimate_json(const struct k25_config *cfg, const struct k25_model_shape *shape, int64_t context,
                             int64_t batch, const struct k25_mem_estimate *est)
{
    json_t *o = json_object(), *cat = json_object();
    for (int c = 0; c < K25_MEM_NCAT; c++)
        json_object_set_new(cat, k25_mem_cat_name(c), json_integer(est->bytes[c]));
    json_object_set_new(o, "model", json_string(cfg->model));
    json_object_set_new(o, "context", json_integer(context));
    json_object_set_new(o, "batch", json_integer(batch));
    json_object_set_new(o, "attention", json_string(k25_attn_impl_name(cfg->attention)));
    json_object_set_new(o, "kv_cache_dtype", json_string(k25_dtype_name(cfg->kv_cache_dtype)));
    json_object_set_new(o, "prefill_chunk_size", json_integer(cfg->prefill_chunk_size));
    json_object_set_new(o, "one_pass_prefill", json_boolean(cfg->disable_prefill_optimization));
    json_object_set_new(o, "threads", json_integer(est->threads));
    json_object_set_new(o, "bytes", cat);
    json_object_set_new(o, "total_bytes", json_integer(est->total_bytes));
    json_object_set_new(o, "safety_margin", json_real(K25_MEM_SAFETY_MARGIN));
    json_object_set_new(o, "recommended_bytes", json_integer(est->recommended_bytes));
    json_object_set_new(o, "kv_blocks", json_integer(est->kv_blocks));
    size_t mfree, mtotal;
    struct k25_error merr;
    if (k25_backend_memory(cfg->backend, &mfree, &mtotal, &merr) == K25_OK)
        json_object_set_new(o, "backend_memory", json_pack("{s:s, s:I, s:I}", "backend", cfg->backend, "free_bytes",
                                                           (json_int_t)mfree, "total_bytes", (json_int_t)mtotal));
    if (cfg->kv_hot_tokens > 0) /* KV tiers: RAM (hot, warm: in bytes.kv) and the cold file */
        json_object_set_new(o, "kv_tiers", json_pack("{s:I, s:I, s:I}", "hot_bytes", (json_int_t)est->kv_hot_bytes,
                                                      "warm_bytes", (json_int_t)est->kv_warm_bytes, "cold_bytes",
                                                      (json_int_t)est->kv_cold_bytes));
    {
        struct k25_kv_layout lay;
        k25_kv_layout(cfg, shape, &lay);
        json_object_set_new(o, "kv_compression_ratio", json_real(cfg->kv_compression_ratio));
        json_object_set_new(o, "kv_bits_per_value", json_real(lay.bits_per_value));
        json_object_set_new(o, "kv_bytes_per_token", json_real(lay.bytes_per_token));
        json_object_set_new(o, "kv_meta_bytes_per_token", json_real(lay.meta_bytes_per_token));
        json_object_set_new(o, "kv_kept_tokens", json_integer(k25_kv_kept_tokens(cfg, context)));
    }
    json_object_set_new(o, "step_tokens", json_integer(est->step_tokens));
    json_object_set_new(o, "activation_rows", json_integer(est->act_token_cap));
    json_object_set_new(o, "largest_attention_call",
                        json_pack("{s:I, s:I}", "queries", (json_int_t)est->attn_q_rows, "keys",
                                  (json_int_t)est->attn_kv_tokens));
    return o;
}

int k25_cmd_mem(int argc, char **argv)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_error_clear(&err);
    k25_config_init(&cfg);
    int64_t context = 0, batch = 1;
    bool json = false;
    char about[640];
    snprintf(about, sizeof(about),
             "Theoretical memory of the reference engine, per category (weights, kv, activations,\n"
             "attn_scratch, other), for B sequences of N tokens each (prompt + output), with the\n"
             "recommended budget (total + %.0f%% safety margin).  The figures follow the engine's own\n"
             "allocations; they match the tracking allocator's measured peaks within 10%%.\n\n"
             "Engine flags (below) set the shape of the work, e.g. --attention naive,\n"
             "--kv-cache-dtype fp16, --prefill-chunk-size 4096, --threads 2.\n",
             100 * K25_MEM_SAFETY_MARGIN);
    const struct k25_opt opts[] = {
        {.names = {"--context"}, .type = K25_OPT_INT64, .dest = &context, .min = 1, .max = INT32_MAX,
         .flags = K25_OPT_COUNT, .deflt = "", .help = "tokens per sequence (required); 128k = 131072"},
        {.names = {"--batch"}, .type = K25_OPT_INT64, .dest = &batch, .min = 1, .max = INT32_MAX,
         .flags = K25_OPT_COUNT, .metavar = "B", .help = "sequences held at once"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json, .help = "one JSON object instead of the table"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "mem",
        .usage = "mem --model PRESET --context N --batch B [--config k25.yaml] [engine flags] [--json]\n"
                 "       k25-mem-calculator ...   (the same)",
        .about = about,
        .opts = opts,
        .config = &cfg,
        .options_only = true,
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK)
        goto out_err;
    if (context == 0) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--context", "is required (k25 mem --help)");
        goto out_err;
    }
    if (k25_config_validate(&cfg, &err) != K25_OK)
        goto out_err;
    struct k25_model_shape shape;
    if (k25_model_preset(cfg.model, &shape) != K25_OK) {
        k25_error_set(&err, K25_ENOTFOUND, "command line", 0, "--model",
                      "'%s' is not a preset (%s); k25 mem computes from a preset's shape", cfg.model,
                      k25_model_preset_names());
        goto out_err;
    }
    struct k25_mem_estimate est;
    if (k25_mem_estimate(&cfg, &shape, context, (int)batch, &est, &err) != K25_OK)
        goto out_err;

    if (json) {
        json_t *o = estimate_json(&cfg, &shape, context, batch, &est);
        if (!o) {
            k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out_err;
        }
        int w = json_dumpf(o, stdout, JSON_INDENT(2));
        json_decref(o);
        if (w != 0 || fputc('\n', stdout) == EOF)
            goto out_write;
    } else {
        printf("model %s, context %lld tokens x batch %lld, attention %s, KV %s, %s prefill (chunk %d), %d threads\n\n",
               cfg.model, (long long)context, (long long)batch, k25_attn_impl_name(cfg.attention),
               k25_dtype_name(cfg.kv_cache_dtype), cfg.disable_prefill_optimization ? "one-pass" : "chunked",
               cfg.prefill_chunk_size, est.threads);
        printf("%-14s %18s %12s\n", "category", "bytes", "GiB");
        for (int c = 0; c < K25_MEM_NCAT; c++)
            printf("%-14s %18lld %12.3f\n", k25_mem_cat_name(c), (long long)est.bytes[c],
                   (double)est.bytes[c] / (1 << 30));
        printf("%-14s %18lld %12.3f\n", "total", (long long)est.total_bytes, (double)est.total_bytes / (1 << 30));
        printf("%-14s %18lld %12.3f   (total + %.0f%% safety margin)\n", "recommended",
               (long long)est.recommended_bytes, (double)est.recommended_bytes / (1 << 30),
               100 * K25_MEM_SAFETY_MARGIN);
        printf("\nKV: %lld blocks of %d tokens; activations: %lld rows for steps of %lld tokens;\n"
               "largest attention call: %lld queries x %lld keys\n",
               (long long)est.kv_blocks, cfg.kv_block_size, (long long)est.act_token_cap,
               (long long)est.step_tokens, (long long)est.attn_q_rows, (long long)est.attn_kv_tokens);
        size_t mfree, mtotal;
        struct k25_error merr;
        if (k25_backend_memory(cfg.backend, &mfree, &mtotal, &merr) == K25_OK) /* the backend's memory_info */
            printf("backend %s: %.3f GiB free of %.3f GiB; the estimate's recommended total is %.1f%% of what is free\n",
                   cfg.backend, (double)mfree / (1 << 30), (double)mtotal / (1 << 30),
                   mfree ? 100.0 * (double)est.recommended_bytes / (double)mfree : 0.0);
        if (cfg.kv_hot_tokens > 0) /* KV tiers */
            printf("KV tiers: hot %lld bytes + warm %lld bytes in RAM (in kv above), cold %lld bytes %s\n",
                   (long long)est.kv_hot_bytes, (long long)est.kv_warm_bytes, (long long)est.kv_cold_bytes,
                   cfg.kv_cold_dir[0] ? "in the cold file" : est.kv_cold_bytes > 0 ? "(needs kv_cold_dir)" : "");
    }
    if (fflush(stdout) != 0)
        goto out_write;
    return 0;

out_write:
    fprintf(stderr, "k25 mem: writing the output failed: %s\n", strerror(errno));
    return 1;
out_err:
    fprintf(stderr, "k25 mem: %s\n", err.msg);
    return 2;
}
