/*
 * gen.c - `k25 gold generate`: deterministic gold sets of long documents.
 *
 * Request i of a set is drawn from its own RNG stream seeded from (seed, i),
 * so a set is a pure function of its options (and, for `licenses`, of the
 * license files on the machine).  Each document is written past its target
 * length by the domain writer (gen_docs.c, or the license sampler here) and
 * then cut to the exact length, backing off to a UTF-8 character and,
 * within 0.4%, to a word boundary.  Requests go out through the same
 * writer `k25 gold select` uses, so they validate by construction.
 */
#include "gold_internal.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#define MIN_LENGTH 64                      /* shortest input a request may ask for */
#define MAX_LENGTH ((int64_t)32 << 20)     /* 32 Mi tokens: a line stays under the 64 MiB line limit */
#define MAX_LICENSE_FILE_BYTES (4 << 20)   /* ignore anything larger in the licenses folder */

static const char *const domain_names[] = {"legal", "finance", "minutes", "licenses", "mixed"};

static const char *const prompts[] = {
    /* legal */
    "Read the agreement below and list every obligation of the Customer, citing the section numbers and the "
    "definitions each one relies on.",
    /* finance */
    "Using the report below, compute the change in total revenue between the first and last quarter of each "
    "table and explain the main drivers the text gives.",
    /* minutes */
    "Summarize the meeting notes below: decisions made, open questions, and action items with their owners.",
    /* licenses */
    "For each license text below, say whether it permits commercial redistribution and what conditions apply.",
};

static const enum k25_hint hints[] = {K25_HINT_LEGAL_DOC, K25_HINT_AUTO, K25_HINT_PLAIN_TEXT,
                                      K25_HINT_LEGAL_DOC};

int k25_gold_domain_parse(const char *s, enum k25_gold_domain *out, struct k25_error *err)
{
    for (size_t i = 0; i < sizeof(domain_names) / sizeof(domain_names[0]); i++) {
        if (!strcmp(s, domain_names[i])) {
            *out = (enum k25_gold_domain)i;
            return 0;
        }
    }
    return k25_error_set(err, K25_EINVAL, NULL, 0, "--domain",
                         "unknown domain '%s' (legal, finance, minutes, licenses or mixed)", s);
}

const char *k25_gold_domain_name(enum k25_gold_domain d)
{
    return (unsigned)d < 5 ? domain_names[d] : "?";
}

void k25_gold_gen_opts_init(struct k25_gold_gen_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->domain = K25_GOLD_DOMAIN_MIXED;
    o->lengths[0] = 4096;
    o->n_lengths = 1;
    o->count = 8;
    o->seed = 1;
    o->out_min = 64;
    o->out_max = 512;
    snprintf(o->licenses_dir, sizeof(o->licenses_dir), "%s", K25_GOLD_LICENSES_DIR);
}

bool k25_gold_parse_size(const char *s, int64_t *out)
{
    if (!s || !(*s >= '0' && *s <= '9'))
        return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return false;
    unsigned long long mul = 1;
    if (*end == 'k' || *end == 'K')
        mul = 1024, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1024 * 1024, end++;
    if (*end || v > (unsigned long long)INT64_MAX / mul)
        return false;
    *out = (int64_t)(v * mul);
    return true;
}

int k25_gold_parse_lengths(const char *s, struct k25_gold_gen_opts *o, struct k25_error *err)
{
    char buf[1024];
    if (strlen(s) >= sizeof(buf))
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--lengths", "list too long");
    snprintf(buf, sizeof(buf), "%s", s);
    o->n_lengths = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int64_t v;
        if (!k25_gold_parse_size(tok, &v))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "--lengths",
                                 "bad length '%s' (a number with optional k or m suffix)", tok);
        if (v < MIN_LENGTH || v > MAX_LENGTH)
            return k25_error_set(err, K25_ERANGE, NULL, 0, "--lengths",
                                 "length '%s' out of range (%d to %lld tokens)", tok, MIN_LENGTH,
                                 (long long)MAX_LENGTH);
        if (o->n_lengths == K25_GOLD_GEN_MAX_LENGTHS)
            return k25_error_set(err, K25_ERANGE, NULL, 0, "--lengths", "more than %d lengths",
                                 K25_GOLD_GEN_MAX_LENGTHS);
        o->lengths[o->n_lengths++] = v;
    }
    if (!o->n_lengths)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--lengths", "empty list");
    return 0;
}

int k25_gold_parse_output_length(const char *s, struct k25_gold_gen_opts *o, struct k25_error *err)
{
    char a[64], b[64];
    const char *dash = strchr(s, '-');
    int64_t lo, hi;
    if (dash) {
        snprintf(a, sizeof(a), "%.*s", (int)(dash - s < 63 ? dash - s : 63), s);
        snprintf(b, sizeof(b), "%s", dash + 1);
        if (!k25_gold_parse_size(a, &lo) || !k25_gold_parse_size(b, &hi))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "--output-length",
                                 "bad range '%s' (N or MIN-MAX)", s);
    } else {
        if (!k25_gold_parse_size(s, &lo))
            return k25_error_set(err, K25_EINVAL, NULL, 0, "--output-length",
                                 "bad length '%s' (N or MIN-MAX)", s);
        hi = lo;
    }
    if (lo < 1 || hi < lo || hi > INT32_MAX)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "--output-length",
                             "'%s' must be 1 <= MIN <= MAX <= 2147483647", s);
    o->out_min = lo;
    o->out_max = hi;
    return 0;
}

/* ------------------------------------------------------------- licenses */

struct license {
    char name[256];
    char *text; /* sanitized: form feeds became newlines, other controls removed */
    size_t len;
    size_t *paras; /* [n_paras] offsets where paragraphs start */
    size_t n_paras;
};

struct licenses {
    struct license *v;
    size_t n;
};

static void licenses_free(struct licenses *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->v[i].text);
        free(l->v[i].paras);
    }
    free(l->v);
    memset(l, 0, sizeof(*l));
}

static int cmp_license(const void *a, const void *b)
{
    return strcmp(((const struct license *)a)->name, ((const struct license *)b)->name);
}

/* Reads one license file; false (skipped) when unreadable or not UTF-8. */
static bool license_read(const char *path, struct license *lic)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    char *buf = malloc(MAX_LICENSE_FILE_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MAX_LICENSE_FILE_BYTES + 1, f) : 0;
    bool bad = !buf || ferror(f) || n == 0 || n > MAX_LICENSE_FILE_BYTES;
    fclose(f); /* read-only */
    if (bad || !k25_gold_utf8_valid(buf, n, NULL)) {
        free(buf);
        return false;
    }
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\f' || buf[i] == '\r')
            buf[i] = '\n';
    struct k25_gold_sanitize_counts sc;
    n = k25_gold_sanitize_text(buf, n, K25_GOLD_SANITIZE_STRIP, &sc);
    buf[n] = 0;
    /* Paragraph starts: offset 0 and after every blank line. */
    size_t cap = 16, np = 0;
    size_t *p = malloc(cap * sizeof(*p));
    if (!p) {
        free(buf);
        return false;
    }
    p[np++] = 0;
    for (size_t i = 1; i + 1 < n; i++) {
        if (buf[i - 1] == '\n' && buf[i] == '\n' && buf[i + 1] != '\n') {
            if (np == cap) {
                size_t *q = realloc(p, 2 * cap * sizeof(*p));
                if (!q) {
                    free(p);
                    free(buf);
                    return false;
                }
                p = q;
                cap *= 2;
            }
            p[np++] = i + 1;
        }
    }
    lic->text = buf;
    lic->len = n;
    lic->paras = p;
    lic->n_paras = np;
    return true;
}

/*
 * Loads every regular file of dir (symlinks are skipped: on Debian they
 * alias files that are already there), sorted by name so sampling does not
 * depend on directory order.  K25_ENOTFOUND when nothing usable is found.
 */
static int licenses_load(const char *dir, struct licenses *out, struct k25_error *err)
{
    memset(out, 0, sizeof(*out));
    DIR *d = opendir(dir);
    if (!d)
        return k25_error_set(err, K25_ENOTFOUND, dir, 0, "--licenses-dir",
                             "cannot open the license folder (%s); the licenses domain needs real "
                             "license files (Debian: /usr/share/common-licenses, package base-files)",
                             strerror(errno));
    struct dirent *de;
    size_t cap = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (out->n == cap) {
            size_t ncap = cap ? 2 * cap : 32;
            struct license *nv = realloc(out->v, ncap * sizeof(*nv));
            if (!nv) {
                closedir(d);
                licenses_free(out);
                return k25_error_set(err, K25_ENOMEM, dir, 0, NULL, "out of memory");
            }
            out->v = nv;
            cap = ncap;
        }
        struct license *lic = &out->v[out->n];
        memset(lic, 0, sizeof(*lic));
        snprintf(lic->name, sizeof(lic->name), "%s", de->d_name);
        if (license_read(path, lic))
            out->n++;
    }
    closedir(d);
    if (!out->n) {
        licenses_free(out);
        return k25_error_set(err, K25_ENOTFOUND, dir, 0, "--licenses-dir",
                             "no readable UTF-8 license files in this folder");
    }
    qsort(out->v, out->n, sizeof(*out->v), cmp_license);
    return 0;
}

/* Joins runs of paragraphs from randomly chosen licenses until target bytes. */
static void gen_licenses(struct k25_gold_rng *r, const struct licenses *l, struct k25_gold_sbuf *b,
                         size_t target)
{
    k25_gold_sbuf_puts(b, "THIRD-PARTY LICENSE NOTICES\n\nThe components of this distribution are "
                          "provided under the licenses reproduced below.\n");
    while (!b->oom && b->n < target) {
        const struct license *lic = &l->v[k25_gold_rng_below(r, l->n)];
        size_t first = k25_gold_rng_below(r, lic->n_paras);
        size_t count = 3 + k25_gold_rng_below(r, 30);
        k25_gold_sbuf_printf(b, "\n==== %s ====\n\n", lic->name);
        for (size_t k = 0; k < count && b->n < target; k++) {
            size_t i = (first + k) % lic->n_paras;
            size_t end = i + 1 < lic->n_paras ? lic->paras[i + 1] : lic->len;
            k25_gold_sbuf_put(b, lic->text + lic->paras[i], end - lic->paras[i]);
        }
    }
}

/* ---------------------------------------------------------------- driver */

/* Cuts b to exactly len bytes, then backs off to a UTF-8 start and a space. */
static void cut_to(struct k25_gold_sbuf *b, size_t len)
{
    if (b->n <= len)
        return;
    size_t cut = len;
    while (cut > 0 && ((unsigned char)b->p[cut] & 0xC0) == 0x80)
        cut--;
    size_t slack = len / 250; /* 0.4% */
    for (size_t k = 0; k < slack && cut > k; k++) {
        char c = b->p[cut - k];
        if (c == ' ' || c == '\n') {
            cut -= k;
            break;
        }
    }
    b->n = cut;
    b->p[cut] = 0;
}

/*
 * Exact token lengths (o->count_tokens): b holds the document generated
 * long enough; the input is prompt + separator + text.  A binary search over
 * the text's cut (UTF-8 character boundaries) finds the longest input of at
 * most L tokens, then the cuts just past it are tried for exactly L (adding
 * a character can add two tokens at once).  K25_ERANGE when the document is
 * too short or no cut gives exactly L.
 */
static int cut_to_tokens(const struct k25_gold_gen_opts *o, struct k25_gold_sbuf *b, const char *prompt, int64_t L,
                         bool *short_doc, struct k25_error *err)
{
    size_t pl = prompt ? strlen(prompt) + K25_GOLD_PROMPT_SEP_LEN : 0;
    char *in = malloc(pl + b->n + 1);
    if (!in)
        return k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
    if (prompt) {
        memcpy(in, prompt, pl - K25_GOLD_PROMPT_SEP_LEN);
        memcpy(in + pl - K25_GOLD_PROMPT_SEP_LEN, K25_GOLD_PROMPT_SEP, K25_GOLD_PROMPT_SEP_LEN);
    }
    memcpy(in + pl, b->p, b->n);
    int rc = 0;
    int64_t n = 0;
    *short_doc = false;
    if ((rc = o->count_tokens(o->count_ctx, in, pl + b->n, &n, err)) != 0)
        goto out;
    if (n < L) { /* the caller generates a longer document */
        *short_doc = true;
        goto out;
    }
    size_t lo = 0, hi = b->n; /* count(lo) <= L < count(hi) or hi is the whole text with count == L */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        while (mid > lo && ((unsigned char)b->p[mid] & 0xC0) == 0x80)
            mid--;
        if (mid == lo)
            break;
        if ((rc = o->count_tokens(o->count_ctx, in, pl + mid, &n, err)) != 0)
            goto out;
        if (n <= L)
            lo = mid;
        else
            hi = mid;
    }
    size_t cut = SIZE_MAX;
    for (size_t c = lo, tries = 0; c <= b->n && tries < 64; c++) {
        if (c < b->n && ((unsigned char)b->p[c] & 0xC0) == 0x80)
            continue;
        tries++;
        if ((rc = o->count_tokens(o->count_ctx, in, pl + c, &n, err)) != 0)
            goto out;
        if (n == L) {
            cut = c;
            break;
        }
        if (n > L + 2)
            break;
    }
    if (cut == SIZE_MAX) {
        rc = k25_error_set(err, K25_ERANGE, NULL, 0, "--lengths",
                           "no cut of the document is exactly %lld tokens of the tokenizer", (long long)L);
        goto out;
    }
    b->n = cut;
    b->p[cut] = 0;
out:
    free(in);
    return rc;
}

/* --questions: what each request asks about its document (question k of a document: entry k % n). */
static const char *const questions[] = {
    "Question: Which party bears the obligations set out in the first article, and under what conditions?",
    "Question: Summarize the termination provisions and any notice periods they require.",
    "Question: List every amount, rate or date the document states, with the section that states it.",
    "Question: Which later sections refer back to earlier ones, and what do those references change?",
    "Question: What does the document say about liability and its limits?",
    "Question: Which provisions would a reviewer flag as unusual, and why?",
    "Question: How are disputes resolved, and under which governing law?",
    "Question: What must happen before the agreement takes effect?",
};
#define N_QUESTIONS (sizeof(questions) / sizeof(questions[0]))

int k25_gold_generate(const struct k25_gold_gen_opts *o, FILE *out, struct k25_error *err)
{
    if (o->n_lengths == 0 || o->count < 1)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--count", "need at least one length and count >= 1");
    if (o->out_min < 1 || o->out_max < o->out_min)
        return k25_error_set(err, K25_ERANGE, NULL, 0, "--output-length", "bad range %lld-%lld",
                             (long long)o->out_min, (long long)o->out_max);
    for (size_t i = 0; i < o->n_lengths; i++)
        if (o->lengths[i] < MIN_LENGTH || o->lengths[i] > MAX_LENGTH)
            return k25_error_set(err, K25_ERANGE, NULL, 0, "--lengths",
                                 "length %lld out of range (%d to %lld)", (long long)o->lengths[i],
                                 MIN_LENGTH, (long long)MAX_LENGTH);
    if (o->count_tokens && o->questions > 1)
        return k25_error_set(err, K25_EINVAL, NULL, 0, "--questions",
                             "--questions with --tokenizer is not supported (exact token lengths per request)");
    int rc = 0;
    struct licenses lic = {0};
    if (o->domain == K25_GOLD_DOMAIN_LICENSES || o->domain == K25_GOLD_DOMAIN_MIXED) {
        if ((rc = licenses_load(o->licenses_dir, &lic, err)) < 0)
            return rc;
    }
    struct k25_gold_sbuf b = {0};
    const int64_t nq = o->questions > 1 ? o->questions : 1;
    for (int64_t r = 0; r < o->count; r++) {
        /* with --questions, request r asks question r % nq about document i = r / nq */
        const int64_t i = r / nq, qi = r % nq;
        size_t li = (size_t)(i % (int64_t)o->n_lengths);
        int64_t L = o->lengths[li];
        /* mixed: the domain turns with i and shifts by one every round of
         * lengths, so every length meets every domain */
        enum k25_gold_domain dom =
            o->domain == K25_GOLD_DOMAIN_MIXED
                ? (enum k25_gold_domain)(((int64_t)li + i / (int64_t)o->n_lengths) % 4)
                : o->domain;
        struct k25_gold_rng rng = {o->seed * 0x9E3779B97F4A7C15ull ^ (uint64_t)i * 0xD1B54A32D192ED03ull};
        k25_gold_rng_next(&rng);

        const char *prompt = prompts[dom];
        size_t plen = strlen(prompt);
        bool with_prompt = (int64_t)(plen + K25_GOLD_PROMPT_SEP_LEN) * 4 <= L;
        size_t target = (size_t)L - (with_prompt ? plen + K25_GOLD_PROMPT_SEP_LEN : 0);
        char qtext[256] = "";
        if (nq > 1) { /* the document, then its question: the same prefix for every question */
            snprintf(qtext, sizeof(qtext), "\n\n%s (%lld)", questions[qi % (int64_t)N_QUESTIONS],
                     (long long)qi + 1);
            /* room for the longest question, so every question gets the same document */
            size_t ql = 0;
            for (size_t k = 0; k < N_QUESTIONS; k++)
                ql = strlen(questions[k]) > ql ? strlen(questions[k]) : ql;
            ql += K25_GOLD_PROMPT_SEP_LEN + 24;
            target = target > 2 * ql ? target - ql : target / 2;
        }

        /* token lengths: the document in bytes 6x the tokens (English BPE is ~4.5 bytes a token), more
         * when that is not enough; the same rng start each time, so the text only grows */
        size_t gen_bytes = o->count_tokens ? (size_t)L * 6 : target;
        struct k25_gold_rng rng0 = rng;
        for (int attempt = 0;; attempt++) {
            rng = rng0;
            b.n = 0;
            switch (dom) {
            case K25_GOLD_DOMAIN_LEGAL: k25_gold_gen_legal(&rng, &b, gen_bytes); break;
            case K25_GOLD_DOMAIN_FINANCE: k25_gold_gen_finance(&rng, &b, gen_bytes); break;
            case K25_GOLD_DOMAIN_MINUTES: k25_gold_gen_minutes(&rng, &b, gen_bytes); break;
            default: gen_licenses(&rng, &lic, &b, gen_bytes); break;
            }
            if (b.oom) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory generating %lld bytes",
                                   (long long)L);
                goto out_free;
            }
            if (!o->count_tokens) {
                cut_to(&b, target);
                break;
            }
            bool short_doc = false;
            cut_to(&b, gen_bytes);
            if ((rc = cut_to_tokens(o, &b, with_prompt ? prompt : NULL, L, &short_doc, err)) != 0)
                goto out_free;
            if (!short_doc)
                break;
            if (attempt == 3) {
                rc = k25_error_set(err, K25_ERANGE, NULL, 0, "--lengths",
                                   "%zu bytes of text are fewer than %lld tokens of the tokenizer", b.n, (long long)L);
                goto out_free;
            }
            gen_bytes *= 2;
        }
        char doc_id[96];
        snprintf(doc_id, sizeof(doc_id), "%s-%lld-%05lld", domain_names[dom], (long long)L, (long long)i);
        if (nq > 1) {
            k25_gold_sbuf_put(&b, qtext, strlen(qtext));
            if (b.oom) {
                rc = k25_error_set(err, K25_ENOMEM, NULL, 0, NULL, "out of memory");
                goto out_free;
            }
        }

        char id[128], meta[256];
        if (nq > 1)
            snprintf(id, sizeof(id), "%s-q%03lld", doc_id, (long long)qi + 1);
        else
            snprintf(id, sizeof(id), "%s", doc_id);
        snprintf(meta, sizeof(meta),
                 "{\"generator\":\"k25 gold generate\",\"seed\":%llu,\"index\":%lld,"
                 "\"target_length\":%lld}",
                 (unsigned long long)o->seed, (long long)r, (long long)L);
        int64_t span = o->out_max - o->out_min + 1;
        struct k25_gold_request req = {
            .id = id,
            .text = b.p,
            .text_len = b.n,
            .expected_output_length = o->out_min + (int64_t)k25_gold_rng_below(&rng, (uint64_t)span),
            .domain = (char *)domain_names[dom],
            .prompt = with_prompt ? (char *)prompt : NULL,
            .hint = hints[dom],
            .meta_json = meta,
            .prefix_id = nq > 1 ? doc_id : NULL,
        };
        if ((rc = k25_gold_request_write(out, &req, err)) < 0)
            goto out_free;
    }
    if (fflush(out) != 0 || ferror(out))
        rc = k25_error_set(err, K25_EIO, NULL, 0, NULL, "write failed: %s", strerror(errno));
out_free:
    free(b.p);
    licenses_free(&lic);
    return rc;
}

int k25_gold_random_spec(const char *spec, int64_t count, uint64_t seed, struct k25_gold_gen_opts *o,
                         struct k25_error *err)
{
    k25_gold_gen_opts_init(o);
    if (strncmp(spec, "random:", 7) != 0)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--dataset", "'%s' is not a random: spec", spec);
    int64_t input = -1, output = -1, stdev = 0;
    const char *p = spec + 7;
    while (*p) {
        size_t kl = strcspn(p, "=,");
        if (p[kl] != '=')
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--dataset",
                                 "random spec: '%.*s' needs KEY=VALUE (input=N,output=N[,stdev=N])", (int)kl, p);
        char val[32];
        size_t vl = strcspn(p + kl + 1, ",");
        snprintf(val, sizeof(val), "%.*s", (int)(vl < sizeof(val) - 1 ? vl : sizeof(val) - 1), p + kl + 1);
        int64_t v;
        int64_t *dst = kl == 5 && !strncmp(p, "input", 5)    ? &input
                       : kl == 6 && !strncmp(p, "output", 6) ? &output
                       : kl == 5 && !strncmp(p, "stdev", 5)  ? &stdev
                                                             : NULL;
        if (!dst)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--dataset",
                                 "random spec: unknown key '%.*s' (input, output, stdev)", (int)kl, p);
        if (vl == 0 || vl >= sizeof(val) || !k25_gold_parse_size(val, &v) || v < 0)
            return k25_error_set(err, K25_EINVAL, "command line", 0, "--dataset",
                                 "random spec: %.*s='%.*s' is not a size (N, Nk, Nm)", (int)kl, p, (int)vl, p + kl + 1);
        *dst = v;
        p += kl + 1 + vl;
        if (*p == ',')
            p++;
    }
    if (input < MIN_LENGTH || input > MAX_LENGTH || output < 1)
        return k25_error_set(err, K25_EINVAL, "command line", 0, "--dataset",
                             "random spec needs input=N (%d to %lld) and output=N (>= 1): '%s'", MIN_LENGTH,
                             (long long)MAX_LENGTH, spec);
    o->count = count > 0 ? count : 1;
    o->seed = seed;
    o->out_min = o->out_max = output;
    o->domain = K25_GOLD_DOMAIN_LEGAL; /* no dependency on the machine's license files */
    o->n_lengths = (size_t)(o->count < K25_GOLD_GEN_MAX_LENGTHS ? o->count : K25_GOLD_GEN_MAX_LENGTHS);
    struct k25_gold_rng rng = {seed * 0x9E3779B97F4A7C15ull + 0x5EED};
    for (size_t i = 0; i < o->n_lengths; i++) {
        double z = 0;
        if (stdev > 0) { /* Box-Muller on two uniforms in (0, 1] */
            double u1 = ((double)(k25_gold_rng_next(&rng) >> 11) + 1.0) / 9007199254740992.0;
            double u2 = (double)(k25_gold_rng_next(&rng) >> 11) / 9007199254740992.0;
            z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
        }
        double L = (double)input + z * (double)stdev;
        o->lengths[i] = L < MIN_LENGTH ? MIN_LENGTH : L > (double)MAX_LENGTH ? MAX_LENGTH : (int64_t)llround(L);
    }
    return K25_OK;
}
