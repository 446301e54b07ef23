/*
 * worker.c - the worker loop: Kafka in, stage, storage, lineage, Kafka out.
 *
 * One task at a time per process. The main thread polls the urgent lane
 * first, then the bulk lane; a task runs on a kernel thread while the main
 * thread keeps polling both consumers, so the member stays in its group
 * however long the kernel takes. Messages delivered meanwhile wait in a
 * small pending queue; once a few wait, both consumers are paused until the
 * task is done. Invariant: an offset is
 * committed only after the task's outputs are durable and its events and
 * signed manifest (or its dead letter) are acknowledged by the broker; if an
 * acknowledgement cannot be had the process exits without committing, so
 * the task is redelivered, never lost (outputs are write-once and
 * deterministic, so doing it again is harmless). On SIGTERM: no new task;
 * the current one is finished if it completes within the grace period, else
 * its in-flight writes are abandoned and the process exits uncommitted.
 */
#include "cnx/worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/lineage.h"
#include "cnx/store.h"
#include "cnx/log.h"
#include "json_int.h"
#include "worker_int.h"

#define PENDING_MAX 64
#define PENDING_PAUSE 4
#define ACK_TIMEOUT_MS 30000

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

typedef struct worker {
    const cnx_stage *stage;
    const cnx_worker_opts *opts;
    cnx_producer *producer;
    cnx_consumer *lanes[2]; /* 0: urgent, 1: bulk */
    cnx_key *key;
    cnx_metrics metrics;
    atomic_int stop_metrics;
    cnx_message *pending[PENDING_MAX];
    int pending_lane[PENDING_MAX];
    int npending;
    int paused;     /* both lanes paused while a task runs */
    double stop_at; /* when SIGTERM was seen, 0 if not */
    int64_t done;
} worker;

/* The kernel thread's job. */
typedef struct job {
    const cnx_stage *stage;
    const cnx_task *task;
    cnx_stage_io io;
    int slow_ms;
    int rc;
    cnx_error error;
    double cpu_s;                      /* the kernel thread's CPU time */
    cnx_store_conflict_info conflict;  /* a write-once refusal, if any */
    atomic_int finished;
    pthread_mutex_t lock; /* with done: wakes the main thread at once */
    pthread_cond_t done;
} job;

/* Wait up to ms for the job to finish. */
static void job_wait(job *j, int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_mutex_lock(&j->lock);
    while (!atomic_load(&j->finished))
        if (pthread_cond_timedwait(&j->done, &j->lock, &ts) != 0)
            break;
    pthread_mutex_unlock(&j->lock);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
        return 0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *run_job(void *arg)
{
    job *j = arg;
    double cpu0 = thread_cpu_s();
    int rc;
    cnx_error_clear();
    cnx_store_conflict_clear();
    rc = cnx__stage_io_init(&j->io, j->task);
    if (rc == 0 && j->slow_ms > 0) {
        struct timespec ts = {j->slow_ms / 1000,
                              (long)(j->slow_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if (rc == 0)
        rc = j->stage->run(j->stage->ctx, j->task, &j->io);
    j->rc = rc;
    j->error = *cnx_error_last();
    j->cpu_s = thread_cpu_s() - cpu0;
    if (rc == CNX_EIMMUTABLE)
        cnx_store_conflict(&j->conflict);
    if (rc != 0 && j->error.code == CNX_OK) {
        j->error.code = rc;
        snprintf(j->error.message, sizeof(j->error.message),
                 "stage %s failed with %s", j->stage->name,
                 cnx_error_name(rc));
    }
    pthread_mutex_lock(&j->lock);
    atomic_store(&j->finished, 1);
    pthread_cond_signal(&j->done);
    pthread_mutex_unlock(&j->lock);
    return NULL;
}

/* ---- messages out ---------------------------------------------------- */

static json_t *build_json(void)
{
    json_t *b = json_object();
    json_object_set_new(b, "commit", json_string(cnx_build_commit()));
    json_object_set_new(b, "dirty", json_boolean(cnx_build_dirty()));
    json_object_set_new(b, "describe", json_string(cnx_build_describe()));
    return b;
}

static json_t *roi_json(const cnx_box *b)
{
    return json_pack("{s:[III],s:[III]}", "min", (json_int_t)b->min[0],
                     (json_int_t)b->min[1], (json_int_t)b->min[2], "max",
                     (json_int_t)b->max[0], (json_int_t)b->max[1],
                     (json_int_t)b->max[2]);
}

static json_t *error_json(const cnx_error *e)
{
    return json_pack("{s:s,s:s,s:b}", "code", cnx_error_name(e->code),
                     "message", e->message, "retriable", e->retriable);
}

/* Wall-clock time (Unix seconds) for timestamps in events and manifests;
 * the monotonic cnx_now() measures the grace period and backoff. */
static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void now_rfc3339(char out[32])
{
    cnx_rfc3339_format(wall_now(), out);
}

/* Send a JSON document (consumed) to topic, keyed by key. */
static int send_json(worker *w, const char *topic, const char *key,
                     json_t *doc, const cnx_kafka_header *headers,
                     size_t nheaders)
{
    char *text = doc ? cnx__json_canonical(doc) : NULL;
    int rc;
    json_decref(doc);
    if (text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for a message");
    rc = cnx_producer_send(w->producer, topic, key, text, strlen(text),
                           headers, nheaders);
    free(text);
    return rc;
}

typedef struct attempt_info {
    const cnx_task *task;
    int attempt;
    double started;
    double finished;
    const cnx_stage_io *io;
    double cpu_s;
    const cnx_store_conflict_info *conflict; /* NULL or a refused write */
} attempt_info;

static int send_event(worker *w, const char *type, const attempt_info *a,
                      const cnx_error *err, const char *manifest)
{
    char when[32];
    json_t *ev;
    now_rfc3339(when);
    ev = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:o}", "schema",
                   "cnx.event/1", "type", type, "stage", w->stage->name,
                   "task_key", a->task->key, "request", a->task->request,
                   "attempt", a->attempt, "worker", w->opts->instance, "time",
                   when, "roi", roi_json(&a->task->roi));
    if (ev == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for an event");
    if (a->io != NULL && strcmp(type, "started") != 0) {
        const cnx_stage_io *io = a->io;
        double total = a->finished - a->started;
        double kernel = total - io->read_s - io->write_s;
        json_object_set_new(
            ev, "timings",
            json_pack("{s:f,s:f,s:f,s:f}", "read_s", io->read_s, "kernel_s",
                      kernel > 0 ? kernel : 0.0, "write_s", io->write_s,
                      "total_s", total));
        json_object_set_new(ev, "bytes_read",
                            json_integer((json_int_t)io->bytes_read));
        json_object_set_new(ev, "bytes_written",
                            json_integer((json_int_t)io->bytes_written));
        json_object_set_new(ev, "voxels", json_integer(io->voxels));
        json_object_set_new(ev, "cpu_s", json_real(a->cpu_s));
        json_object_set_new(ev, "outputs",
                            json_integer((json_int_t)io->written.count));
    }
    if (err != NULL)
        json_object_set_new(ev, "error", error_json(err));
    if (a->conflict != NULL && a->conflict->valid) {
        size_t n = strlen(a->task->output_layer) +
                   strlen(a->conflict->name) + 2;
        char *url = malloc(n);
        if (url != NULL) {
            snprintf(url, n, "%s/%s", a->task->output_layer,
                     a->conflict->name);
            json_object_set_new(
                ev, "violation",
                json_pack("{s:s,s:s,s:s}", "object", url, "stored",
                          a->conflict->stored, "got", a->conflict->got));
            free(url);
        }
    }
    if (manifest != NULL)
        json_object_set_new(ev, "manifest", json_string(manifest));
    return send_json(w, CNX_TOPIC_EVENTS, a->task->key, ev, NULL, 0);
}

static int cmp_artifact(const void *a, const void *b)
{
    return strcmp(((const cnx_artifact *)a)->name,
                  ((const cnx_artifact *)b)->name);
}

/*
 * Keep the signed envelope beside the outputs it covers, write-once:
 * <output layer>/lineage/<task key hex>/<envelope digest hex>.dsse.json.
 * Storage then describes itself to an auditor (cnx-verify --layer) without
 * the ledger or Kafka. Each attempt's envelope has its own name.
 */
static int store_manifest(const cnx_stage_io *io, const char *task_key,
                          const char *digest, const char *envelope)
{
    const char *k = strchr(task_key, ':'), *d = strchr(digest, ':');
    char name[256], got[CNX_DIGEST_LEN];
    snprintf(name, sizeof(name), "%s/%s/%s%s", CNX_LINEAGE_DIR,
             k ? k + 1 : task_key, d ? d + 1 : digest, CNX_LINEAGE_SUFFIX);
    return cnx_store_put(cnx_layer_store(io->output), name, envelope,
                         strlen(envelope), got);
}

/* Sign, keep and send the manifest of a successful attempt. */
static int send_manifest(worker *w, const attempt_info *a,
                         char digest[CNX_DIGEST_LEN])
{
    const cnx_stage_io *io = a->io;
    const char *out_url = a->task->output_layer;
    cnx_artifact *outs = calloc(io->written.count + 1, sizeof(*outs));
    cnx_artifact *ins = calloc(io->read.count + 1, sizeof(*ins));
    char **names = calloc(io->written.count + 1, sizeof(*names));
    char *task_json = NULL, *statement = NULL, *envelope = NULL;
    cnx_provenance prov;
    int rc = CNX_ENOMEM;

    if (outs == NULL || ins == NULL || names == NULL)
        goto done;
    for (size_t i = 0; i < io->written.count; i++) {
        size_t n = strlen(out_url) + strlen(io->written.items[i].name) + 2;
        names[i] = malloc(n);
        if (names[i] == NULL)
            goto done;
        snprintf(names[i], n, "%s/%s", out_url, io->written.items[i].name);
        outs[i].name = names[i];
        outs[i].digest = io->written.items[i].digest;
    }
    for (size_t i = 0; i < io->read.count; i++) {
        ins[i].name = io->read.items[i].name;
        ins[i].digest = io->read.items[i].digest;
    }
    qsort(outs, io->written.count, sizeof(*outs), cmp_artifact);
    qsort(ins, io->read.count, sizeof(*ins), cmp_artifact);
    rc = cnx_task_to_json(a->task, &task_json);
    if (rc != 0)
        goto done;
    memset(&prov, 0, sizeof(prov));
    prov.task_json = task_json;
    prov.task_key = a->task->key;
    prov.stage = w->stage->name;
    prov.kernel_version = w->stage->kernel_version;
    prov.outputs = outs;
    prov.noutputs = io->written.count;
    prov.inputs = ins;
    prov.ninputs = io->read.count;
    prov.git_commit = cnx_build_commit();
    prov.git_dirty = cnx_build_dirty();
    prov.container_digest = w->opts->container_digest;
    prov.worker = w->opts->instance;
    prov.attempt = a->attempt;
    prov.started = a->started;
    prov.finished = a->finished;
    rc = cnx_provenance_statement(&prov, &statement);
    if (rc == 0)
        rc = cnx_dsse_sign(w->key, CNX_DSSE_PAYLOAD_TYPE, statement,
                           strlen(statement), &envelope);
    if (rc == 0) {
        cnx_digest(envelope, strlen(envelope), digest);
        rc = store_manifest(io, a->task->key, digest, envelope);
    }
    if (rc == 0) {
        cnx_kafka_header h[] = {{"cnx-task-key", a->task->key},
                                {"cnx-stage", w->stage->name}};
        rc = cnx_producer_send(w->producer, CNX_TOPIC_LINEAGE, a->task->key,
                               envelope, strlen(envelope), h, 2);
    }
done:
    if (rc == CNX_ENOMEM && cnx_error_last()->code != CNX_ENOMEM)
        cnx_error_set(CNX_ENOMEM, 0, "out of memory for a manifest");
    for (size_t i = 0; names != NULL && i < io->written.count; i++)
        free(names[i]);
    free(names);
    free(outs);
    free(ins);
    free(task_json);
    free(statement);
    free(envelope);
    return rc;
}

/* Dead-letter a message with a replay bundle. task may be NULL. */
static int send_dlq(worker *w, const cnx_message *msg, const cnx_task *task,
                    const cnx_error *err, int attempts)
{
    char when[32], offset[32], partition[16];
    json_t *doc;
    now_rfc3339(when);
    snprintf(offset, sizeof(offset), "%lld", (long long)msg->offset);
    snprintf(partition, sizeof(partition), "%d", (int)msg->partition);
    doc = json_pack("{s:s,s:s,s:o,s:s,s:s,s:s,s:{s:s,s:i,s:I},s:i,s:o}",
                    "schema", "cnx.dlq/1", "reason", err->message, "error",
                    error_json(err), "stage", w->stage->name, "worker",
                    w->opts->instance, "time", when, "source", "topic",
                    msg->topic, "partition", (int)msg->partition, "offset",
                    (json_int_t)msg->offset, "attempts", attempts, "build",
                    build_json());
    if (doc == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for a dead letter");
    if (w->opts->container_digest != NULL)
        json_object_set_new(json_object_get(doc, "build"), "container_digest",
                            json_string(w->opts->container_digest));
    if (task != NULL) {
        char *tj = NULL;
        json_t *inputs = json_object();
        if (cnx_task_to_json(task, &tj) == 0)
            json_object_set_new(doc, "task", json_loads(tj, 0, NULL));
        free(tj);
        json_object_set_new(doc, "task_key", json_string(task->key));
        for (size_t i = 0; i < task->ninputs; i++) {
            json_t *objs = json_object();
            for (size_t k = 0; k < task->inputs[i].nobjects; k++)
                json_object_set_new(objs, task->inputs[i].objects[k].name,
                                    json_string(
                                        task->inputs[i].objects[k].digest));
            json_object_set_new(inputs, task->inputs[i].role, objs);
        }
        json_object_set_new(doc, "input_digests", inputs);
    } else {
        /* The raw message, as text when it is valid UTF-8, always as
         * base64 (bounded: dead letters must stay small). */
        size_t keep = msg->value == NULL ? 0
                      : msg->len < 65536 ? msg->len : 65536;
        char *b64 = msg->value ? cnx_base64_encode(msg->value, keep) : NULL;
        json_t *text = msg->value ? json_stringn(msg->value, keep) : NULL;
        json_object_set_new(doc, "message", text ? text : json_null());
        json_object_set_new(doc, "message_base64",
                            b64 ? json_string(b64) : json_null());
        json_object_set_new(doc, "message_bytes",
                            json_integer((json_int_t)msg->len));
        free(b64);
    }
    cnx_kafka_header h[] = {{"cnx-error", cnx_error_name(err->code)},
                            {"cnx-source-topic", msg->topic},
                            {"cnx-source-partition", partition},
                            {"cnx-source-offset", offset}};
    return send_json(w, CNX_TOPIC_DLQ, task ? task->key : NULL, doc, h, 4);
}

/* Wait for every message sent to be acknowledged, or exit uncommitted. */
static int flush_or_die(worker *w)
{
    for (int i = 0; i < 3; i++) {
        if (cnx_producer_flush(w->producer, ACK_TIMEOUT_MS) == 0)
            return 0;
        CNX_WARN("worker", "waiting for acknowledgements: %s",
                 cnx_error_last()->message);
    }
    CNX_ERROR("worker", "no acknowledgement from the broker; exiting "
              "without committing (the task will be redelivered)");
    return -1;
}

/* ---- polling while busy ---------------------------------------------- */

/* Poll both lanes once (paused or not), queueing anything delivered. */
static void poll_lanes(worker *w, int timeout_ms)
{
    for (int lane = 0; lane < 2; lane++) {
        cnx_message *m = NULL;
        int rc = cnx_consumer_poll(w->lanes[lane], lane ? timeout_ms : 0, &m);
        /* An oversized message comes back without its value: it is queued
         * like any other, to be dead-lettered and committed past in turn. */
        if (rc != 0 && !(rc == CNX_ETOOBIG && m != NULL)) {
            CNX_WARN("worker", "%s", cnx_error_last()->message);
            cnx_message_free(m);
            continue;
        }
        if (m == NULL)
            continue;
        if (w->npending < PENDING_MAX) {
            w->pending[w->npending] = m;
            w->pending_lane[w->npending++] = lane;
        } else {
            /* Cannot happen while paused; never drop: free and let the
             * uncommitted offset bring it back. */
            cnx_message_free(m);
        }
    }
}

static void check_signal(worker *w)
{
    if (stop_signal && w->stop_at == 0) {
        w->stop_at = cnx_now();
        CNX_INFO("worker", "stop requested: taking no new task (grace %.0f s)",
                 w->opts->grace_s);
    }
}

static void sleep_polling(worker *w, double seconds)
{
    double until = cnx_now() + seconds;
    while (cnx_now() < until && !stop_signal)
        poll_lanes(w, 50);
}

/* ---- one task ---------------------------------------------------------- */

enum outcome { DONE = 0, ABANDON = 1, FATAL = 2 };

static int header_attempt(const cnx_message *msg)
{
    char buf[16];
    const char *v = cnx_message_header(msg, "cnx-attempt", buf, sizeof(buf));
    long a = v ? strtol(v, NULL, 10) : 1;
    return a >= 1 && a < 1000 ? (int)a : 1;
}

static enum outcome handle(worker *w, cnx_message *msg, int lane)
{
    cnx_task *task = NULL;
    cnx_error err;
    int first = header_attempt(msg), tries = 0;
    enum outcome result = DONE;

    cnx_error_clear();
    if (msg->value == NULL || msg->len > CNX_JSON_MAX)
        cnx_error_set(CNX_ETOOBIG, 0, "task message at %s[%d]@%lld is over "
                      "the %u byte limit", msg->topic, (int)msg->partition,
                      (long long)msg->offset,
                      msg->value == NULL ? CNX_KAFKA_MAX_MESSAGE
                                         : CNX_JSON_MAX);
    else if (cnx_task_parse(&task, msg->value, msg->len) == 0) {
        if (strcmp(task->stage, w->stage->name) != 0)
            cnx_error_set(CNX_ESCHEMA, 0, "task: stage: '%s' sent to the %s "
                          "worker", task->stage, w->stage->name);
        else if (task->kernel_version != w->stage->kernel_version)
            cnx_error_set(CNX_ESCHEMA, 0, "task: kernel_version: %lld, this "
                          "worker runs %lld",
                          (long long)task->kernel_version,
                          (long long)w->stage->kernel_version);
    }
    if (cnx_error_last()->code != CNX_OK) {
        err = *cnx_error_last();
        CNX_WARN("worker", "dead-lettering %s[%d]@%lld: %s", msg->topic,
                 (int)msg->partition, (long long)msg->offset, err.message);
        atomic_fetch_add(&w->metrics.dead_lettered, 1);
        if (send_dlq(w, msg, NULL, &err, 0) != 0 || flush_or_die(w) != 0) {
            cnx_task_free(task);
            return FATAL;
        }
        cnx_task_free(task);
        if (cnx_consumer_commit(w->lanes[lane], msg) != 0)
            CNX_WARN("worker", "commit: %s", cnx_error_last()->message);
        return DONE;
    }

    for (;;) {
        attempt_info a = {task, first + tries, wall_now(), 0, NULL, 0, NULL};
        job *j = calloc(1, sizeof(*j));
        pthread_t thread;
        char manifest[CNX_DIGEST_LEN];

        if (j == NULL) {
            result = FATAL;
            break;
        }
        j->stage = w->stage;
        j->task = task;
        j->slow_ms = w->opts->slow_ms;
        pthread_mutex_init(&j->lock, NULL);
        pthread_cond_init(&j->done, NULL);
        send_event(w, "started", &a, NULL, NULL);
        atomic_fetch_add(&w->metrics.in_flight, 1);
        if (pthread_create(&thread, NULL, run_job, j) != 0) {
            free(j);
            result = FATAL;
            break;
        }
        while (!atomic_load(&j->finished)) {
            /* Keep polling so the member stays in its group; once a few
             * messages wait, pause fetching (pausing at once would throw
             * away the prefetched batch and cost a fetch per task). */
            if (!w->paused && w->npending >= PENDING_PAUSE) {
                cnx_consumer_pause(w->lanes[0]);
                cnx_consumer_pause(w->lanes[1]);
                w->paused = 1;
            }
            poll_lanes(w, 0);
            job_wait(j, 50);
            check_signal(w);
            if (w->stop_at > 0 && cnx_now() - w->stop_at > w->opts->grace_s)
                break;
        }
        if (!atomic_load(&j->finished)) {
            /* Out of grace: abandon. Remove in-flight temporaries, say so,
             * and leave without committing; Kafka redelivers the task. The
             * kernel thread dies with the process. */
            cnx_store_abandon_writes();
            a.finished = wall_now();
            cnx_error_set(CNX_EIO, 1, "preempted: grace period of %.0f s "
                          "over", w->opts->grace_s);
            err = *cnx_error_last();
            send_event(w, "preempted", &a, &err, NULL);
            cnx_producer_flush(w->producer, 2000);
            atomic_fetch_add(&w->metrics.preempted, 1);
            CNX_WARN("worker", "abandoned task %s uncommitted", task->key);
            return ABANDON; /* j leaks with its thread: the process exits */
        }
        pthread_join(thread, NULL);
        pthread_cond_destroy(&j->done);
        pthread_mutex_destroy(&j->lock);
        atomic_fetch_sub(&w->metrics.in_flight, 1);
        a.finished = wall_now();
        a.io = &j->io;
        a.cpu_s = j->cpu_s;
        a.conflict = &j->conflict;
        if (j->rc == 0) {
            /* The manifest is acknowledged before the event that names
             * it is sent: a "succeeded" event always has its manifest. */
            double p0 = cnx_now(), p1 = 0, p2 = 0, p3 = 0;
            int rc = send_manifest(w, &a, manifest);
            if (rc == 0)
                rc = flush_or_die(w);
            p1 = cnx_now();
            if (rc == 0)
                rc = send_event(w, "succeeded", &a, NULL, manifest);
            if (rc == 0 && flush_or_die(w) == 0) {
                p2 = cnx_now();
                double secs = a.finished - a.started;
                atomic_fetch_add(&w->metrics.succeeded, 1);
                atomic_fetch_add(&w->metrics.voxels, j->io.voxels);
                atomic_store(&w->metrics.last_voxels_per_s,
                             secs > 0 ? (double)j->io.voxels / secs : 0.0);
                cnx__metrics_observe(&w->metrics, secs);
                if (cnx_consumer_commit(w->lanes[lane], msg) != 0)
                    CNX_WARN("worker", "commit: %s",
                             cnx_error_last()->message);
                p3 = cnx_now();
                CNX_DEBUG("worker", "task %s: %.1f ms to durable outputs, "
                          "manifest %.1f ms, event %.1f ms, commit %.1f ms",
                          task->key, secs * 1e3, (p1 - p0) * 1e3,
                          (p2 - p1) * 1e3, (p3 - p2) * 1e3);
            } else {
                result = FATAL;
            }
            cnx__stage_io_dispose(&j->io);
            free(j);
            break;
        }
        err = j->error;
        atomic_fetch_add(&w->metrics.failed_attempts, 1);
        send_event(w, "failed", &a, &err, NULL);
        a.io = NULL; /* j->io and the conflict are gone below */
        a.conflict = NULL;
        cnx__stage_io_dispose(&j->io);
        free(j);
        /* The budget counts every attempt of the task, including those
         * of earlier deliveries (the cnx-attempt header): at most
         * 1 + retry_budget in all. */
        if (err.retriable && a.attempt <= task->retry_budget && !stop_signal) {
            double backoff = 0.2 * (double)(1 << (tries < 6 ? tries : 6));
            CNX_WARN("worker", "task %s attempt %d failed (retrying in "
                     "%.1f s): %s",
                     task->key, a.attempt, backoff, err.message);
            tries++;
            sleep_polling(w, backoff);
            continue;
        }
        if (err.retriable && stop_signal) {
            /* Stopping: leave it for another worker rather than burn it. */
            cnx_producer_flush(w->producer, 2000);
            result = ABANDON;
            break;
        }
        CNX_WARN("worker", "dead-lettering task %s after %d attempt(s): %s",
                 task->key, tries + 1, err.message);
        atomic_fetch_add(&w->metrics.dead_lettered, 1);
        if (send_dlq(w, msg, task, &err, tries + 1) != 0 ||
            flush_or_die(w) != 0) {
            result = FATAL;
            break;
        }
        if (cnx_consumer_commit(w->lanes[lane], msg) != 0)
            CNX_WARN("worker", "commit: %s", cnx_error_last()->message);
        break;
    }
    if (w->paused) {
        cnx_consumer_resume(w->lanes[0]);
        cnx_consumer_resume(w->lanes[1]);
        w->paused = 0;
    }
    cnx_task_free(task);
    return result;
}

/* ---- the loop ---------------------------------------------------------- */

static int next_message(worker *w, cnx_message **msg, int *lane)
{
    /* Pending messages first, urgent before bulk. */
    for (int want = 0; want < 2; want++) {
        for (int i = 0; i < w->npending; i++) {
            if (w->pending_lane[i] == want) {
                *msg = w->pending[i];
                *lane = want;
                memmove(&w->pending[i], &w->pending[i + 1],
                        (size_t)(w->npending - i - 1) * sizeof(w->pending[0]));
                memmove(&w->pending_lane[i], &w->pending_lane[i + 1],
                        (size_t)(w->npending - i - 1) *
                            sizeof(w->pending_lane[0]));
                w->npending--;
                return 1;
            }
        }
    }
    poll_lanes(w, 100);
    return 0;
}

static int start(worker *w)
{
    char urgent[96], bulk[96], group[96], ugroup[112], inst[160];
    const char *ut[1], *bt[1];
    const cnx_worker_opts *o = w->opts;
    int rc;

    if (cnx_build_dirty() && !o->allow_dirty)
        return cnx_error_set(CNX_EINVAL, 0,
                             "this build (%s) was made from a tree with "
                             "uncommitted changes; production workers "
                             "refuse to run it (--allow-dirty to override)",
                             cnx_build_describe());
    rc = cnx_key_load_private(&w->key, o->key_path);
    if (rc != 0)
        return rc;
    rc = cnx_producer_new(&w->producer, &o->kafka);
    if (rc != 0)
        return rc;
    {
        const char *out_topics[] = {CNX_TOPIC_EVENTS, CNX_TOPIC_LINEAGE,
                                    CNX_TOPIC_DLQ};
        cnx_producer_prepare(w->producer, out_topics, 3, 5000);
    }
    cnx_topic_tasks(urgent, sizeof(urgent), w->stage->name, 1);
    cnx_topic_tasks(bulk, sizeof(bulk), w->stage->name, 0);
    if (o->group != NULL)
        snprintf(group, sizeof(group), "%s", o->group);
    else
        snprintf(group, sizeof(group), "cnx.%s", w->stage->name);
    ut[0] = urgent;
    bt[0] = bulk;
    /* The lanes are separate groups, so that a worker joining or leaving
     * moves each lane's partitions in one rebalance of its own. */
    snprintf(inst, sizeof(inst), "%s-urgent", o->instance);
    snprintf(ugroup, sizeof(ugroup), "%s.urgent", group);
    rc = cnx_consumer_new(&w->lanes[0], &o->kafka, ugroup, inst, ut, 1,
                          o->session_timeout_ms);
    if (rc != 0)
        return rc;
    snprintf(inst, sizeof(inst), "%s-bulk", o->instance);
    rc = cnx_consumer_new(&w->lanes[1], &o->kafka, group, inst, bt, 1,
                          o->session_timeout_ms);
    if (rc != 0)
        return rc;
    w->metrics.stage = w->stage->name;
    if (o->metrics_port > 0) {
        rc = cnx__metrics_start(&w->metrics, o->metrics_port,
                                &w->stop_metrics);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static void stop(worker *w)
{
    atomic_store(&w->stop_metrics, 1);
    cnx__metrics_stop();
    for (int i = 0; i < w->npending; i++)
        cnx_message_free(w->pending[i]);
    w->npending = 0;
    /* A lane the group never assigned waits for it (docs/kafka.md,
     * #4312) at most 10 s, and never beyond the grace period. */
    {
        double deadline = cnx_now() + 10.0;
        if (w->stop_at > 0 && w->stop_at + w->opts->grace_s < deadline)
            deadline = w->stop_at + w->opts->grace_s;
        cnx_consumer_close(w->lanes[0], deadline);
        cnx_consumer_close(w->lanes[1], deadline);
    }
    cnx_producer_free(w->producer);
    cnx_key_free(w->key);
}

int cnx_worker_run(const cnx_stage *stage, const cnx_worker_opts *opts)
{
    worker w;
    struct sigaction sa;
    double idle_since;
    int code = 0;

    memset(&w, 0, sizeof(w));
    w.stage = stage;
    w.opts = opts;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (start(&w) != 0) {
        fprintf(stderr, "cnx-%s: %s\n", stage->name, cnx_error_last()->message);
        stop(&w);
        return 1;
    }
    CNX_INFO("worker", "%s worker %s ready (%s)", stage->name, opts->instance,
             cnx_build_describe());
    idle_since = cnx_now();
    while (!stop_signal) {
        cnx_message *msg = NULL;
        int lane = 1;
        enum outcome out;
        if (!next_message(&w, &msg, &lane)) {
            if (opts->idle_exit_s > 0 &&
                cnx_now() - idle_since > opts->idle_exit_s)
                break;
            continue;
        }
        out = handle(&w, msg, lane);
        cnx_message_free(msg);
        idle_since = cnx_now();
        if (out == ABANDON) {
            /* Leave at once: the kernel thread may still be running. The
             * consumers are not closed, so nothing is committed. */
            fflush(NULL);
            _exit(0);
        }
        if (out == FATAL) {
            code = 1;
            break;
        }
        w.done++;
        if (opts->max_tasks > 0 && w.done >= opts->max_tasks)
            break;
    }
    check_signal(&w);
    CNX_INFO("worker", "%s worker %s stopping after %lld task(s)",
             stage->name, opts->instance, (long long)w.done);
    stop(&w);
    return code;
}
