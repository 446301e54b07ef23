/*
 * cnx-reprocess - ask for a region of a dataset to be reprocessed through
 * a workflow, and (with --wait) follow it to the end: a progress bar per
 * stage with an ETA against the deadline, then a summary with the SLO, the
 * cost and whether every task repeated from an earlier run gave
 * bit-identical outputs. The request and the controller's answers travel
 * on cnx.requests (docs/reprocess.md); this file parses the command line
 * and builds the request; submitting and following it is
 * libcnx/src/reprocess_run.c, the rest libcnx/src/reprocess.c.
 */
#include <getopt.h>
#include <limits.h>
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
#include "cnx/log.h"
#include "cnx/reprocess.h"
#include "cnx/reprocess_run.h"
#include "cnx/workflow.h"

#define PROG "cnx-reprocess"
#define ANSWER_TIMEOUT_S 60

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROG " --brokers LIST --controller-key FILE\n"
        "                     --workflow NAME --dataset URL\n"
        "                     --roi x0,y0,z0,x1,y1,z1 [options]\n\n"
        "Asks the controller to reprocess a region of a dataset through a\n"
        "workflow; with --wait, follows it and reports the deadline (SLO),\n"
        "the cost and whether repeated tasks gave bit-identical outputs.\n\n"
        "  --brokers LIST        Kafka bootstrap servers\n"
        "  --kafka-config FILE   extra librdkafka settings (TLS, SASL)\n"
        "  --broker-timeout S    give up (exit 1) once no broker has\n"
        "                        answered for S seconds (default 120)\n"
        "  --controller-key FILE the controller's Ed25519 public key (PEM):\n"
        "                        only answers signed with it count; any\n"
        "                        other is reported once and skipped\n"
        "                        (docs/security.md)\n"
        "  --workflow NAME       workflow <dir>/NAME.json; a NAME with a '/'\n"
        "                        or ending in .json is a path\n"
        "  --workflows DIR       workflow directory (default $CNX_WORKFLOWS,\n"
        "                        else <bin>/../../workflows, else\n"
        "                        /usr/share/cnx/workflows)\n"
        "  --dataset URL         the dataset: file:///, s3://, gs://,\n"
        "                        http(s):// URL (sent in canonical form),\n"
        "                        or a local directory (sent as\n"
        "                        file:///<its real path>)\n"
        "  --roi x0,y0,z0,x1,y1,z1  region, voxels of the dataset's first\n"
        "                        scale, half-open, max > min per axis\n"
        "  --deadline T          duration after submission (90s, 30m, 24h,\n"
        "                        2d) or RFC 3339 UTC time (default 24h)\n"
        "  --reuse               reuse outputs of tasks done before instead\n"
        "                        of recomputing and comparing them\n"
        "  --request ID          request id, 1-128 of A-Z a-z 0-9 . _ : -\n"
        "                        (default req-YYYYMMDDTHHMMSSZ-<host>-<pid>)\n"
        "  --wait                follow the request until it finishes\n"
        "  --timeout SECONDS     give up waiting for the controller's answer\n"
        "                        after SECONDS (default 60); with --wait,\n"
        "                        also for the request to finish (default:\n"
        "                        no limit)\n"
        "  --json                print the result as one JSON object on\n"
        "                        stdout (see docs/reprocess.md)\n"
        "  --quiet               no progress or information on stderr\n"
        "  --help                this text\n"
        "  --version             the build (version, commit, dirty flag)\n\n"
        "Without --wait, prints the request id once the controller has\n"
        "accepted it.\n\n"
        "Exit status:\n"
        "  0  done, and every repeated task gave bit-identical outputs\n"
        "     (without --wait: accepted)\n"
        "  1  anything else: broker unreachable, no answer in time,\n"
        "     interrupted\n"
        "  2  usage error, or the controller refused the request\n"
        "  3  reproducibility or immutability violation\n"
        "  4  tasks failed (dead-lettered, or never run because an input\n"
        "     died)\n"
        "  5  done, but after the deadline\n"
        "  Where several of 3, 4 and 5 apply, the lowest wins.\n");
}

/* One line on stderr; exit status 2. */
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
        O_BROKERS = 256, O_KCONF, O_WORKFLOW, O_WORKFLOWS, O_DATASET, O_ROI,
        O_DEADLINE, O_WAIT, O_JSON, O_REUSE, O_REQUEST, O_TIMEOUT, O_QUIET,
        O_HELP, O_VERSION, O_BROKER_TIMEOUT, O_CKEY
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
        {"broker-timeout", required_argument, NULL, O_BROKER_TIMEOUT},
        {"controller-key", required_argument, NULL, O_CKEY},
        {"workflow", required_argument, NULL, O_WORKFLOW},
        {"workflows", required_argument, NULL, O_WORKFLOWS},
        {"dataset", required_argument, NULL, O_DATASET},
        {"roi", required_argument, NULL, O_ROI},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"wait", no_argument, NULL, O_WAIT},
        {"json", no_argument, NULL, O_JSON},
        {"reuse", no_argument, NULL, O_REUSE},
        {"request", required_argument, NULL, O_REQUEST},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0}};
    cnx_kafka_opts k = {NULL, NULL, PROG, 0};
    cnx_request_spec spec;
    const char *workflow = NULL, *workflows = NULL, *dataset = NULL;
    const char *roi = NULL, *deadline = "24h", *request = NULL;
    char id[CNX_REQUEST_ID_MAX + 1], host[256], who[600];
    char wf_path[PATH_MAX + 256];
    int64_t timeout_s = ANSWER_TIMEOUT_S;
    int timeout_given = 0, reuse = 0, c;
    cnx_workflow *wf = NULL;
    char *dataset_url = NULL, *body = NULL;
    cnx_reprocess_run r;
    int code = CNX_REPROCESS_ERROR;

    memset(&r, 0, sizeof(r));
    memset(&spec, 0, sizeof(spec));
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: k.brokers = optarg; break;
        case O_KCONF: k.config_file = optarg; break;
        case O_BROKER_TIMEOUT:
            if (cnx_kafka_broker_timeout_parse(optarg,
                                               &k.broker_timeout_s) != 0)
                return fail_usage("--broker-timeout '%s': want seconds "
                                  "over 0, at most 86400", optarg);
            break;
        case O_CKEY: r.controller_key = optarg; break;
        case O_WORKFLOW: workflow = optarg; break;
        case O_WORKFLOWS: workflows = optarg; break;
        case O_DATASET: dataset = optarg; break;
        case O_ROI: roi = optarg; break;
        case O_DEADLINE: deadline = optarg; break;
        case O_WAIT: r.wait = 1; break;
        case O_JSON: r.json = 1; break;
        case O_REUSE: reuse = 1; break;
        case O_REQUEST: request = optarg; break;
        case O_TIMEOUT:
            if (cnx_cli_int(optarg, 1, 30 * 86400, &timeout_s) != 0)
                return fail_usage("--timeout '%s': want whole seconds, "
                                  "1 to 2592000", optarg);
            timeout_given = 1;
            break;
        case O_QUIET: r.quiet = 1; break;
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
    if (k.brokers == NULL)
        return fail_usage("missing --brokers");
    if (r.controller_key == NULL)
        return fail_usage("missing --controller-key");
    if (workflow == NULL)
        return fail_usage("missing --workflow");
    if (dataset == NULL)
        return fail_usage("missing --dataset");
    if (roi == NULL)
        return fail_usage("missing --roi");

    spec.submitted = (int64_t)time(NULL);
    if (cnx_reprocess_roi_parse(roi, &spec.roi) != 0 ||
        cnx_reprocess_deadline_parse(deadline, spec.submitted,
                                     &spec.deadline) != 0)
        goto usage_error;
    if (request != NULL) {
        if (cnx_request_id_check(request) != 0)
            goto usage_error;
        snprintf(id, sizeof(id), "%s", request);
    } else {
        if (gethostname(host, sizeof(host)) != 0)
            host[0] = '\0';
        host[sizeof(host) - 1] = '\0';
        cnx_request_id_default(id, spec.submitted, host, (long)getpid());
    }
    if (cnx_reprocess_dataset_url(dataset, &dataset_url) != 0)
        goto usage_error;
    if (cnx_workflow_path(workflow, workflows, wf_path, sizeof(wf_path)) != 0)
        goto usage_error;
    if (cnx_workflow_load(&wf, wf_path) != 0) {
        const char *msg = cnx_error_last()->message;
        if (strstr(msg, wf_path) != NULL)
            fprintf(stderr, PROG ": %s\n", msg);
        else
            fprintf(stderr, PROG ": workflow %s: %s\n", wf_path, msg);
        code = CNX_REPROCESS_USAGE;
        goto done;
    }
    submitter(who, sizeof(who));
    spec.request = id;
    spec.workflow = wf->json;
    spec.dataset = dataset_url;
    spec.reuse = reuse;
    spec.submitter = who;
    if (cnx_request_build(&spec, &body) != 0)
        goto usage_error;

    r.kafka = k;
    r.prog = PROG;
    r.request = id;
    r.tty = isatty(STDERR_FILENO);
    r.timeout_s = (int)timeout_s;
    r.timeout_given = timeout_given;
    r.interrupted = &interrupted;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    code = cnx_reprocess_submit_follow(&r, body);
    goto done;
usage_error:
    fprintf(stderr, PROG ": %s\n", cnx_error_last()->message);
    code = CNX_REPROCESS_USAGE;
done:
    cnx_workflow_free(wf);
    free(dataset_url);
    free(body);
    free(r.finished);
    return code;
}
