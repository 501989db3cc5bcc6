/*
 * yamldoc.c - loading a whole YAML file as a libyaml document, for the
 * structured inputs (sweep specs, SLA files, gate policies) whose errors
 * must name the file and line of the node at fault.
 */
#include "harness.h"

#include <errno.h>
#include <string.h>

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
