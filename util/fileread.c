/*
 * fileread.c - a whole file (or standard input) into one NUL-terminated
 * buffer: the tokenizer's JSON files, `k25 tokenize`'s input.
 */
#include "k25util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *k25_file_read(const char *path, size_t *len, struct k25_error *err)
{
    bool in = strcmp(path, "-") == 0;
    FILE *f = in ? stdin : fopen(path, "rb");
    if (!f) {
        k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL, "cannot open: %s",
                      strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while (buf && (r = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += r;
        if (n + 1 == cap) { /* full: double (the last byte is kept for the NUL) */
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (!buf || ferror(f)) {
        k25_error_set(err, buf ? K25_EIO : K25_ENOMEM, path, 0, NULL, "cannot read: %s",
                      buf ? strerror(errno) : "out of memory");
        free(buf);
        buf = NULL;
    } else {
        buf[n] = 0;
        *len = n;
    }
    if (!in)
        fclose(f);
    return buf;
}
