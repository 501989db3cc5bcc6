/*
 * test_outputs.c - no result lost (issue 13): output paths, full disks,
 * interrupts, all-or-nothing reports, gold sets that never end.
 *
 *   - every output option given a directory (or a missing folder) is the
 *     same clear error, exit 2, before anything is measured;
 *   - a full disk (a small tmpfs; CI runs as root) fails `k25 bench` at its
 *     first write, before the measurement, and leaves nothing behind;
 *     where mounting is refused, RLIMIT_FSIZE stands in (EFBIG on write);
 *   - SIGINT / SIGTERM during `k25 bench`: exit 130 / 143, the finished
 *     requests written, marked interrupted in /meta and in the JSON;
 *   - `k25 report` is all or nothing: a report that cannot be completed
 *     (full disk; gnuplot truncating a PNG under RLIMIT_FSIZE and exiting
 *     0) leaves the previous report exactly as it was and no temporary; a
 *     successful one replaces it whole; a folder holding other files is
 *     refused, not deleted; exit codes are 2 for every bad input;
 *   - `k25 gold validate`: an empty file is an error; /dev/zero ends with
 *     an error naming line 1.
 */
#include "testutil.h"

#include "harness.h"
#include "gold.h"
#include "k25util.h"

#include <signal.h>
#include <sys/stat.h>
#include <time.h>

static char gold_path[600];
static bool have_gnuplot;

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static int setup(void **state)
{
    if (tu_group_setup(state))
        return -1;
    snprintf(gold_path, sizeof(gold_path), "%s/mini.jsonl", tu_dir);
    FILE *f = fopen(gold_path, "w");
    if (!f)
        return -1;
    fputs("{\"id\":\"a\",\"text\":\"The quick brown fox jumps over the lazy dog.\",\"expected_output_length\":6}\n"
          "{\"id\":\"b\",\"text\":\"Pack my box with five dozen liquor jugs, then ship it.\",\"expected_output_length\":5}\n",
          f);
    have_gnuplot = tu_run("command -v gnuplot >/dev/null", NULL) == 0;
    return fclose(f) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "umount '%s/mnt' 2>/dev/null", tu_dir);
    if (system(cmd)) { /* not mounted: fine */
    }
    return tu_group_teardown(state);
}

/* Runs "k25 ARGS" (stderr merged) and returns the exit status; *out may be NULL. */
static int k25(const char *args, char **out)
{
    char *cmd = NULL;
    if (asprintf(&cmd, "%s %s", tu_k25(), args) < 0)
        return -1;
    int st = tu_run(cmd, out);
    free(cmd);
    return st;
}

static void expect(int want_status, const char *want_text, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect(int want_status, const char *want_text, const char *fmt, ...)
{
    char args[3000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    char *o = NULL;
    int st = k25(args, &o);
    if (st != want_status || (want_text && !strstr(o ? o : "", want_text)))
        fail_msg("k25 %s: exit %d (want %d), output:\n%s\n(want '%s')", args, st, want_status, o ? o : "",
                 want_text ? want_text : "");
    free(o);
}

/* Mounts a tmpfs of size_kb at tu_dir/mnt; false when mounting is refused (not root, a container). */
static bool mount_small(int size_kb)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s/mnt' && mount -t tmpfs -o size=%dk k25test '%s/mnt' 2>/dev/null", tu_dir,
             size_kb, tu_dir);
    return system(cmd) == 0;
}

static void unmount_small(void)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "umount '%s/mnt'", tu_dir);
    assert_int_equal(system(cmd), 0);
}

/* Fills the file system holding dir (writes until ENOSPC). */
static void fill_up(const char *dir)
{
    char p[700], buf[4096];
    memset(buf, 'x', sizeof(buf));
    snprintf(p, sizeof(p), "%s/filler", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    while (fwrite(buf, 1, sizeof(buf), f) == sizeof(buf) && fflush(f) == 0)
        ;
    fclose(f);
}

/* ------------------------------------------------------------------ paths */

/* A directory (or a missing folder) where a file is expected: the same error, exit 2, nothing measured. */
static void test_directory_where_file_expected(void **state)
{
    (void)state;
    const char *d = tu_dir;
    char trace[700];
    snprintf(trace, sizeof(trace), "tests/data/corrupt/clean-v1.h5");
    const char *isdir = "is a directory";
    expect(2, isdir, "bench --dataset %s --model tiny --out %s --quiet", gold_path, d);
    expect(2, isdir, "bench --dataset %s --model tiny --out %s/r.h5 --json %s --quiet", gold_path, d, d);
    expect(2, "does not exist", "bench --dataset %s --model tiny --out %s/no/such/r.h5 --quiet", gold_path, d);
    expect(2, "not a regular file", "bench --dataset %s --model tiny --out /dev/null --quiet", gold_path);
    expect(2, isdir, "inspect %s --chrome-trace %s", trace, d);
    expect(2, isdir, "gate --baseline %s --candidate %s --json-file %s", trace, trace, d);
    expect(2, isdir, "gold select %s --out %s", gold_path, d);
    expect(2, isdir, "gold generate --lengths 1k --out %s", d);
    expect(2, isdir, "attn-bench --out %s --quiet", d);
    expect(2, "not a folder", "report %s --out %s", trace, gold_path);
    /* nothing was left beside the directory */
    char p[700];
    snprintf(p, sizeof(p), "%s.tmp.*", d);
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "ls -d %s 2>/dev/null | grep -q .", p);
    assert_int_not_equal(tu_run(cmd, NULL), 0);
}

/* ------------------------------------------------------------- full disk */

/* A full disk fails bench at its first write - before the measurement - and leaves nothing. */
static void test_bench_disk_full(void **state)
{
    (void)state;
    char out[700], *o = NULL;
    if (mount_small(64)) {
        char mnt[600];
        snprintf(mnt, sizeof(mnt), "%s/mnt", tu_dir);
        fill_up(mnt);
        snprintf(out, sizeof(out), "%s/run.h5", mnt);
        char args[4096];
        snprintf(args, sizeof(args), "bench --dataset %s --model tiny --out %s --quiet", gold_path, out);
        int st = k25(args, &o);
        if (st != 1 || !strstr(o, "No space left") || strstr(o, "requests ("))
            fail_msg("bench on a full disk: exit %d:\n%s", st, o);
        free(o);
        /* the JSON summary too */
        snprintf(args, sizeof(args), "bench --dataset %s --model tiny --out %s/run2.h5 --json %s/s.json --quiet",
                 gold_path, tu_dir, mnt);
        st = k25(args, &o);
        if (st != 1 || !strstr(o, "No space left") || strstr(o, "requests ("))
            fail_msg("bench --json on a full disk: exit %d:\n%s", st, o);
        free(o);
        char cmd[800];
        snprintf(cmd, sizeof(cmd), "ls %s | grep -v filler | grep -q .", mnt);
        assert_int_not_equal(tu_run(cmd, NULL), 0); /* no temporaries left */
        snprintf(cmd, sizeof(cmd), "%s/run2.h5", tu_dir);
        assert_false(exists(cmd)); /* no trace without its summary */
        unmount_small();
    } else {
        print_message("mount refused: RLIMIT_FSIZE stands in for a full disk\n");
    }
    /* a write limit (EFBIG) behaves the same, mounted or not */
    snprintf(out, sizeof(out), "%s/lim.h5", tu_dir);
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "sh -c \"trap '' XFSZ; ulimit -f 1; exec %s bench --dataset %s --model tiny --out %s --quiet\"",
             tu_k25(), gold_path, out);
    int st = tu_run(cmd, &o);
    if (st != 1 || strstr(o, "requests ("))
        fail_msg("bench under RLIMIT_FSIZE: exit %d:\n%s", st, o);
    free(o);
    assert_false(exists(out));
}

/* ------------------------------------------------------------- interrupts */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/*
 * Starts a long bench held, by the TEST-ONLY knob K25_TEST_HOLD=PREFIX@1
 * (harness/testknob.c), once its first measured request has ended; sends
 * sig while it is held there (so the run has certainly measured exactly
 * one request, whatever the machine's speed); returns the exit status and
 * its stderr.
 */
static int bench_and_signal(int sig, const char *out, const char *json, char **err_text)
{
    char errp[700], prefix[700], hold[720], ready[760];
    snprintf(errp, sizeof(errp), "%s/bench.err", tu_dir);
    snprintf(prefix, sizeof(prefix), "%s/hold-%d", tu_dir, sig);
    snprintf(hold, sizeof(hold), "%s@1", prefix);
    snprintf(ready, sizeof(ready), "%s.ready", prefix);
    unlink(out);
    unlink(json);
    unlink(ready);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        FILE *e = freopen(errp, "w", stderr);
        FILE *n = freopen("/dev/null", "w", stdout);
        (void)e;
        (void)n;
        setenv("K25_TEST_HOLD", hold, 1);
        execl(tu_k25(), tu_k25(), "bench", "--dataset", gold_path, "--model", "tiny", "--requests", "100000",
              "--decode-max-tokens", "16", "--threads", "1", "--out", out, "--json", json, "--quiet", (char *)NULL);
        _exit(127);
    }
    /* an upper bound for a failure (a sanitizer build on a loaded machine); the marker is the event */
    bool held = tu_wait_file(ready, 300);
    assert_int_equal(kill(pid, held ? sig : SIGKILL), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    FILE *f = fopen(errp, "r");
    char buf[4096] = "";
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = 0;
    if (f)
        fclose(f);
    if (!held)
        fail_msg("the bench never held after its first request (no %s in 300 s):\n%s", ready, buf);
    *err_text = strdup(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void interrupt_case(int sig, int want_status, const char *sig_name)
{
    char out[700], json[700], *e = NULL;
    snprintf(out, sizeof(out), "%s/int.h5", tu_dir);
    snprintf(json, sizeof(json), "%s/int.json", tu_dir);
    int st = bench_and_signal(sig, out, json, &e);
    if (st != want_status)
        fail_msg("%s: exit %d, want %d:\n%s", sig_name, st, want_status, e);
    if (!exists(out))
        fail_msg("%s: no trace after the first request had ended:\n%s", sig_name, e);
    assert_non_null(strstr(e, "interrupted"));
    free(e);
    /* the trace: readable, marked interrupted */
    struct k25_trace t;
    struct k25_error err;
    if (k25_trace_read(out, &t, &err) != K25_OK)
        fail_msg("%s: %s", sig_name, err.msg);
    assert_true(t.run.interrupted);
    assert_int_equal(t.run.n_reqs, 1); /* one user: held after the first request, nothing else in flight */
    for (size_t i = 0; i < t.run.n_reqs; i++)
        assert_true(t.run.reqs[i].state == K25_REQ_COMPLETED || t.run.reqs[i].state == K25_REQ_REJECTED);
    size_t n_reqs = t.run.n_reqs;
    k25_trace_free(&t);
    /* the JSON: marked, and names the signal */
    json_error_t je;
    json_t *j = json_load_file(json, 0, &je);
    assert_non_null(j);
    assert_true(json_is_true(json_object_get(j, "interrupted")));
    json_t *in = json_object_get(j, "interruption");
    assert_string_equal(json_string_value(json_object_get(in, "signal")), sig_name);
    assert_int_equal(json_integer_value(json_object_get(in, "requests_kept")), (json_int_t)n_reqs);
    json_decref(j);
    /* inspect says so */
    char args[800], *o;
    snprintf(args, sizeof(args), "inspect %s", out);
    assert_int_equal(k25(args, &o), 0);
    assert_non_null(strstr(o, "INTERRUPTED"));
    free(o);
}

static void test_bench_sigint(void **state)
{
    (void)state;
    interrupt_case(SIGINT, 130, "SIGINT");
}

static void test_bench_sigterm(void **state)
{
    (void)state;
    interrupt_case(SIGTERM, 143, "SIGTERM");
}

/* A trace of a finished run says it was not interrupted. */
static void test_bench_not_interrupted(void **state)
{
    (void)state;
    char out[600], json[600], args[4096];
    snprintf(out, sizeof(out), "%s/ok.h5", tu_dir);
    snprintf(json, sizeof(json), "%s/ok.json", tu_dir);
    snprintf(args, sizeof(args), "bench --dataset %s --model tiny --decode-max-tokens 4 --out %s --json %s --quiet",
             gold_path, out, json);
    assert_int_equal(k25(args, NULL), 0);
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(out, &t, &err), K25_OK);
    assert_false(t.run.interrupted);
    k25_trace_free(&t);
    json_error_t je;
    json_t *j = json_load_file(json, 0, &je);
    assert_non_null(j);
    assert_true(json_is_false(json_object_get(j, "interrupted")));
    json_decref(j);
}

/* ----------------------------------------------------------------- report */

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *b = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&b, &n);
    char buf[4096];
    size_t r;
    while ((r = fread(buf, 1, sizeof(buf), f)) > 0)
        fwrite(buf, 1, r, m);
    fclose(f);
    fclose(m);
    return b;
}

/* The whole report folder as one string (file names and contents, sorted). */
static char *tree(const char *dir)
{
    char cmd[800], *o = NULL;
    snprintf(cmd, sizeof(cmd), "cd '%s' && find . -type f | LC_ALL=C sort | xargs -r md5sum", dir);
    assert_int_equal(tu_run(cmd, &o), 0);
    return o;
}

static void assert_no_temporaries(const char *parent)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "ls -a '%s' | grep -q '\\.tmp\\.'", parent);
    if (tu_run(cmd, NULL) == 0) {
        snprintf(cmd, sizeof(cmd), "ls -la '%s'", parent);
        char *o;
        tu_run(cmd, &o);
        fail_msg("temporaries left in %s:\n%s", parent, o);
    }
}

static void test_report_all_or_nothing(void **state)
{
    (void)state;
    if (!have_gnuplot)
        skip();
    const char *run_a = "tests/data/corrupt/clean-v1.h5";
    char run_b[600], rep[700], parent[600], args[4096], cmd[4096], *o;
    snprintf(run_b, sizeof(run_b), "%s/b.h5", tu_dir);
    snprintf(args, sizeof(args), "bench --dataset %s --model tiny --decode-max-tokens 4 --out %s --quiet", gold_path,
             run_b);
    assert_int_equal(k25(args, NULL), 0);
    snprintf(parent, sizeof(parent), "%s/reports", tu_dir);
    snprintf(rep, sizeof(rep), "%s/a", parent);

    /* a first report, then a second replaces it whole */
    snprintf(args, sizeof(args), "report %s --out %s --quiet", run_a, rep);
    assert_int_equal(k25(args, NULL), 0);
    snprintf(cmd, sizeof(cmd), "%s/verdict.json", rep);
    char *v = slurp(cmd);
    assert_non_null(strstr(v, "clean-v1.h5"));
    free(v);
    char *before = tree(rep);

    /* gnuplot truncating a PNG (RLIMIT_FSIZE: EFBIG) exits 0: the report notices, the old one stays */
    snprintf(cmd, sizeof(cmd), "sh -c \"trap '' XFSZ; ulimit -f 20; exec %s report %s --out %s --quiet\"", tu_k25(),
             run_b, rep);
    int st = tu_run(cmd, &o);
    if (st != 1 || !strstr(o, "incomplete png"))
        fail_msg("report under RLIMIT_FSIZE: exit %d:\n%s", st, o);
    free(o);
    char *after = tree(rep);
    assert_string_equal(before, after);
    free(after);
    assert_no_temporaries(parent);

    /* a full disk: same */
    if (mount_small(1024)) {
        char mrep[700], mnt[600];
        snprintf(mnt, sizeof(mnt), "%s/mnt", tu_dir);
        snprintf(mrep, sizeof(mrep), "%s/rep", mnt);
        snprintf(args, sizeof(args), "report %s --out %s --quiet", run_a, mrep);
        assert_int_equal(k25(args, NULL), 0);
        char *mb = tree(mrep);
        fill_up(mnt);
        snprintf(args, sizeof(args), "report %s --out %s --quiet", run_b, mrep);
        st = k25(args, &o);
        if (st != 1 || !strstr(o, "No space left"))
            fail_msg("report on a full disk: exit %d:\n%s", st, o);
        free(o);
        char *ma = tree(mrep);
        assert_string_equal(mb, ma);
        free(ma);
        free(mb);
        assert_no_temporaries(mnt);
        unmount_small();
    } else {
        print_message("mount refused: the full-disk report case is covered by RLIMIT_FSIZE only\n");
    }

    /* a stale temporary of a killed run is removed; the new report replaces the old whole */
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s.tmp.999999999/plots'", rep);
    assert_int_equal(tu_run(cmd, NULL), 0);
    snprintf(args, sizeof(args), "report %s --out %s/ --quiet", run_b, rep);
    assert_int_equal(k25(args, NULL), 0);
    assert_no_temporaries(parent);
    snprintf(cmd, sizeof(cmd), "%s/verdict.json", rep);
    v = slurp(cmd);
    assert_non_null(strstr(v, "b.h5"));
    assert_null(strstr(v, "clean-v1.h5"));
    free(v);
    free(before);

    /* a folder holding something else is refused, and left alone */
    snprintf(cmd, sizeof(cmd), "%s/notes.txt", rep);
    tu_write_file(cmd, "mine\n");
    snprintf(args, sizeof(args), "report %s --out %s --quiet", run_a, rep);
    assert_int_equal(k25(args, &o), 2);
    assert_non_null(strstr(o, "notes.txt"));
    free(o);
    assert_true(exists(cmd));
    assert_no_temporaries(parent);
}

/* Every bad input of report is exit 2 - the unsupported schema version included. */
static void test_report_exit_codes(void **state)
{
    (void)state;
    if (!have_gnuplot)
        skip();
    char p[700];
    snprintf(p, sizeof(p), "%s/future.h5", tu_dir);
    struct k25_h5 h;
    struct k25_error err;
    assert_int_equal(k25_h5_create(&h, p, "run", &err), K25_OK);
    assert_int_equal(k25_h5_attr_i64(h.meta, "schema_version", 99, &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    expect(2, "schema version 99", "report %s --out %s/r-future", p, tu_dir);
    expect(2, "lies outside", "report tests/data/corrupt/requests-member-offset.h5 --out %s/r-bad", tu_dir);
    expect(2, "No such file", "report %s/none.h5 --out %s/r-none", tu_dir, tu_dir);
    assert_false(exists("r-future"));
}

/* ------------------------------------------------------------------- gold */

static void test_gold_empty_and_endless(void **state)
{
    (void)state;
    char p[700];
    snprintf(p, sizeof(p), "%s/empty.jsonl", tu_dir);
    tu_write_file(p, "");
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    struct k25_gold_stats st;
    struct k25_error err;
    assert_int_equal(k25_gold_validate(p, &o, &st, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "empty file"));
    k25_gold_stats_free(&st);
    expect(2, "empty file", "gold validate %s", p);
    /* /dev/zero: one line with no end; reading stops, the error names line 1 */
    expect(2, "/dev/zero:1: line has no end", "gold validate /dev/zero --max-line-bytes 1k");
    double t0 = now_s();
    expect(2, "/dev/zero:1: line has no end", "gold validate /dev/zero");
    assert_true(now_s() - t0 < 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_directory_where_file_expected),
        cmocka_unit_test(test_bench_disk_full),
        cmocka_unit_test(test_bench_sigint),
        cmocka_unit_test(test_bench_sigterm),
        cmocka_unit_test(test_bench_not_interrupted),
        cmocka_unit_test(test_report_all_or_nothing),
        cmocka_unit_test(test_report_exit_codes),
        cmocka_unit_test(test_gold_empty_and_endless),
    };
    return cmocka_run_group_tests_name("outputs", tests, setup, teardown);
}
