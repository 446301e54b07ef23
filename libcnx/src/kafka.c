/*
 * kafka.c - producers, consumers and topic creation over librdkafka.
 *
 * Every librdkafka type and error code stays in this file; callers see
 * cnx_producer, cnx_consumer and CNX_E* codes. Settings come in three
 * layers: cnx's tunable defaults, then the operator's config file, then the
 * settings cnx's guarantees rest on (idempotence, acks=all, manual commits),
 * which the file may not touch. Load: a few small JSON messages per task,
 * tasks taken one at a time; values over CNX_KAFKA_MAX_MESSAGE are refused
 * both ways. A producer may be shared between threads (librdkafka's produce
 * path is thread-safe; the delivery-report state is under a mutex). A
 * consumer belongs to one thread: its rebalance callback runs inside
 * cnx_consumer_poll and cnx_consumer_free on that thread.
 */
#include "cnx/kafka.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "cnx/error.h"
#include "cnx/log.h"

/* Room for a key, headers and batch framing around the largest value. */
#define KAFKA_FRAMING (1u << 20)
/* Longest line of a config file; longer lines are refused. */
#define CONF_LINE_MAX 4096
/* How long cnx_producer_free waits for outstanding deliveries. */
#define PRODUCER_CLOSE_MS 10000
/* How long cnx_kafka_create_topics waits for the controller. */
#define ADMIN_TIMEOUT_MS 15000

/* How often an unreachable cluster is asked again, and how long for. */
#define PROBE_EVERY_S 1.0
#define PROBE_MS 500

/*
 * Whether the cluster answers. librdkafka retries a lost broker for ever
 * and tells only its log, so each client keeps its own account: a
 * connection error (through the error callback: a failed connect, a
 * dropped connection, "all brokers down") starts the clock, and then,
 * at most every PROBE_EVERY_S, a metadata request (broker list and the
 * client's own topics: a few hundred bytes) asks whether any broker
 * answers; an answer stops the clock. A client whose clock reaches
 * timeout_s gives up. The probes run only while the clock runs, on the
 * thread that polls or flushes. Guarded by lock: a producer's error
 * callback and flushes may run on several threads.
 */
typedef struct kafka_watch {
    pthread_mutex_t lock;
    double timeout_s;  /* give up after this long without an answer */
    double down_since; /* cnx_now() of the first unanswered error; 0: up */
    double next_probe; /* cnx_now() of the next metadata request */
    unsigned reconnects; /* answers after a down_since */
    char reason[256];  /* librdkafka's last connection error */
    char bootstrap[256];
} kafka_watch;

struct cnx_producer {
    rd_kafka_t *rk;
    kafka_watch watch;
    pthread_mutex_t lock;  /* guards the fields below */
    size_t failed;         /* deliveries failed since the last flush */
    int fatal;             /* the producer hit a fatal (idempotence) error */
    char first_error[256]; /* "topic [partition]: reason" of the first */
};

struct cnx_consumer {
    rd_kafka_t *rk;
    kafka_watch watch;
    int paused;   /* partitions assigned while paused are paused too */
    int member;   /* subscribed as a group member (not a reader) */
    int assigned; /* the group has given it an assignment (maybe empty) */
};

/* ---- is the cluster there? ------------------------------------------- */

int cnx_kafka_broker_timeout_parse(const char *text, double *seconds)
{
    char *end = NULL;
    double v;

    assert(seconds != NULL);
    errno = 0;
    v = text != NULL ? strtod(text, &end) : 0;
    if (text == NULL || end == text || *end != '\0' || errno != 0 ||
        !(v > 0) || v > CNX_KAFKA_BROKER_TIMEOUT_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "--broker-timeout '%.64s': want seconds over 0, "
                             "at most %.0f",
                             text != NULL ? text : "",
                             CNX_KAFKA_BROKER_TIMEOUT_MAX);
    *seconds = v;
    return 0;
}

static void watch_init(kafka_watch *w, const cnx_kafka_opts *opts)
{
    memset(w, 0, sizeof(*w));
    pthread_mutex_init(&w->lock, NULL);
    w->timeout_s = opts != NULL && opts->broker_timeout_s > 0
                       ? opts->broker_timeout_s
                       : CNX_KAFKA_BROKER_TIMEOUT_S;
    snprintf(w->bootstrap, sizeof(w->bootstrap), "%s",
             opts != NULL && opts->brokers != NULL ? opts->brokers : "?");
}

static void watch_dispose(kafka_watch *w)
{
    pthread_mutex_destroy(&w->lock);
}

/* An error from librdkafka's error callback: start the clock if it says
 * a broker could not be reached. */
static void watch_error(kafka_watch *w, int err, const char *reason)
{
    if (err != RD_KAFKA_RESP_ERR__TRANSPORT &&
        err != RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN &&
        err != RD_KAFKA_RESP_ERR__RESOLVE &&
        err != RD_KAFKA_RESP_ERR__TIMED_OUT)
        return;
    pthread_mutex_lock(&w->lock);
    if (w->down_since == 0) {
        w->down_since = cnx_now();
        w->next_probe = w->down_since;
    }
    snprintf(w->reason, sizeof(w->reason), "%s", reason);
    pthread_mutex_unlock(&w->lock);
}

/* The cluster answered (a delivery acknowledged, a probe answered):
 * stop the clock. */
static void watch_alive(kafka_watch *w)
{
    pthread_mutex_lock(&w->lock);
    if (w->down_since > 0) {
        CNX_INFO("kafka", "cluster at %s answers again after %.1f s",
                 w->bootstrap, cnx_now() - w->down_since);
        w->down_since = 0;
        w->reconnects++;
    }
    pthread_mutex_unlock(&w->lock);
}

/*
 * While the clock runs: ask the cluster (at most every PROBE_EVERY_S) and
 * stop the clock if it answers; give up (if give_up) once it has run
 * timeout_s.
 * @return 0; CNX_EIO, not retriable, naming the bootstrap list and the
 *         last connection error.
 */
static int watch_check(kafka_watch *w, rd_kafka_t *rk, int give_up)
{
    const struct rd_kafka_metadata *md = NULL;
    double down, now = cnx_now();
    int due;

    pthread_mutex_lock(&w->lock);
    down = w->down_since;
    due = down > 0 && now >= w->next_probe;
    if (due)
        w->next_probe = now + PROBE_EVERY_S;
    pthread_mutex_unlock(&w->lock);
    if (down == 0)
        return 0;
    if (due && rd_kafka_metadata(rk, 0, NULL, &md, PROBE_MS) ==
                   RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_metadata_destroy(md);
        watch_alive(w);
        return 0;
    }
    if (!give_up || cnx_now() - down < w->timeout_s)
        return 0;
    pthread_mutex_lock(&w->lock);
    cnx_error_set(CNX_EIO, 0, "broker unreachable for %g s (bootstrap %s): %s",
                  w->timeout_s, w->bootstrap,
                  w->reason[0] != '\0' ? w->reason : "no answer");
    pthread_mutex_unlock(&w->lock);
    return CNX_EIO;
}

/* ---- configuration ---------------------------------------------------- */

/* A setting the config file may not change, and why. */
typedef struct conf_refusal {
    const char *key;
    const char *why;
} conf_refusal;

static const conf_refusal conf_refused[] = {
    {"enable.auto.commit", "cnx commits offsets only after work is durable"},
    {"auto.commit.enable", "cnx commits offsets only after work is durable"},
    {"enable.auto.offset.store", "cnx commits explicit offsets"},
    {"auto.offset.reset", "cnx must read tasks posted before it joined"},
    {"enable.idempotence", "cnx producers must be idempotent"},
    {"acks", "cnx needs acks=all for durable events"},
    {"request.required.acks", "cnx needs acks=all for durable events"},
    {"bootstrap.servers", "the broker list comes from --brokers"},
    {"metadata.broker.list", "the broker list comes from --brokers"},
    {"group.id", "the consumer group is chosen by the program"},
    {"group.instance.id", "the instance id is chosen by the program"},
};

/* librdkafka log levels are syslog's (0 emerg .. 7 debug). */
static void kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac,
                         const char *buf)
{
    cnx_log_level cl;
    (void)rk;
    if (level <= 3)
        cl = CNX_LOG_ERROR;
    else if (level == 4)
        cl = CNX_LOG_WARN;
    else if (level <= 6)
        cl = CNX_LOG_INFO;
    else
        cl = CNX_LOG_DEBUG;
    cnx_log(cl, "kafka", "%s: %s", fac, buf);
}

static int conf_set(rd_kafka_conf_t *conf, const char *key, const char *value)
{
    char errstr[512];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK)
        return cnx_error_set(CNX_EINVAL, 0, "kafka setting %s: %s", key,
                             errstr);
    return 0;
}

static char *trim(char *s)
{
    char *end;
    while (*s != '\0' && isspace((unsigned char)*s))
        s++;
    end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        end--;
    *end = '\0';
    return s;
}

/* Apply one "key=value" line (already trimmed, not a comment). */
static int conf_apply_line(rd_kafka_conf_t *conf, const char *path,
                           unsigned lineno, char *line)
{
    char errstr[512];
    char *eq = strchr(line, '=');
    char *key, *value;
    size_t i;

    if (eq == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "%s:%u: expected key=value", path,
                             lineno);
    *eq = '\0';
    key = trim(line);
    value = trim(eq + 1);
    if (key[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "%s:%u: empty key", path, lineno);
    for (i = 0; i < sizeof(conf_refused) / sizeof(conf_refused[0]); i++) {
        if (strcmp(key, conf_refused[i].key) == 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "%s:%u: %s may not be set here: %s", path,
                                 lineno, key, conf_refused[i].why);
    }
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK)
        return cnx_error_set(CNX_EINVAL, 0, "%s:%u: %s", path, lineno, errstr);
    return 0;
}

/* Apply the operator's key=value file. */
static int conf_apply_file(rd_kafka_conf_t *conf, const char *path)
{
    char line[CONF_LINE_MAX];
    unsigned lineno = 0;
    FILE *f;
    int rc = 0;

    f = fopen(path, "r");
    if (f == NULL)
        return cnx_error_set(errno == ENOENT ? CNX_ENOTFOUND : CNX_EIO, 0,
                             "kafka config %s: %s", path, strerror(errno));
    while (fgets(line, sizeof(line), f) != NULL) {
        size_t len = strlen(line);
        char *s;
        lineno++;
        if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = cnx_error_set(CNX_EINVAL, 0, "%s:%u: line over %d bytes", path,
                               lineno, CONF_LINE_MAX - 2);
            goto done;
        }
        s = trim(line);
        if (s[0] == '\0' || s[0] == '#')
            continue;
        rc = conf_apply_line(conf, path, lineno, s);
        if (rc != 0)
            goto done;
    }
    if (ferror(f))
        rc = cnx_error_set(CNX_EIO, 0, "kafka config %s: read error", path);
done:
    fclose(f);
    return rc;
}

/*
 * A configuration: defaults, then the file, then the brokers. The caller
 * adds the settings its role forces and owns the result.
 */
static int conf_new(rd_kafka_conf_t **out, const cnx_kafka_opts *opts,
                    const char *const *defaults)
{
    rd_kafka_conf_t *conf = NULL;
    int rc;

    *out = NULL;
    if (opts == NULL || opts->brokers == NULL || opts->brokers[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "kafka: no broker list given");
    conf = rd_kafka_conf_new();
    if (conf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "kafka: out of memory");
    rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
    for (; defaults != NULL && defaults[0] != NULL; defaults += 2) {
        rc = conf_set(conf, defaults[0], defaults[1]);
        if (rc != 0)
            goto done;
    }
    if (opts->config_file != NULL) {
        rc = conf_apply_file(conf, opts->config_file);
        if (rc != 0)
            goto done;
    }
    rc = conf_set(conf, "bootstrap.servers", opts->brokers);
    if (rc == 0 && opts->client_id != NULL)
        rc = conf_set(conf, "client.id", opts->client_id);
done:
    if (rc != 0)
        rd_kafka_conf_destroy(conf);
    else
        *out = conf;
    return rc;
}

/* rd_kafka_new takes conf on success only. */
static int kafka_new(rd_kafka_t **out, rd_kafka_type_t type,
                     rd_kafka_conf_t *conf, const char *what)
{
    char errstr[512];
    *out = rd_kafka_new(type, conf, errstr, sizeof(errstr));
    if (*out == NULL) {
        rd_kafka_conf_destroy(conf);
        return cnx_error_set(CNX_EINVAL, 0, "cannot create Kafka %s: %s", what,
                             errstr);
    }
    return 0;
}

int cnx_topic_tasks(char *buf, size_t n, const char *stage, int urgent)
{
    const char *p;
    int len;

    assert(buf != NULL || n == 0);
    if (stage == NULL || stage[0] == '\0' || strlen(stage) > 64)
        return cnx_error_set(CNX_EINVAL, 0, "bad stage name");
    for (p = stage; *p != '\0'; p++) {
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_'))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "stage name %.64s: only a-z 0-9 - _", stage);
    }
    len = snprintf(buf, n, "cnx.tasks.%s%s", stage, urgent ? ".urgent" : "");
    if (len < 0 || (size_t)len >= n)
        return cnx_error_set(CNX_ERANGE, 0, "topic name buffer too small");
    return 0;
}

/* ---- producer --------------------------------------------------------- */

/* Runs in whichever thread serves the producer's queue (poll or flush). */
static void producer_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *rkm,
                           void *opaque)
{
    cnx_producer *producer = opaque;
    (void)rk;
    if (rkm->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        watch_alive(&producer->watch); /* the cluster acknowledged it */
        return;
    }
    pthread_mutex_lock(&producer->lock);
    if (producer->failed == 0)
        snprintf(producer->first_error, sizeof(producer->first_error),
                 "%s [%" PRId32 "]: %s", rd_kafka_topic_name(rkm->rkt),
                 rkm->partition, rd_kafka_err2str(rkm->err));
    producer->failed++;
    pthread_mutex_unlock(&producer->lock);
}

/* Errors not tied to one message: log them; remember fatal ones. */
static void producer_error_cb(rd_kafka_t *rk, int err, const char *reason,
                              void *opaque)
{
    cnx_producer *producer = opaque;
    char fatal[256];

    watch_error(&producer->watch, err, reason);
    if (err != RD_KAFKA_RESP_ERR__FATAL) {
        /* librdkafka logs each connection failure itself; say once when
         * no broker at all can be reached. */
        if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
            CNX_WARN("kafka", "producer: %s", reason);
        else
            CNX_DEBUG("kafka", "producer: %s", reason);
        return;
    }
    rd_kafka_fatal_error(rk, fatal, sizeof(fatal));
    CNX_ERROR("kafka", "producer: fatal: %s", fatal);
    pthread_mutex_lock(&producer->lock);
    producer->fatal = 1;
    pthread_mutex_unlock(&producer->lock);
}

int cnx_producer_new(cnx_producer **out, const cnx_kafka_opts *opts)
{
    char max_bytes[24];
    /* clang-format off */
    const char *const defaults[] = {
        "compression.type", "zstd",
        "linger.ms", "5",
        "message.max.bytes", max_bytes,
        NULL,
    };
    static const char *const forced[] = {
        "enable.idempotence", "true",
        "acks", "all",
        NULL,
    };
    /* clang-format on */
    cnx_producer *producer = NULL;
    rd_kafka_conf_t *conf = NULL;
    size_t i;
    int rc;

    assert(out != NULL);
    *out = NULL;
    snprintf(max_bytes, sizeof(max_bytes), "%u",
             CNX_KAFKA_MAX_MESSAGE + KAFKA_FRAMING);
    producer = calloc(1, sizeof(*producer));
    if (producer == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "kafka producer: out of memory");
    pthread_mutex_init(&producer->lock, NULL);
    watch_init(&producer->watch, opts);
    rc = conf_new(&conf, opts, defaults);
    if (rc != 0)
        goto done;
    for (i = 0; forced[i] != NULL && rc == 0; i += 2)
        rc = conf_set(conf, forced[i], forced[i + 1]);
    if (rc != 0)
        goto done;
    rd_kafka_conf_set_opaque(conf, producer);
    rd_kafka_conf_set_dr_msg_cb(conf, producer_dr_cb);
    rd_kafka_conf_set_error_cb(conf, producer_error_cb);
    rc = kafka_new(&producer->rk, RD_KAFKA_PRODUCER, conf, "producer");
    conf = NULL;
done:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (rc != 0) {
        cnx_producer_free(producer);
        return rc;
    }
    *out = producer;
    return 0;
}

void cnx_producer_free(cnx_producer *producer)
{
    if (producer == NULL)
        return;
    if (producer->rk != NULL) {
        if (rd_kafka_flush(producer->rk, PRODUCER_CLOSE_MS) !=
            RD_KAFKA_RESP_ERR_NO_ERROR)
            CNX_WARN("kafka",
                     "producer closed with %d request(s) "
                     "unacknowledged",
                     rd_kafka_outq_len(producer->rk));
        /* Fail what is left now rather than inside rd_kafka_destroy. */
        rd_kafka_purge(producer->rk,
                       RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(producer->rk, 0);
        rd_kafka_destroy(producer->rk);
    }
    pthread_mutex_destroy(&producer->lock);
    watch_dispose(&producer->watch);
    free(producer);
}

int cnx_producer_send(cnx_producer *producer, const char *topic,
                      const char *key, const void *value, size_t len,
                      const cnx_kafka_header *headers, size_t nheaders)
{
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_resp_err_t err;
    size_t total = len, key_len = key != NULL ? strlen(key) : 0;
    size_t i;

    assert(producer != NULL && topic != NULL);
    assert(value != NULL || len == 0);
    assert(headers != NULL || nheaders == 0);
    total += key_len;
    for (i = 0; i < nheaders; i++) {
        assert(headers[i].name != NULL && headers[i].value != NULL);
        total += strlen(headers[i].name) + strlen(headers[i].value);
    }
    if (len > CNX_KAFKA_MAX_MESSAGE || total > CNX_KAFKA_MAX_MESSAGE)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "message for %s: %zu bytes, limit %u", topic,
                             total, CNX_KAFKA_MAX_MESSAGE);
    if (nheaders > 0) {
        hdrs = rd_kafka_headers_new(nheaders);
        for (i = 0; i < nheaders; i++)
            rd_kafka_header_add(hdrs, headers[i].name, -1, headers[i].value,
                                -1);
    }
    err = rd_kafka_producev(producer->rk, RD_KAFKA_V_TOPIC(topic),
                            RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                            RD_KAFKA_V_KEY(key, key_len),
                            RD_KAFKA_V_VALUE((void *)value, len),
                            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
    /* Serve delivery reports so the counters stay current. */
    rd_kafka_poll(producer->rk, 0);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        /* On failure the headers are still ours. */
        if (hdrs != NULL)
            rd_kafka_headers_destroy(hdrs);
        if (err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE)
            return cnx_error_set(CNX_ETOOBIG, 0, "message for %s: %s", topic,
                                 rd_kafka_err2str(err));
        return cnx_error_set(CNX_EIO, err != RD_KAFKA_RESP_ERR__FATAL,
                             "cannot queue message for %s: %s", topic,
                             rd_kafka_err2str(err));
    }
    return 0;
}

int cnx_producer_flush(cnx_producer *producer, int timeout_ms)
{
    rd_kafka_resp_err_t err;
    char first[sizeof(producer->first_error)];
    size_t failed;
    int fatal;

    assert(producer != NULL);
    /* In slices, so that a cluster gone for broker_timeout_s ends the
     * wait (the slices serve the error callback that starts the clock). */
    for (double until = cnx_now() + timeout_ms / 1000.0;;) {
        double left = until - cnx_now();
        int rc;
        err = rd_kafka_flush(producer->rk,
                             left <= 0 ? 0 : left < 1.0 ? (int)(left * 1000)
                                                        : 1000);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR || left <= 0)
            break;
        rc = watch_check(&producer->watch, producer->rk, 1);
        if (rc != 0)
            return rc;
    }
    pthread_mutex_lock(&producer->lock);
    failed = producer->failed;
    fatal = producer->fatal;
    memcpy(first, producer->first_error, sizeof(first));
    producer->failed = 0;
    producer->first_error[0] = '\0';
    pthread_mutex_unlock(&producer->lock);
    if (failed > 0)
        return cnx_error_set(CNX_EIO, !fatal,
                             "%zu message(s) not delivered, first %s", failed,
                             first);
    if (fatal)
        return cnx_error_set(CNX_EIO, 0,
                             "kafka producer failed fatally; recreate it");
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        return cnx_error_set(CNX_EIO, 1,
                             "kafka flush: %d request(s) unacknowledged "
                             "after %d ms",
                             rd_kafka_outq_len(producer->rk), timeout_ms);
    return 0;
}

/* ---- consumer --------------------------------------------------------- */

static void log_rebalance_error(rd_kafka_error_t *error, const char *what)
{
    if (error == NULL)
        return;
    CNX_ERROR("kafka", "%s: %s", what, rd_kafka_error_string(error));
    rd_kafka_error_destroy(error);
}

/*
 * Cooperative protocol: add or remove only the partitions that moved.
 * Eager (if the file chose an eager assignor): replace the whole set.
 * Runs on the consumer's thread, inside poll or close.
 */
static void consumer_rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                                  rd_kafka_topic_partition_list_t *parts,
                                  void *opaque)
{
    cnx_consumer *consumer = opaque;
    int cooperative =
        strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;

    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        CNX_DEBUG("kafka", "assigned %d partition(s)", parts->cnt);
        consumer->assigned = 1;
        if (cooperative)
            log_rebalance_error(rd_kafka_incremental_assign(rk, parts),
                                "incremental assign");
        else
            rd_kafka_assign(rk, parts);
        /* A paused consumer stays paused across a rebalance. */
        if (consumer->paused)
            rd_kafka_pause_partitions(rk, parts);
        return;
    }
    if (err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS)
        CNX_DEBUG("kafka", "revoked %d partition(s)%s", parts->cnt,
                  rd_kafka_assignment_lost(rk) ? " (lost)" : "");
    else
        CNX_WARN("kafka", "rebalance error: %s", rd_kafka_err2str(err));
    if (cooperative)
        log_rebalance_error(rd_kafka_incremental_unassign(rk, parts),
                            "incremental unassign");
    else
        rd_kafka_assign(rk, NULL);
}

/* Errors not tied to a message (consumer errors come out of poll): as
 * for producers, librdkafka logs each connection failure itself. */
static void consumer_error_cb(rd_kafka_t *rk, int err, const char *reason,
                              void *opaque)
{
    cnx_consumer *consumer = opaque;
    (void)rk;
    watch_error(&consumer->watch, err, reason);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        CNX_WARN("kafka", "consumer: %s", reason);
    else
        CNX_DEBUG("kafka", "consumer: %s", reason);
}

/*
 * The settings every consumer gets (group members and readers): bounded
 * memory for what is read from the network (one fetch response, one
 * decompressed batch -- librdkafka caps zstd output at
 * receive.message.max.bytes -- and the prefetch queue) as defaults the
 * config file may change, then manual offsets, which it may not.
 */
static int consumer_conf_new(rd_kafka_conf_t **conf, const cnx_kafka_opts *opts,
                             const char *group, int group_member)
{
    char fetch_bytes[24], receive_bytes[24], queued_kbytes[24];
    /* clang-format off */
    const char *const memory[] = {
        "enable.partition.eof", "false",
        "fetch.max.bytes", fetch_bytes,
        "receive.message.max.bytes", receive_bytes,
        "queued.max.messages.kbytes", queued_kbytes,
    };
    static const char *const membership[] = {
        "partition.assignment.strategy", "cooperative-sticky",
        "session.timeout.ms", "45000",
    };
    static const char *const forced[] = {
        "enable.auto.commit", "false",
        "enable.auto.offset.store", "false",
        "auto.offset.reset", "earliest",
        NULL,
    };
    /* clang-format on */
    const char *defs[sizeof(memory) / sizeof(memory[0]) +
                     sizeof(membership) / sizeof(membership[0]) + 1];
    size_t n = 0;
    int rc;

    snprintf(fetch_bytes, sizeof(fetch_bytes), "%u",
             CNX_KAFKA_MAX_MESSAGE + KAFKA_FRAMING);
    snprintf(receive_bytes, sizeof(receive_bytes), "%u",
             2 * (CNX_KAFKA_MAX_MESSAGE + KAFKA_FRAMING));
    snprintf(queued_kbytes, sizeof(queued_kbytes), "%u",
             2 * (CNX_KAFKA_MAX_MESSAGE + KAFKA_FRAMING) / 1024);
    for (size_t i = 0; i < sizeof(memory) / sizeof(memory[0]); i++)
        defs[n++] = memory[i];
    for (size_t i = 0; group_member &&
                       i < sizeof(membership) / sizeof(membership[0]); i++)
        defs[n++] = membership[i];
    defs[n] = NULL;
    rc = conf_new(conf, opts, defs);
    for (size_t i = 0; rc == 0 && forced[i] != NULL; i += 2)
        rc = conf_set(*conf, forced[i], forced[i + 1]);
    if (rc == 0)
        rc = conf_set(*conf, "group.id", group);
    if (rc != 0 && *conf != NULL) {
        rd_kafka_conf_destroy(*conf);
        *conf = NULL;
    }
    return rc;
}

int cnx_consumer_new(cnx_consumer **out, const cnx_kafka_opts *opts,
                     const char *group, const char *instance,
                     const char *const *topics, size_t ntopics,
                     int session_timeout_ms)
{
    rd_kafka_topic_partition_list_t *subs = NULL;
    cnx_consumer *consumer = NULL;
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_resp_err_t err;
    char timeout[16];
    size_t i;
    int rc;

    assert(out != NULL);
    assert(topics != NULL && ntopics > 0);
    *out = NULL;
    if (group == NULL || group[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "kafka consumer: no group");
    if (session_timeout_ms < 0)
        return cnx_error_set(CNX_EINVAL, 0,
                             "kafka consumer: session "
                             "timeout %d ms",
                             session_timeout_ms);
    consumer = calloc(1, sizeof(*consumer));
    if (consumer == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "kafka consumer: out of memory");
    watch_init(&consumer->watch, opts);
    rc = consumer_conf_new(&conf, opts, group, 1);
    if (rc == 0 && instance != NULL)
        rc = conf_set(conf, "group.instance.id", instance);
    if (rc == 0 && session_timeout_ms > 0) {
        snprintf(timeout, sizeof(timeout), "%d", session_timeout_ms);
        rc = conf_set(conf, "session.timeout.ms", timeout);
    }
    if (rc != 0)
        goto done;
    rd_kafka_conf_set_opaque(conf, consumer);
    rd_kafka_conf_set_rebalance_cb(conf, consumer_rebalance_cb);
    rd_kafka_conf_set_error_cb(conf, consumer_error_cb);
    rc = kafka_new(&consumer->rk, RD_KAFKA_CONSUMER, conf, "consumer");
    conf = NULL;
    if (rc != 0)
        goto done;
    /* Errors and logs come out of cnx_consumer_poll. */
    rd_kafka_poll_set_consumer(consumer->rk);
    subs = rd_kafka_topic_partition_list_new((int)ntopics);
    for (i = 0; i < ntopics; i++)
        rd_kafka_topic_partition_list_add(subs, topics[i],
                                          RD_KAFKA_PARTITION_UA);
    consumer->member = 1;
    err = rd_kafka_subscribe(consumer->rk, subs);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rc = cnx_error_set(CNX_EINVAL, 0, "kafka subscribe (%s ...): %s",
                           topics[0], rd_kafka_err2str(err));
done:
    if (subs != NULL)
        rd_kafka_topic_partition_list_destroy(subs);
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (rc != 0) {
        cnx_consumer_free(consumer);
        return rc;
    }
    *out = consumer;
    return 0;
}

/* Poll, dropping what arrives (nothing is committed: it is redelivered). */
static void poll_drop(rd_kafka_t *rk)
{
    rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 50);
    if (m != NULL)
        rd_kafka_message_destroy(m);
}

/*
 * Leave the group before closing:
 *
 * - A member that has not had its first assignment yet waits for it until
 *   the deadline (a cnx_now() time).
 *   librdkafka before 2.3 aborts in rd_kafka_destroy() when the
 *   cooperative-sticky assignor was chosen (JoinGroup answered) but no
 *   assignment arrived (confluentinc/librdkafka#4312), and an assignment
 *   arriving during close is the hang below.
 * - Then unsubscribe and poll until the revoke has gone through the
 *   rebalance callback. librdkafka before 2.4 can hang for ever in
 *   rd_kafka_consumer_close() when a cooperative rebalance callback runs
 *   while the consumer is closing (confluentinc/librdkafka#4527, seen in
 *   test_kafka's teardown); with no assignment left, close has nothing to
 *   revoke. This waits at most 10 s, whatever the deadline.
 */
static void leave_group(cnx_consumer *consumer, double deadline)
{
    rd_kafka_t *rk = consumer->rk;
    double until;
    while (!consumer->assigned && cnx_now() < deadline)
        poll_drop(rk);
    if (rd_kafka_unsubscribe(rk) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return;
    until = cnx_now() + 10.0;
    while (cnx_now() < until) {
        rd_kafka_topic_partition_list_t *parts = NULL;
        int left = 1;
        poll_drop(rk);
        if (rd_kafka_assignment(rk, &parts) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            left = parts->cnt;
            rd_kafka_topic_partition_list_destroy(parts);
        }
        if (left == 0)
            return;
    }
    CNX_WARN("kafka", "consumer still assigned 10 s after unsubscribing; "
                      "closing anyway");
}

/*
 * Handles closed before their group's first assignment, which
 * rd_kafka_destroy() could abort on (#4312 above): kept, reachable, until
 * the process exits. A worker closes its consumers only to exit.
 */
static rd_kafka_t *parked[64];
static size_t nparked;
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;

static int park(rd_kafka_t *rk)
{
    int ok = 0;
    pthread_mutex_lock(&parked_lock);
    if (nparked < sizeof(parked) / sizeof(parked[0])) {
        parked[nparked++] = rk;
        ok = 1;
    }
    pthread_mutex_unlock(&parked_lock);
    return ok;
}

void cnx_consumer_close(cnx_consumer *consumer, double deadline)
{
    rd_kafka_resp_err_t err;
    if (consumer == NULL)
        return;
    if (consumer->rk != NULL) {
        /* Revokes the assignment through the rebalance callback; no commit
         * (auto commit is off), so unfinished work is redelivered. */
        if (consumer->member)
            leave_group(consumer, deadline);
        err = rd_kafka_consumer_close(consumer->rk);
        if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
            CNX_WARN("kafka", "consumer close: %s", rd_kafka_err2str(err));
        if (consumer->member && !consumer->assigned && park(consumer->rk))
            CNX_DEBUG("kafka", "consumer closed before its first assignment: "
                               "its handle is left to the process exit");
        else
            rd_kafka_destroy(consumer->rk);
    }
    watch_dispose(&consumer->watch);
    free(consumer);
}

void cnx_consumer_free(cnx_consumer *consumer)
{
    cnx_consumer_close(consumer, cnx_now() + 10.0);
}

int cnx_consumer_poll(cnx_consumer *consumer, int timeout_ms, cnx_message **out)
{
    rd_kafka_message_t *rkm;
    cnx_message *msg;
    char fatal[256];

    assert(consumer != NULL && out != NULL);
    *out = NULL;
    rkm = rd_kafka_consumer_poll(consumer->rk, timeout_ms);
    /* Messages prefetched before the cluster went away are handed out
     * first; only an empty poll asks whether it is still gone. */
    if (rkm == NULL)
        return watch_check(&consumer->watch, consumer->rk, 1);
    if (rkm->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        rd_kafka_message_destroy(rkm);
        return 0;
    }
    if (rkm->err == RD_KAFKA_RESP_ERR__FATAL) {
        rd_kafka_fatal_error(consumer->rk, fatal, sizeof(fatal));
        rd_kafka_message_destroy(rkm);
        return cnx_error_set(CNX_EIO, 0, "kafka consumer failed: %s", fatal);
    }
    if (rkm->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        watch_error(&consumer->watch, rkm->err, rd_kafka_message_errstr(rkm));
        if (watch_check(&consumer->watch, consumer->rk, 1) != 0) {
            rd_kafka_message_destroy(rkm);
            return CNX_EIO;
        }
        cnx_error_set(CNX_EIO, 1, "kafka consumer: %s%s%s",
                      rd_kafka_message_errstr(rkm),
                      rkm->rkt != NULL ? " on " : "",
                      rkm->rkt != NULL ? rd_kafka_topic_name(rkm->rkt) : "");
        rd_kafka_message_destroy(rkm);
        return CNX_EIO;
    }
    /* A message may have been prefetched before the cluster went away:
     * it proves nothing, but keeps the clock honest while messages flow
     * (never giving up with a message in hand). */
    watch_check(&consumer->watch, consumer->rk, 0);
    msg = calloc(1, sizeof(*msg));
    if (msg == NULL) {
        /* The message is redelivered: its offset was never committed. */
        rd_kafka_message_destroy(rkm);
        return cnx_error_set(CNX_ENOMEM, 1, "kafka poll: out of memory");
    }
    msg->topic = rd_kafka_topic_name(rkm->rkt);
    msg->partition = rkm->partition;
    msg->offset = rkm->offset;
    msg->key = rkm->key;
    msg->key_len = rkm->key_len;
    msg->value = rkm->payload;
    msg->len = rkm->len;
    msg->handle_ = rkm;
    *out = msg;
    if (rkm->len > CNX_KAFKA_MAX_MESSAGE ||
        rkm->key_len > CNX_KAFKA_MAX_MESSAGE) {
        /* Hand it out without its bytes so the caller can dead-letter it
         * by position and commit past it: it must not block the
         * partition. */
        msg->value = NULL;
        msg->len = 0;
        msg->key = NULL;
        msg->key_len = 0;
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "message %s [%" PRId32 "] @%" PRId64
                             ": %zu bytes, limit %u",
                             msg->topic, msg->partition, msg->offset, rkm->len,
                             CNX_KAFKA_MAX_MESSAGE);
    }
    return 0;
}

const char *cnx_message_header(const cnx_message *msg, const char *name,
                               char *buf, size_t n)
{
    rd_kafka_headers_t *hdrs = NULL;
    const void *value = NULL;
    size_t size = 0;

    assert(msg != NULL && name != NULL && buf != NULL && n > 0);
    if (msg->handle_ == NULL) {
        /* A message made by the caller: its own headers. */
        for (size_t i = msg->nheaders; i > 0 && value == NULL; i--)
            if (strcmp(msg->headers[i - 1].name, name) == 0) {
                value = msg->headers[i - 1].value;
                size = strlen(msg->headers[i - 1].value);
            }
        if (value == NULL)
            return NULL;
    } else {
        if (rd_kafka_message_headers(msg->handle_, &hdrs) !=
            RD_KAFKA_RESP_ERR_NO_ERROR)
            return NULL;
        /* The last one wins, as in Kafka's own clients. */
        if (rd_kafka_header_get_last(hdrs, name, &value, &size) !=
            RD_KAFKA_RESP_ERR_NO_ERROR)
            return NULL;
    }
    if (size >= n || (size > 0 && memchr(value, '\0', size) != NULL)) {
        cnx_error_set(CNX_ETOOBIG, 0, "header %s: %zu bytes, room for %zu",
                      name, size, n - 1);
        return NULL;
    }
    if (size > 0)
        memcpy(buf, value, size);
    buf[size] = '\0';
    return buf;
}

void cnx_message_free(cnx_message *msg)
{
    if (msg == NULL)
        return;
    if (msg->handle_ != NULL)
        rd_kafka_message_destroy(msg->handle_);
    free(msg);
}

static int consumer_pause_resume(cnx_consumer *consumer, int pause)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_resp_err_t err;
    int rc = 0;

    assert(consumer != NULL);
    err = rd_kafka_assignment(consumer->rk, &parts);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        err = pause ? rd_kafka_pause_partitions(consumer->rk, parts)
                    : rd_kafka_resume_partitions(consumer->rk, parts);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rc = cnx_error_set(CNX_EIO, 1, "kafka %s: %s",
                           pause ? "pause" : "resume", rd_kafka_err2str(err));
    else
        consumer->paused = pause;
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    return rc;
}

int cnx_consumer_pause(cnx_consumer *consumer)
{
    return consumer_pause_resume(consumer, 1);
}

int cnx_consumer_resume(cnx_consumer *consumer)
{
    return consumer_pause_resume(consumer, 0);
}

int cnx_consumer_assignment_count(cnx_consumer *consumer)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    rd_kafka_resp_err_t err;
    int cnt;

    assert(consumer != NULL);
    err = rd_kafka_assignment(consumer->rk, &parts);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        cnt = cnx_error_set(CNX_EIO, 1, "kafka assignment: %s",
                            rd_kafka_err2str(err));
    else
        cnt = parts->cnt;
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    return cnt;
}

int cnx_consumer_commit(cnx_consumer *consumer, const cnx_message *msg)
{
    rd_kafka_topic_partition_list_t *offsets;
    rd_kafka_topic_partition_t *tp;
    rd_kafka_resp_err_t err;
    int rc = 0;

    assert(consumer != NULL && msg != NULL && msg->offset >= 0);
    offsets = rd_kafka_topic_partition_list_new(1);
    tp = rd_kafka_topic_partition_list_add(offsets, msg->topic, msg->partition);
    tp->offset = msg->offset + 1;
    err = rd_kafka_commit(consumer->rk, offsets, 0 /* synchronous */);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
        err = tp->err;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rc = cnx_error_set(CNX_EIO, err != RD_KAFKA_RESP_ERR__FATAL,
                           "kafka commit %s [%" PRId32 "] @%" PRId64 ": %s",
                           msg->topic, msg->partition, msg->offset + 1,
                           rd_kafka_err2str(err));
    rd_kafka_topic_partition_list_destroy(offsets);
    return rc;
}

/* ---- admin ------------------------------------------------------------ */

/* Names the cluster lacks, borrowed from topics; *nmissing set. */
static int admin_missing(rd_kafka_t *rk, const char *const *topics,
                         size_t ntopics, const char **missing, size_t *nmissing)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err;
    size_t i;
    int j;

    *nmissing = 0;
    err = rd_kafka_metadata(rk, 1, NULL, &md, ADMIN_TIMEOUT_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        return cnx_error_set(CNX_EIO, 1, "kafka metadata: %s",
                             rd_kafka_err2str(err));
    for (i = 0; i < ntopics; i++) {
        int found = 0;
        for (j = 0; j < md->topic_cnt && !found; j++)
            found = md->topics[j].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                    strcmp(md->topics[j].topic, topics[i]) == 0;
        if (!found)
            missing[(*nmissing)++] = topics[i];
    }
    rd_kafka_metadata_destroy(md);
    return 0;
}

/*
 * Topics that exist already are left alone without asking for the Admin
 * API, so that clients without the right to create topics (and clusters
 * without a controller, like librdkafka's mock) can call this on every
 * start.
 */
int cnx_kafka_create_topics(const cnx_kafka_opts *opts,
                            const char *const *topics, size_t ntopics,
                            int partitions)
{
    rd_kafka_NewTopic_t **nts = NULL;
    rd_kafka_AdminOptions_t *aopts = NULL;
    rd_kafka_queue_t *queue = NULL;
    rd_kafka_event_t *ev = NULL;
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_t *rk = NULL;
    const rd_kafka_CreateTopics_result_t *res;
    const rd_kafka_topic_result_t **results;
    const char **missing = NULL;
    char errstr[512], max_bytes[24];
    size_t i, nres, nmissing = 0;
    int rc;

    assert(topics != NULL || ntopics == 0);
    if (partitions < 1 || partitions > 10000)
        return cnx_error_set(CNX_EINVAL, 0, "kafka: %d partitions", partitions);
    if (ntopics == 0)
        return 0;
    snprintf(max_bytes, sizeof(max_bytes), "%u",
             CNX_KAFKA_MAX_MESSAGE + KAFKA_FRAMING);
    rc = conf_new(&conf, opts, NULL);
    if (rc != 0)
        return rc;
    rc = kafka_new(&rk, RD_KAFKA_PRODUCER, conf, "admin client");
    if (rc != 0)
        return rc;
    missing = calloc(ntopics, sizeof(*missing));
    nts = calloc(ntopics, sizeof(*nts));
    if (missing == NULL || nts == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "kafka: out of memory");
        goto done;
    }
    rc = admin_missing(rk, topics, ntopics, missing, &nmissing);
    if (rc != 0 || nmissing == 0)
        goto done;
    for (i = 0; i < nmissing; i++) {
        nts[i] = rd_kafka_NewTopic_new(missing[i], partitions, -1, errstr,
                                       sizeof(errstr));
        if (nts[i] == NULL) {
            rc = cnx_error_set(CNX_EINVAL, 0, "topic %s: %s", missing[i],
                               errstr);
            goto done;
        }
        /* Brokers default to about 1 MB; cnx messages may be larger. */
        rd_kafka_NewTopic_set_config(nts[i], "max.message.bytes", max_bytes);
    }
    aopts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_request_timeout(aopts, ADMIN_TIMEOUT_MS, NULL, 0);
    rd_kafka_AdminOptions_set_operation_timeout(aopts, ADMIN_TIMEOUT_MS, NULL,
                                                0);
    queue = rd_kafka_queue_new(rk);
    rd_kafka_CreateTopics(rk, nts, nmissing, aopts, queue);
    ev = rd_kafka_queue_poll(queue, ADMIN_TIMEOUT_MS + 5000);
    if (ev == NULL) {
        rc = cnx_error_set(CNX_EIO, 1, "kafka create topics: timed out");
        goto done;
    }
    if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = cnx_error_set(CNX_EIO, 1, "kafka create topics: %s",
                           rd_kafka_event_error_string(ev));
        goto done;
    }
    res = rd_kafka_event_CreateTopics_result(ev);
    if (res == NULL) {
        rc = cnx_error_set(CNX_EIO, 1, "kafka create topics: no result");
        goto done;
    }
    results = rd_kafka_CreateTopics_result_topics(res, &nres);
    for (i = 0; i < nres; i++) {
        rd_kafka_resp_err_t err = rd_kafka_topic_result_error(results[i]);
        const char *msg = rd_kafka_topic_result_error_string(results[i]);
        /* Another client may have made it since the metadata call. */
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR ||
            err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
            continue;
        rc = cnx_error_set(CNX_EIO, 0, "kafka create topic %s: %s",
                           rd_kafka_topic_result_name(results[i]),
                           msg != NULL ? msg : rd_kafka_err2str(err));
        goto done;
    }
done:
    if (ev != NULL)
        rd_kafka_event_destroy(ev);
    if (queue != NULL)
        rd_kafka_queue_destroy(queue);
    if (aopts != NULL)
        rd_kafka_AdminOptions_destroy(aopts);
    if (nts != NULL) {
        for (i = 0; i < nmissing; i++) {
            if (nts[i] != NULL)
                rd_kafka_NewTopic_destroy(nts[i]);
        }
        free(nts);
    }
    free(missing);
    rd_kafka_destroy(rk);
    return rc;
}

void cnx_producer_prepare(cnx_producer *producer, const char *const *topics,
                          size_t ntopics, int timeout_ms)
{
    for (size_t i = 0; i < ntopics; i++) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_topic_t *rkt = rd_kafka_topic_new(producer->rk, topics[i],
                                                   NULL);
        if (rkt == NULL)
            continue;
        if (rd_kafka_metadata(producer->rk, 0, rkt, &md, timeout_ms) ==
                RD_KAFKA_RESP_ERR_NO_ERROR &&
            md != NULL)
            rd_kafka_metadata_destroy(md);
        rd_kafka_topic_destroy(rkt);
    }
}

/* ---- readers ------------------------------------------------------------ */

/* Partition count of topic, from the cluster's metadata. */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int *count)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    rd_kafka_resp_err_t err;
    int rc = 0;

    if (rkt == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "kafka: out of memory");
    err = rd_kafka_metadata(rk, 0, rkt, &md, ADMIN_TIMEOUT_MS);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rc = cnx_error_set(CNX_EIO, 1, "kafka metadata of %s: %s", topic,
                           rd_kafka_err2str(err));
    else if (md->topic_cnt != 1 ||
             md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
             md->topics[0].partition_cnt < 1)
        rc = cnx_error_set(CNX_EIO, 1, "kafka: topic %s: %s", topic,
                           md->topic_cnt == 1
                               ? rd_kafka_err2str(md->topics[0].err)
                               : "not in the cluster's metadata");
    else
        *count = md->topics[0].partition_cnt;
    if (md != NULL)
        rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    return rc;
}

int cnx_reader_new(cnx_consumer **out, const cnx_kafka_opts *opts,
                   const char *const *topics, size_t ntopics,
                   cnx_reader_start_fn start, void *ctx)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    cnx_consumer *consumer = NULL;
    rd_kafka_conf_t *conf = NULL;
    rd_kafka_resp_err_t err;
    char group[64];
    int rc;

    assert(out != NULL && topics != NULL && ntopics > 0);
    *out = NULL;
    consumer = calloc(1, sizeof(*consumer));
    if (consumer == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "kafka reader: out of memory");
    watch_init(&consumer->watch, opts);
    /* librdkafka wants a group id for a consumer; a reader never joins or
     * commits to it. */
    snprintf(group, sizeof(group), "cnx.reader.%ld", (long)getpid());
    rc = consumer_conf_new(&conf, opts, group, 0);
    if (rc != 0)
        goto done;
    rd_kafka_conf_set_opaque(conf, consumer);
    rd_kafka_conf_set_error_cb(conf, consumer_error_cb);
    rc = kafka_new(&consumer->rk, RD_KAFKA_CONSUMER, conf, "reader");
    conf = NULL;
    if (rc != 0)
        goto done;
    rd_kafka_poll_set_consumer(consumer->rk);
    parts = rd_kafka_topic_partition_list_new(16);
    for (size_t i = 0; rc == 0 && i < ntopics; i++) {
        int count = 0;
        rc = topic_partitions(consumer->rk, topics[i], &count);
        for (int p = 0; rc == 0 && p < count; p++) {
            rd_kafka_topic_partition_t *tp =
                rd_kafka_topic_partition_list_add(parts, topics[i], p);
            int64_t at = start ? start(ctx, topics[i], p)
                               : CNX_OFFSET_BEGINNING;
            tp->offset = at == CNX_OFFSET_END         ? RD_KAFKA_OFFSET_END
                         : at == CNX_OFFSET_BEGINNING ? RD_KAFKA_OFFSET_BEGINNING
                                                      : at;
        }
    }
    if (rc != 0)
        goto done;
    err = rd_kafka_assign(consumer->rk, parts);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        rc = cnx_error_set(CNX_EIO, 1, "kafka reader: assign: %s",
                           rd_kafka_err2str(err));
done:
    if (parts != NULL)
        rd_kafka_topic_partition_list_destroy(parts);
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (rc != 0) {
        cnx_consumer_free(consumer);
        return rc;
    }
    *out = consumer;
    return 0;
}

int cnx_reader_ends(cnx_consumer *reader, cnx_position **out, size_t *n,
                    int timeout_ms)
{
    rd_kafka_topic_partition_list_t *parts = NULL;
    cnx_position *pos = NULL;
    rd_kafka_resp_err_t err;
    int rc = 0;

    *out = NULL;
    *n = 0;
    if (rd_kafka_assignment(reader->rk, &parts) != RD_KAFKA_RESP_ERR_NO_ERROR)
        return cnx_error_set(CNX_EIO, 1, "kafka reader: no assignment");
    pos = calloc((size_t)parts->cnt + 1, sizeof(*pos));
    if (pos == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "kafka reader: out of memory");
        goto done;
    }
    /* One ListOffsets request per broker for every partition ("latest" is
     * timestamp -1), rather than a watermark query per partition, each of
     * which would wait behind the reader's long-polling fetch. */
    for (int i = 0; i < parts->cnt; i++)
        parts->elems[i].offset = RD_KAFKA_OFFSET_END;
    err = rd_kafka_offsets_for_times(reader->rk, parts, timeout_ms);
    for (int i = 0; err == RD_KAFKA_RESP_ERR_NO_ERROR && i < parts->cnt; i++)
        if (parts->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR ||
            parts->elems[i].offset < 0)
            err = parts->elems[i].err != RD_KAFKA_RESP_ERR_NO_ERROR
                      ? parts->elems[i].err
                      : RD_KAFKA_RESP_ERR__BAD_MSG;
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rc = cnx_error_set(CNX_EIO, 1, "kafka: ends of %d partition(s): %s",
                           parts->cnt, rd_kafka_err2str(err));
        goto done;
    }
    for (int i = 0; i < parts->cnt; i++) {
        snprintf(pos[i].topic, sizeof(pos[i].topic), "%s",
                 parts->elems[i].topic);
        pos[i].partition = parts->elems[i].partition;
        pos[i].offset = parts->elems[i].offset;
    }
    *out = pos;
    *n = (size_t)parts->cnt;
    pos = NULL;
done:
    free(pos);
    rd_kafka_topic_partition_list_destroy(parts);
    return rc;
}

unsigned cnx_consumer_reconnects(cnx_consumer *consumer)
{
    unsigned n;
    assert(consumer != NULL);
    pthread_mutex_lock(&consumer->watch.lock);
    n = consumer->watch.reconnects;
    pthread_mutex_unlock(&consumer->watch.lock);
    return n;
}

int cnx_consumer_joined(const cnx_consumer *consumer)
{
    assert(consumer != NULL);
    return consumer->assigned;
}

double cnx_consumer_unreachable_s(cnx_consumer *consumer)
{
    double down;
    assert(consumer != NULL);
    pthread_mutex_lock(&consumer->watch.lock);
    down = consumer->watch.down_since;
    pthread_mutex_unlock(&consumer->watch.lock);
    return down > 0 ? cnx_now() - down : 0;
}

int cnx_consumer_cluster_id(cnx_consumer *consumer, char *buf, size_t n,
                            int timeout_ms)
{
    char *id;
    int rc = 0;

    assert(consumer != NULL && buf != NULL && n > 0);
    id = rd_kafka_clusterid(consumer->rk, timeout_ms);
    if (id == NULL || id[0] == '\0')
        rc = cnx_error_set(CNX_EIO, 1, "kafka: no cluster id from %s within "
                           "%d ms", consumer->watch.bootstrap, timeout_ms);
    else if (strlen(id) >= n)
        rc = cnx_error_set(CNX_ERANGE, 0, "kafka: cluster id of %zu bytes",
                           strlen(id));
    else
        snprintf(buf, n, "%s", id);
    if (id != NULL)
        rd_kafka_mem_free(consumer->rk, id);
    return rc;
}
