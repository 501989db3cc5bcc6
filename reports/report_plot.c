/*
 * report_plot.c - rendering plots with the external gnuplot program.
 *
 * A plot is a template, reports/templates/NAME.gp, whose @KEY@ markers
 * are filled with values the report code makes (file names it chose,
 * numbers, and free text such as titles passed through k25_plot_quote as
 * gnuplot single-quoted strings, inside which gnuplot does no backquote
 * or macro substitution).  The filled script is kept beside the picture
 * (plots/NAME.gp) so a user can re-render or restyle it, and gnuplot is
 * started with fork/exec - never through a shell - with the plot folder
 * as its working directory, so no user-supplied path reaches a script.
 * Plots render in parallel, a few gnuplot processes at a time.
 */
#include "report.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void k25_plot_set(struct k25_plot_job *j, const char *key, const char *fmt, ...)
{
    int i;
    for (i = 0; i < j->n_vars; i++)
        if (!strcmp(j->key[i], key))
            break;
    K25_ASSERT(i < (int)(sizeof(j->key) / sizeof(j->key[0])));
    if (i == j->n_vars) {
        j->n_vars++;
        snprintf(j->key[i], sizeof(j->key[i]), "%s", key);
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->val[i], sizeof(j->val[i]), fmt, ap);
    va_end(ap);
}

void k25_plot_quote(const char *s, char *out, size_t n)
{
    size_t o = 0;
    if (n < 3) {
        if (n)
            out[0] = 0;
        return;
    }
    out[o++] = '\'';
    for (; *s && o + 3 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'') {
            out[o++] = '\'';
            out[o++] = '\'';
        } else {
            out[o++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
        }
    }
    out[o++] = '\'';
    out[o] = 0;
}

static bool executable(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

#define INSTALL_HINT                                                                                              \
    "k25 report draws its plots with gnuplot: install it (Debian/Ubuntu: `sudo apt-get install gnuplot-nox`, "   \
    "which ci/install-deps.sh does; Fedora: `dnf install gnuplot`; macOS: `brew install gnuplot`) or point "     \
    "K25_GNUPLOT at the program"

int k25_plot_find_gnuplot(char *path, size_t n, struct k25_error *err)
{
    const char *env = getenv("K25_GNUPLOT");
    if (env && *env) {
        if (!executable(env))
            return k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "K25_GNUPLOT=%s is not an executable program; %s",
                                 env, INSTALL_HINT);
        snprintf(path, n, "%s", env);
        return K25_OK;
    }
    const char *p = getenv("PATH");
    char buf[PATH_MAX];
    while (p && *p) {
        const char *e = strchr(p, ':');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (l > 0 && l < sizeof(buf) - 10) {
            snprintf(buf, sizeof(buf), "%.*s/gnuplot", (int)l, p);
            if (executable(buf)) {
                snprintf(path, n, "%s", buf);
                return K25_OK;
            }
        }
        p = e ? e + 1 : NULL;
    }
    return k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "gnuplot not found on PATH; %s", INSTALL_HINT);
}

static bool has_templates(const char *dir)
{
    char p[PATH_MAX + 32];
    k25_report_sfmt(p, sizeof(p), "%s/run_cdf.gp", dir);
    return access(p, R_OK) == 0;
}

int k25_plot_find_templates(char *dir, size_t n, struct k25_error *err)
{
    const char *env = getenv("K25_REPORT_TEMPLATES");
    if (env && *env) {
        if (!has_templates(env))
            return k25_error_set(err, K25_ENOTFOUND, env, 0, NULL,
                                 "K25_REPORT_TEMPLATES: no gnuplot templates (run_cdf.gp, ...) in this folder");
        snprintf(dir, n, "%s", env);
        return K25_OK;
    }
    char exe[PATH_MAX], cand[PATH_MAX + 64];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (l > 0) {
        exe[l] = 0;
        char *s = strrchr(exe, '/');
        if (s)
            *s = 0;
        static const char *const rel[] = {"/../reports/templates", "/../../reports/templates",
                                          "/../share/k25/templates"};
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(cand, sizeof(cand), "%s%s", exe, rel[i]);
            if (has_templates(cand)) {
                snprintf(dir, n, "%s", cand);
                return K25_OK;
            }
        }
    }
    if (has_templates("reports/templates")) {
        snprintf(dir, n, "reports/templates");
        return K25_OK;
    }
    return k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL,
                         "the gnuplot templates (reports/templates/*.gp) were not found next to the k25 binary or "
                         "in the current folder; run from the k25bench checkout or set K25_REPORT_TEMPLATES");
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 8192, n = 0;
    char *b = malloc(cap);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (cap - n < 1024) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    bool bad = ferror(f);
    fclose(f);
    if (!b || bad) {
        free(b);
        return NULL;
    }
    b[n] = 0;
    if (len)
        *len = n;
    return b;
}

static const char *ext_of(enum k25_report_format f)
{
    return f == K25_FMT_SVG ? "svg" : (f == K25_FMT_PDF ? "pdf" : "png");
}

/* The terminal and the house style every plot shares. */
static void preamble(FILE *f, enum k25_report_format fmt, const struct k25_plot_job *j, const char *stem)
{
    int w = 900, h = 560;
    for (int i = 0; i < j->n_vars; i++) {
        if (!strcmp(j->key[i], "WIDTH"))
            w = atoi(j->val[i]);
        if (!strcmp(j->key[i], "HEIGHT"))
            h = atoi(j->val[i]);
    }
    fprintf(f, "# generated by k25 report from template %s.gp; re-render with: gnuplot %s.gp\n",
            j->template_name, stem);
    if (fmt == K25_FMT_PNG)
        fprintf(f, "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
                   "    set terminal pngcairo size %d,%d font 'sans,10' noenhanced\n"
                   "} else {\n"
                   "    set terminal png size %d,%d noenhanced\n"
                   "}\n",
                w, h, w, h);
    else if (fmt == K25_FMT_SVG)
        fprintf(f, "set terminal svg size %d,%d font 'sans,10' noenhanced background '#ffffff'\n", w, h);
    else
        fprintf(f, "set terminal pdfcairo size %.2fin,%.2fin font 'sans,8' noenhanced\n", w / 100.0, h / 100.0);
    fprintf(f, "set output '%s.%s'\n", stem, ext_of(fmt));
    fprintf(f, "set datafile separator '\\t'\n"
               "set datafile missing 'nan'\n"
               "set grid lc rgb '#d8d8d8' lw 1\n"
               "set border lc rgb '#404040'\n"
               "set key noautotitle\n"
               "set style line 1 lc rgb '#1f77b4' lw 2 pt 7 ps 0.8\n"
               "set style line 2 lc rgb '#d62728' lw 2 pt 5 ps 0.8\n"
               "set style line 3 lc rgb '#2ca02c' lw 2 pt 9 ps 0.9\n"
               "set style line 4 lc rgb '#ff7f0e' lw 2 pt 11 ps 0.9\n"
               "set style line 5 lc rgb '#9467bd' lw 2 pt 13 ps 0.9\n"
               "set style line 6 lc rgb '#8c564b' lw 2 pt 4 ps 0.9\n"
               "set style line 7 lc rgb '#e377c2' lw 2 pt 6 ps 0.9\n"
               "set style line 8 lc rgb '#7f7f7f' lw 2 pt 8 ps 0.9\n"
               "set style increment user\n");
}

/* Writes the filled script plot_dir/STEM.gp; fails on an unknown @KEY@. */
static int fill(const char *tmpl_dir, const char *plot_dir, const struct k25_plot_job *j,
                enum k25_report_format fmt, const char *stem, struct k25_error *err)
{
    char tpath[PATH_MAX + 128], opath[PATH_MAX + 128];
    snprintf(tpath, sizeof(tpath), "%s/%s.gp", tmpl_dir, j->template_name);
    snprintf(opath, sizeof(opath), "%s/%s.gp", plot_dir, stem);
    char *t = slurp(tpath, NULL);
    if (!t)
        return k25_error_set(err, K25_ENOTFOUND, tpath, 0, NULL, "cannot read the gnuplot template: %s",
                             strerror(errno ? errno : EIO));
    FILE *f = fopen(opath, "w");
    if (!f) {
        free(t);
        return k25_error_set(err, K25_EIO, opath, 0, NULL, "cannot create: %s", strerror(errno));
    }
    int rc = K25_OK;
    preamble(f, fmt, j, stem);
    int line = 1;
    for (const char *p = t; *p; p++) {
        if (*p == '\n')
            line++;
        if (*p != '@') {
            fputc(*p, f);
            continue;
        }
        const char *e = p + 1;
        while ((*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') || *e == '_')
            e++;
        if (*e != '@' || e == p + 1) {
            fputc(*p, f);
            continue;
        }
        int i;
        for (i = 0; i < j->n_vars; i++)
            if (strlen(j->key[i]) == (size_t)(e - p - 1) && !strncmp(j->key[i], p + 1, (size_t)(e - p - 1)))
                break;
        if (i == j->n_vars) {
            rc = k25_error_set(err, K25_EINTERNAL, tpath, line, NULL, "template uses @%.*s@, which the report does not set",
                               (int)(e - p - 1), p + 1);
            break;
        }
        fputs(j->val[i], f);
        p = e;
    }
    free(t);
    if (fflush(f) != 0 || ferror(f)) {
        if (!rc)
            rc = k25_error_set(err, K25_EIO, opath, 0, NULL, "writing failed: %s", strerror(errno));
    }
    if (fclose(f) != 0 && !rc)
        rc = k25_error_set(err, K25_EIO, opath, 0, NULL, "writing failed: %s", strerror(errno));
    return rc;
}

/* Starts gnuplot on plot_dir/STEM.gp, stderr to STEM.log.  Returns the pid or -1. */
static pid_t spawn(const char *gnuplot, const char *plot_dir, const char *stem)
{
    char script[96], log[PATH_MAX + 128];
    snprintf(script, sizeof(script), "%s.gp", stem);
    snprintf(log, sizeof(log), "%s/%s.log", plot_dir, stem);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
        }
        dup2(fd, 2);
        if (chdir(plot_dir) != 0)
            _exit(126);
        char *const argv[] = {(char *)gnuplot, script, NULL};
        execv(gnuplot, argv);
        dprintf(2, "cannot run %s: %s\n", gnuplot, strerror(errno));
        _exit(127);
    }
    close(fd);
    return pid;
}

/* Last lines of gnuplot's stderr, for the error message. */
static void log_tail(const char *plot_dir, const char *stem, char *buf, size_t n)
{
    char log[PATH_MAX + 128];
    k25_report_sfmt(log, sizeof(log), "%s/%s.log", plot_dir, stem);
    char *t = slurp(log, NULL);
    buf[0] = 0;
    if (!t)
        return;
    size_t l = strlen(t);
    const char *s = l > n - 1 ? t + l - (n - 1) : t;
    snprintf(buf, n, "%s", s);
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = ' ';
    free(t);
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

bool k25_plot_file_complete(const char *path, enum k25_report_format fmt)
{
    size_t n = 0;
    char *b = slurp(path, &n);
    if (!b)
        return false;
    const unsigned char *u = (const unsigned char *)b;
    bool ok = false;
    if (fmt == K25_FMT_PNG) {
        /* signature, then chunks (length, type, data, CRC) up to IEND, which ends the file */
        ok = n >= 8 && !memcmp(u, "\x89PNG\r\n\x1a\n", 8);
        size_t p = 8;
        bool iend = false;
        while (ok && !iend) {
            if (n - p < 12) {
                ok = false;
                break;
            }
            uint32_t len = be32(u + p);
            if (len > n - p - 12) {
                ok = false;
                break;
            }
            iend = !memcmp(u + p + 4, "IEND", 4);
            p += 12 + (size_t)len;
        }
        ok = ok && iend && p == n;
    } else if (fmt == K25_FMT_SVG) {
        while (n > 0 && (b[n - 1] == '\n' || b[n - 1] == ' ' || b[n - 1] == '\r' || b[n - 1] == '\t'))
            n--;
        ok = strstr(b, "<svg") != NULL && n >= 6 && !memcmp(b + n - 6, "</svg>", 6);
    } else {
        ok = n >= 16 && !memcmp(b, "%PDF-", 5);
        for (size_t i = n > 1024 ? n - 1024 : 0; ok && i + 5 <= n; i++)
            if (!memcmp(b + i, "%%EOF", 5)) {
                n = 0; /* found */
                break;
            }
        ok = ok && n == 0;
    }
    free(b);
    return ok;
}

/* Reaps one finished gnuplot of ours; marks its status (1 ok, 2 failed). */
static void reap_one(pid_t *pids, int *status, int n, int *running)
{
    for (;;) {
        int st;
        pid_t w = waitpid(-1, &st, 0);
        if (w < 0) { /* nothing left to wait for: treat the rest as failed */
            for (int k = 0; k < n; k++)
                if (pids[k] > 0) {
                    pids[k] = -1;
                    status[k] = 2;
                }
            *running = 0;
            return;
        }
        for (int k = 0; k < n; k++)
            if (pids[k] == w) {
                pids[k] = -1;
                status[k] = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 1 : 2;
                (*running)--;
                return;
            }
    }
}

int k25_plot_render_all(const char *gnuplot, const char *tmpl_dir, const char *plot_dir,
                        const struct k25_plot_job *jobs, int n, enum k25_report_format fmt, const char *suffix,
                        struct k25_error *err)
{
    enum { MAXPAR = 8 };
    pid_t pids[K25_REPORT_MAX_PLOTS];
    int status[K25_REPORT_MAX_PLOTS] = {0};
    char stems[K25_REPORT_MAX_PLOTS][80];
    int rc = K25_OK, started = 0, running = 0;
    K25_ASSERT(n <= K25_REPORT_MAX_PLOTS);
    for (int i = 0; i < n; i++)
        pids[i] = -1;
    for (int i = 0; i < n && !rc; i++) {
        snprintf(stems[i], sizeof(stems[i]), "%s%s", jobs[i].stem, suffix);
        if ((rc = fill(tmpl_dir, plot_dir, &jobs[i], fmt, stems[i], err)))
            break;
        while (running >= MAXPAR)
            reap_one(pids, status, started, &running);
        pids[i] = spawn(gnuplot, plot_dir, stems[i]);
        if (pids[i] < 0) {
            rc = k25_error_set(err, K25_EIO, plot_dir, 0, NULL, "cannot start gnuplot: %s", strerror(errno));
            break;
        }
        started = i + 1;
        running++;
    }
    while (running > 0)
        reap_one(pids, status, started, &running);
    for (int k = 0; k < started && !rc; k++) {
        char out[PATH_MAX + 128], tail[400];
        k25_report_sfmt(out, sizeof(out), "%s/%s.%s", plot_dir, stems[k], ext_of(fmt));
        if (status[k] != 1) {
            log_tail(plot_dir, stems[k], tail, sizeof(tail));
            rc = k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL,
                               "gnuplot failed on %s/%s.gp (template %s.gp): %s", plot_dir, stems[k],
                               jobs[k].template_name, *tail ? tail : "no output");
        } else if (!k25_plot_file_complete(out, fmt)) {
            /* gnuplot exits 0 when writing its picture failed */
            rc = k25_error_set(err, K25_EIO, out, 0, NULL,
                               "gnuplot wrote an incomplete %s picture (disk full or a write error?)", ext_of(fmt));
        }
    }
    /* logs of successful plots are noise; a failed one stays for the user */
    for (int k = 0; k < started; k++) {
        if (status[k] == 1) {
            char log[PATH_MAX + 128];
            k25_report_sfmt(log, sizeof(log), "%s/%s.log", plot_dir, stems[k]);
            unlink(log);
        }
    }
    return rc;
}
