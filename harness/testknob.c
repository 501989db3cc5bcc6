/*
 * testknob.c - TEST-ONLY degradation knobs for the regression-gate proof
 * tests (tests/test_gate.c, docs/gates.md).  Off unless an environment
 * variable is set; never set them for a real measurement.
 *
 *   K25_TEST_SLOWDOWN=F   after each forward pass, burn F times the pass's
 *                         own time in arithmetic (F = 0.2: every step takes
 *                         20% longer, a "commit that made the engine 20%
 *                         slower"); counted as engine busy time.
 *   K25_TEST_LOSSY=A      add deterministic noise of A times the logits'
 *                         standard deviation to every sampled position
 *                         (a "commit that made the numerics lossy": greedy
 *                         tokens change).
 *
 * They are environment variables and not config keys on purpose: a knob in
 * the config would make the gate refuse the comparison as a config
 * mismatch, while these simulate a code change under an unchanged config.
 * The harness installs them on every engine it creates
 * (k25_testknob_install) through the engine's step hook: the engine
 * library reads no environment.  Says on stderr when one is active.
 */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int g_init;
static double g_slowdown, g_lossy;

static double env_fraction(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (*end || !(x > 0) || x > 100) {
        fprintf(stderr, "k25: ignoring %s=\"%s\" (expected a number in (0, 100])\n", name, v);
        return 0;
    }
    fprintf(stderr, "k25: TEST-ONLY knob %s=%g is active: results are deliberately degraded\n", name, x);
    return x;
}

static void apply(const struct k25_step_info *info, void *user)
{
    (void)user;
    const int vocab = info->vocab;
    uint64_t t0_ns = info->t0_ns;
    if (g_lossy > 0)
        for (int i = 0; i < info->n; i++) {
            float *l = info->logits[i];
            double s = 0, ss = 0;
            for (int v = 0; v < vocab; v++) {
                s += l[v];
                ss += (double)l[v] * l[v];
            }
            double sd = sqrt(fmax(ss / vocab - (s / vocab) * (s / vocab), 0));
            /* splitmix64 of (position, token id): the same noise on every run */
            uint64_t pos = (uint64_t)info->next_pos[i];
            for (int v = 0; v < vocab; v++) {
                uint64_t z = pos * 0x9E3779B97F4A7C15ULL + (uint64_t)v * 0xBF58476D1CE4E5B9ULL + 1;
                z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
                z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
                z ^= z >> 31;
                l[v] += (float)(g_lossy * sd * ((double)(z >> 11) / 9007199254740992.0 * 2 - 1));
            }
        }
    if (g_slowdown > 0) {
        uint64_t now = k25_now_ns(), until = now + (uint64_t)((double)(now - t0_ns) * g_slowdown);
        volatile double x = 1.0;
        while (k25_now_ns() < until)
            for (int k = 0; k < 256; k++)
                x = x * 1.0000001 + 1e-9;
    }
}

void k25_testknob_install(k25_engine_t *e)
{
    if (!g_init) {
        g_slowdown = env_fraction("K25_TEST_SLOWDOWN");
        g_lossy = env_fraction("K25_TEST_LOSSY");
        g_init = 1;
    }
    if (g_slowdown > 0 || g_lossy > 0)
        k25_engine_set_step_hook(e, apply, NULL);
}
