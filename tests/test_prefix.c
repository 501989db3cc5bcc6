/*
 * test_prefix.c - prefix caching (enable_prefix_caching, engine/prefix.c):
 * repeated questions on one document reuse its full KV blocks and give the
 * cold run's tokens under the token-identity rule (a hit moves chunk
 * boundaries, so logits differ in the last bits); reference counts return
 * every block to the pool or the cache; a request diverging inside a block
 * does not share it (copy-on-write); idle cached blocks are evicted, oldest
 * first, under a memory budget; int8 shares only quantized blocks;
 * compression is refused; off is today's engine, bit for bit; with KV
 * tiers the same holds (blocks published from the warm and cold tiers).
 *
 *   test_prefix --measure N [Q]   TTFT of a first request on an N-token
 *                                 document vs Q repeated questions (hits)
 */
#include "testutil.h"
#include "tu_model.h"

#include "harness.h"
#include "gold.h"
#include "k25.h"

#include <jansson.h>

#include <math.h>
#include <time.h>

/* Deterministic pseudo-text of n byte tokens (test_engine.c's make_prompt). */
static int32_t *make_prompt(int n, uint32_t salt)
{
    static const char *words[] = {"the ", "contract ", "party ", "shall ", "article ", "12 ", "of ",
                                  "notice ", "in ", "writing, ", "pursuant ", "to ", "section "};
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    uint32_t s = 2463534242u ^ salt;
    int i = 0;
    while (i < n) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        const char *w = words[s % (sizeof(words) / sizeof(words[0]))];
        for (; *w && i < n; w++)
            ids[i++] = (unsigned char)*w;
    }
    return ids;
}

/* document[0, n_doc) followed by a question of n_q tokens that starts with token first. */
static int32_t *doc_question(const int32_t *doc, int n_doc, int n_q, uint32_t salt, int32_t first)
{
    int32_t *p = malloc(sizeof(int32_t) * (size_t)(n_doc + n_q));
    int32_t *q = make_prompt(n_q, salt);
    memcpy(p, doc, sizeof(int32_t) * (size_t)n_doc);
    memcpy(p + n_doc, q, sizeof(int32_t) * (size_t)n_q);
    p[n_doc] = first;
    free(q);
    return p;
}

static struct k25_config base_config(bool prefix)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "tiny");
    cfg.kv_compression_ratio = 1.0; /* prefix caching needs uncompressed KV */
    cfg.kv_block_size = 64;
    cfg.prefill_chunk_size = 256;
    cfg.enable_prefix_caching = prefix;
    return cfg;
}

struct out {
    int n, cached;
    int32_t ids[32];
    float margins[32];
    float logits[32 * 256];
    double ttft_ms;
};

/* Submits one request to e, runs it to completion, copies its result and releases it. */
static void run_req(k25_engine_t *e, const int32_t *prompt, int n, int max_new, const char *id, struct out *o)
{
    struct k25_error err;
    struct k25_request req = {.id = id, .input_ids = prompt, .n_input = n, .max_new_tokens = max_new,
                              .keep_logits = true};
    int h;
    assert_int_equal(k25_engine_submit(e, &req, &h, &err), K25_OK);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *r = k25_engine_result(e, h);
    assert_int_equal(r->state, K25_REQ_COMPLETED);
    assert_int_equal(r->n_output, max_new);
    o->n = r->n_output;
    o->cached = r->cached_tokens;
    memcpy(o->ids, r->output_ids, sizeof(int32_t) * (size_t)o->n);
    memcpy(o->margins, r->margins, sizeof(float) * (size_t)o->n);
    memcpy(o->logits, r->logits, sizeof(float) * 256 * (size_t)o->n);
    o->ttft_ms = (double)(r->token_t_ns[0] - r->submit_t_ns) / 1e6;
    k25_engine_release(e, h);
}

/* One request on a fresh engine with cfg. */
static void run_cold(const struct k25_config *cfg, const int32_t *prompt, int n, int max_new, struct out *o)
{
    k25_engine_t *e;
    struct k25_error err;
    if (k25_engine_create(cfg, tu_tiny, &e, &err) != K25_OK)
        fail_msg("%s", err.msg);
    run_req(e, prompt, n, max_new, "cold", o);
    k25_engine_destroy(e);
}

/* Fails unless got's tokens equal ref's under the token-identity rule (and their logits within tau up to there). */
static void assert_rule(const struct out *ref, const struct out *got, const char *what)
{
    struct k25_tok_cmp cmp;
    k25_tok_compare(ref->ids, ref->margins, ref->n, got->ids, got->margins, got->n, K25_TOK_TAU, &cmp);
    if (!cmp.pass)
        fail_msg("%s: tokens diverge at position %d (margin %.4g)", what, cmp.diverged_at, (double)cmp.margin_ref);
    int upto = cmp.diverged_at < 0 ? got->n : cmp.diverged_at + 1;
    double worst = 0;
    for (int i = 0; i < upto * 256; i++)
        worst = fmax(worst, fabs((double)ref->logits[i] - got->logits[i]));
    print_message("%s: %d tokens, logits max |diff| %.2e\n", what, got->n, worst);
    assert_true(worst <= K25_TOK_TAU);
}

static void get_stats(k25_engine_t *e, struct k25_engine_stats *st)
{
    k25_engine_get_stats(e, st);
}

/*
 * One document, several questions: the second request reuses the
 * document's full blocks (960 of 1000 tokens at block size 64: block 15
 * holds the question and is not shared), the same prompt again reuses all
 * but its last partial block, and both give the cold run's tokens under
 * the rule.  Every block goes back (in use 0) and stays cached.
 */
static void test_document_questions(void **state)
{
    (void)state;
    const int ND = 1000, NQ = 40, NEW = 8;
    int32_t *doc = make_prompt(ND, 1);
    int32_t *p1 = doc_question(doc, ND, NQ, 11, 'Q'), *p2 = doc_question(doc, ND, NQ, 12, 'W');
    struct k25_config cfg = base_config(true);
    k25_engine_t *e;
    struct k25_error err;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_OK);
    static struct out a, b, c, cold_b;
    run_req(e, p1, ND + NQ, NEW, "q1", &a);
    assert_int_equal(a.cached, 0);
    run_req(e, p2, ND + NQ, NEW, "q2", &b);
    assert_int_equal(b.cached, ND / 64 * 64);
    run_req(e, p1, ND + NQ, NEW, "q1-again", &c);
    assert_int_equal(c.cached, (ND + NQ - 1) / 64 * 64);
    print_message("TTFT first %.1f ms, hit on the document %.1f ms, same prompt again %.1f ms\n", a.ttft_ms,
                  b.ttft_ms, c.ttft_ms);

    struct k25_engine_stats st;
    get_stats(e, &st);
    assert_int_equal(st.kv_blocks_in_use, 0); /* every reference dropped */
    assert_int_equal(st.prefix_lookups, 3);
    assert_int_equal(st.prefix_hits, 2);
    assert_int_equal(st.prefix_hit_tokens, b.cached + c.cached);
    /* q1's 16 full blocks (1047 KV tokens), q2's own block 15 (its 1047 tokens: blocks 15, 16 differ) */
    assert_true(st.prefix_cached_blocks >= 16);
    assert_int_equal(st.prefix_evictions, 0);
    k25_engine_destroy(e);

    struct k25_config off = base_config(false);
    run_cold(&off, p2, ND + NQ, NEW, &cold_b);
    assert_rule(&cold_b, &b, "document hit vs cold");
    run_cold(&off, p1, ND + NQ, NEW, &cold_b);
    assert_rule(&cold_b, &c, "same prompt hit vs cold");
    assert_rule(&a, &c, "same prompt hit vs its first run");
    free(doc);
    free(p1);
    free(p2);
}

/*
 * Copy-on-write at the first divergent block: a prompt equal to a cached
 * one up to token 100 shares block 0 only (block 1, tokens 64..127,
 * diverges inside) and writes its own block 1; the cached block 1 is
 * untouched, so the original prompt still reuses three blocks with the
 * original tokens.  Two requests admitted together share the same blocks
 * (reference count 2): the pool holds them once.
 */
static void test_copy_on_write(void **state)
{
    (void)state;
    const int N = 200, NEW = 6;
    int32_t *p = make_prompt(N, 5), *d = make_prompt(N, 5);
    int32_t *other = make_prompt(N, 6);
    memcpy(d + 100, other + 100, sizeof(int32_t) * (size_t)(N - 100));
    d[100] = p[100] == 'Z' ? 'Y' : 'Z';
    struct k25_config cfg = base_config(true);
    k25_engine_t *e;
    struct k25_error err;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_OK);
    static struct out a, b, c;
    run_req(e, p, N, NEW, "p", &a);
    run_req(e, d, N, NEW, "diverges", &b);
    assert_int_equal(b.cached, 64);
    run_req(e, p, N, NEW, "p-again", &c);
    assert_int_equal(c.cached, 192);
    assert_rule(&a, &c, "after a divergent request");

    /* two at once: both take the three cached blocks */
    struct k25_request r1 = {.id = "x1", .input_ids = p, .n_input = N, .max_new_tokens = NEW};
    struct k25_request r2 = {.id = "x2", .input_ids = p, .n_input = N, .max_new_tokens = NEW};
    int h1, h2;
    assert_int_equal(k25_engine_submit(e, &r1, &h1, &err), K25_OK);
    assert_int_equal(k25_engine_submit(e, &r2, &h2, &err), K25_OK);
    assert_int_equal(k25_engine_step(e, &err), K25_OK); /* admits both, prefills their last 8 tokens */
    struct k25_engine_stats st;
    get_stats(e, &st);
    /* 3 shared blocks + one own block each (tokens 192..199 and the first decode token) */
    assert_int_equal(st.kv_blocks_in_use, 3 + 2);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, h1)->cached_tokens, 192);
    assert_int_equal(k25_engine_result(e, h2)->cached_tokens, 192);
    assert_memory_equal(k25_engine_result(e, h1)->output_ids, k25_engine_result(e, h2)->output_ids,
                        sizeof(int32_t) * NEW);
    k25_engine_release(e, h1);
    k25_engine_release(e, h2);
    get_stats(e, &st);
    assert_int_equal(st.kv_blocks_in_use, 0);
    k25_engine_destroy(e);
    free(p);
    free(d);
    free(other);
}

/*
 * Under a memory budget, idle cached blocks are evicted (least recently
 * released first) when the pool needs blocks: four documents of a third
 * of the pool each, then the first document finds nothing cached, the
 * last finds its blocks.  Evictions are logged as MEMORY_PRESSURE.
 */
static void test_eviction(void **state)
{
    (void)state;
    struct k25_config cfg = base_config(true);
    cfg.kv_block_size = 16;
    cfg.prefill_chunk_size = 64;
    cfg.max_num_batched_tokens = 64;
    cfg.memory_budget_mb = 16; /* ~90 blocks of 16 tokens (test_engine.c test_budget_rejects) */
    cfg.log_level = K25_LOG_DEBUG;
    char *dir = tu_tmpdir();
    snprintf(cfg.log_file, sizeof(cfg.log_file), "%s/k25.log", dir);
    k25_engine_t *e;
    struct k25_error err;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_OK);
    struct k25_engine_stats st;
    get_stats(e, &st);
    const int64_t C = st.kv_blocks_capacity;
    assert_true(C >= 24);
    const int NEW = 4, N = (int)(C / 3) * 16 - NEW; /* needs C/3 blocks */
    static struct out o;
    int32_t *docs[4];
    for (int i = 0; i < 4; i++) {
        docs[i] = make_prompt(N, 100 + (uint32_t)i);
        run_req(e, docs[i], N, NEW, "doc", &o);
        assert_int_equal(o.cached, 0);
    }
    get_stats(e, &st);
    print_message("pool of %lld blocks: %lld cached, %lld evicted\n", (long long)C,
                  (long long)st.prefix_cached_blocks, (long long)st.prefix_evictions);
    assert_true(st.prefix_evictions > 0);
    assert_true(st.prefix_cached_blocks <= C);
    run_req(e, docs[3], N, NEW, "doc3-again", &o);
    assert_int_equal(o.cached, (N - 1) / 16 * 16);
    run_req(e, docs[0], N, NEW, "doc0-again", &o); /* the oldest: evicted first */
    assert_int_equal(o.cached, 0);
    get_stats(e, &st);
    assert_int_equal(st.kv_blocks_in_use, 0);
    k25_engine_destroy(e);

    FILE *f = fopen(cfg.log_file, "r");
    assert_non_null(f);
    char line[512];
    int pressure = 0;
    while (fgets(line, sizeof(line), f))
        pressure += strstr(line, "evict_reason=MEMORY_PRESSURE") != NULL;
    fclose(f);
    assert_true(pressure > 0);
    for (int i = 0; i < 4; i++)
        free(docs[i]);
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/*
 * INT8 KV: a block is shared only when every slot in it is quantized (none
 * in the fp32 residual).  150 tokens + 4 generated never fill the default
 * residual (128 + one group of 32), so nothing is shared; 1000 tokens are
 * quantized up to ~840 and their fully quantized blocks are.
 */
static void test_int8_quantized_only(void **state)
{
    (void)state;
    struct k25_config cfg = base_config(true);
    cfg.kv_cache_dtype = K25_DTYPE_INT8;
    k25_engine_t *e;
    struct k25_error err;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_OK);
    static struct out o;
    int32_t *s = make_prompt(150, 3);
    run_req(e, s, 150, 4, "short", &o);
    run_req(e, s, 150, 4, "short-again", &o);
    assert_int_equal(o.cached, 0);
    int32_t *doc = make_prompt(1000, 4);
    int32_t *p1 = doc_question(doc, 1000, 40, 1, 'Q'), *p2 = doc_question(doc, 1000, 40, 2, 'W');
    run_req(e, p1, 1040, 4, "q1", &o);
    run_req(e, p2, 1040, 4, "q2", &o);
    /* quantized: at most (1043 - 128) slots, whole blocks of 64 */
    assert_true(o.cached > 0 && o.cached % 64 == 0 && o.cached <= (1043 - 128) / 64 * 64);
    print_message("int8: %d of 1040 prompt tokens from the cache\n", o.cached);
    k25_engine_destroy(e);
    free(s);
    free(doc);
    free(p1);
    free(p2);
}

/* Compression and prefix sharing: refused with a message that names the key and the fix. */
static void test_compression_refused(void **state)
{
    (void)state;
    struct k25_config cfg = base_config(true);
    cfg.kv_compression_ratio = 0.85;
    struct k25_error err;
    assert_int_equal(k25_config_validate(&cfg, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "kv_compression_ratio"));
    k25_engine_t *e;
    assert_int_equal(k25_engine_create(&cfg, tu_tiny, &e, &err), K25_EINVAL);
    /* one-pass prefill keeps every token: no compression, so it combines */
    cfg.disable_prefill_optimization = true;
    assert_int_equal(k25_config_validate(&cfg, &err), K25_OK);
}

/*
 * Off (the default) is today's engine: no request reuses anything.  On, a
 * request that finds nothing runs the same arithmetic: bit-identical
 * logits to off.
 */
static void test_off_identical(void **state)
{
    (void)state;
    struct k25_config def;
    k25_config_init(&def);
    assert_false(def.enable_prefix_caching);
    const int N = 300;
    int32_t *p = make_prompt(N, 9);
    struct k25_config off = base_config(false), on = base_config(true);
    k25_engine_t *e;
    struct k25_error err;
    static struct out a, b, c;
    assert_int_equal(k25_engine_create(&off, tu_tiny, &e, &err), K25_OK);
    run_req(e, p, N, 8, "a", &a);
    run_req(e, p, N, 8, "b", &b);
    assert_int_equal(a.cached + b.cached, 0);
    struct k25_engine_stats st;
    get_stats(e, &st);
    assert_int_equal(st.prefix_lookups + st.prefix_hits + st.prefix_cached_blocks, 0);
    k25_engine_destroy(e);
    assert_memory_equal(a.logits, b.logits, sizeof(float) * 256 * 8);
    run_cold(&on, p, N, 8, &c);
    assert_int_equal(c.cached, 0);
    assert_memory_equal(a.ids, c.ids, sizeof(int32_t) * 8);
    assert_memory_equal(a.logits, c.logits, sizeof(float) * 256 * 8);
    free(p);
}

/*
 * Gold sets for these workloads: `k25 gold generate --questions 3` writes
 * three requests per document that share its text as their prefix, end
 * with different questions and carry the document's prefix_id, which the
 * reader keeps (a known field: no warning) and the writer writes back.
 */
static void test_gold_questions(void **state)
{
    (void)state;
    char *dir = tu_tmpdir();
    char path[600];
    snprintf(path, sizeof(path), "%s/q.jsonl", dir);
    struct k25_gold_gen_opts go;
    k25_gold_gen_opts_init(&go);
    go.domain = K25_GOLD_DOMAIN_LEGAL;
    go.count = 6;
    go.questions = 3;
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    struct k25_error err;
    assert_int_equal(k25_gold_generate(&go, f, &err), 0);
    assert_int_equal(fclose(f), 0);
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    struct k25_gold_set set;
    assert_int_equal(k25_gold_load(path, &o, &set, &err), 0);
    assert_int_equal(set.n, 6);
    assert_int_equal(set.counts.warnings, 0);
    for (size_t i = 0; i < 6; i++) {
        const struct k25_gold_request *r = &set.reqs[i], *d = &set.reqs[i / 3 * 3];
        assert_non_null(r->prefix_id);
        assert_string_equal(r->prefix_id, d->prefix_id);
        assert_true(r->input_length > 4096 * 97 / 100 && r->input_length < 4096 * 103 / 100);
        if (r == d)
            continue;
        /* the same document, then another question */
        size_t same = 0;
        while (same < r->text_len && same < d->text_len && r->text[same] == d->text[same])
            same++;
        const char *q = strstr(r->text + same - (same > 12 ? 12 : same), "Question:");
        assert_non_null(q);
        assert_true(same > r->text_len - 200 && same < r->text_len);
    }
    assert_string_not_equal(set.reqs[0].prefix_id, set.reqs[3].prefix_id);
    f = fopen(path, "w"); /* written back: prefix_id is kept */
    assert_non_null(f);
    assert_int_equal(k25_gold_request_write(f, &set.reqs[1], &err), 0);
    assert_int_equal(fclose(f), 0);
    k25_gold_set_free(&set);
    assert_int_equal(k25_gold_load(path, &o, &set, &err), 0);
    assert_int_equal(set.n, 1);
    assert_non_null(set.reqs[0].prefix_id);
    k25_gold_set_free(&set);

    go.questions = 1; /* the default: no prefix_id */
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(k25_gold_generate(&go, f, &err), 0);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(k25_gold_load(path, &o, &set, &err), 0);
    assert_null(set.reqs[0].prefix_id);
    k25_gold_set_free(&set);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/*
 * `k25 bench`'s summary: prefix-hit requests and tokens, and TTFT split by
 * hit / miss; the JSON's prefix_cache object only when something hit (so
 * runs without prefix caching report what they did before).
 */
static void test_bench_summary_split(void **state)
{
    (void)state;
    struct k25_bench_req reqs[4];
    memset(reqs, 0, sizeof(reqs));
    const int64_t ttft_ms[4] = {900, 40, 60, 1000};
    for (int i = 0; i < 4; i++) {
        reqs[i].state = K25_REQ_COMPLETED;
        reqs[i].n_input = 1000;
        reqs[i].n_output = 1;
        reqs[i].arrival_ns = reqs[i].submit_ns = 0;
        reqs[i].admit_ns = 0;
        reqs[i].first_ns = reqs[i].finish_ns = ttft_ms[i] * 1000000;
        reqs[i].cached_tokens = i == 1 || i == 2 ? 768 : 0;
    }
    struct k25_bench_run run;
    memset(&run, 0, sizeof(run));
    run.reqs = reqs;
    run.n_reqs = 4;
    run.n_reps = 1;
    run.rep_end_ns[0] = 2000000000;
    struct k25_bench_slo slo = {0};
    struct k25_bench_summary sm;
    struct k25_error err;
    assert_int_equal(k25_bench_summarize(&run, &slo, &sm, &err), K25_OK);
    assert_int_equal(sm.n_prefix_hit, 2);
    assert_int_equal(sm.prefix_hit_tokens, 1536);
    assert_int_equal(sm.ttft_hit.n, 2);
    assert_int_equal(sm.ttft_miss.n, 2);
    assert_true(fabs(sm.ttft_hit.mean - 50) < 1e-9 && fabs(sm.ttft_miss.mean - 950) < 1e-9);
    json_t *js = k25_bench_summary_json(&sm);
    json_t *pc = json_object_get(js, "prefix_cache");
    assert_non_null(pc);
    assert_int_equal(json_integer_value(json_object_get(pc, "hit_tokens")), 1536);
    json_decref(js);
    for (int i = 0; i < 4; i++)
        reqs[i].cached_tokens = 0;
    assert_int_equal(k25_bench_summarize(&run, &slo, &sm, &err), K25_OK);
    js = k25_bench_summary_json(&sm);
    assert_null(json_object_get(js, "prefix_cache"));
    json_decref(js);
}

/* --measure N [Q]: TTFT of the first request on an N-token document and of Q questions that hit it. */
/*
 * Tiers and prefix caching together: with the KV four times the warm
 * budget, a cold tier, and prefix caching, a first question on a document
 * gives the plain engine's tokens and logits bit for bit (tiers move bytes,
 * not arithmetic), and a second question hits the document's blocks -
 * published from the warm and cold tiers, brought back whole first - and
 * gives the plain cold run's tokens under the token-identity rule; the
 * same prompt again hits too.  Every block goes back.
 */
static void test_tiers_with_prefix(void **state)
{
    (void)state;
    enum { N_DOC = 1000, N_Q = 32, N_NEW = 12 };
    char dir[] = "/tmp/k25-test-prefix-tier-XXXXXX";
    assert_non_null(mkdtemp(dir));
    int32_t *doc = make_prompt(N_DOC, 9);
    int32_t *q1 = doc_question(doc, N_DOC, N_Q, 21, 'A'), *q2 = doc_question(doc, N_DOC, N_Q, 22, 'B');
    struct out *o = calloc(5, sizeof(*o)); /* plain q1, plain q2, tiers q1, tiers q2, tiers q1 again */
    assert_non_null(o);
    struct k25_config plain = base_config(false);
    run_cold(&plain, q1, N_DOC + N_Q, N_NEW, &o[0]);
    run_cold(&plain, q2, N_DOC + N_Q, N_NEW, &o[1]);

    struct k25_config c = base_config(true);
    struct k25_kv_layout lay;
    k25_kv_layout(&c, k25_model_get_shape(tu_tiny), &lay);
    const int nb = (N_DOC + N_Q + N_NEW + c.kv_block_size - 1) / c.kv_block_size;
    c.kv_hot_tokens = c.kv_block_size; /* the first block */
    c.kv_warm_budget_mb = 0.25 * (double)lay.block_bytes * nb / 1048576.0;
    snprintf(c.kv_cold_dir, sizeof(c.kv_cold_dir), "%s", dir);
    k25_engine_t *e;
    struct k25_error err;
    if (k25_engine_create(&c, tu_tiny, &e, &err) != K25_OK)
        fail_msg("%s", err.msg);
    run_req(e, q1, N_DOC + N_Q, N_NEW, "t1", &o[2]);
    run_req(e, q2, N_DOC + N_Q, N_NEW, "t2", &o[3]);
    run_req(e, q1, N_DOC + N_Q, N_NEW, "t3", &o[4]);
    struct k25_engine_stats st;
    get_stats(e, &st);
    k25_engine_destroy(e);

    assert_int_equal(o[2].cached, 0);
    assert_memory_equal(o[0].ids, o[2].ids, sizeof(int32_t) * N_NEW);
    assert_memory_equal(o[0].logits, o[2].logits, sizeof(float) * 256 * N_NEW);
    assert_int_equal(o[3].cached, N_DOC / c.kv_block_size * c.kv_block_size); /* the document's full blocks */
    assert_true(o[4].cached > o[3].cached);
    assert_rule(&o[1], &o[3], "tiers + prefix hit");
    assert_rule(&o[0], &o[4], "tiers + prefix hit, same prompt");
    assert_true(st.kv_tier_bytes_moved > 0);
    assert_true(st.kv_tier_evictions > 0);
    assert_true(st.kv_cache_hit_rate > 0.0 && st.kv_cache_hit_rate <= 1.0);
    assert_true(st.prefix_hits >= 2);
    assert_int_equal(st.kv_blocks_in_use, 0);
    free(o);
    free(q1);
    free(q2);
    free(doc);
    assert_int_equal(rmdir(dir), 0); /* the cold file was unlinked at once */
}

static int measure(int n_doc, int n_q)
{
    struct k25_config cfg = base_config(true);
    cfg.kv_block_size = 256;
    cfg.prefill_chunk_size = 2048;
    struct k25_error err;
    if (tu_model_setup(NULL) != 0)
        return 1;
    k25_engine_t *e;
    if (k25_engine_create(&cfg, tu_tiny, &e, &err) != K25_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t *doc = make_prompt(n_doc, 1);
    double first = 0, sum = 0;
    for (int i = 0; i <= n_q; i++) {
        int32_t *p = doc_question(doc, n_doc, 32, 50 + (uint32_t)i, 'A' + i % 26);
        struct k25_request req = {.id = "m", .input_ids = p, .n_input = n_doc + 32, .max_new_tokens = 4};
        int h;
        if (k25_engine_submit(e, &req, &h, &err) != K25_OK || k25_engine_run(e, &err) != K25_OK) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        const struct k25_result *r = k25_engine_result(e, h);
        double ttft = (double)(r->token_t_ns[0] - r->submit_t_ns) / 1e6;
        printf("request %d: prompt %d tokens, cached %d, TTFT %.1f ms\n", i, r->n_input, r->cached_tokens, ttft);
        if (i == 0)
            first = ttft;
        else
            sum += ttft;
        k25_engine_release(e, h);
        free(p);
    }
    if (n_q > 0)
        printf("TTFT first %.1f ms, hits (mean of %d) %.1f ms: %.1fx\n", first, n_q, sum / n_q, first / (sum / n_q));
    k25_engine_destroy(e);
    /* the last question again on a warm engine (a hit) and cold, tokens under the token-identity rule */
    int rc = 0;
    if (n_q > 0) {
        int32_t *p = doc_question(doc, n_doc, 32, 50 + (uint32_t)n_q, 'A' + n_q % 26);
        struct out *hot = calloc(2, sizeof(*hot)), *cold = hot + 1;
        for (int pass = 0; pass < 2; pass++) {
            struct k25_config c = base_config(pass == 0);
            c.kv_block_size = 256;
            c.prefill_chunk_size = 2048;
            if (k25_engine_create(&c, tu_tiny, &e, &err) != K25_OK)
                return 1;
            struct out *o = pass == 0 ? hot : cold;
            if (pass == 0) { /* warm the cache with another question */
                int32_t *w = doc_question(doc, n_doc, 32, 49, '?');
                run_req(e, w, n_doc + 32, 1, "warm", o);
                free(w);
            }
            run_req(e, p, n_doc + 32, 16, "q", o);
            k25_engine_destroy(e);
        }
        struct k25_tok_cmp cmp;
        k25_tok_compare(cold->ids, cold->margins, cold->n, hot->ids, hot->margins, hot->n, K25_TOK_TAU, &cmp);
        double worst = 0;
        int upto = cmp.diverged_at < 0 ? hot->n : cmp.diverged_at + 1;
        for (int i = 0; i < upto * 256; i++)
            worst = fmax(worst, fabs((double)cold->logits[i] - hot->logits[i]));
        printf("16 tokens, hit (cached %d) vs cold: %s (identical leading tokens %d), logits max |diff| %.2e; "
               "TTFT hit %.1f ms, cold %.1f ms\n",
               hot->cached, cmp.pass ? "same under the token-identity rule" : "DIFFERENT", cmp.n_same, worst,
               hot->ttft_ms, cold->ttft_ms);
        rc = cmp.pass ? 0 : 1;
        free(hot);
        free(p);
    }
    free(doc);
    tu_model_teardown(NULL);
    return rc;
}

int main(int argc, char **argv)
{
    k25_blas_reexec(argv);
    if (argc >= 3 && !strcmp(argv[1], "--measure"))
        return measure(atoi(argv[2]), argc >= 4 ? atoi(argv[3]) : 4);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_document_questions), cmocka_unit_test(test_copy_on_write),
        cmocka_unit_test(test_eviction),           cmocka_unit_test(test_int8_quantized_only),
        cmocka_unit_test(test_compression_refused), cmocka_unit_test(test_off_identical),
        cmocka_unit_test(test_gold_questions),     cmocka_unit_test(test_bench_summary_split),
        cmocka_unit_test(test_tiers_with_prefix),
    };
    return cmocka_run_group_tests_name("prefix", tests, tu_model_setup, tu_model_teardown);
}
