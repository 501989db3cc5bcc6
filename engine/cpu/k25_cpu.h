/*
 * k25_cpu.h - engine/cpu/'s public header: what the rest of the engine may
 * use of the CPU backend besides its table (k25_backend_cpu, backend.h).
 * Everything else in engine/cpu/ (kernels, KV storage, attention table
 * internals) is internal to it: the include paths refuse it elsewhere
 * (make layering-check).
 */
#ifndef K25_CPU_H
#define K25_CPU_H

#include "k25.h"

#include <stddef.h>
#include <stdint.h>

/* ---- the group-wise int8/int4 weight layout (backend.h), engine/cpu/wquant.c */

/* Bytes of one int8/int4 row of cols values in groups of group (a multiple of 32 dividing cols). */
size_t k25_wquant_row_bytes(enum k25_dtype q, int64_t cols, int group);
/*
 * Quantizes n rows of cols values (src: dense rows of src_dtype - fp32,
 * bf16 or fp16 - src_stride elements apart) into dst, rows
 * k25_wquant_row_bytes apart.  Symmetric per group: scale = max|w| / 127
 * (int8) or / 7 (int4), q = round(w / scale).
 */
void k25_wquant_rows(enum k25_dtype q, int group, const void *src, enum k25_dtype src_dtype, size_t src_stride,
                     int64_t n, int64_t cols, void *dst);

/* ---- host memory (engine/cpu/hostmem.c): the CPU backend's memory_info */

/* The host's available memory (MemAvailable of /proc/meminfo) and total memory, in bytes.
 * K25_EIO naming /proc/meminfo when it cannot be read or lacks the fields. */
int k25_cpu_host_memory(size_t *free_bytes, size_t *total_bytes, struct k25_error *err);

#endif /* K25_CPU_H */
