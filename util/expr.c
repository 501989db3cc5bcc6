/*
 * expr.c - the one expression language of k25 (grammar in k25util.h and
 * docs/cli.md "Expressions"): gold-set and bench --filter, k25 logs
 * --filter, sweep --only and constraints, SLA conditions.
 *
 * A recursive-descent parser builds a small tree once; evaluation walks it
 * and asks the caller for each variable (a lookup callback), so every user
 * brings its own variables.  Names are checked while parsing through the
 * caller's resolver, which also says whether a name holds numbers or text,
 * so a comparison that can never make sense ("domain > 3") is a parse error
 * naming its column, not a silent "no match".
 *
 * Every error is "WHAT: column N: MESSAGE" where MESSAGE names what was
 * expected and the token found ("expected a value after '>=', got ')'").
 */
#include "k25util.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 200 /* nesting bound: hostile input is an error, not a stack overflow */

struct parser {
    const char *s;
    size_t pos;
    const struct k25_expr_opts *o;
    struct k25_error *err;
    int *err_col;
    int depth; /* recursion depth */
};

static const char *const op_texts[] = {"<", "<=", ">", ">=", "==", "!="};

const char *k25_expr_op_text(enum k25_expr_op op)
{
    return (unsigned)op < 6 ? op_texts[op] : "?";
}

void k25_expr_free(struct k25_expr *e)
{
    if (!e)
        return;
    k25_expr_free(e->a);
    k25_expr_free(e->b);
    free(e->name);
    free(e->text);
    free(e);
}

static int col_of(const struct parser *p, size_t at)
{
    return p->o->col0 + (int)at + 1;
}

/* The error at offset at: "WHAT: column N: MESSAGE". */
static int perr(struct parser *p, size_t at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int perr(struct parser *p, size_t at, const char *fmt, ...)
{
    char what[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    int col = col_of(p, at);
    if (p->err_col)
        *p->err_col = col;
    const struct k25_expr_opts *o = p->o;
    return k25_error_set(p->err, K25_EINVAL, o->file, o->line, o->field, "%s%scolumn %d: %s", o->what ? o->what : "",
                         o->what ? ": " : "", col, what);
}

static int nomem(struct parser *p)
{
    const struct k25_expr_opts *o = p->o;
    return k25_error_set(p->err, K25_ENOMEM, o->file, o->line, o->field, "%s%sout of memory", o->what ? o->what : "",
                         o->what ? ": " : "");
}

static void skip_ws(struct parser *p)
{
    while (p->s[p->pos] && isspace((unsigned char)p->s[p->pos]))
        p->pos++;
}

static bool is_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.';
}

static bool is_special(char c)
{
    return strchr("()!=<>&|\"'", c) != NULL;
}

static bool is_word_char(char c)
{
    return c && !isspace((unsigned char)c) && !is_special(c);
}

/*
 * Length of the word at s: word characters and, after the first, groups
 * "(word characters)" ("hot(3)", a log value), so "(x == a)" still ends
 * at "a".
 */
static size_t word_len(const char *s)
{
    size_t i = 0;
    for (;;) {
        if (is_word_char(s[i])) {
            i++;
            continue;
        }
        if (i == 0 || s[i] != '(')
            return i;
        size_t j = i + 1;
        while (is_word_char(s[j]))
            j++;
        if (s[j] != ')')
            return i;
        i = j + 1;
    }
}

/*
 * The token at offset at, quoted for messages into buf: 'word', '>=',
 * '"text"', or "the end".  Long tokens are cut with "...".
 */
static const char *tok_at(const struct parser *p, size_t at, char *buf, size_t n)
{
    const char *s = p->s + at;
    size_t len;
    if (!*s)
        return "the end";
    if (*s == '"' || *s == '\'') {
        len = 1;
        while (s[len] && s[len] != *s)
            len += s[len] == '\\' && s[len + 1] ? 2 : 1;
        len += s[len] != 0;
    } else if (strchr("<>=!&|", *s)) {
        len = 1;
        while (s[len] && strchr("<>=!&|", s[len]) && len < 3)
            len++;
    } else if (is_word_char(*s)) {
        len = word_len(s);
    } else {
        len = 1;
    }
    if (len > 24)
        snprintf(buf, n, "'%.21s...'", s);
    else
        snprintf(buf, n, "'%.*s'", (int)len, s);
    return buf;
}

/* Is the word w (a keyword) at offset at, not followed by a name character? */
static bool word_at(const struct parser *p, size_t at, const char *w)
{
    size_t l = strlen(w);
    return !strncmp(p->s + at, w, l) && !is_name_char(p->s[at + l]);
}

/* ------------------------------------------------------------- numbers */

/*
 * A number literal at s: [+-]digits[.digits][e[+-]digits], then an
 * optional multiplier k/K (1024) or m/M (1048576) or a unit (ignored).
 * Returns its length (0: not a number); the next character is not a word
 * character when it succeeds.
 */
static size_t lex_number(const char *s, double *out)
{
    static const char *const units[] = {"ns", "us", "ms", "s", "b", "kb", "mb", "gb"};
    size_t i = 0;
    if (s[i] == '-' || s[i] == '+')
        i++;
    size_t d0 = i;
    while (isdigit((unsigned char)s[i]))
        i++;
    size_t nd = i - d0;
    if (s[i] == '.') {
        i++;
        size_t f0 = i;
        while (isdigit((unsigned char)s[i]))
            i++;
        nd += i - f0;
    }
    if (nd == 0)
        return 0;
    if ((s[i] == 'e' || s[i] == 'E') &&
        (isdigit((unsigned char)s[i + 1]) || ((s[i + 1] == '-' || s[i + 1] == '+') && isdigit((unsigned char)s[i + 2])))) {
        i += 2;
        while (isdigit((unsigned char)s[i]))
            i++;
    }
    char buf[64];
    if (i >= sizeof(buf))
        return 0;
    memcpy(buf, s, i);
    buf[i] = 0;
    double v = strtod(buf, NULL);
    if (!isfinite(v))
        return 0;
    size_t w = i;
    while (isalpha((unsigned char)s[w]))
        w++;
    size_t sl = w - i;
    if (sl == 1 && (s[i] == 'k' || s[i] == 'K'))
        v *= 1024.0;
    else if (sl == 1 && (s[i] == 'm' || s[i] == 'M'))
        v *= 1048576.0;
    else if (sl > 0) {
        bool unit = false;
        for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++)
            if (strlen(units[u]) == sl && !strncmp(s + i, units[u], sl))
                unit = true;
        if (!unit)
            return 0;
    }
    if (is_word_char(s[w]))
        return 0; /* "4x2", "1.2.3": a word, not a number */
    *out = v;
    return w;
}

bool k25_expr_number(const char *s, double *out)
{
    double v;
    size_t n = lex_number(s, &v);
    if (!n || s[n])
        return false;
    *out = v;
    return true;
}

/* ----------------------------------------------------------- parsing */

static int parse_or(struct parser *p, struct k25_expr **out);

static const char *type_noun(enum k25_expr_type t)
{
    return t == K25_EXPR_NUM ? "a number" : t == K25_EXPR_STR ? "a string" : "a value";
}

/* Reads the operator at p->pos into *op; false (pos unchanged) when there is none. */
static bool lex_op(struct parser *p, enum k25_expr_op *op)
{
    static const struct {
        const char *t;
        enum k25_expr_op op;
    } ops[] = {{"<=", K25_EXPR_LE}, {">=", K25_EXPR_GE}, {"==", K25_EXPR_EQ},
               {"!=", K25_EXPR_NE}, {"<", K25_EXPR_LT},  {">", K25_EXPR_GT}};
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        size_t l = strlen(ops[i].t);
        if (!strncmp(p->s + p->pos, ops[i].t, l)) {
            *op = ops[i].op;
            p->pos += l;
            return true;
        }
    }
    return false;
}

/* Parses the value after `NAME op` into the CMP node n. */
static int parse_value(struct parser *p, struct k25_expr *n)
{
    char tb[40];
    const char *optext = k25_expr_op_text(n->op);
    skip_ws(p);
    size_t v0 = p->pos;
    n->value_col = col_of(p, v0);
    char q = p->s[v0];
    if (q == '"' || q == '\'') {
        size_t len = strlen(p->s + v0);
        n->text = malloc(len + 1);
        if (!n->text)
            return nomem(p);
        size_t w = 0, i = v0 + 1;
        while (p->s[i] && p->s[i] != q) {
            if (p->s[i] == '\\' && (p->s[i + 1] == q || p->s[i + 1] == '\\'))
                i++;
            n->text[w++] = p->s[i++];
        }
        n->text[w] = 0;
        if (!p->s[i])
            return perr(p, v0, "string not closed (missing %s)", q == '"' ? "\"" : "'");
        p->pos = i + 1;
        n->value_type = K25_EXPR_STR;
    } else if (is_word_char(q)) {
        size_t e = v0 + word_len(p->s + v0);
        n->text = malloc(e - v0 + 1);
        if (!n->text)
            return nomem(p);
        memcpy(n->text, p->s + v0, e - v0);
        n->text[e - v0] = 0;
        n->value_type = lex_number(p->s + v0, &n->num) ? K25_EXPR_NUM : K25_EXPR_STR;
        p->pos = e;
    } else {
        return perr(p, v0, "expected %s after '%s', got %s", type_noun(n->name_type), optext,
                    tok_at(p, v0, tb, sizeof(tb)));
    }
    /* the kinds must be able to meet */
    if (n->name_type == K25_EXPR_NUM && n->value_type != K25_EXPR_NUM)
        return perr(p, v0, "expected a number after '%s', got %s (%s is a number)", optext,
                    tok_at(p, v0, tb, sizeof(tb)), n->name);
    if (n->name_type == K25_EXPR_STR && n->value_type == K25_EXPR_NUM)
        return perr(p, v0, "expected a string after '%s', got %s (%s is text: quote it, \"%s\")", optext,
                    tok_at(p, v0, tb, sizeof(tb)), n->name, n->text);
    if (n->name_type == K25_EXPR_STR && !n->text_order && n->op != K25_EXPR_EQ && n->op != K25_EXPR_NE)
        return perr(p, n->op_col - 1 - p->o->col0, "'%s' orders numbers and %s is text: use == or !=", optext,
                    n->name);
    return 0;
}

/* Parses one comparison `NAME op value`. */
static int parse_cmp(struct parser *p, struct k25_expr **out)
{
    char tb[40];
    const struct k25_expr_opts *o = p->o;
    skip_ws(p);
    size_t n0 = p->pos;
    while (is_name_char(p->s[p->pos]))
        p->pos++;
    if (p->pos == n0)
        return perr(p, n0, "expected %s, got %s", o->names ? o->names : "a name", tok_at(p, n0, tb, sizeof(tb)));
    struct k25_expr *n = calloc(1, sizeof(*n));
    if (!n)
        return nomem(p);
    int rc;
    n->kind = K25_EXPR_CMP;
    n->col = col_of(p, n0);
    n->slot = -1;
    n->text_order = o->text_order;
    n->name = malloc(p->pos - n0 + 1);
    if (!n->name) {
        rc = nomem(p);
        goto out_free;
    }
    memcpy(n->name, p->s + n0, p->pos - n0);
    n->name[p->pos - n0] = 0;
    if (o->resolve) {
        char why[300] = "";
        if (!o->resolve(o->ctx, n->name, &n->name_type, &n->slot, why, sizeof(why))) {
            if (!*why)
                snprintf(why, sizeof(why), "unknown name '%s'", n->name);
            rc = perr(p, n0, "%s", why);
            goto out_free;
        }
    }
    skip_ws(p);
    size_t o0 = p->pos;
    n->op_col = col_of(p, o0);
    const char *c = p->s + o0;
    if (!lex_op(p, &n->op)) {
        if (c[0] == '=' && c[1] != '<' && c[1] != '>')
            rc = perr(p, o0, "'=' is not an operator; use '==' (after '%s')", n->name);
        else if (c[0] && strchr("<>=!", c[0])) /* "=>", "!<" */
            rc = perr(p, o0, "%s is not an operator (== != < <= > >=)", tok_at(p, o0, tb, sizeof(tb)));
        else
            rc = perr(p, o0, "expected an operator (== != < <= > >=) after '%s', got %s", n->name,
                      tok_at(p, o0, tb, sizeof(tb)));
        goto out_free;
    }
    /* "<==", "=>", "!==": typos, not an operator followed by a value */
    if (p->s[p->pos] && strchr("<>=", p->s[p->pos])) {
        rc = perr(p, o0, "%s is not an operator (== != < <= > >=)", tok_at(p, o0, tb, sizeof(tb)));
        goto out_free;
    }
    if ((rc = parse_value(p, n)) < 0)
        goto out_free;
    *out = n;
    return 0;
out_free:
    k25_expr_free(n);
    return rc;
}

static int parse_unary(struct parser *p, struct k25_expr **out)
{
    char tb[40];
    int rc;
    skip_ws(p);
    if (++p->depth > MAX_DEPTH) {
        rc = perr(p, p->pos, "expression nested too deeply (more than %d levels)", MAX_DEPTH);
        goto out;
    }
    size_t at = p->pos;
    char c = p->s[at];
    if (c == '!' && p->s[at + 1] != '=') {
        p->pos++;
        struct k25_expr *a = NULL;
        if ((rc = parse_unary(p, &a)) < 0)
            goto out;
        struct k25_expr *n = calloc(1, sizeof(*n));
        if (!n) {
            k25_expr_free(a);
            rc = nomem(p);
            goto out;
        }
        n->kind = K25_EXPR_NOT;
        n->col = col_of(p, at);
        n->slot = -1;
        n->a = a;
        *out = n;
        rc = 0;
    } else if (c == '(') {
        p->pos++;
        rc = parse_or(p, out);
        if (rc < 0)
            goto out;
        skip_ws(p);
        if (p->s[p->pos] != ')') {
            k25_expr_free(*out);
            *out = NULL;
            if (!p->s[p->pos])
                rc = perr(p, at, "'(' is never closed");
            else
                rc = perr(p, p->pos, "expected ')', '&&' or '||', got %s", tok_at(p, p->pos, tb, sizeof(tb)));
            goto out;
        }
        p->pos++;
        rc = 0;
    } else {
        rc = parse_cmp(p, out);
    }
out:
    p->depth--;
    return rc;
}

/* Is the parser at an '&&'/'and' (want_and) or '||'/'or'?  Advances past it. */
static bool lex_join(struct parser *p, bool want_and)
{
    skip_ws(p);
    const char *sym = want_and ? "&&" : "||", *word = want_and ? "and" : "or";
    if (!strncmp(p->s + p->pos, sym, 2)) {
        p->pos += 2;
        return true;
    }
    if (word_at(p, p->pos, word)) {
        p->pos += strlen(word);
        return true;
    }
    return false;
}

/* A chain `sub (JOIN sub)*`, left-associative. */
static int parse_chain(struct parser *p, struct k25_expr **out, bool is_and,
                       int (*sub)(struct parser *, struct k25_expr **))
{
    struct k25_expr *left = NULL;
    int rc = sub(p, &left);
    if (rc < 0)
        return rc;
    for (;;) {
        skip_ws(p);
        size_t at = p->pos;
        if (!lex_join(p, is_and))
            break;
        struct k25_expr *right = NULL;
        if ((rc = sub(p, &right)) < 0) {
            k25_expr_free(left);
            return rc;
        }
        struct k25_expr *n = calloc(1, sizeof(*n));
        if (!n) {
            k25_expr_free(left);
            k25_expr_free(right);
            return nomem(p);
        }
        n->kind = is_and ? K25_EXPR_AND : K25_EXPR_OR;
        n->col = col_of(p, at);
        n->slot = -1;
        n->a = left;
        n->b = right;
        left = n;
    }
    *out = left;
    return 0;
}

static int parse_and(struct parser *p, struct k25_expr **out)
{
    return parse_chain(p, out, true, parse_unary);
}

static int parse_or(struct parser *p, struct k25_expr **out)
{
    return parse_chain(p, out, false, parse_and);
}

/* Is a stop word at the parser's position? */
static bool at_stop_word(const struct parser *p)
{
    for (const char *const *w = p->o->stop_words; w && *w; w++)
        if (word_at(p, p->pos, *w))
            return true;
    return false;
}

int k25_expr_parse(const char *text, const struct k25_expr_opts *o, struct k25_expr **out, size_t *end, int *err_col,
                   struct k25_error *err)
{
    static const struct k25_expr_opts none = {0};
    struct parser p = {.s = text, .o = o ? o : &none, .err = err, .err_col = err_col};
    char tb[40];
    *out = NULL;
    if (err_col)
        *err_col = 0;
    skip_ws(&p);
    if (!text[p.pos])
        return perr(&p, p.pos, "empty expression");
    struct k25_expr *root = NULL;
    int rc = parse_or(&p, &root);
    if (rc < 0)
        return rc;
    skip_ws(&p);
    if (text[p.pos] && !at_stop_word(&p)) {
        k25_expr_free(root);
        char stops[128] = "";
        size_t k = 0;
        for (const char *const *w = p.o->stop_words; w && *w && k < sizeof(stops); w++)
            k += (size_t)snprintf(stops + k, sizeof(stops) - k, ", '%s'", *w);
        if (text[p.pos] == ')')
            return perr(&p, p.pos, "')' without a matching '('");
        return perr(&p, p.pos, "expected '&&', '||'%s or the end, got %s", stops, tok_at(&p, p.pos, tb, sizeof(tb)));
    }
    if (end)
        *end = p.pos;
    *out = root;
    return 0;
}

/* -------------------------------------------------------- evaluation */

static bool order_holds(int c, enum k25_expr_op op)
{
    switch (op) {
    case K25_EXPR_LT: return c < 0;
    case K25_EXPR_LE: return c <= 0;
    case K25_EXPR_GT: return c > 0;
    case K25_EXPR_GE: return c >= 0;
    case K25_EXPR_EQ: return c == 0;
    case K25_EXPR_NE: return c != 0;
    }
    return false;
}

/*
 * v op literal: two numbers compare as numbers (NaN: false); otherwise as
 * text (a number by its spelling), == and != always, the orderings
 * bytewise only with text_order (else false); an absent v is false.
 */
bool k25_expr_cmp_holds(const struct k25_expr *c, struct k25_expr_value v)
{
    if (v.type == K25_EXPR_ANY)
        return false;
    if (v.type == K25_EXPR_NUM && c->value_type == K25_EXPR_NUM) {
        double a = v.num, b = c->num;
        if (isnan(a) || isnan(b))
            return false;
        return order_holds(a < b ? -1 : a > b, c->op);
    }
    char nb[40];
    const char *s = v.str;
    if (!s) {
        if (v.type != K25_EXPR_NUM)
            s = "";
        else {
            k25_fmt_double(v.num, nb, sizeof(nb));
            s = nb;
        }
    }
    if (!c->text_order && c->op != K25_EXPR_EQ && c->op != K25_EXPR_NE)
        return false;
    return order_holds(strcmp(s, c->text ? c->text : ""), c->op);
}

bool k25_expr_eval(const struct k25_expr *e, k25_expr_lookup_fn lookup, void *ctx)
{
    switch (e->kind) {
    case K25_EXPR_OR: return k25_expr_eval(e->a, lookup, ctx) || k25_expr_eval(e->b, lookup, ctx);
    case K25_EXPR_AND: return k25_expr_eval(e->a, lookup, ctx) && k25_expr_eval(e->b, lookup, ctx);
    case K25_EXPR_NOT: return !k25_expr_eval(e->a, lookup, ctx);
    case K25_EXPR_CMP: break;
    }
    return k25_expr_cmp_holds(e, lookup(ctx, e->name, e->slot));
}
