/*
 * cli_gate.c - `k25 gate`: argument parsing only; the comparison is
 * k25_gate_compare (gate.c), the policy gate_policy.c, the inputs
 * gate_input.c.  Exit status: 0 pass, 1 regression, 2 unusable input,
 * 3 inconclusive (a gated metric UNSURE; K25_GATE_EXIT_* in gate.h).
 */
#include "cli.h"
#include "harness.h"
#include "gate.h"
#include "cliopt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The A/B measurement of `k25 gate --ab` (ab false: the sets are stored results). */
struct ab_plan {
    const char *cmd_a, *cmd_b;
    bool ab;
    const char *dir;      /* where A/B runs go */
    int rounds;           /* rounds measured so far, once measure_and_compare returns */
    int max_rounds;
    bool quiet;
};

/* Whether a gated (not advisory) metric is too noisy to call. */
static bool gated_unsure(const struct k25_gate_result *res)
{
    for (int i = 0; i < res->n_rows; i++)
        if (res->rows[i].verdict == K25_V_UNSURE && res->rows[i].m->gate && !res->rows[i].advisory)
            return true;
    return false;
}

/*
 * Loads base and cand into B and C (after measuring them, with --ab) and
 * compares them into res.  Sequential: while a gated metric is UNSURE,
 * measures more rounds (half as many again, at least 2) up to max_rounds.
 * Fails with the A/B run's, the loader's or the comparison's error.
 */
static int measure_and_compare(struct ab_plan *p, const char *base, const char *cand,
                               const struct k25_gate_policy *pol, const struct k25_gate_opts *go,
                               struct k25_gate_set *B, struct k25_gate_set *C, struct k25_gate_result *res,
                               struct k25_error *err)
{
    int rc;
    for (int done = 0;;) {
        if (p->ab) {
            struct k25_gate_ab_opts ao = {p->cmd_a, p->cmd_b, done, p->rounds, p->dir, p->quiet};
            if ((rc = k25_gate_ab_run(&ao, err)) != K25_OK)
                return rc;
            done = p->rounds;
            k25_gate_set_free(B);
            k25_gate_set_free(C);
        }
        if ((rc = k25_gate_set_load(base, B, err)) != K25_OK || (rc = k25_gate_set_load(cand, C, err)) != K25_OK)
            return rc;
        if ((rc = k25_gate_compare(B, C, pol, go, res, err)) != K25_OK)
            return rc;
        if (!p->ab || !gated_unsure(res) || p->rounds >= p->max_rounds)
            return K25_OK;
        int more = p->rounds / 2 > 2 ? p->rounds / 2 : 2;
        p->rounds = p->rounds + more > p->max_rounds ? p->max_rounds : p->rounds + more;
        if (!p->quiet)
            fprintf(stderr, "k25 gate: some metrics UNSURE after %d rounds; measuring up to %d\n", done, p->rounds);
    }
}

/* The verdicts: the table, or JSON on stdout (--json) and/or in json_file.  -1 (said on stderr) on failure. */
static int print_verdicts(const struct k25_gate_set *B, const struct k25_gate_set *C,
                          const struct k25_gate_policy *pol, const struct k25_gate_result *res, bool json,
                          const char *json_file)
{
    struct k25_error err;
    json_t *j = (json || json_file) ? k25_gate_json(B, C, pol, res) : NULL;
    if ((json || json_file) && !j) {
        fprintf(stderr, "k25 gate: out of memory\n");
        return -1;
    }
    if (json_file && k25_write_json_atomic(json_file, j, &err) != K25_OK) {
        fprintf(stderr, "k25 gate: --json-file: %s\n", err.msg);
        json_decref(j);
        return -1;
    }
    if (json) {
        json_dumpf(j, stdout, JSON_INDENT(2));
        fputc('\n', stdout);
    } else {
        k25_gate_print(stdout, B, C, res);
    }
    json_decref(j);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "k25 gate: writing the report failed: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

int k25_cmd_gate(int argc, char **argv)
{
    const char *base = NULL, *cand = NULL, *policy = NULL, *json_file = NULL, *dir = NULL;
    const char *ab_cmds[2] = {NULL, NULL};
    bool json = false, allow = false, quiet = false;
    int rounds = 5, max_rounds = 0;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--baseline"}, .type = K25_OPT_PATH, .dest = &base, .metavar = "B",
         .help = "the reference results (e.g. baselines/results/ci-smoke)"},
        {.names = {"--candidate"}, .type = K25_OPT_PATH, .dest = &cand, .metavar = "C",
         .help = "the results under test"},
        {.names = {"--policy"}, .type = K25_OPT_PATH, .dest = &policy, .deflt = "the built-in policy",
         .help = "metrics, direction, tolerance, comparison (the built-in\npolicy is what ci/gate-policy.yaml spells out)"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json,
         .help = "print the verdicts as JSON (for jq) instead of the table"},
        {.names = {"--json-file"}, .type = K25_OPT_PATH, .dest = &json_file, .help = "also write the JSON to FILE"},
        {.names = {"--allow-mismatch"}, .type = K25_OPT_FLAG, .dest = &allow,
         .help = "compare even when configs, workloads or gold sets differ"},
        {.names = {"--ab"}, .type = K25_OPT_STRING, .dest = ab_cmds, .nargs = 2, .metavar = "CMD_A CMD_B",
         .help = "measure both commands here, interleaved A B B A A B ..., then compare\n"
                 "(B against A).  Each is a `k25 bench ...` command line run by sh;\n"
                 "{h5} and {json} stand for its output files (appended as --out/--json\n"
                 "when absent).  CMD_A = CMD_B measures the noise floor."},
        {.names = {"--rounds"}, .type = K25_OPT_INT, .dest = &rounds, .min = 2, .max = 32,
         .help = "A/B rounds (2 runs each)"},
        {.names = {"--max-rounds"}, .type = K25_OPT_INT, .dest = &max_rounds, .min = 2, .max = 32, .metavar = "M",
         .deflt = "--rounds", .help = "while a gated metric is UNSURE, add rounds, up to M"},
        {.names = {"--dir"}, .type = K25_OPT_PATH, .dest = &dir, .metavar = "DIR",
         .deflt = "a new folder under /tmp", .help = "where A/B runs go; kept"},
        {.names = {"--quiet"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no progress lines"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "gate",
        .usage = "gate --baseline B --candidate C [--policy FILE] [--json | --json-file FILE]\n"
                 "                [--allow-mismatch]\n"
                 "       k25 gate --ab CMD_A CMD_B [--rounds N] [--max-rounds M] [--dir DIR] [--quiet]\n"
                 "                [--policy FILE] [--json | --json-file FILE] [--allow-mismatch]",
        .about = "Compares benchmark results against a baseline under a policy of per-metric tolerances\n"
                 "and fails on a regression (docs/gates.md).  B and C are `k25 bench` runs (.json or .h5),\n"
                 "sweep folders (results/NAME) or folders of runs.\n",
        .opts = opts,
        .epilog = "Verdicts: SAME, FASTER/BETTER, SLOWER/WORSE, DIFFERENT (exact), UNSURE (too noisy to tell).\n"
                  "A gate with a gated metric UNSURE and no regression is INCONCLUSIVE, never \"passed\": it\n"
                  "says why and the command that would settle it (--ab, more rounds); a policy may say\n"
                  "`unsure: pass` (passes, naming them) or `unsure: fail`.  When a calibration spread\n"
                  "too much to normalize by (> 10%), the raw change is judged and the row says so.\n"
                  "Exit status: 0 pass, 1 regression, 2 unusable input (unreadable, mismatched, bad policy),\n"
                  "3 inconclusive.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 gate: %s\n", err.msg);
        return 2;
    }
    if (argc > 1) {
        fprintf(stderr, "k25 gate: unexpected argument '%s' (k25 gate --help lists the options)\n", argv[1]);
        return 2;
    }
    const char *cmd_a = ab_cmds[0], *cmd_b = ab_cmds[1];
    bool ab = cmd_a != NULL;
    if (max_rounds < rounds)
        max_rounds = rounds;
    if (ab && (base || cand)) {
        fprintf(stderr, "k25 gate: give either --ab CMD_A CMD_B or --baseline/--candidate, not both\n");
        return 2;
    }
    if (!ab && (!base || !cand)) {
        fprintf(stderr, "k25 gate: --baseline and --candidate are required (k25 gate --help)\n");
        return 2;
    }

    struct k25_gate_policy *pol = calloc(1, sizeof(*pol));
    struct k25_gate_result *res = calloc(1, sizeof(*res));
    struct k25_gate_set B = {0}, C = {0};
    char tmpdir[64], pa[1100], pb[1100];
    int status = 2;
    if (!pol || !res) {
        fprintf(stderr, "k25 gate: out of memory\n");
        goto out;
    }
    /* an unwritable --json-file fails now, not after minutes of A/B rounds */
    if (json_file && k25_output_file_check(json_file, "--json-file", &err) != K25_OK) {
        fprintf(stderr, "k25 gate: %s\n", err.msg);
        goto out;
    }
    if (policy ? k25_gate_policy_load(policy, pol, &err) : (k25_gate_policy_default(pol), K25_OK)) {
        fprintf(stderr, "k25 gate: %s\n", err.msg);
        goto out;
    }
    if (ab) {
        if (!dir) {
            snprintf(tmpdir, sizeof(tmpdir), "/tmp/k25-gate-ab.XXXXXX");
            if (!mkdtemp(tmpdir)) {
                fprintf(stderr, "k25 gate: cannot create a folder under /tmp: %s\n", strerror(errno));
                goto out;
            }
            dir = tmpdir;
        }
        snprintf(pa, sizeof(pa), "%s/a", dir);
        snprintf(pb, sizeof(pb), "%s/b", dir);
        base = pa;
        cand = pb;
    }
    struct ab_plan plan = {cmd_a, cmd_b, ab, dir, rounds, max_rounds, quiet};
    struct k25_gate_opts go = {allow, cmd_a, cmd_b, rounds, max_rounds};
    if (measure_and_compare(&plan, base, cand, pol, &go, &B, &C, res, &err) != K25_OK) {
        fprintf(stderr, "k25 gate: %s\n", err.msg);
        goto out;
    }
    if (ab && !quiet)
        fprintf(stderr, "k25 gate: A/B runs (%d rounds) kept in %s\n", plan.rounds, dir);

    if (print_verdicts(&B, &C, pol, res, json, json_file) != 0)
        goto out;
    status = k25_gate_exit_status(res);
out:
    k25_gate_set_free(&B);
    k25_gate_set_free(&C);
    free(pol);
    free(res);
    return status;
}
