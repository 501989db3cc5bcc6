/*
 * filter.c - filter expressions over gold-set requests (`--filter`).
 *
 * The expression language is util's (k25util.h, docs/cli.md
 * "Expressions"); this file supplies its variables:
 *     input_length, output_length (expected_output_length)   numbers
 *     domain, id                                              text
 * Texts order bytewise; a request without a domain has domain == "".
 * Every parse error is "filter: column N: ..." (1-based column).
 */
#include "gold.h"

#include <stdlib.h>
#include <string.h>

enum fld { F_INPUT_LENGTH, F_OUTPUT_LENGTH, F_DOMAIN, F_ID };

struct k25_gold_filter {
    struct k25_expr *root;
};

static bool resolve(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why, size_t n)
{
    (void)ctx;
    static const struct {
        const char *name;
        enum fld f;
    } fields[] = {{"input_length", F_INPUT_LENGTH},
                  {"output_length", F_OUTPUT_LENGTH},
                  {"expected_output_length", F_OUTPUT_LENGTH},
                  {"domain", F_DOMAIN},
                  {"id", F_ID}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (!strcmp(name, fields[i].name)) {
            *slot = (int)fields[i].f;
            *type = fields[i].f == F_DOMAIN || fields[i].f == F_ID ? K25_EXPR_STR : K25_EXPR_NUM;
            return true;
        }
    snprintf(why, n, "unknown field '%.60s' (input_length, output_length, domain, id)", name);
    return false;
}

static struct k25_expr_value lookup(void *ctx, const char *name, int slot)
{
    (void)name;
    const struct k25_gold_request *r = ctx;
    struct k25_expr_value v = {.type = K25_EXPR_STR};
    switch ((enum fld)slot) {
    case F_INPUT_LENGTH:
        v.type = K25_EXPR_NUM;
        v.num = (double)r->input_length;
        break;
    case F_OUTPUT_LENGTH:
        v.type = K25_EXPR_NUM;
        v.num = (double)r->expected_output_length;
        break;
    case F_DOMAIN: v.str = r->domain ? r->domain : ""; break;
    case F_ID: v.str = r->id ? r->id : ""; break;
    }
    return v;
}

int k25_gold_filter_parse(const char *expr, k25_gold_filter_t **out, int *err_col,
                          struct k25_error *err)
{
    const struct k25_expr_opts o = {
        .what = "filter",
        .names = "a field (input_length, output_length, domain, id)",
        .resolve = resolve,
        .text_order = true,
    };
    *out = NULL;
    struct k25_expr *root;
    int rc = k25_expr_parse(expr, &o, &root, NULL, err_col, err);
    if (rc < 0)
        return rc;
    k25_gold_filter_t *f = malloc(sizeof(*f));
    if (!f) {
        k25_expr_free(root);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
    }
    f->root = root;
    *out = f;
    return 0;
}

bool k25_gold_filter_match(const k25_gold_filter_t *f, const struct k25_gold_request *r)
{
    return !f || k25_expr_eval(f->root, lookup, (void *)r);
}

void k25_gold_filter_destroy(k25_gold_filter_t *f)
{
    if (!f)
        return;
    k25_expr_free(f->root);
    free(f);
}
