/*
 * hostmem.c - the host's free and total memory, the CPU backend's
 * memory_info (backend.h): MemAvailable and MemTotal of /proc/meminfo.
 */
#include "k25_cpu.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int k25_cpu_host_memory(size_t *free_bytes, size_t *total_bytes, struct k25_error *err)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return k25_error_set(err, K25_EIO, "/proc/meminfo", 0, NULL, "cannot read the host's memory: %s",
                             strerror(errno));
    char line[256];
    unsigned long long avail = 0, total = 0;
    bool have_avail = false, have_total = false;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "MemAvailable: %llu kB", &avail) == 1)
            have_avail = true;
        else if (sscanf(line, "MemTotal: %llu kB", &total) == 1)
            have_total = true;
    }
    fclose(f);
    if (!have_avail || !have_total)
        return k25_error_set(err, K25_EIO, "/proc/meminfo", 0, have_total ? "MemAvailable" : "MemTotal",
                             "the host's memory figures are missing");
    *free_bytes = (size_t)avail * 1024;
    *total_bytes = (size_t)total * 1024;
    return K25_OK;
}
