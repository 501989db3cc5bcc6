/*
 * tu_golden.h - the `tiny` greedy golden sequence (tests/golden/README.md):
 * read it, verify an engine against it with the token-identity rule
 * (teacher-forced replay, k25_tok_verify), and write it anew.
 *
 * The file has two lines: the generated token ids, then each position's
 * top-1 margin (logit units), both comma-separated.  A file with only the
 * first line (no margins) is verified strictly: every position must agree.
 */
#ifndef K25_TU_GOLDEN_H
#define K25_TU_GOLDEN_H

#include "harness.h"
#include "k25.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TU_GOLDEN_PATH "tests/golden/tiny-greedy.txt"
#define TU_GOLDEN_PROMPT "Article 12. Notice. Any notice under this Agreement shall be in writing"
#define TU_GOLDEN_TOKENS 32
#define TU_GOLDEN_MAX 256

struct tu_golden {
    int n;
    int32_t tok[TU_GOLDEN_MAX];
    float margin[TU_GOLDEN_MAX];
    bool has_margins;
};

/* The golden prompt as byte tokens into ids[128]; returns the count. */
static inline int tu_golden_prompt(int32_t *ids)
{
    int n = (int)strlen(TU_GOLDEN_PROMPT);
    for (int i = 0; i < n; i++)
        ids[i] = (unsigned char)TU_GOLDEN_PROMPT[i];
    return n;
}

/* Parses one comma-separated line of numbers into out[max] as doubles; returns the count or -1. */
static inline int tu_golden_parse(char *line, double *out, int max)
{
    int n = 0;
    for (char *p = line; *p && *p != '\n';) {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || n == max)
            return -1;
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\n' && *end != '\0')
            return -1;
    }
    return n;
}

/* Reads path into g; 0, or -1 with the reason in why[256]. */
static inline int tu_golden_read(const char *path, struct tu_golden *g, char *why)
{
    memset(g, 0, sizeof(*g));
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, 256, "%.150s: %.90s", path, strerror(errno));
        return -1;
    }
    char line[8192];
    double v[TU_GOLDEN_MAX];
    int rc = -1, n;
    if (!fgets(line, sizeof(line), f) || (n = tu_golden_parse(line, v, TU_GOLDEN_MAX)) <= 0) {
        snprintf(why, 256, "%s:1: expected comma-separated token ids", path);
        goto out;
    }
    g->n = n;
    for (int i = 0; i < n; i++)
        g->tok[i] = (int32_t)v[i];
    if (fgets(line, sizeof(line), f)) {
        if (tu_golden_parse(line, v, TU_GOLDEN_MAX) != n) {
            snprintf(why, 256, "%s:2: expected %d comma-separated margins", path, n);
            goto out;
        }
        for (int i = 0; i < n; i++)
            g->margin[i] = (float)v[i];
        g->has_margins = true;
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

/*
 * Replays the golden at path on a fresh engine with cfg and model (greedy,
 * teacher-forced) under the rule; *rep gets the report.  Returns 0, or -1
 * with the reason in why[256] when the file or the replay failed.
 */
static inline int tu_golden_verify(const char *path, const struct k25_config *cfg, const k25_model_t *model,
                                   struct k25_tok_report *rep, char *why)
{
    struct tu_golden g;
    if (tu_golden_read(path, &g, why) != 0)
        return -1;
    int32_t ids[128];
    int n = tu_golden_prompt(ids);
    k25_engine_t *e;
    struct k25_error err;
    int rc = k25_engine_create(cfg, model, &e, &err);
    if (rc == K25_OK) {
        k25_testknob_install(e); /* K25_TEST_LOSSY: test_golden_rule_can_fail's lossy child */
        rc = k25_tok_verify(e, "golden", ids, n, g.tok, g.has_margins ? g.margin : NULL, g.n, K25_TOK_TAU, rep, &err);
        k25_engine_destroy(e);
    }
    if (rc != K25_OK) {
        snprintf(why, 256, "%.250s", err.msg);
        return -1;
    }
    return 0;
}

/*
 * Writes a new golden for cfg and model: greedy free-running tokens and
 * their margins, to path (via path.tmp and rename).  Returns 0 or -1 with
 * the reason in why[256].  Used by `test_engine --write-golden`.
 */
static inline int tu_golden_write(const char *path, const struct k25_config *cfg, const k25_model_t *model,
                                  char *why)
{
    int32_t ids[128];
    int n = tu_golden_prompt(ids), h, rc;
    k25_engine_t *e;
    struct k25_error err;
    if ((rc = k25_engine_create(cfg, model, &e, &err)) != K25_OK) {
        snprintf(why, 256, "%.250s", err.msg);
        return -1;
    }
    struct k25_request req = {.id = "golden", .input_ids = ids, .n_input = n, .max_new_tokens = TU_GOLDEN_TOKENS};
    if ((rc = k25_engine_submit(e, &req, &h, &err)) != K25_OK || (rc = k25_engine_run(e, &err)) != K25_OK) {
        snprintf(why, 256, "%.250s", err.msg);
        k25_engine_destroy(e);
        return -1;
    }
    const struct k25_result *r = k25_engine_result(e, h);
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    rc = f ? 0 : -1;
    for (int i = 0; f && i < r->n_output; i++)
        fprintf(f, i ? ",%d" : "%d", r->output_ids[i]);
    for (int i = 0; f && i < r->n_output; i++)
        fprintf(f, "%s%.9g", i ? "," : "\n", (double)r->margins[i]); /* exact float round trip */
    if (f) {
        bool bad = fputc('\n', f) == EOF || ferror(f);
        if (fclose(f) != 0 || bad)
            rc = -1;
    }
    if (rc == 0 && rename(tmp, path) != 0)
        rc = -1;
    if (rc != 0) {
        snprintf(why, 256, "%.150s: %.90s", tmp, strerror(errno));
        remove(tmp);
    }
    k25_engine_destroy(e);
    return rc;
}

#endif
