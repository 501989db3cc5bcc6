/*
 * checksum.c - `k25 checksum`: is a safetensors model directory complete
 * and intact?  (docs/models.md, "Checking a model: k25 checksum")
 *
 * For a directory in the layout the engine loads (engine/safetensors.c:
 * config.json plus model.safetensors, or shards named by
 * model.safetensors.index.json) it
 *   - hashes every file the model is made of (shards, config.json, the
 *     index) with SHA-256, streamed in 4 MiB reads, reporting progress;
 *   - checks completeness: every shard the index lists is present, every
 *     tensor of its weight_map is in the header of the shard it names;
 *   - checks each shard's header (8-byte little-endian length, JSON
 *     {name: {dtype, shape, data_offsets}}) against the file: offsets
 *     inside the data, byte ranges the size of shape x dtype;
 *   - checks every tensor the engine reads against config.json: present,
 *     shape as the config implies, dtype F32/F16/BF16 and equal to
 *     torch_dtype when the config names one;
 *   - with a manifest (written by --write), compares every file's size and
 *     hash with it.
 * The engine's own header parser is private to engine/ (no public entry
 * point), so the header is parsed here with jansson; the rules are the
 * loader's.
 *
 * What is wrong with the model is a problem in the report (the command
 * exits 1); what keeps the check from running at all (no such directory,
 * no safetensors in it, an unreadable or malformed manifest) is an error
 * return (exit 2).
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CK_READ_BYTES (4u << 20)
#define CK_MAX_HEADER_BYTES 100000000ull /* the safetensors reference implementation's limit */
#define CK_INDEX "model.safetensors.index.json"
#define CK_SINGLE "model.safetensors"
#define CK_FORMAT "k25-checksum-manifest"

/* Appends a problem {kind, file, tensor, message} to the report. */
__attribute__((format(printf, 5, 6))) static void problem(struct k25_checksum_report *r, const char *kind,
                                                          const char *file, const char *tensor, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_array_append_new(json_object_get(r->json, "problems"),
                          json_pack("{s:s, s:s?, s:s?, s:s}", "kind", kind, "file", file, "tensor", tensor,
                                    "message", msg));
    r->n_problems++;
}

static void note(struct k25_checksum_report *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct k25_checksum_report *r, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_array_append_new(json_object_get(r->json, "notes"), json_string(msg));
}

static size_t dtype_size(const char *name)
{
    static const struct { const char *name; size_t size; } tab[] = {
        {"F64", 8}, {"I64", 8}, {"U64", 8}, {"F32", 4}, {"I32", 4}, {"U32", 4}, {"F16", 2}, {"BF16", 2},
        {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1}, {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
    };
    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++)
        if (strcmp(name, tab[i].name) == 0)
            return tab[i].size;
    return 0;
}

/* "[a,b]" of a JSON shape array. */
static void shape_str(json_t *shape, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    size_t i;
    json_t *d;
    json_array_foreach(shape, i, d)
    {
        if (n < cap)
            n += (size_t)snprintf(out + n, cap - n, "%s%" JSON_INTEGER_FORMAT, i ? "," : "", json_integer_value(d));
    }
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

/* A file name a model directory may list: no path separators, not "." or "..". */
static bool plain_name(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

/* ------------------------------------------------------------ one file */

/*
 * SHA-256 of dir/name into hex[65] and its size into *bytes, reading
 * CK_READ_BYTES at a time and calling the progress callback after each
 * read.  Returns 0, or -1 with a problem recorded (missing file, read error).
 */
static int hash_file(struct k25_checksum_report *r, const struct k25_checksum_opts *o, const char *dir,
                     const char *name, unsigned char *buf, char hex[65], int64_t *bytes)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    int rc = -1, fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            problem(r, "missing_file", name, NULL, "%s: file not found", name);
        else
            problem(r, "unreadable", name, NULL, "%s: cannot open: %s", name, strerror(errno));
        return -1;
    }
    struct stat st;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (fstat(fd, &st) != 0 || !md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        problem(r, "unreadable", name, NULL, "%s: cannot stat or start SHA-256: %s", name, strerror(errno));
        goto out_close_file;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL); /* a hint; failure changes nothing */
    int64_t total = (int64_t)st.st_size, done = 0;
    for (;;) {
        ssize_t n = read(fd, buf, CK_READ_BYTES);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            problem(r, "unreadable", name, NULL, "%s: read failed after %" PRId64 " bytes: %s", name, done,
                    strerror(errno));
            goto out_close_file;
        }
        if (n == 0)
            break;
        if (EVP_DigestUpdate(md, buf, (size_t)n) != 1) {
            problem(r, "unreadable", name, NULL, "%s: SHA-256 update failed", name);
            goto out_close_file;
        }
        done += n;
        if (o && o->progress)
            o->progress(name, done, total, o->user);
    }
    unsigned char dg[EVP_MAX_MD_SIZE];
    unsigned int dn = 0;
    if (EVP_DigestFinal_ex(md, dg, &dn) != 1 || dn != 32) {
        problem(r, "unreadable", name, NULL, "%s: SHA-256 final failed", name);
        goto out_close_file;
    }
    for (unsigned i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", dg[i]);
    *bytes = done;
    rc = 0;

out_close_file:
    EVP_MD_CTX_free(md);
    close(fd); /* read-only: nothing to lose */
    return rc;
}

/*
 * Reads and checks the header of shard dir/name: returns the parsed
 * {tensor: entry} object (caller decrefs) or NULL with a problem recorded.
 * Entries are checked as engine/safetensors.c checks them; the first bad
 * entry is a problem naming file and tensor.
 */
static json_t *read_header(struct k25_checksum_report *r, const char *dir, const char *name)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    json_t *h = NULL;
    char *text = NULL;
    if (!f)
        return NULL; /* hash_file has reported it */
    struct stat st;
    unsigned char lb[8];
    if (fstat(fileno(f), &st) != 0 || fread(lb, 1, 8, f) != 8) {
        problem(r, "bad_header", name, NULL, "%s: too short for the 8-byte header length", name);
        goto out_close_file;
    }
    uint64_t n = 0, size = (uint64_t)st.st_size;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | lb[i];
    if (n < 2 || n > CK_MAX_HEADER_BYTES || n > size - 8) {
        problem(r, "bad_header", name, NULL,
                "%s: header length %" PRIu64 " does not fit the file (%" PRIu64 " bytes): truncated or not safetensors",
                name, n, size);
        goto out_close_file;
    }
    if (!(text = malloc(n)) || fread(text, 1, n, f) != n) {
        problem(r, "bad_header", name, NULL, "%s: cannot read the %" PRIu64 "-byte header", name, n);
        goto out_close_file;
    }
    json_error_t je;
    h = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(h)) {
        problem(r, "bad_header", name, NULL, "%s: header is not a JSON object (column %d: %s)", name, je.column,
                h ? "not an object" : je.text);
        goto out_free_header;
    }
    uint64_t data_bytes = size - 8 - n;
    const char *t;
    json_t *e;
    json_object_foreach(h, t, e)
    {
        if (strcmp(t, "__metadata__") == 0)
            continue;
        json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"),
               *of = json_object_get(e, "data_offsets");
        if (!json_is_string(dt) || !json_is_array(sh) || !json_is_array(of) || json_array_size(of) != 2) {
            problem(r, "bad_header", name, t, "%s: tensor '%s': entry needs dtype, shape and data_offsets [begin, end]",
                    name, t);
            goto out_free_header;
        }
        uint64_t numel = 1;
        bool bad = false;
        size_t i;
        json_t *d;
        json_array_foreach(sh, i, d)
        {
            if (!json_is_integer(d) || json_integer_value(d) < 0 ||
                (json_integer_value(d) > 0 && numel > UINT64_MAX / (uint64_t)json_integer_value(d)))
                bad = true;
            else
                numel *= (uint64_t)json_integer_value(d);
        }
        json_t *jb = json_array_get(of, 0), *jend = json_array_get(of, 1);
        json_int_t b = json_integer_value(jb), en = json_integer_value(jend);
        size_t es = dtype_size(json_string_value(dt));
        if (bad || !json_is_integer(jb) || !json_is_integer(jend) || b < 0 || en < b || (uint64_t)en > data_bytes) {
            problem(r, "bad_header", name, t, "%s: tensor '%s': bad shape or data_offsets [%" JSON_INTEGER_FORMAT
                    ",%" JSON_INTEGER_FORMAT "] (data holds %" PRIu64 " bytes: truncated?)", name, t, b, en, data_bytes);
            goto out_free_header;
        }
        if (es && (numel > UINT64_MAX / es || numel * es != (uint64_t)(en - b))) {
            char s[160];
            shape_str(sh, s, sizeof(s));
            problem(r, "bad_header", name, t, "%s: tensor '%s': data_offsets hold %" JSON_INTEGER_FORMAT
                    " bytes but shape %s of %s needs %" PRIu64, name, t, en - b, s, json_string_value(dt), numel * es);
            goto out_free_header;
        }
        r->n_tensors++;
    }
    free(text);
    fclose(f); /* read-only */
    return h;

out_free_header:
    json_decref(h);
    h = NULL;
out_close_file:
    free(text);
    fclose(f);
    return NULL;
}

/* ------------------------------------------------------ against config */

/* A config.json integer, or deflt when absent; -1 (problem recorded) when required and absent or bad. */
static json_int_t cfg_int(struct k25_checksum_report *r, json_t *cfg, const char *key, json_int_t deflt)
{
    json_t *v = json_object_get(cfg, key);
    if ((!v || json_is_null(v)) && deflt >= 0)
        return deflt;
    if (!json_is_integer(v) || json_integer_value(v) < 1) {
        problem(r, "config", "config.json", NULL, "config.json: key '%s': %s", key,
                v ? "must be a positive integer" : "missing (required)");
        return -1;
    }
    return json_integer_value(v);
}

/*
 * Every tensor the engine reads, with the shape config.json implies, is
 * looked up where the index (or the single file) places it.
 * headers: {file name: header object}.  Problems name file and tensor.
 */
static void check_config(struct k25_checksum_report *r, json_t *cfg, json_t *weight_map, json_t *headers)
{
    json_int_t dim = cfg_int(r, cfg, "hidden_size", -1), nl = cfg_int(r, cfg, "num_hidden_layers", -1),
               nh = cfg_int(r, cfg, "num_attention_heads", -1), ffn = cfg_int(r, cfg, "intermediate_size", -1),
               vocab = cfg_int(r, cfg, "vocab_size", -1);
    if (dim < 0 || nl < 0 || nh < 0 || ffn < 0 || vocab < 0)
        return;
    json_int_t nkv = cfg_int(r, cfg, "num_key_value_heads", nh), hd = cfg_int(r, cfg, "head_dim", dim / nh);
    if (nkv < 0 || hd < 0)
        return;
    bool tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    const char *want_dtype = NULL, *td = json_string_value(json_object_get(cfg, "torch_dtype"));
    if (td)
        want_dtype = !strcmp(td, "float32") ? "F32" : !strcmp(td, "float16") ? "F16" : !strcmp(td, "bfloat16") ? "BF16" : NULL;

    struct want { char name[128]; json_int_t d0, d1; };
    int n_want = 3 + 9 * (int)nl, k = 0;
    struct want *w = calloc((size_t)n_want, sizeof(*w));
    if (!w) {
        problem(r, "internal", NULL, NULL, "out of memory");
        return;
    }
#define WANT(d0_, d1_, ...) (snprintf(w[k].name, sizeof(w[k].name), __VA_ARGS__), w[k].d0 = (d0_), w[k++].d1 = (d1_))
    WANT(vocab, dim, "model.embed_tokens.weight");
    for (json_int_t l = 0; l < nl; l++) {
        WANT(dim, 0, "model.layers.%" JSON_INTEGER_FORMAT ".input_layernorm.weight", l);
        WANT(nh * hd, dim, "model.layers.%" JSON_INTEGER_FORMAT ".self_attn.q_proj.weight", l);
        WANT(nkv * hd, dim, "model.layers.%" JSON_INTEGER_FORMAT ".self_attn.k_proj.weight", l);
        WANT(nkv * hd, dim, "model.layers.%" JSON_INTEGER_FORMAT ".self_attn.v_proj.weight", l);
        WANT(dim, nh * hd, "model.layers.%" JSON_INTEGER_FORMAT ".self_attn.o_proj.weight", l);
        WANT(dim, 0, "model.layers.%" JSON_INTEGER_FORMAT ".post_attention_layernorm.weight", l);
        WANT(ffn, dim, "model.layers.%" JSON_INTEGER_FORMAT ".mlp.gate_proj.weight", l);
        WANT(ffn, dim, "model.layers.%" JSON_INTEGER_FORMAT ".mlp.up_proj.weight", l);
        WANT(dim, ffn, "model.layers.%" JSON_INTEGER_FORMAT ".mlp.down_proj.weight", l);
    }
    WANT(dim, 0, "model.norm.weight");
    if (!tied)
        WANT(vocab, dim, "lm_head.weight");
#undef WANT

    int n_f32_norms = 0;
    for (int i = 0; i < k; i++) {
        const char *file = weight_map ? json_string_value(json_object_get(weight_map, w[i].name)) : CK_SINGLE;
        if (!file) {
            problem(r, "missing_tensor", CK_INDEX, w[i].name, "%s: tensor '%s' (needed by config.json) is not in weight_map",
                    CK_INDEX, w[i].name);
            continue;
        }
        json_t *h = json_object_get(headers, file);
        if (!h)
            continue; /* the shard is missing or malformed: reported already */
        json_t *e = json_object_get(h, w[i].name);
        if (!e) {
            problem(r, "missing_tensor", file, w[i].name, "%s: tensor '%s' (needed by config.json) is not in the file",
                    file, w[i].name);
            continue;
        }
        json_t *sh = json_object_get(e, "shape");
        int nd = w[i].d1 ? 2 : 1;
        bool same = (int)json_array_size(sh) == nd && json_integer_value(json_array_get(sh, 0)) == w[i].d0 &&
                    (nd == 1 || json_integer_value(json_array_get(sh, 1)) == w[i].d1);
        char got[160], want[80];
        shape_str(sh, got, sizeof(got));
        if (nd == 2)
            snprintf(want, sizeof(want), "[%" JSON_INTEGER_FORMAT ",%" JSON_INTEGER_FORMAT "]", w[i].d0, w[i].d1);
        else
            snprintf(want, sizeof(want), "[%" JSON_INTEGER_FORMAT "]", w[i].d0);
        if (!same)
            problem(r, "shape", file, w[i].name, "%s: tensor '%s': shape %s, config.json implies %s", file, w[i].name,
                    got, want);
        const char *dt = json_string_value(json_object_get(e, "dtype"));
        if (strcmp(dt, "F32") && strcmp(dt, "F16") && strcmp(dt, "BF16"))
            problem(r, "dtype", file, w[i].name, "%s: tensor '%s': dtype %s (the engine loads F32, F16, BF16)", file,
                    w[i].name, dt);
        else if (want_dtype && strcmp(dt, want_dtype) && nd == 1 && !strcmp(dt, "F32"))
            n_f32_norms++; /* norms kept in F32 beside 16-bit matrices: how checkpoints are saved */
        else if (want_dtype && strcmp(dt, want_dtype))
            problem(r, "dtype", file, w[i].name, "%s: tensor '%s': dtype %s, config.json's torch_dtype %s is %s", file,
                    w[i].name, dt, td, want_dtype);
        r->n_checked++;
    }
    if (n_f32_norms)
        note(r, "%d norm weight%s stored as F32 beside %s matrices (torch_dtype %s): normal for such checkpoints, "
                "loaded as they are", n_f32_norms, n_f32_norms == 1 ? "" : "s", want_dtype, td);
    free(w);
}

/* ------------------------------------------------------------ manifest */

/*
 * Loads a manifest written by --write: {format, files: [{name, bytes,
 * sha256}]}.  K25_ENOTFOUND / K25_EFORMAT naming the file (and entry).
 */
static int manifest_load(const char *path, json_t **out, struct k25_error *err)
{
    json_error_t je;
    json_t *m = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    *out = NULL;
    if (!m)
        return access(path, F_OK) != 0
                   ? k25_error_set(err, K25_ENOTFOUND, path, 0, NULL, "manifest not found")
                   : k25_error_set(err, K25_EFORMAT, path, je.line, NULL, "manifest is not valid JSON (column %d: %s)",
                                   je.column, je.text);
    json_t *fmt = json_object_get(m, "format"), *files = json_object_get(m, "files");
    int rc = K25_OK;
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), CK_FORMAT) != 0)
        rc = k25_error_set(err, K25_EFORMAT, path, 0, "format", "not a k25 checksum manifest (\"format\": \"%s\" expected)",
                           CK_FORMAT);
    else if (!json_is_array(files) || json_array_size(files) == 0)
        rc = k25_error_set(err, K25_EFORMAT, path, 0, "files", "manifest has no \"files\" array");
    size_t i;
    json_t *e;
    json_array_foreach(files, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name")), *h = json_string_value(json_object_get(e, "sha256"));
        if (rc == K25_OK && (!n || !plain_name(n) || !h || strlen(h) != 64 || strspn(h, "0123456789abcdef") != 64 ||
                             !json_is_integer(json_object_get(e, "bytes"))))
            rc = k25_error_set(err, K25_EFORMAT, path, 0, "files",
                               "files[%zu]: needs a plain \"name\", integer \"bytes\" and 64-hex-digit \"sha256\"", i);
    }
    if (rc)
        json_decref(m);
    else
        *out = m;
    return rc;
}

static void verify(struct k25_checksum_report *r, json_t *man, const char *man_path)
{
    json_t *files = json_object_get(r->json, "files"), *mf = json_object_get(man, "files");
    size_t i, j;
    json_t *e, *f;
    json_array_foreach(mf, i, e)
    {
        const char *n = json_string_value(json_object_get(e, "name"));
        json_t *hit = NULL;
        json_array_foreach(files, j, f) if (!strcmp(n, json_string_value(json_object_get(f, "name")))) hit = f;
        if (!hit) {
            if (!json_object_get(json_object_get(r->json, "missing"), n))
                problem(r, "missing_file", n, NULL, "%s: in the manifest, not in the model", n);
            continue;
        }
        json_int_t mb = json_integer_value(json_object_get(e, "bytes")), gb = json_integer_value(json_object_get(hit, "bytes"));
        const char *mh = json_string_value(json_object_get(e, "sha256")), *gh = json_string_value(json_object_get(hit, "sha256"));
        if (mb != gb)
            problem(r, "size", n, NULL, "%s: %" JSON_INTEGER_FORMAT " bytes, the manifest says %" JSON_INTEGER_FORMAT
                    " (truncated or replaced)", n, gb, mb);
        else if (strcmp(mh, gh) != 0)
            problem(r, "hash", n, NULL, "%s: sha256 %.16s... differs from the manifest's %.16s... (corrupted or changed)",
                    n, gh, mh);
        else
            r->n_verified++;
    }
    json_array_foreach(files, j, f)
    {
        const char *n = json_string_value(json_object_get(f, "name"));
        bool listed = false;
        json_array_foreach(mf, i, e) listed |= !strcmp(n, json_string_value(json_object_get(e, "name")));
        if (!listed)
            problem(r, "not_in_manifest", n, NULL, "%s: part of the model, not in the manifest %s", n, man_path);
    }
    json_object_set_new(r->json, "manifest", json_pack("{s:s, s:i}", "path", man_path, "files_matched", r->n_verified));
}

/* -------------------------------------------------------------- driver */

/* Hashes dir/name and appends it to the report's files (role: shard, config, index). */
static bool add_file(struct k25_checksum_report *r, const struct k25_checksum_opts *o, const char *dir,
                     const char *name, const char *role, unsigned char *buf)
{
    char hex[65];
    int64_t bytes = 0;
    if (hash_file(r, o, dir, name, buf, hex, &bytes) != 0) {
        json_object_set_new(json_object_get(r->json, "missing"), name, json_true());
        return false;
    }
    json_array_append_new(json_object_get(r->json, "files"),
                          json_pack("{s:s, s:s, s:I, s:s}", "name", name, "role", role, "bytes", (json_int_t)bytes,
                                    "sha256", hex));
    r->total_bytes += bytes;
    return true;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * The shards: the index's weight_map values (sorted, once each), or
 * model.safetensors without an index.  A bad index is a problem in r (the
 * check goes on with what it names); *index (the caller's to release),
 * *weight_map (NULL when not an object, borrowed from it) and *shards
 * (malloc'd, names borrowed) are set.  K25_ENOMEM.
 */
static int list_shards(struct k25_checksum_report *r, const char *dir, bool has_index, json_t **index,
                       json_t **weight_map, const char ***shards_out, size_t *n_out, struct k25_error *err)
{
    char path[4200];
    const char **shards;
    size_t n_shards = 0;
    if (has_index) {
        json_error_t je;
        snprintf(path, sizeof(path), "%s/%s", dir, CK_INDEX);
        *index = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
        json_t *wm = json_object_get(*index, "weight_map");
        if (!*index)
            problem(r, "bad_index", CK_INDEX, NULL, "%s:%d: not valid JSON (column %d: %s)", CK_INDEX, je.line,
                    je.column, je.text);
        else if (!json_is_object(wm) || json_object_size(wm) == 0)
            problem(r, "bad_index", CK_INDEX, NULL, "%s: no \"weight_map\" object", CK_INDEX);
        if (!(shards = calloc(json_object_size(wm) + 1, sizeof(*shards))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        const char *t;
        json_t *v;
        json_object_foreach(wm, t, v)
        {
            const char *s = json_string_value(v);
            if (!s || !plain_name(s)) {
                problem(r, "bad_index", CK_INDEX, t, "%s: tensor '%s': weight_map value is not a plain file name", CK_INDEX, t);
                continue;
            }
            size_t i = 0;
            while (i < n_shards && strcmp(shards[i], s) != 0)
                i++;
            if (i == n_shards)
                shards[n_shards++] = s;
        }
        qsort(shards, n_shards, sizeof(*shards), cmp_str);
        *weight_map = json_is_object(wm) ? wm : NULL;
    } else {
        if (!(shards = calloc(1, sizeof(*shards))))
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        shards[n_shards++] = CK_SINGLE;
    }
    *shards_out = shards;
    *n_out = n_shards;
    return K25_OK;
}

/* Completeness: every weight_map entry is in its shard's header; tensors the index does not list, noted. */
static void check_complete(struct k25_checksum_report *r, json_t *weight_map, json_t *headers)
{
    const char *t;
    json_t *v;
    json_object_foreach(weight_map, t, v)
    {
        json_t *h = json_object_get(headers, json_string_value(v));
        if (h && !json_object_get(h, t))
            problem(r, "missing_tensor", json_string_value(v), t, "%s: tensor '%s' (placed here by %s) is not in the file",
                    json_string_value(v), t, CK_INDEX);
    }
    if (weight_map) {
        const char *f;
        json_t *h;
        int extra = 0;
        json_object_foreach(headers, f, h) json_object_foreach(h, t, v) extra +=
            strcmp(t, "__metadata__") && !json_object_get(weight_map, t);
        if (extra)
            note(r, "%d tensors in the shards are not listed in %s", extra, CK_INDEX);
    }
}

int k25_checksum_model(const char *dir, const struct k25_checksum_opts *o, struct k25_checksum_report *r,
                       struct k25_error *err)
{
    memset(r, 0, sizeof(*r));
    struct stat st;
    char path[4200];
    json_t *index = NULL, *weight_map = NULL, *headers = json_object(), *man = NULL, *cfg = NULL;
    const char **shards = NULL;
    unsigned char *buf = malloc(CK_READ_BYTES);
    int rc = K25_OK;
    r->json = json_pack("{s:s, s:[], s:[], s:[], s:{}}", "model", dir, "files", "problems", "notes", "missing");
    if (!r->json || !headers || !buf) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        rc = k25_error_set(err, K25_ENOTFOUND, dir, 0, NULL, "not a directory (give a model directory)");
        goto out;
    }
    if (o && o->manifest && (rc = manifest_load(o->manifest, &man, err)) != K25_OK)
        goto out;

    /* The shards: the index's weight_map values (sorted, once each), or model.safetensors. */
    snprintf(path, sizeof(path), "%s/%s", dir, CK_INDEX);
    bool has_index = access(path, F_OK) == 0;
    snprintf(path, sizeof(path), "%s/%s", dir, CK_SINGLE);
    if (!has_index && access(path, F_OK) != 0) {
        rc = k25_error_set(err, K25_ENOTFOUND, dir, 0, NULL, "no %s and no %s: not a safetensors model directory",
                           CK_SINGLE, CK_INDEX);
        goto out;
    }
    size_t n_shards = 0;
    if ((rc = list_shards(r, dir, has_index, &index, &weight_map, &shards, &n_shards, err)) != K25_OK)
        goto out;

    /* Hash and parse every shard; then the config and the index themselves. */
    for (size_t i = 0; i < n_shards; i++) {
        if (!add_file(r, o, dir, shards[i], "shard", buf))
            continue;
        json_t *h = read_header(r, dir, shards[i]);
        if (h)
            json_object_set_new(headers, shards[i], h);
    }
    r->n_shards = (int)n_shards;
    if (add_file(r, o, dir, "config.json", "config", buf)) {
        json_error_t je;
        snprintf(path, sizeof(path), "%s/config.json", dir);
        if (!(cfg = json_load_file(path, 0, &je)) || !json_is_object(cfg))
            problem(r, "config", "config.json", NULL, "config.json:%d: not a JSON object (column %d: %s)", je.line,
                    je.column, cfg ? "not an object" : je.text);
    }
    if (has_index)
        add_file(r, o, dir, CK_INDEX, "index", buf);

    check_complete(r, weight_map, headers);
    if (json_is_object(cfg) && (weight_map || !has_index))
        check_config(r, cfg, weight_map, headers);
    if (man)
        verify(r, man, o->manifest);

out:
    if (r->json) {
        json_object_del(r->json, "missing");
        json_object_set_new(r->json, "ok", json_boolean(rc == K25_OK && r->n_problems == 0));
        json_object_set_new(r->json, "shards", json_integer(r->n_shards));
        json_object_set_new(r->json, "tensors", json_integer(r->n_tensors));
        json_object_set_new(r->json, "tensors_checked_against_config", json_integer(r->n_checked));
        json_object_set_new(r->json, "bytes", json_integer(r->total_bytes));
    }
    free(shards);
    free(buf);
    json_decref(cfg);
    json_decref(man);
    json_decref(headers);
    json_decref(index);
    return rc;
}

void k25_checksum_report_free(struct k25_checksum_report *r)
{
    json_decref(r->json);
    r->json = NULL;
}

int k25_checksum_manifest_write(const struct k25_checksum_report *r, const char *path, struct k25_error *err)
{
    char now[32];
    time_t t = time(NULL); /* wall clock: a provenance stamp */
    strftime(now, sizeof(now), "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
    json_t *files = json_array(), *f;
    size_t i;
    json_array_foreach(json_object_get(r->json, "files"), i, f)
        json_array_append_new(files, json_pack("{s:O, s:O, s:O}", "name", json_object_get(f, "name"), "bytes",
                                               json_object_get(f, "bytes"), "sha256", json_object_get(f, "sha256")));
    json_t *m = json_pack("{s:s, s:i, s:s, s:s, s:s, s:o}", "format", CK_FORMAT, "version", 1, "created", now,
                          "model", json_string_value(json_object_get(r->json, "model")), "k25_version", K25_VERSION,
                          "files", files);
    if (!m)
        return k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
    int rc = k25_write_json_atomic(path, m, err);
    json_decref(m);
    return rc;
}
