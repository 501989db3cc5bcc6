/*
 * servermetrics.c - a Prometheus scraper beside an endpoint run
 * (servermetrics.h): one thread, one libcurl easy handle, a scrape every
 * period (1 s), the first at once and a last one at stop, so even a short
 * run has two.  Each scrape is parsed into raw series (kept by name) and
 * mapped to k25's figures through the table of known families below.
 *
 * Names, from each server's documentation:
 *   vLLM      vllm:kv_cache_usage_perc (v1; vllm:gpu_cache_usage_perc before),
 *             vllm:num_requests_running, vllm:num_requests_waiting,
 *             vllm:num_preemptions_total, vllm:prefix_cache_hits_total /
 *             vllm:prefix_cache_queries_total (v1 counters;
 *             vllm:gpu_prefix_cache_hit_rate before)
 *   SGLang    sglang:token_usage, sglang:num_running_reqs,
 *             sglang:num_queue_reqs, sglang:cache_hit_rate
 *   TGI       tgi_batch_current_size, tgi_queue_size (no KV usage gauge)
 *   llama.cpp llamacpp:kv_cache_usage_ratio, llamacpp:requests_processing,
 *             llamacpp:requests_deferred
 *   k25 serve k25_kv_blocks_used / k25_kv_blocks_total, k25_requests_running,
 *             k25_requests_waiting
 * A family's series with several label sets (vLLM's per-engine gauges) are
 * summed.  Hit rates from counters are the increase of hits over the
 * increase of queries between scrapes.
 */
#include "servermetrics.h"

#include <curl/curl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const k25_sm_names[K25_SM_N] = {"kv_usage_ratio", "n_running", "n_waiting", "preemptions_total",
                                            "prefix_cache_hit_rate"};
const char *const k25_srvmet_fig_names[K25_SRVMET_NFIG] = {"kv_usage_ratio", "n_running", "n_waiting",
                                                           "preemptions_total", "prefix_cache_hit_rate"};
_Static_assert(K25_SM_N == K25_SRVMET_NFIG, "harness.h's K25_SRVMET_NFIG counts servermetrics.h's figures");

/* The known names of each figure, in order of preference; a ratio of two names for k25's KV usage. */
static const struct {
    int fig;
    const char *family, *name, *denom; /* denom: name / denom (NULL: the name's value) */
} known[] = {
    {K25_SM_KV_USAGE, "vllm", "vllm:kv_cache_usage_perc", NULL},
    {K25_SM_KV_USAGE, "vllm", "vllm:gpu_cache_usage_perc", NULL},
    {K25_SM_KV_USAGE, "sglang", "sglang:token_usage", NULL},
    {K25_SM_KV_USAGE, "llama.cpp", "llamacpp:kv_cache_usage_ratio", NULL},
    {K25_SM_KV_USAGE, "k25", "k25_kv_blocks_used", "k25_kv_blocks_total"},
    {K25_SM_RUNNING, "vllm", "vllm:num_requests_running", NULL},
    {K25_SM_RUNNING, "sglang", "sglang:num_running_reqs", NULL},
    {K25_SM_RUNNING, "tgi", "tgi_batch_current_size", NULL},
    {K25_SM_RUNNING, "llama.cpp", "llamacpp:requests_processing", NULL},
    {K25_SM_RUNNING, "k25", "k25_requests_running", NULL},
    {K25_SM_WAITING, "vllm", "vllm:num_requests_waiting", NULL},
    {K25_SM_WAITING, "sglang", "sglang:num_queue_reqs", NULL},
    {K25_SM_WAITING, "tgi", "tgi_queue_size", NULL},
    {K25_SM_WAITING, "llama.cpp", "llamacpp:requests_deferred", NULL},
    {K25_SM_WAITING, "k25", "k25_requests_waiting", NULL},
    {K25_SM_PREEMPTIONS, "vllm", "vllm:num_preemptions_total", NULL},
    {K25_SM_PREFIX_HIT, "vllm", "vllm:gpu_prefix_cache_hit_rate", NULL},
    {K25_SM_PREFIX_HIT, "sglang", "sglang:cache_hit_rate", NULL},
};
#define N_KNOWN (sizeof(known) / sizeof(known[0]))
/* vLLM v1's prefix-cache counters: the hit rate between two scrapes */
#define VLLM_HITS "vllm:prefix_cache_hits_total"
#define VLLM_QUERIES "vllm:prefix_cache_queries_total"

struct scrape {
    uint64_t t_ns;  /* k25_now_ns() when the answer was complete */
    int status;     /* HTTP status, 0: no answer */
    double fig[K25_SM_N];
    double hits, queries; /* vLLM v1's prefix-cache counters (NaN: absent) */
};

struct value {
    int32_t scrape, series;
    double v;
};

struct k25_srvmet {
    char url[2100];
    char auth[600];
    double period_s;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    /* under mu */
    struct scrape *sc;  /* [n_sc] */
    size_t n_sc, cap_sc;
    char **series;      /* [n_series] raw series names, owned */
    size_t n_series, cap_series;
    struct value *val;  /* [n_val] */
    size_t n_val, cap_val;
    char family[16];    /* the family the names matched ("" none yet) */
    char note[2600];    /* why there are no metrics ("" when there are) */
    int64_t bad_lines;
};

/* ------------------------------------------------------------ parsing */

int k25_prom_parse(const char *text, size_t n,
                   void (*cb)(const char *series, size_t series_len, const char *name, size_t name_len, double v,
                              void *user),
                   void *user)
{
    int bad = 0;
    const char *p = text, *end = text + n;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *le = nl ? nl : end;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t'))
            q++;
        if (q == le || *q == '#' || *q == '\r') {
            p = le + 1;
            continue;
        }
        const char *name = q;
        while (q < le && ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || *q == '_' || *q == ':' ||
                          (q > name && *q >= '0' && *q <= '9')))
            q++;
        size_t name_len = (size_t)(q - name);
        bool ok = name_len > 0;
        if (ok && q < le && *q == '{') { /* labels: quoted values may hold '}' and escapes */
            bool in_q = false;
            for (q++; q < le; q++) {
                if (in_q && *q == '\\' && q + 1 < le)
                    q++;
                else if (*q == '"')
                    in_q = !in_q;
                else if (!in_q && *q == '}')
                    break;
            }
            ok = q < le;
            q++;
        }
        size_t series_len = (size_t)(q - name);
        if (ok && (q >= le || (*q != ' ' && *q != '\t')))
            ok = false;
        while (ok && q < le && (*q == ' ' || *q == '\t'))
            q++;
        char num[64];
        size_t k = 0;
        while (ok && q < le && *q != ' ' && *q != '\t' && *q != '\r' && k < sizeof(num) - 1)
            num[k++] = *q++;
        num[k] = '\0';
        char *e = NULL;
        double v = k ? strtod(num, &e) : 0;
        if (!ok || k == 0 || (e && *e)) {
            bad++;
        } else {
            cb(name, series_len, name, name_len, v, user);
        }
        p = le + 1;
    }
    return bad;
}

/* ------------------------------------------------------------ one scrape */

struct membuf {
    char *p;
    size_t n, cap;
};

static size_t mb_write(char *p, size_t sz, size_t nm, void *u)
{
    struct membuf *m = u;
    size_t n = sz * nm;
    if (m->n + n + 1 > (64u << 20))
        return 0; /* a runaway answer */
    if (m->n + n + 1 > m->cap) {
        size_t nc = m->cap ? m->cap : 65536;
        while (nc < m->n + n + 1)
            nc *= 2;
        char *np = realloc(m->p, nc);
        if (!np)
            return 0;
        m->p = np;
        m->cap = nc;
    }
    memcpy(m->p + m->n, p, n);
    m->n += n;
    m->p[m->n] = '\0';
    return n;
}

/* What one parse collects before it is merged under the lock. */
struct parsed {
    struct k25_srvmet *m;
    struct scrape *s;
    double sum[N_KNOWN], den[N_KNOWN];
    bool seen[N_KNOWN], den_seen[N_KNOWN];
    bool oom;
};

static int series_index(struct k25_srvmet *m, const char *s, size_t n)
{
    for (size_t i = 0; i < m->n_series; i++)
        if (strlen(m->series[i]) == n && !memcmp(m->series[i], s, n))
            return (int)i;
    if (m->n_series == m->cap_series) {
        size_t nc = m->cap_series ? 2 * m->cap_series : 64;
        char **ns = realloc(m->series, nc * sizeof(*ns));
        if (!ns)
            return -1;
        m->series = ns;
        m->cap_series = nc;
    }
    if (!(m->series[m->n_series] = strndup(s, n)))
        return -1;
    return (int)m->n_series++;
}

static void on_sample(const char *series, size_t series_len, const char *name, size_t name_len, double v, void *u)
{
    struct parsed *ps = u;
    struct k25_srvmet *m = ps->m;
    for (size_t i = 0; i < N_KNOWN; i++) {
        if (strlen(known[i].name) == name_len && !memcmp(known[i].name, name, name_len)) {
            ps->sum[i] += v;
            ps->seen[i] = true;
        }
        if (known[i].denom && strlen(known[i].denom) == name_len && !memcmp(known[i].denom, name, name_len)) {
            ps->den[i] += v;
            ps->den_seen[i] = true;
        }
    }
    if (name_len == strlen(VLLM_HITS) && !memcmp(name, VLLM_HITS, name_len))
        ps->s->hits = (isnan(ps->s->hits) ? 0 : ps->s->hits) + v;
    if (name_len == strlen(VLLM_QUERIES) && !memcmp(name, VLLM_QUERIES, name_len))
        ps->s->queries = (isnan(ps->s->queries) ? 0 : ps->s->queries) + v;
    int si = series_index(m, series, series_len);
    if (si >= 0 && m->n_val == m->cap_val) {
        size_t nc = m->cap_val ? 2 * m->cap_val : 1024;
        struct value *nv = realloc(m->val, nc * sizeof(*nv));
        if (nv) {
            m->val = nv;
            m->cap_val = nc;
        }
    }
    if (si < 0 || m->n_val == m->cap_val) {
        ps->oom = true; /* the sample is dropped; the mapped figures above still count it */
        return;
    }
    m->val[m->n_val++] = (struct value){(int32_t)m->n_sc, si, v};
}

/* One GET of the metrics and its parse into a new scrape record (under mu while merging). */
static void scrape_once(struct k25_srvmet *m, CURL *h, struct curl_slist *hdrs)
{
    struct membuf b = {0};
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_URL, m->url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mb_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    uint64_t t = k25_now_ns();
    pthread_mutex_lock(&m->mu);
    if (m->n_sc == m->cap_sc) {
        size_t nc = m->cap_sc ? 2 * m->cap_sc : 64;
        struct scrape *ns = realloc(m->sc, nc * sizeof(*ns));
        if (!ns)
            goto out_unlock;
        m->sc = ns;
        m->cap_sc = nc;
    }
    struct scrape *s = &m->sc[m->n_sc];
    *s = (struct scrape){.t_ns = t, .status = (int)status, .hits = NAN, .queries = NAN};
    for (int f = 0; f < K25_SM_N; f++)
        s->fig[f] = NAN;
    if (rc != CURLE_OK || status != 200) {
        if (!m->note[0] && rc != CURLE_OK)
            snprintf(m->note, sizeof(m->note), "no server metrics at %s: %s", m->url,
                     errbuf[0] ? errbuf : curl_easy_strerror(rc));
        else if (!m->note[0])
            snprintf(m->note, sizeof(m->note), "no server metrics at %s: HTTP %ld", m->url, status);
        m->n_sc++;
        goto out_unlock;
    }
    struct parsed ps = {.m = m, .s = s};
    m->bad_lines += k25_prom_parse(b.p ? b.p : "", b.n, on_sample, &ps);
    for (size_t i = 0; i < N_KNOWN; i++) {
        int f = known[i].fig;
        if (!ps.seen[i] || !isnan(s->fig[f]))
            continue; /* the first known name of a figure wins */
        if (known[i].denom) {
            if (ps.den_seen[i] && isfinite(ps.den[i]) && ps.den[i] > 0)
                s->fig[f] = ps.sum[i] / ps.den[i];
            else
                continue; /* k25 serve without memory_budget_mb: no total, no ratio */
        } else {
            s->fig[f] = ps.sum[i];
        }
        if (!m->family[0])
            snprintf(m->family, sizeof(m->family), "%s", known[i].family);
    }
    /* vLLM v1: the hit rate since the previous scrape from its counters */
    if (isnan(s->fig[K25_SM_PREFIX_HIT]) && !isnan(s->queries) && m->n_sc > 0) {
        const struct scrape *pr = &m->sc[m->n_sc - 1];
        double dq = s->queries - pr->queries;
        if (!isnan(pr->queries) && dq > 0)
            s->fig[K25_SM_PREFIX_HIT] = (s->hits - pr->hits) / dq;
    }
    if (m->n_series == 0 && !m->note[0])
        snprintf(m->note, sizeof(m->note), "%s answered, but with no Prometheus samples", m->url);
    m->n_sc++;
out_unlock:
    pthread_mutex_unlock(&m->mu);
    free(b.p);
}

static void *scrape_main(void *arg)
{
    struct k25_srvmet *m = arg;
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = m->auth[0] ? curl_slist_append(NULL, m->auth) : NULL;
    if (!h) {
        pthread_mutex_lock(&m->mu);
        snprintf(m->note, sizeof(m->note), "no server metrics: libcurl could not start");
        pthread_mutex_unlock(&m->mu);
        return NULL;
    }
    bool last = false;
    while (!last) {
        scrape_once(m, h, hdrs);
        pthread_mutex_lock(&m->mu);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
        uint64_t ns = (uint64_t)ts.tv_nsec + (uint64_t)(m->period_s * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000ULL);
        ts.tv_nsec = (long)(ns % 1000000000ULL);
        while (!m->stop && pthread_cond_timedwait(&m->cv, &m->mu, &ts) == 0)
            ;
        last = m->stop; /* stopped: one last scrape, then out */
        pthread_mutex_unlock(&m->mu);
        if (last)
            scrape_once(m, h, hdrs);
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    return NULL;
}

int k25_srvmet_start(const char *url, const char *api_key, double period_s, k25_srvmet_t **out,
                     struct k25_error *err)
{
    struct k25_srvmet *m = calloc(1, sizeof(*m));
    if (!m)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    snprintf(m->url, sizeof(m->url), "%s", url);
    if (api_key)
        snprintf(m->auth, sizeof(m->auth), "Authorization: Bearer %s", api_key);
    m->period_s = period_s;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    if (pthread_create(&m->th, NULL, scrape_main, m) != 0) {
        k25_srvmet_destroy(m);
        return k25_error_set(err, K25_EINTERNAL, NULL, 0, "--server-metrics", "cannot start the scraper thread");
    }
    m->th_started = true;
    *out = m;
    return K25_OK;
}

void k25_srvmet_stop(k25_srvmet_t *m)
{
    if (!m || !m->th_started)
        return;
    pthread_mutex_lock(&m->mu);
    m->stop = true;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->th, NULL);
    m->th_started = false;
}

void k25_srvmet_destroy(k25_srvmet_t *m)
{
    if (!m)
        return;
    k25_srvmet_stop(m);
    for (size_t i = 0; i < m->n_series; i++)
        free(m->series[i]);
    free(m->series);
    free(m->sc);
    free(m->val);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m);
}

/* ------------------------------------------------------------ results */

static json_t *num(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

/* Each figure's {max, mean, n} over n scrapes (fig: the first scrape's figures, stride bytes apart; the
 * preemptions counter as its increase), null where no scrape had it, into o. */
static void figs_json(json_t *o, const double *fig, size_t stride, size_t n)
{
    for (int f = 0; f < K25_SM_N; f++) {
        double mx = -INFINITY, sum = 0, first = NAN, last = NAN;
        int k = 0;
        for (size_t i = 0; i < n; i++) {
            double v = ((const double *)(const void *)((const char *)fig + i * stride))[f];
            if (isnan(v))
                continue;
            mx = v > mx ? v : mx;
            sum += v;
            if (k++ == 0)
                first = v;
            last = v;
        }
        if (f == K25_SM_PREEMPTIONS) /* a counter: its increase over the run */
            json_object_set_new(o, "preemptions", k ? num(last - first) : json_null());
        else
            json_object_set_new(o, k25_sm_names[f],
                                k ? json_pack("{s:o, s:o, s:i}", "max", num(mx), "mean", num(sum / k), "n", k)
                                  : json_null());
    }
}

json_t *k25_srvmet_summary_json(const k25_srvmet_t *m)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    size_t ok = 0;
    for (size_t i = 0; i < m->n_sc; i++)
        ok += m->sc[i].status == 200;
    json_object_set_new(o, "url", json_string(m->url));
    json_object_set_new(o, "scrapes", json_integer((json_int_t)m->n_sc));
    json_object_set_new(o, "scrapes_ok", json_integer((json_int_t)ok));
    json_object_set_new(o, "period_s", json_real(m->period_s));
    json_object_set_new(o, "family", m->family[0] ? json_string(m->family) : json_null());
    json_object_set_new(o, "series", json_integer((json_int_t)m->n_series));
    json_object_set_new(o, "malformed_lines", json_integer(m->bad_lines));
    json_object_set_new(o, "note", m->note[0] ? json_string(m->note)
                                   : !m->family[0] ? json_string("no series k25 knows (raw series kept in the trace)")
                                                   : json_null());
    figs_json(o, m->n_sc ? m->sc[0].fig : NULL, sizeof(m->sc[0]), m->n_sc);
    return o;
}

struct sm_row {
    int64_t t_ns;
    int32_t http_status;
    double fig[K25_SM_N];
};
static const struct k25_h5_col sm_cols[] = {
    {"t_ns", K25_H5_I64, offsetof(struct sm_row, t_ns), 0},
    {"http_status", K25_H5_I32, offsetof(struct sm_row, http_status), 0},
    {"kv_usage_ratio", K25_H5_F64, offsetof(struct sm_row, fig[K25_SM_KV_USAGE]), 0},
    {"n_running", K25_H5_F64, offsetof(struct sm_row, fig[K25_SM_RUNNING]), 0},
    {"n_waiting", K25_H5_F64, offsetof(struct sm_row, fig[K25_SM_WAITING]), 0},
    {"preemptions_total", K25_H5_F64, offsetof(struct sm_row, fig[K25_SM_PREEMPTIONS]), 0},
    {"prefix_cache_hit_rate", K25_H5_F64, offsetof(struct sm_row, fig[K25_SM_PREFIX_HIT]), 0},
};
struct val_row {
    int32_t scrape, series;
    double value;
};
static const struct k25_h5_col val_cols[] = {
    {"scrape", K25_H5_I32, offsetof(struct val_row, scrape), 0},
    {"series", K25_H5_I32, offsetof(struct val_row, series), 0},
    {"value", K25_H5_F64, offsetof(struct val_row, value), 0},
};

int k25_srvmet_write(const k25_srvmet_t *m, struct k25_h5 *h, uint64_t t0_ns, struct k25_error *err)
{
    int rc = K25_OK;
    size_t text_n = 0;
    for (size_t i = 0; i < m->n_series; i++)
        text_n += strlen(m->series[i]);
    struct sm_row *rows = calloc(m->n_sc + 1, sizeof(*rows));
    struct val_row *vals = calloc(m->n_val + 1, sizeof(*vals));
    int64_t *off = calloc(m->n_series + 1, sizeof(int64_t));
    uint8_t *text = malloc(text_n + 1);
    hid_t g = H5I_INVALID_HID;
    if (!rows || !vals || !off || !text) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < m->n_sc; i++) {
        rows[i].t_ns = (int64_t)(m->sc[i].t_ns - t0_ns);
        rows[i].http_status = m->sc[i].status;
        memcpy(rows[i].fig, m->sc[i].fig, sizeof(rows[i].fig));
    }
    for (size_t i = 0; i < m->n_val; i++)
        vals[i] = (struct val_row){m->val[i].scrape, m->val[i].series, m->val[i].v};
    for (size_t i = 0, k = 0; i < m->n_series; i++) {
        size_t l = strlen(m->series[i]);
        memcpy(text + k, m->series[i], l);
        k += l;
        off[i + 1] = (int64_t)k;
    }
    if ((g = k25_h5_group(h, "/server_metrics", err)) < 0) {
        rc = K25_EIO;
        goto out;
    }
    if ((rc = k25_h5_attr_str(g, "url", m->url, err)) != K25_OK ||
        (rc = k25_h5_attr_str(g, "family", m->family, err)) != K25_OK ||
        (rc = k25_h5_attr_str(g, "note", m->note, err)) != K25_OK ||
        (rc = k25_h5_attr_f64(g, "period_s", m->period_s, err)) != K25_OK ||
        (rc = k25_h5_write_table(g, "samples", sm_cols, (int)(sizeof(sm_cols) / sizeof(sm_cols[0])),
                                 sizeof(struct sm_row), rows, m->n_sc, err)) != K25_OK ||
        (rc = k25_h5_write_array(g, "series_offsets", K25_H5_I64, off, m->n_series + 1, err)) != K25_OK ||
        (rc = k25_h5_write_array(g, "series_names", K25_H5_U8, text, text_n, err)) != K25_OK ||
        (rc = k25_h5_write_table(g, "values", val_cols, 3, sizeof(struct val_row), vals, m->n_val, err)) != K25_OK)
        goto out;
out:
    if (g >= 0 && H5Gclose(g) < 0 && rc == K25_OK)
        rc = k25_error_set(err, K25_EIO, h->path, 0, "/server_metrics", "closing the group failed");
    free(rows);
    free(vals);
    free(off);
    free(text);
    return rc;
}

/* ------------------------------------------------------------ read back */

void k25_trace_srvmet_free(struct k25_trace_srvmet *m)
{
    if (!m)
        return;
    free(m->url);
    free(m->family);
    free(m->note);
    free(m->scrapes);
    for (size_t i = 0; i < m->n_series; i++)
        free(m->series[i]);
    free(m->series);
    free(m->values);
    free(m);
}

int k25_srvmet_read(struct k25_h5 *h, struct k25_trace *t, struct k25_error *err)
{
    if (H5Lexists(h->file, "/server_metrics", H5P_DEFAULT) <= 0)
        return K25_OK; /* no --server-metrics */
    struct k25_trace_srvmet *m = calloc(1, sizeof(*m));
    struct sm_row *rows = NULL;
    struct val_row *vals = NULL;
    int64_t *off = NULL;
    uint8_t *text = NULL;
    size_t n = 0, nv = 0, no = 0, nt = 0;
    int rc = K25_OK;
    hid_t g = H5I_INVALID_HID;
    if (!m)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if ((g = k25_h5_group(h, "/server_metrics", err)) < 0) {
        rc = K25_EFORMAT;
        goto out;
    }
    if ((rc = k25_h5_get_attr_str(g, "url", &m->url, err)) != K25_OK ||
        (rc = k25_h5_get_attr_str(g, "family", &m->family, err)) != K25_OK ||
        (rc = k25_h5_get_attr_str(g, "note", &m->note, err)) != K25_OK ||
        (rc = k25_h5_get_attr_f64(g, "period_s", &m->period_s, err)) != K25_OK ||
        (rc = k25_h5_read_table(g, "samples", sm_cols, (int)(sizeof(sm_cols) / sizeof(sm_cols[0])),
                                sizeof(struct sm_row), K25_H5_ANY_COUNT, (void **)&rows, &n, err)) != K25_OK ||
        (rc = k25_h5_read_array(g, "series_offsets", K25_H5_I64, K25_H5_ANY_COUNT, (void **)&off, &no, err)) !=
            K25_OK)
        goto out;
    if (no < 1 || off[0] != 0) {
        rc = k25_error_set(err, K25_EFORMAT, h->path, 0, "/server_metrics/series_offsets",
                           "holds %zu offsets; the first must be 0", no);
        goto out;
    }
    for (size_t i = 0; i + 1 < no; i++)
        if (off[i + 1] < off[i]) {
            rc = k25_error_set(err, K25_EFORMAT, h->path, 0, "/server_metrics/series_offsets",
                               "offset %zu is out of order", i + 1);
            goto out;
        }
    if ((rc = k25_h5_read_array(g, "series_names", K25_H5_U8, (size_t)off[no - 1], (void **)&text, &nt, err)) !=
            K25_OK ||
        (rc = k25_h5_read_table(g, "values", val_cols, 3, sizeof(struct val_row), K25_H5_ANY_COUNT, (void **)&vals,
                                &nv, err)) != K25_OK)
        goto out;
    m->n_series = 0;
    if (!(m->series = calloc(no, sizeof(char *))) || !(m->scrapes = calloc(n + 1, sizeof(*m->scrapes))) ||
        !(m->values = calloc(nv + 1, sizeof(*m->values)))) {
        rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out;
    }
    for (size_t i = 0; i + 1 < no; i++) {
        size_t l = (size_t)(off[i + 1] - off[i]);
        if (!(m->series[i] = malloc(l + 1))) {
            rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            goto out;
        }
        memcpy(m->series[i], text + off[i], l);
        m->series[i][l] = '\0';
        m->n_series = i + 1;
    }
    for (size_t i = 0; i < n; i++) {
        m->scrapes[i].t_ns = rows[i].t_ns;
        m->scrapes[i].http_status = rows[i].http_status;
        memcpy(m->scrapes[i].fig, rows[i].fig, sizeof(rows[i].fig));
    }
    m->n_scrapes = n;
    for (size_t i = 0; i < nv; i++) {
        if (vals[i].scrape < 0 || (size_t)vals[i].scrape >= n || vals[i].series < 0 ||
            (size_t)vals[i].series >= m->n_series) {
            rc = k25_error_set(err, K25_EFORMAT, h->path, 0, "/server_metrics/values",
                               "row %zu names scrape %d and series %d: out of range (%zu scrapes, %zu series)", i,
                               (int)vals[i].scrape, (int)vals[i].series, n, m->n_series);
            goto out;
        }
        m->values[i] = (struct k25_srvmet_value){vals[i].scrape, vals[i].series, vals[i].value};
    }
    m->n_values = nv;
out:
    if (g >= 0)
        H5Gclose(g);
    free(rows);
    free(vals);
    free(off);
    free(text);
    if (rc == K25_OK)
        t->srvmet = m;
    else
        k25_trace_srvmet_free(m);
    return rc;
}

json_t *k25_trace_srvmet_json(const struct k25_trace_srvmet *m)
{
    if (!m)
        return json_null();
    size_t ok = 0;
    for (size_t i = 0; i < m->n_scrapes; i++)
        ok += m->scrapes[i].http_status == 200;
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "url", json_string(m->url));
    json_object_set_new(o, "family", *m->family ? json_string(m->family) : json_null());
    json_object_set_new(o, "note", *m->note ? json_string(m->note) : json_null());
    json_object_set_new(o, "period_s", json_real(m->period_s));
    json_object_set_new(o, "scrapes", json_integer((json_int_t)m->n_scrapes));
    json_object_set_new(o, "scrapes_ok", json_integer((json_int_t)ok));
    json_object_set_new(o, "series", json_integer((json_int_t)m->n_series));
    json_object_set_new(o, "values", json_integer((json_int_t)m->n_values));
    figs_json(o, m->n_scrapes ? m->scrapes[0].fig : NULL, sizeof(m->scrapes[0]), m->n_scrapes);
    return o;
}

const char *k25_srvmet_kv_why(const json_t *sm)
{
    const char *fam = json_string_value(json_object_get(sm, "family"));
    if (!json_is_object(sm))
        return "the run did not scrape the server's metrics (--server-metrics)";
    if (json_integer_value(json_object_get(sm, "scrapes_ok")) == 0)
        return "no scrape of the server's metrics was answered (summary.server_metrics.note)";
    if (!fam)
        return "the server's metrics hold no names k25 knows (docs/serve.md lists them)";
    if (!strcmp(fam, "k25"))
        return "k25 serve's KV pool has no bound (k25_kv_blocks_total +Inf: no memory budget), so no usage ratio";
    if (!strcmp(fam, "llama.cpp"))
        return "llama.cpp's server exposes no KV-usage gauge (llamacpp:kv_cache_usage_ratio was removed in "
               "ggml-org/llama.cpp#13660)";
    return "the server exposes no KV-usage gauge k25 knows";
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double k25_srvmet_gauge_p95(const k25_srvmet_t *m, const char *name, size_t *n_out)
{
    size_t nl = strlen(name), k = 0;
    *n_out = 0;
    double *v = malloc(sizeof(double) * (m->n_val + 1));
    if (!v)
        return NAN;
    for (size_t i = 0; i < m->n_val; i++) {
        const char *s = m->series[m->val[i].series];
        if (!strncmp(s, name, nl) && (s[nl] == '{' || s[nl] == '\0') && isfinite(m->val[i].v))
            v[k++] = m->val[i].v;
    }
    double p = NAN;
    if (k) { /* nearest rank, as the summary's other percentiles */
        qsort(v, k, sizeof(double), cmp_d);
        size_t r = k25_stats_rank(k, 0.95);
        p = v[r > 0 ? r - 1 : 0];
    }
    free(v);
    *n_out = k;
    return p;
}
