/*
 * worker_metrics.c - Prometheus metrics of a worker, in the text exposition
 * format (version 0.0.4), served over HTTP on --metrics-port.
 *
 * Counters are atomics updated by the worker loop; http_metrics.c serves
 * the exposition. Load: one scrape every few seconds.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/store.h"
#include "worker_int.h"

/* Upper bounds (seconds) of the task duration histogram buckets. */
static const double bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                1, 2.5, 5, 10, 30, 60, 300, 1800};
#define NBOUNDS (sizeof(bounds) / sizeof(bounds[0]))

/* A succeeded task and its duration are counted together, under this lock,
 * and the exposition reads them under it: a scrape never sees a task in
 * cnx_tasks_total that the histogram does not have yet. */
static pthread_mutex_t succeeded_lock = PTHREAD_MUTEX_INITIALIZER;

void cnx__metrics_succeeded(cnx_metrics *m, long long voxels, double seconds)
{
    pthread_mutex_lock(&succeeded_lock);
    atomic_fetch_add(&m->succeeded, 1);
    atomic_fetch_add(&m->voxels, voxels);
    atomic_store(&m->last_voxels_per_s,
                 seconds > 0 ? (double)voxels / seconds : 0.0);
    for (size_t i = 0; i < NBOUNDS; i++)
        if (seconds <= bounds[i])
            atomic_fetch_add(&m->buckets[i], 1);
    atomic_fetch_add(&m->duration_count, 1);
    atomic_store(&m->duration_sum, atomic_load(&m->duration_sum) + seconds);
    pthread_mutex_unlock(&succeeded_lock);
}

char *cnx__metrics_render(cnx_metrics *m)
{
    size_t cap = 16384, n = 0;
    cnx_store_stats ss;
    char *buf = malloc(cap);
    const char *st = m->stage;
    long long succeeded, duration_count, buckets[NBOUNDS];
    double duration_sum;
    if (buf == NULL)
        return NULL;
    pthread_mutex_lock(&succeeded_lock);
    succeeded = atomic_load(&m->succeeded);
    duration_count = atomic_load(&m->duration_count);
    duration_sum = atomic_load(&m->duration_sum);
    for (size_t i = 0; i < NBOUNDS; i++)
        buckets[i] = atomic_load(&m->buckets[i]);
    pthread_mutex_unlock(&succeeded_lock);
#define EMIT(...)                                                          \
    do {                                                                   \
        int w = snprintf(buf + n, cap - n, __VA_ARGS__);                   \
        if (w > 0 && (size_t)w < cap - n)                                  \
            n += (size_t)w;                                                \
    } while (0)
    EMIT("# HELP cnx_tasks_total Tasks finished by this worker, by "
         "outcome.\n# TYPE cnx_tasks_total counter\n");
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"succeeded\"} %lld\n", st,
         succeeded);
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"dead_lettered\"} %lld\n", st,
         (long long)atomic_load(&m->dead_lettered));
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"preempted\"} %lld\n", st,
         (long long)atomic_load(&m->preempted));
    EMIT("cnx_tasks_total{stage=\"%s\",outcome=\"already_done\"} %lld\n",
         st, (long long)atomic_load(&m->already_done));
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
             st, bounds[i], buckets[i]);
    EMIT("cnx_task_duration_seconds_bucket{stage=\"%s\",le=\"+Inf\"} %lld\n",
         st, duration_count);
    EMIT("cnx_task_duration_seconds_sum{stage=\"%s\"} %.6f\n", st,
         duration_sum);
    EMIT("cnx_task_duration_seconds_count{stage=\"%s\"} %lld\n", st,
         (long long)atomic_load(&m->duration_count));
    cnx_store_stats_get(&ss);
    EMIT("# HELP cnx_store_cache_requests_total Verified reads of remote "
         "objects, by cache result.\n"
         "# TYPE cnx_store_cache_requests_total counter\n");
    EMIT("cnx_store_cache_requests_total{stage=\"%s\",result=\"hit\"} "
         "%llu\n", st, (unsigned long long)ss.cache_hits);
    EMIT("cnx_store_cache_requests_total{stage=\"%s\",result=\"miss\"} "
         "%llu\n", st, (unsigned long long)ss.cache_misses);
    EMIT("# HELP cnx_store_cache_bytes_total Bytes served from the cache "
         "(hit) or fetched into it (miss).\n"
         "# TYPE cnx_store_cache_bytes_total counter\n");
    EMIT("cnx_store_cache_bytes_total{stage=\"%s\",result=\"hit\"} "
         "%llu\n", st, (unsigned long long)ss.cache_hit_bytes);
    EMIT("cnx_store_cache_bytes_total{stage=\"%s\",result=\"miss\"} "
         "%llu\n", st, (unsigned long long)ss.cache_miss_bytes);
    EMIT("# HELP cnx_store_cache_evictions_total Cache entries evicted.\n"
         "# TYPE cnx_store_cache_evictions_total counter\n");
    EMIT("cnx_store_cache_evictions_total{stage=\"%s\"} %llu\n", st,
         (unsigned long long)ss.cache_evictions);
    EMIT("# HELP cnx_store_requests_total HTTP requests to object stores, "
         "and the retries among them.\n"
         "# TYPE cnx_store_requests_total counter\n");
    EMIT("cnx_store_requests_total{stage=\"%s\",kind=\"all\"} %llu\n", st,
         (unsigned long long)ss.requests);
    EMIT("cnx_store_requests_total{stage=\"%s\",kind=\"retry\"} %llu\n",
         st, (unsigned long long)ss.retries);
    EMIT("# HELP cnx_store_bytes_total Bytes moved to and from object "
         "stores.\n# TYPE cnx_store_bytes_total counter\n");
    EMIT("cnx_store_bytes_total{stage=\"%s\",direction=\"in\"} %llu\n", st,
         (unsigned long long)ss.bytes_in);
    EMIT("cnx_store_bytes_total{stage=\"%s\",direction=\"out\"} %llu\n",
         st, (unsigned long long)ss.bytes_out);
    EMIT("# HELP cnx_store_digest_refetches_total Remote reads fetched again "
         "because their bytes did not match the digest.\n"
         "# TYPE cnx_store_digest_refetches_total counter\n");
    EMIT("cnx_store_digest_refetches_total{stage=\"%s\"} %llu\n", st,
         (unsigned long long)ss.digest_refetches);
#undef EMIT
    return buf;
}

static char *render(void *ctx)
{
    return cnx__metrics_render(ctx);
}

int cnx__metrics_start(cnx_metrics *m, int port, atomic_int *stop)
{
    return cnx__http_metrics_start(port, render, m, stop);
}

void cnx__metrics_stop(void)
{
    cnx__http_metrics_stop();
}
