/*
 * kvstore.h - the CPU backend's KV storage (kvstore.c) and compaction
 * (kvcompact.c): the functions that read and write the bytes of the paged
 * KV cache's blocks in host memory.  engine/kvcache.h holds the pool's
 * layout and bookkeeping; this is the CPU backend's implementation of the
 * KV ops (backend_cpu.c), valid for buffers in host memory.  Internal to
 * engine/cpu/.
 */
#ifndef K25_KVSTORE_H
#define K25_KVSTORE_H

#include "attn.h"
#include "kvcache.h"

/* The layer-l area of block id (host memory): in its buffer, or in its stream area while a
 * step streams it (kvtier.c), where only the layer being computed is present. */
static inline unsigned char *k25_kv_layer(const struct k25_kv_pool *p, int32_t id, int l)
{
    if (!p->blocks[id]) {
        K25_ASSERT(p->stream && p->stream[id] && p->stream_l[id] == l);
        return p->stream[id];
    }
    return (unsigned char *)p->blocks[id]->data + (size_t)l * p->layer_bytes;
}

/* The count byte of (layer l, KV head g, slot s) of seq (compression on). */
static inline uint8_t *k25_kv_slot_count(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int l, int g,
                                         int s)
{
    unsigned char *lay = k25_kv_layer(p, seq->ids[s / p->block_size], l);
    return lay + p->meta_off + (size_t)g * p->meta_head_bytes + s % p->block_size;
}

/* Slot s's whole compression state (score and seen 0 below comp_hi, where none is kept). */
void k25_kv_seq_slot(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int l, int g, int s,
                     struct k25_kv_slot *out);

void k25_kv_seq_write(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int slot0, int n,
                      const float *k, const float *v, int stride);

/*
 * Fills view for (seq, layer); kptr/vptr are caller arrays of at least
 * seq->n_blocks entries that the view points into.
 */
void k25_kv_seq_view(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer,
                     const void **kptr, const void **vptr, struct k25_kv_view *view);

/*
 * Keys and values of slots [s0, s0+n) of (layer, KV head g) as fp32 rows
 * K[n][head_dim], V[n][head_dim] (dequantized where stored quantized).
 */
void k25_kv_seq_read(const struct k25_kv_pool *p, const struct k25_kv_seq *seq, int layer, int g, int s0,
                     int n, float *K, float *V);

/*
 * Drops slots [s0, n_tokens) of one layer's storage bookkeeping so they can
 * be rewritten with k25_kv_seq_write_heads: for int8/int4 the residual is
 * emptied and n_quant[layer] set to s0 (s0 must be group-aligned and
 * <= n_quant[layer]).
 */
void k25_kv_seq_rewind(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int s0);
/* Writes rows given head-major: K[g][n][head_dim] (see k25_kv_seq_write). */
void k25_kv_seq_write_heads(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, int slot0, int n,
                            const float *K, const float *V);

/*
 * Adds one attention call's scores (job.score: [n_kv_heads][q_slot0+n_q])
 * to the slot metadata of layer l: score += acc, seen += (queries that
 * could see the slot) * group, for the slots >= seq->comp_hi only (the
 * earlier ones have passed through compression and are never pruned
 * again).  With a score window the caller passes the window's queries.
 */
void k25_kv_seq_add_scores(struct k25_kv_pool *p, struct k25_kv_seq *seq, int layer, const float *acc,
                           int q_slot0, int n_q, int group);

/*
 * Brings seq to k25_kv_kept_tokens slots (kvcompress.c): merges
 * neighbouring similar keys, then prunes the lowest-scored slots, of the
 * slots that entered the compressible region since the last call.
 * Returns the slots removed per (layer, KV head) (0 when nothing was due);
 * adds to seq->pruned_slots / merged_slots.  Scratch from malloc;
 * K25_ENOMEM on failure, seq unchanged.
 */
int k25_kv_seq_compress(struct k25_kv_pool *p, struct k25_kv_seq *seq, const struct k25_kv_compress_opts *o,
                        int *removed, struct k25_error *err);

#endif /* K25_KVSTORE_H */
