/*
 * fuzz_sla_policy.c - the two small YAML languages of verdicts: SLA files
 * (reports/report_sla.c, k25_sla_load) and gate policies
 * (gates/gate_policy.c, k25_gate_policy_load).  The first byte picks
 * which (even: SLA, odd: policy); the rest is the file.  Seeds:
 * reports/sla-example.yaml and the gate policies in ci/.
 */
#include "fuzz_util.h"
#include "gate.h"
#include "report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *path = fuzz_file(data + 1, size - 1, ".yaml");
    struct k25_error err;
    if (data[0] & 1) {
        struct k25_gate_policy *p = calloc(1, sizeof(*p));
        if (!p)
            abort();
        k25_gate_policy_load(path, p, &err);
        free(p);
    } else {
        struct k25_sla *s = calloc(1, sizeof(*s));
        if (!s)
            abort();
        k25_sla_load(path, s, &err);
        free(s);
    }
    return 0;
}
