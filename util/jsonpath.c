/*
 * jsonpath.c - following a dot-separated key path ("ttft_ms.p99") into a
 * JSON object: how sweeps, reports and gates find a figure in a
 * `k25 bench --json` summary.
 */
#include "k25util.h"

#include <string.h>

const json_t *k25_json_path(const json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ".", &save); tok && o; tok = strtok_r(NULL, ".", &save))
        o = json_object_get(o, tok);
    return o;
}
