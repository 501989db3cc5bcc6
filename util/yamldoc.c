/*
 * yamldoc.c - loading a whole YAML file as a libyaml document, for the
 * structured inputs (sweep specs, SLA files, gate policies) whose errors
 * must name the file and line of the node at fault; and writing a number
 * into YAML the way a person would type it (k25_fmt_double).
 */
#include "k25util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * The shortest decimal that reads back as exactly v: %.{1..17}g, the
 * first precision whose text strtod turns into the same double (0.85, not
 * the 0.84999999999999998 of %.17g).  17 significant digits always round-
 * trip, so the loop ends.  NaN and infinities print as YAML's .nan / .inf.
 */
void k25_fmt_double(double v, char *buf, size_t n)
{
    if (isnan(v)) {
        snprintf(buf, n, ".nan");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, n, "%s", v > 0 ? ".inf" : "-.inf");
        return;
    }
    char t[40];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(t, sizeof(t), "%.*g", prec, v);
        if (strtod(t, NULL) == v)
            break;
    }
    snprintf(buf, n, "%s", t);
}

int k25_yaml_load(const char *path, yaml_document_t *doc, struct k25_error *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return k25_error_set(err, errno == ENOENT ? K25_ENOTFOUND : K25_EIO, path, 0, NULL, "cannot open: %s",
                             strerror(errno));
    int rc = K25_OK;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) {
        fclose(f);
        return k25_error_set(err, K25_ENOMEM, path, 0, NULL, "out of memory (YAML parser)");
    }
    yaml_parser_set_input_file(&parser, f);
    if (!yaml_parser_load(&parser, doc))
        rc = k25_error_set(err, K25_EFORMAT, path, (int)parser.problem_mark.line + 1, NULL, "YAML: %s",
                           parser.problem ? parser.problem : "syntax error");
    yaml_parser_delete(&parser);
    fclose(f);
    return rc;
}
