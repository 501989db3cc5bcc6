/*
 * nvml.c - NVIDIA's management library (NVML) loaded at run time: GPU
 * telemetry and provenance without a build dependency on the driver.
 *
 * dlopen("libnvidia-ml.so.1") (the driver installs it; K25_NVML_LIB names
 * another file: tests load a scripted stand-in through the same loader),
 * then dlsym of each entry point with our own declarations below: no
 * nvml.h here.  The declarations follow NVML's C API: every call returns
 * nvmlReturn_t (0 = NVML_SUCCESS); devices are opaque handles; clocks in
 * MHz, power in milliwatts, memory in bytes, PCIe throughput in KB/s.
 * An entry point the library lacks (an old driver) reads as unknown (NaN
 * or -1), never as 0.  Without the library every figure is null with the
 * reason (k25_nvml_open's message).
 *
 * This sits in util/ (the lowest layer) so the harness's samplers and the
 * CUDA backend can both use it.
 */
#include "k25util.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef int nvml_ret;                  /* nvmlReturn_t */
typedef struct nvml_dev_st *nvml_dev;  /* nvmlDevice_t */
struct nvml_util { unsigned int gpu, memory; };                       /* nvmlUtilization_t */
struct nvml_mem { unsigned long long total, free, used; };            /* nvmlMemory_t */
enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2 };
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };
#define NVML_THROTTLE_GPU_IDLE 0x1ULL  /* nvmlClocksThrottleReasonGpuIdle: not a throttle */

struct k25_nvml {
    void *lib;
    int n_dev;
    nvml_dev dev[K25_NVML_MAX_DEV];
    nvml_ret (*init)(void);
    nvml_ret (*shutdown)(void);
    const char *(*error_string)(nvml_ret);
    nvml_ret (*count)(unsigned int *);
    nvml_ret (*handle)(unsigned int, nvml_dev *);
    nvml_ret (*name)(nvml_dev, char *, unsigned int);
    nvml_ret (*uuid)(nvml_dev, char *, unsigned int);
    nvml_ret (*driver)(char *, unsigned int);
    nvml_ret (*cuda)(int *);
    nvml_ret (*util)(nvml_dev, struct nvml_util *);
    nvml_ret (*mem)(nvml_dev, struct nvml_mem *);
    nvml_ret (*clock)(nvml_dev, int, unsigned int *);
    nvml_ret (*max_clock)(nvml_dev, int, unsigned int *);
    nvml_ret (*app_clock)(nvml_dev, int, unsigned int *);
    nvml_ret (*power)(nvml_dev, unsigned int *);
    nvml_ret (*power_limit)(nvml_dev, unsigned int *);
    nvml_ret (*temp)(nvml_dev, int, unsigned int *);
    nvml_ret (*throttle)(nvml_dev, unsigned long long *);
    nvml_ret (*pcie)(nvml_dev, int, unsigned int *);
    nvml_ret (*pcie_gen)(nvml_dev, unsigned int *);
    nvml_ret (*pcie_width)(nvml_dev, unsigned int *);
    nvml_ret (*persistence)(nvml_dev, int *);
    nvml_ret (*ecc)(nvml_dev, int *, int *);
};

/* Looks an entry point up; NULL when the library lacks it (its figure is then unknown). */
static void *sym(void *lib, const char *a, const char *b)
{
    void *p = dlsym(lib, a);
    return p || !b ? p : dlsym(lib, b);
}

int k25_nvml_open(k25_nvml_t **out, struct k25_error *err)
{
    *out = NULL;
    const char *path = getenv("K25_NVML_LIB");
    if (!path || !*path)
        path = "libnvidia-ml.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "NVML not available: %s", dlerror());
    struct k25_nvml *m = calloc(1, sizeof(*m));
    if (!m) {
        dlclose(lib);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    m->lib = lib;
    /* the casts go through void * as POSIX dlsym requires */
    *(void **)&m->init = sym(lib, "nvmlInit_v2", "nvmlInit");
    *(void **)&m->shutdown = sym(lib, "nvmlShutdown", NULL);
    *(void **)&m->error_string = sym(lib, "nvmlErrorString", NULL);
    *(void **)&m->count = sym(lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
    *(void **)&m->handle = sym(lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
    *(void **)&m->name = sym(lib, "nvmlDeviceGetName", NULL);
    *(void **)&m->uuid = sym(lib, "nvmlDeviceGetUUID", NULL);
    *(void **)&m->driver = sym(lib, "nvmlSystemGetDriverVersion", NULL);
    *(void **)&m->cuda = sym(lib, "nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion");
    *(void **)&m->util = sym(lib, "nvmlDeviceGetUtilizationRates", NULL);
    *(void **)&m->mem = sym(lib, "nvmlDeviceGetMemoryInfo", NULL);
    *(void **)&m->clock = sym(lib, "nvmlDeviceGetClockInfo", NULL);
    *(void **)&m->max_clock = sym(lib, "nvmlDeviceGetMaxClockInfo", NULL);
    *(void **)&m->app_clock = sym(lib, "nvmlDeviceGetApplicationsClock", NULL);
    *(void **)&m->power = sym(lib, "nvmlDeviceGetPowerUsage", NULL);
    *(void **)&m->power_limit = sym(lib, "nvmlDeviceGetEnforcedPowerLimit", NULL);
    *(void **)&m->temp = sym(lib, "nvmlDeviceGetTemperature", NULL);
    *(void **)&m->throttle = sym(lib, "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons");
    *(void **)&m->pcie = sym(lib, "nvmlDeviceGetPcieThroughput", NULL);
    *(void **)&m->pcie_gen = sym(lib, "nvmlDeviceGetCurrPcieLinkGeneration", NULL);
    *(void **)&m->pcie_width = sym(lib, "nvmlDeviceGetCurrPcieLinkWidth", NULL);
    *(void **)&m->persistence = sym(lib, "nvmlDeviceGetPersistenceMode", NULL);
    *(void **)&m->ecc = sym(lib, "nvmlDeviceGetEccMode", NULL);
    int rc = K25_OK;
    nvml_ret r;
    unsigned int n = 0;
    if (!m->init || !m->count || !m->handle) {
        rc = k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "NVML not available: %s lacks nvmlInit/nvmlDeviceGetCount",
                           path);
        goto out_fail;
    }
    if ((r = m->init()) != 0) {
        rc = k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "NVML not available: nvmlInit failed: %s",
                           m->error_string ? m->error_string(r) : "error");
        m->shutdown = NULL; /* nothing to shut down */
        goto out_fail;
    }
    if ((r = m->count(&n)) != 0 || n == 0) {
        rc = k25_error_set(err, K25_ENOTFOUND, NULL, 0, NULL, "NVML not available: %s",
                           r ? (m->error_string ? m->error_string(r) : "nvmlDeviceGetCount failed") : "no GPU");
        goto out_fail;
    }
    for (unsigned int i = 0; i < n && m->n_dev < K25_NVML_MAX_DEV; i++)
        if (m->handle(i, &m->dev[m->n_dev]) == 0)
            m->n_dev++;
    *out = m;
    return K25_OK;
out_fail:
    k25_nvml_close(m);
    return rc;
}

void k25_nvml_close(k25_nvml_t *m)
{
    if (!m)
        return;
    if (m->shutdown)
        m->shutdown();
    dlclose(m->lib);
    free(m);
}

int k25_nvml_count(const k25_nvml_t *m)
{
    return m ? m->n_dev : 0;
}

/* An unsigned figure through fn, scaled; NaN when the library lacks it or the call fails. */
#define GETU(fn, scale, ...)                                                                                     \
    ({                                                                                                          \
        unsigned int v_ = 0;                                                                                    \
        (m->fn && m->fn(__VA_ARGS__, &v_) == 0) ? (double)v_ * (scale) : NAN;                                   \
    })

int k25_nvml_sample(const k25_nvml_t *m, int i, struct k25_gpu_sample *s)
{
    memset(s, 0, sizeof(*s));
    if (!m || i < 0 || i >= m->n_dev)
        return K25_EINVAL;
    nvml_dev d = m->dev[i];
    s->dev = i;
    s->t_ns = (int64_t)k25_now_ns();
    struct nvml_util u;
    bool have_u = m->util && m->util(d, &u) == 0;
    s->util_gpu = have_u ? u.gpu / 100.0 : NAN;
    s->util_mem = have_u ? u.memory / 100.0 : NAN;
    struct nvml_mem mm;
    bool have_m = m->mem && m->mem(d, &mm) == 0;
    s->mem_used_bytes = have_m ? (int64_t)mm.used : -1;
    s->mem_total_bytes = have_m ? (int64_t)mm.total : -1;
    s->sm_clock_mhz = GETU(clock, 1.0, d, NVML_CLOCK_SM);
    s->mem_clock_mhz = GETU(clock, 1.0, d, NVML_CLOCK_MEM);
    s->power_w = GETU(power, 1e-3, d);
    s->power_limit_w = GETU(power_limit, 1e-3, d);
    s->temp_c = GETU(temp, 1.0, d, NVML_TEMPERATURE_GPU);
    unsigned long long th = 0;
    s->throttle_known = m->throttle && m->throttle(d, &th) == 0;
    s->throttle_reasons = s->throttle_known ? (uint64_t)th & ~NVML_THROTTLE_GPU_IDLE : 0;
    s->pcie_tx_kbs = GETU(pcie, 1.0, d, NVML_PCIE_UTIL_TX_BYTES);
    s->pcie_rx_kbs = GETU(pcie, 1.0, d, NVML_PCIE_UTIL_RX_BYTES);
    return K25_OK;
}

static json_t *numj(double x)
{
    return isfinite(x) ? json_real(x) : json_null();
}

json_t *k25_nvml_provenance(const k25_nvml_t *m)
{
    json_t *a = json_array();
    char drv[96] = "";
    int cuda = 0;
    bool have_drv = m->driver && m->driver(drv, sizeof(drv)) == 0, have_cuda = m->cuda && m->cuda(&cuda) == 0;
    for (int i = 0; a && i < m->n_dev; i++) {
        nvml_dev d = m->dev[i];
        char name[128] = "", uuid[128] = "", cv[32];
        bool hn = m->name && m->name(d, name, sizeof(name)) == 0, hu = m->uuid && m->uuid(d, uuid, sizeof(uuid)) == 0;
        snprintf(cv, sizeof(cv), "%d.%d", cuda / 1000, (cuda % 1000) / 10);
        int pers = 0, ecc_cur = 0, ecc_pend = 0;
        bool hp = m->persistence && m->persistence(d, &pers) == 0, he = m->ecc && m->ecc(d, &ecc_cur, &ecc_pend) == 0;
        struct k25_gpu_sample s;
        k25_nvml_sample(m, i, &s);
        json_t *g = json_object();
        json_object_set_new(g, "index", json_integer(i));
        json_object_set_new(g, "name", hn ? json_string(name) : json_null());
        json_object_set_new(g, "uuid", hu ? json_string(uuid) : json_null());
        json_object_set_new(g, "driver_version", have_drv ? json_string(drv) : json_null());
        json_object_set_new(g, "cuda_driver_version", have_cuda ? json_string(cv) : json_null());
        json_object_set_new(g, "sm_clock_mhz", numj(s.sm_clock_mhz));
        json_object_set_new(g, "mem_clock_mhz", numj(s.mem_clock_mhz));
        json_object_set_new(g, "max_sm_clock_mhz", numj(GETU(max_clock, 1.0, d, NVML_CLOCK_SM)));
        json_object_set_new(g, "max_mem_clock_mhz", numj(GETU(max_clock, 1.0, d, NVML_CLOCK_MEM)));
        /* application clocks: what `nvidia-smi -ac` set (equal to the default unless changed); a lock
         * set by `nvidia-smi -lgc` shows as the SM clock pinned below its maximum under load */
        json_object_set_new(g, "applications_sm_clock_mhz", numj(GETU(app_clock, 1.0, d, NVML_CLOCK_SM)));
        json_object_set_new(g, "applications_mem_clock_mhz", numj(GETU(app_clock, 1.0, d, NVML_CLOCK_MEM)));
        json_object_set_new(g, "power_limit_w", numj(s.power_limit_w));
        json_object_set_new(g, "temperature_c", numj(s.temp_c));
        json_object_set_new(g, "memory_total_bytes", s.mem_total_bytes >= 0 ? json_integer(s.mem_total_bytes)
                                                                            : json_null());
        json_object_set_new(g, "ecc_enabled", he ? json_boolean(ecc_cur != 0) : json_null());
        json_object_set_new(g, "persistence_mode", hp ? json_boolean(pers != 0) : json_null());
        json_object_set_new(g, "pcie_generation", numj(GETU(pcie_gen, 1.0, d)));
        json_object_set_new(g, "pcie_width", numj(GETU(pcie_width, 1.0, d)));
        json_object_set_new(g, "throttle_reasons",
                            s.throttle_known ? json_integer((json_int_t)s.throttle_reasons) : json_null());
        json_array_append_new(a, g);
    }
    return a;
}
