/*
 * bench_controller - how fast the controller folds the log into its ledger:
 * task completions ingested per second (target >= 2000 on 2 cores).
 *
 *   build/bench/bench_controller [N]     (N tasks, default 20000)
 *
 * Builds, without running any worker, what a real run of N tasks leaves on
 * the topics of an in-process cnx-broker (1 broker, 4 partitions): the
 * cnx.request/1 message of a one-stage workflow (the first stage of
 * workflows/pyramid.json, 128^3 downsample tasks) over an info-only uint8
 * image layer, the controller's `accepted` decision (the plan's externals,
 * as controller_decide.c writes it), and per task its `released` control
 * message, the worker's `started` event, its signed manifest (in-toto
 * statement, DSSE, Ed25519; one output object) on cnx.lineage and its
 * `succeeded` event naming the manifest, each keyed as the real producer
 * keys it. All of it is produced and acknowledged before any clock starts.
 *
 * Timed: cnx_controller_run --rebuild into a fresh ledger (apply every topic
 * to its end, then return: exactly the ingest path, without decisions),
 * 3 runs (1 if the first takes over RUN_BUDGET_S), median; completions/s =
 * N / wall seconds, messages/s, and the CPU time of the applying thread
 * (librdkafka's fetching threads not counted). Each ledger is then checked
 * with SQLite: N tasks done, N verified lineage rows, N outputs, N
 * succeeded attempts, nothing rejected, every lineage chain recomputed;
 * the first ledger's size (file and WAL) and rows of all its tables, per
 * task.
 * Beside it, to show where the time goes (each as a share of the ingest):
 * reading the same messages from the broker alone, parsing the messages
 * and statements (jansson), N DSSE verifications alone (cnx_dsse_verify:
 * envelope parse, base64, Ed25519), and plain SQLite inserting one row per
 * message into a WITHOUT ROWID table in transactions of 1000 (same PRAGMAs
 * as the ledger); what is left is the fold's own SQL.
 * Exit 0 if every ledger checks out (whatever the rate), 1 otherwise.
 *
 *   build/bench/bench_controller --scale [N,N,...]   (default 10000,100000)
 *   build/bench/bench_controller --scale 10000,100000,1000000  (the 10^6
 *       point: about 4 GB in the in-process broker and 6 GB of ledger,
 *       about an hour on 2 cores; not yet run. The mock broker keeps a
 *       bounded log per partition: had it dropped messages, the ledger
 *       check says WRONG)
 *
 * The request at several sizes: does the controller's memory or its cost
 * per completion grow with the request? Each N runs in a process of its
 * own (fork, before any thread) that makes the same log without keeping a
 * copy of it, then runs the real build/bin/cnx-controller --rebuild (N
 * tasks in one request) as a child and reads its peak RSS and CPU time
 * (wait4). Printed per N: ingest wall time, completions/s and us per
 * completion, the controller's peak RSS, and the ledger's size after the
 * fold, page_count * page_size from SQLite, per task. The ledger is
 * checked as above. Then the request is archived (cnx-controller archive,
 * docs/ledger.md; a rebuild makes no decisions, so the log has no
 * `finished` message and the bench marks the request done in the ledger
 * first): its wall time, the archive's size and the pages the
 * live ledger still uses (its stubs; freed pages are reused, not returned
 * to the file system).
 */
#define _GNU_SOURCE /* RUSAGE_THREAD */
#include <inttypes.h>
#include <limits.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_util.h"
#include "cnx/broker.h"
#include "cnx/controller.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"
#include "cnx/message.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"
#include "cnx/reprocess.h"
#include "cnx/task.h"
#include "cnx/workflow.h"

#define RUNS 3
#define TARGET 2000.0
/* A first run slower than this is not repeated (keeps a slow controller's
 * default run to minutes, not a quarter of an hour). */
#define RUN_BUDGET_S 60.0
#define REQUEST "bench-controller"
#define SCALE_PARTITIONS 64 /* per topic, --scale */
#define WORKER "bench-0"

/* The first stage of workflows/pyramid.json, alone. */
static const char workflow_json[] =
    "{\"schema\":\"cnx.workflow/1\",\"name\":\"pyramid\","
    "\"description\":\"bench_controller: the first stage of "
    "workflows/pyramid.json\",\"stages\":[{\"name\":\"ds1\","
    "\"worker\":\"downsample\",\"kind\":\"map\",\"kernel_version\":1,"
    "\"inputs\":{\"source\":{\"layer\":\"image\"}},"
    "\"output\":{\"layer\":\"pyramid/v1\"},\"parameters\":{},\"halo\":0,"
    "\"task_size\":[128,128,128],\"retry_budget\":3,\"lease_s\":600,"
    "\"depends_on\":[]}]}";

/* One message as produced (kept for the SQLite baseline). */
typedef struct msg {
    const char *topic;
    char *key;
    char *value;
} msg;

typedef struct corpus {
    msg *m;
    size_t n, cap;
    char **envelopes; /* per task, borrowed from m */
    size_t nenv;
    int drop;         /* --scale: keep nothing, only count (the broker
                       * already holds every message once) */
    size_t sent, bytes, env_bytes; /* messages and bytes produced */
} corpus;

static void die(const char *what)
{
    fprintf(stderr, "bench_controller: %s: %s\n", what,
            cnx_error_last()->message);
    exit(1);
}

static char *xstrdup(const char *s)
{
    char *d = strdup(s);
    if (d == NULL) {
        fprintf(stderr, "bench_controller: out of memory\n");
        exit(1);
    }
    return d;
}

/* Canonical JSON of doc (consumed): the flags of cnx's canonical form
 * (cnx/json.h), with which the worker and the controller write theirs. */
static char *canonical(json_t *doc)
{
    char *out = json_dumps(doc, JSON_SORT_KEYS | JSON_COMPACT |
                                    JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
    json_decref(doc);
    if (out == NULL)
        die("canonical JSON");
    return out;
}

/* The key the bench's workers and controller sign with (one for both
 * here; docs/security.md keeps them apart in production). */
static const cnx_key *signer;

/* Queue value on topic (keyed; signed but for manifests, which are signed
 * envelopes) and keep it. A full local queue is flushed and the message
 * sent again. */
static void produce(cnx_producer *prod, corpus *c, const char *topic,
                    const char *key, char *value, const cnx_kafka_header *h,
                    size_t nh)
{
    int rc;
    while ((rc = strcmp(topic, CNX_TOPIC_LINEAGE) == 0
                     ? cnx_producer_send(prod, topic, key, value,
                                         strlen(value), h, nh)
                     : cnx_msg_send(prod, signer, topic, key, value,
                                    strlen(value), h, nh)) != 0) {
        if (!cnx_error_last()->retriable)
            die("produce");
        if (cnx_producer_flush(prod, 30000) != 0)
            die("flush");
    }
    c->sent++;
    c->bytes += strlen(value);
    if (strcmp(topic, CNX_TOPIC_LINEAGE) == 0)
        c->env_bytes += strlen(value);
    if (c->drop) {
        free(value);
        return;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 1024;
        c->m = realloc(c->m, c->cap * sizeof(*c->m));
        if (c->m == NULL)
            die("out of memory");
    }
    c->m[c->n].topic = topic;
    c->m[c->n].key = xstrdup(key);
    c->m[c->n].value = value;
    c->n++;
}

static json_t *box_json(const cnx_box *b)
{
    return json_pack("{s:[III],s:[III]}", "min", (json_int_t)b->min[0],
                     (json_int_t)b->min[1], (json_int_t)b->min[2], "max",
                     (json_int_t)b->max[0], (json_int_t)b->max[1],
                     (json_int_t)b->max[2]);
}

/* Every external input object has this digest (nothing reads them). */
static char fixed_digest[CNX_DIGEST_LEN];

static int fixed_lookup(void *ctx, const char *role, const char *layer,
                        const char *object, char digest[CNX_DIGEST_LEN])
{
    (void)ctx;
    (void)role;
    (void)layer;
    (void)object;
    memcpy(digest, fixed_digest, CNX_DIGEST_LEN);
    return 0;
}

/* n = nx * ny * nz with nx, ny <= 8: the task grid of the layer. */
static void task_grid(int64_t n, int64_t g[3])
{
    int64_t rest = n;
    for (int a = 0; a < 2; a++) {
        g[a] = 8;
        while (rest % g[a] != 0)
            g[a]--;
        rest /= g[a];
    }
    g[2] = rest;
}

/* ---- the log of a run of n tasks ------------------------------------ */

static void make_log(const char *boot, const char *dir, const cnx_key *key,
                     int64_t n, corpus *c)
{
    cnx_kafka_opts k = {boot, NULL, "bench-controller", 0};
    const int64_t chunk[3] = {128, 128, 128};
    const double res[3] = {8, 8, 8};
    int64_t g[3], size[3];
    char dataset[600], image[700], now[32], deadline[32];
    cnx_layer_info info;
    cnx_layer *layer;
    cnx_workflow *wf;
    cnx_plan_external *ext = NULL;
    size_t next = 0;
    cnx_plan *plan;
    cnx_box all;
    cnx_producer *prod;
    char *text, *ext_text;
    double t0 = cnx_now(), base = (double)(time_t)time(NULL);

    task_grid(n, g);
    for (int a = 0; a < 3; a++)
        size[a] = 128 * g[a];
    snprintf(dataset, sizeof(dataset), "file://%s/data", dir);
    snprintf(image, sizeof(image), "%s/image", dataset);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    if (cnx_layer_create(&layer, image, &info) != 0)
        die("image layer");
    cnx_layer_free(layer);
    all = cnx_box_make(0, 0, 0, size[0], size[1], size[2]);
    cnx_digest("bench_controller input", 22, fixed_digest);

    /* The request, as cnx-reprocess builds it. */
    cnx_request_spec spec;
    memset(&spec, 0, sizeof(spec));
    spec.request = REQUEST;
    spec.workflow = workflow_json;
    spec.dataset = dataset;
    spec.roi = all;
    spec.submitted = (int64_t)base;
    spec.deadline = (int64_t)base + 86400;
    spec.submitter = "bench@localhost";
    if (cnx_request_build(&spec, &text) != 0)
        die("request");
    if (cnx_producer_new(&prod, &k) != 0)
        die("producer");
    produce(prod, c, CNX_TOPIC_REQUESTS, REQUEST, text, NULL, 0);
    cnx_rfc3339_format((double)spec.deadline, deadline);
    deadline[19] = 'Z'; /* whole seconds, as in the request */
    deadline[20] = '\0';

    /* The controller's decision to accept it (accept_request()). */
    if (cnx_workflow_parse(&wf, workflow_json, strlen(workflow_json)) != 0 ||
        cnx_plan_read_externals(&ext, &next, wf, dataset) != 0 ||
        cnx_plan_new_with(&plan, wf, dataset, &all, ext, next) != 0 ||
        cnx_plan_prepare_outputs(plan) != 0 ||
        cnx_plan_externals_to_json(ext, next, &ext_text) != 0)
        die("plan");
    if (plan->ntasks != (size_t)n) {
        fprintf(stderr,
                "bench_controller: planned %zu tasks, not %" PRId64 "\n",
                plan->ntasks, n);
        exit(1);
    }
    {
        json_t *doc, *stages = json_array(), *notes = json_array();
        cnx_rfc3339_format(base, now);
        doc = json_pack("{s:s,s:s,s:s,s:s}", "schema", CNX_REQUEST_STATE_SCHEMA,
                        "request", REQUEST, "type", "accepted", "time", now);
        for (size_t s = 0; s < plan->nstages; s++) {
            const cnx_plan_stage *ps = &plan->stages[s];
            const cnx_wf_stage *ws = &wf->stages[s];
            json_array_append_new(
                stages,
                json_pack("{s:s,s:s,s:s,s:I,s:o,s:s,s:{s:s,s:s}}", "stage",
                          ws->name, "worker", ws->worker, "kind",
                          ws->kind == CNX_WF_MAP ? "map" : "reduce", "tasks",
                          (json_int_t)ps->count, "region",
                          box_json(&ps->region), "scale", ps->in_scale.key,
                          "output", "layer", ps->out_layer, "scale",
                          ps->out_scale.key));
        }
        for (size_t i = 0; i < plan->nnotes; i++)
            json_array_append_new(notes, json_string(plan->notes[i]));
        json_object_set_new(doc, "deadline", json_string(deadline));
        json_object_set_new(doc, "tasks",
                            json_integer((json_int_t)plan->ntasks));
        json_object_set_new(doc, "stages", stages);
        json_object_set_new(doc, "notes", notes);
        json_object_set_new(doc, "externals", json_loads(ext_text, 0, NULL));
        produce(prod, c, CNX_TOPIC_REQUESTS, REQUEST, canonical(doc), NULL, 0);
    }

    c->envelopes = calloc((size_t)n, sizeof(*c->envelopes));
    if (c->envelopes == NULL)
        die("out of memory");
    for (int64_t t = 0; t < n; t++) {
        const cnx_plan_task *pt = &plan->tasks[t];
        const cnx_plan_stage *ps = &plan->stages[pt->stage];
        const cnx_wf_stage *ws = &wf->stages[pt->stage];
        double released = base + 0.001 * (double)t, started = released + 0.01;
        double finished = started + 0.05;
        char *json, *task_json, *statement, *envelope, chunkname[256];
        char outname[2600], outdigest[CNX_DIGEST_LEN], manifest[CNX_DIGEST_LEN];
        char when[32];
        cnx_task *task;
        json_t *doc;

        if (cnx_plan_task_json(plan, (size_t)t, REQUEST, deadline, 0,
                               fixed_lookup, NULL, &json) != 0 ||
            cnx_task_parse(&task, json, strlen(json)) != 0)
            die("task");
        /* released: the controller's decision, keyed by the task key */
        cnx_rfc3339_format(released, when);
        doc = json_pack("{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:s,s:s,s:s}", "schema",
                        CNX_CONTROL_SCHEMA, "type", "released", "request",
                        REQUEST, "stage", ws->name, "index", (json_int_t)t,
                        "task_key", task->key, "attempt", (json_int_t)1, "lane",
                        "bulk", "time", when, "reason", "ready");
        produce(prod, c, CNX_TOPIC_EVENTS, task->key, canonical(doc), NULL, 0);
        /* started: the worker's event */
        cnx_rfc3339_format(started, when);
        doc = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:o}", "schema",
                        "cnx.event/1", "type", "started", "stage", task->stage,
                        "task_key", task->key, "request", task->request,
                        "attempt", 1, "worker", WORKER, "time", when, "roi",
                        box_json(&task->roi));
        produce(prod, c, CNX_TOPIC_EVENTS, task->key, canonical(doc), NULL, 0);
        /* the manifest: one output chunk, the input chunks it read */
        {
            cnx_layer_info oinfo;
            const cnx_task_input *in = &task->inputs[0];
            cnx_artifact out, *ins = calloc(in->nobjects + 1, sizeof(*ins));
            char **inames = calloc(in->nobjects + 1, sizeof(*inames));
            cnx_provenance prov;
            memset(&oinfo, 0, sizeof(oinfo));
            oinfo.nscales = 1;
            oinfo.scales[0] = ps->out_scale;
            if (ins == NULL || inames == NULL ||
                cnx_layer_chunk_name(&oinfo, 0, &pt->write, chunkname,
                                     sizeof(chunkname)) != 0)
                die("output name");
            snprintf(outname, sizeof(outname), "%s/%s", task->output_layer,
                     chunkname);
            cnx_digest(outname, strlen(outname), outdigest);
            out.name = outname;
            out.digest = outdigest;
            for (size_t i = 0; i < in->nobjects; i++) {
                size_t len =
                    strlen(in->layer) + strlen(in->objects[i].name) + 2;
                inames[i] = malloc(len);
                if (inames[i] == NULL)
                    die("out of memory");
                snprintf(inames[i], len, "%s/%s", in->layer,
                         in->objects[i].name);
                ins[i].name = inames[i];
                ins[i].digest = in->objects[i].digest;
            }
            if (cnx_task_to_json(task, &task_json) != 0)
                die("task JSON");
            memset(&prov, 0, sizeof(prov));
            prov.task_json = task_json;
            prov.task_key = task->key;
            prov.stage = task->stage;
            prov.kernel_version = task->kernel_version;
            prov.outputs = &out;
            prov.noutputs = 1;
            prov.inputs = ins;
            prov.ninputs = in->nobjects;
            prov.git_commit = cnx_build_commit();
            prov.git_dirty = cnx_build_dirty();
            prov.worker = WORKER;
            prov.attempt = 1;
            prov.started = started;
            prov.finished = finished;
            if (cnx_provenance_statement(&prov, &statement) != 0 ||
                cnx_dsse_sign(key, CNX_DSSE_PAYLOAD_TYPE, statement,
                              strlen(statement), &envelope) != 0)
                die("manifest");
            cnx_digest(envelope, strlen(envelope), manifest);
            cnx_kafka_header h[] = {{"cnx-task-key", task->key},
                                    {"cnx-stage", task->stage}};
            if (!c->drop)
                c->envelopes[c->nenv] = envelope;
            c->nenv++;
            produce(prod, c, CNX_TOPIC_LINEAGE, task->key, envelope, h, 2);
            for (size_t i = 0; i < in->nobjects; i++)
                free(inames[i]);
            free(inames);
            free(ins);
            free(task_json);
            free(statement);
        }
        /* succeeded: sent once the manifest is acknowledged */
        cnx_rfc3339_format(finished, when);
        doc = json_pack("{s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:o}", "schema",
                        "cnx.event/1", "type", "succeeded", "stage",
                        task->stage, "task_key", task->key, "request",
                        task->request, "attempt", 1, "worker", WORKER, "time",
                        when, "roi", box_json(&task->roi));
        json_object_set_new(doc, "timings",
                            json_pack("{s:f,s:f,s:f,s:f}", "read_s", 0.011,
                                      "kernel_s", 0.027, "write_s", 0.012,
                                      "total_s", finished - started));
        json_object_set_new(doc, "bytes_read", json_integer(128 * 128 * 128));
        json_object_set_new(doc, "bytes_written", json_integer(64 * 64 * 64));
        json_object_set_new(doc, "voxels", json_integer(128 * 128 * 128));
        json_object_set_new(doc, "cpu_s", json_real(0.027));
        json_object_set_new(doc, "outputs", json_integer(1));
        json_object_set_new(doc, "manifest", json_string(manifest));
        produce(prod, c, CNX_TOPIC_EVENTS, task->key, canonical(doc), NULL, 0);
        cnx_task_free(task);
        free(json);
    }
    if (cnx_producer_flush(prod, 120000) != 0)
        die("flush");
    cnx_producer_free(prod);
    size_t bytes = c->bytes, env_bytes = c->env_bytes;
    printf("log    : %zu messages (1 request, 1 accepted, %" PRId64
           " x released + started + manifest + succeeded) for %" PRId64
           " tasks on a %" PRId64 "x%" PRId64 "x%" PRId64 " uint8 layer, "
           "%.1f MB (envelopes %.0f B, other messages %.0f B on average), "
           "made and acknowledged in %.1f s (untimed)\n",
           c->sent, n, n, size[0], size[1], size[2], (double)bytes / 1e6,
           (double)env_bytes / (double)c->nenv,
           (double)(bytes - env_bytes) / (double)(c->sent - c->nenv),
           cnx_now() - t0);
    free(ext_text);
    free(ext);
    cnx_plan_free(plan);
    cnx_workflow_free(wf);
}

/* ---- checking a ledger ---------------------------------------------- */

static int64_t count(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *st;
    int64_t v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

/* Walk every partition's lineage chain: prev links and row digests.
 * @return rows walked, or -1 at the first broken link. */
static int64_t walk_chain(sqlite3 *db)
{
    static const char genesis[] = "sha256:0000000000000000000000000000000000"
                                  "000000000000000000000000000000";
    sqlite3_stmt *st;
    char prev[CNX_DIGEST_LEN + 8] = "", row[CNX_DIGEST_LEN], chain[320];
    int part = -1;
    int64_t rows = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT partition, offset, envelope_digest, "
                           "verified, prev, row_digest FROM lineage "
                           "ORDER BY partition, offset",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int p = sqlite3_column_int(st, 0);
        if (p != part) {
            part = p;
            snprintf(prev, sizeof(prev), "%s", genesis);
        }
        snprintf(chain, sizeof(chain),
                 "cnx.lineage-row/1\n%s\n%d\n%lld\n%s\n%d\n", prev, p,
                 (long long)sqlite3_column_int64(st, 1),
                 (const char *)sqlite3_column_text(st, 2),
                 sqlite3_column_int(st, 3));
        cnx_digest(chain, strlen(chain), row);
        if (strcmp((const char *)sqlite3_column_text(st, 4), prev) != 0 ||
            strcmp((const char *)sqlite3_column_text(st, 5), row) != 0) {
            rows = -1;
            break;
        }
        snprintf(prev, sizeof(prev), "%s", row);
        rows++;
    }
    sqlite3_finalize(st);
    return rows;
}

static int check_ledger(const char *path, int64_t n, int quiet)
{
    sqlite3 *db;
    int64_t done, verified, outputs, succeeded, rejected, chain, rows;
    int ok;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return 0;
    done = count(db, "SELECT count(*) FROM tasks WHERE request = '" REQUEST
                     "' AND state = 'done'");
    verified = count(db, "SELECT count(*) FROM lineage WHERE verified = 1");
    rows = count(db, "SELECT count(*) FROM lineage");
    outputs = count(db, "SELECT count(*) FROM outputs");
    succeeded = count(db, "SELECT count(*) FROM attempts WHERE state = "
                          "'succeeded' AND manifest IS NOT NULL");
    rejected = count(db, "SELECT count(*) FROM rejected");
    chain = walk_chain(db);
    sqlite3_close(db);
    ok = done == n && verified == n && rows == n && outputs == n &&
         succeeded == n && rejected == 0 && chain == n;
    if (!quiet || !ok)
        printf("check  : tasks done %" PRId64 ", lineage verified %" PRId64
               " of %" PRId64 ", outputs %" PRId64
               ", succeeded attempts %" PRId64 ", rejected %" PRId64
               ", chain %s (%" PRId64 " rows): %s\n",
               done, verified, rows, outputs, succeeded, rejected,
               chain == rows ? "intact" : "BROKEN", chain, ok ? "OK" : "WRONG");
    return ok;
}

/* The size of a ledger after the fold: its file (and its WAL, if one is
 * left) and the rows of all its tables, each per task. */
static void ledger_size(const char *path, int64_t n)
{
    char wal[720], sql[300];
    struct stat sb;
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t bytes = 0, rows = 0;
    int tables = 0;
    if (stat(path, &sb) == 0)
        bytes += sb.st_size;
    snprintf(wal, sizeof(wal), "%s-wal", path);
    if (stat(wal, &sb) == 0)
        bytes += sb.st_size;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return;
    if (sqlite3_prepare_v2(db,
                           "SELECT name FROM sqlite_master WHERE type = "
                           "'table' AND name NOT LIKE 'sqlite_%'",
                           -1, &st, NULL) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) {
            snprintf(sql, sizeof(sql), "SELECT count(*) FROM \"%s\"",
                     (const char *)sqlite3_column_text(st, 0));
            int64_t k = count(db, sql);
            rows += k > 0 ? k : 0;
            tables++;
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    printf("ledger : %" PRId64 " bytes, %" PRId64 " rows in %d tables after "
           "%" PRId64 " tasks: %.0f bytes and %.2f rows per task\n",
           bytes, rows, tables, n, (double)bytes / (double)n,
           (double)rows / (double)n);
}

/* ---- the peers ------------------------------------------------------ */

static double sqlite_baseline(const char *dir, const corpus *c, int run)
{
    char path[700];
    sqlite3 *db;
    sqlite3_stmt *st;
    double t0;
    snprintf(path, sizeof(path), "%s/baseline-%d.db", dir, run);
    if (sqlite3_open(path, &db) != SQLITE_OK ||
        sqlite3_exec(db,
                     "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                     "CREATE TABLE log(topic TEXT NOT NULL, seq INTEGER "
                     "NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
                     "PRIMARY KEY(topic, seq)) WITHOUT ROWID",
                     NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "INSERT INTO log VALUES(?, ?, ?, ?)", -1, &st,
                           NULL) != SQLITE_OK) {
        fprintf(stderr, "bench_controller: baseline: %s\n", sqlite3_errmsg(db));
        exit(1);
    }
    t0 = cnx_now();
    for (size_t i = 0; i < c->n; i++) {
        if (i % 1000 == 0)
            sqlite3_exec(db, "BEGIN", NULL, NULL, NULL);
        sqlite3_bind_text(st, 1, c->m[i].topic, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, (int64_t)i);
        sqlite3_bind_text(st, 3, c->m[i].key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, c->m[i].value, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) {
            fprintf(stderr, "bench_controller: baseline: %s\n",
                    sqlite3_errmsg(db));
            exit(1);
        }
        sqlite3_reset(st);
        if (i % 1000 == 999 || i + 1 == c->n)
            sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    }
    t0 = cnx_now() - t0;
    sqlite3_finalize(st);
    sqlite3_close(db);
    return t0;
}

/* CPU seconds of the calling thread (cnx_controller_run applies on it;
 * librdkafka's threads are not counted). */
static double thread_cpu(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Verify envelopes [from, to) as the controller does (payload kept). */
static double verify_range(const corpus *c, cnx_key *pub, size_t from,
                           size_t to)
{
    double t0 = cnx_now();
    for (size_t i = from; i < to; i++) {
        uint8_t *payload = NULL;
        size_t plen;
        if (cnx_dsse_verify(c->envelopes[i], strlen(c->envelopes[i]), &pub, 1,
                            &payload, &plen, NULL) != 0)
            die("verify");
        free(payload);
    }
    return cnx_now() - t0;
}

/* Parse what the fold parses besides the envelope (which
 * cnx_dsse_verify parses): every other message, and the statement inside
 * each envelope (payloads decoded untimed). */
static double parse_all(const corpus *c)
{
    double secs = 0;
    for (size_t i = 0; i < c->n; i++) {
        json_error_t e;
        json_t *doc;
        double t0;
        if (strcmp(c->m[i].topic, CNX_TOPIC_LINEAGE) == 0) {
            json_t *env = json_loads(c->m[i].value, 0, &e);
            const char *b64 =
                json_string_value(json_object_get(env, "payload"));
            uint8_t *raw;
            size_t len;
            if (b64 == NULL ||
                cnx_base64_decode(b64, strlen(b64), &raw, &len) != 0)
                die("payload");
            json_decref(env);
            t0 = cnx_now();
            doc =
                json_loadb((const char *)raw, len, JSON_REJECT_DUPLICATES, &e);
            secs += cnx_now() - t0;
            free(raw);
        } else {
            t0 = cnx_now();
            doc = json_loads(c->m[i].value, JSON_REJECT_DUPLICATES, &e);
            secs += cnx_now() - t0;
        }
        if (doc == NULL)
            die("parse");
        t0 = cnx_now();
        json_decref(doc);
        secs += cnx_now() - t0;
    }
    return secs;
}

/* Read the three topics from their start to the end, as the rebuild's
 * reader does, applying nothing. */
static double read_all(const char *boot, size_t expect)
{
    static const char *const topics[] = {CNX_TOPIC_REQUESTS, CNX_TOPIC_EVENTS,
                                         CNX_TOPIC_LINEAGE};
    cnx_kafka_opts k = {boot, NULL, "bench-controller-read", 0};
    cnx_consumer *reader;
    size_t got = 0;
    double t0 = cnx_now(), until = t0 + 120;
    if (cnx_reader_new(&reader, &k, topics, 3, NULL, NULL) != 0)
        die("reader");
    while (got < expect && cnx_now() < until) {
        cnx_message *m = NULL;
        cnx_consumer_poll(reader, 500, &m);
        if (m == NULL)
            continue;
        got++;
        cnx_message_free(m);
    }
    t0 = cnx_now() - t0;
    cnx_consumer_free(reader);
    if (got < expect) {
        fprintf(stderr, "bench_controller: read %zu of %zu messages\n", got,
                expect);
        exit(1);
    }
    return t0;
}

/* ---- --scale: one request of n tasks, the controller in its own process */

extern char **environ;

static int scale_point(int64_t n, const char *ctl_path)
{
    char dir[] = "/tmp/cnx-bench-controller-XXXXXX", keydir[64];
    char trust[64], pubpath[80], keypath[80], cmd[256], ledger[128];
    cnx_broker *broker;
    cnx_key *key;
    corpus c;
    struct rusage ru;
    struct stat sb;
    sqlite3 *db;
    pid_t pid;
    int status = 0, ok;
    double t0, wall;
    int64_t pages = 0, page_size = 0;

    memset(&c, 0, sizeof(c));
    c.drop = 1;
    /* librdkafka's mock cluster keeps a bounded log per partition (its
     * oldest messages go): 64 partitions hold the log of 10^5 tasks. */
    if (mkdtemp(dir) == NULL ||
        cnx_broker_new(&broker, 1, SCALE_PARTITIONS, "downsample") != 0)
        die("broker");
    snprintf(keydir, sizeof(keydir), "%s/keys", dir);
    snprintf(trust, sizeof(trust), "%s/trust", dir);
    snprintf(pubpath, sizeof(pubpath), "%s/cnx.pub", keydir);
    snprintf(keypath, sizeof(keypath), "%s/cnx.key", keydir);
    snprintf(ledger, sizeof(ledger), "%s/ledger.db", dir);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && cp '%s' '%s/'", trust, pubpath,
             trust);
    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, keydir) != 0 ||
        system(cmd) != 0)
        die("key");
    signer = key;
    make_log(cnx_broker_bootstraps(broker), dir, key, n, &c);
    {
        /* clang-format off */
        char *args[] = {"cnx-controller", "--brokers",
                        (char *)cnx_broker_bootstraps(broker),
                        "--ledger", ledger, "--trust", trust, "--key",
                        keypath, "--rebuild", "--quiet", NULL};
        /* clang-format on */
        t0 = cnx_now();
        if (posix_spawn(&pid, ctl_path, NULL, NULL, args, environ) != 0) {
            fprintf(stderr, "bench_controller: cannot run %s\n", ctl_path);
            exit(1);
        }
        if (wait4(pid, &status, 0, &ru) != pid)
            die("wait4");
        wall = cnx_now() - t0;
    }
    ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
         check_ledger(ledger, n, 0);
    if (sqlite3_open_v2(ledger, &db, SQLITE_OPEN_READONLY, NULL) ==
        SQLITE_OK) {
        pages = count(db, "PRAGMA page_count");
        page_size = count(db, "PRAGMA page_size");
        sqlite3_close(db);
    }
    if (stat(ledger, &sb) != 0)
        sb.st_size = 0;
    {
        char out[160];
        /* clang-format off */
        char *args[] = {"cnx-controller", "archive", "--ledger", ledger,
                        "--request", REQUEST, "--out", out, NULL};
        /* clang-format on */
        int64_t used = 0, apages = 0;
        double at;
        snprintf(out, sizeof(out), "%s/archive.db", dir);
        if (sqlite3_open_v2(ledger, &db, SQLITE_OPEN_READWRITE, NULL) !=
                SQLITE_OK ||
            sqlite3_exec(db,
                         "UPDATE requests SET state = 'done', outcome = "
                         "'done' WHERE id = '" REQUEST "'",
                         NULL, NULL, NULL) != SQLITE_OK)
            die("marking the request done");
        sqlite3_close(db);
        at = cnx_now();
        if (posix_spawn(&pid, ctl_path, NULL, NULL, args, environ) != 0 ||
            waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0) {
            printf("archive: N=%" PRId64 ": FAILED\n", n);
            ok = 0;
        } else {
            at = cnx_now() - at;
            if (sqlite3_open_v2(ledger, &db, SQLITE_OPEN_READONLY, NULL) ==
                SQLITE_OK) {
                used = count(db, "PRAGMA page_count") -
                       count(db, "PRAGMA freelist_count");
                sqlite3_close(db);
            }
            if (sqlite3_open_v2(out, &db, SQLITE_OPEN_READONLY, NULL) ==
                SQLITE_OK) {
                apages = count(db, "PRAGMA page_count");
                sqlite3_close(db);
            }
            printf("archive: N=%-8" PRId64 " archived in %.1f s: archive "
                   "%.1f MB (%.0f B per task); the live ledger's pages in "
                   "use %.1f MB -> %.1f MB (what stays, the stubs and "
                   "the seen rows: %.0f B per task)\n",
                   n, at, (double)(apages * page_size) / 1e6,
                   (double)(apages * page_size) / (double)n,
                   (double)(pages * page_size) / 1e6,
                   (double)(used * page_size) / 1e6,
                   (double)(used * page_size) / (double)n);
        }
    }
    printf("scale  : N=%-8" PRId64 " ingest %.1f s, %.0f completions/s, "
           "%.1f us per completion (controller CPU %.1f s, all threads); "
           "controller peak RSS %.1f MB; ledger %" PRId64 " pages x %" PRId64
           " B = %.1f MB (file %.1f MB): %.0f B per task%s\n",
           n, wall, (double)n / wall, wall / (double)n * 1e6,
           (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 +
               (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6,
           (double)ru.ru_maxrss / 1024.0, pages, page_size,
           (double)(pages * page_size) / 1e6, (double)sb.st_size / 1e6,
           (double)(pages * page_size) / (double)n, ok ? "" : "  WRONG");
    free(c.envelopes);
    cnx_key_free(key);
    (void)broker;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_controller: could not remove %s\n", dir);
    return ok;
}

static int scale(const char *list)
{
    char exe[PATH_MAX], ctl_path[PATH_MAX + 32], *slash;
    const char *bin = getenv("CNX_BIN");
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    int ok = 1;

    if (len <= 0)
        die("readlink /proc/self/exe");
    exe[len] = '\0';
    slash = strrchr(exe, '/');
    if (slash != NULL)
        *slash = '\0';
    if (bin != NULL)
        snprintf(ctl_path, sizeof(ctl_path), "%s/cnx-controller", bin);
    else
        snprintf(ctl_path, sizeof(ctl_path), "%s/../bin/cnx-controller", exe);
    printf("bench_controller --scale: %s, %ld cores, controller %s\n",
           cnx_build_describe(), sysconf(_SC_NPROCESSORS_ONLN), ctl_path);
    for (const char *p = list; *p != '\0';) {
        char *end;
        long long n = strtoll(p, &end, 10);
        pid_t pid;
        int status = 0;
        if (end == p || n < 1 || n > 1000000 ||
            (*end != ',' && *end != '\0')) {
            fprintf(stderr, "bench_controller: bad --scale list '%s' "
                            "(N,N,... with 1 <= N <= 1000000)\n",
                    list);
            return 2;
        }
        p = *end == ',' ? end + 1 : end;
        fflush(stdout);
        pid = fork(); /* no thread exists yet in this process */
        if (pid < 0)
            die("fork");
        if (pid == 0)
            _exit(scale_point(n, ctl_path) ? 0 : 1);
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            ok = 0;
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    int64_t n = 20000;
    char dir[] = "/tmp/cnx-bench-controller-XXXXXX", keydir[64];
    char trust[64], pubpath[80], keypath[80], cmd[256];
    double ctl_s[RUNS], cpu_s[RUNS], base_s[RUNS], ver_s[RUNS];
    double read_s, parse_s;
    cnx_broker *broker;
    cnx_key *key, *pub;
    corpus c;
    int ok = 1, runs = RUNS;

    if (argc >= 2 && strcmp(argv[1], "--scale") == 0 && argc <= 3) {
        cnx_log_set_level(CNX_LOG_WARN);
        setvbuf(stdout, NULL, _IOLBF, 0);
        return scale(argc == 3 ? argv[2] : "10000,100000");
    }
    if (argc > 2 || (argc == 2 && (strtoll(argv[1], NULL, 10) < 1 ||
                                   strtoll(argv[1], NULL, 10) > 1000000))) {
        fprintf(stderr, "usage: bench_controller [N]  (tasks, 1..1000000, "
                        "default 20000)\n"
                        "       bench_controller --scale [N,N,...]  (default "
                        "10000,100000)\n");
        return 2;
    }
    if (argc == 2)
        n = strtoll(argv[1], NULL, 10);
    memset(&c, 0, sizeof(c));
    cnx_log_set_level(CNX_LOG_WARN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (mkdtemp(dir) == NULL ||
        cnx_broker_new(&broker, 1, 4, "downsample") != 0)
        die("broker");
    printf("bench_controller: %s, %ld cores\n", cnx_build_describe(),
           sysconf(_SC_NPROCESSORS_ONLN));

    /* The signing key, and a trust directory holding only its cnx.pub. */
    snprintf(keydir, sizeof(keydir), "%s/keys", dir);
    snprintf(trust, sizeof(trust), "%s/trust", dir);
    snprintf(pubpath, sizeof(pubpath), "%s/cnx.pub", keydir);
    snprintf(keypath, sizeof(keypath), "%s/cnx.key", keydir);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && cp '%s' '%s/'", trust, pubpath,
             trust);
    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, keydir) != 0 ||
        system(cmd) != 0 || cnx_key_load_public(&pub, pubpath) != 0)
        die("key");

    signer = key;
    make_log(cnx_broker_bootstraps(broker), dir, key, n, &c);

    for (int r = 0; r < RUNS && (r == 0 || ctl_s[0] <= RUN_BUDGET_S); r++) {
        char ledger[700];
        cnx_controller_opts o;
        /* clang-format off */
        char *args[] = {"cnx-controller", "--brokers",
                        (char *)cnx_broker_bootstraps(broker),
                        "--ledger", ledger, "--trust", trust, "--key",
                        keypath, "--rebuild", "--quiet"};
        /* clang-format on */
        double t0, cpu;
        int rc;
        snprintf(ledger, sizeof(ledger), "%s/ledger-%d.db", dir, r);
        if (cnx_controller_parse_args(&o, 11, args) != 0)
            return 1;
        cpu = thread_cpu();
        t0 = cnx_now();
        rc = cnx_controller_run(&o);
        ctl_s[r] = cnx_now() - t0;
        cpu_s[r] = thread_cpu() - cpu;
        printf("ingest : run %d: %" PRId64 " completions (%zu messages) in "
               "%.2f s: %.0f completions/s, %.0f messages/s (applying "
               "thread: %.2f s CPU)\n",
               r + 1, n, c.n, ctl_s[r], (double)n / ctl_s[r],
               (double)c.n / ctl_s[r], cpu_s[r]);
        if (rc != 0 || !check_ledger(ledger, n, r > 0)) {
            printf("ingest : run %d: WRONG (exit %d)\n", r + 1, rc);
            ok = 0;
        } else if (r == 0) {
            ledger_size(ledger, n);
        }
    }
    if (ctl_s[0] > RUN_BUDGET_S) {
        runs = 1;
        printf("ingest : run 1 took over %.0f s: runs 2 and 3 skipped\n",
               RUN_BUDGET_S);
    }
    double mctl = bench_median(ctl_s, runs);
    double mcpu = bench_median(cpu_s, runs);
    printf("ingest : median of %d: %.2f s, %.0f completions/s, %.0f "
           "messages/s, %.1f us per completion (%.1f us CPU on the applying "
           "thread)  target >= %.0f/s: %s\n",
           runs, mctl, (double)n / mctl, (double)c.n / mctl,
           mctl / (double)n * 1e6, mcpu / (double)n * 1e6, TARGET,
           (double)n / mctl >= TARGET ? "PASS" : "BELOW");

    /* The peers: the pieces of the same work, each alone. */
    read_s = read_all(cnx_broker_bootstraps(broker), c.n);
    parse_s = parse_all(&c);
    /* N verifications in all: a third of the envelopes per run, each
     * run's time scaled to N. */
    for (int r = 0; r < RUNS; r++) {
        size_t from = c.nenv * (size_t)r / RUNS;
        size_t to = c.nenv * (size_t)(r + 1) / RUNS;
        base_s[r] = sqlite_baseline(dir, &c, r);
        ver_s[r] = to > from ? verify_range(&c, pub, from, to) *
                                   (double)c.nenv / (double)(to - from)
                             : 0;
    }
    double mbase = bench_median(base_s, RUNS), mver = bench_median(ver_s, RUNS);
    printf("peer   : reading the %zu messages from the broker, nothing "
           "applied: %.2f s (%.0f messages/s; mostly on librdkafka's "
           "threads, overlapping the fold)\n",
           c.n, read_s, (double)c.n / read_s);
    printf("peer   : parsing the events, control messages and statements "
           "with jansson: %.2f s (%.1f us per completion)  %4.1f%% of the "
           "ingest\n",
           parse_s, parse_s / (double)n * 1e6, 100 * parse_s / mctl);
    printf("peer   : %" PRId64 " DSSE verifications alone (Ed25519, as the "
           "controller calls it): %.2f s (%.1f us each, %.0f/s), median of "
           "%d thirds  %4.1f%%\n",
           n, mver, mver / (double)n * 1e6, (double)n / mver, RUNS,
           100 * mver / mctl);
    printf("peer   : plain SQLite, %zu rows (one per message) into a WITHOUT "
           "ROWID table, transactions of 1000, WAL + synchronous=NORMAL: "
           "%.2f s (%.0f rows/s), median of %d  %4.1f%%\n",
           c.n, mbase, (double)c.n / mbase, RUNS, 100 * mbase / mctl);
    printf("peer   : left for the fold's own SQL beyond those rows (its "
           "queries, updates, indexes, chain, positions): about %.2f s  "
           "%4.1f%%\n",
           mctl - parse_s - mver - mbase,
           100 * (mctl - parse_s - mver - mbase) / mctl);

    for (size_t i = 0; i < c.n; i++) {
        free(c.m[i].key);
        free(c.m[i].value);
    }
    free(c.m);
    free(c.envelopes);
    cnx_key_free(key);
    cnx_key_free(pub);
    /* The broker goes with the process, like bench_runtime's. */
    (void)broker;
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_controller: could not remove %s\n", dir);
    return ok ? 0 : 1;
}
