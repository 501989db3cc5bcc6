/*
 * test_h5store.c - the HDF5 layer: round trips of attributes, tables and
 * arrays; atomic commit (nothing under the final name before commit, no
 * temporary left after abort); refusal of files that are not k25 files.
 */
#include "testutil.h"

#include "k25util.h"

#include <signal.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct row {
    char id[16];
    int64_t n;
    double t_ms;
    int32_t state;
    float f;
    uint8_t flag;
};

static const struct k25_h5_col cols[] = {
    {"id", K25_H5_STR, offsetof(struct row, id), 16},
    {"n", K25_H5_I64, offsetof(struct row, n), 0},
    {"t_ms", K25_H5_F64, offsetof(struct row, t_ms), 0},
    {"state", K25_H5_I32, offsetof(struct row, state), 0},
    {"f", K25_H5_F32, offsetof(struct row, f), 0},
    {"flag", K25_H5_U8, offsetof(struct row, flag), 0},
};

static bool exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

static void test_round_trip(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[256];
    snprintf(path, sizeof(path), "%s/run.h5", dir);
    struct k25_h5 h;
    struct k25_error err;
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    assert_false(exists(path)); /* only the temporary exists while writing */
    assert_true(exists(h.tmp_path));

    enum { N = 5000 };
    struct row *rows = calloc(N, sizeof(*rows));
    for (int i = 0; i < N; i++) {
        snprintf(rows[i].id, sizeof(rows[i].id), "r%d", i);
        rows[i].n = (int64_t)i * 1000003;
        rows[i].t_ms = i * 0.25;
        rows[i].state = i % 4;
        rows[i].f = (float)i / 3.0f;
        rows[i].flag = (uint8_t)(i & 1);
    }
    double arr[7] = {1, 2, 3, 4.5, -1e300, 0, 7};
    hid_t g = k25_h5_group(&h, "/summary", &err);
    assert_true(g >= 0);
    assert_int_equal(k25_h5_attr_f64(g, "ttft_p50_ms", 12.5, &err), K25_OK);
    assert_int_equal(k25_h5_attr_i64(g, "requests", 42, &err), K25_OK);
    assert_int_equal(k25_h5_attr_str(g, "note", "héllo", &err), K25_OK);
    H5Gclose(g);
    assert_int_equal(k25_h5_write_table(h.file, "requests", cols, 6, sizeof(struct row), rows, N, &err), K25_OK);
    assert_int_equal(k25_h5_write_table(h.file, "empty", cols, 6, sizeof(struct row), NULL, 0, &err), K25_OK);
    assert_int_equal(k25_h5_write_array(h.file, "arr", K25_H5_F64, arr, 7, &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_true(exists(path));
    assert_false(exists(h.tmp_path));

    struct k25_h5 r;
    if (k25_h5_open_read(&r, path, "run", &err) != K25_OK)
        fail_msg("%s", err.msg);
    g = k25_h5_group(&r, "/summary", &err);
    double v;
    int64_t iv;
    char *s;
    assert_int_equal(k25_h5_get_attr_f64(g, "ttft_p50_ms", &v, &err), K25_OK);
    assert_true(v == 12.5);
    assert_int_equal(k25_h5_get_attr_i64(g, "requests", &iv, &err), K25_OK);
    assert_int_equal(iv, 42);
    assert_int_equal(k25_h5_get_attr_str(g, "note", &s, &err), K25_OK);
    assert_string_equal(s, "héllo");
    free(s);
    assert_int_equal(k25_h5_get_attr_f64(g, "nope", &v, &err), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "nope"));
    H5Gclose(g);

    void *back;
    size_t n;
    assert_int_equal(k25_h5_read_table(r.file, "requests", cols, 6, sizeof(struct row), K25_H5_ANY_COUNT, &back, &n,
                                       &err), K25_OK);
    assert_int_equal(n, N);
    assert_memory_equal(back, rows, sizeof(struct row) * N);
    free(back);
    assert_int_equal(k25_h5_read_table(r.file, "empty", cols, 6, sizeof(struct row), 0, &back, &n, &err), K25_OK);
    assert_int_equal(n, 0);
    free(back);
    /* a column the table lacks is named */
    struct k25_h5_col extra[] = {{"missing_col", K25_H5_F64, 0, 0}};
    assert_int_equal(k25_h5_read_table(r.file, "requests", extra, 1, 8, K25_H5_ANY_COUNT, &back, &n, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "missing_col"));
    void *a;
    assert_int_equal(k25_h5_read_array(r.file, "arr", K25_H5_F64, 7, &a, &n, &err), K25_OK);
    assert_int_equal(n, 7);
    assert_memory_equal(a, arr, sizeof(arr));
    free(a);
    k25_h5_close(&r);

    /* wrong kind */
    assert_int_equal(k25_h5_open_read(&r, path, "attn-bench", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "expected 'attn-bench'"));
    free(rows);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void test_abort_and_bad_files(void **state)
{
    (void)state;
    char *dir = tu_tmpdir(), path[256], bad[256];
    snprintf(path, sizeof(path), "%s/x.h5", dir);
    struct k25_h5 h, r;
    struct k25_error err;
    assert_int_equal(k25_h5_create(&h, path, "run", &err), K25_OK);
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s", h.tmp_path);
    k25_h5_abort(&h);
    assert_false(exists(tmp));
    assert_false(exists(path));

    /* missing directory: the error says why (bad input: K25_EINVAL, exit 2) */
    snprintf(bad, sizeof(bad), "%s/no/such/dir/x.h5", dir);
    assert_int_equal(k25_h5_create(&h, bad, "run", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "No such file or directory"));
    assert_non_null(strstr(err.msg, bad));
    /* a directory where the file should be: refused before anything is written */
    assert_int_equal(k25_h5_create(&h, dir, "run", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "is a directory"));
    snprintf(bad, sizeof(bad), "%s.tmp.%ld", dir, (long)getpid());
    assert_false(exists(bad));
    /* a device: renaming onto it would replace it */
    assert_int_equal(k25_h5_create(&h, "/dev/null", "run", &err), K25_EINVAL);
    assert_non_null(strstr(err.msg, "not a regular file"));

    /* not HDF5 */
    snprintf(bad, sizeof(bad), "%s/text.h5", dir);
    tu_write_file(bad, "this is not hdf5\n");
    assert_int_equal(k25_h5_open_read(&r, bad, NULL, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "not an HDF5 file"));
    /* missing */
    snprintf(bad, sizeof(bad), "%s/none.h5", dir);
    assert_int_equal(k25_h5_open_read(&r, bad, NULL, &err), K25_ENOTFOUND);

    /* HDF5 but not ours */
    snprintf(bad, sizeof(bad), "%s/foreign.h5", dir);
    hid_t f = H5Fcreate(bad, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    assert_true(f >= 0);
    H5Fclose(f);
    assert_int_equal(k25_h5_open_read(&r, bad, NULL, &err), K25_EFORMAT);
    assert_non_null(strstr(err.msg, "not a k25 file"));

    /* a future schema version */
    snprintf(bad, sizeof(bad), "%s/future.h5", dir);
    assert_int_equal(k25_h5_create(&h, bad, "run", &err), K25_OK);
    assert_int_equal(k25_h5_attr_i64(h.meta, "schema_version", 99, &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_int_equal(k25_h5_open_read(&r, bad, "run", &err), K25_EUNSUPPORTED);
    assert_non_null(strstr(err.msg, "schema version 99"));

    /* a truncated file */
    snprintf(bad, sizeof(bad), "%s/trunc.h5", dir);
    assert_int_equal(k25_h5_create(&h, bad, "run", &err), K25_OK);
    double big[4096] = {0};
    assert_int_equal(k25_h5_write_array(h.file, "big", K25_H5_F64, big, 4096, &err), K25_OK);
    assert_int_equal(k25_h5_commit(&h, &err), K25_OK);
    assert_int_equal(truncate(bad, 1000), 0);
    assert_true(k25_h5_open_read(&r, bad, "run", &err) != K25_OK);

    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

/* Whose temporaries a cleanup may remove: a live writer keeps NAME.tmp.PID; a zombie (killed,
 * not yet reaped: a sweep resumed right after a kill sees its children so) and a dead pid do not. */
static void test_tmp_writer_alive(void **state)
{
    (void)state;
    char name[64];
    pid_t live = fork();
    assert_true(live >= 0);
    if (live == 0) {
        pause();
        _exit(0);
    }
    snprintf(name, sizeof(name), "rep-0.json.tmp.%ld", (long)live);
    assert_true(k25_tmp_writer_alive(name));
    assert_int_equal(kill(live, SIGKILL), 0);
    /* wait until it is a zombie (not reaped yet): waitid with WNOWAIT returns once it has exited and
     * leaves it unreaped - the event itself, no polling; /proc/PID/stat then says Z */
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    assert_int_equal(waitid(P_PID, (id_t)live, &si, WEXITED | WNOWAIT), 0);
    assert_int_equal(si.si_pid, live);
    bool zombie = false;
    {
        char path[64], buf[256] = "";
        snprintf(path, sizeof(path), "/proc/%ld/stat", (long)live);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(buf, 1, sizeof(buf) - 1, f);
            buf[n] = '\0';
            fclose(f);
            const char *rp = strrchr(buf, ')');
            zombie = rp && rp[2] == 'Z';
        }
    }
    assert_true(zombie);
    assert_false(k25_tmp_writer_alive(name)); /* killed, not reaped: stale */
    assert_int_equal(waitpid(live, NULL, 0), live);
    assert_false(k25_tmp_writer_alive(name)); /* gone */
    snprintf(name, sizeof(name), "rep-0.json.tmp.%ld", (long)getpid());
    assert_true(k25_tmp_writer_alive(name)); /* this process */
    assert_false(k25_tmp_writer_alive("rep-0.json.tmp.")); /* no pid */
    assert_false(k25_tmp_writer_alive("rep-0.json"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_abort_and_bad_files),
        cmocka_unit_test(test_tmp_writer_alive),
    };
    return cmocka_run_group_tests_name("h5store", tests, NULL, NULL);
}
