/*
 * message.h - the messages on the topics other than tasks and manifests:
 * worker events and dead letters, the controller's decisions and request
 * states; which schema belongs on which topic; and the signature every
 * state-changing message carries (docs/security.md).
 *
 * A signed message keeps its JSON body as it is and carries two Kafka
 * headers: cnx-sig, the Ed25519 signature (standard base64) of the DSSE
 * PAE of (type, body) with type
 *   application/vnd.cnx.message+json;topic=<topic>;key=<message key>
 * and cnx-keyid, the signer's key id (a hint only). The type binds the
 * body to its topic and key, so a message cannot be moved to another topic
 * or re-keyed; the body names its request, task and attempt, so it cannot
 * be moved to another task. An auditor checks one with openssl (pkeyutl
 * -verify -rawin) over the PAE bytes.
 */
#ifndef CNX_MESSAGE_H
#define CNX_MESSAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/error.h"
#include "cnx/geom.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_EVENT_SCHEMA "cnx.event/1"
#define CNX_DLQ_SCHEMA "cnx.dlq/1"
#define CNX_MSG_HEADER_SIG "cnx-sig"
#define CNX_MSG_HEADER_KEYID "cnx-keyid"
/* Longest signed type (the PAE type of a message). */
#define CNX_MSG_TYPE_MAX 256
/* Most headers a caller may add to a signed message. */
#define CNX_MSG_MAX_HEADERS 6

/** What a message on a topic is, from its topic and schema. */
typedef enum cnx_msg_kind {
    CNX_MSG_REQUEST = 1,   /* cnx.requests, cnx.request/1: a submitter's */
    CNX_MSG_REQUEST_STATE, /* cnx.requests, cnx.request-state/1: controller */
    CNX_MSG_EVENT,         /* cnx.events, cnx.event/1: a worker's */
    CNX_MSG_CONTROL,       /* cnx.events, cnx.control/1: controller */
    CNX_MSG_DLQ            /* cnx.dlq, cnx.dlq/1: a worker's */
} cnx_msg_kind;

/**
 * The kind of a message whose schema field says schema, on topic.
 * @return 0; CNX_ESCHEMA (message set) if the schema does not belong on
 *         the topic, or the topic carries no such JSON messages.
 */
int cnx_msg_kind_of(const char *topic, const char *schema,
                    cnx_msg_kind *kind);

/** Who signs a kind: 1 the controller, 0 a worker, -1 nobody (requests). */
int cnx_msg_kind_signer(cnx_msg_kind kind);

/**
 * The PAE type a message on topic with key (key_len bytes; NULL: none)
 * is signed under.
 * @return 0; CNX_EINVAL if the topic or key has a byte that is not
 *         printable ASCII or the type would exceed CNX_MSG_TYPE_MAX.
 */
int cnx_msg_signed_type(char out[CNX_MSG_TYPE_MAX + 1], const char *topic,
                        const void *key, size_t key_len);

/**
 * Send text (len bytes) to topic keyed by key (NULL: none), signed with
 * signer: headers (at most CNX_MSG_MAX_HEADERS, borrowed) then cnx-sig and
 * cnx-keyid.
 * @return as cnx_producer_send; CNX_EINVAL as cnx_msg_signed_type.
 */
int cnx_msg_send(cnx_producer *producer, const cnx_key *signer,
                 const char *topic, const char *key, const char *text,
                 size_t len, const cnx_kafka_header *headers,
                 size_t nheaders);

/**
 * Check a consumed message's signature against trusted keys.
 * @param[out] signer  optional: index in trusted of the signing key
 * @return 0; CNX_EDIGEST with a one-line reason: unsigned, signed by a key
 *         that is not trusted here (its id), or a signature that does not
 *         verify (altered, or moved to another topic or key); CNX_ENOMEM.
 */
int cnx_msg_verify(const cnx_message *msg, cnx_key *const *trusted,
                   size_t ntrusted, int *signer);

/** A worker's event (schemas/event.schema.json); borrowed fields. */
typedef struct cnx_event {
    const char *type;     /* started, succeeded, failed, preempted */
    const char *stage;
    const char *task_key;
    const char *request;
    int attempt;          /* >= 1 */
    const char *worker;   /* instance */
    const char *run;      /* this execution of the attempt (16 hex) */
    const char *time;     /* RFC 3339 */
    cnx_box roi;
    int has_io;           /* the figures below are set */
    double read_s, kernel_s, write_s, total_s, cpu_s;
    int64_t bytes_read, bytes_written, voxels, outputs;
    const cnx_error *error;           /* NULL: none */
    const char *violation_object;     /* NULL: none */
    const char *violation_stored, *violation_got;
    const char *manifest;             /* NULL: none */
} cnx_event;

/**
 * The event as canonical JSON.
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_event_build(const cnx_event *ev, char **out);

/** A worker's dead letter (schemas/dlq.schema.json); borrowed fields. */
typedef struct cnx_dead_letter {
    const cnx_error *error;
    const char *stage;
    const char *worker;
    const char *time;          /* RFC 3339 */
    const cnx_message *source; /* the message dead-lettered */
    int attempts;
    const char *container_digest; /* NULL: none */
    /* The replay bundle, when the message was a valid task: its document
     * (canonical JSON) and key; NULL: the raw message is kept instead. */
    const char *task_json;
    const char *task_key;
} cnx_dead_letter;

/**
 * The dead letter as canonical JSON.
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_dead_letter_build(const cnx_dead_letter *dl, char **out);

/** A controller decision on a task (schemas/control.schema.json). */
typedef struct cnx_control {
    char type[16];       /* released, reused, dead_lettered */
    char request[129];
    char stage[33];      /* the workflow stage */
    int64_t index;       /* the task's index in the plan, >= 0 */
    char task_key[72];
    int64_t attempt;     /* >= 0 (0: reused) */
    char lane[8];        /* bulk, urgent */
    char time[40];       /* RFC 3339 UTC */
    char reason[1024];
    char manifest[72];   /* reused: the manifest reused; "" otherwise */
} cnx_control;

/**
 * The decision as canonical JSON (manifest only when not "").
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_control_build(const cnx_control *ctl, char **out);

/**
 * Parse and check a decision against its schema: every required field,
 * each of its type and pattern, no unknown key.
 * @return 0; CNX_ESCHEMA naming the first bad field ("control: lane: must
 *         be bulk or urgent"); CNX_ENOMEM.
 */
int cnx_control_parse(cnx_control *out, const char *json, size_t len);

#ifdef __cplusplus
}
#endif
#endif
