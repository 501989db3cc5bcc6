/*
 * report_html.c - the HTML backend of the report writer (report.html).
 *
 * The page is self-contained: the style sheet is inline and every image
 * is embedded as a base64 data: URI (PNG, or SVG for --format svg), so
 * the file opens offline and can be mailed or attached as it is.  No
 * script, no external reference.
 */
#include "report.h"

#include <errno.h>
#include <limits.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

static void esc(FILE *f, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\n': fputs("<br>", f); break;
        default: fputc(*s, f);
        }
    }
}

static const char *verdict_class(const char *s)
{
    static const struct {
        const char *w, *cls;
    } v[] = {{"PASS", "pass"}, {"FAIL", "fail"}, {"UNSUPPORTED", "unsup"}, {"OK", "pass"},
             {"WARN", "warn"}, {"INCONCLUSIVE", "unsup"}};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t l = strlen(v[i].w);
        if (!strncmp(s, v[i].w, l) && (s[l] == 0 || s[l] == ' '))
            return v[i].cls;
    }
    return NULL;
}

static void h_begin(struct k25_doc_out *o, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>", o->f);
    esc(o->f, title);
    fputs("</title>\n<style>\n"
          "body{font-family:-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;max-width:1100px;margin:2em auto;"
          "padding:0 1em;color:#1b1b1b;line-height:1.45}\n"
          "h1{border-bottom:2px solid #1f77b4;padding-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd}\n"
          "table{border-collapse:collapse;margin:.6em 0 1.2em 0;font-size:.92em}\n"
          "th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\n"
          "th{background:#f0f3f7}tr:nth-child(even) td{background:#fafafa}\n"
          ".v{font-weight:bold;padding:.05em .45em;border-radius:3px;color:#fff}\n"
          ".pass{background:#2e7d32}.fail{background:#c62828}.warn{background:#ef6c00}.unsup{background:#757575}\n"
          "figure{margin:1em 0 2em 0}figure img{max-width:100%;border:1px solid #ddd}\n"
          "figcaption{font-size:.9em;color:#444}pre{background:#f6f8fa;padding:.6em;overflow-x:auto}\n"
          "</style>\n</head>\n<body>\n<h1>",
          o->f);
    esc(o->f, title);
    fputs("</h1>\n", o->f);
}

static void h_end(struct k25_doc_out *o)
{
    fputs("</body>\n</html>\n", o->f);
}

static void h_heading(struct k25_doc_out *o, int level, const char *text)
{
    level = level < 1 ? 1 : (level > 6 ? 6 : level);
    fprintf(o->f, "<h%d>", level);
    esc(o->f, text);
    fprintf(o->f, "</h%d>\n", level);
}

/* Paragraphs may carry `code` spans (backquotes) and **bold**, as in Markdown. */
static void h_para(struct k25_doc_out *o, const char *text)
{
    fputs("<p>", o->f);
    bool code = false, bold = false;
    char one[2] = {0, 0};
    for (const char *s = text; *s; s++) {
        if (*s == '`') {
            fputs(code ? "</code>" : "<code>", o->f);
            code = !code;
        } else if (!code && s[0] == '*' && s[1] == '*') {
            fputs(bold ? "</b>" : "<b>", o->f);
            bold = !bold;
            s++;
        } else {
            one[0] = *s;
            esc(o->f, one);
        }
    }
    if (code)
        fputs("</code>", o->f);
    if (bold)
        fputs("</b>", o->f);
    fputs("</p>\n", o->f);
}

static void h_code(struct k25_doc_out *o, const char *text)
{
    fputs("<pre>", o->f);
    for (const char *s = text; *s; s++) {
        if (*s == '\n')
            fputc('\n', o->f);
        else {
            char one[2] = {*s, 0};
            esc(o->f, one);
        }
    }
    fputs("</pre>\n", o->f);
}

static void h_table_begin(struct k25_doc_out *o, int n, const char *const *head)
{
    fputs("<table>\n<tr>", o->f);
    for (int i = 0; i < n; i++) {
        fputs("<th>", o->f);
        esc(o->f, head[i]);
        fputs("</th>", o->f);
    }
    fputs("</tr>\n", o->f);
}

static void h_table_row(struct k25_doc_out *o, int n, const char *const *cells)
{
    fputs("<tr>", o->f);
    for (int i = 0; i < n; i++) {
        fputs("<td>", o->f);
        const char *cls = verdict_class(cells[i]);
        if (cls) {
            size_t l = strcspn(cells[i], " ");
            fprintf(o->f, "<span class=\"v %s\">%.*s</span>", cls, (int)l, cells[i]);
            esc(o->f, cells[i] + l);
        } else {
            esc(o->f, cells[i]);
        }
        fputs("</td>", o->f);
    }
    fputs("</tr>\n", o->f);
}

static void h_table_end(struct k25_doc_out *o)
{
    fputs("</table>\n", o->f);
}

/* d[n] as base64 through OpenSSL's EVP_EncodeBlock, in chunks of whole 3-byte groups (no line breaks). */
static void base64(FILE *f, const unsigned char *d, size_t n)
{
    enum { CHUNK = 3 * 16384 };
    unsigned char out[4 * (CHUNK / 3) + 1];
    for (size_t i = 0; i < n; i += CHUNK) {
        size_t k = n - i < CHUNK ? n - i : CHUNK;
        int m = EVP_EncodeBlock(out, d + i, (int)k);
        fwrite(out, 1, (size_t)m, f); /* a short write shows in ferror(f), as for every write here */
    }
}

static void h_image(struct k25_doc_out *o, const struct k25_report_plot *p)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof(path), "%s/%s", o->out_dir, p->html_file);
    FILE *img = fopen(path, "rb");
    unsigned char *data = NULL;
    size_t n = 0, cap = 0;
    if (img) {
        size_t r;
        do {
            if (cap - n < 65536) {
                unsigned char *nd = realloc(data, cap + 262144);
                if (!nd)
                    break;
                data = nd;
                cap += 262144;
            }
            r = fread(data + n, 1, cap - n, img);
            n += r;
        } while (r > 0);
        if (ferror(img))
            n = 0;
        fclose(img);
    }
    if (!data || n == 0) {
        if (!o->rc)
            o->rc = k25_error_set(o->err, K25_EIO, path, 0, NULL, "cannot read the plot to embed: %s",
                                  strerror(errno ? errno : EIO));
        free(data);
        return;
    }
    size_t l = strlen(p->html_file);
    const char *mime = l > 4 && !strcmp(p->html_file + l - 4, ".svg") ? "image/svg+xml" : "image/png";
    fputs("<figure>\n<img alt=\"", o->f);
    esc(o->f, p->title);
    fprintf(o->f, "\" src=\"data:%s;base64,", mime);
    base64(o->f, data, n);
    fputs("\">\n<figcaption><b>", o->f);
    esc(o->f, p->title);
    fputs(".</b> ", o->f);
    esc(o->f, p->note);
    fputs("</figcaption>\n</figure>\n", o->f);
    free(data);
}

void k25_doc_out_html(struct k25_doc_out *o)
{
    o->begin = h_begin;
    o->end = h_end;
    o->heading = h_heading;
    o->para = h_para;
    o->code = h_code;
    o->table_begin = h_table_begin;
    o->table_row = h_table_row;
    o->table_end = h_table_end;
    o->image = h_image;
}
