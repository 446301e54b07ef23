/*
 * process_metrics.c - the series every cnx process serves beside its own:
 * cnx_build_info (the build --version prints) and the process_* series of
 * the Prometheus client conventions, read from /proc/self at each scrape
 * (a few small reads: /proc/self/stat, /proc/stat, /proc/self/fd).
 *
 * Rendered by the metrics server's thread (http_metrics.c) into a buffer
 * the caller owns; no state, so any thread may call it. A value /proc
 * does not give (another kernel, a file gone) leaves its series out
 * rather than serving a made-up number.
 */
#include <assert.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cnx/lineage.h"
#include "worker_int.h"

/* The fields of /proc/self/stat used here (proc(5)). */
typedef struct proc_stat {
    unsigned long long utime, stime; /* clock ticks */
    unsigned long long starttime;    /* clock ticks after boot */
    unsigned long long vsize;        /* bytes */
    long long rss;                   /* pages */
} proc_stat;

static int read_stat(proc_stat *ps)
{
    char text[1024];
    const char *p;
    size_t n;
    FILE *f = fopen("/proc/self/stat", "r");
    if (f == NULL)
        return -1;
    n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    /* The command name (field 2) is in parentheses and may hold spaces
     * or parentheses: the fields resume after the last ')'. Field 3
     * (state) follows; utime is field 14. */
    p = strrchr(text, ')');
    if (p == NULL)
        return -1;
    if (sscanf(p + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu "
               "%*d %*d %*d %*d %*d %*d %llu %llu %lld",
               &ps->utime, &ps->stime, &ps->starttime, &ps->vsize,
               &ps->rss) != 5)
        return -1;
    return 0;
}

/* Seconds since the epoch at boot ("btime" of /proc/stat), or -1. */
static long long boot_time(void)
{
    char line[256];
    long long btime = -1;
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "btime %lld", &btime) == 1)
            break;
    fclose(f);
    return btime;
}

/* Open descriptors (entries of /proc/self/fd, less the one reading it),
 * or -1. */
static long long open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    long long n = 0;
    char own[32];
    if (d == NULL)
        return -1;
    snprintf(own, sizeof(own), "%d", dirfd(d));
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && strcmp(e->d_name, own) != 0)
            n++;
    closedir(d);
    return n;
}

/* The version word of cnx_build_describe() ("cnx <version> <commit>..."). */
static void build_version(char *out, size_t cap)
{
    const char *d = cnx_build_describe();
    const char *v = strchr(d, ' ');
    size_t n;
    v = v != NULL ? v + 1 : d;
    n = strcspn(v, " ");
    snprintf(out, cap, "%.*s", (int)n, v);
}

size_t cnx__process_metrics_render(char *out, size_t cap)
{
    size_t n = 0;
    proc_stat ps;
    long tick = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    long long btime = boot_time(), fds = open_fds();
    struct rlimit rl;
    char version[64];
    const char *commit = cnx_build_commit();

    assert(out != NULL && cap > 0);
    out[0] = '\0';
#define EMIT(...)                                                              \
    do {                                                                       \
        int w = snprintf(out + n, cap - n, __VA_ARGS__);                       \
        if (w > 0 && (size_t)w < cap - n)                                      \
            n += (size_t)w;                                                    \
        else                                                                   \
            out[n] = '\0';                                                     \
    } while (0)
    build_version(version, sizeof(version));
    EMIT("# HELP cnx_build_info The build this process runs (as --version "
         "prints it).\n# TYPE cnx_build_info gauge\n"
         "cnx_build_info{version=\"%s\",commit=\"%s\",dirty=\"%s\"} 1\n",
         version, commit[0] != '\0' ? commit : "unknown",
         cnx_build_dirty() ? "true" : "false");
    if (read_stat(&ps) == 0 && tick > 0) {
        EMIT("# HELP process_cpu_seconds_total Total user and system CPU "
             "time spent in seconds.\n"
             "# TYPE process_cpu_seconds_total counter\n"
             "process_cpu_seconds_total %.2f\n",
             (double)(ps.utime + ps.stime) / (double)tick);
        EMIT("# HELP process_virtual_memory_bytes Virtual memory size in "
             "bytes.\n# TYPE process_virtual_memory_bytes gauge\n"
             "process_virtual_memory_bytes %llu\n",
             ps.vsize);
        if (page > 0)
            EMIT("# HELP process_resident_memory_bytes Resident memory "
                 "size in bytes.\n"
                 "# TYPE process_resident_memory_bytes gauge\n"
                 "process_resident_memory_bytes %lld\n",
                 ps.rss * (long long)page);
        if (btime > 0)
            EMIT("# HELP process_start_time_seconds Start time of the "
                 "process since unix epoch in seconds.\n"
                 "# TYPE process_start_time_seconds gauge\n"
                 "process_start_time_seconds %.2f\n",
                 (double)btime + (double)ps.starttime / (double)tick);
    }
    if (fds >= 0)
        EMIT("# HELP process_open_fds Number of open file descriptors.\n"
             "# TYPE process_open_fds gauge\nprocess_open_fds %lld\n",
             fds);
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        EMIT("# HELP process_max_fds Maximum number of open file "
             "descriptors.\n# TYPE process_max_fds gauge\n"
             "process_max_fds %llu\n",
             (unsigned long long)rl.rlim_cur);
#undef EMIT
    return n;
}
