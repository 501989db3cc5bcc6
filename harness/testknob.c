/*
 * testknob.c - TEST-ONLY degradation knobs for the regression-gate proof
 * tests (tests/test_gate.c, docs/gates.md).  Off unless an environment
 * variable is set; never set them for a real measurement.
 *
 *   K25_TEST_SLOWDOWN=F   after each forward pass, burn F times the pass's
 *                         own time in arithmetic (F = 0.2: every step takes
 *                         20% longer, a "commit that made the engine 20%
 *                         slower"); counted as engine busy time.
 *   K25_TEST_LOSSY=A      add deterministic noise of A times the logits'
 *                         standard deviation to every sampled position
 *                         (a "commit that made the numerics lossy": greedy
 *                         tokens change).
 *
 * They are environment variables and not config keys on purpose: a knob in
 * the config would make the gate refuse the comparison as a config
 * mismatch, while these simulate a code change under an unchanged config.
 * The harness installs them on every engine it creates
 * (k25_testknob_install) through the engine's step hook: the engine
 * library reads no environment.  Says on stderr when one is active.
 *
 * And one TEST-ONLY synchronization knob, for tests that need "a run that
 * is still going" whatever the machine's speed (tests/test_slurm.c,
 * tests/test_sweep.c; docs/testing.md):
 *
 *   K25_TEST_HOLD=PREFIX  `k25 bench` holds before it measures: once its
 *                         output temporaries are open and the engine is
 *                         loaded, it writes its pid to PREFIX.ready and
 *                         blocks (inotify on PREFIX's folder: an event, no
 *                         polling) until PREFIX.release exists, then runs as
 *                         usual.  SIGINT/SIGTERM while held ends the run as
 *                         an interruption before anything was measured
 *                         (nothing written); no release within 15 minutes
 *                         fails the run.  `k25 sweep` sets it for chosen
 *                         runs (K25_TEST_HOLD_TASKS, sweeps/runner.c).
 *   K25_TEST_HOLD=PREFIX@N  the same hold, but once N (>= 1) requests of
 *                         the first measured repetition have ended (the
 *                         in-process engine's load generator, loadgen.c): a
 *                         signal while held interrupts a run that certainly
 *                         measured something (it keeps those requests).
 */
#include "harness.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static pthread_once_t g_once = PTHREAD_ONCE_INIT; /* engines may be made on several threads */
static double g_slowdown, g_lossy;

static double env_fraction(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x > 0) || x > 100) {
        fprintf(stderr, "k25: ignoring %s=\"%s\" (expected a number in (0, 100])\n", name, v);
        return 0;
    }
    fprintf(stderr, "k25: TEST-ONLY knob %s=%g is active: results are deliberately degraded\n", name, x);
    return x;
}

static void apply(const struct k25_step_info *info, void *user)
{
    (void)user;
    const int vocab = info->vocab;
    uint64_t t0_ns = info->t0_ns;
    if (g_lossy > 0)
        for (int i = 0; i < info->n; i++) {
            float *l = info->logits[i];
            double s = 0, ss = 0;
            for (int v = 0; v < vocab; v++) {
                s += l[v];
                ss += (double)l[v] * l[v];
            }
            double sd = sqrt(fmax(ss / vocab - (s / vocab) * (s / vocab), 0));
            /* splitmix64 of (position, token id): the same noise on every run */
            uint64_t pos = (uint64_t)info->next_pos[i];
            for (int v = 0; v < vocab; v++) {
                uint64_t z = pos * 0x9E3779B97F4A7C15ULL + (uint64_t)v * 0xBF58476D1CE4E5B9ULL + 1;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
                z ^= z >> 31;
                l[v] += (float)(g_lossy * sd * ((double)(z >> 11) / 9007199254740992.0 * 2 - 1));
            }
        }
    if (g_slowdown > 0) {
        uint64_t now = k25_now_ns(), until = now + (uint64_t)((double)(now - t0_ns) * g_slowdown);
        volatile double x = 1.0;
        while (k25_now_ns() < until)
            for (int k = 0; k < 256; k++)
                x = x * 1.0000001 + 1e-9;
    }
}

static void knobs_read(void)
{
    g_slowdown = env_fraction("K25_TEST_SLOWDOWN");
    g_lossy = env_fraction("K25_TEST_LOSSY");
}

void k25_testknob_install(k25_engine_t *e)
{
    pthread_once(&g_once, knobs_read);
    if (g_slowdown > 0 || g_lossy > 0)
        k25_engine_set_step_hook(e, apply, NULL);
}

#define HOLD_LIMIT_S 900 /* a test that never releases fails, it does not hang for ever */

/* Writes our pid to path through a temporary and a rename: a watcher never reads half a file. */
static int write_ready(const char *path, struct k25_error *err)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return k25_error_set(err, K25_EIO, path, 0, "K25_TEST_HOLD", "cannot write the ready marker: %s",
                             strerror(e));
    }
    return K25_OK;
}

static pthread_once_t g_hold_once = PTHREAD_ONCE_INIT;
static char g_hold_prefix[PATH_MAX];
static long g_hold_at = -1;

static void hold_parse_once(void)
{
    const char *v = getenv("K25_TEST_HOLD");
    if (!v || !*v)
        return;
    snprintf(g_hold_prefix, sizeof(g_hold_prefix), "%s", v);
    g_hold_at = 0;
    char *at = strrchr(g_hold_prefix, '@'), *end;
    if (at && !strchr(at, '/')) {
        errno = 0;
        long n = strtol(at + 1, &end, 10);
        if (end == at + 1 || *end || errno || n < 1) {
            g_hold_at = -2; /* refused by k25_testknob_hold_check */
        } else {
            *at = 0;
            g_hold_at = n;
        }
    }
}

static void hold_parse(void)
{
    pthread_once(&g_hold_once, hold_parse_once);
}

long k25_testknob_hold_at(void)
{
    hold_parse();
    return g_hold_at < 0 ? -1 : g_hold_at;
}

int k25_testknob_hold_check(struct k25_error *err)
{
    hold_parse();
    if (g_hold_at == -2)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "K25_TEST_HOLD",
                             "\"%s\": expected PREFIX or PREFIX@N with a request count N >= 1", getenv("K25_TEST_HOLD"));
    return K25_OK;
}

int k25_testknob_hold(volatile sig_atomic_t *stop, struct k25_error *err)
{
    hold_parse();
    if (g_hold_at < 0)
        return g_hold_at == -2 ? k25_testknob_hold_check(err) : K25_OK;
    const char *prefix = g_hold_prefix;
    char ready[PATH_MAX], release[PATH_MAX], dir[PATH_MAX];
    if (strlen(prefix) + 9 >= sizeof(ready))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "K25_TEST_HOLD", "the prefix is too long");
    snprintf(ready, sizeof(ready), "%s.ready", prefix);
    snprintf(release, sizeof(release), "%s.release", prefix);
    const char *slash = strrchr(prefix, '/');
    if (!slash)
        snprintf(dir, sizeof(dir), ".");
    else if (slash == prefix)
        snprintf(dir, sizeof(dir), "/");
    else
        snprintf(dir, sizeof(dir), "%.*s", (int)(slash - prefix), prefix);
    if (g_hold_at > 0)
        fprintf(stderr, "k25: TEST-ONLY knob K25_TEST_HOLD=%s@%ld is active: holding after %ld measured request(s) "
                        "until %s exists\n", prefix, g_hold_at, g_hold_at, release);
    else
        fprintf(stderr, "k25: TEST-ONLY knob K25_TEST_HOLD=%s is active: holding before the measurement until %s "
                        "exists\n", prefix, release);
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0)
        return k25_error_set(err, K25_EIO, NULL, 0, "K25_TEST_HOLD", "inotify: %s", strerror(errno));
    /* the watch first, then the marker and the check: a release made after the check is an event */
    if (inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO) < 0) {
        int e = errno;
        close(fd);
        return k25_error_set(err, K25_EIO, dir, 0, "K25_TEST_HOLD", "cannot watch the folder: %s", strerror(e));
    }
    int rc = write_ready(ready, err);
    /* SIGINT/SIGTERM blocked outside ppoll: one that comes between the check and the wait ends the wait */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    sigprocmask(SIG_BLOCK, &block, &old);
    uint64_t deadline = k25_now_ns() + (uint64_t)HOLD_LIMIT_S * 1000000000ULL;
    while (rc == K25_OK && access(release, F_OK) != 0) {
        uint64_t now = k25_now_ns();
        if (stop && *stop) {
            rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "interrupted by %s while held by K25_TEST_HOLD%s",
                               *stop == SIGINT ? "SIGINT" : "SIGTERM",
                               g_hold_at > 0 ? "" : ": nothing measured, nothing written");
            break;
        }
        if (now >= deadline) {
            rc = k25_error_set(err, K25_EIO, release, 0, "K25_TEST_HOLD", "no release within %d s", HOLD_LIMIT_S);
            break;
        }
        uint64_t left = deadline - now;
        struct timespec ts = {(time_t)(left / 1000000000ULL), (long)(left % 1000000000ULL)};
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = ppoll(&p, 1, &ts, &old);
        if (r < 0 && errno != EINTR) {
            rc = k25_error_set(err, K25_EIO, dir, 0, "K25_TEST_HOLD", "waiting: %s", strerror(errno));
        } else if (r > 0) {
            char buf[4096];
            while (read(fd, buf, sizeof(buf)) > 0) /* drain; the loop's check decides */
                ;
        }
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    close(fd);
    if (rc == K25_OK)
        fprintf(stderr, "k25: TEST-ONLY knob K25_TEST_HOLD: released\n");
    return rc;
}
