/*
 * launch.c - a sweep point measured on a server of its own: the spec's
 * `launch:` command, started per (point, repetition) on a free loopback
 * port, waited for (GET /health answering 200), measured with `k25 bench
 * --endpoint`, and stopped (SIGTERM to its process group, SIGKILL after a
 * grace period).  This is how engine axes (prefill_chunk_size, ...) are
 * swept against a server: the runner fills the command's {config_key}
 * holes with the point's values, so each point's server runs with them.
 *
 * The supervisor is a child of the runner (it dies with it); the server
 * is the supervisor's child in its own process group (so a `sh -c` and
 * whatever it starts stop together) and dies with the supervisor too.
 * Files beside the run's: PREFIX.server.log (the server's output),
 * PREFIX.launch.json (command, port, URL, outcome; on failure the reason
 * and the server's output tail), and "launch" in PREFIX.json.
 */
#include "sweep_run.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TAIL_BYTES 4096 /* of the server's output, in the record of a failed launch */

/* ------------------------------------------------------------ the command */

/* Appends text to a malloc'd string; false when out of memory. */
static bool append(char **s, size_t *len, size_t *cap, const char *text, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*cap ? *cap : 256);
        while (*len + n + 1 > c)
            c *= 2;
        char *p = realloc(*s, c);
        if (!p)
            return false;
        *s = p;
        *cap = c;
    }
    memcpy(*s + *len, text, n);
    *len += n;
    (*s)[*len] = '\0';
    return true;
}

/* A value as one shell word: as is when it holds only safe characters, else single-quoted. */
static bool append_word(char **s, size_t *len, size_t *cap, const char *v)
{
    if (*v && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=+,-@%") == strlen(v))
        return append(s, len, cap, v, strlen(v));
    bool ok = append(s, len, cap, "'", 1);
    for (const char *c = v; ok && *c; c++)
        ok = *c == '\'' ? append(s, len, cap, "'\\''", 4) : append(s, len, cap, c, 1);
    return ok && append(s, len, cap, "'", 1);
}

char *k25_sweep_launch_command(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p, int port,
                               const char *k25_path)
{
    char *cj = k25_config_to_json(&p->cfg);
    json_error_t je;
    json_t *cfg = cj ? json_loads(cj, 0, &je) : NULL;
    free(cj);
    if (!cfg)
        return NULL;
    char *s = NULL;
    size_t len = 0, cap = 0;
    bool ok = append(&s, &len, &cap, "", 0);
    const char *t = spec->launch;
    /* a leading word `k25` is this k25 binary, as {k25} is */
    if (!strncmp(t, "k25 ", 4)) {
        ok = ok && append_word(&s, &len, &cap, k25_path);
        t += 3;
    }
    while (ok && *t) {
        const char *open = strchr(t, '{'), *close = open ? strchr(open, '}') : NULL;
        if (!open || !close) {
            ok = append(&s, &len, &cap, t, strlen(t));
            break;
        }
        ok = append(&s, &len, &cap, t, (size_t)(open - t));
        char name[64], val[160];
        snprintf(name, sizeof(name), "%.*s", (int)(close - open - 1), open + 1);
        const json_t *v = json_object_get(cfg, name);
        if (!strcmp(name, "port"))
            snprintf(val, sizeof(val), "%d", port);
        else if (!strcmp(name, "k25"))
            snprintf(val, sizeof(val), "%s", k25_path);
        else if (json_is_string(v))
            snprintf(val, sizeof(val), "%s", json_string_value(v));
        else if (json_is_boolean(v))
            snprintf(val, sizeof(val), "%s", json_is_true(v) ? "true" : "false");
        else if (json_is_integer(v))
            snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(v));
        else if (json_is_number(v))
            k25_fmt_double(json_number_value(v), val, sizeof(val));
        else
            K25_ASSERT(!"launch hole checked when the spec loaded");
        ok = ok && append_word(&s, &len, &cap, val);
        t = close + 1;
    }
    json_decref(cfg);
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

/* ------------------------------------------------------------ the server */

/* A loopback TCP port free right now (the server binds it a moment later), 0 on failure. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(a);
    int port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && getsockname(fd, (struct sockaddr *)&a, &al) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* The HTTP status of GET /health on 127.0.0.1:port, 0 when nothing answers (within about a second). */
static int health_status(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return 0;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int status = 0;
    char req[128], buf[64];
    int n = snprintf(req, sizeof(req), "GET /health HTTP/1.0\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n\r\n", port);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && write(fd, req, (size_t)n) == n) {
        size_t got = 0;
        ssize_t r;
        while (got < sizeof(buf) - 1 && (r = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)r;
        buf[got] = '\0';
        if (!strncmp(buf, "HTTP/1.", 7) && got >= 12)
            status = atoi(buf + 9);
    }
    close(fd);
    return status;
}

/* Starts cmd under sh in a process group of its own, its output to logpath. */
static pid_t start_server(const char *cmd, const char *logpath, const struct k25_sweep_slow_rule *slow)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a supervisor that dies takes its server along */
    if (getppid() != parent)
        _exit(127);
    int fd = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    int null = open("/dev/null", O_RDONLY);
    if (null >= 0) {
        dup2(null, 0);
        close(null);
    }
    k25_sweep_slow_rule_apply(slow);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
    _exit(127);
}

static double now_s(void)
{
    return (double)k25_now_ns() / 1e9;
}

/* Waits up to timeout_s for pid; true when it ended (*status: its exit status, 128 + signal). */
static bool wait_for(pid_t pid, double timeout_s, int *status)
{
    double end = now_s() + timeout_s;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid) {
            *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            return true;
        }
        if (r < 0 && errno != EINTR) {
            *status = -1;
            return true;
        }
        if (now_s() >= end)
            return false;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* SIGTERM to the server's group, SIGKILL after grace_s; returns its exit status (128 + signal). */
static int stop_server(pid_t pid, double grace_s, bool *killed)
{
    int status = -1;
    *killed = false;
    kill(-pid, SIGTERM);
    if (!wait_for(pid, grace_s, &status)) {
        *killed = true;
        kill(-pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        status = 128 + SIGKILL;
    }
    kill(-pid, SIGKILL); /* anything the command left behind in its group */
    return status;
}

/* The last TAIL_BYTES of a file (malloc'd; "" when unreadable). */
static char *file_tail(const char *path)
{
    char *buf = calloc(1, TAIL_BYTES + 1);
    FILE *f = buf ? fopen(path, "rb") : NULL;
    if (!f)
        return buf;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        fseek(f, size > TAIL_BYTES ? size - TAIL_BYTES : 0, SEEK_SET);
    }
    size_t n = fread(buf, 1, TAIL_BYTES, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ------------------------------------------------------------ the supervisor */

static volatile sig_atomic_t g_stop; /* SIGINT/SIGTERM reached the supervisor */

static void on_stop(int sig)
{
    g_stop = sig;
}

/* Runs argv (bench) with our output and waits; forwards a stop request; returns its exit status. */
static int run_bench(char *const argv[])
{
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        execv(argv[0], argv);
        fprintf(stderr, "k25 sweep: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    bool forwarded = false;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, 0);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR)
            return -1;
        if (g_stop && !forwarded) {
            kill(pid, SIGTERM); /* bench keeps what it measured, marked interrupted */
            forwarded = true;
        }
    }
}

/* Waits for the search child; forwards a stop request. */
static int wait_child(pid_t pid)
{
    bool forwarded = false;
    for (;;) {
        int st;
        pid_t r = waitpid(pid, &st, 0);
        if (r == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (r < 0 && errno != EINTR)
            return -1;
        if (g_stop && !forwarded) {
            kill(pid, SIGTERM);
            forwarded = true;
        }
    }
}

/* Adds "launch" to the run's JSON (best effort: the result stands without it). */
static void stamp_launch(const char *prefix, const json_t *rec)
{
    char js[2200];
    snprintf(js, sizeof(js), "%s.json", prefix);
    json_error_t je;
    json_t *j = json_load_file(js, 0, &je);
    if (!j)
        return;
    json_object_set(j, "launch", (json_t *)rec);
    k25_write_json_atomic(js, j, NULL);
    json_decref(j);
}

/* The supervisor's work; returns its exit status. */
static int supervise(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                     const struct k25_sweep_point *p, int rep, const char *prefix, int c0, int nc, int threads,
                     const struct k25_sweep_slow_rule *slow)
{
    char k25_abs[PATH_MAX], url[64], slog[2200], rec_path[2200], why[512] = "";
    snprintf(k25_abs, sizeof(k25_abs), "%s", o->k25_path);
    if (!realpath(o->k25_path, k25_abs)) /* /proc/self/exe would name sh inside the command */
        snprintf(k25_abs, sizeof(k25_abs), "%s", o->k25_path);
    snprintf(slog, sizeof(slog), "%s.server.log", prefix);
    snprintf(rec_path, sizeof(rec_path), "%s.launch.json", prefix);
    int port = free_port();
    char *cmd = port ? k25_sweep_launch_command(spec, p, port, k25_abs) : NULL;
    if (!cmd) {
        fprintf(stderr, "k25 sweep: launch: %s\n", port ? "out of memory" : "no free loopback port");
        return 1;
    }
    snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
    printf("k25 sweep: launch: %s\n", cmd);
    fflush(stdout);
    json_t *rec = json_pack("{s:s, s:s, s:i, s:s}", "command", cmd, "template", spec->launch, "port", port, "url", url);
    double t0 = now_s();
    pid_t srv = start_server(cmd, slog, slow);
    int status = 1, srv_status = -1;
    bool healthy = false, srv_gone = false, killed = false;
    if (srv < 0) {
        snprintf(why, sizeof(why), "cannot start the server: %s", strerror(errno));
        goto out_record;
    }
    /* wait for GET /health = 200, or the server's exit, or the timeout */
    while (!g_stop) {
        int hs = health_status(port);
        if (hs == 200) {
            healthy = true;
            break;
        }
        if (wait_for(srv, 0, &srv_status)) {
            srv_gone = true;
            snprintf(why, sizeof(why), "the server exited (status %d) before GET /health answered 200", srv_status);
            break;
        }
        if (now_s() - t0 > spec->launch_timeout_s) {
            snprintf(why, sizeof(why), "GET %s/health did not answer 200 within %g s (last: %s%d)", url,
                     spec->launch_timeout_s, hs ? "HTTP " : "no answer, ", hs);
            break;
        }
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    json_object_set_new(rec, "health_wait_s", json_real(now_s() - t0));
    if (healthy) {
        struct k25_sweep_opts o2 = *o;
        o2.endpoint = url;
        if (spec->wl.search) {
            char search_log[2200];
            snprintf(search_log, sizeof(search_log), "%s.search.log", prefix);
            pid_t sp = k25_sweep_spawn_search(spec, &o2, p, rep, search_log, c0, nc, threads, NULL);
            status = sp < 0 ? -1 : wait_child(sp);
            printf("k25 sweep: rate search against %s: exit %d (its log: %s)\n", url, status, search_log);
        } else {
            struct k25_sweep_argv a;
            struct k25_sweep_workload w;
            k25_sweep_point_workload(spec, p, &w);
            k25_sweep_bench_argv(&a, spec, &o2, p, rep, prefix, w.rate_rps, threads);
            fflush(stdout);
            status = run_bench(a.argv);
        }
        if (status != 0 && !why[0])
            snprintf(why, sizeof(why), "the run against the server failed (exit %d)", status);
    } else if (g_stop && !why[0]) {
        snprintf(why, sizeof(why), "interrupted while waiting for the server");
    }
    if (!srv_gone)
        srv_status = stop_server(srv, spec->launch_grace_s, &killed);
    json_object_set_new(rec, "server_exit", json_integer(srv_status));
    json_object_set_new(rec, "server_killed", json_boolean(killed));
    if (healthy && status == 0)
        stamp_launch(prefix, rec);
out_record:
    json_object_set_new(rec, "ok", json_boolean(healthy && status == 0));
    if (why[0]) {
        char *tail = file_tail(slog);
        json_object_set_new(rec, "error", json_string(why));
        json_object_set_new(rec, "server_log", json_string(slog));
        json_object_set_new(rec, "server_output_tail", json_string(tail ? tail : ""));
        printf("k25 sweep: launch failed: %s\n  command: %s\n  server output (last %d bytes, %s):\n%s\n", why, cmd,
               TAIL_BYTES, slog, tail ? tail : "");
        free(tail);
        if (status == 0)
            status = 1;
    }
    fflush(stdout);
    k25_write_json_atomic(rec_path, rec, NULL); /* best effort: the log says the same */
    json_decref(rec);
    free(cmd);
    return status < 0 ? 1 : status;
}

pid_t k25_sweep_spawn_launch(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                             const struct k25_sweep_point *p, int rep, const char *prefix, const char *logpath,
                             int c0, int nc, int threads, const struct k25_sweep_slow_rule *slow)
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
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa = {0};
    sa.sa_handler = on_stop; /* no SA_RESTART: waits see EINTR and forward the stop */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (nc > 0) { /* the server and its run share the job's cores (children inherit the affinity) */
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c = c0; c < c0 + nc; c++)
            CPU_SET(c, &set);
        sched_setaffinity(0, sizeof(set), &set);
    }
    _exit(supervise(spec, o, p, rep, prefix, c0, nc, threads, slow));
}
