/*
 * fuzz_sweep_spec.c - sweep specs (sweeps/spec.c: k25_sweep_spec_load and the
 * grid expansion).  Seeds: the specs in sweeps/.  A spec names a dataset; the
 * shipped specs name datasets/gold/ci-small.jsonl, so run from the checkout.
 */
#include "fuzz_util.h"
#include "sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".yaml");
    struct k25_sweep_spec *spec = calloc(1, sizeof(*spec));
    struct k25_error err;
    if (!spec)
        abort();
    if (k25_sweep_spec_load(path, spec, &err) == K25_OK) {
        struct k25_sweep_point *pts = NULL;
        int n = 0;
        if (k25_sweep_expand(spec, &pts, &n, &err) == K25_OK)
            k25_sweep_points_free(pts, n);
    }
    free(spec);
    return 0;
}
