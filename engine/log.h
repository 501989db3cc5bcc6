/*
 * log.h - the structured log (engine-internal): one line per event,
 *   [TAG] key=value key=value ...
 * at INFO or DEBUG, to a file or stderr.  `k25 logs` parses it.
 */
#ifndef K25_LOG_H
#define K25_LOG_H

#include "k25.h"

#include <stdio.h>

struct k25_log {
    FILE *f;        /* NULL when logging is off */
    bool own;       /* f was opened here (closed by k25_log_close) */
    enum k25_log_level level;
    bool failed;    /* a write failed; reported once */
};

/* path NULL or "" = stderr.  Opens in append mode. */
int k25_log_open(struct k25_log *lg, enum k25_log_level level, const char *path, struct k25_error *err);
/* Closes (and checks) the file; returns K25_EIO if any write failed. */
int k25_log_close(struct k25_log *lg, struct k25_error *err);

static inline bool k25_log_on(const struct k25_log *lg, enum k25_log_level lvl)
{
    return lg->f && lvl != K25_LOG_OFF && lg->level >= lvl;
}

/* Writes "[tag] " + formatted fields + "\n" when lvl is enabled. */
void k25_log_write(struct k25_log *lg, enum k25_log_level lvl, const char *tag, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
