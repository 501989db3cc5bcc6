/*
 * serve_int.h - what serve.c (threads, engine, HTTP) and serve_api.c (the
 * OpenAI wire format: request parsing, answer JSON, /metrics text) share.
 * Harness-internal; the public interface is harness.h ("k25 serve").
 */
#ifndef K25_SERVE_INT_H
#define K25_SERVE_INT_H

#include "harness.h"
#include "k25_tok.h"
#include "sse.h"

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>

#define SERVE_MAX_STOP 4          /* stop sequences per request (OpenAI's limit) */
#define SERVE_MAX_STOP_BYTES 256  /* bytes per stop sequence */

/* Prometheus histogram: per-bucket counts (cumulated when printed), upper bounds in seconds. */
#define HIST_MAX 16
struct hist {
    const double *le;
    int n;
    uint64_t count[HIST_MAX]; /* per bucket, not cumulative */
    uint64_t total;
    double sum;
};

/* HTTP status codes counted in /metrics (serve_api.c). */
#define SERVE_N_CODES 12
/* The longest API key accepted at start (a key longer than an HTTP header line makes no sense). */
#define SERVE_MAX_API_KEY 4096
/* A stream that waits (queued, long prefill) sends an SSE comment this often. */
#define SERVE_KEEPALIVE_NS 1000000000ULL
extern const int k25_serve_http_codes[SERVE_N_CODES];

struct k25_serve;
struct sconn;

/* One completion request, shared by its HTTP thread and the engine thread. */
struct sreq {
    struct k25_serve *S;
    int refs;                      /* under S->mu */
    struct sreq *next;             /* pending queue */
    char id[64];
    bool chat, stream, include_usage;
    int32_t *ids;                  /* [n_ids] prompt, owned */
    int n_ids;
    int max_tokens;
    bool has_sampling;
    double temperature, top_p;
    uint64_t seed;
    int32_t *stop[SERVE_MAX_STOP]; /* [n_stop][stop_len[i]], owned */
    int stop_len[SERVE_MAX_STOP];
    int n_stop;
    bool ignore_eos;               /* the request's ignore_eos field */
    /* a real tokenizer (S->tok): stop strings are matched on the decoded text, not on ids */
    bool text_mode;
    k25_tok_stream_t *dec;         /* owned; the engine thread pushes each generated id */
    char *text;                    /* [text_len] decoded output so far (a matched stop string cut off), owned */
    size_t text_len, text_cap;
    size_t text_sent;              /* a stream's text bytes released to the client */
    bool stop_hit;                 /* a stop string matched: cancelled in the engine, finish "stop" */
    uint64_t arrival_ns;           /* the request body was complete */
    int64_t created;               /* Unix time, for the response */
    /* engine thread only */
    int handle;
    bool cancel_sent;
    /* shared, under S->mu */
    int32_t *out;                  /* [n_out] generated so far, owned */
    int n_out, cap_out;
    uint64_t last_t_ns;
    bool done;
    bool submitted;                /* k25_engine_submit returned 0 (a spilled record is fsync'd):
                                      only then may a stream send its HTTP status line */
    enum k25_req_state state;
    enum k25_finish_reason finish;
    char reason[K25_REASON_MAX];
    int n_prompt;
    /* the elastic queue's routing (k25_engine_result at submit): the "k25" object of the answer */
    enum k25_priority priority;    /* as it runs: low once spilled */
    bool degraded, spilled;
    int ttft_sla_ms;
    bool gone;                     /* the client went away: cancel */
    int err_status;                /* != 0: failed with this HTTP status and err_msg */
    char err_msg[1100];
    /* logprobs (serve_logprobs.c): -1 none, else the top-k count; filled by the engine thread, under mu */
    int logprobs;
    const k25_tokenizer_t *lp_tok; /* the server's tokenizer for the tokens' strings (NULL: bytes) */
    float *lp;                     /* [n_lp] log probability of each generated token, owned */
    int32_t *top_id;               /* [n_lp][logprobs] the most likely tokens, owned */
    float *top_lp;                 /* [n_lp][logprobs] their log probabilities, owned */
    int *lp_off;                   /* [n_lp + 1] each token's offset into the completion's text, owned */
    int n_lp, cap_lp;
    /* the HTTP side's stream writer (the thread of the connection's MHD worker) */
    struct MHD_Connection *conn;   /* a stream's connection, for suspending it */
    struct sconn *sc;
    uint64_t last_out_ns;          /* a stream's last bytes handed to MHD: keep-alive comments */
    int sent;                      /* tokens released to the client */
    struct k25_utf8 u8;
    int phase;                     /* 0 start, 1 tokens, 2 finished */
    char *obuf;                    /* formatted bytes not yet handed to MHD */
    size_t olen, ooff, ocap;
};

/*
 * What a suspended connection waits for (serve.c): a non-streamed answer (the request done), a
 * stream's start (the engine accepted or refused it), or a stream's next bytes (tokens, its end, or
 * a keep-alive comment due).  Connections never block a worker thread: they suspend
 * (MHD_suspend_connection) and whoever sees their news resumes them (serve_limits.c).
 */
enum sconn_wait { SC_WAIT_NONE, SC_WAIT_DONE, SC_WAIT_START, SC_WAIT_TOKENS };

/* One TCP connection (MHD_OPTION_NOTIFY_CONNECTION), in S->conns; every field under S->mu. */
struct sconn {
    struct sconn *prev, *next;
    struct MHD_Connection *c;
    int fd;
    uint64_t read_start_ns;  /* the header clock: the connection's start or its last request's end */
    uint64_t body_start_ns;  /* the header was complete (the access handler ran); 0: still reading it */
    bool body_done;          /* the whole request was read */
    bool closing;            /* shut down by the watchdog (a deadline passed) */
    enum sconn_wait wait;
    struct sreq *r;          /* what it waits for (a reference is held by the waiter) */
    bool suspended;          /* MHD_suspend_connection called, nobody resumed it yet */
};

/* An engine event, buffered during a step (engine thread only). */
struct sev {
    enum k25_event_type type;
    int handle;
    int32_t tok;
    uint64_t t_ns;
};

struct k25_serve {
    struct k25_config cfg;
    struct k25_serve_opts o;
    char host[256], model_name[1024];
    char *api_key;                 /* malloc'd, NULL = no key; compared whole, in constant time */
    size_t api_key_len;
    k25_model_t *model;
    k25_engine_t *eng;
    int vocab;
    /* the model folder's tokenizer.json (NULL: a preset's bytes, or text_err says why text is refused) */
    k25_tokenizer_t *tok;
    k25_gputel_t *gpu;             /* GPU telemetry for /metrics (NVML; "not available" with the reason) */
    char text_err[1400];           /* non-empty: a real folder without tokenizer.json (text prompts refused) */
    enum k25_chat_template chat_tpl; /* K25_CHAT_NONE with tok: chat refused with chat_err */
    char chat_err[1400];
    struct MHD_Daemon *d;
    int port;
    pthread_t th;
    bool th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_out;
    /* under mu */
    struct sreq *pend_head, *pend_tail;
    int n_pend;
    bool stopping, broken;
    char broken_msg[1100];
    struct k25_engine_stats st;
    /* spill-log replay at start (k25_engine_replay_info): re-submitted requests whose
     * clients are gone run to completion so the log marks them done; counted here */
    int64_t replayed, replayed_finished;
    int64_t prompt_tokens, gen_tokens;
    int64_t finished[4];           /* by k25_finish_reason (NONE = rejected/failed) */
    int64_t http[SERVE_N_CODES];
    struct hist ttft, itl;
    uint64_t next_id;
    char start_token[16];          /* this process's part of every response id (unique across restarts) */
    int64_t start_unix;
    /* connections (serve_limits.c), under mu */
    struct sconn *conns;
    int n_conns;
    int64_t http_layer_errors;     /* requests libmicrohttpd refused itself (docs/serve.md) */
    int64_t deadline_closes;       /* connections shut for a header/body deadline */
    int64_t disconnect_cancels;    /* requests cancelled because their client closed the connection */
    bool no_suspend;               /* stopping: nothing may suspend any more */
    pthread_t wd;                  /* the watchdog thread */
    bool wd_started, wd_stop;
    pthread_cond_t cv_wd;
    struct MHD_Connection **wake;  /* engine thread: connections to resume after a round */
    int cap_wake;
    /* engine thread only */
    struct sreq **by_handle;
    int cap_handle;
    struct sreq **active;
    int n_active, cap_active;
    struct sev *evs;
    int n_evs, cap_evs;
    bool ev_oom;
};

/* ------------------------------------------------- serve_limits.c */

/* MHD_OPTION_NOTIFY_CONNECTION: tracks each connection in S->conns (its header clock). */
void k25_serve_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe);
/* The connection's record (from MHD's socket context). */
struct sconn *k25_serve_sconn(struct MHD_Connection *c);
/*
 * Collects into *buf (grown; *cap its size) the suspended connections whose news is there (S->mu
 * held), marking them resumed; the caller resumes them after dropping the lock.  Returns how many.
 */
int k25_serve_collect_ready(struct k25_serve *S, uint64_t now_ns, struct MHD_Connection ***buf, int *cap);
/* Starts/stops the watchdog: header and body deadlines, vanished clients of suspended connections,
 * stream keep-alives.  Start: 0 or an errno. */
int k25_serve_watchdog_start(struct k25_serve *S);
void k25_serve_watchdog_stop(struct k25_serve *S);
/* true when got equals the key (want, nw bytes); the time depends on nw only, not on where they differ. */
bool k25_serve_key_equal(const char *want, size_t nw, const char *got);
/* serve.c: whether what sc waits for is there (S->mu held). */
bool k25_serve_conn_ready(const struct sconn *sc, uint64_t now_ns);

/* What is wrong with a request body: HTTP status, field, message. */
struct k25_serve_bad {
    int status;
    char param[64];
    char msg[1600];
};

/*
 * Validates a completion request body (JSON) into r: the prompt (text
 * bytes, token ids, or chat messages in the byte-model format), max_tokens,
 * sampling, stop sequences, stream options.  Returns 0, or -1 with *b
 * naming the HTTP status, the field and what is wrong.
 */
int k25_serve_parse(struct k25_serve *S, const char *body, size_t n, bool chat, struct sreq *r,
                    struct k25_serve_bad *b);
/*
 * The context limit (k25_engine_fit_max_new: reads the engine's immutable config, safe from any
 * thread): 400 naming "prompt" with its length in tokens (r->n_ids, as the tokenizer counted it),
 * max_tokens and the limit when they do not fit.  0 or -1 with *b filled.
 */
int k25_serve_check_len(struct k25_serve *S, const struct sreq *r, bool chat, struct k25_serve_bad *b);
/* Frees what a request owns (prompt, output, stop sequences, stream buffer), not r itself. */
void k25_serve_req_clear(struct sreq *r);
/* serve_logprobs.c: logprobs/top_logprobs into r->logprobs, and a 400 naming each field k25 serve does
 * not implement (echo, suffix, best_of, tools, ..., logit_bias, response_format, penalties).  0 or -1. */
int k25_serve_parse_extras(json_t *j, bool chat, struct sreq *r, struct k25_serve_bad *b);
/* Engine thread: the log probabilities of generated token idx of engine request handle (-1: no memory,
 * or the engine kept no logits). */
int k25_serve_logprobs_add(struct k25_serve *S, struct sreq *r, int handle, int idx);
/* OpenAI's logprobs object for tokens [from, from + n) (chat or completions form); null when not asked. */
json_t *k25_serve_logprobs_json(const struct sreq *r, int from, int n);
void k25_serve_logprobs_free(struct sreq *r);
/* OpenAI-style {"error": {message, type, param, code}} (new reference). */
json_t *k25_serve_error_json(int status, const char *param, const char *msg);
/* A stream chunk: text (NULL for the chat role chunk), its token ids, a finish reason or NULL. */
json_t *k25_serve_chunk_json(const struct sreq *r, const char *model, const char *text, size_t text_len,
                             const int32_t *ids, int n_ids, const char *finish, bool role);
json_t *k25_serve_usage_json(const struct sreq *r);
/* The answer's k25 extension: {"priority", "degraded", "spilled", "ttft_sla_ms"} (docs/serve.md). */
json_t *k25_serve_ext_json(const struct sreq *r);
const char *k25_serve_finish_name(const struct sreq *r);
/* The whole (non-streamed) answer of a finished request; NULL when out of memory. */
json_t *k25_serve_result_json(const struct sreq *r, const char *model);
/* GET /metrics text (malloc'd; NULL when out of memory).  Takes S->mu. */
char *k25_serve_metrics_text(struct k25_serve *S);

#endif /* K25_SERVE_INT_H */
