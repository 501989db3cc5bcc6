/*
 * runner.c - running a sweep: the (point, repetition) tasks in interleaved
 * rounds, each round in a seeded shuffled order, each run one `k25 bench`
 * in a child process (pinned to its own cores when several run at once),
 * skipping tasks whose result files are complete, with progress, ETA and
 * the verdict so far; the rate search; one task of a cluster array
 * (--task).  The Slurm script and --merge live in cluster.c.
 *
 * Same load for every point: with --jobs N every run has N-1 companions.
 * Rounds put every point at every position, and when the last real runs
 * are left, filler runs (a point's bench writing to OUT/.filler/, thrown
 * away) keep the machine as loaded as it was for the others; without them
 * the last run of a sweep would run alone, and faster.
 *
 * The runs themselves (command line, log, cores, the TEST-ONLY per-point
 * slowdown hook) are child.c's; the rate search is search.c's.
 */
#include "sweep_run.h"

#include "harness.h"

#include "k25util.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    g_stop = sig; /* the signal number: the command exits 128 + it */
}

bool k25_sweep_stopping(void)
{
    return g_stop != 0;
}

int k25_sweep_stop_signal(void)
{
    return g_stop > 0 ? (int)g_stop : 0;
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

/* Is the file at path exactly text? */
static bool file_equals(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    bool same = true;
    size_t i = 0;
    int c;
    while (same && (c = fgetc(f)) != EOF)
        same = i < n && (unsigned char)text[i++] == c;
    fclose(f);
    return same && i == n;
}

/*
 * Writes the point's effective config as a YAML file bench can --config;
 * leaves an identical file alone, so array tasks of the same point on a
 * shared file system do not rewrite it under each other.
 */
static int write_point_config(const char *path, const struct k25_config *cfg, struct k25_error *err)
{
    char *cj = k25_config_to_json(cfg);
    json_error_t je;
    json_t *o = cj ? json_loads(cj, 0, &je) : NULL;
    free(cj);
    char *text = NULL;
    size_t len = 0;
    FILE *f = o ? open_memstream(&text, &len) : NULL;
    if (!f) {
        json_decref(o);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
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
            char num[40]; /* shortest text that reads back as the same double */
            k25_fmt_double(json_real_value(v), num, sizeof(num));
            fprintf(f, "%s: %s\n", key, num);
        }
    }
    json_decref(o);
    int rc = K25_OK;
    if (fclose(f) != 0 || !text) {
        free(text);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    if (!file_equals(path, text, len))
        rc = k25_write_text_atomic(path, text, err);
    free(text);
    return rc;
}

/* A finished repetition: its JSON parses and its trace (a rate search: the deciding probe's) is a valid run file. */
static bool task_done(const char *out, const struct k25_sweep_point *p, int rep)
{
    char js[2048], h5[2048];
    snprintf(js, sizeof(js), "%s/points/%s/rep-%d.json", out, p->id, rep);
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    if (!j)
        return false;
    /* an interrupted run (Ctrl-C reaches the bench children too) keeps what it measured
     * under the final names, marked: it is not a finished point, resume redoes it */
    bool interrupted = json_is_true(json_object_get(j, "interrupted"));
    json_decref(j);
    if (interrupted)
        return false;
    snprintf(h5, sizeof(h5), "%s/points/%s/rep-%d.h5", out, p->id, rep);
    struct k25_h5 h;
    if (k25_h5_open_read(&h, h5, "run", NULL) != K25_OK)
        return false;
    k25_h5_close(&h);
    return true;
}


/*
 * Removes the temporaries a killed run left in a point folder: only those
 * whose writer is dead, and with rep >= 0 only repetition rep's files
 * (rep-K.h5.tmp.PID, rep-K.probe-J.json.tmp.PID, ...).  Runs of other
 * repetitions or other array tasks writing into the same folder keep
 * theirs.  (On a shared file system a pid names a process of this machine
 * only; array tasks therefore clean nothing but their own repetition.)
 */
static void clean_temporaries(const char *dir, int rep)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    char own[32];
    snprintf(own, sizeof(own), "rep-%d.", rep);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".tmp"))
            continue;
        if (rep >= 0 && strncmp(e->d_name, own, strlen(own)) != 0)
            continue;
        if (k25_tmp_writer_alive(e->d_name))
            continue;
        char p[2400];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

struct child {
    pid_t pid;
    int task;                 /* index into the task list; -1: a filler run */
    uint64_t t0_ns;
};

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

/* The verdict so far (from the runs finished), as a progress note. */
static void best_so_far(const struct k25_sweep_spec *spec, const char *out, struct k25_sweep_point *pts, int n,
                        char *buf, size_t bn)
{
    struct k25_sweep_verdict v;
    bool *pareto = calloc((size_t)n + 1, 1);
    buf[0] = 0;
    if (!pareto)
        return;
    if (k25_sweep_collect(spec, out, pts, n, NULL) != K25_OK) {
        free(pareto);
        return;
    }
    k25_sweep_analyze(spec, pts, n, &v, pareto);
    free(pareto);
    int show = v.best >= 0 ? v.best : v.leader;
    if (show >= 0) {
        char label[512];
        k25_sweep_point_label(spec, &pts[show], label, sizeof(label));
        const json_t *x = json_object_get(pts[show].metrics, spec->objective);
        snprintf(buf, bn, " | %s: %s %s=%.4g", v.best >= 0 ? "best" : "best mean (not significant)", label,
                 spec->objective, x ? json_number_value(x) : NAN);
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

/* splitmix64: a small seeded generator for the shuffled rounds. */
static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int k25_sweep_tasks(const struct k25_sweep_spec *spec, const struct k25_sweep_point *pts, int n, const char *only,
                    bool *sel, struct k25_sweep_task *tasks, struct k25_error *err)
{
    int ref = k25_sweep_reference_index(spec, pts, n), n_sel = 0, n_match = 0, rc;
    int *order = calloc((size_t)n + 1, sizeof(int));
    if (!order)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int i = 0; i < n; i++) {
        sel[i] = true;
        if (only && (rc = k25_sweep_only_match(spec, &pts[i], only, &sel[i], err))) {
            free(order);
            return rc;
        }
        n_match += sel[i] && i != ref;
        if (i == ref)
            sel[i] = true; /* the reference always runs: every verdict compares with it */
        if (sel[i])
            order[n_sel++] = i;
    }
    if (only && n_match == 0) {
        free(order);
        return k25_error_set(err, K25_EINVAL, "--only", 0, NULL, "selects none of the %d points", n);
    }
    int nt = 0;
    for (int r = 0; r < spec->repeats; r++) {
        uint64_t st = spec->seed * 0x100000001B3ull + (uint64_t)r + 1;
        for (int i = n_sel - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(splitmix64(&st) % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < n_sel; i++)
            tasks[nt] = (struct k25_sweep_task){order[i], r, nt}, nt++;
    }
    free(order);
    return nt;
}

/* Threads for one array task: the cores Slurm gave it (SLURM_CPUS_PER_TASK, else our affinity). */
static int task_threads(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    const char *s = getenv("SLURM_CPUS_PER_TASK");
    int c = s ? atoi(s) : 0;
    if (c > 0 && (n <= 0 || c < n))
        n = c;
    return n > 0 ? n : 0;
}

/*
 * TEST-ONLY K25_TEST_HOLD_TASKS="DIR:I,J,...": the bench runs of tasks I,
 * J (their index in the sweep's order, the number --task takes) get
 * K25_TEST_HOLD=DIR/task-I (harness/testknob.c: the run writes
 * DIR/task-I.ready and waits for DIR/task-I.release before it measures);
 * the other runs get no hold.  Lets a test act on a run that is certainly
 * still going, whatever the machine's speed (tests/test_slurm.c,
 * tests/test_sweep.c, docs/testing.md); never set it for a measurement.
 */
#define MAX_HOLDS 16
struct holds {
    char dir[1024];           /* "": the knob is off */
    int task[MAX_HOLDS], n;
};

static int holds_parse(struct holds *h, int n_all, struct k25_error *err)
{
    const char *env = getenv("K25_TEST_HOLD_TASKS");
    memset(h, 0, sizeof(*h));
    if (!env || !*env)
        return K25_OK;
    const char *colon = strrchr(env, ':');
    if (!colon || colon == env || (size_t)(colon - env) >= sizeof(h->dir) || !colon[1])
        return k25_error_set(err, K25_EINVAL, "K25_TEST_HOLD_TASKS", 0, NULL,
                             "\"%s\": expected DIR:I[,J...] (at most %d task indices of the sweep's order)", env,
                             MAX_HOLDS);
    snprintf(h->dir, sizeof(h->dir), "%.*s", (int)(colon - env), env);
    for (const char *p = colon + 1; *p;) {
        char *end;
        errno = 0;
        long t = strtol(p, &end, 10);
        if (end == p || errno || (*end && *end != ',') || h->n == MAX_HOLDS)
            return k25_error_set(err, K25_EINVAL, "K25_TEST_HOLD_TASKS", 0, NULL,
                                 "\"%s\": expected DIR:I[,J...] (at most %d task indices of the sweep's order)",
                                 env, MAX_HOLDS);
        if (t < 0 || t >= n_all)
            return k25_error_set(err, K25_ERANGE, "K25_TEST_HOLD_TASKS", 0, NULL,
                                 "task %ld: the sweep has tasks 0..%d", t, n_all - 1);
        h->task[h->n++] = (int)t;
        p = *end ? end + 1 : end;
    }
    return K25_OK;
}

/* Before starting a run of task index (-1: a filler): its K25_TEST_HOLD, or none. */
static void holds_apply(const struct holds *h, int index)
{
    if (!h->dir[0])
        return;
    for (int i = 0; i < h->n && index >= 0; i++)
        if (h->task[i] == index) {
            char v[1100];
            snprintf(v, sizeof(v), "%s/task-%d", h->dir, index);
            setenv("K25_TEST_HOLD", v, 1);
            return;
        }
    unsetenv("K25_TEST_HOLD");
}

/* The running sweep: what the scheduling loop and its helpers share. */
struct sched {
    const struct k25_sweep_spec *spec;
    const struct k25_sweep_opts *o;
    struct k25_sweep_point *pts;
    int n;
    const struct k25_sweep_task *tasks;
    int n_tasks;
    struct k25_sweep_slow_rule slow[K25_SWEEP_MAX_SLOW_RULES];
    int n_slow;
    struct holds holds;       /* TEST-ONLY K25_TEST_HOLD_TASKS */
    int jobs, per_job, threads;
    struct child *kids;       /* [jobs] */
    int fillers_started;
};

/* Starts task t (>= 0) or a filler run (t = -1) in slot s. */
static int launch(struct sched *S, int s, int t, struct k25_error *err)
{
    const struct k25_sweep_spec *spec = S->spec;
    const struct k25_sweep_opts *o = S->o;
    const struct k25_sweep_task *tk = &S->tasks[t >= 0 ? t : (S->n_tasks - 1 - S->fillers_started % S->n_tasks)];
    const struct k25_sweep_point *p = &S->pts[tk->point];
    const struct k25_sweep_slow_rule *slow = k25_sweep_slow_rule_for(S->slow, S->n_slow, spec, p);
    char prefix[2048], log[2100];
    int c0 = s * S->per_job;
    if (t >= 0)
        snprintf(prefix, sizeof(prefix), "%s/points/%s/rep-%d", o->out, p->id, tk->rep);
    else
        snprintf(prefix, sizeof(prefix), "%s/.filler/slot-%d", o->out, s);
    snprintf(log, sizeof(log), "%s.log", prefix);
    pid_t pid;
    struct k25_sweep_workload w;
    k25_sweep_point_workload(spec, p, &w); /* the spec's, with the point's client axes */
    holds_apply(&S->holds, t >= 0 ? tk->index : -1); /* the child inherits it */
    if (spec->launch[0]) {
        pid = k25_sweep_spawn_launch(spec, o, p, tk->rep, prefix, log, c0, S->per_job, S->threads, slow);
    } else if (t >= 0 && spec->wl.search) {
        pid = k25_sweep_spawn_search(spec, o, p, tk->rep, log, c0, S->per_job, S->threads, slow);
    } else {
        struct k25_sweep_argv a;
        k25_sweep_bench_argv(&a, spec, o, p, tk->rep, prefix, spec->wl.search ? spec->wl.rate_lo : w.rate_rps,
                             S->threads);
        pid = k25_sweep_spawn(a.argv, log, c0, S->per_job, slow);
    }
    if (pid < 0)
        return k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot start a run: %s", strerror(errno));
    S->kids[s] = (struct child){pid, t, k25_now_ns()};
    if (t < 0)
        S->fillers_started++;
    return K25_OK;
}

/* Ends the filler runs (their results are thrown away) and removes their files. */
static void stop_fillers(struct sched *S)
{
    for (int s = 0; s < S->jobs; s++) {
        if (S->kids[s].pid <= 0 || S->kids[s].task >= 0)
            continue;
        kill(S->kids[s].pid, SIGKILL);
        while (waitpid(S->kids[s].pid, NULL, 0) < 0 && errno == EINTR)
            ;
        S->kids[s].pid = 0;
    }
    char dir[2048];
    snprintf(dir, sizeof(dir), "%s/.filler", S->o->out);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') {
            char p[2400];
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

/* --dry-run: the selected points, what is done, and the time left at the measured pace. */
static void dry_run_report(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                           const struct k25_sweep_point *pts, int n, const bool *sel, int n_all, int n_done,
                           const struct k25_sweep_task *tasks, int n_tasks)
{
    int n_sel = 0, ref = k25_sweep_reference_index(spec, pts, n);
    for (int i = 0; i < n; i++)
        n_sel += sel[i];
    double per = measured_run_s(spec, o->out, pts, n);
    printf("sweep '%s': %d points x %d repetitions = %d runs (%d already done, %d to run)%s\n", spec->name, n_sel,
           spec->repeats, n_all, n_done, n_tasks, n_sel < n ? " [--only, with the reference]" : "");
    for (int i = 0; i < n; i++) {
        if (!sel[i])
            continue;
        char label[1024];
        k25_sweep_point_label(spec, &pts[i], label, sizeof(label));
        printf("  %s  %s%s\n", pts[i].id, label, i == ref ? "  (reference: the defaults)" : "");
    }
    if (isfinite(per)) {
        char d[32];
        fmt_duration(per * n_tasks / (o->jobs > 0 ? o->jobs : 1), d, sizeof(d));
        printf("estimated time: %s (%.1f s per run, measured on the %s runs already done, %d job%s)\n", d, per,
               "previous", o->jobs, o->jobs == 1 ? "" : "s");
    } else if (n_tasks > 0) {
        /* no run yet: a probe of the engine on this machine and the runs' sizes (estimate.c) */
        struct k25_sweep_probe pr;
        char why[600] = "";
        int rc = k25_sweep_probe(spec, &pts[ref >= 0 ? ref : tasks[0].point], &pr, why, sizeof(why));
        if (rc == K25_OK) {
            double total = 0;
            for (int t = 0; t < n_tasks; t++)
                total += k25_sweep_estimate_run_s(spec, &pts[tasks[t].point], &pr);
            char d[32];
            int jobs = o->jobs > 0 ? o->jobs : 1;
            fmt_duration(total / jobs, d, sizeof(d));
            printf("estimated time: about %s (rough: from a probe of the engine on this machine, %.3g ms per prompt "
                   "token and %.3g ms per decode step at %d prompt tokens, %.2g s to load, and each run's requests "
                   "from the gold set; %d job%s)\n",
                   d, 1e3 * pr.prefill_s_per_tok, 1e3 * pr.decode_s_per_step, pr.probe_tokens, pr.load_s, o->jobs,
                   o->jobs == 1 ? "" : "s");
        } else {
            printf("estimated time: unknown until the first run finishes (%s)\n", why);
        }
        k25_sweep_probe_free(&pr);
    } else {
        printf("estimated time: none, every run is done\n");
    }
}

/*
 * Point folders, their configs and stale temporaries: of every selected
 * point, or for an array task only its own point's folder and its own
 * run's leftovers.
 */
static int prepare_folders(const struct k25_sweep_opts *o, const struct k25_sweep_point *pts, int n,
                           const bool *sel, const struct k25_sweep_task *all, struct k25_error *err)
{
    int rc = mkdir_p(o->out, err);
    for (int i = 0; i < n && !rc; i++) {
        if (!sel[i] || (o->task >= 0 && i != all[o->task].point))
            continue;
        char dir[2048], cfgp[2200];
        snprintf(dir, sizeof(dir), "%s/points/%s", o->out, pts[i].id);
        if ((rc = mkdir_p(dir, err)))
            break;
        clean_temporaries(dir, o->task >= 0 ? all[o->task].rep : -1);
        snprintf(cfgp, sizeof(cfgp), "%s/config.yaml", dir);
        rc = write_point_config(cfgp, &pts[i].cfg, err);
    }
    return rc;
}

/*
 * The load guard, once before the first point (our own parallel runs
 * would trip it in each run): OUT/load_guard.json, which summary.json
 * carries, and a warning when the machine was busy.  The runs are then
 * told not to sample (K25_LOAD_GUARD=0; the caller restores it).
 */
static void sample_load_guard(const char *out)
{
    struct k25_load_guard lg;
    if (k25_load_guard_sample(&lg) != K25_OK)
        return;
    json_t *g = k25_load_guard_json(&lg);
    char gp[2048];
    snprintf(gp, sizeof(gp), "%s/load_guard.json", out);
    if (g)
        k25_write_json_atomic(gp, g, NULL); /* best effort: a note for the summary and the report */
    json_decref(g);
    if (lg.busy)
        fprintf(stderr, "k25 sweep: WARNING: the machine was already busy before the sweep (%s): timings include "
                        "interference\n", lg.reason);
    setenv("K25_LOAD_GUARD", "0", 1);
}

/*
 * The scheduling loop: real runs into free slots while any remain, then
 * filler runs beside the last ones; reaps runs, counts the finished and
 * failed, shows progress.  Returns the sweep's status.
 */
static int schedule(struct sched *S, int n_done, int n_all, struct k25_error *err)
{
    const struct k25_sweep_spec *spec = S->spec;
    const struct k25_sweep_opts *o = S->o;
    int next = 0, running = 0, failed = 0, finished = 0, rc = K25_OK;
    double sum_s = 0;
    char best_note[768] = "", first_fail[1024] = "";
    char what[128];
    snprintf(what, sizeof(what), "k25 sweep %.50s", spec->name);
    struct k25_progress prog;
    k25_progress_begin(&prog, o->progress, what, "runs", n_all, 0);
    if (n_done > 0)
        k25_progress_update(&prog, n_done, "%d runs already complete (resumed)", n_done);
    while ((next < S->n_tasks && !g_stop) || running > 0) {
        for (int s = 0; s < S->jobs && !g_stop && !rc; s++) {
            if (S->kids[s].pid > 0)
                continue;
            if (next < S->n_tasks) {
                if ((rc = launch(S, s, next, err)) == K25_OK) {
                    next++;
                    running++;
                }
            } else if (running > 0 && S->jobs > 1) {
                rc = launch(S, s, -1, err);
            }
        }
        if (rc)
            g_stop = -1; /* stop launching, not a signal */
        if (running == 0)
            break;
        int st;
        /* polled (200 ms), so the progress line keeps its period while a long run goes on */
        pid_t pid;
        while ((pid = waitpid(-1, &st, WNOHANG)) == 0) {
            if (k25_progress_due(&prog)) {
                best_so_far(spec, o->out, S->pts, S->n, best_note, sizeof(best_note));
                k25_progress_update(&prog, n_done + finished, "%d running%s%s", running,
                                    failed ? ", some failed" : "", best_note);
            }
            struct timespec ts = {0, 200000000L};
            nanosleep(&ts, NULL);
        }
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            rc = k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "waiting for the runs failed: %s", strerror(errno));
            break;
        }
        for (int s = 0; s < S->jobs; s++) {
            if (S->kids[s].pid != pid)
                continue;
            S->kids[s].pid = 0;
            if (S->kids[s].task < 0)
                break; /* a filler ended: the loop starts another while real runs remain */
            const struct k25_sweep_task *t = &S->tasks[S->kids[s].task];
            double dt = (double)(k25_now_ns() - S->kids[s].t0_ns) / 1e9;
            int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            running--;
            if (code == 0 && task_done(o->out, &S->pts[t->point], t->rep)) {
                finished++;
                sum_s += dt;
                stamp_wall(o->out, &S->pts[t->point], t->rep, dt);
            } else if (!g_stop) {
                failed++;
                if (!first_fail[0])
                    snprintf(first_fail, sizeof(first_fail), "%s/points/%s/rep-%d.log (exit %d)", o->out,
                             S->pts[t->point].id, t->rep, code);
            }
        }
        if (k25_progress_due(&prog)) {
            /* the ETA from the runs' own mean time (the first runs include the reference's) */
            double eta = finished ? sum_s / finished * (S->n_tasks - finished - failed) / S->jobs : NAN;
            char e[32];
            fmt_duration(eta, e, sizeof(e));
            best_so_far(spec, o->out, S->pts, S->n, best_note, sizeof(best_note));
            k25_progress_update(&prog, n_done + finished, "%s%s, runs' mean-time ETA %s%s", spec->name,
                                failed ? " (some failed)" : "", e, best_note);
        }
    }
    stop_fillers(S);
    k25_progress_end(&prog, n_done + finished, "%s%s", spec->name, failed ? " (some failed)" : "");
    if (g_stop && !rc)
        rc = k25_error_set(err, K25_EIO, o->out, 0, NULL,
                           "interrupted: %d runs finished are kept; run the same command again to resume",
                           n_done + finished);
    else if (failed && !rc)
        rc = k25_error_set(err, K25_EIO, o->out, 0, NULL,
                           "%d of %d runs failed (first: %s); finished runs are kept, a re-run retries the rest",
                           failed, S->n_tasks, first_fail);
    return rc;
}

int k25_sweep_run(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o, struct k25_error *err)
{
    struct k25_sweep_point *pts = NULL;
    int n = 0, rc;
    struct k25_sweep_task *all = NULL, *tasks = NULL;
    struct sched S = {0};
    bool *sel = NULL;
    if ((rc = k25_sweep_expand(spec, &pts, &n, err)))
        return rc;
    if ((rc = k25_sweep_slow_rules_parse(S.slow, &S.n_slow, err)))
        goto out;
    if (S.n_slow && !o->quiet)
        fprintf(stderr, "k25 sweep: TEST-ONLY hook K25_TEST_SLOWDOWN_POINTS is active: results are deliberately "
                        "degraded\n");

    /* which points (--only, the reference always), which tasks, in run order, which remain */
    sel = calloc((size_t)n, sizeof(bool));
    all = calloc((size_t)n * (size_t)spec->repeats + 1, sizeof(*all));
    tasks = calloc((size_t)n * (size_t)spec->repeats + 1, sizeof(*tasks));
    if (!sel || !all || !tasks) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    int n_all = k25_sweep_tasks(spec, pts, n, o->only, sel, all, err), n_tasks = 0, n_done = 0;
    if (n_all < 0) {
        rc = n_all;
        goto out;
    }
    if (o->task >= n_all) {
        rc = k25_error_set(err, K25_ERANGE, "--task", 0, NULL, "task %d of %d (0..%d)", o->task, n_all, n_all - 1);
        goto out;
    }
    if ((rc = holds_parse(&S.holds, n_all, err)))
        goto out;
    if (S.holds.dir[0])
        fprintf(stderr, "k25 sweep: TEST-ONLY hook K25_TEST_HOLD_TASKS is active: %d run(s) wait for a release file "
                        "under %s before they measure\n", S.holds.n, S.holds.dir);
    for (int k = 0; k < n_all; k++) {
        if (o->task >= 0 && k != o->task)
            continue;
        if (task_done(o->out, &pts[all[k].point], all[k].rep))
            n_done++;
        else
            tasks[n_tasks++] = all[k];
    }
    if (o->dry_run) {
        dry_run_report(spec, o, pts, n, sel, n_all, n_done, tasks, n_tasks);
        goto out;
    }
    if ((rc = prepare_folders(o, pts, n, sel, all, err)))
        goto out;

    S.spec = spec;
    S.o = o;
    S.pts = pts;
    S.n = n;
    S.tasks = tasks;
    S.n_tasks = n_tasks;
    S.jobs = o->task >= 0 ? 1 : (o->jobs > 0 ? o->jobs : 1);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    S.per_job = S.jobs > 1 ? (int)(ncpu / S.jobs) : 0; /* cores per job when pinning */
    if (S.jobs > 1 && S.per_job < 1)
        S.per_job = 1;
    S.threads = o->task >= 0 ? task_threads() : S.per_job;
    if (S.jobs > 1 && !o->quiet)
        fprintf(stderr, "k25 sweep: %d runs in parallel share this machine (%ld cores, %d each): timings of "
                        "parallel runs disturb each other (every point meets the same load, in shuffled rounds); "
                        "use --jobs 1 for the figures you sign off\n",
                S.jobs, ncpu, S.per_job);
    char filler_dir[2048];
    snprintf(filler_dir, sizeof(filler_dir), "%s/.filler", o->out);
    S.kids = calloc((size_t)S.jobs, sizeof(*S.kids));
    if (!S.kids || (S.jobs > 1 && (rc = mkdir_p(filler_dir, err)))) {
        if (!rc)
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }

    const char *guard_env = getenv("K25_LOAD_GUARD");
    char guard_saved[16] = "";
    bool guard_was_set = guard_env != NULL;
    if (guard_env)
        snprintf(guard_saved, sizeof(guard_saved), "%s", guard_env);
    if (o->task < 0 && n_tasks > 0) /* an array task's bench samples for itself */
        sample_load_guard(o->out);
    struct sigaction sa = {0}, old_int, old_term, dfl = {0}, old_chld;
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    /* an inherited SIG_IGN for SIGCHLD would make the kernel reap our runs
     * before waitpid sees them */
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGCHLD, &dfl, &old_chld);
    g_stop = 0;
    rc = schedule(&S, n_done, n_all, err);
    if (S.holds.dir[0])
        unsetenv("K25_TEST_HOLD");
    /* g_stop keeps the signal for k25_sweep_stop_signal() after the handlers are restored */
    if (guard_was_set)
        setenv("K25_LOAD_GUARD", guard_saved, 1);
    else
        unsetenv("K25_LOAD_GUARD");
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGCHLD, &old_chld, NULL);
    /* leftovers of writers that died during the sweep (a killed earlier run whose children were
     * still being reaped when the folders were prepared): the same rule, now that they are gone */
    for (int i = 0; i < n && o->task < 0; i++)
        if (sel[i]) {
            char dir[2048];
            snprintf(dir, sizeof(dir), "%s/points/%s", o->out, pts[i].id);
            clean_temporaries(dir, -1);
        }
    if (!rc && o->task < 0 && (rc = k25_sweep_collect(spec, o->out, pts, n, err)) == K25_OK)
        rc = k25_sweep_write_results(spec, o->out, pts, n, NULL, err);
out:
    free(S.kids);
    free(tasks);
    free(all);
    free(sel);
    k25_sweep_points_free(pts, n);
    return rc;
}
