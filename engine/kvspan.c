/*
 * kvspan.c - tier spans (issue 36): how the hotness policy of the KV tiers
 * cuts a sequence into the units it scores and moves (docs/engine.md "KV
 * tiers").
 *
 * The paged pool's physical block (kv_block_size tokens) never changes.  A
 * span is a run of consecutive blocks of one sequence that the hotness
 * policy ranks by one score (the mean decayed attention mass of its blocks)
 * and promotes or demotes together.  Where spans start follows
 * block_pattern_hint:
 *
 *   plain_text  fixed spans of K25_KV_SPAN_PLAIN_TOKENS tokens (rounded to
 *               whole blocks, at least one block);
 *   legal_doc   a span starts at the block holding each section start the
 *               request supplies (token positions of headings, computed by
 *               the caller from the text and its tokenizer's offsets:
 *               datasets/sections.c); a section longer than
 *               K25_KV_SPAN_LEGAL_MAX_TOKENS is cut into pieces of that
 *               length, and sections starting in the same block share it;
 *   auto        legal_doc when the request has at least
 *               K25_KV_SPAN_AUTO_MIN_SECTIONS section starts and their
 *               density (starts per 1000 prompt tokens) lies in
 *               [K25_KV_SPAN_AUTO_MIN_DENSITY, K25_KV_SPAN_AUTO_MAX_DENSITY],
 *               else plain_text.  Denser markers are list items, not
 *               sections; sparser ones do not structure the text.
 *
 * Blocks past the prompt (generated tokens) get fixed plain-text spans
 * whatever the mode.  With compression the blocks hold slots, not
 * positions: spans are cut from positions at admission, so after pruning a
 * span boundary lies within a few blocks of its section start.
 */
#include "kvtier.h"

#include <stdlib.h>
#include <string.h>

void k25_kv_spans_free(struct k25_kv_spans *s)
{
    free(s->first);
    memset(s, 0, sizeof(*s));
}

static int plain_blocks(int block_size)
{
    int b = K25_KV_SPAN_PLAIN_TOKENS / block_size;
    return b > 0 ? b : 1;
}

int k25_kv_spans_cut(enum k25_hint hint, const int32_t *starts, int n_starts, int n_tokens, int block_size,
                     struct k25_kv_spans *out, struct k25_error *err)
{
    memset(out, 0, sizeof(*out));
    if (block_size < 1 || n_tokens < 1 || n_starts < 0 || (n_starts > 0 && !starts))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "section_starts", "bad span request (%d starts, %d tokens)",
                             n_starts, n_tokens);
    for (int i = 0; i < n_starts; i++)
        if (starts[i] < 0 || starts[i] >= n_tokens || (i > 0 && starts[i] <= starts[i - 1]))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "section_starts",
                                 "section start %d is %d: starts must ascend strictly within the prompt's %d tokens",
                                 i, starts[i], n_tokens);
    out->density = 1000.0 * n_starts / n_tokens;
    out->n_sections = n_starts;
    out->mode = hint;
    if (hint == K25_HINT_AUTO) {
        out->decided = true;
        out->mode = n_starts >= K25_KV_SPAN_AUTO_MIN_SECTIONS && out->density >= K25_KV_SPAN_AUTO_MIN_DENSITY &&
                            out->density <= K25_KV_SPAN_AUTO_MAX_DENSITY
                        ? K25_HINT_LEGAL_DOC
                        : K25_HINT_PLAIN_TEXT;
    }
    const int nb = (n_tokens + block_size - 1) / block_size, pb = plain_blocks(block_size);
    int lmax = K25_KV_SPAN_LEGAL_MAX_TOKENS / block_size;
    lmax = lmax > 0 ? lmax : 1;
    out->fixed_blocks = pb;
    out->doc_blocks = nb;
    /* at most one span per block */
    if (!(out->first = malloc(sizeof(int32_t) * (size_t)nb)))
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory (KV spans)");
    int n = 0;
    if (out->mode == K25_HINT_PLAIN_TEXT) {
        for (int b = 0; b < nb; b += pb)
            out->first[n++] = b;
    } else {
        int from = 0; /* the current section's first block */
        for (int i = 0; i <= n_starts; i++) {
            int to = i < n_starts ? starts[i] / block_size : nb;
            if (to <= from) /* sections starting in the same block share it */
                continue;
            for (int b = from; b < to; b += lmax) /* a long section: pieces of lmax */
                out->first[n++] = b;
            from = to;
        }
    }
    out->n = n;
    return K25_OK;
}

int k25_kv_span_of(const struct k25_kv_spans *s, int block)
{
    if (s->n == 0) /* no spans cut (tiers' positional policy, or a request without any): fixed */
        return block / (s->fixed_blocks > 0 ? s->fixed_blocks : 1);
    if (block >= s->doc_blocks)
        return s->n + (block - s->doc_blocks) / s->fixed_blocks;
    int lo = 0, hi = s->n - 1; /* the last span whose first block <= block */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->first[mid] <= block)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

void k25_kv_span_range(const struct k25_kv_spans *s, int span, int *b0, int *b1)
{
    int fb = s->fixed_blocks > 0 ? s->fixed_blocks : 1;
    if (span < s->n) {
        *b0 = s->first[span];
        *b1 = span + 1 < s->n ? s->first[span + 1] : s->doc_blocks;
    } else {
        *b0 = (s->n ? s->doc_blocks : 0) + (span - s->n) * fb;
        *b1 = *b0 + fb;
    }
}
