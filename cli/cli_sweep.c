/*
 * cli_sweep.c - `k25 sweep SPEC`: argument parsing for the sweep runner
 * (sweeps/), which does the work.
 */
#include "cli.h"
#include "harness.h"

#include "sweep.h"
#include "cliopt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/*
 * What the sweep found, from out/summary.json: the best point and its
 * interval against the reference (unless quiet), and with best the best
 * point's settings as YAML.  1 when the summary cannot be read.
 */
static int print_found(const struct k25_sweep_spec *spec, const char *out, bool quiet, bool best)
{
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
            const json_t *m = json_object_get(json_object_get(b, "metrics"), spec->objective);
            const json_t *vs = json_object_get(b, "vs_reference"), *ci = json_object_get(vs, "ratio_ci");
            printf("best point: %s  %s = %.4g", json_string_value(json_object_get(b, "label")), spec->objective,
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
        size_t wk;
        const json_t *w;
        json_array_foreach(json_object_get(sum, "warnings"), wk, w) printf("warning: %s\n", json_string_value(w));
        if (json_is_true(json_object_get(sum, "partial")))
            printf("partial: %zu runs missing (summary.json: missing_runs)\n",
                   json_array_size(json_object_get(sum, "missing_runs")));
        printf("results: %s/sweep.h5, %s\n", out, sp);
    }
    if (best && json_is_object(b)) {
        /* the best point's axes as YAML: fixed keys first, then the axes */
        printf("\n# best point of sweep '%s', paste into k25.yaml\n", spec->name);
        for (int i = 0; i < spec->n_fixed; i++)
            printf("%s: %s\n", spec->fixed_key[i], spec->fixed_val[i]);
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(b, "axes"), key, v) if (json_is_string(v)) printf("%s: %s\n", key,
                                                                                            json_string_value(v));
    } else if (best) {
        printf("\n# sweep '%s' found no setting to recommend over the reference: keep the reference settings\n",
               spec->name);
    }
    json_decref(sum);
    return 0;
}

int k25_cmd_sweep(int argc, char **argv)
{
    const char *spec_path = NULL, *out = NULL, *only = NULL, *k25_path = "/proc/self/exe", *endpoint = NULL;
    int jobs = 1, task = -1, cpus = 1;
    int progress = K25_PROGRESS_AUTO;
    bool dry = false, best = false, quiet = false, merge = false, slurm = false, partial = false, resume = false;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &out, .metavar = "DIR", .deflt = "results/NAME",
         .help = "results folder (NAME from the spec)"},
        {.names = {"--jobs"}, .type = K25_OPT_INT, .dest = &jobs, .min = 1, .max = 100000,
         .help = "runs in parallel, each pinned to its own cores; every run,\n"
                 "the reference's included, has N-1 companions, in shuffled rounds"},
        {.names = {"--resume"}, .type = K25_OPT_FLAG, .dest = &resume,
         .help = "finish an interrupted sweep (also what a plain re-run does:\n"
                 "complete runs are never redone, incomplete ones always are)"},
        {.names = {"--dry-run"}, .type = K25_OPT_FLAG, .dest = &dry,
         .help = "list the points and the estimated time, run nothing"},
        {.names = {"--only"}, .type = K25_OPT_STRING, .dest = &only, .metavar = "EXPR",
         .help = "only points matching (and the reference), e.g.\n"
                 "'prefill_chunk_size >= 1024 && max_batch_size == 8'"},
        {.names = {"--print-best"}, .type = K25_OPT_FLAG, .dest = &best,
         .help = "after the sweep (or alone, on finished results), print the best\n"
                 "setting as YAML to paste into k25.yaml, or why there is none"},
        {.names = {"--quiet"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no progress line (--progress off)"},
        {.names = {"--progress"}, .type = K25_OPT_ENUM, .dest = &progress, .choices = k25_progress_mode_names,
         .help = "progress on stderr: auto (a bar on a terminal, else a plain line\n"
                 "every 10 s: runs done/total, rate, ETA, best so far), bar, lines, off"},
        {.names = {"--slurm"}, .type = K25_OPT_FLAG, .dest = &slurm,
         .help = "print a Slurm job-array script for the sweep (needs --out)"},
        {.names = {"--cpus-per-task"}, .type = K25_OPT_INT, .dest = &cpus, .min = 1, .max = 100000,
         .help = "(--slurm) cores per array task, bench's --threads"},
        {.names = {"--task"}, .type = K25_OPT_INT, .dest = &task, .min = 0, .max = 100000, .metavar = "I",
         .deflt = "", .help = "run task I of the job array only"},
        {.names = {"--merge"}, .type = K25_OPT_FLAG, .dest = &merge, .help = "collect the job array's runs"},
        {.names = {"--allow-partial"}, .type = K25_OPT_FLAG, .dest = &partial,
         .help = "(--merge) merge even when runs are missing (listed; summary marked partial)"},
        {.names = {"--endpoint"}, .type = K25_OPT_STRING, .dest = &endpoint, .metavar = "URL",
         .help = "measure a running OpenAI-compatible server instead of the engine\n"
                 "(overrides the spec's endpoint:/launch:): client axes only\n"
                 "(concurrency, rate); docs/sweeps.md"},
        {.names = {"--k25"}, .type = K25_OPT_PATH, .dest = &k25_path, .flags = K25_OPT_HIDDEN,
         .help = "the k25 binary the runs use"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "sweep",
        .usage = "sweep SPEC.yaml [--out results/NAME] [--jobs N] [--resume] [--dry-run]\n"
                 "                 [--only 'axis op value && ...'] [--print-best] [--quiet]\n"
                 "       k25 sweep SPEC.yaml --out DIR --slurm [--cpus-per-task N]  (print a Slurm job-array script)\n"
                 "       k25 sweep SPEC.yaml --out DIR --task I       (run task I of the array only)\n"
                 "       k25 sweep SPEC.yaml --out DIR --merge [--allow-partial]  (collect the array's runs)",
        .about = "Runs `k25 bench` on every point of the spec's grid (docs/sweeps.md), one HDF5 trace per\n"
                 "point and repetition under OUT/points/ID/, then writes OUT/sweep.h5 (the index) and\n"
                 "OUT/summary.json: a best point only when it beats the reference (the defaults)\n"
                 "significantly, paired by repetition; otherwise the data and \"no setting is significantly\n"
                 "better\"; the Pareto front; constraint violations.\n",
        .opts = opts,
        .epilog = "Exit status: 0 done, 2 a bad spec or option, 1 runs failed or (--merge) runs are missing,\n"
                  "130 / 143 interrupted by SIGINT / SIGTERM (finished runs are kept; the same command resumes).\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 sweep: %s\n", err.msg);
        return 2;
    }
    (void)resume; /* the default behaviour; accepted for clarity */
    if (argc > 2) {
        fprintf(stderr, "k25 sweep: one spec at a time ('%s' and '%s')\n", argv[1], argv[2]);
        return 2;
    }
    if (argc < 2) {
        k25_cliopt_print_help(&cmd, stderr);
        return 2;
    }
    spec_path = argv[1];
    static struct k25_sweep_spec spec; /* large: keep it off the stack */
    if (k25_sweep_spec_load(spec_path, &spec, &err) != K25_OK) {
        fprintf(stderr, "k25 sweep: %s\n", err.msg);
        return 2;
    }
    if (endpoint && k25_sweep_spec_set_endpoint(&spec, endpoint, &err) != K25_OK) {
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
        struct k25_sweep_opts o = {out, jobs, dry, only, k25_progress_resolve((enum k25_progress_mode)progress, quiet),
                                   quiet, k25_path, task, NULL};
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
    return print_found(&spec, out, quiet, best);
}
