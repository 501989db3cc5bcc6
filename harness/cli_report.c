/*
 * cli_report.c - `k25 report INPUT... --out DIR [--sla sla.yaml]
 * [--format png|svg|pdf] [--title T] [--check] [--quiet]`: parses the
 * arguments and calls k25_report_generate (report.c).
 */
#include "harness.h"
#include "report.h"

#include <string.h>

static void report_usage(FILE *out)
{
    fprintf(out,
            "usage: k25 report INPUT... --out DIR [--sla sla.yaml] [--format png|svg|pdf] [--title T]\n"
            "                  [--check] [--quiet]\n\n"
            "Writes a sign-off report: DIR/report.md, DIR/report.html (self-contained, images embedded),\n"
            "DIR/verdict.json and DIR/plots/ (pictures, the gnuplot scripts that drew them, their data).\n\n"
            "INPUT is one of:\n"
            "  run.h5          a run stored by `k25 bench`\n"
            "  results/NAME    a sweep folder written by `k25 sweep --out` (holds summary.json)\n"
            "  attn.h5         an attention benchmark stored by `k25 attn-bench --out`\n"
            "  A.h5 B.h5 ...   several runs compared side by side (the first is the baseline)\n\n"
            "  --out DIR       report folder: created, or replaced whole when it holds an earlier report\n"
            "                  (rendered beside it in DIR.tmp.PID and swapped in when complete)\n"
            "  --sla FILE      SLA lines and health-check overrides (reports/sla-example.yaml)\n"
            "  --format F      plot format: png (default), svg, or pdf (the HTML then embeds PNG copies)\n"
            "  --title T       report title\n"
            "  --check         exit 1 unless the SLA verdict is PASS\n"
            "  --quiet         no summary line on stderr\n\n"
            "Needs gnuplot (Debian: apt-get install gnuplot-nox; K25_GNUPLOT=PATH to choose one).\n"
            "Exit status: 0 report written; 2 bad input (a missing, damaged or unsupported input, a bad\n"
            "SLA file or option, an unusable --out); 1 a failure while writing (disk full: the previous\n"
            "report in DIR is left as it was) or --check without a PASS.\n");
}

int k25_cmd_report(int argc, char **argv)
{
    const char *inputs[64];
    struct k25_report_opts o = {.inputs = inputs, .format = K25_FMT_PNG};
    bool check = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            report_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--out") || !strcmp(a, "--sla") || !strcmp(a, "--format") || !strcmp(a, "--title")) {
            if (!has_val) {
                fprintf(stderr, "k25 report: %s needs a value (k25 report --help)\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--out"))
                o.out = v;
            else if (!strcmp(a, "--sla"))
                o.sla_path = v;
            else if (!strcmp(a, "--title"))
                o.title = v;
            else if (!strcmp(v, "png"))
                o.format = K25_FMT_PNG;
            else if (!strcmp(v, "svg"))
                o.format = K25_FMT_SVG;
            else if (!strcmp(v, "pdf"))
                o.format = K25_FMT_PDF;
            else {
                fprintf(stderr, "k25 report: --format: '%s' is not png, svg or pdf\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--check")) {
            check = true;
        } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
            o.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "k25 report: unknown option '%s' (k25 report --help)\n", a);
            return 2;
        } else if (o.n_inputs == (int)(sizeof(inputs) / sizeof(inputs[0]))) {
            fprintf(stderr, "k25 report: at most %zu inputs\n", sizeof(inputs) / sizeof(inputs[0]));
            return 2;
        } else {
            inputs[o.n_inputs++] = a;
        }
    }
    if (!o.n_inputs || !o.out) {
        fprintf(stderr, "k25 report: %s\n\n", !o.n_inputs ? "no INPUT given" : "--out DIR is required");
        report_usage(stderr);
        return 2;
    }
    struct k25_error err;
    struct k25_report_outcome oc;
    k25_error_clear(&err);
    int rc = k25_report_generate(&o, &oc, &err);
    if (rc) {
        fprintf(stderr, "k25 report: %s\n", err.msg);
        return rc == K25_EINVAL || rc == K25_EFORMAT || rc == K25_ENOTFOUND || rc == K25_ERANGE ||
                       rc == K25_EUNSUPPORTED
                   ? 2
                   : 1;
    }
    const char *v = oc.n_pass + oc.n_fail + oc.n_unsupported == 0 ? "no SLA lines"
                    : oc.overall == K25_VERDICT_PASS              ? "PASS"
                    : oc.overall == K25_VERDICT_FAIL              ? "FAIL"
                                                                  : "INCONCLUSIVE";
    if (!o.quiet)
        fprintf(stderr,
                "k25 report: %s/report.html, %s/report.md (%d plots) in %.2f s; verdict %s (%d pass, %d fail, %d "
                "unsupported); health: %d fail, %d warn, %d not measured\n",
                o.out, o.out, oc.n_plots, oc.seconds, v, oc.n_pass, oc.n_fail, oc.n_unsupported, oc.health_fail,
                oc.health_warn, oc.health_not_measured);
    if (check && oc.overall != K25_VERDICT_PASS)
        return 1;
    return 0;
}
