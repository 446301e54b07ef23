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
 * Prefetch (--prefetch, on by default): while a kernel runs, a thread of
 * its own reads the remote inputs of the message that would be taken next
 * from the pending queue into the verified read cache. It never takes,
 * starts, commits or acknowledges that message: the message stays queued
 * (or, if the process dies, uncommitted, so it is delivered again), and
 * the bytes it fetched reach a kernel only through a verified read of the
 * cache. One task ahead at most, a few objects in memory at a time.
 */
#include "cnx/worker.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/lineage.h"
#include "cnx/message.h"
#include "cnx/store.h"
#include "cnx/log.h"
#include "json_int.h"
#include "store_int.h"
#include "worker_int.h"

#define PENDING_MAX 64
#define PENDING_PAUSE 4
#define ACK_TIMEOUT_MS 30000
#define RETRY_BACKOFF_MAX_S 30.0

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

/* Prefetch bounds: objects read at once (each at most PREFETCH_OBJECT_MAX
 * bytes, so at most PREFETCH_BATCH * PREFETCH_OBJECT_MAX bytes in memory;
 * a larger object is left to its task), and the bytes of one task fetched
 * ahead at most: a quarter of the cache's bound, so that warming the next
 * task never evicts much of the current one's inputs. */
#define PREFETCH_BATCH 4
#define PREFETCH_OBJECT_MAX ((size_t)64 << 20)
#define PREFETCH_STOP_WAIT_S 2.0

/* The prefetch thread and its one slot. Lock order: only lock. */
typedef struct prefetcher {
    pthread_t thread;
    int running;          /* the thread exists (main thread only) */
    pthread_mutex_t lock; /* guards task, busy, quit */
    pthread_cond_t wake;  /* task posted or quit */
    pthread_cond_t idle;  /* busy back to 0 */
    cnx_task *task;       /* posted, not yet taken; owned */
    int busy;             /* a task is being fetched */
    int quit;
    atomic_int cancel;    /* stop the current fetch between batches */
    uint64_t cap;         /* bytes per task */
} prefetcher;

typedef struct worker {
    const cnx_stage *stage;
    const cnx_worker_opts *opts;
    cnx_producer *producer;
    cnx_consumer *lanes[2]; /* 0: urgent, 1: bulk */
    cnx_key *key;
    cnx_key *controller; /* --controller-key, or NULL */
    cnx_metrics metrics;
    atomic_int stop_metrics;
    cnx_message *pending[PENDING_MAX];
    int pending_lane[PENDING_MAX];
    int npending;
    int paused;     /* both lanes paused while a task runs */
    double stop_at; /* when SIGTERM was seen, 0 if not */
    int64_t done;
    char broker_lost[512]; /* set when the broker stayed unreachable past
                            * --broker-timeout: exit 1 with this line */
    prefetcher pf;
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

/* Send text (owned, freed) to topic, keyed by key, signed with the
 * worker's key (docs/security.md). */
static int send_signed(worker *w, const char *topic, const char *key,
                       char *text, const cnx_kafka_header *headers,
                       size_t nheaders)
{
    int rc = cnx_msg_send(w->producer, w->key, topic, key, text,
                          strlen(text), headers, nheaders);
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
    char run[17]; /* this execution of the attempt, 16 hex */
} attempt_info;

/* A fresh run id: 64 random bits, hex. */
static void new_run(char run[17])
{
    uint64_t r = 0;
    if (getentropy(&r, sizeof(r)) != 0)
        r = (uint64_t)getpid() << 32 ^ (uint64_t)(wall_now() * 1e6);
    snprintf(run, 17, "%016llx", (unsigned long long)r);
}

static int send_event(worker *w, const char *type, const attempt_info *a,
                      const cnx_error *err, const char *manifest)
{
    char when[32], *text = NULL, *url = NULL;
    cnx_event ev;
    int rc;

    memset(&ev, 0, sizeof(ev));
    now_rfc3339(when);
    ev.type = type;
    ev.stage = w->stage->name;
    ev.task_key = a->task->key;
    ev.request = a->task->request;
    ev.attempt = a->attempt;
    ev.worker = w->opts->instance;
    ev.run = a->run;
    ev.time = when;
    ev.roi = a->task->roi;
    if (a->io != NULL && strcmp(type, "started") != 0) {
        const cnx_stage_io *io = a->io;
        double total = a->finished - a->started;
        double kernel = total - io->read_s - io->write_s;
        ev.has_io = 1;
        ev.read_s = io->read_s;
        ev.kernel_s = kernel > 0 ? kernel : 0.0;
        ev.write_s = io->write_s;
        ev.total_s = total;
        ev.cpu_s = a->cpu_s;
        ev.bytes_read = (int64_t)io->bytes_read;
        ev.bytes_written = (int64_t)io->bytes_written;
        ev.voxels = io->voxels;
        ev.outputs = (int64_t)io->written.count;
    }
    ev.error = err;
    if (a->conflict != NULL && a->conflict->valid) {
        size_t n = strlen(a->task->output_layer) +
                   strlen(a->conflict->name) + 2;
        url = malloc(n);
        if (url != NULL) {
            snprintf(url, n, "%s/%s", a->task->output_layer,
                     a->conflict->name);
            ev.violation_object = url;
            ev.violation_stored = a->conflict->stored;
            ev.violation_got = a->conflict->got;
        }
    }
    ev.manifest = manifest;
    rc = cnx_event_build(&ev, &text);
    free(url);
    if (rc != 0)
        return rc;
    return send_signed(w, CNX_TOPIC_EVENTS, a->task->key, text, NULL, 0);
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

/* Send a signed envelope of task to cnx.lineage (a DSSE envelope is
 * signed itself: no message signature). */
static int send_envelope(worker *w, const cnx_task *task, const char *envelope)
{
    cnx_kafka_header h[] = {{"cnx-task-key", task->key},
                            {"cnx-stage", w->stage->name}};
    return cnx_producer_send(w->producer, CNX_TOPIC_LINEAGE, task->key,
                             envelope, strlen(envelope), h, 2);
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
    if (rc == 0)
        rc = send_envelope(w, a->task, envelope);
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
    char when[32], offset[32], partition[16], *tj = NULL, *text = NULL;
    cnx_dead_letter dl;
    int rc = 0;

    now_rfc3339(when);
    snprintf(offset, sizeof(offset), "%lld", (long long)msg->offset);
    snprintf(partition, sizeof(partition), "%d", (int)msg->partition);
    memset(&dl, 0, sizeof(dl));
    dl.error = err;
    dl.stage = w->stage->name;
    dl.worker = w->opts->instance;
    dl.time = when;
    dl.source = msg;
    dl.attempts = attempts;
    dl.container_digest = w->opts->container_digest;
    if (task != NULL) {
        rc = cnx_task_to_json(task, &tj);
        dl.task_json = tj;
        dl.task_key = task->key;
    }
    if (rc == 0)
        rc = cnx_dead_letter_build(&dl, &text);
    free(tj);
    if (rc != 0)
        return rc;
    cnx_kafka_header h[] = {{"cnx-error", cnx_error_name(err->code)},
                            {"cnx-source-topic", msg->topic},
                            {"cnx-source-partition", partition},
                            {"cnx-source-offset", offset}};
    return send_signed(w, CNX_TOPIC_DLQ, task ? task->key : NULL, text, h, 4);
}

/* Wait for every message sent to be acknowledged, or exit uncommitted. */
static int flush_or_die(worker *w)
{
    for (int i = 0; i < 3; i++) {
        if (cnx_producer_flush(w->producer, ACK_TIMEOUT_MS) == 0)
            return 0;
        if (!cnx_error_last()->retriable) {
            /* The broker is gone past --broker-timeout, or the producer
             * failed fatally: no acknowledgement is coming. */
            snprintf(w->broker_lost, sizeof(w->broker_lost), "%s",
                     cnx_error_last()->message);
            break;
        }
        CNX_WARN("worker", "waiting for acknowledgements: %s",
                 cnx_error_last()->message);
    }
    CNX_ERROR("worker", "no acknowledgement from the broker; exiting "
              "without committing (the task will be redelivered)");
    return -1;
}

#ifdef CNX_FAULT_INJECTION
/*
 * Test builds only (CMake CNX_FAULT_INJECTION): with
 * CNX_FAULT_EXIT_BEFORE_COMMIT=1 in the environment, the worker dies
 * (_exit, no goodbye to its group) once its first task's outputs, manifest
 * and `succeeded` event are durable and acknowledged, before the commit:
 * as a worker killed at that instant, or one whose commit a rebalance
 * refused. The task is delivered again (tests/integration/
 * worker_redelivery.sh).
 */
static void fault_exit_before_commit(const cnx_task *task)
{
    const char *v = getenv("CNX_FAULT_EXIT_BEFORE_COMMIT");
    if (v == NULL || strcmp(v, "1") != 0)
        return;
    fprintf(stderr, "fault: exiting before the commit of task %s\n",
            task->key);
    fflush(NULL);
    _exit(0);
}
#endif

/* ---- a task done before ----------------------------------------------- */

#define DONE_BEFORE_MAX 16 /* envelopes of one task looked at, at most */

typedef struct envelopes {
    char *names[DONE_BEFORE_MAX];
    size_t n;
} envelopes;

static int collect_envelope(void *ctx, const char *name)
{
    envelopes *e = ctx;
    size_t n = strlen(name), s = strlen(CNX_LINEAGE_SUFFIX);
    if (n <= s || strcmp(name + n - s, CNX_LINEAGE_SUFFIX) != 0)
        return 0;
    if (e->n == DONE_BEFORE_MAX)
        return 1; /* enough: a task has a few */
    e->names[e->n] = strdup(name);
    return e->names[e->n] ? (e->n++, 0) : CNX_ENOMEM;
}

/* Is doc (a statement's task document) this very task, field for field?
 * The key leaves out the request, the layers and the scale; a task that
 * differs in any of them is other work. */
static int same_task(const json_t *doc, const cnx_task *task)
{
    char *mine = NULL, *theirs = NULL, *canon = NULL;
    json_t *parsed;
    int same = 0;
    if (doc == NULL || cnx_task_to_json(task, &mine) != 0)
        return 0;
    parsed = json_loads(mine, 0, NULL);
    canon = parsed ? cnx__json_canonical(parsed) : NULL;
    theirs = cnx__json_canonical(doc);
    same = canon != NULL && theirs != NULL && strcmp(canon, theirs) == 0;
    json_decref(parsed);
    free(mine);
    free(canon);
    free(theirs);
    return same;
}

/* The statement of envelope (text) if it is this worker's signature of
 * this very task (the same document: key, request, layers, scales) and
 * stage, every output of which exists in store; NULL. Another request's
 * run of the same work does not count: a new request recomputes, so that
 * its outputs are compared bit for bit. */
static json_t *own_statement(worker *w, cnx_store *store, const cnx_task *task,
                             const uint8_t *envelope, size_t len)
{
    uint8_t *payload = NULL;
    size_t plen = 0, i, prefix = strlen(task->output_layer);
    json_t *stmt, *ext, *subject;
    int ok = 1;

    if (cnx_dsse_verify((const char *)envelope, len, &w->key, 1, &payload,
                        &plen, NULL) != 0)
        return NULL;
    stmt = json_loadb((const char *)payload, plen, 0, NULL);
    free(payload);
    ext = json_object_get(json_object_get(json_object_get(stmt, "predicate"),
                                          "buildDefinition"),
                          "externalParameters");
    if (!json_is_string(json_object_get(ext, "taskKey")) ||
        strcmp(json_string_value(json_object_get(ext, "taskKey")),
               task->key) != 0 ||
        !json_is_string(json_object_get(ext, "stage")) ||
        strcmp(json_string_value(json_object_get(ext, "stage")),
               w->stage->name) != 0 ||
        !same_task(json_object_get(ext, "task"), task) ||
        json_array_size(json_object_get(stmt, "subject")) == 0)
        ok = 0;
    json_array_foreach(json_object_get(stmt, "subject"), i, subject) {
        const char *name = json_string_value(json_object_get(subject, "name"));
        int exists = 0;
        if (!ok)
            break;
        ok = name != NULL && strncmp(name, task->output_layer, prefix) == 0 &&
             name[prefix] == '/' &&
             cnx_store_exists(store, name + prefix + 1, &exists) == 0 &&
             exists;
    }
    if (!ok) {
        json_decref(stmt);
        return NULL;
    }
    return stmt;
}

/*
 * Was this task done before in this request, by a worker holding this
 * worker's key? So it is when a task is delivered again after its work was
 * durable: a commit
 * the group refused in a rebalance, or a worker killed between its event
 * and its commit. The output layer keeps each attempt's signed envelope
 * under lineage/<task key>/ (store_manifest), written after every output;
 * the first (by name) that verifies with this worker's key, holds this
 * very task document and stage, and whose every output exists is the
 * task's result. Then
 * *envelope (free() it) and digest are set and 1 is returned: the caller
 * sends that envelope again and a `succeeded` naming it, so the work is
 * neither computed nor signed a second time. Anything else, a storage
 * error included: 0, and the task is computed as usual.
 */
static int done_before(worker *w, const cnx_task *task,
                       char digest[CNX_DIGEST_LEN], char **envelope)
{
    const char *k = strchr(task->key, ':');
    char prefix[160];
    envelopes e = {{NULL}, 0};
    cnx_store *store = NULL;
    int found = 0;

    *envelope = NULL;
    snprintf(prefix, sizeof(prefix), "%s/%s", CNX_LINEAGE_DIR,
             k ? k + 1 : task->key);
    if (cnx_store_open(&store, task->output_layer) != 0 ||
        cnx_store_list(store, prefix, collect_envelope, &e) < 0) {
        cnx_store_free(store);
        for (size_t i = 0; i < e.n; i++)
            free(e.names[i]);
        cnx_error_clear();
        return 0;
    }
    for (size_t i = 0; i < e.n && !found; i++) {
        uint8_t *data = NULL;
        size_t len = 0;
        char want[CNX_DIGEST_LEN];
        const char *base = strrchr(e.names[i], '/');
        json_t *stmt;
        if (cnx_store_get(store, e.names[i], CNX_JSON_MAX, &data, &len) != 0)
            continue;
        cnx_digest(data, len, digest);
        snprintf(want, sizeof(want), "sha256:%.*s", 64, base ? base + 1 : "");
        stmt = strcmp(want, digest) == 0
                   ? own_statement(w, store, task, data, len)
                   : NULL;
        if (stmt != NULL) {
            json_decref(stmt);
            *envelope = (char *)data;
            found = 1;
        } else {
            free(data);
        }
    }
    for (size_t i = 0; i < e.n; i++)
        free(e.names[i]);
    cnx_store_free(store);
    cnx_error_clear();
    return found;
}

/* Announce a task done before (done_before): its envelope again on
 * cnx.lineage (the first run may have died before sending it), then a
 * `succeeded` naming it. 0, or -1 when the broker did not acknowledge. */
static int announce_done(worker *w, const cnx_task *task, int attempt,
                         const char *digest, const char *envelope)
{
    /* This run read and wrote nothing: its figures are zeros. */
    static const cnx_stage_io none;
    attempt_info a = {task, attempt, wall_now(), 0, &none, 0, NULL, ""};
    new_run(a.run);
    a.finished = a.started;
    CNX_INFO("worker", "task %s was done before (manifest %s): announcing "
             "it again, not computing it", task->key, digest);
    if (send_envelope(w, task, envelope) != 0 || flush_or_die(w) != 0)
        return -1;
    if (send_event(w, "succeeded", &a, NULL, digest) != 0 ||
        flush_or_die(w) != 0)
        return -1;
    return 0;
}

/* ---- polling while busy ---------------------------------------------- */

/*
 * Publish this turn of the loop and the readiness (/healthz, /readyz).
 * Not ready: draining (SIGTERM seen: no new task), no broker has answered
 * either lane for --ready-timeout (the clock the --broker-timeout give-up
 * uses), a lane has not joined its group yet (so a worker started with no
 * broker is not ready), or the signing key is not loaded. Storage is not probed: each
 * task names its own dataset store, so there is no store to ask before a
 * task comes; a storage outage shows as retried requests and failed
 * attempts (cnx_store_requests_total, cnx_task_failures_total).
 */
static void publish_health(worker *w)
{
    char why[256];
    double down = 0;
    if (w->opts->metrics_port <= 0)
        return;
    for (int lane = 0; lane < 2; lane++) {
        double d = cnx_consumer_unreachable_s(w->lanes[lane]);
        if (d > down)
            down = d;
    }
    if (stop_signal || w->stop_at > 0)
        snprintf(why, sizeof(why), "draining: stop requested, taking no new "
                 "task (grace %.0f s)", w->opts->grace_s);
    else if (down > 0 && down >= (w->opts->ready_timeout_s > 0
                                      ? w->opts->ready_timeout_s
                                      : CNX_KAFKA_READY_TIMEOUT_S))
        snprintf(why, sizeof(why), "broker unreachable for %.0f s "
                 "(bootstrap %s)", down,
                 w->opts->kafka.brokers ? w->opts->kafka.brokers : "?");
    else if (!cnx_consumer_joined(w->lanes[0]) ||
             !cnx_consumer_joined(w->lanes[1]))
        snprintf(why, sizeof(why), "joining the consumer groups of "
                 "cnx.tasks.%s (urgent and bulk lanes)", w->stage->name);
    else if (w->key == NULL)
        snprintf(why, sizeof(why), "signing key not loaded");
    else
        why[0] = '\0';
    cnx__http_health_update(why[0] != '\0' ? why : NULL);
}

/* Poll both lanes once (paused or not), queueing anything delivered. */
static void poll_lanes(worker *w, int timeout_ms)
{
    for (int lane = 0; lane < 2; lane++) {
        cnx_message *m = NULL;
        int rc = cnx_consumer_poll(w->lanes[lane], lane ? timeout_ms : 0, &m);
        /* An oversized message comes back without its value: it is queued
         * like any other, to be dead-lettered and committed past in turn. */
        if (rc != 0 && !(rc == CNX_ETOOBIG && m != NULL)) {
            /* Not retriable: the broker stayed unreachable past
             * --broker-timeout, or the consumer failed fatally. The loop
             * exits with it once no task is running. */
            if (!cnx_error_last()->retriable && w->broker_lost[0] == '\0')
                snprintf(w->broker_lost, sizeof(w->broker_lost), "%s",
                         cnx_error_last()->message);
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
    publish_health(w);
}

static void check_signal(worker *w)
{
    if (stop_signal && w->stop_at == 0) {
        w->stop_at = cnx_now();
        CNX_INFO("worker", "stop requested: taking no new task (grace %.0f s)",
                 w->opts->grace_s);
    }
}

/* Wait between two runs of a task, polling both lanes so the member stays
 * in its group (a wait may last minutes: --retry-window). Messages
 * delivered meanwhile are queued; once a few wait, fetching is paused as
 * while a kernel runs, so the queue never overflows. Returns early on
 * SIGTERM. */
static void sleep_polling(worker *w, double seconds)
{
    double until = cnx_now() + seconds;
    while (cnx_now() < until && !stop_signal) {
        if (!w->paused && w->npending >= PENDING_PAUSE) {
            cnx_consumer_pause(w->lanes[0]);
            cnx_consumer_pause(w->lanes[1]);
            w->paused = 1;
        }
        poll_lanes(w, 50);
    }
    check_signal(w);
}

/* The wait before run n + 1 of a task (n failed runs so far, whatever
 * their attempt numbers): 0.2 s doubling per run, at most
 * RETRY_BACKOFF_MAX_S. */
static double retry_backoff(int n)
{
    double b = 0.2;
    for (int i = 0; i < n && b < RETRY_BACKOFF_MAX_S; i++)
        b *= 2;
    return b < RETRY_BACKOFF_MAX_S ? b : RETRY_BACKOFF_MAX_S;
}

/*
 * The task a message carries, checked as the loop checks it before
 * running it: size, the controller's signature (with --controller-key),
 * schema, stage and kernel version. @return 0 with *task set; otherwise
 * the error is set (a one-line reason naming the message) and *task, if
 * not NULL, is the caller's to free.
 */
static int task_of_message(const worker *w, const cnx_message *msg,
                           cnx_task **task)
{
    if (msg->value == NULL || msg->len > CNX_JSON_MAX)
        cnx_error_set(CNX_ETOOBIG, 0, "task message at %s[%d]@%lld is over "
                      "the %u byte limit", msg->topic, (int)msg->partition,
                      (long long)msg->offset,
                      msg->value == NULL ? CNX_KAFKA_MAX_MESSAGE
                                         : CNX_JSON_MAX);
    else if (w->controller != NULL &&
             cnx_msg_verify(msg, &w->controller, 1, NULL) != 0) {
        char why[sizeof(cnx_error_last()->message)];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        cnx_error_set(CNX_EDIGEST, 0, "task message at %s[%d]@%lld is not "
                      "the controller's: %s", msg->topic, (int)msg->partition,
                      (long long)msg->offset, why);
    } else if (cnx_task_parse(task, msg->value, msg->len) == 0) {
        if (strcmp((*task)->stage, w->stage->name) != 0)
            cnx_error_set(CNX_ESCHEMA, 0, "task: stage: '%s' sent to the %s "
                          "worker", (*task)->stage, w->stage->name);
        else if ((*task)->kernel_version != w->stage->kernel_version)
            cnx_error_set(CNX_ESCHEMA, 0, "task: kernel_version: %lld, this "
                          "worker runs %lld",
                          (long long)(*task)->kernel_version,
                          (long long)w->stage->kernel_version);
    }
    return cnx_error_last()->code != CNX_OK ? -1 : 0;
}

/* ---- prefetch ---------------------------------------------------------- */

/* Index in the pending queue of the message the loop takes next (urgent
 * before bulk, each in arrival order), or -1 when none waits. */
static int next_pending(const worker *w)
{
    for (int want = 0; want < 2; want++)
        for (int i = 0; i < w->npending; i++)
            if (w->pending_lane[i] == want)
                return i;
    return -1;
}

/*
 * Read the remote inputs of task through the verified read path, which
 * checks every object against the digest the task names and files only
 * matching bytes in the cache; the bytes themselves are dropped. Stops at
 * the first failure (the task meets it again when it runs, and handles it
 * as usual), on cancel, or past the byte cap. Prefetch thread.
 */
static void prefetch_task(prefetcher *p, const cnx_task *task)
{
    uint64_t bytes = 0;
    size_t objects = 0;
    double t0 = cnx_now();
    int rc = 0, stopped = 0;

    cnx_error_clear();
    for (size_t i = 0; i < task->ninputs && rc == 0 && !stopped; i++) {
        const cnx_task_input *in = &task->inputs[i];
        cnx_store *store = NULL;
        rc = cnx_store_open(&store, in->layer);
        if (rc != 0)
            break;
        if (!cnx_store_is_remote(store)) { /* nothing to gain */
            cnx_store_free(store);
            continue;
        }
        for (size_t k = 0; k < in->nobjects && rc == 0; k += PREFETCH_BATCH) {
            cnx_store_get_req reqs[PREFETCH_BATCH];
            size_t n = in->nobjects - k;
            if (n > PREFETCH_BATCH)
                n = PREFETCH_BATCH;
            if (atomic_load(&p->cancel) || bytes >= p->cap) {
                stopped = 1;
                break;
            }
            memset(reqs, 0, sizeof(reqs));
            for (size_t j = 0; j < n; j++) {
                reqs[j].name = in->objects[k + j].name;
                reqs[j].expected = in->objects[k + j].digest;
            }
            rc = cnx_store_get_many(store, reqs, n, PREFETCH_OBJECT_MAX);
            for (size_t j = 0; j < n; j++) {
                if (reqs[j].rc == 0) {
                    bytes += reqs[j].len;
                    objects++;
                }
                free(reqs[j].data);
            }
        }
        cnx_store_free(store);
    }
    if (rc != 0)
        CNX_WARN("worker", "prefetch of task %s stopped after %zu "
                 "object(s), left to the task: %s", task->key, objects,
                 cnx_error_last()->message);
    else
        CNX_INFO("worker", "prefetched task %s: %zu object(s), %.1f MB in "
                 "%.2f s%s", task->key, objects, (double)bytes / 1e6,
                 cnx_now() - t0, stopped ? " (stopped early)" : "");
    cnx_error_clear();
}

static void *prefetch_main(void *arg)
{
    prefetcher *p = arg;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        cnx_task *task;
        while (p->task == NULL && !p->quit)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->quit)
            break;
        task = p->task;
        p->task = NULL;
        p->busy = 1;
        pthread_mutex_unlock(&p->lock);
        prefetch_task(p, task);
        cnx_task_free(task);
        pthread_mutex_lock(&p->lock);
        p->busy = 0;
        pthread_cond_broadcast(&p->idle);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* Start the prefetch thread when --prefetch asks for it and there is a
 * cache to warm. A failure only leaves prefetch off. */
static void prefetch_start(worker *w)
{
    prefetcher *p = &w->pf;
    uint64_t bound = cnx__cache_bound();
    if (!w->opts->prefetch)
        return;
    if (bound == 0) {
        CNX_INFO("worker", "prefetch off: no read cache (--cache or "
                 "CNX_CACHE_DIR) to fetch the next task's inputs into");
        return;
    }
    p->cap = bound / 4;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->idle, NULL);
    atomic_store(&p->cancel, 0);
    if (pthread_create(&p->thread, NULL, prefetch_main, p) != 0) {
        CNX_WARN("worker", "prefetch off: cannot start its thread");
        pthread_cond_destroy(&p->idle);
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
        return;
    }
    p->running = 1;
}

/* Drop a posted task and stop the fetch under way at its next batch: the
 * loop is about to take a task, which reads its own inputs. */
static void prefetch_cancel(worker *w)
{
    prefetcher *p = &w->pf;
    if (!p->running)
        return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->cancel, 1);
    cnx_task_free(p->task);
    p->task = NULL;
    pthread_mutex_unlock(&p->lock);
}

/*
 * While a kernel runs: hand the task of the message the loop would take
 * next to the prefetch thread, if it is idle. The message stays where it
 * is, in the pending queue, untouched: it is not taken, started or
 * committed here. A message the loop would refuse (too big, not the
 * controller's, another stage or kernel version, unparseable) is not
 * prefetched. @return 1 once a task was handed over, else 0 (try again at
 * the next poll).
 */
static int prefetch_next(worker *w)
{
    prefetcher *p = &w->pf;
    const cnx_message *msg;
    cnx_task *task = NULL;
    int i = next_pending(w), busy;

    if (!p->running || i < 0)
        return 0;
    pthread_mutex_lock(&p->lock);
    busy = p->busy || p->task != NULL;
    pthread_mutex_unlock(&p->lock);
    if (busy)
        return 0;
    msg = w->pending[i];
    cnx_error_clear();
    if (task_of_message(w, msg, &task) != 0) {
        cnx_task_free(task);
        cnx_error_clear();
        return 1; /* nothing to fetch for this one */
    }
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->cancel, 0);
    p->task = task;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->lock);
    return 1;
}

/* Stop the prefetch thread. @return 0 once it has ended; -1 when it is
 * still inside a read after PREFETCH_STOP_WAIT_S (it holds nothing
 * durable: the caller leaves with _exit rather than wait for it). */
static int prefetch_stop(worker *w)
{
    prefetcher *p = &w->pf;
    struct timespec ts;
    int ended;
    if (!p->running)
        return 0;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)PREFETCH_STOP_WAIT_S;
    pthread_mutex_lock(&p->lock);
    p->quit = 1;
    atomic_store(&p->cancel, 1);
    cnx_task_free(p->task);
    p->task = NULL;
    pthread_cond_signal(&p->wake);
    while (p->busy)
        if (pthread_cond_timedwait(&p->idle, &p->lock, &ts) != 0)
            break;
    ended = !p->busy;
    pthread_mutex_unlock(&p->lock);
    if (!ended)
        return -1;
    pthread_join(p->thread, NULL);
    p->running = 0;
    pthread_cond_destroy(&p->idle);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->lock);
    return 0;
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
    /* Runs of the last attempt retried in place (no events) while the
     * retry window lasts, and when this delivery first failed. */
    int in_place = 0;
    double first_failure = 0;
    char run_id[17] = "";
    enum outcome result = DONE;
    int prefetched = 0; /* the next task was handed to prefetch */

    prefetch_cancel(w);
    cnx_error_clear();
    (void)task_of_message(w, msg, &task);
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
    {
        char done_digest[CNX_DIGEST_LEN], *envelope = NULL;
        if (done_before(w, task, done_digest, &envelope)) {
            int rc = announce_done(w, task, first, done_digest, envelope);
            free(envelope);
            cnx_task_free(task);
            if (rc != 0)
                return FATAL;
            atomic_fetch_add(&w->metrics.already_done, 1);
            if (cnx_consumer_commit(w->lanes[lane], msg) != 0)
                CNX_WARN("worker", "commit: %s", cnx_error_last()->message);
            return DONE;
        }
    }

    for (;;) {
        attempt_info a = {task, first + tries, wall_now(), 0, NULL, 0, NULL,
                          ""};
        job *j = calloc(1, sizeof(*j));
        pthread_t thread;
        char manifest[CNX_DIGEST_LEN];

        if (j == NULL) {
            result = FATAL;
            break;
        }
        /* A run retried in place is the same attempt, run and events: it
         * keeps the run id its started event named. */
        if (in_place == 0)
            new_run(run_id);
        memcpy(a.run, run_id, sizeof(a.run));
        j->stage = w->stage;
        j->task = task;
        j->slow_ms = w->opts->slow_ms;
        pthread_mutex_init(&j->lock, NULL);
        pthread_cond_init(&j->done, NULL);
        if (in_place == 0) /* a run retried in place is the same attempt */
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
            if (!prefetched && !stop_signal)
                prefetched = prefetch_next(w);
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
                cnx__metrics_succeeded(&w->metrics, j->io.voxels, secs);
#ifdef CNX_FAULT_INJECTION
                fault_exit_before_commit(task);
#endif
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
        if (first_failure == 0)
            first_failure = cnx_now();
        /*
         * The last attempt allowed (1 + retry_budget, counting earlier
         * deliveries through the cnx-attempt header) does not give up on a
         * retriable error until the retry window since the first failure
         * is spent: it runs again in place, under the same attempt number
         * and without events, so the controller's rule (a retriable
         * failure at attempt 1 + budget is dead) still holds and an
         * outage of minutes is waited out rather than dead-lettered.
         */
        if (err.retriable && a.attempt > task->retry_budget && !stop_signal &&
            cnx_now() - first_failure < w->opts->retry_window_s) {
            double spent = cnx_now() - first_failure;
            double backoff = retry_backoff(tries + in_place);
            if (backoff > w->opts->retry_window_s - spent)
                backoff = w->opts->retry_window_s - spent;
            CNX_WARN("worker", "task %s attempt %d (the last) failed; "
                     "retrying in place in %.1f s (%.0f of the %.0f s retry "
                     "window spent): %s",
                     task->key, a.attempt, backoff, spent,
                     w->opts->retry_window_s, err.message);
            a.io = NULL;
            a.conflict = NULL;
            cnx__stage_io_dispose(&j->io);
            free(j);
            in_place++;
            sleep_polling(w, backoff);
            if (stop_signal) {
                /* The attempt has a started event and no outcome: say it
                 * was preempted; Kafka redelivers the task. */
                a.finished = wall_now();
                send_event(w, "preempted", &a, &err, NULL);
                cnx_producer_flush(w->producer, 2000);
                atomic_fetch_add(&w->metrics.preempted, 1);
                CNX_WARN("worker", "abandoned task %s uncommitted while "
                         "waiting to retry it", task->key);
                result = ABANDON;
                break;
            }
            continue;
        }
        send_event(w, "failed", &a, &err, NULL);
        a.io = NULL; /* j->io and the conflict are gone below */
        a.conflict = NULL;
        cnx__stage_io_dispose(&j->io);
        free(j);
        /* The budget counts every attempt of the task, including those
         * of earlier deliveries (the cnx-attempt header): at most
         * 1 + retry_budget in all. */
        if (err.retriable && a.attempt <= task->retry_budget && !stop_signal) {
            double backoff = retry_backoff(tries);
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
        if (in_place > 0)
            CNX_WARN("worker", "dead-lettering task %s after %d attempt(s), "
                     "the last run %d time(s) over %.0f s: %s", task->key,
                     tries + 1, in_place + 1, cnx_now() - first_failure,
                     err.message);
        else
            CNX_WARN("worker", "dead-lettering task %s after %d "
                     "attempt(s): %s", task->key, tries + 1, err.message);
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
    /* Pending messages first, urgent before bulk (next_pending). */
    int i = next_pending(w);
    if (i >= 0) {
        *msg = w->pending[i];
        *lane = w->pending_lane[i];
        memmove(&w->pending[i], &w->pending[i + 1],
                (size_t)(w->npending - i - 1) * sizeof(w->pending[0]));
        memmove(&w->pending_lane[i], &w->pending_lane[i + 1],
                (size_t)(w->npending - i - 1) * sizeof(w->pending_lane[0]));
        w->npending--;
        return 1;
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
    /* The metrics server first: while the clients below connect (seconds
     * without a broker) /healthz answers 200 and /readyz 503 "starting",
     * rather than nothing. */
    w->metrics.stage = w->stage->name;
    if (o->metrics_port > 0) {
        rc = cnx__metrics_start(&w->metrics, o->metrics_port,
                                &w->stop_metrics);
        if (rc != 0)
            return rc;
    }
    rc = cnx_key_load_private(&w->key, o->key_path);
    if (rc == 0 && o->controller_key_path != NULL)
        rc = cnx_key_load_public(&w->controller, o->controller_key_path);
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
    cnx_key_free(w->controller);
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
    prefetch_start(&w);
    CNX_INFO("worker", "%s worker %s ready (%s)", stage->name, opts->instance,
             cnx_build_describe());
    idle_since = cnx_now();
    while (!stop_signal) {
        cnx_message *msg = NULL;
        int lane = 1;
        enum outcome out;
        if (!next_message(&w, &msg, &lane)) {
            if (w.broker_lost[0] != '\0')
                break;
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
    if (prefetch_stop(&w) != 0 && w.broker_lost[0] == '\0') {
        /* The prefetch thread is still inside a read: it holds no task
         * and nothing durable. Leave the group as usual, then leave the
         * process without waiting for the read. */
        CNX_WARN("worker", "prefetch still reading after %.0f s: not "
                 "waiting for it", PREFETCH_STOP_WAIT_S);
        check_signal(&w);
        CNX_INFO("worker", "%s worker %s stopping after %lld task(s)",
                 stage->name, opts->instance, (long long)w.done);
        stop(&w);
        fflush(NULL);
        _exit(code);
    }
    if (w.broker_lost[0] != '\0') {
        /* Without a broker the group cannot be left nor anything flushed
         * (closing would wait on both): say why in one line and leave,
         * uncommitted, as a killed worker would. */
        fprintf(stderr, "cnx-%s: %s\n", stage->name, w.broker_lost);
        fflush(NULL);
        _exit(1);
    }
    check_signal(&w);
    CNX_INFO("worker", "%s worker %s stopping after %lld task(s)",
             stage->name, opts->instance, (long long)w.done);
    stop(&w);
    return code;
}
