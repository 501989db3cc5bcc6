/*
 * fuzz_tokenizer.c - the tokenizer.json loader and the encoder (engine/tok_*.c, k25_tok.h).
 * First byte even: the rest is a tokenizer.json (k25_tokenizer_load_mem); when it loads, a
 * fixed text mixing scripts, added-token strings and whitespace is encoded, decoded and
 * stream-decoded with it.  First byte odd: the rest is text for one of the built-in
 * tokenizers (byte-level BPE with added tokens and NFKC, SentencePiece-style with byte
 * fallback, Metaspace with lstrip/rstrip/single_word tokens; byte 1 picks), encoded, and
 * also read as ids to decode.
 * K25_FUZZ_WRITE_SEED=DIR: write seeds (the three tokenizers as loader input, texts for
 * each) to DIR and exit (`make fuzz-smoke` makes its seeds so).
 */
#include "fuzz_util.h"
#include "k25_tok.h"

#include <sys/stat.h>

static const char *const TOKS[3] = {
    /* byte-level BPE */
    "{\"added_tokens\":[{\"id\":11,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":15,\"content\":\"<|bos|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":17,\"content\":\"ab\",\"special\":false,\"normalized\":true,\"single_word\":true}],"
    "\"normalizer\":{\"type\":\"NFKC\"},\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":["
    "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(?i:'s|'t)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}|"
    " ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":\"Isolated\","
    "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<|bos|>\","
    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<|bos|>\":{\"id\":"
    "\"<|bos|>\",\"ids\":[15],\"tokens\":[\"<|bos|>\"]}}},\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"vocab\":{\"a\":0,\"b\":1,\"c\":2,\"d\":3,\"\\u0120\":4,"
    "\"ab\":5,\"bc\":6,\"abc\":7,\"\\u0120a\":8,\"\\u00c3\":9,\"\\u00a9\":10,\"h\":12,\"i\":13,\"hi\":14,"
    "\"f\":16},\"merges\":[\"b c\",\"a b\",\"ab c\",\"\\u0120 a\"]}}",
    /* SentencePiece-style */
    "{\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\","
    "\"special\":true}],\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\","
    "\"prepend\":\"\\u2581\"},{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\","
    "\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
    "\"ids\":[1],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":"
    "\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},{\"type\":\"ByteFallback\"},"
    "{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":1}]},"
    "\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\",\"fuse_unk\":true,\"byte_fallback\":true,\"vocab\":"
    "{\"<unk>\":0,\"<s>\":1,\"<0xC3>\":2,\"<0xA9>\":3,\"<0x0A>\":4,\"\\u2581\":5,\"h\":6,\"i\":7,\"\\u2581h\":8,"
    "\"\\u2581hi\":9},\"merges\":[\"\\u2581 h\",\"\\u2581h i\"]}}",
    /* Metaspace */
    "{\"added_tokens\":[{\"id\":6,\"content\":\"<m>\",\"special\":true,\"lstrip\":true},{\"id\":7,"
    "\"content\":\"<w>\",\"single_word\":true,\"normalized\":false},{\"id\":9,\"content\":\"<r>\",\"rstrip\":true,"
    "\"normalized\":false}],\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
    "\"prepend_scheme\":\"first\",\"split\":true},\"decoder\":{\"type\":\"Metaspace\",\"replacement\":"
    "\"\\u2581\",\"prepend_scheme\":\"always\"},\"model\":{\"type\":\"BPE\",\"unk_token\":\"<unk>\","
    "\"continuing_subword_prefix\":\"##\",\"end_of_word_suffix\":\"</w>\",\"vocab\":{\"<unk>\":0,"
    "\"\\u2581\":1,\"a\":2,\"b\":3,\"\\u2581a\":4,\"##b\":5,\"b</w>\":8,\"##b</w>\":10,\"\\u2581ab</w>\":11},"
    "\"merges\":[\"\\u2581 a\",\"\\u2581a ##b</w>\"]}}",
};

static const char TEXT[] = "ab abc 'S <|end|> hi\xc3\xa9 \xef\xac\x81 123456 \t\r\n  <s>h <m> a<w> <w> b<r>  "
                           "\xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd";

static k25_tokenizer_t *builtin[3];

/* Encodes, decodes and stream-decodes text with t (errors are fine, crashes are not). */
static void exercise(const k25_tokenizer_t *t, const char *text, size_t len)
{
    struct k25_error err;
    int32_t *ids;
    int n;
    for (unsigned flags = 0; flags < 2; flags++) {
        if (k25_tokenizer_encode(t, text, len, flags, &ids, &n, &err) != K25_OK)
            continue;
        char *s;
        if (k25_tokenizer_decode(t, ids, n, flags, &s, NULL, &err) == K25_OK)
            free(s);
        k25_tok_stream_t *st;
        if (k25_tok_stream_create(t, flags, &st, &err) == K25_OK) {
            const char *c;
            size_t cl;
            for (int i = 0; i < n; i++)
                if (k25_tok_stream_push(st, ids[i], &c, &cl, &err) != K25_OK || k25_utf8_complete_len(c, cl) != cl)
                    abort(); /* a chunk that ends inside a character is a bug */
            k25_tok_stream_flush(st, &c, &cl, &err);
            k25_tok_stream_destroy(st);
        }
        free(ids);
    }
}

static void write_seed(const char *dir, const char *name, const char *first, const char *body)
{
    char p[600];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(first, 1, 2, f) != 2 || fwrite(body, 1, strlen(body), f) != strlen(body) || fclose(f))
        abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *seed = getenv("K25_FUZZ_WRITE_SEED");
    if (seed && *seed) {
        mkdir(seed, 0755);
        for (int i = 0; i < 3; i++) {
            char name[32], sel[2] = {0, 0}, tsel[2] = {1, (char)i};
            snprintf(name, sizeof(name), "tok-%d.json", i);
            write_seed(seed, name, sel, TOKS[i]);
            snprintf(name, sizeof(name), "text-%d.txt", i);
            write_seed(seed, name, tsel, TEXT);
        }
        exit(0);
    }
    struct k25_error err;
    for (int i = 0; i < 3; i++)
        if (k25_tokenizer_load_mem(TOKS[i], strlen(TOKS[i]), NULL, 0, "builtin", &builtin[i], &err) != K25_OK) {
            fprintf(stderr, "fuzz_tokenizer: built-in tokenizer %d: %s\n", i, err.msg);
            abort();
        }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    struct k25_error err;
    if (data[0] % 2 == 0) {
        k25_tokenizer_t *t;
        if (k25_tokenizer_load_mem(body, n, NULL, 0, "fuzz.json", &t, &err) == K25_OK) {
            exercise(t, TEXT, sizeof(TEXT) - 1);
            k25_tokenizer_destroy(t);
        }
        return 0;
    }
    const k25_tokenizer_t *t = builtin[data[1] % 3];
    exercise(t, body + 1, n - 1);
    /* the same bytes as ids */
    int32_t ids[64];
    int k = 0;
    for (size_t i = 1; i + 1 < n && k < 64; i += 2)
        ids[k++] = (int32_t)((unsigned char)body[i] | ((unsigned char)body[i + 1] << 8)) % 40;
    char *s;
    if (k25_tokenizer_decode(t, ids, k, 0, &s, NULL, &err) == K25_OK)
        free(s);
    return 0;
}
