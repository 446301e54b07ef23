/*
 * broker.c - librdkafka's mock cluster with cnx's topics.
 *
 * The mock cluster lives inside a librdkafka handle (a producer that never
 * produces) and serves the Kafka protocol on loopback ports from its own
 * thread, so real clients (cnx's, kcat) talk to it as to any cluster.
 * Topics are made directly in the mock, before the bootstrap list is given
 * out, so a client never sees a cnx topic missing. Messages live in memory
 * only. cnx_broker_control injects faults through the mock's own API
 * (request errors, brokers down and up, leader moves, latency), one text
 * command at a time. Threading: one thread makes, reads, controls and
 * frees a cnx_broker; the cluster itself runs on librdkafka's threads.
 */
#include "cnx/broker.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "cnx/error.h"
#include "cnx/kafka.h"
#include "cnx/log.h"

struct cnx_broker {
    rd_kafka_t *rk; /* owns mcluster */
    rd_kafka_mock_cluster_t *mcluster;
    size_t ntopics;
};

static int broker_topic(cnx_broker *broker, const char *topic, int partitions,
                        int replicas)
{
    rd_kafka_resp_err_t err;
    err = rd_kafka_mock_topic_create(broker->mcluster, topic, partitions,
                                     replicas);
    /* The cluster listens from its creation: a client that knew this
     * address (cnx-broker --port, started again) may have had the topic
     * made already by asking for its metadata (the mock creates topics
     * on request, with 4 partitions). */
    if (err == RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
        CNX_WARN("broker", "topic %s was made by a client's request before "
                 "cnx-broker made it (4 partitions)", topic);
        err = RD_KAFKA_RESP_ERR_NO_ERROR;
    }
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        return cnx_error_set(CNX_EIO, 0, "mock topic %s: %s", topic,
                             rd_kafka_err2str(err));
    broker->ntopics++;
    return 0;
}

/*
 * Make both task topics of each stage in the comma-separated list, or
 * only check the list when broker is NULL.
 */
static int broker_stage_topics(cnx_broker *broker, const char *stages,
                               int partitions, int replicas)
{
    char stage[72], topic[128];
    const char *p = stages;
    size_t n = 0;
    int rc;

    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == 0 || len >= sizeof(stage))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "stage list \"%.64s\": empty or overlong "
                                 "stage name",
                                 stages);
        if (++n > CNX_BROKER_MAX_STAGES)
            return cnx_error_set(CNX_EINVAL, 0, "more than %d stages",
                                 CNX_BROKER_MAX_STAGES);
        memcpy(stage, p, len);
        stage[len] = '\0';
        rc = cnx_topic_tasks(topic, sizeof(topic), stage, 0);
        if (rc == 0 && broker != NULL)
            rc = broker_topic(broker, topic, partitions, replicas);
        if (rc == 0)
            rc = cnx_topic_tasks(topic, sizeof(topic), stage, 1);
        if (rc == 0 && broker != NULL)
            rc = broker_topic(broker, topic, partitions, replicas);
        if (rc != 0)
            return rc;
        if (comma == NULL)
            return 0;
        p = comma + 1;
    }
}

/* librdkafka log levels are syslog's (0 emerg .. 7 debug). */
static void broker_log_cb(const rd_kafka_t *rk, int level, const char *fac,
                          const char *buf)
{
    (void)rk;
    cnx_log(level <= 3 ? CNX_LOG_ERROR : CNX_LOG_WARN, "broker", "%s: %s", fac,
            buf);
}

int cnx_broker_new(cnx_broker **out, int brokers, int partitions,
                   const char *stages)
{
    static const char *const fixed[] = {CNX_TOPIC_REQUESTS, CNX_TOPIC_EVENTS,
                                        CNX_TOPIC_LINEAGE, CNX_TOPIC_DLQ};
    cnx_broker *broker = NULL;
    rd_kafka_conf_t *conf = NULL;
    char errstr[512];
    int replicas, rc = 0;
    size_t i;

    assert(out != NULL);
    *out = NULL;
    if (brokers < 1 || brokers > CNX_BROKER_MAX_BROKERS)
        return cnx_error_set(CNX_EINVAL, 0, "broker count %d: want 1..%d",
                             brokers, CNX_BROKER_MAX_BROKERS);
    if (partitions < 1 || partitions > CNX_BROKER_MAX_PARTITIONS)
        return cnx_error_set(CNX_EINVAL, 0, "partition count %d: want 1..%d",
                             partitions, CNX_BROKER_MAX_PARTITIONS);
    if (stages == NULL)
        stages = CNX_BROKER_DEFAULT_STAGES;
    /* Check the whole list before starting anything. */
    rc = broker_stage_topics(NULL, stages, partitions, 0);
    if (rc != 0)
        return rc;
    broker = calloc(1, sizeof(*broker));
    if (broker == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "broker: out of memory");
    conf = rd_kafka_conf_new();
    /* The handle only hosts the cluster: it connects nowhere itself, so
     * its notice about having no bootstrap list (level 5) is dropped. */
    rd_kafka_conf_set_log_cb(conf, broker_log_cb);
    /* CNX_BROKER_DEBUG=mock (librdkafka debug contexts) logs what the
     * mock's group coordinators do, at level 7. */
    if ((getenv("CNX_BROKER_DEBUG") != NULL &&
         rd_kafka_conf_set(conf, "debug", getenv("CNX_BROKER_DEBUG"), errstr,
                           sizeof(errstr)) != RD_KAFKA_CONF_OK) ||
        rd_kafka_conf_set(conf, "log_level",
                          getenv("CNX_BROKER_DEBUG") != NULL ? "7" : "4",
                          errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
        rc = cnx_error_set(CNX_EIO, 0, "mock cluster: %s", errstr);
        goto done;
    }
    broker->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (broker->rk == NULL) {
        rc = cnx_error_set(CNX_EIO, 0, "mock cluster handle: %s", errstr);
        goto done;
    }
    conf = NULL;
    broker->mcluster = rd_kafka_mock_cluster_new(broker->rk, brokers);
    if (broker->mcluster == NULL) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot start the mock cluster");
        goto done;
    }
    replicas = brokers < 3 ? brokers : 3;
    for (i = 0; rc == 0 && i < sizeof(fixed) / sizeof(fixed[0]); i++)
        rc = broker_topic(broker, fixed[i], partitions, replicas);
    if (rc == 0)
        rc = broker_stage_topics(broker, stages, partitions, replicas);
done:
    if (conf != NULL)
        rd_kafka_conf_destroy(conf);
    if (rc != 0) {
        cnx_broker_free(broker);
        return rc;
    }
    *out = broker;
    return 0;
}

const char *cnx_broker_bootstraps(const cnx_broker *broker)
{
    assert(broker != NULL);
    return rd_kafka_mock_cluster_bootstraps(broker->mcluster);
}

size_t cnx_broker_topic_count(const cnx_broker *broker)
{
    assert(broker != NULL);
    return broker->ntopics;
}

/* ---- fault injection ---------------------------------------------------- */

/* Kafka API keys by name (the ones cnx's clients use, and a few more). */
static const struct {
    const char *name;
    int16_t key;
} api_names[] = {
    {"Produce", 0},          {"Fetch", 1},           {"ListOffsets", 2},
    {"Metadata", 3},         {"OffsetCommit", 8},    {"OffsetFetch", 9},
    {"FindCoordinator", 10}, {"JoinGroup", 11},      {"Heartbeat", 12},
    {"LeaveGroup", 13},      {"SyncGroup", 14},      {"DescribeGroups", 15},
    {"ListGroups", 16},      {"ApiVersions", 18},    {"CreateTopics", 19},
    {"InitProducerId", 22},  {"OffsetForLeaderEpoch", 23},
};

#define CONTROL_MAX_WORDS 64
#define CONTROL_MAX_ERRORS 10000

/* A whole decimal integer in [lo, hi]. */
static int control_int(const char *text, long lo, long hi, long *out)
{
    char *end = NULL;
    long v;
    errno = 0;
    v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int control_api(const char *word, int16_t *key)
{
    long v;
    for (size_t i = 0; i < sizeof(api_names) / sizeof(api_names[0]); i++)
        if (strcasecmp(word, api_names[i].name) == 0) {
            *key = api_names[i].key;
            return 0;
        }
    if (control_int(word, 0, 999, &v) == 0) {
        *key = (int16_t)v;
        return 0;
    }
    return cnx_error_set(CNX_EINVAL, 0, "unknown Kafka API '%.64s'", word);
}

static int control_error(const char *word, rd_kafka_resp_err_t *err)
{
    const struct rd_kafka_err_desc *descs = NULL;
    size_t n = 0;
    long v;
    if (control_int(word, -199, 1000, &v) == 0) {
        *err = (rd_kafka_resp_err_t)v;
        return 0;
    }
    rd_kafka_get_err_descs(&descs, &n);
    for (size_t i = 0; i < n; i++)
        if (descs[i].name != NULL && strcasecmp(word, descs[i].name) == 0) {
            *err = descs[i].code;
            return 0;
        }
    return cnx_error_set(CNX_EINVAL, 0, "unknown Kafka error '%.64s'", word);
}

/* "ERROR" or "ERROR*N" appended n times to errs. */
static int control_errors(char **words, int nwords, rd_kafka_resp_err_t *errs,
                          size_t *n)
{
    *n = 0;
    for (int i = 0; i < nwords; i++) {
        char *star = strchr(words[i], '*');
        long times = 1;
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        if (star != NULL) {
            *star = '\0';
            if (control_int(star + 1, 1, CONTROL_MAX_ERRORS, &times) != 0)
                return cnx_error_set(CNX_EINVAL, 0, "bad repeat '*%.32s'",
                                     star + 1);
        }
        if (control_error(words[i], &err) != 0)
            return CNX_EINVAL;
        if (*n + (size_t)times > CONTROL_MAX_ERRORS)
            return cnx_error_set(CNX_EINVAL, 0, "more than %d errors",
                                 CONTROL_MAX_ERRORS);
        while (times-- > 0)
            errs[(*n)++] = err;
    }
    return 0;
}

static int control_done(rd_kafka_resp_err_t err, const char *what)
{
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
        return cnx_error_set(CNX_EIO, 0, "%s: %s", what,
                             rd_kafka_err2str(err));
    return 0;
}

int cnx_broker_control(cnx_broker *broker, const char *command)
{
    char line[CNX_BROKER_CONTROL_MAX + 1], *words[CONTROL_MAX_WORDS], *p;
    rd_kafka_resp_err_t *errs = NULL;
    int nwords = 0, rc;
    long id, part;
    int16_t api;
    size_t n;

    assert(broker != NULL && command != NULL);
    if (strlen(command) > CNX_BROKER_CONTROL_MAX)
        return cnx_error_set(CNX_EINVAL, 0, "command over %d bytes",
                             CNX_BROKER_CONTROL_MAX);
    memcpy(line, command, strlen(command) + 1);
    for (p = line; *p != '\0';) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            *p++ = '\0';
        if (*p == '\0')
            break;
        if (nwords == CONTROL_MAX_WORDS)
            return cnx_error_set(CNX_EINVAL, 0, "more than %d words",
                                 CONTROL_MAX_WORDS);
        words[nwords++] = p;
        while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\r' &&
               *p != '\n')
            p++;
    }
    if (nwords == 0)
        return cnx_error_set(CNX_EINVAL, 0, "empty command");
    if (strcmp(words[0], "request-errors") == 0 && nwords >= 3) {
        if (control_api(words[1], &api) != 0)
            return CNX_EINVAL;
        errs = calloc(CONTROL_MAX_ERRORS, sizeof(*errs));
        if (errs == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        rc = control_errors(words + 2, nwords - 2, errs, &n);
        if (rc == 0)
            rd_kafka_mock_push_request_errors_array(broker->mcluster, api, n,
                                                    errs);
        free(errs);
        return rc;
    }
    if (strcmp(words[0], "clear") == 0 && nwords == 2) {
        if (control_api(words[1], &api) != 0)
            return CNX_EINVAL;
        rd_kafka_mock_clear_request_errors(broker->mcluster, api);
        return 0;
    }
    if ((strcmp(words[0], "down") == 0 || strcmp(words[0], "up") == 0) &&
        nwords == 2) {
        if (control_int(words[1], 1, CNX_BROKER_MAX_BROKERS, &id) != 0)
            return cnx_error_set(CNX_EINVAL, 0, "%s: bad broker id '%.32s'",
                                 words[0], words[1]);
        return control_done(
            words[0][0] == 'd'
                ? rd_kafka_mock_broker_set_down(broker->mcluster, (int32_t)id)
                : rd_kafka_mock_broker_set_up(broker->mcluster, (int32_t)id),
            words[0]);
    }
    if (strcmp(words[0], "leader") == 0 && nwords == 4) {
        if (control_int(words[2], 0, CNX_BROKER_MAX_PARTITIONS - 1, &part) !=
                0 ||
            control_int(words[3], -1, CNX_BROKER_MAX_BROKERS, &id) != 0 ||
            id == 0)
            return cnx_error_set(CNX_EINVAL, 0, "leader: want TOPIC "
                                 "PARTITION BROKER-ID (-1: none)");
        return control_done(rd_kafka_mock_partition_set_leader(
                                broker->mcluster, words[1], (int32_t)part,
                                (int32_t)id),
                            "leader");
    }
    if (strcmp(words[0], "rtt") == 0 && nwords == 3) {
        long ms;
        if (control_int(words[1], 1, CNX_BROKER_MAX_BROKERS, &id) != 0 ||
            control_int(words[2], 0, 600000, &ms) != 0)
            return cnx_error_set(CNX_EINVAL, 0, "rtt: want BROKER-ID MS");
        return control_done(rd_kafka_mock_broker_set_rtt(broker->mcluster,
                                                         (int32_t)id, (int)ms),
                            "rtt");
    }
    return cnx_error_set(CNX_EINVAL, 0, "unknown command '%.64s' or wrong "
                         "number of words (request-errors API ERROR[*N]..., "
                         "clear API, down ID, up ID, leader TOPIC PARTITION "
                         "ID, rtt ID MS)", words[0]);
}

void cnx_broker_free(cnx_broker *broker)
{
    if (broker == NULL)
        return;
    if (broker->mcluster != NULL)
        rd_kafka_mock_cluster_destroy(broker->mcluster);
    if (broker->rk != NULL)
        rd_kafka_destroy(broker->rk);
    free(broker);
}
