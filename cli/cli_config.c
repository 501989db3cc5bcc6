/*
 * cli_config.c - engine configuration from the command line, and the
 * `k25 config` subcommand.
 *
 * k25_cli_apply_config is what every subcommand that runs the engine calls
 * on its argv: it loads `--config FILE` (wherever it appears), then applies
 * each `--key-with-dashes VALUE` / `--key=VALUE` flag naming a config key,
 * in order, so the layers are defaults < file < command line.  Arguments it
 * does not know stay in argv, in order, for the subcommand's own parser.
 *
 * `k25 config` prints the effective config (a `key: value` table that is
 * itself a valid config file, or JSON) and `k25 config --keys` the key
 * table; both only call the engine's config API (engine/config.c).
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <jansson.h>

#include <stdbool.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SRC_CLI "command line"

/*
 * The config key a flag name names ("prefill-chunk-size" or
 * "prefill_chunk_size", len bytes, without the leading "--"), or NULL.
 */
static const struct k25_config_key_info *flag_key(const char *name, size_t len)
{
    char key[128];
    if (len == 0 || len >= sizeof(key))
        return NULL;
    for (size_t i = 0; i < len; i++)
        key[i] = name[i] == '-' ? '_' : name[i];
    key[len] = '\0';
    for (int i = 0; i < k25_config_key_count(); i++) {
        const struct k25_config_key_info *k = k25_config_key(i);
        if (strcmp(k->key, key) == 0)
            return k;
    }
    return NULL;
}

/* "--prefill-chunk-size" for key "prefill_chunk_size". */
static void key_to_flag(const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, "--%s", key);
    for (size_t i = 2; i < n && i < cap; i++)
        if (out[i] == '_')
            out[i] = '-';
}

/* The words a bool key's value may be (engine/config.c accepts the same). */
static bool is_bool_word(const char *s)
{
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "1", "0"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcasecmp(s, words[i]) == 0)
            return true;
    return false;
}

/*
 * Sets key from a command-line value.  Errors read
 * "command line: '--prefill-chunk-size': expected a positive integer, got
 * "abc"": the flag as the user writes it, not the YAML key.
 */
static int set_from_flag(struct k25_config *cfg, const struct k25_config_key_info *k,
                         const char *value, struct k25_error *err)
{
    struct k25_error e;
    k25_error_clear(&e);
    int rc = k25_config_set(cfg, k->key, value, NULL, 0, &e);
    if (rc == 0)
        return 0;
    /* Without a file, k25_config_set's message is "'KEY': WHAT"; keep WHAT. */
    char flag[128];
    key_to_flag(k->key, flag, sizeof(flag));
    const char *what = e.msg;
    size_t klen = strlen(k->key);
    if (what[0] == '\'' && strncmp(what + 1, k->key, klen) == 0 && strncmp(what + 1 + klen, "': ", 3) == 0)
        what += klen + 4;
    return k25_error_set(err, rc, SRC_CLI, 0, flag, "%s", what);
}

/*
 * Applies --config and config-key flags (see cli.h).  Two passes over
 * argv[1..] up to a "--" (which ends options and stays in argv): the first
 * loads every --config FILE in order, the second applies the key flags in
 * order.  A bool key's bare flag means true; it also takes a following
 * true/false/yes/no/on/off/1/0 word, or =VALUE.  Other keys take the next
 * argument (which must not start with "--") or =VALUE.
 * On error, cfg and argv are left as they were.
 */
int k25_cli_apply_config(int *argc, char **argv, struct k25_config *cfg, struct k25_error *err)
{
    K25_ASSERT(argc && argv && cfg);
    int n = *argc;
    int rc = 0;
    if (n <= 1)
        return 0;
    struct k25_config tmp = *cfg;
    bool *used = calloc((size_t)n, sizeof(bool));
    if (!used)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");

    int end = n; /* first index not scanned: the "--" separator */
    for (int i = 1; i < n; i++)
        if (strcmp(argv[i], "--") == 0) {
            end = i;
            break;
        }

    /* Pass 1: the file(s), before any flag, wherever they appear. */
    for (int i = 1; i < end; i++) {
        const char *path = NULL;
        if (strcmp(argv[i], "--config") == 0) {
            if (i + 1 >= end || strncmp(argv[i + 1], "--", 2) == 0) {
                rc = k25_error_set(err, K25_EINVAL, SRC_CLI, 0, "--config", "needs a file name");
                goto out_free;
            }
            used[i] = used[i + 1] = true;
            path = argv[++i];
        } else if (strncmp(argv[i], "--config=", 9) == 0) {
            used[i] = true;
            path = argv[i] + 9;
            if (!*path) {
                rc = k25_error_set(err, K25_EINVAL, SRC_CLI, 0, "--config", "needs a file name");
                goto out_free;
            }
        }
        if (path && (rc = k25_config_load_yaml(&tmp, path, err)))
            goto out_free;
    }

    /* Pass 2: key flags, in order; the CLI wins over the file. */
    for (int i = 1; i < end; i++) {
        if (used[i] || strncmp(argv[i], "--", 2) != 0)
            continue;
        const char *name = argv[i] + 2;
        const char *eq = strchr(name, '=');
        const struct k25_config_key_info *k = flag_key(name, eq ? (size_t)(eq - name) : strlen(name));
        if (!k)
            continue; /* not ours: left for the caller */
        bool is_bool = strcmp(k->type, "bool") == 0;
        const char *value;
        used[i] = true;
        if (eq) {
            value = eq + 1;
        } else if (is_bool) {
            value = "true";
            if (i + 1 < end && is_bool_word(argv[i + 1])) {
                used[i + 1] = true;
                value = argv[++i];
            }
        } else {
            if (i + 1 >= end || strncmp(argv[i + 1], "--", 2) == 0) {
                char flag[128];
                key_to_flag(k->key, flag, sizeof(flag));
                rc = k25_error_set(err, K25_EINVAL, SRC_CLI, 0, flag, "needs a value (%s, %s)",
                                   k->type, k->range);
                goto out_free;
            }
            used[i + 1] = true;
            value = argv[++i];
        }
        if ((rc = set_from_flag(&tmp, k, value, err)))
            goto out_free;
    }

    /* Success: commit, and drop the consumed arguments keeping the order. */
    *cfg = tmp;
    int w = 1;
    for (int i = 1; i < n; i++)
        if (!used[i])
            argv[w++] = argv[i];
    if (w < n)
        argv[w] = NULL;
    *argc = w;

out_free:
    free(used);
    return rc;
}

/* Placeholder of a key's value in help texts. */
static const char *value_placeholder(const struct k25_config_key_info *k)
{
    if (!strcmp(k->type, "int"))
        return "N";
    if (!strcmp(k->type, "float"))
        return "X";
    if (!strcmp(k->type, "bool"))
        return "[BOOL]";
    if (!strcmp(k->type, "enum"))
        return k->range;
    return "TEXT";
}

void k25_cli_print_config_flags(FILE *out)
{
    enum { COL = 38 };
    fprintf(out, "  %-*s YAML file of key: value settings, applied before the flags below\n",
            COL, "--config FILE");
    for (int i = 0; i < k25_config_key_count(); i++) {
        const struct k25_config_key_info *k = k25_config_key(i);
        char flag[128], left[256];
        key_to_flag(k->key, flag, sizeof(flag));
        int n = snprintf(left, sizeof(left), "%s %s", flag, value_placeholder(k));
        const char *deflt = !strcmp(k->type, "string") && !*k->deflt ? "\"\"" : k->deflt;
        if (n > COL) /* too wide: help on its own line */
            fprintf(out, "  %s\n  %-*s %s (default: %s)\n", left, COL, "", k->help, deflt);
        else
            fprintf(out, "  %-*s %s (default: %s)\n", COL, left, k->help, deflt);
    }
}

/* ------------------------------------------------------------ k25 config */

/* A string as a YAML scalar: plain when that reads back the same, else quoted. */
static void print_yaml_string(FILE *out, const char *s)
{
    bool plain = *s && !strchr("-?:,[]{}#&*!|>'\"%@`~ ", s[0]);
    for (const char *p = s; plain && *p; p++)
        if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') ||
              strchr("_./-+", *p)))
            plain = false;
    if (plain && (!strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL")))
        plain = false;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\x%02x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* A JSON scalar of the config as YAML text. */
static void print_value(FILE *out, const json_t *v)
{
    char buf[64];
    switch (json_typeof(v)) {
    case JSON_STRING: print_yaml_string(out, json_string_value(v)); break;
    case JSON_INTEGER: fprintf(out, "%lld", (long long)json_integer_value(v)); break;
    case JSON_REAL:
        /* Shortest of 15 or 17 digits that reads back the same double. */
        snprintf(buf, sizeof(buf), "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            snprintf(buf, sizeof(buf), "%.17g", json_real_value(v));
        fputs(buf, out);
        break;
    case JSON_TRUE: fputs("true", out); break;
    case JSON_FALSE: fputs("false", out); break;
    default: fputs("null", out); break;
    }
}

/* The effective config as `key: value  # default[: X]` lines.  0 or K25_ENOMEM. */
static int print_config_table(FILE *out, const struct k25_config *cfg)
{
    int rc = K25_ENOMEM;
    struct k25_config def;
    k25_config_init(&def);
    char *cur_text = k25_config_to_json(cfg);
    char *def_text = k25_config_to_json(&def);
    json_t *cur = cur_text ? json_loads(cur_text, 0, NULL) : NULL;
    json_t *dj = def_text ? json_loads(def_text, 0, NULL) : NULL;
    if (!cur || !dj)
        goto out_free;

    size_t width = 0;
    for (int i = 0; i < k25_config_key_count(); i++)
        if (strlen(k25_config_key(i)->key) > width)
            width = strlen(k25_config_key(i)->key);
    for (int i = 0; i < k25_config_key_count(); i++) {
        const struct k25_config_key_info *k = k25_config_key(i);
        const json_t *v = json_object_get(cur, k->key);
        const json_t *d = json_object_get(dj, k->key);
        if (!v || !d)
            goto out_free;
        fprintf(out, "%s:%*s ", k->key, (int)(width - strlen(k->key)), "");
        /* Pad the value column using a measured copy of the value. */
        char *vtext = NULL;
        size_t vlen = 0;
        FILE *mem = open_memstream(&vtext, &vlen);
        if (!mem)
            goto out_free;
        print_value(mem, v);
        if (fclose(mem) != 0) {
            free(vtext);
            goto out_free;
        }
        fprintf(out, "%-12s", vtext);
        free(vtext);
        if (json_equal(v, d)) {
            fprintf(out, "  # default\n");
        } else {
            fprintf(out, "  # default: ");
            print_value(out, d);
            fputc('\n', out);
        }
    }
    rc = 0;
out_free:
    json_decref(cur);
    json_decref(dj);
    free(cur_text);
    free(def_text);
    return rc;
}

/* `k25 config --keys`: the key table, as text or a JSON array. */
static int print_keys(FILE *out, bool as_json)
{
    int n = k25_config_key_count();
    if (as_json) {
        int rc = K25_ENOMEM;
        json_t *arr = json_array();
        if (!arr)
            return K25_ENOMEM;
        for (int i = 0; i < n; i++) {
            const struct k25_config_key_info *k = k25_config_key(i);
            char flag[128];
            key_to_flag(k->key, flag, sizeof(flag));
            json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "key", k->key, "flag", flag,
                                  "type", k->type, "default", k->deflt, "range", k->range,
                                  "help", k->help);
            if (!o || json_array_append_new(arr, o) != 0)
                goto out_decref;
        }
        char *text = json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        if (!text)
            goto out_decref;
        fprintf(out, "%s\n", text);
        free(text);
        rc = 0;
    out_decref:
        json_decref(arr);
        return rc;
    }
    fprintf(out, "%-30s %-7s %-8s %-24s %s\n", "KEY", "TYPE", "DEFAULT", "RANGE", "MEANING");
    for (int i = 0; i < n; i++) {
        const struct k25_config_key_info *k = k25_config_key(i);
        const char *deflt = !strcmp(k->type, "string") && !*k->deflt ? "\"\"" : k->deflt;
        fprintf(out, "%-30s %-7s %-8s %-24s %s\n", k->key, k->type, deflt, k->range, k->help);
    }
    return 0;
}

/*
 * k25 config [--config FILE] [flags] [--json] | --keys [--json] | --help.
 * Exit status 0, or 2 with the message on stderr for bad input.
 */
int k25_cmd_config(int argc, char **argv)
{
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    k25_error_clear(&err);
    bool as_json = false, keys = false;
    const struct k25_opt opts[] = {
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &as_json,
         .help = "print one JSON object (keys in table order, enums as names)"},
        {.names = {"--keys"}, .type = K25_OPT_FLAG, .dest = &keys,
         .help = "list every key with its type, default, range and meaning"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "config",
        .usage = "config [--config FILE] [--KEY VALUE ...] [--json]\n"
                 "       k25 config --keys [--json]",
        .about = "Prints the effective engine configuration: defaults, then the YAML file given\n"
                 "with --config, then the flags (the command line wins).  The plain output is\n"
                 "itself a valid config file; each line is marked with its default.\n",
        .opts = opts,
        .config = &cfg,
        .epilog = "See docs/config.md for the file format and every key.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (k25_cliopt_unknown(&err)) {
        /* an unknown option: "did you mean" names the closest option or config flag */
        char sug[128];
        if (k25_cliopt_suggest(&cmd, err.field, sug, sizeof(sug)))
            fprintf(stderr, "k25 config: unknown option '%s' (did you mean '%s'?)\n", err.field, sug);
        else
            fprintf(stderr, "k25 config: unknown argument '%s' (k25 config --help lists the options)\n", err.field);
        return 2;
    }
    if (prc != K25_OK) {
        fprintf(stderr, "k25 config: %s\n", err.msg);
        return 2;
    }
    if (argc > 1) {
        fprintf(stderr, "k25 config: unknown argument '%s' (k25 config --help lists the options)\n", argv[1]);
        return 2;
    }

    if (keys) {
        if (print_keys(stdout, as_json) != 0) {
            fprintf(stderr, "k25 config: out of memory\n");
            return 2;
        }
        return fflush(stdout) == 0 ? 0 : 1;
    }

    if (k25_config_validate(&cfg, &err) != 0) {
        fprintf(stderr, "k25 config: %s\n", err.msg);
        return 2;
    }
    if (as_json) {
        char *text = k25_config_to_json(&cfg);
        if (!text) {
            fprintf(stderr, "k25 config: out of memory\n");
            return 2;
        }
        printf("%s\n", text);
        free(text);
    } else if (print_config_table(stdout, &cfg) != 0) {
        fprintf(stderr, "k25 config: out of memory\n");
        return 2;
    }
    if (fflush(stdout) != 0) {
        perror("k25 config: writing output");
        return 1;
    }
    return 0;
}

int64_t k25_cli_parse_count(const char *s, const char **end_out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    *end_out = s;
    if (end == s || errno || v <= 0)
        return 0;
    if (*end == 'k' || *end == 'K')
        v *= 1024, end++;
    else if (*end == 'm' || *end == 'M')
        v *= 1024 * 1024, end++;
    *end_out = end;
    return v;
}
