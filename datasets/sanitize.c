/*
 * sanitize.c - UTF-8 validation and the invisible/control character policy
 * of the gold-set loader (docs/gold-sets.md "Policies").
 *
 * Gold sets built from production traffic carry zero-width spaces,
 * bidirectional overrides, BOMs pasted mid-text and stray C0 controls.
 * They change token counts and can change what a model does, so the loader
 * finds them in `text` and `prompt` and, by policy, strips them (default),
 * rejects the line, or keeps them; every one is counted.
 */
#include "gold.h"

#include <string.h>

/*
 * Strict UTF-8 decoding of one character at s[0..len).  Returns its byte
 * length (1-4) and the code point in *cp, or 0 for an ill-formed sequence
 * (truncated, bad continuation, overlong, surrogate, > U+10FFFF).
 */
static size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0; /* continuation byte, C0/C1 overlong lead, or F5..FF */
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

bool k25_gold_utf8_valid(const char *s, size_t len, size_t *bad_off)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        /* Fast path: eight ASCII bytes at a time. */
        if (i + 8 <= len) {
            uint64_t w;
            memcpy(&w, p + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        uint32_t cp;
        size_t n = utf8_decode(p + i, len - i, &cp);
        if (n == 0) {
            if (bad_off)
                *bad_off = i;
            return false;
        }
        i += n;
    }
    return true;
}

bool k25_gold_is_invisible(uint32_t cp)
{
    return (cp >= 0x200B && cp <= 0x200F) || (cp >= 0x202A && cp <= 0x202E) ||
           (cp >= 0x2060 && cp <= 0x2064) || cp == 0xFEFF;
}

static bool is_bad_control(uint32_t cp)
{
    return cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r';
}

/*
 * One pass over the text.  Only bytes below 0x20 (C0 controls) and the
 * lead bytes 0xE2 (U+2000-U+2FFF) and 0xEF (U+F000-U+FFFF) can start a
 * character of interest, so everything else is copied (or skipped over)
 * without decoding.  The input must already be valid UTF-8.
 */
size_t k25_gold_sanitize_text(char *s, size_t len, enum k25_gold_sanitize policy,
                              struct k25_gold_sanitize_counts *c)
{
    memset(c, 0, sizeof(*c));
    const unsigned char *p = (const unsigned char *)s;
    bool strip = policy == K25_GOLD_SANITIZE_STRIP;
    size_t r = 0, w = 0;
    while (r < len) {
        /* Copy the run of bytes that cannot start a character of interest. */
        size_t run = r;
        while (run < len && p[run] >= 0x20 && p[run] != 0xE2 && p[run] != 0xEF)
            run++;
        if (run > r) {
            if (w != r)
                memmove(s + w, s + r, run - r);
            w += run - r;
            r = run;
            if (r == len)
                break;
        }
        unsigned b = p[r];
        size_t n = 1;
        bool bad = false;
        uint32_t cp = b;
        if (b < 0x20) {
            bad = is_bad_control(b);
            if (bad)
                c->control++;
        } else if (b == 0xE2 || b == 0xEF) {
            n = utf8_decode(p + r, len - r, &cp);
            if (n == 0)
                n = 1; /* not valid UTF-8: the caller checked, leave it */
            else if (k25_gold_is_invisible(cp)) {
                bad = true;
                c->invisible++;
            }
        }
        if (bad && c->invisible + c->control == 1) {
            c->first_off = r;
            c->first_cp = cp;
        }
        if (bad && strip) {
            r += n; /* dropped: not copied to w */
            continue;
        }
        if (w != r)
            memmove(s + w, s + r, n);
        w += n;
        r += n;
    }
    if (strip && w < len)
        s[w] = 0;
    return strip ? w : len;
}

int k25_gold_sanitize_parse(const char *s, enum k25_gold_sanitize *out, struct k25_error *err)
{
    if (!strcmp(s, "strip"))
        *out = K25_GOLD_SANITIZE_STRIP;
    else if (!strcmp(s, "reject"))
        *out = K25_GOLD_SANITIZE_REJECT;
    else if (!strcmp(s, "keep"))
        *out = K25_GOLD_SANITIZE_KEEP;
    else
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--sanitize",
                             "unknown policy '%s' (strip, reject or keep)", s);
    return 0;
}

int k25_gold_on_error_parse(const char *s, enum k25_gold_on_error *out, struct k25_error *err)
{
    if (!strcmp(s, "abort"))
        *out = K25_GOLD_ON_ERROR_ABORT;
    else if (!strcmp(s, "skip"))
        *out = K25_GOLD_ON_ERROR_SKIP;
    else
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--on-error",
                             "unknown policy '%s' (abort or skip)", s);
    return 0;
}

const char *k25_gold_sanitize_name(enum k25_gold_sanitize p)
{
    switch (p) {
    case K25_GOLD_SANITIZE_STRIP: return "strip";
    case K25_GOLD_SANITIZE_REJECT: return "reject";
    case K25_GOLD_SANITIZE_KEEP: return "keep";
    }
    return "?";
}

const char *k25_gold_on_error_name(enum k25_gold_on_error p)
{
    switch (p) {
    case K25_GOLD_ON_ERROR_ABORT: return "abort";
    case K25_GOLD_ON_ERROR_SKIP: return "skip";
    }
    return "?";
}
