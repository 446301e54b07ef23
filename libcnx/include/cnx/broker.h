/*
 * cnx/broker.h - an in-process development Kafka cluster.
 *
 * librdkafka's mock cluster, listening on loopback, with cnx's topics made
 * up front: cnx.requests, cnx.events, cnx.lineage, cnx.dlq and, for each
 * stage, cnx.tasks.<stage> and cnx.tasks.<stage>.urgent. For cnx-broker,
 * `cnx demo` and tests; it keeps everything in memory and is not durable.
 * librdkafka's types stay out of this header.
 */
#ifndef CNX_BROKER_H
#define CNX_BROKER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The stages whose task topics a broker makes when given none. */
#define CNX_BROKER_DEFAULT_STAGES "downsample,montage,segment,synapses,mesh"
/* Limits on what a broker may be asked for. */
#define CNX_BROKER_MAX_BROKERS 16
#define CNX_BROKER_MAX_PARTITIONS 1024
#define CNX_BROKER_MAX_STAGES 64

typedef struct cnx_broker cnx_broker;

/**
 * Start a mock cluster and make cnx's topics in it.
 * @param brokers     number of brokers, 1..CNX_BROKER_MAX_BROKERS
 * @param partitions  partitions per topic, 1..CNX_BROKER_MAX_PARTITIONS
 * @param stages      comma-separated stage names (a-z 0-9 - _), or NULL
 *                    for CNX_BROKER_DEFAULT_STAGES
 * @param[out] out    caller frees with cnx_broker_free()
 * @return 0; CNX_EINVAL for a bad count or stage list; CNX_EIO if the
 *         cluster cannot be started.
 * The cluster runs on librdkafka's threads until freed; a thread that
 * wants signals delivered to it alone should block them before this call.
 */
int cnx_broker_new(cnx_broker **out, int brokers, int partitions,
                   const char *stages);

/** @return the bootstrap list "127.0.0.1:port,..." (borrowed). */
const char *cnx_broker_bootstraps(const cnx_broker *broker);

/** @return how many topics the broker made. */
size_t cnx_broker_topic_count(const cnx_broker *broker);

/* Longest command cnx_broker_control takes (bytes). */
#define CNX_BROKER_CONTROL_MAX 1024

/**
 * Inject a fault through the mock cluster's own API (rdkafka_mock.h), for
 * tests: one command, words separated by blanks.
 *
 *   request-errors API ERROR[*N] ...  the next requests of API fail with
 *                                     these errors, in order (any broker)
 *   down ID | up ID                   broker ID stops / starts listening
 *                                     (its connections are closed)
 *   leader TOPIC PARTITION ID         partition's leader becomes broker ID
 *                                     (-1: no leader)
 *   rtt ID MS                         broker ID answers MS ms late
 *   clear API                         drop API's queued request errors
 *
 * API is a Kafka API name (Produce, Fetch, ListOffsets, Metadata,
 * OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat,
 * LeaveGroup, SyncGroup, InitProducerId, ...) or its number; ERROR a
 * Kafka error name as librdkafka spells it without its prefix
 * (NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT, ...) or its number; *N
 * repeats it N times (at most 10000 errors per command).
 * @return 0; CNX_EINVAL naming what is wrong (nothing is done then);
 *         CNX_EIO with librdkafka's reason if the mock refuses it.
 * Thread-safety: one command at a time per broker.
 */
int cnx_broker_control(cnx_broker *broker, const char *command);

/** Stop the cluster (its messages are lost) and free. Accepts NULL. */
void cnx_broker_free(cnx_broker *broker);

#ifdef __cplusplus
}
#endif
#endif
