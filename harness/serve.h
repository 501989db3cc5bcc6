/*
 * serve.h - `k25 serve`: the reference engine behind an OpenAI-compatible
 * HTTP API (libmicrohttpd).  Harness-internal; the command is
 * k25_cmd_serve (cli_serve.c), the API is documented in docs/serve.md.
 *
 * Threads: libmicrohttpd runs one thread per connection; those threads
 * parse and validate requests, put them on a queue (mutex + condition
 * variable) and stream what the engine produced.  One engine thread owns
 * the engine (engine calls are not thread-safe): it submits queued
 * requests, steps, cancels requests whose client went away, and publishes
 * tokens and statistics under the same mutex.
 */
#ifndef K25_SERVE_H
#define K25_SERVE_H

#include "k25.h"

#include <stddef.h>
#include <stdint.h>

struct k25_serve_opts {
    const char *host;          /* address to bind (default "127.0.0.1") */
    int port;                  /* 0 = a free port (k25_serve_port tells which) */
    const char *api_key;       /* required as "Authorization: Bearer KEY" when not NULL */
    const char *model_name;    /* the name clients use; default: cfg->model's last path part */
    size_t max_body_bytes;     /* larger request bodies get 413 (default 8 MiB) */
    int max_waiting;           /* requests queued beyond the running batch; more get 429 (default 256) */
    int max_connections;       /* concurrent HTTP connections (default 512) */
};

void k25_serve_opts_init(struct k25_serve_opts *o);

typedef struct k25_serve k25_serve_t;

/*
 * Loads the model (cfg->model), creates the engine, starts the engine
 * thread and the HTTP daemon.  cfg and o are copied.  On failure nothing
 * is left running; err says why (a port in use, a bad host, a bad model).
 */
int k25_serve_start(const struct k25_config *cfg, const struct k25_serve_opts *o, k25_serve_t **out,
                    struct k25_error *err);
/* The port bound (the chosen one when o->port was 0). */
int k25_serve_port(const k25_serve_t *s);
/*
 * Stops accepting work (new requests get 503), cancels what is queued or
 * running (open streams end with finish_reason "cancelled"), stops the
 * HTTP daemon and the engine thread, frees everything.  NULL is a no-op.
 */
void k25_serve_stop(k25_serve_t *s);

#endif /* K25_SERVE_H */
