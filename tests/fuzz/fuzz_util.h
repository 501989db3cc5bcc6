/*
 * fuzz_util.h - shared by the libFuzzer targets in tests/fuzz/ (`make fuzz`,
 * `make fuzz-smoke`, tests/fuzz/README.md).
 *
 * Most parsers under test read a file by name: fuzz_file() writes the input
 * to one file per process under $TMPDIR (default /tmp; /dev/shm is faster
 * where it exists) and returns its name.  A failing input is a crash,
 * a sanitizer report, a leak or a timeout - never an error status, which
 * is what a parser should return for nonsense.
 */
#ifndef K25_FUZZ_UTIL_H
#define K25_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Writes data[size] to a per-process file whose name ends in suffix; returns the name (static). */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[512];
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(path, sizeof(path), "%s/k25fuzz-%ld%s", dir, (long)getpid(), suffix);
    FILE *f = fopen(path, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
        perror(path);
        abort(); /* the harness itself failed: not a finding */
    }
    return path;
}

/* data[size] as a NUL-terminated string (malloc'd; the caller frees). */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
