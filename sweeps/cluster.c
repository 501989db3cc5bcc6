/*
 * cluster.c - a sweep as a cluster job array: the Slurm script (--slurm)
 * whose task I runs run I of the sweep's order (`k25 sweep --task I`), and
 * the merge of the array's runs into the results (--merge), which names
 * every run that is missing and why instead of quietly averaging fewer.
 */
#include "sweep.h"

#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writes s single-quoted for the shell. */
static void shell_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    }
    fputc('\'', f);
}

/* The absolute, resolved path of an existing file or folder. */
static int resolve(const char *path, const char *what, char *out, struct k25_error *err)
{
    if (!realpath(path, out))
        return k25_error_set(err, K25_ENOTFOUND, path, 0, NULL, "%s: %s", what, strerror(errno));
    /* #SBATCH lines take a double-quoted path: it must not close the quotes or the line */
    if (strpbrk(out, "\"\n\r"))
        return k25_error_set(err, K25_EINVAL, out, 0, NULL, "%s: a path with a double quote or a newline "
                                                            "cannot go into a Slurm script", what);
    return K25_OK;
}

static int mkdir_one(const char *path, struct k25_error *err)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create the directory: %s", strerror(errno));
    return K25_OK;
}

int k25_sweep_slurm_script(const struct k25_sweep_spec *spec, const char *out, const char *only,
                           const char *k25_path, int cpus_per_task, FILE *f, struct k25_error *err)
{
    struct k25_sweep_point *pts = NULL;
    struct k25_sweep_task *tasks = NULL;
    bool *sel = NULL;
    int n = 0, rc;
    char bin[PATH_MAX], specp[PATH_MAX], outp[PATH_MAX], cwd[PATH_MAX], logs[PATH_MAX + 16];
    if ((rc = k25_sweep_expand(spec, &pts, &n, err)))
        return rc;
    sel = calloc((size_t)n, sizeof(bool));
    tasks = calloc((size_t)n * (size_t)spec->repeats + 1, sizeof(*tasks));
    if (!sel || !tasks) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    int n_all = k25_sweep_tasks(spec, pts, n, only, sel, tasks, err), n_sel = 0;
    if (n_all < 0) {
        rc = n_all;
        goto out;
    }
    for (int i = 0; i < n; i++)
        n_sel += sel[i];
    /* OUT/slurm/ holds the tasks' Slurm logs: Slurm does not create it */
    snprintf(logs, sizeof(logs), "%s/slurm", out);
    if ((rc = mkdir_one(out, err)) || (rc = mkdir_one(logs, err)))
        goto out;
    if ((rc = resolve(k25_path, "the k25 binary", bin, err)) || (rc = resolve(spec->path, "the spec", specp, err)) ||
        (rc = resolve(out, "the output folder", outp, err)))
        goto out;
    if (!getcwd(cwd, sizeof(cwd))) {
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot read the working directory: %s", strerror(errno));
        goto out;
    }
    if (strpbrk(cwd, "\"\n\r")) {
        rc = k25_error_set(err, K25_EINVAL, cwd, 0, NULL, "a working directory with a double quote or a newline "
                                                           "cannot go into a Slurm script");
        goto out;
    }
    fprintf(f, "#!/bin/bash\n"
               "# Slurm job array for sweep '%s' (%s): %d points x %d repetitions = %d runs;\n"
               "# task I is run I of the sweep's interleaved order (k25 sweep --task I).\n"
               "# Submit with: sbatch THIS_FILE. When every task has ended, collect the results:\n#   ",
            spec->name, specp, n_sel, spec->repeats, n_all);
    shell_quote(f, bin);
    fputs(" sweep ", f);
    shell_quote(f, specp);
    fputs(" --out ", f);
    shell_quote(f, outp);
    if (only) {
        fputs(" --only ", f);
        shell_quote(f, only);
    }
    if (spec->endpoint[0]) {
        fputs(" --endpoint ", f);
        shell_quote(f, spec->endpoint);
    }
    fprintf(f, " --merge\n"
               "# (it lists any task that is missing or failed; resubmit those with sbatch --array=I,J THIS_FILE).\n"
               "# Tasks may share a node (each cleans only its own run's leftovers), and then their timings\n"
               "# disturb each other as with --jobs; for sign-off figures give each task a node of its own\n"
               "# (enable --exclusive below).\n"
               "#SBATCH --job-name=k25-%s\n"
               "#SBATCH --array=0-%d\n"
               "#SBATCH --cpus-per-task=%d\n"
               "#SBATCH --chdir=\"%s\"\n"
               "#SBATCH --output=\"%s/slurm/%%A_%%a.out\"\n"
               "##SBATCH --exclusive\n"
               "set -euo pipefail\n",
            spec->name, n_all - 1, cpus_per_task, cwd, outp);
    fputs("K25=", f);
    shell_quote(f, bin);
    fputs("\nSPEC=", f);
    shell_quote(f, specp);
    fputs("\nOUT=", f);
    shell_quote(f, outp);
    fputs("\nDATASET=", f);
    shell_quote(f, spec->dataset_abs);
    fputs("\n# the spec's relative paths (its dataset) mean the same files here as where the script was made\n"
          "for f in \"$K25\" \"$SPEC\" \"$DATASET\" \"$OUT\"; do\n"
          "  [ -r \"$f\" ] || { echo \"k25 sweep task ${SLURM_ARRAY_TASK_ID:-?}: $f is not readable on $(hostname)"
          " (the sweep needs a shared file system)\" >&2; exit 1; }\n"
          "done\n"
          "exec \"$K25\" sweep \"$SPEC\" --out \"$OUT\" --task \"$SLURM_ARRAY_TASK_ID\"",
          f);
    if (only) {
        fputs(" --only ", f);
        shell_quote(f, only);
    }
    if (spec->endpoint[0]) { /* the server the ids were computed for (also when --endpoint gave it) */
        fputs(" --endpoint ", f);
        shell_quote(f, spec->endpoint);
    }
    fputs(" --quiet\n", f);
    if (fflush(f) != 0 || ferror(f))
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "cannot write the script: %s", strerror(errno));
out:
    free(tasks);
    free(sel);
    k25_sweep_points_free(pts, n);
    return rc;
}


/* The last non-empty line of a file (for "why did this run fail"), "" when none. */
static void last_line(const char *path, char *buf, size_t n)
{
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (line[0])
            k25_sweep_msgf(buf, n, "%s", line);
    }
    fclose(f);
}

/* Does the folder hold a temporary of repetition rep (a run cut short, or still going)? */
static bool has_temporary(const char *dir, int rep)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "rep-%d.", rep);
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)))
        found = !strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name, ".tmp");
    closedir(d);
    return found;
}

/* Why run (p, rep) has no result: what its folder shows. */
static void why_missing(const char *out, const struct k25_sweep_point *p, int rep, char *buf, size_t n)
{
    char dir[2048], log[2200], js[2200], tail[256];
    struct stat st;
    snprintf(dir, sizeof(dir), "%s/points/%s", out, p->id);
    snprintf(log, sizeof(log), "%s/rep-%d.log", dir, rep);
    snprintf(js, sizeof(js), "%s/rep-%d.json", dir, rep);
    if (stat(js, &st) == 0) {
        k25_sweep_msgf(buf, n, "rep-%d.json is not readable JSON", rep);
    } else if (stat(log, &st) == 0) {
        last_line(log, tail, sizeof(tail));
        k25_sweep_msgf(buf, n, "failed or was cancelled%s (%s%s%s)", has_temporary(dir, rep) ? ", leaving a temporary" : "",
                 log, tail[0] ? ": " : "", tail);
    } else {
        k25_sweep_msgf(buf, n, "never ran (no %s)", log);
    }
}

int k25_sweep_merge(const struct k25_sweep_spec *spec, const char *out, const char *only, bool allow_partial,
                    FILE *report, struct k25_error *err)
{
    struct k25_sweep_point *pts = NULL;
    struct k25_sweep_task *tasks = NULL;
    bool *sel = NULL;
    json_t *missing = NULL;
    int n = 0, rc;
    if ((rc = k25_sweep_expand(spec, &pts, &n, err)))
        return rc;
    sel = calloc((size_t)n, sizeof(bool));
    tasks = calloc((size_t)n * (size_t)spec->repeats + 1, sizeof(*tasks));
    missing = json_array();
    if (!sel || !tasks || !missing) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    int n_all = k25_sweep_tasks(spec, pts, n, only, sel, tasks, err);
    if (n_all < 0) {
        rc = n_all;
        goto out;
    }
    if ((rc = k25_sweep_collect(spec, out, pts, n, err)))
        goto out;
    char list[256] = "";
    size_t ll = 0;
    for (int k = 0; k < n_all; k++) {
        const struct k25_sweep_point *p = &pts[tasks[k].point];
        int r = tasks[k].rep;
        if (p->reps_mask & ((uint64_t)1 << r))
            continue;
        char label[1024], why[1024];
        k25_sweep_point_label(spec, p, label, sizeof(label));
        why_missing(out, p, r, why, sizeof(why));
        if (json_array_size(missing) == 0)
            fprintf(report, "k25 sweep --merge: runs without a result under %s:\n", out);
        fprintf(report, "  task %d: point %s (%s) repetition %d: %s\n", k, p->id, label, r, why);
        json_array_append_new(missing, json_pack("{s:i, s:s, s:s, s:i, s:s}", "task", k, "point", p->id, "label",
                                                 label, "repetition", r, "why", why));
        if (ll < sizeof(list) - 16)
            ll += (size_t)snprintf(list + ll, sizeof(list) - ll, "%s%d", ll ? "," : "", k);
        else if (ll < sizeof(list) - 4)
            ll += (size_t)snprintf(list + ll, sizeof(list) - ll, ",...");
    }
    int n_missing = (int)json_array_size(missing);
    if (n_missing && !allow_partial) {
        rc = k25_error_set(err, K25_ENOTFOUND, out, 0, NULL,
                           "%d of %d runs have no result (listed above); nothing merged. Resubmit those array "
                           "tasks (sbatch --array=%s SCRIPT), or merge what there is with --allow-partial",
                           n_missing, n_all, list);
        goto out;
    }
    if (n_missing)
        fprintf(report, "k25 sweep --merge: --allow-partial: merging %d of %d runs; summary.json says "
                        "\"partial\": true and lists the missing runs\n",
                n_all - n_missing, n_all);
    rc = k25_sweep_write_results(spec, out, pts, n, n_missing ? missing : NULL, err);
out:
    json_decref(missing);
    free(tasks);
    free(sel);
    k25_sweep_points_free(pts, n);
    return rc;
}
