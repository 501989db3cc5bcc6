/*
 * fuzz_gold.c - the JSONL gold-set reader and validator (datasets/reader.c,
 * datasets/stats.c) on arbitrary bytes.  Seeds: the .jsonl files of datasets/gold/.
 */
#include "fuzz_util.h"
#include "gold.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".jsonl");
    struct k25_gold_opts o;
    k25_gold_opts_init(&o);
    o.max_line_bytes = 1 << 20; /* a line longer than this is a finding of its own path, not slower fuzzing */
    o.on_error = size > 0 && (data[0] & 1) ? K25_GOLD_ON_ERROR_SKIP : K25_GOLD_ON_ERROR_ABORT;
    struct k25_gold_stats st;
    struct k25_error err;
    k25_gold_validate(path, &o, &st, &err);
    k25_gold_stats_free(&st);
    return 0;
}
