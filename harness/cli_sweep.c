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
            "       k25 sweep SPEC.yaml --out DIR --slurm [--cpus-per-task N]  (print a Slurm job-array script)\n"
            "       k25 sweep SPEC.yaml --out DIR --task I       (run task I of the array only)\n"
            "       k25 sweep SPEC.yaml --out DIR --merge [--allow-partial]  (collect the array's runs)\n\n"
            "Runs `k25 bench` on every point of the spec's grid (docs/sweeps.md), one HDF5 trace per\n"
            "point and repetition under OUT/points/ID/, then writes OUT/sweep.h5 (the index) and\n"
            "OUT/summary.json: a best point only when it beats the reference (the defaults)\n"
            "significantly, paired by repetition; otherwise the data and \"no setting is significantly\n"
            "better\"; the Pareto front; constraint violations.\n\n"
            "  --out DIR      results folder (default results/NAME, NAME from the spec)\n"
            "  --jobs N       runs in parallel, each pinned to its own cores (default 1); every run,\n"
            "                 the reference's included, has N-1 companions, in shuffled rounds\n"
            "  --resume       finish an interrupted sweep (also what a plain re-run does:\n"
            "                 complete runs are never redone, incomplete ones always are)\n"
            "  --dry-run      list the points and the estimated time, run nothing\n"
            "  --only EXPR    only points matching (and the reference), e.g.\n"
            "                 'prefill_chunk_size >= 1024 && max_batch_size == 8'\n"
            "  --print-best   after the sweep (or alone, on finished results), print the best\n"
            "                 setting as YAML to paste into k25.yaml, or why there is none\n"
            "  --quiet        no progress line\n"
            "  --cpus-per-task N  (--slurm) cores per array task, bench's --threads (default 1)\n"
            "  --allow-partial    (--merge) merge even when runs are missing (listed; summary marked partial)\n\n"
            "Exit status: 0 done, 2 a bad spec or option, 1 runs failed or (--merge) runs are missing,\n"
            "130 / 143 interrupted by SIGINT / SIGTERM (finished runs are kept; the same command resumes).\n");
}

int k25_cmd_sweep(int argc, char **argv)
{
    const char *spec_path = NULL, *out = NULL, *only = NULL, *k25_path = "/proc/self/exe";
    int jobs = 1, task = -1, cpus = 1;
    bool dry = false, best = false, quiet = false, merge = false, slurm = false, partial = false;
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
        } else if (!strcmp(a, "--allow-partial")) {
            partial = true;
        } else if (!strcmp(a, "--out") || !strcmp(a, "--only") || !strcmp(a, "--jobs") || !strcmp(a, "--task") ||
                   !strcmp(a, "--k25") || !strcmp(a, "--cpus-per-task")) {
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
                bool positive = strcmp(a, "--task") != 0;
                if (*end || end == v || errno || x < 0 || x > 100000 || (positive && x < 1)) {
                    fprintf(stderr, "k25 sweep: %s: expected a %s integer, got \"%s\"\n", a,
                            positive ? "positive" : "non-negative", v);
                    return 2;
                }
                *(!strcmp(a, "--jobs") ? &jobs : !strcmp(a, "--task") ? &task : &cpus) = (int)x;
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
        if (k25_sweep_slurm_script(&spec, out, only, k25_path, cpus, stdout, &err) != K25_OK) {
            fprintf(stderr, "k25 sweep: %s\n", err.msg);
            return err.code == K25_ENOMEM || err.code == K25_EIO ? 1 : 2;
        }
        return 0;
    }
    int rc = K25_OK;
    if (merge) {
        if ((rc = k25_sweep_merge(&spec, out, only, partial, stderr, &err)) != K25_OK) {
            fprintf(stderr, "k25 sweep: %s\n", err.msg);
            return rc == K25_EINVAL ? 2 : 1;
        }
    } else {
        struct k25_sweep_opts o = {out, jobs, dry, only, !quiet && isatty(2), quiet, k25_path, task};
        rc = k25_sweep_run(&spec, &o, &err);
    }
    if (rc) {
        fprintf(stderr, "k25 sweep: %s\n", err.msg);
        if (k25_sweep_stop_signal())
            return 128 + k25_sweep_stop_signal(); /* 130 for SIGINT, 143 for SIGTERM */
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
    const json_t *b = json_object_get(sum, "best"), *sig = json_object_get(sum, "significance");
    const char *verdict = json_string_value(json_object_get(sig, "verdict"));
    const char *message = json_string_value(json_object_get(sig, "message"));
    if (!quiet || best) {
        if (json_is_object(b)) {
            const json_t *m = json_object_get(json_object_get(b, "metrics"), spec.objective);
            const json_t *vs = json_object_get(b, "vs_reference"), *ci = json_object_get(vs, "ratio_ci");
            printf("best point: %s  %s = %.4g", json_string_value(json_object_get(b, "label")), spec.objective,
                   json_number_value(m));
            if (json_is_number(json_array_get(ci, 0)) && json_is_number(json_array_get(ci, 1)))
                printf("  (x%.3g of the reference, 95%% family-wise interval [%.3g, %.3g], %lld paired repetitions)",
                       json_number_value(json_object_get(vs, "ratio")), json_number_value(json_array_get(ci, 0)),
                       json_number_value(json_array_get(ci, 1)),
                       (long long)json_integer_value(json_object_get(vs, "pairs")));
            printf("\n");
            if (verdict && strcmp(verdict, "significant") != 0 && message)
                printf("note: %s\n", message);
        } else {
            printf("%s\n", message ? message : "no best point (see summary.json)");
        }
        if (json_is_true(json_object_get(sum, "partial")))
            printf("partial: %zu runs missing (summary.json: missing_runs)\n",
                   json_array_size(json_object_get(sum, "missing_runs")));
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
    } else if (best) {
        printf("\n# sweep '%s' found no setting to recommend over the reference: keep the reference settings\n",
               spec.name);
    }
    json_decref(sum);
    return 0;
}
