/*
 * h5store.c - HDF5 files for k25 results: atomic create/commit, /meta
 * checks, attributes, compound tables and 1-D arrays.  See k25util.h.
 *
 * Every hid_t starts invalid, every call is checked, and each function has
 * one exit path that closes what it opened.  HDF5's own error stack
 * printing is switched off; errors are reported as k25 errors naming the
 * file and the object.
 */
#include "k25util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static hid_t group_create(hid_t file, const char *name);

static void quiet_hdf5(void)
{
    static bool done;
    if (!done) {
        /* No library shutdown at exit: after a failed write (disk full) the
         * file cannot be closed, and HDF5 1.10's exit handler crashes
         * retrying it.  Every file here is closed explicitly. */
        H5dont_atexit();
        H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
        done = true;
    }
}

/* The file name of any object, for messages. */
static const char *obj_file(hid_t obj, char *buf, size_t n)
{
    if (H5Fget_name(obj, buf, n) < 0)
        snprintf(buf, n, "(hdf5)");
    return buf;
}

/* The size in bytes of the file holding obj (0 when unknown). */
static size_t file_size_of(hid_t obj)
{
    hsize_t sz = 0;
    hid_t f = H5Iget_file_id(obj);
    if (f < 0)
        return 0;
    if (H5Fget_filesize(f, &sz) < 0)
        sz = 0;
    H5Fclose(f);
    return (size_t)sz;
}

static hid_t file_type_of(enum k25_h5_type t, size_t str_len)
{
    switch (t) {
    case K25_H5_F64: return H5Tcopy(H5T_IEEE_F64LE);
    case K25_H5_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case K25_H5_I64: return H5Tcopy(H5T_STD_I64LE);
    case K25_H5_I32: return H5Tcopy(H5T_STD_I32LE);
    case K25_H5_U8: return H5Tcopy(H5T_STD_U8LE);
    case K25_H5_STR: {
        hid_t s = H5Tcopy(H5T_C_S1);
        if (s >= 0 && (H5Tset_size(s, str_len) < 0 || H5Tset_strpad(s, H5T_STR_NULLPAD) < 0 ||
                       H5Tset_cset(s, H5T_CSET_UTF8) < 0)) {
            H5Tclose(s);
            return H5I_INVALID_HID;
        }
        return s;
    }
    }
    return H5I_INVALID_HID;
}

static hid_t mem_type_of(enum k25_h5_type t, size_t str_len)
{
    switch (t) {
    case K25_H5_F64: return H5Tcopy(H5T_NATIVE_DOUBLE);
    case K25_H5_F32: return H5Tcopy(H5T_NATIVE_FLOAT);
    case K25_H5_I64: return H5Tcopy(H5T_NATIVE_INT64);
    case K25_H5_I32: return H5Tcopy(H5T_NATIVE_INT32);
    case K25_H5_U8: return H5Tcopy(H5T_NATIVE_UINT8);
    case K25_H5_STR: return file_type_of(t, str_len);
    }
    return H5I_INVALID_HID;
}

static size_t type_size(enum k25_h5_type t, size_t str_len)
{
    switch (t) {
    case K25_H5_F64:
    case K25_H5_I64: return 8;
    case K25_H5_F32:
    case K25_H5_I32: return 4;
    case K25_H5_U8: return 1;
    case K25_H5_STR: return str_len;
    }
    return 0;
}

int k25_h5_create(struct k25_h5 *h, const char *path, const char *kind, struct k25_error *err)
{
    quiet_hdf5();
    memset(h, 0, sizeof(*h));
    h->file = h->meta = H5I_INVALID_HID;
    int rc = K25_OK;
    snprintf(h->path, sizeof(h->path), "%s", path);
    snprintf(h->tmp_path, sizeof(h->tmp_path), "%s.tmp.%ld", path, (long)getpid());
    if ((rc = k25_output_file_check(path, NULL, err)) != K25_OK)
        return rc;
    /* the 1.10 file format: checksummed superblock, object headers and chunk indexes */
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (fapl < 0 || H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot set up the HDF5 file format (1.10)");
    }
    h->file = H5Fcreate(h->tmp_path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    if (h->file < 0) {
        /* HDF5 does not say why; find out with a plain open and a first write */
        static const char zeros[4096];
        int fd = open(h->tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int e = errno;
        bool wrote = false;
        if (fd >= 0) {
            errno = 0;
            wrote = write(fd, zeros, sizeof(zeros)) == (ssize_t)sizeof(zeros) && fsync(fd) == 0;
            e = errno ? errno : ENOSPC;
            close(fd);
            unlink(h->tmp_path);
        }
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot create the output file: %s",
                             fd >= 0 && wrote ? "HDF5 refused it" : strerror(e));
    }
    h->writing = true;
    h->meta = group_create(h->file, "/meta");
    if (h->meta < 0) {
        rc = k25_error_set(err, K25_EIO, path, 0, "/meta", "cannot create the group");
        goto out_abort;
    }
    if ((rc = k25_h5_attr_i64(h->meta, "schema_version", K25_H5_SCHEMA_VERSION, err)) != K25_OK ||
        (rc = k25_h5_attr_str(h->meta, "kind", kind, err)) != K25_OK ||
        (rc = k25_h5_attr_str(h->meta, "k25_version", K25_VERSION, err)) != K25_OK)
        goto out_abort;
    /* write it now: a full disk fails here, before the caller measures anything */
    if (H5Fflush(h->file, H5F_SCOPE_LOCAL) < 0) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot write the output file (disk full?)");
        goto out_abort;
    }
    return K25_OK;

out_abort:
    k25_h5_abort(h);
    return rc;
}

int k25_h5_commit(struct k25_h5 *h, struct k25_error *err)
{
    int rc = K25_OK;
    if (h->meta >= 0 && H5Gclose(h->meta) < 0)
        rc = k25_error_set(err, K25_EIO, h->path, 0, "/meta", "closing the group failed");
    h->meta = H5I_INVALID_HID;
    if (rc == K25_OK && H5Fflush(h->file, H5F_SCOPE_GLOBAL) < 0)
        rc = k25_error_set(err, K25_EIO, h->path, 0, NULL, "flushing the file failed (disk full?)");
    if (H5Fclose(h->file) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, NULL, "closing the file failed (disk full?)");
    h->file = H5I_INVALID_HID;
    if (rc == K25_OK)
        rc = k25_atomic_finish_closed(h->tmp_path, h->path, err);
    else
        unlink(h->tmp_path);
    h->writing = false;
    return rc;
}

void k25_h5_abort(struct k25_h5 *h)
{
    if (h->meta >= 0)
        H5Gclose(h->meta);
    if (h->file >= 0)
        H5Fclose(h->file);
    h->meta = h->file = H5I_INVALID_HID;
    if (h->writing)
        unlink(h->tmp_path);
    h->writing = false;
}

/* Checks an open file's /meta: a k25 file of kind (NULL: any) with a known schema version. */
static int check_meta(struct k25_h5 *h, const char *kind, struct k25_error *err)
{
    int rc = K25_OK;
    char *got_kind = NULL;
    int64_t ver = 0;
    const char *path = h->path;
    if (H5Lexists(h->file, "/meta", H5P_DEFAULT) <= 0 ||
        (h->meta = H5Gopen2(h->file, "/meta", H5P_DEFAULT)) < 0) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, "/meta", "not a k25 file (no /meta group)");
        goto out;
    }
    if (k25_h5_get_attr_i64(h->meta, "schema_version", &ver, NULL) != K25_OK ||
        k25_h5_get_attr_str(h->meta, "kind", &got_kind, NULL) != K25_OK) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, "/meta", "not a k25 file (no schema_version/kind)");
        goto out;
    }
    if (ver < K25_H5_SCHEMA_MIN_VERSION || ver > K25_H5_SCHEMA_VERSION) {
        rc = k25_error_set(err, K25_EUNSUPPORTED, path, 0, "schema_version",
                           "schema version %lld is not one this k25 reads (%d..%d)", (long long)ver,
                           K25_H5_SCHEMA_MIN_VERSION, K25_H5_SCHEMA_VERSION);
        goto out;
    }
    h->schema_version = ver;
    if (kind && strcmp(kind, got_kind) != 0)
        rc = k25_error_set(err, K25_EINVAL, path, 0, "kind", "is a '%s' file, expected '%s'", got_kind, kind);
out:
    free(got_kind);
    return rc;
}

int k25_h5_open_read(struct k25_h5 *h, const char *path, const char *kind, struct k25_error *err)
{
    quiet_hdf5();
    memset(h, 0, sizeof(*h));
    h->file = h->meta = H5I_INVALID_HID;
    snprintf(h->path, sizeof(h->path), "%s", path);
    int rc;
    struct stat st;
    if (access(path, R_OK) != 0)
        return k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL,
                             "cannot read: %s", strerror(errno));
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return k25_error_set(err, K25_EINVAL, path, 0, NULL, "is a directory, not a k25 HDF5 file");
    if (H5Fis_hdf5(path) <= 0)
        return k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                             "not an HDF5 file (or a truncated one)");
    h->file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (h->file < 0)
        return k25_error_set(err, K25_EFORMAT, path, 0, NULL, "HDF5 cannot open it (corrupt?)");
    if ((rc = check_meta(h, kind, err)) != K25_OK)
        k25_h5_close(h);
    return rc;
}

int k25_h5_open_read_image(struct k25_h5 *h, const char *name, const void *buf, size_t len, const char *kind,
                           struct k25_error *err)
{
    quiet_hdf5();
    memset(h, 0, sizeof(*h));
    h->file = h->meta = H5I_INVALID_HID;
    snprintf(h->path, sizeof(h->path), "%s", name);
    int rc;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    /* the core driver on a copy of buf: nothing touches the disk (backing store off) */
    if (fapl < 0 || H5Pset_fapl_core(fapl, 65536, 0) < 0 || (len > 0 && H5Pset_file_image(fapl, (void *)buf, len) < 0)) {
        if (fapl >= 0)
            H5Pclose(fapl);
        return k25_error_set(err, K25_EINTERNAL, name, 0, NULL, "cannot set up the HDF5 core driver");
    }
    h->file = len > 0 ? H5Fopen(name, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
    H5Pclose(fapl);
    if (h->file < 0)
        return k25_error_set(err, K25_EFORMAT, name, 0, NULL, "not an HDF5 file (or a corrupt one)");
    if ((rc = check_meta(h, kind, err)) != K25_OK)
        k25_h5_close(h);
    return rc;
}

void k25_h5_close(struct k25_h5 *h)
{
    if (h->meta >= 0)
        H5Gclose(h->meta);
    if (h->file >= 0)
        H5Fclose(h->file);
    h->meta = h->file = H5I_INVALID_HID;
}

/*
 * Creates group name keeping its attributes in the object header (compact
 * storage, up to 1000 of them) instead of moving them to a fractal heap
 * past 8: the 1.10 format checksums object headers, not the heap's direct
 * blocks, so a flipped byte in a dense attribute (the summary JSON, a
 * headline figure) would read back silently changed.  H5I_INVALID_HID on
 * failure.
 */
static hid_t group_create(hid_t file, const char *name)
{
    hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g = H5I_INVALID_HID;
    if (gcpl >= 0 && H5Pset_attr_phase_change(gcpl, 1000, 0) >= 0)
        g = H5Gcreate2(file, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (gcpl >= 0)
        H5Pclose(gcpl);
    return g;
}

hid_t k25_h5_group(struct k25_h5 *h, const char *name, struct k25_error *err)
{
    hid_t g;
    if (h->writing && H5Lexists(h->file, name, H5P_DEFAULT) <= 0)
        g = group_create(h->file, name);
    else
        g = H5Lexists(h->file, name, H5P_DEFAULT) > 0 ? H5Gopen2(h->file, name, H5P_DEFAULT)
                                                       : H5I_INVALID_HID;
    if (g < 0)
        k25_error_set(err, h->writing ? K25_EIO : K25_EFORMAT, h->path, 0, name,
                      h->writing ? "cannot create the group" : "missing group");
    return g;
}

/* Writes a scalar attribute of the given file/memory types. */
static int attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *val,
                      struct k25_error *err)
{
    char fb[512];
    int rc = K25_OK;
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    if ((space = H5Screate(H5S_SCALAR)) < 0)
        goto out_fail;
    if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0)
        goto out_fail;
    if ((attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT)) < 0)
        goto out_fail;
    if (H5Awrite(attr, mtype, val) < 0)
        goto out_fail;
    goto out;
out_fail:
    rc = k25_error_set(err, K25_EIO, obj_file(obj, fb, sizeof(fb)), 0, name, "cannot write the attribute");
out:
    if (attr >= 0)
        H5Aclose(attr);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

int k25_h5_attr_str(hid_t obj, const char *name, const char *value, struct k25_error *err)
{
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t < 0 || H5Tset_size(t, strlen(value) + 1) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
        if (t >= 0)
            H5Tclose(t);
        char fb[512];
        return k25_error_set(err, K25_EIO, obj_file(obj, fb, sizeof(fb)), 0, name, "string type failed");
    }
    int rc = attr_write(obj, name, t, t, value, err);
    H5Tclose(t);
    return rc;
}

int k25_h5_attr_f64(hid_t obj, const char *name, double value, struct k25_error *err)
{
    return attr_write(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, err);
}

int k25_h5_attr_i64(hid_t obj, const char *name, int64_t value, struct k25_error *err)
{
    return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value, err);
}

bool k25_h5_has_attr(hid_t obj, const char *name)
{
    return H5Aexists(obj, name) > 0;
}

/* True when attribute attr holds one element (a scalar or a 1-element array). */
static bool attr_is_scalar(hid_t attr)
{
    hid_t space = H5Aget_space(attr);
    if (space < 0)
        return false;
    hssize_t np = H5Sget_simple_extent_npoints(space);
    H5Sclose(space);
    return np == 1;
}

/* Reads a numeric scalar attribute; the stored type must be of class want. */
static int attr_read(hid_t obj, const char *name, H5T_class_t want, hid_t mtype, void *out, struct k25_error *err)
{
    char fb[512];
    int rc = K25_OK;
    hid_t attr = H5I_INVALID_HID, ftype = H5I_INVALID_HID;
    if (H5Aexists(obj, name) <= 0)
        return k25_error_set(err, K25_ENOTFOUND, obj_file(obj, fb, sizeof(fb)), 0, name, "missing attribute");
    /* a stored array would be copied whole into *out: one element only */
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (ftype = H5Aget_type(attr)) < 0 ||
        H5Tget_class(ftype) != want || H5Tget_size(ftype) > 16 || !attr_is_scalar(attr) ||
        H5Aread(attr, mtype, out) < 0)
        rc = k25_error_set(err, K25_EFORMAT, obj_file(obj, fb, sizeof(fb)), 0, name,
                           "unreadable attribute (wrong type or shape, or a damaged file)");
    if (ftype >= 0)
        H5Tclose(ftype);
    if (attr >= 0)
        H5Aclose(attr);
    return rc;
}

int k25_h5_get_attr_f64(hid_t obj, const char *name, double *out, struct k25_error *err)
{
    return attr_read(obj, name, H5T_FLOAT, H5T_NATIVE_DOUBLE, out, err);
}

int k25_h5_get_attr_i64(hid_t obj, const char *name, int64_t *out, struct k25_error *err)
{
    return attr_read(obj, name, H5T_INTEGER, H5T_NATIVE_INT64, out, err);
}

int k25_h5_get_attr_str(hid_t obj, const char *name, char **out, struct k25_error *err)
{
    char fb[512];
    int rc = K25_OK;
    hid_t attr = H5I_INVALID_HID, ftype = H5I_INVALID_HID, mtype = H5I_INVALID_HID;
    *out = NULL;
    if (H5Aexists(obj, name) <= 0)
        return k25_error_set(err, K25_ENOTFOUND, obj_file(obj, fb, sizeof(fb)), 0, name, "missing attribute");
    if ((attr = H5Aopen(obj, name, H5P_DEFAULT)) < 0 || (ftype = H5Aget_type(attr)) < 0 ||
        H5Tget_class(ftype) != H5T_STRING || H5Tis_variable_str(ftype) != 0 || !attr_is_scalar(attr))
        goto out_fail;
    size_t n = H5Tget_size(ftype);
    /* a stored string is no longer than the file that holds it */
    if (n == 0 || n > file_size_of(obj))
        goto out_fail;
    /* same character set as stored: HDF5 will not convert ASCII <-> UTF-8 */
    if ((mtype = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mtype, n + 1) < 0 ||
        H5Tset_cset(mtype, H5Tget_cset(ftype)) < 0)
        goto out_fail;
    if (!(*out = calloc(1, n + 1)) || H5Aread(attr, mtype, *out) < 0)
        goto out_fail;
    goto out;
out_fail:
    free(*out);
    *out = NULL;
    rc = k25_error_set(err, K25_EFORMAT, obj_file(obj, fb, sizeof(fb)), 0, name, "not a string attribute");
out:
    if (mtype >= 0)
        H5Tclose(mtype);
    if (ftype >= 0)
        H5Tclose(ftype);
    if (attr >= 0)
        H5Aclose(attr);
    return rc;
}

/* Builds the memory and file compound types for cols. */
static int compound_types(const struct k25_h5_col *cols, int ncols, size_t row_size, hid_t *mt, hid_t *ft)
{
    size_t fsize = 0;
    for (int i = 0; i < ncols; i++)
        fsize += type_size(cols[i].type, cols[i].str_len);
    *mt = H5Tcreate(H5T_COMPOUND, row_size);
    *ft = H5Tcreate(H5T_COMPOUND, fsize);
    if (*mt < 0 || *ft < 0)
        return -1;
    size_t foff = 0;
    for (int i = 0; i < ncols; i++) {
        hid_t m = mem_type_of(cols[i].type, cols[i].str_len), f = file_type_of(cols[i].type, cols[i].str_len);
        int bad = m < 0 || f < 0 || H5Tinsert(*mt, cols[i].name, cols[i].offset, m) < 0 ||
                  H5Tinsert(*ft, cols[i].name, foff, f) < 0;
        if (m >= 0)
            H5Tclose(m);
        if (f >= 0)
            H5Tclose(f);
        if (bad)
            return -1;
        foff += type_size(cols[i].type, cols[i].str_len);
    }
    return 0;
}

/* Creates a chunked, shuffled+deflated+checksummed 1-D dataset of n elements. */
static hid_t create_1d(hid_t parent, const char *name, hid_t ftype, size_t n, size_t elem_bytes)
{
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, ds = H5I_INVALID_HID;
    hsize_t dims = n, maxdims = H5S_UNLIMITED;
    /* chunks of ~64 KiB, at least one element */
    hsize_t chunk = elem_bytes ? 65536 / elem_bytes : 1024;
    if (chunk < 1)
        chunk = 1;
    if (n > 0 && chunk > n)
        chunk = n;
    if ((space = H5Screate_simple(1, &dims, &maxdims)) < 0 || (dcpl = H5Pcreate(H5P_DATASET_CREATE)) < 0 ||
        H5Pset_chunk(dcpl, 1, &chunk) < 0)
        goto out;
    if (H5Zfilter_avail(H5Z_FILTER_SHUFFLE) > 0 && H5Pset_shuffle(dcpl) < 0)
        goto out;
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0 && H5Pset_deflate(dcpl, 4) < 0)
        goto out;
    /* last in the pipeline: the checksum covers the bytes as stored, so a
     * damaged chunk fails before it is decompressed */
    if (H5Zfilter_avail(H5Z_FILTER_FLETCHER32) > 0 && H5Pset_fletcher32(dcpl) < 0)
        goto out;
    ds = H5Dcreate2(parent, name, ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
out:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (space >= 0)
        H5Sclose(space);
    return ds;
}

int k25_h5_write_table(hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                       size_t row_size, const void *rows, size_t nrows, struct k25_error *err)
{
    char fb[512];
    int rc = K25_OK;
    hid_t mt = H5I_INVALID_HID, ft = H5I_INVALID_HID, ds = H5I_INVALID_HID;
    if (compound_types(cols, ncols, row_size, &mt, &ft) < 0 ||
        (ds = create_1d(parent, name, ft, nrows, H5Tget_size(ft))) < 0 ||
        (nrows > 0 && H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0))
        rc = k25_error_set(err, K25_EIO, obj_file(parent, fb, sizeof(fb)), 0, name,
                           "cannot write the table (disk full?)");
    if (ds >= 0 && H5Dclose(ds) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, obj_file(parent, fb, sizeof(fb)), 0, name, "closing failed");
    if (mt >= 0)
        H5Tclose(mt);
    if (ft >= 0)
        H5Tclose(ft);
    return rc;
}

/* "/group/name" of a child of parent, for messages. */
static const char *obj_path(hid_t parent, const char *name, char *buf, size_t n)
{
    char pn[512];
    if (name[0] == '/' || H5Iget_name(parent, pn, sizeof(pn)) <= 0)
        snprintf(buf, n, "%s", name);
    else
        snprintf(buf, n, "%s/%s", strcmp(pn, "/") ? pn : "", name);
    return buf;
}

static const char *type_name(enum k25_h5_type t)
{
    switch (t) {
    case K25_H5_F64: return "float64";
    case K25_H5_F32: return "float32";
    case K25_H5_I64: return "int64";
    case K25_H5_I32: return "int32";
    case K25_H5_U8: return "uint8";
    case K25_H5_STR: return "string";
    }
    return "?";
}

/*
 * Opens the 1-D dataset name under parent; *n is its length as the file
 * claims it (not yet believed: check_extent).  K25_EFORMAT when missing or
 * not 1-D.
 */
static hid_t open_1d(hid_t parent, const char *name, size_t *n, struct k25_error *err)
{
    char fb[512], ob[600];
    hid_t ds = H5I_INVALID_HID, space = H5I_INVALID_HID;
    hsize_t dims = 0;
    *n = 0;
    if (H5Lexists(parent, name, H5P_DEFAULT) <= 0) {
        k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0, obj_path(parent, name, ob, sizeof(ob)),
                      "missing dataset");
        return H5I_INVALID_HID;
    }
    if ((ds = H5Dopen2(parent, name, H5P_DEFAULT)) < 0 || (space = H5Dget_space(ds)) < 0 ||
        H5Sget_simple_extent_ndims(space) != 1 || H5Sget_simple_extent_dims(space, &dims, NULL) < 0 ||
        dims > (hsize_t)(SIZE_MAX / 2)) {
        k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0, obj_path(parent, name, ob, sizeof(ob)),
                      "not a 1-D dataset (or a damaged one)");
        if (ds >= 0)
            H5Dclose(ds);
        ds = H5I_INVALID_HID;
    }
    if (space >= 0)
        H5Sclose(space);
    *n = (size_t)dims;
    return ds;
}

/*
 * Checks the length n a dataset claims before anything is allocated for
 * it: equal to expect (unless K25_H5_ANY_COUNT); chunks of at most
 * K25_H5_MAX_CHUNK_BYTES, enough of them stored to hold n elements (the
 * writer stores every chunk it covers); the stored chunks no larger than
 * the file; and enough bytes stored (deflate expands at most ~1032:1;
 * unfiltered data not at all).  A corrupted length byte would otherwise
 * make the reader (or libhdf5) allocate, fill and read gigabytes.
 */
static int check_extent(hid_t ds, hid_t parent, const char *name, size_t n, size_t elem_bytes, size_t expect,
                        struct k25_error *err)
{
    char fb[512], ob[600];
    int rc = K25_OK;
    hid_t dcpl = H5I_INVALID_HID;
#define BAD(...)                                                                                                   \
    do {                                                                                                           \
        rc = k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0,                                  \
                           obj_path(parent, name, ob, sizeof(ob)), __VA_ARGS__);                                   \
        goto out;                                                                                                  \
    } while (0)
    if (expect != K25_H5_ANY_COUNT && n != expect)
        BAD("has %zu elements where %zu are expected (a damaged file?)", n, expect);
    if (n == 0)
        goto out;
    if (elem_bytes == 0 || n > SIZE_MAX / elem_bytes)
        BAD("claims an impossible size");
    if ((dcpl = H5Dget_create_plist(ds)) < 0)
        BAD("unreadable storage properties (a damaged file?)");
    H5D_layout_t layout = H5Pget_layout(dcpl);
    int nfilters = H5Pget_nfilters(dcpl);
    if (nfilters < 0)
        BAD("unreadable filter pipeline (a damaged file?)");
    if (layout == H5D_CHUNKED) {
        hsize_t chunk = 0, nchunks = 0;
        if (H5Pget_chunk(dcpl, 1, &chunk) != 1 || chunk == 0 || chunk > K25_H5_MAX_CHUNK_BYTES / elem_bytes)
            BAD("chunks of a size no k25 file has (a damaged file?)");
        hid_t space = H5Dget_space(ds); /* 1.10 refuses H5S_ALL here */
        herr_t e = space >= 0 ? H5Dget_num_chunks(ds, space, &nchunks) : -1;
        if (space >= 0)
            H5Sclose(space);
        if (e < 0)
            BAD("unreadable chunk index (a damaged file?)");
        if (nchunks > (hsize_t)n || (hsize_t)n > nchunks * chunk)
            BAD("claims %zu elements, but %llu chunks of %llu are stored (a damaged file?)", n,
                (unsigned long long)nchunks, (unsigned long long)chunk);
    } else if (layout != H5D_CONTIGUOUS && layout != H5D_COMPACT) {
        BAD("a storage layout no k25 file has");
    }
    /* every stored chunk lies in the file: a larger total is a damaged chunk index (HDF5
     * would allocate what it claims for one chunk: 4 GB for a flipped size byte) */
    hsize_t stored = H5Dget_storage_size(ds);
    size_t fsize = file_size_of(ds);
    if (fsize && stored > fsize)
        BAD("claims %llu stored bytes in a %zu-byte file (a damaged chunk index?)", (unsigned long long)stored,
            fsize);
    double can_hold = (double)stored * (nfilters > 0 ? 1100.0 : 1.0);
    if ((double)n * (double)elem_bytes > can_hold)
        BAD("claims %zu elements, more than its %llu stored bytes can hold (a damaged file?)", n,
            (unsigned long long)stored);
#undef BAD
out:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    return rc;
}

/* Whether a stored type (a member's or an array's) is exactly what the writer stores for t. */
static bool type_is(hid_t stored, enum k25_h5_type t, size_t str_len)
{
    if (t == K25_H5_STR)
        return H5Tget_class(stored) == H5T_STRING && H5Tis_variable_str(stored) == 0 &&
               H5Tget_size(stored) == str_len;
    hid_t want = file_type_of(t, 0);
    bool ok = want >= 0 && H5Tequal(stored, want) > 0;
    if (want >= 0)
        H5Tclose(want);
    return ok;
}

/*
 * Checks a table's stored row type before it is read: a compound of at
 * most K25_H5_MAX_ROW_BYTES whose every member lies inside the row (HDF5
 * 1.10 does not check member offsets: a corrupted one makes H5Dread copy
 * from outside its buffers), holding each column asked for with the type
 * and size the writer gives it.  *row_bytes: the stored row size.
 */
static int check_table_type(hid_t dt, hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                            size_t *row_bytes, struct k25_error *err)
{
    char fb[512], ob[600];
    obj_file(parent, fb, sizeof(fb));
    obj_path(parent, name, ob, sizeof(ob));
    if (H5Tget_class(dt) != H5T_COMPOUND)
        return k25_error_set(err, K25_EFORMAT, fb, 0, ob, "not a table");
    size_t size = H5Tget_size(dt);
    int nm = H5Tget_nmembers(dt);
    if (size == 0 || size > K25_H5_MAX_ROW_BYTES || nm <= 0 || nm > 4096)
        return k25_error_set(err, K25_EFORMAT, fb, 0, ob, "a row type no k25 file has (a damaged file?)");
    for (int i = 0; i < nm; i++) {
        size_t off = H5Tget_member_offset(dt, (unsigned)i);
        hid_t mt = H5Tget_member_type(dt, (unsigned)i);
        size_t msz = mt >= 0 ? H5Tget_size(mt) : 0;
        if (mt >= 0)
            H5Tclose(mt);
        if (msz == 0 || off > size || msz > size - off) {
            char *mn = H5Tget_member_name(dt, (unsigned)i);
            k25_error_set(err, K25_EFORMAT, fb, 0, ob,
                          "column %d ('%.64s') lies outside the %zu-byte row (offset %zu, size %zu): a damaged file",
                          i, mn ? mn : "?", size, off, msz);
            H5free_memory(mn);
            return K25_EFORMAT;
        }
    }
    for (int i = 0; i < ncols; i++) {
        int idx = H5Tget_member_index(dt, cols[i].name);
        if (idx < 0)
            return k25_error_set(err, K25_EFORMAT, fb, 0, cols[i].name, "column missing from table '%s'", name);
        hid_t mt = H5Tget_member_type(dt, (unsigned)idx);
        bool ok = mt >= 0 && type_is(mt, cols[i].type, cols[i].str_len);
        if (mt >= 0)
            H5Tclose(mt);
        if (!ok)
            return k25_error_set(err, K25_EFORMAT, fb, 0, cols[i].name,
                                 "column of table '%s' is not %s of %zu bytes (a damaged file?)", ob,
                                 type_name(cols[i].type), type_size(cols[i].type, cols[i].str_len));
    }
    *row_bytes = size;
    return K25_OK;
}

int k25_h5_read_table(hid_t parent, const char *name, const struct k25_h5_col *cols, int ncols,
                      size_t row_size, size_t expect, void **rows, size_t *nrows, struct k25_error *err)
{
    char fb[512], ob[600];
    int rc = K25_OK;
    hid_t mt = H5I_INVALID_HID, ft = H5I_INVALID_HID, ds = H5I_INVALID_HID, dt = H5I_INVALID_HID;
    *rows = NULL;
    *nrows = 0;
    size_t n = 0, stored_row = 0;
    if ((ds = open_1d(parent, name, &n, err)) < 0)
        return K25_EFORMAT;
    if ((dt = H5Dget_type(ds)) < 0) {
        rc = k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0,
                           obj_path(parent, name, ob, sizeof(ob)), "unreadable type (a damaged file?)");
        goto out;
    }
    if ((rc = check_table_type(dt, parent, name, cols, ncols, &stored_row, err)) != K25_OK ||
        (rc = check_extent(ds, parent, name, n, stored_row, expect, err)) != K25_OK)
        goto out;
    if (compound_types(cols, ncols, row_size, &mt, &ft) < 0 || !(*rows = calloc(n ? n : 1, row_size)) ||
        (n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *rows) < 0)) {
        free(*rows);
        *rows = NULL;
        rc = k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0,
                           obj_path(parent, name, ob, sizeof(ob)),
                           "cannot read the table (a damaged file: a checksum or decompression failed?)");
        goto out;
    }
    *nrows = n;
out:
    if (dt >= 0)
        H5Tclose(dt);
    if (mt >= 0)
        H5Tclose(mt);
    if (ft >= 0)
        H5Tclose(ft);
    H5Dclose(ds);
    return rc;
}

int k25_h5_write_array(hid_t parent, const char *name, enum k25_h5_type type, const void *data, size_t n,
                       struct k25_error *err)
{
    char fb[512];
    int rc = K25_OK;
    hid_t ft = file_type_of(type, 0), mt = mem_type_of(type, 0), ds = H5I_INVALID_HID;
    if (type == K25_H5_STR || ft < 0 || mt < 0 || (ds = create_1d(parent, name, ft, n, type_size(type, 0))) < 0 ||
        (n > 0 && H5Dwrite(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
        rc = k25_error_set(err, K25_EIO, obj_file(parent, fb, sizeof(fb)), 0, name,
                           "cannot write the array (disk full?)");
    if (ds >= 0 && H5Dclose(ds) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, obj_file(parent, fb, sizeof(fb)), 0, name, "closing failed");
    if (ft >= 0)
        H5Tclose(ft);
    if (mt >= 0)
        H5Tclose(mt);
    return rc;
}

int k25_h5_read_array(hid_t parent, const char *name, enum k25_h5_type type, size_t expect, void **data,
                      size_t *n, struct k25_error *err)
{
    char fb[512], ob[600];
    int rc = K25_OK;
    *data = NULL;
    hid_t mt = H5I_INVALID_HID, dt = H5I_INVALID_HID, ds = open_1d(parent, name, n, err);
    if (ds < 0)
        return K25_EFORMAT;
    if (type == K25_H5_STR || (dt = H5Dget_type(ds)) < 0 || !type_is(dt, type, 0)) {
        rc = k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0,
                           obj_path(parent, name, ob, sizeof(ob)), "not an array of %s (a damaged file?)",
                           type_name(type));
        goto out;
    }
    if ((rc = check_extent(ds, parent, name, *n, type_size(type, 0), expect, err)) != K25_OK)
        goto out;
    if ((mt = mem_type_of(type, 0)) < 0 || !(*data = calloc(*n ? *n : 1, type_size(type, 0))) ||
        (*n > 0 && H5Dread(ds, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *data) < 0)) {
        free(*data);
        *data = NULL;
        rc = k25_error_set(err, K25_EFORMAT, obj_file(parent, fb, sizeof(fb)), 0,
                           obj_path(parent, name, ob, sizeof(ob)),
                           "cannot read the array (a damaged file: a checksum or decompression failed?)");
    }
out:
    if (rc != K25_OK)
        *n = 0;
    if (dt >= 0)
        H5Tclose(dt);
    if (mt >= 0)
        H5Tclose(mt);
    H5Dclose(ds);
    return rc;
}
