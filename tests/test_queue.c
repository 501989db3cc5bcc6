/*
 * test_queue.c - the elastic request queue (issue 17): memory capacity,
 * rejection with a reason, spill to the durable disk log and admission in
 * arrival order, replay after a simulated crash (an engine destroyed with
 * unfinished requests), a torn last record, compaction, write/fsync fault
 * injection, queue timeouts, priorities, the circuit breaker's hysteresis
 * on a fake clock, and the degraded (early-exit) model against an engine
 * serving the same weights cut to the same layers.
 *
 * The fake clock (queue.h, TEST-ONLY) makes the breaker's seconds run in
 * microseconds: a step hook advances it by the step's pretend duration.
 */
#include "testutil.h"
#include "tu_model.h"

#include "k25.h"
#include "internal.h"
#include "queue.h"
#include "fidelity.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* ----------------------------------------------------------- helpers */

static struct k25_config cfg_base(void)
{
    struct k25_config cfg;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "tiny");
    cfg.kv_compression_ratio = 1.0;
    cfg.threads = 1;
    return cfg;
}

static int32_t g_prompt[64];

static void make_prompt(uint32_t salt)
{
    uint32_t s = 2463534242u ^ salt;
    for (int i = 0; i < 64; i++) {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        g_prompt[i] = 32 + (int32_t)(s % 90);
    }
}

static int submit(k25_engine_t *e, const char *id, enum k25_priority prio, int max_new, int *h,
                  struct k25_error *err)
{
    make_prompt((uint32_t)strlen(id) * 7919u + (uint32_t)id[strlen(id) - 1]);
    struct k25_request req = {.id = id, .input_ids = g_prompt, .n_input = 24, .max_new_tokens = max_new,
                              .priority = prio};
    return k25_engine_submit(e, &req, h, err);
}

static void submit_ok(k25_engine_t *e, const char *id, enum k25_priority prio, int max_new, int *h)
{
    struct k25_error err;
    int rc = submit(e, id, prio, max_new, h, &err);
    if (rc != K25_OK)
        fail_msg("submit %s: %s", id, err.msg);
}

static k25_engine_t *create(const struct k25_config *cfg, struct k25_error *err)
{
    k25_engine_t *e = NULL;
    int rc = k25_engine_create(cfg, tu_tiny, &e, err);
    if (rc != K25_OK)
        fail_msg("create: %s", err->msg);
    return e;
}

/* Records ADMIT and FINISH events: ids in order. */
struct evlog {
    char admitted[32][64];
    int n_admit;
    int n_finish;
};

static void on_event(const struct k25_event *ev, void *user)
{
    struct evlog *l = user;
    if (ev->type == K25_EV_ADMIT && l->n_admit < 32)
        snprintf(l->admitted[l->n_admit++], 64, "%s", ev->req_id);
    if (ev->type == K25_EV_FINISH)
        l->n_finish++;
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static char *spill_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", tu_dir, name);
    return p;
}

/* Whether a line of path holds needle (and also needle2 when not NULL). */
static bool file_has2(const char *path, const char *needle, const char *needle2)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[2048];
    bool found = false;
    while (!found && fgets(line, sizeof(line), f))
        found = strstr(line, needle) != NULL && (!needle2 || strstr(line, needle2) != NULL);
    fclose(f);
    return found;
}

static bool file_has(const char *path, const char *needle)
{
    return file_has2(path, needle, NULL);
}

/* -------------------------------------------------------------- tests */

static void test_config_keys(void **state)
{
    (void)state;
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    assert_int_equal(cfg.queue_memory_capacity, 128);
    assert_string_equal(cfg.queue_spill_dir, "");
    assert_int_equal(cfg.queue_low_priority_ttft_ms, 1500);
    assert_int_equal(cfg.queue_timeout_ms, 30000);
    assert_false(cfg.breaker_enabled);
    assert_true(cfg.breaker_busy_threshold == 0.95 && cfg.breaker_busy_seconds == 5.0);
    assert_true(cfg.breaker_memory_threshold == 0.92 && cfg.degraded_layer_fraction == 0.30);
    assert_int_equal(cfg.degraded_ttft_ms, 1200);
    assert_int_equal(k25_config_set(&cfg, "queue_memory_capacity", "0", NULL, 0, &err), K25_ERANGE);
    assert_int_equal(k25_config_set(&cfg, "degraded_layer_fraction", "0", NULL, 0, &err), K25_ERANGE);
    assert_int_equal(k25_config_set(&cfg, "breaker_busy_threshold", "1.5", NULL, 0, &err), K25_ERANGE);
    assert_int_equal(k25_config_set(&cfg, "breaker_enabled", "true", NULL, 0, &err), K25_OK);
    assert_true(cfg.breaker_enabled);
    enum k25_priority p;
    assert_int_equal(k25_priority_parse("high", &p, &err), K25_OK);
    assert_int_equal(p, K25_PRIORITY_HIGH);
    assert_int_equal(k25_priority_parse("urgent", &p, &err), K25_EINVAL);
    assert_string_equal(k25_req_state_name(K25_REQ_TIMED_OUT), "timed_out");
}

/* Beyond capacity without a spill folder: rejected with a reason; high is never turned away. */
static void test_capacity_reject(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 2;
    cfg.max_batch_size = 1;
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    struct evlog ev = {0};
    k25_engine_set_event_cb(e, on_event, &ev);
    int h[5];
    submit_ok(e, "a", K25_PRIORITY_STANDARD, 2, &h[0]);
    submit_ok(e, "b", K25_PRIORITY_STANDARD, 2, &h[1]);
    submit_ok(e, "c", K25_PRIORITY_STANDARD, 2, &h[2]);
    submit_ok(e, "d", K25_PRIORITY_LOW, 2, &h[3]);
    submit_ok(e, "h", K25_PRIORITY_HIGH, 2, &h[4]);
    const struct k25_result *rc = k25_engine_result(e, h[2]);
    assert_int_equal(rc->state, K25_REQ_REJECTED);
    assert_non_null(strstr(rc->reason, "queue full"));
    assert_int_equal(k25_engine_result(e, h[3])->state, K25_REQ_REJECTED);
    assert_int_equal(k25_engine_result(e, h[4])->state, K25_REQ_WAITING);
    assert_int_equal(ev.n_finish, 0); /* FINISH of a rejection comes from a step, not from submit */
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.n_waiting_memory, 3);
    assert_int_equal(st.rejected_queue_full, 2);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(ev.n_finish, 5);
    assert_int_equal(ev.n_admit, 3);
    assert_string_equal(ev.admitted[0], "h"); /* high goes ahead of the standard ones */
    assert_string_equal(ev.admitted[1], "a");
    assert_string_equal(ev.admitted[2], "b");
    for (int i = 0; i < 5; i++)
        k25_engine_release(e, h[i]);
    k25_engine_destroy(e);
}

/* Capacity -> spill -> admission in arrival order; compaction when all are done. */
static void test_spill_order(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 2;
    cfg.max_batch_size = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("order"));
    snprintf(cfg.log_file, sizeof(cfg.log_file), "%s/order.log", tu_dir);
    cfg.log_level = K25_LOG_INFO;
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    struct evlog ev = {0};
    k25_engine_set_event_cb(e, on_event, &ev);
    const char *ids[] = {"r0", "r1", "r2", "r3", "r4", "r5"};
    int h[6];
    for (int i = 0; i < 6; i++)
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, 2, &h[i]);
    char logpath[1100];
    snprintf(logpath, sizeof(logpath), "%s/queue.log", cfg.queue_spill_dir);
    long sz = file_size(logpath);
    assert_true(sz > 0); /* four fsync'd records before submit returned */
    for (int i = 0; i < 6; i++) {
        const struct k25_result *r = k25_engine_result(e, h[i]);
        assert_int_equal(r->spilled, i >= 2);
        assert_int_equal(r->priority, i >= 2 ? K25_PRIORITY_LOW : K25_PRIORITY_STANDARD);
        assert_int_equal(r->ttft_sla_ms, i >= 2 ? 1500 : 0);
    }
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.n_waiting_memory, 2);
    assert_int_equal(st.n_waiting_spill, 4);
    assert_int_equal(st.spilled_requests, 4);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(ev.n_admit, 6);
    for (int i = 0; i < 6; i++) {
        assert_string_equal(ev.admitted[i], ids[i]);
        assert_int_equal(k25_engine_result(e, h[i])->state, K25_REQ_COMPLETED);
    }
    assert_int_equal(file_size(logpath), 0); /* every record done: compacted */
    k25_engine_destroy(e);
    assert_true(file_has(cfg.log_file, "[QUEUE] event=spill req_id=r2"));
    assert_true(file_has(cfg.log_file, "[QUEUE] req_id=r3 priority=low queue_time="));
    assert_true(file_has(cfg.log_file, "degraded=False spilled=True state=admitted"));
}

/* Copies the output tokens of handle h into out (n). */
static int outputs(k25_engine_t *e, int h, int32_t *out)
{
    const struct k25_result *r = k25_engine_result(e, h);
    memcpy(out, r->output_ids, sizeof(int32_t) * (size_t)r->n_output);
    return r->n_output;
}

/* An engine destroyed with accepted requests unfinished (with a spill folder every accepted request
 * is logged, whichever queue it waits in): a new one replays them, in order, once. */
static void test_replay_after_crash(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 1;
    cfg.max_batch_size = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("crash"));
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    int h[5];
    const char *ids[] = {"c0", "c1", "c2", "c3", "c4"};
    for (int i = 0; i < 5; i++)
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, 3, &h[i]);
    /* run until c1 (spilled) has completed: its done record is written */
    while (k25_engine_result(e, h[1])->state != K25_REQ_COMPLETED)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    int32_t want[3][8];
    assert_int_equal(k25_engine_result(e, h[2])->spilled, true);
    k25_engine_destroy(e); /* the "crash": c2..c4 accepted, not finished */

    /* the tokens each would have produced, from a fresh engine without a spill tier */
    struct k25_config plain = cfg_base();
    k25_engine_t *ref = create(&plain, &err);
    for (int i = 0; i < 3; i++) {
        int hr;
        submit_ok(ref, ids[2 + i], K25_PRIORITY_STANDARD, 3, &hr);
        assert_int_equal(k25_engine_run(ref, &err), K25_OK);
        assert_int_equal(outputs(ref, hr, want[i]), 3);
    }
    k25_engine_destroy(ref);

    e = create(&cfg, &err);
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 3);
    /* every accepted request was logged, not only the spilled; the shutdown compaction (issue 33)
     * kept the three unfinished ones and dropped c0 and c1 with their done records */
    assert_int_equal(ri.n_records, 3);
    assert_int_equal(ri.n_done, 0);
    assert_int_equal(ri.torn_bytes, 0);
    struct evlog ev = {0};
    k25_engine_set_event_cb(e, on_event, &ev);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    for (int i = 0; i < 3; i++) {
        const struct k25_result *r = k25_engine_result(e, ri.handles[i]);
        assert_string_equal(r->id, ids[2 + i]);
        assert_string_equal(ev.admitted[i], ids[2 + i]);
        assert_true(r->replayed && r->spilled);
        assert_int_equal(r->priority, K25_PRIORITY_LOW);
        assert_int_equal(r->state, K25_REQ_COMPLETED);
        int32_t got[8];
        assert_int_equal(outputs(e, ri.handles[i], got), 3);
        assert_memory_equal(got, want[i], sizeof(int32_t) * 3);
    }
    k25_engine_destroy(e);
    /* done: nothing comes back twice */
    e = create(&cfg, &err);
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 0);
    assert_true(k25_engine_idle(e));
    k25_engine_destroy(e);
}

/* A torn last record is dropped with a warning; the whole ones before it replay. */
static void test_torn_record(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("torn"));
    snprintf(cfg.log_file, sizeof(cfg.log_file), "%s/torn.log", tu_dir);
    cfg.log_level = K25_LOG_INFO;
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    int h;
    submit_ok(e, "t0", K25_PRIORITY_STANDARD, 2, &h);
    submit_ok(e, "t1", K25_PRIORITY_STANDARD, 2, &h);
    char logpath[1100];
    snprintf(logpath, sizeof(logpath), "%s/queue.log", cfg.queue_spill_dir);
    long one = file_size(logpath);
    submit_ok(e, "t2", K25_PRIORITY_STANDARD, 2, &h);
    long two = file_size(logpath);
    assert_true(one > 0 && two > one);
    k25_engine_destroy(e);
    assert_int_equal(truncate(logpath, two - 3), 0); /* a crash in the middle of the last write */

    memset(&err, 0, sizeof(err));
    e = create(&cfg, &err);
    assert_int_equal(err.code, K25_OK);
    assert_non_null(strstr(err.msg, "torn"));
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 2); /* t0 (memory queue) and t1 (spilled): both were logged */
    assert_int_equal(ri.torn_bytes, two - 3 - one);
    assert_string_equal(k25_engine_result(e, ri.handles[0])->id, "t0");
    assert_string_equal(k25_engine_result(e, ri.handles[1])->id, "t1");
    assert_int_equal(file_size(logpath), one); /* cut back to whole records */
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(file_size(logpath), 0);
    k25_engine_destroy(e);
    assert_true(file_has(cfg.log_file, "[QUEUE] event=torn_record"));
    assert_true(file_has(cfg.log_file, "[QUEUE] event=replay req_id=t1"));

    /* a flipped byte inside the last record fails its checksum the same way */
    e = create(&cfg, &err);
    submit_ok(e, "u0", K25_PRIORITY_STANDARD, 2, &h);
    submit_ok(e, "u1", K25_PRIORITY_STANDARD, 2, &h);
    submit_ok(e, "u2", K25_PRIORITY_STANDARD, 2, &h);
    k25_engine_destroy(e);
    long sz = file_size(logpath);
    int fd = open(logpath, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, sz - 5), 1);
    b ^= 0x40;
    assert_int_equal(pwrite(fd, &b, 1, sz - 5), 1);
    close(fd);
    e = create(&cfg, &err);
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 2); /* u0, u1 */
    assert_true(ri.torn_bytes > 0);
    assert_non_null(strstr(ri.warning, "checksum"));
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    k25_engine_destroy(e);
}

/* ---- fault injection: write / fsync failing */

static int g_fail_write, g_fail_fsync;

static ssize_t bad_write(int fd, const void *buf, size_t n, void *user)
{
    (void)user;
    if (g_fail_write) {
        /* half the record reaches the file, then the disk is full */
        ssize_t w = write(fd, buf, n / 2);
        (void)w;
        errno = ENOSPC;
        return -1;
    }
    return write(fd, buf, n);
}

static int bad_fsync(int fd, void *user)
{
    (void)user;
    if (g_fail_fsync) {
        errno = EIO;
        return -1;
    }
    return fsync(fd);
}

static void test_fault_injection(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("fault"));
    struct k25_error err;
    struct k25_spill_io io = {bad_write, bad_fsync, NULL};
    k25_engine_t *e = NULL;
    assert_int_equal(k25_engine_create_io(&cfg, tu_tiny, &io, &e, &err), K25_OK);
    char logpath[1100];
    snprintf(logpath, sizeof(logpath), "%s/queue.log", cfg.queue_spill_dir);
    int h = -1, h2;
    submit_ok(e, "f0", K25_PRIORITY_STANDARD, 2, &h); /* memory (logged: every accepted request is) */
    const long s0 = file_size(logpath);
    assert_true(s0 > 0);
    g_fail_write = 1;
    h2 = -7;
    assert_int_equal(submit(e, "f1", K25_PRIORITY_STANDARD, 2, &h2, &err), K25_EIO);
    assert_int_equal(h2, -7); /* no handle: not accepted */
    assert_non_null(strstr(err.msg, "write failed"));
    assert_non_null(strstr(err.msg, strerror(ENOSPC)));
    assert_int_equal(file_size(logpath), s0); /* the half record was cut back */
    g_fail_write = 0;
    g_fail_fsync = 1;
    assert_int_equal(submit(e, "f2", K25_PRIORITY_STANDARD, 2, &h2, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "fsync failed"));
    assert_int_equal(file_size(logpath), s0);
    g_fail_fsync = 0;
    submit_ok(e, "f3", K25_PRIORITY_STANDARD, 2, &h2); /* the log works again */
    assert_true(k25_engine_result(e, h2)->spilled);
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.spilled_requests, 1);
    assert_int_equal(st.n_waiting, 2);
    k25_engine_destroy(e); /* crash with f3 unfinished */
    /* replay brings back f0 and f3 only: the failed ones were never accepted */
    e = create(&cfg, &err);
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 2);
    assert_string_equal(k25_engine_result(e, ri.handles[0])->id, "f0");
    assert_string_equal(k25_engine_result(e, ri.handles[1])->id, "f3");
    /* the setter reaches a running engine's log too */
    k25_engine_set_spill_io(e, &io);
    submit_ok(e, "f4", K25_PRIORITY_STANDARD, 2, &h); /* memory (f3 waits on disk) */
    g_fail_fsync = 1;
    assert_int_equal(submit(e, "f5", K25_PRIORITY_STANDARD, 2, &h2, &err), K25_EIO);
    g_fail_fsync = 0;
    k25_engine_set_spill_io(e, NULL);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    k25_engine_destroy(e);
    assert_int_equal(file_size(logpath), 0);
}

/* ---- fake clock */

static uint64_t g_now = 1000000000ull;
static uint64_t g_step_ns; /* pretend duration of each step (the hook adds it) */

static uint64_t fake_clock(void *user)
{
    (void)user;
    return g_now;
}

static void busy_hook(const struct k25_step_info *info, void *user)
{
    (void)info;
    (void)user;
    g_now += g_step_ns;
}

static void test_timeout(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_timeout_ms = 100;
    cfg.max_batch_size = 1;
    cfg.queue_memory_capacity = 2;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("timeout"));
    snprintf(cfg.log_file, sizeof(cfg.log_file), "%s/timeout.log", tu_dir);
    cfg.log_level = K25_LOG_INFO;
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    k25_engine_set_clock(e, fake_clock, NULL);
    struct evlog ev = {0};
    k25_engine_set_event_cb(e, on_event, &ev);
    int h[4];
    submit_ok(e, "w0", K25_PRIORITY_STANDARD, 20, &h[0]);
    submit_ok(e, "w1", K25_PRIORITY_STANDARD, 2, &h[1]);
    submit_ok(e, "w2", K25_PRIORITY_STANDARD, 2, &h[2]);
    submit_ok(e, "w3", K25_PRIORITY_STANDARD, 2, &h[3]); /* spilled */
    assert_true(k25_engine_result(e, h[3])->spilled);
    assert_int_equal(k25_engine_step(e, &err), K25_OK); /* w0 runs, the rest wait */
    g_now += 99 * 1000000ull;
    assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, h[1])->state, K25_REQ_WAITING); /* 99 ms: not yet */
    g_now += 2 * 1000000ull;
    assert_int_equal(k25_engine_step(e, &err), K25_OK);
    for (int i = 1; i < 4; i++) {
        const struct k25_result *r = k25_engine_result(e, h[i]);
        assert_int_equal(r->state, K25_REQ_TIMED_OUT);
        assert_non_null(strstr(r->reason, "queue_timeout_ms 100"));
    }
    assert_int_equal(ev.n_finish, 3);
    assert_int_equal(k25_engine_result(e, h[0])->state, K25_REQ_DECODE); /* running: not affected */
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.timed_out_requests, 3);
    char logpath[1100];
    snprintf(logpath, sizeof(logpath), "%s/queue.log", cfg.queue_spill_dir);
    assert_true(file_size(logpath) > 0); /* w0 (running) is still a live record */
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, h[0])->state, K25_REQ_COMPLETED);
    assert_int_equal(file_size(logpath), 0); /* every record done: the log is compacted */
    k25_engine_destroy(e);
    assert_true(file_has(cfg.log_file, "[QUEUE] event=timeout req_id=w1"));
    assert_true(file_has(cfg.log_file, "req_id=w1 priority=standard queue_time=101ms degraded=False spilled=False "
                                       "state=timed_out reason=queue_timeout"));

    /* 0 = no limit */
    cfg.queue_timeout_ms = 0;
    cfg.queue_spill_dir[0] = '\0';
    e = create(&cfg, &err);
    k25_engine_set_clock(e, fake_clock, NULL);
    submit_ok(e, "n0", K25_PRIORITY_STANDARD, 2, &h[0]);
    submit_ok(e, "n1", K25_PRIORITY_STANDARD, 2, &h[1]);
    g_now += 3600 * 1000000000ull;
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, h[1])->state, K25_REQ_COMPLETED);
    k25_engine_destroy(e);
}

/* Steps e for dur_ns of fake time, each step busy_ns then idle_ns, keeping one request running. */
static void drive(k25_engine_t *e, uint64_t dur_ns, uint64_t busy_ns, uint64_t idle_ns)
{
    struct k25_error err;
    uint64_t end = g_now + dur_ns;
    static int k;
    while (g_now < end) {
        if (k25_engine_idle(e)) {
            char id[32];
            snprintf(id, sizeof(id), "bg%d", k++);
            int h;
            submit_ok(e, id, K25_PRIORITY_STANDARD, 50, &h);
        }
        g_step_ns = busy_ns;
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
        g_now += idle_ns;
    }
}

static bool breaker_open(k25_engine_t *e)
{
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    return st.breaker_open;
}

/* Opens after busy_seconds above the threshold, closes after busy_seconds below threshold - margin. */
/*
 * Busy means saturated: one request stepping back to back in a batch of 4
 * uses a quarter of the engine and never opens the breaker; a full batch
 * with requests waiting does.
 */
static void test_breaker_counts_occupancy(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.breaker_enabled = true;
    cfg.breaker_busy_threshold = 0.90;
    cfg.breaker_busy_seconds = 0.2;
    cfg.breaker_memory_threshold = 1.0;
    cfg.max_batch_size = 4;
    struct k25_error err;
    g_now = 7000000000ull;
    k25_engine_t *e = create(&cfg, &err);
    k25_engine_set_clock(e, fake_clock, NULL);
    k25_engine_set_step_hook(e, busy_hook, NULL);
    const uint64_t ms = 1000000ull;
    drive(e, 1000 * ms, 20 * ms, 0); /* one request at a time, 100% of the wall clock in steps */
    assert_false(breaker_open(e));
    int h;
    for (int i = 0; i < 6; i++) { /* 4 running + 2 waiting */
        char id[16];
        snprintf(id, sizeof(id), "full%d", i);
        submit_ok(e, id, K25_PRIORITY_STANDARD, 120, &h);
    }
    g_step_ns = 20 * ms; /* the 1 s window fills with saturated steps, then the 0.2 s hold */
    for (int i = 0; i < 100 && !breaker_open(e); i++)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_true(breaker_open(e));
    k25_engine_destroy(e);
}

static void test_breaker_hysteresis(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.breaker_enabled = true;
    cfg.breaker_busy_threshold = 0.90;
    cfg.breaker_busy_seconds = 0.5;
    cfg.breaker_memory_threshold = 1.0;
    cfg.max_batch_size = 1;
    snprintf(cfg.log_file, sizeof(cfg.log_file), "%s/breaker.log", tu_dir);
    cfg.log_level = K25_LOG_INFO;
    struct k25_error err;
    g_now = 5000000000ull;
    k25_engine_t *e = create(&cfg, &err);
    k25_engine_set_clock(e, fake_clock, NULL);
    k25_engine_set_step_hook(e, busy_hook, NULL);
    const uint64_t ms = 1000000ull;

    drive(e, 400 * ms, 20 * ms, 0); /* 100% busy for 0.4 s: not long enough */
    assert_false(breaker_open(e));
    drive(e, 200 * ms, 20 * ms, 0); /* 0.6 s */
    assert_true(breaker_open(e));
    int h;
    submit_ok(e, "new", K25_PRIORITY_STANDARD, 2, &h);
    const struct k25_result *r = k25_engine_result(e, h);
    assert_true(r->degraded);
    assert_int_equal(r->ttft_sla_ms, 1200);

    /* 88%: below the threshold but not below threshold - margin: stays open */
    drive(e, 3000 * ms, 22 * ms, 3 * ms);
    assert_true(breaker_open(e));
    /* idle: busy falls under 0.85 within the window; closes 0.5 s later, not before */
    drive(e, 300 * ms, 0, 10 * ms);
    assert_true(breaker_open(e));
    drive(e, 700 * ms, 0, 10 * ms);
    assert_false(breaker_open(e));
    submit_ok(e, "after", K25_PRIORITY_STANDARD, 2, &h);
    assert_false(k25_engine_result(e, h)->degraded);
    /* 88% while closed: stays closed (no flapping at the threshold) */
    drive(e, 3000 * ms, 22 * ms, 3 * ms);
    assert_false(breaker_open(e));
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.breaker_opens, 1);
    assert_true(st.degraded_requests >= 1); /* "new" and the background requests submitted while open */
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    k25_engine_destroy(e);
    assert_true(file_has(cfg.log_file, "[QUEUE] event=breaker_open busy="));
    assert_true(file_has(cfg.log_file, "[QUEUE] event=breaker_close busy="));
    assert_true(file_has2(cfg.log_file, "[QUEUE] req_id=new priority=standard queue_time=", "degraded=True"));
    assert_true(file_has2(cfg.log_file, "[QUEUE] req_id=after priority=standard", "degraded=False"));
}

/* A config whose memory watermark is passed at once: every request runs degraded. */
static struct k25_config degraded_cfg(void)
{
    struct k25_config cfg = cfg_base();
    cfg.breaker_enabled = true;
    cfg.memory_budget_mb = 256;
    cfg.breaker_memory_threshold = 0.001;
    return cfg;
}

static void run_tokens(const struct k25_config *cfg, const k25_model_t *m, const char **ids, int n, int max_new,
                       int32_t out[][16], float margins[][16], bool want_degraded)
{
    struct k25_error err;
    k25_engine_t *e = NULL;
    if (k25_engine_create(cfg, m, &e, &err) != K25_OK)
        fail_msg("create: %s", err.msg);
    int h[8];
    for (int i = 0; i < n; i++)
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, max_new, &h[i]);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    for (int i = 0; i < n; i++) {
        const struct k25_result *r = k25_engine_result(e, h[i]);
        assert_int_equal(r->state, K25_REQ_COMPLETED);
        assert_int_equal(r->degraded, want_degraded);
        assert_int_equal(r->n_output, max_new);
        memcpy(out[i], r->output_ids, sizeof(int32_t) * (size_t)max_new);
        memcpy(margins[i], r->margins, sizeof(float) * (size_t)max_new);
    }
    k25_engine_destroy(e);
}

/*
 * k25_request.force_degraded: with the breaker off, the request runs on the degraded model (the
 * same tokens as a breaker-open engine's), a plain one beside it on the full model; and
 * k25_fidelity_measure_degraded (k25 bench --fidelity) measures that model against the full one:
 * a real distance for 2 of 4 layers, exactly none when the "degraded" model runs every layer.
 */
static void test_force_degraded_fidelity(void **state)
{
    (void)state;
    enum { N = 12 };
    const char *ids[] = {"f0", "f1"};
    int32_t deg[2][16], full[2][16];
    float md[2][16], mf[2][16];
    struct k25_config dc = degraded_cfg();
    run_tokens(&dc, tu_tiny, ids, 2, N, deg, md, true);
    struct k25_config cfg = cfg_base();
    run_tokens(&cfg, tu_tiny, ids, 2, N, full, mf, false);
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    int h[2];
    for (int i = 0; i < 2; i++) {
        make_prompt((uint32_t)strlen(ids[i]) * 7919u + (uint32_t)ids[i][strlen(ids[i]) - 1]);
        struct k25_request req = {.id = ids[i], .input_ids = g_prompt, .n_input = 24, .max_new_tokens = N,
                                  .force_degraded = i == 0};
        assert_int_equal(k25_engine_submit(e, &req, &h[i], &err), K25_OK);
    }
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *r0 = k25_engine_result(e, h[0]), *r1 = k25_engine_result(e, h[1]);
    assert_true(r0->degraded && !r1->degraded);
    struct k25_tok_cmp cmp;
    k25_tok_compare(deg[0], md[0], N, r0->output_ids, r0->margins, r0->n_output, K25_TOK_TAU, &cmp);
    assert_true(cmp.pass);
    k25_tok_compare(full[1], mf[1], N, r1->output_ids, r1->margins, r1->n_output, K25_TOK_TAU, &cmp);
    assert_true(cmp.pass);
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.degraded_requests, 1);
    k25_engine_destroy(e);

    /* fidelity of the degraded model against the full one */
    struct k25_bench_input in[2];
    memset(in, 0, sizeof(in));
    for (int i = 0; i < 2; i++) {
        snprintf(in[i].id, sizeof(in[i].id), "%s", ids[i]);
        make_prompt((uint32_t)strlen(ids[i]) * 7919u + (uint32_t)ids[i][strlen(ids[i]) - 1]);
        in[i].ids = malloc(sizeof(int32_t) * 24);
        assert_non_null(in[i].ids);
        memcpy(in[i].ids, g_prompt, sizeof(int32_t) * 24);
        in[i].n_ids = 24;
    }
    struct k25_fidelity *f = NULL;
    if (k25_fidelity_measure_degraded(&cfg, tu_tiny, in, 2, N, &f, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_int_equal(f->n_requests, 2);
    assert_int_equal(f->n_positions, 2 * N);
    assert_true(isfinite(f->kl_mean) && f->kl_mean > 0 && f->kl_max >= f->kl_mean);
    assert_true(f->token_agreement < 1.0); /* the degraded tokens differ (test_degraded_model) */
    assert_true(isnan(f->attn_rel_err));
    print_message("  degraded model (2 of 4 layers): KL mean %.4g, top-1 agreement %.3f, token agreement %.3f\n",
                  f->kl_mean, f->top1_agreement, f->token_agreement);
    k25_fidelity_free(f);
    free(f);
    cfg.degraded_layer_fraction = 1.0; /* every layer: the "degraded" model is the full one */
    if (k25_fidelity_measure_degraded(&cfg, tu_tiny, in, 2, N, &f, &err) != K25_OK)
        fail_msg("%s", err.msg);
    assert_true(f->kl_max < 1e-9);
    assert_true(f->top1_agreement == 1.0 && f->token_agreement == 1.0);
    k25_fidelity_free(f);
    free(f);
    for (int i = 0; i < 2; i++)
        free(in[i].ids);
}

/* The degraded model is the first ceil(0.3 * 4) = 2 layers + norm + head: deterministic, not the full model. */
static void test_degraded_model(void **state)
{
    (void)state;
    const char *ids[] = {"d0", "d1", "d2"};
    enum { N = 12 };
    int32_t full[3][16], deg[3][16], deg2[3][16], cut[3][16];
    float mf[3][16], md[3][16], md2[3][16], mc[3][16];
    struct k25_config cfg = cfg_base();
    run_tokens(&cfg, tu_tiny, ids, 3, N, full, mf, false);
    struct k25_config dc = degraded_cfg();
    run_tokens(&dc, tu_tiny, ids, 3, N, deg, md, true);
    run_tokens(&dc, tu_tiny, ids, 3, N, deg2, md2, true);
    for (int i = 0; i < 3; i++) /* deterministic */
        assert_memory_equal(deg[i], deg2[i], sizeof(int32_t) * N);
    int differ = 0;
    for (int i = 0; i < 3; i++)
        differ += memcmp(full[i], deg[i], sizeof(int32_t) * N) != 0;
    assert_int_equal(differ, 3);

    /* reference: an engine serving the same weights with n_layers = 2 (a shallow copy of the model) */
    struct k25_model cutm = *tu_tiny;
    cutm.shape.n_layers = 2;
    run_tokens(&cfg, &cutm, ids, 3, N, cut, mc, false);
    for (int i = 0; i < 3; i++) {
        struct k25_tok_cmp cmp;
        k25_tok_compare(cut[i], mc[i], N, deg[i], md[i], N, K25_TOK_TAU, &cmp);
        assert_true(cmp.pass);
    }

    /* degraded and full requests in one step: each as when alone */
    struct k25_error err;
    cfg = cfg_base();
    cfg.breaker_enabled = true;
    cfg.max_batch_size = 2; /* d0 alone fills half the batch: busy counts 0.5 of each step */
    cfg.breaker_busy_threshold = 0.4;
    cfg.breaker_busy_seconds = 0.05;
    cfg.breaker_memory_threshold = 1.0;
    k25_engine_t *e = create(&cfg, &err);
    g_now = 9000000000ull;
    k25_engine_set_clock(e, fake_clock, NULL);
    k25_engine_set_step_hook(e, busy_hook, NULL);
    int hf, hd;
    submit_ok(e, "d0", K25_PRIORITY_STANDARD, N, &hf); /* before the breaker opens: full */
    g_step_ns = 30 * 1000000ull;
    for (int i = 0; i < 4 && !breaker_open(e); i++)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_true(breaker_open(e));
    submit_ok(e, "d1", K25_PRIORITY_STANDARD, N, &hd);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    const struct k25_result *rf = k25_engine_result(e, hf), *rd = k25_engine_result(e, hd);
    assert_false(rf->degraded);
    assert_true(rd->degraded);
    struct k25_tok_cmp cmp;
    k25_tok_compare(full[0], mf[0], N, rf->output_ids, rf->margins, rf->n_output, K25_TOK_TAU, &cmp);
    assert_true(cmp.pass);
    k25_tok_compare(deg[1], md[1], N, rd->output_ids, rd->margins, rd->n_output, K25_TOK_TAU, &cmp);
    assert_true(cmp.pass);
    k25_engine_destroy(e);
}

/* ---- group commit (issue 17): one fsync for many records, durable before acknowledged */

static int g_fsyncs;             /* fsyncs through count_fsync */
static int g_fsync_sleep_us;     /* each one takes this long (a slow disk) */
static long g_durable_size = -1; /* the file's size at the last successful fsync: what a power cut keeps */

static int count_fsync(int fd, void *user)
{
    (void)user;
    if (g_fsync_sleep_us)
        usleep((useconds_t)g_fsync_sleep_us);
    if (g_fail_fsync) {
        g_fail_fsync--;
        errno = EIO;
        return -1;
    }
    g_fsyncs++;
    struct stat st;
    if (fstat(fd, &st) == 0)
        g_durable_size = (long)st.st_size;
    return fsync(fd);
}

static struct k25_request mkreq(const char *id, int32_t *toks, int n)
{
    for (int i = 0; i < n; i++)
        toks[i] = 32 + (int32_t)((strlen(id) * 31u + (unsigned)id[strlen(id) - 1] * 7u + (unsigned)i * 13u) % 90);
    return (struct k25_request){.id = id, .input_ids = toks, .n_input = n, .max_new_tokens = 2};
}

struct appender {
    struct k25_spill_log *lg;
    char id[16];
    int rc;
};

static void *append_one(void *arg)
{
    struct appender *a = arg;
    int32_t toks[8];
    struct k25_request r = mkreq(a->id, toks, 8);
    uint64_t seq, lsn;
    struct k25_error err;
    a->rc = k25_spill_append(a->lg, &r, &seq, &lsn, &err);
    if (a->rc == K25_OK)
        a->rc = k25_spill_sync(a->lg, lsn, &err);
    return NULL;
}

/* Concurrent appenders share fsyncs (leader/follower); a failed fsync fails every record it covered. */
static void test_group_commit_log(void **state)
{
    (void)state;
    const char *dir = spill_dir("group");
    struct k25_spill_io io = {NULL, count_fsync, NULL};
    struct k25_spill_log lg;
    struct k25_spill_replay rep;
    struct k25_error err;
    enum { T = 8 };
    g_fsyncs = 0;
    g_fsync_sleep_us = 20000; /* 20 ms per fsync: the others arrive while the first one runs */
    assert_int_equal(k25_spill_open(&lg, dir, &io, &rep, &err), K25_OK);
    k25_spill_replay_free(&rep);
    pthread_t th[T];
    struct appender ap[T];
    for (int i = 0; i < T; i++) {
        ap[i] = (struct appender){&lg, "", -1};
        snprintf(ap[i].id, sizeof(ap[i].id), "c%d", i);
        assert_int_equal(pthread_create(&th[i], NULL, append_one, &ap[i]), 0);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(ap[i].rc, K25_OK);
    }
    assert_true(g_fsyncs >= 1 && g_fsyncs < T); /* shared: one per record would be T */
    assert_int_equal(lg.n_fsyncs, g_fsyncs);
    g_fsync_sleep_us = 0;

    /* two records written, the fsync for the second fails: both are cut off, both callers told */
    int32_t toks[8];
    struct k25_request ra = mkreq("la", toks, 8);
    uint64_t sa, la, sb, lb, sc, lc;
    const long before = file_size(lg.path);
    assert_int_equal(k25_spill_append(&lg, &ra, &sa, &la, &err), K25_OK);
    struct k25_request rb = mkreq("lb", toks, 8);
    assert_int_equal(k25_spill_append(&lg, &rb, &sb, &lb, &err), K25_OK);
    g_fail_fsync = 1;
    assert_int_equal(k25_spill_sync(&lg, lb, &err), K25_EIO);
    assert_non_null(strstr(err.msg, "fsync failed"));
    assert_int_equal(k25_spill_sync(&lg, la, &err), K25_EIO); /* covered by the same failed fsync */
    assert_int_equal(file_size(lg.path), before);
    k25_spill_retire(&lg, 2);
    struct k25_request rc_ = mkreq("lc", toks, 8);
    assert_int_equal(k25_spill_append(&lg, &rc_, &sc, &lc, &err), K25_OK);
    assert_true(lc > lb); /* positions are never reused */
    assert_int_equal(k25_spill_sync(&lg, lc, &err), K25_OK);
    assert_int_equal(k25_spill_sync(&lg, la, &err), K25_EIO); /* still lost, even below the durable end */
    k25_spill_close(&lg);

    /* what comes back: the T concurrent records and lc, not la or lb */
    assert_int_equal(k25_spill_open(&lg, dir, NULL, &rep, &err), K25_OK);
    assert_int_equal(rep.n_pend, T + 1);
    assert_string_equal(rep.pend[T].id, "lc");
    for (int i = 0; i < rep.n_pend; i++)
        assert_true(strcmp(rep.pend[i].id, "la") != 0 && strcmp(rep.pend[i].id, "lb") != 0);
    k25_spill_replay_free(&rep);
    k25_spill_close(&lg);
}

/* k25_engine_submit_batch: one fsync per batch; a failed fsync rejects every request of the batch. */
static void test_group_commit_engine(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 2;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("gce"));
    struct k25_spill_io io = {bad_write, count_fsync, NULL};
    struct k25_error err, errs[6];
    k25_engine_t *e = NULL;
    assert_int_equal(k25_engine_create_io(&cfg, tu_tiny, &io, &e, &err), K25_OK);
    const char *ids[6] = {"g0", "g1", "g2", "g3", "g4", "g5"};
    int32_t toks[6][8];
    struct k25_request reqs[6];
    for (int i = 0; i < 6; i++)
        reqs[i] = mkreq(ids[i], toks[i], 8);
    int h[6], rcs[6];
    g_fsyncs = 0;
    assert_int_equal(k25_engine_submit_batch(e, reqs, 6, h, rcs, errs), K25_OK);
    assert_int_equal(g_fsyncs, 1); /* six records, one fsync */
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.spill_fsyncs, 1);
    assert_int_equal(st.n_waiting_memory, 2);
    assert_int_equal(st.n_waiting_spill, 4); /* routed in order, as six submits would be */
    for (int i = 0; i < 6; i++)
        assert_int_equal(rcs[i], K25_OK);
    assert_false(k25_engine_result(e, h[1])->spilled);
    assert_true(k25_engine_result(e, h[2])->spilled);

    /* the batch's fsync fails: all of it rejected with the reason, no handle used */
    const char *ids2[3] = {"x0", "x1", "x2"};
    for (int i = 0; i < 3; i++)
        reqs[i] = mkreq(ids2[i], toks[i], 8);
    g_fail_fsync = 1;
    assert_int_equal(k25_engine_submit_batch(e, reqs, 3, h, rcs, errs), K25_EIO);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rcs[i], K25_EIO);
        assert_int_equal(h[i], -1);
        assert_non_null(strstr(errs[i].msg, "fsync failed"));
    }
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.n_waiting, 6);

    /* a write failing in the middle: only that request is rejected; the others share one fsync */
    const char *ids3[3] = {"y0", "y1", "y2"};
    for (int i = 0; i < 3; i++)
        reqs[i] = mkreq(ids3[i], toks[i], 8);
    g_fsyncs = 0;
    assert_int_equal(k25_engine_submit_batch(e, reqs, 1, h, rcs, errs), K25_OK);
    g_fail_write = 1;
    assert_int_equal(k25_engine_submit_batch(e, reqs + 1, 1, h + 1, rcs + 1, errs + 1), K25_EIO);
    assert_non_null(strstr(errs[1].msg, strerror(ENOSPC)));
    g_fail_write = 0;
    assert_int_equal(k25_engine_submit_batch(e, reqs + 2, 1, h + 2, rcs + 2, errs + 2), K25_OK);
    assert_int_equal(h[2], h[0] + 1); /* the rejected one used no handle */
    k25_engine_destroy(e); /* crash: nothing ran */

    /* replay: the six of the first batch and y0, y2 - never the rejected ones */
    e = create(&cfg, &err);
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 8);
    for (int i = 0; i < ri.n_replayed; i++) {
        const char *id = k25_engine_result(e, ri.handles[i])->id;
        assert_true(id[0] != 'x' && strcmp(id, "y1") != 0);
    }
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    k25_engine_destroy(e);
}

/* A crash at the moment a FINISH is reported: only what was fsync'd survives. */
struct crashcheck {
    char logpath[1100];
    char copydir[1100];
    int n_finish, n_bad;
    int fsyncs_at_finish[8];
};

static void on_finish_crash(const struct k25_event *ev, void *user)
{
    struct crashcheck *c = user;
    if (ev->type != K25_EV_FINISH)
        return;
    if (c->n_finish < 8)
        c->fsyncs_at_finish[c->n_finish] = g_fsyncs;
    c->n_finish++;
    /* copy the durable prefix of the log and read it back as a restart would */
    char dst[1200];
    mkdir(c->copydir, 0700);
    snprintf(dst, sizeof(dst), "%s/queue.log", c->copydir);
    FILE *in = fopen(c->logpath, "rb"), *out = fopen(dst, "wb");
    assert_non_null(in);
    assert_non_null(out);
    for (long i = 0; i < g_durable_size; i++) {
        int ch = fgetc(in);
        if (ch == EOF)
            break;
        fputc(ch, out);
    }
    fclose(in);
    fclose(out);
    struct k25_spill_log lg;
    struct k25_spill_replay rep;
    struct k25_error err;
    assert_int_equal(k25_spill_open(&lg, c->copydir, NULL, &rep, &err), K25_OK);
    for (int i = 0; i < rep.n_pend; i++)
        c->n_bad += !strcmp(rep.pend[i].id, ev->req_id); /* it would run twice */
    k25_spill_replay_free(&rep);
    k25_spill_close(&lg);
}

/* Done records are durable before FINISH; requests ending in one step share one fsync. */
static void test_done_durable_before_finish(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("donedur"));
    struct k25_spill_io io = {NULL, count_fsync, NULL};
    struct k25_error err;
    k25_engine_t *e = NULL;
    assert_int_equal(k25_engine_create_io(&cfg, tu_tiny, &io, &e, &err), K25_OK);
    struct crashcheck c = {0};
    snprintf(c.logpath, sizeof(c.logpath), "%s/queue.log", cfg.queue_spill_dir);
    snprintf(c.copydir, sizeof(c.copydir), "%s/donedur-crash", tu_dir);
    k25_engine_set_event_cb(e, on_finish_crash, &c);
    const char *ids[3] = {"dd0", "dd1", "dd2"};
    int32_t toks[3][8];
    struct k25_request reqs[3];
    int h[3], rcs[3];
    for (int i = 0; i < 3; i++)
        reqs[i] = mkreq(ids[i], toks[i], 8); /* same length, same max_new: they end in the same step */
    g_fsyncs = 0;
    assert_int_equal(k25_engine_submit_batch(e, reqs, 3, h, rcs, NULL), K25_OK);
    assert_int_equal(g_fsyncs, 1);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_int_equal(c.n_finish, 3);
    assert_int_equal(c.n_bad, 0);
    assert_int_equal(g_fsyncs, 2); /* one for the three done records */
    assert_int_equal(c.fsyncs_at_finish[0], 2);
    assert_int_equal(file_size(c.logpath), 0); /* compacted */

    /* the done records' fsync fails once: written again and synced before FINISH */
    c.n_finish = 0;
    assert_int_equal(k25_engine_submit(e, &reqs[0], &h[0], &err), K25_OK);
    g_fail_fsync = 1;
    struct k25_engine_stats st;
    for (int i = 0; i < 100 && c.n_finish == 0; i++)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_int_equal(c.n_finish, 1);
    assert_int_equal(g_fail_fsync, 0);
    assert_int_equal(c.n_bad, 0);
    k25_engine_get_stats(e, &st);
    assert_int_equal(file_size(c.logpath), 0);
    k25_engine_destroy(e);
}

/* ---- degraded requests: their own queue and slots, admission against degraded_ttft_ms */

struct admits {
    char ids[64][16];
    int n;
};

static void on_admit(const struct k25_event *ev, void *user)
{
    struct admits *a = user;
    if (ev->type == K25_EV_ADMIT && a->n < 64)
        snprintf(a->ids[a->n++], 16, "%s", ev->req_id);
}

static int admit_pos(const struct admits *a, const char *id)
{
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->ids[i], id))
            return i;
    return -1;
}

/*
 * One scenario, run twice for determinism: a standard backlog, the breaker
 * opens, degraded arrivals go ahead of the backlog in their own slots
 * (FIFO among them), and once their service time is known arrivals that
 * could not get a first token within degraded_ttft_ms are rejected with a
 * reason - high priority never.  out: admission order and outcome string.
 */
static void degraded_scenario(struct admits *ad, char *outcome, size_t n_out, int32_t tokens[2][8])
{
    struct k25_config cfg = cfg_base();
    cfg.breaker_enabled = true;
    cfg.breaker_busy_threshold = 0.5;
    cfg.breaker_busy_seconds = 0.05;
    cfg.breaker_memory_threshold = 1.0;
    cfg.max_batch_size = 2; /* one degraded slot */
    cfg.degraded_ttft_ms = 400;
    struct k25_error err;
    g_now = 20000000000ull;
    k25_engine_t *e = create(&cfg, &err);
    k25_engine_set_clock(e, fake_clock, NULL);
    k25_engine_set_step_hook(e, busy_hook, NULL);
    k25_engine_set_event_cb(e, on_admit, ad);
    g_step_ns = 10 * 1000000ull; /* 10 ms a step */
    int h, hd[2], hr = -1, hh = -1;
    char id[16];
    for (int i = 0; i < 6; i++) { /* the standard backlog: 2 run, 4 wait */
        snprintf(id, sizeof(id), "s%d", i);
        submit_ok(e, id, K25_PRIORITY_STANDARD, 12, &h);
    }
    for (int i = 0; i < 8 && !breaker_open(e); i++)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_true(breaker_open(e));
    submit_ok(e, "dA", K25_PRIORITY_STANDARD, 4, &hd[0]);
    submit_ok(e, "dB", K25_PRIORITY_STANDARD, 4, &hd[1]);
    assert_true(k25_engine_result(e, hd[0])->degraded);
    /* dA runs at the next step although four standard requests wait ahead of it */
    assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_true(admit_pos(ad, "dA") >= 0);
    assert_int_equal(admit_pos(ad, "s2"), -1);
    assert_int_equal(k25_engine_result(e, hd[1])->state, K25_REQ_WAITING);
    for (int i = 0; i < 100 && k25_engine_result(e, hd[1])->state != K25_REQ_COMPLETED; i++)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, hd[1])->state, K25_REQ_COMPLETED);
    assert_true(admit_pos(ad, "dB") > admit_pos(ad, "dA")); /* FIFO among degraded */
    for (int i = 0; i < 2; i++)
        memcpy(tokens[i], k25_engine_result(e, hd[i])->output_ids, sizeof(int32_t) * 4);
    /* a degraded request takes ~5 steps (50 ms): with 400 ms, about 7 can wait; the rest are turned away */
    int accepted = 0, rejected = 0;
    size_t o = 0;
    submit_ok(e, "dH", K25_PRIORITY_HIGH, 4, &hh); /* ahead of the others (a later high one would delay them) */
    for (int i = 0; i < 16; i++) {
        snprintf(id, sizeof(id), "d%d", i);
        submit_ok(e, id, K25_PRIORITY_STANDARD, 4, &h);
        const struct k25_result *r = k25_engine_result(e, h);
        if (r->state == K25_REQ_REJECTED) {
            rejected++;
            hr = h;
        } else {
            accepted++;
        }
        o += (size_t)snprintf(outcome + o, n_out - o, "%c", r->state == K25_REQ_REJECTED ? 'R' : 'A');
    }
    submit_ok(e, "dH2", K25_PRIORITY_HIGH, 4, &h);
    assert_int_equal(k25_engine_result(e, h)->state, K25_REQ_WAITING); /* high: never turned away */
    k25_engine_cancel(e, h, "test: it would delay the others past their promise");
    assert_true(accepted >= 2 && rejected >= 2);
    assert_non_null(strstr(k25_engine_result(e, hr)->reason, "degraded queue full"));
    assert_non_null(strstr(k25_engine_result(e, hr)->reason, "degraded_ttft_ms 400"));
    struct k25_engine_stats st;
    k25_engine_get_stats(e, &st);
    assert_int_equal(st.rejected_degraded, rejected);
    assert_int_equal(st.n_waiting_degraded, accepted + 1);
    /* the accepted ones meet the SLA on the fake clock; dH goes first among them */
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    assert_true(admit_pos(ad, "dH") < admit_pos(ad, "d0"));
    for (int hh2 = 0; hh2 < 64; hh2++) {
        const struct k25_result *r = k25_engine_result(e, hh2);
        if (!r || !r->degraded || r->state != K25_REQ_COMPLETED || !strcmp(r->id, "dH2"))
            continue; /* dH2 came after the others were promised their slots */
        double ttft_ms = (double)(r->prefill_done_t_ns - r->submit_t_ns) / 1e6;
        if (ttft_ms > cfg.degraded_ttft_ms)
            fail_msg("%s: first token after %.0f ms", r->id, ttft_ms);
    }
    assert_int_equal(admit_pos(ad, "s5") > admit_pos(ad, "s4"), 1); /* FIFO among standard */
    k25_engine_destroy(e);
}

static void test_degraded_queue(void **state)
{
    (void)state;
    struct admits a1 = {0}, a2 = {0};
    char o1[32], o2[32];
    int32_t t1[2][8] = {{0}}, t2[2][8] = {{0}};
    degraded_scenario(&a1, o1, sizeof(o1), t1);
    degraded_scenario(&a2, o2, sizeof(o2), t2);
    /* the same arrivals on the same clock: the same admissions, rejections and tokens */
    assert_string_equal(o1, o2);
    assert_int_equal(a1.n, a2.n);
    for (int i = 0; i < a1.n; i++)
        assert_string_equal(a1.ids[i], a2.ids[i]);
    assert_memory_equal(t1, t2, sizeof(t1));
}

/* ---- a full disk (issue 33): answered requests never run twice */

/* Fills the filesystem holding dir with a file until ENOSPC (another writer filling the disk). */
static void fill_disk(const char *dir)
{
    char path[700];
    snprintf(path, sizeof(path), "%.600s/filler", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    char blk[4096];
    memset(blk, 'f', sizeof(blk));
    for (;;) { /* bounded by the filesystem's size (512 KiB) */
        ssize_t w = write(fd, blk, sizeof(blk));
        if (w <= 0) {
            if (write(fd, blk, 1) <= 0) /* the last partial page */
                break;
        }
    }
    close(fd);
}

/*
 * The case on a real 512 KiB tmpfs: requests are accepted, then the disk fills up (another
 * file), and they all finish: their done records must still be written (room reserved at append),
 * so after a restart nothing is replayed; a new request is refused, naming the lack of room.
 * Needs root (mount): skipped with a message otherwise.
 */
static char g_mnt[600];

static void test_full_disk_tmpfs(void **state)
{
    (void)state;
    char mnt[600];
    snprintf(mnt, sizeof(mnt), "%s/tmpfs", tu_dir);
    assert_int_equal(mkdir(mnt, 0700), 0);
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "mount -t tmpfs -o size=512k k25test '%s' 2>/dev/null", mnt);
    snprintf(g_mnt, sizeof(g_mnt), "%s", mnt); /* main unmounts it whatever happens here */
    if (geteuid() != 0 || system(cmd) != 0) {
        print_message("test_full_disk_tmpfs: skipped: cannot mount a tmpfs here (needs root); "
                      "test_owed_done_records covers the retry path without it\n");
        return;
    }
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 64;
    cfg.max_batch_size = 4;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s/spill", mnt);
    struct k25_error err;
    k25_engine_t *e = create(&cfg, &err);
    int h[40];
    char ids[40][16];
    for (int i = 0; i < 40; i++) {
        snprintf(ids[i], sizeof(ids[i]), "d%d", i);
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, 2, &h[i]);
    }
    fill_disk(mnt);
    /* what the reservation's last page still holds is accepted; then a clear refusal */
    int h2 = -7, rc = K25_OK, n_late = 0;
    for (; n_late < 200 && rc == K25_OK; n_late++) {
        char id[16];
        snprintf(id, sizeof(id), "late%d", n_late);
        h2 = -7;
        rc = submit(e, id, K25_PRIORITY_STANDARD, 2, &h2, &err);
    }
    assert_int_equal(rc, K25_EIO);
    assert_int_equal(h2, -7);
    char refusal[sizeof(err.msg)];
    snprintf(refusal, sizeof(refusal), "%s", err.msg);
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    for (int i = 0; i < 40; i++)
        assert_int_equal(k25_engine_result(e, h[i])->state, K25_REQ_COMPLETED);
    k25_engine_destroy(e);
    e = create(&cfg, &err);
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    int replayed = ri.n_replayed;
    k25_engine_destroy(e);
    assert_int_equal(replayed, 0); /* none of the answered requests runs twice */
    if (!strstr(refusal, "no room for its record and its done record"))
        fail_msg("the refusal does not say why: %s", refusal);
}

/* Done records that fail (a write error, not a full disk): retried, and at shutdown the compaction
 * drops the answered requests, so a restart replays none of them. */
static int g_fail_done;
static ssize_t done_failing_write(int fd, const void *buf, size_t n, void *user)
{
    (void)user;
    if (g_fail_done && n == 12 + 9) { /* a done record: header + type + seq */
        errno = EIO;
        return -1;
    }
    return write(fd, buf, n);
}

static void test_owed_done_records(void **state)
{
    (void)state;
    struct k25_config cfg = cfg_base();
    cfg.queue_memory_capacity = 1;
    snprintf(cfg.queue_spill_dir, sizeof(cfg.queue_spill_dir), "%s", spill_dir("owed"));
    struct k25_error err;
    struct k25_spill_io io = {done_failing_write, NULL, NULL};
    k25_engine_t *e = NULL;
    assert_int_equal(k25_engine_create_io(&cfg, tu_tiny, &io, &e, &err), K25_OK);
    int h[4];
    const char *ids[] = {"o0", "o1", "o2", "o3"};
    for (int i = 0; i < 4; i++)
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, 2, &h[i]);
    g_fail_done = 1;
    while (k25_engine_result(e, h[1])->state != K25_REQ_COMPLETED) /* o0, o1 end: their done records fail */
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    g_fail_done = 0;
    assert_int_equal(k25_engine_run(e, &err), K25_OK); /* o2, o3: fine, and the owed ones are retried */
    k25_engine_destroy(e);
    e = create(&cfg, &err);
    struct k25_replay_info ri;
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 0);
    k25_engine_destroy(e);

    /* still failing at shutdown: the compaction rewrites the log without them */
    assert_int_equal(k25_engine_create_io(&cfg, tu_tiny, &io, &e, &err), K25_OK);
    for (int i = 0; i < 2; i++)
        submit_ok(e, ids[i], K25_PRIORITY_STANDARD, 2, &h[i]);
    submit_ok(e, "waits", K25_PRIORITY_STANDARD, 60, &h[2]); /* still running when o1 ends */
    g_fail_done = 1;
    while (k25_engine_result(e, h[1])->state != K25_REQ_COMPLETED)
        assert_int_equal(k25_engine_step(e, &err), K25_OK);
    assert_int_equal(k25_engine_result(e, h[2])->state == K25_REQ_COMPLETED, false);
    k25_engine_destroy(e); /* "waits" did not finish: it is kept; o0, o1 were answered: dropped */
    g_fail_done = 0;
    e = create(&cfg, &err);
    k25_engine_replay_info(e, &ri);
    assert_int_equal(ri.n_replayed, 1);
    assert_string_equal(k25_engine_result(e, ri.handles[0])->id, "waits");
    assert_int_equal(k25_engine_run(e, &err), K25_OK);
    k25_engine_destroy(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_capacity_reject),
        cmocka_unit_test(test_spill_order),
        cmocka_unit_test(test_replay_after_crash),
        cmocka_unit_test(test_torn_record),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_breaker_hysteresis),
        cmocka_unit_test(test_breaker_counts_occupancy),
        cmocka_unit_test(test_degraded_model),
        cmocka_unit_test(test_force_degraded_fidelity),
        cmocka_unit_test(test_group_commit_log),
        cmocka_unit_test(test_group_commit_engine),
        cmocka_unit_test(test_done_durable_before_finish),
        cmocka_unit_test(test_degraded_queue),
        cmocka_unit_test(test_full_disk_tmpfs),
        cmocka_unit_test(test_owed_done_records),
    };
    int rc = tu_model_setup(NULL);
    if (rc == 0 && tu_group_setup(NULL) != 0)
        rc = -1;
    if (rc != 0)
        return 1;
    rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_mnt[0]) {
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "umount -l '%s' 2>/dev/null", g_mnt); /* -l: even when a failed test left a file open */
        if (system(cmd) != 0) { /* not mounted (the mount was refused) */
        }
    }
    tu_group_teardown(NULL);
    tu_model_teardown(NULL);
    return rc;
}
