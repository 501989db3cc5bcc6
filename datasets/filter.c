/*
 * filter.c - filter expressions over gold-set requests (`--filter`).
 *
 * Grammar (precedence from loosest to tightest):
 *     expr    := and ( '||' and )*
 *     and     := unary ( '&&' unary )*
 *     unary   := '!' unary | '(' expr ')' | field op value
 *     field   := input_length | output_length | domain | id
 *     op      := == | != | < | <= | > | >=
 *     value   := integer [k|K|m|M]   (numeric fields; k = 1024)
 *              | "string" | 'string' (string fields, \" and \\ escapes)
 * A recursive-descent parser builds a small tree; evaluation walks it.
 * Every parse error names the 1-based column where it was found.
 */
#include "gold.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

enum fld { F_INPUT_LENGTH, F_OUTPUT_LENGTH, F_DOMAIN, F_ID };
enum op { OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE };
enum kind { N_AND, N_OR, N_NOT, N_CMP };

struct node {
    enum kind kind;
    struct node *a, *b; /* AND/OR: both; NOT: a */
    enum fld field;
    enum op op;
    int64_t num;
    char *str; /* string fields: the literal, malloc'd */
};

struct k25_gold_filter {
    struct node *root;
};

struct parser {
    const char *s;
    size_t pos;
    struct k25_error *err;
    int *err_col;
    int depth;
};

static void node_free(struct node *n)
{
    if (!n)
        return;
    node_free(n->a);
    node_free(n->b);
    free(n->str);
    free(n);
}

static int perr(struct parser *p, size_t at, const char *fmt, const char *arg)
{
    if (p->err_col)
        *p->err_col = (int)at + 1;
    char what[512];
    snprintf(what, sizeof(what), fmt, arg ? arg : "");
    return k25_error_set(p->err, K25_EINVAL, NULL, 0, NULL, "filter: column %d: %s", (int)at + 1,
                         what);
}

static void skip_ws(struct parser *p)
{
    while (p->s[p->pos] && isspace((unsigned char)p->s[p->pos]))
        p->pos++;
}

/* A short quote of the input at pos, for messages. */
static const char *near(struct parser *p, char buf[24])
{
    if (!p->s[p->pos])
        return "the end";
    snprintf(buf, 24, "'%.12s'", p->s + p->pos);
    return buf;
}

static struct node *new_node(enum kind k)
{
    struct node *n = calloc(1, sizeof(struct node));
    if (n)
        n->kind = k;
    return n;
}

static int parse_or(struct parser *p, struct node **out);

static bool is_ident(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

/* Parses one comparison `field op value`. */
static int parse_cmp(struct parser *p, struct node **out)
{
    char nb[24];
    skip_ws(p);
    size_t f0 = p->pos;
    while (is_ident(p->s[p->pos]))
        p->pos++;
    size_t flen = p->pos - f0;
    if (flen == 0)
        return perr(p, f0, "expected a field (input_length, output_length, domain, id), found %s",
                    near(p, nb));
    enum fld field;
    const char *fs = p->s + f0;
#define FIS(name) (flen == strlen(name) && !strncmp(fs, name, flen))
    if (FIS("input_length"))
        field = F_INPUT_LENGTH;
    else if (FIS("output_length") || FIS("expected_output_length"))
        field = F_OUTPUT_LENGTH;
    else if (FIS("domain"))
        field = F_DOMAIN;
    else if (FIS("id"))
        field = F_ID;
    else {
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(flen < 60 ? flen : 60), fs);
        return perr(p, f0, "unknown field '%s' (input_length, output_length, domain, id)", name);
    }
#undef FIS
    skip_ws(p);
    size_t o0 = p->pos;
    const char *c = p->s + p->pos;
    enum op op;
    if (c[0] == '=' && c[1] == '=')
        op = OP_EQ, p->pos += 2;
    else if (c[0] == '!' && c[1] == '=')
        op = OP_NE, p->pos += 2;
    else if (c[0] == '<' && c[1] == '=')
        op = OP_LE, p->pos += 2;
    else if (c[0] == '>' && c[1] == '=')
        op = OP_GE, p->pos += 2;
    else if (c[0] == '<')
        op = OP_LT, p->pos += 1;
    else if (c[0] == '>')
        op = OP_GT, p->pos += 1;
    else if (c[0] == '=')
        return perr(p, o0, "'=' is not an operator; use '=='%s", NULL);
    else
        return perr(p, o0, "expected an operator (== != < <= > >=), found %s", near(p, nb));

    struct node *n = new_node(N_CMP);
    if (!n)
        return k25_error_set(p->err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
    n->kind = N_CMP;
    n->field = field;
    n->op = op;
    skip_ws(p);
    size_t v0 = p->pos;
    bool numeric = field == F_INPUT_LENGTH || field == F_OUTPUT_LENGTH;
    char q = p->s[p->pos];
    if (q == '"' || q == '\'') {
        if (numeric) {
            node_free(n);
            return perr(p, v0, "%s is a number; compare it with a number, not a string",
                        field == F_INPUT_LENGTH ? "input_length" : "output_length");
        }
        size_t len = strlen(p->s + v0);
        n->str = malloc(len + 1);
        if (!n->str) {
            node_free(n);
            return k25_error_set(p->err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
        }
        size_t w = 0;
        p->pos++;
        while (p->s[p->pos] && p->s[p->pos] != q) {
            if (p->s[p->pos] == '\\' && (p->s[p->pos + 1] == q || p->s[p->pos + 1] == '\\'))
                p->pos++;
            n->str[w++] = p->s[p->pos++];
        }
        n->str[w] = 0;
        if (!p->s[p->pos]) {
            node_free(n);
            return perr(p, v0, "string not closed (missing %s)", q == '"' ? "\"" : "'");
        }
        p->pos++;
    } else if (isdigit((unsigned char)q) || q == '-') {
        size_t e = p->pos + (q == '-');
        while (isalnum((unsigned char)p->s[e]))
            e++;
        char num[40];
        if (e - v0 >= sizeof(num)) {
            node_free(n);
            return perr(p, v0, "number too long%s", NULL);
        }
        memcpy(num, p->s + v0, e - v0);
        num[e - v0] = 0;
        bool neg = num[0] == '-';
        int64_t v;
        if (!k25_gold_parse_size(num + neg, &v)) {
            node_free(n);
            return perr(p, v0, "bad number '%s' (integer, optional k or m suffix)", num);
        }
        if (!numeric) {
            node_free(n);
            return perr(p, v0, "%s is a string; compare it with \"...\", not a number",
                        field == F_DOMAIN ? "domain" : "id");
        }
        n->num = neg ? -v : v;
        p->pos = e;
    } else {
        node_free(n);
        return perr(p, v0, numeric ? "expected a number, found %s" : "expected a string, found %s",
                    near(p, nb));
    }
    *out = n;
    return 0;
}

static int parse_unary(struct parser *p, struct node **out)
{
    char nb[24];
    skip_ws(p);
    if (++p->depth > 200) /* bounded recursion for hostile input */
        return perr(p, p->pos, "expression nested too deeply%s", NULL);
    int rc;
    char c = p->s[p->pos];
    if (c == '!' && p->s[p->pos + 1] != '=') {
        p->pos++;
        struct node *a = NULL;
        if ((rc = parse_unary(p, &a)) < 0)
            goto out;
        struct node *n = new_node(N_NOT);
        if (!n) {
            node_free(a);
            rc = k25_error_set(p->err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
            goto out;
        }
        n->kind = N_NOT;
        n->a = a;
        *out = n;
    } else if (c == '(') {
        size_t open = p->pos++;
        if ((rc = parse_or(p, out)) < 0)
            goto out;
        skip_ws(p);
        if (p->s[p->pos] != ')') {
            node_free(*out);
            *out = NULL;
            if (!p->s[p->pos])
                rc = perr(p, open, "'(' is never closed%s", NULL);
            else
                rc = perr(p, p->pos, "expected ')' or an operator, found %s", near(p, nb));
            goto out;
        }
        p->pos++;
    } else {
        rc = parse_cmp(p, out);
        goto out;
    }
    rc = 0;
out:
    p->depth--;
    return rc;
}

/* Parses a chain of `sub (OP sub)*` for OP "&&" or "||". */
static int parse_chain(struct parser *p, struct node **out, const char *opstr, enum kind k,
                       int (*sub)(struct parser *, struct node **))
{
    struct node *left = NULL;
    int rc = sub(p, &left);
    if (rc < 0)
        return rc;
    for (;;) {
        skip_ws(p);
        if (strncmp(p->s + p->pos, opstr, 2) != 0)
            break;
        p->pos += 2;
        struct node *right = NULL;
        if ((rc = sub(p, &right)) < 0) {
            node_free(left);
            return rc;
        }
        struct node *n = new_node(k);
        if (!n) {
            node_free(left);
            node_free(right);
            return k25_error_set(p->err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
        }
        n->kind = k;
        n->a = left;
        n->b = right;
        left = n;
    }
    *out = left;
    return 0;
}

static int parse_and(struct parser *p, struct node **out)
{
    return parse_chain(p, out, "&&", N_AND, parse_unary);
}

static int parse_or(struct parser *p, struct node **out)
{
    return parse_chain(p, out, "||", N_OR, parse_and);
}

int k25_gold_filter_parse(const char *expr, k25_gold_filter_t **out, int *err_col,
                          struct k25_error *err)
{
    struct parser p = {.s = expr, .pos = 0, .err = err, .err_col = err_col};
    char nb[24];
    *out = NULL;
    if (err_col)
        *err_col = 0;
    skip_ws(&p);
    if (!expr[p.pos])
        return perr(&p, p.pos, "empty expression%s", NULL);
    struct node *root = NULL;
    int rc = parse_or(&p, &root);
    if (rc < 0)
        return rc;
    skip_ws(&p);
    if (expr[p.pos]) {
        node_free(root);
        if (expr[p.pos] == '&' || expr[p.pos] == '|')
            return perr(&p, p.pos, "use '&&' or '||', found %s", near(&p, nb));
        if (expr[p.pos] == ')')
            return perr(&p, p.pos, "')' without a matching '('%s", NULL);
        return perr(&p, p.pos, "expected '&&', '||' or the end, found %s", near(&p, nb));
    }
    k25_gold_filter_t *f = malloc(sizeof(*f));
    if (!f) {
        node_free(root);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "filter: out of memory");
    }
    f->root = root;
    *out = f;
    return 0;
}

static bool cmp_result(int c, enum op op)
{
    switch (op) {
    case OP_EQ: return c == 0;
    case OP_NE: return c != 0;
    case OP_LT: return c < 0;
    case OP_LE: return c <= 0;
    case OP_GT: return c > 0;
    case OP_GE: return c >= 0;
    }
    return false;
}

static bool eval(const struct node *n, const struct k25_gold_request *r)
{
    switch (n->kind) {
    case N_AND: return eval(n->a, r) && eval(n->b, r);
    case N_OR: return eval(n->a, r) || eval(n->b, r);
    case N_NOT: return !eval(n->a, r);
    case N_CMP: break;
    }
    int c;
    switch (n->field) {
    case F_INPUT_LENGTH:
    case F_OUTPUT_LENGTH: {
        int64_t v = n->field == F_INPUT_LENGTH ? r->input_length : r->expected_output_length;
        c = v < n->num ? -1 : v > n->num;
        break;
    }
    case F_DOMAIN:
        c = strcmp(r->domain ? r->domain : "", n->str);
        break;
    case F_ID:
    default:
        c = strcmp(r->id ? r->id : "", n->str);
        break;
    }
    return cmp_result(c, n->op);
}

bool k25_gold_filter_match(const k25_gold_filter_t *f, const struct k25_gold_request *r)
{
    return !f || eval(f->root, r);
}

void k25_gold_filter_destroy(k25_gold_filter_t *f)
{
    if (!f)
        return;
    node_free(f->root);
    free(f);
}
