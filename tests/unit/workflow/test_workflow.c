/*
 * Workflows: the shipped files parse; every refusal names its field or its
 * stages; the stage order is the stable topological one. Plans are checked
 * against truths computed here, not by the planner's own method: task
 * counts and widened regions worked out by hand, dependencies against a
 * brute-force comparison of every pair of task boxes, coverage (the tasks
 * a task waits for write every voxel it reads), task messages against a
 * plain enumeration of all chunks of the grid. The schema file is checked
 * to accept and refuse the same documents (tests/unit/workflow/
 * schema_check.py, when python3 has jsonschema).
 */
#include "cnx_test.h"

#include <errno.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "cnx/align_io.h"
#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/segment_io.h"
#include "cnx/sharded.h"
#include "cnx/task.h"
#include "cnx/workflow.h"

/* ---- documents ----------------------------------------------------------- */

#define WF(name, stages)                                                       \
    "{\"schema\":\"cnx.workflow/1\",\"name\":\"" name "\",\"stages\":[" stages \
    "]}"
#define STAGE(name, worker, rest)                                              \
    "{\"name\":\"" name "\",\"worker\":\"" worker "\",\"kind\":\"map\","       \
    "\"kernel_version\":1" rest "}"
#define IN_LAYER(l) ",\"inputs\":{\"source\":{\"layer\":\"" l "\"}}"
#define IN_STAGE(s) ",\"inputs\":{\"source\":{\"stage\":\"" s "\"}}"
#define OUT(l) ",\"output\":{\"layer\":\"" l "\"}"
#define OK_STAGE(name) STAGE(name, "seg", IN_LAYER("image") OUT(name "/v1"))

static const char *source_dir(void)
{
    const char *s = getenv("CNX_SOURCE");
    return s ? s : ".";
}

static cnx_workflow *load_file(const char *rel)
{
    char path[512];
    cnx_workflow *wf = NULL;
    snprintf(path, sizeof(path), "%s/%s", source_dir(), rel);
    if (cnx_workflow_load(&wf, path) != 0)
        fail_msg("%s: %s", path, cnx_error_last()->message);
    return wf;
}

static cnx_workflow *parse_ok(const char *doc)
{
    cnx_workflow *wf = NULL;
    if (cnx_workflow_parse(&wf, doc, strlen(doc)) != 0)
        fail_msg("%s\n-> %s", doc, cnx_error_last()->message);
    return wf;
}

static void test_workflow__shipped_files_parse(void **state)
{
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    (void)state;
    assert_string_equal(wf->name, "pyramid");
    assert_int_equal(wf->nstages, 2);
    assert_string_equal(wf->stages[0].name, "ds1");
    assert_string_equal(wf->stages[1].name, "ds2");
    assert_string_equal(wf->stages[0].worker, "downsample");
    assert_int_equal(wf->stages[0].kind, CNX_WF_MAP);
    assert_int_equal(wf->stages[0].ninputs, 1);
    assert_string_equal(wf->stages[0].inputs[0].role, "source");
    assert_string_equal(wf->stages[0].inputs[0].layer, "image");
    assert_null(wf->stages[0].inputs[0].scale);
    assert_int_equal(wf->stages[0].inputs[0].stage, -1);
    assert_null(wf->stages[1].inputs[0].layer);
    assert_int_equal(wf->stages[1].inputs[0].stage, 0);
    assert_int_equal(wf->stages[1].ndeps, 1);
    assert_int_equal(wf->stages[1].deps[0], 0);
    assert_int_equal(wf->stages[0].ndeps, 0);
    assert_string_equal(wf->stages[1].output_layer, "pyramid/v1");
    assert_int_equal(wf->stages[1].halo, 0);
    assert_int_equal(wf->stages[1].halo_pinned, 1);
    assert_int_equal(wf->stages[1].retry_budget, 3);
    assert_true(wf->stages[1].lease_s == 600.0);
    assert_string_equal(wf->stages[1].parameters, "{}");
    assert_int_equal(wf->stages[0].out_type, -1);
    assert_true(cnx_digest_valid(wf->digest));
    assert_int_equal(cnx_workflow_find_stage(wf, "ds2"), 1);
    assert_int_equal(cnx_workflow_find_stage(wf, "ds9"), -1);
    /* The embedded copy parses to the same workflow. */
    {
        cnx_workflow *again = parse_ok(wf->json);
        assert_string_equal(again->json, wf->json);
        assert_string_equal(again->digest, wf->digest);
        cnx_workflow_free(again);
    }
    cnx_workflow_free(wf);

    wf = load_file("workflows/pyramid3.json");
    assert_string_equal(wf->name, "pyramid3");
    assert_int_equal(wf->nstages, 3);
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "ds%d", i + 1);
        assert_string_equal(wf->stages[i].name, name);
        assert_int_equal(wf->stages[i].ndeps, i == 0 ? 0 : 1);
    }
    assert_int_equal(wf->stages[2].deps[0], 1);
    cnx_workflow_free(wf);
}

static void test_workflow__defaults_apply(void **state)
{
    cnx_workflow *wf = parse_ok(WF("w", OK_STAGE("a")));
    const cnx_wf_stage *st = &wf->stages[0];
    (void)state;
    assert_int_equal(st->halo, -1); /* derived by the planner */
    assert_int_equal(st->halo_pinned, 0);
    assert_int_equal(st->task_size[0], 128);
    assert_int_equal(st->task_size[2], 128);
    assert_int_equal(st->retry_budget, 3);
    assert_true(st->lease_s == 600.0);
    assert_string_equal(st->parameters, "{}");
    assert_int_equal(st->ndeps, 0);
    assert_int_equal(st->out_type, -1);
    assert_int_equal(st->out_dtype, -1);
    assert_int_equal(st->out_encoding, -1);
    cnx_workflow_free(wf);
}

static void test_workflow__order_is_stable_topological(void **state)
{
    /* c needs a; a and b need nothing: a (earliest ready), then c (now
     * ready and earlier in the file than b), then b. */
    cnx_workflow *wf = parse_ok(WF(
        "w", STAGE("c", "seg", IN_STAGE("a") OUT("c/v1")) "," STAGE(
                 "a", "seg",
                 IN_LAYER("image")
                     OUT("a/v1")) "," STAGE("b", "seg",
                                            IN_LAYER("image")
                                                OUT("b/v1") ",\"depends_on\":["
                                                            "]") "," STAGE("d",
                                                                           "se"
                                                                           "g",
                                                                           ",\""
                                                                           "inp"
                                                                           "uts"
                                                                           "\":"
                                                                           "{\""
                                                                           "y\""
                                                                           ":{"
                                                                           "\"s"
                                                                           "tag"
                                                                           "e\""
                                                                           ":\""
                                                                           "c\""
                                                                           "},"
                                                                           "\"x"
                                                                           "\":"
                                                                           "{\""
                                                                           "sta"
                                                                           "ge"
                                                                           "\":"
                                                                           "\"b"
                                                                           "\"}"
                                                                           "}" OUT(
                                                                               "d/v1") ",\"depends_on\":[\"a\"]")));
    (void)state;
    assert_int_equal(wf->nstages, 4);
    assert_string_equal(wf->stages[0].name, "a");
    assert_string_equal(wf->stages[1].name, "c");
    assert_string_equal(wf->stages[2].name, "b");
    assert_string_equal(wf->stages[3].name, "d");
    assert_int_equal(wf->stages[1].file_index, 0);
    assert_int_equal(wf->stages[1].deps[0], 0);
    /* inputs sorted by role; effective deps = depends_on + inputs. */
    assert_string_equal(wf->stages[3].inputs[0].role, "x");
    assert_int_equal(wf->stages[3].inputs[0].stage, 2);
    assert_int_equal(wf->stages[3].inputs[1].stage, 1);
    assert_int_equal(wf->stages[3].ndeps, 3);
    assert_int_equal(wf->stages[3].deps[0], 0);
    assert_int_equal(wf->stages[3].deps[1], 1);
    assert_int_equal(wf->stages[3].deps[2], 2);
    cnx_workflow_free(wf);
}

struct refusal {
    const char *doc;
    const char *names; /* must occur in the message */
    int schema;        /* 1: the JSON Schema must refuse it too */
};

static const struct refusal refusals[] = {
    {"[1]", "workflow: must be a JSON object", 1},
    {"{\"schema\":", "workflow: malformed JSON", 0},
    {"{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[" OK_STAGE(
         "a") "],\"extra\":1}",
     "workflow: unknown key 'extra'", 1},
    {"{\"schema\":\"cnx.workflow/2\",\"name\":\"w\",\"stages\":[" OK_STAGE(
         "a") "]}",
     "workflow: schema:", 1},
    {"{\"name\":\"w\",\"stages\":[" OK_STAGE("a") "]}", "workflow: schema:", 1},
    {WF("Pyramid", OK_STAGE("a")), "workflow: name:", 1},
    {WF("p12345678901234567890123456789012345678901234567890123456789012345",
        OK_STAGE("a")),
     "workflow: name:", 1},
    {"{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[]}",
     "workflow: stages:", 1},
    {"{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"description\":5,"
     "\"stages\":[" OK_STAGE("a") "]}",
     "workflow: description:", 1},
    {WF("w", OK_STAGE("a") ",5"), "workflow: stages[1]: must be an object", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"hallo\":2")),
     "workflow: stages[0]: unknown key 'hallo'", 1},
    {WF("w",
        OK_STAGE("a") "," STAGE("b", "seg",
                                ",\"inputs\":{\"source\":{\"layer\":\"image\","
                                "\"scal\":\"8_8_8\"}}" OUT("b/v1"))),
     "workflow: stages[1].inputs.source: unknown key 'scal'", 1},
    {WF("w",
        STAGE("a", "seg",
              IN_LAYER(
                  "image") ",\"output\":{\"layer\":\"a/v1\",\"scale\":\"x\"}")),
     "workflow: stages[0].output: unknown key 'scale'", 1},
    {WF("w", STAGE("A", "seg", IN_LAYER("image") OUT("a/v1"))),
     "workflow: stages[0].name:", 1},
    {WF("w", STAGE("a23456789012345678901234567890123", "seg",
                   IN_LAYER("image") OUT("a/v1"))),
     "workflow: stages[0].name:", 1},
    {WF("w", STAGE("a", "Down_sample", IN_LAYER("image") OUT("a/v1"))),
     "workflow: stages[0].worker:", 1},
    {WF("w", "{\"name\":\"a\",\"worker\":\"seg\",\"kind\":\"mapp\","
             "\"kernel_version\":1" IN_LAYER("image") OUT("a/v1") "}"),
     "workflow: stages[0].kind:", 1},
    {WF("w", "{\"name\":\"a\",\"worker\":\"seg\",\"kernel_version\":1" IN_LAYER(
                 "image") OUT("a/v1") "}"),
     "workflow: stages[0].kind: missing", 1},
    {WF("w", "{\"name\":\"a\",\"worker\":\"seg\",\"kind\":\"map\","
             "\"kernel_version\":0" IN_LAYER("image") OUT("a/v1") "}"),
     "workflow: stages[0].kernel_version:", 1},
    {WF("w", "{\"name\":\"a\",\"worker\":\"seg\",\"kind\":\"map\","
             "\"kernel_version\":1.5" IN_LAYER("image") OUT("a/v1") "}"),
     "workflow: stages[0].kernel_version:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"halo\":257")),
     "workflow: stages[0].halo:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"halo\":-1")),
     "workflow: stages[0].halo:", 1},
    {WF("w", STAGE("a", "seg",
                   IN_LAYER("image") OUT("a/v1") ",\"task_size\":[128,128]")),
     "workflow: stages[0].task_size:", 1},
    {WF("w", STAGE("a", "seg",
                   IN_LAYER("image") OUT("a/v1") ",\"task_size\":[0,128,128]")),
     "workflow: stages[0].task_size[0]:", 1},
    {WF("w", STAGE("a", "seg",
                   IN_LAYER("image") OUT("a/v1") ",\"retry_budget\":101")),
     "workflow: stages[0].retry_budget:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"lease_s\":0")),
     "workflow: stages[0].lease_s:", 1},
    {WF("w", STAGE("a", "seg",
                   IN_LAYER("image") OUT("a/v1") ",\"lease_s\":\"600\"")),
     "workflow: stages[0].lease_s:", 1},
    {WF("w",
        STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"parameters\":[]")),
     "workflow: stages[0].parameters:", 1},
    {WF("w", OK_STAGE("a") "," STAGE("b", "seg",
                                     IN_LAYER("image")
                                         OUT("b/v1") ",\"depends_on\":\"a\"")),
     "workflow: stages[1].depends_on:", 1},
    {WF("w", OK_STAGE("a") "," STAGE("b", "seg",
                                     IN_LAYER("image")
                                         OUT("b/v1") ",\"depends_on\":[1]")),
     "workflow: stages[1].depends_on[0]:", 1},
    {WF("w", OK_STAGE("a") "," STAGE("b", "seg",
                                     IN_LAYER("image")
                                         OUT("b/v1") ",\"depends_on\":[\"a\","
                                                     "\"a\"]")),
     "workflow: stages[1].depends_on[1]:", 1},
    {WF("w", STAGE("a", "seg", ",\"inputs\":{}" OUT("a/v1"))),
     "workflow: stages[0].inputs:", 1},
    {WF("w", STAGE("a", "seg", OUT("a/v1"))),
     "workflow: stages[0].inputs: missing", 1},
    {WF("w", STAGE("a", "seg",
                   ",\"inputs\":{\"Source\":{\"layer\":\"i\"}}" OUT("a/v1"))),
     "workflow: stages[0].inputs.Source:", 1},
    {WF("w", STAGE("a", "seg",
                   ",\"inputs\":{\"source\":{\"layer\":\"i\","
                   "\"stage\":\"b\"}}" OUT("a/v1"))),
     "workflow: stages[0].inputs.source:", 1},
    {WF("w", STAGE("a", "seg", ",\"inputs\":{\"source\":{}}" OUT("a/v1"))),
     "workflow: stages[0].inputs.source:", 1},
    {WF("w", STAGE("a", "seg",
                   ",\"inputs\":{\"source\":{\"stage\":\"b\","
                   "\"scale\":\"x\"}}" OUT("a/v1"))),
     "workflow: stages[0].inputs.source:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("/abs/image") OUT("a/v1"))),
     "workflow: stages[0].inputs.source.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("em/../image") OUT("a/v1"))),
     "workflow: stages[0].inputs.source.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("em//image") OUT("a/v1"))),
     "workflow: stages[0].inputs.source.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("em image") OUT("a/v1"))),
     "workflow: stages[0].inputs.source.layer:", 1},
    {WF("w", STAGE("a", "seg",
                   ",\"inputs\":{\"source\":{\"layer\":\"i\","
                   "\"scale\":\"8/8\"}}" OUT("a/v1"))),
     "workflow: stages[0].inputs.source.scale:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image"))),
     "workflow: stages[0].output: missing", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("pyramid"))),
     "workflow: stages[0].output.layer: 'pyramid' is not a versioned", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("pyramid/v0"))),
     "workflow: stages[0].output.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("pyramid/V1"))),
     "workflow: stages[0].output.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("pyramid/v1/x"))),
     "workflow: stages[0].output.layer:", 1},
    {WF("w", STAGE("a", "seg", IN_LAYER("image") OUT("../p/v1"))),
     "workflow: stages[0].output.layer:", 1},
    {WF("w", STAGE("a", "seg",
                   IN_LAYER("image") ",\"output\":{\"layer\":\"a/"
                                     "v1\",\"type\":\"volume\"}")),
     "workflow: stages[0].output.type:", 1},
    {WF("w",
        STAGE("a", "seg",
              IN_LAYER("image") ",\"output\":{\"layer\":\"a/v1\",\"data_type\":"
                                "\"int8\"}")),
     "workflow: stages[0].output.data_type:", 1},
    {WF("w",
        STAGE("a", "seg",
              IN_LAYER("image") ",\"output\":{\"layer\":\"a/v1\",\"encoding\":"
                                "\"jpeg\"}")),
     "workflow: stages[0].output.encoding:", 1},
    /* the graph */
    {WF("w", OK_STAGE("ds1") "," OK_STAGE("ds1")),
     "workflow w: stages[1].name: duplicate stage name 'ds1'", 0},
    {WF("pyramid",
        OK_STAGE("ds1") "," STAGE(
            "ds2", "seg",
            IN_LAYER("image") OUT("ds2/v1") ",\"depends_on\":[\"ds0\"]")),
     "workflow pyramid: stage ds2 depends on unknown stage 'ds0'", 0},
    {WF("pyramid",
        OK_STAGE("ds1") "," STAGE("ds2", "seg", IN_STAGE("ds0") OUT("ds2/v1"))),
     "workflow pyramid: stage ds2 depends on unknown stage 'ds0'", 0},
    {WF("w", STAGE("ds1", "seg", IN_STAGE("ds2") OUT("ds1/v1")) "," STAGE(
                 "ds2", "seg", IN_STAGE("ds1") OUT("ds2/v1"))),
     "workflow w: cycle ds1 -> ds2 -> ds1", 0},
    {WF("w",
        STAGE("a", "seg", IN_LAYER("image") OUT("a/v1") ",\"depends_on\":[\"c\"]") "," STAGE(
            "b", "seg",
            IN_STAGE("a")
                OUT("b/v1")) "," STAGE("c", "seg",
                                       IN_STAGE("b")
                                           OUT("c/v1")) "," OK_STAGE("z")),
     "workflow w: cycle a -> b -> c -> a", 0},
    {WF("w", OK_STAGE("z") "," STAGE(
                 "b", "seg",
                 IN_STAGE("c") OUT(
                     "b/v1")) "," STAGE("c", "seg",
                                        IN_STAGE("b") OUT(
                                            "c/v1") ",\"depends_on\":[\"z\"]")),
     "workflow w: cycle b -> c -> b", 0},
    {WF("w", STAGE("a", "seg", IN_STAGE("a") OUT("a/v1"))),
     "workflow w: cycle a -> a", 0},
    {WF("w", OK_STAGE("ds1") "," STAGE("ds2", "seg",
                                       IN_LAYER("ds1/v1") OUT("ds2/v1"))),
     "workflow w: stage ds1: output layer 'ds1/v1' is also an external "
     "input (stage ds2, input source)",
     0},
    {WF("w", STAGE("a", "seg", IN_LAYER("a/v1") OUT("a/v1"))),
     "workflow w: stage a: output layer 'a/v1' is also an external input", 0},
};

static void test_workflow__refusals_name_the_problem(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
        cnx_workflow *wf = (cnx_workflow *)0x1;
        int rc =
            cnx_workflow_parse(&wf, refusals[i].doc, strlen(refusals[i].doc));
        const char *msg = cnx_error_last()->message;
        if (rc != CNX_ESCHEMA || strstr(msg, refusals[i].names) == NULL)
            fail_msg("case %zu: rc %d, message '%s', wanted '%s'\n%s", i, rc,
                     msg, refusals[i].names, refusals[i].doc);
        assert_null(wf);
        assert_null(strchr(msg, '\n'));
    }
}

/* The schema accepts the shipped files and refuses the field-level cases. */
static void test_workflow__schema_agrees(void **state)
{
    const char *py = getenv("CNX_PYTHON") ? getenv("CNX_PYTHON") : "python3";
    char dir[64], path[128], cmd[2048];
    FILE *f;
    int rc;
    (void)state;
    snprintf(cmd, sizeof(cmd), "%s -c 'import jsonschema' 2>/dev/null", py);
    if (system(cmd) != 0)
        skip();
    cnx_test_tmpdir(dir);
    snprintf(path, sizeof(path), "%s/invalid.jsonl", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++)
        if (refusals[i].schema)
            fprintf(f, "%s\n", refusals[i].doc);
    fclose(f);
    snprintf(path, sizeof(path), "%s/valid.jsonl", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "%s\n", WF("w", OK_STAGE("a")));
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "%s %s/tests/unit/workflow/schema_check.py %s/schemas/"
             "workflow.schema.json %s/valid.jsonl %s/invalid.jsonl "
             "%s/workflows/pyramid.json %s/workflows/pyramid3.json "
             "%s/workflows/segmentation.json %s/workflows/montage.json "
             "%s/workflows/pipeline.json %s/workflows/synapses-gt.json "
             "%s/workflows/segmentation-em.json "
             "%s/workflows/predictions.json "
             "%s/workflows/segmentation-sharded.json",
             py, source_dir(), source_dir(), dir, dir, source_dir(),
             source_dir(), source_dir(), source_dir(), source_dir(),
             source_dir(), source_dir(), source_dir(), source_dir());
    rc = system(cmd);
    cnx_test_rmtree(dir);
    assert_int_equal(rc, 0);
}

/* ---- geometry helpers (independent of the planner) ----------------------- */

static cnx_plan_external ext_geom(cnx_dtype dtype, const int64_t size[3],
                                  double res, const int64_t chunk[3],
                                  const int64_t off[3])
{
    cnx_plan_external e;
    memset(&e, 0, sizeof(e));
    e.type = CNX_LAYER_IMAGE;
    e.dtype = dtype;
    e.channels = 1;
    snprintf(e.scale.key, sizeof(e.scale.key), "%g_%g_%g", res, res, res);
    for (int i = 0; i < 3; i++) {
        e.scale.size[i] = size[i];
        e.scale.resolution[i] = res;
        e.scale.voxel_offset[i] = off ? off[i] : 0;
        e.scale.chunk[i] = chunk[i];
        e.scale.cseg_block[i] = 8;
    }
    e.scale.encoding = CNX_ENC_RAW;
    return e;
}

static void make_layer(const char *url, const int64_t size[3], double res,
                       const int64_t chunk[3], const int64_t off[3])
{
    const double r[3] = {res, res, res};
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, r, chunk);
    for (int i = 0; off != NULL && i < 3; i++)
        info.scales[0].voxel_offset[i] = off[i];
    if (cnx_layer_create(&layer, url, &info) != 0)
        fail_msg("%s", cnx_error_last()->message);
    cnx_layer_free(layer);
}

static int meets(const cnx_box *a, const cnx_box *b)
{
    for (int i = 0; i < 3; i++) {
        int64_t lo = a->min[i] > b->min[i] ? a->min[i] : b->min[i];
        int64_t hi = a->max[i] < b->max[i] ? a->max[i] : b->max[i];
        if (hi <= lo)
            return 0;
    }
    return 1;
}

static int64_t overlap(const cnx_box *a, const cnx_box *b)
{
    int64_t v = 1;
    for (int i = 0; i < 3; i++) {
        int64_t lo = a->min[i] > b->min[i] ? a->min[i] : b->min[i];
        int64_t hi = a->max[i] < b->max[i] ? a->max[i] : b->max[i];
        if (hi <= lo)
            return 0;
        v *= hi - lo;
    }
    return v;
}

/* roi grown by h, clipped to the scale: the box a task reads. */
static cnx_box reads(const cnx_box *roi, int64_t h, const cnx_scale *sc)
{
    cnx_box r;
    for (int i = 0; i < 3; i++) {
        int64_t lo = sc->voxel_offset[i], hi = lo + sc->size[i];
        r.min[i] = roi->min[i] - h < lo ? lo : roi->min[i] - h;
        r.max[i] = roi->max[i] + h > hi ? hi : roi->max[i] + h;
    }
    return r;
}

/* Does task t wait for task s? (The spec's rule, pair by pair.) */
static int waits_for(const cnx_plan *p, size_t t, size_t s)
{
    size_t d = p->tasks[t].stage, src = p->tasks[s].stage;
    const cnx_wf_stage *st = &p->wf->stages[d];
    int dep = 0, input = 0;
    cnx_box r;
    for (size_t k = 0; k < st->ndeps; k++)
        dep |= (size_t)st->deps[k] == src;
    for (size_t k = 0; k < st->ninputs; k++)
        input |= st->inputs[k].stage == (int)src;
    if (!dep)
        return 0;
    if (st->kind == CNX_WF_REDUCE || !input)
        return 1;
    r = reads(&p->tasks[t].roi, p->stages[d].halo, &p->stages[d].in_scale);
    return meets(&p->tasks[s].write, &r);
}

/* Everything about dependencies, against the brute-force reference. */
static void check_dependencies(const cnx_plan *p)
{
    size_t n = p->ntasks;
    size_t *want = calloc(n + 1, sizeof(*want));
    assert_non_null(want);
    for (size_t t = 0; t < n; t++) {
        size_t *ids, nids, nw = 0;
        const cnx_plan_task *task = &p->tasks[t];
        const cnx_wf_stage *st = &p->wf->stages[task->stage];
        /* inputs */
        for (size_t s = 0; s < n; s++)
            if (waits_for(p, t, s))
                want[nw++] = s;
        assert_int_equal(cnx_plan_inputs(p, t, &ids, &nids), 0);
        if (nids != nw)
            fail_msg("task %zu (stage %u): %zu inputs, brute force %zu", t,
                     task->stage, nids, nw);
        for (size_t k = 0; k < nw; k++)
            assert_int_equal(ids[k], want[k]);
        assert_int_equal(task->ndeps, nw);
        /* coverage: what t reads of a producing stage is all written */
        if (st->kind == CNX_WF_MAP) {
            for (size_t k = 0; k < st->ninputs; k++) {
                int src = st->inputs[k].stage;
                cnx_box r = reads(&task->roi, p->stages[task->stage].halo,
                                  &p->stages[task->stage].in_scale);
                int64_t got = 0;
                if (src < 0)
                    continue;
                for (size_t j = 0; j < nids; j++)
                    if (p->tasks[ids[j]].stage == (uint32_t)src)
                        got += overlap(&p->tasks[ids[j]].write, &r);
                assert_int_equal(got, cnx_box_voxels(&r));
            }
        }
        free(ids);
        /* dependents */
        nw = 0;
        for (size_t d = 0; d < n; d++)
            if (waits_for(p, d, t))
                want[nw++] = d;
        assert_int_equal(cnx_plan_dependents(p, t, &ids, &nids), 0);
        assert_int_equal(nids, nw);
        for (size_t k = 0; k < nw; k++)
            assert_int_equal(ids[k], want[k]);
        free(ids);
        assert_int_equal(cnx_plan_find(p, task->stage, &task->roi), (ssize_t)t);
    }
    free(want);
}

/* A stage's tasks: within its region, disjoint, covering it. */
static void check_tiling(const cnx_plan *p)
{
    for (size_t s = 0; s < p->nstages; s++) {
        const cnx_plan_stage *ps = &p->stages[s];
        int64_t sum = 0;
        for (size_t k = ps->first; k < ps->first + ps->count; k++) {
            assert_int_equal(p->tasks[k].stage, s);
            assert_true(cnx_box_contains(&ps->region, &p->tasks[k].roi));
            sum += cnx_box_voxels(&p->tasks[k].roi);
            for (size_t j = ps->first; j < k; j++)
                assert_false(meets(&p->tasks[j].roi, &p->tasks[k].roi));
        }
        assert_int_equal(sum, cnx_box_voxels(&ps->region));
    }
}

/* ---- plans on a real dataset --------------------------------------------- */

static void dataset_in(const char *dir, char *url, size_t n)
{
    snprintf(url, n, "file://%s/data", dir);
}

static void test_workflow__pyramid_on_a_real_layer(void **state)
{
    const int64_t size[3] = {512, 512, 256}, chunk[3] = {128, 128, 128};
    char dir[64], data[160], url[256];
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    cnx_plan *p = NULL;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    if (cnx_plan_new(&p, wf, data, NULL) != 0)
        fail_msg("%s", cnx_error_last()->message);
    assert_int_equal(p->nstages, 2);
    assert_int_equal(p->stages[0].count, 32);
    assert_int_equal(p->stages[1].count, 4);
    assert_int_equal(p->ntasks, 36);
    assert_string_equal(p->stages[0].in_layer, url);
    assert_string_equal(p->stages[0].in_scale.key, "8_8_8");
    assert_string_equal(p->stages[0].out_scale.key, "16_16_16");
    assert_string_equal(p->stages[1].in_scale.key, "16_16_16");
    assert_string_equal(p->stages[1].out_scale.key, "32_32_32");
    assert_int_equal(p->stages[1].in_scale.chunk[0], 64);
    assert_int_equal(p->stages[1].in_scale.size[2], 128);
    snprintf(url, sizeof(url), "%s/pyramid/v1", data);
    assert_string_equal(p->stages[0].out_layer, url);
    assert_string_equal(p->stages[1].in_layer, url);
    for (size_t t = 0; t < 32; t++)
        assert_int_equal(p->tasks[t].ndeps, 0);
    for (size_t t = 32; t < 36; t++)
        assert_int_equal(p->tasks[t].ndeps, 8);
    /* ds1 task 0 writes 0-64^3 of 16 nm; ds2's last task is 128-256^2 x
     * 0-128 of 16 nm */
    assert_true(
        cnx_box_equal(&p->tasks[0].write, &(cnx_box){{0, 0, 0}, {64, 64, 64}}));
    assert_true(cnx_box_equal(&p->tasks[35].roi,
                              &(cnx_box){{128, 128, 0}, {256, 256, 128}}));
    assert_int_equal(p->nnotes, 0);
    check_dependencies(p);
    check_tiling(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

static void test_workflow__missing_layer_or_scale_is_refused(void **state)
{
    const int64_t size[3] = {64, 64, 64}, chunk[3] = {64, 64, 64};
    char dir[64], data[160], url[256];
    cnx_workflow *wf = load_file("workflows/pyramid.json"), *wf2;
    cnx_plan *p = (cnx_plan *)0x1;
    const char *msg = cnx_error_last()->message;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), CNX_ESCHEMA);
    assert_null(p);
    if (strstr(msg, "workflow pyramid: stage ds1: input source: layer "
                    "'image' not found in file:///") == NULL ||
        strstr(msg, "/data (") == NULL)
        fail_msg("%s", msg);
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    wf2 =
        parse_ok(WF("w", STAGE("a", "seg",
                               ",\"inputs\":{\"source\":{\"layer\":"
                               "\"image\",\"scale\":\"4_4_4\"}}" OUT("a/v1"))));
    assert_int_equal(cnx_plan_new(&p, wf2, data, NULL), CNX_ESCHEMA);
    if (strstr(msg, "stage a: input source: layer 'image'") == NULL ||
        strstr(msg, "has no scale '4_4_4' (it has 8_8_8)") == NULL)
        fail_msg("%s", msg);
    cnx_workflow_free(wf2);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

static void expect_box(const cnx_box *got, int64_t x0, int64_t y0, int64_t z0,
                       int64_t x1, int64_t y1, int64_t z1)
{
    cnx_box want = {{x0, y0, z0}, {x1, y1, z1}};
    if (!cnx_box_equal(got, &want))
        fail_msg("box %" PRId64 ",%" PRId64 ",%" PRId64 "-%" PRId64 ",%" PRId64
                 ",%" PRId64 ", wanted %" PRId64 ",%" PRId64 ",%" PRId64
                 "-%" PRId64 ",%" PRId64 ",%" PRId64,
                 got->min[0], got->min[1], got->min[2], got->max[0],
                 got->max[1], got->max[2], x0, y0, z0, x1, y1, z1);
}

static cnx_plan *plan_with(const cnx_workflow *wf, const cnx_box *roi,
                           const cnx_plan_external *ext, size_t next)
{
    cnx_plan *p = NULL;
    if (cnx_plan_new_with(&p, wf, "file:///nowhere/data/", roi, ext, next) != 0)
        fail_msg("%s", cnx_error_last()->message);
    return p;
}

static void test_workflow__unaligned_roi_is_widened(void **state)
{
    const int64_t size[3] = {512, 512, 256}, chunk[3] = {128, 128, 128};
    const cnx_box roi = {{10, 10, 10}, {300, 300, 200}};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    cnx_plan *p = plan_with(wf, &roi, &ext, 1);
    (void)state;
    /* ds2 (16 nm, chunks of 64): roi 5,5,5-150,150,100 -> whole chunks
     * 0-192, 0-192, 0-128; tasks of 128: [0,128) [128,192) in x and y. */
    expect_box(&p->stages[1].roi, 5, 5, 5, 150, 150, 100);
    expect_box(&p->stages[1].region, 0, 0, 0, 192, 192, 128);
    assert_int_equal(p->stages[1].count, 4);
    expect_box(&p->tasks[p->stages[1].first + 3].roi, 128, 128, 0, 192, 192,
               128);
    /* ds1: whole chunks of 128 around the roi; covers ds2's 0-384. */
    expect_box(&p->stages[0].region, 0, 0, 0, 384, 384, 256);
    assert_int_equal(p->stages[0].count, 18);
    assert_int_equal(p->nnotes, 2);
    assert_string_equal(p->notes[0], "ds2: region 5,5,5-150,150,100 widened "
                                     "to 0,0,0-192,192,128 (whole chunks of "
                                     "64,64,64)");
    assert_string_equal(p->notes[1], "ds1: region 10,10,10-300,300,200 "
                                     "widened to 0,0,0-384,384,256 (whole "
                                     "chunks of 128,128,128)");
    check_dependencies(p);
    check_tiling(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* With a halo of 2 in ds2, ds1 must also write 384-388 (x, y): whole
     * chunks make that 0-512. z stays 0-256 (ds2's 128 is its bound). */
    wf = parse_ok(WF(
        "pyramid",
        STAGE(
            "ds1", "downsample",
            IN_LAYER("image") OUT(
                "pyramid/v1") ",\"halo\":0") "," STAGE("ds2", "downsample",
                                                       IN_STAGE("ds1") OUT(
                                                           "pyramid/v1") ",\"ha"
                                                                         "lo\":"
                                                                         "2")));
    p = plan_with(wf, &roi, &ext, 1);
    expect_box(&p->stages[1].region, 0, 0, 0, 192, 192, 128);
    expect_box(&p->stages[0].region, 0, 0, 0, 512, 512, 256);
    assert_int_equal(p->stages[0].count, 32);
    assert_string_equal(p->notes[1], "ds1: region 10,10,10-300,300,200 "
                                     "widened to 0,0,0-512,512,256 (whole "
                                     "chunks of 128,128,128 and the halo 2 "
                                     "that ds2 needs)");
    check_dependencies(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* Same-geometry workers: agg reads seg with a halo of 4. agg: whole
     * chunks 0-384 x 0-384 x 0-256; seg must cover 0-388 -> 0-512. */
    wf = parse_ok(WF("w",
                     STAGE(
                         "seg", "watershed",
                         IN_LAYER("image") ",\"output\":{\"layer\":\"seg/"
                                           "v1\",\"type\":\"segmentation\","
                                           "\"data_type\":\"uint32\"},\"halo\":"
                                           "1") "," STAGE("agg", "agglomerate",
                                                          IN_STAGE("seg") OUT(
                                                              "agg/v1") ",\"hal"
                                                                        "o\":"
                                                                        "4")));
    p = plan_with(wf, &roi, &ext, 1);
    expect_box(&p->stages[1].region, 0, 0, 0, 384, 384, 256);
    expect_box(&p->stages[0].region, 0, 0, 0, 512, 512, 256);
    assert_string_equal(p->stages[0].out_scale.key, "8_8_8");
    assert_int_equal(p->stages[0].out_type, CNX_LAYER_SEGMENTATION);
    assert_int_equal(p->stages[1].out_dtype, CNX_DT_UINT32);
    assert_string_equal(p->notes[1], "seg: region 10,10,10-300,300,200 "
                                     "widened to 0,0,0-512,512,256 (whole "
                                     "chunks of 128,128,128 and the halo 4 "
                                     "that agg needs)");
    check_dependencies(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
}

struct geometry {
    int64_t size[3], chunk[3], off[3];
    double res;
};

static const struct geometry geometries[] = {
    {{300, 200, 77}, {64, 32, 16}, {64, -32, 16}, 8},
    {{257, 129, 65}, {32, 32, 32}, {0, 0, 0}, 8},
    {{100, 380, 90}, {16, 64, 8}, {-48, 16, 200}, 8},
};

static const char
    *const dep_workflows[] =
        {
            /* downsampling chain, odd task sizes, a halo in the middle */
            WF("chain",
               STAGE("ds1", "downsample", IN_LAYER("image") OUT("p/v1") ",\"halo\":0,\"task_size\":[200,70,40]") "," STAGE(
                   "ds2", "downsample",
                   IN_STAGE(
                       "ds1") OUT("p/v1") ",\"halo\":2,\"task_size\":[64,100,"
                                          "33]") "," STAGE("ds3", "downsample",
                                                           IN_STAGE("ds2") OUT(
                                                               "p/v1") ",\"halo"
                                                                       "\":0,"
                                                                       "\"task_"
                                                                       "size\":"
                                                                       "[1,1,"
                                                                       "1]")),
            /* same-geometry stages: two inputs, a plain dependency, a reduce */
            WF(
                "mixed", STAGE("seg", "watershed", IN_LAYER("image") OUT("seg/v1") ",\"halo\":2,\"task_size\":[96,64,50]") "," STAGE(
                             "agg", "agglomerate",
                             ",\"inputs\":{\"labels\":{\"stage\":\"seg\"},"
                             "\"image\":{\"layer\":\"image\"}}" OUT(
                                 "agg/v1") ",\"halo\":3,\"task_size\":[64,128,"
                                           "32]") "," STAGE("ds", "downsample",
                                                            IN_STAGE("agg") OUT(
                                                                "agg/v2") ",\"h"
                                                                          "alo"
                                                                          "\":"
                                                                          "0,"
                                                                          "\"de"
                                                                          "pend"
                                                                          "s_"
                                                                          "on\""
                                                                          ":["
                                                                          "\"se"
                                                                          "g\""
                                                                          "]") ","
                                                                               "{\"name\":\"stats\",\"worker\":\"stats\",\"kind\":\"reduce\","
                                                                               "\"kernel_version\":1" IN_STAGE(
                                                                                   "ds")
                                                                                   OUT("stats/v1") "}"
                                                                                                   "," STAGE(
                                                                                                       "mesh",
                                                                                                       "surface",
                                                                                                       IN_STAGE(
                                                                                                           "agg")
                                                                                                           OUT("mesh/v1") ",\"halo\":1,\"depends_on\":[\"stats\"]")),
};

static void test_workflow__dependencies_match_brute_force(void **state)
{
    (void)state;
    for (size_t w = 0; w < sizeof(dep_workflows) / sizeof(*dep_workflows);
         w++) {
        cnx_workflow *wf = parse_ok(dep_workflows[w]);
        for (size_t g = 0; g < sizeof(geometries) / sizeof(*geometries); g++) {
            const struct geometry *geo = &geometries[g];
            cnx_plan_external ext[2];
            size_t next = cnx_plan_externals(wf, NULL, 0);
            cnx_box roi = {
                {geo->off[0] + 33, geo->off[1] + 20, geo->off[2] + 5},
                {geo->off[0] + geo->size[0] - 40,
                 geo->off[1] + geo->size[1] - 7,
                 geo->off[2] + geo->size[2] - 1}};
            cnx_plan *p;
            assert_true(next <= 2);
            for (size_t e = 0; e < next; e++)
                ext[e] = ext_geom(CNX_DT_UINT32, geo->size, geo->res,
                                  geo->chunk, geo->off);
            p = plan_with(wf, &roi, ext, next);
            check_dependencies(p);
            check_tiling(p);
            cnx_plan_free(p);
            p = plan_with(wf, NULL, ext, next);
            check_dependencies(p);
            check_tiling(p);
            cnx_plan_free(p);
        }
        cnx_workflow_free(wf);
    }
}

static void test_workflow__anisotropic_and_offset_real_layer(void **state)
{
    const int64_t size[3] = {300, 260, 37}, chunk[3] = {64, 64, 8};
    const int64_t off[3] = {128, 64, 10};
    const double r[3] = {4, 4, 40};
    char dir[64], data[160], url[256];
    cnx_workflow *wf = load_file("workflows/pyramid3.json");
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_plan *p = NULL;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, r, chunk);
    memcpy(info.scales[0].voxel_offset, off, sizeof(off));
    assert_int_equal(cnx_layer_create(&layer, url, &info), 0);
    cnx_layer_free(layer);
    if (cnx_plan_new(&p, wf, data, &(cnx_box){{130, 70, 11}, {400, 300, 40}}) !=
        0)
        fail_msg("%s", cnx_error_last()->message);
    /* 4,4,40 halves x and y only */
    assert_string_equal(p->stages[0].out_scale.key, "8_8_40");
    assert_string_equal(p->stages[2].out_scale.key, "32_32_40");
    assert_int_equal(p->stages[0].factor[2], 1);
    assert_int_equal(p->stages[1].in_scale.voxel_offset[0], 64);
    check_dependencies(p);
    check_tiling(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

static void test_workflow__plan_time_refusals(void **state)
{
    const int64_t size[3] = {256, 256, 128}, chunk[3] = {64, 64, 64};
    const int64_t half[3] = {128, 128, 64}, odd[3] = {1, 0, 0};
    cnx_plan_external ext[2];
    cnx_workflow *wf;
    cnx_plan *p = NULL;
    const char *msg = cnx_error_last()->message;
    (void)state;

    /* two stages writing one layer at one scale */
    wf = parse_ok(WF("w", OK_STAGE("a") "," STAGE(
                              "b", "seg", IN_LAYER("image") OUT("a/v1"))));
    ext[0] = ext[1] = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 2),
                     CNX_ESCHEMA);
    assert_non_null(strstr(msg, "workflow w: stages a and b both write "
                                "layer 'a/v1' at scale '8_8_8'"));
    cnx_workflow_free(wf);

    /* a map stage whose inputs have different resolutions */
    wf = parse_ok(
        WF("w", STAGE("seg", "watershed",
                      ",\"inputs\":{\"image\":{\"layer\":\"em\"},"
                      "\"mask\":{\"layer\":\"mask\"}}" OUT("seg/v1"))));
    ext[0] = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    ext[1] = ext_geom(CNX_DT_UINT8, half, 16, chunk, NULL);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 2),
                     CNX_ESCHEMA);
    if (strstr(msg, "workflow w: stage seg: inputs image and mask have "
                    "different grids") == NULL)
        fail_msg("%s", msg);
    /* ... which a reduce stage may have */
    cnx_workflow_free(wf);
    wf = parse_ok(WF("w", "{\"name\":\"seg\",\"worker\":\"stats\",\"kind\":"
                          "\"reduce\",\"kernel_version\":1,\"inputs\":{"
                          "\"image\":{\"layer\":\"em\"},\"mask\":{\"layer\":"
                          "\"mask\"}}" OUT("seg/v1") "}"));
    p = plan_with(wf, NULL, ext, 2);
    assert_int_equal(p->ntasks, 1);
    cnx_plan_free(p);
    /* wrong number of externals */
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 1),
                     CNX_EINVAL);
    cnx_workflow_free(wf);

    /* downsampling from an odd voxel offset cannot start on even voxels */
    wf = load_file("workflows/pyramid.json");
    ext[0] = ext_geom(CNX_DT_UINT8, size, 8, chunk, odd);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 1),
                     CNX_ESCHEMA);
    assert_non_null(strstr(msg, "stage ds1: downsampling scale '8_8_8'"));
    /* an roi outside the data */
    ext[0] = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d",
                                       &(cnx_box){{300, 0, 0}, {400, 9, 9}},
                                       ext, 1),
                     CNX_EINVAL);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d",
                                       &(cnx_box){{0, 0, 0}, {0, 9, 9}}, ext,
                                       1),
                     CNX_EINVAL);
    cnx_workflow_free(wf);

    /* compressed_segmentation of uint8 */
    wf = parse_ok(WF(
        "w",
        STAGE("a", "seg",
              IN_LAYER("image") ",\"output\":{\"layer\":\"a/v1\","
                                "\"encoding\":\"compressed_segmentation\"}")));
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 1),
                     CNX_ESCHEMA);
    assert_non_null(strstr(msg, "stage a: output.encoding"));
    cnx_workflow_free(wf);
    /* the downsample worker cannot change the data type */
    wf = parse_ok(
        WF("w", STAGE("a", "downsample",
                      IN_LAYER("image") ",\"output\":{\"layer\":\"a/v1\","
                                        "\"data_type\":\"uint16\"}")));
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, ext, 1),
                     CNX_ESCHEMA);
    assert_non_null(strstr(msg, "stage a: output: the downsample worker"));
    cnx_workflow_free(wf);
}

static int same_plan(const cnx_plan *a, const cnx_plan *b)
{
    if (a->ntasks != b->ntasks || a->nstages != b->nstages ||
        a->nnotes != b->nnotes)
        return 0;
    if (memcmp(a->stages, b->stages, a->nstages * sizeof(*a->stages)) != 0 ||
        memcmp(a->tasks, b->tasks, a->ntasks * sizeof(*a->tasks)) != 0)
        return 0;
    for (size_t i = 0; i < a->nnotes; i++)
        if (strcmp(a->notes[i], b->notes[i]) != 0)
            return 0;
    return 1;
}

static void test_workflow__plans_are_deterministic(void **state)
{
    const int64_t size[3] = {300, 200, 77}, chunk[3] = {64, 32, 16};
    const int64_t off[3] = {64, -32, 16};
    const cnx_box roi = {{70, -20, 20}, {300, 100, 60}};
    char dir[64], data[160], url[256], *json = NULL;
    cnx_workflow *wf = parse_ok(dep_workflows[0]);
    cnx_plan_external *ext = NULL, *back = NULL;
    size_t next = 0, nback = 0;
    cnx_plan *a = NULL, *b = NULL, *c;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, off);
    assert_int_equal(cnx_plan_new(&a, wf, data, &roi), 0);
    assert_int_equal(cnx_plan_new(&b, wf, data, &roi), 0);
    assert_true(same_plan(a, b));
    /* the logged geometry re-plans to the same plan, storage untouched */
    assert_int_equal(cnx_plan_read_externals(&ext, &next, wf, data), 0);
    assert_int_equal(next, 1);
    assert_int_equal(cnx_plan_externals_to_json(ext, next, &json), 0);
    assert_int_equal(
        cnx_plan_externals_from_json(&back, &nback, json, strlen(json)), 0);
    assert_int_equal(nback, 1);
    assert_memory_equal(back, ext, sizeof(*ext));
    cnx_test_rmtree(dir);
    c = plan_with(wf, &roi, back, nback); /* another dataset URL */
    assert_int_equal(c->ntasks, a->ntasks);
    assert_memory_equal(c->tasks, a->tasks, a->ntasks * sizeof(*a->tasks));
    for (size_t s = 0; s < a->nstages; s++) {
        assert_memory_equal(&c->stages[s].region, &a->stages[s].region,
                            sizeof(cnx_box));
        assert_memory_equal(&c->stages[s].out_scale, &a->stages[s].out_scale,
                            sizeof(cnx_scale));
    }
    cnx_plan_free(c);
    free(json);
    free(ext);
    free(back);
    cnx_plan_free(a);
    cnx_plan_free(b);
    cnx_workflow_free(wf);
}

/* ---- task messages ------------------------------------------------------- */

struct lookups {
    int calls;
    int fail_at; /* 0: never */
};

static int fake_lookup(void *ctx, const char *role, const char *layer_url,
                       const char *object, char digest[CNX_DIGEST_LEN])
{
    struct lookups *l = ctx;
    char text[2048];
    if (++l->calls == l->fail_at)
        return cnx_error_set(CNX_ENOTFOUND, 0, "no manifest entry for %s",
                             object);
    snprintf(text, sizeof(text), "%s|%s|%s", role, layer_url, object);
    cnx_digest(text, strlen(text), digest);
    return 0;
}

static void check_task_message(const cnx_plan *p, size_t t)
{
    const cnx_plan_task *task = &p->tasks[t];
    const cnx_plan_stage *ps = &p->stages[task->stage];
    const cnx_wf_stage *st = &p->wf->stages[task->stage];
    struct lookups l = {0, 0};
    cnx_task *msg = NULL;
    char *json = NULL;
    size_t want = 0;

    assert_int_equal(cnx_plan_task_json(p, t, "req-1", "2030-01-02T03:04:05Z",
                                        1, fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&msg, json, strlen(json)), 0);
    assert_string_equal(msg->stage, st->worker);
    assert_string_equal(msg->request, "req-1");
    assert_int_equal(msg->urgent, 1);
    assert_int_equal(msg->halo, ps->halo);
    if (st->halo_pinned)
        assert_int_equal(ps->halo, st->halo);
    assert_int_equal(msg->kernel_version, st->kernel_version);
    assert_int_equal(msg->retry_budget, st->retry_budget);
    assert_string_equal(msg->parameters, st->parameters);
    assert_true(cnx_box_equal(&msg->roi, &task->roi));
    assert_string_equal(msg->output_layer, ps->out_layer);
    assert_string_equal(msg->output_scale, ps->out_scale.key);
    assert_int_equal(msg->ninputs, st->ninputs);
    for (size_t k = 0; k < st->ninputs; k++) {
        const cnx_task_input *in = cnx_task_input_get(msg, st->inputs[k].role);
        const cnx_scale *sc = &ps->inputs[k].scale;
        cnx_box r = reads(&task->roi, ps->halo, sc);
        size_t n = 0;
        assert_non_null(in);
        assert_string_equal(in->layer, ps->inputs[k].layer);
        assert_string_equal(in->scale, sc->key);
        /* every chunk of the grid, kept if it meets the read box */
        for (int64_t z = sc->voxel_offset[2];
             z < sc->voxel_offset[2] + sc->size[2]; z += sc->chunk[2]) {
            for (int64_t y = sc->voxel_offset[1];
                 y < sc->voxel_offset[1] + sc->size[1]; y += sc->chunk[1]) {
                for (int64_t x = sc->voxel_offset[0];
                     x < sc->voxel_offset[0] + sc->size[0]; x += sc->chunk[0]) {
                    cnx_box cb = {
                        {x, y, z},
                        {x + sc->chunk[0], y + sc->chunk[1], z + sc->chunk[2]}};
                    char name[256], text[2048], d[CNX_DIGEST_LEN];
                    for (int i = 0; i < 3; i++) {
                        int64_t end = sc->voxel_offset[i] + sc->size[i];
                        if (cb.max[i] > end)
                            cb.max[i] = end;
                    }
                    if (!meets(&cb, &r))
                        continue;
                    snprintf(name, sizeof(name),
                             "%s/%" PRId64 "-%" PRId64 "_%" PRId64 "-%" PRId64
                             "_%" PRId64 "-%" PRId64,
                             sc->key, cb.min[0], cb.max[0], cb.min[1],
                             cb.max[1], cb.min[2], cb.max[2]);
                    snprintf(text, sizeof(text), "%s|%s|%s", in->role,
                             in->layer, name);
                    cnx_digest(text, strlen(text), d);
                    assert_non_null(cnx_task_expected(msg, in->role, name));
                    assert_string_equal(cnx_task_expected(msg, in->role, name),
                                        d);
                    n++;
                }
            }
        }
        assert_int_equal(in->nobjects, n);
        want += n;
    }
    assert_int_equal((size_t)l.calls, want);
    cnx_task_free(msg);
    free(json);
}

static void test_workflow__task_messages_list_exactly_the_chunks(void **state)
{
    const int64_t size[3] = {300, 200, 77}, chunk[3] = {64, 32, 16};
    const int64_t off[3] = {64, -32, 16};
    cnx_plan_external ext[1];
    struct lookups l = {0, 3};
    char *json = (char *)0x1;
    (void)state;
    ext[0] = ext_geom(CNX_DT_UINT32, size, 8, chunk, off);
    for (size_t w = 0; w < sizeof(dep_workflows) / sizeof(*dep_workflows);
         w++) {
        cnx_workflow *wf = parse_ok(dep_workflows[w]);
        cnx_plan_external e2[2] = {ext[0], ext[0]};
        cnx_plan *p = plan_with(wf, NULL, e2, cnx_plan_externals(wf, NULL, 0));
        for (size_t t = 0; t < p->ntasks; t += 1 + p->ntasks / 40)
            check_task_message(p, t);
        check_task_message(p, p->ntasks - 1);
        if (w == 1) {
            /* reduce: one task over the whole region */
            size_t s = (size_t)cnx_workflow_find_stage(wf, "stats");
            assert_int_equal(p->stages[s].count, 1);
            assert_true(cnx_box_equal(&p->tasks[p->stages[s].first].roi,
                                      &p->stages[s].region));
        }
        /* a failing lookup is passed up */
        assert_int_equal(cnx_plan_task_json(p, 0, "r", "2030-01-02T03:04:05Z",
                                            0, fake_lookup, &l, &json),
                         CNX_ENOTFOUND);
        assert_null(json);
        l.calls = 0;
        l.fail_at = 0;
        /* a bad request id is refused by the task checker */
        assert_int_equal(cnx_plan_task_json(p, 0, "bad id",
                                            "2030-01-02T03:"
                                            "04:05Z",
                                            0, fake_lookup, &l, &json),
                         CNX_ESCHEMA);
        l.calls = 0;
        l.fail_at = 3;
        cnx_plan_free(p);
        cnx_workflow_free(wf);
    }
}

/* ---- output layers ------------------------------------------------------- */

static void test_workflow__prepare_outputs(void **state)
{
    const int64_t size[3] = {512, 512, 256}, chunk[3] = {128, 128, 128};
    char dir[64], data[160], url[256];
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    cnx_plan *p = NULL;
    cnx_layer *layer = NULL;
    const cnx_layer_info *info;
    const char *msg = cnx_error_last()->message;
    int s;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), 0);
    if (cnx_plan_prepare_outputs(p) != 0)
        fail_msg("%s", msg);
    assert_int_equal(cnx_plan_prepare_outputs(p), 0); /* idempotent */
    snprintf(url, sizeof(url), "%s/pyramid/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    info = cnx_layer_get_info(layer);
    assert_int_equal(info->type, CNX_LAYER_IMAGE);
    assert_int_equal(info->dtype, CNX_DT_UINT8);
    assert_int_equal(info->nscales, 2);
    s = cnx_info_find_scale(info, "16_16_16");
    assert_int_equal(s, 0);
    assert_int_equal(info->scales[s].size[0], 256);
    assert_int_equal(info->scales[s].size[2], 128);
    assert_int_equal(info->scales[s].chunk[0], 64);
    assert_true(info->scales[s].resolution[1] == 16.0);
    s = cnx_info_find_scale(info, "32_32_32");
    assert_int_equal(s, 1);
    assert_int_equal(info->scales[s].size[0], 128);
    assert_int_equal(info->scales[s].chunk[0], 32);
    cnx_layer_free(layer);
    cnx_plan_free(p);
    cnx_test_rmtree(dir);

    /* An existing scale with other geometry is refused. */
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    snprintf(url, sizeof(url), "%s/pyramid/v1", data);
    {
        const int64_t s2[3] = {256, 256, 128}, c2[3] = {32, 32, 32};
        make_layer(url, s2, 16, c2, NULL);
    }
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), 0);
    assert_int_equal(cnx_plan_prepare_outputs(p), CNX_EIMMUTABLE);
    if (strstr(msg, url) == NULL ||
        strstr(msg, "scale '16_16_16' exists with other geometry") == NULL)
        fail_msg("%s", msg);
    cnx_plan_free(p);
    cnx_test_rmtree(dir);

    /* ... and so is an existing layer of another data type. */
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    snprintf(url, sizeof(url), "%s/pyramid/v1", data);
    {
        const int64_t s2[3] = {256, 256, 128}, c2[3] = {64, 64, 64};
        const double r2[3] = {16, 16, 16};
        cnx_layer_info li;
        cnx_info_init(&li, CNX_LAYER_IMAGE, CNX_DT_UINT16, s2, r2, c2);
        assert_int_equal(cnx_layer_create(&layer, url, &li), 0);
        cnx_layer_free(layer);
    }
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), 0);
    assert_int_equal(cnx_plan_prepare_outputs(p), CNX_EIMMUTABLE);
    assert_non_null(strstr(msg, "exists as image uint16"));
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

/* The segmentation workflow: side objects, parts, their namespaces. */
static void test_workflow__segmentation_side_objects_and_parts(void **state)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    char dir[64], data[160], url[256], ns[96];
    cnx_workflow *wf = load_file("workflows/segmentation.json");
    struct lookups l = {0, 0};
    cnx_plan *p = NULL;
    cnx_layer *layer = NULL;
    cnx_task *task = NULL;
    char *json = NULL;
    int join, relabel, mesh;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/boundary", data);
    make_layer(url, size, 8, chunk, NULL);
    if (cnx_plan_new(&p, wf, data, NULL) != 0)
        fail_msg("%s", cnx_error_last()->message);
    join = cnx_workflow_find_stage(wf, "join");
    relabel = cnx_workflow_find_stage(wf, "relabel");
    mesh = cnx_workflow_find_stage(wf, "mesh");
    assert_int_equal(p->stages[join].count, 1);
    assert_int_equal(p->stages[relabel].count, 8);
    cnx_plan_namespace(p, (size_t)join, ns, sizeof(ns));
    assert_string_equal(ns, "8_8_8:segment_properties");
    cnx_plan_namespace(p, (size_t)relabel, ns, sizeof(ns));
    assert_string_equal(ns, "8_8_8");
    /* The join lists every chunk's face record, not the chunks. */
    assert_int_equal(cnx_plan_task_json(p, p->stages[join].first, "r",
                                        "2030-01-02T03:04:05Z", 0,
                                        fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&task, json, strlen(json)), 0);
    assert_int_equal(task->inputs[0].nobjects, 8);
    assert_string_equal(task->inputs[0].objects[0].name,
                        "faces/8_8_8/0-128_0-128_0-128");
    assert_int_equal(p->tasks[p->stages[join].first].ndeps, 8);
    cnx_task_free(task);
    free(json);
    /* A relabel task: its chunk and its chunk's mapping, after the join. */
    assert_int_equal(cnx_plan_task_json(p, p->stages[relabel].first, "r",
                                        "2030-01-02T03:04:05Z", 0,
                                        fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&task, json, strlen(json)), 0);
    assert_non_null(cnx_task_expected(task, "mapping",
                                      "agglomeration/8_8_8/0-128_0-128_0-128"));
    assert_non_null(cnx_task_expected(task, "fragments",
                                      "8_8_8/0-128_0-128_0-128"));
    assert_int_equal(task->inputs[1].nobjects, 1);
    assert_int_equal(p->tasks[p->stages[relabel].first].ndeps, 2);
    cnx_task_free(task);
    free(json);
    /* A mesh task reads one voxel more: the 8 chunks around a corner. */
    assert_int_equal(p->tasks[p->stages[mesh].first].ndeps, 8);
    /* The output layer's info names the mesh and properties parts. */
    if (cnx_plan_prepare_outputs(p) != 0)
        fail_msg("%s", cnx_error_last()->message);
    snprintf(url, sizeof(url), "%s/segmentation/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_string_equal(cnx_layer_get_info(layer)->mesh, "mesh");
    assert_string_equal(cnx_layer_get_info(layer)->segment_properties,
                        "segment_properties");
    assert_int_equal(cnx_layer_get_info(layer)->dtype, CNX_DT_UINT64);
    cnx_layer_free(layer);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

static void test_workflow__objects_and_parts_refused(void **state)
{
    cnx_workflow *wf = NULL;
    const char *msg = cnx_error_last()->message;
    const char *bad_objects =
        "{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[{"
        "\"name\":\"a\",\"worker\":\"x\",\"kind\":\"map\","
        "\"kernel_version\":1,\"inputs\":{\"s\":{\"layer\":\"img\","
        "\"objects\":\"faces\"}},\"output\":{\"layer\":\"o/v1\"}}]}";
    const char *bad_part =
        "{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[{"
        "\"name\":\"a\",\"worker\":\"x\",\"kind\":\"map\","
        "\"kernel_version\":1,\"inputs\":{\"s\":{\"layer\":\"img\"}},"
        "\"output\":{\"layer\":\"o/v1\",\"part\":\"../mesh\"}}]}";
    (void)state;
    assert_int_equal(cnx_workflow_parse(&wf, bad_objects, strlen(bad_objects)),
                     CNX_ESCHEMA);
    if (strstr(msg, "stages[0].inputs.s") == NULL ||
        strstr(msg, "needs \"stage\"") == NULL)
        fail_msg("%s", msg);
    assert_int_equal(cnx_workflow_parse(&wf, bad_part, strlen(bad_part)),
                     CNX_ESCHEMA);
    if (strstr(msg, "output.part") == NULL)
        fail_msg("%s", msg);
}

/* A recorded tile set of nz sections of 2 x 2 tiles of 160 px, nominally
 * 110 px apart, the first tile 5 px left of the origin; with_digests 0
 * leaves the sha256 out (a tile set as the microscope wrote it). */
static void write_tileset(const char *dir, int nz, int with_digests)
{
    char path[256];
    FILE *f;
    snprintf(path, sizeof(path), "%s/data/tileset", dir);
    assert_int_equal(mkdir(path, 0755) == 0 || errno == EEXIST, 1);
    snprintf(path, sizeof(path), "%s/data/tileset/tiles.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"format\":\"cnx.tileset/1\",\"resolution\":[8,8,8],"
               "\"dtype\":\"uint8\",\"sections\":[");
    for (int z = 0; z < nz; z++) {
        fprintf(f, "%s{\"z\":%d,\"tiles\":[", z ? "," : "", z);
        for (int t = 0; t < 4; t++)
            fprintf(f,
                    "%s{\"id\":\"z%d-%d\",\"file\":\"tiles/z%d/%d.png\","
                    "\"x\":%d,\"y\":%d,\"width\":160,\"height\":160%s}",
                    t ? "," : "", z, t, z, t, (t % 2) * 110 - (t == 0) * 5,
                    (t / 2) * 110,
                    with_digests ? ",\"sha256\":\"sha256:"
                                   "0000000000000000000000000000000000000000"
                                   "000000000000000000000000\""
                                 : "");
        fprintf(f, "]}");
    }
    fprintf(f, "]}");
    fclose(f);
}

/*
 * workflows/pipeline.json on a recorded tile set alone: the montage cuts
 * one task per section; the alignment takes whole sections in slabs of
 * CNX_ALIGN_SLAB (4 sections: one match task, one solve task, one render
 * task); the aligned image is the stitched box less its negative part, in
 * chunks of at most 128 x 128 x CNX_ALIGN_SLAB; the segmentation reads it.
 */
static void test_workflow__pipeline_with_a_tile_set(void **state)
{
    char dir[64], data[160], url[256];
    cnx_workflow *wf = load_file("workflows/pipeline.json");
    struct lookups l = {0, 0};
    cnx_plan *p = NULL;
    cnx_layer *layer = NULL;
    cnx_task *task = NULL;
    const cnx_scale *sc;
    char *json = NULL;
    int mont, match, solve, render, frag;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/data", dir);
    assert_int_equal(mkdir(url, 0755), 0);
    /* Without digests the tile set is refused: tiles could not be
     * checked. */
    write_tileset(dir, 4, 0);
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), CNX_ESCHEMA);
    if (strstr(cnx_error_last()->message, "not a recorded tile set") == NULL ||
        strstr(cnx_error_last()->message, "input tiles") == NULL)
        fail_msg("%s", cnx_error_last()->message);
    write_tileset(dir, 4, 1);
    if (cnx_plan_new(&p, wf, data, NULL) != 0)
        fail_msg("%s", cnx_error_last()->message);
    mont = cnx_workflow_find_stage(wf, "montage");
    match = cnx_workflow_find_stage(wf, "match");
    solve = cnx_workflow_find_stage(wf, "solve");
    render = cnx_workflow_find_stage(wf, "render");
    frag = cnx_workflow_find_stage(wf, "fragments");
    assert_true(mont >= 0 && match >= 0 && solve >= 0 && render >= 0 &&
                frag >= 0);
    assert_int_equal(cnx_workflow_find_stage(wf, "synapses"), -1);
    /* The tile set's geometry: the nominal box -5..270 x 0..270 grown by
     * 25 px, one chunk per section; one montage task per section. */
    sc = &p->stages[mont].in_scale;
    assert_string_equal(sc->key, "8_8_8");
    assert_int_equal(sc->voxel_offset[0], -30);
    assert_int_equal(sc->voxel_offset[1], -25);
    assert_int_equal(sc->voxel_offset[2], 0);
    assert_int_equal(sc->size[0], 325);
    assert_int_equal(sc->size[1], 320);
    assert_int_equal(sc->size[2], 4);
    assert_int_equal(sc->chunk[0], 325);
    assert_int_equal(sc->chunk[2], 1);
    assert_int_equal(p->stages[mont].count, 4);
    assert_int_equal(p->stages[mont].out_scale.chunk[0], 256);
    assert_int_equal(p->stages[mont].out_scale.chunk[1], 256);
    assert_int_equal(p->stages[mont].out_scale.chunk[2], 1);
    /* A montage task lists tiles.json only. */
    assert_int_equal(cnx_plan_task_json(p, p->stages[mont].first + 2, "r",
                                        "2030-01-02T03:04:05Z", 0,
                                        fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&task, json, strlen(json)), 0);
    assert_int_equal(task->ninputs, 1);
    assert_int_equal(task->inputs[0].nobjects, 1);
    assert_string_equal(task->inputs[0].objects[0].name, "tiles.json");
    assert_true(cnx_box_equal(&task->roi,
                              &(cnx_box){{-30, -25, 2}, {295, 295, 3}}));
    snprintf(url, sizeof(url), "%s/tileset", data);
    assert_string_equal(task->inputs[0].layer, url);
    cnx_task_free(task);
    free(json);
    /* Matching: whole sections, slabs of CNX_ALIGN_SLAB (64) sections: the
     * four sections are one task, waiting for every montage task; its side
     * objects are one "chunk" of the whole stitched box. */
    assert_int_equal(p->stages[match].count, 1);
    assert_int_equal(p->tasks[p->stages[match].first].ndeps, 4);
    assert_true(cnx_box_equal(&p->tasks[p->stages[match].first].roi,
                              &(cnx_box){{-30, -25, 0}, {295, 295, 4}}));
    sc = &p->stages[match].out_scale;
    assert_int_equal(sc->chunk[0], 325);
    assert_int_equal(sc->chunk[1], 320);
    assert_int_equal(sc->chunk[2], 4);
    assert_true(p->stages[match].halo >= 2);
    /* The solve is one reduce task over every match task. */
    assert_int_equal(p->stages[solve].count, 1);
    assert_int_equal(p->tasks[p->stages[solve].first].ndeps, 1);
    /* The render: the stitched box less its negative part (x, y >= 0),
     * chunks of at most 128 x 128 x 64; one task (whole sections) waiting
     * for the montage and the solve. */
    sc = &p->stages[render].out_scale;
    assert_int_equal(sc->voxel_offset[0], 0);
    assert_int_equal(sc->voxel_offset[1], 0);
    assert_int_equal(sc->voxel_offset[2], 0);
    assert_int_equal(sc->size[0], 295);
    assert_int_equal(sc->size[1], 295);
    assert_int_equal(sc->size[2], 4);
    assert_true(sc->chunk[0] <= 128 && sc->chunk[1] <= 128 &&
                sc->chunk[2] <= CNX_ALIGN_SLAB);
    assert_int_equal(sc->chunk[0], 128);
    assert_int_equal(sc->chunk[2], 4);
    assert_int_equal(p->stages[render].count, 1);
    assert_int_equal(p->tasks[p->stages[render].first].ndeps, 4 + 1);
    /* The segmentation reads the aligned image: 3 x 3 tasks of 128^2 over
     * 295^2, each waiting for the render task alone. */
    assert_int_equal(wf->stages[frag].ndeps, 1);
    assert_int_equal(wf->stages[frag].deps[0], render);
    assert_int_equal(p->stages[frag].in_scale.size[0], 295);
    assert_int_equal(p->stages[frag].count, 9);
    for (size_t t = 0; t < p->stages[frag].count; t++)
        assert_int_equal(p->tasks[p->stages[frag].first + t].ndeps, 1);
    /* The stitched layer: the tile set's geometry in 256^2 x 1 chunks; the
     * aligned one at x, y >= 0. */
    if (cnx_plan_prepare_outputs(p) != 0)
        fail_msg("%s", cnx_error_last()->message);
    snprintf(url, sizeof(url), "%s/stitched/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_int_equal(cnx_layer_get_info(layer)->scales[0].voxel_offset[0], -30);
    assert_int_equal(cnx_layer_get_info(layer)->scales[0].chunk[2], 1);
    assert_int_equal(cnx_layer_get_info(layer)->dtype, CNX_DT_UINT8);
    cnx_layer_free(layer);
    snprintf(url, sizeof(url), "%s/aligned/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_int_equal(cnx_layer_get_info(layer)->scales[0].voxel_offset[0], 0);
    assert_int_equal(cnx_layer_get_info(layer)->scales[0].size[1], 295);
    assert_int_equal(cnx_layer_get_info(layer)->dtype, CNX_DT_UINT8);
    cnx_layer_free(layer);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

/* workflows/predictions.json on predicted boundary, cleft and psd layers:
 * the segmentation starts from the boundary layer; synapses read the
 * relabelled chunks around theirs and the connectivity every table. */
static void test_workflow__predictions_with_predicted_layers(void **state)
{
    const int64_t size[3] = {256, 256, 4}, chunk[3] = {128, 128, 128};
    static const char *const layers[] = {"boundary", "cleft", "psd"};
    char dir[64], data[160], url[256], ns[96];
    cnx_workflow *wf = load_file("workflows/predictions.json");
    struct lookups l = {0, 0};
    cnx_plan *p = NULL;
    cnx_task *task = NULL;
    char *json = NULL;
    int frag, syn, conn;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    for (int i = 0; i < 3; i++) {
        snprintf(url, sizeof(url), "%s/%s", data, layers[i]);
        make_layer(url, size, 8, chunk, NULL);
    }
    if (cnx_plan_new(&p, wf, data, NULL) != 0)
        fail_msg("%s", cnx_error_last()->message);
    assert_int_equal(cnx_workflow_find_stage(wf, "montage"), -1);
    frag = cnx_workflow_find_stage(wf, "fragments");
    syn = cnx_workflow_find_stage(wf, "synapses");
    conn = cnx_workflow_find_stage(wf, "connectivity");
    /* The segmentation waits for nothing: its input is a layer. The
     * synapses (halo 16: all four relabelled chunks) and the
     * connectivity (every table). */
    assert_int_equal(p->stages[frag].count, 4);
    assert_int_equal(p->tasks[p->stages[frag].first].ndeps, 0);
    assert_int_equal(p->stages[syn].count, 4);
    assert_int_equal(p->tasks[p->stages[syn].first].ndeps, 4);
    assert_int_equal(p->tasks[p->stages[conn].first].ndeps, 4);
    cnx_plan_namespace(p, (size_t)syn, ns, sizeof(ns));
    assert_string_equal(ns, "8_8_8:synapses");
    assert_int_equal(cnx_plan_task_json(p, p->stages[conn].first, "r",
                                        "2030-01-02T03:04:05Z", 0,
                                        fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&task, json, strlen(json)), 0);
    assert_int_equal(task->inputs[0].nobjects, 4);
    assert_string_equal(task->inputs[0].objects[0].name,
                        "synapses/8_8_8/0-128_0-128_0-4");
    cnx_task_free(task);
    free(json);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

static void test_workflow__tileset_input_refusals(void **state)
{
    cnx_workflow *wf = NULL;
    const char *msg = cnx_error_last()->message;
    const char *both =
        "{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[{"
        "\"name\":\"a\",\"worker\":\"montage\",\"kind\":\"map\","
        "\"kernel_version\":1,\"inputs\":{\"t\":{\"tileset\":\"ts\","
        "\"layer\":\"img\"}},\"output\":{\"layer\":\"o/v1\"}}]}";
    const char *escape =
        "{\"schema\":\"cnx.workflow/1\",\"name\":\"w\",\"stages\":[{"
        "\"name\":\"a\",\"worker\":\"montage\",\"kind\":\"map\","
        "\"kernel_version\":1,\"inputs\":{\"t\":{\"tileset\":\"../ts\"}},"
        "\"output\":{\"layer\":\"o/v1\"}}]}";
    (void)state;
    assert_int_equal(cnx_workflow_parse(&wf, both, strlen(both)), CNX_ESCHEMA);
    if (strstr(msg, "stages[0].inputs.t") == NULL ||
        strstr(msg, "tile set input") == NULL)
        fail_msg("%s", msg);
    assert_int_equal(cnx_workflow_parse(&wf, escape, strlen(escape)),
                     CNX_ESCHEMA);
    if (strstr(msg, "inputs.t.tileset") == NULL)
        fail_msg("%s", msg);
}

/* The cap on tasks per request is checked on counts worked out from the
 * stages' regions before any task is cut (issue 13: a 16.7 M-task request
 * was planned in full, in 4.5 GB, before anything said no). */
static void test_workflow__task_cap_refuses_before_cutting(void **state)
{
    /* 2^26 voxels a side at 8 nm, chunks of 64: ds1 cuts 2^19 tasks of
     * 128 a side per axis (2^57), ds2 2^18 per axis (2^54). The boxes
     * alone would take 7 EB, so the refusal cannot have cut them. */
    const int64_t huge[3] = {1LL << 26, 1LL << 26, 1LL << 26};
    const int64_t chunk[3] = {64, 64, 64};
    const int64_t size[3] = {512, 512, 256}, chunk128[3] = {128, 128, 128};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, huge, 8, chunk, NULL);
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    const char *msg = cnx_error_last()->message;
    cnx_plan *p = NULL;
    (void)state;

    assert_int_equal(
        cnx_plan_new_capped(&p, wf, "file:///d", NULL, &ext, 1, 1000000),
        CNX_ETOOBIG);
    assert_null(p);
    if (strstr(msg, "workflow pyramid: the region needs 162129586585337856 "
                    "tasks (ds1 144115188075855872, ds2 18014398509481984), "
                    "more than the cap of 1000000 tasks per request") == NULL)
        fail_msg("%s", msg);

    /* At the edge: 32 + 4 tasks pass a cap of 36 and not one of 35. */
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk128, NULL);
    assert_int_equal(
        cnx_plan_new_capped(&p, wf, "file:///d", NULL, &ext, 1, 36), 0);
    assert_int_equal(p->ntasks, 36);
    cnx_plan_free(p);
    p = NULL;
    assert_int_equal(
        cnx_plan_new_capped(&p, wf, "file:///d", NULL, &ext, 1, 35),
        CNX_ETOOBIG);
    if (strstr(msg, "needs 36 tasks (ds1 32, ds2 4), more than the cap of 35 "
                    "tasks per request") == NULL)
        fail_msg("%s", msg);
    cnx_workflow_free(wf);
}

/* A task's outputs as its manifest must name them: the chunks its write
 * box meets on its output scale, and the side objects later stages read
 * from it, checked against a plain enumeration. */
static void test_workflow__task_outputs_are_what_readers_read(void **state)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    const int64_t psize[3] = {512, 512, 256};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, psize, 8, chunk, NULL);
    cnx_workflow *wf = load_file("workflows/pyramid.json");
    cnx_plan *p = plan_with(wf, NULL, &ext, 1);
    char **urls = NULL;
    size_t n = 0;
    int join, fragments, relabel;
    (void)state;

    /* ds1 task 0: [0,128)^3 at 8 nm writes [0,64)^3 at 16 nm, one chunk. */
    assert_int_equal(cnx_plan_task_outputs(p, 0, &urls, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(urls[0], "file:///nowhere/data/pyramid/v1/"
                                 "16_16_16/0-64_0-64_0-64");
    free(urls[0]);
    free(urls);
    /* ds2's last task, [128,256) x [128,256) x [0,128) at 16 nm, writes
     * [64,128) x [64,128) x [0,64) at 32 nm: 8 chunks of 32. */
    assert_int_equal(cnx_plan_task_outputs(p, p->ntasks - 1, &urls, &n), 0);
    assert_int_equal(n, 8);
    assert_string_equal(urls[0], "file:///nowhere/data/pyramid/v1/"
                                 "32_32_32/64-96_64-96_0-32");
    assert_string_equal(urls[7], "file:///nowhere/data/pyramid/v1/"
                                 "32_32_32/96-128_96-128_32-64");
    for (size_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* segmentation: fragments write chunks and the faces the join reads;
     * the join (a part: no chunks) the agglomeration relabel reads, for
     * every chunk of its region; relabel the chunks only. */
    wf = load_file("workflows/segmentation.json");
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    p = plan_with(wf, NULL, &ext, 1);
    fragments = cnx_workflow_find_stage(wf, "fragments");
    join = cnx_workflow_find_stage(wf, "join");
    relabel = cnx_workflow_find_stage(wf, "relabel");
    assert_int_equal(
        cnx_plan_task_outputs(p, p->stages[fragments].first + 1, &urls, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(urls[0], "file:///nowhere/data/fragments/v1/"
                                 "8_8_8/128-256_0-128_0-128");
    assert_string_equal(urls[1], "file:///nowhere/data/fragments/v1/"
                                 "faces/8_8_8/128-256_0-128_0-128");
    for (size_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
    assert_int_equal(cnx_plan_task_outputs(p, p->stages[join].first, &urls, &n),
                     0);
    assert_int_equal(n, 8);
    for (size_t i = 0; i < n; i++) {
        if (strncmp(urls[i],
                    "file:///nowhere/data/segmentation/v1/"
                    "agglomeration/8_8_8/",
                    56) != 0)
            fail_msg("%s", urls[i]);
        if (i > 0 && strcmp(urls[i - 1], urls[i]) >= 0)
            fail_msg("not ascending: %s, %s", urls[i - 1], urls[i]);
    }
    for (size_t i = 0; i < n; i++)
        free(urls[i]);
    free(urls);
    assert_int_equal(
        cnx_plan_task_outputs(p, p->stages[relabel].first, &urls, &n), 0);
    assert_int_equal(n, 1);
    assert_string_equal(urls[0], "file:///nowhere/data/segmentation/v1/"
                                 "8_8_8/0-128_0-128_0-128");
    free(urls[0]);
    free(urls);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
}

/* ---- halos and worker checks --------------------------------------------- */

/* The halo a task message of task t carries. */
static int64_t task_halo(const cnx_plan *p, size_t t)
{
    struct lookups l = {0, 0};
    cnx_task *msg = NULL;
    char *json = NULL;
    int64_t halo;
    assert_int_equal(cnx_plan_task_json(p, t, "r", "2030-01-02T03:04:05Z", 0,
                                        fake_lookup, &l, &json),
                     0);
    assert_int_equal(cnx_task_parse(&msg, json, strlen(json)), 0);
    halo = msg->halo;
    cnx_task_free(msg);
    free(json);
    return halo;
}

/* What the segment kernel says it needs, at resolution r (nm). */
static int64_t kernel_halo(const char *params, double rx, double ry, double rz)
{
    cnx_segment_params sp;
    cnx_segment_params_default(&sp);
    assert_int_equal(cnx_segment_params_parse(&sp, params), 0);
    sp.resolution[0] = rx;
    sp.resolution[1] = ry;
    sp.resolution[2] = rz;
    return cnx_segment_halo(&sp);
}

/* The shipped segmentation workflow with one replacement in its text. */
/* The shipped workflows/<name>.json with its first occurrence of from
 * replaced by to. */
static cnx_workflow *shipped_with(const char *name, const char *from,
                                  const char *to)
{
    char path[512], *text, *at, *doc;
    size_t len;
    FILE *f;
    cnx_workflow *wf;
    snprintf(path, sizeof(path), "%s/workflows/%s.json", source_dir(), name);
    f = fopen(path, "rb");
    assert_non_null(f);
    text = calloc(1, 1 << 16);
    assert_non_null(text);
    len = fread(text, 1, (1 << 16) - 1, f);
    fclose(f);
    assert_true(len > 0);
    at = strstr(text, from);
    if (at == NULL)
        fail_msg("%s.json has no '%s'", name, from);
    doc = calloc(1, len + strlen(to) + 1);
    assert_non_null(doc);
    memcpy(doc, text, (size_t)(at - text));
    strcat(doc, to);
    strcat(doc, at + strlen(from));
    wf = parse_ok(doc);
    free(doc);
    free(text);
    return wf;
}

static cnx_workflow *segmentation_with(const char *from, const char *to)
{
    return shipped_with("segmentation", from, to);
}

/*
 * A halo the workflow leaves out is derived once per plan from the
 * worker (segment: cnx_segment_halo at the input scale's resolution;
 * mesh 1; relabel, join and reduces 0; others 2) and is what the task
 * messages carry; a halo the workflow gives is kept as is.
 */
static void test_workflow__halo_derived_unless_pinned(void **state)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    cnx_workflow *wf = load_file("workflows/segmentation.json");
    cnx_plan *p;
    int64_t want;
    int frag, join, relabel, mesh, meshes;
    (void)state;

    frag = cnx_workflow_find_stage(wf, "fragments");
    join = cnx_workflow_find_stage(wf, "join");
    relabel = cnx_workflow_find_stage(wf, "relabel");
    mesh = cnx_workflow_find_stage(wf, "mesh");
    meshes = cnx_workflow_find_stage(wf, "meshes");
    /* The shipped file pins no halo for fragments: derived. */
    assert_int_equal(wf->stages[frag].halo_pinned, 0);
    p = plan_with(wf, NULL, &ext, 1);
    want = kernel_halo("{}", 8, 8, 8);
    assert_true(want > 0);
    assert_int_equal(p->stages[frag].halo, want);
    for (size_t t = p->stages[frag].first;
         t < p->stages[frag].first + p->stages[frag].count; t++)
        assert_int_equal(task_halo(p, t), want);
    assert_int_equal(p->stages[join].halo, 0);
    assert_int_equal(p->stages[relabel].halo, 0);
    assert_int_equal(p->stages[mesh].halo, 1);
    assert_int_equal(p->stages[meshes].halo, 0);
    assert_int_equal(task_halo(p, p->stages[mesh].first), 1);
    check_dependencies(p);
    cnx_plan_free(p);

    /* It follows the input scale's resolution (anisotropic sections). */
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    ext.scale.resolution[2] = 40;
    p = plan_with(wf, NULL, &ext, 1);
    assert_int_equal(p->stages[frag].halo, kernel_halo("{}", 8, 8, 40));
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* ... and the parameters: a raw image needs the filter's footprint. */
    wf = segmentation_with("\"parameters\": {},",
                           "\"parameters\": {\"raw_input\": true},");
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    p = plan_with(wf, NULL, &ext, 1);
    assert_int_equal(p->stages[frag].halo,
                     kernel_halo("{\"raw_input\": true}", 8, 8, 8));
    assert_int_equal(task_halo(p, p->stages[frag].first), p->stages[frag].halo);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* A pinned halo is kept, whatever the kernel would derive. */
    wf = segmentation_with("\"parameters\": {},",
                           "\"parameters\": {}, \"halo\": 5,");
    assert_int_equal(wf->stages[frag].halo_pinned, 1);
    assert_int_equal(wf->stages[frag].halo, 5);
    p = plan_with(wf, NULL, &ext, 1);
    assert_int_equal(p->stages[frag].halo, 5);
    assert_int_equal(task_halo(p, p->stages[frag].first), 5);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* Other workers: 2 for a map stage (as before), 0 for a reduce. */
    wf = parse_ok(WF("w", OK_STAGE("a") ",{\"name\":\"b\",\"worker\":"
                                        "\"stats\",\"kind\":\"reduce\","
                                        "\"kernel_version\":1" IN_STAGE("a")
                                            OUT("b/v1") "}"));
    p = plan_with(wf, NULL, &ext, 1);
    assert_int_equal(p->stages[0].halo, 2);
    assert_int_equal(p->stages[1].halo, 0);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
}

/*
 * Tasks of several chunks (task_size 256 on chunks of 128) write every
 * chunk's own objects: the same names a one-chunk plan gives its tasks.
 */
static void test_workflow__multi_chunk_tasks_list_every_chunk(void **state)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    static const char *const stages[] = {"fragments", "relabel", "mesh"};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    cnx_workflow *one = load_file("workflows/segmentation.json");
    cnx_workflow *big = load_file("workflows/segmentation.json");
    cnx_plan *p1, *p8;
    (void)state;
    for (size_t s = 0; s < big->nstages; s++)
        for (int i = 0; i < 3; i++)
            big->stages[s].task_size[i] = 256;
    p1 = plan_with(one, NULL, &ext, 1);
    p8 = plan_with(big, NULL, &ext, 1);
    for (size_t k = 0; k < sizeof(stages) / sizeof(stages[0]); k++) {
        int s = cnx_workflow_find_stage(big, stages[k]);
        char **u8 = NULL;
        size_t n8 = 0, n1 = 0;
        assert_int_equal(p8->stages[s].count, 1);
        assert_int_equal(p1->stages[s].count, 8);
        assert_int_equal(p8->stages[s].halo, p1->stages[s].halo);
        assert_int_equal(
            cnx_plan_task_outputs(p8, p8->stages[s].first, &u8, &n8), 0);
        for (size_t t = 0; t < 8; t++) {
            char **u1 = NULL;
            size_t m = 0;
            assert_int_equal(
                cnx_plan_task_outputs(p1, p1->stages[s].first + t, &u1, &m), 0);
            for (size_t i = 0; i < m; i++) {
                int found = 0;
                for (size_t j = 0; j < n8; j++)
                    found |= strcmp(u1[i], u8[j]) == 0;
                if (!found)
                    fail_msg("stage %s: %s not listed by the 8-chunk task",
                             stages[k], u1[i]);
                free(u1[i]);
            }
            n1 += m;
            free(u1);
        }
        assert_int_equal(n8, n1);
        for (size_t j = 0; j < n8; j++)
            free(u8[j]);
        free(u8);
    }
    check_dependencies(p8);
    cnx_plan_free(p1);
    cnx_plan_free(p8);
    cnx_workflow_free(one);
    cnx_workflow_free(big);
}

/* A stage a worker would refuse task by task is refused at plan time,
 * with one line naming the workflow, the stage and the fix. */
static const struct {
    const char *from, *to; /* replacement in segmentation.json */
    cnx_dtype dtype;       /* of the boundary layer */
    const char *names;
} worker_refusals[] = {
    {"\"halo\": 1,", "\"halo\": 0,", CNX_DT_UINT8,
     "workflow segmentation: stage mesh: halo 0: the mesh worker reads one "
     "voxel beyond each chunk's high faces; set \"halo\" to at least 1"},
    {"\"name\": \"fragments\"", "\"name\": \"fragments\"", CNX_DT_UINT64,
     "workflow segmentation: stage fragments: input boundary is uint64 x1; "
     "the segment worker needs one channel of uint8 or float32"},
    {"\"parameters\": {},", "\"parameters\": {\"merge_threshold\": 2},",
     CNX_DT_UINT8, "workflow segmentation: stage fragments: "},
    {"\"inputs\": {\"boundary\": {\"layer\": \"boundary\"}}",
     "\"inputs\": {\"image\": {\"layer\": \"boundary\"}}", CNX_DT_UINT8,
     "workflow segmentation: stage fragments: the segment worker reads "
     "input role \"boundary\"; name the input \"boundary\""},
    {", \"type\": \"segmentation\", \"data_type\": \"uint64\", "
     "\"encoding\": \"compressed_segmentation\"",
     "", CNX_DT_UINT8,
     "workflow segmentation: stage fragments: the segment worker writes a "
     "uint64 segmentation; set \"output\""},
    {"\"output\": {\"layer\": \"segmentation/v1\"},\n      "
     "\"parameters\": {},",
     "\"output\": {\"layer\": \"segmentation/v1\"}, \"parameters\": "
     "{\"x\": 1},",
     CNX_DT_UINT8,
     "workflow segmentation: stage relabel: the segment-relabel worker "
     "takes no parameters"},
    {"\"mapping\": {\"stage\": \"join\", \"objects\": \"agglomeration\"}",
     "\"mapping\": {\"stage\": \"join\"}", CNX_DT_UINT8,
     "workflow segmentation: stage relabel: input mapping: the "
     "segment-relabel worker reads a stage's side objects here"},
    {"\"objects\": \"agglomeration\"", "\"objects\": \"maps\"", CNX_DT_UINT8,
     "workflow segmentation: stage relabel: input mapping: the segment-join "
     "worker (stage join) writes its per-chunk objects under "
     "\"agglomeration\", not \"maps\"; set \"objects\": \"agglomeration\""},
    {"\"part\": \"mesh\"},\n      \"parameters\": {},",
     "\"part\": \"mesh\"}, \"parameters\": {\"shard_bytes\": 4096},",
     CNX_DT_UINT8,
     "workflow segmentation: stage meshes: mesh-manifest: parameters: "
     "shard_bytes and minishard_segments need \"multires_sharded\": true"},
    {"\"part\": \"mesh\"},\n      \"parameters\": {},",
     "\"part\": \"mesh\"}, \"parameters\": {\"multires_sharded\": 2},",
     CNX_DT_UINT8,
     "workflow segmentation: stage meshes: mesh-manifest: parameters."
     "multires_sharded: must be"},
};

static void test_workflow__worker_checks_refuse_at_plan_time(void **state)
{
    const int64_t size[3] = {256, 256, 256}, chunk[3] = {128, 128, 128};
    const int64_t far[3] = {(int64_t)1 << 21, 0, 0};
    const char *msg = cnx_error_last()->message;
    cnx_plan_external ext;
    cnx_workflow *wf;
    cnx_plan *p = NULL;
    (void)state;
    for (size_t i = 0; i < sizeof(worker_refusals) / sizeof(*worker_refusals);
         i++) {
        wf = segmentation_with(worker_refusals[i].from, worker_refusals[i].to);
        ext = ext_geom(worker_refusals[i].dtype, size, 8, chunk, NULL);
        if (cnx_plan_new_with(&p, wf, "file:///d", NULL, &ext, 1) !=
                CNX_ESCHEMA ||
            strstr(msg, worker_refusals[i].names) == NULL)
            fail_msg("case %zu: '%s', wanted '%s'", i, msg,
                     worker_refusals[i].names);
        assert_null(p);
        assert_null(strchr(msg, '\n'));
        cnx_workflow_free(wf);
    }
    /* Coordinates past 2^21 cannot be packed into fragment ids. */
    wf = load_file("workflows/segmentation.json");
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, far);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, &ext, 1),
                     CNX_ESCHEMA);
    if (strstr(msg, "stage fragments: input scale '8_8_8' spans voxels") ==
        NULL)
        fail_msg("%s", msg);
    cnx_workflow_free(wf);
    /* montage: no halo, one section per task */
    wf = parse_ok(
        WF("w", STAGE("m", "montage",
                      IN_LAYER("image") OUT("m/v1") ",\"halo\":2,"
                                                    "\"task_size\":[1,1,1]")));
    ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    assert_int_equal(cnx_plan_new_with(&p, wf, "file:///d", NULL, &ext, 1),
                     CNX_ESCHEMA);
    if (strstr(msg, "workflow w: stage m: halo 2: the montage worker reads "
                    "no halo") == NULL)
        fail_msg("%s", msg);
    cnx_workflow_free(wf);
}

/* The alignment workers' plan-time checks, on workflows/pipeline.json
 * changed one field at a time and planned on a recorded tile set of 4
 * sections: each refusal names the stage, the field and the fix. */
static const struct {
    const char *from, *to, *names;
} align_refusals[] = {
    {"\"task_size\": [65536, 65536, 64]", "\"task_size\": [65536, 65536, 1]",
     "workflow pipeline: stage match: the align-match worker takes whole "
     "sections in slabs of 64; make it a map stage with \"task_size\": "
     "[65536, 65536, 64]"},
    {"\"part\": \"matches\"},", "\"part\": \"matches\"}, \"halo\": 1,",
     "workflow pipeline: stage match: halo 1: the align-match worker reads "
     "the two sections below each"},
    {"\"part\": \"matches\"},\n      \"parameters\": {}",
     "\"part\": \"matches\"}, \"parameters\": {\"stride\": 2}",
     "workflow pipeline: stage match: align: parameters.stride: must be an "
     "integer in [8, 4096]"},
    {"\"part\": \"transforms\"},\n      \"parameters\": {}",
     "\"part\": \"transforms\"}, \"parameters\": {\"nonsense\": 1}",
     "workflow pipeline: stage solve: align: parameters"},
    {"\"objects\": \"align_matches\"", "\"objects\": \"faces\"",
     "workflow pipeline: stage solve: input matches: the align-match worker "
     "(stage match) writes its per-chunk objects under \"align_matches\""},
    {"\"layer\": \"aligned/v1\"},\n      \"parameters\": {}",
     "\"layer\": \"aligned/v1\"}, \"parameters\": {\"stride\": 16}",
     "workflow pipeline: stage render: the align-render worker takes no "
     "parameters"},
    {"\"layer\": \"aligned/v1\"},\n      \"parameters\": {},\n      "
     "\"halo\": 0,\n      \"task_size\": [65536, 65536, 64]",
     "\"layer\": \"aligned/v1\"}, \"parameters\": {}, \"halo\": 0, "
     "\"task_size\": [128, 128, 64]",
     "workflow pipeline: stage render: the align-render worker takes whole "
     "sections in slabs of 64; make it a map stage with \"task_size\""},
};

static void test_workflow__align_checks_refuse_at_plan_time(void **state)
{
    const char *msg = cnx_error_last()->message;
    char dir[64], data[160], path[256];
    cnx_workflow *wf;
    cnx_plan *p = NULL;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(path, sizeof(path), "%s/data", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    write_tileset(dir, 4, 1);
    /* The shipped file plans. */
    wf = load_file("workflows/pipeline.json");
    if (cnx_plan_new(&p, wf, data, NULL) != 0)
        fail_msg("%s", msg);
    cnx_plan_free(p);
    p = NULL;
    cnx_workflow_free(wf);
    for (size_t i = 0; i < sizeof(align_refusals) / sizeof(*align_refusals);
         i++) {
        wf = shipped_with("pipeline", align_refusals[i].from,
                          align_refusals[i].to);
        if (cnx_plan_new(&p, wf, data, NULL) != CNX_ESCHEMA ||
            strstr(msg, align_refusals[i].names) == NULL)
            fail_msg("case %zu: '%s', wanted '%s'", i, msg,
                     align_refusals[i].names);
        assert_null(p);
        assert_null(strchr(msg, '\n'));
        cnx_workflow_free(wf);
    }
    cnx_test_rmtree(dir);
}

/* ---- the shard stage ------------------------------------------------------
 */

static const char *const shard_doc =
    "{\"schema\":\"cnx.workflow/1\",\"name\":\"sh\",\"stages\":["
    "{\"name\":\"a\",\"worker\":\"filter\",\"kind\":\"map\","
    "\"kernel_version\":1,\"inputs\":{\"src\":{\"layer\":\"image\"}},"
    "\"output\":{\"layer\":\"a/v1\"},\"halo\":0},"
    "{\"name\":\"sh\",\"worker\":\"shard\",\"kind\":\"%s\","
    "\"kernel_version\":1,\"inputs\":{\"source\":{\"stage\":\"a\"}},"
    "\"output\":{\"layer\":\"a-sharded/v1\"},%s"
    "\"parameters\":{\"shard_bytes\":2097152}}]}";

static cnx_workflow *shard_workflow(const char *kind, const char *extra)
{
    char doc[2048];
    snprintf(doc, sizeof(doc), shard_doc, kind, extra);
    return parse_ok(doc);
}

/* One task per shard: 512x384x256 uint8 in chunks of 64 is a grid of
 * 8x6x4 (8 id bits); 2 MiB shards of 256 KiB chunks hold 8 chunks, the
 * 2x2x2 blocks: 24 tasks, each exactly one shard, each waiting for the one
 * 128^3 task of stage a that wrote its chunks. */
static void test_workflow__shard_stage_has_one_task_per_shard(void **state)
{
    const int64_t size[3] = {512, 384, 256}, chunk[3] = {64, 64, 64};
    cnx_plan_external ext = ext_geom(CNX_DT_UINT8, size, 8, chunk, NULL);
    cnx_workflow *wf = shard_workflow("map", "");
    cnx_plan *p = plan_with(wf, NULL, &ext, 1);
    const cnx_plan_stage *ps = &p->stages[1];
    const cnx_sharding *spec = &ps->out_scale.sharding;
    const uint64_t grid[3] = {8, 6, 4};
    uint64_t seen[24];
    (void)state;
    assert_true(ps->out_scale.sharded);
    assert_false(p->stages[0].out_scale.sharded);
    assert_int_equal(spec->hash, CNX_SHARD_HASH_IDENTITY);
    assert_int_equal(spec->preshift_bits, 3);
    assert_int_equal(spec->minishard_bits, 0);
    assert_int_equal(spec->shard_bits, 5);
    assert_string_equal(ps->out_scale.key, ps->in_scale.key);
    assert_int_equal(ps->count, 24);
    for (size_t k = 0; k < ps->count; k++) {
        const cnx_plan_task *t = &p->tasks[ps->first + k];
        uint64_t shard = 0;
        assert_int_equal(cnx_box_voxels(&t->roi), 128 * 128 * 128);
        assert_int_equal(t->ndeps, 1);
        for (int64_t z = t->roi.min[2]; z < t->roi.max[2]; z += 64)
            for (int64_t y = t->roi.min[1]; y < t->roi.max[1]; y += 64)
                for (int64_t x = t->roi.min[0]; x < t->roi.max[0]; x += 64) {
                    uint64_t pos[3] = {(uint64_t)x / 64, (uint64_t)y / 64,
                                       (uint64_t)z / 64};
                    uint64_t id, sh, m;
                    assert_int_equal(cnx_sharding_morton(pos, grid, &id), 0);
                    cnx_sharding_locate(spec, id, &sh, &m);
                    if (x == t->roi.min[0] && y == t->roi.min[1] &&
                        z == t->roi.min[2])
                        shard = sh;
                    assert_int_equal(sh, shard);
                }
        for (size_t j = 0; j < k; j++)
            assert_true(seen[j] != shard);
        seen[k] = shard;
        { /* it must write exactly its shard */
            char **urls, want[64];
            size_t nurls;
            assert_int_equal(
                cnx_plan_task_outputs(p, ps->first + k, &urls, &nurls), 0);
            assert_int_equal(nurls, 1);
            snprintf(want, sizeof(want),
                     "/a-sharded/v1/8_8_8/%02" PRIx64 ".shard", shard);
            assert_non_null(strstr(urls[0], want));
            free(urls[0]);
            free(urls);
        }
    }
    check_dependencies(p);
    check_tiling(p);
    cnx_plan_free(p);

    /* a roi inside one shard widens to the whole shard, and stage a
     * with it */
    p = plan_with(wf, &(cnx_box){{70, 10, 10}, {100, 60, 60}}, &ext, 1);
    assert_int_equal(p->stages[1].count, 1);
    expect_box(&p->stages[1].region, 0, 0, 0, 128, 128, 128);
    assert_true(cnx_box_contains(&p->stages[0].region, &p->stages[1].region));
    assert_true(p->nnotes >= 1); /* the shard stage's note comes first */
    assert_non_null(strstr(p->notes[0], "sh: "));
    assert_non_null(strstr(p->notes[0], "whole shards of 128,128,128"));
    check_dependencies(p);
    cnx_plan_free(p);
    cnx_workflow_free(wf);

    /* refused: a halo, a reduce stage, bad parameters */
    wf = shard_workflow("map", "\"halo\":1,");
    assert_int_equal(
        cnx_plan_new_with(&p, wf, "file:///nowhere/data/", NULL, &ext, 1),
        CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "reads no halo"));
    cnx_workflow_free(wf);
    wf = shard_workflow("reduce", "");
    assert_int_equal(
        cnx_plan_new_with(&p, wf, "file:///nowhere/data/", NULL, &ext, 1),
        CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "one shard per task"));
    cnx_workflow_free(wf);
}

/* The output layer's info is created with the sharded scale. */
static void test_workflow__shard_stage_output_info_is_sharded(void **state)
{
    const int64_t size[3] = {256, 256, 128}, chunk[3] = {64, 64, 64};
    char dir[64], data[160], url[256];
    cnx_workflow *wf = shard_workflow("map", "");
    cnx_plan *p = NULL;
    cnx_layer *layer = NULL;
    const cnx_layer_info *info;
    (void)state;
    cnx_test_tmpdir(dir);
    dataset_in(dir, data, sizeof(data));
    snprintf(url, sizeof(url), "%s/image", data);
    make_layer(url, size, 8, chunk, NULL);
    if (cnx_plan_new(&p, wf, data, NULL) != 0 ||
        cnx_plan_prepare_outputs(p) != 0)
        fail_msg("%s", cnx_error_last()->message);
    assert_int_equal(cnx_plan_prepare_outputs(p), 0); /* idempotent */
    snprintf(url, sizeof(url), "%s/a-sharded/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    info = cnx_layer_get_info(layer);
    assert_int_equal(info->nscales, 1);
    assert_true(info->scales[0].sharded);
    assert_int_equal(info->scales[0].sharding.preshift_bits, 3);
    assert_int_equal(info->scales[0].sharding.shard_bits, 2 + 2 + 1 - 3);
    cnx_layer_free(layer);
    snprintf(url, sizeof(url), "%s/a/v1", data);
    assert_int_equal(cnx_layer_open(&layer, url), 0);
    assert_false(cnx_layer_get_info(layer)->scales[0].sharded);
    cnx_layer_free(layer);
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    /* other targets into the same layer: other shards, refused */
    {
        char doc[2048], *at;
        snprintf(doc, sizeof(doc), shard_doc, "map", "");
        at = strstr(doc, "2097152");
        assert_non_null(at);
        memcpy(at, "1048576", 7);
        wf = parse_ok(doc);
    }
    assert_int_equal(cnx_plan_new(&p, wf, data, NULL), 0);
    assert_int_equal(cnx_plan_prepare_outputs(p), CNX_EIMMUTABLE);
    assert_non_null(strstr(cnx_error_last()->message,
                           "exists with other geometry or sharding"));
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_workflow__shipped_files_parse),
        cmocka_unit_test(test_workflow__defaults_apply),
        cmocka_unit_test(test_workflow__order_is_stable_topological),
        cmocka_unit_test(test_workflow__refusals_name_the_problem),
        cmocka_unit_test(test_workflow__schema_agrees),
        cmocka_unit_test(test_workflow__pyramid_on_a_real_layer),
        cmocka_unit_test(test_workflow__missing_layer_or_scale_is_refused),
        cmocka_unit_test(test_workflow__unaligned_roi_is_widened),
        cmocka_unit_test(test_workflow__dependencies_match_brute_force),
        cmocka_unit_test(test_workflow__anisotropic_and_offset_real_layer),
        cmocka_unit_test(test_workflow__plan_time_refusals),
        cmocka_unit_test(test_workflow__plans_are_deterministic),
        cmocka_unit_test(test_workflow__task_messages_list_exactly_the_chunks),
        cmocka_unit_test(test_workflow__prepare_outputs),
        cmocka_unit_test(test_workflow__segmentation_side_objects_and_parts),
        cmocka_unit_test(test_workflow__objects_and_parts_refused),
        cmocka_unit_test(test_workflow__pipeline_with_a_tile_set),
        cmocka_unit_test(test_workflow__predictions_with_predicted_layers),
        cmocka_unit_test(test_workflow__tileset_input_refusals),
        cmocka_unit_test(test_workflow__task_cap_refuses_before_cutting),
        cmocka_unit_test(test_workflow__task_outputs_are_what_readers_read),
        cmocka_unit_test(test_workflow__halo_derived_unless_pinned),
        cmocka_unit_test(test_workflow__multi_chunk_tasks_list_every_chunk),
        cmocka_unit_test(test_workflow__worker_checks_refuse_at_plan_time),
        cmocka_unit_test(test_workflow__align_checks_refuse_at_plan_time),
        cmocka_unit_test(test_workflow__shard_stage_has_one_task_per_shard),
        cmocka_unit_test(test_workflow__shard_stage_output_info_is_sharded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
