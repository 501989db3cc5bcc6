/*
 * gold_internal.h - declarations shared by the datasets/ sources only.
 */
#ifndef K25_GOLD_INTERNAL_H
#define K25_GOLD_INTERNAL_H

#include "gold.h"

/* Between prompt and text in the input the engine sees. */
#define K25_GOLD_PROMPT_SEP "\n\n"
#define K25_GOLD_PROMPT_SEP_LEN 2

/* "auto", "legal_doc", "plain_text" (the schema's block_pattern_hint values). */
const char *k25_gold_hint_name(enum k25_hint h);

/* ---------------------------------------------------- generator helpers */

#include <stdint.h>

/* splitmix64: small, fast, fully specified, so generated sets reproduce. */
struct k25_gold_rng {
    uint64_t s;
};

static inline uint64_t k25_gold_rng_next(struct k25_gold_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, n) (n > 0); the tiny modulo bias does not matter here. */
static inline uint64_t k25_gold_rng_below(struct k25_gold_rng *r, uint64_t n)
{
    return k25_gold_rng_next(r) % n;
}

/* Growable byte string; p is NUL-terminated whenever n > 0. */
struct k25_gold_sbuf {
    char *p;
    size_t n, cap;
    bool oom; /* set by the first failed allocation; later appends do nothing */
};

void k25_gold_sbuf_put(struct k25_gold_sbuf *b, const char *s, size_t n);
void k25_gold_sbuf_puts(struct k25_gold_sbuf *b, const char *s);
void k25_gold_sbuf_printf(struct k25_gold_sbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Lower-case hex of n digest bytes into hex[2n+1] (stats.c). */
void k25_gold_hex(const unsigned char *d, size_t n, char *hex);

/* Domain writers (gen_docs.c): append text until b->n >= target. */
void k25_gold_gen_legal(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target);
void k25_gold_gen_finance(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target);
void k25_gold_gen_minutes(struct k25_gold_rng *r, struct k25_gold_sbuf *b, size_t target);

#endif
