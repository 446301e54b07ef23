/*
 * cnx-submit - publish the tasks of one stage over a region (until the
 * controller plans them from workflows): opens the layer, cuts the region
 * into chunk tasks, lists every input object with its digest, and produces
 * one message per task to cnx.tasks.<stage>[.urgent], waiting for the
 * broker's acknowledgement. --dry-run prints the tasks instead.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnx/cli.h"
#include "cnx/downsample.h"
#include "cnx/error.h"
#include "cnx/kafka.h"
#include "cnx/lineage.h"
#include "cnx/mesh.h"
#include "cnx/precomputed.h"
#include "cnx/segment_io.h"
#include "cnx/submit.h"
#include "cnx/task.h"

#define PROG "cnx-submit"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " --brokers LIST --layer URL [options]\n"
            "       " PROG " --dry-run --layer URL [options]\n\n"
            "Publishes the tasks of one stage over a region of a layer.\n\n"
            "  --brokers LIST        Kafka bootstrap servers\n"
            "  --kafka-config FILE   extra librdkafka settings\n"
            "  --broker-timeout S    give up once no broker has answered\n"
            "                        for S seconds (default 120)\n"
            "  --stage NAME          downsample (default), segment or mesh\n"
            "  --layer URL           input layer\n"
            "  --scale KEY           input scale (default: the first)\n"
            "  --output URL          output layer (default: the input layer)\n"
            "  --output-scale KEY    output scale (downsample: the next mip)\n"
            "  --roi x0,y0,z0,x1,y1,z1  region in input voxels (default: all)\n"
            "  --task-size X,Y,Z     task box (default 128,128,128)\n"
            "  --halo N              voxels read around each box "
            "(downsample: 0;\n"
            "                        segment: the kernel's, from the\n"
            "                        parameters and resolution; mesh: 1)\n"
            "  --parameters JSON     stage parameters (default {})\n"
            "  --request ID          request id (default req-<time>-<pid>)\n"
            "  --deadline T          RFC 3339 time or hours from now as NNh "
            "(default 24h)\n"
            "  --retry-budget N      retries per task (default 3)\n"
            "  --urgent              publish to the urgent lane\n"
            "  --reverse             publish in reverse order\n"
            "  --dry-run             print the tasks, one per line\n"
            "  --help                this text\n");
}

static int fail_usage(const char *what, const char *arg)
{
    fprintf(stderr, PROG ": %s '%s' (see --help)\n", what, arg ? arg : "");
    return 2;
}

/* The output scale a stage writes by default: downsample the next mip of
 * the input scale, the others the input scale itself. */
static int default_output_scale(const cnx_submit_opts *o, char *buf,
                                size_t n)
{
    cnx_layer *layer;
    const cnx_layer_info *info;
    cnx_scale next;
    int s, rc = 0;
    if (cnx_layer_open(&layer, o->layer) != 0)
        return -1;
    info = cnx_layer_get_info(layer);
    s = o->scale ? cnx_info_find_scale(info, o->scale) : 0;
    if (s < 0)
        rc = cnx_error_set(CNX_EINVAL, 0, "no scale '%s'", o->scale);
    else if (strcmp(o->stage, "downsample") != 0)
        snprintf(buf, n, "%s", info->scales[s].key);
    else if (cnx_downsample_next_scale(&info->scales[s], &next) == 0)
        snprintf(buf, n, "%s", next.key);
    else
        rc = -1;
    cnx_layer_free(layer);
    return rc;
}

/*
 * The segment kernel's halo for the task parameters at the input scale's
 * resolution (what the workflow planner derives; docs/workflows.md).
 * Parameters the kernel refuses give 2: the task is published as asked,
 * and the worker refuses it, naming the parameter.
 * @return 0, or -1 with the error set (the layer cannot be read).
 */
static int segment_halo(const cnx_submit_opts *o, int64_t *halo)
{
    cnx_segment_params p;
    cnx_layer *layer;
    const cnx_layer_info *info;
    int s, rc = 0;
    if (cnx_layer_open(&layer, o->layer) != 0)
        return -1;
    info = cnx_layer_get_info(layer);
    s = o->scale ? cnx_info_find_scale(info, o->scale) : 0;
    *halo = 2;
    if (s < 0)
        rc = cnx_error_set(CNX_EINVAL, 0, "no scale '%s'", o->scale);
    else if (cnx_segment_params_at(&p, o->parameters,
                                   info->scales[s].resolution) == 0)
        *halo = cnx_segment_halo(&p);
    if (rc == 0 && *halo > CNX_TASK_HALO_MAX)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "the segment kernel needs a halo of %lld for these "
                           "parameters, over %d (give --halo)",
                           (long long)*halo, CNX_TASK_HALO_MAX);
    cnx_layer_free(layer);
    return rc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    enum {
        O_BROKERS = 256, O_KCONF, O_STAGE, O_LAYER, O_SCALE, O_OUTPUT,
        O_OSCALE, O_ROI, O_TASK, O_HALO, O_PARAMS, O_REQUEST, O_DEADLINE,
        O_BUDGET, O_URGENT, O_REVERSE, O_DRY, O_HELP, O_BROKER_TIMEOUT
    };
    static const struct option longopts[] = {
        {"brokers", required_argument, NULL, O_BROKERS},
        {"kafka-config", required_argument, NULL, O_KCONF},
        {"broker-timeout", required_argument, NULL, O_BROKER_TIMEOUT},
        {"stage", required_argument, NULL, O_STAGE},
        {"layer", required_argument, NULL, O_LAYER},
        {"scale", required_argument, NULL, O_SCALE},
        {"output", required_argument, NULL, O_OUTPUT},
        {"output-scale", required_argument, NULL, O_OSCALE},
        {"roi", required_argument, NULL, O_ROI},
        {"task-size", required_argument, NULL, O_TASK},
        {"halo", required_argument, NULL, O_HALO},
        {"parameters", required_argument, NULL, O_PARAMS},
        {"request", required_argument, NULL, O_REQUEST},
        {"deadline", required_argument, NULL, O_DEADLINE},
        {"retry-budget", required_argument, NULL, O_BUDGET},
        {"urgent", no_argument, NULL, O_URGENT},
        {"reverse", no_argument, NULL, O_REVERSE},
        {"dry-run", no_argument, NULL, O_DRY},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    cnx_submit_opts o;
    cnx_kafka_opts k = {NULL, NULL, PROG, 0};
    char request[64], deadline[32], oscale[CNX_SCALE_KEY_MAX], topic[96];
    const char *deadline_arg = "24h";
    int64_t v[6];
    int dry = 0, reverse = 0, c, halo_set = 0;
    char **tasks = NULL;
    size_t ntasks = 0;
    cnx_producer *producer = NULL;
    int rc = 0;

    memset(&o, 0, sizeof(o));
    o.stage = "downsample";
    o.retry_budget = 3;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_BROKERS: k.brokers = optarg; break;
        case O_KCONF: k.config_file = optarg; break;
        case O_BROKER_TIMEOUT:
            if (cnx_kafka_broker_timeout_parse(optarg,
                                               &k.broker_timeout_s) != 0)
                return fail_usage("bad --broker-timeout (seconds over 0, "
                                  "at most 86400)", optarg);
            break;
        case O_STAGE: o.stage = optarg; break;
        case O_LAYER: o.layer = optarg; break;
        case O_SCALE: o.scale = optarg; break;
        case O_OUTPUT: o.output_layer = optarg; break;
        case O_OSCALE: o.output_scale = optarg; break;
        case O_ROI:
            if (cnx_cli_ints(optarg, v, 6) != 0)
                return fail_usage("bad --roi", optarg);
            o.roi = cnx_box_make(v[0], v[1], v[2], v[3], v[4], v[5]);
            o.has_roi = 1;
            break;
        case O_TASK:
            if (cnx_cli_ints(optarg, o.task_size, 3) != 0 ||
                o.task_size[0] < 1 || o.task_size[1] < 1 ||
                o.task_size[2] < 1)
                return fail_usage("bad --task-size", optarg);
            break;
        case O_HALO:
            if (cnx_cli_ints(optarg, &o.halo, 1) != 0 || o.halo < 0 ||
                o.halo > CNX_TASK_HALO_MAX)
                return fail_usage("bad --halo", optarg);
            halo_set = 1;
            break;
        case O_PARAMS: o.parameters = optarg; break;
        case O_REQUEST: o.request = optarg; break;
        case O_DEADLINE: deadline_arg = optarg; break;
        case O_BUDGET:
            if (cnx_cli_ints(optarg, &o.retry_budget, 1) != 0 ||
                o.retry_budget < 0 || o.retry_budget > 100)
                return fail_usage("bad --retry-budget", optarg);
            break;
        case O_URGENT: o.urgent = 1; break;
        case O_REVERSE: reverse = 1; break;
        case O_DRY: dry = 1; break;
        case O_HELP: usage(stdout); return 0;
        default: return fail_usage("unknown option", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail_usage("unexpected argument", argv[optind]);
    if (o.layer == NULL)
        return fail_usage("missing --layer", "");
    if (!dry && k.brokers == NULL)
        return fail_usage("missing --brokers (or --dry-run)", "");
    if (o.request == NULL) {
        snprintf(request, sizeof(request), "req-%lld-%ld",
                 (long long)time(NULL), (long)getpid());
        o.request = request;
    }
    {
        size_t n = strlen(deadline_arg);
        int64_t unix_time;
        if (n > 1 && deadline_arg[n - 1] == 'h') {
            char num[32];
            int64_t hours;
            snprintf(num, sizeof(num), "%.*s", (int)(n - 1), deadline_arg);
            if (cnx_cli_ints(num, &hours, 1) != 0 || hours < 0 || hours > 87600)
                return fail_usage("bad --deadline", deadline_arg);
            unix_time = (int64_t)time(NULL) + hours * 3600;
            cnx_rfc3339_format((double)unix_time, deadline);
            /* Whole seconds: drop the milliseconds. */
            snprintf(deadline + 19, sizeof(deadline) - 19, "Z");
        } else if (cnx_rfc3339_parse(deadline_arg, &unix_time) == 0) {
            snprintf(deadline, sizeof(deadline), "%s", deadline_arg);
        } else {
            return fail_usage("bad --deadline", deadline_arg);
        }
        o.deadline = deadline;
    }
    if (strcmp(o.stage, "downsample") == 0) {
        o.input_role = "source";
        o.kernel_version = CNX_DOWNSAMPLE_VERSION;
        if (!halo_set)
            o.halo = 0;
    } else if (strcmp(o.stage, "segment") == 0) {
        o.input_role = "boundary";
        o.kernel_version = CNX_SEGMENT_VERSION;
        if (!halo_set && segment_halo(&o, &o.halo) != 0)
            goto runtime;
    } else if (strcmp(o.stage, "mesh") == 0) {
        o.input_role = "segmentation";
        o.kernel_version = CNX_MESH_VERSION;
        if (!halo_set)
            o.halo = 1;
    } else {
        return fail_usage("no task planner for stage (downsample, segment, "
                          "mesh)",
                          o.stage);
    }
    if (o.output_scale == NULL) {
        if (default_output_scale(&o, oscale, sizeof(oscale)) != 0)
            goto runtime;
        o.output_scale = oscale;
    }
    if (cnx_submit_plan(&o, &tasks, &ntasks) != 0)
        goto runtime;
    if (!dry && cnx_producer_new(&producer, &k) != 0)
        goto runtime;
    cnx_topic_tasks(topic, sizeof(topic), o.stage, o.urgent);
    for (size_t i = 0; i < ntasks; i++) {
        const char *t = tasks[reverse ? ntasks - 1 - i : i];
        if (dry) {
            printf("%s\n", t);
        } else if (cnx_producer_send(producer, topic, NULL, t, strlen(t), NULL,
                                     0) != 0) {
            goto runtime;
        }
    }
    if (!dry) {
        if (cnx_producer_flush(producer, 30000) != 0)
            goto runtime;
        printf(PROG ": %zu %s task(s) of request %s published to %s\n",
               ntasks, o.stage, o.request, topic);
    }
    goto done;
runtime:
    fprintf(stderr, PROG ": %s\n", cnx_error_last()->message);
    rc = 1;
done:
    for (size_t i = 0; i < ntasks; i++)
        free(tasks[i]);
    free(tasks);
    cnx_producer_free(producer);
    return rc;
}
