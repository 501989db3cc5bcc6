/*
 * cli_gold.c - `k25 gold`: validate, select from and generate JSONL gold
 * sets.  Argument parsing and printing only; the work is in datasets/
 * (gold.h), where tests call it without a process.
 *
 * Exit status: 0 success (a set with invalid lines counts as success only
 * under --on-error skip), 2 invalid set or bad arguments, 1 I/O or other
 * failure.
 */
#include "cli.h"
#include "harness.h"
#include "gold.h"
#include "cliopt.h"
#include "k25_tok.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_WARNINGS_SHOWN 20
#define MAX_JSON_ERRORS 1000

static const char usage_top[] =
    "usage: k25 gold COMMAND [ARGS...]   (k25 gold COMMAND --help for each)\n"
    "\n"
    "Gold sets are JSONL files, one request a line (docs/gold-sets.md).\n"
    "\n"
    "commands:\n"
    "  validate FILE     check every line, print statistics (text or --json)\n"
    "  select FILE       write the valid requests a --filter selects, sanitized, as JSONL\n"
    "  generate          write a deterministic set of long documents (--tokenizer DIR: exact token lengths)\n"
    "  tokenize          --tokenizer DIR IN OUT: text requests rewritten with input_ids of DIR's tokenizer\n"
    "  import            --sharegpt FILE: ShareGPT conversations as requests\n";

struct read_args {
    struct k25_gold_opts opts;
    const char *file;
    const char *filter_expr;
    const char *out;
    const char *tokenizer; /* validate --tokenizer DIR */
    bool json, quiet, help;
    k25_gold_filter_t *filter;
};

/* Diagnostics sink: prints errors, caps warnings, collects errors for --json. */
struct diag_sink {
    bool quiet;
    bool skip;
    int64_t warnings_shown, warnings_hidden;
    json_t *errors; /* NULL unless --json */
};

static void print_diag(void *user, enum k25_gold_severity sev, const struct k25_error *e)
{
    struct diag_sink *d = user;
    if (sev == K25_GOLD_WARNING) {
        if (d->quiet)
            return;
        if (d->warnings_shown >= MAX_WARNINGS_SHOWN) {
            d->warnings_hidden++;
            return;
        }
        d->warnings_shown++;
        /* "FILE:LINE: warning: field 'x': ..." */
        char prefix[300];
        int n = snprintf(prefix, sizeof(prefix), "%s:%d: ", e->file, e->line);
        if (n > 0 && !strncmp(e->msg, prefix, (size_t)n))
            fprintf(stderr, "%swarning: %s\n", prefix, e->msg + n);
        else
            fprintf(stderr, "warning: %s\n", e->msg);
        return;
    }
    fprintf(stderr, "%s%s\n", e->msg, d->skip ? " (line skipped)" : "");
    if (d->errors && json_array_size(d->errors) < MAX_JSON_ERRORS)
        json_array_append_new(d->errors, json_pack("{s:i,s:s,s:s}", "line", e->line, "field", e->field,
                                                   "message", e->msg));
}

/* ------------------------------------------------- option callbacks */

static int opt_sanitize(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_gold_sanitize_parse(v, dest, err) < 0 ? K25_EINVAL : 0;
}

static int opt_on_error(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_gold_on_error_parse(v, dest, err) < 0 ? K25_EINVAL : 0;
}

/* --max-line-bytes: a size (k/m suffixes), at least 2 bytes. */
static int opt_line_bytes(void *dest, const char *name, const char *v, struct k25_error *err)
{
    int64_t n;
    if (!k25_gold_parse_size(v, &n) || n < 2)
        return k25_cliopt_error(err, K25_EINVAL, name, "bad size '%s' (bytes, k/m suffixes; at least 2)", v);
    *(size_t *)dest = (size_t)n;
    return 0;
}

static int opt_domain(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_gold_domain_parse(v, dest, err) < 0 ? K25_EINVAL : 0;
}

static int opt_lengths(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_gold_parse_lengths(v, dest, err) < 0 ? K25_EINVAL : 0;
}

static int opt_output_length(void *dest, const char *name, const char *v, struct k25_error *err)
{
    (void)name;
    return k25_gold_parse_output_length(v, dest, err) < 0 ? K25_EINVAL : 0;
}

/* --count: a size (k/m suffixes), at least 1. */
static int opt_count(void *dest, const char *name, const char *v, struct k25_error *err)
{
    if (!k25_gold_parse_size(v, dest) || *(int64_t *)dest < 1)
        return k25_cliopt_error(err, K25_EINVAL, name, "bad count '%s'", v);
    return 0;
}

/* --seed: any unsigned 64-bit number (decimal, or 0x hex). */
static int opt_seed(void *dest, const char *name, const char *v, struct k25_error *err)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 0);
    if (errno || *end || !*v || *v == '-')
        return k25_cliopt_error(err, K25_EINVAL, name, "bad seed '%s'", v);
    *(uint64_t *)dest = x;
    return 0;
}

/*
 * Parses FILE and the options shared by validate and select.  Returns 0,
 * or the exit status to return (2 on bad arguments); a->help when --help
 * was printed.
 */
static int parse_read_args(int argc, char **argv, struct read_args *a, bool validate)
{
    memset(a, 0, sizeof(*a));
    k25_gold_opts_init(&a->opts);
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--json"}, .type = validate ? K25_OPT_FLAG : K25_OPT_END, .dest = &a->json,
         .help = "statistics as JSON on stdout (for jq), errors included"},
        {.names = {"--sanitize"}, .type = K25_OPT_CALL, .dest = &a->opts.sanitize, .parse = opt_sanitize,
         .metavar = "POLICY", .deflt = "strip",
         .help = "invisible/control characters in text and prompt:\n"
                 "strip (removed, counted), reject (line is an error), keep"},
        {.names = {"--on-error"}, .type = K25_OPT_CALL, .dest = &a->opts.on_error, .parse = opt_on_error,
         .metavar = "POLICY", .deflt = "abort",
         .help = "abort (any invalid line fails the set, exit 2)\n"
                 "or skip (invalid lines listed, skipped and counted)"},
        {.names = {"--filter"}, .type = K25_OPT_STRING, .dest = &a->filter_expr, .metavar = "EXPR",
         .help = "select requests, e.g. 'output_length > 1800 && domain == \"legal\"'\n"
                 "fields input_length output_length domain id; == != < <= > >=; && || ! ( )"},
        {.names = {"--max-line-bytes"}, .type = K25_OPT_CALL, .dest = &a->opts.max_line_bytes,
         .parse = opt_line_bytes, .metavar = "N", .deflt = "64m",
         .help = "longest line accepted (k/m suffixes); a line with no\n"
                 "end after 16 x N bytes (/dev/zero, a binary file) stops the reading"},
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &a->quiet,
         .help = "do not print warnings (errors are always printed)"},
        {.names = {"--tokenizer"}, .type = validate ? K25_OPT_PATH : K25_OPT_END, .dest = &a->tokenizer,
         .metavar = "DIR", .help = "also count every request's input in tokens of DIR's tokenizer.json\n"
                                   "(BOS template; input_ids lines: their length)"},
        {.names = {"--out"}, .type = validate ? K25_OPT_END : K25_OPT_PATH, .dest = &a->out,
         .deflt = "stdout", .help = "output file, written to a temporary name and renamed when complete"},
        {.type = K25_OPT_END},
    };
    /* validate: --json, no --out; select: --out, no --json (an END entry ends the table early) */
    struct k25_opt table[sizeof(opts) / sizeof(opts[0])];
    int n = 0;
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]) - 1; i++)
        if (opts[i].type != K25_OPT_END)
            table[n++] = opts[i];
    table[n] = opts[sizeof(opts) / sizeof(opts[0]) - 1];
    const struct k25_cliopt_cmd cmd = {
        .name = validate ? "gold validate" : "gold select",
        .usage = validate ? "gold validate FILE [--json] [--sanitize strip|reject|keep] [--on-error abort|skip]\n"
                            "                         [--filter EXPR] [--max-line-bytes N] [--quiet] [--tokenizer DIR]"
                          : "gold select FILE [--filter EXPR] [--out FILE] [--sanitize ...] [--on-error ...]",
        .about = validate ? "Checks every line of FILE and reports each problem as FILE:LINE: field 'x': what is wrong\n"
                            "(on stderr), then prints statistics: lines, requests, input/output tokens (bytes for the\n"
                            "byte tokenizer, or ids) with percentiles, domains, sanitized characters, SHA-256.\n"
                          : "Writes the valid requests that EXPR selects, sanitized by the policy, as JSONL to stdout\n"
                            "or to --out FILE (written to a temporary name and renamed when complete).\n",
        .opts = table,
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP) {
        a->help = true;
        return 0;
    }
    if (prc != K25_OK) {
        fprintf(stderr, "k25 gold %s: %s\n", argv[0], err.msg);
        return 2;
    }
    if (argc > 2) {
        fprintf(stderr, "k25 gold %s: one FILE only ('%s' is extra)\n", argv[0], argv[2]);
        return 2;
    }
    if (argc < 2) {
        fprintf(stderr, "k25 gold %s: FILE missing (--help for usage)\n", argv[0]);
        return 2;
    }
    a->file = argv[1];
    if (a->filter_expr) {
        int col = 0;
        if (k25_gold_filter_parse(a->filter_expr, &a->filter, &col, &err) < 0) {
            /* err.msg is "filter: column N: ..."; show the column under the expression */
            fprintf(stderr, "k25 gold: --%s\n  %s\n  %*s^\n", err.msg, a->filter_expr,
                    col > 0 ? col - 1 : 0, "");
            return 2;
        }
        a->opts.filter = a->filter;
    }
    return 0;
}

/* Exit status for a library status code. */
static int exit_for(int rc)
{
    if (rc == 0)
        return 0;
    return rc == K25_EFORMAT || rc == K25_EINVAL || rc == K25_ENOTFOUND || rc == K25_ERANGE ? 2 : 1;
}

/* ------------------------------------------------------------ validate */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/*
 * validate --tokenizer: every selected request's input counted in tokens of
 * DIR's tokenizer (as a server counts a prompt: BOS template; input_ids: their
 * length).  *out: {"source", "requests", "total", "min", "p50", "p90", "max"}.
 */
static int count_set_tokens(const struct read_args *a, json_t **out, struct k25_error *err)
{
    k25_tokenizer_t *tok = NULL;
    struct k25_gold_set set;
    memset(&set, 0, sizeof(set));
    int64_t *n = NULL;
    int rc = k25_tokenizer_load(a->tokenizer, &tok, err);
    if (rc != K25_OK)
        return rc;
    struct k25_gold_opts go = a->opts;
    go.diag = NULL; /* the validation above reported them */
    if ((rc = k25_gold_load(a->file, &go, &set, err)) != K25_OK)
        goto out;
    if (!(n = calloc(set.n ? set.n : 1, sizeof(*n)))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    int64_t total = 0;
    for (size_t i = 0; i < set.n; i++) {
        const struct k25_gold_request *g = &set.reqs[i];
        if (g->input_ids) {
            n[i] = (int64_t)g->n_input_ids;
        } else {
            char *text = NULL;
            size_t len = 0;
            int32_t *ids = NULL;
            int ni = 0;
            struct k25_error e;
            if ((rc = k25_gold_request_input(g, &text, &len, err)) != K25_OK)
                goto out;
            rc = k25_tokenizer_encode(tok, text, len, K25_TOK_ADD_SPECIAL, &ids, &ni, &e);
            free(text);
            free(ids);
            if (rc != K25_OK) {
                k25_error_set(err, rc, a->file, (int)g->line, "text", "request '%s': %s", g->id, e.msg);
                goto out;
            }
            n[i] = ni;
        }
        total += n[i];
    }
    qsort(n, set.n, sizeof(*n), cmp_i64);
    size_t k = set.n;
    *out = json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:I}", "source", k25_tokenizer_source(tok), "requests",
                     (json_int_t)k, "total", (json_int_t)total, "min", (json_int_t)(k ? n[0] : 0), "p50",
                     (json_int_t)(k ? n[(k - 1) / 2] : 0), "p90", (json_int_t)(k ? n[(k - 1) * 9 / 10] : 0), "max",
                     (json_int_t)(k ? n[k - 1] : 0));
out:
    free(n);
    k25_gold_set_free(&set);
    k25_tokenizer_destroy(tok);
    return rc;
}

static int cmd_validate(int argc, char **argv)
{
    struct read_args a;
    int st = parse_read_args(argc, argv, &a, true);
    if (a.help)
        return 0;
    if (st)
        return st;
    struct diag_sink sink = {.quiet = a.quiet,
                             .skip = a.opts.on_error == K25_GOLD_ON_ERROR_SKIP,
                             .errors = a.json ? json_array() : NULL};
    a.opts.diag = print_diag;
    a.opts.diag_user = &sink;
    struct k25_gold_stats stats;
    struct k25_error err;
    k25_error_clear(&err);
    int rc = k25_gold_validate(a.file, &a.opts, &stats, &err);
    if (sink.warnings_hidden)
        fprintf(stderr, "k25 gold: %lld more warnings not shown\n", (long long)sink.warnings_hidden);
    bool opened = rc == 0 || rc == K25_EFORMAT || stats.counts.bytes > 0;
    /* a set without any line to report on (an empty file): the error says it all */
    if (rc == K25_EFORMAT && stats.counts.requests == 0 && stats.counts.invalid_lines == 0)
        opened = false;
    if (rc < 0)
        fprintf(stderr, "k25 gold validate: %s\n", err.msg);
    json_t *tokens = NULL;
    if (rc == 0 && a.tokenizer && (rc = count_set_tokens(&a, &tokens, &err)) != 0)
        fprintf(stderr, "k25 gold validate: --tokenizer: %s\n", err.msg);
    if (opened && a.json) {
        char *txt = k25_gold_stats_to_json(&stats, &a.opts, a.filter_expr);
        json_error_t je;
        json_t *root = txt ? json_loads(txt, 0, &je) : NULL;
        free(txt);
        if (root && tokens)
            json_object_set(root, "tokenizer_tokens", tokens);
        if (root && sink.errors) {
            json_object_set(root, "error_list", sink.errors);
            json_object_set_new(root, "error_list_truncated",
                                json_boolean(stats.counts.errors > MAX_JSON_ERRORS));
        }
        char *out = root ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
        json_decref(root);
        if (!out || printf("%s\n", out) < 0 || fflush(stdout) != 0) {
            fprintf(stderr, "k25 gold validate: writing the JSON report failed\n");
            rc = rc ? rc : K25_EIO;
        }
        free(out);
    } else if (opened) {
        if (k25_gold_stats_print(stdout, &stats, &a.opts) < 0 ||
            (tokens && printf("tokens of %s: %lld requests, total %lld, min %lld, p50 %lld, p90 %lld, max %lld\n",
                              json_string_value(json_object_get(tokens, "source")),
                              (long long)json_integer_value(json_object_get(tokens, "requests")),
                              (long long)json_integer_value(json_object_get(tokens, "total")),
                              (long long)json_integer_value(json_object_get(tokens, "min")),
                              (long long)json_integer_value(json_object_get(tokens, "p50")),
                              (long long)json_integer_value(json_object_get(tokens, "p90")),
                              (long long)json_integer_value(json_object_get(tokens, "max"))) < 0)) {
            fprintf(stderr, "k25 gold validate: writing the report failed\n");
            rc = rc ? rc : K25_EIO;
        }
    }
    json_decref(tokens);
    json_decref(sink.errors);
    k25_gold_stats_free(&stats);
    k25_gold_filter_destroy(a.filter);
    return exit_for(rc);
}

/* -------------------------------------------------------------- select */

/* Opens --out's temporary file, or returns stdout.  NULL with *bad_path set
 * when --out cannot be an output file (a directory, a missing folder). */
static FILE *open_out(const char *out, char *tmp, size_t tmpsz, bool *bad_path)
{
    *bad_path = false;
    if (!out)
        return stdout;
    struct k25_error err;
    if (k25_output_file_check(out, "--out", &err) != K25_OK) {
        fprintf(stderr, "k25 gold: %s\n", err.msg);
        *bad_path = true;
        return NULL;
    }
    snprintf(tmp, tmpsz, "%s.tmp.%ld", out, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f)
        fprintf(stderr, "k25 gold: cannot create %s: %s\n", tmp, strerror(errno));
    return f;
}

/* Closes and renames the temporary file into place (removes it on failure). */
static int finish_out(FILE *f, const char *out, const char *tmp, bool ok)
{
    if (!out) {
        if (fflush(stdout) != 0) {
            fprintf(stderr, "k25 gold: writing stdout failed: %s\n", strerror(errno));
            return K25_EIO;
        }
        return ok ? 0 : K25_EIO;
    }
    struct k25_error err = {0};
    int rc = k25_atomic_finish(f, tmp, out, ok, &err); /* fsync, close, rename, fsync of the folder */
    if (rc != K25_OK && ok)
        fprintf(stderr, "k25 gold: %s\n", err.msg);
    return rc == K25_OK ? 0 : K25_EIO;
}

static int cmd_select(int argc, char **argv)
{
    struct read_args a;
    int st = parse_read_args(argc, argv, &a, false);
    if (a.help)
        return 0;
    if (st)
        return st;
    struct diag_sink sink = {.quiet = a.quiet, .skip = a.opts.on_error == K25_GOLD_ON_ERROR_SKIP};
    a.opts.diag = print_diag;
    a.opts.diag_user = &sink;
    struct k25_error err;
    k25_error_clear(&err);
    char tmp[1100];
    int rc = 0;
    k25_gold_reader_t *r = NULL;
    if ((rc = k25_gold_open(a.file, &a.opts, &r, &err)) < 0) {
        fprintf(stderr, "k25 gold select: %s\n", err.msg);
        goto out_filter;
    }
    bool bad_path;
    FILE *f = open_out(a.out, tmp, sizeof(tmp), &bad_path);
    if (!f) {
        rc = bad_path ? K25_EINVAL : K25_EIO;
        goto out_close;
    }
    struct k25_gold_request req;
    while ((rc = k25_gold_next(r, &req, &err)) == 1) {
        rc = k25_gold_request_write(f, &req, &err);
        k25_gold_request_free(&req);
        if (rc < 0)
            break;
    }
    if (rc < 0)
        fprintf(stderr, "k25 gold select: %s\n", err.msg);
    int frc = finish_out(f, a.out, tmp, rc == 0);
    if (rc == 0)
        rc = frc;
    const struct k25_gold_counts *c = k25_gold_reader_counts(r);
    if (rc == 0 && !a.quiet)
        fprintf(stderr, "k25 gold select: %lld of %lld requests selected (%lld invalid lines)\n",
                (long long)c->matched, (long long)c->requests, (long long)c->invalid_lines);
out_close:
    k25_gold_close(r);
out_filter:
    k25_gold_filter_destroy(a.filter);
    return exit_for(rc);
}

/* ------------------------------------------------------------ generate */

/* k25_gold_gen_opts.count_tokens with a model's tokenizer: the prompt as a server counts it (BOS template). */
static int count_with_tokenizer(void *ctx, const char *text, size_t len, int64_t *n_tokens, struct k25_error *err)
{
    int32_t *ids = NULL;
    int n = 0;
    int rc = k25_tokenizer_encode(ctx, text, len, K25_TOK_ADD_SPECIAL, &ids, &n, err);
    free(ids);
    *n_tokens = n;
    return rc;
}

static int cmd_generate(int argc, char **argv)
{
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    k25_error_clear(&err);
    const char *out = NULL, *licenses = NULL, *tokdir = NULL;
    bool quiet = false;
    const struct k25_opt opts[] = {
        {.names = {"--tokenizer"}, .type = K25_OPT_PATH, .dest = &tokdir, .metavar = "DIR",
         .deflt = "bytes",
         .help = "lengths in tokens of DIR's tokenizer.json (BOS template included), met exactly:\n"
                 "each request's whole input is that many tokens of that tokenizer"},
        {.names = {"--domain"}, .type = K25_OPT_CALL, .dest = &o.domain, .parse = opt_domain, .metavar = "D",
         .deflt = "mixed",
         .help = "legal: contracts with numbered articles, far references, appendix tables\n"
                 "finance: reports with tables and figures; minutes: meeting notes\n"
                 "licenses: real license text from --licenses-dir; mixed: all"},
        {.names = {"--lengths"}, .type = K25_OPT_CALL, .dest = &o, .parse = opt_lengths, .metavar = "LIST",
         .deflt = "4k", .help = "input lengths, k = 1024, m = 1024*1024"},
        {.names = {"--count"}, .type = K25_OPT_CALL, .dest = &o.count, .parse = opt_count, .metavar = "N",
         .deflt = "8", .help = "requests in total"},
        {.names = {"--questions"}, .type = K25_OPT_CALL, .dest = &o.questions, .parse = opt_count,
         .metavar = "Q", .deflt = "1",
         .help = "questions per document: each document's text, then one question per request, the\n"
                 "requests of a document sharing its prefix_id (prefix-caching workloads); --count counts requests"},
        {.names = {"--seed"}, .type = K25_OPT_CALL, .dest = &o.seed, .parse = opt_seed, .metavar = "S",
         .deflt = "1", .help = "RNG seed"},
        {.names = {"--output-length"}, .type = K25_OPT_CALL, .dest = &o, .parse = opt_output_length,
         .metavar = "N|A-B", .deflt = "64-512", .help = "expected_output_length, fixed or uniform in [A, B]"},
        {.names = {"--licenses-dir"}, .type = K25_OPT_PATH, .dest = &licenses, .metavar = "DIR",
         .deflt = K25_GOLD_LICENSES_DIR, .help = "license files for the licenses domain"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &out, .deflt = "stdout",
         .help = "output file, written to a temporary name and renamed"},
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no summary line on stderr"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "gold generate",
        .usage = "gold generate [--domain legal|finance|minutes|licenses|mixed] [--lengths 4k,32k,128k]\n"
                 "                         [--count N] [--questions Q] [--seed S] [--output-length N|MIN-MAX]\n"
                 "                         [--out FILE] [--tokenizer DIR]\n"
                 "                         [--licenses-dir DIR]",
        .about = "Writes N deterministic requests (same arguments, same bytes) as JSONL to stdout or --out.\n"
                 "Request i has input length lengths[i mod #lengths] tokens of the byte tokenizer (within 1%),\n"
                 "prompt included, or with --tokenizer DIR exactly that many tokens of DIR's tokenizer;\n"
                 "mixed turns through legal, finance, minutes, licenses so each length gets each.\n",
        .opts = opts,
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 gold generate: %s\n", err.msg);
        return 2;
    }
    if (argc > 1) {
        fprintf(stderr, "k25 gold generate: unknown argument '%s' (--help lists them)\n", argv[1]);
        return 2;
    }
    if (licenses)
        snprintf(o.licenses_dir, sizeof(o.licenses_dir), "%s", licenses);
    char tmp[1100];
    bool bad_path;
    FILE *f = open_out(out, tmp, sizeof(tmp), &bad_path);
    if (!f)
        return bad_path ? 2 : 1;
    uint64_t t0 = k25_now_ns();
    k25_error_clear(&err);
    k25_tokenizer_t *tok = NULL;
    int rc = 0;
    if (tokdir && (rc = k25_tokenizer_load(tokdir, &tok, &err)) == K25_OK) {
        o.count_tokens = count_with_tokenizer;
        o.count_ctx = tok;
    }
    if (rc == 0)
        rc = k25_gold_generate(&o, f, &err);
    k25_tokenizer_destroy(tok);
    long pos = out ? ftell(f) : -1;
    if (rc < 0)
        fprintf(stderr, "k25 gold generate: %s\n", err.msg);
    int frc = finish_out(f, out, tmp, rc == 0);
    if (rc == 0)
        rc = frc;
    if (rc == 0 && out && !quiet) {
        double s = (double)(k25_now_ns() - t0) / 1e9;
        fprintf(stderr, "k25 gold generate: wrote %lld requests, %ld bytes to %s in %.2f s (%.1f MB/s)\n",
                (long long)o.count, pos, out, s, s > 0 ? (double)pos / 1e6 / s : 0.0);
    }
    return exit_for(rc);
}

/* ------------------------------------------------------------ tokenize */

/*
 * gold tokenize --tokenizer DIR IN OUT: every text request of IN written to
 * OUT with its input (prompt, separator, text) as input_ids of DIR's
 * tokenizer (BOS template), the prompt folded into them as the schema asks;
 * the other fields kept, meta.tokenizer naming the source.  input_ids lines
 * are copied.  IN is read with the default policies (an invalid line fails).
 */
static int cmd_tokenize(int argc, char **argv)
{
    const char *tokdir = NULL;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--tokenizer"}, .type = K25_OPT_PATH, .dest = &tokdir, .metavar = "DIR",
         .help = "model folder whose tokenizer.json encodes the text (required)"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "gold tokenize",
        .usage = "gold tokenize --tokenizer DIR IN OUT",
        .about = "Writes IN's requests to OUT with input_ids of DIR's tokenizer (prompt + text, BOS\n"
                 "template) in place of text and prompt; OUT is written to a temporary name and renamed.\n",
        .opts = opts,
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK || !tokdir || argc != 3) {
        fprintf(stderr, "k25 gold tokenize: %s\n",
                prc != K25_OK ? err.msg : !tokdir ? "--tokenizer DIR is required" : "give IN and OUT (--help)");
        return 2;
    }
    k25_tokenizer_t *tok = NULL;
    struct k25_gold_set set;
    memset(&set, 0, sizeof(set));
    struct k25_gold_opts go;
    k25_gold_opts_init(&go);
    int rc = k25_tokenizer_load(tokdir, &tok, &err);
    if (rc == 0)
        rc = k25_gold_load(argv[1], &go, &set, &err);
    if (rc != 0) {
        fprintf(stderr, "k25 gold tokenize: %s\n", err.msg);
        k25_tokenizer_destroy(tok);
        return exit_for(rc);
    }
    char tmp[1100];
    bool bad_path;
    FILE *f = open_out(argv[2], tmp, sizeof(tmp), &bad_path);
    if (!f) {
        k25_gold_set_free(&set);
        k25_tokenizer_destroy(tok);
        return bad_path ? 2 : 1;
    }
    for (size_t i = 0; i < set.n && rc == 0; i++) {
        struct k25_gold_request r = set.reqs[i];
        char *text = NULL, *meta = NULL;
        size_t len = 0;
        int32_t *ids = NULL;
        int n = 0;
        if (!r.input_ids) {
            struct k25_error e;
            if ((rc = k25_gold_request_input(&r, &text, &len, &err)) != 0)
                break;
            if ((rc = k25_tokenizer_encode(tok, text, len, K25_TOK_ADD_SPECIAL, &ids, &n, &e)) != 0)
                k25_error_set(&err, rc, argv[1], (int)r.line, "text", "request '%s': %s", r.id, e.msg);
            free(text);
            json_t *m = r.meta_json ? json_loads(r.meta_json, 0, NULL) : json_object();
            if (m)
                json_object_set_new(m, "tokenizer", json_string(k25_tokenizer_source(tok)));
            meta = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
            json_decref(m);
            r.text = NULL;
            r.prompt = NULL;
            r.input_ids = ids;
            r.n_input_ids = (size_t)n;
            r.meta_json = meta;
        }
        if (rc == 0)
            rc = k25_gold_request_write(f, &r, &err);
        free(ids);
        free(meta);
    }
    if (rc != 0)
        fprintf(stderr, "k25 gold tokenize: %s\n", err.msg);
    int frc = finish_out(f, argv[2], tmp, rc == 0);
    size_t nreq = set.n;
    k25_gold_set_free(&set);
    k25_tokenizer_destroy(tok);
    if (rc == 0 && frc == 0)
        fprintf(stderr, "k25 gold tokenize: wrote %zu requests to %s\n", nreq, argv[2]);
    return exit_for(rc ? rc : frc);
}

/* -------------------------------------------------------------- import */

/*
 * gold import --sharegpt FILE [--tokenizer DIR] [--out OUT]: the ShareGPT
 * layout vLLM and guidellm read (a JSON list of {"id"?, "conversations":
 * [{"from": "human", "value": ...}, {"from": "gpt", "value": ...}, ...]}):
 * one request per conversation, its first human turn as text and the length
 * of the gpt turn after it as expected_output_length (bytes, or tokens of
 * DIR's tokenizer, without BOS).  Conversations without such a pair are
 * skipped and counted.  A malformed file is an error naming the file and
 * the line and column (bad JSON) or the JSON path (/12/conversations/0/value).
 */
static int cmd_import(int argc, char **argv)
{
    const char *sharegpt = NULL, *tokdir = NULL, *out = NULL;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--sharegpt"}, .type = K25_OPT_PATH, .dest = &sharegpt, .metavar = "FILE",
         .help = "ShareGPT JSON: a list of {\"conversations\": [{\"from\", \"value\"}, ...]}"},
        {.names = {"--tokenizer"}, .type = K25_OPT_PATH, .dest = &tokdir, .metavar = "DIR",
         .deflt = "bytes", .help = "count the gpt turn's length in tokens of DIR's tokenizer.json"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &out, .deflt = "stdout",
         .help = "output file, written to a temporary name and renamed"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "gold import",
        .usage = "gold import --sharegpt FILE [--tokenizer DIR] [--out FILE]",
        .about = "Writes one request per ShareGPT conversation: the first human turn as text, the gpt\n"
                 "answer's length as expected_output_length; conversations without that pair are skipped.\n",
        .opts = opts,
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK || !sharegpt || argc != 1) {
        fprintf(stderr, "k25 gold import: %s\n", prc != K25_OK ? err.msg : !sharegpt ? "--sharegpt FILE is required"
                                                                        : "unexpected argument (--help)");
        return 2;
    }
    json_error_t je;
    json_t *root = json_load_file(sharegpt, 0, &je);
    if (!root) {
        fprintf(stderr, "k25 gold import: %s:%d:%d: %s\n", sharegpt, je.line, je.column, je.text);
        return 2;
    }
    k25_tokenizer_t *tok = NULL;
    int rc = 0;
    if (!json_is_array(root)) {
        fprintf(stderr, "k25 gold import: %s: /: must be a list of conversations\n", sharegpt);
        json_decref(root);
        return 2;
    }
    if (tokdir && (rc = k25_tokenizer_load(tokdir, &tok, &err)) != 0) {
        fprintf(stderr, "k25 gold import: %s\n", err.msg);
        json_decref(root);
        return exit_for(rc);
    }
    char tmp[1100];
    bool bad_path;
    FILE *f = open_out(out, tmp, sizeof(tmp), &bad_path);
    if (!f) {
        json_decref(root);
        k25_tokenizer_destroy(tok);
        return bad_path ? 2 : 1;
    }
    size_t written = 0, skipped = 0;
    for (size_t i = 0; i < json_array_size(root) && rc == 0; i++) {
        json_t *c = json_array_get(root, i), *conv = json_object_get(c, "conversations");
        if (!json_is_object(c) || !json_is_array(conv)) {
            rc = k25_error_set(&err, K25_EFORMAT, sharegpt, 0, "conversations",
                               "/%zu/conversations: must be an array of {\"from\", \"value\"}", i);
            break;
        }
        const char *human = NULL, *gpt = NULL;
        size_t hl = 0, gl = 0;
        for (size_t k = 0; k < json_array_size(conv); k++) {
            json_t *t = json_array_get(conv, k), *from = json_object_get(t, "from"), *val = json_object_get(t, "value");
            if (!json_is_string(from) || !json_is_string(val)) {
                rc = k25_error_set(&err, K25_EFORMAT, sharegpt, 0, "value",
                                   "/%zu/conversations/%zu/%s: must be a string", i, k,
                                   !json_is_string(from) ? "from" : "value");
                break;
            }
            const char *fr = json_string_value(from);
            if (!human && (!strcmp(fr, "human") || !strcmp(fr, "user"))) {
                human = json_string_value(val);
                hl = json_string_length(val);
            } else if (human && !gpt && (!strcmp(fr, "gpt") || !strcmp(fr, "assistant"))) {
                gpt = json_string_value(val);
                gl = json_string_length(val);
                break;
            }
        }
        if (rc != 0)
            break;
        if (!human || !gpt || hl == 0 || gl == 0) {
            skipped++;
            continue;
        }
        int64_t out_len = (int64_t)gl;
        if (tok) {
            int32_t *ids = NULL;
            int n = 0;
            struct k25_error e;
            rc = k25_tokenizer_encode(tok, gpt, gl, 0, &ids, &n, &e);
            free(ids);
            if (rc != 0) {
                k25_error_set(&err, rc, sharegpt, 0, "value", "/%zu/conversations: %s", i, e.msg);
                break;
            }
            out_len = n;
        }
        if (out_len < 1) {
            skipped++;
            continue;
        }
        char id[96];
        json_t *jid = json_object_get(c, "id");
        if (json_is_string(jid) && json_string_length(jid) > 0 && json_string_length(jid) < 80)
            snprintf(id, sizeof(id), "%s", json_string_value(jid));
        else
            snprintf(id, sizeof(id), "sharegpt-%zu", i);
        char *text = strndup(human, hl);
        struct k25_gold_request r = {.id = id, .text = text, .text_len = hl, .expected_output_length = out_len,
                                     .hint = K25_HINT_AUTO, .priority = K25_PRIORITY_STANDARD};
        rc = text ? k25_gold_request_write(f, &r, &err) : k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        free(text);
        written += rc == 0;
    }
    if (rc != 0)
        fprintf(stderr, "k25 gold import: %s\n", err.msg);
    int frc = finish_out(f, out, tmp, rc == 0);
    if (rc == 0 && frc == 0)
        fprintf(stderr, "k25 gold import: %zu requests written, %zu conversations skipped (no human turn followed "
                "by a gpt turn)\n", written, skipped);
    json_decref(root);
    k25_tokenizer_destroy(tok);
    return exit_for(rc ? rc : frc);
}

/* -------------------------------------------------------------- dispatch */

int k25_cmd_gold(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "%s", usage_top);
        return 2;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        printf("%s", usage_top);
        return 0;
    }
    if (!strcmp(sub, "validate"))
        return cmd_validate(argc - 1, argv + 1);
    if (!strcmp(sub, "select"))
        return cmd_select(argc - 1, argv + 1);
    if (!strcmp(sub, "generate"))
        return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(sub, "tokenize"))
        return cmd_tokenize(argc - 1, argv + 1);
    if (!strcmp(sub, "import"))
        return cmd_import(argc - 1, argv + 1);
    fprintf(stderr, "k25 gold: unknown command '%s'\n\n%s", sub, usage_top);
    return 2;
}
