/*
 * worker_args.c - the command line every worker shares, so that a worker's
 * main.c is one call. Numbers are parsed with full checks; a bad argument
 * is one line on stderr and exit code 2.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/store.h"
#include "cnx/worker.h"

/* How --help names the command: "cnx-<stage>", or what
 * cnx_worker_main_multi sets ("cnx-mesh --stage mesh-manifest"). */
static char command_name[128];

static const char *command(const cnx_stage *stage)
{
    if (command_name[0] == '\0')
        snprintf(command_name, sizeof(command_name), "cnx-%s", stage->name);
    return command_name;
}

static int usage_error(const cnx_stage *stage, const char *what,
                       const char *arg)
{
    fprintf(stderr, "%s: %s '%s' (see --help)\n", command(stage), what,
            arg ? arg : "");
    return 2;
}

static void help(const cnx_stage *stage)
{
    printf("usage: %s --brokers LIST --key FILE [options]\n\n"
           "%s\n\n"
           "Consumes cnx.tasks.%s.urgent, then cnx.tasks.%s; for each task\n"
           "checks its inputs' digests, runs the stage, writes the outputs\n"
           "write-once, publishes events and a signed manifest and commits\n"
           "the offset only once the broker has acknowledged them.\n\n"
           "options:\n"
           "  --brokers LIST          Kafka bootstrap servers (host:port,...)\n"
           "  --kafka-config FILE     extra librdkafka settings (key=value "
           "lines: TLS, SASL)\n"
           "  --key FILE              Ed25519 private key that signs "
           "manifests, events and\n"
           "                          dead letters (cnx-keygen)\n"
           "  --controller-key FILE   the controller's public key: a task "
           "not signed by it is\n"
           "                          dead-lettered, not run "
           "(docs/security.md)\n"
           "  --instance ID           static group member id "
           "(default: host-pid)\n"
           "  --group NAME            consumer group (default cnx.%s)\n"
           "  --container-digest D    sha256:... of the image this runs in, "
           "recorded in manifests\n"
           "  --allow-dirty           run a build made from a modified tree\n"
           "  --grace SECONDS         on SIGTERM, finish the current task if "
           "it fits (default 25)\n"
           "  --metrics-port PORT     serve HTTP on 0.0.0.0:PORT: "
           "/metrics (Prometheus),\n"
           "                          /healthz (200 while the loop turns), "
           "/readyz (200\n"
           "                          when ready, 503 and the reason when "
           "not)\n"
           "  --ready-timeout S       /readyz says not ready once no broker "
           "has answered\n"
           "                          for S seconds (default 10)\n"
           "  --session-timeout-ms N  group session timeout (default 45000)\n"
           "  --broker-timeout S      exit 1 once no broker has answered for\n"
           "                          S seconds (default 120)\n"
           "  --retry-window SECONDS  wait out a storage or network outage:\n"
           "                          the last attempt of a task is retried\n"
           "                          in place until SECONDS after its first\n"
           "                          failure before it is dead-lettered\n"
           "                          (default 300; 0: at once; keep it under\n"
           "                          the stage's lease_s)\n"
           "  --cache DIR             local read cache of remote inputs, "
           "keyed by digest\n"
           "                          (default $CNX_CACHE_DIR; may be shared "
           "by workers)\n"
           "  --cache-max-bytes N     bound of the cache (K, M, G suffixes; "
           "default 10G)\n"
           "  --prefetch 0|1          while a task's kernel runs, fetch the "
           "next waiting\n"
           "                          task's remote inputs into the cache, "
           "verified\n"
           "                          (default 1; needs a cache)\n"
           "  --max-tasks N           exit after N tasks\n"
           "  --idle-exit SECONDS     exit after SECONDS without a task\n"
           "  --slow-ms N             (tests only) sleep N ms in every task\n"
           "  -q, --quiet             log warnings and errors only\n"
           "  --version               print the build (commit, dirty flag)\n"
           "  --help                  this text\n",
           command(stage), stage->help ? stage->help : "", stage->name,
           stage->name, stage->name);
}

int cnx_worker_parse_args(cnx_worker_opts *opts, const cnx_stage *stage,
                          int argc, char **argv)
{
    static char instance[128];
    enum {
        O_BROKERS = 256, O_KCONF, O_KEY, O_INSTANCE, O_GROUP, O_CONTAINER,
        O_DIRTY, O_GRACE, O_METRICS, O_MAXT, O_IDLE, O_SLOW, O_SESSION,
        O_HELP, O_VERSION, O_CACHE, O_CACHE_MAX, O_RETRY_WINDOW,
        O_BROKER_TIMEOUT, O_CKEY, O_PREFETCH, O_READY_TIMEOUT
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
        {"key", required_argument, NULL, O_KEY},
        {"controller-key", required_argument, NULL, O_CKEY},
        {"instance", required_argument, NULL, O_INSTANCE},
        {"group", required_argument, NULL, O_GROUP},
        {"container-digest", required_argument, NULL, O_CONTAINER},
        {"allow-dirty", no_argument, NULL, O_DIRTY},
        {"grace", required_argument, NULL, O_GRACE},
        {"metrics-port", required_argument, NULL, O_METRICS},
        {"max-tasks", required_argument, NULL, O_MAXT},
        {"idle-exit", required_argument, NULL, O_IDLE},
        {"slow-ms", required_argument, NULL, O_SLOW},
        {"session-timeout-ms", required_argument, NULL, O_SESSION},
        {"cache", required_argument, NULL, O_CACHE},
        {"cache-max-bytes", required_argument, NULL, O_CACHE_MAX},
        {"prefetch", required_argument, NULL, O_PREFETCH},
        {"retry-window", required_argument, NULL, O_RETRY_WINDOW},
        {"broker-timeout", required_argument, NULL, O_BROKER_TIMEOUT},
        {"ready-timeout", required_argument, NULL, O_READY_TIMEOUT},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0}};
    int64_t n;
    int c;

    memset(opts, 0, sizeof(*opts));
    opts->grace_s = 25.0;
    opts->retry_window_s = CNX_WORKER_RETRY_WINDOW_S;
    opts->prefetch = 1;
    opts->ready_timeout_s = CNX_KAFKA_READY_TIMEOUT_S;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "q", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: opts->kafka.brokers = optarg; break;
        case O_KCONF: opts->kafka.config_file = optarg; break;
        case O_KEY: opts->key_path = optarg; break;
        case O_CKEY: opts->controller_key_path = optarg; break;
        case O_INSTANCE:
            if (strlen(optarg) == 0 || strlen(optarg) > 100)
                return usage_error(stage, "bad --instance", optarg);
            opts->instance = optarg;
            break;
        case O_GROUP: opts->group = optarg; break;
        case O_CONTAINER:
            if (!cnx_digest_valid(optarg))
                return usage_error(stage, "--container-digest must be "
                                   "sha256:<64 hex>, not", optarg);
            opts->container_digest = optarg;
            break;
        case O_DIRTY: opts->allow_dirty = 1; break;
        case O_GRACE:
            if (cnx_cli_double(optarg, 0, 86400, &opts->grace_s) != 0)
                return usage_error(stage, "bad --grace", optarg);
            break;
        case O_METRICS:
            if (cnx_cli_int(optarg, 1, 65535, &n) != 0)
                return usage_error(stage, "bad --metrics-port", optarg);
            opts->metrics_port = (int)n;
            break;
        case O_MAXT:
            if (cnx_cli_int(optarg, 1, (long long)1 << 40, &n) != 0)
                return usage_error(stage, "bad --max-tasks", optarg);
            opts->max_tasks = n;
            break;
        case O_IDLE:
            if (cnx_cli_double(optarg, 0.1, 86400, &opts->idle_exit_s) != 0)
                return usage_error(stage, "bad --idle-exit", optarg);
            break;
        case O_SLOW:
            if (cnx_cli_int(optarg, 0, 3600000, &n) != 0)
                return usage_error(stage, "bad --slow-ms", optarg);
            opts->slow_ms = (int)n;
            break;
        case O_SESSION:
            if (cnx_cli_int(optarg, 1000, 3600000, &n) != 0)
                return usage_error(stage, "bad --session-timeout-ms", optarg);
            opts->session_timeout_ms = (int)n;
            break;
        case O_CACHE:
            if (optarg[0] != '/')
                return usage_error(stage, "--cache needs an absolute "
                                   "directory, not", optarg);
            opts->cache_dir = optarg;
            break;
        case O_CACHE_MAX:
            if (cnx_store_parse_size(optarg, &opts->cache_max_bytes) != 0)
                return usage_error(stage, "bad --cache-max-bytes", optarg);
            break;
        case O_PREFETCH:
            if (cnx_cli_int(optarg, 0, 1, &n) != 0)
                return usage_error(stage, "bad --prefetch (0 or 1)", optarg);
            opts->prefetch = (int)n;
            break;
        case O_RETRY_WINDOW:
            if (cnx_cli_double(optarg, 0, 86400, &opts->retry_window_s) != 0)
                return usage_error(stage, "bad --retry-window (seconds, 0 "
                                   "to 86400)", optarg);
            break;
        case O_BROKER_TIMEOUT:
            if (cnx_kafka_broker_timeout_parse(
                    optarg, &opts->kafka.broker_timeout_s) != 0)
                return usage_error(stage, "bad --broker-timeout (seconds "
                                   "over 0, at most 86400)", optarg);
            break;
        case O_READY_TIMEOUT:
            if (cnx_cli_double(optarg, 0.1, CNX_KAFKA_BROKER_TIMEOUT_MAX,
                               &opts->ready_timeout_s) != 0)
                return usage_error(stage, "bad --ready-timeout (seconds, "
                                   "0.1 to 86400)", optarg);
            break;
        case 'q': opts->quiet = 1; break;
        case O_HELP: help(stage); return 1;
        case O_VERSION:
#ifdef CNX_FAULT_INJECTION
            printf("%s (test build: fault hooks compiled in)\n",
                   cnx_build_describe());
#else
            printf("%s\n", cnx_build_describe());
#endif
            return 1;
        default:
            return usage_error(stage, "unknown option",
                               argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error(stage, "unexpected argument", argv[optind]);
    if (opts->kafka.brokers == NULL)
        return usage_error(stage, "missing --brokers", "");
    if (opts->key_path == NULL)
        return usage_error(stage, "missing --key", "");
    if (opts->instance == NULL) {
        char host[64] = "host";
        gethostname(host, sizeof(host) - 1);
        snprintf(instance, sizeof(instance), "%s-%ld", host, (long)getpid());
        opts->instance = instance;
    }
    if (opts->quiet)
        cnx_log_set_level(CNX_LOG_WARN);
    if ((opts->cache_dir != NULL || opts->cache_max_bytes > 0) &&
        cnx_store_cache_configure(opts->cache_dir ? opts->cache_dir
                                                  : getenv("CNX_CACHE_DIR"),
                                  opts->cache_max_bytes) != 0) {
        fprintf(stderr, "%s: %s\n", command(stage),
                cnx_error_last()->message);
        return 2;
    }
    return 0;
}

static const char *take_stage(int *argc, char **argv, int *bad);

static int worker_main(const cnx_stage *stage, int argc, char **argv)
{
    cnx_worker_opts opts;
    int rc = cnx_worker_parse_args(&opts, stage, argc, argv);
    if (rc == 1)
        return 0;
    if (rc != 0)
        return rc;
    return cnx_worker_run(stage, &opts);
}

/* A one-stage worker also takes "--stage <its stage>", so that scripts
 * start every worker the same way. */
int cnx_worker_main(const cnx_stage *stage, int argc, char **argv)
{
    int bad = 0;
    const char *name = take_stage(&argc, argv, &bad);
    if (bad || (name != NULL && strcmp(name, stage->name) != 0))
        return usage_error(stage, "--stage: this worker runs only",
                           stage->name);
    return worker_main(stage, argc, argv);
}

/* The value of --stage NAME / --stage=NAME, removed from argv; NULL if
 * absent. *bad is set when --stage has no value. */
static const char *take_stage(int *argc, char **argv, int *bad)
{
    const char *name = NULL;
    int out = 1;
    *bad = 0;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--stage") == 0) {
            if (i + 1 >= *argc) {
                *bad = 1;
                break;
            }
            name = argv[++i];
        } else if (strncmp(argv[i], "--stage=", 8) == 0) {
            name = argv[i] + 8;
        } else {
            argv[out++] = argv[i];
        }
    }
    if (!*bad) {
        *argc = out;
        argv[out] = NULL;
    }
    return name;
}

static void help_multi(const char *prog, const cnx_stage *const *stages,
                       size_t n)
{
    printf("usage: %s --stage NAME --brokers LIST --key FILE [options]\n\n"
           "One executable for the stages below; each process runs one of\n"
           "them (default %s). '%s --stage NAME --help' describes a stage\n"
           "and the options every worker takes.\n\nstages:\n",
           prog, stages[0]->name, prog);
    for (size_t i = 0; i < n; i++)
        printf("  %s\n", stages[i]->name);
}

int cnx_worker_main_multi(const char *prog, const cnx_stage *const *stages,
                          size_t n, int argc, char **argv)
{
    int bad = 0;
    const char *name = take_stage(&argc, argv, &bad);
    if (bad) {
        fprintf(stderr, "%s: --stage needs a stage name (see --help)\n",
                prog);
        return 2;
    }
    if (name == NULL) {
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
                help_multi(prog, stages, n);
                return 0;
            }
        return worker_main(stages[0], argc, argv);
    }
    for (size_t i = 0; i < n; i++)
        if (strcmp(stages[i]->name, name) == 0) {
            snprintf(command_name, sizeof(command_name), "%s --stage %s",
                     prog, name);
            return worker_main(stages[i], argc, argv);
        }
    fprintf(stderr, "%s: --stage: no stage '%.64s' (see --help)\n", prog,
            name);
    return 2;
}
