/*
 * fuzz_trace.c - the HDF5 run-trace reader (harness/trace.c through
 * harness/h5store.c) on a file image in memory: k25_trace_read_image opens
 * it with HDF5's core driver, so nothing touches the disk.  Seeds: a trace
 * of the current format (tests/fuzz/seeds/trace/) and the traces under
 * tests/data/ and baselines/results/ci-smoke/.
 *
 * What it guards: every length, offset and type a file claims is checked
 * before it is believed (docs/trace-schema.md, "Reading damaged files").
 * libhdf5 itself is not instrumented: a crash inside it on a file that our
 * checks let through is still a finding.
 */
#include "fuzz_util.h"
#include "harness.h"

/*
 * Files in the format HDF5 wrote before 1.10 (superblock version 0 or 1:
 * schema-1 traces written before k25 switched to the 1.10 format) have no
 * checksums, and libhdf5 1.10.8 itself reads out of bounds and crashes on
 * some damaged ones (tests/fuzz/known/, asan.supp).  Those are libhdf5's
 * bugs: by default the target skips such input, so that what it finds is
 * ours; K25_FUZZ_TRACE_OLD=1 fuzzes them too.
 */
static int old_too = -1;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (old_too < 0) {
        const char *e = getenv("K25_FUZZ_TRACE_OLD");
        old_too = e && *e == '1';
    }
    if (!old_too && size > 8 && data[8] < 2 && !memcmp(data, "\x89HDF\r\n\x1a\n", 8))
        return 0;
    struct k25_trace t;
    struct k25_error err;
    if (k25_trace_read_image(data, size, "fuzz.h5", &t, &err) == K25_OK)
        k25_trace_free(&t);
    return 0;
}
