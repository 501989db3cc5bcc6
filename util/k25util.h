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
 *   expr.c        the one expression language (filters, --only, SLA conditions)
 *   fileread.c    a whole file (or stdin) into memory
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
 * The whole of path ("-": standard input) in a malloc'd buffer with a NUL
 * after its *len bytes (the caller frees it), or NULL with err set: a
 * missing file K25_ENOTFOUND, a read error K25_EIO, K25_ENOMEM.
 */
char *k25_file_read(const char *path, size_t *len, struct k25_error *err);

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
 * folder) alive on this machine?  False for a name without a pid, a dead
 * pid or a zombie (/proc/PID/stat state Z or X: killed, not yet reaped);
 * true for a live one (or one we may not signal).  Cleanups remove
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
/*
 * The last steps of every temporary-then-rename write (the one
 * implementation): k25_atomic_finish flushes, fsyncs and closes f (the
 * temporary tmp), renames it onto path and fsyncs path's folder;
 * k25_atomic_finish_closed does the same for a temporary already closed by
 * its writer (HDF5).  ok = false: the caller's writing failed (err already
 * says why); f is closed and tmp removed.  On any failure tmp is removed and
 * err names the step: writing, fsync of the temporary, closing, the
 * rename, or the folder's fsync.  k25_fsync_dir: the fsync of path's
 * folder alone (file systems that refuse it on a folder are taken as done).
 */
int k25_atomic_finish(FILE *f, const char *tmp, const char *path, bool ok, struct k25_error *err);
int k25_atomic_finish_closed(const char *tmp, const char *path, struct k25_error *err);
int k25_fsync_dir(const char *path, struct k25_error *err);
/* Whole text (a newline is added when missing) or JSON (indented) atomically. */
int k25_write_text_atomic(const char *path, const char *text, struct k25_error *err);
int k25_write_json_atomic(const char *path, const json_t *j, struct k25_error *err);

/* ------------------------------------------------- HDF5 store (h5store.c) */


/*
 * Layout version written into every file.  2: run traces carry
 * /tokens/margin (the token-identity rule's top-1 margins,
 * docs/trace-schema.md).  3: run traces carry the elastic queue's columns
 * (/requests priority, spilled, replayed, degraded, timed_out,
 * ttft_sla_ms; /timeline queue depths and breaker state).  4: run traces
 * carry cached_tokens and the KV tiers' per-request columns in /requests and
 * the engine's run totals in /summary attributes.  5: run traces carry
 * /timeline n_waiting_degraded (the degraded queue's depth).  Readers accept
 * every version from K25_H5_SCHEMA_MIN_VERSION up; what a version lacks
 * (margins in 1, the queue's columns before 3, the tiers' before 4, the
 * degraded queue's depth before 5) reads as absent.
 */
#define K25_H5_SCHEMA_VERSION 6
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


/* ------------------------------------------- expressions (expr.c) */

/*
 * The one expression language of k25 (gold-set and bench --filter, k25
 * logs --filter, sweep --only and subject_to constraints, the conditions
 * of SLA lines; docs/cli.md "Expressions"):
 *
 *     expr  := and ( ( '||' | 'or' ) and )*
 *     and   := unary ( ( '&&' | 'and' ) unary )*
 *     unary := '!' unary | '(' expr ')' | NAME op value
 *     op    := == | != | < | <= | > | >=
 *     value := NUMBER [k|K|m|M (x1024, x1048576) | unit: ns us ms s b kb mb gb]
 *            | "text" | 'text' (\" \' \\ escapes) | WORD (unquoted text)
 *
 * '!' binds tightest, then comparisons, '&&', '||'.  NAME is
 * [A-Za-z0-9_.]+; a WORD is any run of characters other than blanks and
 * ( ) ! = < > & | " '.  Parsed once into a tree (transparent, so a
 * caller may check its shape), evaluated any number of times against the
 * caller's variables.  Every parse error is "WHAT: column N: ..." naming
 * the 1-based column and the token found there ("got ')'", "got the end").
 */
enum k25_expr_op { K25_EXPR_LT, K25_EXPR_LE, K25_EXPR_GT, K25_EXPR_GE, K25_EXPR_EQ, K25_EXPR_NE };
/* The type of a value, or of a variable as declared at parse time (ANY: known only when evaluated). */
enum k25_expr_type { K25_EXPR_ANY, K25_EXPR_NUM, K25_EXPR_STR };
enum k25_expr_kind { K25_EXPR_OR, K25_EXPR_AND, K25_EXPR_NOT, K25_EXPR_CMP };

/*
 * A variable's value when evaluated: a number (str may also hold its
 * spelling, used when it is compared with text), a text (str), or
 * unknown (type ANY: the variable is absent; every comparison with it is
 * false).  str is borrowed for the call.
 */
struct k25_expr_value {
    enum k25_expr_type type;
    double num;
    const char *str;
};

/* A node of a parsed expression; owns its children and strings. */
struct k25_expr {
    enum k25_expr_kind kind;
    int col;                  /* 1-based column: the operator for OR/AND, '!' for NOT, NAME for CMP */
    struct k25_expr *a, *b;   /* OR/AND: both; NOT: a */
    /* CMP: NAME op value */
    char *name;               /* malloc'd */
    int slot;                 /* what the resolver said (-1 when none) */
    enum k25_expr_type name_type;
    enum k25_expr_op op;
    int op_col, value_col;
    enum k25_expr_type value_type; /* NUM (a number literal) or STR (quoted text or a word) */
    double num;               /* NUM: the value, multiplier applied */
    char *text;               /* the value as text (a number's spelling); malloc'd */
    bool text_order;          /* < <= > >= order two texts bytewise (else they are false) */
};

/*
 * Resolves a NAME while parsing: true when known, with *type (ANY when
 * it is only known at evaluation) and *slot (handed back to the lookup);
 * false when unknown, with why[n] saying so ("unknown field 'foo' (...)").
 */
typedef bool (*k25_expr_resolve_fn)(void *ctx, const char *name, enum k25_expr_type *type, int *slot, char *why,
                                    size_t n);
/* A variable's value while evaluating (type ANY: absent). */
typedef struct k25_expr_value (*k25_expr_lookup_fn)(void *ctx, const char *name, int slot);

struct k25_expr_opts {
    const char *what;          /* message prefix before "column N:" ("--filter"); NULL: none */
    const char *file;          /* k25_error_set's file, line and field (may be NULL/0) */
    int line;
    const char *field;
    const char *names;         /* what a NAME is, for messages: "a field (input_length, ...)"; NULL: "a name" */
    k25_expr_resolve_fn resolve; /* NULL: every name, type ANY */
    void *ctx;
    bool text_order;           /* texts order bytewise; else ordering a STR name is an error, an ANY one false */
    const char *const *stop_words; /* NULL-terminated words that end the expression at the top level */
    int col0;                  /* added to every column (the expression starts inside a longer line) */
};

/*
 * Parses text into *out (the caller frees it with k25_expr_free).  With
 * stop words, *end (may be NULL) is the offset where the expression ended
 * (at a stop word or the end of text).  On error: K25_EINVAL (K25_ENOMEM)
 * naming the column, *out NULL, *err_col (may be NULL) the column.
 */
int k25_expr_parse(const char *text, const struct k25_expr_opts *o, struct k25_expr **out, size_t *end, int *err_col,
                   struct k25_error *err);
/* Evaluates e against the caller's variables. */
bool k25_expr_eval(const struct k25_expr *e, k25_expr_lookup_fn lookup, void *ctx);
/* One comparison `v op` the literal of the CMP node c (the rule k25_expr_eval applies). */
bool k25_expr_cmp_holds(const struct k25_expr *c, struct k25_expr_value v);
void k25_expr_free(struct k25_expr *e);
/* "<", "<=", ... */
const char *k25_expr_op_text(enum k25_expr_op op);
/* s as a number with an optional multiplier or unit (the value rule above); false when not one. */
bool k25_expr_number(const char *s, double *out);

/* ------------------------------------------------------------ NVML (nvml.c) */

/*
 * NVIDIA's management library, loaded at run time (dlopen "libnvidia-ml.so.1", or the file
 * K25_NVML_LIB names: a test's scripted stand-in) with k25's own declarations: GPU telemetry and
 * provenance with no build dependency on the driver.  Shared by the harness's samplers and the CUDA
 * backend.  Figures the library cannot give are NaN / -1, never 0.
 */
#define K25_NVML_MAX_DEV 16
typedef struct k25_nvml k25_nvml_t;
/* One device's state now. */
struct k25_gpu_sample {
    int64_t t_ns;              /* k25_now_ns() */
    int dev;
    double util_gpu, util_mem; /* fractions (0..1) of the last sample period busy */
    int64_t mem_used_bytes, mem_total_bytes;
    double sm_clock_mhz, mem_clock_mhz;
    double power_w, power_limit_w;
    double temp_c;
    bool throttle_known;
    uint64_t throttle_reasons;  /* NVML's clock throttle/event reason bits, GpuIdle cleared (0: none) */
    double pcie_tx_kbs, pcie_rx_kbs;
};
/* Loads and initializes NVML; K25_ENOTFOUND with the reason ("NVML not available: ...") when it cannot. */
int k25_nvml_open(k25_nvml_t **out, struct k25_error *err);
void k25_nvml_close(k25_nvml_t *m); /* NULL: no-op */
int k25_nvml_count(const k25_nvml_t *m);
/* Samples device i; K25_EINVAL for a bad index. */
int k25_nvml_sample(const k25_nvml_t *m, int i, struct k25_gpu_sample *s);
/* [{index, name, uuid, driver_version, cuda_driver_version, sm/mem clocks and their maxima, application
 *  clocks, power_limit_w, temperature_c, memory_total_bytes, ecc_enabled, persistence_mode,
 *  pcie_generation, pcie_width, throttle_reasons}] (null where unknown; new reference). */
json_t *k25_nvml_provenance(const k25_nvml_t *m);

#endif /* K25_UTIL_H */
