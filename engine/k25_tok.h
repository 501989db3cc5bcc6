/*
 * k25_tok.h - public interface of the engine's tokenizers: the byte
 * tokenizer of the presets and a real model folder's Hugging Face
 * `tokenizer.json` (issue 30, docs/models.md "Tokenizers").
 *
 * One handle type for both: a NULL k25_tokenizer_t * is the byte tokenizer
 * (token id = byte value, vocab 256) that the shape presets use; a loaded
 * one is the folder's tokenizer.json, encoded and decoded in C exactly as
 * Hugging Face's `tokenizers` does it:
 *
 *   models          BPE (byte-level: Llama 3/3.1, Qwen 2.5/3, DeepSeek-V3;
 *                   SentencePiece-style with byte_fallback/fuse_unk: Llama 2,
 *                   Gemma 3); unk_token, continuing_subword_prefix,
 *                   end_of_word_suffix, ignore_merges
 *   normalizers     NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace
 *                   (string or regex), Sequence
 *   pre-tokenizers  Split (regex through PCRE2 with UTF+UCP, or string; every
 *                   behavior, invert), ByteLevel, Metaspace, Sequence
 *   added tokens    special, lstrip, rstrip, normalized, single_word
 *   post-processors TemplateProcessing (single), ByteLevel, Sequence
 *   decoders        ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace,
 *                   Sequence
 *
 * Anything else is refused at load by name with the JSON path of the field
 * ("tokenizer.json: /pre_tokenizer/pretokenizers/1/type: unsupported
 * pre-tokenizer \"Whitespace\"").  A loaded tokenizer is immutable apart
 * from an internal word cache behind a lock: encode and decode may be
 * called from several threads at once.
 *
 * Input text must be valid UTF-8 (Hugging Face's tokenizers only take
 * strings): invalid UTF-8 is K25_EINVAL naming the byte offset.  The byte
 * tokenizer (NULL) takes any bytes.
 */
#ifndef K25_TOK_H
#define K25_TOK_H

#include "k25.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct k25_tokenizer k25_tokenizer_t;

/*
 * Loads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json
 * (chat_template, bos_token/eos_token names).  Errors name the file and
 * the JSON path (err->file, err->field): a missing tokenizer.json is
 * K25_ENOTFOUND, bad JSON K25_EFORMAT with line and column, a wrong type
 * or a bad reference (a merge naming a token not in the vocab, a
 * duplicate id) K25_EFORMAT, an unsupported component K25_EUNSUPPORTED.
 * The caller owns *out (k25_tokenizer_destroy).
 */
int k25_tokenizer_load(const char *dir, k25_tokenizer_t **out, struct k25_error *err);

/*
 * The same from memory: json[len] is the tokenizer.json text, config[config_len]
 * the tokenizer_config.json text or NULL; name is what errors call the
 * file ("tokenizer.json" when NULL).  For tests and the fuzzer.
 */
int k25_tokenizer_load_mem(const char *json, size_t len, const char *config, size_t config_len,
                           const char *name, k25_tokenizer_t **out, struct k25_error *err);

/*
 * The tokenizer of the model cfg->model names: NULL in *out for a shape
 * preset (bytes), the folder's tokenizer.json for a directory.  A directory
 * without tokenizer.json is K25_ENOTFOUND naming DIR/tokenizer.json: text
 * is never silently bytes for a real model.
 */
int k25_tokenizer_for_model(const struct k25_config *cfg, k25_tokenizer_t **out, struct k25_error *err);

void k25_tokenizer_destroy(k25_tokenizer_t *t);

/* Highest id + 1 over the vocabulary and the added tokens (256 for NULL). */
int32_t k25_tokenizer_vocab_size(const k25_tokenizer_t *t);
/* DIR/tokenizer.json as loaded, "bytes" for NULL, the name given to _load_mem. */
const char *k25_tokenizer_source(const k25_tokenizer_t *t);

/* Flags of k25_tokenizer_encode. */
#define K25_TOK_ADD_SPECIAL 0x1u  /* apply the post-processor (BOS/EOS template), as HF's
                                     encode(text, add_special_tokens=True) */
/* Flags of k25_tokenizer_decode and the stream. */
#define K25_TOK_SKIP_SPECIAL 0x1u /* leave out added tokens marked special */

/*
 * Encodes text[len] into *ids[*n_ids] (malloc'd, the caller frees it, also
 * when *n_ids is 0).  t NULL: one id per byte, flags ignored.  Fails with
 * K25_EINVAL on invalid UTF-8 (err->field "text", the byte offset in the
 * message), K25_ENOMEM; *ids is NULL then.
 */
int k25_tokenizer_encode(const k25_tokenizer_t *t, const char *text, size_t len, unsigned flags, int32_t **ids,
                         int *n_ids, struct k25_error *err);

/*
 * Decodes ids[n_ids] into *text (malloc'd, NUL-terminated, valid UTF-8,
 * *len bytes without the NUL; len may be NULL) through the decoder chain,
 * as HF's decode(ids, skip_special_tokens).  Bytes that do not form UTF-8
 * become U+FFFD as HF does.  An id no token has (a model's padded vocab)
 * decodes to nothing, as HF; a negative id is K25_EINVAL.  t NULL: the
 * bytes themselves, invalid UTF-8 replaced, ids outside 0..255 refused.
 */
int k25_tokenizer_decode(const k25_tokenizer_t *t, const int32_t *ids, int n_ids, unsigned flags, char **text,
                         size_t *len, struct k25_error *err);

/* The vocabulary string of id (model vocab or added token content), NULL when none. */
const char *k25_tokenizer_id_to_token(const k25_tokenizer_t *t, int32_t id);
/* The id of a vocabulary string or added token, -1 when none. */
int32_t k25_tokenizer_token_to_id(const k25_tokenizer_t *t, const char *token, size_t len);
/* Whether id is an added token marked special. */
bool k25_tokenizer_is_special(const k25_tokenizer_t *t, int32_t id);

/*
 * Streaming decode for SSE: push generated ids one at a time and get the
 * text they complete.  A chunk never ends inside a UTF-8 sequence (bytes of
 * an incomplete character, or of a byte-fallback group still open, are
 * held back until the character completes), and the concatenation of every
 * chunk and the final flush equals k25_tokenizer_decode of all the ids.
 * Window: only the ids since the last emitted chunk are decoded again, so a
 * push costs O(tokens held back), not O(all tokens).
 * The stream borrows t (it must outlive the stream); t NULL is bytes.
 */
typedef struct k25_tok_stream k25_tok_stream_t;
int k25_tok_stream_create(const k25_tokenizer_t *t, unsigned flags, k25_tok_stream_t **out, struct k25_error *err);
/* Appends id; *text and *len is the newly completed text ("" and 0 while held back),
 * owned by the stream and valid until its next call. */
int k25_tok_stream_push(k25_tok_stream_t *s, int32_t id, const char **text, size_t *len, struct k25_error *err);
/* The text still held back (an incomplete tail becomes U+FFFD); resets the stream. */
int k25_tok_stream_flush(k25_tok_stream_t *s, const char **text, size_t *len, struct k25_error *err);
void k25_tok_stream_destroy(k25_tok_stream_t *s);

/*
 * Byte length of the longest prefix of s[n] that does not end inside a
 * UTF-8 sequence (an incomplete trailing sequence is left out; invalid
 * bytes count as complete).  For callers that stream bytes themselves.
 */
size_t k25_utf8_complete_len(const char *s, size_t n);

/* ------------------------------------------------------------ chat */

/*
 * Chat formats as named templates (C has no Jinja; docs/models.md "Chat
 * templates" shows exactly what each renders).  A folder's template is
 * recognised from tokenizer_config.json's chat_template by its distinctive
 * strings, or chosen by name (--chat-template NAME).
 */
enum k25_chat_template {
    K25_CHAT_NONE = 0, /* not recognised: chat is refused */
    K25_CHAT_LLAMA3,   /* <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> */
    K25_CHAT_LLAMA31,  /* llama3 with Llama 3.1's system header (knowledge cutoff date) */
    K25_CHAT_LLAMA2,   /* <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s> */
    K25_CHAT_CHATML,   /* <|im_start|>role\n...<|im_end|>\n (Qwen 3) */
    K25_CHAT_QWEN25,   /* chatml with Qwen 2.5's default system message */
    K25_CHAT_QWEN3,    /* chatml with Qwen 3's <think> handling of assistant turns */
    K25_CHAT_GEMMA,    /* <bos><start_of_turn>user\n...<end_of_turn>\n, system folded into the first user turn */
    K25_CHAT_N
};
const char *k25_chat_template_name(enum k25_chat_template t); /* "llama3", ... "none" */
/* K25_EINVAL listing the names for an unknown one. */
int k25_chat_template_parse(const char *name, enum k25_chat_template *out, struct k25_error *err);
/* "llama3|llama3.1|llama2|chatml|qwen2.5|qwen3|gemma", for help texts. */
const char *k25_chat_template_names(void);

/*
 * The folder's chat template as recognised from tokenizer_config.json.
 * K25_EUNSUPPORTED when there is none or it is not one of the named ones:
 * the message names DIR/tokenizer_config.json and --chat-template.
 */
int k25_tokenizer_chat_template(const k25_tokenizer_t *t, enum k25_chat_template *out, struct k25_error *err);

/* One chat message; roles "system", "user", "assistant" (others refused). */
struct k25_chat_msg {
    const char *role;
    const char *content;
};

/*
 * Renders msgs[n] with template tpl into *text (malloc'd, NUL-terminated);
 * add_generation_prompt appends the assistant header the model continues
 * from.  Bad roles or orders the template cannot express (llama2/gemma:
 * user and assistant must alternate after an optional system message) are
 * K25_EINVAL naming the message index.
 */
int k25_chat_render(enum k25_chat_template tpl, const struct k25_chat_msg *msgs, int n, bool add_generation_prompt,
                    char **text, struct k25_error *err);

/*
 * Renders and encodes: the rendered text already carries the template's
 * BOS, so it is encoded without the post-processor (as transformers'
 * apply_chat_template(tokenize=True) does).  t must not be NULL.
 */
int k25_chat_encode(const k25_tokenizer_t *t, enum k25_chat_template tpl, const struct k25_chat_msg *msgs, int n,
                    bool add_generation_prompt, int32_t **ids, int *n_ids, struct k25_error *err);

#endif /* K25_TOK_H */
