/*
 * h5store.h - the small HDF5 layer every k25 output file goes through
 * (run traces, sweep points, attention benchmarks).
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
#ifndef K25_H5STORE_H
#define K25_H5STORE_H

#include "k25.h"

#include <hdf5.h>

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

#endif
