/*
 * test_cliopt.c - the option parser every k25 subcommand shares
 * (cli/cliopt.c), called as a library: both value forms, ranges,
 * enums, lists and callbacks, repeated options, "--", missing values,
 * "did you mean", the generated --help, and the engine config flags.
 */
#include "testutil.h"

#include "cliopt.h"
#include "harness.h"

#include <math.h>

/* What one test command parses into. */
struct vals {
    bool json, quiet;
    const char *out, *title, *ab[2];
    int rounds, format;
    int64_t ctx;
    double rate;
    const char *items[3];
    struct k25_opt_list list;
    int calls;
    char last_call[32];
    bool rate_seen;
    const char *hidden;
};

static const char *const formats[] = {"png", "svg", "pdf", NULL};

static int count_call(void *dest, const char *name, const char *value, struct k25_error *err)
{
    struct vals *v = dest;
    if (!strcmp(value, "bad"))
        return k25_cliopt_error(err, K25_EINVAL, name, "bad thing '%s'", value);
    v->calls++;
    snprintf(v->last_call, sizeof(v->last_call), "%s", value);
    return 0;
}

/* Builds the test table over v (defaults first) and parses argv. */
static int parse(struct vals *v, struct k25_config *cfg, int argc, char **argv, struct k25_error *err)
{
    const struct k25_opt opts[] = {
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &v->json, .help = "JSON"},
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &v->quiet, .help = "quiet"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &v->out, .help = "output"},
        {.names = {"--title"}, .type = K25_OPT_STRING, .dest = &v->title, .metavar = "T", .help = "title"},
        {.names = {"--rounds"}, .type = K25_OPT_INT, .dest = &v->rounds, .min = 2, .max = 32, .help = "rounds"},
        {.names = {"--context"}, .type = K25_OPT_INT64, .dest = &v->ctx, .min = 1, .max = INT32_MAX,
         .flags = K25_OPT_COUNT, .help = "tokens"},
        {.names = {"--request-rate", "--rate"}, .type = K25_OPT_DOUBLE, .dest = &v->rate, .dmin = 0.001,
         .dmax = 1e6, .seen = &v->rate_seen, .help = "arrivals per second"},
        {.names = {"--format"}, .type = K25_OPT_ENUM, .dest = &v->format, .choices = formats, .help = "plots"},
        {.names = {"--ab"}, .type = K25_OPT_STRING, .dest = v->ab, .nargs = 2, .metavar = "A B", .help = "two"},
        {.names = {"--item"}, .type = K25_OPT_LIST, .dest = &v->list, .help = "an item"},
        {.names = {"--call"}, .type = K25_OPT_CALL, .dest = v, .parse = count_call, .help = "a callback"},
        {.names = {"--secret"}, .type = K25_OPT_STRING, .dest = &v->hidden, .flags = K25_OPT_HIDDEN,
         .help = "hidden"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {.name = "test", .usage = "test [options] FILE...", .about = "About.\n",
                                       .opts = opts, .config = cfg, .epilog = "Exit status: 0.\n"};
    int rc = k25_cliopt_parse(&cmd, &argc, argv, err);
    return rc ? rc : (argc - 1) * 100; /* success: 100 x the positional arguments left */
}

static void vals_init(struct vals *v)
{
    memset(v, 0, sizeof(*v));
    v->rounds = 5;
    v->ctx = 1;
    v->rate = 1.5;
    v->list = (struct k25_opt_list){v->items, 0, 3};
}

/* Parses the arguments (NULL-terminated; argv[0] = "test") into a fresh v; returns parse()'s result. */
static int parse_list(struct vals *v, struct k25_error *err, ...)
{
    char *argv[32] = {"test"};
    int argc = 1;
    va_list ap;
    va_start(ap, err);
    for (char *a; (a = va_arg(ap, char *)) != NULL && argc < 31;)
        argv[argc++] = a;
    va_end(ap);
    vals_init(v);
    k25_error_clear(err);
    return parse(v, NULL, argc, argv, err);
}
#define PARSE(v, err, ...) parse_list(v, err, __VA_ARGS__, (char *)NULL)

static void test_both_value_forms(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--out", "a.h5", "--rounds=7", "--title=x=y", "--context", "4k", "-q",
                           "--request-rate=2.5", "--format", "svg"),
                     0);
    assert_string_equal(v.out, "a.h5");
    assert_int_equal(v.rounds, 7);
    assert_string_equal(v.title, "x=y"); /* only the first '=' splits */
    assert_int_equal(v.ctx, 4096);
    assert_true(v.quiet);
    assert_false(v.json);
    assert_float_equal(v.rate, 2.5, 0);
    assert_true(v.rate_seen);
    assert_int_equal(v.format, 1);
    /* an alias sets the same destination */
    assert_int_equal(PARSE(&v, &err, "--rate", "3"), 0);
    assert_float_equal(v.rate, 3, 0);
    /* positionals stay, in order, compacted into argv; "--" ends the options, "-" is positional */
    char *a[] = {"test", "x", "--json", "-", "--", "--out", NULL};
    int argc = 6;
    vals_init(&v);
    const struct k25_opt opts[] = {{.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &v.json},
                                   {.type = K25_OPT_END}};
    const struct k25_cliopt_cmd cmd = {.name = "t", .opts = opts};
    assert_int_equal(k25_cliopt_parse(&cmd, &argc, a, &err), 0);
    assert_int_equal(argc, 4);
    assert_string_equal(a[1], "x");
    assert_string_equal(a[2], "-");
    assert_string_equal(a[3], "--out");
    assert_null(a[4]);
    assert_true(v.json);
    /* a command that takes options only refuses a positional argument, naming it */
    char *b[] = {"t", "--json", "stray", NULL};
    argc = 3;
    const struct k25_cliopt_cmd only = {.name = "t", .opts = opts, .options_only = true};
    assert_int_equal(k25_cliopt_parse(&only, &argc, b, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "'stray': unexpected argument (k25 t takes options only"));
    /* the two-valued option */
    assert_int_equal(PARSE(&v, &err, "--ab", "cmd a", "cmd b", "f"), 100);
    assert_string_equal(v.ab[0], "cmd a");
    assert_string_equal(v.ab[1], "cmd b");
    /* defaults untouched when not given */
    assert_int_equal(PARSE(&v, &err, "file"), 100);
    assert_int_equal(v.rounds, 5);
    assert_null(v.out);
    assert_false(v.rate_seen);
}

static void test_ranges_and_numbers(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--rounds", "40"), K25_ERANGE);
    assert_string_equal(err.msg, "command line: '--rounds': expected an integer in 2..32, got 40 (out of range)");
    assert_string_equal(err.field, "--rounds");
    assert_int_equal(PARSE(&v, &err, "--rounds=1"), K25_ERANGE);
    assert_int_equal(PARSE(&v, &err, "--rounds", "2"), 0);
    assert_int_equal(PARSE(&v, &err, "--rounds", "32"), 0);
    assert_int_equal(PARSE(&v, &err, "--rounds", "x"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--rounds': expected an integer in 2..32, got \"x\"");
    assert_int_equal(PARSE(&v, &err, "--rounds", "5.0"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--rounds", "99999999999999999999999"), K25_ERANGE);
    assert_int_equal(PARSE(&v, &err, "--rounds="), K25_EINVAL);
    assert_int_equal(v.rounds, 5);
    /* counts: k/m suffixes; overflow is out of range, not wrapped */
    assert_int_equal(PARSE(&v, &err, "--context", "1m"), 0);
    assert_int_equal(v.ctx, 1048576);
    assert_int_equal(PARSE(&v, &err, "--context", "0"), K25_ERANGE);
    assert_non_null(strstr(err.msg, "expected a positive count up to 2147483647"));
    assert_int_equal(PARSE(&v, &err, "--context", "4g"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--context", "3000000k"), K25_ERANGE);
    /* doubles: range, and no inf/nan/hex */
    assert_int_equal(PARSE(&v, &err, "--rate", "0"), K25_ERANGE);
    assert_string_equal(err.msg, "command line: '--request-rate': expected a number in 0.001..1e+06, got 0 "
                                 "(out of range)");
    assert_int_equal(PARSE(&v, &err, "--rate", "inf"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--rate", "nan"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--rate", "0x10"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--rate", "1e3"), 0);
    assert_float_equal(v.rate, 1000, 0);
    /* paths must not be empty; strings may */
    assert_int_equal(PARSE(&v, &err, "--out="), K25_EINVAL);
    assert_non_null(strstr(err.msg, "'--out': needs a file name"));
    assert_int_equal(PARSE(&v, &err, "--title="), 0);
    assert_string_equal(v.title, "");
}

static void test_enums(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--format=pdf"), 0);
    assert_int_equal(v.format, 2);
    assert_int_equal(PARSE(&v, &err, "--format", "gif"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--format': unknown choice 'gif' (png, svg, pdf)");
    assert_int_equal(PARSE(&v, &err, "--format", "PNG"), K25_EINVAL); /* exact names */
}

static void test_did_you_mean(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--rouns", "3"), K25_ENOTFOUND);
    assert_string_equal(err.msg, "command line: '--rouns': unknown option (did you mean '--rounds'?)");
    assert_true(k25_cliopt_unknown(&err));
    assert_string_equal(err.field, "--rouns");
    /* the =value tail is not part of the name */
    assert_int_equal(PARSE(&v, &err, "--fromat=png"), K25_ENOTFOUND);
    assert_string_equal(err.msg, "command line: '--fromat': unknown option (did you mean '--format'?)");
    /* an alias counts as a name; an abbreviation of one option is suggested */
    assert_int_equal(PARSE(&v, &err, "--requst-rate", "1"), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "did you mean '--request-rate'?"));
    assert_int_equal(PARSE(&v, &err, "--cont", "1"), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "did you mean '--context'?"));
    /* nothing close: the help is named instead */
    assert_int_equal(PARSE(&v, &err, "--zzzzzzzz"), K25_ENOTFOUND);
    assert_string_equal(err.msg, "command line: '--zzzzzzzz': unknown option (k25 test --help lists the options)");
    assert_int_equal(PARSE(&v, &err, "-x"), K25_ENOTFOUND);
    assert_null(strstr(err.msg, "did you mean"));
    /* another error is not "unknown option" */
    assert_int_equal(PARSE(&v, &err, "--rounds", "x"), K25_EINVAL);
    assert_false(k25_cliopt_unknown(&err));
    /* the distance itself */
    assert_int_equal(k25_cliopt_distance("kitten", "sitting"), 3);
    assert_int_equal(k25_cliopt_distance("ab", "ba"), 1); /* a swap is one edit */
    assert_int_equal(k25_cliopt_distance("", "abc"), 3);
    assert_int_equal(k25_cliopt_distance("same", "same"), 0);
}

static void test_missing_values(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--out"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--out': missing value");
    assert_int_equal(PARSE(&v, &err, "--out", "--json"), K25_EINVAL);
    assert_non_null(strstr(err.msg, "'--out': missing value (before '--json'"));
    assert_int_equal(PARSE(&v, &err, "--out=--json"), 0); /* the = form takes anything */
    assert_string_equal(v.out, "--json");
    assert_int_equal(PARSE(&v, &err, "--rounds", "-3"), K25_ERANGE); /* a dash value is a value */
    assert_int_equal(PARSE(&v, &err, "--ab", "one"), K25_EINVAL);
    assert_non_null(strstr(err.msg, "'--ab': needs 2 values"));
    assert_int_equal(PARSE(&v, &err, "--ab=x"), K25_EINVAL);
    assert_int_equal(PARSE(&v, &err, "--json=yes"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--json': takes no value, got \"yes\"");
}

static void test_repeated(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    /* a scalar given twice: the last one wins (as config flags do) */
    assert_int_equal(PARSE(&v, &err, "--rounds", "3", "--rounds=9", "--json", "--json"), 0);
    assert_int_equal(v.rounds, 9);
    assert_true(v.json);
    /* a list keeps every occurrence in order, up to its capacity */
    assert_int_equal(PARSE(&v, &err, "--item", "a", "--item=b", "--item", "c"), 0);
    assert_int_equal(v.list.n, 3);
    assert_string_equal(v.items[0], "a");
    assert_string_equal(v.items[2], "c");
    assert_int_equal(PARSE(&v, &err, "--item", "a", "--item=b", "--item", "c", "--item", "d"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--item': given more than 3 times");
    /* a callback sees each occurrence, and its error stops the parse */
    assert_int_equal(PARSE(&v, &err, "--call", "x", "--call=y"), 0);
    assert_int_equal(v.calls, 2);
    assert_string_equal(v.last_call, "y");
    assert_int_equal(PARSE(&v, &err, "--call", "bad"), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--call': bad thing 'bad'");
    /* hidden options parse */
    assert_int_equal(PARSE(&v, &err, "--secret", "s"), 0);
    assert_string_equal(v.hidden, "s");
}

/* The help of the test table, captured. */
static char *help_text(struct k25_config *cfg)
{
    struct vals v;
    vals_init(&v);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    /* print through parse's own path: --help with a redirected stdout is awkward, call the printer */
    const struct k25_opt opts[] = {
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &v.quiet, .help = "quiet"},
        {.names = {"--rounds"}, .type = K25_OPT_INT, .dest = &v.rounds, .min = 2, .max = 32,
         .help = "rounds\nsecond line"},
        {.names = {"--format"}, .type = K25_OPT_ENUM, .dest = &v.format, .choices = formats, .help = "plots"},
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &v.out, .deflt = "stdout", .help = "output"},
        {.names = {"--item"}, .type = K25_OPT_LIST, .dest = &v.list, .help = "an item"},
        {.names = {"--secret"}, .type = K25_OPT_STRING, .dest = &v.hidden, .flags = K25_OPT_HIDDEN},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {.name = "test", .usage = "test [options] FILE...", .about = "About.\n",
                                       .opts = opts, .config = cfg, .epilog = "Exit status: 0.\n"};
    k25_cliopt_print_help(&cmd, f);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void test_help_generated(void **state)
{
    (void)state;
    char *h = help_text(NULL);
    assert_true(!strncmp(h, "usage: k25 test [options] FILE...\n\nAbout.\n\noptions:\n", 50));
    assert_non_null(strstr(h, "\n  --quiet, -q               quiet\n"));
    assert_non_null(strstr(h, "\n  --rounds N                rounds\n                            second line "
                              "(2..32; default: 5)\n"));
    assert_non_null(strstr(h, "\n  --format png|svg|pdf      plots (default: png)\n"));
    assert_non_null(strstr(h, "\n  --out FILE                output (default: stdout)\n"));
    assert_non_null(strstr(h, "--item VALUE              an item (repeatable)\n"));
    assert_non_null(strstr(h, "--help, -h"));
    assert_null(strstr(h, "--secret"));
    assert_null(strstr(h, "--prefill-chunk-size")); /* no config flags for this command */
    assert_non_null(strstr(h, "\nExit status: 0.\n"));
    free(h);
    struct k25_config cfg;
    k25_config_init(&cfg);
    h = help_text(&cfg);
    assert_non_null(strstr(h, "--config FILE"));
    assert_non_null(strstr(h, "--prefill-chunk-size N"));
    free(h);
    /* --help anywhere in an option position wins over errors elsewhere; as a value it is a value */
    struct vals v;
    struct k25_error err;
    assert_int_equal(PARSE(&v, &err, "--rounds", "99", "-h"), K25_CLIOPT_HELP);
    assert_int_equal(PARSE(&v, &err, "--bogus", "--help"), K25_CLIOPT_HELP);
    assert_int_equal(PARSE(&v, &err, "--title=--help"), 0);
    assert_int_equal(PARSE(&v, &err, "--", "--help"), 100);
}

static void test_config_flags(void **state)
{
    (void)state;
    struct vals v;
    struct k25_error err;
    struct k25_config cfg;
    k25_config_init(&cfg);
    char *a[] = {"test", "--prefill-chunk-size=64", "in.jsonl", "--rounds", "3", "--max-batch-size", "4", NULL};
    int argc = 7;
    vals_init(&v);
    k25_error_clear(&err);
    assert_int_equal(parse(&v, &cfg, argc, a, &err), 100);
    assert_int_equal(cfg.prefill_chunk_size, 64);
    assert_int_equal(cfg.max_batch_size, 4);
    assert_int_equal(v.rounds, 3);
    /* a config flag's error is the config's (cli_config.c), unchanged */
    char *b[] = {"test", "--prefill-chunk-size", "abc", NULL};
    k25_config_init(&cfg);
    vals_init(&v);
    assert_int_equal(parse(&v, &cfg, 3, b, &err), K25_EINVAL);
    assert_string_equal(err.msg, "command line: '--prefill-chunk-size': expected a positive integer, got \"abc\"");
    /* a mistyped config flag is suggested like the table's own */
    char *c[] = {"test", "--prefil-chunk-size", "5", NULL};
    k25_config_init(&cfg);
    vals_init(&v);
    assert_int_equal(parse(&v, &cfg, 3, c, &err), K25_ENOTFOUND);
    assert_string_equal(err.msg, "command line: '--prefil-chunk-size': unknown option (did you mean "
                                 "'--prefill-chunk-size'?)");
    /* without config, the same flag is simply unknown */
    char *d[] = {"test", "--prefill-chunk-size", "5", NULL};
    vals_init(&v);
    assert_int_equal(parse(&v, NULL, 3, d, &err), K25_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_both_value_forms), cmocka_unit_test(test_ranges_and_numbers),
        cmocka_unit_test(test_enums),            cmocka_unit_test(test_did_you_mean),
        cmocka_unit_test(test_missing_values),   cmocka_unit_test(test_repeated),
        cmocka_unit_test(test_help_generated),   cmocka_unit_test(test_config_flags),
    };
    return cmocka_run_group_tests_name("cliopt", tests, NULL, NULL);
}
