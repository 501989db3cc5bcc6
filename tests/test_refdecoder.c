/*
 * test_refdecoder.c - the single-file reference decoder (bench/ref_decoder.c)
 * runs the same model as `k25 run`: its greedy tokens for a prompt equal
 * k25's under the token-identity rule (docs/engine.md), so
 * `make bench-decode` compares two implementations of one model.
 *
 * Each case runs both binaries (build/ref_decoder --json and build/k25 run
 * --json), compares the free-running sequences with k25_tok_compare, and
 * replays the reference's tokens on an in-process engine with teacher
 * forcing (k25_tok_verify: every position whose margin exceeds 0.002 must
 * keep its argmax).  One case shows the check can fail (the `tiny` model's
 * tokens against the `small` engine).  k25 runs the exact model
 * (--kv-compression-ratio 1: the default 0.85 is lossy by design, though
 * it keeps every token of prompts this short).  One thread on both sides: the
 * comparison holds at any count, and a busy 2-core machine stalls OpenMP
 * barriers.
 */
#include "testutil.h"
#include "k25.h"

#include <jansson.h>
#include <libgen.h>
#include <math.h>

struct seq {
    int32_t ids[256];
    float margins[256];
    int n;
    bool has_margins;
};

/* build/ref_decoder beside the k25 under test, or $K25_REF_DECODER. */
static const char *ref_bin(void)
{
    static char path[1024];
    const char *p = getenv("K25_REF_DECODER");
    if (p)
        return p;
    char k25[1024];
    snprintf(k25, sizeof(k25), "%s", tu_k25());
    snprintf(path, sizeof(path), "%s/ref_decoder", dirname(k25));
    return path;
}

/* Runs cmd (stdout only), parses its JSON output into s. */
static void run_seq(const char *cmd, struct seq *s)
{
    char *out = NULL;
    char full[8300];
    snprintf(full, sizeof(full), "%s 2>/dev/null", cmd);
    int rc = tu_run(full, &out);
    if (rc != 0)
        fail_msg("'%s' exited %d: %s", cmd, rc, out ? out : "");
    json_error_t jerr;
    json_t *o = json_loads(out, 0, &jerr);
    if (!o)
        fail_msg("'%s': output is not JSON (%s): %.200s", cmd, jerr.text, out);
    json_t *ids = json_object_get(o, "output_ids"), *m = json_object_get(o, "margins");
    assert_true(json_is_array(ids));
    s->n = (int)json_array_size(ids);
    assert_true(s->n > 0 && s->n <= 256);
    s->has_margins = json_is_array(m);
    for (int i = 0; i < s->n; i++) {
        s->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        s->margins[i] = s->has_margins ? (float)json_number_value(json_array_get(m, (size_t)i)) : NAN;
    }
    json_decref(o);
    free(out);
}

/* Teacher-forced replay of ref on a fresh in-process engine of model. */
static void replay(const char *model, const int32_t *prompt, int n_prompt, const struct seq *ref,
                   struct k25_tok_report *rep)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "%s", model);
    cfg.threads = 1;
    cfg.kv_compression_ratio = 1.0; /* the exact model (the default prunes KV beyond sink + recent tokens) */
    k25_model_t *m = NULL;
    k25_engine_t *e = NULL;
    assert_int_equal(k25_model_load(&cfg, &m, &err), K25_OK);
    assert_int_equal(k25_engine_create(&cfg, m, &e, &err), K25_OK);
    if (k25_tok_verify(e, "ref", prompt, n_prompt, ref->ids, ref->margins, ref->n, K25_TOK_TAU, rep, &err) !=
        K25_OK)
        fail_msg("replay failed: %s", err.msg);
    k25_engine_destroy(e);
    k25_model_destroy(m);
}

/*
 * The prompt "1,2,...,base" repeated to prompt_len (as both binaries'
 * --prompt-len do); n_tokens generated; extra k25 flags.
 */
static void check_model(const char *model, int base, int prompt_len, int n_tokens, const char *k25_flags)
{
    char ids[1024] = "", cmd[8192];
    size_t off = 0;
    for (int i = 1; i <= base; i++)
        off += (size_t)snprintf(ids + off, sizeof(ids) - off, i > 1 ? ",%d" : "%d", (i * 37) % 256);
    struct seq ref, cand;
    snprintf(cmd, sizeof(cmd), "%s --model %s --input-ids %s --prompt-len %d --max-tokens %d --threads 1 --json",
             ref_bin(), model, ids, prompt_len, n_tokens);
    run_seq(cmd, &ref);
    assert_true(ref.has_margins);
    assert_int_equal(ref.n, n_tokens);
    snprintf(cmd, sizeof(cmd), "%s run --model %s --input-ids %s --prompt-len %d --max-tokens %d --threads 1 "
             "--quiet --json --kv-compression-ratio 1 %s", tu_k25(), model, ids, prompt_len, n_tokens, k25_flags);
    run_seq(cmd, &cand);

    /* Free-running: identical up to a divergence, which must be a near-tie. */
    struct k25_tok_cmp c;
    k25_tok_compare(ref.ids, ref.margins, ref.n, cand.ids, NULL, cand.n, K25_TOK_TAU, &c);
    if (!c.pass)
        fail_msg("%s, prompt %d: k25 diverges from ref_decoder at token %d (margin %.4g > %.3g)", model,
                 prompt_len, c.diverged_at, c.margin_ref, c.bound);
    if (c.diverged_at >= 0)
        print_message("%s, prompt %d: near-tie divergence at token %d (margin %.4g); replay checks the rest\n",
                      model, prompt_len, c.diverged_at, c.margin_ref);

    /* Teacher-forced: every position with margin > 2 tau keeps its argmax. */
    int32_t prompt[8192];
    assert_true(prompt_len <= 8192);
    for (int i = 0; i < prompt_len; i++)
        prompt[i] = ((i % base + 1) * 37) % 256;
    struct k25_tok_report rep;
    replay(model, prompt, prompt_len, &ref, &rep);
    char line[512];
    k25_tok_report_format(&rep, line, sizeof(line));
    if (!k25_tok_report_ok(&rep))
        fail_msg("%s, prompt %d: replay of ref_decoder's tokens on k25: %s", model, prompt_len, line);
    assert_true(rep.n_checked >= 16);
}

static void test_small_short_prompt(void **state)
{
    (void)state;
    check_model("small", 12, 12, 24, "");
}

/* A prompt longer than one prefill chunk: k25's chunked prefill and paged KV against one token at a time. */
static void test_small_chunked_prompt(void **state)
{
    (void)state;
    check_model("small", 50, tu_quick() ? 200 : 400, 20, "--prefill-chunk-size 128");
}

static void test_tiny(void **state)
{
    (void)state;
    check_model("tiny", 9, 40, 32, "");
}

/* The check can fail: tiny's tokens are not small's. */
static void test_other_model_fails(void **state)
{
    (void)state;
    struct seq ref;
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s --model tiny --input-ids 5,6,7,8 --max-tokens 16 --threads 1 --json", ref_bin());
    run_seq(cmd, &ref);
    const int32_t prompt[] = {5, 6, 7, 8};
    struct k25_tok_report rep;
    replay("small", prompt, 4, &ref, &rep);
    assert_false(k25_tok_report_ok(&rep));
    assert_true(rep.n_mismatch > 0);
}

static void test_bad_input(void **state)
{
    (void)state;
    char cmd[4096], *out = NULL;
    snprintf(cmd, sizeof(cmd), "%s --model small --input-ids 1,300 --max-tokens 2", ref_bin());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--input-ids"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s --model huge --input-ids 1 --max-tokens 2", ref_bin());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "--model"));
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_short_prompt),
        cmocka_unit_test(test_small_chunked_prompt),
        cmocka_unit_test(test_tiny),
        cmocka_unit_test(test_other_model_fails),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
