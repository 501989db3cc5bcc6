/*
 * tu_model.h - the `tiny` dummy model loaded once for a test group: pass
 * tu_model_setup and tu_model_teardown to cmocka_run_group_tests; tests
 * use tu_tiny.
 */
#ifndef K25_TU_MODEL_H
#define K25_TU_MODEL_H

#include "k25.h"

#include <stdio.h>

static k25_model_t *tu_tiny;

static inline int tu_model_setup(void **state)
{
    (void)state;
    struct k25_config cfg;
    struct k25_error err;
    k25_config_init(&cfg);
    snprintf(cfg.model, sizeof(cfg.model), "tiny");
    if (k25_model_load(&cfg, &tu_tiny, &err) != K25_OK) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static inline int tu_model_teardown(void **state)
{
    (void)state;
    k25_model_destroy(tu_tiny);
    tu_tiny = NULL;
    return 0;
}

#endif
