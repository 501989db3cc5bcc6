/*
 * fuzz_filter.c - gold-set filter expressions (datasets/filter.c), parsed
 * and matched against a fixed request.  Seeds: tests/fuzz/seeds/filter/.
 */
#include "fuzz_util.h"
#include "gold.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *expr = fuzz_cstr(data, size);
    k25_gold_filter_t *f = NULL;
    int col = 0;
    struct k25_error err;
    if (k25_gold_filter_parse(expr, &f, &col, &err) == K25_OK) {
        struct k25_gold_request r;
        memset(&r, 0, sizeof(r));
        r.id = "legal-1";
        r.domain = "legal";
        r.expected_output_length = 1900;
        r.input_length = 4096;
        k25_gold_filter_match(f, &r);
        r.domain = NULL; /* a request without a domain */
        k25_gold_filter_match(f, &r);
    }
    k25_gold_filter_destroy(f);
    free(expr);
    return 0;
}
