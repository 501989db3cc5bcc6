/*
 * cli_probe.c - `k25 device-probe`: what the backend's device can do,
 * measured now (bf16 GEMM peak, memory bandwidth), the reference every
 * figure of the device check (ci/device-check.sh) is printed beside.
 */
#include "cli.h"
#include "cliopt.h"

#include <stdio.h>

int k25_cmd_device_probe(int argc, char **argv)
{
    struct k25_error err;
    k25_error_clear(&err);
    const char *backend = "cuda";
    bool json = false;
    const struct k25_opt opts[] = {
        {.names = {"--backend"}, .type = K25_OPT_STRING, .dest = &backend, .metavar = "NAME", .deflt = "cuda",
         .help = "a device backend built into this binary"},
        {.names = {"--json"}, .type = K25_OPT_FLAG, .dest = &json, .help = "one JSON object on stdout"},
        {.type = K25_OPT_END},
    };
    const struct k25_cliopt_cmd cmd = {
        .name = "device-probe",
        .usage = "device-probe [--backend cuda] [--json]",
        .about = "Measures the device: a bf16 GEMM of 8192^3 through cuBLASLt (fp32 accumulate), a\n"
                 "1 GiB device-to-device copy, and the decode GEMM (bf16 14336x4096 weights, m = 1 and 16)\n"
                 "on the backend's GEMV kernel and on cuBLASLt; each the best of 5 timed with CUDA events.\n"
                 "Prints the device, TFLOP/s, GB/s (bytes read + written) and the decode GEMM times.\n",
        .opts = opts,
        .epilog = "Exit status: 0 measured, 2 no such backend, no probe or no usable device (one line on\n"
                  "stderr), 1 a device error while measuring.\n",
    };
    int prc = k25_cliopt_parse(&cmd, &argc, argv, &err);
    if (prc == K25_CLIOPT_HELP)
        return 0;
    struct k25_device_probe pr;
    if (prc != K25_OK || k25_device_probe(backend, &pr, &err) != K25_OK) {
        fprintf(stderr, "k25 device-probe: %s\n", err.msg);
        return err.code == K25_EIO ? 1 : 2;
    }
    if (json)
        printf("{\"backend\":\"%s\",\"device\":\"%s\",\"bf16_gemm_tflops\":%.2f,\"mem_bw_gbs\":%.1f,"
               "\"decode_gemm_us\":{\"gemv_m1\":%.2f,\"cublaslt_m1\":%.2f,\"gemv_m16\":%.2f,\"cublaslt_m16\":%.2f}}\n",
               backend, pr.device, pr.bf16_gemm_tflops, pr.mem_bw_gbs, pr.gemv_us[0], pr.lt_us[0], pr.gemv_us[1],
               pr.lt_us[1]);
    else
        printf("%s: bf16 GEMM %.1f TFLOP/s, memory bandwidth %.0f GB/s\n"
               "decode GEMM 14336x4096 bf16: m=1 GEMV %.1f us, cuBLASLt %.1f us; m=16 GEMV %.1f us, cuBLASLt %.1f us\n",
               pr.device, pr.bf16_gemm_tflops, pr.mem_bw_gbs, pr.gemv_us[0], pr.lt_us[0], pr.gemv_us[1], pr.lt_us[1]);
    return 0;
}
