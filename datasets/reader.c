/*
 * reader.c - the gold-set loader and validator.
 *
 * Streams a JSONL file through a bounded line reader (one read buffer plus
 * at most one line of max_line_bytes, so multi-GB sets never sit in
 * memory), hashes every byte with SHA-256 on the way, checks each line
 * against the schema and reports every problem as
 * "FILE:LINE: field 'x': what is wrong".  Valid requests come out one at a
 * time (k25_gold_next) or as an array (k25_gold_load, for `k25 bench`).
 * Ids are remembered in a hash set to catch duplicates across the file.
 */
#include "gold.h"
#include "gold_internal.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define READ_CHUNK ((size_t)1 << 20) /* bytes per fread */

/* Open-addressing set of ids seen on valid lines, with their line. */
struct idslot {
    char *id;
    int64_t line;
};

struct idset {
    struct idslot *slots; /* [cap], cap a power of two */
    size_t cap, n;
};

struct k25_gold_reader {
    char path[1024];
    FILE *f;
    struct k25_gold_opts o;
    char *rbuf;             /* [READ_CHUNK] */
    size_t rpos, rlen;
    bool eof;
    char *lbuf;             /* a line straddling reads, up to max_line_bytes */
    bool gave_up;           /* a line had no end in sight: reading stopped (read_line) */
    size_t llen, lcap;
    EVP_MD_CTX *md;         /* SHA-256 of the bytes read */
    int64_t line_no;
    struct k25_gold_counts c;
    struct k25_error first; /* first error diagnostic */
    struct idset ids;
    bool line_bad;          /* the current line had an error */
};

void k25_gold_opts_init(struct k25_gold_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->sanitize = K25_GOLD_SANITIZE_STRIP;
    o->on_error = K25_GOLD_ON_ERROR_ABORT;
    o->max_line_bytes = K25_GOLD_MAX_LINE_BYTES_DEFAULT;
}

/* ------------------------------------------------------------------ ids */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static struct idslot *idset_find(struct idset *s, const char *id)
{
    if (!s->cap)
        return NULL;
    size_t i = hash_str(id) & (s->cap - 1);
    while (s->slots[i].id) {
        if (!strcmp(s->slots[i].id, id))
            return &s->slots[i];
        i = (i + 1) & (s->cap - 1);
    }
    return NULL;
}

/* Adds id (copied); false on allocation failure.  Grows at 50% load. */
static bool idset_add(struct idset *s, const char *id, int64_t line)
{
    if (2 * (s->n + 1) > s->cap) {
        size_t ncap = s->cap ? 2 * s->cap : 1024;
        struct idslot *ns = calloc(ncap, sizeof(*ns));
        if (!ns)
            return false;
        for (size_t i = 0; i < s->cap; i++) {
            if (!s->slots[i].id)
                continue;
            size_t j = hash_str(s->slots[i].id) & (ncap - 1);
            while (ns[j].id)
                j = (j + 1) & (ncap - 1);
            ns[j] = s->slots[i];
        }
        free(s->slots);
        s->slots = ns;
        s->cap = ncap;
    }
    char *dup = strdup(id);
    if (!dup)
        return false;
    size_t i = hash_str(id) & (s->cap - 1);
    while (s->slots[i].id)
        i = (i + 1) & (s->cap - 1);
    s->slots[i].id = dup;
    s->slots[i].line = line;
    s->n++;
    return true;
}

static void idset_free(struct idset *s)
{
    for (size_t i = 0; i < s->cap; i++)
        free(s->slots[i].id);
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

/* ---------------------------------------------------------- diagnostics */

/*
 * Reports one problem on the current line: "FILE:LINE: field 'x': what"
 * (or "FILE:LINE: what" when field is NULL).  Errors mark the line bad.
 */
__attribute__((format(printf, 5, 6))) static void diag(struct k25_gold_reader *r,
                                                       enum k25_gold_severity sev, int code,
                                                       const char *field, const char *fmt, ...)
{
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    struct k25_error e;
    int line = r->line_no > 0x7fffffff ? 0 : (int)r->line_no;
    if (field)
        k25_error_set(&e, code, r->path, line, NULL, "field '%s': %s", field, what);
    else
        k25_error_set(&e, code, r->path, line, NULL, "%s", what);
    if (field)
        snprintf(e.field, sizeof(e.field), "%s", field);
    if (sev == K25_GOLD_ERROR) {
        r->line_bad = true;
        r->c.errors++;
        if (!r->first.code)
            r->first = e;
    } else {
        r->c.warnings++;
    }
    if (r->o.diag)
        r->o.diag(r->o.diag_user, sev, &e);
}

/* A line over max_line_bytes is skipped to its end to go on with the next,
 * but only this many times the limit: then reading stops (no end in sight). */
#define K25_GOLD_SKIP_FACTOR 16

/* ---------------------------------------------------------- line reader */

/*
 * Reads the next line (without its '\n').  Returns 1 with the line in *line and *len (a
 * view into the read buffer or the line buffer, valid until the next
 * call), 0 at the end of the file, K25_EIO on a read error.  A line longer
 * than max_line_bytes is consumed to its end but not stored: *too_long is
 * set and *full_len tells its size.  A line still without an end after
 * K25_GOLD_SKIP_FACTOR x max_line_bytes (/dev/zero, a binary file) ends the
 * reading there: *too_long is set, r->gave_up too, and the next call
 * returns 0.
 */
static int read_line(struct k25_gold_reader *r, const char **line, size_t *len, bool *too_long,
                     int64_t *full_len, struct k25_error *err)
{
    size_t max = r->o.max_line_bytes;
    bool any = false, longer = false;
    int64_t total = 0;
    r->llen = 0;
    for (;;) {
        if (r->rpos == r->rlen) {
            if (r->eof)
                break;
            size_t n = fread(r->rbuf, 1, READ_CHUNK, r->f);
            if (n < READ_CHUNK) {
                if (ferror(r->f))
                    return k25_error_set(err, K25_EIO, r->path, 0, NULL, "read failed: %s",
                                         strerror(errno));
                r->eof = true;
            }
            if (n && EVP_DigestUpdate(r->md, r->rbuf, n) != 1)
                return k25_error_set(err, K25_EINTERNAL, r->path, 0, NULL,
                                     "SHA-256 update failed");
            r->c.bytes += (int64_t)n;
            r->rpos = 0;
            r->rlen = n;
            if (n == 0)
                break;
        }
        char *start = r->rbuf + r->rpos;
        size_t avail = r->rlen - r->rpos;
        char *nl = memchr(start, '\n', avail);
        size_t seg = nl ? (size_t)(nl - start) : avail;
        any = true;
        if (nl && r->llen == 0 && !longer) {
            /* The whole line is in the read buffer: hand out a view. */
            r->rpos += seg + 1;
            *line = start;
            *len = seg;
            *too_long = seg > max;
            *full_len = (int64_t)seg;
            return 1;
        }
        total += (int64_t)seg;
        if (!longer && r->llen + seg <= max) {
            if (r->llen + seg > r->lcap) {
                size_t ncap = r->lcap ? r->lcap : 4096;
                while (ncap < r->llen + seg)
                    ncap *= 2;
                if (ncap > max)
                    ncap = max;
                char *nb = realloc(r->lbuf, ncap);
                if (!nb)
                    return k25_error_set(err, K25_ENOMEM, r->path, 0, NULL,
                                         "out of memory for a %zu-byte line", ncap);
                r->lbuf = nb;
                r->lcap = ncap;
            }
            memcpy(r->lbuf + r->llen, start, seg);
            r->llen += seg;
        } else {
            longer = true;
        }
        r->rpos += seg + (nl ? 1 : 0);
        if (nl)
            break;
        if (longer && (uint64_t)total / K25_GOLD_SKIP_FACTOR >= (uint64_t)max) {
            r->gave_up = true;
            r->eof = true;
            r->rpos = r->rlen;
            break;
        }
    }
    if (!any)
        return 0;
    *line = r->lbuf;
    *len = longer ? 0 : r->llen;
    *too_long = longer;
    *full_len = total;
    return 1;
}

/* ------------------------------------------------------------- checking */

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number with a fraction";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "something else";
}

/*
 * Names the JSON key whose string value holds byte offset `at` of the raw
 * line, by a small scan that tracks strings and nesting ("" when the byte
 * is in a key or outside strings).  Used to put a field name on invalid
 * UTF-8, which jansson cannot parse at all.
 */
static void field_at(const char *s, size_t len, size_t at, char *out, size_t outsz)
{
    int depth = 0;
    bool in_str = false;
    size_t str0 = 0;
    char key[96] = "";
    char last[96] = ""; /* last string closed at depth 1 */
    out[0] = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (i >= at) {
                /* inside a value string: name its top-level key */
                snprintf(out, outsz, "%s", key);
                return;
            }
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                in_str = false;
                if (depth == 1)
                    snprintf(last, sizeof(last), "%.*s", (int)(i - str0 - 1 < 90 ? i - str0 - 1 : 90),
                             s + str0 + 1);
            }
            continue;
        }
        if (i >= at)
            return;
        switch (c) {
        case '"':
            in_str = true;
            str0 = i;
            break;
        case '{':
        case '[':
            depth++;
            break;
        case '}':
        case ']':
            depth--;
            break;
        case ':':
            if (depth == 1)
                snprintf(key, sizeof(key), "%s", last);
            break;
        case ',':
            if (depth == 1)
                key[0] = 0;
            break;
        default:
            break;
        }
    }
}

/* Copies a string field and applies the sanitize policy; false on error. */
static bool take_text(struct k25_gold_reader *r, const char *field, json_t *v, char **out,
                      size_t *out_len, struct k25_gold_request *req)
{
    size_t n = json_string_length(v);
    char *s = malloc(n + 1);
    if (!s) {
        diag(r, K25_GOLD_ERROR, K25_ENOMEM, field, "out of memory (%zu bytes)", n + 1);
        return false;
    }
    memcpy(s, json_string_value(v), n);
    s[n] = 0;
    struct k25_gold_sanitize_counts sc;
    size_t nn = k25_gold_sanitize_text(s, n, r->o.sanitize, &sc);
    size_t found = sc.invisible + sc.control;
    if (found) {
        r->c.invisible_chars += (int64_t)sc.invisible;
        r->c.control_chars += (int64_t)sc.control;
        r->c.sanitized_chars += (int64_t)found;
        req->sanitized_chars += (int64_t)found;
        if (r->o.sanitize == K25_GOLD_SANITIZE_REJECT) {
            diag(r, K25_GOLD_ERROR, K25_EINVAL, field,
                 "%zu invisible or control character%s, the first U+%04X at byte %zu "
                 "(--sanitize reject; strip removes them)",
                 found, found == 1 ? "" : "s", (unsigned)sc.first_cp, sc.first_off);
            free(s);
            return false;
        }
    }
    *out = s;
    *out_len = nn;
    return true;
}

static const char *const known_fields[] = {"id",     "text",   "input_ids",          "expected_output_length",
                                           "domain", "prompt", "block_pattern_hint", "meta",
                                           "priority", "prefix_id"};

/*
 * The line as one JSON object: length, byte order mark, blank line, UTF-8
 * and JSON syntax checked, each failure a diagnostic naming the column or
 * byte.  NULL (the line is bad) or the object (the caller's to release).
 */
static json_t *parse_line(struct k25_gold_reader *r, const char *buf, size_t len, bool too_long, int64_t full_len)
{
    if (too_long && r->gave_up) {
        diag(r, K25_GOLD_ERROR, K25_ERANGE, NULL,
             "line has no end after %lld bytes, over the limit of %zu (--max-line-bytes): reading stopped "
             "(not a JSONL file?)",
             (long long)full_len, r->o.max_line_bytes);
        return NULL;
    }
    if (too_long) {
        diag(r, K25_GOLD_ERROR, K25_ERANGE, NULL,
             "line is %lld bytes, over the limit of %zu (--max-line-bytes)", (long long)full_len,
             r->o.max_line_bytes);
        return NULL;
    }
    if (r->line_no == 1 && len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) {
        diag(r, K25_GOLD_ERROR, K25_EFORMAT, NULL,
             "UTF-8 byte order mark (EF BB BF) at the start of the file; save it without one");
        buf += 3;
        len -= 3;
    }
    if (len && buf[len - 1] == '\r')
        len--;
    size_t k = 0;
    while (k < len && (buf[k] == ' ' || buf[k] == '\t' || buf[k] == '\r'))
        k++;
    if (k == len) {
        diag(r, K25_GOLD_ERROR, K25_EFORMAT, NULL, "blank line (one JSON object per line)");
        return NULL;
    }
    size_t bad;
    if (!k25_gold_utf8_valid(buf, len, &bad)) {
        char field[96];
        field_at(buf, len, bad, field, sizeof(field));
        diag(r, K25_GOLD_ERROR, K25_EFORMAT, field[0] ? field : NULL, "invalid UTF-8 at byte %zu of the line (0x%02X)",
             bad + 1, (unsigned)(unsigned char)buf[bad]);
        return NULL;
    }
    json_error_t je;
    json_t *o = json_loadb(buf, len, JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
    if (!o) {
        diag(r, K25_GOLD_ERROR, K25_EFORMAT, NULL, "not JSON: %s (column %d)", je.text, je.column);
        return NULL;
    }
    if (!json_is_object(o)) {
        diag(r, K25_GOLD_ERROR, K25_EFORMAT, NULL, "not a JSON object (found %s)",
             json_type_name(o));
        json_decref(o);
        return NULL;
    }
    return o;
}

/* The request's id and its input (text, or input_ids), each failure a diagnostic naming the field. */
static void check_input(struct k25_gold_reader *r, json_t *o, struct k25_gold_request *req)
{
    /* id */
    json_t *v = json_object_get(o, "id");
    if (!v)
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "id", "missing");
    else if (!json_is_string(v))
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "id", "must be a string, found %s", json_type_name(v));
    else if (json_string_length(v) == 0)
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "id", "empty");
    else if (strlen(json_string_value(v)) != json_string_length(v))
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "id", "contains a NUL character");
    else if (!(req->id = strdup(json_string_value(v))))
        diag(r, K25_GOLD_ERROR, K25_ENOMEM, "id", "out of memory");

    /* text or input_ids */
    json_t *text = json_object_get(o, "text");
    json_t *ids = json_object_get(o, "input_ids");
    if (!text && !ids) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "text", "missing (give text or input_ids)");
    } else if (text && ids) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "input_ids", "give text or input_ids, not both");
    } else if (text) {
        if (!json_is_string(text))
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "text", "must be a string, found %s",
                 json_type_name(text));
        else if (json_string_length(text) == 0)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "text", "empty text");
        else if (take_text(r, "text", text, &req->text, &req->text_len, req) && req->text_len == 0)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "text",
                 "empty text after removing invisible characters");
    } else {
        if (!json_is_array(ids)) {
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "input_ids", "must be an array of integers, found %s",
                 json_type_name(ids));
        } else if (json_array_size(ids) == 0) {
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "input_ids", "empty array");
        } else {
            size_t n = json_array_size(ids);
            req->input_ids = malloc(n * sizeof(int32_t));
            if (!req->input_ids) {
                diag(r, K25_GOLD_ERROR, K25_ENOMEM, "input_ids", "out of memory (%zu ids)", n);
            } else {
                for (size_t i = 0; i < n; i++) {
                    json_t *e = json_array_get(ids, i);
                    if (!json_is_integer(e)) {
                        diag(r, K25_GOLD_ERROR, K25_EINVAL, "input_ids",
                             "element %zu must be a non-negative integer, found %s", i,
                             json_type_name(e));
                        break;
                    }
                    json_int_t x = json_integer_value(e);
                    if (x < 0 || x > INT32_MAX) {
                        diag(r, K25_GOLD_ERROR, K25_ERANGE, "input_ids",
                             "element %zu is %lld: must be a non-negative integer below 2^31", i,
                             (long long)x);
                        break;
                    }
                    req->input_ids[i] = (int32_t)x;
                }
                req->n_input_ids = n;
            }
        }
    }
}

/* expected_output_length and the optional fields (domain, prompt, block_pattern_hint, priority,
 * prefix_id, meta), each failure a diagnostic naming the field. */
static void check_fields(struct k25_gold_reader *r, json_t *o, struct k25_gold_request *req)
{
    json_t *v, *text = json_object_get(o, "text"), *ids = json_object_get(o, "input_ids");
    /* expected_output_length */
    v = json_object_get(o, "expected_output_length");
    if (!v) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "expected_output_length", "missing");
    } else if (!json_is_integer(v)) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "expected_output_length",
             "must be a positive integer, found %s", json_type_name(v));
    } else if (json_integer_value(v) <= 0) {
        diag(r, K25_GOLD_ERROR, K25_ERANGE, "expected_output_length", "must be positive, found %lld",
             (long long)json_integer_value(v));
    } else if (json_integer_value(v) > INT32_MAX) {
        diag(r, K25_GOLD_ERROR, K25_ERANGE, "expected_output_length",
             "%lld is out of range (at most 2147483647)", (long long)json_integer_value(v));
    } else {
        req->expected_output_length = json_integer_value(v);
    }

    /* domain */
    v = json_object_get(o, "domain");
    if (v && !json_is_string(v))
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "domain", "must be a string, found %s",
             json_type_name(v));
    else if (v && !(req->domain = strdup(json_string_value(v))))
        diag(r, K25_GOLD_ERROR, K25_ENOMEM, "domain", "out of memory");

    /* prompt */
    v = json_object_get(o, "prompt");
    if (v && !json_is_string(v)) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "prompt", "must be a string, found %s",
             json_type_name(v));
    } else if (v && ids && !text) {
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "prompt",
             "not allowed with input_ids (put the prompt's ids in input_ids)");
    } else if (v) {
        size_t plen;
        take_text(r, "prompt", v, &req->prompt, &plen, req);
    }

    /* block_pattern_hint */
    v = json_object_get(o, "block_pattern_hint");
    if (v) {
        const char *h = json_is_string(v) ? json_string_value(v) : NULL;
        if (h && !strcmp(h, "auto"))
            req->hint = K25_HINT_AUTO;
        else if (h && !strcmp(h, "legal_doc"))
            req->hint = K25_HINT_LEGAL_DOC;
        else if (h && !strcmp(h, "plain_text"))
            req->hint = K25_HINT_PLAIN_TEXT;
        else if (h)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "block_pattern_hint",
                 "unknown value '%.64s' (auto, legal_doc or plain_text)", h);
        else
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "block_pattern_hint", "must be a string, found %s",
                 json_type_name(v));
    }

    /* priority (the engine's elastic queue: high never spills) */
    v = json_object_get(o, "priority");
    if (v) {
        const char *pn = json_is_string(v) ? json_string_value(v) : NULL;
        struct k25_error perr;
        if (!pn)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "priority", "must be a string, found %s", json_type_name(v));
        else if (k25_priority_parse(pn, &req->priority, &perr) != K25_OK)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "priority", "unknown value '%.64s' (high, standard or low)", pn);
    }

    /* prefix_id (optional): requests sharing a document prefix */
    v = json_object_get(o, "prefix_id");
    if (v && !json_is_string(v))
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "prefix_id", "must be a string, found %s", json_type_name(v));
    else if (v && !(req->prefix_id = strdup(json_string_value(v))))
        diag(r, K25_GOLD_ERROR, K25_ENOMEM, "prefix_id", "out of memory");

    /* meta */
    v = json_object_get(o, "meta");
    if (v && !json_is_object(v))
        diag(r, K25_GOLD_ERROR, K25_EINVAL, "meta", "must be an object, found %s",
             json_type_name(v));
    else if (v && !(req->meta_json = json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        diag(r, K25_GOLD_ERROR, K25_ENOMEM, "meta", "out of memory");
}

/* Fields the format does not name: a warning each, kept in req->extra_json. */
static void keep_unknown(struct k25_gold_reader *r, json_t *o, struct k25_gold_request *req)
{
    const char *key;
    json_t *val;
    json_t *extra = NULL;
    json_object_foreach(o, key, val)
    {
        bool known = false;
        for (size_t i = 0; i < sizeof(known_fields) / sizeof(known_fields[0]); i++)
            known = known || !strcmp(key, known_fields[i]);
        if (known)
            continue;
        diag(r, K25_GOLD_WARNING, K25_OK, key, "unknown field, kept as is");
        if (!extra)
            extra = json_object();
        if (extra)
            json_object_set(extra, key, val);
    }
    if (extra) {
        req->extra_json = json_dumps(extra, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(extra);
    }
}

/*
 * Checks one line against the schema and fills req: framing (parse_line),
 * the id and input, the other fields, unknown fields kept, then the id's
 * uniqueness and the input length of a valid line.  Every problem found is
 * reported (the checks go on after the first where they still make sense).
 * Returns true when the line is a valid request.
 */
static bool check_line(struct k25_gold_reader *r, const char *buf, size_t len, bool too_long,
                       int64_t full_len, struct k25_gold_request *req)
{
    r->line_bad = false;
    memset(req, 0, sizeof(*req));
    req->line = r->line_no;
    json_t *o = parse_line(r, buf, len, too_long, full_len);
    if (!o)
        return false;
    check_input(r, o, req);
    check_fields(r, o, req);
    keep_unknown(r, o, req);

    /* duplicate id: only ids of otherwise valid lines count */
    if (!r->line_bad && req->id) {
        struct idslot *s = idset_find(&r->ids, req->id);
        if (s)
            diag(r, K25_GOLD_ERROR, K25_EINVAL, "id", "duplicate id '%.200s' (first on line %lld)",
                 req->id, (long long)s->line);
        else if (!idset_add(&r->ids, req->id, r->line_no))
            diag(r, K25_GOLD_ERROR, K25_ENOMEM, "id", "out of memory");
    }

    if (!r->line_bad) {
        if (req->text) {
            size_t plen = req->prompt ? strlen(req->prompt) : 0;
            req->input_length = (int64_t)(plen ? plen + K25_GOLD_PROMPT_SEP_LEN + req->text_len
                                               : req->text_len);
        } else {
            req->input_length = (int64_t)req->n_input_ids;
        }
    }
    json_decref(o);
    return !r->line_bad;
}

/* -------------------------------------------------------------- reading */

int k25_gold_open(const char *path, const struct k25_gold_opts *opts, k25_gold_reader_t **out,
                  struct k25_error *err)
{
    *out = NULL;
    int rc = K25_ENOMEM;
    struct k25_gold_reader *r = calloc(1, sizeof(*r));
    if (!r)
        return k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
    if (opts)
        r->o = *opts;
    else
        k25_gold_opts_init(&r->o);
    if (r->o.max_line_bytes == 0)
        r->o.max_line_bytes = K25_GOLD_MAX_LINE_BYTES_DEFAULT;
    snprintf(r->path, sizeof(r->path), "%s", path);
    r->rbuf = malloc(READ_CHUNK);
    if (!r->rbuf)
        goto out_free_reader;
    r->md = EVP_MD_CTX_new();
    if (!r->md)
        goto out_free_buf;
    if (EVP_DigestInit_ex(r->md, EVP_sha256(), NULL) != 1) {
        rc = k25_error_set(err, K25_EINTERNAL, path, 0, NULL, "SHA-256 init failed");
        goto out_free_md;
    }
    r->f = fopen(path, "rb");
    if (!r->f) {
        int e = errno;
        rc = k25_error_set(err, e == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL,
                           "cannot open: %s", strerror(e));
        goto out_free_md;
    }
    *out = r;
    return 0;
out_free_md:
    EVP_MD_CTX_free(r->md);
out_free_buf:
    free(r->rbuf);
out_free_reader:
    free(r);
    if (rc == K25_ENOMEM)
        return k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory");
    return rc;
}

int k25_gold_next(k25_gold_reader_t *r, struct k25_gold_request *req, struct k25_error *err)
{
    memset(req, 0, sizeof(*req));
    for (;;) {
        const char *line = NULL;
        size_t len = 0;
        bool too_long = false;
        int64_t full_len = 0;
        int rc = read_line(r, &line, &len, &too_long, &full_len, err);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        r->line_no++;
        r->c.lines++;
        int64_t san_before = r->c.sanitized_chars;
        bool ok = check_line(r, line, len, too_long, full_len, req);
        if (r->c.sanitized_chars != san_before)
            r->c.sanitized_lines++;
        if (!ok) {
            r->c.invalid_lines++;
            k25_gold_request_free(req);
            continue;
        }
        r->c.requests++;
        if (!k25_gold_filter_match(r->o.filter, req)) {
            k25_gold_request_free(req);
            continue;
        }
        r->c.matched++;
        return 1;
    }
    if (r->c.invalid_lines && r->o.on_error == K25_GOLD_ON_ERROR_ABORT) {
        int rc = k25_error_set(err, K25_EFORMAT, r->path, 0, NULL,
                               "%lld invalid line%s of %lld (--on-error abort); first: %s",
                               (long long)r->c.invalid_lines, r->c.invalid_lines == 1 ? "" : "s",
                               (long long)r->c.lines, r->first.msg);
        if (err) {
            err->line = r->first.line;
            snprintf(err->field, sizeof(err->field), "%s", r->first.field);
        }
        return rc;
    }
    return 0;
}

const struct k25_gold_counts *k25_gold_reader_counts(const k25_gold_reader_t *r)
{
    return &r->c;
}

const struct k25_error *k25_gold_reader_first_error(const k25_gold_reader_t *r)
{
    return &r->first;
}

/* Finalizes a copy of the running digest, so reading can go on. */
void k25_gold_reader_sha256(const k25_gold_reader_t *r, char hex[65])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    hex[0] = 0;
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    if (!c)
        return;
    if (EVP_MD_CTX_copy_ex(c, r->md) == 1 && EVP_DigestFinal_ex(c, d, &n) == 1 && n == 32)
        k25_gold_hex(d, n, hex);
    EVP_MD_CTX_free(c);
}

void k25_gold_close(k25_gold_reader_t *r)
{
    if (!r)
        return;
    if (r->f)
        fclose(r->f); /* read-only: nothing to lose on a failed close */
    EVP_MD_CTX_free(r->md);
    free(r->rbuf);
    free(r->lbuf);
    idset_free(&r->ids);
    free(r);
}

/* ------------------------------------------------------------- loading */

int k25_gold_load(const char *path, const struct k25_gold_opts *opts, struct k25_gold_set *out,
                  struct k25_error *err)
{
    memset(out, 0, sizeof(*out));
    k25_gold_reader_t *r = NULL;
    int rc = k25_gold_open(path, opts, &r, err);
    if (rc < 0)
        return rc;
    size_t cap = 0;
    struct k25_gold_request req;
    while ((rc = k25_gold_next(r, &req, err)) == 1) {
        if (out->n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            struct k25_gold_request *nr = realloc(out->reqs, ncap * sizeof(*nr));
            if (!nr) {
                k25_gold_request_free(&req);
                rc = k25_error_set(err, K25_ENOMEM, path, 0, NULL,
                                   "out of memory after %zu requests", out->n);
                goto out_free_set;
            }
            out->reqs = nr;
            cap = ncap;
        }
        out->reqs[out->n++] = req; /* ownership moves to the set */
    }
    if (rc < 0)
        goto out_free_set;
    out->counts = r->c;
    k25_gold_reader_sha256(r, out->sha256);
    k25_gold_close(r);
    return 0;
out_free_set:
    k25_gold_set_free(out);
    k25_gold_close(r);
    return rc;
}

void k25_gold_set_free(struct k25_gold_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        k25_gold_request_free(&s->reqs[i]);
    free(s->reqs);
    memset(s, 0, sizeof(*s));
}
