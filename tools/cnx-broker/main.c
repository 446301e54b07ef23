/*
 * cnx-broker - a development Kafka cluster: librdkafka's mock cluster with
 * cnx's topics, in memory, on loopback.
 *
 * Thin: arguments -> cnx_broker_new -> print the bootstrap list as the
 * first line of stdout -> wait for SIGTERM or SIGINT -> exit 0 (1 if the
 * cluster cannot start, 2 for bad usage). The signals are blocked before
 * any thread starts and taken with sigwait, so no work runs in a handler.
 * With --control, a thread reads fault-injection commands line by line
 * (cnx_broker_control) and says on stderr what each did; the main thread
 * takes the same lock before it frees the cluster.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/broker.h"
#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "port.h"

#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cnx-broker [--brokers N] [--partitions N]\n"
            "                  [--stages a,b,...] [--port P]\n"
            "                  [--control PATH]\n"
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
            "  --port P           broker 1 listens on port P, broker 2 on\n"
            "                     P + 1, ... (default: free ports), so a\n"
            "                     broker started again keeps its address\n"
            "  --control PATH     read fault-injection commands, one per\n"
            "                     line, from PATH (a FIFO, made if missing;\n"
            "                     '-': stdin) and report each on stderr\n"
            "                     (\"cnx-broker: control: LINE: ok\" or the\n"
            "                     error). Commands, through librdkafka's\n"
            "                     mock API:\n"
            "                       request-errors API ERROR[*N] ...\n"
            "                         the next API requests (Produce,\n"
            "                         Fetch, Metadata, OffsetCommit,\n"
            "                         JoinGroup, ... or a number) fail with\n"
            "                         these Kafka errors (a name such as\n"
            "                         NOT_LEADER_FOR_PARTITION, or a\n"
            "                         number), each N times, in order\n"
            "                       clear API      drop API's queued errors\n"
            "                       down ID | up ID  broker ID stops / starts\n"
            "                         listening (connections closed)\n"
            "                       leader TOPIC PARTITION ID  move a\n"
            "                         partition's leader (-1: none)\n"
            "                       rtt ID MS      broker ID answers late\n"
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

/* --control: the command source and the cluster it drives. */
typedef struct control {
    FILE *in;
    cnx_broker *broker; /* NULL once stopping; under lock */
    pthread_mutex_t lock;
} control;

/* Run each command line as it comes; one line on stderr for each. */
static void *control_main(void *arg)
{
    control *ctl = arg;
    char line[CNX_BROKER_CONTROL_MAX + 2];

    while (fgets(line, sizeof(line), ctl->in) != NULL) {
        size_t len = strlen(line);
        int rc;
        if (len > 0 && line[len - 1] == '\n')
            line[--len] = '\0';
        else if (len == sizeof(line) - 1) {
            int ch;
            while ((ch = fgetc(ctl->in)) != EOF && ch != '\n')
                ;
            fprintf(stderr, "cnx-broker: control: line over %d bytes\n",
                    CNX_BROKER_CONTROL_MAX);
            continue;
        }
        if (strspn(line, " \t\r") == len || line[strspn(line, " \t")] == '#')
            continue;
        pthread_mutex_lock(&ctl->lock);
        rc = ctl->broker != NULL ? cnx_broker_control(ctl->broker, line) : 0;
        if (ctl->broker != NULL)
            fprintf(stderr, "cnx-broker: control: %s: %s\n", line,
                    rc == 0 ? "ok" : cnx_error_last()->message);
        pthread_mutex_unlock(&ctl->lock);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    static const char *const valued[] = {"--brokers", "--partitions",
                                         "--stages", "--port", "--control"};
    const char *values[5] = {NULL, NULL, NULL, NULL, NULL};
    int brokers = 1, partitions = 4, port = 0, i, k, sig, rc;
    pthread_t reader;
    control ctl = {NULL, NULL, PTHREAD_MUTEX_INITIALIZER};
    cnx_broker *broker = NULL;
    sigset_t stop;

    for (i = 1; i < argc; i++) {
        int matched = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        for (k = 0; k < 5 && !matched; k++) {
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
    if (values[3] != NULL &&
        (parse_int(values[3], 1024, 65535, &port) != 0 ||
         port + brokers - 1 > 65535))
        return bad_usage("--port '%.100s' is not a port 1024..65535 (with "
                         "room for every broker)", values[3]);
    if (values[4] != NULL) {
        if (strcmp(values[4], "-") == 0)
            ctl.in = stdin;
        else {
            int fd;
            if (mkfifo(values[4], 0600) != 0 && errno != EEXIST) {
                fprintf(stderr, "cnx-broker: --control %s: %s\n", values[4],
                        strerror(errno));
                return 1;
            }
            /* Read-write, so that no writer closing it is an end of file. */
            fd = open(values[4], O_RDWR | O_CLOEXEC);
            ctl.in = fd >= 0 ? fdopen(fd, "r") : NULL;
            if (ctl.in == NULL) {
                fprintf(stderr, "cnx-broker: --control %s: %s\n", values[4],
                        strerror(errno));
                return 1;
            }
        }
    }

    /* Before any librdkafka thread exists, so they all inherit the mask. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) != 0) {
        fprintf(stderr, "cnx-broker: cannot block signals\n");
        return 1;
    }
    if (port > 0)
        broker_ports_claim(port, brokers);
    rc = cnx_broker_new(&broker, brokers, partitions, values[2]);
    broker_ports_claim(0, 0);
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
    ctl.broker = broker;
    if (ctl.in != NULL &&
        pthread_create(&reader, NULL, control_main, &ctl) != 0) {
        fprintf(stderr, "cnx-broker: cannot start the control thread\n");
        cnx_broker_free(broker);
        return 1;
    }

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
    /* The control thread may be inside a command: wait for it, then
     * leave it blocked in its read until the process exits. */
    pthread_mutex_lock(&ctl.lock);
    ctl.broker = NULL;
    cnx_broker_free(broker);
    pthread_mutex_unlock(&ctl.lock);
    return 0;
}
