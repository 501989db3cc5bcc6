/*
 * test_instrgate.c - the instruction-count gate (ci/instr-gate.sh, docs/gates.md,
 * "The instruction gate") on a slice of its workload: batch 1, fp32 KV, 2
 * decode steps, the baseline given as a binary (K25_BASE_BIN), its counts
 * cached in this test's folder.  The proofs:
 *   - A against A: every gated figure identical, to the instruction, between
 *     two callgrind runs of the same binary (no cache: both measured), and
 *     no function outside libc's allocator and mem* copies moved;
 *   - build/tests/k25-extra-work (2 of 3 GEMMs run twice) fails;
 *   - the same binary with K25_EXTRA_K_FRACTION=0.04 (every GEMM also over
 *     4% of its inner dimension: +5.6% prefill instructions here,
 *     deterministically) fails on prefill;
 *   - bad settings exit 2; no valgrind is the loud fallback (exit 0, or 2
 *     when strict).
 * The valgrind parts are skipped under make test-quick and make asan.
 */
#include "testutil.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Runs the gate on the test slice; JSON in tu_dir/NAME/instr-gate.json. */
static int instr_gate(const char *name, const char *cand, const char *env, bool cache, char **out)
{
    char cmd[3000];
    snprintf(cmd, sizeof(cmd),
             "%s K25_BASE_CACHE=%s/cache K25_BASE_BIN=%s K25=%s K25_INSTR_CONFIGS=b1-fp32 K25_INSTR_DECODE_STEPS=2 "
             "K25_INSTR_CACHE=%d K25_INSTR_OUT=%s/%s ci/instr-gate.sh",
             env, tu_dir, tu_k25(), cand, cache ? 1 : 0, tu_dir, name);
    return tu_run(cmd, out);
}

/* jq -e FILTER on tu_dir/NAME/instr-gate.json: 0 when true. */
static int jq_true(const char *name, const char *filter)
{
    char cmd[2000], *out = NULL;
    snprintf(cmd, sizeof(cmd), "jq -e '%s' %s/%s/instr-gate.json", filter, tu_dir, name);
    int st = tu_run(cmd, &out);
    free(out);
    return st;
}

/* The figure `phase` of b1-fp32: its change in percent (NaN when absent). */
static double change_of(const char *name, const char *phase)
{
    char cmd[2000], *out = NULL;
    snprintf(cmd, sizeof(cmd),
             "jq -r '.figures[] | select(.config == \"b1-fp32\" and .phase == \"%s\") | .change_pct' %s/%s/instr-gate.json",
             phase, tu_dir, name);
    double v = NAN;
    if (tu_run(cmd, &out) == 0 && out && *out)
        v = atof(out);
    free(out);
    return v;
}

static void print_table(const char *label, const char *out)
{
    const char *a = strstr(out, "  config"), *b = a ? strstr(a, "\n\n") : NULL;
    printf("    %s:\n%.*s\n", label, a && b ? (int)(b - a) : 0, a ? a : "");
}

static char *extra_work_bin(void)
{
    static char p[700];
    snprintf(p, sizeof(p), "%.*s/tests/k25-extra-work", (int)(strrchr(tu_k25(), '/') - tu_k25()), tu_k25());
    if (access(p, X_OK) != 0)
        fail_msg("%s is missing: make tests-bin builds it", p);
    return p;
}

/*
 * True (with the reason printed) when the gate could not run the binary under valgrind: valgrind
 * 3.19 (Debian 12) decodes no AVX-512, so a -march=native build on an AVX-512 machine stops it with
 * an illegal instruction.  The gate then says NO INSTRUCTION GATE (docs/gates.md); the test skips
 * rather than fail on such a machine, saying why.
 */
static bool cannot_run(const char *out)
{
    if (!out || !strstr(out, "NO INSTRUCTION GATE") || !strstr(out, "valgrind cannot run"))
        return false;
    print_message("skipped: valgrind cannot run this build here (AVX-512 from -march=native?); "
                  "`make PORTABLE=1` builds one it can\n");
    return true;
}

/* The same binary twice: identical counts (both sides measured now, not cached). */
static void test_a_against_a(void **state)
{
    (void)state;
    if (tu_quick()) {
        skip();
        return;
    }
    char *out = NULL;
    int st = instr_gate("aa", tu_k25(), "", false, &out);
    if (cannot_run(out)) {
        free(out);
        skip();
        return;
    }
    if (st != 0 || !strstr(out, "passed"))
        fail_msg("A against A: exit %d\n%s", st, out);
    print_table("A against A (exit 0)", out);
    free(out);
    if (jq_true("aa", ".ran and .pass and (.figures | length == 2) and "
                      "([.figures[] | .baseline == .candidate and .baseline > 0] | all)") != 0)
        fail_msg("A against A: the gated figures differ (or are missing): see %s/aa/instr-gate.json", tu_dir);
    if (jq_true("aa", "[.moved[] | .group == \"libc\"] | all") != 0)
        fail_msg("A against A: a function outside libc moved: see %s/aa/instr-gate.json", tu_dir);
    /* every group of the split has counts, both phases */
    if (jq_true("aa", "[.groups[] | select(.group == \"GEMM/GEMV\" or .group == \"attention\" or .group == \"KV\" "
                      "or .group == \"sampling\") | .baseline > 0] | length == 8") != 0)
        fail_msg("the function-group split lacks a group: see %s/aa/instr-gate.json", tu_dir);
}

/* A binary that does more work fails; the functions that moved are named. */
static void test_extra_work_fails(void **state)
{
    (void)state;
    if (tu_quick()) {
        skip();
        return;
    }
    char *out = NULL;
    int st = instr_gate("extra", extra_work_bin(), "", true, &out);
    if (cannot_run(out)) {
        free(out);
        skip();
        return;
    }
    double ch = change_of("extra", "prefill");
    if (st != 1 || !(ch > 3) || !strstr(out, "* MORE") || !strstr(out, "FAILED") || !strstr(out, "sgemm"))
        fail_msg("k25-extra-work: exit %d, prefill %+.2f%%\n%s", st, ch, out);
    print_table("k25-extra-work (exit 1)", out);
    free(out);
}

/* About 5% more instructions, deterministically: fails on prefill. */
static void test_five_percent_fails(void **state)
{
    (void)state;
    if (tu_quick()) {
        skip();
        return;
    }
    char *out = NULL;
    int st = instr_gate("five", extra_work_bin(), "K25_GATE_BIN_ENV=K25_EXTRA_K_FRACTION=0.04", true, &out);
    if (cannot_run(out)) {
        free(out);
        skip();
        return;
    }
    double ch = change_of("five", "prefill");
    if (st != 1 || !(ch > 4 && ch < 7) || !strstr(out, "* MORE"))
        fail_msg("every GEMM also over 4%% of k: exit %d, prefill %+.2f%% (want +4..+7%%)\n%s", st, ch, out);
    print_table("K25_EXTRA_K_FRACTION=0.04 (exit 1)", out);
    free(out);
}

/* Bad settings exit 2 before anything runs; no valgrind is the loud fallback. */
static void test_settings_and_fallback(void **state)
{
    (void)state;
    char cmd[2000], *out = NULL;
    assert_int_equal(tu_run("ci/instr-gate.sh --help", &out), 0);
    assert_non_null(strstr(out, "K25_INSTR_TOLERANCE"));
    free(out);
    assert_int_equal(tu_run("ci/instr-gate.sh --bogus", &out), 2);
    free(out);
    static const char *const bad[] = {"K25_INSTR_CONFIGS=b2-fp32", "K25_INSTR_TOLERANCE=three",
                                      "K25_INSTR_DECODE_STEPS=0", "K25=/nonexistent/k25"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "%s K25_INSTR_OUT=%s/bad ci/instr-gate.sh", bad[i], tu_dir);
        int st = tu_run(cmd, &out);
        if (st != 2)
            fail_msg("%s: exit %d (want 2)\n%s", bad[i], st, out);
        free(out);
    }
    snprintf(cmd, sizeof(cmd), "K25_VALGRIND=/nonexistent/valgrind K25_INSTR_OUT=%s/fb ci/instr-gate.sh", tu_dir);
    int st = tu_run(cmd, &out);
    if (st != 0 || !strstr(out, "NO INSTRUCTION GATE") || !strstr(out, "/nonexistent/valgrind"))
        fail_msg("fallback: exit %d\n%s", st, out);
    free(out);
    snprintf(cmd, sizeof(cmd), "jq -e '.ran == false and (.reason | test(\"valgrind\"))' %s/fb/instr-gate.json", tu_dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    snprintf(cmd, sizeof(cmd),
             "K25_INSTR_GATE=strict K25_VALGRIND=/nonexistent/valgrind K25_INSTR_OUT=%s/fb2 ci/instr-gate.sh", tu_dir);
    assert_int_equal(tu_run(cmd, &out), 2);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settings_and_fallback),
        cmocka_unit_test(test_a_against_a),
        cmocka_unit_test(test_extra_work_fails),
        cmocka_unit_test(test_five_percent_fails),
    };
    return cmocka_run_group_tests_name("instrgate", tests, tu_group_setup, tu_group_teardown);
}
