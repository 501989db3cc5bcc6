/*
 * cli_sweep.c - `k25 sweep SPEC`: argument parsing for the sweep runner
 * (sweeps/), which does the work.
 */
#include "harness.h"

#include "sweep.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void sweep_usage(FILE *out)
{
    fprintf(out,
            "usage: k25 sweep SPEC.yaml [--out results/NAME] [--jobs N] [--resume] [--dry-run]\n"
            "                 [--only 'axis op value && ...'] [--print-best] [--quiet]\n"
            "       k25 sweep SPEC.yaml --out DIR --slurm        (print a Slurm job-array script)\n"
            "       k25 sweep SPEC.yaml --out DIR --task I       (run task I of the array only)\n"
            "       k25 sweep SPEC.yaml --out DIR --merge        (collect finished runs into the results)\n\n"
            "Runs `k25 bench` on every point of the spec's grid (docs/sweeps.md), one HDF5 trace per\n"
            "point and repetition under OUT/points/ID/, then writes OUT/sweep.h5 (the index) and\n"
            "OUT/summary.json (best feasible point, Pareto front, constraint violations).\n\n"
            "  --out DIR      results folder (default results/NAME, NAME from the spec)\n"
            "  --jobs N       runs in parallel, each pinned to its own cores (default 1)\n"
            "  --resume       finish an interrupted sweep (also what a plain re-run does:\n"
            "                 complete runs are never redone, incomplete ones always are)\n"
            "  --dry-run      list the points and the estimated time, run nothing\n"
            "  --only EXPR    only points matching, e.g. 'prefill_chunk_size >= 1024 && max_batch_size == 8'\n"
            "  --print-best   after the sweep (or alone, on finished results), print the best\n"
            "                 setting as YAML to paste into k25.yaml\n"
            "  --quiet        no progress line\n");
}

int k25_cmd_sweep(int argc, char **argv)
{
    const char *spec_path = NULL, *out = NULL, *only = NULL, *k25_path = "/proc/self/exe";
    int jobs = 1, task = -1;
    bool dry = false, best = false, quiet = false, merge = false, slurm = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sweep_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--dry-run")) {
            dry = true;
        } else if (!strcmp(a, "--resume")) {
            /* the default behaviour; accepted for clarity */
        } else if (!strcmp(a, "--print-best")) {
            best = true;
        } else if (!strcmp(a, "--quiet")) {
            quiet = true;
        } else if (!strcmp(a, "--merge")) {
            merge = true;
        } else if (!strcmp(a, "--slurm")) {
            slurm = true;
        } else if (!strcmp(a, "--out") || !strcmp(a, "--only") || !strcmp(a, "--jobs") || !strcmp(a, "--task") ||
                   !strcmp(a, "--k25")) {
            if (!v) {
                fprintf(stderr, "k25 sweep: %s: missing value\n", a);
                return 2;
            }
            i++;
            if (!strcmp(a, "--out")) {
                out = v;
            } else if (!strcmp(a, "--only")) {
                only = v;
            } else if (!strcmp(a, "--k25")) {
                k25_path = v;
            } else {
                char *end;
                errno = 0;
                long x = strtol(v, &end, 10);
                if (*end || end == v || errno || x < 0 || x > 100000 || (!strcmp(a, "--jobs") && x < 1)) {
                    fprintf(stderr, "k25 sweep: %s: expected a %s integer, got \"%s\"\n", a,
                            !strcmp(a, "--jobs") ? "positive" : "non-negative", v);
                    return 2;
                }
                *(!strcmp(a, "--jobs") ? &jobs : &task) = (int)x;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "k25 sweep: '%s': unknown option (k25 sweep --help)\n", a);
            return 2;
        } else if (!spec_path) {
            spec_path = a;
        } else {
            fprintf(stderr, "k25 sweep: one spec at a time ('%s' and '%s')\n", spec_path, a);
            return 2;
        }
    }
    if (!spec_path) {
        sweep_usage(stderr);
        return 2;
    }
    static struct k25_sweep_spec spec; /* large: keep it off the stack */
    struct k25_error err;
    k25_error_clear(&err);
    if (k25_sweep_spec_load(spec_path, &spec, &err) != K25_OK) {
        fprintf(stderr, "k25 sweep: %s\n", err.msg);
        return 2;
    }
    char outbuf[1024];
    if (!out) {
        snprintf(outbuf, sizeof(outbuf), "results/%s", spec.name);
        out = outbuf;
    }
    if (slurm) {
        struct k25_sweep_point *pts;
        int n;
        if (k25_sweep_expand(&spec, &pts, &n, &err) != K25_OK) {
            fprintf(stderr, "k25 sweep: %s\n", err.msg);
            return 2;
        }
        char self[4096];
        ssize_t sl = readlink("/proc/self/exe", self, sizeof(self) - 1);
        self[sl > 0 ? sl : 0] = 0;
        printf("#!/bin/bash\n# Slurm job array for sweep '%s': %d points x %d repetitions.\n"
               "# Submit with: sbatch THIS_FILE; when every task is done: %s sweep %s --out %s --merge\n"
               "#SBATCH --job-name=k25-%s\n#SBATCH --array=0-%d\n#SBATCH --exclusive\n"
               "set -euo pipefail\nexec %s sweep %s --out %s --task \"$SLURM_ARRAY_TASK_ID\" --quiet\n",
               spec.name, n, spec.repeats, self, spec_path, out, spec.name, n * spec.repeats - 1, self, spec_path,
               out);
        k25_sweep_points_free(pts, n);
        return 0;
    }
    int rc = K25_OK;
    if (!merge) {
        struct k25_sweep_opts o = {out, jobs, dry, only, !quiet && isatty(2), quiet, k25_path, task};
        rc = k25_sweep_run(&spec, &o, &err);
    } else if (merge) {
        struct k25_sweep_point *pts;
        int n;
        if ((rc = k25_sweep_expand(&spec, &pts, &n, &err)) == K25_OK) {
            if ((rc = k25_sweep_collect(&spec, out, pts, n, &err)) == K25_OK)
                rc = k25_sweep_write_results(&spec, out, pts, n, &err);
            k25_sweep_points_free(pts, n);
        }
    }
    if (rc) {
        fprintf(stderr, "k25 sweep: %s\n", err.msg);
        return rc == K25_EINVAL || rc == K25_ENOTFOUND || rc == K25_ERANGE ? 2 : 1;
    }
    if (dry || task >= 0)
        return 0;
    /* what the sweep found */
    char sp[2048];
    snprintf(sp, sizeof(sp), "%s/summary.json", out);
    json_error_t je;
    json_t *sum = json_load_file(sp, 0, &je);
    if (!sum) {
        fprintf(stderr, "k25 sweep: %s: %s\n", sp, je.text);
        return 1;
    }
    const json_t *b = json_object_get(sum, "best");
    if (!quiet || best) {
        if (json_is_object(b)) {
            const json_t *m = json_object_get(json_object_get(b, "metrics"), spec.objective);
            printf("best point: %s  %s = %.4g", json_string_value(json_object_get(b, "label")), spec.objective,
                   json_number_value(m));
            const json_t *imp = json_object_get(sum, "improvement_over_reference");
            if (json_is_number(imp))
                printf("  (%.1f%% better than the defaults)", 100.0 * json_number_value(imp));
            printf("\n");
        } else {
            printf("no point meets every constraint (see %s: infeasible)\n", sp);
        }
        printf("results: %s/sweep.h5, %s\n", out, sp);
    }
    if (best && json_is_object(b)) {
        /* the best point's axes as YAML: fixed keys first, then the axes */
        printf("\n# best point of sweep '%s', paste into k25.yaml\n", spec.name);
        for (int i = 0; i < spec.n_fixed; i++)
            printf("%s: %s\n", spec.fixed_key[i], spec.fixed_val[i]);
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(b, "axes"), key, v) if (json_is_string(v)) printf("%s: %s\n", key,
                                                                                            json_string_value(v));
    }
    json_decref(sum);
    return 0;
}
