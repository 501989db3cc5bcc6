/*
 * sample.c - token selection: greedy argmax, or temperature + top-p
 * (nucleus) sampling from a per-request seeded generator, so that a
 * request's tokens depend on (seed, request id, logits) only.
 */
#include "engine.h"

#include <math.h>
#include <stdlib.h>

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t k25_sample_seed(uint64_t seed, const char *id)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a of the id */
    for (const unsigned char *p = (const unsigned char *)id; *p; p++)
        h = (h ^ *p) * 0x100000001b3ull;
    uint64_t s = mix64(seed ^ mix64(h + 0x9e3779b97f4a7c15ull));
    return s ? s : 1;
}

/* xorshift64*: next uniform double in [0, 1). */
static double next_unit(uint64_t *st)
{
    uint64_t x = *st;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *st = x;
    return (double)((x * 0x2545f4914f6cdd1dull) >> 11) * (1.0 / 9007199254740992.0);
}

/* qsort_r comparator: ctx is the probabilities (no static context, so two
 * engines - or two threads each with its engine - sample independently). */
static int by_prob_desc(const void *a, const void *b, void *ctx)
{
    const float *probs = ctx;
    float pa = probs[*(const int32_t *)a], pb = probs[*(const int32_t *)b];
    if (pa != pb)
        return pa > pb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* ties: lower id first */
}

int32_t k25_sample(struct k25_engine *e, const float *logits, double temperature, double top_p, uint64_t *rng)
{
    const int V = e->model->shape.vocab_size;
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    /* below K25_SAMPLE_GREEDY_BELOW (and for NaN) 1/temperature overflows the exponent range that
     * keeps every probability a number: the limit of sampling as temperature -> 0 is greedy */
    if (!(temperature >= K25_SAMPLE_GREEDY_BELOW))
        return best;

    float *p = e->sample_work;
    int32_t *idx = e->sample_idx;
    double inv_t = 1.0 / temperature, sum = 0.0;
    for (int i = 0; i < V; i++) {
        p[i] = (float)exp((logits[i] - logits[best]) * inv_t);
        sum += p[i];
        idx[i] = i;
    }
    for (int i = 0; i < V; i++)
        p[i] = (float)(p[i] / sum);
    qsort_r(idx, (size_t)V, sizeof(int32_t), by_prob_desc, p);

    /* smallest prefix whose mass reaches top_p, then sample within it */
    double mass = 0.0;
    int n = 0;
    while (n < V && (n == 0 || mass < top_p))
        mass += p[idx[n++]];
    double u = next_unit(rng) * mass, c = 0.0;
    for (int i = 0; i < n; i++) {
        c += p[idx[i]];
        if (u < c)
            return idx[i];
    }
    return idx[n - 1];
}

/* k25_tok_margin (k25.h): the top-1 margin the sampler records per token (struct k25_result.margins)
 * and the token verifier (tokcheck.c) compares against its bound. */
float k25_tok_margin(const float *logits, int V, int32_t *top1)
{
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best])
            best = i;
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != best && logits[i] > second)
            second = logits[i];
    if (top1)
        *top1 = best;
    if (V < 2)
        return INFINITY;
    return (float)((double)logits[best] - (double)second);
}
