/*
 * threads.c - one thread pool, one knob.  Our kernels use OpenMP and we
 * link the OpenMP build of OpenBLAS, so both share OpenMP's pool; this
 * sets its size for both.
 */
#include "k25.h"

#include <cblas.h>
#include <omp.h>

int k25_set_threads(int n)
{
    if (n <= 0)
        n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
    return n;
}

int k25_get_threads(void)
{
    return omp_get_max_threads();
}
