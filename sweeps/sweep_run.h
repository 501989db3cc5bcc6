/*
 * sweep_run.h - internals the runner's files share (not part of the
 * sweeps/ interface, sweep.h): one bench run as a child process, the
 * TEST-ONLY per-point slowdown hook, the rate search.
 */
#ifndef K25_SWEEP_RUN_H
#define K25_SWEEP_RUN_H

#include "sweep.h"

#include <sys/types.h>

/* ------------------------------------------------ TEST-ONLY slowdown hook (child.c) */

#define K25_SWEEP_MAX_SLOW_RULES 16

/* One entry of K25_TEST_SLOWDOWN_POINTS: SEL=F. */
struct k25_sweep_slow_rule {
    char sel[256];            /* a point id, `*`, or a shell pattern over the label */
    double f;
    char value[32];           /* what K25_TEST_SLOWDOWN gets ("": unset it) */
};

/* Parses K25_TEST_SLOWDOWN_POINTS into rules[K25_SWEEP_MAX_SLOW_RULES]; *n = 0 when unset. */
int k25_sweep_slow_rules_parse(struct k25_sweep_slow_rule *rules, int *n, struct k25_error *err);
/* The first rule matching p, NULL when none (the inherited environment stays). */
const struct k25_sweep_slow_rule *k25_sweep_slow_rule_for(const struct k25_sweep_slow_rule *rules, int n,
                                                          const struct k25_sweep_spec *spec,
                                                          const struct k25_sweep_point *p);
/* In a child, before exec: puts the rule into the environment. */
void k25_sweep_slow_rule_apply(const struct k25_sweep_slow_rule *r);

/* ------------------------------------------------ one bench run (child.c) */

/* argv of one bench run; the strings live in store. */
struct k25_sweep_argv {
    char *argv[64];
    int argc;
    char store[8192];
    size_t used;
};

/*
 * argv of one bench run of point p with repetition rep's seed, writing
 * PREFIX.h5 and PREFIX.json, at open-loop rate (0: closed loop), with
 * --threads threads (0: bench's default); --endpoint when o->endpoint or
 * spec->endpoint is set.
 */
void k25_sweep_bench_argv(struct k25_sweep_argv *a, const struct k25_sweep_spec *spec,
                          const struct k25_sweep_opts *o, const struct k25_sweep_point *p, int rep,
                          const char *prefix, double rate, int threads);

/*
 * Starts argv as a child that dies with us, stdout+stderr to logpath,
 * pinned to cores [c0, c0+nc) when nc > 0, with the hook's rule (NULL:
 * none).  Returns its pid, or -1 (errno set).
 */
/* fork() whose child dies with the runner (PR_SET_PDEATHSIG): returns as fork does. */
pid_t k25_sweep_fork(void);
pid_t k25_sweep_spawn(char *const argv[], const char *logpath, int c0, int nc,
                      const struct k25_sweep_slow_rule *slow);
/* Spawns and waits: the exit status (128 + signal when killed), -1 when it could not run. */
int k25_sweep_run_wait(char *const argv[], const char *logpath, int c0, int nc);

/* ------------------------------------------------ launch: a server per point (launch.c) */

/*
 * Runs repetition rep of point p against a server of its own, in a child
 * of ours (the supervisor; its output at logpath): picks a free loopback
 * port, starts spec->launch with its holes filled ({port}, {k25}, config
 * keys from p's config) in its own process group (output at
 * PREFIX.server.log), waits for GET /health to answer 200
 * (spec->launch_timeout_s), runs the point's bench run (or rate search)
 * against it, then stops it: SIGTERM to the group, SIGKILL after
 * spec->launch_grace_s.  PREFIX.launch.json records the command, the port
 * and, on failure, why and the server's output tail (also printed to the
 * log).  The supervisor exits with the run's status (1 when the server
 * never became healthy).
 */
pid_t k25_sweep_spawn_launch(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                             const struct k25_sweep_point *p, int rep, const char *prefix, const char *logpath,
                             int c0, int nc, int threads, const struct k25_sweep_slow_rule *slow);

/* The launch command of p with its holes filled (port, this k25 binary, p's config); malloc'd, NULL when
 * out of memory. */
char *k25_sweep_launch_command(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p, int port,
                               const char *k25_path);

/* ------------------------------------------------ rate search (search.c) */

/*
 * Runs the rate search of (p, rep) in a child of our own, its log at
 * logpath; the probes run one after another on cores [c0, c0+nc).
 */
pid_t k25_sweep_spawn_search(const struct k25_sweep_spec *spec, const struct k25_sweep_opts *o,
                             const struct k25_sweep_point *p, int rep, const char *logpath, int c0, int nc,
                             int threads, const struct k25_sweep_slow_rule *slow);

/* ------------------------------------- dry-run time estimate (estimate.c) */

/* The engine on this machine, measured by one probe request, and the gold set's sizes. */
struct k25_sweep_probe {
    double load_s;            /* model load and engine start */
    double prefill_s_per_tok; /* prompt tokens */
    double decode_s_per_step; /* one new token of one sequence */
    int probe_tokens;         /* the probe's prompt length */
    int64_t *in, *out;        /* [n] the filtered gold set's prompt / expected reply lengths (owned) */
    size_t n;
};

/*
 * Probes the spec's model with the reference point's config (ref); on
 * failure or where no probe is made (a server sweep, a model folder, more
 * than 2 GiB of weights) returns non-zero with why[] saying so in a few
 * words.  k25_sweep_probe_free releases pr either way.
 */
int k25_sweep_probe(const struct k25_sweep_spec *spec, const struct k25_sweep_point *ref,
                    struct k25_sweep_probe *pr, char *why, size_t why_n);
void k25_sweep_probe_free(struct k25_sweep_probe *pr);
/* Rough seconds one run of p takes (estimate.c's header); NaN without a probe. */
double k25_sweep_estimate_run_s(const struct k25_sweep_spec *spec, const struct k25_sweep_point *p,
                                const struct k25_sweep_probe *pr);

/* True once SIGINT or SIGTERM asked the sweep to stop (runner.c). */
bool k25_sweep_stopping(void);

#endif
