/*
 * cli_tokenize.c - `k25 tokenize --model DIR`: the model folder's
 * tokenizer.json (k25_tok.h) from the command line.  Encodes text from a
 * file or stdin into ids, decodes ids back into text (--decode), renders
 * and encodes a chat (--chat), and measures encode throughput on one core
 * (--bench).  Argument parsing and output only; the work is libk25's.
 */
#include "cli.h"
#include "cliopt.h"
#include "k25_tok.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Ids as written for --decode: a JSON array, or integers separated by commas and whitespace. */
static int parse_ids(const char *s, int32_t **out, int *n, struct k25_error *err)
{
    int cap = 64, cnt = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    if (!v)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    const char *p = s;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    bool bracket = *p == '[';
    if (bracket)
        p++;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == ',')
            p++;
        if (!*p || (bracket && *p == ']'))
            break;
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return k25_error_set(err, K25_EINVAL, "input", 0, "ids",
                                 "--decode: expected token ids (non-negative integers), bad item at byte %d",
                                 (int)(p - s));
        }
        if (cnt == cap) {
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)(cap *= 2));
            if (!nv) {
                free(v);
                return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
            }
            v = nv;
        }
        v[cnt++] = (int32_t)x;
        p = end;
    }
    *out = v;
    *n = cnt;
    return K25_OK;
}

/* A chat for --chat: a JSON array of {"role", "content"} (or {"messages": [...]}). */
static int parse_chat(const char *text, size_t len, const char *path, json_t **root, struct k25_chat_msg **msgs,
                      int *n, struct k25_error *err)
{
    json_error_t je;
    *root = json_loadb(text, len, JSON_DECODE_ANY, &je);
    if (!*root)
        return k25_error_set(err, K25_EFORMAT, path, je.line, NULL, "column %d: %s", je.column, je.text);
    json_t *arr = json_is_object(*root) ? json_object_get(*root, "messages") : *root;
    if (!json_is_array(arr))
        return k25_error_set(err, K25_EFORMAT, path, 0, NULL,
                             "expected an array of {\"role\", \"content\"} (or {\"messages\": [...]})");
    *n = (int)json_array_size(arr);
    *msgs = calloc((size_t)*n + 1, sizeof(**msgs));
    if (!*msgs)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    for (int i = 0; i < *n; i++) {
        json_t *m = json_array_get(arr, (size_t)i), *r = json_object_get(m, "role"), *c = json_object_get(m, "content");
        if (!json_is_string(r) || !json_is_string(c))
            return k25_error_set(err, K25_EFORMAT, path, 0, NULL, "messages[%d]: needs string \"role\" and \"content\"",
                                 i);
        (*msgs)[i].role = json_string_value(r);
        (*msgs)[i].content = json_string_value(c);
    }
    return K25_OK;
}

static int print_ids(const int32_t *ids, int n, bool json, const char *text)
{
    if (json) {
        json_t *o = json_object(), *a = json_array();
        for (int i = 0; i < n; i++)
            json_array_append_new(a, json_integer(ids[i]));
        json_object_set_new(o, "n_tokens", json_integer(n));
        json_object_set_new(o, "ids", a);
        if (text)
            json_object_set_new(o, "text", json_string(text));
        int rc = json_dumpf(o, stdout, JSON_COMPACT) == 0 && fputc('\n', stdout) != EOF ? 0 : -1;
        json_decref(o);
        return rc;
    }
    for (int i = 0; i < n; i++)
        if (printf(i ? ",%d" : "%d", ids[i]) < 0)
            return -1;
    return putchar('\n') == EOF ? -1 : 0;
}

/*
 * --bench: encode text[len] on this thread; the first encode is cold (empty word cache),
 * then rounds until at least min_s seconds, best round reported.  A document of at least
 * 128K tokens is built from copies of the text (each copy cut at a different offset so it is
 * not one repeated block) and timed the same way.
 */
/* One encode of text[len]: whole, or line by line (lines: each line with its newline a call). */
static int encode_once(const k25_tokenizer_t *t, const char *text, size_t len, unsigned flags, bool lines, int *n,
                       struct k25_error *err)
{
    int32_t *ids;
    int k, rc;
    *n = 0;
    if (!lines) {
        rc = k25_tokenizer_encode(t, text, len, flags, &ids, n, err);
        free(ids);
        return rc;
    }
    for (size_t a = 0; a < len;) {
        const char *nl = memchr(text + a, '\n', len - a);
        size_t e = nl ? (size_t)(nl - text) + 1 : len;
        if ((rc = k25_tokenizer_encode(t, text + a, e - a, flags, &ids, &k, err)) != K25_OK)
            return rc;
        free(ids);
        *n += k;
        a = e;
    }
    return K25_OK;
}

static int bench(const k25_tokenizer_t *t, const char *text, size_t len, unsigned flags, double min_s, bool json,
                 bool lines, struct k25_error *err)
{
    int32_t *ids;
    int n;
    uint64_t t0 = k25_now_ns();
    int rc = encode_once(t, text, len, flags, lines, &n, err);
    uint64_t cold_ns = k25_now_ns() - t0;
    if (rc != K25_OK)
        return rc;
    uint64_t best = UINT64_MAX, total = 0;
    int rounds = 0;
    while (total < (uint64_t)(min_s * 1e9) || rounds < 3) {
        t0 = k25_now_ns();
        if ((rc = encode_once(t, text, len, flags, lines, &n, err)) != K25_OK)
            return rc;
        uint64_t dt = k25_now_ns() - t0;
        total += dt;
        best = dt < best ? dt : best;
        rounds++;
    }
    /* the 128K-token document */
    size_t cap = len * 2 + 1024, dl = 0;
    char *doc = NULL;
    int dn = 0;
    uint64_t doc_best = UINT64_MAX;
    if (n > 0) {
        int copies = (131072 + n - 1) / n + 1;
        doc = malloc((size_t)copies * (len + 1) + 1);
        if (!doc)
            return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        for (int c = 0; c < copies; c++) {
            /* start each copy at a line boundary past a rotating offset */
            size_t off = len ? (size_t)((uint64_t)c * 7919u % len) : 0;
            while (off > 0 && off < len && text[off - 1] != '\n')
                off++;
            if (off >= len)
                off = 0;
            memcpy(doc + dl, text + off, len - off);
            dl += len - off;
            memcpy(doc + dl, text, off);
            dl += off;
            doc[dl++] = '\n';
        }
        doc[dl] = 0;
        (void)cap;
        for (int r = 0; r < 3; r++) {
            t0 = k25_now_ns();
            if ((rc = k25_tokenizer_encode(t, doc, dl, flags, &ids, &dn, err)) != K25_OK) {
                free(doc);
                return rc;
            }
            uint64_t dt = k25_now_ns() - t0;
            free(ids);
            doc_best = dt < doc_best ? dt : doc_best;
        }
        free(doc);
    }
    double s = (double)best / 1e9;
    double tps = s > 0 ? n / s : 0, mbs = s > 0 ? (double)len / 1e6 / s : 0;
    double doc_ms = doc_best == UINT64_MAX ? 0 : (double)doc_best / 1e6;
    if (json) {
        json_t *o = json_pack("{s:s, s:b, s:I, s:i, s:f, s:f, s:f, s:f, s:i, s:i, s:I, s:f, s:i}", "tokenizer",
                              k25_tokenizer_source(t), "lines", lines, "bytes", (json_int_t)len, "tokens", n, "cold_ms",
                              (double)cold_ns / 1e6, "best_ms", s * 1e3, "tokens_per_s", tps, "mb_per_s", mbs,
                              "rounds", rounds, "threads", 1, "doc_bytes", (json_int_t)dl, "doc_ms", doc_ms,
                              "doc_tokens", dn);
        json_dumpf(o, stdout, JSON_INDENT(2));
        putchar('\n');
        json_decref(o);
    } else {
        printf("tokenizer   %s\n", k25_tokenizer_source(t));
        printf("input       %zu bytes, %d tokens\n", len, n);
        printf("encode      %.0f tokens/s, %.2f MB/s (best of %d rounds, %.3f ms; first encode %.3f ms), 1 thread%s\n",
               tps, mbs, rounds, s * 1e3, (double)cold_ns / 1e6, lines ? ", line by line" : "");
        if (dn > 0)
            printf("document    %d tokens (%zu bytes) in %.1f ms (best of 3)\n", dn, dl, doc_ms);
    }
    return K25_OK;
}

int k25_cmd_tokenize(int argc, char **argv)
{
    struct k25_error err;
    k25_error_clear(&err);
    struct k25_config cfg;
    k25_config_init(&cfg);
    const char *model = NULL, *text_arg = NULL, *tpl_name = NULL;
    bool decode = false, json = false, no_special = false, skip_special = false, do_bench = false, chat = false;
    bool no_gen = false, bench_lines = false;
    double bench_s = 1.0;
    int status = 2;
    k25_tokenizer_t *t = NULL;
    char *input = NULL, *out_text = NULL;
    int32_t *ids = NULL;
    json_t *chat_root = NULL;
    struct k25_chat_msg *msgs = NULL;
    const struct k25_opt opts[] = {
        {.names = {"--model", "-m"}, .type = K25_OPT_PATH, .dest = &model, .metavar = "DIR",
         .help = "model folder with tokenizer.json (a preset name: the byte tokenizer)"},
        {.names = {"--text"}, .type = K25_OPT_STRING, .dest = &text_arg, .metavar = "TEXT",
         .help = "the input itself instead of FILE or stdin"},
        {.names = {"--decode", "-d"}, .type = K25_OPT_FLAG, .dest = &decode,
         .help = "input is token ids (JSON array or comma/space separated): print the text"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json,
         .help = "one JSON object: {\"n_tokens\", \"ids\"} (with --chat also \"text\"; --decode: {\"text\"})"},
        {.names = {"--no-special-tokens"}, .type = K25_OPT_FLAG, .dest = &no_special,
         .help = "encode without the post-processor's template (no BOS/EOS added)"},
        {.names = {"--skip-special-tokens"}, .type = K25_OPT_FLAG, .dest = &skip_special,
         .help = "--decode: leave special tokens out of the text"},
        {.names = {"--chat"}, .type = K25_OPT_FLAG, .dest = &chat,
         .help = "input is a chat, a JSON array of {\"role\", \"content\"}: render it with the chat\n"
                 "template and encode it (the template carries BOS; no post-processor)"},
        {.names = {"--chat-template"}, .type = K25_OPT_STRING, .dest = &tpl_name, .metavar = "NAME",
         .deflt = "recognised from tokenizer_config.json",
         .help = "--chat: the named template (llama3|llama3.1|llama2|chatml|qwen2.5|qwen3|gemma)"},
        {.names = {"--no-generation-prompt"}, .type = K25_OPT_FLAG, .dest = &no_gen,
         .help = "--chat: leave out the assistant header the model continues from"},
        {.names = {"--bench"}, .type = K25_OPT_FLAG, .dest = &do_bench,
         .help = "encode throughput of the input on one thread (tokens/s, MB/s) and the time of\n"
                 "a >= 128K-token document built from it"},
        {.names = {"--bench-lines"}, .type = K25_OPT_FLAG, .dest = &bench_lines,
         .help = "--bench: encode each line of the input as its own call (many short texts)"},
        {.names = {"--bench-seconds"}, .type = K25_OPT_DOUBLE, .dest = &bench_s, .dmin = 0.01, .dmax = 600,
         .metavar = "S", .help = "--bench: measure for at least S seconds"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "tokenize",
        .usage = "tokenize --model DIR [FILE | - | --text TEXT] [--decode] [--json] [--chat [--chat-template NAME]]\n"
                 "                    [--no-special-tokens] [--skip-special-tokens]\n"
                 "                    [--bench [--bench-lines] [--bench-seconds S]]",
        .about = "Encodes text (FILE, stdin, or --text) with the model folder's tokenizer.json into token ids,\n"
                 "printed comma-separated; --decode turns ids back into text.  The same tokenizer as\n"
                 "`k25 run`, `k25 serve` and the gold tools use (docs/models.md \"Tokenizers\").\n",
        .opts = opts,
        .epilog = "Exit status: 0 ok, 1 output could not be written, 2 bad input (unsupported tokenizer.json,\n"
                  "invalid UTF-8, bad ids).\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK)
        goto out_err;
    if (!model) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--model", "give --model DIR (k25 tokenize --help)");
        goto out_err;
    }
    if (argc > 2 || (argc == 2 && text_arg)) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, NULL, "one input only: FILE, - or --text");
        goto out_err;
    }
    if (decode + chat + do_bench > 1) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, NULL, "give one of --decode, --chat, --bench");
        goto out_err;
    }
    snprintf(cfg.model, sizeof(cfg.model), "%s", model);
    if (k25_tokenizer_for_model(&cfg, &t, &err) != K25_OK)
        goto out_err;
    size_t len;
    const char *src = text_arg ? "--text" : argc == 2 ? argv[1] : "-";
    if (text_arg) {
        input = strdup(text_arg);
        len = strlen(text_arg);
    } else if (!(input = k25_file_read(src, &len, &err))) {
        goto out_err;
    }
    if (!input) {
        k25_error_set(&err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
        goto out_err;
    }
    int n = 0;
    unsigned eflags = no_special ? 0 : K25_TOK_ADD_SPECIAL;
    if (do_bench) {
        if (bench(t, input, len, eflags, bench_s, json, bench_lines, &err) != K25_OK)
            goto out_err;
    } else if (decode) {
        size_t tl;
        if (parse_ids(input, &ids, &n, &err) != K25_OK ||
            k25_tokenizer_decode(t, ids, n, skip_special ? K25_TOK_SKIP_SPECIAL : 0, &out_text, &tl, &err) != K25_OK)
            goto out_err;
        if (json) {
            json_t *o = json_pack("{s:s%}", "text", out_text, tl);
            int w = json_dumpf(o, stdout, JSON_COMPACT);
            json_decref(o);
            if (w != 0 || putchar('\n') == EOF)
                goto out_write;
        } else if (fwrite(out_text, 1, tl, stdout) != tl) {
            goto out_write;
        }
    } else if (chat) {
        int nm = 0;
        enum k25_chat_template tpl = K25_CHAT_NONE;
        if (parse_chat(input, len, src, &chat_root, &msgs, &nm, &err) != K25_OK)
            goto out_err;
        if (tpl_name ? k25_chat_template_parse(tpl_name, &tpl, &err) : k25_tokenizer_chat_template(t, &tpl, &err))
            goto out_err;
        if (k25_chat_render(tpl, msgs, nm, !no_gen, &out_text, &err) != K25_OK ||
            k25_chat_encode(t, tpl, msgs, nm, !no_gen, &ids, &n, &err) != K25_OK)
            goto out_err;
        if (print_ids(ids, n, json, json ? out_text : NULL) != 0)
            goto out_write;
    } else {
        if (k25_tokenizer_encode(t, input, len, eflags, &ids, &n, &err) != K25_OK)
            goto out_err;
        if (print_ids(ids, n, json, NULL) != 0)
            goto out_write;
    }
    if (fflush(stdout) != 0)
        goto out_write;
    status = 0;
    goto out;
out_write:
    fprintf(stderr, "k25 tokenize: writing the output failed: %s\n", strerror(errno));
    status = 1;
    goto out;
out_err:
    fprintf(stderr, "k25 tokenize: %s\n", err.msg);
    status = err.code == K25_ENOMEM || err.code == K25_EIO ? 1 : 2;
out:
    json_decref(chat_root);
    free(msgs);
    free(ids);
    free(out_text);
    free(input);
    k25_tokenizer_destroy(t);
    return status;
}
