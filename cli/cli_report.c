/*
 * cli_report.c - `k25 report INPUT... --out DIR [--sla sla.yaml]
 * [--format png|svg|pdf] [--title T] [--check] [--quiet]`: parses the
 * arguments and calls k25_report_generate (report.c).
 */
#include "cli.h"
#include "harness.h"
#include "report.h"
#include "cliopt.h"

#include <string.h>

int k25_cmd_report(int argc, char **argv)
{
    const char *inputs[64];
    struct k25_report_opts o = {.inputs = inputs, .format = K25_FMT_PNG};
    bool check = false, quiet = false;
    static const char *const formats[] = {"png", "svg", "pdf", NULL};
    static const enum k25_report_format format_of[] = {K25_FMT_PNG, K25_FMT_SVG, K25_FMT_PDF};
    int format = 0, progress = K25_PROGRESS_AUTO;
    struct k25_error err;
    k25_error_clear(&err);
    const struct k25_opt opts[] = {
        {.names = {"--out"}, .type = K25_OPT_PATH, .dest = &o.out, .metavar = "DIR",
         .help = "report folder: created, or replaced whole when it holds an earlier report\n"
                 "(rendered beside it in DIR.tmp.PID and swapped in when complete)"},
        {.names = {"--sla"}, .type = K25_OPT_PATH, .dest = &o.sla_path,
         .help = "SLA lines and health-check overrides (reports/sla-example.yaml)"},
        {.names = {"--format"}, .type = K25_OPT_ENUM, .dest = &format, .choices = formats,
         .help = "plot format (pdf: the HTML then embeds PNG copies)"},
        {.names = {"--title"}, .type = K25_OPT_STRING, .dest = &o.title, .metavar = "T", .help = "report title"},
        {.names = {"--check"}, .type = K25_OPT_FLAG, .dest = &check, .help = "exit 1 unless the SLA verdict is PASS"},
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no summary line on stderr"},
        {.names = {"--progress"}, .type = K25_OPT_ENUM, .dest = &progress, .choices = k25_progress_mode_names,
         .help = "a line per stage on stderr (inputs, data, plots, documents): auto\n"
                 "(a bar on a terminal, else lines), bar, lines, off (also --quiet)"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "report",
        .usage = "report INPUT... --out DIR [--sla sla.yaml] [--format png|svg|pdf] [--title T]\n"
                 "                  [--check] [--quiet]",
        .about = "Writes a sign-off report: DIR/report.md, DIR/report.html (self-contained, images embedded),\n"
                 "DIR/verdict.json and DIR/plots/ (pictures, the gnuplot scripts that drew them, their data).\n\n"
                 "INPUT is one of:\n"
                 "  run.h5          a run stored by `k25 bench`\n"
                 "  results/NAME    a sweep folder written by `k25 sweep --out` (holds summary.json)\n"
                 "  attn.h5         an attention benchmark stored by `k25 attn-bench --out`\n"
                 "  A.h5 B.h5 ...   several runs compared side by side (the first is the baseline)\n",
        .opts = opts,
        .epilog = "Needs gnuplot (Debian: apt-get install gnuplot-nox; K25_GNUPLOT=PATH to choose one).\n"
                  "Exit status: 0 report written; 2 bad input (a missing, damaged or unsupported input, a bad\n"
                  "SLA file or option, an unusable --out); 1 a failure while writing (disk full: the previous\n"
                  "report in DIR is left as it was) or --check without a PASS.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK) {
        fprintf(stderr, "k25 report: %s\n", err.msg);
        return 2;
    }
    o.format = format_of[format];
    o.quiet = quiet;
    o.progress = (enum k25_progress_mode)progress;
    if (argc - 1 > (int)(sizeof(inputs) / sizeof(inputs[0]))) {
        fprintf(stderr, "k25 report: at most %zu inputs\n", sizeof(inputs) / sizeof(inputs[0]));
        return 2;
    }
    for (int i = 1; i < argc; i++)
        inputs[o.n_inputs++] = argv[i];
    if (!o.n_inputs || !o.out) {
        fprintf(stderr, "k25 report: %s\n\n", !o.n_inputs ? "no INPUT given" : "--out DIR is required");
        k25_cliopt_print_help(&cmd, stderr);
        return 2;
    }
    struct k25_report_outcome oc;
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
