/*
 * controller_args.c - cnx-controller's command line. A bad argument is one
 * line on stderr and exit code 2.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/controller.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/url.h"

static int usage_error(const char *what, const char *arg)
{
    fprintf(stderr, "cnx-controller: %s '%s' (see --help)\n", what,
            arg ? arg : "");
    return 2;
}

static void help(void)
{
    printf(
        "usage: cnx-controller --brokers LIST --ledger FILE --trust DIR "
        "--key FILE [options]\n"
        "       cnx-controller archive --ledger FILE --request ID --out FILE\n"
        "                              (move a finished request into its own\n"
        "                              file; archive --help)\n\n"
        "The single writer of the ledger (SQLite, WAL). Consumes\n"
        "cnx.requests, cnx.events and cnx.lineage; plans each request\n"
        "through its workflow, releases tasks to cnx.tasks.<worker>[.urgent]\n"
        "as their inputs become ready (with the inputs' digests), verifies\n"
        "every manifest against the trusted keys, re-releases lost tasks\n"
        "with backoff up to their retry budget, records output digests and\n"
        "reproducibility violations, keeps each request's ETA and SLO, and\n"
        "reports each request's end honestly (done, failed, never run).\n"
        "Every decision is published to the log before it is applied, so\n"
        "the ledger can be rebuilt from the topics and a restarted\n"
        "controller repeats nothing. See docs/controller.md, "
        "docs/ledger.md.\n\n"
        "options:\n"
        "  --brokers LIST              Kafka bootstrap servers\n"
        "  --kafka-config FILE         extra librdkafka settings (TLS, SASL)\n"
        "  --broker-timeout SECONDS    exit 1 once no broker has answered\n"
        "                              for SECONDS (default 120)\n"
        "  --ledger FILE               the SQLite ledger (created if missing)\n"
        "  --trust DIR                 the workers' trusted Ed25519 public\n"
        "                              keys (*.pem, *.pub): manifests, events\n"
        "                              and dead letters must carry a\n"
        "                              signature by one; other files ignored\n"
        "  --key FILE                  the controller's own Ed25519 private\n"
        "                              key: it signs every decision and\n"
        "                              request state, and only decisions\n"
        "                              signed by it are applied (also in\n"
        "                              --rebuild); docs/security.md\n"
        "  --rebuild                   apply the topics from their start into\n"
        "                              --ledger (a new file), then exit\n"
        "  --price-per-core-hour USD   adds $ per mm3 to the cost reports\n"
        "  --progress SECONDS          progress/ETA period (default 1)\n"
        "  --at-risk-margin FRACTION   SLO at risk when the ETA is within\n"
        "                              this fraction of the request's window\n"
        "                              of its deadline (default 0.1)\n"
        "  --batch N                   messages per ledger transaction "
        "(1000)\n"
        "  --dataset-root URL          accept only requests whose dataset\n"
        "                              lies under URL (a store URL or a\n"
        "                              path; repeatable, up to 16); none:\n"
        "                              any file://, s3:// or gs:// dataset\n"
        "  --max-tasks-per-request N   refuse a request that plans more\n"
        "                              tasks (default 1000000)\n"
        "  --release-lease SECONDS     a released task with no event this\n"
        "                              long after its release, while no\n"
        "                              task of its worker started either,\n"
        "                              is lost and released again (default\n"
        "                              3600; 0: only started tasks expire)\n"
        "  --metrics-port PORT         serve HTTP on 0.0.0.0:PORT:\n"
        "                              /metrics (Prometheus), /healthz\n"
        "                              (200 while the loop turns), /readyz\n"
        "                              (200 when caught up and the broker\n"
        "                              answers; 503 and the reason if not)\n"
        "  --ready-timeout S           /readyz says not ready once no\n"
        "                              broker has answered for S seconds\n"
        "                              (default 10)\n"
        "  --idle-exit SECONDS         exit after SECONDS with no message\n"
        "  -q, --quiet                 warnings and errors only\n"
        "  --version                   print the build\n"
        "  --help                      this text\n\n"
        "exit status: 0 stopped by SIGTERM/SIGINT, --idle-exit or a finished\n"
        "--rebuild; 1 cannot start (ledger, keys, broker) or the ledger\n"
        "failed; 2 bad arguments.\n");
}

int cnx_controller_parse_args(cnx_controller_opts *opts, int argc,
                              char **argv)
{
    enum {
        O_BROKERS = 256,
        O_KCONF,
        O_LEDGER,
        O_TRUST,
        O_KEY,
        O_REBUILD,
        O_PRICE,
        O_PROGRESS,
        O_MARGIN,
        O_BATCH,
        O_METRICS,
        O_IDLE,
        O_HELP,
        O_VERSION,
        O_ROOT,
        O_MAX_TASKS,
        O_RELEASE_LEASE,
        O_BROKER_TIMEOUT,
        O_READY_TIMEOUT
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
        {"ledger", required_argument, NULL, O_LEDGER},
        {"trust", required_argument, NULL, O_TRUST},
        {"key", required_argument, NULL, O_KEY},
        {"rebuild", no_argument, NULL, O_REBUILD},
        {"price-per-core-hour", required_argument, NULL, O_PRICE},
        {"progress", required_argument, NULL, O_PROGRESS},
        {"at-risk-margin", required_argument, NULL, O_MARGIN},
        {"batch", required_argument, NULL, O_BATCH},
        {"metrics-port", required_argument, NULL, O_METRICS},
        {"idle-exit", required_argument, NULL, O_IDLE},
        {"dataset-root", required_argument, NULL, O_ROOT},
        {"max-tasks-per-request", required_argument, NULL, O_MAX_TASKS},
        {"release-lease", required_argument, NULL, O_RELEASE_LEASE},
        {"broker-timeout", required_argument, NULL, O_BROKER_TIMEOUT},
        {"ready-timeout", required_argument, NULL, O_READY_TIMEOUT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0}};
    int64_t n;
    int c;

    memset(opts, 0, sizeof(*opts));
    opts->price_per_core_hour = -1;
    opts->progress_s = 1;
    opts->at_risk_margin = 0.1;
    opts->batch = 1000;
    opts->max_tasks = CNX_CONTROLLER_MAX_TASKS;
    opts->release_lease_s = CNX_CONTROLLER_RELEASE_LEASE;
    opts->kafka.client_id = "cnx-controller";
    opts->ready_timeout_s = CNX_KAFKA_READY_TIMEOUT_S;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: opts->kafka.brokers = optarg; break;
        case O_KCONF: opts->kafka.config_file = optarg; break;
        case O_LEDGER: opts->ledger = optarg; break;
        case O_TRUST: opts->trust_dir = optarg; break;
        case O_KEY: opts->key_path = optarg; break;
        case O_REBUILD: opts->rebuild = 1; break;
        case O_PRICE:
            if (cnx_cli_double(optarg, 0, 1e6, &opts->price_per_core_hour))
                return usage_error("bad --price-per-core-hour", optarg);
            break;
        case O_PROGRESS:
            if (cnx_cli_double(optarg, 0.05, 3600, &opts->progress_s))
                return usage_error("bad --progress", optarg);
            break;
        case O_MARGIN:
            if (cnx_cli_double(optarg, 0, 1, &opts->at_risk_margin))
                return usage_error("bad --at-risk-margin", optarg);
            break;
        case O_BATCH:
            if (cnx_cli_int(optarg, 1, 1000000, &n))
                return usage_error("bad --batch", optarg);
            opts->batch = (int)n;
            break;
        case O_METRICS:
            if (cnx_cli_int(optarg, 1, 65535, &n))
                return usage_error("bad --metrics-port", optarg);
            opts->metrics_port = (int)n;
            break;
        case O_IDLE:
            if (cnx_cli_double(optarg, 0.1, 86400 * 365, &opts->idle_exit_s))
                return usage_error("bad --idle-exit", optarg);
            break;
        case O_ROOT: {
            cnx_url url;
            if (opts->ndataset_roots == CNX_CONTROLLER_MAX_ROOTS)
                return usage_error("too many --dataset-root", optarg);
            if (cnx_url_parse(&url, optarg, CNX_URL_ALLOW_PATH) != 0) {
                fprintf(stderr, "cnx-controller: --dataset-root: %s\n",
                        cnx_error_last()->message);
                return 2;
            }
            if (!cnx_url_writable(url.scheme))
                return usage_error("--dataset-root: the controller cannot "
                                   "write this scheme",
                                   optarg);
            opts->dataset_roots[opts->ndataset_roots++] = optarg;
            break;
        }
        case O_MAX_TASKS:
            if (cnx_cli_int(optarg, 1, UINT32_MAX, &n))
                return usage_error("bad --max-tasks-per-request", optarg);
            opts->max_tasks = (size_t)n;
            break;
        case O_RELEASE_LEASE:
            if (cnx_cli_double(optarg, 0, 86400 * 30, &opts->release_lease_s))
                return usage_error("bad --release-lease", optarg);
            break;
        case O_BROKER_TIMEOUT:
            if (cnx_kafka_broker_timeout_parse(
                    optarg, &opts->kafka.broker_timeout_s) != 0)
                return usage_error("bad --broker-timeout (seconds over 0, "
                                   "at most 86400)", optarg);
            break;
        case O_READY_TIMEOUT:
            if (cnx_cli_double(optarg, 0.1, CNX_KAFKA_BROKER_TIMEOUT_MAX,
                               &opts->ready_timeout_s))
                return usage_error("bad --ready-timeout (seconds, 0.1 to "
                                   "86400)", optarg);
            break;
        case 'q': opts->quiet = 1; break;
        case O_HELP: help(); return 1;
        case O_VERSION: printf("%s\n", cnx_build_describe()); return 1;
        default: return usage_error("unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument", argv[optind]);
    if (opts->kafka.brokers == NULL)
        return usage_error("missing --brokers", "");
    if (opts->ledger == NULL)
        return usage_error("missing --ledger", "");
    if (opts->trust_dir == NULL)
        return usage_error("missing --trust", "");
    if (opts->key_path == NULL)
        return usage_error("missing --key", "");
    if (opts->quiet)
        cnx_log_set_level(CNX_LOG_WARN);
    return 0;
}
