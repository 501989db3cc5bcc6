/*
 * endpoint.h - `k25 bench --endpoint URL`: the load generator against an
 * OpenAI-compatible HTTP server (vLLM, SGLang, TensorRT-LLM, llama.cpp,
 * k25 serve) instead of the in-process engine.  Harness-internal; bench.c
 * calls it where it would call k25_loadgen_run.
 *
 * One thread, one libcurl multi handle: every request is a streaming POST
 * (SSE) added to the multi handle at its intended time, and the loop
 * sleeps in curl_multi_poll until the next arrival or the next byte.  Each
 * chunk's arrival time is taken when its bytes are handed over, so TTFT is
 * the first content chunk and ITL the gaps between chunks, all counted
 * from the scheduled send time (docs/serve.md).
 */
#ifndef K25_ENDPOINT_H
#define K25_ENDPOINT_H

#include "harness.h"

#include <jansson.h>

typedef struct k25_endpoint k25_endpoint_t;

/*
 * Prepares the endpoint: resolves the URLs from o->endpoint, asks the
 * server's GET /v1/models (its answer goes into provenance; the model when
 * o->endpoint_model is NULL is its first), and builds every request body
 * once (prompt text, or token ids for pre-tokenized lines; max_tokens =
 * the line's expected_output_length).  An unreachable server is K25_EIO;
 * a prompt that cannot be sent (not UTF-8, token ids to a chat endpoint)
 * is K25_EINVAL naming the gold-set file and line.
 */
int k25_endpoint_open(const struct k25_bench_opts *o, const struct k25_bench_input *in, size_t n_in,
                      k25_endpoint_t **out, struct k25_error *err);
void k25_endpoint_close(k25_endpoint_t *ep);

/*
 * One repetition (or the warm-up when s->record is false), exactly as
 * k25_loadgen_run schedules it, through the same generator (struct
 * k25_loadgen: closed loop: users; open loop: the seeded schedule;
 * concurrency caps requests in flight).  s->inputs are the endpoint's.  A
 * request that fails (an HTTP error, a malformed or truncated stream, a
 * stall) is recorded as rejected with the reason and its HTTP status; the
 * run goes on.  Fails only on out of memory, a libcurl setup error, or
 * K25_EIO when *o->stop is set (run->interrupted).
 */
int k25_endpoint_run(k25_endpoint_t *ep, const struct k25_loadgen_settings *s, struct k25_bench_run *run,
                     struct k25_error *err);

/* {url, endpoint_type, model (sent), served_model (the answers' "model", else the model list's first),
 *  models (GET /v1/models), response_models ({name: answers}), response_headers (first streamed answer)}. */
json_t *k25_endpoint_provenance(const k25_endpoint_t *ep);
/* The server's /metrics URL (beside /v1). */
const char *k25_endpoint_metrics_url(const k25_endpoint_t *ep);
/* What the client sent the server, the only settings an endpoint run's config holds (engine keys it
 * did not send are absent, not defaults): {model, temperature, stream, ..., ignore_eos}. */
json_t *k25_endpoint_sent_config(const k25_endpoint_t *ep, const struct k25_bench_opts *o);

/* Failures by HTTP status and reason kind, and how output tokens were counted (for the JSON summary). */
json_t *k25_endpoint_summary_json(const struct k25_bench_run *run);

#endif /* K25_ENDPOINT_H */
