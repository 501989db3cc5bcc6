/*
 * cli_logs.c - `k25 logs`: reading the engine's structured log
 * ("[TAG] key=value key=value ...", docs/engine.md) - selecting lines by
 * tag and by a filter expression (util's expression language), counting them, and describing a numeric
 * field (values such as "142.1ms" compare and average as 142.1), or
 * counting the matching lines by the value of a field (--count --by
 * event: the elastic queue's [QUEUE] event=spill|replay|breaker_open|
 * breaker_close|timeout lines).
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FIELDS 32
#define MAX_GROUPS 64 /* distinct values --by counts; the rest go to "(other)" */

/* One value of the --by field and its count. */
struct group {
    char val[128];
    long n;
};

/* Counts v (NULL: the line lacks the field) in g[*n]. */
static void group_add(struct group *g, int *n, const char *v)
{
    const char *key = v ? v : "(none)";
    for (int i = 0; i < *n; i++)
        if (!strcmp(g[i].val, key)) {
            g[i].n++;
            return;
        }
    if (*n == MAX_GROUPS - 1)
        key = "(other)";
    if (*n < MAX_GROUPS) {
        snprintf(g[*n].val, sizeof(g[*n].val), "%s", key);
        g[(*n)++].n = 1;
    } else {
        g[MAX_GROUPS - 1].n++;
    }
}

struct log_line {
    char tag[32];
    int n;
    char key[MAX_FIELDS][48];
    char val[MAX_FIELDS][128];
};

/* Splits "[TAG] k=v k=v" into l; false for a line that is not of that form. */
static bool parse_line(const char *s, struct log_line *l)
{
    memset(l, 0, sizeof(*l));
    if (*s != '[')
        return false;
    const char *close = strchr(s, ']');
    if (!close || close - s - 1 <= 0 || close - s - 1 >= (long)sizeof(l->tag))
        return false;
    memcpy(l->tag, s + 1, (size_t)(close - s - 1));
    const char *p = close + 1;
    while (*p) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p || *p == '\n' || *p == '\r')
            break;
        const char *eq = strchr(p, '=');
        const char *sp = strpbrk(p, " \t\r\n");
        if (!eq || (sp && sp < eq) || l->n == MAX_FIELDS)
            return false;
        size_t kl = (size_t)(eq - p), vl = sp ? (size_t)(sp - eq - 1) : strlen(eq + 1);
        if (kl == 0 || kl >= sizeof(l->key[0]) || vl >= sizeof(l->val[0]))
            return false;
        memcpy(l->key[l->n], p, kl);
        memcpy(l->val[l->n], eq + 1, vl);
        l->n++;
        p = eq + 1 + vl;
    }
    return true;
}

static const char *field(const struct log_line *l, const char *key)
{
    if (!strcmp(key, "tag"))
        return l->tag;
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->key[i], key))
            return l->val[i];
    return NULL;
}

/* A number with an optional unit suffix ("142.1ms" -> 142.1); false when not a number. */
static bool numeric(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v))
        return false;
    while (*end >= 'a' && *end <= 'z')
        end++; /* ms, s, mb, ... */
    if (*end)
        return false;
    *out = v;
    return true;
}

/*
 * The filter's variables: a field of the line (a number when it reads as
 * one, units ignored, else text), "tag" the line's tag; a line without
 * the field makes every comparison with it false.
 */
static struct k25_expr_value line_lookup(void *ctx, const char *name, int slot)
{
    (void)slot;
    const struct log_line *l = ctx;
    struct k25_expr_value v = {.type = K25_EXPR_ANY};
    const char *s = field(l, name);
    if (!s)
        return v;
    v.str = s;
    v.type = numeric(s, &v.num) ? K25_EXPR_NUM : K25_EXPR_STR;
    return v;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The command's options. */
struct logs_opts {
    const char *path, *tag, *filter, *stats, *by;
    bool count, json;
};

/* What a pass over the log found: the matching lines' count, --by groups, --stats values. */
struct logs_tally {
    long matched, skipped, first_bad; /* skipped: lines not of the log's form; first_bad: the first one's number */
    struct group groups[MAX_GROUPS];
    int n_groups;
    double *vals; /* [nv] the --stats field's values, owned */
    size_t nv, vcap;
    char unit[16]; /* the values' unit suffix ("ms"), "" when they carry none */
    bool mixed;    /* values with different units: no unit can be printed */
};

/* The unit a value carries after its number ("142.1ms" -> "ms"; "" for none). */
static void unit_of(const char *v, char *u, size_t n)
{
    char *end;
    strtod(v, &end);
    snprintf(u, n, "%s", end);
}

/* The unit of a field whose values carry none (the log's token counts), else "". */
static const char *field_unit(const char *name)
{
    static const char *const tokens[] = {"seq_len", "n_tokens", "prompt_tokens", "output_tokens", "tokens"};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++)
        if (!strcmp(name, tokens[i]))
            return "tokens";
    return "";
}

/*
 * Reads f line by line: lines of the tag and filter are counted, grouped,
 * their --stats field collected, or printed (neither --stats nor --count).
 * Returns the exit status: 0, or 1 (out of memory, read error).
 */
static int scan(FILE *f, const struct logs_opts *lo, const struct k25_expr *fexpr, struct logs_tally *t)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    struct log_line l;
    int status = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len == 0 || line[0] == '\n')
            continue;
        if (!parse_line(line, &l)) {
            if (!t->skipped++)
                t->first_bad = lineno;
            continue;
        }
        if (lo->tag && strcmp(l.tag, lo->tag) != 0)
            continue;
        if (fexpr && !k25_expr_eval(fexpr, line_lookup, &l))
            continue;
        t->matched++;
        if (lo->by)
            group_add(t->groups, &t->n_groups, field(&l, lo->by));
        if (lo->stats) {
            const char *v = field(&l, lo->stats);
            double x;
            if (v && numeric(v, &x)) {
                if (t->nv == t->vcap) {
                    t->vcap = t->vcap ? 2 * t->vcap : 1024;
                    double *nvals = realloc(t->vals, sizeof(double) * t->vcap);
                    if (!nvals) {
                        fprintf(stderr, "k25 logs: out of memory\n");
                        status = 1;
                        goto out;
                    }
                    t->vals = nvals;
                }
                char u[16];
                unit_of(v, u, sizeof(u));
                if (t->nv == 0)
                    snprintf(t->unit, sizeof(t->unit), "%s", u);
                else if (strcmp(u, t->unit) != 0)
                    t->mixed = true;
                t->vals[t->nv++] = x;
            }
        } else if (!lo->count) {
            fputs(line, stdout);
        }
    }
    if (ferror(f)) {
        fprintf(stderr, "k25 logs: %s: read error: %s\n", lo->path, strerror(errno));
        status = 1;
    }
out:
    free(line);
    return status;
}

/* --stats: n, mean, nearest-rank P50/P90/P99 and max of the values (sorted here), as text or JSON. */
static void print_stats(const char *name, double *vals, size_t nv, const char *unit_in, bool mixed, bool json)
{
    /* units: the values' own suffix, else the field's known unit; none when they disagree */
    const char *unit = mixed ? "" : *unit_in ? unit_in : field_unit(name);
    qsort(vals, nv, sizeof(double), cmp_double);
    double sum = 0;
    for (size_t i = 0; i < nv; i++)
        sum += vals[i];
    /* nearest rank: the ceil(q n)-th smallest; a quantile needs n >= 1/(1-q) */
    double q[3] = {0.5, 0.9, 0.99}, pv[3];
    for (int k = 0; k < 3; k++) {
        size_t r = (size_t)ceil(q[k] * (double)nv);
        pv[k] = (nv > 0 && (double)nv * (1.0 - q[k]) >= 1.0 - 1e-9) ? vals[r - 1] : NAN;
    }
    if (json) {
        printf("{\"field\": \"%s\", \"n\": %zu", name, nv);
        if (*unit)
            printf(", \"unit\": \"%s\"", unit);
        else
            printf(", \"unit\": null");
        const char *names[] = {"p50", "p90", "p99"};
        if (nv)
            printf(", \"mean\": %.6g", sum / (double)nv);
        else
            printf(", \"mean\": null");
        for (int k = 0; k < 3; k++)
            isnan(pv[k]) ? printf(", \"%s\": null", names[k]) : printf(", \"%s\": %.6g", names[k], pv[k]);
        nv ? printf(", \"max\": %.6g}\n", vals[nv - 1]) : printf(", \"max\": null}\n");
    } else {
        /* "avg_time_per_chunk (ms): n=3 mean=142.1 ms ..." */
        const char *sp = *unit ? " " : "";
        printf("%s%s%s%s: n=%zu", name, *unit ? " (" : "", unit, *unit ? ")" : "", nv);
        if (nv)
            printf(" mean=%.4g%s%s", sum / (double)nv, sp, unit);
        const char *names[] = {"P50", "P90", "P99"};
        for (int k = 0; k < 3; k++)
            isnan(pv[k]) ? printf(" %s=n/a", names[k]) : printf(" %s=%.4g%s%s", names[k], pv[k], sp, unit);
        if (nv)
            printf(" max=%.4g%s%s", vals[nv - 1], sp, unit);
        if (mixed)
            printf(" (values in different units: none shown)");
        printf("\n");
    }
}

/* --count --by: one count per value of the field, then the total, as text or JSON. */
static void print_groups(const struct logs_tally *t, const char *by, bool json)
{
    if (json) {
        printf("{\"count\": %ld, \"by\": \"%s\", \"counts\": {", t->matched, by);
        for (int i = 0; i < t->n_groups; i++) {
            json_t *k = json_string(t->groups[i].val);
            char *ks = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
            printf("%s%s: %ld", i ? ", " : "", ks ? ks : "\"?\"", t->groups[i].n);
            free(ks);
            json_decref(k);
        }
        printf("}}\n");
    } else {
        for (int i = 0; i < t->n_groups; i++)
            printf("%s=%s %ld\n", by, t->groups[i].val, t->groups[i].n);
        printf("total %ld\n", t->matched);
    }
}

/*
 * Runs the parsed command: compiles the filter, opens the log (FILE or -),
 * scans it and prints what was asked.  Returns the exit status: 2 for a bad
 * filter or an unreadable file, 1 for a failure while reading or writing.
 */
static int run_logs(const struct logs_opts *lo)
{
    struct k25_error err;
    /* the expression language of k25util.h: field names are known only per line */
    const struct k25_expr_opts fopts = {.what = "--filter", .names = "a field name"};
    struct k25_expr *fexpr = NULL;
    if (lo->filter && k25_expr_parse(lo->filter, &fopts, &fexpr, NULL, NULL, &err) != K25_OK) {
        fprintf(stderr, "k25 logs: %s\n", err.msg);
        return 2;
    }
    FILE *f = strcmp(lo->path, "-") ? fopen(lo->path, "r") : stdin;
    if (!f) {
        fprintf(stderr, "k25 logs: %s: cannot open: %s\n", lo->path, strerror(errno));
        k25_expr_free(fexpr);
        return 2;
    }
    struct logs_tally t = {0};
    int status = scan(f, lo, fexpr, &t);
    if (status == 0) {
        if (t.skipped)
            fprintf(stderr,
                    "k25 logs: %s: %ld line(s) not of the form \"[TAG] key=value ...\" skipped (first: line %ld)\n",
                    lo->path, t.skipped, t.first_bad);
        if (lo->stats)
            print_stats(lo->stats, t.vals, t.nv, t.unit, t.mixed, lo->json);
        else if (lo->count && lo->by)
            print_groups(&t, lo->by, lo->json);
        else if (lo->count)
            lo->json ? printf("{\"count\": %ld}\n", t.matched) : printf("%ld\n", t.matched);
        if (fflush(stdout) != 0)
            status = 1;
    }
    k25_expr_free(fexpr);
    free(t.vals);
    if (f != stdin)
        fclose(f);
    return status;
}

/* k25 logs: the option table (which --help prints), the argument checks, then run_logs. */
int k25_cmd_logs(int argc, char **argv)
{
    struct logs_opts lo = {0};
    struct k25_error err;
    const struct k25_opt opts[] = {
        {.names = {"--tag"}, .type = K25_OPT_STRING, .dest = &lo.tag, .metavar = "TAG",
         .help = "only [TAG] lines (PREFILL, DECODE, KV_CACHE, QUEUE)"},
        {.names = {"--filter"}, .type = K25_OPT_STRING, .dest = &lo.filter, .metavar = "EXPR",
         .help = "an expression over the line's fields (docs/cli.md \"Expressions\"):\n"
                 "`key op value` (op: == != < <= > >=) joined by && || ! ( ); numbers\n"
                 "compare as numbers (units such as ms are ignored), e.g.\n"
                 "'degraded==True', 'avg_time_per_chunk > 100 && seq_len >= 32k'"},
        {.names = {"--count"}, .type = K25_OPT_FLAG, .dest = &lo.count, .help = "print only the number of matching lines"},
        {.names = {"--by"}, .type = K25_OPT_STRING, .dest = &lo.by, .metavar = "FIELD",
         .help = "with --count: one count per value of FIELD, e.g. --tag QUEUE --by event\n"
                 "(spill, replay, breaker_open, breaker_close, timeout; (none): lines\nwithout it)"},
        {.names = {"--stats"}, .type = K25_OPT_STRING, .dest = &lo.stats, .metavar = "FIELD",
         .help = "n, mean, P50, P90, P99 (nearest rank) and max of FIELD over the\n"
                 "matching lines that have it"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &lo.json, .help = "the count or the statistics as JSON"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "logs",
        .usage = "logs FILE [--tag TAG] [--filter 'key op value && ...'] [--count [--by FIELD]]\n"
                 "                     [--stats FIELD] [--json]",
        .about = "Reads the engine's structured log (--log-level info|debug --log-file FILE; lines\n"
                 "\"[TAG] key=value ...\", docs/engine.md) and prints the matching lines, their count,\n"
                 "or statistics of a numeric field.  FILE - reads stdin.  Alias: k25-log-analyzer.\n",
        .opts = opts,
        .epilog = "Lines that are not of the form above are skipped and counted on stderr.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 logs: %s\n", err.msg);
        return 2;
    }
    if (argc > 2) {
        fprintf(stderr, "k25 logs: one log file at a time\n");
        return 2;
    }
    if (argc < 2) {
        k25_cliopt_print_help(&cmd, stderr);
        return 2;
    }
    if (lo.by && !lo.count) {
        fprintf(stderr, "k25 logs: --by counts lines: use it with --count\n");
        return 2;
    }
    lo.path = argv[1];
    return run_logs(&lo);
}
