/*
 * cliopt.c - the option parser every `k25` subcommand shares (cliopt.h):
 * one table per command drives parsing, error messages, "did you mean"
 * and --help, the way engine/config.c's key table drives the config
 * flags and `k25 config --keys`.
 *
 * The parser never allocates: values point into argv, positional
 * arguments are compacted into argv in place.  Commands that take engine
 * flags get k25_cli_apply_config (cli_config.c) run first, so a config key
 * flag never reaches the table, and the table's unknown-option suggestions
 * include the config flags.
 */
#include "cli.h"
#include "cliopt.h"
#include "harness.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define SRC_CLI "command line"
#define HELP_COL 26 /* width of the option column in --help */

int k25_cliopt_error(struct k25_error *err, int code, const char *name, const char *fmt, ...)
{
    char what[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return k25_error_set(err, code, SRC_CLI, 0, name, "%s", what);
}

/* ------------------------------------------------------------ lookup */

static bool is_help(const char *a)
{
    return !strcmp(a, "--help") || !strcmp(a, "-h");
}

/* The option named by a[0..len), or NULL. */
static const struct k25_opt *find_opt(const struct k25_opt *opts, const char *a, size_t len)
{
    for (const struct k25_opt *o = opts; o->type != K25_OPT_END; o++)
        for (int k = 0; k < 4 && o->names[k]; k++)
            if (strlen(o->names[k]) == len && !strncmp(o->names[k], a, len))
                return o;
    return NULL;
}

static bool takes_value(const struct k25_opt *o)
{
    return o->type != K25_OPT_FLAG;
}

static int nvalues(const struct k25_opt *o)
{
    return o->type == K25_OPT_STRING && o->nargs > 1 ? o->nargs : 1;
}

/* ------------------------------------------------------------ did you mean */

int k25_cliopt_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return INT_MAX / 2;
    int d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int cost = a[i - 1] != b[j - 1];
            int v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v)
                v = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < v)
                v = d[i - 1][j - 1] + cost;
            /* optimal string alignment: a swap of neighbours costs 1 */
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

/* Best candidate so far: distance, and whether the typed name is a prefix of it. */
struct suggest_state {
    const char *typed; /* without dashes */
    size_t typed_len;
    int best;
    char name[96];
    int n_prefix;
    char prefix_name[96];
};

static void consider(struct suggest_state *s, const char *flag)
{
    const char *bare = flag;
    while (*bare == '-')
        bare++;
    if (!*bare)
        return;
    int d = k25_cliopt_distance(s->typed, bare);
    if (d < s->best) {
        s->best = d;
        snprintf(s->name, sizeof(s->name), "%s", flag);
    }
    if (s->typed_len >= 3 && strlen(bare) > s->typed_len && !strncmp(bare, s->typed, s->typed_len)) {
        if (!s->n_prefix++ || strcmp(s->prefix_name, flag))
            snprintf(s->prefix_name, sizeof(s->prefix_name), "%s", flag);
    }
}

bool k25_cliopt_suggest(const struct k25_cliopt_cmd *cmd, const char *arg, char *out, size_t n)
{
    char typed[96];
    while (*arg == '-')
        arg++;
    snprintf(typed, sizeof(typed), "%s", arg);
    char *eq = strchr(typed, '=');
    if (eq)
        *eq = '\0';
    struct suggest_state s = {.typed = typed, .typed_len = strlen(typed), .best = INT_MAX};
    if (s.typed_len < 2)
        return false;
    for (const struct k25_opt *o = cmd->opts; o && o->type != K25_OPT_END; o++)
        for (int k = 0; k < 4 && o->names[k]; k++)
            if (o->names[k][0] == '-' && o->names[k][1] == '-') /* short aliases are too close to everything */
                consider(&s, o->names[k]);
    consider(&s, "--help");
    if (cmd->config) {
        consider(&s, "--config");
        for (int i = 0; i < k25_config_key_count(); i++) {
            char flag[128];
            size_t w = (size_t)snprintf(flag, sizeof(flag), "--%s", k25_config_key(i)->key);
            for (size_t j = 2; j < w && j < sizeof(flag); j++)
                if (flag[j] == '_')
                    flag[j] = '-';
            consider(&s, flag);
        }
    }
    int limit = s.typed_len <= 4 ? 1 : s.typed_len <= 8 ? 2 : 3;
    if (s.best <= limit) {
        snprintf(out, n, "%s", s.name);
        return true;
    }
    if (s.n_prefix == 1) { /* an abbreviation of exactly one option */
        snprintf(out, n, "%s", s.prefix_name);
        return true;
    }
    return false;
}

/* ------------------------------------------------------------ values */

/* "a positive integer up to 100", "an integer in 2..32": the accepted values of an integer option. */
static void int_range_text(const struct k25_opt *o, int64_t lo, int64_t hi, char *buf, size_t n)
{
    const char *what = o->flags & K25_OPT_COUNT ? "count" : "integer";
    const char *suffix = o->flags & K25_OPT_COUNT ? " (k = 1024, m = 1048576)" : "";
    int64_t type_max = o->type == K25_OPT_INT ? INT_MAX : INT64_MAX;
    if (lo == 1 || lo == 0) {
        const char *sign = lo == 1 ? "positive" : "non-negative";
        if (hi >= type_max)
            snprintf(buf, n, "a %s %s%s", sign, what, suffix);
        else
            snprintf(buf, n, "a %s %s up to %" PRId64 "%s", sign, what, hi, suffix);
    } else if (lo <= (o->type == K25_OPT_INT ? INT_MIN : INT64_MIN) && hi >= type_max) {
        snprintf(buf, n, "an %s%s", what, suffix);
    } else {
        snprintf(buf, n, "an %s in %" PRId64 "..%" PRId64 "%s", what, lo, hi, suffix);
    }
}

static void int_bounds(const struct k25_opt *o, int64_t *lo, int64_t *hi)
{
    if (o->min == 0 && o->max == 0) {
        *lo = o->type == K25_OPT_INT ? INT_MIN : INT64_MIN;
        *hi = o->type == K25_OPT_INT ? INT_MAX : INT64_MAX;
    } else {
        *lo = o->min;
        *hi = o->max;
    }
}

static int parse_int(const struct k25_opt *o, const char *v, struct k25_error *err)
{
    int64_t lo, hi;
    int_bounds(o, &lo, &hi);
    char desc[160];
    int_range_text(o, lo, hi, desc, sizeof(desc));
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    bool overflow = errno == ERANGE;
    if (end == v || (errno && !overflow) || (*v == ' ' || *v == '\t'))
        return k25_cliopt_error(err, K25_EINVAL, o->names[0], "expected %s, got \"%s\"", desc, v);
    if ((o->flags & K25_OPT_COUNT) && (*end == 'k' || *end == 'K' || *end == 'm' || *end == 'M')) {
        long long mul = (*end == 'k' || *end == 'K') ? 1024LL : 1024LL * 1024;
        if (!overflow && (x > LLONG_MAX / mul || x < LLONG_MIN / mul))
            overflow = true;
        else
            x *= mul;
        end++;
    }
    if (*end)
        return k25_cliopt_error(err, K25_EINVAL, o->names[0], "expected %s, got \"%s\"", desc, v);
    if (overflow || x < lo || x > hi)
        return k25_cliopt_error(err, K25_ERANGE, o->names[0], "expected %s, got %s (out of range)", desc, v);
    if (o->type == K25_OPT_INT)
        *(int *)o->dest = (int)x;
    else
        *(int64_t *)o->dest = (int64_t)x;
    return 0;
}

static void double_range_text(const struct k25_opt *o, char *buf, size_t n)
{
    if (o->dmin == 0 && o->dmax == 0)
        snprintf(buf, n, "a number");
    else if (isinf(o->dmax))
        snprintf(buf, n, "a number >= %g", o->dmin);
    else
        snprintf(buf, n, "a number in %g..%g", o->dmin, o->dmax);
}

static int parse_double(const struct k25_opt *o, const char *v, struct k25_error *err)
{
    char desc[128];
    double_range_text(o, desc, sizeof(desc));
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* decimal only: "inf", "nan" and hex floats are not numbers a user means */
    bool decimal = strspn(v, "+-0123456789.eE") == strlen(v);
    if (end == v || *end || !decimal || !isfinite(x) || (errno == ERANGE && fabs(x) > 1))
        return k25_cliopt_error(err, K25_EINVAL, o->names[0], "expected %s, got \"%s\"", desc, v);
    if (!(o->dmin == 0 && o->dmax == 0) && (x < o->dmin || x > o->dmax))
        return k25_cliopt_error(err, K25_ERANGE, o->names[0], "expected %s, got %s (out of range)", desc, v);
    *(double *)o->dest = x;
    return 0;
}

static int parse_enum(const struct k25_opt *o, const char *v, struct k25_error *err)
{
    char list[256] = "";
    size_t w = 0;
    for (int i = 0; o->choices[i]; i++) {
        if (!strcmp(o->choices[i], v)) {
            *(int *)o->dest = i;
            return 0;
        }
        w += (size_t)snprintf(list + w, w < sizeof(list) ? sizeof(list) - w : 0, "%s%s", i ? ", " : "",
                              o->choices[i]);
    }
    return k25_cliopt_error(err, K25_EINVAL, o->names[0], "unknown choice '%s' (%s)", v, list);
}

/* Stores one value of o. */
static int set_value(const struct k25_opt *o, const char *v, struct k25_error *err)
{
    switch (o->type) {
    case K25_OPT_PATH:
        if (!*v)
            return k25_cliopt_error(err, K25_EINVAL, o->names[0], "needs a file name, got \"\"");
        /* fall through */
    case K25_OPT_STRING: *(const char **)o->dest = v; return 0;
    case K25_OPT_INT:
    case K25_OPT_INT64: return parse_int(o, v, err);
    case K25_OPT_DOUBLE: return parse_double(o, v, err);
    case K25_OPT_ENUM: return parse_enum(o, v, err);
    case K25_OPT_LIST: {
        struct k25_opt_list *l = o->dest;
        if (l->n >= l->cap)
            return k25_cliopt_error(err, K25_EINVAL, o->names[0], "given more than %d times", l->cap);
        l->v[l->n++] = v;
        return 0;
    }
    case K25_OPT_CALL: return o->parse(o->dest, o->names[0], v, err);
    case K25_OPT_FLAG:
    case K25_OPT_END: break;
    }
    K25_ASSERT(!"unreachable option type");
    return K25_EINTERNAL;
}

/* A following argument that can be a value: present, and not an option ("--x") or the "--" separator. */
static bool value_arg(const char *next)
{
    return next && strncmp(next, "--", 2) != 0;
}

/* ------------------------------------------------------------ parse */

static int unknown_option(const struct k25_cliopt_cmd *cmd, const char *a, struct k25_error *err)
{
    char name[128], sug[128];
    snprintf(name, sizeof(name), "%s", a);
    char *eq = strchr(name, '=');
    if (eq)
        *eq = '\0';
    if (k25_cliopt_suggest(cmd, a, sug, sizeof(sug)))
        return k25_cliopt_error(err, K25_ENOTFOUND, name, "unknown option (did you mean '%s'?)", sug);
    return k25_cliopt_error(err, K25_ENOTFOUND, name, "unknown option (k25 %s --help lists the options)",
                            cmd->name);
}

bool k25_cliopt_unknown(const struct k25_error *err)
{
    return err->code == K25_ENOTFOUND && !strcmp(err->file, SRC_CLI) && strstr(err->msg, "': unknown option (");
}

int k25_cliopt_parse(const struct k25_cliopt_cmd *cmd, int *argc, char **argv, struct k25_error *err)
{
    K25_ASSERT(cmd && cmd->opts && argc && argv);
    int n = *argc;

    /* --help first, so that it works whatever else is on the line (a value is skipped, not read as one) */
    for (int i = 1; i < n && strcmp(argv[i], "--"); i++) {
        if (is_help(argv[i])) {
            k25_cliopt_print_help(cmd, stdout);
            return K25_CLIOPT_HELP;
        }
        const struct k25_opt *o = find_opt(cmd->opts, argv[i], strlen(argv[i]));
        if (o && takes_value(o))
            for (int k = 0; k < nvalues(o) && i + 1 < n && value_arg(argv[i + 1]); k++)
                i++;
    }

    if (cmd->config) {
        int rc = k25_cli_apply_config(&n, argv, cmd->config, err);
        if (rc)
            return rc;
    }

    int w = 1; /* positional arguments are moved to argv[w++] */
    bool options_done = false;
    for (int i = 1; i < n; i++) {
        char *a = argv[i];
        if (options_done || a[0] != '-' || a[1] == '\0') {
            argv[w++] = a;
            continue;
        }
        if (!strcmp(a, "--")) {
            options_done = true;
            continue;
        }
        const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const struct k25_opt *o = find_opt(cmd->opts, a, len);
        if (!o)
            return unknown_option(cmd, a, err);
        if (o->seen)
            *o->seen = true;
        if (o->type == K25_OPT_FLAG) {
            if (eq)
                return k25_cliopt_error(err, K25_EINVAL, o->names[0], "takes no value, got \"%s\"", eq + 1);
            *(bool *)o->dest = true;
            continue;
        }
        int nv = nvalues(o);
        if (nv > 1) {
            if (eq)
                return k25_cliopt_error(err, K25_EINVAL, o->names[0], "takes %d values (%s %s), not =VALUE", nv,
                                        o->names[0], o->metavar ? o->metavar : "");
            for (int k = 0; k < nv; k++)
                if (i + 1 + k >= n || !value_arg(argv[i + 1 + k]))
                    return k25_cliopt_error(err, K25_EINVAL, o->names[0], "needs %d values (%s %s)", nv,
                                            o->names[0], o->metavar ? o->metavar : "");
            for (int k = 0; k < nv; k++)
                ((const char **)o->dest)[k] = argv[++i];
            continue;
        }
        const char *v;
        if (eq) {
            v = eq + 1;
        } else if (i + 1 < n && value_arg(argv[i + 1])) {
            v = argv[++i];
        } else if (i + 1 < n && strcmp(argv[i + 1], "--")) {
            return k25_cliopt_error(err, K25_EINVAL, o->names[0],
                                    "missing value (before '%s'; a value that starts with \"--\" is written "
                                    "%s=VALUE)",
                                    argv[i + 1], o->names[0]);
        } else {
            return k25_cliopt_error(err, K25_EINVAL, o->names[0], "missing value");
        }
        int rc = set_value(o, v, err);
        if (rc)
            return rc;
    }
    argv[w] = NULL;
    *argc = w;
    if (cmd->options_only && w > 1)
        return k25_error_set(err, K25_EINVAL, "command line", 0, argv[1],
                             "unexpected argument (k25 %s takes options only; k25 %s --help)", cmd->name, cmd->name);
    return 0;
}

/* ------------------------------------------------------------ help */

/* Prints text whose later lines start after '\n', each indented by indent spaces. */
static void print_indented(FILE *out, const char *text, int indent)
{
    for (const char *p = text; *p; p++) {
        fputc(*p, out);
        if (*p == '\n' && p[1])
            fprintf(out, "%*s", indent, "");
    }
}

/* The default --help shows for o, into buf ("" for none). */
static void default_text(const struct k25_opt *o, char *buf, size_t n)
{
    buf[0] = '\0';
    if (o->deflt) {
        snprintf(buf, n, "%s", o->deflt);
        return;
    }
    if (!o->dest)
        return;
    switch (o->type) {
    case K25_OPT_INT: snprintf(buf, n, "%d", *(const int *)o->dest); break;
    case K25_OPT_INT64: snprintf(buf, n, "%" PRId64, *(const int64_t *)o->dest); break;
    case K25_OPT_DOUBLE: snprintf(buf, n, "%g", *(const double *)o->dest); break;
    case K25_OPT_ENUM: {
        int i = *(const int *)o->dest;
        if (i >= 0 && o->choices[i])
            snprintf(buf, n, "%s", o->choices[i]);
        break;
    }
    case K25_OPT_STRING:
    case K25_OPT_PATH:
        if (nvalues(o) == 1 && *(const char *const *)o->dest)
            snprintf(buf, n, "%s", *(const char *const *)o->dest);
        break;
    default: break;
    }
}

/* The range --help shows for o ("2..32", ">= 1"), into buf ("" for none). */
static void range_text(const struct k25_opt *o, char *buf, size_t n)
{
    buf[0] = '\0';
    if (o->type == K25_OPT_INT || o->type == K25_OPT_INT64) {
        if (o->min == 0 && o->max == 0)
            return;
        int64_t type_max = o->type == K25_OPT_INT ? INT_MAX : INT64_MAX;
        if (o->max >= type_max)
            snprintf(buf, n, ">= %" PRId64, o->min);
        else
            snprintf(buf, n, "%" PRId64 "..%" PRId64, o->min, o->max);
        if (o->flags & K25_OPT_COUNT)
            snprintf(buf + strlen(buf), n - strlen(buf), ", k/m suffixes");
    } else if (o->type == K25_OPT_DOUBLE && !(o->dmin == 0 && o->dmax == 0)) {
        if (isinf(o->dmax))
            snprintf(buf, n, ">= %g", o->dmin);
        else
            snprintf(buf, n, "%g..%g", o->dmin, o->dmax);
    } else if (o->type == K25_OPT_LIST) {
        snprintf(buf, n, "repeatable");
    }
}

static const char *metavar(const struct k25_opt *o, char *buf, size_t n)
{
    if (o->metavar)
        return o->metavar;
    switch (o->type) {
    case K25_OPT_FLAG: return "";
    case K25_OPT_PATH: return "FILE";
    case K25_OPT_INT:
    case K25_OPT_INT64: return "N";
    case K25_OPT_DOUBLE: return "X";
    case K25_OPT_ENUM: {
        size_t w = 0;
        buf[0] = '\0';
        for (int i = 0; o->choices[i] && w < n; i++)
            w += (size_t)snprintf(buf + w, n - w, "%s%s", i ? "|" : "", o->choices[i]);
        return buf;
    }
    default: return "VALUE";
    }
}

void k25_cliopt_print_help(const struct k25_cliopt_cmd *cmd, FILE *out)
{
    fprintf(out, "usage: k25 ");
    if (cmd->usage)
        print_indented(out, cmd->usage, 0);
    else
        fprintf(out, "%s [options]", cmd->name);
    fputc('\n', out);
    if (cmd->about) {
        fputc('\n', out);
        fputs(cmd->about, out);
        if (cmd->about[0] && cmd->about[strlen(cmd->about) - 1] != '\n')
            fputc('\n', out);
    }
    fprintf(out, "\noptions:\n");
    for (const struct k25_opt *o = cmd->opts; o->type != K25_OPT_END; o++) {
        if (o->flags & K25_OPT_HIDDEN)
            continue;
        char left[256], mv[256], def[128], range[96];
        size_t w = (size_t)snprintf(left, sizeof(left), "%s", o->names[0]);
        for (int k = 1; k < 4 && o->names[k] && w < sizeof(left); k++)
            w += (size_t)snprintf(left + w, sizeof(left) - w, ", %s", o->names[k]);
        const char *m = metavar(o, mv, sizeof(mv));
        size_t ml = strlen(m);
        if (*m && w + 1 + ml < sizeof(left)) { /* " METAVAR" (copied: snprintf here trips -O1's truncation check) */
            left[w] = ' ';
            memcpy(left + w + 1, m, ml + 1);
        }
        if (strlen(left) > HELP_COL - 1)
            fprintf(out, "  %s\n  %-*s", left, HELP_COL, "");
        else
            fprintf(out, "  %-*s", HELP_COL, left);
        print_indented(out, o->help ? o->help : "", HELP_COL + 2);
        default_text(o, def, sizeof(def));
        range_text(o, range, sizeof(range));
        if (*range && *def)
            fprintf(out, " (%s; default: %s)", range, def);
        else if (*range)
            fprintf(out, " (%s)", range);
        else if (*def)
            fprintf(out, " (default: %s)", def);
        fputc('\n', out);
    }
    fprintf(out, "  %-*s%s\n", HELP_COL, "--help, -h", "this text");
    if (cmd->config) {
        fprintf(out, "\nEngine flags (each also a key of the YAML --config file; the command line wins):\n");
        k25_cli_print_config_flags(out);
    }
    if (cmd->epilog) {
        fputc('\n', out);
        fputs(cmd->epilog, out);
        if (cmd->epilog[0] && cmd->epilog[strlen(cmd->epilog) - 1] != '\n')
            fputc('\n', out);
    }
}
