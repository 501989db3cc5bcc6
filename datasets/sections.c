/*
 * sections.c - where the sections of a document start (issue 36), for the
 * engine's tier spans (engine/kvspan.c, block_pattern_hint legal_doc/auto).
 *
 * A section start is a line (after leading spaces, tabs and markdown '#')
 * that begins with a heading:
 *   - "Article N" / "ARTICLE N" / "Section N" / "SECTION N" (any case of
 *     the first letter, the rest as written), N arabic digits or a roman
 *     numeral (I V X L C), followed by '.', ':', ')', a space, a dash or
 *     the end of the line;
 *   - "§ N" / "§N";
 *   - "第N条" with N arabic digits or CJK numerals (〇一二三四五六七八九十百千零两).
 * Only when a text has none of these do numbered clauses count: a line
 * beginning "N." or "N.M" (digits, dot-separated, at most 3 levels)
 * followed by a space and an upper-case letter or '(' - contracts numbered
 * that way have no other headings.  Lines in the middle of a paragraph
 * that merely cite "Section 4.2" do not start one (a start is at a line's
 * beginning).
 *
 * The engine takes token positions: k25_gold_sections_to_tokens maps byte
 * offsets through a tokenizer's token start offsets (the byte tokenizer of
 * the presets: the identity).
 */
#include "gold.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Length of the UTF-8 sequence s (of n bytes) if it equals lit, else 0. */
static size_t lit_at(const char *s, size_t n, const char *lit)
{
    size_t l = strlen(lit);
    return n >= l && memcmp(s, lit, l) == 0 ? l : 0;
}

static bool is_roman(char c)
{
    return c == 'I' || c == 'V' || c == 'X' || c == 'L' || c == 'C';
}

/* After a heading's number: a separator or the end of the line. */
static bool heading_end(const char *s, size_t n)
{
    return n == 0 || *s == '.' || *s == ':' || *s == ')' || *s == ' ' || *s == '\t' || *s == '-' || *s == '\n' ||
           *s == '\r' || lit_at(s, n, "\xe2\x80\x94") /* em dash */;
}

/* Whether the line at s (n bytes to the end of the text) starts with a heading. */
static bool heading_at(const char *s, size_t n)
{
    static const char *const words[] = {"Article", "ARTICLE", "article", "Section", "SECTION", "section"};
    for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++) {
        size_t l = lit_at(s, n, words[w]);
        if (!l || l >= n || s[l] != ' ')
            continue;
        size_t i = l;
        while (i < n && s[i] == ' ')
            i++;
        size_t d = i;
        if (i < n && isdigit((unsigned char)s[i]))
            while (i < n && isdigit((unsigned char)s[i]))
                i++;
        else
            while (i < n && is_roman(s[i]))
                i++;
        if (i > d && heading_end(s + i, n - i))
            return true;
    }
    size_t l = lit_at(s, n, "\xc2\xa7"); /* § */
    if (l) {
        size_t i = l;
        while (i < n && s[i] == ' ')
            i++;
        if (i < n && isdigit((unsigned char)s[i]))
            return true;
    }
    l = lit_at(s, n, "\xe7\xac\xac"); /* 第 */
    if (l) {
        static const char *const nums[] = {"\xe3\x80\x87", "\xe4\xb8\x80", "\xe4\xba\x8c", "\xe4\xb8\x89",
                                           "\xe5\x9b\x9b", "\xe4\xba\x94", "\xe5\x85\xad", "\xe4\xb8\x83",
                                           "\xe5\x85\xab", "\xe4\xb9\x9d", "\xe5\x8d\x81", "\xe7\x99\xbe",
                                           "\xe5\x8d\x83", "\xe9\x9b\xb6", "\xe4\xb8\xa4"}; /* 〇一二三四五六七八九十百千零两 */
        size_t i = l, d = l;
        for (;;) {
            if (i < n && isdigit((unsigned char)s[i])) {
                i++;
                continue;
            }
            size_t k = 0;
            for (size_t x = 0; x < sizeof(nums) / sizeof(nums[0]) && !k; x++)
                k = lit_at(s + i, n - i, nums[x]);
            if (!k)
                break;
            i += k;
        }
        if (i > d && lit_at(s + i, n - i, "\xe6\x9d\xa1")) /* 条 */
            return true;
    }
    return false;
}

/* Whether the line at s starts with a numbered clause ("4.", "4.2", "4.2.1" + space + capital or '('). */
static bool clause_at(const char *s, size_t n)
{
    size_t i = 0;
    for (int level = 0; level < 3; level++) {
        size_t d = i;
        while (i < n && isdigit((unsigned char)s[i]))
            i++;
        if (i == d || i - d > 4)
            return false;
        if (i < n && s[i] == '.')
            i++;
        if (i < n && isdigit((unsigned char)s[i]))
            continue;
        break;
    }
    if (i >= n || s[i] != ' ')
        return false;
    while (i < n && s[i] == ' ')
        i++;
    return i < n && (isupper((unsigned char)s[i]) || s[i] == '(' || s[i] == '"');
}

int k25_gold_section_starts(const char *text, size_t len, size_t **offs, size_t *n_offs, bool *clauses,
                            struct k25_error *err)
{
    *offs = NULL;
    *n_offs = 0;
    *clauses = false;
    size_t cap = 0, n = 0, *o = NULL;
    for (int pass = 0; pass < 2 && n == 0; pass++) { /* headings; clauses only when there are none */
        for (size_t p = 0; p < len;) {
            size_t q = p;
            while (q < len && (text[q] == ' ' || text[q] == '\t' || text[q] == '#'))
                q++;
            bool hit = pass == 0 ? heading_at(text + q, len - q) : clause_at(text + q, len - q);
            if (hit) {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    size_t *no = realloc(o, sizeof(*no) * nc);
                    if (!no) {
                        free(o);
                        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (section starts)");
                    }
                    o = no;
                    cap = nc;
                }
                o[n++] = p; /* the line's first byte: the section's tokens start there */
            }
            const char *nl = memchr(text + q, '\n', len - q);
            p = nl ? (size_t)(nl - text) + 1 : len;
        }
        *clauses = pass == 1 && n > 0;
    }
    *offs = o;
    *n_offs = n;
    return K25_OK;
}

int k25_gold_sections_to_tokens(const size_t *offs, size_t n_offs, const size_t *tok_start, int n_tok,
                                int32_t *out, int *n_out)
{
    int m = 0;
    for (size_t i = 0; i < n_offs; i++) {
        int64_t pos;
        if (!tok_start) {
            pos = (int64_t)offs[i]; /* the byte tokenizer: one token per byte */
        } else { /* the first token starting at or after the offset */
            int lo = 0, hi = n_tok;
            while (lo < hi) {
                int mid = lo + (hi - lo) / 2;
                if (tok_start[mid] < offs[i])
                    lo = mid + 1;
                else
                    hi = mid;
            }
            pos = lo;
        }
        if (pos >= n_tok)
            break;
        if (m > 0 && pos <= out[m - 1]) /* two offsets inside one token: one start */
            continue;
        out[m++] = (int32_t)pos;
    }
    *n_out = m;
    return K25_OK;
}
