/*
 * progress.c - the one progress reporter of every long command (`k25
 * bench`, `sweep`, `attn-bench`, `report`, `run`'s prefill): a live bar on
 * a terminal, plain lines a CI log shows when stderr is a pipe or a file.
 *
 * Modes (--progress): auto (bar on a terminal, lines otherwise), bar,
 * lines, off (--quiet too).  Lines: one when the work starts, one every
 * K25_PROGRESS_LINE_S seconds (done/total, rate, elapsed, ETA and the
 * caller's note), one when it ends.  The bar redraws one line ("\r") at
 * most every K25_PROGRESS_BAR_S seconds.  K25_PROGRESS_INTERVAL_S in the
 * environment replaces the line period (docs/cli.md; tests use it to get
 * several lines from a short run).
 */
#include "harness.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *const k25_progress_mode_names[] = {"auto", "bar", "lines", "off", NULL};
#define mode_names k25_progress_mode_names

const char *k25_progress_mode_name(enum k25_progress_mode m)
{
    return m >= K25_PROGRESS_AUTO && m <= K25_PROGRESS_OFF ? mode_names[m] : "?";
}

int k25_progress_mode_parse(const char *s, enum k25_progress_mode *out, struct k25_error *err)
{
    for (int i = 0; i <= K25_PROGRESS_OFF; i++)
        if (!strcmp(s, mode_names[i])) {
            *out = (enum k25_progress_mode)i;
            return K25_OK;
        }
    return k25_error_set(err, K25_EINVAL, "command line", 0, "--progress",
                         "expected auto, bar, lines or off, got \"%s\"", s);
}

enum k25_progress_mode k25_progress_resolve(enum k25_progress_mode m, bool quiet)
{
    if (quiet)
        return K25_PROGRESS_OFF;
    if (m == K25_PROGRESS_AUTO)
        return isatty(STDERR_FILENO) ? K25_PROGRESS_BAR : K25_PROGRESS_LINES;
    return m;
}

/* The line period: K25_PROGRESS_INTERVAL_S when set to a positive number, else K25_PROGRESS_LINE_S. */
static uint64_t line_period_ns(void)
{
    const char *e = getenv("K25_PROGRESS_INTERVAL_S");
    if (e && *e) {
        char *end;
        errno = 0;
        double s = strtod(e, &end);
        if (!*end && !errno && s > 0 && s < 86400)
            return (uint64_t)(s * 1e9);
    }
    return (uint64_t)(K25_PROGRESS_LINE_S * 1e9);
}

void k25_progress_begin(struct k25_progress *p, enum k25_progress_mode mode, const char *what, const char *unit,
                        int64_t total, double duration_s)
{
    memset(p, 0, sizeof(*p));
    p->mode = k25_progress_resolve(mode, false);
    p->out = stderr;
    snprintf(p->what, sizeof(p->what), "%s", what);
    snprintf(p->unit, sizeof(p->unit), "%s", unit);
    p->total = total;
    p->duration_s = duration_s;
    p->start_ns = p->last_ns = k25_now_ns();
    p->period_ns = p->mode == K25_PROGRESS_BAR ? (uint64_t)(K25_PROGRESS_BAR_S * 1e9) : line_period_ns();
    if (p->mode == K25_PROGRESS_LINES) {
        if (total > 0)
            fprintf(p->out, "%s: starting: %lld %s\n", p->what, (long long)total, p->unit);
        else if (duration_s > 0)
            fprintf(p->out, "%s: starting: %s for %.0f s\n", p->what, p->unit, duration_s);
        else
            fprintf(p->out, "%s: starting\n", p->what);
        fflush(p->out);
    }
}

/* "37/100 requests (37%), 2.41/s, 15 s elapsed, ETA 26 s": the figures both modes print. */
static void format_status(const struct k25_progress *p, int64_t done, uint64_t now, char *buf, size_t n)
{
    double el = (double)(now - p->start_ns) / 1e9;
    double rate = el > 0 ? (double)done / el : NAN;
    double eta = NAN;
    if (p->total > 0 && done > 0)
        eta = el * (double)(p->total - done) / (double)done;
    else if (p->duration_s > 0)
        eta = p->duration_s - el;
    size_t k = 0;
    if (p->total > 0)
        k += (size_t)snprintf(buf + k, n - k, "%lld/%lld %s (%.0f%%)", (long long)done, (long long)p->total,
                              p->unit, 100.0 * (double)done / (double)p->total);
    else
        k += (size_t)snprintf(buf + k, n - k, "%lld %s", (long long)done, p->unit);
    if (k < n && isfinite(rate))
        k += (size_t)snprintf(buf + k, n - k, ", %.3g/s", rate);
    if (k < n)
        k += (size_t)snprintf(buf + k, n - k, ", %.0f s elapsed", el);
    if (k < n) {
        if (isfinite(eta))
            snprintf(buf + k, n - k, ", ETA %.0f s", eta < 0 ? 0 : eta);
        else
            snprintf(buf + k, n - k, ", ETA unknown");
    }
}

static void emit(struct k25_progress *p, int64_t done, uint64_t now, const char *note, bool final)
{
    char st[256];
    format_status(p, done, now, st, sizeof(st));
    if (p->mode == K25_PROGRESS_BAR) {
        fprintf(p->out, "\r\033[K%s: %s%s%s", p->what, st, note && *note ? "; " : "", note ? note : "");
        if (final)
            fprintf(p->out, "\r\033[K");
    } else {
        fprintf(p->out, "%s: %s%s%s%s\n", p->what, final ? "end: " : "", st, note && *note ? "; " : "",
                note ? note : "");
    }
    fflush(p->out);
    p->last_ns = now;
    p->lines++;
}

bool k25_progress_due(const struct k25_progress *p)
{
    return p && (p->mode == K25_PROGRESS_BAR || p->mode == K25_PROGRESS_LINES) &&
           k25_now_ns() - p->last_ns >= p->period_ns;
}

void k25_progress_update(struct k25_progress *p, int64_t done, const char *fmt, ...)
{
    if (!p || p->mode == K25_PROGRESS_OFF || p->mode == K25_PROGRESS_AUTO)
        return;
    uint64_t now = k25_now_ns();
    if (now - p->last_ns < p->period_ns)
        return;
    char note[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(note, sizeof(note), fmt, ap);
        va_end(ap);
    }
    emit(p, done, now, note, false);
}

void k25_progress_end(struct k25_progress *p, int64_t done, const char *fmt, ...)
{
    if (!p || p->mode == K25_PROGRESS_OFF || p->mode == K25_PROGRESS_AUTO)
        return;
    char note[256] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(note, sizeof(note), fmt, ap);
        va_end(ap);
    }
    emit(p, done, k25_now_ns(), note, true);
    p->mode = K25_PROGRESS_OFF; /* ended: later calls print nothing */
}
