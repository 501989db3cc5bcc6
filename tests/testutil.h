/*
 * testutil.h - small helpers shared by the CMocka tests.
 */
#ifndef K25_TESTUTIL_H
#define K25_TESTUTIL_H

#include <setjmp.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <poll.h>
#include <time.h>
#include <sys/inotify.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* Path of the k25 binary for integration tests (make passes K25=...). */
static inline const char *tu_k25(void)
{
    const char *p = getenv("K25");
    return p ? p : "build/k25";
}

/* True for `make test-quick` / `make asan`: skip the long cases. */
static inline int tu_quick(void)
{
    const char *q = getenv("K25_QUICK");
    return q && *q && strcmp(q, "0") != 0;
}

/* Makes a fresh temporary directory; the caller frees the string. */
static inline char *tu_tmpdir(void)
{
    char tmpl[] = "/tmp/k25test.XXXXXX";
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

/*
 * A temporary directory for a whole test group: pass tu_group_setup and
 * tu_group_teardown to cmocka_run_group_tests; tests use tu_dir.
 */
static char *tu_dir;

static inline int tu_group_setup(void **state)
{
    (void)state;
    tu_dir = tu_tmpdir();
    return tu_dir ? 0 : -1;
}

static inline int tu_group_teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tu_dir);
    int rc = system(cmd);
    free(tu_dir);
    tu_dir = NULL;
    return rc == 0 ? 0 : -1;
}

/* Writes text to path; asserts success. */
static inline void tu_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

/*
 * Runs a shell command, captures stdout+stderr (merged, unless the command
 * redirects stderr itself) into a malloc'd
 * string *out (may be NULL), returns the exit status (or -1).
 */
static inline int tu_run(const char *cmd, char **out)
{
    char *full = NULL;
    if (out)
        *out = NULL;
    /* merge stderr unless the command redirects it itself */
    if (asprintf(&full, strstr(cmd, "2>") ? "%s" : "%s 2>&1", cmd) < 0)
        return -1;
    FILE *p = popen(full, "r");
    free(full);
    if (!p)
        return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 1024) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    if (buf)
        buf[n] = 0;
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    if (st == -1)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * Waits until path exists, up to limit_s seconds (an upper bound for a
 * failure, never the expected way out): an inotify watch on its folder, so
 * the wait ends on the event, not on a timer.  True when it exists.
 * (K25_TEST_HOLD's PREFIX.ready markers, files a program writes.)
 */
static inline int tu_wait_file(const char *path, int limit_s)
{
    char dir[1024];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof(dir), "%.*s", slash ? (slash == path ? 1 : (int)(slash - path)) : 1, slash ? path : ".");
    int fd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (fd < 0)
        return 0;
    if (inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO | IN_ATTRIB) < 0) {
        close(fd);
        return 0;
    }
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int found;
    while (!(found = access(path, F_OK) == 0)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left_ms = limit_s * 1000L - ((now.tv_sec - t0.tv_sec) * 1000L + (now.tv_nsec - t0.tv_nsec) / 1000000L);
        if (left_ms <= 0)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, (int)left_ms) > 0) {
            char buf[4096];
            while (read(fd, buf, sizeof(buf)) > 0)
                ;
        }
    }
    close(fd);
    return found;
}

/*
 * Waits until process pid (not necessarily our child) has ended, up to
 * limit_s seconds (an upper bound for a failure): a pidfd, readable when
 * the process exits - an event, not a timer.  True when it is gone.
 */
static inline int tu_wait_pid_gone(pid_t pid, int limit_s)
{
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fd < 0)
        return errno == ESRCH; /* already gone (or reaped) */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, limit_s * 1000);
    close(fd);
    return r > 0;
}

/* The number in a file (a pid marker), -1 when it cannot be read. */
static inline long tu_read_long(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

#endif
