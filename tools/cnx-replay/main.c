/*
 * cnx-replay - finish a request whose tasks were dead-lettered, once the
 * cause (a storage outage, a bad credential, a fixed bug) is gone: the
 * request is read back from cnx.requests and submitted again under a new id
 * with reuse, so done tasks are reused bit for bit and the dead ones run
 * again; its dead letters on cnx.dlq say which. docs/replay.md. This file
 * parses the command line; the rest is libcnx/src/replay.c.
 */
#include <getopt.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"
#include "cnx/replay.h"
#include "cnx/reprocess.h"

#define PROG "cnx-replay"

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROG " --brokers LIST --controller-key FILE --request ID\n"
        "                  [options]\n\n"
        "Finishes a request whose tasks were dead-lettered, after the cause\n"
        "is fixed: reads the request back from cnx.requests and its dead\n"
        "letters from cnx.dlq, submits the request again under a new id\n"
        "with reuse (done tasks are reused through their verified\n"
        "manifests, bit for bit; dead ones run again), follows it like\n"
        "cnx-reprocess --wait and checks that every dead-lettered task was\n"
        "released again.\n\n"
        "  --brokers LIST          Kafka bootstrap servers\n"
        "  --kafka-config FILE     extra librdkafka settings (TLS, SASL)\n"
        "  --request ID            the request to finish (required)\n"
        "  --as ID                 the replay's request id (default\n"
        "                          <ID>.replay-<Unix time>)\n"
        "  --deadline T            the replay's deadline: duration (90s,\n"
        "                          30m, 24h, 2d) or RFC 3339 UTC time\n"
        "                          (default 24h)\n"
        "  --controller-key FILE   the controller's public key (required):\n"
        "                          trust only answers and decisions it\n"
        "                          signed\n"
        "  --list                  list the request's dead-lettered tasks\n"
        "                          on stdout and submit nothing\n"
        "  --timeout SECONDS       give up waiting for the controller's\n"
        "                          answer after SECONDS (default 60); also\n"
        "                          for the replay to finish if given\n"
        "  --json                  the result as one JSON object on stdout\n"
        "                          (as cnx-reprocess --json)\n"
        "  --quiet                 no progress or information on stderr\n"
        "  --help                  this text\n"
        "  --version               the build (version, commit, dirty flag)\n"
        "\n"
        "Exit status: as cnx-reprocess (0 done; 1 broker, timeout,\n"
        "interrupted; 2 usage error, no such request, or refused; 3\n"
        "violation; 4 tasks failed, or a dead-lettered task was not run\n"
        "again; 5 deadline missed).\n");
}

#define fail_usage(...) \
    cnx_cli_usage_error(PROG, CNX_REPROCESS_USAGE, __VA_ARGS__)

static void submitter(char *out, size_t n)
{
    const char *user = getenv("USER");
    struct passwd *pw = getpwuid(getuid());
    char host[256];
    if (pw != NULL && pw->pw_name != NULL)
        user = pw->pw_name;
    if (user == NULL || user[0] == '\0')
        user = "unknown";
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "localhost");
    host[sizeof(host) - 1] = '\0';
    snprintf(out, n, "%s@%s", user, host);
}

int main(int argc, char **argv)
{
    enum {
        O_BROKERS = 256, O_KCONF, O_REQUEST, O_AS, O_DEADLINE, O_CKEY,
        O_LIST, O_TIMEOUT, O_JSON, O_QUIET, O_HELP, O_VERSION
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
        {"request", required_argument, NULL, O_REQUEST},
        {"as", required_argument, NULL, O_AS},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"controller-key", required_argument, NULL, O_CKEY},
        {"list", no_argument, NULL, O_LIST},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"json", no_argument, NULL, O_JSON},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0}};
    cnx_replay_opts o;
    const char *deadline = "24h";
    char who[600];
    int64_t timeout_s = 60;
    int c;

    memset(&o, 0, sizeof(o));
    o.kafka.client_id = PROG;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: o.kafka.brokers = optarg; break;
        case O_KCONF: o.kafka.config_file = optarg; break;
        case O_REQUEST: o.request = optarg; break;
        case O_AS: o.replay_id = optarg; break;
        case O_DEADLINE: deadline = optarg; break;
        case O_CKEY: o.controller_key = optarg; break;
        case O_LIST: o.list_only = 1; break;
        case O_TIMEOUT:
            if (cnx_cli_int(optarg, 1, 30 * 86400, &timeout_s) != 0)
                return fail_usage("--timeout '%s': want whole seconds, "
                                  "1 to 2592000", optarg);
            o.timeout_given = 1;
            break;
        case O_JSON: o.json = 1; break;
        case O_QUIET: o.quiet = 1; break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION: printf("%s\n", cnx_build_describe()); return 0;
        case ':':
            return fail_usage("%s: missing value", argv[optind - 1]);
        default:
            return fail_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail_usage("unexpected argument '%s'", argv[optind]);
    if (o.kafka.brokers == NULL)
        return fail_usage("missing --brokers");
    if (o.request == NULL)
        return fail_usage("missing --request");
    if (cnx_request_id_check(o.request) != 0)
        return fail_usage("--request: %s", cnx_error_last()->message);
    if (o.replay_id != NULL && cnx_request_id_check(o.replay_id) != 0)
        return fail_usage("--as: %s", cnx_error_last()->message);
    if (o.controller_key == NULL)
        return fail_usage("missing --controller-key");
    if (access(o.controller_key, R_OK) != 0)
        return fail_usage("--controller-key %s: cannot be read",
                          o.controller_key);
    o.now = (int64_t)time(NULL);
    if (cnx_reprocess_deadline_parse(deadline, o.now, &o.deadline) != 0)
        return fail_usage("%s", cnx_error_last()->message);
    submitter(who, sizeof(who));
    o.submitter = who;
    o.timeout_s = (int)timeout_s;
    o.scan_timeout_s = 60;
    o.tty = isatty(STDERR_FILENO);
    o.interrupted = &interrupted;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    return cnx_replay_run(&o);
}
