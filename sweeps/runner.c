/*
 * runner.c - running a sweep: the (point, repetition) tasks, interleaved
 * round-robin, each one `k25 bench` in a child process (pinned to its own
 * cores when several run at once), skipping tasks whose result files are
 * complete, with progress, ETA and the best point so far; the rate search;
 * cluster job arrays (--task, --slurm, --merge).
 */
#include "sweep.h"

#include "harness.h"

#include "h5store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int mkdir_p(const char *path, struct k25_error *err)
{
    char buf[2048];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return k25_error_set(err, K25_EIO, buf, 0, NULL, "cannot create the directory: %s", strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return k25_error_set(err, K25_EIO, buf, 0, NULL, "cannot create the directory: %s", strerror(errno));
    return K25_OK;
}

/* Writes the point's effective config as a YAML file bench can --config. */
static int write_point_config(const char *path, const struct k25_config *cfg, struct k25_error *err)
{
    char *cj = k25_config_to_json(cfg);
    json_error_t je;
    json_t *o = cj ? json_loads(cj, 0, &je) : NULL;
    free(cj);
    if (!o)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    struct k25_afile af;
    int rc = k25_afile_open(&af, path, err);
    if (rc) {
        json_decref(o);
        return rc;
    }
    FILE *f = af.f;
    fprintf(f, "# effective engine config of this sweep point (written by k25 sweep)\n");
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        if (json_is_string(v)) {
            if (!json_string_length(v))
                continue; /* "" is every string key's default */
            char *q = json_dumps(v, JSON_ENCODE_ANY);
            fprintf(f, "%s: %s\n", key, q ? q : "\"\"");
            free(q);
        } else if (json_is_boolean(v)) {
            fprintf(f, "%s: %s\n", key, json_is_true(v) ? "true" : "false");
        } else if (json_is_integer(v)) {
            fprintf(f, "%s: %lld\n", key, (long long)json_integer_value(v));
        } else if (json_is_real(v)) {
            fprintf(f, "%s: %.17g\n", key, json_real_value(v));
        }
    }
    json_decref(o);
    return k25_afile_commit(&af, err);
}

/* A finished repetition: its JSON parses and (plain runs) its trace is a valid run file. */
static bool task_done(const char *out, const struct k25_sweep_spec *spec, const struct k25_sweep_point *p, int rep)
{
    char js[2048], h5[2048];
    snprintf(js, sizeof(js), "%s/points/%s/rep-%d.json", out, p->id, rep);
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    if (!j)
        return false;
    json_decref(j);
    if (spec->wl.search)
        return true;
    snprintf(h5, sizeof(h5), "%s/points/%s/rep-%d.h5", out, p->id, rep);
    struct k25_h5 h;
    if (k25_h5_open_read(&h, h5, "run", NULL) != K25_OK)
        return false;
    k25_h5_close(&h);
    return true;
}

/* Removes temporaries a killed run left in a point folder. */
static void clean_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp")) {
            char p[2400];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
}

struct task {
    int point, rep;
};

struct child {
    pid_t pid;
    int task;
    uint64_t t0_ns;
};

/* argv for one bench run; strings live in buf. */
struct argv_buf {
    char *argv[64];
    int argc;
    char store[8192];
    size_t used;
};

static void arg(struct argv_buf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct argv_buf *a, const char *fmt, ...)
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

static void bench_argv(struct argv_buf *a, const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                       const struct k25_sweep_point *p, int rep, const char *suffix, double rate, int threads)
{
    const struct k25_sweep_workload *w = &spec->wl;
    a->argc = 0;
    a->used = 0;
    arg(a, "%s", o->k25_path);
    arg(a, "bench");
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
    arg(a, "--concurrency");
    arg(a, "%d", w->concurrency);
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
    arg(a, "%s/points/%s/rep-%d%s.h5", o->out, p->id, rep, suffix);
    arg(a, "--json");
    arg(a, "%s/points/%s/rep-%d%s.json", o->out, p->id, rep, suffix);
}

/* Starts argv as a child, stdout+stderr to logpath, pinned to cores [c0, c0+nc). */
static pid_t spawn(char *const argv[], const char *logpath, int c0, int nc)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    /* child: die with the runner, so a killed sweep leaves no run going on */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(127);
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
    execv(argv[0], argv);
    fprintf(stderr, "k25 sweep: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Runs argv to completion (sequential use: the rate search). Returns exit status. */
static int run_wait(char *const argv[], const char *logpath, int c0, int nc)
{
    pid_t pid = spawn(argv, logpath, c0, nc);
    if (pid < 0)
        return -1;
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One metric of a bench JSON file (NaN when missing). */
static double bench_metric(const char *path, const char *metric)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je), *m = j ? k25_sweep_metrics_from_bench(j) : NULL;
    const json_t *v = m ? json_object_get(m, metric) : NULL;
    double x = v && json_is_number(v) ? json_number_value(v) : NAN;
    json_decref(m);
    json_decref(j);
    return x;
}

/*
 * The rate search of one (point, repetition): bisection on the open-loop
 * rate between rate_lo and rate_hi until (hi - lo) / lo <= precision; a
 * probe passes when search_metric <= search_limit.  Writes rep-K.json with
 * max_rate_rps, the probes, and the summary of the fastest passing probe.
 */
static int rate_search(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                       const struct k25_sweep_point *p, int rep, int c0, int nc, int threads, struct k25_error *err)
{
    const struct k25_sweep_workload *w = &spec->wl;
    double lo = w->rate_lo, hi = w->rate_hi, best = 0;
    int best_probe = -1, rc = K25_OK;
    json_t *probes = json_array();
    /* probe 0 at rate_lo (fails: nothing sustainable in range), probe 1 at
     * rate_hi (passes: report it as a floor), then bisect */
    for (int probe = 0; probe < 48; probe++) {
        double r = probe == 0 ? lo : probe == 1 ? hi : 0.5 * (lo + hi);
        if (probe >= 2 && (hi - lo) / lo <= w->precision)
            break;
        char suffix[32], js[2048], log[2048];
        snprintf(suffix, sizeof(suffix), ".probe-%d", probe);
        snprintf(js, sizeof(js), "%s/points/%s/rep-%d%s.json", o->out, p->id, rep, suffix);
        snprintf(log, sizeof(log), "%s/points/%s/rep-%d%s.log", o->out, p->id, rep, suffix);
        struct argv_buf a;
        bench_argv(&a, spec, o, p, rep, suffix, r, threads);
        int st = run_wait(a.argv, log, c0, nc);
        if (g_stop || st != 0) {
            rc = k25_error_set(err, K25_EIO, log, 0, NULL, "rate probe %.4g req/s %s (exit %d)", r,
                               g_stop ? "interrupted" : "failed", st);
            goto out;
        }
        double v = bench_metric(js, w->search_metric);
        bool ok = !isnan(v) && v <= w->search_limit;
        json_array_append_new(probes, json_pack("{s:f, s:o, s:b}", "rate_rps", r, w->search_metric,
                                                isnan(v) ? json_null() : json_real(v), "meets_slo", ok));
        if (ok) {
            best = r;
            best_probe = probe;
        }
        if (probe == 0 && !ok)
            break;
        if (probe == 1 && ok)
            break;
        if (probe >= 2) {
            if (ok)
                lo = r;
            else
                hi = r;
        }
    }
    json_t *res = json_object();
    json_object_set_new(res, "max_rate_rps", json_real(best));
    json_object_set_new(res, "search_metric", json_string(w->search_metric));
    json_object_set_new(res, "search_limit", json_real(w->search_limit));
    json_object_set_new(res, "precision", json_real(w->precision));
    json_object_set(res, "probes", probes);
    if (best_probe >= 0) {
        char js[2048];
        json_error_t je;
        snprintf(js, sizeof(js), "%s/points/%s/rep-%d.probe-%d.json", o->out, p->id, rep, best_probe);
        json_t *b = json_load_file(js, 0, &je);
        json_t *s = b ? json_object_get(b, "summary") : NULL;
        json_object_set(res, "summary", s ? s : (b ? b : json_null()));
        json_decref(b);
    }
    char path[2048];
    snprintf(path, sizeof(path), "%s/points/%s/rep-%d.json", o->out, p->id, rep);
    rc = k25_write_json_atomic(path, res, err);
    json_decref(res);
out:
    json_decref(probes);
    return rc;
}

static void fmt_duration(double s, char *buf, size_t n)
{
    if (!isfinite(s) || s < 0)
        snprintf(buf, n, "?");
    else if (s < 60)
        snprintf(buf, n, "%.0fs", s);
    else if (s < 3600)
        snprintf(buf, n, "%dm%02ds", (int)s / 60, (int)s % 60);
    else
        snprintf(buf, n, "%dh%02dm", (int)s / 3600, ((int)s % 3600) / 60);
}

/* The best point among those with every repetition done, as a progress note. */
static void best_so_far(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                        char *buf, size_t bn)
{
    int best = -1;
    bool *pareto = calloc((size_t)n + 1, 1);
    buf[0] = 0;
    if (!pareto)
        return;
    if (k25_sweep_collect(spec, out, pts, n, NULL) == K25_OK)
        k25_sweep_analyze(spec, pts, n, &best, pareto);
    free(pareto);
    if (best >= 0) {
        char label[512];
        k25_sweep_point_label(spec, &pts[best], label, sizeof(label));
        const json_t *v = json_object_get(pts[best].metrics, spec->objective);
        snprintf(buf, bn, " | best: %s %s=%.4g", label, spec->objective, v ? json_number_value(v) : NAN);
    }
}

/* Rough seconds per run: measured runs under out if any, else NAN. */
static double measured_run_s(const struct k25_sweep_spec *spec, const char *out, const struct k25_sweep_point *pts, int n)
{
    double sum = 0;
    int cnt = 0;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < spec->repeats; r++) {
            char js[2048];
            snprintf(js, sizeof(js), "%s/points/%s/rep-%d.json", out, pts[i].id, r);
            json_error_t je;
            json_t *j = json_load_file(js, 0, &je);
            const json_t *w = j ? json_object_get(j, "wall_s") : NULL;
            if (w && json_is_number(w)) {
                sum += json_number_value(w);
                cnt++;
            }
            json_decref(j);
        }
    return cnt ? sum / cnt : NAN;
}

/* Records the wall time of a finished run into its JSON (for ETAs and estimates). */
static void stamp_wall(const char *out, const struct k25_sweep_point *p, int rep, double wall_s)
{
    char js[2048];
    snprintf(js, sizeof(js), "%s/points/%s/rep-%d.json", out, p->id, rep);
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    if (!j)
        return;
    json_object_set_new(j, "wall_s", json_real(wall_s));
    k25_write_json_atomic(js, j, NULL); /* best effort: only ETAs and estimates use it */
    json_decref(j);
}

int k25_sweep_run(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o, struct k25_error *err)
{
    struct k25_sweep_point *pts = NULL;
    int n = 0, rc;
    struct task *tasks = NULL;
    struct child *kids = NULL;
    if ((rc = k25_sweep_expand(spec, &pts, &n, err)))
        return rc;

    /* which points (--only), which tasks remain */
    bool *sel = calloc((size_t)n, sizeof(bool));
    tasks = calloc((size_t)n * (size_t)spec->repeats + 1, sizeof(*tasks));
    if (!sel || !tasks) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    int n_sel = 0;
    for (int i = 0; i < n; i++) {
        sel[i] = true;
        if (o->only && (rc = k25_sweep_only_match(spec, &pts[i], o->only, &sel[i], err)))
            goto out;
        n_sel += sel[i];
    }
    if (n_sel == 0) {
        rc = k25_error_set(err, K25_EINVAL, "--only", 0, NULL, "selects none of the %d points", n);
        goto out;
    }
    int n_tasks = 0, n_done = 0, n_all = 0;
    for (int r = 0; r < spec->repeats; r++) /* round-robin: every point once, then again */
        for (int i = 0; i < n; i++) {
            if (!sel[i])
                continue;
            n_all++;
            if (task_done(o->out, spec, &pts[i], r))
                n_done++;
            else
                tasks[n_tasks++] = (struct task){i, r};
        }

    if (o->dry_run) {
        double per = measured_run_s(spec, o->out, pts, n);
        printf("sweep '%s': %d points x %d repetitions = %d runs (%d already done, %d to run)%s\n", spec->name,
               n_sel, spec->repeats, n_all, n_done, n_tasks,
               n_sel < n ? " [--only]" : "");
        for (int i = 0; i < n; i++) {
            if (!sel[i])
                continue;
            char label[1024];
            k25_sweep_point_label(spec, &pts[i], label, sizeof(label));
            printf("  %s  %s%s\n", pts[i].id, label, pts[i].reference ? "  (reference: the defaults)" : "");
        }
        if (isfinite(per)) {
            char d[32];
            fmt_duration(per * n_tasks / (o->jobs > 0 ? o->jobs : 1), d, sizeof(d));
            printf("estimated time: %s (%.1f s per run, measured on the %s runs already done, %d job%s)\n", d, per,
                   "previous", o->jobs, o->jobs == 1 ? "" : "s");
        } else {
            printf("estimated time: unknown until the first run finishes (no earlier runs under %s)\n", o->out);
        }
        rc = K25_OK;
        goto out;
    }

    /* folders, configs, stale temporaries */
    if ((rc = mkdir_p(o->out, err)))
        goto out;
    for (int i = 0; i < n; i++) {
        if (!sel[i])
            continue;
        char dir[2048], cfgp[2200];
        snprintf(dir, sizeof(dir), "%s/points/%s", o->out, pts[i].id);
        if ((rc = mkdir_p(dir, err)))
            goto out;
        clean_temporaries(dir);
        snprintf(cfgp, sizeof(cfgp), "%s/config.yaml", dir);
        if ((rc = write_point_config(cfgp, &pts[i].cfg, err)))
            goto out;
    }

    int jobs = o->jobs > 0 ? o->jobs : 1;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int per_job = jobs > 1 ? (int)(ncpu / jobs) : 0; /* cores per job when pinning */
    if (jobs > 1 && per_job < 1)
        per_job = 1;
    if (jobs > 1 && !o->quiet)
        fprintf(stderr, "k25 sweep: %d runs in parallel share this machine (%ld cores, %d each): timings of "
                        "parallel runs disturb each other; use --jobs 1 for the figures you sign off\n",
                jobs, ncpu, per_job);

    if (o->task >= 0) { /* one task of a cluster array */
        if (o->task >= n_all) {
            rc = k25_error_set(err, K25_ERANGE, "--task", 0, NULL, "task %d of %d", o->task, n_all);
            goto out;
        }
        int k = 0, pi = -1, rr = -1;
        for (int r = 0; r < spec->repeats && pi < 0; r++)
            for (int i = 0; i < n && pi < 0; i++)
                if (sel[i] && k++ == o->task) {
                    pi = i;
                    rr = r;
                }
        n_tasks = 0;
        if (!task_done(o->out, spec, &pts[pi], rr))
            tasks[n_tasks++] = (struct task){pi, rr};
    }

    struct sigaction sa = {0}, old_int, old_term, dfl = {0}, old_chld;
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    /* an inherited SIG_IGN for SIGCHLD would make the kernel reap our runs
     * before waitpid sees them */
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_chld);
    g_stop = 0;
    kids = calloc((size_t)jobs, sizeof(*kids));
    if (!kids) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_sig;
    }
    int next = 0, running = 0, failed = 0, finished = 0;
    double sum_s = 0;
    uint64_t t_start = k25_now_ns();
    char best_note[768] = "";
    char first_fail[1024] = "";
    while ((next < n_tasks && !g_stop) || running > 0) {
        /* launch */
        while (running < jobs && next < n_tasks && !g_stop) {
            int slot = 0;
            while (kids[slot].pid > 0)
                slot++;
            const struct task *t = &tasks[next];
            struct k25_sweep_point *p = &pts[t->point];
            char log[2048];
            snprintf(log, sizeof(log), "%s/points/%s/rep-%d.log", o->out, p->id, t->rep);
            if (spec->wl.search) {
                /* the search probes run one after another inside a child of our own */
                pid_t pid = fork();
                if (pid == 0) {
                    prctl(PR_SET_PDEATHSIG, SIGTERM);
                    struct k25_error e2;
                    int r2 = rate_search(spec, o, p, t->rep, slot * per_job, per_job, per_job, &e2);
                    if (r2)
                        fprintf(stderr, "k25 sweep: %s\n", e2.msg);
                    _exit(r2 ? 1 : 0);
                }
                kids[slot] = (struct child){pid, next, k25_now_ns()};
            } else {
                struct argv_buf a;
                bench_argv(&a, spec, o, p, t->rep, "", spec->wl.rate_rps, per_job);
                kids[slot] = (struct child){spawn(a.argv, log, slot * per_job, per_job), next, k25_now_ns()};
            }
            if (kids[slot].pid < 0) {
                rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot start a run: %s", strerror(errno));
                kids[slot].pid = 0;
                g_stop = 1;
                break;
            }
            running++;
            next++;
        }
        if (running == 0)
            break;
        int st;
        pid_t pid = waitpid(-1, &st, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            rc = k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "waiting for the runs failed: %s", strerror(errno));
            break;
        }
        for (int s = 0; s < jobs; s++) {
            if (kids[s].pid != pid)
                continue;
            const struct task *t = &tasks[kids[s].task];
            double dt = (double)(k25_now_ns() - kids[s].t0_ns) / 1e9;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            kids[s].pid = 0;
            running--;
            if (code == 0 && task_done(o->out, spec, &pts[t->point], t->rep)) {
                finished++;
                sum_s += dt;
                stamp_wall(o->out, &pts[t->point], t->rep, dt);
            } else if (!g_stop) {
                failed++;
                if (!first_fail[0])
                    snprintf(first_fail, sizeof(first_fail), "%s/points/%s/rep-%d.log (exit %d)", o->out,
                             pts[t->point].id, t->rep, code);
            }
        }
        if (o->progress) {
            double eta = finished ? sum_s / finished * (n_tasks - finished - failed) / jobs : NAN;
            char e[32], el[32];
            fmt_duration(eta, e, sizeof(e));
            fmt_duration((double)(k25_now_ns() - t_start) / 1e9, el, sizeof(el));
            best_so_far(spec, o->out, pts, n, best_note, sizeof(best_note));
            fprintf(stderr, "\r\033[K[sweep %s] %d/%d runs%s, %s elapsed, ETA %s%s", spec->name, n_done + finished,
                    n_all, failed ? " (some failed)" : "", el, e, best_note);
        }
    }
    if (o->progress)
        fputc('\n', stderr);
    if (g_stop && !rc)
        rc = k25_error_set(err, K25_EIO, o->out, 0, NULL,
                           "interrupted: %d runs finished are kept; run the same command again to resume",
                           n_done + finished);
    else if (failed && !rc)
        rc = k25_error_set(err, K25_EIO, o->out, 0, NULL,
                           "%d of %d runs failed (first: %s); finished runs are kept, a re-run retries the rest",
                           failed, n_tasks, first_fail);

out_sig:
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGCHLD, &old_chld, NULL);
    if (!rc && o->task < 0) {
        if ((rc = k25_sweep_collect(spec, o->out, pts, n, err)) == K25_OK)
            rc = k25_sweep_write_results(spec, o->out, pts, n, err);
    }
out:
    free(kids);
    free(tasks);
    free(sel);
    k25_sweep_points_free(pts, n);
    return rc;
}
