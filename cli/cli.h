/*
 * cli.h - public interface of cli/, the top layer: the `k25` command-line
 * front end.  Each subcommand parses its arguments (cliopt.c's option
 * tables) and calls the library functions of the folders below; main.c
 * dispatches on the subcommand name or on argv[0] (the installed aliases
 * k25-benchmark, k25-mem-calculator, k25-log-analyzer, k25-checksum).
 * Declared here so that tests can call a subcommand without a process.
 */
#ifndef K25_CLI_H
#define K25_CLI_H

#include "k25.h"

#include <stdint.h>
#include <stdio.h>

/* Subcommands: argv[0] is the subcommand name; return the exit status. */
int k25_cmd_run(int argc, char **argv);
int k25_cmd_gold(int argc, char **argv);
int k25_cmd_config(int argc, char **argv);
int k25_cmd_sweep(int argc, char **argv);
int k25_cmd_logs(int argc, char **argv);
int k25_cmd_bench(int argc, char **argv);   /* cli_bench.c; alias k25-benchmark */
int k25_cmd_inspect(int argc, char **argv); /* cli_inspect.c */
int k25_cmd_mem(int argc, char **argv);        /* cli_mem.c */
int k25_cmd_attn_bench(int argc, char **argv); /* cli_attn_bench.c */
int k25_cmd_report(int argc, char **argv);     /* cli_report.c; reports from runs, sweeps, attn-bench */
int k25_cmd_gate(int argc, char **argv);       /* cli_gate.c: 0 pass, 1 regression, 2 bad input */
int k25_cmd_serve(int argc, char **argv);      /* cli_serve.c: OpenAI-compatible HTTP server (docs/serve.md) */
int k25_cmd_device_probe(int argc, char **argv); /* cli_probe.c: 0 measured, 2 no device/backend, 1 error */
int k25_cmd_checksum(int argc, char **argv);   /* cli_checksum.c: 0 ok, 1 mismatch, 2 bad input */
int k25_cmd_tokenize(int argc, char **argv);   /* cli_tokenize.c: tokenizer.json encode/decode/bench */

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

/*
 * A token count as users write it: "131072", "128k" (x1024), "1m" (x1024^2).
 * Returns 0 for a bad or non-positive value; *end points past what was read
 * (callers check it for "" or a list separator).
 */
int64_t k25_cli_parse_count(const char *s, const char **end);

/* Prints "  --key VALUE   help (default: X)" for every config key. */
void k25_cli_print_config_flags(FILE *out);

#endif /* K25_CLI_H */
