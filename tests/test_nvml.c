/*
 * test_nvml.c - GPU telemetry through NVML, against a scripted stand-in
 * library (tests/nvml/standin.c) that this test compiles into its own
 * temporary folder and hands to the real loader with K25_NVML_LIB
 * (util/nvml.c: dlopen + dlsym, k25's own declarations).  Checks: the
 * figures read through every entry point (units converted, GpuIdle not a
 * throttle, an entry point the library lacks is null, not 0); a failing
 * nvmlInit and a missing library are "not available" with the reason;
 * `k25 bench` samples it into /gpu_timeline, summary.gpu_utilization_p95,
 * GPU provenance at start and end, and warns when the SM clock moved or a
 * throttle reason was set; without NVML the figures are null with the reason.
 */
#include "testutil.h"

#include "harness.h"
#include "k25util.h"

#include <jansson.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static char g_lib[600];

static int setup(void **state)
{
    if (tu_group_setup(state) != 0)
        return -1;
    char cmd[2048], *out = NULL;
    snprintf(g_lib, sizeof(g_lib), "%s/libnvidia-ml.so.1", tu_dir);
    snprintf(cmd, sizeof(cmd), "cc -std=c11 -shared -fPIC -O1 -o %s tests/nvml/standin.c", g_lib);
    int st = tu_run(cmd, &out);
    if (st != 0)
        fprintf(stderr, "test_nvml: building the stand-in failed:\n%s\n", out ? out : "");
    free(out);
    return st == 0 ? 0 : -1;
}

static void test_loader_and_figures(void **state)
{
    (void)state;
    setenv("K25_NVML_LIB", g_lib, 1);
    setenv("K25_STANDIN_UTIL", "42", 1);
    setenv("K25_STANDIN_THROTTLE", "0", 1);
    unsetenv("K25_STANDIN_FAIL_INIT");
    struct k25_error err;
    k25_nvml_t *m = NULL;
    assert_int_equal(k25_nvml_open(&m, &err), K25_OK);
    assert_int_equal(k25_nvml_count(m), 1);
    struct k25_gpu_sample s;
    assert_int_equal(k25_nvml_sample(m, 0, &s), K25_OK);
    assert_true(fabs(s.util_gpu - 0.42) < 1e-12);
    assert_true(fabs(s.power_w - 350.0) < 1e-9);      /* milliwatts -> W */
    assert_true(fabs(s.power_limit_w - 700.0) < 1e-9);
    assert_int_equal(s.mem_total_bytes, 80LL << 30);
    assert_true(s.throttle_known);
    assert_int_equal(s.throttle_reasons, 0); /* GpuIdle alone is not a throttle */
    assert_true(s.pcie_rx_kbs == 2000 && s.pcie_tx_kbs == 1000);
    assert_int_equal(k25_nvml_sample(m, 1, &s), K25_EINVAL);
    json_t *p = k25_nvml_provenance(m);
    json_t *g = json_array_get(p, 0);
    assert_string_equal(json_string_value(json_object_get(g, "name")), "Stand-in H100");
    assert_string_equal(json_string_value(json_object_get(g, "driver_version")), "550.54.15");
    assert_string_equal(json_string_value(json_object_get(g, "cuda_driver_version")), "12.4");
    assert_true(json_number_value(json_object_get(g, "pcie_generation")) == 5);
    assert_true(json_is_true(json_object_get(g, "ecc_enabled")));
    /* the stand-in has no nvmlDeviceGetApplicationsClock: unknown, null, not 0 */
    assert_true(json_is_null(json_object_get(g, "applications_sm_clock_mhz")));
    json_decref(p);
    k25_nvml_close(m);
    /* nvmlInit fails: not available, with NVML's own message */
    setenv("K25_STANDIN_FAIL_INIT", "1", 1);
    assert_int_equal(k25_nvml_open(&m, &err), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "Driver Not Loaded"));
    unsetenv("K25_STANDIN_FAIL_INIT");
    /* no library at all */
    setenv("K25_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_int_equal(k25_nvml_open(&m, &err), K25_ENOTFOUND);
    assert_non_null(strstr(err.msg, "NVML not available"));
}

#define BENCH "bench --dataset datasets/gold/ci-small.jsonl --model tiny --filter 'input_length <= 512' " \
              "--decode-max-tokens 4 --threads 1 --requests 2 --quiet"

static void test_bench_telemetry(void **state)
{
    (void)state;
    char cmd[4096], js[600], h5[600], *out;
    snprintf(js, sizeof(js), "%s/gpu.json", tu_dir);
    snprintf(h5, sizeof(h5), "%s/gpu.h5", tu_dir);
    /* utilization 80% throughout; the SM clock alternating 1980 / 1500 MHz (moved); a power-cap throttle */
    snprintf(cmd, sizeof(cmd), "K25_NVML_LIB=%s K25_STANDIN_UTIL=80 K25_STANDIN_SM_CLOCKS=1980,1500 "
             "K25_STANDIN_THROTTLE=0x4 %s " BENCH " --out %s --json %s", g_lib, tu_k25(), h5, js);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "WARNING: the SM clock moved during the run; a clock throttle reason was set"));
    free(out);
    json_t *j = json_load_file(js, 0, NULL);
    assert_non_null(j);
    assert_true(fabs(json_number_value(k25_json_path(j, "summary.gpu_utilization_p95")) - 0.8) < 1e-12);
    assert_true(json_integer_value(k25_json_path(j, "summary.gpu.samples")) >= 2); /* at start and at stop */
    assert_true(json_is_true(k25_json_path(j, "summary.gpu.clocks_moved")));
    assert_int_equal(json_integer_value(k25_json_path(j, "summary.gpu.throttle_reasons")), 4);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(k25_json_path(j, "provenance.machine.gpu_nvml.start"), 0), "uuid")),
                        "GPU-00000000-1111-2222-3333-444444444444");
    assert_int_equal(json_array_size(k25_json_path(j, "provenance.machine.gpu_nvml.end")), 1);
    int64_t n = json_integer_value(k25_json_path(j, "summary.gpu.samples"));
    json_decref(j);
    hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
    assert_true(f >= 0);
    hid_t d = H5Dopen2(f, "/gpu_timeline", H5P_DEFAULT), sp = H5Dget_space(d);
    assert_int_equal(H5Sget_simple_extent_npoints(sp), n);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    /* read back (k25_trace_read): every sample, its figures, and the same summary from the rows */
    struct k25_trace t;
    struct k25_error err;
    assert_int_equal(k25_trace_read(h5, &t, &err), K25_OK);
    assert_string_equal(t.gpu_telemetry, "NVML");
    assert_int_equal(t.n_gpu, n);
    bool saw_1500 = false;
    for (size_t i = 0; i < t.n_gpu; i++) {
        assert_int_equal(t.gpu[i].dev, 0);
        assert_true(fabs(t.gpu[i].util_gpu - 0.8) < 1e-12);
        assert_true(t.gpu[i].throttle_known && t.gpu[i].throttle_reasons == 4);
        assert_true(fabs(t.gpu[i].power_w - 350.0) < 1e-9);
        saw_1500 |= t.gpu[i].sm_clock_mhz == 1500;
        assert_true(i == 0 || t.gpu[i].t_ns >= t.gpu[i - 1].t_ns);
    }
    assert_true(saw_1500);
    json_t *back = k25_gputel_rows_summary_json(t.gpu, t.n_gpu, NULL);
    assert_true(fabs(json_number_value(json_object_get(back, "gpu_utilization_p95")) - 0.8) < 1e-12);
    assert_true(json_is_true(json_object_get(back, "clocks_moved")));
    json_decref(back);
    k25_trace_free(&t);
    /* k25 inspect shows them; the report gives the check (n/a: a closed loop, with the value) */
    snprintf(cmd, sizeof(cmd), "%s inspect %s", tu_k25(), h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "GPU telemetry (/gpu_timeline)"));
    assert_non_null(strstr(out, "utilization P95 0.800, SM clock 1500..1980 MHz (MOVED)"));
    assert_non_null(strstr(out, "throttle reasons 0x4"));
    free(out);
    snprintf(cmd, sizeof(cmd), "%s inspect --json %s | jq -e '.gpu_timeline.gpu_utilization_p95 == 0.8 and "
                               ".gpu_timeline.samples == %lld'", tu_k25(), h5, (long long)n);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
    /* without NVML: null with the reason, no warning, the run succeeds */
    snprintf(cmd, sizeof(cmd), "K25_NVML_LIB=/nonexistent/libnvidia-ml.so.1 %s " BENCH " --out %s --json %s",
             tu_k25(), h5, js);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_null(strstr(out, "SM clock"));
    free(out);
    j = json_load_file(js, 0, NULL);
    assert_true(json_is_null(k25_json_path(j, "summary.gpu_utilization_p95")));
    assert_non_null(strstr(json_string_value(k25_json_path(j, "summary.gpu.reason")), "NVML not available"));
    assert_true(json_is_false(k25_json_path(j, "provenance.machine.gpu_nvml.available")));
    json_decref(j);
    /* read back: no rows, the reason; inspect says it; the report names it for the check, never OK */
    struct k25_trace t2;
    assert_int_equal(k25_trace_read(h5, &t2, &err), K25_OK);
    assert_int_equal(t2.n_gpu, 0);
    assert_non_null(strstr(t2.gpu_telemetry, "NVML not available"));
    k25_trace_free(&t2);
    snprintf(cmd, sizeof(cmd), "%s inspect %s", tu_k25(), h5);
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_non_null(strstr(out, "  none: NVML not available"));
    free(out);
    char rep[700];
    snprintf(rep, sizeof(rep), "%s/gpu-rep", tu_dir);
    snprintf(cmd, sizeof(cmd), "%s report %s --out %s --quiet && "
             "grep -c 'gpu_utilization_p95 .*not measured: NVML not available' %s/report.md", tu_k25(), h5, rep, rep);
    assert_int_equal(tu_run(cmd, &out), 0);
    free(out);
}

/* NUMA and affinity in provenance: the run's CPU set as the kernel gives it, each node's share of it,
 * and the span warning exactly when the threads cannot fit in one node's share. */
static void test_numa_provenance(void **state)
{
    (void)state;
    cpu_set_t aff;
    assert_int_equal(sched_getaffinity(0, sizeof(aff), &aff), 0);
    char warn[512];
    json_t *o = k25_provenance_numa(1, warn, sizeof(warn));
    assert_int_equal(json_integer_value(json_object_get(o, "cpuset_cpus")), CPU_COUNT(&aff));
    int sum = 0, max = 0;
    size_t i;
    json_t *nd;
    json_array_foreach(json_object_get(o, "nodes"), i, nd) {
        int in = (int)json_integer_value(json_object_get(nd, "cpus_in_cpuset"));
        sum += in;
        max = in > max ? in : max;
    }
    if (json_array_size(json_object_get(o, "nodes")) > 0) /* no /sys/devices/system/node in some containers */
        assert_int_equal(sum, CPU_COUNT(&aff));
    assert_string_equal(warn, ""); /* one thread never spans nodes */
    assert_true(json_is_false(json_object_get(o, "threads_span_nodes")));
    int spanned = (int)json_integer_value(json_object_get(o, "nodes_in_cpuset"));
    json_decref(o);
    /* more threads than any node holds: a warning exactly when the set spans several nodes */
    o = k25_provenance_numa(max + 1, warn, sizeof(warn));
    assert_int_equal(json_is_true(json_object_get(o, "threads_span_nodes")), spanned > 1);
    assert_int_equal(warn[0] != '\0', spanned > 1);
    json_decref(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loader_and_figures),
        cmocka_unit_test(test_bench_telemetry),
        cmocka_unit_test(test_numa_provenance),
    };
    return cmocka_run_group_tests(tests, setup, tu_group_teardown);
}
