/*
 * threads.c - one thread pool, one knob.  Our kernels use OpenMP and we
 * link the OpenMP build of OpenBLAS, so both share OpenMP's pool; this
 * sets its size for both.
 */
#include "k25.h"

#include <cblas.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_threads; /* the configured count; 0 until set */
static int g_applied; /* the count the pools are sized to now; 0 until set */

/*
 * Sizes OpenMP's pool and OpenBLAS's for the next parallel work.  The pools
 * are process-wide, so the count applied is recorded here and not per
 * engine: a second engine in the same process (fidelity runs two) must see
 * what the first left, or it would run a step on a count it did not choose.
 */
void k25_threads_apply(int n)
{
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    g_applied = n;
}

int k25_threads_applied(void)
{
    return g_applied;
}

int k25_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    g_threads = n;
    k25_threads_apply(n);
    return n;
}

int k25_get_threads(void)
{
    return g_threads > 0 ? g_threads : omp_get_max_threads();
}

char *openblas_get_corename(void); /* OpenBLAS extension, not in cblas.h */

const char *k25_blas_corename(void)
{
    return openblas_get_corename();
}

/*
 * OpenBLAS built with DYNAMIC_ARCH picks its kernels from the CPU model
 * number; a CPU newer than the library (e.g. Emerald Rapids under Debian
 * 12's OpenBLAS 0.3.21) falls back to the SSE3 "Prescott" kernels, 4-8x
 * slower.  This names the kernel set the CPU's features do support, or
 * NULL when the detected one is already right.
 */
const char *k25_blas_better_coretype(void)
{
    const char *cur = openblas_get_corename();
    if (!cur)
        return NULL;
    static const char *const generic[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem",
                                          "Atom", "Katmai", "Coppermine", "Northwood", "Banias"};
    bool is_generic = false;
    for (size_t i = 0; i < sizeof(generic) / sizeof(generic[0]); i++)
        is_generic |= strcmp(cur, generic[i]) == 0;
    if (!is_generic)
        return NULL;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

void k25_blas_reexec(char **argv)
{
    const char *better;
    if (getenv("OPENBLAS_CORETYPE") || getenv("K25_NO_BLAS_REEXEC") || !(better = k25_blas_better_coretype()))
        return;
    /* OpenBLAS reads OPENBLAS_CORETYPE when it loads, so restart once with it set. */
    if (setenv("OPENBLAS_CORETYPE", better, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the slow kernels rather than fail */
}
