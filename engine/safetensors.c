/*
 * safetensors.c - real weights from a Hugging Face style model directory.
 *
 * A directory holds config.json (the shape) and the tensors, either in one
 * model.safetensors or in shards named by model.safetensors.index.json
 * ("weight_map": tensor name -> shard file).  A safetensors file is an
 * 8-byte little-endian header length N, N bytes of JSON
 * ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}})
 * and then the data buffer, offsets counted from its start.
 *
 * The loader checks every header entry when it opens a file (so a
 * truncated or inconsistent file is refused before any weight is read),
 * then reads the Llama tensors one by one with pread, in bounded chunks
 * straight into the model's buffers: a multi-GB file is never held in
 * memory.  Matrices land in the model's weight dtype (weight_dtype: fp32,
 * bf16 or fp16): a tensor already in it is copied bit for bit (bf16 stays
 * bf16, no fp32 detour), others are converted, rounding to nearest even;
 * norms are fp32.  q/k/v projections land in
 * layer.wqkv (q rows, then k, then v) and gate/up in layer.w_gate_up
 * (gate rows, then up), the fused layouts of internal.h.  With tied
 * embeddings lm_head aliases embed and a stored lm_head.weight is ignored.
 *
 * Every refusal names the file and the tensor (or config key) in
 * struct k25_error: K25_ENOTFOUND for a missing file, shard, key or tensor,
 * K25_EFORMAT for a malformed file or a tensor of the wrong shape,
 * K25_EUNSUPPORTED for a dtype or model feature the engine does not
 * implement, K25_EINVAL / K25_ERANGE for bad config values, K25_EIO for
 * failed reads.
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_HEADER_BYTES 100000000ull /* the reference implementation's limit */
#define ST_CHUNK_BYTES (1u << 20)        /* read buffer: bounds memory per tensor */
#define ST_MAX_DIMS 8
#define ST_PATH_MAX 4096

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_OTHER };

/* A header entry, parsed and checked against the file. */
struct st_tensor {
    enum st_dtype dtype;
    char dtype_name[16];
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    uint64_t begin, end; /* data_offsets, relative to the data buffer */
};

/* One open .safetensors file. */
struct st_file {
    char path[ST_PATH_MAX]; /* for messages and nothing else */
    const char *name;       /* file name inside the directory (borrowed from the index) */
    int fd;                 /* -1 when closed */
    json_t *header;         /* owned: name -> {dtype, shape, data_offsets} */
    uint64_t data_start;    /* byte offset of the data buffer: 8 + header length */
    uint64_t data_bytes;    /* size of the data buffer */
};

/* Where a model's tensors live: one file, or shards through an index. */
struct st_set {
    struct st_file *files;   /* [n_files], malloc'd */
    int n_files;
    json_t *index;           /* owned: the parsed index file, NULL for one file */
    json_t *weight_map;      /* borrowed from index */
    char index_path[ST_PATH_MAX];
    unsigned char *buf;      /* [ST_CHUNK_BYTES] conversion buffer, malloc'd */
};

/* ------------------------------------------------------------- helpers */

/* dir + "/" + name into out; K25_EINVAL when it does not fit. */
static int st_join(char *out, size_t cap, const char *dir, const char *name,
                   struct k25_error *err)
{
    int n = snprintf(out, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return k25_error_set(err, K25_EINVAL, dir, 0, NULL, "path to '%s' is too long", name);
    return K25_OK;
}

/* "[a,b,c]" of a shape, for messages. */
static void st_shape_str(char *out, size_t cap, const int64_t *shape, int ndim)
{
    size_t n = 0;
    n += (size_t)snprintf(out, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "%s%" PRId64, i ? "," : "", shape[i]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* Bytes per element of a safetensors dtype name; 0 when unknown. */
static size_t st_dtype_size(const char *name)
{
    static const struct { const char *name; size_t size; } tab[] = {
        { "F64", 8 }, { "I64", 8 }, { "U64", 8 },
        { "F32", 4 }, { "I32", 4 }, { "U32", 4 },
        { "F16", 2 }, { "BF16", 2 }, { "I16", 2 }, { "U16", 2 },
        { "I8", 1 }, { "U8", 1 }, { "BOOL", 1 }, { "F8_E4M3", 1 }, { "F8_E5M2", 1 },
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (strcmp(name, tab[i].name) == 0)
            return tab[i].size;
    return 0;
}

/*
 * Reads exactly n bytes at off.  Returns n, fewer at end of file, or -1
 * with errno set.
 */
static ssize_t st_pread_full(int fd, void *buf, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* -------------------------------------------------------- header entries */

/*
 * Parses header entry `name` of file f into t and checks it against the
 * file: dtype, shape and data_offsets present and well typed, offsets
 * inside the data buffer, and (for known dtypes) the byte range exactly
 * the size of shape x dtype.  K25_EFORMAT naming file and tensor otherwise.
 */
static int st_parse_entry(const struct st_file *f, const char *name, json_t *e,
                          struct st_tensor *t, struct k25_error *err)
{
    memset(t, 0, sizeof(*t));
    if (!json_is_object(e))
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name, "header entry is not an object");

    json_t *dtype = json_object_get(e, "dtype");
    json_t *shape = json_object_get(e, "shape");
    json_t *offs = json_object_get(e, "data_offsets");
    if (!json_is_string(dtype))
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "header entry has no 'dtype' string");
    if (!json_is_array(shape))
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "header entry has no 'shape' array");
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "header entry has no 'data_offsets' pair [begin, end]");

    snprintf(t->dtype_name, sizeof(t->dtype_name), "%s", json_string_value(dtype));
    if (strcmp(t->dtype_name, "F32") == 0)
        t->dtype = ST_F32;
    else if (strcmp(t->dtype_name, "F16") == 0)
        t->dtype = ST_F16;
    else if (strcmp(t->dtype_name, "BF16") == 0)
        t->dtype = ST_BF16;
    else
        t->dtype = ST_OTHER;

    if (json_array_size(shape) > ST_MAX_DIMS)
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "shape has %zu dimensions (at most %d supported)",
                             json_array_size(shape), ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    uint64_t numel = 1;
    bool overflow = false;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(shape, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                                 "shape[%d] is not a non-negative integer", i);
        t->shape[i] = json_integer_value(d);
        if (t->shape[i] != 0 && numel > UINT64_MAX / (uint64_t)t->shape[i])
            overflow = true;
        else
            numel *= (uint64_t)t->shape[i];
    }

    json_t *jb = json_array_get(offs, 0), *je = json_array_get(offs, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb))
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "data_offsets must be integers 0 <= begin <= end");
    t->begin = (uint64_t)json_integer_value(jb);
    t->end = (uint64_t)json_integer_value(je);
    if (t->end > f->data_bytes)
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "data_offsets [%" PRIu64 ",%" PRIu64 "] run past the end of the "
                             "data buffer (%" PRIu64 " bytes): file truncated?",
                             t->begin, t->end, f->data_bytes);

    size_t esize = st_dtype_size(t->dtype_name);
    if (esize) {
        char s[160];
        st_shape_str(s, sizeof(s), t->shape, t->ndim);
        if (overflow || numel > UINT64_MAX / esize || numel * esize != t->end - t->begin)
            return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                                 "data_offsets [%" PRIu64 ",%" PRIu64 "] hold %" PRIu64
                                 " bytes but shape %s of %s needs %s",
                                 t->begin, t->end, t->end - t->begin, s, t->dtype_name,
                                 overflow ? "more than 2^64" : "a different size");
    }
    return K25_OK;
}

/* ---------------------------------------------------------------- files */

static void st_file_close(struct st_file *f)
{
    if (f->fd >= 0)
        close(f->fd); /* read-only descriptor: nothing to lose on close */
    f->fd = -1;
    json_decref(f->header);
    f->header = NULL;
}

/*
 * Opens path, reads and parses its header and checks every entry.
 * missing_note is added to the message when the file does not exist
 * (e.g. "listed in model.safetensors.index.json").  On failure f is left
 * closed.
 */
static int st_file_open(struct st_file *f, const char *path, const char *missing_note,
                        struct k25_error *err)
{
    int rc = K25_OK;
    char *hdr = NULL;
    f->fd = -1;
    f->header = NULL;
    snprintf(f->path, sizeof(f->path), "%s", path);

    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) {
        if (errno == ENOENT)
            return k25_error_set(err, K25_ENOTFOUND, path, 0, NULL, "file not found%s%s",
                                 missing_note ? " " : "", missing_note ? missing_note : "");
        return k25_error_set(err, K25_EIO, path, 0, NULL, "cannot open: %s", strerror(errno));
    }
    struct stat st;
    if (fstat(f->fd, &st) != 0) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot stat: %s", strerror(errno));
        goto out_close_file;
    }
    uint64_t size = (uint64_t)st.st_size;

    unsigned char lenbuf[8];
    ssize_t r = st_pread_full(f->fd, lenbuf, 8, 0);
    if (r < 0) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot read: %s", strerror(errno));
        goto out_close_file;
    }
    if (r < 8) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "file is %" PRIu64 " bytes, too short for the 8-byte header length: "
                           "truncated or not a safetensors file", size);
        goto out_close_file;
    }
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = (n << 8) | lenbuf[i];
    if (n > ST_MAX_HEADER_BYTES) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "header length %" PRIu64 " is absurd (limit %llu bytes): "
                           "not a safetensors file?", n, ST_MAX_HEADER_BYTES);
        goto out_close_file;
    }
    if (n > size - 8) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "header length %" PRIu64 " runs past the end of the file "
                           "(%" PRIu64 " bytes): file truncated?", n, size);
        goto out_close_file;
    }
    if (n < 2) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "header length %" PRIu64 " is too short for a JSON object", n);
        goto out_close_file;
    }
    f->data_start = 8 + n;
    f->data_bytes = size - 8 - n;

    hdr = malloc(n);
    if (!hdr) {
        rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL,
                           "cannot allocate %" PRIu64 " bytes for the header", n);
        goto out_close_file;
    }
    r = st_pread_full(f->fd, hdr, n, 8);
    if (r < 0 || (uint64_t)r != n) {
        rc = k25_error_set(err, K25_EIO, path, 0, NULL, "cannot read the header: %s",
                           r < 0 ? strerror(errno) : "file shrank while reading");
        goto out_free_header_text;
    }

    json_error_t jerr;
    f->header = json_loadb(hdr, n, JSON_REJECT_DUPLICATES, &jerr);
    if (!f->header) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                           "header is not valid JSON (line %d column %d: %s)",
                           jerr.line, jerr.column, jerr.text);
        goto out_free_header_text;
    }
    if (!json_is_object(f->header)) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL, "header is not a JSON object");
        goto out_free_header_text;
    }
    const char *name;
    json_t *e;
    json_object_foreach(f->header, name, e) {
        if (strcmp(name, "__metadata__") == 0)
            continue;
        struct st_tensor t;
        rc = st_parse_entry(f, name, e, &t, err);
        if (rc)
            goto out_free_header_text;
    }
    free(hdr);
    return K25_OK;

out_free_header_text:
    free(hdr);
out_close_file:
    st_file_close(f);
    return rc;
}

static void st_set_close(struct st_set *s)
{
    for (int i = 0; i < s->n_files; i++)
        st_file_close(&s->files[i]);
    free(s->files);
    s->files = NULL;
    s->n_files = 0;
    json_decref(s->index);
    s->index = NULL;
    s->weight_map = NULL;
    free(s->buf);
    s->buf = NULL;
}

/* True when name is a plain file name (no directory parts), as HF shards are. */
static bool st_plain_name(const char *name)
{
    return *name && !strchr(name, '/') && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

/*
 * Opens the tensors of dir: model.safetensors when it exists, otherwise
 * every shard named in model.safetensors.index.json.
 */
static int st_set_open(struct st_set *s, const char *dir, struct k25_error *err)
{
    int rc;
    char path[ST_PATH_MAX];
    memset(s, 0, sizeof(*s));

    s->buf = malloc(ST_CHUNK_BYTES);
    if (!s->buf)
        return k25_error_set(err, K25_ENOMEM, dir, 0, NULL, "cannot allocate the read buffer");

    rc = st_join(path, sizeof(path), dir, "model.safetensors", err);
    if (rc)
        goto out_close_set;
    struct stat st;
    if (stat(path, &st) == 0 || errno != ENOENT) {
        s->files = calloc(1, sizeof(*s->files));
        if (!s->files) {
            rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
            goto out_close_set;
        }
        s->n_files = 1;
        s->files[0].name = "model.safetensors";
        rc = st_file_open(&s->files[0], path, NULL, err); /* leaves it closed on failure */
        if (rc)
            goto out_close_set;
        return K25_OK;
    }

    rc = st_join(s->index_path, sizeof(s->index_path), dir, "model.safetensors.index.json", err);
    if (rc)
        goto out_close_set;
    json_error_t jerr;
    s->index = json_load_file(s->index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!s->index) {
        if (access(s->index_path, F_OK) != 0)
            rc = k25_error_set(err, K25_ENOTFOUND, path, 0, NULL,
                               "file not found (nor model.safetensors.index.json for shards)");
        else
            rc = k25_error_set(err, K25_EFORMAT, s->index_path, jerr.line, NULL,
                               "not valid JSON (column %d: %s)", jerr.column, jerr.text);
        goto out_close_set;
    }
    s->weight_map = json_object_get(s->index, "weight_map");
    if (!json_is_object(s->weight_map)) {
        rc = k25_error_set(err, K25_EFORMAT, s->index_path, 0, "weight_map",
                           "missing or not an object of tensor name -> shard file");
        goto out_close_set;
    }

    /* Distinct shard names, in order of first appearance; files[n_files] are open. */
    size_t cap = json_object_size(s->weight_map);
    s->files = calloc(cap ? cap : 1, sizeof(*s->files));
    if (!s->files) {
        rc = k25_error_set(err, K25_ENOMEM, s->index_path, 0, NULL, "out of memory");
        goto out_close_set;
    }
    const char *tname;
    json_t *v;
    json_object_foreach(s->weight_map, tname, v) {
        if (!json_is_string(v) || !st_plain_name(json_string_value(v))) {
            rc = k25_error_set(err, K25_EFORMAT, s->index_path, 0, tname,
                               "weight_map value is not a plain shard file name");
            goto out_close_set;
        }
        const char *shard = json_string_value(v);
        int i;
        for (i = 0; i < s->n_files; i++)
            if (strcmp(s->files[i].name, shard) == 0)
                break;
        if (i < s->n_files)
            continue;
        rc = st_join(path, sizeof(path), dir, shard, err);
        if (rc)
            goto out_close_set;
        s->files[i].name = shard;
        rc = st_file_open(&s->files[i], path, "(a shard listed in model.safetensors.index.json)",
                          err);
        if (rc)
            goto out_close_set;
        s->n_files++;
    }
    return K25_OK;

out_close_set:
    st_set_close(s);
    return rc;
}

/* Finds tensor name: its file and parsed entry.  K25_ENOTFOUND when absent. */
static int st_find(const struct st_set *s, const char *name, const struct st_file **fout,
                   struct st_tensor *t, struct k25_error *err)
{
    const struct st_file *f = &s->files[0];
    if (s->weight_map) {
        json_t *v = json_object_get(s->weight_map, name);
        if (!v)
            return k25_error_set(err, K25_ENOTFOUND, s->index_path, 0, name,
                                 "tensor not listed in weight_map");
        f = NULL;
        for (int i = 0; i < s->n_files; i++)
            if (strcmp(s->files[i].name, json_string_value(v)) == 0)
                f = &s->files[i];
        K25_ASSERT(f != NULL); /* st_set_open opened every shard of weight_map */
    }
    json_t *e = json_object_get(f->header, name);
    if (!e)
        return k25_error_set(err, K25_ENOTFOUND, f->path, 0, name, "tensor not found%s",
                             s->weight_map ? " (model.safetensors.index.json places it here)"
                                           : "");
    *fout = f;
    return st_parse_entry(f, name, e, t, err);
}

/*
 * Reads tensor name, which must have shape [d0] (d1 == 0) or [d0][d1],
 * into dst as ddt (fp32, bf16 or fp16), ST_CHUNK_BYTES at a time.
 */
static int st_read(struct st_set *s, const char *name, int64_t d0, int64_t d1, void *dst, enum k25_dtype ddt,
                   struct k25_error *err)
{
    const struct st_file *f = NULL;
    struct st_tensor t;
    int rc = st_find(s, name, &f, &t, err);
    if (rc)
        return rc;

    int64_t want[2] = { d0, d1 };
    int want_ndim = d1 ? 2 : 1;
    bool same = t.ndim == want_ndim;
    for (int i = 0; same && i < want_ndim; i++)
        same = t.shape[i] == want[i];
    if (!same) {
        char got_s[160], want_s[64];
        st_shape_str(got_s, sizeof(got_s), t.shape, t.ndim);
        st_shape_str(want_s, sizeof(want_s), want, want_ndim);
        return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                             "shape %s does not match expected %s", got_s, want_s);
    }
    if (t.dtype == ST_OTHER)
        return k25_error_set(err, K25_EUNSUPPORTED, f->path, 0, name,
                             "dtype %s is not supported (F32, F16 and BF16 are)", t.dtype_name);

    size_t esize = t.dtype == ST_F32 ? 4 : 2;
    uint64_t total = t.end - t.begin; /* == numel * esize, checked by st_parse_entry */
    uint64_t done = 0;
    size_t k = 0;
    while (done < total) {
        size_t n = (size_t)(total - done < ST_CHUNK_BYTES ? total - done : ST_CHUNK_BYTES);
        ssize_t r = st_pread_full(f->fd, s->buf, n, f->data_start + t.begin + done);
        if (r < 0)
            return k25_error_set(err, K25_EIO, f->path, 0, name, "read failed: %s",
                                 strerror(errno));
        if ((size_t)r != n)
            return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                                 "file ends inside the tensor's data: truncated while reading?");
        const unsigned char *b = s->buf;
        for (size_t i = 0; i < n; i += esize, k++) {
            float x;
            if (t.dtype == ST_F32) {
                uint32_t u = (uint32_t)b[i] | (uint32_t)b[i + 1] << 8 |
                             (uint32_t)b[i + 2] << 16 | (uint32_t)b[i + 3] << 24;
                memcpy(&x, &u, 4);
            } else {
                uint16_t h = (uint16_t)(b[i] | b[i + 1] << 8);
                x = t.dtype == ST_F16 ? k25_fp16_to_fp32(h) : k25_bf16_to_fp32(h);
            }
            if (!isfinite(x))
                return k25_error_set(err, K25_EFORMAT, f->path, 0, name,
                                     "element %zu is %s: the checkpoint is broken", k,
                                     isnan(x) ? "NaN" : "infinite");
            if (ddt == K25_DTYPE_FP32) {
                ((float *)dst)[k] = x;
            } else if ((ddt == K25_DTYPE_BF16 && t.dtype == ST_BF16) || (ddt == K25_DTYPE_FP16 && t.dtype == ST_F16)) {
                ((uint16_t *)dst)[k] = (uint16_t)(b[i] | b[i + 1] << 8); /* as stored */
            } else {
                uint16_t h = ddt == K25_DTYPE_BF16 ? k25_fp32_to_bf16(x) : k25_fp32_to_fp16(x);
                if (ddt == K25_DTYPE_FP16 && !isfinite(k25_fp16_to_fp32(h)))
                    return k25_error_set(err, K25_ERANGE, f->path, 0, name,
                                         "element %zu (%g) overflows fp16: use weight_dtype bf16 or fp32", k,
                                         (double)x);
                ((uint16_t *)dst)[k] = h;
            }
        }
        done += n;
    }
    return K25_OK;
}

/* ---------------------------------------------------------------- config */

/*
 * Integer key of config.json into *out: absent or null gives deflt (or
 * K25_ENOTFOUND when required); not an integer is K25_EINVAL; outside
 * [lo, hi] is K25_ERANGE.
 */
static int cfg_int(json_t *cfg, const char *path, const char *key, bool required, int deflt,
                   int lo, int hi, int *out, struct k25_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (required)
            return k25_error_set(err, K25_ENOTFOUND, path, 0, key, "missing required key");
        *out = deflt;
        return K25_OK;
    }
    if (!json_is_integer(v))
        return k25_error_set(err, K25_EINVAL, path, 0, key, "must be an integer");
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return k25_error_set(err, K25_ERANGE, path, 0, key,
                             "%" JSON_INTEGER_FORMAT " is out of range [%d, %d]", x, lo, hi);
    *out = (int)x;
    return K25_OK;
}

/* Positive finite number key; absent or null gives deflt. */
static int cfg_num(json_t *cfg, const char *path, const char *key, double deflt, double hi,
                   double *out, struct k25_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        *out = deflt;
        return K25_OK;
    }
    if (!json_is_number(v))
        return k25_error_set(err, K25_EINVAL, path, 0, key, "must be a number");
    double x = json_number_value(v);
    if (!(x > 0) || !(x < hi))
        return k25_error_set(err, K25_ERANGE, path, 0, key,
                             "%g is out of range (0, %g)", x, hi);
    *out = x;
    return K25_OK;
}

/* Boolean key; absent or null gives deflt. */
static int cfg_bool(json_t *cfg, const char *path, const char *key, bool deflt, bool *out,
                    struct k25_error *err)
{
    json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        *out = deflt;
        return K25_OK;
    }
    if (!json_is_boolean(v))
        return k25_error_set(err, K25_EINVAL, path, 0, key, "must be true or false");
    *out = json_is_true(v);
    return K25_OK;
}

/*
 * eos_token_id of one config object (an id or a list of ids) into shape; *found says whether
 * the key was there.  Ids outside the vocabulary are K25_ERANGE naming the file.
 */
static int cfg_eos(json_t *cfg, const char *path, struct k25_model_shape *shape, bool *found, struct k25_error *err)
{
    json_t *v = json_object_get(cfg, "eos_token_id");
    *found = v && !json_is_null(v);
    if (!*found)
        return K25_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (n > K25_MAX_EOS)
        return k25_error_set(err, K25_ERANGE, path, 0, "eos_token_id", "more than %d ids", K25_MAX_EOS);
    shape->n_eos = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(x))
            return k25_error_set(err, K25_EINVAL, path, 0, "eos_token_id", "must be an integer or a list of integers");
        json_int_t id = json_integer_value(x);
        if (id < 0 || id >= shape->vocab_size)
            return k25_error_set(err, K25_ERANGE, path, 0, "eos_token_id",
                                 "%" JSON_INTEGER_FORMAT " is outside the vocabulary (vocab_size %d)", id,
                                 shape->vocab_size);
        shape->eos_ids[shape->n_eos++] = (int32_t)id;
    }
    return K25_OK;
}

/*
 * The model's EOS ids: generation_config.json's eos_token_id where that file has one (what
 * transformers' generate stops on), else config.json's.  A malformed generation_config.json
 * is an error naming it.
 */
static int st_read_eos(const char *dir, json_t *cfg, const char *cfg_path, struct k25_model_shape *shape,
                       struct k25_error *err)
{
    char path[ST_PATH_MAX];
    bool found = false;
    int rc = st_join(path, sizeof(path), dir, "generation_config.json", err);
    if (rc)
        return rc;
    if (access(path, F_OK) == 0) {
        json_error_t jerr;
        json_t *g = json_load_file(path, 0, &jerr);
        if (!g || !json_is_object(g)) {
            json_decref(g);
            return k25_error_set(err, K25_EFORMAT, path, g ? 0 : jerr.line, NULL, "not a JSON object%s%s",
                                 g ? "" : ": ", g ? "" : jerr.text);
        }
        rc = cfg_eos(g, path, shape, &found, err);
        json_decref(g);
        if (rc || found)
            return rc;
    }
    return cfg_eos(cfg, cfg_path, shape, &found, err);
}

/*
 * Reads and validates dir/config.json into *shape.  Besides the shape
 * keys it refuses features the engine would silently get wrong: an
 * activation other than SiLU, rope_scaling, and attention/MLP biases.
 */
static int st_read_config(const char *dir, struct k25_model_shape *shape, struct k25_error *err)
{
    char path[ST_PATH_MAX];
    int rc = st_join(path, sizeof(path), dir, "config.json", err);
    if (rc)
        return rc;

    json_error_t jerr;
    json_t *cfg = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!cfg) {
        if (access(path, F_OK) != 0)
            return k25_error_set(err, K25_ENOTFOUND, path, 0, NULL,
                                 "file not found (a model directory needs an HF config.json)");
        return k25_error_set(err, K25_EFORMAT, path, jerr.line, NULL,
                             "not valid JSON (column %d: %s)", jerr.column, jerr.text);
    }
    if (!json_is_object(cfg)) {
        rc = k25_error_set(err, K25_EFORMAT, path, 0, NULL, "not a JSON object");
        goto out_free_config;
    }

    memset(shape, 0, sizeof(*shape));
    double theta = 0, eps = 0;
    if ((rc = cfg_int(cfg, path, "hidden_size", true, 0, 1, 1 << 16, &shape->dim, err)) ||
        (rc = cfg_int(cfg, path, "num_hidden_layers", true, 0, 1, 1024, &shape->n_layers, err)) ||
        (rc = cfg_int(cfg, path, "num_attention_heads", true, 0, 1, 1024, &shape->n_heads, err)) ||
        (rc = cfg_int(cfg, path, "num_key_value_heads", false, shape->n_heads, 1, shape->n_heads,
                      &shape->n_kv_heads, err)) ||
        (rc = cfg_int(cfg, path, "intermediate_size", true, 0, 1, 1 << 20, &shape->ffn_dim,
                      err)) ||
        (rc = cfg_int(cfg, path, "vocab_size", true, 0, 1, 1 << 24, &shape->vocab_size, err)) ||
        (rc = cfg_int(cfg, path, "head_dim", false, 0, 2, 1024, &shape->head_dim, err)) ||
        /* absent: Hugging Face's LlamaConfig default */
        (rc = cfg_int(cfg, path, "max_position_embeddings", false, 2048, 1, INT32_MAX, &shape->max_position, err)) ||
        (rc = cfg_num(cfg, path, "rope_theta", 10000.0, 1e12, &theta, err)) ||
        (rc = cfg_num(cfg, path, "rms_norm_eps", 1e-5, 1.0, &eps, err)) ||
        (rc = cfg_bool(cfg, path, "tie_word_embeddings", false, &shape->tied_embeddings, err)))
        goto out_free_config;
    shape->rope_theta = theta;
    shape->norm_eps = (float)eps;

    if (shape->n_heads % shape->n_kv_heads != 0) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, "num_key_value_heads",
                           "%d does not divide num_attention_heads %d",
                           shape->n_kv_heads, shape->n_heads);
        goto out_free_config;
    }
    if (shape->head_dim == 0) {
        if (shape->dim % shape->n_heads != 0) {
            rc = k25_error_set(err, K25_EINVAL, path, 0, "num_attention_heads",
                               "%d does not divide hidden_size %d (and there is no head_dim)",
                               shape->n_heads, shape->dim);
            goto out_free_config;
        }
        shape->head_dim = shape->dim / shape->n_heads;
    }
    if (shape->head_dim % 2 != 0) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, "head_dim",
                           "%d is odd; RoPE rotates pairs of dimensions", shape->head_dim);
        goto out_free_config;
    }

    json_t *v = json_object_get(cfg, "model_type");
    if (v && !json_is_null(v) && !json_is_string(v)) {
        rc = k25_error_set(err, K25_EINVAL, path, 0, "model_type", "must be a string");
        goto out_free_config;
    }
    snprintf(shape->name, sizeof(shape->name), "%s", v && json_is_string(v) ?
             json_string_value(v) : "llama");

    v = json_object_get(cfg, "hidden_act");
    if (v && !json_is_null(v) &&
        (!json_is_string(v) || (strcmp(json_string_value(v), "silu") != 0 &&
                                strcmp(json_string_value(v), "swish") != 0))) {
        rc = k25_error_set(err, K25_EUNSUPPORTED, path, 0, "hidden_act",
                           "only \"silu\" (SwiGLU) is supported");
        goto out_free_config;
    }
    v = json_object_get(cfg, "rope_scaling");
    if (v && !json_is_null(v)) {
        rc = k25_error_set(err, K25_EUNSUPPORTED, path, 0, "rope_scaling",
                           "RoPE scaling is not supported (the engine applies plain RoPE); "
                           "set it to null to serve the model with unscaled RoPE");
        goto out_free_config;
    }
    static const char *const bias_keys[] = { "attention_bias", "mlp_bias" };
    for (size_t i = 0; i < 2; i++) {
        v = json_object_get(cfg, bias_keys[i]);
        if (json_is_true(v)) {
            rc = k25_error_set(err, K25_EUNSUPPORTED, path, 0, bias_keys[i],
                               "projection biases are not supported");
            goto out_free_config;
        }
    }
    rc = st_read_eos(dir, cfg, path, shape, err);

out_free_config:
    json_decref(cfg);
    return rc;
}

/* ----------------------------------------------------------------- load */

/*
 * config.json first (nothing is allocated for a bad shape), then every file
 * header (a truncated or malformed file is refused before the weights are
 * allocated), then the tensors in order: embeddings, layers, final norm,
 * head.  The first failure frees the weights and names its file and tensor.
 */
int k25_model_load_safetensors(const char *dir, struct k25_model *m, struct k25_error *err)
{
    K25_ASSERT(m->embed == NULL && m->layers == NULL); /* a fresh model */
    struct st_set set;
    int rc = st_read_config(dir, &m->shape, err);
    if (rc)
        return rc;
    const struct k25_model_shape *s = &m->shape;

    rc = st_set_open(&set, dir, err);
    if (rc)
        return rc;
    rc = k25_model_alloc_weights(m, err);
    if (rc)
        goto out_close_set;

    const int64_t dim = s->dim, ffn = s->ffn_dim, vocab = s->vocab_size;
    const int64_t q_rows = (int64_t)s->n_heads * s->head_dim;
    const int64_t kv_rows = (int64_t)s->n_kv_heads * s->head_dim;
    char name[128];

    const enum k25_dtype wdt = m->wdtype;
    const size_t eb = wdt == K25_DTYPE_FP32 ? 4 : 2;
    if ((rc = st_read(&set, "model.embed_tokens.weight", vocab, dim, m->embed, wdt, err)))
        goto out_free_weights;
    for (int l = 0; l < s->n_layers; l++) {
        struct k25_layer *L = &m->layers[l];
        unsigned char *qkv = (unsigned char *)L->wqkv, *gu = (unsigned char *)L->w_gate_up;
        const struct {
            const char *suffix;
            int64_t d0, d1;
            void *dst;
            enum k25_dtype dt;
        } t[] = {
            { "input_layernorm.weight", dim, 0, L->attn_norm, K25_DTYPE_FP32 },
            { "self_attn.q_proj.weight", q_rows, dim, qkv, wdt },
            { "self_attn.k_proj.weight", kv_rows, dim, qkv + eb * (size_t)(q_rows * dim), wdt },
            { "self_attn.v_proj.weight", kv_rows, dim, qkv + eb * (size_t)((q_rows + kv_rows) * dim), wdt },
            { "self_attn.o_proj.weight", dim, q_rows, L->wo, wdt },
            { "post_attention_layernorm.weight", dim, 0, L->ffn_norm, K25_DTYPE_FP32 },
            { "mlp.gate_proj.weight", ffn, dim, gu, wdt },
            { "mlp.up_proj.weight", ffn, dim, gu + eb * (size_t)(ffn * dim), wdt },
            { "mlp.down_proj.weight", dim, ffn, L->w_down, wdt },
        };
        for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
            snprintf(name, sizeof(name), "model.layers.%d.%s", l, t[i].suffix);
            if ((rc = st_read(&set, name, t[i].d0, t[i].d1, t[i].dst, t[i].dt, err)))
                goto out_free_weights;
        }
    }
    if ((rc = st_read(&set, "model.norm.weight", dim, 0, m->final_norm, K25_DTYPE_FP32, err)))
        goto out_free_weights;
    /* Tied: lm_head aliases embed, and a stored lm_head.weight is ignored. */
    if (!s->tied_embeddings &&
        (rc = st_read(&set, "lm_head.weight", vocab, dim, m->lm_head, wdt, err)))
        goto out_free_weights;

    snprintf(m->source, sizeof(m->source), "%s", dir);
    st_set_close(&set);
    return K25_OK;

out_free_weights:
    k25_model_free_weights(m);
out_close_set:
    st_set_close(&set);
    return rc;
}
