/*
 * broker.c - librdkafka's mock cluster with cnx's topics.
 *
 * The mock cluster lives inside a librdkafka handle (a producer that never
 * produces) and serves the Kafka protocol on loopback ports from its own
 * thread, so real clients (cnx's, kcat) talk to it as to any cluster.
 * Topics are made directly in the mock, before the bootstrap list is given
 * out, so a client never sees a cnx topic missing. Messages live in memory
 * only. Threading: one thread makes, reads and frees a cnx_broker; the
 * cluster itself runs on librdkafka's threads.
 */
#include "cnx/broker.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
