/*
 * report_md.c - the Markdown backend of the report writer (report.md):
 * GitHub-flavoured tables, images referenced relative to the report
 * folder (plots/NAME.png), verdicts in bold.
 */
#include "report.h"

#include <string.h>

/* Table cells: a '|' would end the cell, a newline the row. */
static void cell(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n')
            fputs("<br>", f);
        else
            fputc(*s, f);
    }
}

static bool is_verdict(const char *s)
{
    static const char *const w[] = {"PASS", "FAIL", "UNSUPPORTED", "OK", "WARN", "INCONCLUSIVE"};
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        size_t l = strlen(w[i]);
        if (!strncmp(s, w[i], l) && (s[l] == 0 || s[l] == ' '))
            return true;
    }
    return false;
}

static void md_begin(struct k25_doc_out *o, const char *title)
{
    fprintf(o->f, "# %s\n\n", title);
}

static void md_end(struct k25_doc_out *o)
{
    (void)o;
}

static void md_heading(struct k25_doc_out *o, int level, const char *text)
{
    fprintf(o->f, "%.*s %s\n\n", level < 1 ? 1 : (level > 6 ? 6 : level), "######", text);
}

static void md_para(struct k25_doc_out *o, const char *text)
{
    fprintf(o->f, "%s\n\n", text);
}

static void md_code(struct k25_doc_out *o, const char *text)
{
    fprintf(o->f, "```\n%s%s```\n\n", text, text[0] && text[strlen(text) - 1] == '\n' ? "" : "\n");
}

static void md_table_begin(struct k25_doc_out *o, int n, const char *const *head)
{
    fputc('|', o->f);
    for (int i = 0; i < n; i++) {
        fputc(' ', o->f);
        cell(o->f, head[i]);
        fputs(" |", o->f);
    }
    fputs("\n|", o->f);
    for (int i = 0; i < n; i++)
        fputs("---|", o->f);
    fputc('\n', o->f);
}

static void md_table_row(struct k25_doc_out *o, int n, const char *const *cells)
{
    fputc('|', o->f);
    for (int i = 0; i < n; i++) {
        fputc(' ', o->f);
        if (is_verdict(cells[i])) {
            size_t l = strcspn(cells[i], " ");
            fprintf(o->f, "**%.*s**", (int)l, cells[i]);
            cell(o->f, cells[i] + l);
        } else {
            cell(o->f, cells[i]);
        }
        fputs(" |", o->f);
    }
    fputc('\n', o->f);
}

static void md_table_end(struct k25_doc_out *o)
{
    fputc('\n', o->f);
}

static void md_image(struct k25_doc_out *o, const struct k25_report_plot *p)
{
    fprintf(o->f, "![%s](%s)\n\n*%s*\n\n", p->title, p->file, p->note);
}

void k25_doc_out_md(struct k25_doc_out *o)
{
    o->begin = md_begin;
    o->end = md_end;
    o->heading = md_heading;
    o->para = md_para;
    o->code = md_code;
    o->table_begin = md_table_begin;
    o->table_row = md_table_row;
    o->table_end = md_table_end;
    o->image = md_image;
}
