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
 */
#ifndef K25_H5STORE_H
#define K25_H5STORE_H

#include "k25.h"

#include <hdf5.h>

#define K25_H5_SCHEMA_VERSION 1

struct k25_h5 {
    hid_t file;            /* H5I_INVALID_HID when closed */
    hid_t meta;            /* the /meta group */
    char path[1024];       /* final name */
    char tmp_path[1100];   /* name while being written */
    bool writing;
};

enum k25_h5_type { K25_H5_F64, K25_H5_F32, K25_H5_I64, K25_H5_I32, K25_H5_U8, K25_H5_STR };

/* One column of a table: a member of the caller's row struct. */
struct k25_h5_col {
    const char *name;
    enum k25_h5_type type;
    size_t offset;         /* offsetof(row struct, member) */
    size_t str_len;        /* K25_H5_STR: size of the char array member (NUL-padded) */
};

/* Creates PATH.tmp.PID with /meta (schema_version, kind).  Fails with the
 * path and reason when the directory is missing or unwritable. */
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
void k25_h5_close(struct k25_h5 *h);

/* A group under the file root (created when writing, opened when reading).
 * The caller closes it with H5Gclose. */
hid_t k25_h5_group(struct k25_h5 *h, const char *name, struct k25_error *err);

/* Scalar attributes on any object (file, group, dataset). */
int k25_h5_attr_str(hid_t obj, const char *name, const char *value, struct k25_error *err);
int k25_h5_attr_f64(hid_t obj, const char *name, double value, struct k25_error *err);
int k25_h5_attr_i64(hid_t obj, const char *name, int64_t value, struct k25_error *err);
/* Readers: *out is malloc'd for strings (caller frees). */
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
 * matched by name; a missing column is an error naming it.
 */
int k25_h5_read_table(hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                      size_t row_size, void **rows, size_t *nrows, struct k25_error *err);

/* 1-D numeric arrays (e.g. ragged per-token times plus offsets). */
int k25_h5_write_array(hid_t parent, const char *name, enum k25_h5_type type, const void *data,
                       size_t n, struct k25_error *err);
int k25_h5_read_array(hid_t parent, const char *name, enum k25_h5_type type, void **data, size_t *n,
                      struct k25_error *err);

#endif
