/*
 * tok_chat.c - chat formats as named templates (k25_tok.h).  C has no
 * Jinja: each family's template is written out here for text messages
 * (roles system, user, assistant; no tools, no images), and a folder's
 * tokenizer_config.json chat_template is recognised by its distinctive
 * strings.  docs/models.md "Chat templates" shows what each one renders.
 */
#include "tok_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

static const char *const names[K25_CHAT_N] = {"none", "llama3", "llama3.1", "llama2", "chatml", "qwen2.5", "qwen3",
                                              "gemma"};

const char *k25_chat_template_name(enum k25_chat_template t)
{
    return (unsigned)t < K25_CHAT_N ? names[t] : "?";
}

const char *k25_chat_template_names(void)
{
    return "llama3|llama3.1|llama2|chatml|qwen2.5|qwen3|gemma";
}

int k25_chat_template_parse(const char *name, enum k25_chat_template *out, struct k25_error *err)
{
    for (int i = 1; i < K25_CHAT_N; i++) {
        if (!strcmp(name, names[i])) {
            *out = (enum k25_chat_template)i;
            return K25_OK;
        }
    }
    return k25_error_set(err, K25_EINVAL, "command line", 0, "--chat-template",
                         "unknown template \"%s\" (one of %s)", name, k25_chat_template_names());
}

/*
 * Recognition by distinctive strings; the order matters (Llama 3.1's template also has
 * Llama 3's headers, Qwen's are ChatML).  A template that computes today's date
 * (strftime_now, Llama 3.2 and later) renders differently from day to day: not recognised.
 */
enum k25_chat_template tok_chat_recognise(const char *tpl)
{
    if (strstr(tpl, "<|start_header_id|>") && strstr(tpl, "<|eot_id|>")) {
        if (strstr(tpl, "strftime_now"))
            return K25_CHAT_NONE;
        if (strstr(tpl, "Cutting Knowledge Date: December 2023") && strstr(tpl, "26 Jul 2024"))
            return K25_CHAT_LLAMA31;
        if (strstr(tpl, "Cutting Knowledge Date"))
            return K25_CHAT_NONE;
        return K25_CHAT_LLAMA3;
    }
    if (strstr(tpl, "<|im_start|>") && strstr(tpl, "<|im_end|>")) {
        if (strstr(tpl, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."))
            return K25_CHAT_QWEN25;
        if (strstr(tpl, "<think>") && strstr(tpl, "reasoning_content"))
            return K25_CHAT_QWEN3;
        return K25_CHAT_CHATML;
    }
    if (strstr(tpl, "[INST]") && strstr(tpl, "<<SYS>>"))
        return K25_CHAT_LLAMA2;
    if (strstr(tpl, "<start_of_turn>") && strstr(tpl, "<end_of_turn>"))
        return K25_CHAT_GEMMA;
    return K25_CHAT_NONE;
}

int k25_tokenizer_chat_template(const k25_tokenizer_t *t, enum k25_chat_template *out, struct k25_error *err)
{
    *out = K25_CHAT_NONE;
    if (!t)
        return k25_error_set(err, K25_EUNSUPPORTED, NULL, 0, "--chat-template",
                             "the byte tokenizer of the presets has no chat template: chat needs a model folder "
                             "(or name one with --chat-template)");
    if (t->chat == K25_CHAT_NONE)
        return tok_fail(err, K25_EUNSUPPORTED, t->config_path[0] ? t->config_path : NULL, 0, "chat_template",
                        "chat is refused: %s; name one with --chat-template %s", t->chat_why,
                        k25_chat_template_names());
    *out = t->chat;
    return K25_OK;
}

/* ------------------------------------------------------------ rendering */

/* Python's str.isspace for a code point (what Jinja's trim strips). */
static bool py_space(uint32_t cp)
{
    if ((cp >= 9 && cp <= 13) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85)
        return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)cp);
    return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

/* s without leading/trailing whitespace (Jinja trim / Python strip()). */
static void trim(const char *s, size_t *a, size_t *b)
{
    size_t n = strlen(s), i = 0, e = n;
    while (i < n) {
        int l;
        uint32_t cp = tok_utf8_decode(s + i, &l);
        if (!py_space(cp))
            break;
        i += (size_t)l;
    }
    while (e > i) {
        size_t k = e - 1;
        while (k > i && ((unsigned char)s[k] & 0xc0) == 0x80)
            k--;
        int l;
        if (!py_space(tok_utf8_decode(s + k, &l)))
            break;
        e = k;
    }
    *a = i;
    *b = e;
}

struct out {
    struct tok_buf b;
    bool fail;
};

static void put(struct out *o, const char *s)
{
    if (tok_buf_put(&o->b, s, strlen(s)))
        o->fail = true;
}

static void putn(struct out *o, const char *s, size_t n)
{
    if (tok_buf_put(&o->b, s, n))
        o->fail = true;
}

static void put_trim(struct out *o, const char *s)
{
    size_t a, b;
    trim(s, &a, &b);
    putn(o, s + a, b - a);
}

/* s with the characters c stripped from the left (lstrip), right, or both. */
static void put_strip_ch(struct out *o, const char *s, size_t n, char c, bool left, bool right)
{
    size_t a = 0, b = n;
    while (left && a < b && s[a] == c)
        a++;
    while (right && b > a && s[b - 1] == c)
        b--;
    putn(o, s + a, b - a);
}

static const char *find_last(const char *s, const char *needle)
{
    const char *last = NULL, *p = s;
    while ((p = strstr(p, needle))) {
        last = p;
        p++;
    }
    return last;
}

static void render_llama3(struct out *o, const struct k25_chat_msg *m, int n, bool gen, bool v31)
{
    put(o, "<|begin_of_text|>");
    int i = 0;
    if (v31) {
        put(o, "<|start_header_id|>system<|end_header_id|>\n\n");
        put(o, "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (n > 0 && !strcmp(m[0].role, "system")) {
            put_trim(o, m[0].content);
            i = 1;
        }
        put(o, "<|eot_id|>");
    }
    for (; i < n; i++) {
        put(o, "<|start_header_id|>");
        put(o, m[i].role);
        put(o, "<|end_header_id|>\n\n");
        put_trim(o, m[i].content);
        put(o, "<|eot_id|>");
    }
    if (gen)
        put(o, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 and Gemma: after an optional first system message, user and assistant alternate. */
static int check_alternation(const struct k25_chat_msg *m, int n, enum k25_chat_template tpl, struct k25_error *err)
{
    int first = n > 0 && !strcmp(m[0].role, "system") ? 1 : 0;
    for (int i = first; i < n; i++) {
        const char *want = (i - first) % 2 == 0 ? "user" : "assistant";
        if (strcmp(m[i].role, want))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "messages",
                                 "messages[%d]: the %s template needs roles alternating user/assistant after an "
                                 "optional first system message; got \"%s\" where \"%s\" goes",
                                 i, k25_chat_template_name(tpl), m[i].role, want);
    }
    return K25_OK;
}

static void render_llama2(struct out *o, const struct k25_chat_msg *m, int n)
{
    int i = 0;
    const char *sys = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        sys = m[0].content;
        i = 1;
    }
    for (int k = 0; i < n; i++, k++) {
        struct out c = {0};
        if (k == 0 && sys) {
            put(&c, "<<SYS>>\n");
            put(&c, sys);
            put(&c, "\n<</SYS>>\n\n");
        }
        put(&c, m[i].content);
        if (c.fail) {
            o->fail = true;
            tok_buf_free(&c.b);
            return;
        }
        if (!strcmp(m[i].role, "user")) {
            put(o, "<s>[INST] ");
            put_trim(o, c.b.data);
            put(o, " [/INST]");
        } else {
            put(o, " ");
            put_trim(o, c.b.data);
            put(o, " </s>");
        }
        tok_buf_free(&c.b);
    }
}

static void render_chatml(struct out *o, const struct k25_chat_msg *m, int n, bool gen, bool qwen25)
{
    if (qwen25 && (n == 0 || strcmp(m[0].role, "system")))
        put(o, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
    for (int i = 0; i < n; i++) {
        put(o, "<|im_start|>");
        put(o, m[i].role);
        put(o, "\n");
        put(o, m[i].content);
        put(o, "<|im_end|>\n");
    }
    if (gen)
        put(o, "<|im_start|>assistant\n");
}

/* Qwen 3's template for text messages: earlier assistant turns lose their <think> part; the
 * assistant turns after the last user message keep (or get an empty) think block. */
static void render_qwen3(struct out *o, const struct k25_chat_msg *m, int n, bool gen)
{
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--) {
        if (!strcmp(m[i].role, "user")) {
            last_query = i;
            break;
        }
    }
    for (int i = 0; i < n; i++) {
        const char *c = m[i].content;
        if (!strcmp(m[i].role, "user") || !strcmp(m[i].role, "system")) {
            put(o, "<|im_start|>");
            put(o, m[i].role);
            put(o, "\n");
            put(o, c);
            put(o, "<|im_end|>\n");
            continue;
        }
        const char *content = c, *end_think = find_last(c, "</think>");
        size_t clen = strlen(c);
        const char *rs = "";
        size_t rlen = 0;
        if (end_think) {
            /* content: after the last </think>, lstrip('\n'); reasoning: before the first
             * </think>, rstrip('\n'), after its last <think>, lstrip('\n') */
            content = end_think + strlen("</think>");
            clen = strlen(content);
            while (clen && *content == '\n') {
                content++;
                clen--;
            }
            const char *first_end = strstr(c, "</think>");
            size_t blen = (size_t)(first_end - c);
            while (blen && c[blen - 1] == '\n')
                blen--;
            rs = c;
            for (const char *p = c; (p = memmem(p, blen - (size_t)(p - c), "<think>", 7)); p++)
                rs = p + 7;
            rlen = blen - (size_t)(rs - c);
            while (rlen && *rs == '\n') {
                rs++;
                rlen--;
            }
        }
        put(o, "<|im_start|>assistant\n");
        if (i > last_query && (i == n - 1 || rlen > 0)) {
            put(o, "<think>\n");
            put_strip_ch(o, rs, rlen, '\n', true, true);
            put(o, "\n</think>\n\n");
            put_strip_ch(o, content, clen, '\n', true, false);
        } else {
            putn(o, content, clen);
        }
        put(o, "<|im_end|>\n");
    }
    if (gen)
        put(o, "<|im_start|>assistant\n");
}

static void render_gemma(struct out *o, const struct k25_chat_msg *m, int n, bool gen)
{
    put(o, "<bos>");
    int i = 0;
    const char *prefix = NULL;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        prefix = m[0].content;
        i = 1;
    }
    for (int k = 0; i < n; i++, k++) {
        put(o, "<start_of_turn>");
        put(o, !strcmp(m[i].role, "assistant") ? "model" : m[i].role);
        put(o, "\n");
        if (k == 0 && prefix) {
            put(o, prefix);
            put(o, "\n\n");
        }
        put_trim(o, m[i].content);
        put(o, "<end_of_turn>\n");
    }
    if (gen)
        put(o, "<start_of_turn>model\n");
}

int k25_chat_render(enum k25_chat_template tpl, const struct k25_chat_msg *msgs, int n, bool add_generation_prompt,
                    char **text, struct k25_error *err)
{
    *text = NULL;
    int rc;
    if (tpl <= K25_CHAT_NONE || tpl >= K25_CHAT_N)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--chat-template", "no chat template (one of %s)",
                             k25_chat_template_names());
    if (n < 1)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "messages", "messages: at least one message is needed");
    for (int i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content)
            return k25_error_set(err, K25_EINVAL, NULL, 0, "messages", "messages[%d]: role and content are needed", i);
        if (strcmp(msgs[i].role, "system") && strcmp(msgs[i].role, "user") && strcmp(msgs[i].role, "assistant"))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "messages",
                                 "messages[%d]: role \"%s\" is not supported (system, user, assistant)", i,
                                 msgs[i].role);
        if (tok_utf8_check(msgs[i].content, strlen(msgs[i].content)) != strlen(msgs[i].content))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "messages", "messages[%d]: content is not valid UTF-8", i);
    }
    if ((tpl == K25_CHAT_LLAMA2 || tpl == K25_CHAT_GEMMA) && (rc = check_alternation(msgs, n, tpl, err)) != K25_OK)
        return rc;
    if (tpl == K25_CHAT_LLAMA31) {
        for (int i = 1; i < n; i++)
            if (!strcmp(msgs[i].role, "system"))
                return k25_error_set(err, K25_EINVAL, NULL, 0, "messages",
                                     "messages[%d]: the llama3.1 template takes a system message only first", i);
    }
    struct out o = {0};
    put(&o, "");
    switch (tpl) {
    case K25_CHAT_LLAMA3: render_llama3(&o, msgs, n, add_generation_prompt, false); break;
    case K25_CHAT_LLAMA31: render_llama3(&o, msgs, n, add_generation_prompt, true); break;
    case K25_CHAT_LLAMA2: render_llama2(&o, msgs, n); break;
    case K25_CHAT_CHATML: render_chatml(&o, msgs, n, add_generation_prompt, false); break;
    case K25_CHAT_QWEN25: render_chatml(&o, msgs, n, add_generation_prompt, true); break;
    case K25_CHAT_QWEN3: render_qwen3(&o, msgs, n, add_generation_prompt); break;
    case K25_CHAT_GEMMA: render_gemma(&o, msgs, n, add_generation_prompt); break;
    default: break;
    }
    if (o.fail) {
        tok_buf_free(&o.b);
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    }
    *text = o.b.data;
    return K25_OK;
}

int k25_chat_encode(const k25_tokenizer_t *t, enum k25_chat_template tpl, const struct k25_chat_msg *msgs, int n,
                    bool add_generation_prompt, int32_t **ids, int *n_ids, struct k25_error *err)
{
    char *text;
    *ids = NULL;
    *n_ids = 0;
    if (!t)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--chat-template", "chat needs a model folder's tokenizer");
    int rc = k25_chat_render(tpl, msgs, n, add_generation_prompt, &text, err);
    if (rc != K25_OK)
        return rc;
    rc = k25_tokenizer_encode(t, text, strlen(text), 0, ids, n_ids, err);
    free(text);
    return rc;
}
