/*
 * breaker.c - the circuit breaker of the elastic request queue.
 *
 * Two pressures: the engine's busy fraction (step time over wall time in
 * a sliding window of K25_BREAKER_WINDOW_NS, kept in buckets) and its
 * memory fraction (the engine's accounted bytes over memory_budget_mb,
 * else the cgroup memory limit, else MemAvailable at start).  The breaker
 * opens when busy stays above breaker_busy_threshold for
 * breaker_busy_seconds, or at once when memory passes
 * breaker_memory_threshold; it closes when both have stayed below their
 * thresholds minus K25_BREAKER_MARGIN for breaker_busy_seconds
 * (hysteresis: no flapping at the threshold).  engine.c routes new
 * requests to the degraded model while it is open and logs transitions.
 * Time comes from the caller (the engine's clock, replaceable in tests).
 */
#include "queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The memory the process may use: cgroup v2/v1 limit, else MemAvailable; 0 when unknown. */
static int64_t process_limit_bytes(void)
{
    char line[256];
    long long v = 0;
    FILE *f = fopen("/sys/fs/cgroup/memory.max", "r");
    if (f) {
        if (fgets(line, sizeof(line), f) && strncmp(line, "max", 3) != 0)
            v = atoll(line);
        fclose(f);
        if (v > 0)
            return v;
    }
    f = fopen("/sys/fs/cgroup/memory/memory.limit_in_bytes", "r");
    if (f) {
        if (fgets(line, sizeof(line), f))
            v = atoll(line);
        fclose(f);
        if (v > 0 && v < (1LL << 60)) /* v1 reports "no limit" as a huge number */
            return v;
    }
    f = fopen("/proc/meminfo", "r");
    if (f) {
        while (fgets(line, sizeof(line), f))
            if (sscanf(line, "MemAvailable: %lld kB", &v) == 1)
                break;
        fclose(f);
        if (v > 0)
            return v * 1024;
    }
    return 0;
}

void k25_breaker_init(struct k25_breaker *b, const struct k25_config *cfg, uint64_t now_ns)
{
    memset(b, 0, sizeof(*b));
    b->enabled = cfg->breaker_enabled;
    b->busy_thr = cfg->breaker_busy_threshold;
    b->mem_thr = cfg->breaker_memory_threshold;
    b->hold_ns = (uint64_t)(cfg->breaker_busy_seconds * 1e9);
    b->bucket_ns = K25_BREAKER_WINDOW_NS / K25_BREAKER_BUCKETS;
    b->t_start = now_ns;
    if (b->enabled)
        b->mem_limit_bytes = cfg->memory_budget_mb > 0 ? cfg->memory_budget_mb * 1024 * 1024 : process_limit_bytes();
}

/* The bucket for epoch ep (t / bucket_ns), cleared when it held an older epoch. */
static uint64_t *bucket(struct k25_breaker *b, uint64_t ep)
{
    int i = (int)(ep % K25_BREAKER_BUCKETS);
    if (b->bucket_epoch[i] != ep + 1) {
        b->bucket_epoch[i] = ep + 1;
        b->bucket_busy[i] = 0;
    }
    return &b->bucket_busy[i];
}

void k25_breaker_record(struct k25_breaker *b, uint64_t t0, uint64_t t1, double occupancy)
{
    if (!b->enabled || t1 <= t0)
        return;
    /* a step counts by how much of the engine's capacity it used: a continuously batching engine
     * steps back to back whenever anything runs, so raw step time reads ~100% busy at any load */
    occupancy = occupancy < 0 ? 0 : occupancy > 1 ? 1 : occupancy;
    t0 = t1 - (uint64_t)((double)(t1 - t0) * occupancy);
    if (t1 <= t0)
        return;
    if (t1 - t0 > K25_BREAKER_WINDOW_NS) /* only the last window matters */
        t0 = t1 - K25_BREAKER_WINDOW_NS;
    while (t0 < t1) { /* split the interval at bucket edges */
        uint64_t ep = t0 / b->bucket_ns, edge = (ep + 1) * b->bucket_ns, end = t1 < edge ? t1 : edge;
        *bucket(b, ep) += end - t0;
        t0 = end;
    }
}

/* Busy fraction of the window ending at now (of the time since start when younger). */
static double busy_fraction(const struct k25_breaker *b, uint64_t now)
{
    uint64_t cur = now / b->bucket_ns, busy = 0;
    for (int i = 0; i < K25_BREAKER_BUCKETS; i++) {
        uint64_t ep = b->bucket_epoch[i];
        if (ep && ep - 1 + K25_BREAKER_BUCKETS > cur && ep - 1 <= cur)
            busy += b->bucket_busy[i];
    }
    /* the window: whole buckets before the current one plus its elapsed part */
    uint64_t span = (K25_BREAKER_BUCKETS - 1) * b->bucket_ns + now % b->bucket_ns;
    if (now - b->t_start < span)
        span = now - b->t_start;
    if (span < b->bucket_ns / 10) /* too young to judge */
        return 0.0;
    double f = (double)busy / (double)span;
    return f > 1.0 ? 1.0 : f;
}

int k25_breaker_update(struct k25_breaker *b, uint64_t now, int64_t mem_bytes)
{
    if (!b->enabled)
        return 0;
    b->busy = busy_fraction(b, now);
    b->mem = b->mem_limit_bytes > 0 ? (double)mem_bytes / (double)b->mem_limit_bytes : 0.0;
    bool busy_over = b->busy > b->busy_thr, mem_over = b->mem > b->mem_thr;
    bool under = b->busy < b->busy_thr - K25_BREAKER_MARGIN && b->mem < b->mem_thr - K25_BREAKER_MARGIN;
    /* "+1" so a condition that starts at t = 0 (a test clock) is not read as absent */
    b->over_since = busy_over ? (b->over_since ? b->over_since : now + 1) : 0;
    b->under_since = under ? (b->under_since ? b->under_since : now + 1) : 0;
    if (!b->open && (mem_over || (busy_over && now + 1 - b->over_since >= b->hold_ns))) {
        b->open = true;
        b->under_since = 0;
        return 1;
    }
    if (b->open && under && now + 1 - b->under_since >= b->hold_ns) {
        b->open = false;
        b->over_since = 0;
        return -1;
    }
    return 0;
}
