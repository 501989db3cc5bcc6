/*
 * gputelemetry.c - GPU telemetry beside a run (harness.h "GPU telemetry"):
 * every device NVML sees (util/nvml.c) sampled every 100 ms on its own
 * thread during the measured repetitions, into the trace's /gpu_timeline,
 * with GPU provenance at the start and at the end, gpu_utilization_p95 in
 * the summary and a warning when the clocks moved or a throttle reason
 * was set.  Without NVML nothing is sampled and every figure is null with
 * the reason.
 */
#include "harness.h"
#include "k25util.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct k25_gputel {
    k25_nvml_t *nvml;               /* NULL: not available (why says so) */
    char why[1100];
    json_t *prov_start, *prov_end;  /* k25_nvml_provenance at start / end */
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    struct k25_gpu_sample *s;       /* [n] under mu */
    size_t n, cap;
};

static void sample_all(struct k25_gputel *g)
{
    int nd = k25_nvml_count(g->nvml);
    for (int i = 0; i < nd; i++) {
        struct k25_gpu_sample s;
        if (k25_nvml_sample(g->nvml, i, &s) != K25_OK)
            continue;
        pthread_mutex_lock(&g->mu);
        if (g->n == g->cap) {
            size_t nc = g->cap ? 2 * g->cap : 256;
            struct k25_gpu_sample *ns = realloc(g->s, nc * sizeof(*ns));
            if (ns) {
                g->s = ns;
                g->cap = nc;
            }
        }
        if (g->n < g->cap)
            g->s[g->n++] = s;
        pthread_mutex_unlock(&g->mu);
    }
}

static void *sampler_main(void *arg)
{
    struct k25_gputel *g = arg;
    uint64_t next = k25_now_ns();
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        pthread_mutex_unlock(&g->mu);
        sample_all(g);
        next += K25_GPU_SAMPLE_NS;
        pthread_mutex_lock(&g->mu);
        uint64_t now = k25_now_ns();
        if (next > now) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
            uint64_t ns = (uint64_t)ts.tv_nsec + (next - now);
            ts.tv_sec += (time_t)(ns / 1000000000ULL);
            ts.tv_nsec = (long)(ns % 1000000000ULL);
            while (!g->stop && pthread_cond_timedwait(&g->cv, &g->mu, &ts) == 0)
                ;
        } else {
            next = now; /* fell behind (a slow driver call): no burst to catch up */
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int k25_gputel_start(k25_gputel_t **out, struct k25_error *err)
{
    struct k25_gputel *g = calloc(1, sizeof(*g));
    if (!g)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    struct k25_error ne;
    k25_error_clear(&ne);
    if (k25_nvml_open(&g->nvml, &ne) != K25_OK) {
        snprintf(g->why, sizeof(g->why), "%s", ne.msg);
        *out = g;
        return K25_OK; /* no GPU telemetry: null figures with the reason */
    }
    g->prov_start = k25_nvml_provenance(g->nvml);
    if (pthread_create(&g->th, NULL, sampler_main, g) != 0) {
        k25_gputel_destroy(g);
        return k25_error_set(err, K25_EINTERNAL, NULL, 0, NULL, "cannot start the GPU sampler thread");
    }
    g->th_started = true;
    *out = g;
    return K25_OK;
}

void k25_gputel_stop(k25_gputel_t *g)
{
    if (!g || !g->th_started)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    g->th_started = false;
    sample_all(g); /* the state at the end */
    g->prov_end = k25_nvml_provenance(g->nvml);
}

void k25_gputel_destroy(k25_gputel_t *g)
{
    if (!g)
        return;
    k25_gputel_stop(g);
    k25_nvml_close(g->nvml);
    json_decref(g->prov_start);
    json_decref(g->prov_end);
    free(g->s);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

json_t *k25_gputel_provenance(const k25_gputel_t *g)
{
    if (!g->nvml)
        return json_pack("{s:b, s:s}", "available", 0, "reason", g->why);
    return json_pack("{s:b, s:s, s:O, s:O}", "available", 1, "source", "NVML", "start",
                     g->prov_start ? g->prov_start : json_null(), "end", g->prov_end ? g->prov_end : json_null());
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

json_t *k25_gputel_summary_json(const k25_gputel_t *g, char *warn, size_t warn_n)
{
    if (warn_n)
        warn[0] = '\0';
    if (!g->nvml)
        return json_pack("{s:n, s:s}", "gpu_utilization_p95", "reason", g->why);
    double *u = malloc(sizeof(double) * (g->n + 1));
    size_t k = 0;
    double smin = INFINITY, smax = -INFINITY, pmax = -INFINITY, tmax = -INFINITY;
    uint64_t thr = 0;
    for (size_t i = 0; i < g->n; i++) {
        const struct k25_gpu_sample *s = &g->s[i];
        if (u && isfinite(s->util_gpu))
            u[k++] = s->util_gpu;
        if (isfinite(s->sm_clock_mhz)) {
            smin = s->sm_clock_mhz < smin ? s->sm_clock_mhz : smin;
            smax = s->sm_clock_mhz > smax ? s->sm_clock_mhz : smax;
        }
        pmax = isfinite(s->power_w) && s->power_w > pmax ? s->power_w : pmax;
        tmax = isfinite(s->temp_c) && s->temp_c > tmax ? s->temp_c : tmax;
        thr |= s->throttle_reasons;
    }
    double p95 = NAN;
    if (u && k > 0) { /* nearest rank, as the summary's other percentiles */
        qsort(u, k, sizeof(double), cmp_dbl);
        size_t r = k25_stats_rank(k, 0.95);
        p95 = u[r > 0 ? r - 1 : 0];
    }
    free(u);
    bool moved = isfinite(smin) && smax > smin * (1.0 + K25_GPU_CLOCK_MOVED);
    if (warn_n && (moved || thr))
        snprintf(warn, warn_n, "%s%s%s", moved ? "the SM clock moved during the run" : "",
                 moved && thr ? "; " : "", thr ? "a clock throttle reason was set (summary.gpu.throttle_reasons)" : "");
    json_t *o = json_object();
    json_object_set_new(o, "gpu_utilization_p95", isfinite(p95) ? json_real(p95) : json_null());
    json_object_set_new(o, "samples", json_integer((json_int_t)g->n));
    json_object_set_new(o, "devices", json_integer(k25_nvml_count(g->nvml)));
    json_object_set_new(o, "period_ms", json_integer(K25_GPU_SAMPLE_NS / 1000000));
    json_object_set_new(o, "sm_clock_min_mhz", isfinite(smin) ? json_real(smin) : json_null());
    json_object_set_new(o, "sm_clock_max_mhz", isfinite(smax) ? json_real(smax) : json_null());
    json_object_set_new(o, "clocks_moved", json_boolean(moved));
    json_object_set_new(o, "throttle_reasons", json_integer((json_int_t)thr));
    json_object_set_new(o, "power_max_w", isfinite(pmax) ? json_real(pmax) : json_null());
    json_object_set_new(o, "temperature_max_c", isfinite(tmax) ? json_real(tmax) : json_null());
    return o;
}

struct gpu_row {
    int64_t t_ns;
    int32_t dev;
    double util_gpu, util_mem;
    int64_t mem_used, mem_total;
    double sm_mhz, mem_mhz, power_w, power_limit_w, temp_c;
    int64_t throttle; /* -1: unknown */
    double tx, rx;
};
#define GC(name, type, member) {name, type, offsetof(struct gpu_row, member), 0}
static const struct k25_h5_col gpu_cols[] = {
    GC("t_ns", K25_H5_I64, t_ns),
    GC("device", K25_H5_I32, dev),
    GC("utilization_gpu", K25_H5_F64, util_gpu),
    GC("utilization_memory", K25_H5_F64, util_mem),
    GC("memory_used_bytes", K25_H5_I64, mem_used),
    GC("memory_total_bytes", K25_H5_I64, mem_total),
    GC("sm_clock_mhz", K25_H5_F64, sm_mhz),
    GC("mem_clock_mhz", K25_H5_F64, mem_mhz),
    GC("power_w", K25_H5_F64, power_w),
    GC("power_limit_w", K25_H5_F64, power_limit_w),
    GC("temperature_c", K25_H5_F64, temp_c),
    GC("throttle_reasons", K25_H5_I64, throttle),
    GC("pcie_tx_kbs", K25_H5_F64, tx),
    GC("pcie_rx_kbs", K25_H5_F64, rx),
};

int k25_gputel_write(const k25_gputel_t *g, struct k25_h5 *h, uint64_t t0_ns, struct k25_error *err)
{
    struct gpu_row *rows = calloc(g->n + 1, sizeof(*rows));
    if (!rows)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (size_t i = 0; i < g->n; i++) {
        const struct k25_gpu_sample *s = &g->s[i];
        rows[i] = (struct gpu_row){s->t_ns - (int64_t)t0_ns, s->dev, s->util_gpu, s->util_mem, s->mem_used_bytes,
                                   s->mem_total_bytes, s->sm_clock_mhz, s->mem_clock_mhz, s->power_w, s->power_limit_w,
                                   s->temp_c, s->throttle_known ? (int64_t)s->throttle_reasons : -1, s->pcie_tx_kbs,
                                   s->pcie_rx_kbs};
    }
    int rc = k25_h5_write_table(h->file, "/gpu_timeline", gpu_cols, (int)(sizeof(gpu_cols) / sizeof(gpu_cols[0])),
                                sizeof(struct gpu_row), rows, g->n, err);
    if (rc == K25_OK)
        rc = k25_h5_attr_str(h->meta, "gpu_telemetry", g->nvml ? "NVML" : g->why, err);
    free(rows);
    return rc;
}
