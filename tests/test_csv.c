/*
 * test_csv.c - the per-request CSV of a run (harness/csv.c, `k25 bench
 * --csv`): header (later columns appended: the elastic queue's and the
 * KV tiers'), one row per request with the trace's figures, empty
 * fields for values that do not exist, RFC 4180 quoting read back by an
 * independent parser, and the atomic write (nothing left on failure).
 */
#include "testutil.h"

#include "harness.h"

#include <math.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#define MS 1000000LL

/* Three requests: a plain completed one, one whose id and reason need quoting, a rejected one. */
static void make_run(struct k25_bench_run *run)
{
    memset(run, 0, sizeof(*run));
    run->reqs = calloc(3, sizeof(*run->reqs));
    run->n_reqs = 3;
    run->n_reps = 1;
    for (int i = 0; i < 3; i++) {
        struct k25_bench_req *q = &run->reqs[i];
        q->seq = i;
        q->user = i;
        q->line = i + 1;
        q->arrival_ns = i * 10 * MS;
        q->submit_ns = q->arrival_ns + MS;
        q->admit_ns = q->arrival_ns + 2 * MS;
        q->n_input = 100;
        q->max_new = 8;
        q->n_chunks = 1;
    }
    struct k25_bench_req *a = &run->reqs[0];
    snprintf(a->id, sizeof(a->id), "plain");
    a->state = K25_REQ_COMPLETED;
    a->n_output = 3;
    a->token_ns = malloc(3 * sizeof(int64_t));
    a->token_ids = calloc(3, sizeof(int32_t));
    a->token_ns[0] = 12 * MS; /* TTFT 12 */
    a->token_ns[1] = 16 * MS; /* ITL 4 */
    a->token_ns[2] = 22 * MS; /* ITL 6: mean 5, max 6, TPOT 5, E2E 22 */
    a->first_ns = 12 * MS;
    a->finish_ns = 22 * MS;

    struct k25_bench_req *b = &run->reqs[1];
    snprintf(b->id, sizeof(b->id), "a,\"b\"");
    snprintf(b->reason, sizeof(b->reason), "line one\nline two");
    b->state = K25_REQ_COMPLETED;
    b->n_output = 1; /* one token: no TPOT or ITL */
    b->token_ns = malloc(sizeof(int64_t));
    b->token_ids = calloc(1, sizeof(int32_t));
    b->token_ns[0] = b->arrival_ns + 30 * MS;
    b->first_ns = b->token_ns[0];
    b->finish_ns = b->token_ns[0];

    struct k25_bench_req *c = &run->reqs[2];
    snprintf(c->id, sizeof(c->id), "rej");
    snprintf(c->reason, sizeof(c->reason), "queue full");
    c->state = K25_REQ_REJECTED;
    c->admit_ns = -1;
    c->first_ns = -1;
    c->finish_ns = c->arrival_ns + MS;

    /* the elastic queue and the KV tiers (the run had tiers on) */
    run->eng.kv_tiers = true;
    a->priority = K25_PRIORITY_HIGH;
    a->degraded = true;
    a->ttft_sla_ms = 1200;
    a->cached_tokens = 32;
    a->kv_block_reads = 40;
    a->kv_block_hits = 30;
    a->kv_tier_wait_ns = 1234567;
    a->kv_tier_bytes_moved = 65536;
    b->priority = K25_PRIORITY_LOW;
    b->spilled = b->replayed = true;
    b->ttft_sla_ms = 1500;
    c->priority = K25_PRIORITY_STANDARD;
}

/* An RFC 4180 reader: splits text into rows of fields (quotes undone).  Returns the row count. */
#define MAXF 48
static int read_csv(const char *text, char rows[][MAXF][128], int max_rows, int nfields[])
{
    int r = 0, f = 0;
    size_t k = 0;
    const char *p = text;
    while (*p && r < max_rows) {
        bool quoted = *p == '"';
        if (quoted)
            p++;
        k = 0;
        for (;;) {
            if (quoted && *p == '"' && p[1] == '"') {
                rows[r][f][k++] = '"';
                p += 2;
            } else if (quoted && *p == '"') {
                p++;
                quoted = false;
            } else if (!quoted && (*p == ',' || *p == '\r' || !*p)) {
                break;
            } else {
                rows[r][f][k++] = *p++;
            }
        }
        rows[r][f][k] = '\0';
        f++;
        if (*p == ',') {
            p++;
            continue;
        }
        assert_true(*p == '\r' && p[1] == '\n'); /* CRLF ends every row */
        p += 2;
        nfields[r++] = f;
        f = 0;
    }
    return r;
}

static int col(char rows[][MAXF][128], int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(rows[0][i], name))
            return i;
    fail_msg("no column %s", name);
    return -1;
}

static void test_rows_and_quoting(void **state)
{
    (void)state;
    struct k25_bench_run run;
    make_run(&run);
    char path[600];
    snprintf(path, sizeof(path), "%s/req.csv", tu_dir);
    struct k25_bench_slo slo = {.ttft_ms = 20, .any = true};
    struct k25_error err;
    assert_int_equal(k25_bench_csv_write(path, &run, &slo, &err), 0);
    char *text = NULL;
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "cat %s", path);
    assert_int_equal(tu_run(cmd, &text), 0);
    const char *header = "id,rep,seq,user,line,state,reason,input_tokens,output_tokens,max_new_tokens,"
                         "prefill_chunks,arrival_ms,submit_ms,admit_ms,first_token_ms,finish_ms,queue_ms,"
                         "ttft_ms,tpot_ms,itl_mean_ms,itl_max_ms,e2e_ms,sched_lag_ms,output_tok_s,meets_slo,"
                         "priority,degraded,spilled,replayed,timed_out,ttft_sla_ms,cached_tokens,kv_block_reads,"
                         "kv_block_hits,kv_cache_hit_rate,kv_tier_wait_ns,kv_tier_bytes_moved\r\n";
    assert_true(!strncmp(text, header, strlen(header)));
    assert_non_null(strstr(text, "\r\n\"a,\"\"b\"\"\",")); /* quoted, quotes doubled */
    static char rows[8][MAXF][128];
    int nf[8];
    int n = read_csv(text, rows, 8, nf);
    assert_int_equal(n, 4); /* header + 3 requests */
    for (int i = 0; i < n; i++)
        assert_int_equal(nf[i], 37);
    int w = nf[0];
    assert_int_equal(col(rows, w, "meets_slo"), 24); /* the columns that came later are appended after it */
    /* the plain request: the trace's figures */
    assert_string_equal(rows[1][col(rows, w, "id")], "plain");
    assert_string_equal(rows[1][col(rows, w, "state")], k25_req_state_name(K25_REQ_COMPLETED));
    assert_float_equal(strtod(rows[1][col(rows, w, "ttft_ms")], NULL), 12, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "tpot_ms")], NULL), 5, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "itl_mean_ms")], NULL), 5, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "itl_max_ms")], NULL), 6, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "e2e_ms")], NULL), 22, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "queue_ms")], NULL), 2, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "sched_lag_ms")], NULL), 1, 1e-9);
    assert_float_equal(strtod(rows[1][col(rows, w, "output_tok_s")], NULL), 3 / 0.022, 1e-6);
    assert_string_equal(rows[1][col(rows, w, "meets_slo")], "true");
    /* the quoted one reads back exactly; no TPOT/ITL for one token; TTFT 30 misses the SLO */
    assert_string_equal(rows[2][0], "a,\"b\"");
    assert_string_equal(rows[2][col(rows, w, "reason")], "line one\nline two");
    assert_string_equal(rows[2][col(rows, w, "tpot_ms")], "");
    assert_string_equal(rows[2][col(rows, w, "itl_max_ms")], "");
    assert_float_equal(strtod(rows[2][col(rows, w, "ttft_ms")], NULL), 30, 1e-9);
    assert_string_equal(rows[2][col(rows, w, "meets_slo")], "false");
    /* the rejected one: no admit, no first token, no TTFT, no rate */
    assert_string_equal(rows[3][col(rows, w, "admit_ms")], "");
    assert_string_equal(rows[3][col(rows, w, "first_token_ms")], "");
    assert_string_equal(rows[3][col(rows, w, "ttft_ms")], "");
    assert_string_equal(rows[3][col(rows, w, "output_tok_s")], "");
    assert_string_equal(rows[3][col(rows, w, "reason")], "queue full");
    /* the elastic queue's columns, as the trace's /requests holds them */
    assert_string_equal(rows[1][col(rows, w, "priority")], "high");
    assert_string_equal(rows[1][col(rows, w, "degraded")], "true");
    assert_string_equal(rows[1][col(rows, w, "spilled")], "false");
    assert_string_equal(rows[1][col(rows, w, "ttft_sla_ms")], "1200");
    assert_string_equal(rows[2][col(rows, w, "priority")], "low");
    assert_string_equal(rows[2][col(rows, w, "degraded")], "false");
    assert_string_equal(rows[2][col(rows, w, "spilled")], "true");
    assert_string_equal(rows[2][col(rows, w, "replayed")], "true");
    assert_string_equal(rows[2][col(rows, w, "ttft_sla_ms")], "1500");
    assert_string_equal(rows[3][col(rows, w, "priority")], "standard");
    assert_string_equal(rows[3][col(rows, w, "timed_out")], "false");
    assert_string_equal(rows[3][col(rows, w, "ttft_sla_ms")], "0");
    /* prefix caching and the KV tiers: hit rate = hits / reads, 1 for a request that read no block */
    assert_string_equal(rows[1][col(rows, w, "cached_tokens")], "32");
    assert_string_equal(rows[1][col(rows, w, "kv_block_reads")], "40");
    assert_string_equal(rows[1][col(rows, w, "kv_block_hits")], "30");
    assert_float_equal(strtod(rows[1][col(rows, w, "kv_cache_hit_rate")], NULL), 0.75, 1e-15);
    assert_string_equal(rows[1][col(rows, w, "kv_tier_wait_ns")], "1234567");
    assert_string_equal(rows[1][col(rows, w, "kv_tier_bytes_moved")], "65536");
    assert_string_equal(rows[2][col(rows, w, "kv_cache_hit_rate")], "1");
    assert_string_equal(rows[2][col(rows, w, "kv_block_reads")], "0");
    free(text);
    /* without an SLO the column is empty */
    assert_int_equal(k25_bench_csv_write(path, &run, NULL, &err), 0);
    assert_int_equal(tu_run(cmd, &text), 0);
    n = read_csv(text, rows, 8, nf);
    assert_string_equal(rows[1][24], "");
    free(text);
    /* a timed-out request says so; with the tiers off the hit rate does not exist (empty) */
    run.reqs[2].state = K25_REQ_TIMED_OUT;
    run.eng.kv_tiers = false;
    assert_int_equal(k25_bench_csv_write(path, &run, NULL, &err), 0);
    assert_int_equal(tu_run(cmd, &text), 0);
    n = read_csv(text, rows, 8, nf);
    w = nf[0];
    assert_string_equal(rows[3][col(rows, w, "timed_out")], "true");
    assert_string_equal(rows[3][col(rows, w, "state")], "timed_out");
    assert_string_equal(rows[2][col(rows, w, "kv_cache_hit_rate")], "");
    assert_float_equal(strtod(rows[1][col(rows, w, "kv_cache_hit_rate")], NULL), 0.75, 1e-15);
    free(text);
    k25_bench_run_free(&run);
}

static void test_atomic_and_bad_paths(void **state)
{
    (void)state;
    struct k25_bench_run run;
    make_run(&run);
    struct k25_error err;
    char path[600], cmd[800], *out;
    /* a directory, a missing folder: refused, nothing created */
    assert_int_equal(k25_bench_csv_write(tu_dir, &run, NULL, &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "is a directory"));
    snprintf(path, sizeof(path), "%s/no/such/dir/r.csv", tu_dir);
    assert_int_equal(k25_bench_csv_write(path, &run, NULL, &err), K25_EINVAL);
    /* a write that fails (file size limit, as a full disk): an error, nothing under either name */
    snprintf(path, sizeof(path), "%s/big.csv", tu_dir);
    struct rlimit old, small = {200, 200};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small.rlim_max = old.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = k25_bench_csv_write(path, &run, NULL, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, K25_EIO);
    assert_non_null(strstr(err.msg, "writing failed"));
    assert_int_equal(access(path, F_OK), -1);
    /* an empty run still writes the header; no temporary is left behind by any of the above */
    struct k25_bench_run empty = {0};
    snprintf(path, sizeof(path), "%s/empty.csv", tu_dir);
    assert_int_equal(k25_bench_csv_write(path, &empty, NULL, &err), 0);
    snprintf(cmd, sizeof(cmd), "wc -l < %s; ls -a %s | grep -c '\\.tmp\\.' || true", path, tu_dir);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "1\n0\n");
    free(out);
    k25_bench_run_free(&run);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_and_quoting),
        cmocka_unit_test(test_atomic_and_bad_paths),
    };
    return cmocka_run_group_tests_name("csv", tests, tu_group_setup, tu_group_teardown);
}
