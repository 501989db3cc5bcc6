/*
 * test_expr.c - util's expression language (util/expr.c), the one grammar
 * behind gold-set --filter, k25 logs --filter, sweep --only and
 * constraints, and SLA conditions: precedence, every operator, number and
 * text comparisons, each form the four old parsers accepted, and each
 * error with its column and token.
 */
#include "testutil.h"

#include "k25util.h"

#include <math.h>

/* ------------------------------------------------------------ variables */

/* A tiny variable table: name -> value as text; numbers when they read as one. */
struct vars {
    const char *names[8];
    const char *values[8]; /* NULL: absent */
};

static struct k25_expr_value lookup(void *ctx, const char *name, int slot)
{
    (void)slot;
    const struct vars *v = ctx;
    struct k25_expr_value r = {.type = K25_EXPR_ANY};
    for (int i = 0; i < 8 && v->names[i]; i++)
        if (!strcmp(v->names[i], name) && v->values[i]) {
            r.str = v->values[i];
            r.type = k25_expr_number(r.str, &r.num) ? K25_EXPR_NUM : K25_EXPR_STR;
        }
    return r;
}

/* Declared types for the resolver: n* numbers, s* texts, a* either, everything else unknown. */
static bool resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    (void)ctx;
    *slot = 7;
    switch (name[0]) {
    case 'n': *type = K25_EXPR_NUM; return true;
    case 's': *type = K25_EXPR_STR; return true;
    case 'a': *type = K25_EXPR_ANY; return true;
    }
    snprintf(why, n, "unknown field '%s' (n..., s..., a...)", name);
    return false;
}

static const struct vars V = {
    {"n1", "n2", "s1", "s2", "a1", "a2", "nmiss", NULL},
    {"10", "2.5", "legal", "it's", "142.1ms", "True", NULL, NULL},
};

/* Parses with the given options and evaluates against V; fails the test on a parse error. */
static bool holds_o(const char *text, const struct k25_expr_opts *o)
{
    struct k25_expr *e;
    struct k25_error err;
    if (k25_expr_parse(text, o, &e, NULL, NULL, &err) != K25_OK)
        fail_msg("'%s' refused: %s", text, err.msg);
    bool m = k25_expr_eval(e, lookup, (void *)&V);
    k25_expr_free(e);
    return m;
}

static bool holds(const char *text)
{
    const struct k25_expr_opts o = {.what = "t", .resolve = resolve, .text_order = true};
    return holds_o(text, &o);
}

static void test_operators_and_precedence(void **state)
{
    (void)state;
    const struct {
        const char *text;
        bool want;
    } cases[] = {
        /* every operator on numbers */
        {"n1 == 10", true}, {"n1 != 10", false}, {"n1 < 10", false}, {"n1 <= 10", true},
        {"n1 > 9.5", true}, {"n1 >= 11", false}, {"n2 == 2.5", true}, {"n2 < 1e1", true},
        {"n1 > -3", true}, {"n1<=10", true},
        /* multipliers and units */
        {"n1 < 1k", true}, {"n1 < 0.01k", true}, {"n1 > 0.009K", true}, {"n1 < 1m", true},
        {"n1 == 10ms", true}, {"n1 == 10s", true},
        /* every operator on texts (bytewise), quoted either way or as a word */
        {"s1 == 'legal'", true}, {"s1 == \"legal\"", true}, {"s1 == legal", true}, {"s1 != legal", false},
        {"s1 < 'm'", true}, {"s1 <= 'legal'", true}, {"s1 > 'legal'", false}, {"s1 >= 'a'", true},
        {"s2 == 'it\\'s'", true}, {"s2 == \"it's\"", true}, {"s1 == ''", false},
        /* a value known only at evaluation: numbers as numbers (units ignored), else text */
        {"a1 > 100", true}, {"a1 == 142.1", true}, {"a2 == True", true}, {"a2 == true", false},
        {"a2 < Z", true}, /* text_order: bytewise */
        /* an absent variable: every comparison is false */
        {"nmiss == 1", false}, {"nmiss != 1", false}, {"!(nmiss == 1)", true},
        /* ! binds tightest, then &&, then || */
        {"n1 == 10 || n1 == 1 && n1 == 2", true},
        {"(n1 == 10 || n1 == 1) && n1 == 2", false},
        {"!n1 == 10", false}, {"!!(n1 == 10)", true}, {"!(n1 == 1) && s1 == legal", true},
        {"n1 == 1 || !(s1 == legal) || n2 == 2.5", true},
        /* and / or as words */
        {"n1 == 10 and n2 == 2.5", true}, {"n1 == 1 or n2 == 2.5", true}, {"n1 == 1 and n2 == 2.5 or s1 == legal", true},
        {"  ( ( n1>0 ) )  ", true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        if (holds(cases[i].text) != cases[i].want)
            fail_msg("'%s' should be %s", cases[i].text, cases[i].want ? "true" : "false");
}

/* Without text_order, ordering two texts is false (k25 logs) or an error for a text name (--only). */
static void test_text_order_off(void **state)
{
    (void)state;
    const struct k25_expr_opts o = {.what = "--only", .resolve = resolve};
    assert_false(holds_o("a2 < Z", &o));
    assert_true(holds_o("a2 != Z", &o));
    assert_true(holds_o("a1 < 200", &o)); /* numbers still order */
    struct k25_expr *e;
    struct k25_error err;
    assert_int_equal(k25_expr_parse("s1 < x", &o, &e, NULL, NULL, &err), K25_EINVAL);
    assert_string_equal(err.msg, "--only: column 4: '<' orders numbers and s1 is text: use == or !=");
}

/* The shapes the four old parsers accepted, each still accepted (and the tree the callers read). */
static void test_old_forms(void **state)
{
    (void)state;
    const struct k25_expr_opts any = {0};
    const char *ok[] = {
        /* gold-set --filter */
        "output_length > 1800 && domain == \"legal\"", "input_length <= 4k", "!domain == 'legal'",
        "id == 'it\\'s'", "expected_output_length > 1000", "input_length == 128k",
        /* k25 logs --filter */
        "degraded==True", "seq_len >= 32768 && avg_time_per_chunk > 40", "avg_time_per_chunk > 100ms",
        "req_id==r-3.x", "kv_block_access==hot(3) && cache_hit==True", "(kv_block_access==hot(3))",
        /* sweep --only and constraints */
        "prefill_chunk_size >= 1024 && max_batch_size == 4", "kv_cache_dtype == fp8", "fidelity_kl_mean <= 0.05",
        "kv_compression_ratio != 0.85",
        /* SLA conditions */
        "input_length >= 32k and output_length <= 100", "input_length > 1000 && output_length > 10",
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        struct k25_expr *e;
        struct k25_error err;
        if (k25_expr_parse(ok[i], &any, &e, NULL, NULL, &err) != K25_OK)
            fail_msg("'%s' refused: %s", ok[i], err.msg);
        k25_expr_free(e);
    }
    /* the tree: a constraint is one comparison with its columns */
    struct k25_expr *e;
    struct k25_error err;
    assert_int_equal(k25_expr_parse("  fidelity_kl_mean <= 5e-2", &any, &e, NULL, NULL, &err), K25_OK);
    assert_int_equal(e->kind, K25_EXPR_CMP);
    assert_string_equal(e->name, "fidelity_kl_mean");
    assert_int_equal(e->op, K25_EXPR_LE);
    assert_int_equal(e->col, 3);
    assert_int_equal(e->op_col, 20);
    assert_int_equal(e->value_col, 23);
    assert_int_equal(e->value_type, K25_EXPR_NUM);
    assert_true(e->num == 0.05);
    assert_string_equal(e->text, "5e-2");
    k25_expr_free(e);
    /* && is left-associative and binds tighter than || */
    assert_int_equal(k25_expr_parse("a==1 || b==2 && c==3 && d==4", &any, &e, NULL, NULL, &err), K25_OK);
    assert_int_equal(e->kind, K25_EXPR_OR);
    assert_int_equal(e->col, 6);
    assert_int_equal(e->b->kind, K25_EXPR_AND);
    assert_int_equal(e->b->a->kind, K25_EXPR_AND);
    assert_string_equal(e->b->b->name, "d");
    k25_expr_free(e);
    /* stop words end the expression (the head of an SLA line) */
    static const char *const stops[] = {"at", "where", NULL};
    const struct k25_expr_opts so = {.stop_words = stops};
    size_t end = 0;
    assert_int_equal(k25_expr_parse("ttft_p95_ms <= 500 at input_length >= 32k", &so, &e, &end, NULL, &err), K25_OK);
    assert_int_equal(end, 19);
    assert_true(e->num == 500);
    k25_expr_free(e);
    /* columns count from col0 for a part of a longer line */
    const struct k25_expr_opts co = {.what = "x", .col0 = 22};
    assert_int_equal(k25_expr_parse("input_length >", &co, &e, NULL, NULL, &err), K25_EINVAL);
    assert_string_equal(err.msg, "x: column 37: expected a value after '>', got the end");
}

static void test_numbers(void **state)
{
    (void)state;
    double v;
    assert_true(k25_expr_number("32k", &v) && v == 32768);
    assert_true(k25_expr_number("2M", &v) && v == 2097152);
    assert_true(k25_expr_number("142.1ms", &v) && v == 142.1);
    assert_true(k25_expr_number("-1.5e3", &v) && v == -1500);
    assert_true(k25_expr_number(".5", &v) && v == 0.5);
    assert_false(k25_expr_number("4x", &v));
    assert_false(k25_expr_number("1.2.3", &v));
    assert_false(k25_expr_number("fp8", &v));
    assert_false(k25_expr_number("", &v));
    assert_false(k25_expr_number("1e999", &v)); /* not finite */
    assert_false(k25_expr_number("0x10", &v));
}

/* Every error: the column and the token found there, one format. */
static void test_errors(void **state)
{
    (void)state;
    const struct k25_expr_opts o = {.what = "--filter", .names = "a field", .resolve = resolve, .text_order = true};
    const struct {
        const char *text;
        int col;
        const char *msg;
    } cases[] = {
        {"", 1, "--filter: column 1: empty expression"},
        {"   ", 4, "--filter: column 4: empty expression"},
        {"n1 >= )", 7, "--filter: column 7: expected a number after '>=', got ')'"},
        {"a1 >=", 6, "--filter: column 6: expected a value after '>=', got the end"},
        {"foo > 3", 1, "--filter: column 1: unknown field 'foo' (n..., s..., a...)"},
        {"s1 > 3", 6, "--filter: column 6: expected a string after '>', got '3' (s1 is text: quote it, \"3\")"},
        {"n1 == 'x'", 7, "--filter: column 7: expected a number after '==', got ''x'' (n1 is a number)"},
        {"n1 > 4x", 6, "--filter: column 6: expected a number after '>', got '4x' (n1 is a number)"},
        {"n1 = 3", 4, "--filter: column 4: '=' is not an operator; use '==' (after 'n1')"},
        {"n1 <== 3", 4, "--filter: column 4: '<==' is not an operator (== != < <= > >=)"},
        {"n1 => 3", 4, "--filter: column 4: '=>' is not an operator (== != < <= > >=)"},
        {"n1 ~ 3", 4, "--filter: column 4: expected an operator (== != < <= > >=) after 'n1', got '~'"},
        {"n1", 3, "--filter: column 3: expected an operator (== != < <= > >=) after 'n1', got the end"},
        {"(n1 > 3", 1, "--filter: column 1: '(' is never closed"},
        {"(n1 > 3 s1 == x)", 9, "--filter: column 9: expected ')', '&&' or '||', got 's1'"},
        {"n1 > 3)", 7, "--filter: column 7: ')' without a matching '('"},
        {"n1 > 3 & s1 == 'x'", 8, "--filter: column 8: expected '&&', '||' or the end, got '&'"},
        {"n1 > 3 s1 == 'x'", 8, "--filter: column 8: expected '&&', '||' or the end, got 's1'"},
        {"s1 == \"legal", 7, "--filter: column 7: string not closed (missing \")"},
        {"s1 == 'legal", 7, "--filter: column 7: string not closed (missing ')"},
        {"n1 > 3 && ", 11, "--filter: column 11: expected a field, got the end"},
        {"n1 > 3 || && n1 < 4", 11, "--filter: column 11: expected a field, got '&&'"},
        {"!", 2, "--filter: column 2: expected a field, got the end"},
        {"== 3", 1, "--filter: column 1: expected a field, got '=='"},
        {"n1 > averyveryverylongwordthatgoesonandon", 6,
         "--filter: column 6: expected a number after '>', got 'averyveryverylongword...' (n1 is a number)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct k25_expr *e = (struct k25_expr *)1;
        struct k25_error err;
        int col = -1;
        int rc = k25_expr_parse(cases[i].text, &o, &e, NULL, &col, &err);
        if (rc != K25_EINVAL || col != cases[i].col || strcmp(err.msg, cases[i].msg) != 0)
            fail_msg("'%s': rc %d col %d msg '%s' (want col %d, '%s')", cases[i].text, rc, col, err.msg, cases[i].col,
                     cases[i].msg);
        assert_null(e);
    }
    /* file, line and field travel into the message */
    const struct k25_expr_opts fo = {.what = "\"x >\"", .file = "s.yaml", .line = 7, .field = "subject_to"};
    struct k25_expr *e;
    struct k25_error err;
    assert_int_equal(k25_expr_parse("x >", &fo, &e, NULL, NULL, &err), K25_EINVAL);
    assert_string_equal(err.msg, "s.yaml:7: 'subject_to': \"x >\": column 4: expected a value after '>', got the end");
    assert_int_equal(err.line, 7);
    /* deep nesting is refused, not a stack overflow */
    char deep[2000];
    memset(deep, '(', 1000);
    strcpy(deep + 1000, "n1==1");
    assert_int_equal(k25_expr_parse(deep, &o, &e, NULL, NULL, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "nested too deeply"));
    memset(deep, '!', 1000);
    assert_int_equal(k25_expr_parse(deep, &o, &e, NULL, NULL, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "nested too deeply"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_operators_and_precedence),
        cmocka_unit_test(test_text_order_off),
        cmocka_unit_test(test_old_forms),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests_name("expr", tests, NULL, NULL);
}
