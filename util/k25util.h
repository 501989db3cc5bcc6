/*
 * k25util.h - public interface of util/, the bottom layer of k25bench: what
 * every other part (engine, harness, sweeps, reports, gates, CLI) builds on.
 *
 *   error.c       status codes, struct k25_error, assertions and the clock
 *   atomicfile.c  result files written to a temporary name and renamed
 *                 when complete; output-path checks
 *   yamldoc.c     whole-file YAML loading, shortest round-trip doubles
 *   jsonpath.c    dot-separated key paths into JSON documents
 *   h5store.c     the HDF5 store (below)
 *
 * Nothing in util/ includes a header of another folder (README.md, "Source
 * layout"; the Makefile's include paths enforce it).
 *
 * Conventions (see shared STYLE.md): functions that can fail return 0 or a
 * negative K25_E* code and fill a caller-provided struct k25_error.
 *
 * The HDF5 store (h5store.c): the small HDF5 layer every k25 output file
 * goes through (run traces, sweep points, attention benchmarks).
 *
 * Files are written under a temporary name (PATH.tmp.PID) and renamed to
 * PATH only by k25_h5_commit, after a flush, close and fsync: a run killed
 * at any moment leaves no file under the final name.  Every file has a
 * /meta group with the attributes `schema_version` (int) and `kind`
 * ("run", "attn-bench", ...), which readers check before trusting it.
 * Tables are 1-D compound datasets described by column specs, chunked,
 * shuffled and deflated (when the filter is available), stored with
 * little-endian standard types whatever the host.
 *
 * Files are written in the HDF5 1.10 file format (H5Pset_libver_bounds),
 * whose metadata is checksummed, and every dataset carries the Fletcher32
 * checksum filter (when available): a flipped byte is a read error, not a
 * silently different number.  Reading them needs HDF5 1.10.0 or newer.
 *
 * Readers do not believe what a file says about sizes: before any read
 * they check every compound member's class, size and offset against the
 * columns asked for, the element type of arrays, the chunk size (at most
 * K25_H5_MAX_CHUNK_BYTES), that the chunks stored can hold the claimed
 * length, and the length against the count the caller expects; a file
 * that fails is K25_EFORMAT naming the object, and nothing large is
 * allocated before the checks pass.  (Files written before the 1.10 format
 * - schema version 1 as first shipped - have no checksums; these checks
 * are what stands between them and a crash.)
 */
#ifndef K25_UTIL_H
#define K25_UTIL_H

#include <hdf5.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <yaml.h>

/* The tool's version (provenance, every HDF5 file's /meta). */
#define K25_VERSION "0.1.0"

/* ---------------------------------------------------------------- errors */

enum {
    K25_OK = 0,
    K25_EINVAL = -1,       /* bad argument or bad value in an input   */
    K25_ENOMEM = -2,       /* allocation failed or budget exhausted   */
    K25_EIO = -3,          /* read/write/open failed                  */
    K25_EFORMAT = -4,      /* malformed file                          */
    K25_ENOTFOUND = -5,    /* missing file, key, tensor or preset     */
    K25_ERANGE = -6,       /* value out of its allowed range          */
    K25_EUNSUPPORTED = -7, /* valid but not supported by this build   */
    K25_EINTERNAL = -8,    /* should not happen                       */
};

/*
 * Where and why something failed.  msg is the full human-readable line,
 * already prefixed with "FILE:LINE: " and "key 'x': " when those are known;
 * file/line/field repeat them for programs and tests.
 */
struct k25_error {
    int code;
    int line;         /* 0 when not known */
    char file[256];   /* "" when not known */
    char field[96];   /* key, tensor or field name; "" when not known */
    char msg[1024];
};

const char *k25_strerror(int code);

/*
 * Fills err (if not NULL) and returns code, so callers can write
 * `return k25_error_set(err, K25_EINVAL, path, line, "key", "...")`.
 * file may be NULL, line 0, field NULL when not known.
 */
int k25_error_set(struct k25_error *err, int code, const char *file, int line,
                  const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

void k25_error_clear(struct k25_error *err);

/* K25_ASSERT: a broken internal invariant aborts with expression, file, line. */
void k25_assert_fail(const char *expr, const char *file, int line) __attribute__((noreturn));
#define K25_ASSERT(e) ((e) ? (void)0 : k25_assert_fail(#e, __FILE__, __LINE__))

/* ----------------------------------------------------------------- time */

uint64_t k25_now_ns(void); /* CLOCK_MONOTONIC in nanoseconds */

/* ------------------------------------------------ shared input/output */

/*
 * Loads a whole YAML file into *doc (the caller deletes it with
 * yaml_document_delete).  A missing file is K25_ENOTFOUND, a syntax error
 * K25_EFORMAT naming the file and line.
 */
int k25_yaml_load(const char *path, yaml_document_t *doc, struct k25_error *err);
/* v as the shortest decimal that reads back as the same double ("0.85"); .nan / .inf (yamldoc.c). */
void k25_fmt_double(double v, char *buf, size_t n);

/* The value at a dot-separated key path ("ttft_ms.p99") in o, or NULL. */
const json_t *k25_json_path(const json_t *o, const char *path);

/*
 * Checks, before any work is done, that path can be an output file: not a
 * directory, not a device or pipe (results are renamed into place, which
 * would replace it), and its folder exists and is writable.  K25_EINVAL
 * naming the path and the option (flag, may be NULL) otherwise: every
 * command exits 2 on it.  Creates nothing.
 */
int k25_output_file_check(const char *path, const char *flag, struct k25_error *err);

/*
 * Is the writer of a temporary NAME.tmp.PID (k25_afile, h5store, the report
 * folder) alive on this machine?  False for a name without a pid or a dead
 * pid; true for a live one (or one we may not signal).  Cleanups remove
 * only temporaries whose writer is gone, so a concurrent writer keeps its file.
 */
bool k25_tmp_writer_alive(const char *name);

/* The folder PATH is in: "." for a bare name, "/" for a top-level entry (cut to n - 1 bytes). */
void k25_path_parent(const char *path, char *out, size_t n);

/*
 * A result file written atomically: k25_afile_open creates PATH.tmp.PID
 * (a.f is the stream to write), k25_afile_commit checks, flushes, fsyncs,
 * closes and renames it onto PATH, k25_afile_abort removes it.  On a failed
 * commit nothing is left under either name.
 */
struct k25_afile {
    FILE *f;
    char path[1024];
    char tmp[1100];
};
int k25_afile_open(struct k25_afile *a, const char *path, struct k25_error *err);
int k25_afile_commit(struct k25_afile *a, struct k25_error *err);
void k25_afile_abort(struct k25_afile *a);
/* Whole text (a newline is added when missing) or JSON (indented) atomically. */
int k25_write_text_atomic(const char *path, const char *text, struct k25_error *err);
int k25_write_json_atomic(const char *path, const json_t *j, struct k25_error *err);

/* ------------------------------------------------- HDF5 store (h5store.c) */


/*
 * Layout version written into every file.  2: run traces carry
 * /tokens/margin (the token-identity rule's top-1 margins,
 * docs/trace-schema.md).  3: run traces carry the elastic queue's columns
 * (/requests priority, spilled, replayed, degraded, timed_out,
 * ttft_sla_ms; /timeline queue depths and breaker state).  Readers accept
 * every version from K25_H5_SCHEMA_MIN_VERSION up; what a version lacks
 * (margins in 1, the queue's columns before 3) reads as absent.
 */
#define K25_H5_SCHEMA_VERSION 3
#define K25_H5_SCHEMA_MIN_VERSION 1

/* The count argument of the readers when the caller cannot know it. */
#define K25_H5_ANY_COUNT SIZE_MAX
/* Largest chunk a reader accepts (the writer makes chunks of ~64 KiB). */
#define K25_H5_MAX_CHUNK_BYTES ((size_t)1 << 20)
/* Largest compound row a reader accepts. */
#define K25_H5_MAX_ROW_BYTES ((size_t)64 << 10)

struct k25_h5 {
    hid_t file;            /* H5I_INVALID_HID when closed */
    hid_t meta;            /* the /meta group */
    char path[1024];       /* final name */
    char tmp_path[1100];   /* name while being written */
    bool writing;
    int64_t schema_version; /* of a file opened for reading (k25_h5_open_read) */
};

enum k25_h5_type { K25_H5_F64, K25_H5_F32, K25_H5_I64, K25_H5_I32, K25_H5_U8, K25_H5_STR };

/* One column of a table: a member of the caller's row struct. */
struct k25_h5_col {
    const char *name;
    enum k25_h5_type type;
    size_t offset;         /* offsetof(row struct, member) */
    size_t str_len;        /* K25_H5_STR: size of the char array member (NUL-padded) */
};

/* Creates PATH.tmp.PID with /meta (schema_version, kind) and writes it to
 * disk, so that an unusable path (K25_EINVAL: a directory, a missing or
 * unwritable folder; k25_output_file_check) or a full disk (K25_EIO) fails
 * here, before the caller measures anything.  The error names the path and
 * the reason. */
int k25_h5_create(struct k25_h5 *h, const char *path, const char *kind, struct k25_error *err);
/* Flushes, closes, fsyncs and renames the file to its final name. */
int k25_h5_commit(struct k25_h5 *h, struct k25_error *err);
/* Closes and removes the temporary file (safe to call after commit: no-op). */
void k25_h5_abort(struct k25_h5 *h);

/*
 * Opens a finished file for reading and checks it is a k25 file of the
 * given kind (NULL: any kind) with a known schema version; the error
 * names the file and what is wrong.
 */
int k25_h5_open_read(struct k25_h5 *h, const char *path, const char *kind, struct k25_error *err);
/* The same on a file held in memory (buf[len], copied; the HDF5 core
 * driver, nothing on disk); name stands for the file in messages. */
int k25_h5_open_read_image(struct k25_h5 *h, const char *name, const void *buf, size_t len, const char *kind,
                           struct k25_error *err);
void k25_h5_close(struct k25_h5 *h);

/* A group under the file root (created when writing, opened when reading).
 * The caller closes it with H5Gclose. */
hid_t k25_h5_group(struct k25_h5 *h, const char *name, struct k25_error *err);

/* Scalar attributes on any object (file, group, dataset). */
int k25_h5_attr_str(hid_t obj, const char *name, const char *value, struct k25_error *err);
int k25_h5_attr_f64(hid_t obj, const char *name, double value, struct k25_error *err);
int k25_h5_attr_i64(hid_t obj, const char *name, int64_t value, struct k25_error *err);
/* Readers: *out is malloc'd for strings (caller frees).  The attribute must
 * be a scalar of the right class; a string is at most the file's size. */
int k25_h5_get_attr_str(hid_t obj, const char *name, char **out, struct k25_error *err);
int k25_h5_get_attr_f64(hid_t obj, const char *name, double *out, struct k25_error *err);
int k25_h5_get_attr_i64(hid_t obj, const char *name, int64_t *out, struct k25_error *err);
/* True when obj has an attribute called name. */
bool k25_h5_has_attr(hid_t obj, const char *name);

/*
 * Writes rows[nrows] (each row_size bytes) as a compound dataset `name`
 * under parent with the given columns.  nrows may be 0.
 */
int k25_h5_write_table(hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                       size_t row_size, const void *rows, size_t nrows, struct k25_error *err);
/*
 * Reads a table written with the same column names into a malloc'd array
 * of row_size-byte rows (*rows, caller frees; *nrows rows).  Columns are
 * matched by name; a missing column, a column of another type or size, a
 * member lying outside the stored row, or a row count other than `expect`
 * (K25_H5_ANY_COUNT: any count the stored chunks can hold) is K25_EFORMAT
 * naming it, found before the rows are allocated.
 */
int k25_h5_read_table(hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                      size_t row_size, size_t expect, void **rows, size_t *nrows, struct k25_error *err);

/* 1-D numeric arrays (e.g. ragged per-token times plus offsets). */
int k25_h5_write_array(hid_t parent, const char *name, enum k25_h5_type type, const void *data,
                       size_t n, struct k25_error *err);
/*
 * Reads an array stored with exactly `type` into malloc'd *data (caller
 * frees; *n elements).  A length other than `expect` (K25_H5_ANY_COUNT:
 * any length the stored chunks can hold) or another element type is
 * K25_EFORMAT, found before anything is allocated.
 */
int k25_h5_read_array(hid_t parent, const char *name, enum k25_h5_type type, size_t expect, void **data,
                      size_t *n, struct k25_error *err);

#endif /* K25_UTIL_H */
