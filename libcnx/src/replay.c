/*
 * replay.c - the library half of cnx-replay (cnx/replay.h): the replay
 * request built from the original one, the dead letters and release
 * decisions read back, and a bounded scan of a topic from its beginning.
 *
 * A replay changes nothing the controller does: it is an ordinary request
 * with "reuse": true, so what was done is reused through its verified
 * manifest and what died runs again (docs/replay.md). The parsers take
 * messages from the network: every field is checked, text is cut to fit.
 * The scan reads a topic once, up to the ends asked of the broker when it
 * starts, with a time limit; it is single-threaded.
 */
#include "cnx/replay.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cnx/controller.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/message.h"
#include "cnx/reprocess_run.h"
#include "json_int.h"

#define COORD_LIMIT ((int64_t)1 << 40)

/* ---- the replay request ----------------------------------------------- */

int cnx_replay_request_build(const char *original, size_t len,
                             const char *id, const cnx_request_spec *spec,
                             char **out)
{
    json_t *doc = NULL, *roi, *wf;
    const char *schema, *req, *dataset;
    char *wf_json = NULL;
    cnx_request_spec s = *spec;
    int rc;

    *out = NULL;
    rc = cnx__json_parse(&doc, original, len, CNX_ESCHEMA, "request");
    if (rc != 0)
        return rc;
    schema = json_string_value(json_object_get(doc, "schema"));
    req = json_string_value(json_object_get(doc, "request"));
    dataset = json_string_value(json_object_get(doc, "dataset"));
    wf = json_object_get(doc, "workflow");
    roi = json_object_get(doc, "roi");
    if (!json_is_object(doc) || schema == NULL ||
        strcmp(schema, CNX_REQUEST_SCHEMA) != 0) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "request: schema: must be %s",
                           CNX_REQUEST_SCHEMA);
        goto done;
    }
    if (req == NULL || strcmp(req, id) != 0) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "request: request: '%.128s', "
                           "not '%.128s'", req ? req : "(none)", id);
        goto done;
    }
    if (!json_is_object(wf)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "request: workflow: must be an "
                           "object");
        goto done;
    }
    if (dataset == NULL) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "request: dataset: must be a "
                           "string");
        goto done;
    }
    if (!json_is_object(roi) ||
        cnx__json_ivec(json_object_get(roi, "min"), 3, -COORD_LIMIT,
                       COORD_LIMIT, s.roi.min, CNX_ESCHEMA,
                       "request: roi.min") != 0 ||
        cnx__json_ivec(json_object_get(roi, "max"), 3, -COORD_LIMIT,
                       COORD_LIMIT, s.roi.max, CNX_ESCHEMA,
                       "request: roi.max") != 0) {
        rc = cnx_error_last()->code != CNX_OK
                 ? cnx_error_last()->code
                 : cnx_error_set(CNX_ESCHEMA, 0, "request: roi: must be "
                                 "{min, max}");
        goto done;
    }
    wf_json = cnx__json_canonical(wf);
    if (wf_json == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    s.workflow = wf_json;
    s.dataset = dataset;
    s.reuse = 1;
    rc = cnx_request_build(&s, out);
done:
    free(wf_json);
    json_decref(doc);
    return rc;
}

/* ---- dead letters and releases ----------------------------------------- */

static const char *jtext(const json_t *obj, const char *key)
{
    return json_string_value(json_object_get(obj, key));
}

int cnx_replay_dead_parse(const char *json, size_t len, const char *request,
                          cnx_replay_dead *out)
{
    json_t *doc = NULL, *task, *roi, *inputs, *err;
    const char *schema, *req, *key, *stage, *reason;
    int rc = cnx__json_parse(&doc, json, len, CNX_ESCHEMA, "dead letter");

    memset(out, 0, sizeof(*out));
    if (rc != 0)
        return rc;
    schema = jtext(doc, "schema");
    if (!json_is_object(doc) || schema == NULL ||
        strcmp(schema, "cnx.dlq/1") != 0) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "dead letter: schema: must be "
                           "cnx.dlq/1");
        goto done;
    }
    task = json_object_get(doc, "task");
    if (!json_is_object(task)) { /* a raw message: no request to match */
        rc = CNX_ENOTFOUND;
        goto done;
    }
    req = jtext(task, "request");
    if (req == NULL || strcmp(req, request) != 0) {
        rc = CNX_ENOTFOUND;
        goto done;
    }
    key = jtext(doc, "task_key");
    stage = jtext(task, "stage");
    roi = json_object_get(task, "roi");
    if (key == NULL || !cnx_digest_valid(key)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "dead letter: task_key: must be "
                           "sha256:<64 hex>");
        goto done;
    }
    if (stage == NULL || strlen(stage) >= sizeof(out->stage)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "dead letter: task.stage: must "
                           "be a stage name");
        goto done;
    }
    if (!json_is_object(roi) ||
        cnx__json_ivec(json_object_get(roi, "min"), 3, -COORD_LIMIT,
                       COORD_LIMIT, out->roi.min, CNX_ESCHEMA,
                       "dead letter: task.roi.min") != 0 ||
        cnx__json_ivec(json_object_get(roi, "max"), 3, -COORD_LIMIT,
                       COORD_LIMIT, out->roi.max, CNX_ESCHEMA,
                       "dead letter: task.roi.max") != 0) {
        rc = CNX_ESCHEMA;
        if (cnx_error_last()->code == CNX_OK)
            cnx_error_set(CNX_ESCHEMA, 0, "dead letter: task.roi: must be "
                          "{min, max}");
        goto done;
    }
    snprintf(out->task_key, sizeof(out->task_key), "%s", key);
    snprintf(out->stage, sizeof(out->stage), "%s", stage);
    if (cnx__json_int_in(json_object_get(doc, "attempts"), 0, 1000000))
        out->attempts = (int)json_integer_value(json_object_get(doc,
                                                               "attempts"));
    inputs = json_object_get(doc, "input_digests");
    if (json_is_object(inputs)) {
        const char *role;
        json_t *objs;
        json_object_foreach(inputs, role, objs)
            out->inputs += json_is_object(objs) ? json_object_size(objs) : 0;
    }
    err = json_object_get(doc, "error");
    reason = jtext(doc, "reason");
    if (reason == NULL && json_is_object(err))
        reason = jtext(err, "message");
    snprintf(out->reason, sizeof(out->reason), "%s", reason ? reason : "");
    /* (no control characters in what is printed) */
    for (char *p = out->reason; *p != '\0'; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = ' ';
done:
    json_decref(doc);
    return rc;
}

int cnx_replay_release_parse(const char *json, size_t len,
                             const char *request,
                             char task_key[CNX_DIGEST_LEN], int *reused)
{
    cnx_control d;
    /* Decisions are parsed by their one owner (cnx/message.h); anything
     * that is not one (events on the same topic, malformed messages) is
     * simply not a release. */
    if (json == NULL || len == 0 || json[0] != '{' ||
        cnx_control_parse(&d, json, len) != 0) {
        cnx_error_clear();
        return CNX_ENOTFOUND;
    }
    if ((strcmp(d.type, "released") != 0 && strcmp(d.type, "reused") != 0) ||
        strcmp(d.request, request) != 0)
        return CNX_ENOTFOUND;
    snprintf(task_key, CNX_DIGEST_LEN, "%s", d.task_key);
    *reused = strcmp(d.type, "reused") == 0;
    return 0;
}

/* ---- the scan ----------------------------------------------------------- */

int cnx_replay_scan(const cnx_kafka_opts *kafka, const char *topic,
                    int timeout_ms, cnx_replay_scan_fn fn, void *ctx)
{
    const char *topics[1] = {topic};
    cnx_consumer *reader = NULL;
    cnx_position *ends = NULL;
    size_t n = 0, left = 0;
    int stop = 0;
    int64_t *next = NULL;
    double give_up = cnx_now() + timeout_ms / 1000.0;
    int rc = cnx_reader_new(&reader, kafka, topics, 1, NULL, NULL);

    if (rc == 0)
        rc = cnx_reader_ends(reader, &ends, &n, timeout_ms);
    if (rc != 0)
        goto done;
    next = calloc(n ? n : 1, sizeof(*next));
    if (next == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (ends[i].offset > 0)
            left++;
    while (left > 0 && !stop) {
        cnx_message *msg = NULL;
        int prc;
        if (cnx_now() > give_up) {
            rc = cnx_error_set(CNX_EIO, 1, "reading %s: not at its end "
                               "after %d s", topic, timeout_ms / 1000);
            goto done;
        }
        prc = cnx_consumer_poll(reader, 200, &msg);
        if (prc != 0 && msg == NULL) {
            if (cnx_error_last()->retriable)
                continue;
            rc = prc;
            goto done;
        }
        if (msg == NULL)
            continue;
        for (size_t i = 0; i < n; i++) {
            /* (each partition once, up to its end as the scan began) */
            if (ends[i].partition != msg->partition ||
                msg->offset < next[i] || next[i] >= ends[i].offset)
                continue;
            next[i] = msg->offset + 1;
            if (msg->value != NULL && fn(ctx, msg) != 0)
                stop = 1;
            if (next[i] >= ends[i].offset)
                left--;
            break;
        }
        cnx_message_free(msg);
    }
done:
    cnx_consumer_free(reader);
    free(ends);
    free(next);
    return rc;
}

/* ---- the command ------------------------------------------------------- */

#define PROG "cnx-replay"

typedef struct find_request {
    const char *id;
    char *doc; /* the first cnx.request/1 keyed by id */
    size_t len;
} find_request;

static int on_request(void *ctx, const cnx_message *msg)
{
    find_request *f = ctx;
    json_t *doc;
    const char *schema;
    int found = 0;

    if (msg->key == NULL || msg->key_len != strlen(f->id) ||
        memcmp(msg->key, f->id, msg->key_len) != 0)
        return 0;
    doc = json_loadb(msg->value, msg->len, JSON_REJECT_DUPLICATES, NULL);
    schema = jtext(doc, "schema");
    if (schema != NULL && strcmp(schema, CNX_REQUEST_SCHEMA) == 0) {
        f->doc = malloc(msg->len + 1);
        if (f->doc != NULL) {
            memcpy(f->doc, msg->value, msg->len);
            f->doc[msg->len] = '\0';
            f->len = msg->len;
            found = 1;
        }
    }
    json_decref(doc);
    return found;
}

typedef struct dead_set {
    const char *request;
    cnx_replay_dead *dead;
    size_t n, cap;
    size_t duplicates, malformed;
} dead_set;

static int on_dead(void *ctx, const cnx_message *msg)
{
    dead_set *d = ctx;
    cnx_replay_dead one;
    int rc = cnx_replay_dead_parse(msg->value, msg->len, d->request, &one);
    if (rc == CNX_ENOTFOUND)
        return 0;
    if (rc != 0) {
        d->malformed++;
        return 0;
    }
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->dead[i].task_key, one.task_key) == 0) {
            d->duplicates++;
            return 0;
        }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 16;
        cnx_replay_dead *grown = realloc(d->dead, cap * sizeof(*grown));
        if (grown == NULL)
            return 1; /* stop: reported as a short scan below */
        d->dead = grown;
        d->cap = cap;
    }
    d->dead[d->n++] = one;
    return 0;
}

typedef struct release_set {
    const char *request;
    cnx_key *ckey;
    dead_set *dead;
    char *released; /* per dead task: 1 released again, 2 reused */
    size_t unverified;
} release_set;

static int on_release(void *ctx, const cnx_message *msg)
{
    release_set *r = ctx;
    char key[CNX_DIGEST_LEN];
    int reused = 0;
    if (cnx_replay_release_parse(msg->value, msg->len, r->request, key,
                                 &reused) != 0)
        return 0;
    if (r->ckey != NULL && cnx_msg_verify(msg, &r->ckey, 1, NULL) != 0) {
        r->unverified++;
        return 0;
    }
    for (size_t i = 0; i < r->dead->n; i++)
        if (strcmp(r->dead->dead[i].task_key, key) == 0 &&
            r->released[i] != 1)
            r->released[i] = reused ? 2 : 1;
    return 0;
}

static int say(const cnx_replay_opts *o, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line on stderr (and with --json an error object); returns code. */
static int say(const cnx_replay_opts *o, int code, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, PROG ": %s\n", line);
    if (o->json) {
        char *out = NULL;
        if (cnx_reprocess_error_json(o->request, line, code, &out) == 0)
            printf("%s\n", out);
        free(out);
    }
    return code;
}

static void print_dead(const cnx_replay_opts *o, const dead_set *d,
                       FILE *f)
{
    for (size_t i = 0; i < d->n; i++) {
        const cnx_replay_dead *x = &d->dead[i];
        fprintf(f, "  %s %s [%lld,%lld,%lld]-[%lld,%lld,%lld] %zu input "
                   "digest(s), %d attempt(s): %s\n",
                x->stage, x->task_key, (long long)x->roi.min[0],
                (long long)x->roi.min[1], (long long)x->roi.min[2],
                (long long)x->roi.max[0], (long long)x->roi.max[1],
                (long long)x->roi.max[2], x->inputs, x->attempts, x->reason);
    }
    (void)o;
}

int cnx_replay_run(const cnx_replay_opts *o)
{
    find_request fr = {o->request, NULL, 0};
    dead_set ds = {o->request, NULL, 0, 0, 0, 0};
    release_set rs = {NULL, NULL, &ds, NULL, 0};
    cnx_reprocess_run run;
    cnx_request_spec spec;
    char id[CNX_REQUEST_ID_MAX + 1];
    char *body = NULL;
    int scan_ms = (o->scan_timeout_s > 0 ? o->scan_timeout_s : 60) * 1000;
    int code;

    memset(&run, 0, sizeof(run));
    if (o->replay_id != NULL) {
        snprintf(id, sizeof(id), "%s", o->replay_id);
    } else if ((size_t)snprintf(id, sizeof(id), "%s.replay-%lld",
                                o->request, (long long)o->now) >=
               sizeof(id)) {
        return say(o, CNX_REPROCESS_USAGE, "request id '%s' leaves no room "
                   "for '.replay-<time>' in 128 characters; name the "
                   "replay with --as ID", o->request);
    }
    if (cnx_request_id_check(id) != 0)
        return say(o, CNX_REPROCESS_USAGE, "%s", cnx_error_last()->message);
    if (strcmp(id, o->request) == 0)
        return say(o, CNX_REPROCESS_USAGE, "the replay needs an id other "
                   "than the request's own ('%s')", id);

    if (cnx_replay_scan(&o->kafka, CNX_TOPIC_REQUESTS, scan_ms, on_request,
                        &fr) != 0) {
        code = say(o, CNX_REPROCESS_ERROR, "%s", cnx_error_last()->message);
        goto done;
    }
    if (fr.doc == NULL) {
        code = say(o, CNX_REPROCESS_USAGE, "no request '%s' on %s",
                   o->request, CNX_TOPIC_REQUESTS);
        goto done;
    }
    if (cnx_replay_scan(&o->kafka, CNX_TOPIC_DLQ, scan_ms, on_dead, &ds) !=
        0) {
        code = say(o, CNX_REPROCESS_ERROR, "%s", cnx_error_last()->message);
        goto done;
    }
    if (o->list_only) {
        if (!o->quiet)
            fprintf(stderr, "request %s: %zu task(s) dead-lettered on %s%s\n",
                    o->request, ds.n, CNX_TOPIC_DLQ, ds.n ? ":" : "");
        print_dead(o, &ds, stdout);
        code = CNX_REPROCESS_DONE;
        goto done;
    }
    if (!o->quiet) {
        fprintf(stderr, "request %s: %zu task(s) dead-lettered on %s%s\n",
                o->request, ds.n, CNX_TOPIC_DLQ, ds.n ? ":" : "");
        print_dead(o, &ds, stderr);
        if (ds.malformed > 0)
            fprintf(stderr, "  (%zu malformed dead letter(s) of it "
                            "skipped)\n", ds.malformed);
        fprintf(stderr, "replaying it as %s (reuse: done tasks are reused "
                        "through their verified manifests)\n", id);
    }

    memset(&spec, 0, sizeof(spec));
    spec.request = id;
    spec.submitted = o->now;
    spec.deadline = o->deadline;
    spec.submitter = o->submitter;
    if (cnx_replay_request_build(fr.doc, fr.len, o->request, &spec,
                                 &body) != 0) {
        code = say(o, CNX_REPROCESS_USAGE, "request %s on %s: %s",
                   o->request, CNX_TOPIC_REQUESTS,
                   cnx_error_last()->message);
        goto done;
    }
    run.kafka = o->kafka;
    run.prog = PROG;
    run.request = id;
    run.controller_key = o->controller_key;
    run.wait = 1;
    run.json = o->json;
    run.quiet = o->quiet;
    run.tty = o->tty;
    run.timeout_s = o->timeout_s;
    run.timeout_given = o->timeout_given;
    run.interrupted = o->interrupted;
    code = cnx_reprocess_submit_follow(&run, body);
    if (run.finished == NULL || ds.n == 0)
        goto done;

    /* Did each dead task run again? The controller's decisions say. */
    rs.request = id;
    rs.released = calloc(ds.n, 1);
    if (rs.released == NULL) {
        code = say(o, CNX_REPROCESS_ERROR, "out of memory");
        goto done;
    }
    if (o->controller_key != NULL &&
        cnx_key_load_public(&rs.ckey, o->controller_key) != 0) {
        code = say(o, CNX_REPROCESS_USAGE, "--controller-key %s: %s",
                   o->controller_key, cnx_error_last()->message);
        goto done;
    }
    if (cnx_replay_scan(&o->kafka, CNX_TOPIC_EVENTS, scan_ms, on_release,
                        &rs) != 0) {
        code = say(o, CNX_REPROCESS_ERROR, "%s", cnx_error_last()->message);
        goto done;
    }
    {
        size_t again = 0, reused = 0;
        for (size_t i = 0; i < ds.n; i++) {
            again += rs.released[i] == 1;
            reused += rs.released[i] == 2;
        }
        if (!o->quiet)
            fprintf(stderr, "replay %s: %zu of %zu dead-lettered task(s) of "
                            "%s released again%s\n",
                    id, again, ds.n, o->request,
                    reused ? ", the rest reused (done meanwhile, by "
                             "another request or by a redelivery of the "
                             "task)" : "");
        for (size_t i = 0; i < ds.n; i++)
            if (rs.released[i] == 0)
                fprintf(stderr, PROG ": task %s (%s) of %s was not released "
                                "again in %s\n", ds.dead[i].task_key,
                        ds.dead[i].stage, o->request, id);
        if (rs.unverified > 0 && !o->quiet)
            fprintf(stderr, PROG ": %zu decision(s) for %s on %s did not "
                            "verify with the controller's key; ignored\n",
                    rs.unverified, id, CNX_TOPIC_EVENTS);
        if (again + reused < ds.n && (code == CNX_REPROCESS_DONE ||
                                      code == CNX_REPROCESS_MISSED))
            code = CNX_REPROCESS_FAILED;
    }
done:
    free(fr.doc);
    free(ds.dead);
    free(rs.released);
    cnx_key_free(rs.ckey);
    free(body);
    free(run.finished);
    return code;
}
