/*
 * serve_limits.c - what keeps `k25 serve` up under hostile clients
 * (docs/serve.md "Limits and hostile clients"): the connection table,
 * the watchdog thread, and the constant-time API key check.
 *
 * libmicrohttpd's own limits (connections in all and per client address,
 * idle timeout, header memory) are daemon options set in serve.c.  What it
 * does not offer is here:
 *   - a deadline for a complete request header (a client trickling header
 *     bytes resets the idle timeout forever: slowloris), and one for its
 *     body;
 *   - noticing that the client of a suspended connection went away (MHD
 *     does not poll a suspended socket), so its request is cancelled;
 *   - the keep-alive comments of streams that wait.
 * The watchdog wakes every SERVE_WATCH_NS.  It shuts a late connection's
 * socket (shutdown(2): libmicrohttpd then sees the end of the stream and
 * closes it; the descriptor stays valid until MHD_CONNECTION_NOTIFY_CLOSED,
 * which removes the record under the same mutex), and polls the sockets of
 * suspended connections for POLLRDHUP (the peer closed: a client that
 * half-closes its side after the request counts as gone, as in most
 * servers).
 */
#include "serve_int.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define SERVE_WATCH_NS 250000000ULL

struct sconn *k25_serve_sconn(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void k25_serve_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                             enum MHD_ConnectionNotificationCode toe)
{
    struct k25_serve *S = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        struct sconn *sc = calloc(1, sizeof(*sc));
        *socket_context = sc;
        if (!sc)
            return; /* untracked: no deadline for it (out of memory), everything else works */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        sc->c = c;
        sc->fd = ci ? ci->connect_fd : -1;
        sc->read_start_ns = k25_now_ns();
        pthread_mutex_lock(&S->mu);
        sc->next = S->conns;
        if (S->conns)
            S->conns->prev = sc;
        S->conns = sc;
        S->n_conns++;
        pthread_mutex_unlock(&S->mu);
        return;
    }
    struct sconn *sc = *socket_context;
    if (!sc)
        return;
    pthread_mutex_lock(&S->mu);
    if (sc->prev)
        sc->prev->next = sc->next;
    else
        S->conns = sc->next;
    if (sc->next)
        sc->next->prev = sc->prev;
    S->n_conns--;
    pthread_mutex_unlock(&S->mu);
    free(sc);
    *socket_context = NULL;
}

int k25_serve_collect_ready(struct k25_serve *S, uint64_t now_ns, struct MHD_Connection ***buf, int *cap)
{
    int n = 0;
    for (struct sconn *sc = S->conns; sc; sc = sc->next) {
        if (!sc->suspended || !(S->no_suspend || k25_serve_conn_ready(sc, now_ns)))
            continue;
        if (n == *cap) {
            int nc = *cap ? 2 * *cap : 64;
            struct MHD_Connection **nb = realloc(*buf, sizeof(*nb) * (size_t)nc);
            if (!nb)
                break; /* the rest: the next round (the watchdog's, at the latest) */
            *buf = nb;
            *cap = nc;
        }
        sc->suspended = false;
        sc->wait = SC_WAIT_NONE;
        sc->r = NULL;
        (*buf)[n++] = sc->c;
    }
    return n;
}

/* One watchdog round (S->mu held): deadlines and vanished clients. */
static void watch_round(struct k25_serve *S, uint64_t now)
{
    const uint64_t hdr_ns = (uint64_t)S->o.header_timeout_s * 1000000000ULL,
                   body_ns = (uint64_t)S->o.body_timeout_s * 1000000000ULL;
    for (struct sconn *sc = S->conns; sc; sc = sc->next) {
        if (sc->fd < 0 || sc->closing)
            continue;
        if (sc->suspended) {
            /* its request waits for the engine: is the client still there? */
            struct pollfd p = {.fd = sc->fd, .events = POLLRDHUP};
            if (sc->r && !sc->r->done && !sc->r->gone && poll(&p, 1, 0) == 1 &&
                (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
                sc->r->gone = true;
                S->disconnect_cancels++;
                pthread_cond_signal(&S->cv_work);
            }
            continue;
        }
        bool late = sc->body_start_ns == 0 ? now - sc->read_start_ns > hdr_ns
                                           : !sc->body_done && now - sc->body_start_ns > body_ns;
        if (late) {
            sc->closing = true;
            S->deadline_closes++;
            shutdown(sc->fd, SHUT_RDWR); /* MHD reads the end of the stream and closes it */
        }
    }
}

static void *watchdog_main(void *arg)
{
    struct k25_serve *S = arg;
    struct MHD_Connection **wake = NULL;
    int cap = 0;
    pthread_mutex_lock(&S->mu);
    while (!S->wd_stop) {
        uint64_t now = k25_now_ns();
        watch_round(S, now);
        int n = k25_serve_collect_ready(S, now, &wake, &cap); /* keep-alives due */
        if (n > 0) {
            pthread_mutex_unlock(&S->mu);
            for (int i = 0; i < n; i++)
                MHD_resume_connection(wake[i]);
            pthread_mutex_lock(&S->mu);
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts); /* the condition variable's clock */
        uint64_t ns = (uint64_t)ts.tv_nsec + SERVE_WATCH_NS;
        ts.tv_sec += (time_t)(ns / 1000000000ULL);
        ts.tv_nsec = (long)(ns % 1000000000ULL);
        if (!S->wd_stop)
            pthread_cond_timedwait(&S->cv_wd, &S->mu, &ts);
    }
    pthread_mutex_unlock(&S->mu);
    free(wake);
    return NULL;
}

int k25_serve_watchdog_start(struct k25_serve *S)
{
    pthread_cond_init(&S->cv_wd, NULL);
    int rc = pthread_create(&S->wd, NULL, watchdog_main, S);
    if (rc != 0) {
        pthread_cond_destroy(&S->cv_wd);
        return rc;
    }
    S->wd_started = true;
    return 0;
}

void k25_serve_watchdog_stop(struct k25_serve *S)
{
    if (!S->wd_started)
        return;
    pthread_mutex_lock(&S->mu);
    S->wd_stop = true;
    pthread_cond_signal(&S->cv_wd);
    pthread_mutex_unlock(&S->mu);
    pthread_join(S->wd, NULL);
    pthread_cond_destroy(&S->cv_wd);
    S->wd_started = false;
}

bool k25_serve_key_equal(const char *want, size_t nw, const char *got)
{
    /* every byte of the configured key is compared whatever came in; a shorter key reads its
     * terminating NUL and then stops advancing, so the loop never reads past it */
    unsigned diff = 0;
    size_t j = 0;
    for (size_t i = 0; i < nw; i++) {
        unsigned char g = (unsigned char)got[j];
        diff |= (unsigned)g ^ (unsigned char)want[i];
        j += g != 0;
    }
    diff |= (unsigned char)got[j]; /* longer than the key */
    return diff == 0;
}
