/*
 * kvquant.h - INT8/INT4 KV quantization primitives (engine-internal).
 *
 * Asymmetric min/max quantization with IEEE-half scale and zero point:
 * x ~ q * scale + zero, q in [0, 2^bits - 1].  Keys are quantized per
 * channel over a group of tokens (channels have very different ranges,
 * tokens within a channel do not); values per token over a group of
 * channels.  The zero point is rounded down to a half and the scale
 * computed from it and rounded up, so the stored grid covers [min, max]
 * and the error of every value is at most scale / 2.  INT4 packs two
 * values per byte, the even channel in the low nibble.
 */
#ifndef K25_KVQUANT_H
#define K25_KVQUANT_H

#include <stddef.h>
#include <stdint.h>

#include "k25_attn.h" /* k25_kvq_row_bytes and the quantizers (public: attn-bench fills views with them) */

/* One key row: q (row_bytes), sz_f[2][hd] as floats -> dst[hd]. */
void k25_kvq_dequant_key_row(const uint8_t *q, const float *sz_f, int hd, int bits, float *dst);

/* One value row back: dst[hd]. */
void k25_kvq_dequant_value_row(const uint8_t *q, const uint16_t *sz, int hd, int vg, int bits, float *dst);

#endif
