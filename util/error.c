/*
 * error.c - status codes, struct k25_error, assertions and the clock
 * (util/, the bottom layer: the engine and everything above use them).
 */
#include "k25util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *k25_strerror(int code)
{
    switch (code) {
    case K25_OK: return "success";
    case K25_EINVAL: return "invalid input";
    case K25_ENOMEM: return "out of memory";
    case K25_EIO: return "I/O error";
    case K25_EFORMAT: return "malformed file";
    case K25_ENOTFOUND: return "not found";
    case K25_ERANGE: return "value out of range";
    case K25_EUNSUPPORTED: return "not supported";
    case K25_EINTERNAL: return "internal error";
    default: return "unknown error";
    }
}

void k25_error_clear(struct k25_error *err)
{
    if (err)
        memset(err, 0, sizeof(*err));
}

int k25_error_set(struct k25_error *err, int code, const char *file, int line,
                  const char *field, const char *fmt, ...)
{
    if (!err)
        return code;
    memset(err, 0, sizeof(*err));
    err->code = code;
    err->line = line;
    if (file)
        snprintf(err->file, sizeof(err->file), "%s", file);
    if (field)
        snprintf(err->field, sizeof(err->field), "%s", field);

    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);

    /* "FILE:LINE: key 'x': what", leaving out the parts not known. */
    size_t n = 0;
    if (file && *file) {
        if (line > 0)
            n += (size_t)snprintf(err->msg + n, sizeof(err->msg) - n, "%s:%d: ", file, line);
        else
            n += (size_t)snprintf(err->msg + n, sizeof(err->msg) - n, "%s: ", file);
    }
    if (field && *field && n < sizeof(err->msg))
        n += (size_t)snprintf(err->msg + n, sizeof(err->msg) - n, "'%s': ", field);
    if (n < sizeof(err->msg))
        snprintf(err->msg + n, sizeof(err->msg) - n, "%s", what);
    return code;
}

void k25_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "k25: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    fflush(stderr);
    abort();
}

uint64_t k25_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
