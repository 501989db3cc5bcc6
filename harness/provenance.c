/*
 * provenance.c - what ran where: the record every k25 result carries so
 * that anyone can tell later exactly which build, machine, data and
 * settings produced it.
 *
 * Sources: the build info header the Makefile writes (build/buildinfo.h:
 * compiler, flags, git describe --dirty), /proc/cpuinfo, sysconf,
 * /sys/devices/system/cpu/cpufreq (governor, boost), getloadavg, uname,
 * /proc/driver/nvidia (GPU and driver), OpenBLAS's core name.  A field the
 * system does not expose is null, never guessed.
 */
#include "bench.h"
#include "buildinfo.h"

#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <glob.h>

void k25_utc_now(char buf[32])
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts); /* wall clock: provenance stamps only */
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* First line of a small file, trailing newline cut; NULL when unreadable. */
static char *read_line(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, f);
    fclose(f);
    if (n <= 0) {
        free(line);
        return NULL;
    }
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    return line;
}

static json_t *str_or_null(char *s) /* takes ownership of s */
{
    json_t *j = s ? json_string(s) : json_null();
    free(s);
    return j ? j : json_null();
}

/* Value of the first "key<spaces>: value" line of /proc/cpuinfo-like text. */
static char *cpuinfo_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *line = NULL, *val = NULL;
    size_t cap = 0, klen = strlen(key);
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (strncmp(line, key, klen) != 0 || (line[klen] != ' ' && line[klen] != '\t' && line[klen] != ':'))
            continue;
        char *c = strchr(line, ':');
        if (!c)
            continue;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        size_t l = strlen(c);
        while (l > 0 && (c[l - 1] == '\n' || c[l - 1] == ' '))
            c[--l] = '\0';
        val = strdup(c);
        break;
    }
    free(line);
    fclose(f);
    return val;
}

/* Boost/turbo state: cpufreq/boost (1 = on) or intel_pstate/no_turbo (1 = off). */
static json_t *boost_state(void)
{
    char *b = read_line("/sys/devices/system/cpu/cpufreq/boost");
    if (b) {
        json_t *j = json_boolean(strcmp(b, "1") == 0);
        free(b);
        return j;
    }
    char *nt = read_line("/sys/devices/system/cpu/intel_pstate/no_turbo");
    if (nt) {
        json_t *j = json_boolean(strcmp(nt, "0") == 0);
        free(nt);
        return j;
    }
    return json_null();
}

/* GPUs from the NVIDIA driver's /proc files: [{"model": ...}], driver version line. */
static void gpu_info(json_t *machine)
{
    json_t *gpus = json_array();
    glob_t g;
    if (glob("/proc/driver/nvidia/gpus/*/information", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *model = cpuinfo_field(g.gl_pathv[i], "Model");
            if (model)
                json_array_append_new(gpus, json_pack("{s:s}", "model", model));
            free(model);
        }
        globfree(&g);
    }
    json_object_set_new(machine, "gpus", gpus);
    json_object_set_new(machine, "gpu_driver", str_or_null(read_line("/proc/driver/nvidia/version")));
}

json_t *k25_provenance_collect(const struct k25_config *cfg, const char *dataset, const char *sha256,
                               const char *filter, const char *cmdline)
{
    json_t *p = json_object(), *build = json_object(), *m = json_object();
    if (!p || !build || !m) {
        json_decref(p);
        json_decref(build);
        json_decref(m);
        return NULL;
    }
    char when[32];
    k25_utc_now(when);
    const char *git = K25_BUILD_GIT;
    size_t gl = strlen(git);
    json_object_set_new(build, "k25_version", json_string(K25_VERSION));
    json_object_set_new(build, "git", json_string(git));
    json_object_set_new(build, "git_dirty", strcmp(git, "unknown") == 0
                                                ? json_null()
                                                : json_boolean(gl > 6 && strcmp(git + gl - 6, "-dirty") == 0));
    json_object_set_new(build, "compiler", json_string(K25_BUILD_CC));
    json_object_set_new(build, "cflags", json_string(K25_BUILD_CFLAGS));
    json_object_set_new(build, "blas_core", json_string(k25_blas_corename()));
    json_object_set_new(p, "build", build);

    json_object_set_new(m, "cpu_model", str_or_null(cpuinfo_field("/proc/cpuinfo", "model name")));
    json_object_set_new(m, "cpu_flags", str_or_null(cpuinfo_field("/proc/cpuinfo", "flags")));
    json_object_set_new(m, "cores_online", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    json_object_set_new(m, "threads_used", json_integer(k25_get_threads()));
    json_object_set_new(m, "cpufreq_governor",
                        str_or_null(read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")));
    json_object_set_new(m, "cpufreq_driver",
                        str_or_null(read_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_driver")));
    json_object_set_new(m, "boost", boost_state());
    double la[3];
    if (getloadavg(la, 3) == 3)
        json_object_set_new(m, "loadavg_start", json_pack("[f, f, f]", la[0], la[1], la[2]));
    else
        json_object_set_new(m, "loadavg_start", json_null());
    gpu_info(m);
    struct utsname u;
    if (uname(&u) == 0) {
        json_object_set_new(m, "kernel", json_pack("{s:s, s:s, s:s, s:s}", "sysname", u.sysname, "release",
                                                   u.release, "version", u.version, "machine", u.machine));
        json_object_set_new(m, "hostname", json_string(u.nodename));
    } else {
        json_object_set_new(m, "kernel", json_null());
        json_object_set_new(m, "hostname", json_null());
    }
    json_object_set_new(p, "machine", m);

    json_object_set_new(p, "seed", json_integer((json_int_t)cfg->seed));
    char *cj = k25_config_to_json(cfg);
    json_t *cfgj = cj ? json_loads(cj, 0, NULL) : NULL;
    free(cj);
    json_object_set_new(p, "config", cfgj ? cfgj : json_null());
    json_object_set_new(p, "dataset", json_pack("{s:s, s:s, s:o}", "path", dataset ? dataset : "", "sha256",
                                                sha256 ? sha256 : "", "filter",
                                                filter ? json_string(filter) : json_null()));
    json_object_set_new(p, "command_line", cmdline ? json_string(cmdline) : json_null());
    json_object_set_new(p, "start_time_utc", json_string(when));
    json_object_set_new(p, "end_time_utc", json_null());
    return p;
}

void k25_provenance_finish(json_t *p)
{
    char when[32];
    k25_utc_now(when);
    json_object_set_new(p, "end_time_utc", json_string(when));
    double la[3];
    json_t *m = json_object_get(p, "machine");
    if (m)
        json_object_set_new(m, "loadavg_end",
                            getloadavg(la, 3) == 3 ? json_pack("[f, f, f]", la[0], la[1], la[2]) : json_null());
}
