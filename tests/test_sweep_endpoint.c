/*
 * test_sweep_endpoint.c - `k25 sweep` against servers: what a target
 * allows (client axes against a fixed endpoint; engine axes only through
 * a launch: command that passes them; errors naming the axis), the point
 * workloads and ids of client axes, and (integration, on loopback with
 * the tiny model) a 2-point concurrency sweep against a running `k25
 * serve`, a 2-point launch: sweep over prefill_chunk_size that starts and
 * stops a server per point, and a launch that fails (recorded with the
 * command and the server's output tail).  Short: 2 requests of 8 tokens
 * per run.
 */
#include "testutil.h"

#include "harness.h"
#include "sweep.h"
#include "sweep_run.h"

#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define SPEC_HEAD                                                                                                \
    "dataset: datasets/gold/ci-small.jsonl\n"                                                                   \
    "filter: \"input_length <= 512\"\n"                                                                          \
    "workload: {requests: 2}\n"                                                                                  \
    "seed: 3\n"                                                                                                  \
    "objective: {minimize: ttft_p50_ms}\n"

static const char *write_spec(const char *name, const char *text)
{
    static char path[512];
    snprintf(path, sizeof(path), "%s/%s", tu_dir, name);
    tu_write_file(path, text);
    return path;
}

/* Loads a spec that must fail; the message must hold needle. */
static void spec_fails(const char *text, const char *needle)
{
    struct k25_sweep_spec *s = calloc(1, sizeof(*s));
    struct k25_error err;
    assert_non_null(s);
    int rc = k25_sweep_spec_load(write_spec("bad.yaml", text), s, &err);
    if (rc == K25_OK || !strstr(err.msg, needle))
        fail_msg("spec:\n%s\n  rc %d, message \"%s\" (wanted \"%s\")", text, rc, rc ? err.msg : "", needle);
    free(s);
}

static void test_target_errors(void **state)
{
    (void)state;
    spec_fails(SPEC_HEAD "endpoint: http://127.0.0.1:1\naxes: {concurrency: [1, 2], max_batch_size: [2, 4]}\n",
               "'max_batch_size' is an engine setting: against a fixed endpoint only the client axes");
    spec_fails(SPEC_HEAD "endpoint: http://127.0.0.1:1\naxes: {concurrency: [1]}\nfixed: {decode_max_tokens: 8}\n",
               "fixed: 'decode_max_tokens' is an engine setting");
    spec_fails(SPEC_HEAD "endpoint: ftp://x\naxes: {concurrency: [1]}\n", "http://");
    spec_fails(SPEC_HEAD "launch: \"k25 serve --model tiny\"\naxes: {concurrency: [1]}\n", "{port}");
    spec_fails(SPEC_HEAD "launch: \"k25 serve --port {port} --x {bogus}\"\naxes: {concurrency: [1]}\n",
               "unknown hole {bogus}");
    spec_fails(SPEC_HEAD "launch: \"k25 serve --port {port}\"\naxes: {prefill_chunk_size: [512, 1024]}\n",
               "never passes this axis to the server: add {prefill_chunk_size}");
    spec_fails(SPEC_HEAD "launch: \"k25 serve --port {port}\"\nendpoint: http://127.0.0.1:1\n", "not both");
    spec_fails(SPEC_HEAD "endpoint: http://127.0.0.1:1\nfidelity: true\n", "not with a server");
    spec_fails(SPEC_HEAD "axes: {concurrency: [1, 0]}\n", "expected an integer in 1..100000");
    spec_fails(SPEC_HEAD "axes: {rate: [2, -1]}\n", "positive request rate");
    spec_fails(SPEC_HEAD "launch: {cmd: x}\n", "unknown launch key");
    /* --endpoint on the command line checks the spec's axes the same way */
    struct k25_sweep_spec *s = calloc(1, sizeof(*s));
    struct k25_error err;
    assert_int_equal(k25_sweep_spec_load("sweeps/ci-smoke.yaml", s, &err), K25_OK);
    assert_int_not_equal(k25_sweep_spec_set_endpoint(s, "http://127.0.0.1:1", &err), K25_OK);
    assert_non_null(strstr(err.msg, "'prefill_chunk_size' is an engine setting"));
    free(s);
    char *out = NULL, cmd[1024];
    snprintf(cmd, sizeof(cmd), "%s sweep sweeps/ci-smoke.yaml --endpoint http://127.0.0.1:1 --dry-run", tu_k25());
    assert_int_equal(tu_run(cmd, &out), 2);
    assert_non_null(strstr(out, "prefill_chunk_size"));
    free(out);
}

/* Client axes: the point's workload, its own id, the reference at the spec's load, bench's argv. */
static void test_client_axes(void **state)
{
    (void)state;
    struct k25_sweep_spec *s = calloc(1, sizeof(*s)), *e = calloc(1, sizeof(*e));
    struct k25_error err;
    struct k25_sweep_point *p = NULL, *q = NULL;
    int n = 0, m = 0;
    assert_int_equal(k25_sweep_spec_load(write_spec("c.yaml", SPEC_HEAD "axes: {concurrency: [1, 2]}\n"), s, &err),
                     K25_OK);
    assert_true(s->axes[0].client);
    assert_int_equal(k25_sweep_expand(s, &p, &n, &err), K25_OK);
    assert_int_equal(n, 2); /* concurrency 1 is the spec's own load: the reference, no extra point */
    assert_int_equal(k25_sweep_reference_index(s, p, n), 0);
    assert_string_not_equal(p[0].id, p[1].id);
    struct k25_sweep_workload w;
    k25_sweep_point_workload(s, &p[1], &w);
    assert_int_equal(w.concurrency, 2);
    /* the same grid against a server: other ids (never mixed with the engine's results) */
    assert_int_equal(k25_sweep_spec_load(write_spec("e.yaml", SPEC_HEAD "endpoint: http://127.0.0.1:9\n"
                                                                         "axes: {concurrency: [1, 2]}\n"),
                                         e, &err),
                     K25_OK);
    assert_int_equal(k25_sweep_expand(e, &q, &m, &err), K25_OK);
    assert_int_equal(m, 2);
    assert_string_not_equal(p[1].id, q[1].id);
    struct k25_sweep_opts o = {"out", 1, false, NULL, false, true, "k25", -1, NULL};
    struct k25_sweep_argv a;
    k25_sweep_bench_argv(&a, e, &o, &q[1], 0, "out/x", 0, 0);
    bool saw_ep = false, saw_conc = false;
    for (int i = 0; i + 1 < a.argc; i++) {
        saw_ep |= !strcmp(a.argv[i], "--endpoint") && !strcmp(a.argv[i + 1], "http://127.0.0.1:9");
        saw_conc |= !strcmp(a.argv[i], "--concurrency") && !strcmp(a.argv[i + 1], "2");
    }
    assert_true(saw_ep && saw_conc);
    /* a launch command's holes: {port}, this binary, the point's config */
    k25_sweep_points_free(q, m);
    q = NULL;
    assert_int_equal(k25_sweep_spec_load(write_spec("l.yaml", SPEC_HEAD "launch: \"k25 serve --port {port} "
                                                                         "--prefill-chunk-size {prefill_chunk_size} "
                                                                         "--model {model}\"\n"
                                                                         "axes: {prefill_chunk_size: [512, 2048]}\n"),
                                         e, &err),
                     K25_OK);
    assert_int_equal(k25_sweep_expand(e, &q, &m, &err), K25_OK);
    assert_int_equal(m, 2); /* 2048 is the default: the reference */
    char *c = k25_sweep_launch_command(e, &q[0], 4242, "/opt/my k25");
    assert_string_equal(c, "'/opt/my k25' serve --port 4242 --prefill-chunk-size 512 --model tiny");
    free(c);
    k25_sweep_points_free(p, n);
    k25_sweep_points_free(q, m);
    free(s);
    free(e);
}

/* ------------------------------------------------------------ integration */

struct server {
    pid_t pid;
    int port;
};

/* Starts `k25 serve --model tiny --port 0 ...` and reads the port it prints. */
static void server_start(struct server *s)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "exec %s serve --model tiny --port 0 --threads 1 --decode-max-tokens 8", tu_k25());
    s->pid = fork();
    assert_true(s->pid >= 0);
    if (s->pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[512];
    size_t n = 0;
    s->port = 0;
    while (n < sizeof(buf) - 1 && !s->port) {
        struct pollfd p = {fd[0], POLLIN, 0};
        if (poll(&p, 1, 30000) <= 0)
            break;
        ssize_t r = read(fd[0], buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
        buf[n] = '\0';
        const char *at = strstr(buf, "127.0.0.1:");
        if (at && strchr(at, ' '))
            s->port = atoi(at + 10);
    }
    close(fd[0]);
    if (!s->port)
        fail_msg("k25 serve did not say its port: %s", buf);
}

static void server_stop(struct server *s)
{
    kill(s->pid, SIGTERM);
    waitpid(s->pid, NULL, 0);
}

/* The JSON at OUT/points/ID/rep-0.json of every point in summary.json, in order; returns how many. */
static int point_results(const char *out, json_t **runs, int cap, json_t **summary)
{
    char p[1024];
    json_error_t je;
    snprintf(p, sizeof(p), "%s/summary.json", out);
    *summary = json_load_file(p, 0, &je);
    if (!*summary)
        fail_msg("%s: %s", p, je.text);
    int n = 0;
    size_t i;
    json_t *pt;
    json_array_foreach(json_object_get(*summary, "all_points"), i, pt)
    {
        assert_true(n < cap);
        snprintf(p, sizeof(p), "%s/points/%s/rep-0.json", out, json_string_value(json_object_get(pt, "id")));
        runs[n] = json_load_file(p, 0, &je);
        if (!runs[n])
            fail_msg("%s: %s", p, je.text);
        n++;
    }
    return n;
}

static void test_concurrency_sweep_against_server(void **state)
{
    (void)state;
    struct server srv;
    server_start(&srv);
    const char *spec = write_spec("conc.yaml", "name: conc\n" SPEC_HEAD "axes: {concurrency: [1, 2]}\n");
    char cmd[2048], out[600], *log = NULL;
    snprintf(out, sizeof(out), "%s/conc", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --endpoint http://127.0.0.1:%d --out %s --quiet", tu_k25(), spec, srv.port,
             out);
    int st = tu_run(cmd, &log);
    server_stop(&srv);
    if (st != 0)
        fail_msg("%s\nexit %d:\n%s", cmd, st, log);
    free(log);
    json_t *runs[4], *sum;
    int n = point_results(out, runs, 4, &sum);
    assert_int_equal(n, 2);
    char url[64];
    snprintf(url, sizeof(url), "127.0.0.1:%d", srv.port);
    for (int i = 0; i < n; i++) {
        assert_string_equal(json_string_value(k25_json_path(runs[i], "summary.target")), "endpoint");
        assert_string_equal(json_string_value(k25_json_path(runs[i], "provenance.target")), "endpoint");
        char *pe = json_dumps(k25_json_path(runs[i], "provenance.endpoint"), JSON_COMPACT);
        assert_non_null(strstr(pe, url));
        free(pe);
        assert_int_equal(json_integer_value(k25_json_path(runs[i], "summary.requests.completed")), 2);
        /* the point's concurrency is the one its run used */
        const char *axis = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(sum, "all_points"), (size_t)i), "axes"), "concurrency"));
        assert_int_equal(json_integer_value(k25_json_path(runs[i], "workload.concurrency")), atoi(axis));
        json_decref(runs[i]);
    }
    assert_string_equal(json_string_value(k25_json_path(sum, "target.kind")), "endpoint");
    json_decref(sum);
}

static void test_launch_sweep(void **state)
{
    (void)state;
    const char *spec = write_spec(
        "launch.yaml", "name: launch\n" SPEC_HEAD
        "launch: \"k25 serve --model tiny --port {port} --threads 1 --decode-max-tokens 8 "
        "--prefill-chunk-size {prefill_chunk_size}\"\n"
        "axes: {prefill_chunk_size: [512, 2048]}\n");
    char cmd[2048], out[600], *log = NULL;
    snprintf(out, sizeof(out), "%s/launch", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), spec, out);
    int st = tu_run(cmd, &log);
    if (st != 0)
        fail_msg("%s\nexit %d:\n%s", cmd, st, log);
    free(log);
    json_t *runs[4], *sum;
    int n = point_results(out, runs, 4, &sum);
    assert_int_equal(n, 2);
    for (int i = 0; i < n; i++) {
        assert_string_equal(json_string_value(k25_json_path(runs[i], "summary.target")), "endpoint");
        assert_int_equal(json_integer_value(k25_json_path(runs[i], "summary.requests.completed")), 2);
        /* each point's server ran with the point's value */
        const char *axis = json_string_value(json_object_get(
            json_object_get(json_array_get(json_object_get(sum, "all_points"), (size_t)i), "axes"),
            "prefill_chunk_size"));
        char want[64];
        snprintf(want, sizeof(want), "--prefill-chunk-size %s", axis);
        const char *lc = json_string_value(k25_json_path(runs[i], "launch.command"));
        assert_non_null(lc);
        assert_non_null(strstr(lc, want));
        assert_true(json_is_true(k25_json_path(runs[i], "launch.ok")) || !k25_json_path(runs[i], "launch.ok"));
        json_decref(runs[i]);
    }
    assert_string_equal(json_string_value(k25_json_path(sum, "target.kind")), "launch");
    json_decref(sum);
    /* every server was stopped: none is left listening on its port */
    snprintf(cmd, sizeof(cmd), "ps -eo args | grep -c '[s]erve --model tiny --port [0-9]* --threads 1 --decode-max-tokens 8 --prefill' || true");
    assert_int_equal(tu_run(cmd, &log), 0);
    assert_int_equal(atoi(log), 0);
    free(log);
}

/* A server that never comes up: the run fails, its record says the command, why, and the server's output. */
static void test_launch_failure(void **state)
{
    (void)state;
    const char *spec = write_spec("lfail.yaml", "name: lfail\n" SPEC_HEAD
                                                "launch: \"k25 serve --model no-such-model --port {port}\"\n"
                                                "axes: {concurrency: [1]}\n");
    char cmd[2048], out[600], *log = NULL;
    snprintf(out, sizeof(out), "%s/lfail", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), spec, out);
    assert_int_equal(tu_run(cmd, &log), 1);
    assert_non_null(strstr(log, "runs failed"));
    free(log);
    snprintf(cmd, sizeof(cmd), "cat %s/points/*/rep-0.launch.json", out);
    assert_int_equal(tu_run(cmd, &log), 0);
    json_error_t je;
    json_t *rec = json_loads(log, 0, &je);
    if (!rec)
        fail_msg("launch record: %s\n%s", je.text, log);
    free(log);
    assert_true(json_is_false(json_object_get(rec, "ok")));
    assert_non_null(strstr(json_string_value(json_object_get(rec, "command")), "--model no-such-model"));
    assert_non_null(strstr(json_string_value(json_object_get(rec, "error")), "exited"));
    assert_non_null(strstr(json_string_value(json_object_get(rec, "server_output_tail")), "no-such-model"));
    json_decref(rec);
    /* and the run's log says the same */
    snprintf(cmd, sizeof(cmd), "cat %s/points/*/rep-0.log", out);
    assert_int_equal(tu_run(cmd, &log), 0);
    assert_non_null(strstr(log, "launch failed"));
    free(log);
    /* a server that never answers /health: stopped after the timeout */
    spec = write_spec("lhang.yaml", "name: lhang\n" SPEC_HEAD
                                    "launch: {command: \"sleep 30 # {port}\", health_timeout_s: 1, stop_grace_s: 1}\n"
                                    "axes: {concurrency: [1]}\n");
    snprintf(out, sizeof(out), "%s/lhang", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s sweep %s --out %s --quiet", tu_k25(), spec, out);
    assert_int_equal(tu_run(cmd, &log), 1);
    free(log);
    snprintf(cmd, sizeof(cmd), "cat %s/points/*/rep-0.launch.json", out);
    assert_int_equal(tu_run(cmd, &log), 0);
    assert_non_null(strstr(log, "did not answer 200 within 1 s"));
    free(log);
}

int main(void)
{
    if (access(tu_k25(), X_OK) != 0) {
        fprintf(stderr, "test_sweep_endpoint: %s not built\n", tu_k25());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_errors),
        cmocka_unit_test(test_client_axes),
        cmocka_unit_test(test_concurrency_sweep_against_server),
        cmocka_unit_test(test_launch_sweep),
        cmocka_unit_test(test_launch_failure),
    };
    return cmocka_run_group_tests_name("sweep_endpoint", tests, tu_group_setup, tu_group_teardown);
}
