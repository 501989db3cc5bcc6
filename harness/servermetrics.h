/*
 * servermetrics.h - `k25 bench --endpoint URL --server-metrics [URL]`: the
 * server's Prometheus metrics scraped every second during the measured
 * repetitions (servermetrics.c).  Harness-internal; bench.c drives it.
 *
 * Every series is kept raw by name (name plus labels, as exposed); the
 * families k25 knows are mapped to its own figures per scrape: KV usage
 * ratio, requests running, requests waiting, preemptions (a counter) and
 * the prefix-cache hit rate, for vLLM, SGLang, TGI, llama.cpp's server and
 * k25 serve (docs/serve.md lists the names).  A target without metrics
 * (an HTTP error, not Prometheus text) is a note, never an error.
 */
#ifndef K25_SERVERMETRICS_H
#define K25_SERVERMETRICS_H

#include "harness.h"
#include "k25util.h"

#include <jansson.h>

/* The figures one scrape maps to (NaN where the server exposes none). */
enum { K25_SM_KV_USAGE, K25_SM_RUNNING, K25_SM_WAITING, K25_SM_PREEMPTIONS, K25_SM_PREFIX_HIT, K25_SM_N };
extern const char *const k25_sm_names[K25_SM_N]; /* "kv_usage_ratio", "n_running", ... */

typedef struct k25_srvmet k25_srvmet_t;
#define K25_SERVER_METRICS_PERIOD_S 1.0

/*
 * Starts scraping url (a full URL) every period_s on its own thread: a first scrape at once; api_key
 * (may be NULL) sent as a bearer token.  0, or K25_ENOMEM / K25_EINTERNAL (no thread).
 */
int k25_srvmet_start(const char *url, const char *api_key, double period_s, k25_srvmet_t **out,
                     struct k25_error *err);
/* Takes a last scrape and stops the thread (NULL: no-op).  The data stays for the calls below. */
void k25_srvmet_stop(k25_srvmet_t *m);
void k25_srvmet_destroy(k25_srvmet_t *m);

/* {url, scrapes, family, note, series, kv_usage_ratio: {max, mean, n}, n_running, n_waiting: {max, mean},
 *  preemptions (the counter's increase), prefix_cache_hit_rate} (new reference). */
json_t *k25_srvmet_summary_json(const k25_srvmet_t *m);
/* Nearest-rank P95 of every scraped value of the gauge `name` (all its label sets pooled: k25 serve's
 * k25_gpu_utilization_ratio{gpu=...}); *n the values (0: NaN, the server has no such gauge). */
double k25_srvmet_gauge_p95(const k25_srvmet_t *m, const char *name, size_t *n);
/* /server_metrics in the trace (docs/trace-schema.md): times relative to t0_ns. */
int k25_srvmet_write(const k25_srvmet_t *m, struct k25_h5 *h, uint64_t t0_ns, struct k25_error *err);

/*
 * Prometheus text exposition format: calls cb for each sample line (series = name{labels} as
 * written, name = the metric name, its value; +Inf, -Inf and NaN allowed).  Comments and blank
 * lines are skipped.  Returns the number of malformed lines (skipped).
 */
int k25_prom_parse(const char *text, size_t n,
                   void (*cb)(const char *series, size_t series_len, const char *name, size_t name_len, double v,
                              void *user),
                   void *user);

#endif /* K25_SERVERMETRICS_H */
