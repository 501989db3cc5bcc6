/*
 * atomicfile.c - writing a result file so that a failure never leaves a
 * file that looks finished: write PATH.tmp.PID, check every write, flush,
 * fsync, close, then rename onto PATH; on any failure remove the temporary.
 */
#include "k25util.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool k25_tmp_writer_alive(const char *name)
{
    const char *t = strstr(name, ".tmp.");
    if (!t)
        return false;
    char *end;
    errno = 0;
    long pid = strtol(t + 5, &end, 10);
    if (*end || end == t + 5 || errno || pid <= 0)
        return false;
    if (kill((pid_t)pid, 0) != 0 && errno != EPERM)
        return false;
    /* a zombie (killed, not yet reaped) writes nothing more: its temporaries are stale */
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true; /* no /proc: take the pid's existence for a live writer */
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')'); /* "pid (comm) S ...": comm may hold spaces and parentheses */
    return !(rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X'));
}

void k25_path_parent(const char *path, char *out, size_t n)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(out, n, ".");
    else if (slash == path)
        snprintf(out, n, "/");
    else
        snprintf(out, n, "%.*s", (int)(slash - path) < (int)n - 1 ? (int)(slash - path) : (int)n - 1, path);
}

int k25_output_file_check(const char *path, const char *flag, struct k25_error *err)
{
    struct stat st;
    if (!path || !*path)
        return k25_error_set(err, K25_EINVAL, "command line", 0, flag, "an output file name is required");
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return k25_error_set(err, K25_EINVAL, path, 0, flag, "is a directory; give the name of a file to write");
        if (!S_ISREG(st.st_mode))
            return k25_error_set(err, K25_EINVAL, path, 0, flag,
                                 "is not a regular file (a device or a pipe?): results are written under a "
                                 "temporary name and renamed onto it");
    } else if (errno != ENOENT) {
        return k25_error_set(err, K25_EINVAL, path, 0, flag, "cannot use it: %s", strerror(errno));
    }
    char dir[1024];
    k25_path_parent(path, dir, sizeof(dir));
    if (stat(dir, &st) != 0)
        return k25_error_set(err, K25_EINVAL, path, 0, flag, "its folder %s does not exist: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return k25_error_set(err, K25_EINVAL, path, 0, flag, "%s is not a folder", dir);
    if (access(dir, W_OK) != 0)
        return k25_error_set(err, K25_EINVAL, path, 0, flag, "its folder %s is not writable: %s", dir,
                             strerror(errno));
    return K25_OK;
}

int k25_afile_open(struct k25_afile *a, const char *path, struct k25_error *err)
{
    a->f = NULL;
    int rc = k25_output_file_check(path, NULL, err);
    if (rc != K25_OK)
        return rc;
    snprintf(a->path, sizeof(a->path), "%s", path);
    snprintf(a->tmp, sizeof(a->tmp), "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create: %s", strerror(errno));
    return K25_OK;
}

int k25_afile_commit(struct k25_afile *a, struct k25_error *err)
{
    int rc = K25_OK;
    errno = 0;
    if (ferror(a->f) || fflush(a->f) != 0 || fsync(fileno(a->f)) != 0)
        rc = k25_error_set(err, K25_EIO, a->path, 0, NULL, "writing failed: %s",
                           errno ? strerror(errno) : "write error (disk full?)");
    if (fclose(a->f) != 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, a->path, 0, NULL, "writing failed: %s", strerror(errno));
    a->f = NULL;
    if (rc == K25_OK && rename(a->tmp, a->path) != 0)
        rc = k25_error_set(err, K25_EIO, a->path, 0, NULL, "cannot rename %s into place: %s", a->tmp,
                           strerror(errno));
    if (rc != K25_OK)
        unlink(a->tmp);
    return rc;
}

void k25_afile_abort(struct k25_afile *a)
{
    if (a->f)
        fclose(a->f);
    a->f = NULL;
    unlink(a->tmp);
}

int k25_write_text_atomic(const char *path, const char *text, struct k25_error *err)
{
    struct k25_afile a;
    int rc = k25_afile_open(&a, path, err);
    if (rc)
        return rc;
    fputs(text, a.f);
    if (!*text || text[strlen(text) - 1] != '\n')
        fputc('\n', a.f);
    return k25_afile_commit(&a, err);
}

int k25_write_json_atomic(const char *path, const json_t *j, struct k25_error *err)
{
    char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!txt)
        return k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory (JSON)");
    int rc = k25_write_text_atomic(path, txt, err);
    free(txt);
    return rc;
}
