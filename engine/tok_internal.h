/*
 * tok_internal.h - the parts of a loaded tokenizer.json (k25_tok.h), shared
 * by the files that build and run them:
 *
 *   tok_hf.c      loader (JSON -> these structs, errors with JSON paths),
 *                 the encode pipeline, the public entry points
 *   tok_util.c    UTF-8 helpers, string->id hash map, growable buffers
 *   tok_bpe.c     the BPE model: vocab, merge ranks, word -> ids (heap), cache
 *   tok_norm.c    normalizers (utf8proc NFC/NFKC/..., Prepend, Replace)
 *   tok_pre.c     pre-tokenizers (Split with PCRE2, ByteLevel, Metaspace)
 *   tok_added.c   added tokens: trie, leftmost-longest matching with flags
 *   tok_decode.c  decoders, the post-processor template, streaming decode
 *   tok_chat.c    named chat templates
 */
#ifndef K25_TOK_INTERNAL_H
#define K25_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include "k25_tok.h"

#include <jansson.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------ utilities */

/* Growable byte buffer; owns data. */
struct tok_buf {
    char *data;
    size_t len, cap;
};
int tok_buf_put(struct tok_buf *b, const void *p, size_t n); /* 0 or K25_ENOMEM */
void tok_buf_free(struct tok_buf *b);

/* Growable id list; owns v. */
struct tok_ids {
    int32_t *v;
    int n, cap;
};
int tok_ids_push(struct tok_ids *l, int32_t id);
int tok_ids_put(struct tok_ids *l, const int32_t *v, int n);

/* Byte length of the UTF-8 sequence starting with lead byte c (1 for an invalid lead). */
int tok_utf8_len(unsigned char c);
/* Offset of the first invalid byte of s[n], or n when it is valid UTF-8. */
size_t tok_utf8_check(const char *s, size_t n);
/* Appends s[n] to out with every maximal invalid subsequence replaced by U+FFFD (as Rust's
 * String::from_utf8_lossy and the WHATWG decoder). */
int tok_utf8_lossy(struct tok_buf *out, const char *s, size_t n);
/* Decodes one code point at s (valid UTF-8 assumed); *len its byte length. */
uint32_t tok_utf8_decode(const char *s, int *len);
int tok_utf8_encode(uint32_t cp, char out[4]);

/* Open-addressing map from byte strings to int32 values; keys are copied into an arena. */
struct tok_strmap {
    uint32_t cap;     /* power of two */
    uint32_t n;
    uint32_t *slot;   /* [cap] entry index + 1, 0 = empty */
    uint64_t *hash;   /* [n] */
    uint32_t *koff;   /* [n] key offset in keys.data */
    uint32_t *klen;   /* [n] */
    int32_t *val;     /* [n] */
    uint32_t ecap;
    struct tok_buf keys;
};
uint64_t tok_hash(const void *p, size_t n);
/* Inserts; *dup set (and nothing changed) when the key is already there.  0 or K25_ENOMEM. */
int tok_strmap_put(struct tok_strmap *m, const char *k, size_t n, int32_t v, bool *dup);
/* The value of key k[n], or -1. */
int32_t tok_strmap_get(const struct tok_strmap *m, const char *k, size_t n);
void tok_strmap_free(struct tok_strmap *m);

/* A compiled PCRE2 regex (UTF + UCP, JIT when the library has it). */
struct tok_regex {
    pcre2_code *code;
};
/* Compiles pattern[n]; errors name file and path with PCRE2's message and offset. */
int tok_regex_compile(struct tok_regex *re, const char *pattern, size_t n, const char *file, const char *path,
                      struct k25_error *err);
void tok_regex_free(struct tok_regex *re);
/* Finds the first match in s[n] at or after start: 0 with *ms and *me, 1 when none, < 0 on a PCRE2 error
 * (err set).  md is the caller's match data (one per thread). */
int tok_regex_find(const struct tok_regex *re, const char *s, size_t n, size_t start, pcre2_match_data *md,
                   size_t *ms, size_t *me, struct k25_error *err);

/* A pattern as tokenizer.json writes it: {"String": "..."} or {"Regex": "..."}. */
struct tok_pattern {
    bool is_regex;
    char *str;        /* String: the literal (owned) */
    size_t str_len;
    struct tok_regex re;
};
int tok_pattern_parse(struct tok_pattern *p, json_t *j, const char *file, const char *path, struct k25_error *err);
void tok_pattern_free(struct tok_pattern *p);
/* Calls each match [ms, me) of p in s[n] in order (non-overlapping, leftmost first). */
typedef int (*tok_match_fn)(void *user, size_t ms, size_t me);
int tok_pattern_each(const struct tok_pattern *p, const char *s, size_t n, pcre2_match_data *md, tok_match_fn fn,
                     void *user, struct k25_error *err);

/* err as k25_error_set sets it (code, file, line, field), with the message exactly fmt's text:
 * the tokenizer's messages name the file and JSON path themselves ("tokenizer.json:
 * /model/type: unsupported model \"WordPiece\""). */
int tok_fail(struct k25_error *err, int code, const char *file, int line, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* JSON reading with paths in errors ("tokenizer.json: /model/merges/3: expected a string"). */
struct tok_ctx {
    const char *file;  /* name errors give the file */
};
int tok_err_type(const struct tok_ctx *c, const char *path, const char *want, struct k25_error *err);
/* Member key of object o at path: *out may be NULL when absent and !required. */
int tok_get(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required, json_t **out,
            struct k25_error *err);
int tok_get_str(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required,
                const char **out, struct k25_error *err);
int tok_get_bool(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool deflt, bool *out,
                 struct k25_error *err);
int tok_get_int(const struct tok_ctx *c, json_t *o, const char *path, const char *key, bool required,
                int64_t deflt, int64_t *out, struct k25_error *err);
/* The component's "type" string, or K25_EFORMAT naming path/type. */
int tok_get_type(const struct tok_ctx *c, json_t *o, const char *path, const char **out, struct k25_error *err);
int tok_unsupported(const struct tok_ctx *c, const char *path, const char *what, const char *name,
                    struct k25_error *err);

/* ------------------------------------------------------------ the model */

struct tok_bpe_cache;

struct tok_bpe {
    int32_t n_ids;          /* highest vocab id + 1 */
    char **str;             /* [n_ids] the token (NUL-terminated, in strs), NULL where no token has the id */
    uint32_t *len;          /* [n_ids] */
    struct tok_buf strs;
    struct tok_strmap vocab;
    /* merges: (left id << 32 | right id) -> (rank << 32 | merged id), open addressing */
    uint64_t *mkey, *mval;
    uint32_t mcap;
    int32_t char_id[2048];  /* id of the one-character token of code point cp < 2048, -1 none (fast path) */
    int32_t byte_id[256];   /* <0xXX> tokens (byte_fallback), -1 none */
    int32_t unk_id;         /* -1 none */
    bool fuse_unk, byte_fallback, ignore_merges;
    char *prefix;           /* continuing_subword_prefix, NULL none */
    size_t prefix_len;
    char *suffix;           /* end_of_word_suffix, NULL none */
    size_t suffix_len;
    struct tok_bpe_cache *cache;
};
int tok_bpe_load(struct tok_bpe *m, const struct tok_ctx *c, json_t *model, struct k25_error *err);
void tok_bpe_free(struct tok_bpe *m);
/* Appends the ids of one pre-tokenized word w[n] to out. */
int tok_bpe_word(const struct tok_bpe *m, const char *w, size_t n, struct tok_ids *out);

/* ------------------------------------------------------------ normalizers */

enum tok_norm_kind { TOK_NORM_NFC, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD, TOK_NORM_PREPEND, TOK_NORM_REPLACE };
struct tok_norm {
    enum tok_norm_kind kind;
    char *text;             /* Prepend: what; Replace: the content */
    size_t text_len;
    struct tok_pattern pat; /* Replace */
};
struct tok_norms {
    struct tok_norm *v;     /* applied in order (a Sequence flattened) */
    int n;
};
/* Parses the "normalizer" member (NULL/null: none) at path. */
int tok_norms_load(struct tok_norms *ns, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err);
void tok_norms_free(struct tok_norms *ns);
/* Normalizes s[n] into out (replacing its contents). */
int tok_norms_apply(const struct tok_norms *ns, const char *s, size_t n, pcre2_match_data *md, struct tok_buf *out,
                    struct k25_error *err);

/* ------------------------------------------------------------ pre-tokenizers */

enum tok_split_behavior { TOK_SPLIT_REMOVED, TOK_SPLIT_ISOLATED, TOK_SPLIT_MERGED_PREV, TOK_SPLIT_MERGED_NEXT,
                          TOK_SPLIT_CONTIGUOUS };
enum tok_prepend { TOK_PREPEND_ALWAYS, TOK_PREPEND_FIRST, TOK_PREPEND_NEVER };
enum tok_pre_kind { TOK_PRE_SPLIT, TOK_PRE_BYTELEVEL, TOK_PRE_METASPACE };
struct tok_pre {
    enum tok_pre_kind kind;
    struct tok_pattern pat;          /* Split; ByteLevel with use_regex: the GPT-2 pattern */
    enum tok_split_behavior behavior; /* Split */
    bool invert;                     /* Split */
    bool add_prefix_space, use_regex; /* ByteLevel */
    char repl[8];                    /* Metaspace: the replacement character (UTF-8) */
    int repl_len;
    enum tok_prepend prepend;        /* Metaspace */
    bool split;                      /* Metaspace */
};
struct tok_pres {
    struct tok_pre *v;
    int n;
};
int tok_pres_load(struct tok_pres *ps, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err);
void tok_pres_free(struct tok_pres *ps);

/* Words of a piece: spans of buf.  first: the word starts at offset 0 of the original text
 * (Metaspace's prepend_scheme "first"). */
struct tok_words {
    struct tok_buf buf;
    size_t *off, *len;
    bool *first;
    int n, cap;
};
int tok_words_add(struct tok_words *w, const char *s, size_t n, bool first);
void tok_words_reset(struct tok_words *w);
void tok_words_free(struct tok_words *w);
/* Runs the pre-tokenizers over piece s[n] (at_start: it begins the original text); the words
 * end in *out (scratch is a second word list the steps alternate with). */
int tok_pres_apply(const struct tok_pres *ps, const char *s, size_t n, bool at_start, pcre2_match_data *md,
                   struct tok_words *out, struct tok_words *scratch, struct k25_error *err);
/* The byte-level alphabet: byte -> code point (GPT-2's bytes_to_unicode) and back (-1: not one). */
uint32_t tok_bytelevel_char(unsigned char b);
int tok_bytelevel_byte(uint32_t cp);

/* ------------------------------------------------------------ added tokens */

struct tok_added {
    int32_t id;
    char *content;          /* owned */
    size_t len;
    bool special, lstrip, rstrip, normalized, single_word;
};
struct tok_trie;            /* tok_added.c */
struct tok_addeds {
    struct tok_added *v;
    int n;
    struct tok_trie *raw;   /* tokens with normalized false, matched on the input text */
    struct tok_trie *norm;  /* tokens with normalized true, matched on normalized text (content normalized) */
};
int tok_addeds_load(struct tok_addeds *a, const struct tok_ctx *c, json_t *j, const struct tok_norms *ns,
                    struct k25_error *err);
void tok_addeds_free(struct tok_addeds *a);
bool tok_trie_empty(const struct tok_trie *t);
/* One match: [start, end) of s is added token v[index] (lstrip/rstrip already applied). */
struct tok_match {
    size_t start, end;
    int index;
};
/* Finds the matches of trie in s[n] as HF's AddedVocabulary does (leftmost-longest, flags
 * applied); *out malloc'd (caller frees), *n_out its count. */
int tok_addeds_find(const struct tok_addeds *a, const struct tok_trie *trie, const char *s, size_t n,
                    struct tok_match **out, int *n_out);

/* ------------------------------------------------------------ decoders */

enum tok_dec_kind { TOK_DEC_BYTELEVEL, TOK_DEC_METASPACE, TOK_DEC_BYTEFALLBACK, TOK_DEC_FUSE, TOK_DEC_STRIP,
                    TOK_DEC_REPLACE };
struct tok_dec {
    enum tok_dec_kind kind;
    struct tok_pattern pat; /* Replace */
    char *text;             /* Replace: content */
    size_t text_len;
    char ch[8];             /* Strip: content; Metaspace: replacement (UTF-8) */
    int ch_len;
    int start, stop;        /* Strip */
    enum tok_prepend prepend; /* Metaspace */
};
struct tok_decs {
    struct tok_dec *v;
    int n;
    bool present;           /* false: no decoder, tokens joined with spaces (as HF) */
};
int tok_decs_load(struct tok_decs *d, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err);
void tok_decs_free(struct tok_decs *d);

/* ------------------------------------------------------------ post-processor */

struct tok_post {
    struct tok_ids before, after; /* TemplateProcessing single: ids around $A; empty: none */
};
int tok_post_load(struct tok_post *p, const struct tok_ctx *c, json_t *j, const char *path, struct k25_error *err);
void tok_post_free(struct tok_post *p);

/* ------------------------------------------------------------ the tokenizer */

struct k25_tokenizer {
    char source[1100];
    struct tok_bpe bpe;
    struct tok_norms norms;
    struct tok_pres pres;
    struct tok_addeds added;
    struct tok_decs decs;
    struct tok_post post;
    int32_t n_ids;          /* max over vocab and added tokens, + 1 */
    const char **id_tok;    /* [n_ids] token string by id (added content first, then vocab) */
    uint32_t *id_len;       /* [n_ids] */
    uint8_t *id_special;    /* [n_ids] 1 for added tokens marked special */
    uint8_t *id_added;      /* [n_ids] 1 for added tokens */
    enum k25_chat_template chat;   /* recognised from tokenizer_config.json */
    char chat_why[1400];    /* why none was recognised */
    char config_path[1100]; /* DIR/tokenizer_config.json as named in errors */
    uint32_t max_pattern_len; /* longest regex pattern, for PCRE2 match data sizing */
};

/* Decodes ids[n] into out (valid UTF-8).  With stream_hold, it reports in *ends_open whether
 * the text ends with U+FFFD (the stream's "not complete yet" test, as HF's DecodeStream). */
int tok_decode_into(const struct k25_tokenizer *t, const int32_t *ids, int n, unsigned flags, struct tok_buf *out,
                    struct k25_error *err);

/* Recognises a chat_template text; K25_CHAT_NONE when it is none of the named ones. */
enum k25_chat_template tok_chat_recognise(const char *tpl);

#endif /* K25_TOK_INTERNAL_H */
