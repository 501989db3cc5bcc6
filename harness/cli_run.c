/*
 * cli_run.c - `k25 run`: generate from one prompt with the reference
 * engine and print the text (or ids) plus a timing summary, or one JSON
 * object for scripts.  Argument parsing only; the work is libk25's.
 */
#include "harness.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static void run_usage(FILE *out)
{
    fprintf(out,
            "usage: k25 run [--model tiny|small|DIR] (--prompt TEXT | --prompt-file FILE | --input-ids 1,2,3)\n"
            "               [--prompt-len N] [--max-tokens N] [--config k25.yaml] [engine flags]\n"
            "               [--seed S] [--threads N] [--json] [--quiet]\n\n"
            "Generates from one prompt with the reference engine and prints the generated text\n"
            "(or ids, for --input-ids) on stdout and a one-line timing summary on stderr.\n\n"
            "  --prompt TEXT       prompt text (byte tokenizer: one token per byte)\n"
            "  --prompt-file FILE  read the prompt text from FILE\n"
            "  --input-ids LIST    comma-separated token ids (for real models' tokenizers)\n"
            "  --prompt-len N      repeat the prompt until it is exactly N tokens (long-context runs)\n"
            "  --max-tokens N      tokens to generate (default: decode_max_tokens)\n"
            "  --json              print one JSON object: input_ids, output_ids, text, timing,\n"
            "                      memory and the effective config\n"
            "  --quiet             no progress on stderr\n\n"
            "Engine flags (each also a key of the YAML --config file; the command line wins):\n");
    k25_cli_print_config_flags(out);
}

/* Parses "1,2,3" into a malloc'd array. */
static int parse_ids(const char *s, int32_t **out, int *n, struct k25_error *err)
{
    int cap = 16, cnt = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--input-ids",
                                 "expected comma-separated non-negative integers, bad item at column %d",
                                 (int)(p - s) + 1);
        }
        if (cnt == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)cap);
            if (!nv) {
                free(v);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = *end ? end + 1 : end;
    }
    *out = v;
    *n = cnt;
    return K25_OK;
}

static char *read_file(const char *path, size_t *len, struct k25_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL, "cannot open: %s",
                      strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        k25_error_set(err, K25_EIO, path, 0, NULL, "cannot read: %s", buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

struct progress {
    bool on;
    int n_input, chunk;
    uint64_t t0;
};

static void on_event(const struct k25_event *ev, void *user)
{
    struct progress *pg = user;
    if (!pg->on)
        return;
    if (ev->type == K25_EV_PREFILL_CHUNK) {
        int total = (pg->n_input + pg->chunk - 1) / pg->chunk;
        fprintf(stderr, "\rprefill: chunk %d/%d, %.1fs", ev->index + 1, total,
                (double)(ev->t_ns - pg->t0) / 1e9);
    } else if (ev->type == K25_EV_TOKEN && ev->index == 0) {
        fprintf(stderr, "\r\033[K");
    }
}

static double peak_rss_mb(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return 0.0;
    return (double)ru.ru_maxrss / 1024.0; /* Linux: kilobytes */
}

static int print_json(const struct k25_config *cfg, const k25_model_t *model, const int32_t *ids,
                      int n_ids, const struct k25_result *r, double ttft_ms, double prefill_tps, double decode_tps)
{
    json_t *o = json_object(), *in = json_array(), *out = json_array(), *mem = json_object();
    json_t *timing = json_object();
    json_error_t jerr;
    char *cfgtxt = k25_config_to_json(cfg);
    json_t *jcfg = cfgtxt ? json_loads(cfgtxt, 0, &jerr) : NULL;
    free(cfgtxt);
    for (int i = 0; i < n_ids; i++)
        json_array_append_new(in, json_integer(ids[i]));
    for (int i = 0; i < r->n_output; i++)
        json_array_append_new(out, json_integer(r->output_ids[i]));
    char *text = k25_tok_decode(r->output_ids, r->n_output);
    json_object_set_new(timing, "ttft_ms", json_real(ttft_ms));
    json_object_set_new(timing, "prefill_ms", json_real((double)(r->prefill_done_t_ns - r->admit_t_ns) / 1e6));
    json_object_set_new(timing, "decode_ms", json_real((double)(r->finish_t_ns - r->prefill_done_t_ns) / 1e6));
    json_object_set_new(timing, "prefill_tok_s", json_real(prefill_tps));
    json_object_set_new(timing, "decode_tok_s", json_real(decode_tps));
    json_object_set_new(timing, "prefill_chunks", json_integer(r->prefill_chunks));
    struct k25_mem_stats ms;
    k25_mem_get(&ms);
    json_object_set_new(mem, "peak_rss_mb", json_real(peak_rss_mb()));
    for (int c = 0; c < K25_MEM_NCAT; c++) {
        char key[64];
        snprintf(key, sizeof(key), "peak_%s_bytes", k25_mem_cat_name(c));
        json_object_set_new(mem, key, json_integer(ms.peak_bytes[c]));
    }
    json_object_set_new(mem, "peak_tracked_bytes", json_integer(ms.total_peak_bytes));
    const struct k25_model_shape *s = k25_model_get_shape(model);
    json_t *jm = json_pack("{s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "name", s->name, "source",
                           k25_model_source(model), "dim", s->dim, "n_layers", s->n_layers, "n_heads",
                           s->n_heads, "n_kv_heads", s->n_kv_heads, "head_dim", s->head_dim, "ffn_dim",
                           s->ffn_dim, "vocab_size", s->vocab_size);
    json_object_set_new(o, "input_tokens", json_integer(r->n_input));
    json_object_set_new(o, "input_ids", in);
    json_object_set_new(o, "output_ids", out);
    json_object_set_new(o, "text", json_string(text ? text : ""));
    json_object_set_new(o, "timing", timing);
    json_object_set_new(o, "memory", mem);
    json_object_set_new(o, "threads", json_integer(k25_get_threads()));
    json_object_set_new(o, "model", jm);
    json_object_set_new(o, "config", jcfg ? jcfg : json_null());
    free(text);
    int rc = json_dumpf(o, stdout, JSON_INDENT(2)) == 0 && fputc('\n', stdout) != EOF ? 0 : 1;
    json_decref(o);
    return rc;
}

int k25_cmd_run(int argc, char **argv)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_error_clear(&err);
    k25_config_init(&cfg);
    int status = 2;
    int32_t *ids = NULL;
    int n_ids = 0;
    char *text = NULL;
    size_t text_len = 0;
    k25_model_t *model = NULL;
    k25_engine_t *eng = NULL;

    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            run_usage(stdout);
            return 0;
        }
    if (k25_cli_apply_config(&argc, argv, &cfg, &err) != K25_OK)
        goto out_err;

    const char *prompt = NULL, *prompt_file = NULL, *id_list = NULL;
    long prompt_len = 0, max_tokens = 0;
    bool json = false, quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--prompt") || !strcmp(a, "--prompt-file") || !strcmp(a, "--input-ids") ||
                   !strcmp(a, "--max-tokens") || !strcmp(a, "--prompt-len")) {
            if (!val) {
                k25_error_set(&err, K25_EINVAL, "command line", 0, a, "missing value");
                goto out_err;
            }
            i++;
            if (!strcmp(a, "--prompt"))
                prompt = val;
            else if (!strcmp(a, "--prompt-file"))
                prompt_file = val;
            else if (!strcmp(a, "--input-ids"))
                id_list = val;
            else {
                char *end;
                errno = 0;
                long x = strtol(val, &end, 10);
                if (*end || end == val || errno || x <= 0 || x > 100000000) {
                    k25_error_set(&err, K25_EINVAL, "command line", 0, a,
                                  "expected a positive integer, got \"%s\"", val);
                    goto out_err;
                }
                *(!strcmp(a, "--max-tokens") ? &max_tokens : &prompt_len) = x;
            }
        } else {
            k25_error_set(&err, K25_EINVAL, "command line", 0, a, "unknown option (k25 run --help)");
            goto out_err;
        }
    }
    if ((prompt != NULL) + (prompt_file != NULL) + (id_list != NULL) != 1) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, NULL,
                      "give exactly one of --prompt, --prompt-file, --input-ids (k25 run --help)");
        goto out_err;
    }
    if (k25_config_validate(&cfg, &err) != K25_OK)
        goto out_err;

    if (id_list) {
        if (parse_ids(id_list, &ids, &n_ids, &err) != K25_OK)
            goto out_err;
    } else {
        if (prompt_file) {
            if (!(text = read_file(prompt_file, &text_len, &err)))
                goto out_err;
        } else {
            text = strdup(prompt);
            text_len = strlen(prompt);
        }
        if (k25_tok_encode(text, text_len, &ids, &n_ids, &err) != K25_OK)
            goto out_err;
    }
    if (n_ids == 0) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, NULL, "the prompt is empty");
        goto out_err;
    }
    if (prompt_len > 0) { /* repeat (or cut) the prompt to exactly prompt_len tokens */
        int32_t *nv = malloc(sizeof(int32_t) * (size_t)prompt_len);
        if (!nv) {
            k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out_err;
        }
        for (long i = 0; i < prompt_len; i++)
            nv[i] = ids[i % n_ids];
        free(ids);
        ids = nv;
        n_ids = (int)prompt_len;
    }

    if (k25_model_load(&cfg, &model, &err) != K25_OK)
        goto out_err;
    if (k25_engine_create(&cfg, model, &eng, &err) != K25_OK)
        goto out_err;
    struct progress pg = {!quiet && isatty(2), n_ids,
                          cfg.disable_prefill_optimization ? n_ids : cfg.prefill_chunk_size, k25_now_ns()};
    k25_engine_set_event_cb(eng, on_event, &pg);
    struct k25_request req = {.id = "run", .input_ids = ids, .n_input = n_ids,
                              .max_new_tokens = (int)max_tokens};
    int h;
    if (k25_engine_submit(eng, &req, &h, &err) != K25_OK || k25_engine_run(eng, &err) != K25_OK)
        goto out_err;
    const struct k25_result *r = k25_engine_result(eng, h);
    if (r->state != K25_REQ_COMPLETED) {
        k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "request %s: %s", k25_req_state_name(r->state),
                      r->reason);
        goto out_err;
    }

    double ttft_ms = (double)(r->token_t_ns[0] - r->submit_t_ns) / 1e6;
    double pre_s = (double)(r->prefill_done_t_ns - r->admit_t_ns) / 1e9;
    double dec_s = (double)(r->finish_t_ns - r->prefill_done_t_ns) / 1e9;
    double pre_tps = pre_s > 0 ? r->n_input / pre_s : 0.0;
    double dec_tps = (r->n_output > 1 && dec_s > 0) ? (r->n_output - 1) / dec_s : 0.0;
    if (json) {
        if (print_json(&cfg, model, ids, n_ids, r, ttft_ms, pre_tps, dec_tps) != 0)
            goto out_write;
    } else {
        if (id_list) {
            for (int i = 0; i < r->n_output; i++)
                printf(i ? ",%d" : "%d", r->output_ids[i]);
            printf("\n");
        } else {
            char *out = k25_tok_decode(r->output_ids, r->n_output);
            if (!out)
                goto out_write;
            fwrite(out, 1, strlen(out), stdout);
            fputc('\n', stdout);
            free(out);
        }
        fprintf(stderr,
                "k25 run: %s, %d prompt tokens in %d chunks, %d generated | prefill %.1f tok/s | "
                "decode %.1f tok/s | TTFT %.1f ms | peak RSS %.0f MB | %d threads\n",
                k25_model_get_shape(model)->name, r->n_input, r->prefill_chunks, r->n_output, pre_tps,
                dec_tps, ttft_ms, peak_rss_mb(), k25_get_threads());
    }
    if (fflush(stdout) != 0)
        goto out_write;
    status = 0;
    goto out;

out_write:
    fprintf(stderr, "k25 run: writing the output failed: %s\n", strerror(errno));
    status = 1;
    goto out;
out_err:
    fprintf(stderr, "k25 run: %s\n", err.msg);
    status = err.code == K25_ENOMEM || err.code == K25_EIO ? 1 : 2;
out:
    k25_engine_destroy(eng);
    k25_model_destroy(model);
    free(ids);
    free(text);
    return status;
}
