/*
 * gold.h - public interface of the gold-set layer (datasets/).
 *
 * A gold set is a JSONL file, one benchmark request a line (schema in
 * docs/gold-sets.md): `id`, `text` or `input_ids`, `expected_output_length`,
 * optional `domain`, `prompt`, `block_pattern_hint`, `meta`.  This part
 * offers:
 *   - a streaming reader that validates every line and reports each problem
 *     as "FILE:LINE: field 'x': what is wrong" (k25_gold_open/next/close),
 *     never holding more than one line in memory;
 *   - a loader that reads a whole set (after a filter) into an array, for
 *     `k25 bench` (k25_gold_load);
 *   - the sanitizer for invalid UTF-8 and invisible/control characters;
 *   - filter expressions (`output_length > 1800 && domain == "legal"`);
 *   - statistics (lengths, percentiles, domains, SHA-256 of the file);
 *   - the deterministic long-document generator behind `k25 gold generate`.
 * It depends on engine/k25.h (errors, enum k25_hint) and on nothing in
 * harness/.
 *
 * Conventions: functions that can fail return 0 or a negative K25_E* code
 * and fill a caller-provided struct k25_error (may be NULL).
 */
#ifndef K25_GOLD_H
#define K25_GOLD_H

#include "k25.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Default limit on one line's size in bytes (--max-line-bytes). */
#define K25_GOLD_MAX_LINE_BYTES_DEFAULT ((size_t)64 << 20) /* 64 MiB */

/* The license files the `licenses` domain samples by default. */
#define K25_GOLD_LICENSES_DIR "/usr/share/common-licenses"

/* ------------------------------------------------------------ policies */

/* What happens to invisible and control characters in `text` and `prompt`. */
enum k25_gold_sanitize {
    K25_GOLD_SANITIZE_STRIP,  /* removed and counted (default) */
    K25_GOLD_SANITIZE_REJECT, /* the line is an error */
    K25_GOLD_SANITIZE_KEEP,   /* kept as is, counted */
};

/* What happens to a set with invalid lines. */
enum k25_gold_on_error {
    K25_GOLD_ON_ERROR_ABORT, /* every error listed, the set is refused (default) */
    K25_GOLD_ON_ERROR_SKIP,  /* invalid lines listed and skipped, counted */
};

/* Parse "strip"/"reject"/"keep" and "abort"/"skip"; K25_EINVAL otherwise. */
int k25_gold_sanitize_parse(const char *s, enum k25_gold_sanitize *out, struct k25_error *err);
int k25_gold_on_error_parse(const char *s, enum k25_gold_on_error *out, struct k25_error *err);
const char *k25_gold_sanitize_name(enum k25_gold_sanitize p);
const char *k25_gold_on_error_name(enum k25_gold_on_error p);

/* ------------------------------------------------------------ requests */

/*
 * One request of a gold set.  Every pointer is malloc'd and owned by the
 * struct; k25_gold_request_free releases them.  Exactly one of text and
 * input_ids is set.
 */
struct k25_gold_request {
    char *id;                       /* unique, non-empty */
    char *text;                     /* sanitized UTF-8, text_len bytes, NUL-terminated; or NULL */
    size_t text_len;
    int32_t *input_ids;             /* [n_input_ids] pre-tokenized input; or NULL */
    size_t n_input_ids;
    int64_t expected_output_length; /* > 0 */
    char *domain;                   /* NULL when absent */
    char *prompt;                   /* instruction prepended to text; NULL when absent */
    enum k25_hint hint;             /* block_pattern_hint, K25_HINT_AUTO when absent */
    enum k25_priority priority;     /* elastic queue priority, K25_PRIORITY_STANDARD when absent */
    char *prefix_id;                /* shared document: requests with one prefix_id begin with the same
                                     * input (prefix caching workloads); NULL when absent */
    char *meta_json;                /* `meta` object as compact JSON; NULL when absent */
    char *extra_json;               /* unknown top-level fields as a JSON object; NULL when none */
    int64_t input_length;           /* tokens: n_input_ids, or bytes of the joined prompt+text */
    int64_t line;                   /* line number in the file (1-based) */
    int64_t sanitized_chars;        /* characters the sanitizer removed (strip) or counted (keep) */
};

void k25_gold_request_free(struct k25_gold_request *r); /* frees members, zeroes */

/*
 * The text the engine sees: prompt + "\n\n" + text when a prompt is given,
 * else text.  Its byte length is r->input_length.  *out is malloc'd
 * (NUL-terminated) and owned by the caller.  K25_EINVAL for input_ids
 * requests (their input is r->input_ids).
 */
int k25_gold_request_input(const struct k25_gold_request *r, char **out, size_t *len,
                           struct k25_error *err);

/*
 * Section starts of a document (issue 36; datasets/sections.c): byte
 * offsets of the lines that begin with a heading (Article N, Section N,
 * § N, 第N条), or, when the text has none, a numbered clause ("4.2 The
 * ..."; *clauses = true).  *offs is malloc'd (NULL when none), the
 * caller frees it.  K25_ENOMEM.
 */
int k25_gold_section_starts(const char *text, size_t len, size_t **offs, size_t *n_offs, bool *clauses,
                            struct k25_error *err);
/*
 * Byte offsets to token positions for the engine's request
 * (section_starts): tok_start[n_tok] is each token's first byte in the
 * text (ascending), NULL for the byte tokenizer (position = offset).  A
 * start maps to the first token beginning at or after it; starts that fall
 * in one token or past the last one are dropped.  out has room for n_offs;
 * *n_out = how many were written (strictly ascending).
 */
int k25_gold_sections_to_tokens(const size_t *offs, size_t n_offs, const size_t *tok_start, int n_tok,
                                int32_t *out, int *n_out);

/* Writes r as one compact JSONL line (fields in schema order, then extras). */
int k25_gold_request_write(FILE *out, const struct k25_gold_request *r, struct k25_error *err);

/* ------------------------------------------------------------- filters */

typedef struct k25_gold_filter k25_gold_filter_t;

/*
 * Parses a filter expression over input_length, output_length (numbers;
 * a k suffix multiplies by 1024), domain and id (strings, "..." or '...'),
 * with == != < <= > >=, &&, ||, ! and parentheses.  On a bad expression
 * returns K25_EINVAL with err->msg "filter: column N: ..." and *err_col set
 * to the 1-based column (err_col may be NULL).  Caller destroys *out.
 */
int k25_gold_filter_parse(const char *expr, k25_gold_filter_t **out, int *err_col,
                          struct k25_error *err);
bool k25_gold_filter_match(const k25_gold_filter_t *f, const struct k25_gold_request *r);
void k25_gold_filter_destroy(k25_gold_filter_t *f);

/* ------------------------------------------------------ reader (stream) */

enum k25_gold_severity { K25_GOLD_WARNING, K25_GOLD_ERROR };

/* Called for each diagnostic as it is found; e->msg is the full line. */
typedef void (*k25_gold_diag_fn)(void *user, enum k25_gold_severity sev, const struct k25_error *e);

/* How to read a set.  k25_gold_opts_init fills the defaults. */
struct k25_gold_opts {
    enum k25_gold_sanitize sanitize;
    enum k25_gold_on_error on_error;
    size_t max_line_bytes;            /* lines longer than this are errors */
    const k25_gold_filter_t *filter;  /* borrowed; NULL = every request */
    k25_gold_diag_fn diag;            /* NULL = diagnostics only counted */
    void *diag_user;
};

void k25_gold_opts_init(struct k25_gold_opts *o);

/* What reading a set found so far. */
struct k25_gold_counts {
    int64_t lines;           /* lines read (blank and invalid ones included) */
    int64_t bytes;           /* bytes read */
    int64_t requests;        /* valid requests (before the filter) */
    int64_t matched;         /* valid requests the filter selected */
    int64_t invalid_lines;   /* lines with at least one error */
    int64_t errors;          /* error diagnostics (a line may have several) */
    int64_t warnings;        /* warning diagnostics (unknown fields) */
    int64_t sanitized_chars; /* invisible + control characters found */
    int64_t invisible_chars; /* U+200B-200F, 202A-202E, 2060-2064, FEFF */
    int64_t control_chars;   /* C0 controls other than tab, LF, CR */
    int64_t sanitized_lines; /* lines where any were found */
};

typedef struct k25_gold_reader k25_gold_reader_t;

/* Opens path for streaming (opts copied; NULL = defaults).  Caller closes. */
int k25_gold_open(const char *path, const struct k25_gold_opts *opts, k25_gold_reader_t **out,
                  struct k25_error *err);

/*
 * Reads up to the next valid request the filter selects and fills *req
 * (the caller frees it with k25_gold_request_free).  Invalid lines are
 * reported through opts.diag and passed over.  Returns 1 with a request,
 * 0 at the end of a clean set, K25_EIO on a read error, and at the end of
 * a set with invalid lines under on_error=abort K25_EFORMAT with err naming
 * the count and the first error.
 */
int k25_gold_next(k25_gold_reader_t *r, struct k25_gold_request *req, struct k25_error *err);

const struct k25_gold_counts *k25_gold_reader_counts(const k25_gold_reader_t *r);
/* The first error diagnostic (code 0 when none). */
const struct k25_error *k25_gold_reader_first_error(const k25_gold_reader_t *r);
/* SHA-256 of the bytes read so far, lowercase hex; whole file after the end. */
void k25_gold_reader_sha256(const k25_gold_reader_t *r, char hex[65]);
void k25_gold_close(k25_gold_reader_t *r);

/* --------------------------------------------------------- loaded sets */

/* A whole set in memory, as `k25 bench` uses it.  Owns everything. */
struct k25_gold_set {
    struct k25_gold_request *reqs; /* [n] in file order, filter applied */
    size_t n;
    struct k25_gold_counts counts;
    char sha256[65];               /* of the whole file */
};

/*
 * Reads and validates the whole file, keeping the requests opts->filter
 * selects.  Under on_error=abort any invalid line fails the load
 * (K25_EFORMAT, every error reported through opts->diag first, err the
 * summary); under skip they are left out and counted.  On failure *out is
 * empty.  Free with k25_gold_set_free.
 */
int k25_gold_load(const char *path, const struct k25_gold_opts *opts, struct k25_gold_set *out,
                  struct k25_error *err);
void k25_gold_set_free(struct k25_gold_set *s);

/* ------------------------------------------------------------ sanitizer */

/*
 * Checks that s[0..len) is well-formed UTF-8 (no overlong forms, no
 * surrogates, nothing above U+10FFFF).  On failure *bad_off (may be NULL)
 * is the offset of the first bad byte.
 */
bool k25_gold_utf8_valid(const char *s, size_t len, size_t *bad_off);

/* Counts of one k25_gold_sanitize_text call. */
struct k25_gold_sanitize_counts {
    size_t invisible;  /* invisible format characters found */
    size_t control;    /* C0 controls (not tab/LF/CR) found */
    size_t first_off;  /* byte offset of the first one (in the input) */
    uint32_t first_cp; /* its code point */
};

/*
 * Finds invisible and control characters in valid UTF-8 s[0..len) and
 * counts them in *c.  Under STRIP they are removed in place; otherwise s is
 * unchanged.  Returns the new length.
 */
size_t k25_gold_sanitize_text(char *s, size_t len, enum k25_gold_sanitize policy,
                              struct k25_gold_sanitize_counts *c);

/* True for the code points the sanitizer acts on. */
bool k25_gold_is_invisible(uint32_t cp);

/* ----------------------------------------------------------- statistics */

/* Summary of one length distribution (nearest-rank percentiles). */
struct k25_gold_dist {
    int64_t n, total, min, max;
    double mean;
    int64_t p50, p90, p95, p99;
};

struct k25_gold_domain_count {
    char *name; /* "(none)" for requests without a domain */
    int64_t n;
};

/* Statistics of a set: counts, distributions, domains, file digest. */
struct k25_gold_stats {
    char path[1024];
    struct k25_gold_counts counts;
    char sha256[65];
    struct k25_gold_dist input;   /* input tokens per request */
    struct k25_gold_dist output;  /* expected_output_length per request */
    struct k25_gold_domain_count *domains; /* [n_domains], most frequent first */
    size_t n_domains;
    int64_t text_requests, ids_requests;
    /* accumulators (private to stats.c) */
    int64_t *in_lens, *out_lens;
    size_t n_lens, cap_lens;
};

void k25_gold_stats_init(struct k25_gold_stats *s, const char *path);
/* Adds one request; K25_ENOMEM on allocation failure. */
int k25_gold_stats_add(struct k25_gold_stats *s, const struct k25_gold_request *r);
/* Computes distributions; copies counts and digest from the finished reader. */
void k25_gold_stats_finish(struct k25_gold_stats *s, const struct k25_gold_counts *c,
                           const char sha256[65]);
void k25_gold_stats_free(struct k25_gold_stats *s);
/* Nearest-rank percentile p (0..100] of sorted v[0..n); 0 when n == 0. */
int64_t k25_gold_percentile(const int64_t *sorted, size_t n, double p);

/* Human-readable report, and a JSON object (caller frees the string). */
int k25_gold_stats_print(FILE *out, const struct k25_gold_stats *s, const struct k25_gold_opts *o);
char *k25_gold_stats_to_json(const struct k25_gold_stats *s, const struct k25_gold_opts *o,
                             const char *filter_expr);

/* SHA-256 of a buffer, or of a file (streamed), as lowercase hex. */
int k25_gold_sha256_hex(const void *data, size_t len, char hex[65], struct k25_error *err);
int k25_gold_sha256_file(const char *path, char hex[65], struct k25_error *err);

/* Validates a whole file and fills statistics (of the selected requests). */
int k25_gold_validate(const char *path, const struct k25_gold_opts *opts,
                      struct k25_gold_stats *stats, struct k25_error *err);

/* ------------------------------------------------------------ generator */

enum k25_gold_domain {
    K25_GOLD_DOMAIN_LEGAL,
    K25_GOLD_DOMAIN_FINANCE,
    K25_GOLD_DOMAIN_MINUTES,
    K25_GOLD_DOMAIN_LICENSES,
    K25_GOLD_DOMAIN_MIXED,
};

int k25_gold_domain_parse(const char *s, enum k25_gold_domain *out, struct k25_error *err);
const char *k25_gold_domain_name(enum k25_gold_domain d);

#define K25_GOLD_GEN_MAX_LENGTHS 64

/* What to generate.  k25_gold_gen_opts_init fills the defaults. */
struct k25_gold_gen_opts {
    enum k25_gold_domain domain;
    int64_t lengths[K25_GOLD_GEN_MAX_LENGTHS]; /* input lengths in tokens (bytes) */
    size_t n_lengths;
    int64_t count;          /* requests in total; request i has lengths[i % n_lengths] */
    int64_t questions;      /* > 1: questions per document: requests i*q .. i*q+q-1 share document i's text
                             * as their prefix (prefix_id set), each ending with its own question */
    uint64_t seed;
    int64_t out_min, out_max; /* expected_output_length drawn from [min, max] */
    char licenses_dir[1024];  /* K25_GOLD_LICENSES_DIR by default */
    /* NULL: lengths are bytes (the presets' byte tokenizer).  Set: lengths are tokens as this
     * counts a request's whole input (prompt, separator, text; a model's tokenizer with its BOS
     * template), met exactly: the text is cut where the count is the length.  Returns 0 or a
     * K25_E* code with err filled.  Not with questions > 1. */
    int (*count_tokens)(void *ctx, const char *text, size_t len, int64_t *n_tokens, struct k25_error *err);
    void *count_ctx;
};

void k25_gold_gen_opts_init(struct k25_gold_gen_opts *o);

/*
 * Parses "4k,32k,128k" (k = 1024, m = 1024*1024) into o->lengths, and
 * "N" or "MIN-MAX" into o->out_min/out_max.  K25_EINVAL naming the item.
 */
int k25_gold_parse_lengths(const char *s, struct k25_gold_gen_opts *o, struct k25_error *err);
int k25_gold_parse_output_length(const char *s, struct k25_gold_gen_opts *o, struct k25_error *err);
/* Parses one size with optional k/m suffix; false on junk or overflow. */
bool k25_gold_parse_size(const char *s, int64_t *out);

/*
 * Writes o->count requests as JSONL to out.  Same options, same bytes
 * (for `licenses`, given the same license files).  Every request's
 * input_length is within 1% of its asked length (exact unless a UTF-8
 * character straddles the cut).  Errors: K25_EINVAL for bad options,
 * K25_ENOTFOUND when the licenses folder has no readable license file,
 * K25_EIO when a write fails.
 */
int k25_gold_generate(const struct k25_gold_gen_opts *o, FILE *out, struct k25_error *err);

/*
 * A synthetic workload spec as vLLM's and guidellm's benchmarks take it:
 * "random:input=8192,output=256[,stdev=S]" into generator options for count
 * requests: input lengths drawn (seeded) from a normal distribution of mean
 * input and standard deviation S (default 0: all equal), clamped to
 * [64, 32 Mi]; expected_output_length = output.  The caller sets
 * count_tokens for lengths in a model's tokens (else bytes).  K25_EINVAL
 * naming the key for anything else.
 */
int k25_gold_random_spec(const char *spec, int64_t count, uint64_t seed, struct k25_gold_gen_opts *o,
                         struct k25_error *err);

#endif /* K25_GOLD_H */
