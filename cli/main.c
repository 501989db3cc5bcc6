/*
 * main.c - the k25 command: dispatches to subcommands (k25 run, k25 gold,
 * ...) and, by argv[0], to the installed aliases users know.
 */
#include "cli.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>

struct subcmd {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
};

static const struct subcmd cmds[] = {
    {"run", k25_cmd_run, "generate from a prompt with the reference engine"},
    {"gold", k25_cmd_gold, "validate, inspect and generate JSONL gold sets"},
    {"sweep", k25_cmd_sweep, "grid-search engine settings over a gold set (sweeps/*.yaml)"},
    {"config", k25_cmd_config, "list config keys and print the effective config"},
    {"bench", k25_cmd_bench, "benchmark the engine (or an OpenAI-compatible --endpoint) on a gold set under load"},
    {"serve", k25_cmd_serve, "serve the engine over an OpenAI-compatible HTTP API (docs/serve.md)"},
    {"inspect", k25_cmd_inspect, "print or export (Chrome trace) a run stored by k25 bench"},
    {"mem", k25_cmd_mem, "memory calculator: bytes per category for a model, context and batch"},
    {"attn-bench", k25_cmd_attn_bench, "attention microbenchmark against the machine's FMA peak and bandwidth"},
    {"report", k25_cmd_report, "plots and a sign-off report (Markdown + HTML) from a run, sweep or attn-bench"},
    {"logs", k25_cmd_logs, "filter, count and describe the engine's structured log lines"},
    {"gate", k25_cmd_gate, "regression gate: compare results with a baseline under a policy (exit 1 on regression)"},
    {"device-probe", k25_cmd_device_probe, "measure the GPU: bf16 GEMM peak and memory bandwidth (CUDA backend)"},
    {"tokenize", k25_cmd_tokenize, "encode/decode text with a model folder's tokenizer.json; --bench for throughput"},
    {"checksum", k25_cmd_checksum, "SHA-256 and completeness of a safetensors model against its index, config, manifest"},
};
#define NCMDS (sizeof(cmds) / sizeof(cmds[0]))

/* Installed alias names whose tail is not a command name. */
static const struct {
    const char *alias, *cmd;
} aliases[] = {
    {"k25-mem-calculator", "mem"},
    {"k25-benchmark", "bench"},
    {"k25-log-analyzer", "logs"},
    {"k25-checksum", "checksum"},
};

static void usage(FILE *out)
{
    fprintf(out, "k25bench %s - benchmarking and reproducibility harness for long-context LLM inference\n\n"
                 "usage: k25 COMMAND [ARGS...]     (k25 COMMAND --help for each)\n\ncommands:\n",
            K25_VERSION);
    for (size_t i = 0; i < NCMDS; i++)
        fprintf(out, "  %-10s %s\n", cmds[i].name, cmds[i].help);
    fprintf(out, "\n  --version  print the version\n  --help     this text\n");
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

int main(int argc, char **argv)
{
    k25_blas_reexec(argv);
    const char *self = base_name(argv[0]);
    /* Aliases dispatch on argv[0]: k25-<command> behaves as k25 <command>. */
    for (size_t a = 0; a < sizeof(aliases) / sizeof(aliases[0]); a++)
        if (strcmp(self, aliases[a].alias) == 0)
            for (size_t i = 0; i < NCMDS; i++)
                if (strcmp(aliases[a].cmd, cmds[i].name) == 0)
                    return cmds[i].fn(argc, argv);
    if (strncmp(self, "k25-", 4) == 0) {
        for (size_t i = 0; i < NCMDS; i++)
            if (strcmp(self + 4, cmds[i].name) == 0)
                return cmds[i].fn(argc, argv);
    }
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("k25 %s\n", K25_VERSION);
        return 0;
    }
    for (size_t i = 0; i < NCMDS; i++)
        if (!strcmp(argv[1], cmds[i].name))
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "k25: unknown command '%s' (k25 --help lists them)\n", argv[1]);
    return 2;
}
