/*
 * log.c - structured log lines ([PREFILL], [DECODE], [KV_CACHE], ...).
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

int k25_log_open(struct k25_log *lg, enum k25_log_level level, const char *path, struct k25_error *err)
{
    memset(lg, 0, sizeof(*lg));
    lg->level = level;
    if (level == K25_LOG_OFF)
        return K25_OK;
    if (!path || !*path) {
        lg->f = stderr;
        return K25_OK;
    }
    lg->f = fopen(path, "a");
    if (!lg->f)
        return k25_error_set(err, K25_EIO, path, 0, "log_file", "cannot open the log: %s",
                             strerror(errno));
    lg->own = true;
    return K25_OK;
}

int k25_log_close(struct k25_log *lg, struct k25_error *err)
{
    int rc = K25_OK;
    if (lg->f) {
        if (fflush(lg->f) != 0)
            lg->failed = true;
        if (lg->own && fclose(lg->f) != 0)
            lg->failed = true;
    }
    if (lg->failed)
        rc = k25_error_set(err, K25_EIO, NULL, 0, "log_file", "writing the log failed (disk full?)");
    memset(lg, 0, sizeof(*lg));
    return rc;
}

void k25_log_write(struct k25_log *lg, enum k25_log_level lvl, const char *tag, const char *fmt, ...)
{
    if (!k25_log_on(lg, lvl))
        return;
    char line[1024];
    int n = snprintf(line, sizeof(line), "[%s] ", tag);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = strlen(line);
    line[len++] = '\n';
    if (fwrite(line, 1, len, lg->f) != len)
        lg->failed = true;
}
