/*
 * cnx/kafka.h - the Kafka client cnx uses, over librdkafka.
 *
 * Producers are idempotent (enable.idempotence=true, acks=all) and compress
 * with zstd; a flush waits for the broker's acknowledgement of everything
 * sent and reports any delivery failure, which is what lets a worker commit
 * an offset only after its events and manifest are durable. Consumers are
 * members of a consumer group with static membership (group.instance.id)
 * and cooperative-sticky assignment; offsets are committed by hand only
 * (enable.auto.commit=false). Extra librdkafka settings (TLS, SASL, ...)
 * come from a config file of `key=value` lines, so production points at a
 * real cluster with no code change. librdkafka's types stay out of this
 * header.
 */
#ifndef CNX_KAFKA_H
#define CNX_KAFKA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Topic names. */
#define CNX_TOPIC_REQUESTS "cnx.requests"
#define CNX_TOPIC_EVENTS "cnx.events"
#define CNX_TOPIC_LINEAGE "cnx.lineage"
#define CNX_TOPIC_DLQ "cnx.dlq"
/* Largest message cnx produces or accepts (bytes). */
#define CNX_KAFKA_MAX_MESSAGE (8u << 20)

/**
 * "cnx.tasks.<stage>" or, urgent, "cnx.tasks.<stage>.urgent".
 * @return 0; CNX_EINVAL if stage is empty, over 64 bytes or has characters
 *         other than a-z 0-9 - _; CNX_ERANGE if buf is too small.
 */
int cnx_topic_tasks(char *buf, size_t n, const char *stage, int urgent);

/** Connection settings shared by producers and consumers. */
typedef struct cnx_kafka_opts {
    const char *brokers;     /* bootstrap list "host:port,..." (required) */
    const char *config_file; /* optional librdkafka key=value file; it may
                                not set what cnx's guarantees rest on
                                (see docs/kafka.md) */
    const char *client_id;   /* optional client.id */
    /* Give up once no broker has answered for this long (seconds; 0:
     * CNX_KAFKA_BROKER_TIMEOUT_S): cnx_consumer_poll and
     * cnx_producer_flush then fail, not retriable, with one line naming
     * the bootstrap list and librdkafka's last connection error. */
    double broker_timeout_s;
} cnx_kafka_opts;

/* Default of cnx_kafka_opts.broker_timeout_s (seconds). */
#define CNX_KAFKA_BROKER_TIMEOUT_S 120.0
/* Largest --broker-timeout the programs accept (seconds, one day). */
#define CNX_KAFKA_BROKER_TIMEOUT_MAX 86400.0
/* Default --ready-timeout of the workers and the controller (seconds):
 * /readyz answers 503 once no broker has answered for this long, well
 * before the give-up at broker_timeout_s. */
#define CNX_KAFKA_READY_TIMEOUT_S 10.0

/**
 * Parse a --broker-timeout value: seconds, a decimal number over 0 and at
 * most CNX_KAFKA_BROKER_TIMEOUT_MAX ("10", "2.5").
 * @return 0; CNX_EINVAL naming the value.
 */
int cnx_kafka_broker_timeout_parse(const char *text, double *seconds);

/** A message header (text values only). */
typedef struct cnx_kafka_header {
    const char *name;
    const char *value; /* NUL-terminated */
} cnx_kafka_header;

typedef struct cnx_producer cnx_producer;

/**
 * @param[out] out  caller frees with cnx_producer_free() (which flushes)
 * @return 0; CNX_EINVAL for a bad or refused setting (the message names
 *         it and the config file line) or settings librdkafka rejects
 *         together; CNX_ENOTFOUND if the config file does not exist.
 * Thread-safety: a producer may be shared between threads.
 */
int cnx_producer_new(cnx_producer **out, const cnx_kafka_opts *opts);
/** Wait up to 10 s for outstanding deliveries, drop the rest (never
 * acknowledged, so nothing was committed on their strength) and free.
 * Accepts NULL. */
void cnx_producer_free(cnx_producer *producer);

/**
 * Queue a message (copied). Delivery is asynchronous: call
 * cnx_producer_flush() to wait for acknowledgements.
 * @param key  optional (NULL), e.g. the task key, for partitioning
 * @return 0; CNX_ETOOBIG if value, key and headers together are over
 *         CNX_KAFKA_MAX_MESSAGE; CNX_EIO (retriable) if the local queue is
 *         full. An unknown topic is reported by the next flush.
 */
int cnx_producer_send(cnx_producer *producer, const char *topic,
                      const char *key, const void *value, size_t len,
                      const cnx_kafka_header *headers, size_t nheaders);

/**
 * Fetch the metadata of topics now, so that the first message sent to each
 * does not wait for it (a worker calls this at start, before its first
 * task). Failures are not errors: sending fetches what is missing.
 */
void cnx_producer_prepare(cnx_producer *producer, const char *const *topics,
                          size_t ntopics, int timeout_ms);

/**
 * Wait until every message sent so far is acknowledged by the broker.
 * @return 0 if all were delivered; CNX_EIO (retriable) on timeout (the
 *         messages stay queued and a later flush may succeed) or if any
 *         delivery since the last flush failed (the message says which
 *         topic and why); CNX_EIO, not retriable, once the producer has
 *         failed fatally and must be recreated, or once no broker has
 *         answered for the opts' broker_timeout_s ("broker unreachable
 *         for 120 s (bootstrap ...): <librdkafka's last reason>"). With
 *         several threads sending, a flush reports failures of every
 *         thread's messages.
 */
int cnx_producer_flush(cnx_producer *producer, int timeout_ms);

typedef struct cnx_consumer cnx_consumer;

/** A consumed message. Fields are borrowed from the message. */
typedef struct cnx_message {
    const char *topic;
    int32_t partition;
    int64_t offset;
    const void *key;
    size_t key_len;
    const void *value;
    size_t len;
    /* Headers of a message made by the caller (a replayed log, a test);
     * a consumed message's are read from handle_. */
    const cnx_kafka_header *headers;
    size_t nheaders;
    void *handle_; /* internal */
} cnx_message;

/**
 * Copy the value of header name (the last one if repeated) into buf.
 * @return buf; NULL if there is no such header, or (with CNX_ETOOBIG set)
 *         if the value holds a NUL byte or does not fit in n - 1 bytes.
 */
const char *cnx_message_header(const cnx_message *msg, const char *name,
                               char *buf, size_t n);
void cnx_message_free(cnx_message *msg);

/**
 * Join group and subscribe to topics. Joining happens in the background
 * during cnx_consumer_poll.
 * @param instance  group.instance.id (static membership); NULL for dynamic
 * @param session_timeout_ms  0 for the default (45000, or the file's)
 * @return 0; CNX_EINVAL for a bad or refused setting; CNX_ENOTFOUND if the
 *         config file does not exist.
 * Thread-safety: a consumer belongs to one thread.
 */
int cnx_consumer_new(cnx_consumer **out, const cnx_kafka_opts *opts,
                     const char *group, const char *instance,
                     const char *const *topics, size_t ntopics,
                     int session_timeout_ms);
/** Leave the group (a static member keeps its assignment until the session
 * times out) and free, waiting at most 10 s for the group. Accepts NULL. */
void cnx_consumer_free(cnx_consumer *consumer);
/**
 * cnx_consumer_free, where a member that has had no assignment yet waits
 * for its first only until deadline (a cnx_now() time), then for its
 * revoke at most 10 s. A member closed before any assignment is not
 * destroyed but kept until the process exits (librdkafka before 2.3 can
 * abort destroying it: docs/kafka.md). Accepts NULL.
 */
void cnx_consumer_close(cnx_consumer *consumer, double deadline);

/**
 * Poll for one message.
 * @param[out] out  NULL on timeout; else free with cnx_message_free()
 * @return 0; CNX_EIO for a consumer error the caller should log: retriable
 *         means poll again, not retriable means the consumer has failed
 *         fatally (e.g. its static instance id was taken over) or no
 *         broker has answered for the opts' broker_timeout_s (the message
 *         says "broker unreachable for ...") and must be freed;
 *         CNX_ETOOBIG (fatal for that message) if its key or value
 *         is over CNX_KAFKA_MAX_MESSAGE: *out is then set anyway, with
 *         value and key NULL, so the caller can dead-letter it by topic,
 *         partition and offset and commit past it.
 */
int cnx_consumer_poll(cnx_consumer *consumer, int timeout_ms,
                      cnx_message **out);

/** Pause / resume fetching from every partition currently assigned. While
 * paused, keep calling cnx_consumer_poll so the member stays in the group. */
int cnx_consumer_pause(cnx_consumer *consumer);
int cnx_consumer_resume(cnx_consumer *consumer);

/** @return the number of partitions currently assigned (0 until the group
 *          is joined), or CNX_EIO. */
int cnx_consumer_assignment_count(cnx_consumer *consumer);

/**
 * Commit msg's offset + 1 for its partition, synchronously.
 * @return 0; CNX_EIO (retriable) if the commit failed, e.g. the partition
 *         was reassigned (the work is then redone elsewhere, idempotently).
 */
int cnx_consumer_commit(cnx_consumer *consumer, const cnx_message *msg);

/**
 * How many times the cluster answered again after a consumer had seen it
 * unreachable (a connection error, then a successful metadata request):
 * the moments to check whether the broker came back as another cluster
 * or with a shorter log. Counted as cnx_consumer_poll runs.
 */
unsigned cnx_consumer_reconnects(cnx_consumer *consumer);

/**
 * How long the cluster has not answered this consumer: seconds since the
 * connection error that started the clock cnx_consumer_poll gives up on
 * (broker_timeout_s), 0 while no such error is unanswered. Readiness
 * (/readyz) reads it. Advances as cnx_consumer_poll runs (the errors and
 * the probes that stop the clock are seen there).
 * Thread-safety: any thread.
 */
double cnx_consumer_unreachable_s(cnx_consumer *consumer);

/**
 * Whether a group member has been given its first assignment (maybe
 * empty): it has reached the cluster and joined its group once.
 * Thread-safety: the thread that polls the consumer (the assignment is
 * made inside cnx_consumer_poll).
 */
int cnx_consumer_joined(const cnx_consumer *consumer);

/**
 * The cluster id the cluster last reported (Kafka's ClusterId), asked for
 * if not known yet.
 * @return 0; CNX_EIO if the cluster does not answer within timeout_ms or
 *         reports none; CNX_ERANGE if it does not fit in n bytes.
 */
int cnx_consumer_cluster_id(cnx_consumer *consumer, char *buf, size_t n,
                            int timeout_ms);

/* Start positions for cnx_reader_new. */
#define CNX_OFFSET_BEGINNING (-2)
#define CNX_OFFSET_END (-1)

/**
 * Where a reader starts in one partition: an offset >= 0, or
 * CNX_OFFSET_BEGINNING / CNX_OFFSET_END.
 */
typedef int64_t (*cnx_reader_start_fn)(void *ctx, const char *topic,
                                       int32_t partition);

/**
 * A reader: a consumer outside any group that is assigned every partition
 * of topics, each from the offset start() gives (NULL: the beginning). It
 * commits nothing; whoever uses it keeps its own positions (the controller
 * keeps them in the ledger, in the transaction that applies the messages).
 * Poll it with cnx_consumer_poll, free it with cnx_consumer_free.
 * @return 0; CNX_EINVAL for a bad setting; CNX_EIO if a topic's metadata
 *         cannot be had (it does not exist, or the cluster does not answer).
 */
int cnx_reader_new(cnx_consumer **out, const cnx_kafka_opts *opts,
                   const char *const *topics, size_t ntopics,
                   cnx_reader_start_fn start, void *ctx);

/** A partition and an offset. */
typedef struct cnx_position {
    char topic[128];
    int32_t partition;
    int64_t offset;
} cnx_position;

/**
 * The end (high watermark: the offset the next message will get) of every
 * partition assigned to a reader, asked of the broker now.
 * @param[out] out  array of *n; free() it
 * @return 0; CNX_EIO if the broker does not answer within timeout_ms.
 */
int cnx_reader_ends(cnx_consumer *reader, cnx_position **out, size_t *n,
                    int timeout_ms);

/**
 * Create topics with partitions each and the broker's default replication
 * (for tools and tests; cnx-broker creates cnx's own). Topics that already
 * exist are fine. Waits up to about 20 s for the cluster's answer.
 * @return 0; CNX_EINVAL for a bad setting or partition count; CNX_EIO if
 *         the cluster refused a topic or did not answer.
 */
int cnx_kafka_create_topics(const cnx_kafka_opts *opts,
                            const char *const *topics, size_t ntopics,
                            int partitions);

#ifdef __cplusplus
}
#endif
#endif
