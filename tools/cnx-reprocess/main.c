/*
 * cnx-reprocess - ask for a region of a dataset to be reprocessed through
 * a workflow, and (with --wait) follow it to the end: a progress bar per
 * stage with an ETA against the deadline, then a summary with the SLO, the
 * cost and whether every task repeated from an earlier run gave
 * bit-identical outputs. The request and the controller's answers travel
 * on cnx.requests (docs/reprocess.md); this file is the loop around Kafka,
 * the clock and the terminal, the rest is libcnx/src/reprocess.c.
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
#include "cnx/workflow.h"

#define PROG "cnx-reprocess"
#define ANSWER_TIMEOUT_S 60
#define POLL_MS 200

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
    (void)sig;
    interrupted = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROG " --brokers LIST --workflow NAME --dataset URL\n"
        "                     --roi x0,y0,z0,x1,y1,z1 [options]\n\n"
        "Asks the controller to reprocess a region of a dataset through a\n"
        "workflow; with --wait, follows it and reports the deadline (SLO),\n"
        "the cost and whether repeated tasks gave bit-identical outputs.\n\n"
        "  --brokers LIST        Kafka bootstrap servers\n"
        "  --kafka-config FILE   extra librdkafka settings (TLS, SASL)\n"
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

static int fail_usage(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* One line on stderr; exit status 2. */
static int fail_usage(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, PROG ": %s (see --help)\n", line);
    return CNX_REPROCESS_USAGE;
}

/* Directory of the running executable, or "" if unknown. */
static void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    char *slash;
    if (len <= 0) {
        buf[0] = '\0';
        return;
    }
    buf[len] = '\0';
    slash = strrchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
}

/* Resolve --workflow NAME to a file path. */
static int workflow_path(const char *name, const char *dir, char *out,
                         size_t n)
{
    size_t len = strlen(name);
    char bin[PATH_MAX];
    const char *candidates[3];
    char fallback[PATH_MAX + 32];
    size_t k = 0;

    if (strchr(name, '/') != NULL ||
        (len > 5 && strcmp(name + len - 5, ".json") == 0)) {
        snprintf(out, n, "%s", name);
        return 0;
    }
    if (dir != NULL) {
        candidates[k++] = dir;
    } else if (getenv("CNX_WORKFLOWS") != NULL &&
               getenv("CNX_WORKFLOWS")[0] != '\0') {
        candidates[k++] = getenv("CNX_WORKFLOWS");
    } else {
        exe_dir(bin, sizeof(bin));
        if (bin[0] != '\0') {
            snprintf(fallback, sizeof(fallback), "%s/../../workflows", bin);
            candidates[k++] = fallback;
        }
        candidates[k++] = "/usr/share/cnx/workflows";
    }
    for (size_t i = 0; i < k; i++) {
        snprintf(out, n, "%s/%s.json", candidates[i], name);
        if (access(out, R_OK) == 0)
            return 0;
    }
    /* Not found: report the first place looked. */
    snprintf(out, n, "%s/%s.json", candidates[0], name);
    return 0;
}

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

/* Start positions for the reader: the ends taken just before producing. */
typedef struct ends {
    cnx_position *pos;
    size_t n;
} ends;

static int64_t start_at(void *ctx, const char *topic, int32_t partition)
{
    const ends *e = ctx;
    for (size_t i = 0; i < e->n; i++)
        if (e->pos[i].partition == partition &&
            strcmp(e->pos[i].topic, topic) == 0)
            return e->pos[i].offset;
    return CNX_OFFSET_END;
}

/*
 * A reader positioned at the current end of cnx.requests. An assignment
 * at "end" is resolved lazily by librdkafka, possibly after our request and
 * a fast answer are written; so ask for the ends first and start from those
 * exact offsets.
 */
static int open_reader(cnx_consumer **out, const cnx_kafka_opts *k,
                       int timeout_ms)
{
    static const char *const topics[] = {CNX_TOPIC_REQUESTS};
    cnx_consumer *probe = NULL;
    ends e = {NULL, 0};
    int rc = cnx_reader_new(&probe, k, topics, 1, NULL, NULL);
    if (rc == 0)
        rc = cnx_reader_ends(probe, &e.pos, &e.n, timeout_ms);
    cnx_consumer_free(probe);
    if (rc == 0)
        rc = cnx_reader_new(out, k, topics, 1, start_at, &e);
    free(e.pos);
    return rc;
}

typedef struct run {
    const char *request;
    int json;
    int quiet;
    int wait;
    int tty;
    char *plan;      /* the accepted message, JSON */
    size_t plan_len;
} run;

static void put_text(const char *s)
{
    if (s != NULL && s[0] != '\0') {
        fputs(s, stderr);
        fflush(stderr);
    }
}

/* Print a result as JSON on stdout (--json). */
static void put_json(const run *r, const cnx_message *msg, int code)
{
    char *out = NULL;
    if (cnx_reprocess_result_json(msg->value, msg->len, r->plan,
                                  r->plan_len, code, &out) == 0)
        printf("%s\n", out);
    else
        fprintf(stderr, PROG ": %s\n", cnx_error_last()->message);
    free(out);
}

/* Give up with exit status 1. */
static int fail_runtime(const run *r, const char *what)
{
    fprintf(stderr, PROG ": %s\n", what);
    if (r->json) {
        char *out = NULL;
        if (cnx_reprocess_error_json(r->request, what, CNX_REPROCESS_ERROR,
                                     &out) == 0)
            printf("%s\n", out);
        free(out);
    }
    return CNX_REPROCESS_ERROR;
}

static void report_accepted(const run *r, const cnx_request_state *st)
{
    if (r->quiet || r->json)
        return;
    fprintf(stderr, "request %s: %lld task%s in %zu stage%s\n",
            st->request, (long long)st->tasks, st->tasks == 1 ? "" : "s",
            st->nstages, st->nstages == 1 ? "" : "s");
    for (size_t i = 0; i < st->nstages; i++) {
        const cnx_state_stage *s = &st->stages[i];
        fprintf(stderr,
                "  %s (%s, %s): %lld tasks over [%lld,%lld,%lld]-[%lld,"
                "%lld,%lld] at %s -> %s %s\n",
                s->stage, s->worker, s->reduce ? "reduce" : "map",
                (long long)s->tasks, (long long)s->region.min[0],
                (long long)s->region.min[1], (long long)s->region.min[2],
                (long long)s->region.max[0], (long long)s->region.max[1],
                (long long)s->region.max[2], s->scale, s->output_layer,
                s->output_scale);
    }
    for (size_t i = 0; i < st->nnotes; i++)
        fprintf(stderr, "  note: %s\n", st->notes[i]);
    fprintf(stderr, "  deadline %s\n", st->deadline);
}

/*
 * Follow the request until the answer (and with --wait, the end). Returns
 * the exit status.
 */
static int follow(run *r, cnx_consumer *reader, double answer_by,
                  double finish_by, int timeout_s)
{
    cnx_reprocess_view *view = NULL;
    int accepted = 0, warned = 0, code = -1;
    char why[600];

    if (cnx_reprocess_view_new(&view, r->tty) != 0)
        return fail_runtime(r, cnx_error_last()->message);
    while (code < 0) {
        cnx_message *msg = NULL;
        cnx_request_state *st = NULL;
        double mono = cnx_now();
        char *txt = NULL;
        int rc;

        if (interrupted) {
            snprintf(why, sizeof(why),
                     "interrupted; request %s goes on at the controller",
                     r->request);
            code = fail_runtime(r, why);
            break;
        }
        if (!accepted && mono > answer_by) {
            snprintf(why, sizeof(why),
                     "no answer from the controller within %d s (request "
                     "%s; is cnx-controller running?)",
                     timeout_s, r->request);
            code = fail_runtime(r, why);
            break;
        }
        if (mono > finish_by) {
            snprintf(why, sizeof(why),
                     "request %s not finished within %d s (it goes on at "
                     "the controller)",
                     r->request, timeout_s);
            code = fail_runtime(r, why);
            break;
        }
        if (r->wait && accepted && !r->quiet &&
            cnx_reprocess_view_tick(view, mono, (int64_t)time(NULL),
                                    &txt) == 0)
            put_text(txt);
        free(txt);
        txt = NULL;
        rc = cnx_consumer_poll(reader, POLL_MS, &msg);
        if (rc != 0 && !cnx_error_last()->retriable && msg == NULL) {
            snprintf(why, sizeof(why), "reading %s: %s", CNX_TOPIC_REQUESTS,
                     cnx_error_last()->message);
            code = fail_runtime(r, why);
            break;
        }
        if (msg == NULL)
            continue;
        if (msg->value == NULL ||
            (msg->key != NULL &&
             (msg->key_len != strlen(r->request) ||
              memcmp(msg->key, r->request, msg->key_len) != 0))) {
            cnx_message_free(msg);
            continue;
        }
        rc = cnx_request_state_parse(&st, msg->value, msg->len);
        if (rc != 0) {
            /* Our own request (another schema) is expected; a malformed
             * answer is reported once and skipped. */
            if (rc != CNX_ENOTFOUND && !warned && !r->quiet) {
                fprintf(stderr, PROG ": ignoring a malformed message at %s "
                                "[%d] offset %lld: %s\n",
                        msg->topic, (int)msg->partition,
                        (long long)msg->offset, cnx_error_last()->message);
                cnx_reprocess_view_detach(view);
                warned = 1;
            }
            cnx_message_free(msg);
            continue;
        }
        if (strcmp(st->request, r->request) != 0) {
            cnx_request_state_free(st);
            cnx_message_free(msg);
            continue;
        }
        switch (st->type) {
        case CNX_STATE_REFUSED:
            if (accepted)
                break;
            fprintf(stderr, PROG ": request %s refused: %s\n", st->request,
                    st->error);
            code = CNX_REPROCESS_USAGE;
            if (r->json)
                put_json(r, msg, code);
            break;
        case CNX_STATE_ACCEPTED:
            if (accepted)
                break;
            accepted = 1;
            free(r->plan);
            r->plan = malloc(msg->len + 1);
            if (r->plan == NULL) {
                code = fail_runtime(r, "out of memory");
                break;
            }
            memcpy(r->plan, msg->value, msg->len);
            r->plan[msg->len] = '\0';
            r->plan_len = msg->len;
            report_accepted(r, st);
            if (!r->wait) {
                code = CNX_REPROCESS_DONE;
                if (r->json)
                    put_json(r, msg, code);
                else
                    printf("%s\n", r->request);
            }
            break;
        case CNX_STATE_PROGRESS:
        case CNX_STATE_SLO:
            /* The controller answers in order (one key, one partition),
             * so this is past its acceptance (whose message we missed only
             * if it was lost). */
            accepted = 1;
            if (!r->wait) {
                code = CNX_REPROCESS_DONE;
                if (r->json)
                    put_json(r, msg, code);
                else
                    printf("%s\n", r->request);
                break;
            }
            if (!r->quiet && cnx_reprocess_view_update(
                                 view, st, mono, (int64_t)time(NULL),
                                 &txt) == 0)
                put_text(txt);
            free(txt);
            txt = NULL;
            break;
        case CNX_STATE_FINISHED:
            accepted = 1;
            code = cnx_reprocess_exit_code(st);
            if (!r->quiet &&
                cnx_reprocess_summary_text(st, &txt) == 0)
                put_text(txt);
            free(txt);
            txt = NULL;
            if (r->json)
                put_json(r, msg, code);
            break;
        }
        cnx_request_state_free(st);
        cnx_message_free(msg);
    }
    cnx_reprocess_view_free(view);
    fflush(stdout);
    return code;
}

int main(int argc, char **argv)
{
    enum {
        O_BROKERS = 256, O_KCONF, O_WORKFLOW, O_WORKFLOWS, O_DATASET, O_ROI,
        O_DEADLINE, O_WAIT, O_JSON, O_REUSE, O_REQUEST, O_TIMEOUT, O_QUIET,
        O_HELP, O_VERSION
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
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
    cnx_kafka_opts k = {NULL, NULL, PROG};
    cnx_request_spec spec;
    const char *workflow = NULL, *workflows = NULL, *dataset = NULL;
    const char *roi = NULL, *deadline = "24h", *request = NULL;
    char id[CNX_REQUEST_ID_MAX + 1], host[256], who[600];
    char wf_path[PATH_MAX + 256];
    int64_t timeout_s = ANSWER_TIMEOUT_S;
    int timeout_given = 0, reuse = 0, c;
    cnx_workflow *wf = NULL;
    char *dataset_url = NULL, *body = NULL;
    cnx_producer *producer = NULL;
    cnx_consumer *reader = NULL;
    run r;
    int code = CNX_REPROCESS_ERROR;
    double t0;

    memset(&r, 0, sizeof(r));
    memset(&spec, 0, sizeof(spec));
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: k.brokers = optarg; break;
        case O_KCONF: k.config_file = optarg; break;
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
    workflow_path(workflow, workflows, wf_path, sizeof(wf_path));
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

    r.request = id;
    r.tty = isatty(STDERR_FILENO);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (open_reader(&reader, &k, (int)(timeout_s < 30 ? timeout_s : 30) *
                                     1000) != 0 ||
        cnx_producer_new(&producer, &k) != 0 ||
        cnx_producer_send(producer, CNX_TOPIC_REQUESTS, id, body,
                          strlen(body), NULL, 0) != 0 ||
        cnx_producer_flush(producer, (int)(timeout_s < 30 ? timeout_s : 30) *
                                         1000) != 0) {
        code = fail_runtime(&r, cnx_error_last()->message);
        goto done;
    }
    t0 = cnx_now();
    code = follow(&r, reader, t0 + (double)timeout_s,
                  r.wait && !timeout_given ? 1e300 : t0 + (double)timeout_s,
                  (int)timeout_s);
    goto done;
usage_error:
    fprintf(stderr, PROG ": %s\n", cnx_error_last()->message);
    code = CNX_REPROCESS_USAGE;
done:
    cnx_consumer_free(reader);
    cnx_producer_free(producer);
    cnx_workflow_free(wf);
    free(dataset_url);
    free(body);
    free(r.plan);
    return code;
}
