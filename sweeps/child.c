/*
 * child.c - one `k25 bench` run of a sweep point as a child process: its
 * command line, its log, its cores, and the TEST-ONLY per-point slowdown
 * hook.
 *
 * K25_TEST_SLOWDOWN_POINTS="SEL=F,SEL=F,..." sets the engine's
 * K25_TEST_SLOWDOWN=F (harness/testknob.c) in the runs of the points SEL
 * matches: a point id, `*`, or a shell pattern over the label
 * ("prefill_chunk_size=512 max_batch_size=2", "defaults"); each entry is
 * split at its last '='; the first match wins; F = 0 runs the point
 * unslowed.  It makes a grid where one point is really faster
 * (tests/test_sweep.c); never set it for a real measurement.
 */
#include "sweep_run.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int k25_sweep_slow_rules_parse(struct k25_sweep_slow_rule *rules, int *n, struct k25_error *err)
{
    const char *env = getenv("K25_TEST_SLOWDOWN_POINTS");
    *n = 0;
    if (!env || !*env)
        return K25_OK;
    char buf[4096];
    snprintf(buf, sizeof(buf), "%s", env);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strrchr(tok, '='), *end;
        if (!eq || eq == tok || *n == K25_SWEEP_MAX_SLOW_RULES)
            return k25_error_set(err, K25_EINVAL, "K25_TEST_SLOWDOWN_POINTS", 0, NULL,
                                 "\"%s\": expected SELECTOR=FACTOR (at most %d, comma-separated)", tok,
                                 K25_SWEEP_MAX_SLOW_RULES);
        *eq = 0;
        errno = 0;
        double f = strtod(eq + 1, &end);
        if (*end || end == eq + 1 || errno || !(f >= 0) || f > 100)
            return k25_error_set(err, K25_EINVAL, "K25_TEST_SLOWDOWN_POINTS", 0, NULL,
                                 "\"%s\": the factor must be a number in [0, 100]", eq + 1);
        struct k25_sweep_slow_rule *r = &rules[(*n)++];
        snprintf(r->sel, sizeof(r->sel), "%s", tok);
        r->f = f;
        if (f > 0)
            snprintf(r->value, sizeof(r->value), "%g", f);
        else
            r->value[0] = 0;
    }
    return K25_OK;
}

const struct k25_sweep_slow_rule *k25_sweep_slow_rule_for(const struct k25_sweep_slow_rule *rules, int n,
                                                          const struct k25_sweep_spec *spec,
                                                          const struct k25_sweep_point *p)
{
    char label[1024];
    k25_sweep_point_label(spec, p, label, sizeof(label));
    for (int i = 0; i < n; i++)
        if (!strcmp(rules[i].sel, p->id) || fnmatch(rules[i].sel, label, 0) == 0)
            return &rules[i];
    return NULL;
}

void k25_sweep_slow_rule_apply(const struct k25_sweep_slow_rule *r)
{
    unsetenv("K25_TEST_SLOWDOWN_POINTS");
    if (!r)
        return;
    if (r->value[0])
        setenv("K25_TEST_SLOWDOWN", r->value, 1);
    else
        unsetenv("K25_TEST_SLOWDOWN");
}

/* ---------------------------------------------------------------- runs */

static void arg(struct k25_sweep_argv *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct k25_sweep_argv *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(a->store + a->used, sizeof(a->store) - a->used, fmt, ap);
    va_end(ap);
    K25_ASSERT(n >= 0 && a->used + (size_t)n + 1 < sizeof(a->store) && a->argc < 63);
    a->argv[a->argc++] = a->store + a->used;
    a->argv[a->argc] = NULL;
    a->used += (size_t)n + 1;
}

/*
 * The point's workload is the spec's with its client axes applied; a
 * server target (o->endpoint, or the spec's endpoint:) adds --endpoint.
 * Open loop (rate > 0) passes --concurrency only when the spec gives one:
 * there it caps requests in flight, and a default cap of 1 would turn the
 * open loop into one request at a time.
 */
void k25_sweep_bench_argv(struct k25_sweep_argv *a, const struct k25_sweep_spec *spec,
                          const struct k25_sweep_opts *o, const struct k25_sweep_point *p, int rep,
                          const char *prefix, double rate, int threads)
{
    struct k25_sweep_workload wl; /* the spec's, with the point's client axes (concurrency, rate) */
    k25_sweep_point_workload(spec, p, &wl);
    const struct k25_sweep_workload *w = &wl;
    const char *endpoint = o->endpoint ? o->endpoint : spec->endpoint[0] ? spec->endpoint : NULL;
    a->argc = 0;
    a->used = 0;
    arg(a, "%s", o->k25_path);
    arg(a, "bench");
    if (endpoint) {
        arg(a, "--endpoint");
        arg(a, "%s", endpoint);
    }
    arg(a, "--dataset");
    arg(a, "%s", spec->dataset);
    if (spec->filter[0]) {
        arg(a, "--filter");
        arg(a, "%s", spec->filter);
    }
    arg(a, "--config");
    arg(a, "%s/points/%s/config.yaml", o->out, p->id);
    arg(a, "--seed");
    arg(a, "%llu", (unsigned long long)(spec->seed + (uint64_t)rep));
    if (threads > 0) {
        arg(a, "--threads");
        arg(a, "%d", threads);
    }
    if (rate <= 0 || w->concurrency_set) {
        arg(a, "--concurrency");
        arg(a, "%d", w->concurrency);
    }
    if (w->requests > 0) {
        arg(a, "--requests");
        arg(a, "%lld", (long long)w->requests);
    } else {
        arg(a, "--duration");
        arg(a, "%g", w->duration_s);
    }
    if (rate > 0) {
        arg(a, "--rate");
        arg(a, "%.6g", rate);
        arg(a, "--burstiness");
        arg(a, "%g", w->burstiness);
    }
    if (w->warmup > 0) {
        arg(a, "--warmup");
        arg(a, "%lld", (long long)w->warmup);
    }
    if (w->slo[0]) {
        arg(a, "--slo");
        arg(a, "%s", w->slo);
    }
    if (spec->fidelity)
        arg(a, "--fidelity");
    arg(a, "--quiet");
    arg(a, "--out");
    arg(a, "%s.h5", prefix);
    arg(a, "--json");
    arg(a, "%s.json", prefix);
}

pid_t k25_sweep_fork(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* child: die with the runner, so a killed sweep leaves no run going on */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) /* the runner died before the line above */
        _exit(127);
    return 0;
}

pid_t k25_sweep_spawn(char *const argv[], const char *logpath, int c0, int nc,
                      const struct k25_sweep_slow_rule *slow)
{
    pid_t pid = k25_sweep_fork();
    if (pid != 0)
        return pid;
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    if (nc > 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = c0; c < c0 + nc; c++)
            CPU_SET(c, &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    k25_sweep_slow_rule_apply(slow);
    execv(argv[0], argv);
    fprintf(stderr, "k25 sweep: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

int k25_sweep_run_wait(char *const argv[], const char *logpath, int c0, int nc)
{
    pid_t pid = k25_sweep_spawn(argv, logpath, c0, nc, NULL); /* the search child set the hook's rule already */
    if (pid < 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
