/*
 * cli_gold.c - `k25 gold`: validate, select from and generate JSONL gold
 * sets.  Argument parsing and printing only; the work is in datasets/
 * (gold.h), where tests call it without a process.
 *
 * Exit status: 0 success (a set with invalid lines counts as success only
 * under --on-error skip), 2 invalid set or bad arguments, 1 I/O or other
 * failure.
 */
#include "harness.h"
#include "gold.h"

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
    "  generate          write a deterministic set of long documents\n";

static const char read_opts_help[] =
    "  --sanitize POLICY      invisible/control characters in text and prompt:\n"
    "                         strip (default: removed, counted), reject (line is an error), keep\n"
    "  --on-error POLICY      abort (default: any invalid line fails the set, exit 2)\n"
    "                         or skip (invalid lines listed, skipped and counted)\n"
    "  --filter EXPR          select requests, e.g. 'output_length > 1800 && domain == \"legal\"'\n"
    "                         fields input_length output_length domain id; == != < <= > >=; && || ! ( )\n"
    "  --max-line-bytes N     longest line accepted (default 64m; k/m suffixes); a line with no\n"
    "                         end after 16 x N bytes (/dev/zero, a binary file) stops the reading\n"
    "  --quiet                do not print warnings (errors are always printed)\n"
    "  --help                 this text\n";

static const char usage_validate[] =
    "usage: k25 gold validate FILE [--json] [--sanitize strip|reject|keep] [--on-error abort|skip]\n"
    "                         [--filter EXPR] [--max-line-bytes N] [--quiet]\n"
    "\n"
    "Checks every line of FILE and reports each problem as FILE:LINE: field 'x': what is wrong\n"
    "(on stderr), then prints statistics: lines, requests, input/output tokens (bytes for the\n"
    "byte tokenizer, or ids) with percentiles, domains, sanitized characters, SHA-256.\n"
    "\n"
    "  --json                 statistics as JSON on stdout (for jq), errors included\n";

static const char usage_select[] =
    "usage: k25 gold select FILE [--filter EXPR] [--out FILE] [--sanitize ...] [--on-error ...]\n"
    "\n"
    "Writes the valid requests that EXPR selects, sanitized by the policy, as JSONL to stdout\n"
    "or to --out FILE (written to a temporary name and renamed when complete).\n"
    "\n"
    "  --out FILE             output file (default: stdout)\n";

static const char usage_generate[] =
    "usage: k25 gold generate [--domain legal|finance|minutes|licenses|mixed] [--lengths 4k,32k,128k]\n"
    "                         [--count N] [--seed S] [--output-length N|MIN-MAX] [--out FILE]\n"
    "                         [--licenses-dir DIR]\n"
    "\n"
    "Writes N deterministic requests (same arguments, same bytes) as JSONL to stdout or --out.\n"
    "Request i has input length lengths[i mod #lengths] tokens of the byte tokenizer (within 1%),\n"
    "prompt included; mixed turns through legal, finance, minutes, licenses so each length gets each.\n"
    "\n"
    "  --domain D             legal: contracts with numbered articles, far references, appendix tables\n"
    "                         finance: reports with tables and figures; minutes: meeting notes\n"
    "                         licenses: real license text from --licenses-dir; mixed (default): all\n"
    "  --lengths LIST         input lengths, k = 1024, m = 1024*1024 (default 4k)\n"
    "  --count N              requests in total (default 8)\n"
    "  --seed S               RNG seed (default 1)\n"
    "  --output-length N|A-B  expected_output_length, fixed or uniform in [A, B] (default 64-512)\n"
    "  --licenses-dir DIR     license files for the licenses domain (default " K25_GOLD_LICENSES_DIR ")\n"
    "  --out FILE             output file (default: stdout), written to a temporary name and renamed\n"
    "  --help                 this text\n";

/* ----------------------------------------------------------- arguments */

/*
 * Matches argv[*i] against --name, taking the value from "--name=V" or the
 * next argument.  Returns 1 when matched (value in *val), 0 when not, -1
 * when the value is missing (message printed).
 */
static int opt_value(int argc, char **argv, int *i, const char *name, const char **val)
{
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return 0;
    if (a[n] == '=') {
        *val = a + n + 1;
        return 1;
    }
    if (a[n] != 0)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "k25 gold: %s needs a value\n", name);
        return -1;
    }
    *val = argv[++*i];
    return 1;
}

struct read_args {
    struct k25_gold_opts opts;
    const char *file;
    const char *filter_expr;
    const char *out;
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

/*
 * Parses FILE and the options shared by validate and select.  Returns 0,
 * or the exit status to return (2 on bad arguments).
 */
static int parse_read_args(int argc, char **argv, struct read_args *a, bool allow_json, bool allow_out)
{
    memset(a, 0, sizeof(*a));
    k25_gold_opts_init(&a->opts);
    struct k25_error err;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            a->help = true;
            return 0;
        }
        if (!strcmp(argv[i], "--json") && allow_json) {
            a->json = true;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            a->quiet = true;
        } else if ((m = opt_value(argc, argv, &i, "--sanitize", &v)) != 0) {
            if (m < 0)
                return 2;
            if (k25_gold_sanitize_parse(v, &a->opts.sanitize, &err) < 0)
                goto bad;
        } else if ((m = opt_value(argc, argv, &i, "--on-error", &v)) != 0) {
            if (m < 0)
                return 2;
            if (k25_gold_on_error_parse(v, &a->opts.on_error, &err) < 0)
                goto bad;
        } else if ((m = opt_value(argc, argv, &i, "--filter", &v)) != 0) {
            if (m < 0)
                return 2;
            a->filter_expr = v;
        } else if ((m = opt_value(argc, argv, &i, "--max-line-bytes", &v)) != 0) {
            int64_t n;
            if (m < 0)
                return 2;
            if (!k25_gold_parse_size(v, &n) || n < 2) {
                fprintf(stderr, "k25 gold: --max-line-bytes: bad size '%s'\n", v);
                return 2;
            }
            a->opts.max_line_bytes = (size_t)n;
        } else if (allow_out && (m = opt_value(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0)
                return 2;
            a->out = v;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            fprintf(stderr, "k25 gold %s: unknown option '%s' (--help lists them)\n", argv[0], argv[i]);
            return 2;
        } else if (!a->file) {
            a->file = argv[i];
        } else {
            fprintf(stderr, "k25 gold %s: one FILE only ('%s' is extra)\n", argv[0], argv[i]);
            return 2;
        }
    }
    if (!a->file) {
        fprintf(stderr, "k25 gold %s: FILE missing (--help for usage)\n", argv[0]);
        return 2;
    }
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
bad:
    fprintf(stderr, "k25 gold: %s\n", err.msg);
    return 2;
}

/* Exit status for a library status code. */
static int exit_for(int rc)
{
    if (rc == 0)
        return 0;
    return rc == K25_EFORMAT || rc == K25_EINVAL || rc == K25_ENOTFOUND || rc == K25_ERANGE ? 2 : 1;
}

/* ------------------------------------------------------------ validate */

static int cmd_validate(int argc, char **argv)
{
    struct read_args a;
    int st = parse_read_args(argc, argv, &a, true, false);
    if (a.help) {
        printf("%s\n%s", usage_validate, read_opts_help);
        return 0;
    }
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
    if (opened && a.json) {
        char *txt = k25_gold_stats_to_json(&stats, &a.opts, a.filter_expr);
        json_error_t je;
        json_t *root = txt ? json_loads(txt, 0, &je) : NULL;
        free(txt);
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
        if (k25_gold_stats_print(stdout, &stats, &a.opts) < 0) {
            fprintf(stderr, "k25 gold validate: writing the report failed\n");
            rc = rc ? rc : K25_EIO;
        }
    }
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
    int e = fclose(f);
    if (!ok || e != 0) {
        if (e != 0)
            fprintf(stderr, "k25 gold: writing %s failed: %s\n", tmp, strerror(errno));
        unlink(tmp);
        return K25_EIO;
    }
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "k25 gold: rename %s -> %s failed: %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        return K25_EIO;
    }
    return 0;
}

static int cmd_select(int argc, char **argv)
{
    struct read_args a;
    int st = parse_read_args(argc, argv, &a, false, true);
    if (a.help) {
        printf("%s\n%s", usage_select, read_opts_help);
        return 0;
    }
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

static int cmd_generate(int argc, char **argv)
{
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    const char *out = NULL;
    bool quiet = false;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        int m;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("%s", usage_generate);
            return 0;
        } else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
            quiet = true;
        } else if ((m = opt_value(argc, argv, &i, "--domain", &v)) != 0) {
            if (m < 0)
                return 2;
            if (k25_gold_domain_parse(v, &o.domain, &err) < 0)
                goto bad;
        } else if ((m = opt_value(argc, argv, &i, "--lengths", &v)) != 0) {
            if (m < 0)
                return 2;
            if (k25_gold_parse_lengths(v, &o, &err) < 0)
                goto bad;
        } else if ((m = opt_value(argc, argv, &i, "--count", &v)) != 0) {
            if (m < 0)
                return 2;
            if (!k25_gold_parse_size(v, &o.count) || o.count < 1) {
                fprintf(stderr, "k25 gold generate: --count: bad count '%s'\n", v);
                return 2;
            }
        } else if ((m = opt_value(argc, argv, &i, "--seed", &v)) != 0) {
            if (m < 0)
                return 2;
            char *end;
            errno = 0;
            o.seed = strtoull(v, &end, 0);
            if (errno || *end || !*v || *v == '-') {
                fprintf(stderr, "k25 gold generate: --seed: bad seed '%s'\n", v);
                return 2;
            }
        } else if ((m = opt_value(argc, argv, &i, "--output-length", &v)) != 0) {
            if (m < 0)
                return 2;
            if (k25_gold_parse_output_length(v, &o, &err) < 0)
                goto bad;
        } else if ((m = opt_value(argc, argv, &i, "--licenses-dir", &v)) != 0) {
            if (m < 0)
                return 2;
            snprintf(o.licenses_dir, sizeof(o.licenses_dir), "%s", v);
        } else if ((m = opt_value(argc, argv, &i, "--out", &v)) != 0) {
            if (m < 0)
                return 2;
            out = v;
        } else {
            fprintf(stderr, "k25 gold generate: unknown argument '%s' (--help lists them)\n", argv[i]);
            return 2;
        }
    }
    char tmp[1100];
    bool bad_path;
    FILE *f = open_out(out, tmp, sizeof(tmp), &bad_path);
    if (!f)
        return bad_path ? 2 : 1;
    uint64_t t0 = k25_now_ns();
    k25_error_clear(&err);
    int rc = k25_gold_generate(&o, f, &err);
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
bad:
    fprintf(stderr, "k25 gold generate: %s\n", err.msg);
    return 2;
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
    fprintf(stderr, "k25 gold: unknown command '%s'\n\n%s", sub, usage_top);
    return 2;
}
