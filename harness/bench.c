/*
 * bench.c - `k25 bench` as a library call: k25_bench_measure runs a whole
 * benchmark from gold set to trace file.
 *
 * Order of work, chosen so that bad input fails before anything is
 * measured and nothing partial is left behind: options, gold set (loaded,
 * validated, filtered), output files created under temporary names (an
 * unwritable path fails here), model and engine, input token ids checked
 * against the vocabulary, warm-up, the repetitions, summary, then the
 * trace and the JSON summary written and renamed into place.  Any failure
 * removes the temporaries.
 *
 * Interrupted (SIGINT/SIGTERM: *opts->stop set to the signal number), the
 * run keeps what it measured: the requests that finished, the repetitions
 * so far, marked `interrupted` in the trace's /meta and in the JSON; the
 * command exits 128 + signal.
 */
#include "harness.h"
#include "gold.h"
#include "k25util.h"
#include "fidelity.h"
#include "endpoint.h"
#include "k25_tok.h"
#include "servermetrics.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void k25_bench_opts_init(struct k25_bench_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->mode = K25_BENCH_CLOSED;
    o->concurrency = 1;
    o->burstiness = 1.0;
    o->repeat = 1;
    o->stall_at_ns = -1;
    o->fidelity_tokens = 64;
    o->stall_timeout_s = 30;
    o->request_timeout_s = 600;
    o->pctl_method = K25_PCTL_NEAREST_RANK;
    o->progress = K25_PROGRESS_OFF;
    k25_pctl_spec_init(&o->pctl);
}

void k25_bench_run_free(struct k25_bench_run *r)
{
    for (size_t i = 0; i < r->n_reqs; i++) {
        free(r->reqs[i].token_ns);
        free(r->reqs[i].token_ids);
        free(r->reqs[i].token_margins);
        free(r->reqs[i].chunk_start_ns);
        free(r->reqs[i].chunk_end_ns);
    }
    free(r->reqs);
    free(r->win);
    memset(r, 0, sizeof(*r));
}

static int check_opts(const struct k25_bench_opts *o, struct k25_error *err)
{
    const char *cl = "command line";
    if (!o->dataset || !*o->dataset)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--dataset", "a gold set is required (--dataset FILE)");
    if (!o->out || !*o->out)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--out", "an output file is required (--out run.h5)");
    if (o->json_out && !strcmp(o->json_out, o->out))
        return k25_error_set(err, K25_EINVAL, cl, 0, "--json", "must not be the --out file");
    if (o->csv_out && (!strcmp(o->csv_out, o->out) || (o->json_out && !strcmp(o->csv_out, o->json_out))))
        return k25_error_set(err, K25_EINVAL, cl, 0, "--csv", "must not be the --out or --json file");
    int rc;
    if ((rc = k25_output_file_check(o->out, "--out", err)) != K25_OK ||
        (o->json_out && (rc = k25_output_file_check(o->json_out, "--json", err)) != K25_OK) ||
        (o->csv_out && (rc = k25_output_file_check(o->csv_out, "--csv", err)) != K25_OK))
        return rc;
    if (o->requests > 0 && o->duration_s > 0)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--duration",
                             "give --duration or --requests, not both");
    if (o->requests < 0 || o->duration_s < 0 || isnan(o->duration_s))
        return k25_error_set(err, K25_EINVAL, cl, 0, "--requests", "must be positive");
    if (o->repeat < 1 || o->repeat > K25_BENCH_MAX_REPEAT)
        return k25_error_set(err, K25_ERANGE, cl, 0, "--repeat", "must be 1..%d", K25_BENCH_MAX_REPEAT);
    if (o->fidelity_tokens < 1)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--fidelity-tokens", "must be >= 1");
    if (o->warmup < 0)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--warmup", "must be >= 0");
    if (o->endpoint && o->fidelity)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--fidelity",
                             "compares the in-process engine with the exact one: not available with --endpoint");
    if (o->endpoint && o->fidelity_degraded)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--fidelity-degraded",
                             "compares the in-process engine's degraded model with its full one: not available "
                             "with --endpoint");
    if (o->server_metrics && !o->endpoint)
        return k25_error_set(err, K25_EINVAL, cl, 0, "--server-metrics",
                             "scrapes a server's Prometheus metrics: it needs --endpoint (the in-process engine's "
                             "figures are in /timeline already)");
    if (!(o->stall_timeout_s > 0) || !(o->request_timeout_s > 0))
        return k25_error_set(err, K25_EINVAL, cl, 0, "--stall-timeout", "timeouts must be positive");
    if (o->mode == K25_BENCH_OPEN) {
        bool rated = o->arrivals == K25_ARR_GAMMA || o->arrivals == K25_ARR_CONSTANT;
        if (rated && (!(o->rate_rps > 0) || isinf(o->rate_rps)))
            return k25_error_set(err, K25_EINVAL, cl, 0, "--rate", "must be a positive request rate");
        if (!(o->burstiness > 0) || isinf(o->burstiness))
            return k25_error_set(err, K25_EINVAL, cl, 0, "--burstiness",
                                 "is the gamma shape of the inter-arrival times and must be > 0 (1 = Poisson, "
                                 "< 1 burstier, > 1 more even); 0 is no distribution: for evenly spaced "
                                 "arrivals use --arrivals constant");
        if (o->surge_factor > 0 && o->arrivals != K25_ARR_GAMMA)
            return k25_error_set(err, K25_EINVAL, cl, 0, "--surge", "shapes the gamma schedule only, not --arrivals %s",
                                 k25_arrival_names[o->arrivals]);
        if (o->arrivals == K25_ARR_RAMP && o->duration_s > 0)
            return k25_error_set(err, K25_EINVAL, cl, 0, "--ramp-up-strategy",
                                 "a linear ramp runs over a request count (--requests), not --duration");
        if (o->arrivals == K25_ARR_TRACE && o->duration_s > 0)
            return k25_error_set(err, K25_EINVAL, cl, 0, "--trace-file",
                                 "replays the trace's arrivals (--requests caps them), not --duration");
        if (o->concurrency < 0)
            return k25_error_set(err, K25_EINVAL, cl, 0, "--concurrency", "must be >= 0 (0 = no cap)");
    } else if (o->concurrency < 1) {
        return k25_error_set(err, K25_EINVAL, cl, 0, "--concurrency", "closed loop needs at least 1 user");
    }
    return K25_OK;
}

static void diag_stderr(void *user, enum k25_gold_severity sev, const struct k25_error *e)
{
    (void)user;
    if (sev == K25_GOLD_ERROR)
        fprintf(stderr, "k25 bench: %s\n", e->msg);
}

static void free_inputs(struct k25_bench_input *in, size_t n)
{
    for (size_t i = 0; in && i < n; i++) {
        free(in[i].ids);
        free(in[i].sections);
    }
    free(in);
}

/*
 * The section starts of an input's text as token positions (KV tiers' spans, issue 36):
 * tok_start[b->n_ids] holds each token's first byte in the text, NULL for the byte tokenizer.
 */
static int input_sections(const char *text, size_t len, const size_t *tok_start, struct k25_bench_input *b,
                          struct k25_error *err)
{
    size_t *offs = NULL, n = 0;
    bool clauses;
    int rc = k25_gold_section_starts(text, len, &offs, &n, &clauses, err);
    if (rc != K25_OK || n == 0)
        return rc;
    if (!(b->sections = malloc(sizeof(int32_t) * n))) {
        free(offs);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    k25_gold_sections_to_tokens(offs, n, tok_start, b->n_ids, b->sections, &b->n_sections);
    free(offs);
    return K25_OK;
}

/*
 * Tokenizes the selected gold requests: their input_ids, else their text with
 * the model's tokenizer when cfg is given (the in-process engine: a folder's
 * tokenizer.json with its BOS template, bytes for a preset; a folder without
 * tokenizer.json refuses text lines naming the file), else bytes (an
 * endpoint run sends the text itself).
 */
static int make_inputs(const struct k25_gold_set *set, const char *dataset, const struct k25_config *cfg,
                       struct k25_bench_input **out, struct k25_error *err)
{
    struct k25_bench_input *in = calloc(set->n, sizeof(*in));
    if (!in)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    int rc = K25_OK;
    k25_tokenizer_t *tok = NULL;
    bool tok_loaded = false;
    for (size_t i = 0; i < set->n; i++) {
        const struct k25_gold_request *g = &set->reqs[i];
        struct k25_bench_input *b = &in[i];
        snprintf(b->id, sizeof(b->id), "%s", g->id);
        b->line = g->line;
        b->max_new = g->expected_output_length > INT32_MAX ? INT32_MAX : (int)g->expected_output_length;
        b->priority = g->priority;
        b->hint = g->hint;
        if (g->input_ids) {
            if (g->n_input_ids > INT32_MAX || !(b->ids = malloc(sizeof(int32_t) * (g->n_input_ids + 1)))) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                break;
            }
            memcpy(b->ids, g->input_ids, sizeof(int32_t) * g->n_input_ids);
            b->n_ids = (int)g->n_input_ids;
            b->pretokenized = true;
        } else {
            char *text = NULL;
            size_t len = 0;
            if ((rc = k25_gold_request_input(g, &text, &len, err)) != K25_OK)
                break;
            if (cfg && !tok_loaded) { /* at the first text line: a token-id set needs no tokenizer */
                struct k25_error e;
                if ((rc = k25_tokenizer_for_model(cfg, &tok, &e)) != K25_OK) {
                    free(text);
                    k25_error_set(err, rc, dataset, (int)g->line, "text",
                                  "request '%s' is text: %s", g->id, e.msg);
                    break;
                }
                tok_loaded = true;
            }
            if (tok) {
                struct k25_error e;
                if ((rc = k25_tokenizer_encode(tok, text, len, K25_TOK_ADD_SPECIAL, &b->ids, &b->n_ids, &e)) !=
                    K25_OK)
                    k25_error_set(err, rc, dataset, (int)g->line, "text",
                                  "request '%s': %s", g->id, e.msg);
            } else {
                rc = k25_tok_encode(text, len, &b->ids, &b->n_ids, err);
                if (rc == K25_OK) /* section starts, for the KV tiers' spans (byte tokenizer: NULL offsets;
                                   * a tokenizer.json gives no byte offsets yet, so no sections there) */
                    rc = input_sections(text, len, NULL, b, err);
            }
            free(text);
            if (rc != K25_OK)
                break;
        }
    }
    k25_tokenizer_destroy(tok);
    if (rc != K25_OK) {
        free_inputs(in, set->n);
        return rc;
    }
    *out = in;
    return K25_OK;
}

/*
 * After an interrupted repetition rep (started at rep_start_ns): keeps
 * only the requests that finished (completed or rejected), freeing the
 * ones still in flight, and closes the repetition at its last finish.
 * Returns how many requests were dropped.
 */
static size_t close_interrupted(struct k25_bench_run *run, int rep, int64_t rep_start_ns)
{
    size_t kept = 0, dropped = 0;
    int64_t last = rep_start_ns;
    for (size_t i = 0; i < run->n_reqs; i++) {
        struct k25_bench_req *q = &run->reqs[i];
        if (q->state < K25_REQ_COMPLETED) {
            free(q->token_ns);
            free(q->token_ids);
            free(q->token_margins);
            free(q->chunk_start_ns);
            free(q->chunk_end_ns);
            dropped++;
            continue;
        }
        if (q->rep == rep && q->finish_ns > last)
            last = q->finish_ns;
        run->reqs[kept++] = *q;
    }
    run->n_reqs = kept;
    run->rep_start_ns[rep] = rep_start_ns;
    run->rep_end_ns[rep] = last;
    run->n_reps = rep + 1;
    return dropped;
}

static const char *signal_name(int sig)
{
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal";
}

/* Serializes j to a temporary beside path and renames it into place. */
static int write_json_file(FILE *f, const char *tmp, const char *path, json_t *j, struct k25_error *err)
{
    bool ok = true;
    errno = 0;
    /* over the placeholder written when the file was created */
    if (fflush(f) != 0 || fseek(f, 0, SEEK_SET) != 0 || ftruncate(fileno(f), 0) != 0 ||
        json_dumpf(j, f, JSON_INDENT(2)) != 0 || fputc('\n', f) == EOF) {
        k25_error_set(err, K25_EIO, path, 0, NULL, "writing the JSON summary failed: %s",
                      errno ? strerror(errno) : "write error");
        ok = false;
    }
    return k25_atomic_finish(f, tmp, path, ok, err);
}

/* One repetition (or the warm-up) on the in-process engine or the endpoint. */
static int run_rep(k25_engine_t *eng, k25_endpoint_t *ep, const struct k25_bench_opts *o, const struct k25_config *cfg,
                   const struct k25_bench_input *inputs, size_t n, const size_t *order, size_t first, int64_t n_req,
                   int rep, bool record, struct k25_bench_run *run, struct k25_error *err)
{
    struct k25_loadgen_settings s = {.opts = o, .inputs = inputs, .n_inputs = n, .order = order, .first = first,
                                     .n_requests = n_req, .rep = rep, .record = record, .seed = cfg->seed};
    if (ep)
        return k25_endpoint_run(ep, &s, run, err);
    return k25_loadgen_run(eng, &s, run, err);
}

/*
 * The state of one k25_bench_measure call, shared by its steps below.  Every
 * pointer is owned here and freed by bench_state_free, whatever step failed.
 */
struct bench_state {
    struct k25_bench_opts o; /* the caller's options, completed (default --requests) */
    const struct k25_config *cfg;
    k25_gold_filter_t *filter;
    struct k25_gold_set set;
    struct k25_bench_input *inputs; /* [n_inputs]: set.n, or the trace-shaped requests (apply_trace_shapes) */
    size_t *order;                  /* [n_inputs] */
    size_t n_inputs;
    json_t *trace_shapes;           /* workload.trace_shapes (NULL: the gold set's own lengths) */
    struct k25_h5 h5;
    bool h5_open; /* h5 is uncommitted: aborted on failure */
    FILE *jf;     /* the JSON summary's temporary, open while uncommitted */
    char jtmp[1100];
    k25_model_t *model;
    k25_engine_t *eng;
    k25_endpoint_t *ep;
    struct k25_bench_run run;
    struct k25_bench_summary *sum;
    json_t *prov, *doc;
    char *prov_s, *cfg_s, *wl_s, *sum_s;
    struct k25_fidelity fid;
    struct k25_pctl_table *pctl; /* --metric-percentiles / --percentile-metrics */
    struct k25_progress prog;    /* the measured repetitions' progress (o.prog points here) */
    k25_srvmet_t *srvmet;        /* --server-metrics: the scraper, stopped after the repetitions */
    k25_gputel_t *gpu;           /* GPU telemetry (NVML; null figures without it) */
    size_t n_dropped;            /* requests in flight dropped by an interruption */
};

static void bench_state_free(struct bench_state *st)
{
    if (st->h5_open)
        k25_h5_abort(&st->h5);
    if (st->jf) {
        fclose(st->jf);
        unlink(st->jtmp);
    }
    k25_engine_destroy(st->eng);
    k25_model_destroy(st->model);
    k25_srvmet_destroy(st->srvmet);
    k25_gputel_destroy(st->gpu);
    k25_endpoint_close(st->ep);
    k25_bench_run_free(&st->run);
    free_inputs(st->inputs, st->n_inputs);
    json_decref(st->trace_shapes);
    free(st->order);
    k25_gold_set_free(&st->set);
    k25_gold_filter_destroy(st->filter);
    json_decref(st->prov);
    json_decref(st->doc);
    free(st->prov_s);
    free(st->cfg_s);
    free(st->wl_s);
    free(st->sum_s);
    free(st->sum);
    free(st->pctl);
    k25_fidelity_free(&st->fid);
}

static const char *stop_signal_name(const struct bench_state *st)
{
    return signal_name(st->o.stop ? (int)*st->o.stop : 0);
}

static int count_tokens_cb(void *ctx, const char *text, size_t len, int64_t *n_tokens, struct k25_error *err)
{
    int32_t *ids = NULL;
    int n = 0;
    int rc = k25_tokenizer_encode(ctx, text, len, K25_TOK_ADD_SPECIAL, &ids, &n, err);
    free(ids);
    *n_tokens = n;
    return rc;
}

/*
 * --dataset random:input=N,output=N[,stdev=S]: the generator's documents
 * (k25_gold_random_spec) at exact lengths in the tokens of the model's
 * tokenizer (in process: the folder's; --endpoint: --tokenizer DIR), bytes
 * without one, written to a temporary file in $TMPDIR and loaded from it
 * like any gold set (then removed).  --requests requests (default 64).
 */
static int load_random(struct bench_state *st, const struct k25_gold_opts *gopts, struct k25_error *err)
{
    struct k25_bench_opts *o = &st->o;
    struct k25_gold_gen_opts g;
    int rc = k25_gold_random_spec(o->dataset, o->requests > 0 ? o->requests : 64, st->cfg->seed, &g, err);
    if (rc != K25_OK)
        return rc;
    k25_tokenizer_t *tok = NULL;
    if (o->endpoint ? o->tokenizer && (rc = k25_tokenizer_load(o->tokenizer, &tok, err)) != K25_OK
                    : (rc = k25_tokenizer_for_model(st->cfg, &tok, err)) != K25_OK)
        return rc;
    if (tok) {
        g.count_tokens = count_tokens_cb;
        g.count_ctx = tok;
    }
    const char *td = getenv("TMPDIR");
    char path[1100];
    snprintf(path, sizeof(path), "%s/k25-random-XXXXXX", td && *td ? td : "/tmp");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w+") : NULL;
    if (!f) {
        if (fd >= 0)
            close(fd);
        k25_tokenizer_destroy(tok);
        return k25_error_set(err, K25_EIO, path, 0, "--dataset", "cannot create a temporary file: %s",
                             strerror(errno));
    }
    rc = k25_gold_generate(&g, f, err);
    if (fclose(f) != 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, path, 0, "--dataset", "writing the random set failed: %s", strerror(errno));
    k25_tokenizer_destroy(tok);
    if (rc == K25_OK)
        rc = k25_gold_load(path, gopts, &st->set, err);
    unlink(path);
    return rc;
}

/* A deep copy of input a into *b (ids and sections); -1 out of memory. */
static int copy_input(const struct k25_bench_input *a, struct k25_bench_input *b)
{
    *b = *a;
    b->ids = malloc(sizeof(int32_t) * ((size_t)a->n_ids + 1));
    b->sections = a->n_sections ? malloc(sizeof(int32_t) * (size_t)a->n_sections) : NULL;
    if (!b->ids || (a->n_sections && !b->sections)) {
        free(b->ids);
        free(b->sections);
        b->ids = b->sections = NULL;
        return -1;
    }
    memcpy(b->ids, a->ids, sizeof(int32_t) * (size_t)a->n_ids);
    if (a->n_sections)
        memcpy(b->sections, a->sections, sizeof(int32_t) * (size_t)a->n_sections);
    return 0;
}

/*
 * --arrivals trace with a trace whose lines carry input_length and output_length (the Mooncake layout):
 * measured request i is shaped by line i.  Its prompt is input_length tokens: block b (of
 * K25_TRACE_BLOCK_TOKENS) of a line with hash_ids is the block the id names, taken from the selected
 * gold set's tokens laid end to end (the same id, the same tokens: a shared prefix), and the tokens past
 * the hashed blocks are the gold-set request it replaces (the seeded order's), repeated as needed;
 * expected output output_length.  Tokens are the model's (in process) or --tokenizer DIR's (an endpoint:
 * the prompt goes as token ids, so it is exactly that long for the server); an endpoint run without
 * --tokenizer, or a chat endpoint, cannot honour the lengths and is refused by name.  The warm-up keeps
 * the gold set's own requests.  A trace without lengths replays arrivals only.
 */
static int apply_trace_shapes(struct bench_state *st, struct k25_error *err)
{
    struct k25_bench_opts *o = &st->o;
    if (o->mode != K25_BENCH_OPEN || o->arrivals != K25_ARR_TRACE || !o->trace_file)
        return K25_OK;
    struct k25_trace_shape *sh = NULL;
    size_t ns = 0;
    int rc = k25_arrivals_trace_shapes(o->trace_file, o->requests, &sh, &ns, err);
    if (rc != K25_OK || !sh)
        return rc;
    if (o->endpoint && (!o->tokenizer || o->endpoint_chat)) {
        k25_trace_shapes_free(sh, ns);
        return k25_error_set(err, K25_EINVAL, o->trace_file, 1, "input_length",
                             o->endpoint_chat
                                 ? "the trace's lengths are tokens, sent as token ids: a chat endpoint takes text "
                                   "(--endpoint-type completions), or strip input_length, output_length and "
                                   "hash_ids to replay the arrivals alone"
                                 : "the trace's lengths are tokens: an endpoint run honours them with the server's "
                                   "tokenizer (--tokenizer DIR; the prompts go as token ids), or strip input_length, "
                                   "output_length and hash_ids to replay the arrivals alone");
    }
    size_t n = st->n_inputs, warm = o->warmup > 0 ? (size_t)o->warmup : 0, total = warm + ns;
    /* each selected request's tokens (an endpoint's inputs are the text's bytes: encoded with --tokenizer) */
    int32_t **tk = calloc(n, sizeof(int32_t *));
    int *tn = calloc(n, sizeof(int));
    struct k25_bench_input *in = calloc(total + 1, sizeof(*in));
    size_t *ord = malloc(sizeof(size_t) * (total + 1)), corpus_n = 0, made = 0;
    int32_t *corpus = NULL;
    k25_tokenizer_t *tok = NULL;
    if (!tk || !tn || !in || !ord) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    if (o->endpoint && (rc = k25_tokenizer_load(o->tokenizer, &tok, err)) != K25_OK)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const struct k25_bench_input *a = &st->inputs[i];
        if (tok && !a->pretokenized) {
            char *text = malloc((size_t)a->n_ids + 1);
            if (!text) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out;
            }
            for (int t = 0; t < a->n_ids; t++)
                text[t] = (char)a->ids[t];
            struct k25_error e;
            rc = k25_tokenizer_encode(tok, text, (size_t)a->n_ids, 0, &tk[i], &tn[i], &e);
            free(text);
            if (rc != K25_OK) {
                k25_error_set(err, rc, o->dataset, (int)a->line, "text", "request '%s': --tokenizer %s: %s", a->id,
                              o->tokenizer, e.msg);
                goto out;
            }
        } else if (!(tk[i] = malloc(sizeof(int32_t) * ((size_t)a->n_ids + 1)))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out;
        } else {
            memcpy(tk[i], a->ids, sizeof(int32_t) * (size_t)a->n_ids);
            tn[i] = a->n_ids;
        }
        corpus_n += (size_t)tn[i];
    }
    if (corpus_n == 0) {
        rc = k25_error_set(err, K25_EINVAL, o->dataset, 0, "input", "the selected requests hold no token");
        goto out;
    }
    if (!(corpus = malloc(sizeof(int32_t) * corpus_n))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0, k = 0; i < n; i++) {
        memcpy(corpus + k, tk[i], sizeof(int32_t) * (size_t)tn[i]);
        k += (size_t)tn[i];
    }
    bool any_hash = false;
    for (size_t k = 0; k < total; k++, made++) {
        size_t src = st->order[k % n];
        const struct k25_bench_input *a = &st->inputs[src];
        ord[k] = k;
        if (k < warm) { /* the warm-up: the gold set's own requests */
            if (copy_input(a, &in[k]) != 0) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out;
            }
            continue;
        }
        const struct k25_trace_shape *t = &sh[k - warm];
        struct k25_bench_input *b = &in[k];
        *b = *a;
        b->sections = NULL; /* its own text's sections no longer line up */
        b->n_sections = 0;
        snprintf(b->id, sizeof(b->id), "t%zu:%.50s", k - warm, a->id);
        b->max_new = t->output_length;
        b->n_ids = t->input_length;
        b->pretokenized = o->endpoint ? true : a->pretokenized;
        if (!(b->ids = malloc(sizeof(int32_t) * ((size_t)t->input_length + 1)))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out;
        }
        const size_t B = K25_TRACE_BLOCK_TOKENS, own_n = tn[src] > 0 ? (size_t)tn[src] : 0;
        any_hash |= t->n_hash > 0;
        for (size_t j = 0; j < (size_t)t->input_length; j++) {
            size_t blk = j / B;
            if (blk < (size_t)t->n_hash || own_n == 0) {
                uint64_t h = blk < (size_t)t->n_hash ? (uint64_t)t->hash_ids[blk] : (uint64_t)blk;
                b->ids[j] = corpus[(size_t)((h * B + j % B) % corpus_n)];
            } else {
                b->ids[j] = tk[src][(j - (size_t)t->n_hash * B) % own_n];
            }
        }
    }
    struct k25_model_shape preset;
    st->trace_shapes = json_pack("{s:I, s:s, s:s, s:b, s:i, s:s}", "requests", (json_int_t)ns, "input_length",
                                 "honoured: each prompt is exactly input_length tokens", "output_length",
                                 "honoured: expected_output_length", "hash_ids", any_hash, "block_tokens",
                                 (int)K25_TRACE_BLOCK_TOKENS, "tokens",
                                 o->endpoint                                      ? o->tokenizer
                                 : k25_model_preset(st->cfg->model, &preset) == K25_OK ? "bytes (the preset's)"
                                                                                       : "the model's tokenizer");
    free_inputs(st->inputs, st->n_inputs);
    free(st->order);
    st->inputs = in;
    st->order = ord;
    st->n_inputs = total;
    in = NULL;
    ord = NULL;
out:
    if (in)
        free_inputs(in, made);
    free(ord);
    free(corpus);
    for (size_t i = 0; tk && i < n; i++)
        free(tk[i]);
    free(tk);
    free(tn);
    k25_tokenizer_destroy(tok);
    k25_trace_shapes_free(sh, ns);
    return rc;
}

/* The gold set loaded and filtered, its requests tokenized and ordered; fails on an empty selection. */
static int load_gold(struct bench_state *st, struct k25_error *err)
{
    struct k25_bench_opts *o = &st->o;
    int rc;
    struct k25_gold_opts gopts;
    k25_gold_opts_init(&gopts);
    gopts.diag = diag_stderr;
    if (o->filter) {
        int col = 0;
        if ((rc = k25_gold_filter_parse(o->filter, &st->filter, &col, err)) != K25_OK)
            return rc;
        gopts.filter = st->filter;
    }
    if ((rc = strncmp(o->dataset, "random:", 7) == 0 ? load_random(st, &gopts, err)
                                                     : k25_gold_load(o->dataset, &gopts, &st->set, err)) != K25_OK)
        return rc;
    if (st->set.n == 0)
        return o->filter ? k25_error_set(err, K25_EINVAL, o->dataset, 0, "--filter",
                                         "no request matches '%s' (%lld valid requests in the set)", o->filter,
                                         (long long)st->set.counts.requests)
                         : k25_error_set(err, K25_EINVAL, o->dataset, 0, NULL, "the gold set has no request");
    if ((rc = make_inputs(&st->set, o->dataset, o->endpoint ? NULL : st->cfg, &st->inputs, err)) != K25_OK)
        return rc;
    st->n_inputs = st->set.n;
    if (!(st->order = k25_loadgen_order(st->set.n, st->cfg->seed)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if (o->requests == 0 && o->duration_s == 0 && o->mode == K25_BENCH_OPEN && o->arrivals == K25_ARR_TRACE) {
        int64_t *t = NULL; /* default: every arrival of the trace (checked here, before anything runs) */
        size_t n = 0;
        if ((rc = k25_arrivals_trace(o->trace_file, 0, &t, &n, err)) != K25_OK)
            return rc;
        free(t);
        o->requests = (int64_t)n;
    }
    if (o->requests == 0 && o->duration_s == 0)
        o->requests = (int64_t)st->set.n; /* default: one pass over the selection */
    return apply_trace_shapes(st, err);
}

/* The trace and the JSON summary created under temporary names: an unwritable path fails before anything is measured. */
static int create_outputs(struct bench_state *st, struct k25_error *err)
{
    const struct k25_bench_opts *o = &st->o;
    int rc;
    if ((rc = k25_h5_create(&st->h5, o->out, "run", err)) != K25_OK)
        return rc;
    st->h5_open = true;
    if (o->json_out) {
        snprintf(st->jtmp, sizeof(st->jtmp), "%s.tmp.%ld", o->json_out, (long)getpid());
        if (!(st->jf = fopen(st->jtmp, "w")))
            return k25_error_set(err, K25_EIO, o->json_out, 0, "--json", "cannot create the JSON summary: %s",
                                 strerror(errno));
        /* a first write now: a full disk fails here, not after the run */
        if (fputs("{}\n", st->jf) == EOF || fflush(st->jf) != 0)
            return k25_error_set(err, K25_EIO, o->json_out, 0, "--json", "cannot write the JSON summary: %s",
                                 strerror(errno));
    }
    return K25_OK;
}

/* The endpoint opened, or the model loaded and its engine created; then every input checked against the vocabulary. */
static int open_target(struct bench_state *st, struct k25_error *err)
{
    const struct k25_bench_opts *o = &st->o;
    int rc;
    if (o->endpoint) {
        if ((rc = k25_endpoint_open(o, st->inputs, st->n_inputs, &st->ep, err)) != K25_OK)
            return rc;
    } else {
        if ((rc = k25_model_load(st->cfg, &st->model, err)) != K25_OK ||
            (rc = k25_engine_create(st->cfg, st->model, &st->eng, err)) != K25_OK)
            return rc;
        k25_testknob_install(st->eng);
    }
    int vocab = st->model ? k25_model_get_shape(st->model)->vocab_size : INT32_MAX; /* a server checks its own */
    for (size_t i = 0; i < st->n_inputs; i++) {
        const struct k25_bench_input *in = &st->inputs[i];
        if (in->n_ids == 0)
            return k25_error_set(err, K25_EINVAL, o->dataset, (int)in->line, "input",
                                 "request '%s' has an empty input", in->id);
        for (int t = 0; t < in->n_ids; t++)
            if (in->ids[t] < 0 || in->ids[t] >= vocab)
                return k25_error_set(err, K25_EINVAL, o->dataset, (int)in->line, "input_ids",
                                     "request '%s': token %d is %d, outside the model's vocabulary [0, %d)", in->id,
                                     t, in->ids[t], vocab);
    }
    return K25_OK;
}

/*
 * The load guard into provenance's machine, sampled before the run's own
 * threads load the machine; a sweep samples it once before its first point
 * and tells its runs so (K25_LOAD_GUARD=0).
 */
static void note_load_guard(json_t *prov)
{
    json_t *mach = json_object_get(prov, "machine");
    const char *lg_env = getenv("K25_LOAD_GUARD");
    if (lg_env && !strcmp(lg_env, "0")) {
        json_object_set_new(mach, "load_guard", json_pack("{s:s}", "sampled_by", "the sweep (summary.json)"));
        return;
    }
    struct k25_load_guard lg;
    if (k25_load_guard_sample(&lg) == K25_OK) {
        json_object_set_new(mach, "load_guard", k25_load_guard_json(&lg));
        if (lg.busy)
            fprintf(stderr, "k25 bench: WARNING: the machine was already busy before the run (%s): timings "
                            "include interference\n", lg.reason);
    }
}

/*
 * The warm-up and the repetitions, between two calibrations, then the
 * memory and engine totals of the measured part.  Interrupted, keeps the
 * finished requests (fails only when none finished).
 */
static int measure_reps(struct bench_state *st, struct k25_error *err)
{
    const struct k25_bench_opts *o = &st->o;
    struct k25_bench_run *run = &st->run;
    int rc;
    struct k25_calib calib = {0};
    k25_calib_measure(&calib, 5); /* machine speed now, for k25 gate (docs/gates.md) */
    if (o->warmup > 0 && (rc = run_rep(st->eng, st->ep, o, st->cfg, st->inputs, st->n_inputs, st->order, 0, o->warmup, 0,
                                       false, run, err)) != K25_OK) {
        if (run->interrupted)
            k25_error_set(err, K25_EIO, NULL, 0, NULL, "interrupted by %s during the warm-up: nothing measured, "
                          "nothing written", stop_signal_name(st));
        return rc;
    }
    k25_mem_reset_peak();
    if (o->progress != K25_PROGRESS_OFF) {
        k25_progress_begin(&st->prog, o->progress, "k25 bench", "requests", o->requests * o->repeat,
                           o->duration_s * o->repeat);
        st->o.prog = &st->prog;
    }
    if ((rc = k25_gputel_start(&st->gpu, err)) != K25_OK)
        return rc;
    if (o->server_metrics && st->ep) {
        const char *url = strcmp(o->server_metrics, "auto") ? o->server_metrics : k25_endpoint_metrics_url(st->ep);
        if ((rc = k25_srvmet_start(url, o->api_key, K25_SERVER_METRICS_PERIOD_S, &st->srvmet, err)) != K25_OK)
            return rc;
    }
    struct k25_engine_stats st0; /* the engine's counters before the measurement: run totals are after - before */
    if (st->eng)
        k25_engine_get_stats(st->eng, &st0);
    for (int k = 0; k < o->repeat && !run->interrupted; k++) {
        int64_t rep_start = k > 0 ? (int64_t)(k25_now_ns() - run->t0_ns) : 0; /* rep 0 sets t0 */
        if ((rc = run_rep(st->eng, st->ep, o, st->cfg, st->inputs, st->n_inputs, st->order, (size_t)o->warmup,
                          o->requests, k, true, run, err)) != K25_OK) {
            if (!run->interrupted)
                return rc;
            /* keep what was measured: the finished requests, marked interrupted */
            st->n_dropped = close_interrupted(run, k, rep_start);
            if (run->n_reqs == 0)
                return k25_error_set(err, K25_EIO, NULL, 0, NULL,
                                     "interrupted by %s before any request finished: nothing written",
                                     stop_signal_name(st));
        }
    }
    k25_progress_end(o->prog, (int64_t)run->n_reqs, "%s", run->interrupted ? "interrupted" : "measured");
    k25_srvmet_stop(st->srvmet);
    k25_gputel_stop(st->gpu);
    k25_calib_measure(&calib, 5);
    json_object_set_new(st->prov, "calibration", k25_calib_json(&calib));
    double spread = k25_calib_spread(&calib);
    if (isfinite(spread) && spread > K25_CALIB_MAX_SPREAD)
        fprintf(stderr, "k25 bench: WARNING: the calibration spread by %.0f%% (> %.0f%%): the machine's speed "
                        "changed during the run; k25 gate will not normalize by it\n",
                100 * spread, 100 * K25_CALIB_MAX_SPREAD);
    k25_mem_get(&run->mem);
    if (st->eng) {
        struct k25_engine_stats after;
        k25_engine_get_stats(st->eng, &after);
        run->kv_blocks_peak = after.kv_blocks_peak;
        k25_bench_engine_totals_diff(&st0, &after, st->cfg->kv_hot_tokens > 0, &run->eng);
    }
    run->warmup_done = o->warmup;
    return K25_OK;
}

/* The summary, the optional percentile table, and the open-loop check of what was measured. */
static int summarize(struct bench_state *st, struct k25_error *err)
{
    struct k25_bench_opts *o = &st->o;
    struct k25_bench_summary *sum = st->sum;
    int rc;
    if ((rc = k25_bench_summarize_method(&st->run, &o->slo, o->pctl_method, sum, err)) != K25_OK)
        return rc;
    sum->pctl_method = o->pctl_method;
    sum->client_view = o->endpoint != NULL;
    if (sum->client_view) /* the server's steps are not visible: no overhead split (null, not 0) */
        sum->overhead_per_request_us = sum->overhead_per_token_us = NAN;
    if (o->pctl_table) {
        o->pctl.method = o->pctl_method;
        if (!(st->pctl = malloc(sizeof(*st->pctl))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        if ((rc = k25_bench_percentiles(&st->run, &o->pctl, st->pctl, err)) != K25_OK)
            return rc;
    }
    sum->offered_rps = NAN;
    if (o->mode == K25_BENCH_OPEN) {
        k25_bench_open_loop_check(sum, o->rate_rps);
        if (sum->fell_behind)
            fprintf(stderr,
                    "k25 bench: WARNING: open loop fell behind: offered %.3f req/s, served %.3f req/s, queue P50 "
                    "%.0f ms of E2E P50 %.0f ms: this run measured the queue, not the engine (lower --rate)\n",
                    sum->offered_rps, sum->achieved_rps, sum->d[K25_M_QUEUE].p[0].value,
                    sum->d[K25_M_E2E].p[0].value);
    }
    return K25_OK;
}

/*
 * Fidelity after the measurement, on its own engines: it never perturbs the
 * timings (not after an interruption: the user asked to stop).  --fidelity:
 * the configured engine against the exact one, and its degraded model
 * against its full one when the run degraded requests or could (the breaker
 * on); --fidelity-degraded: the degraded model whatever the breaker, alone
 * when --fidelity is not given (the degraded model needs no breaker to run:
 * k25_request.force_degraded).
 */
static int measure_fidelity(struct bench_state *st, struct k25_error *err)
{
    struct k25_bench_opts *o = &st->o;
    const struct k25_config *cfg = st->cfg;
    int rc;
    if (st->run.interrupted)
        o->fidelity = o->fidelity_degraded = false;
    if (!o->fidelity && !o->fidelity_degraded)
        return K25_OK;
    if (o->fidelity) {
        if (o->progress != K25_PROGRESS_OFF)
            fprintf(stderr, "k25 bench: measuring fidelity on %zu requests x %d tokens\n", st->n_inputs,
                    o->fidelity_tokens);
        if ((rc = k25_fidelity_measure(cfg, st->model, st->inputs, st->n_inputs, o->fidelity_tokens, &st->fid, err)) !=
            K25_OK)
            return rc;
    }
    if (o->fidelity_degraded || st->sum->n_degraded > 0 || cfg->breaker_enabled) {
        if (o->progress != K25_PROGRESS_OFF)
            fprintf(stderr, "k25 bench: measuring the degraded model's fidelity\n");
        if ((rc = k25_fidelity_measure_degraded(cfg, st->model, st->inputs, st->n_inputs, o->fidelity_tokens,
                                                &st->fid.degraded, err)) != K25_OK)
            return rc;
        int L = k25_model_get_shape(st->model)->n_layers, d = (int)ceil(cfg->degraded_layer_fraction * L - 1e-9);
        st->fid.degraded_layers = d < 1 ? 1 : d > L ? L : d; /* the engine's rounding (engine.c) */
    }
    return K25_OK;
}

/* The endpoint's part of the summary; warns once per kind of failure (the run itself succeeded). */
/*
 * summary.queue_waiting (the report's queue-depth health check): requests waiting in the server's queue,
 * {max, mean, n, source}: the in-process engine's sampled /timeline windows, or an endpoint's own gauge
 * (--server-metrics; vLLM's num_requests_waiting, ...).  Null with the reason where nothing says it.
 */
static json_t *queue_waiting_json(const struct bench_state *st)
{
    if (st->ep) {
        const json_t *w = NULL;
        json_t *sm = st->srvmet ? k25_srvmet_summary_json(st->srvmet) : NULL;
        if (sm)
            w = json_object_get(sm, "n_waiting");
        json_t *o = json_is_object(w) ? json_pack("{s:O, s:O, s:O, s:s}", "max", json_object_get(w, "max"), "mean",
                                                  json_object_get(w, "mean"), "n", json_object_get(w, "n"),
                                                  "source", "server_metrics")
                                      : json_pack("{s:n, s:n, s:s}", "max", "mean", "reason",
                                                  sm ? "the server's metrics expose no queue depth k25 knows"
                                                     : "the server's queue is " K25_NOT_VISIBLE
                                                       " (--server-metrics scrapes it)");
        json_decref(sm);
        return o;
    }
    const struct k25_bench_run *run = &st->run;
    double sum = 0;
    int32_t mx = 0;
    size_t n = 0;
    for (size_t k = 0; k < run->n_win; k++) {
        if (run->win[k].n_waiting < 0) /* not sampled */
            continue;
        mx = n == 0 || run->win[k].n_waiting > mx ? run->win[k].n_waiting : mx;
        sum += run->win[k].n_waiting;
        n++;
    }
    if (!n)
        return json_pack("{s:n, s:n, s:s}", "max", "mean", "reason", "no timeline window was sampled");
    return json_pack("{s:i, s:f, s:I, s:s}", "max", mx, "mean", sum / (double)n, "n", (json_int_t)n, "source",
                     "timeline");
}

static json_t *endpoint_summary(const struct k25_bench_run *run)
{
    json_t *es = k25_endpoint_summary_json(run);
    json_int_t n_failed = json_integer_value(json_object_get(es, "failed"));
    if (n_failed > 0) {
        fprintf(stderr, "k25 bench: WARNING: %lld of %zu requests failed:", (long long)n_failed, run->n_reqs);
        const char *kind;
        json_t *v;
        json_object_foreach(json_object_get(es, "failed_by_reason"), kind, v)
            fprintf(stderr, " %lld x %s;", (long long)json_integer_value(v), kind);
        fprintf(stderr, " reasons per request in the trace (/requests reason)\n");
    }
    json_t *pc = json_object_get(es, "prompt_tokens_check"), *mm = json_object_get(pc, "first_mismatch");
    if (pc && json_integer_value(json_object_get(pc, "mismatches")) > 0)
        fprintf(stderr, "k25 bench: WARNING: the server counted %lld of %lld prompts differently from --tokenizer "
                "(first: '%s', gold line %lld: %lld here, %lld in its usage.prompt_tokens): another tokenizer or "
                "chat template?\n", (long long)json_integer_value(json_object_get(pc, "mismatches")),
                (long long)json_integer_value(json_object_get(pc, "requests_counted")),
                json_string_value(json_object_get(mm, "id")), (long long)json_integer_value(json_object_get(mm, "line")),
                (long long)json_integer_value(json_object_get(mm, "client_prompt_tokens")),
                (long long)json_integer_value(json_object_get(mm, "server_prompt_tokens")));
    return es;
}

/* An endpoint run's own settings (the client's, not the server's): what shaped the load it sent. */
static json_t *client_settings(const struct k25_bench_opts *o, const struct k25_config *cfg)
{
    return json_pack("{s:I, s:i, s:s, s:f, s:f, s:b, s:s}", "seed", (json_int_t)cfg->seed, "threads",
                     k25_get_threads(), "endpoint_type", o->endpoint_chat ? "chat" : "completions",
                     "stall_timeout_s", o->stall_timeout_s, "request_timeout_s", o->request_timeout_s, "api_key_sent",
                     o->api_key != NULL, "note",
                     "seed orders the requests and draws the arrival schedule; threads are the client's");
}

/* The JSON summary document (st->doc) and the compact strings the trace's /meta stores. */
static int build_doc(struct bench_state *st, struct k25_error *err)
{
    const struct k25_bench_opts *o = &st->o;
    const struct k25_bench_run *run = &st->run;
    json_t *prov = st->prov;
    k25_provenance_finish(prov);
    /* what was measured: the in-process engine, or a server (its model list and response headers) */
    json_object_set_new(prov, "target", json_string(st->ep ? "endpoint" : "engine"));
    if (st->ep) {
        json_object_set_new(prov, "endpoint", k25_endpoint_provenance(st->ep));
        /* the run's config is what the server was sent; the engine keys the client never sent are
         * absent (the server's own settings are not visible from here); the client's settings apart */
        json_object_set_new(prov, "config", k25_endpoint_sent_config(st->ep, o));
        json_object_set_new(prov, "client", client_settings(o, st->cfg));
    }
    json_t *wl = k25_bench_workload_json(o, st->cfg->seed, st->set.n), *sj = k25_bench_summary_json(st->sum);
    if (wl && st->trace_shapes) /* the requests the trace shaped (apply_trace_shapes) */
        json_object_set(wl, "trace_shapes", st->trace_shapes);
    json_t *doc = st->doc = json_object();
    if (!wl || !sj || !doc) {
        json_decref(wl);
        json_decref(sj);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    json_object_set_new(doc, "schema_version", json_integer(K25_H5_SCHEMA_VERSION));
    json_object_set_new(doc, "kind", json_string("k25-bench"));
    json_object_set_new(doc, "trace", json_string(o->out));
    json_object_set_new(doc, "interrupted", json_boolean(run->interrupted));
    if (run->interrupted)
        json_object_set_new(doc, "interruption",
                            json_pack("{s:s, s:I, s:I, s:i}", "signal", stop_signal_name(st), "requests_kept",
                                      (json_int_t)run->n_reqs, "requests_in_flight_dropped",
                                      (json_int_t)st->n_dropped, "repetitions_started", run->n_reps));
    json_object_set_new(doc, "workload", wl);
    if (o->fidelity) {
        json_object_set_new(sj, "fidelity", k25_fidelity_json(&st->fid));
    } else if (o->fidelity_degraded) { /* the degraded model alone: .fidelity holds only .degraded */
        json_t *all = k25_fidelity_json(&st->fid), *only = json_object();
        json_object_set(only, "degraded", json_object_get(all, "degraded"));
        json_object_set_new(sj, "fidelity", only);
        json_decref(all);
    }
    if (st->pctl)
        json_object_set_new(sj, "percentiles", k25_pctl_table_json(st->pctl));
    json_object_set_new(sj, "target", json_string(st->ep ? "endpoint" : "engine"));
    if (st->ep)
        json_object_set_new(sj, "endpoint", endpoint_summary(run));
    if (st->gpu) { /* GPU telemetry: the summary's figures, provenance at start and end */
        char warn[256];
        json_t *gs = k25_gputel_summary_json(st->gpu, warn, sizeof(warn));
        json_object_set(sj, "gpu_utilization_p95", json_object_get(gs, "gpu_utilization_p95"));
        json_object_set_new(sj, "gpu", gs);
        json_object_set_new(json_object_get(prov, "machine"), "gpu_nvml", k25_gputel_provenance(st->gpu));
        if (warn[0])
            fprintf(stderr, "k25 bench: WARNING: %s: GPU timings may not compare\n", warn);
    }
    if (st->srvmet) { /* the server's own figures; the report's health checks read kv_usage_ratio */
        json_t *sm = k25_srvmet_summary_json(st->srvmet);
        const char *note = json_string_value(json_object_get(sm, "note"));
        if (note)
            fprintf(stderr, "k25 bench: note: %s\n", note);
        if (json_is_object(json_object_get(sm, "kv_usage_ratio")))
            json_object_set(sj, "kv_usage_ratio", json_object_get(sm, "kv_usage_ratio"));
        /* no GPU seen here, but the server's own (k25 serve's NVML gauges, another host): its P95 */
        size_t ng = 0;
        double gp = k25_srvmet_gauge_p95(st->srvmet, "k25_gpu_utilization_ratio", &ng);
        json_t *g = json_object_get(sj, "gpu");
        if (ng > 0 && !json_is_number(json_object_get(sj, "gpu_utilization_p95")) && g) {
            json_object_set_new(sj, "gpu_utilization_p95", json_real(gp));
            json_object_set_new(g, "gpu_utilization_p95", json_real(gp));
            json_object_set_new(g, "source", json_string("server_metrics: k25_gpu_utilization_ratio"));
            json_object_set_new(g, "samples", json_integer((json_int_t)ng));
            json_object_set_new(g, "client_reason", json_incref(json_object_get(g, "reason")));
            json_object_del(g, "reason");
        }
        json_object_set_new(sj, "server_metrics", sm);
    }
    json_object_set_new(sj, "queue_waiting", queue_waiting_json(st));
    json_object_set_new(doc, "summary", sj);
    json_object_set_new(doc, "provenance", json_incref(prov));
    if (o->vllm_result) { /* --save-result: vLLM's names beside ours, for scripts written for vllm bench serve */
        json_t *v = k25_bench_vllm_fields(run, st->sum, o);
        if (!v)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        json_object_set_new(v, "backend", json_string(st->ep ? (o->endpoint_chat ? "openai-chat" : "openai") : "k25"));
        json_object_set_new(v, "model_id", json_string(st->ep ? json_string_value(json_object_get(
                                                                    json_object_get(prov, "config"), "model"))
                                                              : st->cfg->model));
        json_object_update_missing(doc, v);
        json_decref(v);
    }
    /* wl and sj stay alive inside doc */
    st->prov_s = json_dumps(prov, JSON_COMPACT);
    st->cfg_s = json_dumps(json_object_get(prov, "config"), JSON_COMPACT);
    st->wl_s = json_dumps(wl, JSON_COMPACT);
    st->sum_s = json_dumps(sj, JSON_COMPACT);
    if (!st->prov_s || !st->cfg_s || !st->wl_s || !st->sum_s)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    return K25_OK;
}

/*
 * The results committed as one: fidelity and /meta into the trace, the CSV,
 * the trace, then the JSON summary.  A later failure removes the files
 * already committed, so no trace or CSV is left without its summary.
 */
static int write_outputs(struct bench_state *st, struct k25_error *err)
{
    const struct k25_bench_opts *o = &st->o;
    int rc;
    if ((o->fidelity || o->fidelity_degraded) && (rc = k25_trace_write_fidelity(&st->h5, &st->fid, err)) != K25_OK)
        return rc;
    if ((rc = k25_h5_attr_i64(st->h5.meta, "interrupted", st->run.interrupted ? 1 : 0, err)) != K25_OK)
        return rc;
    /* the CSV before the trace is committed: a failed CSV leaves neither (csv.c leaves no partial file) */
    if (o->csv_out && (rc = k25_bench_csv_write(o->csv_out, &st->run, &o->slo, err)) != K25_OK)
        return rc;
    if (st->srvmet && (rc = k25_srvmet_write(st->srvmet, &st->h5, st->run.t0_ns, err)) != K25_OK)
        return rc;
    if (st->gpu && (rc = k25_gputel_write(st->gpu, &st->h5, st->run.t0_ns, err)) != K25_OK)
        return rc;
    st->h5_open = false; /* k25_trace_write commits or aborts */
    if ((rc = k25_trace_write(&st->h5, &st->run, st->sum, st->prov_s, st->cfg_s, st->wl_s, st->sum_s, err)) !=
        K25_OK) {
        if (o->csv_out)
            unlink(o->csv_out);
        return rc;
    }
    if (st->jf) {
        FILE *f = st->jf;
        st->jf = NULL;
        if ((rc = write_json_file(f, st->jtmp, o->json_out, st->doc, err)) != K25_OK) {
            unlink(o->out); /* the results are one: no trace or CSV without their summary */
            if (o->csv_out)
                unlink(o->csv_out);
            return rc;
        }
    }
    return K25_OK;
}

/* The human-readable report: interruption, summary, percentile table, fidelity. */
static void print_report(const struct bench_state *st, FILE *report)
{
    const struct k25_fidelity *fid = &st->fid;
    if (st->run.interrupted)
        fprintf(report, "INTERRUPTED by %s: %zu finished requests kept, %zu in flight dropped\n",
                stop_signal_name(st), st->run.n_reqs, st->n_dropped);
    k25_bench_summary_print(report, st->sum);
    if (st->pctl) {
        fputc('\n', report);
        k25_pctl_table_print(report, st->pctl);
    }
    if (st->o.fidelity)
        fprintf(report,
                "fidelity (%lld requests x %d tokens vs exact fp32 r=1 one-pass): KL mean %.3g p99.9 %.3g max %.3g, "
                "top-1 agreement %.3f, top-prob RMS %.3g, token agreement %.3f, attention rel. error %.3g\n",
                (long long)fid->n_requests, fid->tokens, fid->kl_mean, fid->kl_p999, fid->kl_max, fid->top1_agreement,
                fid->top_prob_rms, fid->token_agreement, fid->attn_rel_err);
    if (fid->degraded)
        fprintf(report,
                "degraded-model fidelity (%d of %d layers vs the full model, %lld requests x %d tokens): KL mean "
                "%.3g p99.9 %.3g max %.3g, top-1 agreement %.3f, top-prob RMS %.3g, token agreement %.3f\n",
                fid->degraded_layers, st->model ? k25_model_get_shape(st->model)->n_layers : 0,
                (long long)fid->degraded->n_requests, fid->degraded->tokens, fid->degraded->kl_mean,
                fid->degraded->kl_p999, fid->degraded->kl_max, fid->degraded->top1_agreement,
                fid->degraded->top_prob_rms, fid->degraded->token_agreement);
}

/* The steps in the order the file's header gives; bench_state_free undoes whatever was done. */
int k25_bench_measure(const struct k25_bench_opts *opts, const struct k25_config *cfg, FILE *report,
                      struct k25_bench_summary *summary_out, struct k25_error *err)
{
    int rc;
    struct bench_state st = {.o = *opts, .cfg = cfg, .h5 = {.file = H5I_INVALID_HID, .meta = H5I_INVALID_HID}};
    st.run.stall_start_ns = st.run.stall_end_ns = -1;
    if (!(st.sum = calloc(1, sizeof(*st.sum))))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");

    if ((rc = check_opts(&st.o, err)) != K25_OK || (rc = k25_testknob_hold_check(err)) != K25_OK ||
        (rc = k25_config_validate(cfg, err)) != K25_OK ||
        (rc = load_gold(&st, err)) != K25_OK || (rc = create_outputs(&st, err)) != K25_OK ||
        (rc = open_target(&st, err)) != K25_OK)
        goto out;
    if (!(st.prov = k25_provenance_collect(cfg, st.o.dataset, st.set.sha256, st.o.filter, st.o.cmdline))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    note_load_guard(st.prov);
    /* TEST-ONLY, off unless K25_TEST_HOLD is set: before the measurement, or after N requests (loadgen.c) */
    if (st.ep && k25_testknob_hold_at() > 0) {
        rc = k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "K25_TEST_HOLD",
                           "a hold after N requests (@N) needs the in-process engine, not --endpoint");
        goto out;
    }
    if (k25_testknob_hold_at() == 0 && (rc = k25_testknob_hold(st.o.stop, err)) != K25_OK)
        goto out;
    {
        char nw[512];
        json_decref(k25_provenance_numa(k25_get_threads(), nw, sizeof(nw)));
        if (nw[0] && !st.ep) /* the engine's threads (an endpoint run's are the client's) */
            fprintf(stderr, "k25 bench: WARNING: %s\n", nw);
    }
    if ((rc = measure_reps(&st, err)) != K25_OK || (rc = summarize(&st, err)) != K25_OK ||
        (rc = measure_fidelity(&st, err)) != K25_OK || (rc = build_doc(&st, err)) != K25_OK ||
        (rc = write_outputs(&st, err)) != K25_OK)
        goto out;
    if (report)
        print_report(&st, report);
    if (summary_out)
        *summary_out = *st.sum;

out:
    bench_state_free(&st);
    return rc;
}
