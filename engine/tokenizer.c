/*
 * tokenizer.c - the byte tokenizer of the presets: one token per byte.
 * A model folder's tokenizer.json is tok_hf.c and the files beside it (k25_tok.h).
 */
#include "k25.h"

#include <stdlib.h>
#include <string.h>

int k25_tok_encode(const char *text, size_t len, int32_t **ids, int *n_ids, struct k25_error *err)
{
    if (len > (size_t)INT32_MAX)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "text", "text of %zu bytes is too long", len);
    int32_t *v = malloc((len ? len : 1) * sizeof(*v));
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (size_t i = 0; i < len; i++)
        v[i] = (unsigned char)text[i];
    *ids = v;
    *n_ids = (int)len;
    return K25_OK;
}

char *k25_tok_decode(const int32_t *ids, int n_ids)
{
    char *s = malloc((size_t)n_ids + 1);
    if (!s)
        return NULL;
    for (int i = 0; i < n_ids; i++)
        s[i] = (ids[i] >= 0 && ids[i] < 256) ? (char)ids[i] : '?';
    s[n_ids] = 0;
    return s;
}
