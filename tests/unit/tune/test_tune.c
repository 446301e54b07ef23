/*
 * test_tune.c - the parameter search of cnx-tune (cnx/tune.h).
 *
 * The search against a known objective (a bowl with its minimum off the
 * grids: found within the steps' floor), its bounds (exactly the budget,
 * never more; an evaluation error ends it), its determinism (the same
 * calls in the same order), its ties (the earlier point stays), its
 * curve (the whole sweep grid, the base's point included) and its table
 * rules (filter rows only with raw_input; a bad table or budget refused
 * by name). The kernel as the evaluation on a constructed volume whose
 * answer is known: two cells split by weak walls (0.6) inside and a
 * strong wall (0.9) between them score VI 1 at the default threshold and
 * 0 once the search has found one in (0.6, 0.9], with one boundary map.
 * The writing: the parameters read back and in their order, the workflow
 * rewritten in place (other stages untouched, the note replaced on a
 * second run), a shipped workflow with nothing to change comes back byte
 * for byte, and a workflow without a segment stage is refused. Reading:
 * a uint32 gt is widened, a roi outside the layers is refused by name.
 */
#include <math.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/segment_io.h"
#include "cnx/tune.h"
#include "cnx/workflow.h"
#include "cnx_test.h"

/* ---- a known objective --------------------------------------------------- */

typedef struct bowl {
    int calls;
    int fail_at; /* return CNX_EIO on this call (1-based); 0: never */
    cnx_segment_params seen[512];
} bowl;

/* Minimum at merge 0.63, seed_threshold 0.33, min_size 300 voxels of 8 nm. */
static int bowl_eval(void *ctx, const cnx_segment_params *p, cnx_seg_scores *s,
                     uint32_t *nlabels)
{
    bowl *b = ctx;
    double m = p->merge_threshold - 0.63, t = p->seed_threshold - 0.33;
    b->calls++;
    if (b->fail_at == b->calls)
        return cnx_error_set(CNX_EIO, 1, "bowl: failed on call %d", b->calls);
    if (b->calls <= 512)
        b->seen[b->calls - 1] = *p;
    memset(s, 0, sizeof(*s));
    s->vi_split = m * m + 0.5 * t * t;
    s->vi_merge = 0.01 * fabs(log2(p->min_size_nm3 / (300.0 * 512.0)));
    *nlabels = 1;
    return 0;
}

static void test_tune__search_finds_the_bowl_minimum(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    bowl *b = calloc(1, sizeof(*b));
    const cnx_segment_params *best;
    (void)state;
    assert_non_null(b);
    cnx_tune_config_init(&cfg);
    cfg.budget = 300;
    cnx_segment_params_default(&base);
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, bowl_eval, b), 0);
    best = &r->evals[r->best].params;
    /* Within the floor of each step (0.1 / 8; a factor 2^(1/8)). */
    assert_true(fabs(best->merge_threshold - 0.63) <= 0.0125);
    assert_true(fabs(best->seed_threshold - 0.33) <= 0.0125);
    assert_true(fabs(log2(best->min_size_nm3 / (300.0 * 512.0))) <= 0.125);
    /* It stopped on its own, well inside the budget, and counted right. */
    assert_true(r->nevals < 300);
    assert_int_equal(b->calls, (int)r->nevals);
    /* Filter rows are left alone without raw_input. */
    for (size_t i = 0; i < r->nevals; i++) {
        assert_true(r->evals[i].params.filter_sigma_nm == base.filter_sigma_nm);
        assert_true(r->evals[i].params.filter_ridge == base.filter_ridge);
        assert_int_equal(r->evals[i].params.raw_input, 0);
    }
    /* The best is the minimum of everything evaluated. */
    for (size_t i = 0; i < r->nevals; i++)
        assert_true(r->evals[i].scores.vi_split + r->evals[i].scores.vi_merge >=
                    r->evals[r->best].scores.vi_split +
                        r->evals[r->best].scores.vi_merge);
    cnx_tune_result_free(r);

    /* From 0 (a value a factor cannot leave) the row still moves. */
    base.min_size_nm3 = 0;
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, bowl_eval, b), 0);
    best = &r->evals[r->best].params;
    assert_true(fabs(log2(best->min_size_nm3 / (300.0 * 512.0))) <= 0.125);
    cnx_tune_result_free(r);
    free(b);
}

static void test_tune__search_stops_at_the_budget(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    bowl *b = calloc(1, sizeof(*b));
    (void)state;
    assert_non_null(b);
    cnx_tune_config_init(&cfg);
    cnx_segment_params_default(&base);
    for (int64_t budget = 1; budget <= 13; budget += 3) {
        b->calls = 0;
        cfg.budget = budget;
        assert_int_equal(cnx_tune_search(&r, &cfg, &base, bowl_eval, b), 0);
        assert_int_equal(b->calls, budget);
        assert_int_equal(r->nevals, (size_t)budget);
        /* The base is always evaluated first. */
        assert_memory_equal(&r->evals[0].params, &base, sizeof(base));
        cnx_tune_result_free(r);
    }
    free(b);
}

static void test_tune__search_is_deterministic(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r1 = NULL, *r2 = NULL;
    bowl *b1 = calloc(1, sizeof(*b1)), *b2 = calloc(1, sizeof(*b2));
    (void)state;
    assert_non_null(b1);
    assert_non_null(b2);
    cnx_tune_config_init(&cfg);
    cfg.budget = 40;
    cnx_segment_params_default(&base);
    base.raw_input = 1; /* every row */
    assert_int_equal(cnx_tune_search(&r1, &cfg, &base, bowl_eval, b1), 0);
    assert_int_equal(cnx_tune_search(&r2, &cfg, &base, bowl_eval, b2), 0);
    assert_int_equal(r1->nevals, r2->nevals);
    assert_int_equal(r1->best, r2->best);
    assert_int_equal(b1->calls, b2->calls);
    assert_memory_equal(b1->seen, b2->seen,
                        (size_t)b1->calls * sizeof(b1->seen[0]));
    /* With raw_input, the filter rows are searched too. */
    {
        int moved = 0;
        for (size_t i = 0; i < r1->nevals; i++)
            moved |=
                r1->evals[i].params.filter_sigma_nm != base.filter_sigma_nm;
        assert_true(moved);
    }
    cnx_tune_result_free(r1);
    cnx_tune_result_free(r2);
    free(b1);
    free(b2);
}

static int flat_eval(void *ctx, const cnx_segment_params *p, cnx_seg_scores *s,
                     uint32_t *nlabels)
{
    (void)ctx;
    (void)p;
    memset(s, 0, sizeof(*s));
    s->vi_split = 0.25;
    s->vi_merge = 0.5;
    *nlabels = 3;
    return 0;
}

static void test_tune__ties_keep_the_base_and_the_curve_is_whole(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    (void)state;
    cnx_tune_config_init(&cfg);
    cfg.budget = 500;
    cnx_segment_params_default(&base);
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, flat_eval, NULL), 0);
    assert_int_equal(r->best, 0);
    /* merge_threshold 0.1, 0.2, ..., 0.9; 0.5 is the base (not evaluated
     * twice, but on the curve). */
    assert_int_equal(r->ncurve, 9);
    for (size_t i = 0; i < 9; i++) {
        assert_string_equal(r->curve[i].key, "merge_threshold");
        assert_true(fabs(r->curve[i].value - 0.1 * (double)(i + 1)) < 1e-12);
        assert_true(r->curve[i].scores.vi_merge == 0.5);
    }
    /* A flat objective ends once every step is at its floor. */
    assert_true(r->nevals < 500);
    for (size_t i = 1; i < r->nevals; i++)
        assert_true(memcmp(&r->evals[i].params, &base, sizeof(base)) != 0);
    cnx_tune_result_free(r);
}

static void test_tune__eval_error_ends_the_search(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result dummy, *r = &dummy;
    bowl *b = calloc(1, sizeof(*b));
    (void)state;
    assert_non_null(b);
    b->fail_at = 3;
    cnx_tune_config_init(&cfg);
    cnx_segment_params_default(&base);
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, bowl_eval, b), CNX_EIO);
    assert_null(r);
    assert_int_equal(b->calls, 3);
    assert_string_equal(cnx_error_last()->message, "bowl: failed on call 3");
    free(b);
}

static void test_tune__bad_config_refused_by_name(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    cnx_tune_key bad[1];
    size_t n;
    (void)state;
    cnx_segment_params_default(&base);
    cnx_tune_config_init(&cfg);
    cfg.budget = 0;
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, flat_eval, NULL),
                     CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "tune: budget 0: must be 1..10000");
    cfg.budget = 10;
    memcpy(bad, cnx_tune_keys(&n), sizeof(bad));
    bad[0].step = -1;
    cfg.keys = bad;
    cfg.nkeys = 1;
    assert_int_equal(cnx_tune_search(&r, &cfg, &base, flat_eval, NULL),
                     CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "tune: table row 0 (merge_threshold): bad range, "
                        "step or kind");
    assert_null(r);
}

/* ---- the kernel as the evaluation ---------------------------------------- */

/* 48 x 16 x 16: strong wall (230) at x 23-24 (gt 0), weak walls (153) at
 * x 11-12 and 35-36 inside gt 1 (x < 23) and gt 2 (x > 24). */
static void walls(uint8_t *in, uint64_t *gt)
{
    for (int z = 0; z < 16; z++)
        for (int y = 0; y < 16; y++)
            for (int x = 0; x < 48; x++) {
                size_t i = (size_t)(x + 48 * (y + 16 * z));
                in[i] = x == 23 || x == 24   ? 230
                        : x == 11 || x == 12 ? 153
                        : x == 35 || x == 36 ? 153
                                             : 0;
                gt[i] = x < 23 ? 1 : x > 24 ? 2 : 0;
            }
}

static void test_tune__run_finds_the_threshold_between_walls(void **state)
{
    static uint8_t in[48 * 16 * 16];
    static uint64_t gt[48 * 16 * 16];
    cnx_tune_volume vol = {{48, 16, 16}, CNX_DT_UINT8, in, gt};
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    const cnx_tune_eval *best;
    int rc;
    (void)state;
    walls(in, gt);
    cnx_tune_config_init(&cfg);
    cfg.budget = 20;
    cnx_segment_params_default(&base);
    rc = cnx_tune_run(&r, &cfg, &base, &vol);
    if (rc != 0)
        fail_msg("cnx_tune_run: %s", cnx_error_last()->message);
    /* The default threshold (0.5) leaves the weak walls: 4 pieces. */
    assert_true(fabs(r->evals[0].scores.vi_split - 1.0) < 0.01);
    assert_true(r->evals[0].scores.vi_merge < 1e-12);
    assert_int_equal(r->evals[0].nlabels, 4);
    best = &r->evals[r->best];
    assert_true(best->scores.vi_split + best->scores.vi_merge < 1e-12);
    assert_int_equal(best->nlabels, 2);
    assert_true(best->params.merge_threshold > 0.6 &&
                best->params.merge_threshold <= 0.9);
    /* The curve shows it: over-split below 0.6, merged at 0.9+ never. */
    assert_int_equal(r->ncurve, 9);
    assert_true(r->curve[5].scores.vi_split > 0.9);   /* 0.6: not yet */
    assert_true(r->curve[6].scores.vi_split < 1e-12); /* 0.7 */
    assert_true(r->curve[8].scores.vi_split < 1e-12); /* 0.9: the strong */
    assert_true(r->curve[8].scores.vi_merge < 1e-12); /* wall holds */
    /* One boundary map for the whole search (not raw input). */
    assert_int_equal(r->boundary_maps, 1);
    assert_true(r->nevals <= 20);
    cnx_tune_result_free(r);

    /* No gt voxel: refused before any evaluation. */
    memset(gt, 0, sizeof(gt));
    assert_int_equal(cnx_tune_run(&r, &cfg, &base, &vol), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "tune: the gt has no labelled voxel in the cube");
}

static void test_tune__raw_run_caches_boundary_maps(void **state)
{
    static uint8_t in[48 * 16 * 16];
    static uint64_t gt[48 * 16 * 16];
    cnx_tune_volume vol = {{48, 16, 16}, CNX_DT_UINT8, in, gt};
    cnx_tune_config cfg;
    cnx_segment_params base;
    cnx_tune_result *r = NULL;
    int64_t filters = 1;
    (void)state;
    walls(in, gt);
    for (size_t i = 0; i < sizeof(in); i++)
        in[i] = (uint8_t)(255 - in[i]); /* dark membranes */
    cnx_tune_config_init(&cfg);
    cfg.budget = 30;
    cnx_segment_params_default(&base);
    base.raw_input = 1;
    if (cnx_tune_run(&r, &cfg, &base, &vol) != 0)
        fail_msg("cnx_tune_run: %s", cnx_error_last()->message);
    /* A map per distinct filter setting met, never one per evaluation. */
    for (size_t i = 1; i < r->nevals; i++) {
        const cnx_segment_params *a = &r->evals[i - 1].params;
        const cnx_segment_params *b = &r->evals[i].params;
        filters += a->filter_sigma_nm != b->filter_sigma_nm ||
                   a->filter_ridge != b->filter_ridge ||
                   a->filter_background_nm != b->filter_background_nm;
    }
    assert_true(r->boundary_maps >= 2);
    assert_true(r->boundary_maps <= filters);
    assert_true(r->boundary_maps < (int64_t)r->nevals);
    cnx_tune_result_free(r);
}

/* ---- what is written ----------------------------------------------------- */

static void test_tune__params_json_reads_back_in_order(void **state)
{
    cnx_tune_config cfg;
    cnx_segment_params best, back;
    char *text = NULL;
    (void)state;
    cnx_tune_config_init(&cfg);
    cnx_segment_params_default(&best);
    best.resolution[0] = best.resolution[1] = 4;
    best.resolution[2] = 40;
    assert_int_equal(cnx_segment_params_parse(
                         &best, "{\"seed_method\": \"minima\", \"mode\": "
                                "\"sections\", \"filter_ridge\": 0.4}"),
                     0);
    best.merge_threshold = 0.55;
    best.min_size_nm3 = 45254.8;
    assert_int_equal(
        cnx_tune_params_json(&text,
                             "{\"seed_method\": \"minima\", \"mode\": "
                             "\"sections\", \"filter_ridge\": 0.4}",
                             &best, &cfg),
        0);
    /* raw_input off: the filter rows are not the search's; the base's
     * filter_ridge stays, after the rows. */
    assert_string_equal(text,
                        "{\"mode\": \"sections\", \"merge_threshold\": 0.55, "
                        "\"seed_threshold\": 0.5, \"seed_distance_nm\": 32, "
                        "\"min_size_nm3\": 45254.8, \"seed_method\": "
                        "\"minima\", \"filter_ridge\": 0.4}");
    cnx_segment_params_default(&back);
    memcpy(back.resolution, best.resolution, sizeof(back.resolution));
    assert_int_equal(cnx_segment_params_parse(&back, text), 0);
    assert_memory_equal(&back, &best, sizeof(best));
    free(text);

    best.raw_input = 1;
    assert_int_equal(cnx_tune_params_json(&text, NULL, &best, &cfg), 0);
    assert_string_equal(text,
                        "{\"raw_input\": true, \"merge_threshold\": 0.55, "
                        "\"seed_threshold\": 0.5, \"seed_distance_nm\": 32, "
                        "\"min_size_nm3\": 45254.8, \"filter_sigma_nm\": 6, "
                        "\"filter_ridge\": 0.4, \"filter_background_nm\": 100, "
                        "\"seed_method\": \"minima\"}");
    free(text);

    /* A base value with more than 15 digits (kept as the best) is
     * written with 17, so that it still reads back exactly. */
    best.merge_threshold = 0.1234567890123456;
    assert_int_equal(cnx_tune_params_json(&text, NULL, &best, &cfg), 0);
    assert_non_null(strstr(text, "\"merge_threshold\": 0.12345678901234559,"));
    assert_non_null(strstr(text, "\"filter_ridge\": 0.40000000000000002,"));
    cnx_segment_params_default(&back);
    memcpy(back.resolution, best.resolution, sizeof(back.resolution));
    assert_int_equal(cnx_segment_params_parse(&back, text), 0);
    assert_true(back.merge_threshold == best.merge_threshold);
    free(text);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_int_equal(fseek(f, 0, SEEK_SET), 0);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void test_tune__shipped_workflows_come_back_byte_for_byte(void **state)
{
    static const char *const names[] = {"segmentation", "predictions"};
    const char *src = getenv("CNX_SOURCE");
    (void)state;
    if (src == NULL)
        skip();
    for (size_t i = 0; i < 2; i++) {
        char path[4096], *base, *out = NULL;
        size_t len;
        snprintf(path, sizeof(path), "%s/workflows/%s.json", src, names[i]);
        base = slurp(path, &len);
        /* Their segment stages have no parameters: nothing changes. */
        if (cnx_tune_workflow(&out, base, len, "{}", NULL) != 0)
            fail_msg("%s: %s", path, cnx_error_last()->message);
        assert_string_equal(out, base);
        free(out);
        free(base);
    }
}

static const char wf_doc[] =
    "{\"schema\": \"cnx.workflow/1\", \"name\": \"w\", \"description\": "
    "\"Test.\", \"stages\": ["
    "{\"name\": \"fragments\", \"worker\": \"segment\", \"kind\": \"map\", "
    "\"kernel_version\": 2, \"inputs\": {\"boundary\": {\"layer\": \"b\"}}, "
    "\"output\": {\"layer\": \"fragments/v1\", \"type\": \"segmentation\", "
    "\"data_type\": \"uint64\", \"encoding\": \"compressed_segmentation\"}, "
    "\"parameters\": {\"merge_threshold\": 0.3}, \"halo\": 8, "
    "\"task_size\": [64, 64, 64]},"
    "{\"name\": \"join\", \"worker\": \"segment-join\", \"kind\": "
    "\"reduce\", \"kernel_version\": 2, \"inputs\": {\"faces\": {\"stage\": "
    "\"fragments\", \"objects\": \"faces\"}}, \"output\": {\"layer\": "
    "\"segmentation/v1\", \"part\": \"segment_properties\"}, "
    "\"parameters\": {}, \"halo\": 0},"
    "{\"name\": \"relabel\", \"worker\": \"segment-relabel\", \"kind\": "
    "\"map\", \"kernel_version\": 2, \"inputs\": {\"fragments\": "
    "{\"stage\": \"fragments\"}, \"mapping\": {\"stage\": \"join\", "
    "\"objects\": \"agglomeration\"}}, \"output\": {\"layer\": "
    "\"segmentation/v1\"}, \"parameters\": {\"x\": 1}, \"halo\": 0, "
    "\"task_size\": [64, 64, 64]}]}";

static void test_tune__workflow_sets_segment_and_join_only(void **state)
{
    cnx_workflow *wf = NULL;
    char *once = NULL, *twice = NULL;
    const char *params = "{\"merge_threshold\": 0.65, \"seed_threshold\": 0.4}";
    const char *canonical = "{\"merge_threshold\":0.65000000000000002,"
                            "\"seed_threshold\":0.40000000000000002}";
    (void)state;
    assert_int_equal(cnx_tune_workflow(&once, wf_doc, strlen(wf_doc), params,
                                       "Parameters tuned by cnx-tune on A."),
                     0);
    assert_int_equal(cnx_workflow_parse(&wf, once, strlen(once)), 0);
    for (size_t i = 0; i < wf->nstages; i++) {
        const cnx_wf_stage *st = &wf->stages[i];
        if (strcmp(st->name, "relabel") == 0)
            assert_string_equal(st->parameters, "{\"x\":1}");
        else
            assert_string_equal(st->parameters, canonical);
    }
    cnx_workflow_free(wf);
    /* Key order kept: "parameters" still sits before "halo". */
    assert_non_null(strstr(once, "\"parameters\": {\"merge_threshold\": 0.65, "
                                 "\"seed_threshold\": 0.4},\n      \"halo\""));
    assert_non_null(strstr(once, "\"description\": \"Test. Parameters tuned "
                                 "by cnx-tune on A.\""));
    /* Tuning the tuned file replaces the note. */
    assert_int_equal(cnx_tune_workflow(&twice, once, strlen(once), params,
                                       "Parameters tuned by cnx-tune on B."),
                     0);
    assert_non_null(strstr(twice, "\"description\": \"Test. Parameters tuned "
                                  "by cnx-tune on B.\""));
    assert_null(strstr(twice, "on A."));
    free(once);
    free(twice);
}

static void test_tune__workflow_without_segment_refused(void **state)
{
    static const char doc[] =
        "{\"schema\": \"cnx.workflow/1\", \"name\": \"p\", \"stages\": ["
        "{\"name\": \"down\", \"worker\": \"downsample\", \"kind\": \"map\", "
        "\"kernel_version\": 1, \"inputs\": {\"image\": {\"layer\": \"i\"}}, "
        "\"output\": {\"layer\": \"pyramid/v1\"}, \"parameters\": {}, "
        "\"halo\": 0, \"task_size\": [64, 64, 64]}]}";
    char *out = NULL;
    (void)state;
    assert_int_equal(cnx_tune_workflow(&out, doc, strlen(doc), "{}", NULL),
                     CNX_ESCHEMA);
    assert_string_equal(cnx_error_last()->message,
                        "workflow: no stage has worker \"segment\"");
    assert_null(out);
    /* Not a workflow at all: the parser's message. */
    assert_int_equal(cnx_tune_workflow(&out, "{}", 2, "{}", NULL), CNX_ESCHEMA);
    assert_null(out);
}

/* ---- reading the cube ---------------------------------------------------- */

static void make_layer(const char *url, cnx_layer_type type, cnx_dtype dt,
                       const int64_t size[3], uint64_t value)
{
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    const double res[3] = {4, 4, 40};
    const int64_t chunk[3] = {16, 16, 8};
    cnx_box box = cnx_box_make(0, 0, 0, size[0], size[1], size[2]);
    cnx_info_init(&info, type, dt, size, res, chunk);
    assert_int_equal(cnx_layer_create(&layer, url, &info), 0);
    assert_int_equal(cnx_volume_new(&vol, dt, &box, 1), 0);
    for (int64_t i = 0; i < cnx_volume_voxels(vol); i++) {
        if (dt == CNX_DT_UINT32)
            ((uint32_t *)vol->data)[i] = (uint32_t)(value + (uint64_t)i % 3);
        else
            ((uint8_t *)vol->data)[i] = (uint8_t)(i % 251);
    }
    assert_int_equal(cnx_layer_write(layer, 0, vol, NULL), 0);
    cnx_volume_free(vol);
    cnx_layer_free(layer);
}

static void test_tune__read_widens_gt_and_checks_the_roi(void **state)
{
    char dir[64], gt_url[128], in_url[128];
    const int64_t size[3] = {32, 32, 8};
    cnx_box roi = cnx_box_make(4, 0, 2, 20, 32, 8);
    cnx_tune_source src = {gt_url, NULL, in_url, NULL, &roi};
    cnx_tune_data d;
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(gt_url, sizeof(gt_url), "file://%s/gt", dir);
    snprintf(in_url, sizeof(in_url), "file://%s/in", dir);
    make_layer(gt_url, CNX_LAYER_SEGMENTATION, CNX_DT_UINT32, size,
               4000000000u);
    make_layer(in_url, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, 0);
    if (cnx_tune_read(&d, &src) != 0)
        fail_msg("cnx_tune_read: %s", cnx_error_last()->message);
    assert_int_equal(d.vol.size[0], 16);
    assert_int_equal(d.vol.size[1], 32);
    assert_int_equal(d.vol.size[2], 6);
    assert_true(d.resolution[2] == 40);
    assert_int_equal(d.vol.dtype, CNX_DT_UINT8);
    /* Voxel (4, 0, 2) of the layer is element 4 + 32*32*2 there. */
    assert_int_equal(d.vol.gt[0], 4000000000u + (4 + 32 * 32 * 2) % 3);
    assert_int_equal(((const uint8_t *)d.vol.input)[0],
                     (4 + 32 * 32 * 2) % 251);
    cnx_tune_data_dispose(&d);

    roi = cnx_box_make(0, 0, 0, 33, 32, 8);
    assert_int_equal(cnx_tune_read(&d, &src), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "roi 0,0,0,33,32,8: not a box inside the gt and "
                        "input's common box 0,0,0,32,32,8");
    cnx_tune_data_dispose(&d);

    /* The gt and the input swapped: the gt is not a segmentation. */
    src.gt_url = in_url;
    src.input_url = gt_url;
    assert_int_equal(cnx_tune_read(&d, &src), CNX_EINVAL);
    cnx_tune_data_dispose(&d);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune__search_finds_the_bowl_minimum),
        cmocka_unit_test(test_tune__search_stops_at_the_budget),
        cmocka_unit_test(test_tune__search_is_deterministic),
        cmocka_unit_test(test_tune__ties_keep_the_base_and_the_curve_is_whole),
        cmocka_unit_test(test_tune__eval_error_ends_the_search),
        cmocka_unit_test(test_tune__bad_config_refused_by_name),
        cmocka_unit_test(test_tune__run_finds_the_threshold_between_walls),
        cmocka_unit_test(test_tune__raw_run_caches_boundary_maps),
        cmocka_unit_test(test_tune__params_json_reads_back_in_order),
        cmocka_unit_test(test_tune__shipped_workflows_come_back_byte_for_byte),
        cmocka_unit_test(test_tune__workflow_sets_segment_and_join_only),
        cmocka_unit_test(test_tune__workflow_without_segment_refused),
        cmocka_unit_test(test_tune__read_widens_gt_and_checks_the_roi),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
