/*
 * report_out.c - the report folder, all or nothing.
 *
 * `k25 report --out DIR` renders everything into a fresh folder beside
 * the target (DIR.tmp.PID, same file system), checks it (every picture
 * complete, k25_plot_file_complete), fsyncs it, and only then swaps it
 * into place: renameat2(RENAME_EXCHANGE) when DIR exists - one atomic step
 * in which readers see either the old report or the new one - then
 * removes the old one; a plain rename() when DIR is new.  A failure at any
 * point removes the temporary folder and leaves DIR as it was: a full
 * disk, a killed run or a broken gnuplot never leaves a half-written
 * report or a verdict.json about another input.
 *
 * An existing DIR is replaced only when it holds nothing but what
 * `k25 report` writes (report.md, report.html, verdict.json, plots/ and
 * leftover temporaries): a folder with other files is refused, never
 * deleted.  Temporary folders DIR.tmp.PID whose process is gone are
 * removed on the next run.
 */
#include "report.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

/* Removes a folder and everything in it (no symlink is followed). */
static int remove_tree(const char *path)
{
    return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS) == 0 || errno == ENOENT ? 0 : -1;
}

/* mkdir -p; K25_EINVAL when a part exists and is not a folder. */
static int mkdir_p(const char *dir, struct k25_error *err)
{
    char p[PATH_MAX];
    k25_report_sfmt(p, sizeof(p), "%s", dir);
    for (char *s = p + 1;; s++) {
        bool end = *s == 0;
        if (*s != '/' && !end)
            continue;
        *s = 0;
        struct stat st;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return k25_error_set(err, errno == ENOSPC || errno == EIO ? K25_EIO : K25_EINVAL, p, 0, "--out",
                                 "cannot create the folder: %s", strerror(errno));
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            return k25_error_set(err, K25_EINVAL, p, 0, "--out", "is not a folder");
        if (end)
            break;
        *s = '/';
    }
    return K25_OK;
}


/* What `k25 report` writes into its folder; anything else makes a folder not ours to replace. */
static bool ours(const char *name)
{
    static const char *const names[] = {"report.md", "report.html", "verdict.json", "plots"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strcmp(name, names[i]))
            return true;
    return strstr(name, ".tmp.") != NULL;
}

/* K25_OK when dir holds only report files; K25_EINVAL naming the first stranger. */
static int only_report_files(const char *dir, struct k25_error *err)
{
    DIR *d = opendir(dir);
    if (!d)
        return k25_error_set(err, K25_EINVAL, dir, 0, "--out", "cannot read the folder: %s", strerror(errno));
    struct dirent *de;
    int rc = K25_OK;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        if (!ours(de->d_name)) {
            rc = k25_error_set(err, K25_EINVAL, dir, 0, "--out",
                               "holds '%s', which k25 report did not write: a report replaces its whole folder, "
                               "so give a new or empty folder (or one holding only an earlier report)",
                               de->d_name);
            break;
        }
    }
    closedir(d);
    return rc;
}

/* Removes DIR.tmp.PID folders (in DIR's parent) left by report runs that were killed. */
static void clean_stale(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    size_t bl = strlen(base);
    struct dirent *de;
    while ((de = readdir(d))) {
        /* BASE.tmp.PID of a process that is gone: anything else may be someone's */
        const char *pid = de->d_name + bl + 5;
        if (strncmp(de->d_name, base, bl) != 0 || strncmp(de->d_name + bl, ".tmp.", 5) != 0 || !*pid ||
            pid[strspn(pid, "0123456789")] != '\0' || k25_tmp_writer_alive(de->d_name))
            continue;
        char p[PATH_MAX];
        k25_report_sfmt(p, sizeof(p), "%s/%s", parent, de->d_name);
        remove_tree(p);
    }
    closedir(d);
}

int k25_report_dest_open(struct k25_report_dest *d, const char *out, struct k25_error *err)
{
    memset(d, 0, sizeof(*d));
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/')
        n--;
    if (n == 0 || n >= sizeof(d->final))
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--out", "give a folder name for the report");
    k25_report_sfmt(d->final, sizeof(d->final), "%.*s", (int)n, out);
    const char *slash = strrchr(d->final, '/');
    const char *base = slash ? slash + 1 : d->final;
    if (!strcmp(base, ".") || !strcmp(base, ".."))
        return k25_error_set(err, K25_EINVAL, d->final, 0, "--out",
                             "give the report its own folder (e.g. reports/NAME), not '.' or '..'");
    char parent[PATH_MAX];
    k25_path_parent(d->final, parent, sizeof(parent));
    struct stat st;
    int rc;
    if (stat(d->final, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return k25_error_set(err, K25_EINVAL, d->final, 0, "--out", "exists and is not a folder");
        if ((rc = only_report_files(d->final, err)) != K25_OK)
            return rc;
    } else if (errno != ENOENT) {
        return k25_error_set(err, K25_EINVAL, d->final, 0, "--out", "cannot use it: %s", strerror(errno));
    }
    if ((rc = mkdir_p(parent, err)) != K25_OK)
        return rc;
    if (access(parent, W_OK) != 0)
        return k25_error_set(err, K25_EINVAL, parent, 0, "--out", "the folder is not writable: %s", strerror(errno));
    clean_stale(parent, base);
    k25_report_sfmt(d->work, sizeof(d->work), "%s.tmp.%ld", d->final, (long)getpid());
    remove_tree(d->work); /* our own pid: a leftover of a process that had it before */
    if (mkdir(d->work, 0755) != 0) {
        int e = errno;
        d->work[0] = 0;
        return k25_error_set(err, e == ENOSPC || e == EIO ? K25_EIO : K25_EINVAL, d->final, 0, "--out",
                             "cannot create a folder beside it: %s", strerror(e));
    }
    return K25_OK;
}

/* fsyncs every file and folder under path (what rename makes visible must be on disk). */
static int sync_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)ftw;
    if (flag == FTW_SL || !(S_ISREG(st->st_mode) || S_ISDIR(st->st_mode)))
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return r == 0 || e == EINVAL ? 0 : -1;
}

static int sync_parent(const char *path)
{
    char parent[PATH_MAX];
    k25_path_parent(path, parent, sizeof(parent));
    int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

int k25_report_dest_commit(struct k25_report_dest *d, struct k25_error *err)
{
    if (nftw(d->work, sync_entry, 16, FTW_PHYS) != 0)
        return k25_error_set(err, K25_EIO, d->final, 0, NULL, "writing the report failed (fsync): %s",
                             strerror(errno));
    struct stat st;
    if (stat(d->final, &st) != 0) {
        if (rename(d->work, d->final) != 0)
            return k25_error_set(err, K25_EIO, d->final, 0, NULL, "cannot rename %s into place: %s", d->work,
                                 strerror(errno));
    } else if (renameat2(AT_FDCWD, d->work, AT_FDCWD, d->final, RENAME_EXCHANGE) != 0) {
        /* no atomic exchange on this file system: move the old one aside, then the new one in */
        if (errno != EINVAL && errno != ENOSYS)
            return k25_error_set(err, K25_EIO, d->final, 0, NULL, "cannot swap the new report into place: %s",
                                 strerror(errno));
        char old[sizeof(d->work)];
        k25_report_sfmt(old, sizeof(old), "%s.old", d->work);
        if (rename(d->final, old) != 0)
            return k25_error_set(err, K25_EIO, d->final, 0, NULL, "cannot move the old report aside: %s",
                                 strerror(errno));
        if (rename(d->work, d->final) != 0) {
            int e = errno;
            rename(old, d->final); /* put the old one back */
            return k25_error_set(err, K25_EIO, d->final, 0, NULL, "cannot rename %s into place: %s", d->work,
                                 strerror(e));
        }
        memcpy(d->work, old, sizeof(old));
    }
    /* d->work now names the old report (or nothing): the new one is in place */
    sync_parent(d->final);
    remove_tree(d->work);
    d->work[0] = 0;
    return K25_OK;
}

void k25_report_dest_abort(struct k25_report_dest *d)
{
    if (d->work[0])
        remove_tree(d->work);
    d->work[0] = 0;
}
