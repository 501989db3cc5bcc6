/*
 * test_corrupt.c - corrupt traces are refused, never believed and never a
 * crash (issue 13).
 *
 *   - the two reproducers kept as fixtures (tests/data/corrupt/, made from
 *     a small schema-1 trace written before the 1.10 format): a member
 *     offset of /requests overwritten (was SIGSEGV in H5Dread) and the
 *     stored length of /prefill/offsets overwritten (was 11.5 GB and a
 *     minute); both must be a clean exit 2 from inspect, report and gate;
 *   - schema-1 traces written before the 1.10 format stay readable;
 *   - a fresh trace is written in the 1.10 format with Fletcher32 on every
 *     dataset;
 *   - a seeded generator makes truncated and byte-flipped copies of a real
 *     trace (a `k25 bench` run made here) and feeds each to `k25 inspect`
 *     (text and Chrome-trace export: every request, token, chunk and
 *     window), `k25 report` and `k25 gate`: every outcome is exit 2 with a
 *     message or the same exit status and output as the clean file; never a
 *     signal, never over 10 s of CPU time (wall time on a loaded machine
 *     is not the file's doing; 120 s of wall time kills a hang), never
 *     over twice the peak memory of the clean read.  K25_CORRUPT_SEED and K25_CORRUPT_N change the seed and
 *     the number of copies (default 40; the seed is printed).
 */
#include "testutil.h"

#include "k25util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

/* CPU seconds a command may take (its own and its waited-for children's): what a corrupt file can
 * cost, the same on a loaded machine; HANG_S of wall time (an upper bound for a hang) kills it. */
#define LIMIT_S 10.0
#define HANG_S 120.0

/* What one command did. */
struct outcome {
    int status;       /* exit code; 128 + signal; -1 when killed for running over HANG_S */
    double secs;      /* CPU time (user + system), children it waited for included */
    long maxrss_kb;   /* peak RSS of it and the children it waited for */
    char *out, *err;  /* stdout and stderr, NUL-terminated, owned */
    size_t out_len;
};

static void outcome_free(struct outcome *o)
{
    free(o->out);
    free(o->err);
    memset(o, 0, sizeof(*o));
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (len)
            *len = 0;
        return NULL;
    }
    size_t cap = 4096, n = 0, r;
    char *b = malloc(cap);
    while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 2) {
            cap *= 2;
            b = realloc(b, cap);
        }
    }
    fclose(f);
    if (b)
        b[n] = 0;
    if (len)
        *len = n;
    return b;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs argv (no shell) in its own process group with stdout/stderr to files; kills it after HANG_S. */
static void run_limited(char *const argv[], struct outcome *o)
{
    char op[600], ep[600];
    snprintf(op, sizeof(op), "%s/stdout", tu_dir);
    snprintf(ep, sizeof(ep), "%s/stderr", tu_dir);
    memset(o, 0, sizeof(*o));
    double t0 = now_s();
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        int fo = open(op, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fo < 0 || fe < 0)
            _exit(126);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    bool killed = false;
    for (;;) {
        pid_t r = wait4(pid, &st, WNOHANG, &ru);
        if (r == pid)
            break;
        assert_true(r == 0 || errno == EINTR);
        if (!killed && now_s() - t0 > HANG_S) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            killed = true;
        }
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    o->secs = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
              (double)ru.ru_stime.tv_usec / 1e6;
    o->maxrss_kb = ru.ru_maxrss;
    o->status = killed ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    o->out = slurp(op, &o->out_len);
    o->err = slurp(ep, NULL);
}

static void rm_rf(const char *path)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------------- the commands */

enum { C_INSPECT, C_CHROME, C_GATE, C_REPORT, N_CMDS };
static const char *const cmd_name[N_CMDS] = {"inspect --json", "inspect --chrome-trace", "gate", "report"};

/* A command's result: status, what it printed or wrote (the comparable part), peak memory. */
struct result {
    int status;
    char *text;        /* owned; NULL when the command failed */
    size_t len;
    long maxrss_kb;
    double secs;
    char err[300];
};

/* verdict.json without its generation time, then every data file of the plots. */
static char *report_text(const char *rep, size_t *len)
{
    char p[700];
    snprintf(p, sizeof(p), "%s/verdict.json", rep);
    size_t n = 0;
    char *v = slurp(p, &n);
    if (!v)
        return NULL;
    char *g = strstr(v, "\"generated_utc\"");
    if (g)
        for (char *e = g; *e && *e != '\n'; e++)
            *e = ' ';
    snprintf(p, sizeof(p), "%s/plots/data", rep);
    DIR *d = opendir(p);
    struct dirent *de;
    char *names[256];
    int nn = 0;
    while (d && (de = readdir(d)) && nn < 256)
        if (de->d_name[0] != '.')
            names[nn++] = strdup(de->d_name);
    if (d)
        closedir(d);
    for (int i = 0; i < nn; i++) /* readdir order is not stable across runs */
        for (int j = i + 1; j < nn; j++)
            if (strcmp(names[i], names[j]) > 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    for (int i = 0; i < nn; i++) {
        snprintf(p, sizeof(p), "%s/plots/data/%s", rep, names[i]);
        size_t m = 0;
        char *x = slurp(p, &m);
        v = realloc(v, n + strlen(names[i]) + m + 3);
        n += (size_t)sprintf(v + n, "\n%s\n", names[i]);
        if (x)
            memcpy(v + n, x, m);
        n += m;
        v[n] = 0;
        free(x);
        free(names[i]);
    }
    *len = n;
    return v;
}

/* Runs command c on trace t (the working copy) and collects its result. */
static void run_cmd(int c, const char *t, struct result *r)
{
    char out[600], k25[600];
    snprintf(k25, sizeof(k25), "%s", tu_k25());
    char *argv[10] = {k25};
    switch (c) {
    case C_INSPECT:
        argv[1] = "inspect", argv[2] = (char *)t, argv[3] = "--json";
        break;
    case C_CHROME:
        snprintf(out, sizeof(out), "%s/chrome.json", tu_dir);
        unlink(out);
        argv[1] = "inspect", argv[2] = (char *)t, argv[3] = "--chrome-trace", argv[4] = out;
        break;
    case C_GATE:
        argv[1] = "gate", argv[2] = "--baseline", argv[3] = (char *)t, argv[4] = "--candidate", argv[5] = (char *)t;
        break;
    case C_REPORT:
        snprintf(out, sizeof(out), "%s/rep", tu_dir);
        rm_rf(out);
        argv[1] = "report", argv[2] = (char *)t, argv[3] = "--out", argv[4] = out, argv[5] = "--quiet";
        break;
    }
    struct outcome o;
    run_limited(argv, &o);
    memset(r, 0, sizeof(*r));
    r->status = o.status;
    r->maxrss_kb = o.maxrss_kb;
    r->secs = o.secs;
    snprintf(r->err, sizeof(r->err), "%s", o.err ? o.err : "");
    if (c == C_INSPECT || c == C_GATE) {
        r->text = o.out;
        r->len = o.out_len;
        o.out = NULL;
    } else if (o.status == 0) {
        r->text = c == C_CHROME ? slurp(out, &r->len) : report_text(out, &r->len);
    }
    outcome_free(&o);
}

static void result_free(struct result *r)
{
    free(r->text);
    memset(r, 0, sizeof(*r));
}

/* k25 prints its errors as "k25 CMD: ..." on stderr. */
static bool clean_error(const struct result *r)
{
    return r->status == 2 && !strncmp(r->err, "k25 ", 4) && strlen(r->err) > 8;
}

/* ---------------------------------------------------------------- fixtures */

static char clean_path[600]; /* a fresh trace (1.10 format), made in group setup */

static int setup(void **state)
{
    if (tu_group_setup(state))
        return -1;
    char gold[600], cmd[2000];
    snprintf(gold, sizeof(gold), "%s/mini.jsonl", tu_dir);
    FILE *f = fopen(gold, "w");
    if (!f)
        return -1;
    fputs("{\"id\":\"a\",\"text\":\"The quick brown fox jumps over the lazy dog.\",\"expected_output_length\":6}\n"
          "{\"id\":\"b\",\"text\":\"Pack my box with five dozen liquor jugs, then ship it.\",\"expected_output_length\":5}\n"
          "{\"id\":\"c\",\"text\":\"Sphinx of black quartz, judge my vow.\",\"expected_output_length\":4}\n",
          f);
    if (fclose(f) != 0)
        return -1;
    snprintf(clean_path, sizeof(clean_path), "%s/clean.h5", tu_dir);
    snprintf(cmd, sizeof(cmd),
             "%s bench --dataset %s --model tiny --requests 3 --decode-max-tokens 6 --out %s --quiet >/dev/null 2>&1",
             tu_k25(), gold, clean_path);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---------------------------------------------------------------- tests */

/* The two reproducers of issue 13: a clean exit 2 naming what is wrong, fast and small. */
static void test_reproducers(void **state)
{
    (void)state;
    static const struct { const char *file, *msg; } cases[] = {
        {"tests/data/corrupt/requests-member-offset.h5", "lies outside the 336-byte row"},
        {"tests/data/corrupt/prefill-offsets-dim.h5", "'/prefill/offsets': has 15073285 elements where 5 are expected"},
    };
    struct result clean[N_CMDS];
    memset(clean, 0, sizeof(clean));
    for (int c = 0; c < N_CMDS; c++) {
        if (c == C_CHROME)
            continue;
        run_cmd(c, "tests/data/corrupt/clean-v1.h5", &clean[c]);
        if (clean[c].status != 0)
            fail_msg("%s of the clean schema-1 fixture: exit %d: %s", cmd_name[c], clean[c].status, clean[c].err);
    }
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++)
        for (int c = 0; c < N_CMDS; c++) {
            if (c == C_CHROME)
                continue;
            struct result r;
            run_cmd(c, cases[k].file, &r);
            if (!clean_error(&r) || !strstr(r.err, cases[k].msg))
                fail_msg("%s %s: exit %d, stderr '%s' (want exit 2 and '%s')", cmd_name[c], cases[k].file, r.status,
                         r.err, cases[k].msg);
            assert_true(r.secs < LIMIT_S);
            if (r.maxrss_kb > 2 * clean[c].maxrss_kb)
                fail_msg("%s %s: peak memory %ld KB, clean read %ld KB", cmd_name[c], cases[k].file, r.maxrss_kb,
                         clean[c].maxrss_kb);
            result_free(&r);
        }
    for (int c = 0; c < N_CMDS; c++)
        result_free(&clean[c]);
}

/* Schema version 1 as stored by the gate's baseline (written before the 1.10 format) stays readable. */
static void test_schema1_baseline_readable(void **state)
{
    (void)state;
    glob_t g;
    if (glob("baselines/results/ci-smoke/points/*/rep-0.h5", 0, NULL, &g) != 0 || g.gl_pathc == 0)
        skip();
    struct result r;
    run_cmd(C_CHROME, g.gl_pathv[0], &r);
    if (r.status != 0)
        fail_msg("inspect %s: exit %d: %s", g.gl_pathv[0], r.status, r.err);
    result_free(&r);
    globfree(&g);
}

/* A new trace: 1.10 file format (checksummed metadata), Fletcher32 on every dataset. */
static void test_written_with_checksums(void **state)
{
    (void)state;
    hid_t f = H5Fopen(clean_path, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    H5F_info2_t info;
    assert_true(H5Fget_info2(f, &info) >= 0);
    assert_true(info.super.version >= 2); /* superblock v2+: checksummed, and so is what hangs off it */
    static const char *const ds_names[] = {"/requests", "/tokens/offsets", "/tokens/time_ns", "/tokens/token_id",
                                           "/prefill/offsets", "/timeline", "/summary/percentiles"};
    for (size_t i = 0; i < sizeof(ds_names) / sizeof(ds_names[0]); i++) {
        hid_t d = H5Dopen2(f, ds_names[i], H5P_DEFAULT);
        assert_true(d >= 0);
        hid_t p = H5Dget_create_plist(d);
        unsigned flags = 0, cd[4];
        size_t ncd = 4;
        if (H5Pget_filter_by_id2(p, H5Z_FILTER_FLETCHER32, &flags, &ncd, cd, 0, NULL, NULL) < 0)
            fail_msg("%s has no Fletcher32 filter", ds_names[i]);
        H5Pclose(p);
        H5Dclose(d);
    }
    H5Fclose(f);
}

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void write_bytes(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Truncated and byte-flipped copies of a real trace through inspect, report and gate. */
static void test_seeded_corruption(void **state)
{
    (void)state;
    const char *e = getenv("K25_CORRUPT_SEED");
    uint64_t seed = e && *e ? strtoull(e, NULL, 10) : 13;
    e = getenv("K25_CORRUPT_N");
    int n_copies = e && *e ? atoi(e) : 40;
    size_t len = 0;
    unsigned char *orig = (unsigned char *)slurp(clean_path, &len), *buf = malloc(len + 1);
    assert_non_null(orig);
    assert_non_null(buf);
    char t[600];
    snprintf(t, sizeof(t), "%s/t.h5", tu_dir); /* every copy under one name: outputs name the same file */
    write_bytes(t, orig, len);
    struct result clean[N_CMDS];
    for (int c = 0; c < N_CMDS; c++) {
        run_cmd(c, t, &clean[c]);
        if (clean[c].status != 0 || !clean[c].text)
            fail_msg("%s of the clean trace: exit %d: %s", cmd_name[c], clean[c].status, clean[c].err);
    }
    int n_err[N_CMDS] = {0}, n_same[N_CMDS] = {0};
    uint64_t s = seed;
    double t0 = now_s();
    for (int k = 0; k < n_copies; k++) {
        char what[64];
        size_t n = len;
        memcpy(buf, orig, len);
        if (k % 3 == 0) {
            n = (size_t)(splitmix64(&s) % len);
            snprintf(what, sizeof(what), "truncated to %zu bytes", n);
        } else {
            size_t pos = (size_t)(splitmix64(&s) % len);
            unsigned x = (unsigned)(splitmix64(&s) % 255) + 1;
            buf[pos] ^= (unsigned char)x;
            snprintf(what, sizeof(what), "byte %zu xor 0x%02x", pos, x);
        }
        write_bytes(t, buf, n);
        for (int c = 0; c < N_CMDS; c++) {
            struct result r;
            run_cmd(c, t, &r);
            if (r.status == -1)
                fail_msg("copy %d (%s, seed %llu): %s hung (killed after %.0f s)", k, what, (unsigned long long)seed,
                         cmd_name[c], HANG_S);
            if (r.secs >= LIMIT_S)
                fail_msg("copy %d (%s, seed %llu): %s took %.1f s of CPU time (limit %.0f s)", k, what,
                         (unsigned long long)seed, cmd_name[c], r.secs, LIMIT_S);
            if (r.status > 128)
                fail_msg("copy %d (%s, seed %llu): %s died of signal %d", k, what, (unsigned long long)seed,
                         cmd_name[c], r.status - 128);
            if (r.maxrss_kb > 2 * clean[c].maxrss_kb)
                fail_msg("copy %d (%s, seed %llu): %s peak memory %ld KB, clean %ld KB", k, what,
                         (unsigned long long)seed, cmd_name[c], r.maxrss_kb, clean[c].maxrss_kb);
            bool same = r.status == clean[c].status && r.text && r.len == clean[c].len &&
                        !memcmp(r.text, clean[c].text, r.len);
            if (same)
                n_same[c]++;
            else if (clean_error(&r))
                n_err[c]++;
            else
                fail_msg("copy %d (%s, seed %llu): %s exit %d and %s output (stderr: %s): neither a clean error "
                         "nor an identical read",
                         k, what, (unsigned long long)seed, cmd_name[c], r.status, r.text ? "different" : "no", r.err);
            result_free(&r);
        }
    }
    printf("corrupted copies of a %zu-byte trace: %d (seed %llu, %.1f s)\n", len, n_copies,
           (unsigned long long)seed, now_s() - t0);
    for (int c = 0; c < N_CMDS; c++)
        printf("  %-24s %3d clean errors (exit 2), %3d identical reads\n", cmd_name[c], n_err[c], n_same[c]);
    for (int c = 0; c < N_CMDS; c++)
        result_free(&clean[c]);
    free(orig);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reproducers),
        cmocka_unit_test(test_schema1_baseline_readable),
        cmocka_unit_test(test_written_with_checksums),
        cmocka_unit_test(test_seeded_corruption),
    };
    return cmocka_run_group_tests_name("corrupt", tests, setup, tu_group_teardown);
}
