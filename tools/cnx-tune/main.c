/*
 * cnx-tune - fit the segmentation parameters to a ground-truth cube and
 * write a workflow that uses them (docs/tune.md).
 *
 * Thin: options -> read the cube (cnx_tune_read) -> search (cnx_tune_run)
 * -> print the merge_threshold curve and the choice -> write the tuned
 * workflow (cnx_tune_params_json, cnx_tune_workflow). Exit 0 done, 1
 * failed, 2 bad arguments (also a base workflow or layers that cannot be
 * tuned as asked).
 */
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/segment_io.h"
#include "cnx/tune.h"
#include "cnx/url.h"
#include "cnx/workflow.h"

#define PROG "cnx-tune"
#define EXIT_FAILED 1
#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: " PROG " --gt URL --input URL [--out FILE] [options]\n\n"
        "Searches the segmentation parameters that best reproduce a\n"
        "ground-truth cube (lowest VI split + merge, CREMI convention: gt 0\n"
        "ignored), prints the merge_threshold curve and the choice, and\n"
        "writes the base workflow with those parameters in its \"segment\"\n"
        "and \"segment-join\" stages. The same inputs and budget always give\n"
        "the same file. Tune on one cube, check on another (docs/tune.md).\n\n"
        "  --gt URL             the ground truth: a uint64 (or uint32)\n"
        "                       segmentation layer (file:///, s3://, gs://,\n"
        "                       http(s)://, or a directory)\n"
        "  --gt-scale KEY       its scale (default: the one at the input's\n"
        "                       resolution)\n"
        "  --input URL          the layer the workflow's segment stage reads:\n"
        "                       a uint8 or float32 boundary map, or the raw\n"
        "                       EM image with --raw\n"
        "  --input-scale KEY    its scale (default: the first)\n"
        "  --roi x0,y0,z0,x1,y1,z1  the cube, voxels of those scales,\n"
        "                       half-open (default: all the two share)\n"
        "  --workflow NAME      the base workflow: <dir>/NAME.json, or a\n"
        "                       path if NAME has a '/' or ends in .json\n"
        "                       (default segmentation)\n"
        "  --workflows DIR      workflow directory (default $CNX_WORKFLOWS,\n"
        "                       else <bin>/../../workflows, else\n"
        "                       /usr/share/cnx/workflows)\n"
        "  --out FILE           write the tuned workflow there (replaced if\n"
        "                       it exists; default: write nothing)\n"
        "  --budget N           kernel evaluations at most, 1..%d\n"
        "                       (default 60): bounds the time; 1 scores\n"
        "                       the workflow's own parameters only (to\n"
        "                       check a tuned workflow on another cube)\n"
        "  --raw                the input is raw EM: sets raw_input and\n"
        "                       searches the membrane filter too (default:\n"
        "                       raw_input as the base workflow has it)\n"
        "  --quiet              no progress bar or notes on stderr\n"
        "  --help               this text\n\n"
        "Prints the curve, the chosen parameters and their VI on stdout;\n"
        "a progress bar (evaluations of the budget) on stderr when it is a\n"
        "terminal.\n\n"
        "Exit status: 0 done, 1 failed (storage, memory, kernel), 2 bad\n"
        "arguments, workflow or layers.\n",
        CNX_TUNE_MAX_BUDGET);
}

#define fail_usage(...) cnx_cli_usage_error(PROG, EXIT_USAGE, __VA_ARGS__)

/* The last error's message, with its code's exit status: bad input is a
 * usage error, the rest (storage, memory) a failure. */
static int fail_last(void)
{
    const cnx_error *e = cnx_error_last();
    fprintf(stderr, PROG ": %s\n", e->message);
    return e->code == CNX_EINVAL || e->code == CNX_ESCHEMA ||
                   e->code == CNX_ETOOBIG
               ? EXIT_USAGE
               : EXIT_FAILED;
}

static int read_file(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    *out = NULL;
    if (f == NULL)
        return -1;
    for (;;) {
        size_t got;
        if (n + 4096 + 1 > cap) {
            char *p;
            cap = cap > 0 ? cap * 2 : 65536;
            p = cap <= (64u << 20) ? realloc(buf, cap) : NULL;
            if (p == NULL) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = p;
        }
        got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* Write to path.tmp, then rename: a reader never sees half a file. */
static int write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX + 8];
    FILE *f;
    int ok;
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (f == NULL)
        return -1;
    ok = fputs(text, f) >= 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

static void on_progress(void *ctx, int64_t done, int64_t budget)
{
    (void)budget;
    cnx_progress_update(ctx, done);
}

static void print_scores(const char *what, const cnx_tune_eval *e)
{
    printf("%s: vi_split %.9f vi_merge %.9f vi_sum %.9f segments %u\n", what,
           e->scores.vi_split, e->scores.vi_merge,
           e->scores.vi_split + e->scores.vi_merge, (unsigned)e->nlabels);
}

static void print_curve(const cnx_tune_result *r)
{
    const char *key = NULL;
    for (size_t i = 0; i < r->ncurve; i++) {
        const cnx_tune_point *pt = &r->curve[i];
        if (key == NULL || strcmp(key, pt->key) != 0) {
            key = pt->key;
            printf("%-16s %9s %9s %9s %9s\n", key, "vi_split", "vi_merge",
                   "vi_sum", "segments");
        }
        printf("%-16g %9.4f %9.4f %9.4f %9u\n", pt->value, pt->scores.vi_split,
               pt->scores.vi_merge, pt->scores.vi_split + pt->scores.vi_merge,
               (unsigned)pt->nlabels);
    }
}

/* The base workflow's "segment" stage (the first one). */
static const cnx_wf_stage *segment_stage(const cnx_workflow *wf)
{
    for (size_t i = 0; i < wf->nstages; i++)
        if (strcmp(wf->stages[i].worker, "segment") == 0)
            return &wf->stages[i];
    return NULL;
}

/* Notes on stderr where the tuned workflow may not run as tuned. */
static void notes(const cnx_wf_stage *st, const char *input_url,
                  const cnx_segment_params *best)
{
    const char *layer = st->ninputs > 0 ? st->inputs[0].layer : NULL;
    size_t ul = strlen(input_url), ll = layer != NULL ? strlen(layer) : 0;
    int64_t halo = cnx_segment_halo(best);
    if (layer != NULL && !(ul > ll && strcmp(input_url + ul - ll, layer) == 0 &&
                           input_url[ul - ll - 1] == '/'))
        fprintf(stderr, PROG ": note: stage %s reads layer '%s', tuned on %s\n",
                st->name, layer, input_url);
    if (st->halo_pinned && st->halo < halo)
        fprintf(stderr,
                PROG ": note: stage %s pins halo %lld; these parameters "
                     "need %lld for chunks to match the whole-volume result\n",
                st->name, (long long)st->halo, (long long)halo);
}

int main(int argc, char **argv)
{
    enum {
        O_GT = 256,
        O_GT_SCALE,
        O_INPUT,
        O_INPUT_SCALE,
        O_ROI,
        O_WORKFLOW,
        O_WORKFLOWS,
        O_OUT,
        O_BUDGET,
        O_RAW,
        O_QUIET,
        O_HELP
    };
    static const struct option longopts[] = {
        {"gt", required_argument, NULL, O_GT},
        {"gt-scale", required_argument, NULL, O_GT_SCALE},
        {"input", required_argument, NULL, O_INPUT},
        {"input-scale", required_argument, NULL, O_INPUT_SCALE},
        {"roi", required_argument, NULL, O_ROI},
        {"workflow", required_argument, NULL, O_WORKFLOW},
        {"workflows", required_argument, NULL, O_WORKFLOWS},
        {"out", required_argument, NULL, O_OUT},
        {"budget", required_argument, NULL, O_BUDGET},
        {"raw", no_argument, NULL, O_RAW},
        {"quiet", no_argument, NULL, O_QUIET},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0}};
    const char *gt = NULL, *input = NULL, *roi_text = NULL, *out = NULL;
    const char *workflow = "segmentation", *workflows = NULL;
    char wf_path[PATH_MAX + 256], note[1024], box_text[160];
    static cnx_url gt_url, input_url;
    cnx_tune_source src;
    cnx_tune_config cfg;
    cnx_tune_data data;
    cnx_tune_result *r = NULL;
    cnx_workflow *wf = NULL;
    const cnx_wf_stage *st;
    cnx_segment_params base;
    cnx_progress *bar = NULL;
    cnx_box roi;
    int64_t v[6];
    char *base_text = NULL, *params = NULL, *tuned = NULL;
    size_t base_len = 0;
    int raw = 0, quiet = 0, c, code = EXIT_FAILED;
    const cnx_tune_eval *best;

    memset(&src, 0, sizeof(src));
    memset(&data, 0, sizeof(data));
    cnx_tune_config_init(&cfg);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_GT:
            gt = optarg;
            break;
        case O_GT_SCALE:
            src.gt_scale = optarg;
            break;
        case O_INPUT:
            input = optarg;
            break;
        case O_INPUT_SCALE:
            src.input_scale = optarg;
            break;
        case O_ROI:
            roi_text = optarg;
            break;
        case O_WORKFLOW:
            workflow = optarg;
            break;
        case O_WORKFLOWS:
            workflows = optarg;
            break;
        case O_OUT:
            out = optarg;
            break;
        case O_BUDGET:
            if (cnx_cli_int(optarg, 1, CNX_TUNE_MAX_BUDGET, &cfg.budget) != 0)
                return fail_usage("--budget '%s': want an integer 1..%d",
                                  optarg, CNX_TUNE_MAX_BUDGET);
            break;
        case O_RAW:
            raw = 1;
            break;
        case O_QUIET:
            quiet = 1;
            break;
        case O_HELP:
            usage(stdout);
            return 0;
        case ':':
            return fail_usage("%s: missing value", argv[optind - 1]);
        default:
            return fail_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail_usage("unexpected argument '%s'", argv[optind]);
    if (gt == NULL)
        return fail_usage("missing --gt");
    if (input == NULL)
        return fail_usage("missing --input");
    if (out != NULL && out[0] == '\0')
        return fail_usage("--out: empty file name");
    if (roi_text != NULL) {
        if (cnx_cli_ints(roi_text, v, 6) != 0)
            return fail_usage("--roi '%s': want x0,y0,z0,x1,y1,z1", roi_text);
        roi = cnx_box_make(v[0], v[1], v[2], v[3], v[4], v[5]);
        if (cnx_box_empty(&roi))
            return fail_usage("--roi '%s': empty (max must exceed min)",
                              roi_text);
        src.roi = &roi;
    }
    if (cnx_url_parse(&gt_url, gt, CNX_URL_ALLOW_PATH) != 0)
        return fail_usage("--gt: %s", cnx_error_last()->message);
    if (cnx_url_parse(&input_url, input, CNX_URL_ALLOW_PATH) != 0)
        return fail_usage("--input: %s", cnx_error_last()->message);
    src.gt_url = gt_url.canonical;
    src.input_url = input_url.canonical;

    /* The base workflow and its segment stage's parameters. */
    if (cnx_workflow_path(workflow, workflows, wf_path, sizeof(wf_path)) != 0)
        return fail_last();
    if (read_file(wf_path, &base_text, &base_len) != 0) {
        code = fail_usage("workflow %s: cannot read it", wf_path);
        goto done;
    }
    if (cnx_workflow_parse(&wf, base_text, base_len) != 0) {
        code =
            fail_usage("workflow %s: %s", wf_path, cnx_error_last()->message);
        goto done;
    }
    st = segment_stage(wf);
    if (st == NULL) {
        code =
            fail_usage("workflow %s: no stage has worker \"segment\"", wf_path);
        goto done;
    }
    if (st->kernel_version != CNX_SEGMENT_VERSION) {
        code = fail_usage("workflow %s: stage %s: kernel_version %lld, but "
                          "this build tunes kernel version %d",
                          wf_path, st->name, (long long)st->kernel_version,
                          CNX_SEGMENT_VERSION);
        goto done;
    }

    /* The cube. */
    if (cnx_tune_read(&data, &src) != 0) {
        code = fail_last();
        goto done;
    }
    /* The parse starts from the defaults (8 nm): the cube's resolution
     * goes in after it. */
    if (cnx_segment_params_parse(&base, st->parameters) != 0) {
        code = fail_usage("workflow %s: stage %s: %s", wf_path, st->name,
                          cnx_error_last()->message);
        goto done;
    }
    memcpy(base.resolution, data.resolution, sizeof(base.resolution));
    if (raw)
        base.raw_input = 1;
    snprintf(box_text, sizeof(box_text), "%lld,%lld,%lld,%lld,%lld,%lld",
             (long long)data.box.min[0], (long long)data.box.min[1],
             (long long)data.box.min[2], (long long)data.box.max[0],
             (long long)data.box.max[1], (long long)data.box.max[2]);
    printf("gt %s (scale %s), input %s (scale %s, %s%s), roi %s: %lld "
           "voxels of %gx%gx%g nm\n",
           src.gt_url, data.gt_scale, src.input_url, data.input_scale,
           cnx_dtype_name(data.vol.dtype), base.raw_input ? ", raw" : "",
           box_text, (long long)cnx_box_voxels(&data.box), data.resolution[0],
           data.resolution[1], data.resolution[2]);
    fflush(stdout);

    /* The search. */
    bar = cnx_progress_start(PROG, cfg.budget, quiet || !isatty(STDERR_FILENO));
    cfg.progress = on_progress;
    cfg.progress_ctx = bar;
    if (cnx_tune_run(&r, &cfg, &base, &data.vol) != 0) {
        cnx_progress_abort(bar);
        code = fail_last();
        goto done;
    }
    cnx_progress_finish(bar);
    best = &r->evals[r->best];

    /* What it found, and the file. */
    if (cnx_tune_params_json(&params, st->parameters, &best->params, &cfg) !=
        0) {
        code = fail_last();
        goto done;
    }
    snprintf(note, sizeof(note),
             "Parameters tuned by cnx-tune on %s %s: VI split %.4f, merge "
             "%.4f.",
             src.gt_url, box_text, best->scores.vi_split,
             best->scores.vi_merge);
    if (cnx_tune_workflow(&tuned, base_text, base_len, params, note) != 0) {
        code =
            fail_usage("workflow %s: %s", wf_path, cnx_error_last()->message);
        goto done;
    }
    print_curve(r);
    print_scores("base", &r->evals[0]);
    printf("parameters: %s\n", params);
    print_scores("tuned", best);
    printf("evaluations %zu of %lld (boundary maps %lld) in %.1f s\n",
           r->nevals, (long long)cfg.budget, (long long)r->boundary_maps,
           r->seconds);
    if (out != NULL && write_file(out, tuned) != 0) {
        fprintf(stderr, PROG ": %s: cannot write it\n", out);
        code = EXIT_FAILED;
        goto done;
    }
    if (out != NULL)
        printf("wrote %s\n", out);
    if (!quiet)
        notes(st, src.input_url, &best->params);
    code = 0;
done:
    free(tuned);
    free(params);
    cnx_tune_result_free(r);
    cnx_tune_data_dispose(&data);
    cnx_workflow_free(wf);
    free(base_text);
    return code;
}
