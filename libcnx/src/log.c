/*
 * log.c - stderr logging and progress bars.
 *
 * Each log line is formatted into a local buffer and written with one
 * write(2), so concurrent threads never interleave within a line. Progress
 * bars redraw in place (\r) on a terminal at most 10 times a second, and on
 * anything else print one line per 10% so that logs stay short.
 */
#include "cnx/log.h"

#include "fd_int.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static int log_level = -1;

static cnx_log_level level_from_env(void)
{
    const char *env = getenv("CNX_LOG");
    if (env == NULL)
        return CNX_LOG_INFO;
    if (strcasecmp(env, "error") == 0)
        return CNX_LOG_ERROR;
    if (strcasecmp(env, "warn") == 0)
        return CNX_LOG_WARN;
    if (strcasecmp(env, "debug") == 0)
        return CNX_LOG_DEBUG;
    return CNX_LOG_INFO;
}

void cnx_log_set_level(cnx_log_level level)
{
    log_level = (int)level;
}

cnx_log_level cnx_log_get_level(void)
{
    if (log_level < 0)
        log_level = (int)level_from_env();
    return (cnx_log_level)log_level;
}

/* Best effort: a log line that cannot be written is dropped. */
static void write_all(int fd, const char *buf, size_t len)
{
    (void)cnx__write_all(fd, buf, len);
}

void cnx_log(cnx_log_level level, const char *component, const char *fmt, ...)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    char line[2048];
    char stamp[32];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;

    if ((int)level > (int)cnx_log_get_level())
        return;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
    n = snprintf(line, sizeof(line), "%s %s %s: ", stamp, names[level],
                 component);
    if (n < 0 || (size_t)n >= sizeof(line))
        return;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n = (int)strlen(line);
    line[n++] = '\n';
    write_all(STDERR_FILENO, line, (size_t)n);
}

double cnx_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct cnx_progress {
    pthread_mutex_t lock;
    char label[64];
    int64_t total;
    int64_t done;
    int tty;
    int quiet;
    int last_decile;
    double start;
    double last_draw;
};

cnx_progress *cnx_progress_start(const char *label, int64_t total, int quiet)
{
    cnx_progress *bar = calloc(1, sizeof(*bar));
    if (bar == NULL)
        return NULL;
    pthread_mutex_init(&bar->lock, NULL);
    snprintf(bar->label, sizeof(bar->label), "%s", label);
    bar->total = total > 0 ? total : 1;
    bar->tty = isatty(STDERR_FILENO);
    bar->quiet = quiet;
    bar->start = cnx_now();
    bar->last_draw = 0;
    bar->last_decile = -1;
    return bar;
}

static void draw(cnx_progress *bar, int final)
{
    char line[256];
    const int width = 30;
    double frac = (double)bar->done / (double)bar->total;
    double elapsed = cnx_now() - bar->start;
    double eta = frac > 0 ? elapsed * (1.0 - frac) / frac : 0.0;
    int fill = (int)(frac * width);
    int n, i;

    if (fill > width)
        fill = width;
    n = snprintf(line, sizeof(line), "%s%-16s [", bar->tty ? "\r" : "",
                 bar->label);
    for (i = 0; i < width && n < (int)sizeof(line) - 80; i++)
        line[n++] = i < fill ? '#' : '.';
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "] %3d%% %lld/%lld %.1fs", (int)(frac * 100.0),
                  (long long)bar->done, (long long)bar->total, elapsed);
    if (!final && frac > 0)
        n += snprintf(line + n, sizeof(line) - (size_t)n, " eta %.1fs", eta);
    else if (bar->tty)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "          ");
    if (!bar->tty || final)
        line[n++] = '\n';
    write_all(STDERR_FILENO, line, (size_t)n);
}

void cnx_progress_update(cnx_progress *bar, int64_t done)
{
    double now;
    int decile;
    if (bar == NULL || bar->quiet)
        return;
    pthread_mutex_lock(&bar->lock);
    if (done > bar->done)
        bar->done = done > bar->total ? bar->total : done;
    now = cnx_now();
    decile = (int)(bar->done * 10 / bar->total);
    if (bar->tty) {
        if (now - bar->last_draw >= 0.1) {
            bar->last_draw = now;
            draw(bar, 0);
        }
    } else if (decile > bar->last_decile && decile < 10) {
        bar->last_decile = decile;
        draw(bar, 0);
    }
    pthread_mutex_unlock(&bar->lock);
}

void cnx_progress_finish(cnx_progress *bar)
{
    if (bar == NULL)
        return;
    if (!bar->quiet) {
        bar->done = bar->total;
        draw(bar, 1);
    }
    pthread_mutex_destroy(&bar->lock);
    free(bar);
}

void cnx_progress_abort(cnx_progress *bar)
{
    if (bar == NULL)
        return;
    if (!bar->quiet && bar->tty)
        write_all(STDERR_FILENO, "\n", 1);
    pthread_mutex_destroy(&bar->lock);
    free(bar);
}
