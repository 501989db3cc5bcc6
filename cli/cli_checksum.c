/*
 * cli_checksum.c - `k25 checksum` (alias `k25-checksum`): argument parsing
 * and output for checksum.c's model check.  Exit 0 ok, 1 a problem with the
 * model (or the manifest could not be written), 2 bad input, like the gate.
 */
#include "cli.h"
#include "harness.h"
#include "cliopt.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define BIG_FILE_BYTES (64ll << 20) /* progress is shown for files at least this big */

struct progress {
    bool tty;
    uint64_t t0_ns, last_ns;
};

/* A terminal gets a live line per big file; a log gets one line when each big file is done. */
static void on_progress(const char *file, int64_t done, int64_t total, void *user)
{
    struct progress *p = user;
    uint64_t now = k25_now_ns();
    if (total < BIG_FILE_BYTES)
        return;
    if (done <= (int64_t)(4u << 20))
        p->t0_ns = now; /* first read of this file */
    double s = (double)(now - p->t0_ns) / 1e9, mb = (double)done / 1e6;
    if (p->tty && (done == total || now - p->last_ns > 250000000ull)) {
        fprintf(stderr, "\r\033[Ksha256 %s: %.0f / %.0f MB (%.0f%%), %.0f MB/s", file, mb, (double)total / 1e6,
                100.0 * (double)done / (double)total, s > 0 ? mb / s : 0.0);
        p->last_ns = now;
    }
    if (done == total && p->tty)
        fputc('\n', stderr);
    else if (done == total)
        fprintf(stderr, "k25 checksum: sha256 %s: %.0f MB in %.1f s\n", file, mb, s);
}

int k25_cmd_checksum(int argc, char **argv)
{
    struct k25_error err;
    k25_error_clear(&err);
    struct k25_checksum_report rep = {0};
    const char *write_path = NULL, *verify_path = NULL;
    bool json = false, quiet = false;
    int status = 2;
    const struct k25_opt opts[] = {
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json,
         .help = "print one JSON object (files, problems, notes) instead of the text report"},
        {.names = {"--write"}, .type = K25_OPT_PATH, .dest = &write_path,
         .help = "store a manifest (every file's name, size, SHA-256) to verify against later"},
        {.names = {"--verify"}, .type = K25_OPT_PATH, .dest = &verify_path,
         .help = "compare every file's size and SHA-256 with a manifest from --write"},
        {.names = {"--quiet", "-q"}, .type = K25_OPT_FLAG, .dest = &quiet, .help = "no progress on stderr"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "checksum",
        .usage = "checksum MODEL_DIR [--json] [--write MANIFEST | --verify MANIFEST] [--quiet]\n"
                 "       k25-checksum ...   (the same)",
        .about = "Checks a safetensors model directory: SHA-256 of every shard, config.json and\n"
                 "model.safetensors.index.json (streamed); every shard the index lists present and every\n"
                 "tensor it lists in that shard's header; each tensor the engine reads shaped (and typed,\n"
                 "with torch_dtype) as config.json implies; with --verify, each file against a manifest.\n"
                 "Text output: `sha256sum -c` lines on stdout, problems and the verdict on stderr.\n",
        .opts = opts,
        .epilog = "Exit status: 0 the model passed, 1 a problem (each names its file and tensor), 2 bad input\n"
                  "(no such directory, no safetensors in it, a missing or malformed manifest).\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    if (prc != K25_OK)
        goto out_err;
    if (argc != 2) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, NULL,
                      argc < 2 ? "give the model directory (k25 checksum --help)"
                               : "one model directory only (k25 checksum --help)");
        goto out_err;
    }
    if (write_path && verify_path) {
        k25_error_set(&err, K25_EINVAL, "command line", 0, "--write",
                      "give --write or --verify, not both (verify first, then write a new manifest)");
        goto out_err;
    }
    if (write_path && k25_output_file_check(write_path, "--write", &err) != K25_OK)
        goto out_err;

    struct progress pg = {isatty(2) != 0, 0, 0};
    struct k25_checksum_opts o = {verify_path, quiet ? NULL : on_progress, &pg};
    if (k25_checksum_model(argv[1], &o, &rep, &err) != K25_OK)
        goto out_err;

    if (json) {
        if (json_dumpf(rep.json, stdout, JSON_INDENT(2)) != 0 || fputc('\n', stdout) == EOF)
            goto out_write;
    } else {
        size_t i;
        json_t *f;
        json_array_foreach(json_object_get(rep.json, "files"), i, f)
            printf("%s  %s\n", json_string_value(json_object_get(f, "sha256")),
                   json_string_value(json_object_get(f, "name")));
        json_array_foreach(json_object_get(rep.json, "problems"), i, f)
            fprintf(stderr, "k25 checksum: %s\n", json_string_value(json_object_get(f, "message")));
        json_array_foreach(json_object_get(rep.json, "notes"), i, f)
            fprintf(stderr, "k25 checksum: note: %s\n", json_string_value(f));
        if (rep.n_problems == 0)
            fprintf(stderr,
                    "k25 checksum: ok: %d shard%s complete, %lld tensors, %d checked against config.json%s%s, "
                    "%.1f MB hashed\n", rep.n_shards, rep.n_shards == 1 ? "" : "s", (long long)rep.n_tensors,
                    rep.n_checked, verify_path ? ", every file matches " : "", verify_path ? verify_path : "",
                    (double)rep.total_bytes / 1e6);
        else
            fprintf(stderr, "k25 checksum: FAILED: %d problem%s in %s\n", rep.n_problems,
                    rep.n_problems == 1 ? "" : "s", argv[1]);
    }
    if (fflush(stdout) != 0)
        goto out_write;
    status = rep.n_problems ? 1 : 0;
    if (write_path) {
        if (rep.n_problems) {
            fprintf(stderr, "k25 checksum: %s not written: the model has problems\n", write_path);
        } else if (k25_checksum_manifest_write(&rep, write_path, &err) != K25_OK) {
            fprintf(stderr, "k25 checksum: %s\n", err.msg);
            status = 1;
        } else if (!json) {
            fprintf(stderr, "k25 checksum: manifest written to %s\n", write_path);
        }
    }
    goto out;

out_write:
    fprintf(stderr, "k25 checksum: writing the output failed: %s\n", strerror(errno));
    status = 1;
    goto out;
out_err:
    fprintf(stderr, "k25 checksum: %s\n", err.msg);
    status = err.code == K25_ENOMEM || err.code == K25_EIO ? 1 : 2;
out:
    k25_checksum_report_free(&rep);
    return status;
}
