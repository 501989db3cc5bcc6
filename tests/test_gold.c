/*
 * test_gold.c - the gold-set layer (datasets/): every bad-input message
 * with its FILE:LINE: field, sanitize and on-error policies, filters (and
 * their error columns), statistics and SHA-256, generator determinism and
 * length accuracy, streaming memory, and `k25 gold` end to end.
 */
#include "testutil.h"

#include "gold.h"

#include <jansson.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define VALID1 "{\"id\":\"a\",\"text\":\"hello\",\"expected_output_length\":5}"

/* ------------------------------------------------------------ helpers */

/* Diagnostics collected by a test. */
struct diags {
    int n_err, n_warn;
    struct k25_error err[64];
    struct k25_error warn[16];
};

static void collect(void *user, enum k25_gold_severity sev, const struct k25_error *e)
{
    struct diags *d = user;
    if (sev == K25_GOLD_ERROR) {
        if (d->n_err < 64)
            d->err[d->n_err] = *e;
        d->n_err++;
    } else {
        if (d->n_warn < 16)
            d->warn[d->n_warn] = *e;
        d->n_warn++;
    }
}

/* Writes content to a fresh temporary file; returns its path (caller frees). */
static char *tmpfile_with(const char *content, size_t len)
{
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char *path = NULL;
    assert_true(asprintf(&path, "%s/set.jsonl", dir) > 0);
    free(dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
    return path;
}

static void rm_tmp(char *path)
{
    unlink(path);
    char *slash = strrchr(path, '/');
    *slash = 0;
    rmdir(path);
    free(path);
}

/* Loads content with opts (defaults when NULL), collecting diagnostics. */
static int load_text(const char *content, struct k25_gold_opts *opts, struct diags *d,
                     struct k25_gold_set *set, struct k25_error *err, char **path_out)
{
    struct k25_gold_opts o;
    if (opts)
        o = *opts;
    else
        k25_gold_opts_init(&o);
    memset(d, 0, sizeof(*d));
    o.diag = collect;
    o.diag_user = d;
    char *path = tmpfile_with(content, strlen(content));
    int rc = k25_gold_load(path, &o, set, err);
    if (path_out)
        *path_out = path;
    else
        rm_tmp(path);
    return rc;
}

/*
 * One bad line at line `bad_line` of a file of valid lines: exactly one
 * error diagnostic, "PATH:LINE: " + expected (a prefix), with field set.
 */
static void expect_bad(const char *bad, int bad_line, const char *expected, const char *field)
{
    char content[8192] = "";
    for (int i = 1; i <= 3; i++) {
        if (i == bad_line)
            strcat(content, bad);
        else
            snprintf(content + strlen(content), sizeof(content) - strlen(content),
                     "{\"id\":\"ok%d\",\"text\":\"fine\",\"expected_output_length\":3}", i);
        strcat(content, "\n");
    }
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    char *path;
    int rc = load_text(content, NULL, &d, &set, &err, &path);
    assert_int_equal(rc, K25_EFORMAT);
    assert_int_equal(set.n, 0);
    if (d.n_err != 1) {
        for (int i = 0; i < d.n_err && i < 64; i++)
            print_error("diag: %s\n", d.err[i].msg);
    }
    assert_int_equal(d.n_err, 1);
    char want[4096];
    snprintf(want, sizeof(want), "%s:%d: %s", path, bad_line, expected);
    if (strncmp(d.err[0].msg, want, strlen(want)) != 0)
        print_error("got:  %s\nwant: %s...\n", d.err[0].msg, want);
    assert_true(strncmp(d.err[0].msg, want, strlen(want)) == 0);
    assert_int_equal(d.err[0].line, bad_line);
    assert_string_equal(d.err[0].file, path);
    assert_string_equal(d.err[0].field, field ? field : "");
    /* the summary error points at the first problem */
    assert_int_equal(err.line, bad_line);
    assert_non_null(strstr(err.msg, "1 invalid line of 3"));
    rm_tmp(path);
}

#define BAD_CASE(name, line_text, at, expected, field)                                                 \
    static void test_bad_##name(void **state)                                                          \
    {                                                                                                  \
        (void)state;                                                                                   \
        expect_bad(line_text, at, expected, field);                                                    \
    }

/* ------------------------------------------------------- bad input cases */

BAD_CASE(not_json, "{\"id\":\"x\",", 2, "not JSON: ", NULL)
BAD_CASE(trailing_garbage, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3} x", 2, "not JSON: ",
         NULL)
BAD_CASE(duplicate_key, "{\"id\":\"x\",\"id\":\"y\",\"text\":\"t\",\"expected_output_length\":3}", 2,
         "not JSON: duplicate object key", NULL)
BAD_CASE(not_object, "[1,2,3]", 3, "not a JSON object (found an array)", NULL)
BAD_CASE(missing_id, "{\"text\":\"t\",\"expected_output_length\":3}", 2, "field 'id': missing", "id")
BAD_CASE(id_mistyped, "{\"id\":7,\"text\":\"t\",\"expected_output_length\":3}", 2,
         "field 'id': must be a string, found an integer", "id")
BAD_CASE(id_empty, "{\"id\":\"\",\"text\":\"t\",\"expected_output_length\":3}", 2, "field 'id': empty",
         "id")
BAD_CASE(duplicate_id, "{\"id\":\"ok1\",\"text\":\"t\",\"expected_output_length\":3}", 3,
         "field 'id': duplicate id 'ok1' (first on line 1)", "id")
BAD_CASE(missing_text, "{\"id\":\"x\",\"expected_output_length\":3}", 2,
         "field 'text': missing (give text or input_ids)", "text")
BAD_CASE(text_mistyped, "{\"id\":\"x\",\"text\":[\"a\"],\"expected_output_length\":3}", 2,
         "field 'text': must be a string, found an array", "text")
BAD_CASE(text_empty, "{\"id\":\"x\",\"text\":\"\",\"expected_output_length\":3}", 2, "field 'text': empty text",
         "text")
BAD_CASE(text_empty_after_strip, "{\"id\":\"x\",\"text\":\"\\u200b\\ufeff\",\"expected_output_length\":3}", 2,
         "field 'text': empty text after removing invisible characters", "text")
BAD_CASE(text_and_ids, "{\"id\":\"x\",\"text\":\"t\",\"input_ids\":[1],\"expected_output_length\":3}", 2,
         "field 'input_ids': give text or input_ids, not both", "input_ids")
BAD_CASE(ids_mistyped, "{\"id\":\"x\",\"input_ids\":\"1 2\",\"expected_output_length\":3}", 2,
         "field 'input_ids': must be an array of integers, found a string", "input_ids")
BAD_CASE(ids_empty, "{\"id\":\"x\",\"input_ids\":[],\"expected_output_length\":3}", 2,
         "field 'input_ids': empty array", "input_ids")
BAD_CASE(ids_negative, "{\"id\":\"x\",\"input_ids\":[1,2,-3],\"expected_output_length\":3}", 2,
         "field 'input_ids': element 2 is -3: must be a non-negative integer", "input_ids")
BAD_CASE(ids_not_int, "{\"id\":\"x\",\"input_ids\":[1,2.5],\"expected_output_length\":3}", 2,
         "field 'input_ids': element 1 must be a non-negative integer, found a number with a fraction",
         "input_ids")
BAD_CASE(missing_length, "{\"id\":\"x\",\"text\":\"t\"}", 2, "field 'expected_output_length': missing",
         "expected_output_length")
BAD_CASE(length_string, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":\"3\"}", 2,
         "field 'expected_output_length': must be a positive integer, found a string",
         "expected_output_length")
BAD_CASE(length_real, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3.5}", 2,
         "field 'expected_output_length': must be a positive integer, found a number with a fraction",
         "expected_output_length")
BAD_CASE(length_zero, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":0}", 2,
         "field 'expected_output_length': must be positive, found 0", "expected_output_length")
BAD_CASE(length_negative, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":-12}", 3,
         "field 'expected_output_length': must be positive, found -12", "expected_output_length")
BAD_CASE(length_huge, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":99999999999}", 2,
         "field 'expected_output_length': 99999999999 is out of range", "expected_output_length")
BAD_CASE(invalid_utf8, "{\"id\":\"x\",\"text\":\"caf\xC3\x28 au lait\",\"expected_output_length\":3}", 2,
         "field 'text': invalid UTF-8 at byte 22 of the line (0xC3)", "text")
BAD_CASE(invalid_utf8_overlong, "{\"id\":\"x\",\"text\":\"t\",\"domain\":\"\xC0\xAF\",\"expected_output_length\":3}",
         2, "field 'domain': invalid UTF-8 at byte 32 of the line (0xC0)", "domain")
BAD_CASE(blank, "", 2, "blank line", NULL)
BAD_CASE(blank_spaces, "   \t ", 3, "blank line", NULL)
BAD_CASE(bom, "\xEF\xBB\xBF{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3}", 1,
         "UTF-8 byte order mark (EF BB BF) at the start of the file", NULL)
BAD_CASE(domain_mistyped, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"domain\":5}", 2,
         "field 'domain': must be a string, found an integer", "domain")
BAD_CASE(prompt_mistyped, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"prompt\":null}", 2,
         "field 'prompt': must be a string, found null", "prompt")
BAD_CASE(prompt_with_ids, "{\"id\":\"x\",\"input_ids\":[1],\"expected_output_length\":3,\"prompt\":\"p\"}", 2,
         "field 'prompt': not allowed with input_ids", "prompt")
BAD_CASE(hint_unknown,
         "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"block_pattern_hint\":\"legal\"}", 2,
         "field 'block_pattern_hint': unknown value 'legal' (auto, legal_doc or plain_text)",
         "block_pattern_hint")
BAD_CASE(priority_unknown,
         "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"priority\":\"urgent\"}", 2,
         "field 'priority': unknown value 'urgent' (high, standard or low)", "priority")
BAD_CASE(priority_mistyped, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"priority\":1}", 2,
         "field 'priority': must be a string, found an integer", "priority")
BAD_CASE(meta_mistyped, "{\"id\":\"x\",\"text\":\"t\",\"expected_output_length\":3,\"meta\":[1]}", 2,
         "field 'meta': must be an object, found an array", "meta")

/* A line over the size limit, and the line after it still read correctly. */
static void test_bad_line_too_long(void **state)
{
    (void)state;
    char *big = malloc(5000);
    assert_non_null(big);
    memset(big, 'x', 4999);
    big[4999] = 0;
    char *content = NULL;
    assert_true(asprintf(&content, "%s\n{\"id\":\"b\",\"text\":\"%s\",\"expected_output_length\":1}\n%s\n",
                         VALID1, big, "{\"id\":\"c\",\"text\":\"after\",\"expected_output_length\":2}") > 0);
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.max_line_bytes = 1000;
    o.on_error = K25_GOLD_ON_ERROR_SKIP;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    char *path;
    assert_int_equal(load_text(content, &o, &d, &set, &err, &path), 0);
    assert_int_equal(d.n_err, 1);
    char want[2048];
    snprintf(want, sizeof(want), "%s:2: line is 5046 bytes, over the limit of 1000 (--max-line-bytes)", path);
    assert_string_equal(d.err[0].msg, want);
    assert_int_equal(set.n, 2);
    assert_string_equal(set.reqs[1].id, "c");
    assert_int_equal(set.reqs[1].line, 3);
    k25_gold_set_free(&set);
    rm_tmp(path);
    free(content);
    free(big);
}

/* Several problems on one line are all reported; every bad line is listed. */
static void test_bad_every_error_listed(void **state)
{
    (void)state;
    const char *content = "{\"id\":3,\"text\":\"\",\"expected_output_length\":0}\n" VALID1 "\n"
                          "nope\n"
                          "\n";
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(content, NULL, &d, &set, &err, NULL), K25_EFORMAT);
    assert_int_equal(d.n_err, 5);
    assert_int_equal(d.err[0].line, 1);
    assert_string_equal(d.err[0].field, "id");
    assert_string_equal(d.err[1].field, "text");
    assert_string_equal(d.err[2].field, "expected_output_length");
    assert_int_equal(d.err[3].line, 3);
    assert_int_equal(d.err[4].line, 4);
    assert_non_null(strstr(err.msg, "3 invalid lines of 4 (--on-error abort)"));
}

/* Unknown fields: a warning, not an error; kept and written back. */
static void test_unknown_field_kept(void **state)
{
    (void)state;
    const char *content = "{\"id\":\"a\",\"text\":\"t\",\"expected_output_length\":3,\"source\":\"prod\","
                          "\"meta\":{\"k\":[1,2]},\"score\":0.5}\n";
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    char *path;
    assert_int_equal(load_text(content, NULL, &d, &set, &err, &path), 0);
    assert_int_equal(d.n_err, 0);
    assert_int_equal(d.n_warn, 2);
    char want[2048];
    snprintf(want, sizeof(want), "%s:1: field 'source': unknown field, kept as is", path);
    assert_string_equal(d.warn[0].msg, want);
    assert_int_equal(set.counts.warnings, 2);
    assert_string_equal(set.reqs[0].extra_json, "{\"source\":\"prod\",\"score\":0.5}");
    assert_string_equal(set.reqs[0].meta_json, "{\"k\":[1,2]}");
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    assert_int_equal(k25_gold_request_write(m, &set.reqs[0], &err), 0);
    assert_int_equal(fclose(m), 0);
    assert_string_equal(buf, "{\"id\":\"a\",\"text\":\"t\",\"expected_output_length\":3,\"meta\":{\"k\":[1,2]},"
                             "\"source\":\"prod\",\"score\":0.5}\n");
    free(buf);
    k25_gold_set_free(&set);
    rm_tmp(path);
}

/* The elastic queue's priority field: each value parses, absent is standard, and writing a request
 * back keeps it (standard is left out, as absent). */
static void test_priority_field(void **state)
{
    (void)state;
    const char *content = "{\"id\":\"h\",\"text\":\"a\",\"expected_output_length\":1,\"priority\":\"high\"}\n"
                          "{\"id\":\"s\",\"text\":\"b\",\"expected_output_length\":1,\"priority\":\"standard\"}\n"
                          "{\"id\":\"l\",\"text\":\"c\",\"expected_output_length\":1,\"priority\":\"low\"}\n"
                          "{\"id\":\"n\",\"text\":\"d\",\"expected_output_length\":1}\n";
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(content, NULL, &d, &set, &err, NULL), 0);
    assert_int_equal(d.n_err + d.n_warn, 0); /* a known field: no "unknown field" warning */
    assert_int_equal(set.n, 4);
    assert_int_equal(set.reqs[0].priority, K25_PRIORITY_HIGH);
    assert_int_equal(set.reqs[1].priority, K25_PRIORITY_STANDARD);
    assert_int_equal(set.reqs[2].priority, K25_PRIORITY_LOW);
    assert_int_equal(set.reqs[3].priority, K25_PRIORITY_STANDARD);
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    assert_non_null(m);
    for (int i = 0; i < 4; i++)
        assert_int_equal(k25_gold_request_write(m, &set.reqs[i], &err), 0);
    fclose(m);
    assert_non_null(strstr(buf, "\"id\":\"h\",\"text\":\"a\",\"expected_output_length\":1,\"priority\":\"high\"}"));
    assert_non_null(strstr(buf, "\"id\":\"l\",\"text\":\"c\",\"expected_output_length\":1,\"priority\":\"low\"}"));
    assert_null(strstr(buf, "\"standard\""));
    free(buf);
    k25_gold_set_free(&set);
}

/* All schema fields, text and input_ids, prompt joining, CRLF and no final newline. */
static void test_valid_fields(void **state)
{
    (void)state;
    const char *content =
        "{\"id\":\"t1\",\"text\":\"body\",\"expected_output_length\":7,\"domain\":\"legal\",\"prompt\":\"Sum up\","
        "\"block_pattern_hint\":\"legal_doc\"}\r\n"
        "{\"id\":\"t2\",\"input_ids\":[0,5,2147483647],\"expected_output_length\":1}";
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(content, NULL, &d, &set, &err, NULL), 0);
    assert_int_equal(d.n_err + d.n_warn, 0);
    assert_int_equal(set.n, 2);
    struct k25_gold_request *a = &set.reqs[0], *b = &set.reqs[1];
    assert_string_equal(a->domain, "legal");
    assert_int_equal(a->hint, K25_HINT_LEGAL_DOC);
    assert_int_equal(a->input_length, 6 + 2 + 4);
    char *in;
    size_t n;
    assert_int_equal(k25_gold_request_input(a, &in, &n, &err), 0);
    assert_string_equal(in, "Sum up\n\nbody");
    assert_int_equal(n, (size_t)a->input_length);
    free(in);
    assert_null(b->text);
    assert_int_equal(b->n_input_ids, 3);
    assert_int_equal(b->input_ids[2], 2147483647);
    assert_int_equal(b->input_length, 3);
    assert_int_equal(k25_gold_request_input(b, &in, &n, &err), K25_EINVAL);
    assert_int_equal(set.counts.lines, 2);
    k25_gold_set_free(&set);
}

static void test_missing_file(void **state)
{
    (void)state;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(k25_gold_load("/nonexistent/gold.jsonl", NULL, &set, &err), K25_ENOTFOUND);
    assert_string_equal(err.msg, "/nonexistent/gold.jsonl: cannot open: No such file or directory");
}

/* ------------------------------------------------------------ sanitizer */

static void test_utf8_valid(void **state)
{
    (void)state;
    size_t off = 99;
    assert_true(k25_gold_utf8_valid("plain ascii text, long enough for the fast path", 47, NULL));
    assert_true(k25_gold_utf8_valid("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9, NULL)); /* é € 😀 */
    assert_false(k25_gold_utf8_valid("ab\xC0\xAF", 4, &off)); /* overlong '/' */
    assert_int_equal(off, 2);
    assert_false(k25_gold_utf8_valid("\xED\xA0\x80", 3, &off)); /* surrogate */
    assert_int_equal(off, 0);
    assert_false(k25_gold_utf8_valid("12345678\xF4\x90\x80\x80", 12, &off)); /* > U+10FFFF */
    assert_int_equal(off, 8);
    assert_false(k25_gold_utf8_valid("x\xE2\x82", 3, &off)); /* truncated */
    assert_int_equal(off, 1);
    assert_false(k25_gold_utf8_valid("\x80", 1, &off)); /* lone continuation */
    assert_false(k25_gold_utf8_valid("\xFF", 1, &off));
}

/* Encodes cp as UTF-8 into out; returns the length. */
static size_t enc(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    out[0] = (char)(0xE0 | cp >> 12);
    out[1] = (char)(0x80 | ((cp >> 6) & 63));
    out[2] = (char)(0x80 | (cp & 63));
    return 3;
}

/* The exact ranges of docs/gold-sets.md, checked at and beyond each boundary. */
static void test_invisible_ranges(void **state)
{
    (void)state;
    const uint32_t in[] = {0x200B, 0x200F, 0x202A, 0x202E, 0x2060, 0x2064, 0xFEFF};
    const uint32_t out[] = {0x200A, 0x2010, 0x2029, 0x202F, 0x205F, 0x2065, 0xFEFE, 0xFF00, 0xA0, 0x7F};
    for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
        char s[8];
        size_t n = enc(in[i], s);
        struct k25_gold_sanitize_counts c;
        assert_int_equal(k25_gold_sanitize_text(s, n, K25_GOLD_SANITIZE_STRIP, &c), 0);
        assert_int_equal(c.invisible, 1);
        assert_int_equal(c.first_cp, in[i]);
    }
    for (size_t i = 0; i < sizeof(out) / sizeof(out[0]); i++) {
        char s[8];
        size_t n = enc(out[i], s);
        struct k25_gold_sanitize_counts c;
        assert_int_equal(k25_gold_sanitize_text(s, n, K25_GOLD_SANITIZE_STRIP, &c), n);
        assert_int_equal(c.invisible + c.control, 0);
    }
    for (uint32_t cp = 0; cp < 0x20; cp++) {
        char s[2] = {(char)cp, 0};
        struct k25_gold_sanitize_counts c;
        size_t n = k25_gold_sanitize_text(s, 1, K25_GOLD_SANITIZE_STRIP, &c);
        bool allowed = cp == '\t' || cp == '\n' || cp == '\r';
        assert_int_equal(n, allowed ? 1 : 0);
        assert_int_equal(c.control, allowed ? 0 : 1);
    }
}

static void test_sanitize_text_policies(void **state)
{
    (void)state;
    const char src[] = "a\xE2\x80\x8B" "b\x01\tc\xEF\xBB\xBF" "d\xE2\x80\xAE" "e\n\xC3\xA9";
    size_t len = sizeof(src) - 1;
    char s[64];
    struct k25_gold_sanitize_counts c;
    memcpy(s, src, len + 1);
    size_t n = k25_gold_sanitize_text(s, len, K25_GOLD_SANITIZE_STRIP, &c);
    assert_int_equal(n, 9);
    assert_memory_equal(s, "ab\tcde\n\xC3\xA9", 9);
    assert_int_equal(c.invisible, 3);
    assert_int_equal(c.control, 1);
    assert_int_equal(c.first_off, 1);
    assert_int_equal(c.first_cp, 0x200B);
    memcpy(s, src, len + 1);
    assert_int_equal(k25_gold_sanitize_text(s, len, K25_GOLD_SANITIZE_KEEP, &c), len);
    assert_memory_equal(s, src, len);
    assert_int_equal(c.invisible + c.control, 4);
    memcpy(s, src, len + 1);
    assert_int_equal(k25_gold_sanitize_text(s, len, K25_GOLD_SANITIZE_REJECT, &c), len);
    assert_int_equal(c.invisible + c.control, 4);
}

#define DIRTY "{\"id\":\"d\",\"text\":\"zero\\u200bwidth\\u0007 bell\\ufeff\\ttab\",\"prompt\":\"p\\u2062q\"," \
              "\"expected_output_length\":4}"

static void test_sanitize_strip_counts(void **state)
{
    (void)state;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(VALID1 "\n" DIRTY "\n", NULL, &d, &set, &err, NULL), 0);
    assert_int_equal(d.n_err, 0);
    assert_int_equal(set.n, 2);
    assert_string_equal(set.reqs[1].text, "zerowidth bell\ttab");
    assert_string_equal(set.reqs[1].prompt, "pq");
    assert_int_equal(set.reqs[1].sanitized_chars, 4);
    assert_int_equal(set.reqs[1].input_length, 2 + 2 + 18);
    assert_int_equal(set.counts.sanitized_chars, 4);
    assert_int_equal(set.counts.invisible_chars, 3);
    assert_int_equal(set.counts.control_chars, 1);
    assert_int_equal(set.counts.sanitized_lines, 1);
    k25_gold_set_free(&set);
}

static void test_sanitize_keep(void **state)
{
    (void)state;
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.sanitize = K25_GOLD_SANITIZE_KEEP;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(DIRTY "\n", &o, &d, &set, &err, NULL), 0);
    assert_string_equal(set.reqs[0].text, "zero\xE2\x80\x8Bwidth\a bell\xEF\xBB\xBF\ttab");
    assert_int_equal(set.counts.sanitized_chars, 4);
    assert_int_equal(set.reqs[0].input_length, 2 + 3 + 2 + 18 + 3 + 1 + 3);
    k25_gold_set_free(&set);
}

static void test_sanitize_reject(void **state)
{
    (void)state;
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.sanitize = K25_GOLD_SANITIZE_REJECT;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    char *path;
    assert_int_equal(load_text(VALID1 "\n" DIRTY "\n", &o, &d, &set, &err, &path), K25_EFORMAT);
    assert_int_equal(d.n_err, 2); /* text and prompt */
    char want[2048];
    snprintf(want, sizeof(want),
             "%s:2: field 'text': 3 invisible or control characters, the first U+200B at byte 4 "
             "(--sanitize reject; strip removes them)",
             path);
    assert_string_equal(d.err[0].msg, want);
    assert_string_equal(d.err[1].field, "prompt");
    assert_int_equal(set.n, 0);
    rm_tmp(path);
}

static void test_policy_parse(void **state)
{
    (void)state;
    enum k25_gold_sanitize s;
    enum k25_gold_on_error e;
    struct k25_error err;
    assert_int_equal(k25_gold_sanitize_parse("reject", &s, &err), 0);
    assert_int_equal(s, K25_GOLD_SANITIZE_REJECT);
    assert_int_equal(k25_gold_sanitize_parse("drop", &s, &err), K25_EINVAL);
    assert_string_equal(err.msg, "'--sanitize': unknown policy 'drop' (strip, reject or keep)");
    assert_int_equal(k25_gold_on_error_parse("skip", &e, &err), 0);
    assert_int_equal(e, K25_GOLD_ON_ERROR_SKIP);
    assert_int_equal(k25_gold_on_error_parse("ignore", &e, &err), K25_EINVAL);
}

/* ------------------------------------------------------------- on-error */

#define MIXED_SET VALID1 "\nnot json\n{\"id\":\"b\",\"text\":\"x\",\"expected_output_length\":2}\n" \
                  "{\"id\":\"a\",\"text\":\"dup\",\"expected_output_length\":2}\n\n"

static void test_on_error_abort(void **state)
{
    (void)state;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    char *path;
    assert_int_equal(load_text(MIXED_SET, NULL, &d, &set, &err, &path), K25_EFORMAT);
    assert_int_equal(d.n_err, 3);
    assert_int_equal(set.n, 0);
    assert_null(set.reqs);
    char want[2048];
    snprintf(want, sizeof(want), "%s: 3 invalid lines of 5 (--on-error abort); first: %s:2: not JSON", path,
             path);
    assert_true(strncmp(err.msg, want, strlen(want)) == 0);
    assert_int_equal(err.code, K25_EFORMAT);
    rm_tmp(path);
}

static void test_on_error_skip(void **state)
{
    (void)state;
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.on_error = K25_GOLD_ON_ERROR_SKIP;
    struct diags d;
    struct k25_gold_set set;
    struct k25_error err;
    assert_int_equal(load_text(MIXED_SET, &o, &d, &set, &err, NULL), 0);
    assert_int_equal(d.n_err, 3);
    assert_int_equal(set.n, 2);
    assert_string_equal(set.reqs[0].id, "a");
    assert_string_equal(set.reqs[1].id, "b");
    assert_int_equal(set.counts.invalid_lines, 3);
    assert_int_equal(set.counts.requests, 2);
    assert_int_equal(set.counts.lines, 5);
    k25_gold_set_free(&set);
}

/* Streaming: requests come out, the verdict comes at the end. */
static void test_stream_abort_at_end(void **state)
{
    (void)state;
    char *path = tmpfile_with(MIXED_SET, strlen(MIXED_SET));
    k25_gold_reader_t *r;
    struct k25_error err;
    assert_int_equal(k25_gold_open(path, NULL, &r, &err), 0);
    struct k25_gold_request req;
    int got = 0, rc;
    while ((rc = k25_gold_next(r, &req, &err)) == 1) {
        got++;
        k25_gold_request_free(&req);
    }
    assert_int_equal(got, 2);
    assert_int_equal(rc, K25_EFORMAT);
    assert_int_equal(k25_gold_reader_first_error(r)->line, 2);
    assert_int_equal(k25_gold_reader_counts(r)->bytes, (int64_t)strlen(MIXED_SET));
    k25_gold_close(r);
    rm_tmp(path);
}

/* ------------------------------------------------------------- filters */

static struct k25_gold_request mkreq(const char *id, const char *domain, int64_t in, int64_t out)
{
    struct k25_gold_request r;
    memset(&r, 0, sizeof(r));
    r.id = (char *)id;
    r.domain = (char *)domain;
    r.input_length = in;
    r.expected_output_length = out;
    return r;
}

static bool fmatch(const char *expr, const struct k25_gold_request *r)
{
    k25_gold_filter_t *f;
    struct k25_error err;
    int col;
    if (k25_gold_filter_parse(expr, &f, &col, &err) != 0)
        fail_msg("parse of '%s' failed: %s", expr, err.msg);
    bool m = k25_gold_filter_match(f, r);
    k25_gold_filter_destroy(f);
    return m;
}

static void test_filter_eval(void **state)
{
    (void)state;
    struct k25_gold_request a = mkreq("legal-1", "legal", 4096, 2000);
    struct k25_gold_request b = mkreq("fin-2", "finance", 512, 100);
    struct k25_gold_request c = mkreq("x", NULL, 131072, 1800);
    const struct {
        const char *expr;
        bool a, b, c;
    } cases[] = {
        {"output_length > 1800 && domain == \"legal\"", true, false, false},
        {"output_length >= 1800", true, false, true},
        {"output_length<1800", false, true, false},
        {"input_length <= 4k", true, true, false},
        {"input_length == 128k", false, false, true},
        {"input_length != 512", true, false, true},
        {"domain == 'finance' || domain == \"legal\"", true, true, false},
        {"!(domain == 'legal')", false, true, true},
        {"!domain == 'legal'", false, true, true},
        {"domain == ''", false, false, true},
        {"id < 'g'", false, true, false},
        {"id >= \"legal\"", true, false, true},
        {"expected_output_length > 1000", true, false, true},
        /* && binds tighter than || */
        {"domain == 'finance' || domain == 'legal' && input_length > 10000", false, true, false},
        {"(domain == 'finance' || domain == 'legal') && input_length > 1000", true, false, false},
        {"!!(input_length > 1)", true, true, true},
        {"  ( ( input_length>0 ) )  ", true, true, true},
        {"id == 'it\\'s'", false, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (fmatch(cases[i].expr, &a) != cases[i].a || fmatch(cases[i].expr, &b) != cases[i].b ||
            fmatch(cases[i].expr, &c) != cases[i].c)
            fail_msg("filter '%s' evaluated wrongly", cases[i].expr);
    }
    struct k25_gold_request q = mkreq("it's", NULL, 1, 1);
    assert_true(fmatch("id == 'it\\'s'", &q));
    assert_true(k25_gold_filter_match(NULL, &a)); /* no filter: everything */
}

static void test_filter_errors(void **state)
{
    (void)state;
    const struct {
        const char *expr;
        int col;
        const char *msg;
    } cases[] = {
        {"", 1, "filter: column 1: empty expression"},
        {"   ", 4, "filter: column 4: empty expression"},
        {"output_length >", 16, "filter: column 16: expected a number after '>', got the end"},
        {"foo > 3", 1, "filter: column 1: unknown field 'foo' (input_length, output_length, domain, id)"},
        {"domain > 3", 10, "filter: column 10: expected a string after '>', got '3' (domain is text: quote it, \"3\")"},
        {"input_length == 'x'", 17, "filter: column 17: expected a number after '==', got ''x'' (input_length is a number)"},
        {"input_length = 3", 14, "filter: column 14: '=' is not an operator; use '=='"},
        {"input_length ~ 3", 14, "filter: column 14: expected an operator (== != < <= > >=) after 'input_length', got '~'"},
        {"(input_length > 3", 1, "filter: column 1: '(' is never closed"},
        {"input_length > 3)", 17, "filter: column 17: ')' without a matching '('"},
        {"input_length > 3 & id == 'x'", 18, "filter: column 18: expected '&&', '||' or the end, got '&'"},
        {"input_length > 3 id == 'x'", 18, "filter: column 18: expected '&&', '||' or the end, got 'id'"},
        {"domain == \"legal", 11, "filter: column 11: string not closed (missing \")"},
        {"input_length > 4x", 16, "filter: column 16: expected a number after '>', got '4x' (input_length is a number)"},
        {"input_length > 3 && ", 21, "filter: column 21: expected a field (input_length, output_length, domain, id), got the end"},
        {"!", 2, "filter: column 2: expected a field (input_length, output_length, domain, id), got the end"},
        {"input_length >> 3", 14, "filter: column 14: '>>' is not an operator (== != < <= > >=)"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        k25_gold_filter_t *f = (k25_gold_filter_t *)1;
        struct k25_error err;
        int col = -1;
        int rc = k25_gold_filter_parse(cases[i].expr, &f, &col, &err);
        if (rc != K25_EINVAL || col != cases[i].col ||
            strncmp(err.msg, cases[i].msg, strlen(cases[i].msg)) != 0)
            fail_msg("'%s': rc %d col %d msg '%s' (want col %d, '%s')", cases[i].expr, rc, col, err.msg,
                     cases[i].col, cases[i].msg);
        assert_null(f);
    }
    /* deep nesting is refused, not a stack overflow */
    char deep[2000];
    memset(deep, '(', 1000);
    strcpy(deep + 1000, "id=='x'");
    k25_gold_filter_t *f;
    struct k25_error err;
    assert_int_equal(k25_gold_filter_parse(deep, &f, NULL, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "nested too deeply"));
}

static void test_filter_in_load(void **state)
{
    (void)state;
    const char *content = "{\"id\":\"a\",\"text\":\"0123456789\",\"expected_output_length\":5,\"domain\":\"legal\"}\n"
                          "{\"id\":\"b\",\"text\":\"01234\",\"expected_output_length\":50,\"domain\":\"legal\"}\n"
                          "{\"id\":\"c\",\"input_ids\":[1,2,3,4,5,6,7,8,9,10,11],\"expected_output_length\":50}\n";
    k25_gold_filter_t *f;
    struct k25_error err;
    assert_int_equal(k25_gold_filter_parse("input_length > 8 && output_length > 10 || id == 'b'", &f, NULL, &err),
                     0);
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.filter = f;
    struct diags d;
    struct k25_gold_set set;
    assert_int_equal(load_text(content, &o, &d, &set, &err, NULL), 0);
    assert_int_equal(set.n, 2);
    assert_string_equal(set.reqs[0].id, "b");
    assert_string_equal(set.reqs[1].id, "c");
    assert_int_equal(set.counts.requests, 3);
    assert_int_equal(set.counts.matched, 2);
    k25_gold_set_free(&set);
    k25_gold_filter_destroy(f);
}

/* -------------------------------------------------------------- stats */

static void test_sha256_known(void **state)
{
    (void)state;
    char hex[65];
    struct k25_error err;
    assert_int_equal(k25_gold_sha256_hex("abc", 3, hex, &err), 0);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    assert_int_equal(k25_gold_sha256_hex("", 0, hex, &err), 0);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    /* the file digest the reader computes while streaming, and the plain one */
    char *path = tmpfile_with(VALID1 "\n", strlen(VALID1) + 1);
    const char *want = "6c15b2f7f44895a105c991fa347804d46c6cf8019bcb7bfd495563412f38d41e";
    assert_int_equal(k25_gold_sha256_file(path, hex, &err), 0);
    assert_string_equal(hex, want);
    struct k25_gold_set set;
    assert_int_equal(k25_gold_load(path, NULL, &set, &err), 0);
    assert_string_equal(set.sha256, want);
    k25_gold_set_free(&set);
    rm_tmp(path);
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank against a reference that counts instead of indexing. */
static void test_percentile_reference(void **state)
{
    (void)state;
    uint64_t s = 12345;
    for (size_t n = 1; n <= 60; n++) {
        int64_t v[60];
        for (size_t i = 0; i < n; i++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            v[i] = (int64_t)((s >> 33) % 100);
        }
        qsort(v, n, sizeof(v[0]), cmp64);
        const double ps[] = {1, 50, 90, 95, 99, 100};
        for (size_t k = 0; k < 6; k++) {
            /* smallest x in v with #(v <= x) >= p% of n */
            int64_t ref = v[n - 1];
            for (size_t i = 0; i < n; i++) {
                size_t cnt = 0;
                for (size_t j = 0; j < n; j++)
                    cnt += v[j] <= v[i];
                if ((double)cnt * 100.0 >= ps[k] * (double)n - 1e-9 && v[i] < ref)
                    ref = v[i];
            }
            assert_int_equal(k25_gold_percentile(v, n, ps[k]), ref);
        }
    }
    assert_int_equal(k25_gold_percentile(NULL, 0, 50), 0);
}

static void test_stats_values(void **state)
{
    (void)state;
    char content[4096] = "";
    for (int i = 1; i <= 10; i++) {
        char text[64];
        memset(text, 'a', (size_t)i * 5);
        text[i * 5] = 0;
        snprintf(content + strlen(content), sizeof(content) - strlen(content),
                 "{\"id\":\"r%d\",\"text\":\"%s\",\"expected_output_length\":%d%s}\n", i, text, i * 100,
                 i <= 3 ? ",\"domain\":\"finance\"" : (i <= 9 ? ",\"domain\":\"legal\"" : ""));
    }
    strcat(content, "{\"id\":\"ids\",\"input_ids\":[1,2,3],\"expected_output_length\":1,\"domain\":\"legal\"}\n");
    char *path = tmpfile_with(content, strlen(content));
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    struct k25_gold_stats st;
    struct k25_error err;
    assert_int_equal(k25_gold_validate(path, &o, &st, &err), 0);
    assert_int_equal(st.counts.requests, 11);
    assert_int_equal(st.input.n, 11);
    assert_int_equal(st.input.total, 5 * 55 + 3);
    assert_int_equal(st.input.min, 3);
    assert_int_equal(st.input.max, 50);
    assert_int_equal(st.input.p50, 25); /* sorted: 3 5 10 15 20 25 ... -> 6th of 11 */
    assert_int_equal(st.output.p90, 900);
    assert_int_equal(st.output.max, 1000);
    assert_int_equal(st.text_requests, 10);
    assert_int_equal(st.ids_requests, 1);
    assert_int_equal(st.n_domains, 3);
    assert_string_equal(st.domains[0].name, "legal");
    assert_int_equal(st.domains[0].n, 7);
    assert_string_equal(st.domains[1].name, "finance");
    assert_string_equal(st.domains[2].name, "(none)");
    char hex[65];
    assert_int_equal(k25_gold_sha256_file(path, hex, &err), 0);
    assert_string_equal(st.sha256, hex);
    char *js = k25_gold_stats_to_json(&st, &o, "id != 'x'");
    assert_non_null(js);
    json_error_t je;
    json_t *root = json_loads(js, 0, &je);
    assert_non_null(root);
    assert_true(json_is_true(json_object_get(root, "valid")));
    assert_int_equal(json_integer_value(json_object_get(json_object_get(root, "input_tokens"), "p50")), 25);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(root, "domains"), "legal")), 7);
    assert_string_equal(json_string_value(json_object_get(root, "sha256")), hex);
    assert_string_equal(json_string_value(json_object_get(root, "filter")), "id != 'x'");
    json_decref(root);
    free(js);
    char *txt = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&txt, &len);
    assert_int_equal(k25_gold_stats_print(m, &st, &o), 0);
    assert_int_equal(fclose(m), 0);
    assert_non_null(strstr(txt, "valid, 11 requests"));
    assert_non_null(strstr(txt, "legal 7, finance 3, (none) 1"));
    free(txt);
    k25_gold_stats_free(&st);
    rm_tmp(path);
}

/* ------------------------------------------------------------ generator */

/* Generates into memory; returns the bytes (caller frees), length in *len. */
static char *gen_mem(const struct k25_gold_gen_opts *o, size_t *len, int *rc, struct k25_error *err)
{
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    assert_non_null(m);
    *rc = k25_gold_generate(o, m, err);
    assert_int_equal(fclose(m), 0);
    return buf;
}

static void test_gen_deterministic(void **state)
{
    (void)state;
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    assert_int_equal(k25_gold_parse_lengths("512,2k,8k", &o, &err), 0);
    o.count = 8;
    o.seed = 42;
    size_t n1, n2, n3;
    int rc;
    char *a = gen_mem(&o, &n1, &rc, &err);
    assert_int_equal(rc, 0);
    char *b = gen_mem(&o, &n2, &rc, &err);
    char h1[65], h2[65], h3[65];
    k25_gold_sha256_hex(a, n1, h1, &err);
    k25_gold_sha256_hex(b, n2, h2, &err);
    assert_string_equal(h1, h2);
    assert_int_equal(n1, n2);
    assert_memory_equal(a, b, n1);
    o.seed = 43;
    char *c = gen_mem(&o, &n3, &rc, &err);
    k25_gold_sha256_hex(c, n3, h3, &err);
    assert_string_not_equal(h1, h3);
    free(a);
    free(b);
    free(c);
}

/* Every domain: output validates clean and each length is within 1%. */
static void test_gen_lengths(void **state)
{
    (void)state;
    const char *lengths = tu_quick() ? "64,100,1000,4k,32k" : "64,100,1000,4k,32k,128k";
    for (int dom = 0; dom <= K25_GOLD_DOMAIN_MIXED; dom++) {
        struct k25_gold_gen_opts o;
        k25_gold_gen_opts_init(&o);
        struct k25_error err;
        assert_int_equal(k25_gold_parse_lengths(lengths, &o, &err), 0);
        assert_int_equal(k25_gold_parse_output_length("10-20", &o, &err), 0);
        o.domain = (enum k25_gold_domain)dom;
        o.count = (int64_t)o.n_lengths * (dom == K25_GOLD_DOMAIN_MIXED ? 4 : 1);
        o.seed = 7;
        size_t n;
        int rc;
        char *buf = gen_mem(&o, &n, &rc, &err);
        if (rc == K25_ENOTFOUND && dom >= K25_GOLD_DOMAIN_LICENSES) {
            free(buf);
            skip(); /* no /usr/share/common-licenses on this machine */
        }
        assert_int_equal(rc, 0);
        char *path = tmpfile_with(buf, n);
        free(buf);
        struct diags d;
        memset(&d, 0, sizeof(d));
        struct k25_gold_opts ro;
        k25_gold_opts_init(&ro);
        ro.diag = collect;
        ro.diag_user = &d;
        struct k25_gold_set set;
        assert_int_equal(k25_gold_load(path, &ro, &set, &err), 0);
        assert_int_equal(d.n_err + d.n_warn, 0);
        assert_int_equal(set.counts.sanitized_chars, 0);
        assert_int_equal(set.n, (size_t)o.count);
        for (size_t i = 0; i < set.n; i++) {
            int64_t want = o.lengths[i % o.n_lengths];
            int64_t got = set.reqs[i].input_length;
            if (got > want || (double)(want - got) > 0.01 * (double)want)
                fail_msg("%s: input_length %lld, asked %lld", set.reqs[i].id, (long long)got, (long long)want);
            assert_in_range(set.reqs[i].expected_output_length, 10, 20);
            assert_non_null(set.reqs[i].domain);
            if (dom != K25_GOLD_DOMAIN_MIXED)
                assert_string_equal(set.reqs[i].domain, k25_gold_domain_name(o.domain));
        }
        if (dom == K25_GOLD_DOMAIN_MIXED) {
            /* every length meets every domain */
            for (size_t li = 0; li < o.n_lengths; li++) {
                int seen = 0;
                for (size_t i = li; i < set.n; i += o.n_lengths)
                    for (int k = 0; k < 4; k++)
                        if (!strcmp(set.reqs[i].domain, k25_gold_domain_name((enum k25_gold_domain)k)))
                            seen |= 1 << k;
                assert_int_equal(seen, 15);
            }
        }
        k25_gold_set_free(&set);
        rm_tmp(path);
    }
}

/* Contracts reference definitions far away and carry appendix tables. */
static void test_gen_legal_structure(void **state)
{
    (void)state;
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    assert_int_equal(k25_gold_parse_lengths("32k", &o, &err), 0);
    o.domain = K25_GOLD_DOMAIN_LEGAL;
    o.count = 1;
    size_t n;
    int rc;
    char *buf = gen_mem(&o, &n, &rc, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(buf, "ARTICLE 1. DEFINITIONS"));
    assert_non_null(strstr(buf, "ARTICLE 12."));
    assert_non_null(strstr(buf, "(as defined in Section 1."));
    assert_non_null(strstr(buf, "APPENDIX A. FEE SCHEDULE"));
    assert_non_null(strstr(buf, "\"block_pattern_hint\":\"legal_doc\""));
    free(buf);
}

static void test_gen_licenses_dir(void **state)
{
    (void)state;
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    o.domain = K25_GOLD_DOMAIN_LICENSES;
    o.count = 2;
    struct k25_error err;
    size_t n;
    int rc;
    /* missing folder: a clear error naming it */
    snprintf(o.licenses_dir, sizeof(o.licenses_dir), "/nonexistent/licenses");
    char *buf = gen_mem(&o, &n, &rc, &err);
    assert_int_equal(rc, K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "/nonexistent/licenses: '--licenses-dir': cannot open the license folder"));
    assert_int_equal(n, 0);
    free(buf);
    /* empty folder */
    char *dir = tu_tmpdir();
    snprintf(o.licenses_dir, sizeof(o.licenses_dir), "%s", dir);
    buf = gen_mem(&o, &n, &rc, &err);
    assert_int_equal(rc, K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "no readable UTF-8 license files"));
    free(buf);
    /* a folder of our own: form feeds and invisible characters do not leak */
    char p[1024];
    snprintf(p, sizeof(p), "%s/TOY-1.0", dir);
    tu_write_file(p, "TOY LICENSE\n\nPermission is granted\xE2\x80\x8B to use this.\f\n\n"
                     "THE SOFTWARE IS PROVIDED AS IS.\r\n\nNo warranty.\n");
    snprintf(p, sizeof(p), "%s/BAD", dir);
    tu_write_file(p, "not utf-8 \xFF\n");
    assert_int_equal(k25_gold_parse_lengths("1000", &o, &err), 0);
    char *a = gen_mem(&o, &n, &rc, &err);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(a, "==== TOY-1.0 ===="));
    assert_null(strstr(a, "==== BAD"));
    assert_null(strstr(a, "\\f"));
    assert_null(strstr(a, "\\u200b"));
    size_t n2;
    char *b = gen_mem(&o, &n2, &rc, &err);
    assert_int_equal(n, n2);
    assert_memory_equal(a, b, n);
    free(a);
    free(b);
    unlink(p);
    snprintf(p, sizeof(p), "%s/TOY-1.0", dir);
    unlink(p);
    rmdir(dir);
    free(dir);
}

static void test_gen_option_errors(void **state)
{
    (void)state;
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    int64_t v;
    assert_true(k25_gold_parse_size("128k", &v));
    assert_int_equal(v, 131072);
    assert_true(k25_gold_parse_size("2M", &v));
    assert_int_equal(v, 2097152);
    assert_false(k25_gold_parse_size("12q", &v));
    assert_false(k25_gold_parse_size("-1", &v));
    assert_false(k25_gold_parse_size("", &v));
    assert_false(k25_gold_parse_size("99999999999999999999k", &v));
    assert_int_equal(k25_gold_parse_lengths("4k,32k,128k", &o, &err), 0);
    assert_int_equal(o.n_lengths, 3);
    assert_int_equal(o.lengths[2], 131072);
    assert_int_equal(k25_gold_parse_lengths("4k,abc", &o, &err), K25_EINVAL);
    assert_string_equal(err.msg, "'--lengths': bad length 'abc' (a number with optional k or m suffix)");
    assert_int_equal(k25_gold_parse_lengths("10", &o, &err), K25_ERANGE);
    assert_int_equal(k25_gold_parse_output_length("100-50", &o, &err), K25_ERANGE);
    assert_int_equal(k25_gold_parse_output_length("x-50", &o, &err), K25_EINVAL);
    assert_int_equal(k25_gold_parse_output_length("256", &o, &err), 0);
    assert_int_equal(o.out_min, 256);
    assert_int_equal(o.out_max, 256);
    enum k25_gold_domain d;
    assert_int_equal(k25_gold_domain_parse("poetry", &d, &err), K25_EINVAL);
    assert_int_equal(k25_gold_domain_parse("minutes", &d, &err), 0);
    assert_int_equal(d, K25_GOLD_DOMAIN_MINUTES);
}

/* ----------------------------------------------------------- streaming */

/* Peak RSS of validating a large generated file, measured in a child. */
static void test_stream_peak_rss(void **state)
{
    (void)state;
    int64_t mb = tu_quick() ? 20 : 200;
    char *dir = tu_tmpdir();
    char path[1024];
    snprintf(path, sizeof(path), "%s/big.jsonl", dir);
    struct k25_gold_gen_opts o;
    k25_gold_gen_opts_init(&o);
    struct k25_error err;
    assert_int_equal(k25_gold_parse_lengths("32k,128k,512k", &o, &err), 0);
    o.domain = K25_GOLD_DOMAIN_FINANCE;
    o.count = mb * 1000000 / ((32 + 128 + 512) * 1024 / 3) + 1;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(k25_gold_generate(&o, f, &err), 0);
    assert_int_equal(fclose(f), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size >= mb * 1000000);

    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        /* reset this process's peak RSS (Linux >= 4.0), so the parent's does not count */
        FILE *c = fopen("/proc/self/clear_refs", "w");
        if (c) {
            fputs("5", c);
            fclose(c);
        }
        struct k25_gold_stats s;
        struct k25_gold_opts ro;
        k25_gold_opts_init(&ro);
        int rc = k25_gold_validate(path, &ro, &s, NULL);
        long hwm_kb = -1;
        FILE *ps = fopen("/proc/self/status", "r");
        char line[256];
        while (ps && fgets(line, sizeof(line), ps))
            if (!strncmp(line, "VmHWM:", 6))
                hwm_kb = atol(line + 6);
        if (ps)
            fclose(ps);
        long out[2] = {rc == 0 && s.counts.requests == o.count ? 1 : 0, hwm_kb};
        k25_gold_stats_free(&s);
        _exit(write(pfd[1], out, sizeof(out)) == (ssize_t)sizeof(out) ? 0 : 1);
    }
    close(pfd[1]);
    long res[2] = {0, 0};
    assert_int_equal(read(pfd[0], res, sizeof(res)), sizeof(res));
    close(pfd[0]);
    int wst;
    assert_int_equal(waitpid(pid, &wst, 0), pid);
    assert_int_equal(res[0], 1);
    print_message("      validated %lld MB with peak RSS %.1f MB\n", (long long)(st.st_size / 1000000),
                  (double)res[1] / 1024.0);
    assert_true(res[1] > 0);
#if defined(__SANITIZE_ADDRESS__)
    /* AddressSanitizer's shadow memory and quarantine inflate RSS: no bound */
#else
    assert_true(res[1] < 64 * 1024);
#endif
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* ---------------------------------------------------------- integration */

/* Skips the test when the k25 binary is missing or does not run. */
static void need_k25(void)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "%s --version", tu_k25());
    if (access(tu_k25(), X_OK) != 0 || tu_run(cmd, NULL) != 0) {
        print_message("      skipped: %s not built or not runnable (set K25=path)\n", tu_k25());
        skip();
    }
}

static int k25(const char *args, char **out)
{
    char cmd[4096];
    snprintf(cmd, sizeof(cmd), "%s %s", tu_k25(), args);
    return tu_run(cmd, out);
}

static void test_cli_help(void **state)
{
    (void)state;
    need_k25();
    const char *cmds[] = {"gold --help", "gold validate --help", "gold select --help", "gold generate --help"};
    for (size_t i = 0; i < 4; i++) {
        char *out;
        assert_int_equal(k25(cmds[i], &out), 0);
        assert_non_null(strstr(out, "usage: k25 gold"));
        free(out);
    }
    char *out;
    assert_int_equal(k25("gold frobnicate", &out), 2);
    assert_non_null(strstr(out, "unknown command 'frobnicate'"));
    free(out);
    assert_int_equal(k25("gold validate", &out), 2);
    assert_non_null(strstr(out, "FILE missing"));
    free(out);
    assert_int_equal(k25("gold validate x.jsonl --sanitize maybe", &out), 2);
    assert_non_null(strstr(out, "unknown policy 'maybe'"));
    free(out);
}

static void test_cli_validate_shipped(void **state)
{
    (void)state;
    need_k25();
    const char *set = "datasets/gold/ci-small.jsonl";
    char *out;
    assert_int_equal(k25("gold validate datasets/gold/ci-small.jsonl", &out), 0);
    assert_non_null(strstr(out, "valid, 12 requests"));
    free(out);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "gold validate %s --json --filter 'input_length >= 4k'", set);
    assert_int_equal(k25(cmd, &out), 0);
    json_error_t je;
    json_t *root = json_loads(out, 0, &je);
    if (!root)
        fail_msg("not JSON: %s\n%s", je.text, out);
    assert_true(json_is_true(json_object_get(root, "valid")));
    assert_int_equal(json_integer_value(json_object_get(root, "requests")), 12);
    json_int_t matched = json_integer_value(json_object_get(root, "matched"));
    assert_in_range(matched, 1, 11);
    assert_true(json_integer_value(json_object_get(json_object_get(root, "input_tokens"), "min")) >= 4096 * 99 / 100);
    char hex[65];
    struct k25_error err;
    assert_int_equal(k25_gold_sha256_file(set, hex, &err), 0);
    assert_string_equal(json_string_value(json_object_get(root, "sha256")), hex);
    json_decref(root);
    free(out);
    /* every shipped line within the CI bounds */
    struct k25_gold_set s;
    assert_int_equal(k25_gold_load(set, NULL, &s, &err), 0);
    assert_int_equal(s.n, 12);
    for (size_t i = 0; i < s.n; i++) {
        assert_in_range(s.reqs[i].input_length, 500, 8192);
        assert_in_range(s.reqs[i].expected_output_length, 1, 128);
    }
    k25_gold_set_free(&s);
}

static void test_cli_validate_bad(void **state)
{
    (void)state;
    need_k25();
    char *path = tmpfile_with(MIXED_SET, strlen(MIXED_SET));
    char cmd[2048], want[2048];
    char *out;
    snprintf(cmd, sizeof(cmd), "gold validate %s", path);
    assert_int_equal(k25(cmd, &out), 2);
    snprintf(want, sizeof(want), "%s:4: field 'id': duplicate id 'a' (first on line 1)\n", path);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof(want), "%s:5: blank line", path);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "INVALID"));
    free(out);
    snprintf(cmd, sizeof(cmd), "gold validate %s --on-error skip --json", path);
    assert_int_equal(k25(cmd, &out), 0);
    assert_non_null(strstr(out, "(line skipped)"));
    assert_non_null(strstr(out, "\"invalid_lines\": 3"));
    assert_non_null(strstr(out, "\"error_list\""));
    free(out);
    snprintf(cmd, sizeof(cmd), "gold validate %s --filter 'output_length >> 3'", path);
    assert_int_equal(k25(cmd, &out), 2);
    assert_non_null(strstr(out, "k25 gold: --filter: column 15: '>>' is not an operator (== != < <= > >=)"));
    assert_non_null(strstr(out, "\n  output_length >> 3\n                ^"));
    free(out);
    rm_tmp(path);
}

static void test_cli_generate_select(void **state)
{
    (void)state;
    need_k25();
    char *dir = tu_tmpdir();
    char cmd[4096];
    char *out;
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof(cmd),
                 "gold generate --domain mixed --lengths 1k,4k --count 6 --seed 9 --output-length 5-9 --out %s/g%d.jsonl",
                 dir, i);
        assert_int_equal(k25(cmd, &out), 0);
        assert_non_null(strstr(out, "wrote 6 requests"));
        free(out);
    }
    char p0[1100], p1[1100], h0[65], h1[65];
    struct k25_error err;
    snprintf(p0, sizeof(p0), "%s/g0.jsonl", dir);
    snprintf(p1, sizeof(p1), "%s/g1.jsonl", dir);
    assert_int_equal(k25_gold_sha256_file(p0, h0, &err), 0);
    assert_int_equal(k25_gold_sha256_file(p1, h1, &err), 0);
    assert_string_equal(h0, h1);
    /* stdout gives the same bytes */
    snprintf(cmd, sizeof(cmd), "gold generate --domain mixed --lengths 1k,4k --count 6 --seed 9 --output-length 5-9 "
                               "| sha256sum");
    assert_int_equal(k25(cmd, &out), 0);
    assert_true(strncmp(out, h0, 64) == 0);
    free(out);
    snprintf(cmd, sizeof(cmd), "gold select %s --filter 'input_length > 2k' --out %s/sel.jsonl", p0, dir);
    assert_int_equal(k25(cmd, &out), 0);
    assert_non_null(strstr(out, "3 of 6 requests selected"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s/sel.jsonl", dir);
    struct k25_gold_set s;
    assert_int_equal(k25_gold_load(cmd, NULL, &s, &err), 0);
    assert_int_equal(s.n, 3);
    k25_gold_set_free(&s);
    unlink(cmd);
    snprintf(cmd, sizeof(cmd), "gold generate --licenses-dir /nonexistent --domain licenses --out %s/l.jsonl", dir);
    assert_int_equal(k25(cmd, &out), 2);
    assert_non_null(strstr(out, "cannot open the license folder"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s/l.jsonl", dir);
    assert_int_not_equal(access(cmd, F_OK), 0); /* nothing that looks finished */
    unlink(p0);
    unlink(p1);
    rmdir(dir);
    free(dir);
}


/* gold import --sharegpt: one request per human/gpt pair; malformed files name the file and the place. */
static void test_cli_import_sharegpt(void **state)
{
    (void)state;
    need_k25();
    char *dir = tu_tmpdir();
    assert_non_null(dir);
    char p[1024], q[1024], args[3000];
    snprintf(p, sizeof(p), "%s/sg.json", dir);
    snprintf(q, sizeof(q), "%s/sg.jsonl", dir);
    tu_write_file(p, "[{\"id\": \"x1\", \"conversations\": [{\"from\": \"human\", \"value\": \"Capital of France?\"},\n"
                     " {\"from\": \"gpt\", \"value\": \"Paris.\"}]},\n"
                     " {\"conversations\": [{\"from\": \"gpt\", \"value\": \"alone\"}]},\n"
                     " {\"conversations\": [{\"from\": \"system\", \"value\": \"s\"}, {\"from\": \"human\", \"value\": "
                     "\"Hi\"}, {\"from\": \"gpt\", \"value\": \"Hello there\"}, {\"from\": \"human\", \"value\": \"more\"}]}]\n");
    snprintf(args, sizeof(args), "gold import --sharegpt '%s' --out '%s'", p, q);
    char *out;
    assert_int_equal(k25(args, &out), 0);
    assert_non_null(strstr(out, "2 requests written, 1 conversations skipped"));
    free(out);
    FILE *f = fopen(q, "r");
    assert_non_null(f);
    char line[512];
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "{\"id\":\"x1\",\"text\":\"Capital of France?\",\"expected_output_length\":6}\n");
    assert_non_null(fgets(line, sizeof(line), f));
    assert_string_equal(line, "{\"id\":\"sharegpt-2\",\"text\":\"Hi\",\"expected_output_length\":11}\n");
    assert_null(fgets(line, sizeof(line), f));
    fclose(f);
    /* the output is a valid gold set */
    snprintf(args, sizeof(args), "gold validate '%s'", q);
    assert_int_equal(k25(args, &out), 0);
    assert_non_null(strstr(out, "valid, 2 requests"));
    free(out);
    /* malformed inputs: JSON line and column, or the JSON path of the bad field */
    const struct { const char *text, *want; } bad[] = {
        {"[{\"conversations\": [{\"from\": \"human\",\n \"value\": 3}]}]", "/0/conversations/0/value: must be a string"},
        {"[{\"conversations\": [{\"from\": \"human\",", ":1:"},
        {"{\"conversations\": []}", "/: must be a list of conversations"},
        {"[{\"id\": \"a\"}, {\"conversations\": {}}]", "/0/conversations: must be an array"},
        {"[{\"conversations\": [{\"from\": 1, \"value\": \"x\"}]}]", "/0/conversations/0/from: must be a string"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tu_write_file(p, bad[i].text);
        snprintf(args, sizeof(args), "gold import --sharegpt '%s' --out '%s.bad'", p, q);
        assert_int_equal(k25(args, &out), 2);
        if (!strstr(out, bad[i].want) || !strstr(out, p))
            fail_msg("case %zu: want '%s' and the file in: %s", i, bad[i].want, out);
        free(out);
        char badout[1100];
        snprintf(badout, sizeof(badout), "%s.bad", q);
        assert_int_equal(access(badout, F_OK), -1); /* no output file left behind */
    }
    assert_int_equal(k25("gold import", &out), 2);
    assert_non_null(strstr(out, "--sharegpt FILE is required"));
    free(out);
    snprintf(args, sizeof(args), "rm -rf '%s'", dir);
    assert_int_equal(tu_run(args, NULL), 0);
    free(dir);
}


/* --dataset random:...: the spec parsed into generator options; bad keys and values named. */
static void test_random_spec(void **state)
{
    (void)state;
    struct k25_gold_gen_opts o;
    struct k25_error err;
    assert_int_equal(k25_gold_random_spec("random:input=8k,output=256", 10, 1, &o, &err), 0);
    assert_int_equal(o.count, 10);
    assert_int_equal(o.n_lengths, 10);
    for (size_t i = 0; i < o.n_lengths; i++)
        assert_int_equal(o.lengths[i], 8192);
    assert_int_equal(o.out_min, 256);
    assert_int_equal(o.out_max, 256);
    /* stdev: seeded normal draws around the mean, clamped at 64 */
    assert_int_equal(k25_gold_random_spec("random:input=1000,output=8,stdev=200", 64, 7, &o, &err), 0);
    double mean = 0;
    bool differ = false;
    for (size_t i = 0; i < o.n_lengths; i++) {
        mean += (double)o.lengths[i] / (double)o.n_lengths;
        differ = differ || o.lengths[i] != o.lengths[0];
        assert_true(o.lengths[i] >= 64);
    }
    assert_true(differ);
    assert_true(mean > 900 && mean < 1100);
    struct k25_gold_gen_opts o2;
    assert_int_equal(k25_gold_random_spec("random:input=1000,output=8,stdev=200", 64, 7, &o2, &err), 0);
    assert_memory_equal(o.lengths, o2.lengths, sizeof(o.lengths[0]) * o.n_lengths);
    const struct { const char *spec, *want; } bad[] = {
        {"random:input=100,outpt=4", "unknown key 'outpt'"},
        {"random:input=100", "needs input=N"},
        {"random:input=10,output=4", "needs input=N"},
        {"random:input=abc,output=4", "input='abc' is not a size"},
        {"random:input", "needs KEY=VALUE"},
        {"random:input=100,output=", "is not a size"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(k25_gold_random_spec(bad[i].spec, 4, 1, &o, &err), K25_EINVAL);
        if (!strstr(err.msg, bad[i].want))
            fail_msg("%s: want '%s' in: %s", bad[i].spec, bad[i].want, err.msg);
        assert_string_equal(err.field, "--dataset");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_not_json),
        cmocka_unit_test(test_cli_import_sharegpt),
        cmocka_unit_test(test_random_spec),
        cmocka_unit_test(test_bad_trailing_garbage),
        cmocka_unit_test(test_bad_duplicate_key),
        cmocka_unit_test(test_bad_not_object),
        cmocka_unit_test(test_bad_missing_id),
        cmocka_unit_test(test_bad_id_mistyped),
        cmocka_unit_test(test_bad_id_empty),
        cmocka_unit_test(test_bad_duplicate_id),
        cmocka_unit_test(test_bad_missing_text),
        cmocka_unit_test(test_bad_text_mistyped),
        cmocka_unit_test(test_bad_text_empty),
        cmocka_unit_test(test_bad_text_empty_after_strip),
        cmocka_unit_test(test_bad_text_and_ids),
        cmocka_unit_test(test_bad_ids_mistyped),
        cmocka_unit_test(test_bad_ids_empty),
        cmocka_unit_test(test_bad_ids_negative),
        cmocka_unit_test(test_bad_ids_not_int),
        cmocka_unit_test(test_bad_missing_length),
        cmocka_unit_test(test_bad_length_string),
        cmocka_unit_test(test_bad_length_real),
        cmocka_unit_test(test_bad_length_zero),
        cmocka_unit_test(test_bad_length_negative),
        cmocka_unit_test(test_bad_length_huge),
        cmocka_unit_test(test_bad_invalid_utf8),
        cmocka_unit_test(test_bad_invalid_utf8_overlong),
        cmocka_unit_test(test_bad_blank),
        cmocka_unit_test(test_bad_blank_spaces),
        cmocka_unit_test(test_bad_bom),
        cmocka_unit_test(test_bad_domain_mistyped),
        cmocka_unit_test(test_bad_prompt_mistyped),
        cmocka_unit_test(test_bad_prompt_with_ids),
        cmocka_unit_test(test_bad_hint_unknown),
        cmocka_unit_test(test_bad_priority_unknown),
        cmocka_unit_test(test_bad_priority_mistyped),
        cmocka_unit_test(test_priority_field),
        cmocka_unit_test(test_bad_meta_mistyped),
        cmocka_unit_test(test_bad_line_too_long),
        cmocka_unit_test(test_bad_every_error_listed),
        cmocka_unit_test(test_unknown_field_kept),
        cmocka_unit_test(test_valid_fields),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_invisible_ranges),
        cmocka_unit_test(test_sanitize_text_policies),
        cmocka_unit_test(test_sanitize_strip_counts),
        cmocka_unit_test(test_sanitize_keep),
        cmocka_unit_test(test_sanitize_reject),
        cmocka_unit_test(test_policy_parse),
        cmocka_unit_test(test_on_error_abort),
        cmocka_unit_test(test_on_error_skip),
        cmocka_unit_test(test_stream_abort_at_end),
        cmocka_unit_test(test_filter_eval),
        cmocka_unit_test(test_filter_errors),
        cmocka_unit_test(test_filter_in_load),
        cmocka_unit_test(test_sha256_known),
        cmocka_unit_test(test_percentile_reference),
        cmocka_unit_test(test_stats_values),
        cmocka_unit_test(test_gen_deterministic),
        cmocka_unit_test(test_gen_lengths),
        cmocka_unit_test(test_gen_legal_structure),
        cmocka_unit_test(test_gen_licenses_dir),
        cmocka_unit_test(test_gen_option_errors),
        cmocka_unit_test(test_stream_peak_rss),
        cmocka_unit_test(test_cli_help),
        cmocka_unit_test(test_cli_validate_shipped),
        cmocka_unit_test(test_cli_validate_bad),
        cmocka_unit_test(test_cli_generate_select),
    };
    return cmocka_run_group_tests_name("gold", tests, NULL, NULL);
}
