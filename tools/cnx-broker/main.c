/*
 * cnx-broker - a development Kafka cluster: librdkafka's mock cluster with
 * cnx's topics, in memory, on loopback.
 *
 * Thin: arguments -> cnx_broker_new -> print the bootstrap list as the
 * first line of stdout -> wait for SIGTERM or SIGINT -> exit 0 (1 if the
 * cluster cannot start, 2 for bad usage). The signals are blocked before
 * any thread starts and taken with sigwait, so no work runs in a handler.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/broker.h"
#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/log.h"

#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cnx-broker [--brokers N] [--partitions N]\n"
            "                  [--stages a,b,...]\n"
            "\n"
            "Run an in-memory Kafka cluster (librdkafka's mock cluster) on\n"
            "loopback for development and tests. Prints its bootstrap list\n"
            "as the first line of stdout, then serves until SIGTERM or\n"
            "SIGINT. Topics: cnx.requests, cnx.events, cnx.lineage, cnx.dlq,\n"
            "and cnx.tasks.<stage> and cnx.tasks.<stage>.urgent per stage.\n"
            "Nothing is kept after exit.\n"
            "\n"
            "  --brokers N        brokers in the cluster, 1..%d (default 1)\n"
            "  --partitions N     partitions per topic, 1..%d (default 4)\n"
            "  --stages a,b,...   stages with task topics (default\n"
            "                     %s)\n"
            "  --help             this text\n"
            "\n"
            "Environment: CNX_BROKER_DEBUG=mock logs what the group\n"
            "coordinators do (librdkafka debug contexts) to stderr.\n"
            "\n"
            "Exit status: 0 stopped by a signal, 1 failed, 2 bad arguments.\n",
            CNX_BROKER_MAX_BROKERS, CNX_BROKER_MAX_PARTITIONS,
            CNX_BROKER_DEFAULT_STAGES);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "cnx-broker: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see cnx-broker --help)\n");
    return EXIT_USAGE;
}

/* A decimal integer in [lo, hi], the whole of text. */
static int parse_int(const char *text, long lo, long hi, int *out)
{
    int64_t v;
    if (cnx_cli_int(text, lo, hi, &v) != 0)
        return -1;
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const valued[] = {"--brokers", "--partitions",
                                         "--stages"};
    const char *values[3] = {NULL, NULL, NULL};
    int brokers = 1, partitions = 4, i, k, sig, rc;
    cnx_broker *broker = NULL;
    sigset_t stop;

    for (i = 1; i < argc; i++) {
        int matched = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        for (k = 0; k < 3 && !matched; k++) {
            const char *value = NULL;
            int m = cnx_cli_option(argc, argv, &i, valued[k], &value);
            if (m < 0)
                return bad_usage("%s needs a value", valued[k]);
            if (m > 0) {
                if (values[k] != NULL)
                    return bad_usage("%s given twice", valued[k]);
                values[k] = value;
                matched = 1;
            }
        }
        if (!matched)
            return bad_usage("unknown argument '%.100s'", argv[i]);
    }
    if (values[0] != NULL &&
        parse_int(values[0], 1, CNX_BROKER_MAX_BROKERS, &brokers) != 0)
        return bad_usage("--brokers '%.100s' is not an integer 1..16",
                         values[0]);
    if (values[1] != NULL &&
        parse_int(values[1], 1, CNX_BROKER_MAX_PARTITIONS, &partitions) != 0)
        return bad_usage("--partitions '%.100s' is not an integer 1..1024",
                         values[1]);

    /* Before any librdkafka thread exists, so they all inherit the mask. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) {
        fprintf(stderr, "cnx-broker: cannot block signals\n");
        return 1;
    }
    rc = cnx_broker_new(&broker, brokers, partitions, values[2]);
    if (rc == CNX_EINVAL)
        return bad_usage("%s", cnx_error_last()->message);
    if (rc != 0) {
        fprintf(stderr, "cnx-broker: %s\n", cnx_error_last()->message);
        return 1;
    }
    printf("%s\n", cnx_broker_bootstraps(broker));
    if (fflush(stdout) != 0)
        CNX_WARN("cnx-broker", "cannot write the bootstrap list");
    CNX_INFO("cnx-broker",
             "%d broker(s), %zu topics of %d partition(s) "
             "at %s",
             brokers, cnx_broker_topic_count(broker), partitions,
             cnx_broker_bootstraps(broker));

    for (;;) {
        rc = sigwait(&stop, &sig);
        if (rc == 0)
            break;
        if (rc != EINTR) {
            CNX_ERROR("cnx-broker", "sigwait: %s", strerror(rc));
            cnx_broker_free(broker);
            return 1;
        }
    }
    CNX_INFO("cnx-broker", "%s: stopping",
             sig == SIGTERM ? "SIGTERM" : "SIGINT");
    cnx_broker_free(broker);
    return 0;
}
