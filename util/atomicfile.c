/*
 * atomicfile.c - writing a result file so that a failure never leaves a
 * file that looks finished: write PATH.tmp.PID, check every write, flush,
 * fsync, close, rename onto PATH, then fsync the folder so the rename
 * itself survives a crash; on any failure remove the temporary and name
 * the step that failed.  k25_atomic_finish is the one implementation of
 * those last steps (after redis's rdbSave and fsyncFileDir); every
 * temporary-then-rename writer in the project calls it.
 */
#include "k25util.h"

#include <errno.h>
#include <fcntl.h>
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

int k25_fsync_dir(const char *path, struct k25_error *err)
{
    char dir[1024];
    k25_path_parent(path, dir, sizeof(dir));
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot open its folder %s to fsync the rename: %s", dir,
                             strerror(errno));
    int rc = K25_OK;
    /* some file systems refuse fsync on a folder (EINVAL): nothing more can be done there */
    if (fsync(fd) != 0 && errno != EINVAL && errno != EROFS)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "fsync of its folder %s (after the rename) failed: %s", dir,
                           strerror(errno));
    close(fd);
    return rc;
}

/* The rename and the folder's fsync (the temporary is complete and on disk). */
static int rename_into_place(const char *tmp, const char *path, struct k25_error *err)
{
    if (rename(tmp, path) != 0) {
        int rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot rename %s into place: %s", tmp, strerror(errno));
        unlink(tmp);
        return rc;
    }
    return k25_fsync_dir(path, err);
}

int k25_atomic_finish(FILE *f, const char *tmp, const char *path, bool ok, struct k25_error *err)
{
    int rc = K25_OK;
    errno = 0;
    if (!ok)
        rc = K25_EIO; /* the caller's write failed and err says why */
    else if (ferror(f) || fflush(f) != 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "writing failed (temporary %s): %s", tmp,
                           errno ? strerror(errno) : "write error (disk full?)");
    else if (fsync(fileno(f)) != 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "fsync of %s failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "closing %s failed: %s", tmp, strerror(errno));
    if (rc != K25_OK) {
        unlink(tmp);
        return rc;
    }
    return rename_into_place(tmp, path, err);
}

int k25_atomic_finish_closed(const char *tmp, const char *path, struct k25_error *err)
{
    int fd = open(tmp, O_RDONLY);
    int rc = K25_OK;
    if (fd < 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot reopen %s to fsync it: %s", tmp, strerror(errno));
    else if (fsync(fd) != 0)
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "fsync of %s failed: %s", tmp, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (rc != K25_OK) {
        unlink(tmp);
        return rc;
    }
    return rename_into_place(tmp, path, err);
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
    FILE *f = a->f;
    a->f = NULL;
    return k25_atomic_finish(f, a->tmp, a->path, true, err);
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
