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
#include "harness.h"
#include "buildinfo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <glob.h>
#include <sched.h>
#include <sys/syscall.h>

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

/* Parses a kernel CPU list ("0-3,8-11") into set; false when malformed. */
static bool parse_cpulist(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (s && *s && *s != '\n') {
        char *e;
        long a = strtol(s, &e, 10), b = a;
        if (e == s || a < 0)
            return false;
        if (*e == '-') {
            s = e + 1;
            b = strtol(s, &e, 10);
            if (e == s || b < a)
                return false;
        }
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        s = *e == ',' ? e + 1 : e;
    }
    return true;
}

/* set as a kernel CPU list into buf. */
static void format_cpulist(const cpu_set_t *set, char *buf, size_t n)
{
    size_t u = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && u < n; c++) {
        if (!CPU_ISSET(c, set))
            continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        u += (size_t)snprintf(buf + u, n - u, u ? ",%d" : "%d", c);
        if (e > c && u < n)
            u += (size_t)snprintf(buf + u, n - u, "-%d", e);
        c = e;
    }
}

json_t *k25_provenance_numa(int threads, char *warn, size_t warn_n)
{
    if (warn_n)
        warn[0] = '\0';
    cpu_set_t aff;
    char list[1024];
    json_t *o = json_object(), *nodes = json_array();
    bool have_aff = sched_getaffinity(0, sizeof(aff), &aff) == 0;
    if (have_aff) {
        format_cpulist(&aff, list, sizeof(list));
        json_object_set_new(o, "cpuset", json_string(list));
        json_object_set_new(o, "cpuset_cpus", json_integer(CPU_COUNT(&aff)));
    } else {
        json_object_set_new(o, "cpuset", json_null());
    }
    /* the NUMA nodes from /sys (no libnuma needed): each node's CPUs and how many the run may use */
    int spanned = 0, max_in_node = 0;
    glob_t g;
    if (glob("/sys/devices/system/node/node[0-9]*/cpulist", 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc; i++) {
            char *l = read_line(g.gl_pathv[i]);
            cpu_set_t ns, both;
            int node = atoi(strstr(g.gl_pathv[i], "/node/node") + 10);
            if (l && parse_cpulist(l, &ns)) {
                int in = 0;
                if (have_aff) {
                    CPU_AND(&both, &ns, &aff);
                    in = CPU_COUNT(&both);
                }
                spanned += in > 0;
                max_in_node = in > max_in_node ? in : max_in_node;
                json_array_append_new(nodes, json_pack("{s:i, s:s, s:i}", "node", node, "cpus", l, "cpus_in_cpuset",
                                                       in));
            }
            free(l);
        }
        globfree(&g);
    }
    json_object_set_new(o, "nodes", nodes);
    json_object_set_new(o, "nodes_in_cpuset", json_integer(spanned));
    /* the memory policy of this thread (get_mempolicy(2); libnuma not required) */
    static const char *const pol[] = {"default", "preferred", "bind", "interleave", "local", "preferred_many"};
    int mode = -1;
    if (syscall(SYS_get_mempolicy, &mode, NULL, 0UL, NULL, 0UL) == 0 && mode >= 0 && mode < 6)
        json_object_set_new(o, "memory_policy", json_string(pol[mode]));
    else
        json_object_set_new(o, "memory_policy", json_null());
    char *mems = cpuinfo_field("/proc/self/status", "Mems_allowed_list");
    json_object_set_new(o, "mems_allowed", str_or_null(mems));
    /* threads beyond the CPUs of any one node the run may use must span nodes */
    bool spans = spanned > 1 && threads > max_in_node;
    json_object_set_new(o, "threads", json_integer(threads));
    json_object_set_new(o, "threads_span_nodes", json_boolean(spans));
    if (spans && warn_n)
        snprintf(warn, warn_n, "%d threads span %d NUMA nodes (at most %d CPUs of the run's set on one node): "
                 "memory traffic crosses nodes; pin with numactl --cpunodebind/--membind or use fewer threads",
                 threads, spanned, max_in_node);
    return o;
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
    json_object_set_new(m, "numa", k25_provenance_numa(k25_get_threads(), NULL, 0));
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

/* ----------------------------------------------------------- load guard */

/* The aggregate "cpu" line of /proc/stat: busy and steal jiffies, and their total. */
static bool cpu_jiffies(unsigned long long *busy, unsigned long long *steal, unsigned long long *total,
                        int *running)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return false;
    char line[512];
    bool ok = false;
    *running = -1;
    while (fgets(line, sizeof(line), f)) {
        unsigned long long v[10] = {0};
        if (!strncmp(line, "cpu ", 4) &&
            sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
                   &v[5], &v[6], &v[7], &v[8], &v[9]) >= 8) {
            /* user nice system idle iowait irq softirq steal (guest time is inside user) */
            *total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
            *busy = v[0] + v[1] + v[2] + v[5] + v[6];
            *steal = v[7];
            ok = true;
        } else if (!strncmp(line, "procs_running ", 14)) {
            *running = atoi(line + 14);
        }
    }
    fclose(f);
    return ok;
}

/*
 * Samples how busy the machine is before a measurement starts: the run
 * queue (procs_running, less this process) every 20 ms over 100 ms, and
 * the CPU time other work and the hypervisor (steal) took in that window.
 * Sampled before the run, because the run's own threads would trip it
 * later.  Busy when the load others put on the machine exceeds half its
 * cores, or when steal took more than 10% of the window.
 */
int k25_load_guard_sample(struct k25_load_guard *g)
{
    memset(g, 0, sizeof(*g));
    g->cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
    g->loadavg_1m = g->load_now = g->cpu_busy = g->steal = NAN;
    double la[3];
    if (getloadavg(la, 3) == 3)
        g->loadavg_1m = la[0];
    unsigned long long b0, s0, t0, b1, s1, t1;
    int run, n = 0;
    double sum_run = 0;
    if (!cpu_jiffies(&b0, &s0, &t0, &run))
        return K25_EIO;
    for (int i = 0; i < 5; i++) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        unsigned long long b, s, t;
        if (cpu_jiffies(&b, &s, &t, &run) && run >= 1) {
            sum_run += run - 1; /* this process is running while it reads */
            n++;
        }
    }
    if (!cpu_jiffies(&b1, &s1, &t1, &run))
        return K25_EIO;
    if (n > 0)
        g->load_now = sum_run / n;
    if (t1 > t0) {
        g->cpu_busy = (double)(b1 - b0) / (double)(t1 - t0);
        g->steal = (double)(s1 - s0) / (double)(t1 - t0);
    }
    g->busy_limit = 0.5 * (g->cores > 0 ? g->cores : 1);
    char *r = g->reason;
    size_t cap = sizeof(g->reason);
    if (isfinite(g->load_now) && g->load_now > g->busy_limit) {
        g->busy = true;
        snprintf(r, cap, "load %.1f from other work > %.1f (half of %d cores)", g->load_now, g->busy_limit, g->cores);
    } else if (isfinite(g->steal) && g->steal > 0.10) {
        g->busy = true;
        snprintf(r, cap, "CPU steal %.0f%% > 10%% (the hypervisor is giving this VM's time to others)",
                 100 * g->steal);
    }
    return K25_OK;
}

json_t *k25_load_guard_json(const struct k25_load_guard *g)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    json_object_set_new(o, "cores", json_integer(g->cores));
    json_object_set_new(o, "load_now", isfinite(g->load_now) ? json_real(g->load_now) : json_null());
    json_object_set_new(o, "loadavg_1m", isfinite(g->loadavg_1m) ? json_real(g->loadavg_1m) : json_null());
    json_object_set_new(o, "cpu_busy_fraction", isfinite(g->cpu_busy) ? json_real(g->cpu_busy) : json_null());
    json_object_set_new(o, "steal_fraction", isfinite(g->steal) ? json_real(g->steal) : json_null());
    json_object_set_new(o, "busy", json_boolean(g->busy));
    json_object_set_new(o, "reason", g->busy ? json_string(g->reason) : json_null());
    return o;
}
