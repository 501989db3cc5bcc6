/*
 * standin.c - a scripted stand-in for libnvidia-ml.so.1, built by
 * tests/test_nvml.c into its temporary folder and loaded through
 * K25_NVML_LIB by the real loader (util/nvml.c's dlopen/dlsym).  Same
 * symbol names and C signatures as NVML's; the values come from the
 * environment so a test knows what the harness must report:
 *   K25_STANDIN_UTIL      comma list of GPU utilization percents, one per
 *                         nvmlDeviceGetUtilizationRates call, cycled
 *   K25_STANDIN_SM_CLOCKS comma list of SM clocks (MHz), cycled the same way
 *   K25_STANDIN_THROTTLE  throttle reason bits (default 0)
 *   K25_STANDIN_FAIL_INIT nvmlInit fails with NVML_ERROR_DRIVER_NOT_LOADED (9)
 * Test-only: never installed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
typedef struct dev_st { int index; } *nvmlDevice_t;
typedef struct { unsigned int gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;

static struct dev_st dev0 = {0};
static int n_util, n_clock;

/* the k-th value of a comma list (cycled); def when the list is unset */
static unsigned int nth(const char *env, int k, unsigned int def)
{
    const char *s = getenv(env);
    if (!s || !*s)
        return def;
    int n = 1;
    for (const char *p = s; *p; p++)
        n += *p == ',';
    k %= n;
    const char *p = s;
    for (int i = 0; i < k; i++)
        p = strchr(p, ',') + 1;
    return (unsigned int)strtoul(p, NULL, 10);
}

nvmlReturn_t nvmlInit_v2(void) { return getenv("K25_STANDIN_FAIL_INIT") ? 9 : 0; }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { return r == 9 ? "Driver Not Loaded" : r ? "Unknown Error" : "Success"; }
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n) { *n = 1; return 0; }
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
    if (i != 0)
        return 2; /* NVML_ERROR_INVALID_ARGUMENT */
    *d = &dev0;
    return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *b, unsigned int n) { (void)d; snprintf(b, n, "Stand-in H100"); return 0; }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *b, unsigned int n)
{
    (void)d;
    snprintf(b, n, "GPU-00000000-1111-2222-3333-444444444444");
    return 0;
}
nvmlReturn_t nvmlSystemGetDriverVersion(char *b, unsigned int n) { snprintf(b, n, "550.54.15"); return 0; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { *v = 12040; return 0; }
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
    (void)d;
    u->gpu = nth("K25_STANDIN_UTIL", n_util++, 50);
    u->memory = 30;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
    (void)d;
    m->total = 80ULL << 30;
    m->used = 20ULL << 30;
    m->free = m->total - m->used;
    return 0;
}
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned int *c)
{
    (void)d;
    *c = type == 1 ? nth("K25_STANDIN_SM_CLOCKS", n_clock++, 1980) : 2619;
    return 0;
}
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned int *c) { (void)d; *c = type == 1 ? 1980 : 2619; return 0; }
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw) { (void)d; *mw = 350000; return 0; }
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw) { (void)d; *mw = 700000; return 0; }
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int s, unsigned int *t) { (void)d; (void)s; *t = 61; return 0; }
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long *r)
{
    (void)d;
    const char *s = getenv("K25_STANDIN_THROTTLE");
    *r = (s ? strtoull(s, NULL, 0) : 0) | 0x1ULL; /* GpuIdle is set too: not a throttle */
    return 0;
}
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int c, unsigned int *v) { (void)d; *v = c == 0 ? 1000 : 2000; return 0; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int *g) { (void)d; *g = 5; return 0; }
nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int *w) { (void)d; *w = 16; return 0; }
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *m) { (void)d; *m = 1; return 0; }
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int *c, int *p) { (void)d; *c = 1; *p = 1; return 0; }
/* no nvmlDeviceGetApplicationsClock: an entry point the library lacks reads as unknown (null) */
