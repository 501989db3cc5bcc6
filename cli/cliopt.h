/*
 * cliopt.h - the one command-line option parser of every `k25` subcommand.
 *
 * Each command describes its options in a table (struct k25_opt: names,
 * type, range, help, destination) and calls k25_cliopt_parse once.  The
 * same table prints `--help` (k25_cliopt_print_help), so the help text
 * cannot drift from what is accepted.  What the parser does for every
 * command alike:
 *
 *   --key value and --key=value; short aliases (-q) take the next argument;
 *   a value that itself starts with "--" must be written --key=VALUE;
 *   "--" ends the options (the rest are positional arguments); "-" alone is
 *   a positional argument (stdin, for commands that read one);
 *   integers and numbers checked against the option's range, enums against
 *   their names (the error lists them), paths non-empty;
 *   an unknown option gets "did you mean '--xyz'?" (edit distance over the
 *   table's names and, for commands that take them, the engine config flags);
 *   a scalar option given twice: the last one wins (as for config flags);
 *   K25_OPT_LIST collects every occurrence; a callback sees each one.
 *
 * Engine configuration: a command whose table sets `config` gets
 * k25_cli_apply_config (--config FILE and every config key as a flag)
 * applied first, and the config flags listed in its --help.
 *
 * Errors are struct k25_error messages of the form
 *   command line: '--rounds': expected an integer in 2..32, got "x"
 * (the option as its table names it).  An unknown option is K25_ENOTFOUND
 * with err->field the argument as written; every other problem is
 * K25_EINVAL (K25_ERANGE for a number out of range).
 */
#ifndef K25_CLIOPT_H
#define K25_CLIOPT_H

#include "k25.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

enum k25_opt_type {
    K25_OPT_END = 0,  /* terminates a table */
    K25_OPT_FLAG,     /* bool *: set true; takes no value */
    K25_OPT_STRING,   /* const char **: the argument itself (argv is borrowed, not copied) */
    K25_OPT_PATH,     /* const char **: like STRING, but must not be empty */
    K25_OPT_INT,      /* int *: decimal integer in [min, max] */
    K25_OPT_INT64,    /* int64_t *: decimal integer in [min, max] */
    K25_OPT_DOUBLE,   /* double *: finite number in [dmin, dmax] */
    K25_OPT_ENUM,     /* int *: index of the value in choices[] */
    K25_OPT_LIST,     /* struct k25_opt_list *: every occurrence, in order (repeatable) */
    K25_OPT_CALL,     /* callback: parse(dest, option name, value, err) per occurrence */
};

/* Option flags. */
#define K25_OPT_COUNT  0x1 /* INT/INT64: k and m suffixes (x1024, x1024^2), as in --context 128k */
#define K25_OPT_HIDDEN 0x2 /* accepted, left out of --help (test hooks) */

/* Storage for K25_OPT_LIST: the caller provides v[cap]. */
struct k25_opt_list {
    const char **v;
    int n, cap;
};

/*
 * Parses one occurrence of a K25_OPT_CALL option.  name is the option's
 * canonical name ("--impl"), for messages.  Return 0 or a K25_E* code with
 * err set (k25_cliopt_error words it like the parser's own messages).
 */
typedef int (*k25_opt_parse_fn)(void *dest, const char *name, const char *value, struct k25_error *err);

struct k25_opt {
    const char *names[4];        /* "--name" first (canonical, shown first), then aliases ("-q", "--old") */
    enum k25_opt_type type;
    void *dest;                  /* see the type; its value before parsing is the default --help shows */
    const char *help;            /* one line; longer text continues on lines starting with '\n' */
    const char *metavar;         /* placeholder in --help ("FILE", "N"); a default per type when NULL */
    const char *deflt;           /* default as --help says it, when the destination's value would mislead
                                    (e.g. "all cores" for 0); "" hides it */
    int64_t min, max;            /* INT, INT64: inclusive range (both 0: any value of the type) */
    double dmin, dmax;           /* DOUBLE: inclusive range (both 0: any finite number) */
    const char *const *choices;  /* ENUM: NULL-terminated names */
    k25_opt_parse_fn parse;      /* CALL */
    bool *seen;                  /* set true when the option is given (may be NULL) */
    int nargs;                   /* STRING: values it takes (0 or 1: one; 2: dest is const char *[2]) */
    unsigned flags;              /* K25_OPT_COUNT, K25_OPT_HIDDEN */
};

/* A command: its synopsis, prose, option table. */
struct k25_cliopt_cmd {
    const char *name;            /* "run", "gold validate": messages say "k25 NAME --help" */
    const char *usage;           /* synopsis after "usage: k25 ", printed as is (later lines carry
                                    their own indent); NULL: "NAME [options]" */
    const char *about;           /* paragraph(s) after the usage line; may be NULL */
    const struct k25_opt *opts;  /* terminated by an entry of type K25_OPT_END */
    struct k25_config *config;   /* non-NULL: --config and engine config flags are accepted */
    const char *epilog;          /* printed after the options (exit status, notes); may be NULL */
    bool options_only;           /* a positional argument is an error ("unexpected argument") */
};

/*
 * Parses argv[1..*argc-1] for cmd.  On success returns 0 and leaves the
 * positional arguments, in order, in argv[1..*argc-1] (argv[0] kept, argv
 * terminated by NULL); the command checks how many it got.  --help or -h
 * (in an option position) prints the help to stdout and returns
 * K25_CLIOPT_HELP before anything else is checked.  Errors: see above;
 * destinations may be partly set on error.
 */
#define K25_CLIOPT_HELP 1
int k25_cliopt_parse(const struct k25_cliopt_cmd *cmd, int *argc, char **argv, struct k25_error *err);

/* Prints the help generated from cmd's table (and the config flags when cmd->config). */
void k25_cliopt_print_help(const struct k25_cliopt_cmd *cmd, FILE *out);

/*
 * The closest option name to arg ("--promt" -> "--prompt"), among cmd's
 * options (hidden ones included) and, with cmd->config, the config flags,
 * by optimal-string-alignment edit distance on the name without dashes and
 * without an "=value" tail.  Writes it to out and returns true when one is
 * close enough to be a likely typo (distance <= 1 for names up to 4
 * letters, <= 2 up to 8, else <= 3), false otherwise.
 */
bool k25_cliopt_suggest(const struct k25_cliopt_cmd *cmd, const char *arg, char *out, size_t n);

/* Whether err is the parser's "unknown option" error (err->field is then the option as written). */
bool k25_cliopt_unknown(const struct k25_error *err);

/* Edit distance (optimal string alignment: insert, delete, substitute, swap neighbours). */
int k25_cliopt_distance(const char *a, const char *b);

/* Sets err to "command line: 'NAME': WHAT" with code; returns code (for callbacks). */
int k25_cliopt_error(struct k25_error *err, int code, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* K25_CLIOPT_H */
