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
    bool latest_only;               /* k25 serve: s[i] is device i's last sample (no history) */
};

static void sample_all(struct k25_gputel *g)
{
    int nd = k25_nvml_count(g->nvml);
    for (int i = 0; i < nd; i++) {
        struct k25_gpu_sample s;
        if (k25_nvml_sample(g->nvml, i, &s) != K25_OK)
            continue;
        pthread_mutex_lock(&g->mu);
        if (g->latest_only) { /* one slot per device, allocated at start */
            if ((size_t)i < g->cap) {
                g->s[i] = s;
                g->n = (size_t)i + 1 > g->n ? (size_t)i + 1 : g->n;
            }
            pthread_mutex_unlock(&g->mu);
            continue;
        }
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

static int gputel_start(k25_gputel_t **out, bool latest_only, struct k25_error *err);

int k25_gputel_start(k25_gputel_t **out, struct k25_error *err)
{
    return gputel_start(out, false, err);
}

int k25_gputel_start_latest(k25_gputel_t **out, struct k25_error *err)
{
    return gputel_start(out, true, err);
}

static int gputel_start(k25_gputel_t **out, bool latest_only, struct k25_error *err)
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
    g->latest_only = latest_only;
    if (latest_only) {
        int nd = k25_nvml_count(g->nvml);
        if (!(g->s = calloc((size_t)(nd > 0 ? nd : 1), sizeof(*g->s)))) {
            k25_gputel_destroy(g);
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        }
        g->cap = (size_t)(nd > 0 ? nd : 0);
    }
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

json_t *k25_gputel_rows_summary_json(const struct k25_gpu_sample *s, size_t n, const char *why)
{
    if (why)
        return json_pack("{s:n, s:s}", "gpu_utilization_p95", "reason", why);
    double *u = malloc(sizeof(double) * (n + 1));
    size_t k = 0;
    double smin = INFINITY, smax = -INFINITY, pmax = -INFINITY, tmax = -INFINITY;
    uint64_t thr = 0;
    int devices = 0;
    for (size_t i = 0; i < n; i++) {
        const struct k25_gpu_sample *x = &s[i];
        devices = x->dev + 1 > devices ? x->dev + 1 : devices;
        if (u && isfinite(x->util_gpu))
            u[k++] = x->util_gpu;
        if (isfinite(x->sm_clock_mhz)) {
            smin = x->sm_clock_mhz < smin ? x->sm_clock_mhz : smin;
            smax = x->sm_clock_mhz > smax ? x->sm_clock_mhz : smax;
        }
        pmax = isfinite(x->power_w) && x->power_w > pmax ? x->power_w : pmax;
        tmax = isfinite(x->temp_c) && x->temp_c > tmax ? x->temp_c : tmax;
        if (x->throttle_known)
            thr |= x->throttle_reasons;
    }
    double p95 = NAN;
    if (u && k > 0) { /* nearest rank, as the summary's other percentiles */
        qsort(u, k, sizeof(double), cmp_dbl);
        size_t r = k25_stats_rank(k, 0.95);
        p95 = u[r > 0 ? r - 1 : 0];
    }
    free(u);
    bool moved = isfinite(smin) && smax > smin * (1.0 + K25_GPU_CLOCK_MOVED);
    json_t *o = json_object();
    json_object_set_new(o, "gpu_utilization_p95", isfinite(p95) ? json_real(p95) : json_null());
    if (!isfinite(p95))
        json_object_set_new(o, "reason", json_string(n ? "NVML gave no utilization figure"
                                                        : "no GPU sample was taken (NVML saw no device)"));
    json_object_set_new(o, "samples", json_integer((json_int_t)n));
    json_object_set_new(o, "devices", json_integer(devices));
    json_object_set_new(o, "period_ms", json_integer(K25_GPU_SAMPLE_NS / 1000000));
    json_object_set_new(o, "sm_clock_min_mhz", isfinite(smin) ? json_real(smin) : json_null());
    json_object_set_new(o, "sm_clock_max_mhz", isfinite(smax) ? json_real(smax) : json_null());
    json_object_set_new(o, "clocks_moved", json_boolean(moved));
    json_object_set_new(o, "throttle_reasons", json_integer((json_int_t)thr));
    json_object_set_new(o, "power_max_w", isfinite(pmax) ? json_real(pmax) : json_null());
    json_object_set_new(o, "temperature_max_c", isfinite(tmax) ? json_real(tmax) : json_null());
    return o;
}

json_t *k25_gputel_summary_json(const k25_gputel_t *g, char *warn, size_t warn_n)
{
    if (warn_n)
        warn[0] = '\0';
    json_t *o = k25_gputel_rows_summary_json(g->s, g->n, g->nvml ? NULL : g->why); /* after k25_gputel_stop */
    if (!o || !g->nvml)
        return o;
    json_object_set_new(o, "devices", json_integer(k25_nvml_count(g->nvml)));
    bool moved = json_is_true(json_object_get(o, "clocks_moved"));
    json_int_t thr = json_integer_value(json_object_get(o, "throttle_reasons"));
    if (warn_n && (moved || thr))
        snprintf(warn, warn_n, "%s%s%s", moved ? "the SM clock moved during the run" : "",
                 moved && thr ? "; " : "", thr ? "a clock throttle reason was set (summary.gpu.throttle_reasons)" : "");
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

int k25_gputel_read(struct k25_h5 *h, struct k25_trace *t, struct k25_error *err)
{
    int rc = K25_OK;
    if (k25_h5_has_attr(h->meta, "gpu_telemetry") &&
        (rc = k25_h5_get_attr_str(h->meta, "gpu_telemetry", &t->gpu_telemetry, err)) != K25_OK)
        return rc;
    if (H5Lexists(h->file, "/gpu_timeline", H5P_DEFAULT) <= 0)
        return K25_OK; /* a trace without it (an older schema-6 writer): no samples */
    struct gpu_row *rows = NULL;
    size_t n = 0;
    if ((rc = k25_h5_read_table(h->file, "/gpu_timeline", gpu_cols, (int)(sizeof(gpu_cols) / sizeof(gpu_cols[0])),
                                sizeof(struct gpu_row), K25_H5_ANY_COUNT, (void **)&rows, &n, err)) != K25_OK)
        return rc;
    if (!(t->gpu = calloc(n + 1, sizeof(*t->gpu)))) {
        free(rows);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        const struct gpu_row *r = &rows[i];
        if (r->dev < 0) {
            free(rows);
            return k25_error_set(err, K25_EFORMAT, h->path, 0, "/gpu_timeline", "row %zu: device %d is negative", i,
                                 (int)r->dev);
        }
        t->gpu[i] = (struct k25_gpu_sample){r->t_ns, r->dev, r->util_gpu, r->util_mem, r->mem_used, r->mem_total,
                                            r->sm_mhz, r->mem_mhz, r->power_w, r->power_limit_w, r->temp_c,
                                            r->throttle >= 0, r->throttle >= 0 ? (uint64_t)r->throttle : 0, r->tx,
                                            r->rx};
        t->n_gpu = i + 1;
    }
    free(rows);
    return K25_OK;
}

/* The Prometheus series of one figure for every device: HELP, TYPE, one line per device (NaN unknown). */
static void prom_family(FILE *f, const char *name, const char *help, const struct k25_gpu_sample *s, size_t n,
                        size_t off, bool is_i64)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (size_t i = 0; i < n; i++) {
        const char *p = (const char *)&s[i] + off;
        if (is_i64) {
            int64_t v;
            memcpy(&v, p, sizeof(v));
            if (v < 0)
                fprintf(f, "%s{gpu=\"%d\"} NaN\n", name, s[i].dev);
            else
                fprintf(f, "%s{gpu=\"%d\"} %lld\n", name, s[i].dev, (long long)v);
        } else {
            double v;
            memcpy(&v, p, sizeof(v));
            if (isnan(v))
                fprintf(f, "%s{gpu=\"%d\"} NaN\n", name, s[i].dev);
            else
                fprintf(f, "%s{gpu=\"%d\"} %.6g\n", name, s[i].dev, v);
        }
    }
}

void k25_gputel_metrics(k25_gputel_t *g, FILE *f)
{
    if (!g)
        return;
    if (g->nvml)
        fprintf(f, "# HELP k25_gpu_telemetry_available 1: NVML samples every GPU every %lld ms (the k25_gpu_* "
                   "gauges).\n", (long long)(K25_GPU_SAMPLE_NS / 1000000));
    else /* the reason, on one line */
        fprintf(f, "# HELP k25_gpu_telemetry_available 0: no GPU telemetry: %s\n", g->why);
    fprintf(f, "# TYPE k25_gpu_telemetry_available gauge\nk25_gpu_telemetry_available %d\n", g->nvml ? 1 : 0);
    if (!g->nvml)
        return;
    pthread_mutex_lock(&g->mu);
    size_t n = g->n;
    struct k25_gpu_sample *s = malloc(sizeof(*s) * (n + 1));
    if (s)
        memcpy(s, g->s, sizeof(*s) * n);
    pthread_mutex_unlock(&g->mu);
    if (!s)
        return;
#define PF(name, help, member, i64) prom_family(f, name, help, s, n, offsetof(struct k25_gpu_sample, member), i64)
    PF("k25_gpu_utilization_ratio", "Fraction of the driver's last sample period a kernel ran (NVML).", util_gpu,
       false);
    PF("k25_gpu_memory_utilization_ratio", "Fraction of the last sample period device memory was read or written.",
       util_mem, false);
    PF("k25_gpu_memory_used_bytes", "Device memory in use.", mem_used_bytes, true);
    PF("k25_gpu_memory_total_bytes", "Device memory.", mem_total_bytes, true);
    PF("k25_gpu_sm_clock_mhz", "Current SM clock.", sm_clock_mhz, false);
    PF("k25_gpu_mem_clock_mhz", "Current memory clock.", mem_clock_mhz, false);
    PF("k25_gpu_power_watts", "Board power draw.", power_w, false);
    PF("k25_gpu_power_limit_watts", "Enforced power limit.", power_limit_w, false);
    PF("k25_gpu_temperature_celsius", "GPU temperature.", temp_c, false);
    PF("k25_gpu_pcie_tx_kbytes_per_second", "PCIe transmit throughput.", pcie_tx_kbs, false);
    PF("k25_gpu_pcie_rx_kbytes_per_second", "PCIe receive throughput.", pcie_rx_kbs, false);
#undef PF
    fprintf(f, "# HELP k25_gpu_throttle_reasons NVML's clock throttle reason bits (GpuIdle cleared; 0 none).\n"
               "# TYPE k25_gpu_throttle_reasons gauge\n");
    for (size_t i = 0; i < n; i++) {
        if (s[i].throttle_known)
            fprintf(f, "k25_gpu_throttle_reasons{gpu=\"%d\"} %llu\n", s[i].dev,
                    (unsigned long long)s[i].throttle_reasons);
        else
            fprintf(f, "k25_gpu_throttle_reasons{gpu=\"%d\"} NaN\n", s[i].dev);
    }
    free(s);
}

const char *k25_gputel_describe(const k25_gputel_t *g, char *buf, size_t n)
{
    if (!g->nvml) {
        snprintf(buf, n, "none (%s)", g->why);
        return buf;
    }
    const json_t *d0 = json_array_get(g->prov_start, 0);
    const char *name = json_string_value(json_object_get(d0, "name"));
    const char *drv = json_string_value(json_object_get(d0, "driver_version"));
    snprintf(buf, n, "NVML, %d device(s)%s%s%s%s, sampled every %lld ms", k25_nvml_count(g->nvml),
             name ? ": " : "", name ? name : "", drv ? ", driver " : "", drv ? drv : "",
             (long long)(K25_GPU_SAMPLE_NS / 1000000));
    return buf;
}
