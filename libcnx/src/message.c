/*
 * message.c - events, dead letters, the schema-to-topic rule and message
 * signatures (cnx/message.h).
 *
 * The one owner of the worker's event and dead-letter formats (the
 * controller's decisions and request states are built by the controller,
 * which alone may sign them, and parsed by the ledger fold and by
 * reprocess.c) and of the signature scheme every state-changing message
 * carries: a detached DSSE signature in a Kafka header, over the body as
 * sent, under a type naming the topic and the key.
 */
#include "cnx/message.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cnx/controller.h"
#include "cnx/json.h"
#include "json_int.h"

static const struct {
    const char *topic, *schema;
    cnx_msg_kind kind;
} kinds[] = {
    {CNX_TOPIC_REQUESTS, CNX_REQUEST_SCHEMA, CNX_MSG_REQUEST},
    {CNX_TOPIC_REQUESTS, CNX_REQUEST_STATE_SCHEMA, CNX_MSG_REQUEST_STATE},
    {CNX_TOPIC_EVENTS, CNX_EVENT_SCHEMA, CNX_MSG_EVENT},
    {CNX_TOPIC_EVENTS, CNX_CONTROL_SCHEMA, CNX_MSG_CONTROL},
    {CNX_TOPIC_DLQ, CNX_DLQ_SCHEMA, CNX_MSG_DLQ},
};

int cnx_msg_kind_of(const char *topic, const char *schema,
                    cnx_msg_kind *kind)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(topic, kinds[i].topic) == 0 &&
            strcmp(schema, kinds[i].schema) == 0) {
            *kind = kinds[i].kind;
            return 0;
        }
    return cnx_error_set(CNX_ESCHEMA, 0, "%s: schema '%.64s' does not "
                         "belong on this topic", topic, schema);
}

int cnx_msg_kind_signer(cnx_msg_kind kind)
{
    switch (kind) {
    case CNX_MSG_REQUEST_STATE:
    case CNX_MSG_CONTROL:
        return 1;
    case CNX_MSG_EVENT:
    case CNX_MSG_DLQ:
        return 0;
    case CNX_MSG_REQUEST:
        break;
    }
    return -1;
}

static int printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < 0x21 || s[i] > 0x7e)
            return 0;
    return 1;
}

int cnx_msg_signed_type(char out[CNX_MSG_TYPE_MAX + 1], const char *topic,
                        const void *key, size_t key_len)
{
    int n;
    if (key == NULL)
        key_len = 0;
    if (!printable(topic, strlen(topic)) || !printable(key, key_len))
        return cnx_error_set(CNX_EINVAL, 0, "message: topic or key is not "
                             "printable ASCII");
    n = snprintf(out, CNX_MSG_TYPE_MAX + 1,
                 "application/vnd.cnx.message+json;topic=%s;key=%.*s", topic,
                 (int)key_len, key_len ? (const char *)key : "");
    if (n < 0 || n > CNX_MSG_TYPE_MAX)
        return cnx_error_set(CNX_EINVAL, 0, "message: topic and key are "
                             "too long to sign");
    return 0;
}

int cnx_msg_send(cnx_producer *producer, const cnx_key *signer,
                 const char *topic, const char *key, const char *text,
                 size_t len, const cnx_kafka_header *headers,
                 size_t nheaders)
{
    cnx_kafka_header h[CNX_MSG_MAX_HEADERS + 2];
    char type[CNX_MSG_TYPE_MAX + 1], sig[CNX_DSSE_SIG_MAX];
    char keyid[CNX_DIGEST_LEN];
    int rc;

    if (nheaders > CNX_MSG_MAX_HEADERS)
        return cnx_error_set(CNX_EINVAL, 0, "message: %zu headers, at most "
                             "%d", nheaders, CNX_MSG_MAX_HEADERS);
    rc = cnx_msg_signed_type(type, topic, key, key ? strlen(key) : 0);
    if (rc == 0)
        rc = cnx_dsse_sign_detached(signer, type, text, len, sig);
    if (rc != 0)
        return rc;
    cnx_key_id(signer, keyid);
    for (size_t i = 0; i < nheaders; i++)
        h[i] = headers[i];
    h[nheaders].name = CNX_MSG_HEADER_SIG;
    h[nheaders].value = sig;
    h[nheaders + 1].name = CNX_MSG_HEADER_KEYID;
    h[nheaders + 1].value = keyid;
    return cnx_producer_send(producer, topic, key, text, len, h,
                             nheaders + 2);
}

int cnx_msg_verify(const cnx_message *msg, cnx_key *const *trusted,
                   size_t ntrusted, int *signer)
{
    char type[CNX_MSG_TYPE_MAX + 1], sig[CNX_DSSE_SIG_MAX];
    char keyid[CNX_DIGEST_LEN], id[CNX_DIGEST_LEN];
    const char *named;
    int rc, known = 0;

    if (signer != NULL)
        *signer = -1;
    if (cnx_message_header(msg, CNX_MSG_HEADER_SIG, sig, sizeof(sig)) ==
        NULL)
        return cnx_error_set(CNX_EDIGEST, 0, "unsigned: no valid %s header",
                             CNX_MSG_HEADER_SIG);
    named = cnx_message_header(msg, CNX_MSG_HEADER_KEYID, keyid,
                               sizeof(keyid));
    if (ntrusted == 0)
        return cnx_error_set(CNX_EDIGEST, 0, "signed, but no key is trusted "
                             "for %s here", msg->topic);
    if (cnx_msg_signed_type(type, msg->topic, msg->key, msg->key_len) != 0)
        return cnx_error_set(CNX_EDIGEST, 0, "signature does not verify: "
                             "the message key is not printable ASCII");
    rc = cnx_dsse_verify_detached(type, msg->value, msg->len, sig, trusted,
                                  ntrusted, signer);
    if (rc == 0 || rc == CNX_ENOMEM)
        return rc;
    for (size_t i = 0; named != NULL && i < ntrusted && !known; i++) {
        cnx_key_id(trusted[i], id);
        known = strcmp(id, named) == 0;
    }
    if (named != NULL && !known) {
        char shown[24];
        snprintf(shown, sizeof(shown), "%s", named);
        return cnx_error_set(CNX_EDIGEST, 0, "signed by key %s… that is not "
                             "trusted for %s", shown, msg->topic);
    }
    return cnx_error_set(CNX_EDIGEST, 0, "signature does not verify (the "
                         "message was altered, or moved to another topic or "
                         "key)");
}

/* ---- builders ----------------------------------------------------------- */

static json_t *error_json(const cnx_error *e)
{
    return json_pack("{s:s,s:s,s:b}", "code", cnx_error_name(e->code),
                     "message", e->message, "retriable", e->retriable);
}

static int finish(json_t *doc, char **out, const char *what)
{
    *out = doc ? cnx__json_canonical(doc) : NULL;
    json_decref(doc);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for %s", what);
    return 0;
}

int cnx_event_build(const cnx_event *ev, char **out)
{
    const cnx_box *b = &ev->roi;
    json_t *doc = json_pack(
        "{s:s,s:s,s:s,s:s,s:s,s:i,s:s,s:s,s:{s:[III],s:[III]}}", "schema",
        CNX_EVENT_SCHEMA, "type", ev->type, "stage", ev->stage, "task_key",
        ev->task_key, "request", ev->request, "attempt", ev->attempt,
        "worker", ev->worker, "time", ev->time, "roi", "min",
        (json_int_t)b->min[0], (json_int_t)b->min[1], (json_int_t)b->min[2],
        "max", (json_int_t)b->max[0], (json_int_t)b->max[1],
        (json_int_t)b->max[2]);

    *out = NULL;
    if (doc == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for an event");
    if (ev->run != NULL)
        json_object_set_new(doc, "run", json_string(ev->run));
    if (ev->has_io) {
        json_object_set_new(
            doc, "timings",
            json_pack("{s:f,s:f,s:f,s:f}", "read_s", ev->read_s, "kernel_s",
                      ev->kernel_s, "write_s", ev->write_s, "total_s",
                      ev->total_s));
        json_object_set_new(doc, "bytes_read", json_integer(ev->bytes_read));
        json_object_set_new(doc, "bytes_written",
                            json_integer(ev->bytes_written));
        json_object_set_new(doc, "voxels", json_integer(ev->voxels));
        json_object_set_new(doc, "cpu_s", json_real(ev->cpu_s));
        json_object_set_new(doc, "outputs", json_integer(ev->outputs));
    }
    if (ev->error != NULL)
        json_object_set_new(doc, "error", error_json(ev->error));
    if (ev->violation_object != NULL)
        json_object_set_new(doc, "violation",
                            json_pack("{s:s,s:s,s:s}", "object",
                                      ev->violation_object, "stored",
                                      ev->violation_stored, "got",
                                      ev->violation_got));
    if (ev->manifest != NULL)
        json_object_set_new(doc, "manifest", json_string(ev->manifest));
    return finish(doc, out, "an event");
}

/* {role: {object: digest}} of a task document's inputs. */
static json_t *input_digests(const json_t *task)
{
    json_t *inputs = json_object(), *spec;
    const char *role;
    json_object_foreach(json_object_get(task, "inputs"), role, spec) {
        json_t *objs = json_object_get(spec, "objects");
        json_object_set(inputs, role, objs ? objs : json_object());
    }
    return inputs;
}

int cnx_dead_letter_build(const cnx_dead_letter *dl, char **out)
{
    const cnx_message *msg = dl->source;
    json_t *doc, *build;

    *out = NULL;
    build = json_pack("{s:s,s:b,s:s}", "commit", cnx_build_commit(), "dirty",
                      cnx_build_dirty(), "describe", cnx_build_describe());
    if (build != NULL && dl->container_digest != NULL)
        json_object_set_new(build, "container_digest",
                            json_string(dl->container_digest));
    doc = json_pack("{s:s,s:s,s:o,s:s,s:s,s:s,s:{s:s,s:i,s:I},s:i,s:o*}",
                    "schema", CNX_DLQ_SCHEMA, "reason", dl->error->message,
                    "error", error_json(dl->error), "stage", dl->stage,
                    "worker", dl->worker, "time", dl->time, "source",
                    "topic", msg->topic, "partition", (int)msg->partition,
                    "offset", (json_int_t)msg->offset, "attempts",
                    dl->attempts, "build", build);
    if (doc == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for a dead letter");
    if (dl->task_json != NULL) {
        json_t *task = json_loads(dl->task_json, 0, NULL);
        json_object_set_new(doc, "task", task ? task : json_null());
        json_object_set_new(doc, "task_key", json_string(dl->task_key));
        json_object_set_new(doc, "input_digests",
                            task ? input_digests(task) : json_object());
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
    return finish(doc, out, "a dead letter");
}

/* ---- controller decisions ------------------------------------------------ */

int cnx_control_build(const cnx_control *ctl, char **out)
{
    json_t *doc = json_pack(
        "{s:s,s:s,s:s,s:s,s:I,s:s,s:I,s:s,s:s,s:s}", "schema",
        CNX_CONTROL_SCHEMA, "type", ctl->type, "request", ctl->request,
        "stage", ctl->stage, "index", (json_int_t)ctl->index, "task_key",
        ctl->task_key, "attempt", (json_int_t)ctl->attempt, "lane", ctl->lane,
        "time", ctl->time, "reason", ctl->reason);
    if (doc != NULL && ctl->manifest[0] != '\0')
        json_object_set_new(doc, "manifest", json_string(ctl->manifest));
    return finish(doc, out, "a decision");
}

/* Copy string member key of doc into dst (cap bytes with the NUL) if it
 * matches ok(); else CNX_ESCHEMA naming it. */
static int control_text(const json_t *doc, const char *key, char *dst,
                        size_t cap, int (*ok)(const char *), const char *why)
{
    const json_t *v = json_object_get(doc, key);
    if (v == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0, "control: %s: missing", key);
    if (!json_is_string(v) || json_string_length(v) >= cap ||
        strlen(json_string_value(v)) != json_string_length(v) ||
        (ok != NULL && !ok(json_string_value(v))))
        return cnx_error_set(CNX_ESCHEMA, 0, "control: %s: %s", key, why);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int control_count(const json_t *doc, const char *key, int64_t *dst)
{
    const json_t *v = json_object_get(doc, key);
    if (v == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0, "control: %s: missing", key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return cnx_error_set(CNX_ESCHEMA, 0, "control: %s: must be an "
                             "integer >= 0", key);
    *dst = json_integer_value(v);
    return 0;
}

static int ok_type(const char *s)
{
    return strcmp(s, "released") == 0 || strcmp(s, "reused") == 0 ||
           strcmp(s, "dead_lettered") == 0;
}

static int ok_lane(const char *s)
{
    return strcmp(s, "bulk") == 0 || strcmp(s, "urgent") == 0;
}

static int ok_request(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z') ||
              (s[i] >= '0' && s[i] <= '9') || strchr("._:-", s[i]) != NULL))
            return 0;
    return 1;
}

static int ok_stage(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 32 || !(s[0] >= 'a' && s[0] <= 'z'))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
              s[i] == '_' || s[i] == '-'))
            return 0;
    return 1;
}

static int ok_digest(const char *s)
{
    if (strlen(s) != 71 || strncmp(s, "sha256:", 7) != 0)
        return 0;
    for (size_t i = 7; i < 71; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* YYYY-MM-DDTHH:MM:SS[.frac]Z */
static int ok_time(const char *s)
{
    static const char shape[] = "dddd-dd-ddTdd:dd:dd";
    size_t i, n = strlen(s);
    if (n < 20 || s[n - 1] != 'Z')
        return 0;
    for (i = 0; i < 19; i++)
        if (shape[i] == 'd' ? !(s[i] >= '0' && s[i] <= '9') : s[i] != shape[i])
            return 0;
    if (n == 20)
        return 1;
    if (s[19] != '.' || n == 21)
        return 0;
    for (i = 20; i < n - 1; i++)
        if (!(s[i] >= '0' && s[i] <= '9'))
            return 0;
    return 1;
}

int cnx_control_parse(cnx_control *out, const char *json, size_t len)
{
    static const char *const keys[] = {"schema", "type", "request", "stage",
                                       "index", "task_key", "attempt", "lane",
                                       "time", "reason", "manifest", NULL};
    json_t *doc = NULL;
    const char *key;
    json_t *v;
    char schema[32];
    int rc;

    memset(out, 0, sizeof(*out));
    rc = cnx__json_parse(&doc, json, len, CNX_ESCHEMA, "control");
    if (rc != 0)
        return rc;
    if (!json_is_object(doc)) {
        json_decref(doc);
        return cnx_error_set(CNX_ESCHEMA, 0, "control: not a JSON object");
    }
    json_object_foreach(doc, key, v) {
        size_t i = 0;
        while (keys[i] != NULL && strcmp(keys[i], key) != 0)
            i++;
        if (keys[i] == NULL) {
            rc = cnx_error_set(CNX_ESCHEMA, 0, "control: unknown key '%.64s'",
                               key);
            break;
        }
    }
    if (rc == 0)
        rc = control_text(doc, "schema", schema, sizeof(schema), NULL,
                          "must be " CNX_CONTROL_SCHEMA);
    if (rc == 0 && strcmp(schema, CNX_CONTROL_SCHEMA) != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0, "control: schema: must be "
                           CNX_CONTROL_SCHEMA);
    if (rc == 0)
        rc = control_text(doc, "type", out->type, sizeof(out->type), ok_type,
                          "must be released, reused or dead_lettered");
    if (rc == 0)
        rc = control_text(doc, "request", out->request, sizeof(out->request),
                          ok_request, "must be 1-128 of A-Z a-z 0-9 . _ : -");
    if (rc == 0)
        rc = control_text(doc, "stage", out->stage, sizeof(out->stage),
                          ok_stage, "must be a stage name");
    if (rc == 0)
        rc = control_count(doc, "index", &out->index);
    if (rc == 0)
        rc = control_text(doc, "task_key", out->task_key,
                          sizeof(out->task_key), ok_digest,
                          "must be sha256:<64 hex>");
    if (rc == 0)
        rc = control_count(doc, "attempt", &out->attempt);
    if (rc == 0)
        rc = control_text(doc, "lane", out->lane, sizeof(out->lane), ok_lane,
                          "must be bulk or urgent");
    if (rc == 0)
        rc = control_text(doc, "time", out->time, sizeof(out->time), ok_time,
                          "must be RFC 3339 UTC");
    if (rc == 0)
        rc = control_text(doc, "reason", out->reason, sizeof(out->reason),
                          NULL, "must be a string of at most 1023 bytes");
    if (rc == 0 && json_object_get(doc, "manifest") != NULL)
        rc = control_text(doc, "manifest", out->manifest,
                          sizeof(out->manifest), ok_digest,
                          "must be sha256:<64 hex>");
    json_decref(doc);
    return rc;
}
