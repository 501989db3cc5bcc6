/*
 * fuzz_config.c - the engine's YAML config file (engine/config.c,
 * k25_config_load_yaml + k25_config_validate).  Seeds: tests/fuzz/seeds/config/.
 */
#include "fuzz_util.h"
#include "k25.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".yaml");
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    if (k25_config_load_yaml(&cfg, path, &err) == K25_OK)
        k25_config_validate(&cfg, &err);
    return 0;
}
