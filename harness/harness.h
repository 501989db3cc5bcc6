/*
 * harness.h - public interface of the harness: the command-line front end's
 * subcommands (each callable without a process, for tests) and the shared
 * command-line helpers.
 */
#ifndef K25_HARNESS_H
#define K25_HARNESS_H

#include "k25.h"

#include <stdio.h>

/* Subcommands: argv[0] is the subcommand name; return the exit status. */
int k25_cmd_run(int argc, char **argv);
int k25_cmd_gold(int argc, char **argv);
int k25_cmd_config(int argc, char **argv);

/*
 * Applies engine configuration from the command line to cfg, in order:
 * first `--config FILE` (YAML), then every `--KEY VALUE` / `--KEY=VALUE`
 * flag naming a config key (underscores written as dashes; boolean keys
 * also accept the bare flag, e.g. `--disable-prefill-optimization`).
 * The CLI wins over the file.  Consumed arguments are removed from argv
 * (argc updated, argv[0] kept); the rest is left for the caller.
 * Errors name the file and line (YAML) or "command line" and the flag.
 */
int k25_cli_apply_config(int *argc, char **argv, struct k25_config *cfg, struct k25_error *err);

/* Prints "  --key VALUE   help (default: X)" for every config key. */
void k25_cli_print_config_flags(FILE *out);

#endif /* K25_HARNESS_H */
