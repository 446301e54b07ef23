/*
 * worker_metrics.c - Prometheus metrics of a worker, in the text exposition
 * format (version 0.0.4), served over HTTP on --metrics-port.
 *
 * Counters are atomics updated by the worker loop; the server is one thread
 * that accepts a connection, reads the request line, answers with the
 * current exposition and closes. It polls with a timeout so it notices the
 * stop flag within 200 ms. Load: one scrape every few seconds.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cnx/error.h"
#include "worker_int.h"

/* Upper bounds (seconds) of the task duration histogram buckets. */
static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1, 2.5, 5, 10, 30, 60, 300, 1800};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

void cnx__metrics_observe(cnx_metrics *m, double seconds)
{
    for (size_t i = 0; i < NBOUNDS; i++)
        if (seconds <= bounds[i])
            atomic_fetch_add(&m->buckets[i], 1);
    atomic_fetch_add(&m->duration_count, 1);
    double old = atomic_load(&m->duration_sum);
    while (!atomic_compare_exchange_weak(&m->duration_sum, &old,
                                         old + seconds))
        ;
}

char *cnx__metrics_render(cnx_metrics *m)
{
    size_t cap = 8192, n = 0;
    char *buf = malloc(cap);
    const char *st = m->stage;
    if (buf == NULL)
        return NULL;
#define EMIT(...)                                                          \
    do {                                                                   \
        int w = snprintf(buf + n, cap - n, __VA_ARGS__);                   \
        if (w > 0 && (size_t)w < cap - n)                                  \
            n += (size_t)w;                                                \
    } while (0)
    EMIT("# HELP cnx_tasks_total Tasks finished by this worker, by "
         "outcome.\n# TYPE cnx_tasks_total counter\n");
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"succeeded\"} %lld\n", st,
         (long long)atomic_load(&m->succeeded));
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"dead_lettered\"} %lld\n", st,
         (long long)atomic_load(&m->dead_lettered));
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"preempted\"} %lld\n", st,
         (long long)atomic_load(&m->preempted));
    EMIT("# HELP cnx_task_failures_total Failed attempts (retried or "
         "dead-lettered).\n# TYPE cnx_task_failures_total counter\n");
    EMIT("cnx_task_failures_total{stage=\"%s\"} %lld\n", st,
         (long long)atomic_load(&m->failed_attempts));
    EMIT("# HELP cnx_voxels_total Voxels processed.\n"
         "# TYPE cnx_voxels_total counter\n");
    EMIT("cnx_voxels_total{stage=\"%s\"} %lld\n", st,
         (long long)atomic_load(&m->voxels));
    EMIT("# HELP cnx_voxels_per_second Throughput of the last task.\n"
         "# TYPE cnx_voxels_per_second gauge\n");
    EMIT("cnx_voxels_per_second{stage=\"%s\"} %.1f\n", st,
         atomic_load(&m->last_voxels_per_s));
    EMIT("# HELP cnx_tasks_in_flight Tasks being processed now.\n"
         "# TYPE cnx_tasks_in_flight gauge\n");
    EMIT("cnx_tasks_in_flight{stage=\"%s\"} %lld\n", st,
         (long long)atomic_load(&m->in_flight));
    EMIT("# HELP cnx_task_duration_seconds Wall time of successful "
         "tasks.\n# TYPE cnx_task_duration_seconds histogram\n");
    for (size_t i = 0; i < NBOUNDS; i++)
        EMIT("cnx_task_duration_seconds_bucket{stage=\"%s\",le=\"%g\"} "
             "%lld\n",
             st, bounds[i], (long long)atomic_load(&m->buckets[i]));
    EMIT("cnx_task_duration_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %lld\n",
         st, (long long)atomic_load(&m->duration_count));
    EMIT("cnx_task_duration_seconds_sum{stage=\"%s\"} %.6f\n", st,
         atomic_load(&m->duration_sum));
    EMIT("cnx_task_duration_seconds_count{stage=\"%s\"} %lld\n", st,
         (long long)atomic_load(&m->duration_count));
#undef EMIT
    return buf;
}

static struct {
    pthread_t thread;
    int fd;
    int running;
    cnx_metrics *metrics;
    atomic_int *stop;
} server = {.fd = -1};

static void serve_one(int fd)
{
    char req[1024], head[256];
    struct pollfd p = {fd, POLLIN, 0};
    char *body;
    int n;
    /* Read the request (we answer any GET with the exposition). */
    if (poll(&p, 1, 1000) <= 0 || read(fd, req, sizeof(req) - 1) <= 0)
        return;
    body = cnx__metrics_render(server.metrics);
    if (body == NULL)
        return;
    n = snprintf(head, sizeof(head),
                 "HTTP/1.0 200 OK\r\nContent-Type: text/plain; "
                 "version=0.0.4\r\nContent-Length: %zu\r\nConnection: "
                 "close\r\n\r\n",
                 strlen(body));
    if (write(fd, head, (size_t)n) == n)
        (void)!write(fd, body, strlen(body));
    free(body);
}

static void *serve(void *arg)
{
    (void)arg;
    while (!atomic_load(server.stop)) {
        struct pollfd p = {server.fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int c = accept(server.fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(c);
        close(c);
    }
    return NULL;
}

int cnx__metrics_start(cnx_metrics *m, int port, atomic_int *stop)
{
    struct sockaddr_in addr;
    int one = 1;
    server.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server.fd < 0)
        return cnx_error_set(CNX_EIO, 0, "metrics: socket: %s",
                             strerror(errno));
    setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons((uint16_t)port);
    if (bind(server.fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(server.fd, 16) != 0) {
        int rc = cnx_error_set(CNX_EIO, 0, "metrics: cannot listen on port "
                               "%d: %s", port, strerror(errno));
        close(server.fd);
        server.fd = -1;
        return rc;
    }
    server.metrics = m;
    server.stop = stop;
    if (pthread_create(&server.thread, NULL, serve, NULL) != 0) {
        close(server.fd);
        server.fd = -1;
        return cnx_error_set(CNX_EIO, 0, "metrics: cannot start thread");
    }
    server.running = 1;
    return 0;
}

void cnx__metrics_stop(void)
{
    if (!server.running)
        return;
    pthread_join(server.thread, NULL);
    close(server.fd);
    server.fd = -1;
    server.running = 0;
}
