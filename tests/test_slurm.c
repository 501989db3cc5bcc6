/*
 * test_slurm.c - a sweep as a Slurm job array on a real cluster: a
 * one-node Slurm (Debian 12: 22.05) with its own munged, started here on
 * 127.0.0.1 under a temporary folder (key, config, state, spool, logs,
 * free ports), never through systemd.  The ci-smoke spec runs as an array
 * without --exclusive (tasks overlap on the node, as on any cluster), one
 * task is cancelled while it certainly runs (held before it measures by
 * the TEST-ONLY K25_TEST_HOLD_TASKS knob, not caught by timing), --merge
 * must name it and refuse, the task is resubmitted, --merge succeeds, and
 * the points are those a local run has.
 * The daemons are stopped whatever happens.  Where they cannot run (not
 * root, slurm-wlm/munge missing, a container that forbids them) the test
 * skips and says why.
 */
#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

struct cluster {
    char dir[256];            /* the temporary folder everything lives in */
    char conf[400];           /* its slurm.conf */
    pid_t munged, ctld, slurmd;
    char jobs[4][32];         /* job ids to cancel at the end */
    int n_jobs;
};

static struct cluster C;

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A TCP port free on 127.0.0.1 right now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 0;
    struct sockaddr_in a = {0};
    socklen_t len = sizeof(a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Starts a daemon in the foreground as our child (it dies with us), output to log. */
static pid_t start_daemon(char *const argv[], const char *log)
{
    pid_t parent = getpid(), pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    execvp(argv[0], argv);
    _exit(127);
}

/* Is our child pid still running? */
static bool alive(pid_t pid)
{
    return pid > 0 && waitpid(pid, NULL, WNOHANG) == 0;
}

/* Ends a daemon we started: SIGTERM, up to 5 s, then SIGKILL. */
static void stop_daemon(pid_t *pid)
{
    if (*pid <= 0)
        return;
    kill(*pid, SIGTERM);
    for (int i = 0; i < 50 && waitpid(*pid, NULL, WNOHANG) == 0; i++)
        sleep_ms(100);
    if (waitpid(*pid, NULL, WNOHANG) == 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
    }
    *pid = 0;
}

/* The last lines of the daemons' logs, for a skip or failure message. */
static char *daemon_logs(void)
{
    char cmd[600], *out = NULL;
    snprintf(cmd, sizeof(cmd), "cd %s/log && tail -n 5 *", C.dir);
    tu_run(cmd, &out);
    return out ? out : strdup("");
}

/* Cancels our jobs, waits for them to leave the queue, stops the daemons, removes the folder. */
static int cluster_stop(void **state)
{
    (void)state;
    char cmd[600];
    for (int i = 0; i < C.n_jobs && C.ctld > 0; i++) {
        snprintf(cmd, sizeof(cmd), "scancel %s >/dev/null 2>&1", C.jobs[i]);
        tu_run(cmd, NULL);
    }
    if (C.n_jobs && C.ctld > 0)
        for (int i = 0; i < 100; i++) { /* their steps end before slurmd does */
            char *out = NULL;
            tu_run("squeue -h 2>/dev/null", &out);
            bool empty = !out || !*out;
            free(out);
            if (empty)
                break;
            sleep_ms(100);
        }
    stop_daemon(&C.slurmd);
    stop_daemon(&C.ctld);
    stop_daemon(&C.munged);
    if (C.dir[0] && !getenv("K25_KEEP_SLURM")) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", C.dir);
        tu_run(cmd, NULL);
    }
    return 0;
}

/* Why this machine cannot host the cluster ("" when it can). */
static const char *cannot_run(void)
{
    static char why[256];
    if (geteuid() != 0)
        return "needs root (slurmd runs jobs as any user)";
    const char *tools[] = {"munged", "munge", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "sinfo"};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "command -v %s >/dev/null 2>&1", tools[i]);
        if (tu_run(cmd, NULL) != 0) {
            snprintf(why, sizeof(why), "%s is not installed (apt-get install slurm-wlm munge; ci/install-deps.sh "
                                       "does it)", tools[i]);
            return why;
        }
    }
    return "";
}

/*
 * Starts munged and the Slurm daemons; true when the node is idle.  On
 * false, why says what stopped it (the test skips with it).
 */
static bool cluster_start(char *why, size_t wn)
{
    char cmd[2048], path[600];
    char *dir = tu_tmpdir();
    if (!dir) {
        snprintf(why, wn, "cannot make a temporary folder");
        return false;
    }
    snprintf(C.dir, sizeof(C.dir), "%s", dir);
    free(dir);
    snprintf(cmd, sizeof(cmd),
             "cd %s && mkdir -p munge state spool log && chmod 700 munge && "
             "dd if=/dev/urandom of=munge/munge.key bs=1024 count=1 2>/dev/null && chmod 400 munge/munge.key",
             C.dir);
    if (tu_run(cmd, NULL) != 0) {
        snprintf(why, wn, "cannot write a munge key under %s", C.dir);
        return false;
    }
    /* munged, on a socket of its own */
    char sock[400], key[400], pidf[400], seed[400], mlog[400], l1[400];
    snprintf(sock, sizeof(sock), "--socket=%s/munge/munge.socket", C.dir);
    snprintf(key, sizeof(key), "--key-file=%s/munge/munge.key", C.dir);
    snprintf(pidf, sizeof(pidf), "--pid-file=%s/munge/munged.pid", C.dir);
    snprintf(seed, sizeof(seed), "--seed-file=%s/munge/munged.seed", C.dir);
    snprintf(mlog, sizeof(mlog), "--log-file=%s/log/munged.log", C.dir);
    snprintf(l1, sizeof(l1), "%s/log/munged.out", C.dir);
    char *margv[] = {"munged", "-F", "--force", sock, key, pidf, seed, mlog, NULL};
    C.munged = start_daemon(margv, l1);
    snprintf(cmd, sizeof(cmd), "munge -S %s/munge/munge.socket -n 2>/dev/null | unmunge -S %s/munge/munge.socket >/dev/null 2>&1",
             C.dir, C.dir);
    bool ok = false;
    for (int i = 0; i < 300 && !ok && alive(C.munged); i++) { /* up to 30 s: a bound, not the way out */
        sleep_ms(100);
        ok = tu_run(cmd, NULL) == 0;
    }
    if (!ok) {
        char *logs = daemon_logs();
        snprintf(why, wn, "munged did not start:\n%s", logs);
        free(logs);
        return false;
    }
    /* slurm.conf: one node, our ports, our folders, no cgroups, no accounting */
    int p1 = free_port(), p2 = 0;
    while ((p2 = free_port()) == p1 || p2 == 0)
        ;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(C.conf, sizeof(C.conf), "%s/slurm.conf", C.dir);
    FILE *f = fopen(C.conf, "w");
    if (!f) {
        snprintf(why, wn, "cannot write %s", C.conf);
        return false;
    }
    fprintf(f,
            "ClusterName=k25test\nSlurmctldHost=localhost(127.0.0.1)\nSlurmctldPort=%d\nSlurmdPort=%d\n"
            "SlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\nAuthInfo=socket=%s/munge/munge.socket\n"
            "CredType=cred/munge\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nJobAcctGatherType=jobacct_gather/none\n"
            "AccountingStorageType=accounting_storage/none\nMpiDefault=none\nSwitchType=switch/none\n"
            "StateSaveLocation=%s/state\nSlurmdSpoolDir=%s/spool\nSlurmctldPidFile=%s/slurmctld.pid\n"
            "SlurmdPidFile=%s/slurmd.pid\nSlurmctldLogFile=%s/log/slurmctld.log\nSlurmdLogFile=%s/log/slurmd.log\n"
            "ReturnToService=2\nSlurmdParameters=config_overrides\nMinJobAge=300\n"
            "NodeName=localhost NodeAddr=127.0.0.1 CPUs=%ld State=UNKNOWN\n"
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            p1, p2, C.dir, C.dir, C.dir, C.dir, C.dir, C.dir, C.dir, ncpu > 2 ? ncpu : 2);
    if (fclose(f) != 0) {
        snprintf(why, wn, "cannot write %s", C.conf);
        return false;
    }
    setenv("SLURM_CONF", C.conf, 1); /* for sbatch, squeue, scancel, sinfo */
    snprintf(path, sizeof(path), "%s/log/slurmctld.out", C.dir);
    char *cargv[] = {"slurmctld", "-D", "-f", C.conf, NULL};
    C.ctld = start_daemon(cargv, path);
    snprintf(path, sizeof(path), "%s/log/slurmd.out", C.dir);
    char *dargv[] = {"slurmd", "-D", "-N", "localhost", "-f", C.conf, NULL};
    C.slurmd = start_daemon(dargv, path);
    ok = false;
    for (int i = 0; i < 1200 && !ok && alive(C.ctld) && alive(C.slurmd); i++) { /* up to 2 min: a bound */
        sleep_ms(100);
        ok = tu_run("sinfo -h -N -o %t 2>/dev/null | grep -qx idle", NULL) == 0;
    }
    if (!ok) {
        char *logs = daemon_logs();
        snprintf(why, wn, "the Slurm daemons did not bring the node up:\n%s", logs);
        free(logs);
        return false;
    }
    return true;
}

/*
 * Submits the script (extra sbatch options before it, env assignments
 * before sbatch: its environment is the job's) from / - the script must
 * not depend on where sbatch runs; the job id goes into C.jobs.
 */
static const char *submit(const char *script, const char *opts, const char *env)
{
    char cmd[1900], *out = NULL;
    snprintf(cmd, sizeof(cmd), "cd / && %s sbatch --parsable %s %s", env, opts, script);
    int st = tu_run(cmd, &out);
    if (st != 0 || !out || !*out)
        fail_msg("%s: exit %d\n%s", cmd, st, out ? out : "");
    out[strcspn(out, ";\r\n")] = 0;
    assert_true(C.n_jobs < 4);
    snprintf(C.jobs[C.n_jobs], sizeof(C.jobs[0]), "%s", out);
    free(out);
    return C.jobs[C.n_jobs++];
}

/* The states of a job's tasks now ("0 RUNNING\n1 PENDING..."), one line each. */
static char *task_states(const char *job)
{
    char cmd[256], *out = NULL;
    snprintf(cmd, sizeof(cmd), "squeue -h -r -j %s -o '%%K %%T' 2>/dev/null", job);
    tu_run(cmd, &out);
    return out ? out : strdup("");
}

/* Waits (up to limit_s, an upper bound for a failure) until no task of job is queued or running. */
static void wait_job(const char *job, int limit_s)
{
    for (int i = 0; i < limit_s * 5; i++) {
        char *s = task_states(job);
        bool empty = !*s;
        free(s);
        if (empty)
            return;
        sleep_ms(200);
    }
    char *logs = daemon_logs();
    fail_msg("job %s still queued or running after %d s\n%s", job, limit_s, logs);
}

/* Runs a shell command; fails the test (with the daemons' logs) unless it exits with want. */
static char *run_expect(const char *cmd, int want)
{
    char *out = NULL;
    int st = tu_run(cmd, &out);
    if (st != want) {
        char *logs = daemon_logs();
        fail_msg("exit %d (wanted %d): %s\n%s\n--- daemon logs:\n%s", st, want, cmd, out ? out : "", logs);
    }
    return out;
}

/* The sorted point ids of `k25 sweep SPEC --dry-run` (what a local run uses), one per line. */
static char *local_ids(const char *out_dir)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s/local --dry-run | grep -oE '^  [0-9a-f]{16}  ' | tr -d ' ' | sort",
             tu_k25(), out_dir);
    return run_expect(cmd, 0);
}

static void test_slurm_array(void **state)
{
    (void)state;
    const char *why = cannot_run();
    char reason[4096];
    if (*why) {
        print_message("test_slurm: skipped: %s\n", why);
        skip();
    }
    if (!cluster_start(reason, sizeof(reason))) {
        print_message("test_slurm: skipped: the daemons cannot run here: %s\n", reason);
        cluster_stop(NULL);
        skip();
    }
    char cmd[4096], out_dir[400], script[400], *out;
    snprintf(out_dir, sizeof(out_dir), "%s/arr", C.dir);
    snprintf(script, sizeof(script), "%s/sweep.sbatch", C.dir);
    /* a relative spec path on purpose: the script must not depend on where sbatch runs */
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s --slurm --cpus-per-task 1 > %s", tu_k25(),
             out_dir, script);
    free(run_expect(cmd, 0));
    snprintf(cmd, sizeof(cmd), "grep -c '^#SBATCH --exclusive' %s", script);
    out = run_expect(cmd, 1); /* not required: tasks overlap */
    free(out);

    /*
     * Two chosen tasks are held by the TEST-ONLY K25_TEST_HOLD_TASKS knob
     * (sweeps/runner.c, harness/testknob.c): each one's bench, its output
     * temporaries open, writes HOLD/task-I.ready and waits for
     * HOLD/task-I.release.  Both ready at once: the tasks overlap.  The
     * victim is cancelled while it certainly still runs, the other one is
     * released only after the victim has left the queue: the same outcome
     * on a fast machine or a slow one.
     */
    const int victim = 2, partner = 3;
    char hold[400], env[600], marker[500];
    snprintf(hold, sizeof(hold), "%s/hold", C.dir);
    assert_int_equal(mkdir(hold, 0755), 0);
    snprintf(env, sizeof(env), "K25_TEST_HOLD_TASKS='%s:%d,%d'", hold, victim, partner);
    const char *job = submit(script, "", env);
    const int held[2] = {victim, partner};
    for (int k = 0; k < 2; k++) {
        snprintf(marker, sizeof(marker), "%s/task-%d.ready", hold, held[k]);
        if (!tu_wait_file(marker, 240)) {
            char *st = task_states(job), *logs = daemon_logs();
            fail_msg("task %d's bench never reached the hold (no %s after 240 s); tasks:\n%s\n%s", held[k], marker,
                     st, logs);
        }
    }
    /* both held benches run at once, and Slurm says so: the tasks do overlap */
    char *s = task_states(job), *lines = NULL, line[64];
    if (asprintf(&lines, "\n%s", s) < 0)
        fail();
    for (int k = 0; k < 2; k++) {
        snprintf(line, sizeof(line), "\n%d RUNNING", held[k]);
        if (!strstr(lines, line))
            fail_msg("task %d holds but is not RUNNING:\n%s", held[k], s);
    }
    free(lines);
    free(s);
    snprintf(cmd, sizeof(cmd), "scancel %s_%d", job, victim);
    free(run_expect(cmd, 0));
    /* the victim leaves the queue before anything else moves */
    bool gone = false;
    for (int i = 0; i < 600 && !gone; i++) { /* an upper bound (2 minutes), not the expected exit */
        snprintf(line, sizeof(line), "\n%d ", victim);
        char *st = task_states(job), *all = NULL;
        if (asprintf(&all, "\n%s", st) < 0)
            fail();
        gone = !strstr(all, line);
        free(st);
        free(all);
        if (!gone)
            sleep_ms(200);
    }
    assert_true(gone);
    snprintf(marker, sizeof(marker), "%s/task-%d.release", hold, partner);
    tu_write_file(marker, "");
    wait_job(job, 240);

    /* --merge names the cancelled run and refuses; no other task failed (none lost its files) */
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s --merge", tu_k25(), out_dir);
    out = run_expect(cmd, 1);
    char want[64];
    snprintf(want, sizeof(want), "task %d: point ", victim);
    if (!strstr(out, want) || !strstr(out, "1 of 15 runs have no result"))
        fail_msg("--merge after a cancelled task:\n%s", out);
    free(out);
    snprintf(cmd, sizeof(cmd), "! grep -l -E 'fsync failed|No such file' %s/points/*/rep-*.log %s/slurm/*.out", out_dir,
             out_dir);
    free(run_expect(cmd, 0));

    /* resume: resubmit just that task; then the merge is complete */
    char opts[64];
    snprintf(opts, sizeof(opts), "--array=%d", victim);
    job = submit(script, opts, ""); /* no hold this time */
    wait_job(job, 120);
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --out %s --merge --quiet", tu_k25(), out_dir);
    free(run_expect(cmd, 0));
    char sum[600];
    snprintf(sum, sizeof(sum), "%s/summary.json", out_dir);
    snprintf(cmd, sizeof(cmd),
             "jq -e '(.partial | not) and ([.all_points[] | select(.repetitions == 3)] | length == 5) and "
             ".significance.verdict != null' %s >/dev/null && test -z \"$(find %s -name '*.tmp*')\"",
             sum, out_dir);
    free(run_expect(cmd, 0));
    /* the points are those a local run of the same spec has */
    snprintf(cmd, sizeof(cmd), "jq -r '.all_points[].id' %s | sort", sum);
    char *ids = run_expect(cmd, 0), *local = local_ids(C.dir);
    assert_true(strlen(ids) == 5 * 17);
    assert_string_equal(ids, local);
    free(ids);
    free(local);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_slurm_array, cluster_stop),
    };
    return cmocka_run_group_tests_name("slurm", tests, NULL, NULL);
}
