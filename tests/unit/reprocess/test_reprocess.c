/*
 * cnx-reprocess's library half: argument parsing, the request message,
 * the controller's state messages (valid, malformed, truncated), the exit
 * status table, the summary text and the progress view.
 */
#include "cnx_test.h"

#include <jansson.h>
#include <math.h>

#include "cnx/error.h"
#include "cnx/reprocess.h"
#include "cnx/workflow.h"
#include "json_int.h"

#define NOW ((int64_t)1795348800) /* 2026-11-22T12:00:00Z */

#define KEY                                                                    \
    "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DG1                                                                    \
    "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define DG2                                                                    \
    "sha256:2222222222222222222222222222222222222222222222222222222222222222"

/* The last error's message contains every one of the words. */
static void assert_error_names(const char *a, const char *b)
{
    const char *msg = cnx_error_last()->message;
    if (strstr(msg, a) == NULL || (b != NULL && strstr(msg, b) == NULL))
        fail_msg("error '%s' does not name '%s'%s%s", msg, a, b ? " and " : "",
                 b ? b : "");
}

/* ---- arguments ------------------------------------------------------- */

static void test_reprocess__durations_parse_and_name_what_is_wrong(void **s)
{
    static const struct {
        const char *text;
        int64_t seconds;
    } good[] = {{"90s", 90},
                {"30m", 1800},
                {"24h", 86400},
                {"2d", 172800},
                {"3650d", 3650 * 86400LL}};
    static const struct {
        const char *text;
        const char *names;
    } bad[] = {
        {"", "want a whole number"},    {"h", "want a whole number"},
        {"24", "want a whole number"},  {"24x", "want a whole number"},
        {"-5m", "want a whole number"}, {"1.5h", "want a whole number"},
        {" 5m", "want a whole number"}, {"0h", "at least 1"},
        {"3651d", "3650 days"},         {"99999999999999999999s", "3650 days"}};
    int64_t v;
    (void)s;
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        assert_int_equal(cnx_duration_parse(good[i].text, &v), 0);
        assert_int_equal(v, good[i].seconds);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_duration_parse(bad[i].text, &v), CNX_EINVAL);
        assert_error_names(bad[i].names, "duration");
    }
}

static void test_reprocess__deadline_is_a_duration_or_a_future_time(void **s)
{
    int64_t t;
    (void)s;
    assert_int_equal(cnx_reprocess_deadline_parse("24h", NOW, &t), 0);
    assert_int_equal(t, NOW + 86400);
    assert_int_equal(
        cnx_reprocess_deadline_parse("2026-11-23T13:00:00Z", NOW, &t), 0);
    assert_int_equal(t, NOW + 86400 + 3600);
    assert_int_equal(
        cnx_reprocess_deadline_parse("2026-11-22T11:00:00Z", NOW, &t),
        CNX_EINVAL);
    assert_error_names("--deadline", "not in the future");
    assert_int_equal(cnx_reprocess_deadline_parse("tomorrow", NOW, &t),
                     CNX_EINVAL);
    assert_error_names("--deadline", "RFC 3339");
    assert_int_equal(cnx_reprocess_deadline_parse("0d", NOW, &t), CNX_EINVAL);
    assert_error_names("--deadline", "at least 1");
    assert_int_equal(
        cnx_reprocess_deadline_parse("2026-11-23T13:00:00+01:00", NOW, &t),
        CNX_EINVAL);
}

static void test_reprocess__roi_needs_six_integers_max_over_min(void **s)
{
    static const struct {
        const char *text;
        const char *names;
    } bad[] = {{"1,2,3", "six comma-separated"},
               {"0,0,0,1,1,1,1", "six comma-separated"},
               {"0,0,0,1,1,x", "six comma-separated"},
               {"", "six comma-separated"},
               {"0,0,0,10,10,0", "z1 (0) must be greater than z0 (0)"},
               {"5,0,0,4,10,10", "x1 (4) must be greater than x0 (5)"},
               {"0,7,0,10,7,10", "y1 (7) must be greater than y0 (7)"},
               {"0,0,0,10,10,2199023255552", "z1 = 2199023255552"}};
    cnx_box b;
    (void)s;
    assert_int_equal(cnx_reprocess_roi_parse("0,-5,10,256,256,266", &b), 0);
    assert_int_equal(b.min[1], -5);
    assert_int_equal(b.max[2], 266);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_reprocess_roi_parse(bad[i].text, &b), CNX_EINVAL);
        assert_error_names("--roi", bad[i].names);
    }
}

static int id_pattern(const char *id)
{
    size_t n = strlen(id);
    if (n < 1 || n > 128)
        return 0;
    return strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                      "0123456789._:-") == n;
}

static void test_reprocess__request_ids_match_the_pattern(void **s)
{
    char id[CNX_REQUEST_ID_MAX + 1], host[300];
    (void)s;
    assert_int_equal(cnx_request_id_check("req-2026-11-22.001:a_b"), 0);
    assert_int_equal(cnx_request_id_check(""), CNX_EINVAL);
    assert_error_names("request id", "empty");
    assert_int_equal(cnx_request_id_check("a/b"), CNX_EINVAL);
    assert_error_names("request id", "'/'");
    memset(host, 'a', 129);
    host[129] = '\0';
    assert_int_equal(cnx_request_id_check(host), CNX_EINVAL);
    assert_error_names("request id", "over 128");

    cnx_request_id_default(id, NOW, "lab-pc.example.org", 4242);
    assert_string_equal(id, "req-20261122T120000Z-lab-pc.example.org-4242");
    cnx_request_id_default(id, NOW, "we ird/host", 7);
    assert_string_equal(id, "req-20261122T120000Z-we-ird-host-7");
    assert_true(id_pattern(id));
    memset(host, 'h', sizeof(host) - 1);
    host[sizeof(host) - 1] = '\0';
    cnx_request_id_default(id, NOW, host, 2147483647L);
    assert_int_equal(strlen(id), 128);
    assert_true(id_pattern(id));
    assert_int_equal(cnx_request_id_check(id), 0);
    assert_string_equal(id + 128 - 11, "-2147483647");
    cnx_request_id_default(id, NOW, "", 1);
    assert_true(id_pattern(id));
}

static void test_reprocess__dataset_urls_and_local_directories(void **s)
{
    char dir[64], *url = NULL, want[128];
    (void)s;
    assert_int_equal(cnx_reprocess_dataset_url("s3://bucket/ds", &url), 0);
    assert_string_equal(url, "s3://bucket/ds");
    free(url);
    assert_int_equal(cnx_reprocess_dataset_url("ftp://x/y", &url), CNX_EINVAL);
    assert_error_names("--dataset", "must start with");
    assert_null(url);
    assert_int_equal(cnx_reprocess_dataset_url("file:///a/../b", &url),
                     CNX_EINVAL);
    assert_error_names("--dataset", "'..'");
    assert_int_equal(cnx_reprocess_dataset_url("file://host/a", &url),
                     CNX_EINVAL);
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_reprocess_dataset_url(dir, &url), 0);
    snprintf(want, sizeof(want), "file://%s", dir);
    assert_string_equal(url, want);
    free(url);
    snprintf(want, sizeof(want), "%s/missing", dir);
    assert_int_equal(cnx_reprocess_dataset_url(want, &url), CNX_ENOTFOUND);
    assert_error_names("--dataset", "no such directory");
    cnx_test_rmtree(dir);
}

/* ---- the request ------------------------------------------------------ */

static const char workflow_text[] =
    "{\"schema\": \"cnx.workflow/1\", \"name\": \"pyr\",\n"
    " \"description\": \"two mips\",\n"
    " \"stages\": [\n"
    "  {\"name\": \"ds1\", \"worker\": \"downsample\", \"kind\": \"map\",\n"
    "   \"kernel_version\": 1, \"inputs\": {\"source\": {\"layer\": "
    "\"raw/v1\"}},\n"
    "   \"output\": {\"layer\": \"pyramid/v1\"}, \"halo\": 0,\n"
    "   \"parameters\": {\"method\": \"mean\", \"f\": 0.5}}]}\n";

static void test_reprocess__request_embeds_the_canonical_workflow(void **s)
{
    char dir[64], path[96], *out = NULL, *wf_back = NULL;
    cnx_workflow *wf = NULL;
    cnx_request_spec spec;
    json_t *doc;
    json_error_t jerr;
    FILE *f;
    (void)s;

    cnx_test_tmpdir(dir);
    snprintf(path, sizeof(path), "%s/pyr.json", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs(workflow_text, f);
    fclose(f);
    assert_int_equal(cnx_workflow_load(&wf, path), 0);

    memset(&spec, 0, sizeof(spec));
    spec.request = "req-20261122T120000Z-lab-42";
    spec.workflow = wf->json;
    spec.dataset = "file:///data/ds";
    spec.roi = cnx_box_make(0, 0, 0, 256, 256, 128);
    spec.submitted = NOW;
    spec.deadline = NOW + 86400;
    spec.reuse = 1;
    spec.submitter = "ana@lab";
    assert_int_equal(cnx_request_build(&spec, &out), 0);

    doc = json_loads(out, JSON_REJECT_DUPLICATES, &jerr);
    assert_non_null(doc);
    assert_int_equal(json_object_size(doc), 9);
    assert_string_equal(json_string_value(json_object_get(doc, "schema")),
                        "cnx.request/1");
    assert_string_equal(json_string_value(json_object_get(doc, "request")),
                        spec.request);
    assert_true(id_pattern(spec.request));
    assert_string_equal(json_string_value(json_object_get(doc, "dataset")),
                        "file:///data/ds");
    assert_string_equal(json_string_value(json_object_get(doc, "deadline")),
                        "2026-11-23T12:00:00Z");
    assert_string_equal(json_string_value(json_object_get(doc, "submitted")),
                        "2026-11-22T12:00:00Z");
    assert_true(json_is_true(json_object_get(doc, "reuse")));
    assert_string_equal(json_string_value(json_object_get(doc, "submitter")),
                        "ana@lab");
    assert_int_equal(
        json_integer_value(json_array_get(
            json_object_get(json_object_get(doc, "roi"), "max"), 2)),
        128);
    wf_back = cnx__json_canonical(json_object_get(doc, "workflow"));
    assert_non_null(wf_back);
    assert_string_equal(wf_back, wf->json);
    /* The message itself is canonical. */
    free(wf_back);
    wf_back = cnx__json_canonical(doc);
    assert_string_equal(wf_back, out);
    free(wf_back);
    json_decref(doc);
    free(out);

    /* Refusals name the field. */
    spec.deadline = NOW;
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("deadline", NULL);
    spec.deadline = NOW + 10;
    spec.request = "bad id";
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("request id", NULL);
    spec.request = "r1";
    spec.workflow = "[1,2]";
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("workflow", "object");
    spec.workflow = wf->json;
    spec.dataset = "/data/ds";
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("dataset", NULL);
    spec.dataset = "file:///data/ds";
    spec.roi.max[1] = spec.roi.min[1];
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("roi", "max[1]");
    spec.roi.max[1] = 10;
    spec.submitter = "";
    assert_int_equal(cnx_request_build(&spec, &out), CNX_EINVAL);
    assert_error_names("submitter", NULL);
    assert_null(out);
    cnx_workflow_free(wf);
    cnx_test_rmtree(dir);
}

/* ---- state messages ------------------------------------------------------ */

#define HEAD(type)                                                             \
    "{\"schema\":\"cnx.request-state/1\",\"request\":\"r1\",\"type\":\"" type  \
    "\",\"time\":\"2026-11-22T12:00:05Z\","

static const char accepted_msg[] = HEAD(
    "accepted") "\"deadline\":\"2026-11-23T12:00:00Z\",\"tasks\":36,"
                "\"stages\":[{\"stage\":\"ds1\",\"worker\":\"downsample\","
                "\"kind\":"
                "\"map\",\"tasks\":32,\"region\":{\"min\":[0,0,0],\"max\":[512,"
                "512,256]},"
                "\"scale\":\"8_8_8\",\"output\":{\"layer\":\"file:///d/pyramid/"
                "v1\","
                "\"scale\":\"16_16_16\"}},{\"stage\":\"ds2\",\"worker\":"
                "\"downsample\","
                "\"kind\":\"reduce\",\"tasks\":4,\"region\":{\"min\":[0,0,0],"
                "\"max\":"
                "[256,256,128]},\"scale\":\"16_16_16\",\"output\":{\"layer\":"
                "\"file:///d/pyramid/v1\",\"scale\":\"32_32_32\"}}],"
                "\"notes\":[\"ds1: region widened to whole chunks\"]}";

static const char progress_msg[] =
    HEAD("progress") "\"deadline\":\"2026-11-23T12:00:00Z\",\"eta\":\"2026-11-"
                     "22T12:30:00.5Z\","
                     "\"slo\":\"at_risk\",\"urgent\":true,\"stages\":[{"
                     "\"stage\":\"ds1\","
                     "\"total\":32,\"done\":10,\"running\":2,\"failed\":1,"
                     "\"dead\":0,"
                     "\"reused\":3}]}";

static const char slo_msg[] =
    HEAD("slo") "\"slo\":\"missed\",\"eta\":null,\"deadline\":\"2026-11-23T12:"
                "00:00Z\"}";

static const char refused_msg[] =
    HEAD("refused") "\"error\":\"workflow pyr: dataset has no raw/v1\"}";

static const char finished_msg[] = HEAD(
    "finished") "\"outcome\":\"failed\",\"submitted\":\"2026-11-22T12:00:00Z\","
                "\"deadline\":\"2026-11-23T12:00:00Z\",\"elapsed_s\":12.5,"
                "\"slo\":"
                "\"met\",\"repeated\":36,\"identical\":35,\"stages\":[{"
                "\"stage\":\"ds1\","
                "\"worker\":\"downsample\",\"total\":32,\"done\":31,\"dead\":1,"
                "\"never_run\":0,\"reused\":0,\"attempts\":35,\"voxels\":"
                "67108864,"
                "\"cpu_s\":3.2,\"wall_s\":4.1,\"bytes_read\":1000000,\"bytes_"
                "written\":"
                "500000,\"mvx_per_s\":16.4,\"core_hours\":0.00089,\"mm3\":0."
                "000034,"
                "\"gb_per_mm3\":44.1,\"usd_per_mm3\":null},{\"stage\":\"ds2\","
                "\"worker\":"
                "\"downsample\",\"total\":4,\"done\":0,\"dead\":0,\"never_"
                "run\":4,"
                "\"reused\":0,\"attempts\":0,\"voxels\":0,\"cpu_s\":0,\"wall_"
                "s\":0,"
                "\"bytes_read\":0,\"bytes_written\":0,\"mvx_per_s\":null,"
                "\"core_hours\":0,"
                "\"mm3\":0,\"gb_per_mm3\":null,\"usd_per_mm3\":null}],"
                "\"violations\":[{\"kind\":\"reproducibility\",\"task_key\":\"" KEY
                "\",\"stage\":\"ds1\",\"roi\":"
                "{\"min\":[0,0,0],\"max\":[128,128,128]},\"object\":"
                "\"file:///d/pyramid/v1/16_16_16/"
                "0-64_0-64_0-64\",\"expected\":\"" DG1 "\",\"got\":\"" DG2
                "\"}],"
                "\"failures\":[{\"task_key\":\"" KEY
                "\",\"stage\":\"ds1\",\"roi\":"
                "{\"min\":[128,0,0],\"max\":[256,128,128]},\"error\":\"EDIGEST:"
                " input "
                "0-128_0-128_0-128 does not "
                "match\"}],\"price_per_core_hour\":0.05}";

static cnx_request_state *parse_ok(const char *msg)
{
    cnx_request_state *st = NULL;
    int rc = cnx_request_state_parse(&st, msg, strlen(msg));
    if (rc != 0)
        fail_msg("parse failed: %s", cnx_error_last()->message);
    assert_non_null(st);
    return st;
}

static void test_reprocess__state_messages_parse(void **s)
{
    cnx_request_state *st;
    (void)s;

    st = parse_ok(accepted_msg);
    assert_int_equal(st->type, CNX_STATE_ACCEPTED);
    assert_string_equal(st->request, "r1");
    assert_int_equal(st->tasks, 36);
    assert_int_equal(st->nstages, 2);
    assert_string_equal(st->stages[1].stage, "ds2");
    assert_int_equal(st->stages[1].reduce, 1);
    assert_int_equal(st->stages[0].region.max[0], 512);
    assert_string_equal(st->stages[0].output_layer, "file:///d/pyramid/v1");
    assert_string_equal(st->stages[1].output_scale, "32_32_32");
    assert_int_equal(st->nnotes, 1);
    assert_string_equal(st->notes[0], "ds1: region widened to whole chunks");
    assert_int_equal(st->deadline_unix, NOW + 86400);
    cnx_request_state_free(st);

    st = parse_ok(progress_msg);
    assert_int_equal(st->type, CNX_STATE_PROGRESS);
    assert_int_equal(st->slo, CNX_SLO_AT_RISK);
    assert_int_equal(st->urgent, 1);
    assert_string_equal(st->eta, "2026-11-22T12:30:00.5Z");
    assert_int_equal(st->eta_unix, NOW + 1800);
    assert_int_equal(st->stages[0].done, 10);
    assert_int_equal(st->stages[0].running, 2);
    assert_int_equal(st->stages[0].failed, 1);
    assert_int_equal(st->stages[0].reused, 3);
    cnx_request_state_free(st);

    st = parse_ok(slo_msg);
    assert_int_equal(st->type, CNX_STATE_SLO);
    assert_int_equal(st->slo, CNX_SLO_MISSED);
    assert_string_equal(st->eta, "");
    cnx_request_state_free(st);

    st = parse_ok(refused_msg);
    assert_int_equal(st->type, CNX_STATE_REFUSED);
    assert_string_equal(st->error, "workflow pyr: dataset has no raw/v1");
    cnx_request_state_free(st);

    st = parse_ok(finished_msg);
    assert_int_equal(st->type, CNX_STATE_FINISHED);
    assert_int_equal(st->outcome_failed, 1);
    assert_int_equal(st->slo, CNX_SLO_MET);
    assert_true(st->elapsed_s == 12.5);
    assert_int_equal(st->repeated, 36);
    assert_int_equal(st->identical, 35);
    assert_int_equal(st->stages[0].voxels, 67108864);
    assert_true(isnan(st->stages[0].usd_per_mm3));
    assert_true(st->stages[0].gb_per_mm3 == 44.1);
    assert_true(isnan(st->stages[1].mvx_per_s));
    assert_int_equal(st->stages[1].never_run, 4);
    assert_int_equal(st->nviolations, 1);
    assert_string_equal(st->violations[0].got, DG2);
    assert_int_equal(st->nfailures, 1);
    assert_int_equal(st->failures[0].roi.min[0], 128);
    assert_true(st->price_per_core_hour == 0.05);
    cnx_request_state_free(st);
}

static void test_reprocess__other_schemas_are_skipped_not_errors(void **s)
{
    static const char req[] = "{\"schema\":\"cnx.request/1\",\"request\":"
                              "\"r1\"}";
    cnx_request_state *st = NULL;
    (void)s;
    assert_int_equal(cnx_request_state_parse(&st, req, strlen(req)),
                     CNX_ENOTFOUND);
    assert_null(st);
}

/* Replace the first occurrence of from in base with to. */
static char *edit(const char *base, const char *from, const char *to)
{
    const char *at = strstr(base, from);
    size_t n;
    char *out;
    if (at == NULL)
        fail_msg("'%s' not in the message", from);
    n = strlen(base) - strlen(from) + strlen(to);
    out = malloc(n + 1);
    assert_non_null(out);
    memcpy(out, base, (size_t)(at - base));
    memcpy(out + (at - base), to, strlen(to));
    memcpy(out + (at - base) + strlen(to), at + strlen(from),
           strlen(at + strlen(from)) + 1);
    return out;
}

static void test_reprocess__malformed_state_messages_name_the_field(void **s)
{
    static const struct {
        const char *base, *from, *to, *names;
    } cases[] = {
        {progress_msg, "\"done\":10", "\"done\":-1", "stages[0].done"},
        {progress_msg, "\"done\":10", "\"done\":1.5", "stages[0].done"},
        {progress_msg, "\"done\":10,", "", "stages[0].done: missing"},
        {progress_msg, "\"urgent\":true", "\"urgent\":1", "urgent"},
        {progress_msg, "\"slo\":\"at_risk\"", "\"slo\":\"met\"", "slo"},
        {progress_msg, "\"eta\":\"2026-11-22T12:30:00.5Z\"", "\"eta\":5",
         "eta"},
        {progress_msg, "\"eta\":\"2026-11-22T12:30:00.5Z\"",
         "\"eta\":\"2026-11-22 12:30:00\"", "eta"},
        {progress_msg, "\"stage\":\"ds1\"", "\"stage\":\"Ds1\"",
         "stages[0].stage"},
        {progress_msg, "\"reused\":3", "\"reused\":3,\"worker\":\"x\"",
         "stages[0]: unknown key 'worker'"},
        {progress_msg, "\"urgent\":true,", "\"urgent\":true,\"notes\":[],",
         "unknown key 'notes'"},
        {progress_msg,
         "\"stages\":[{\"stage\":\"ds1\",\"total\":32,\"done\":10,"
         "\"running\":2,\"failed\":1,\"dead\":0,\"reused\":3}]",
         "\"stages\":{}", "stages: must be an array"},
        {accepted_msg, "\"notes\":[\"ds1: region widened to whole chunks\"]",
         "\"notes\":\"ds1\"", "notes: must be an array"},
        {accepted_msg, "\"tasks\":36,", "", "tasks: missing"},
        {accepted_msg, "\"kind\":\"map\"", "\"kind\":\"scan\"",
         "stages[0].kind"},
        {accepted_msg, "\"min\":[0,0,0]", "\"min\":[0,0]",
         "stages[0].region.min"},
        {accepted_msg, "\"min\":[0,0,0]", "\"min\":[0,0,\"0\"]",
         "stages[0].region.min[2]"},
        {accepted_msg, "\"layer\":\"file:///d/pyramid/v1\"",
         "\"layer\":\"ftp://d\"", "stages[0].output.layer"},
        {accepted_msg, "\"notes\":[\"ds1", "\"notes\":[7,\"ds1", "notes[0]"},
        {accepted_msg, "\"deadline\":\"2026-11-23T12:00:00Z\"",
         "\"deadline\":\"2026-13-23T12:00:00Z\"", "deadline"},
        {refused_msg, "\"error\":\"workflow", "\"error\":\"\\nworkflow",
         "error"},
        {refused_msg, "\"type\":\"refused\"", "\"type\":\"rejected\"", "type"},
        {refused_msg, "\"request\":\"r1\"", "\"request\":\"r 1\"", "request"},
        {refused_msg, "\"time\":\"2026-11-22T12:00:05Z\",", "", "time"},
        {slo_msg, "\"eta\":null,", "", "eta: missing"},
        {finished_msg, "\"outcome\":\"failed\"", "\"outcome\":\"ok\"",
         "outcome"},
        {finished_msg, "\"slo\":\"met\"", "\"slo\":\"ok\"", "slo"},
        {finished_msg, "\"elapsed_s\":12.5", "\"elapsed_s\":-1", "elapsed_s"},
        {finished_msg, "\"identical\":35", "\"identical\":\"35\"", "identical"},
        {finished_msg, "\"mvx_per_s\":16.4", "\"mvx_per_s\":\"fast\"",
         "stages[0].mvx_per_s"},
        {finished_msg, "\"cpu_s\":3.2", "\"cpu_s\":null", "stages[0].cpu_s"},
        {finished_msg, "\"got\":\"" DG2 "\"", "\"got\":\"sha256:12\"",
         "violations[0].got"},
        {finished_msg, "\"error\":\"EDIGEST", "\"err\":\"EDIGEST",
         "failures[0]: unknown key 'err'"},
        {finished_msg, ",\"price_per_core_hour\":0.05", "",
         "price_per_core_hour: missing"},
        {finished_msg, "\"failures\":[", "\"failures\":[5,",
         "failures[0]: must be an object"},
    };
    (void)s;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *msg = edit(cases[i].base, cases[i].from, cases[i].to);
        cnx_request_state *st = NULL;
        int rc = cnx_request_state_parse(&st, msg, strlen(msg));
        if (rc != CNX_ESCHEMA)
            fail_msg("case %zu: rc %d for %s", i, rc, msg);
        assert_null(st);
        assert_error_names("request-state: ", cases[i].names);
        free(msg);
    }
}

/* Truncations and byte flips never crash and never leak (ASan build). */
static void test_reprocess__damaged_state_messages_never_crash(void **s)
{
    const char *msgs[] = {accepted_msg, progress_msg, slo_msg, refused_msg,
                          finished_msg};
    uint64_t seed = 7;
    (void)s;
    for (size_t m = 0; m < sizeof(msgs) / sizeof(msgs[0]); m++) {
        size_t n = strlen(msgs[m]);
        char *buf = malloc(n + 1);
        assert_non_null(buf);
        for (size_t cut = 0; cut < n; cut++) {
            cnx_request_state *st = NULL;
            assert_int_not_equal(cnx_request_state_parse(&st, msgs[m], cut), 0);
            assert_null(st);
        }
        for (int k = 0; k < 2000; k++) {
            cnx_request_state *st = NULL;
            memcpy(buf, msgs[m], n + 1);
            buf[cnx_test_rand(&seed) % n] =
                "\"{}[],:0a-\\ \x01"[cnx_test_rand(&seed) % 13];
            if (cnx_request_state_parse(&st, buf, n) == 0)
                assert_non_null(st);
            cnx_request_state_free(st);
        }
        free(buf);
    }
}

/* ---- results ------------------------------------------------------------ */

static void test_reprocess__exit_code_table(void **s)
{
    static const struct {
        int violations, mismatch, failed, dead, never, failures, missed;
        int want;
    } rows[] = {
        {0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 3},
        {0, 1, 0, 0, 0, 0, 0, 3}, {0, 0, 1, 0, 0, 0, 0, 4},
        {0, 0, 0, 1, 0, 0, 0, 4}, {0, 0, 0, 0, 1, 0, 0, 4},
        {0, 0, 0, 0, 0, 1, 0, 4}, {0, 0, 0, 0, 0, 0, 1, 5},
        {1, 0, 1, 1, 0, 0, 1, 3}, {0, 0, 0, 1, 1, 1, 1, 4},
        {0, 1, 0, 0, 0, 0, 1, 3}, {0, 1, 0, 1, 0, 0, 0, 4},
        {0, 1, 0, 0, 0, 1, 0, 4},
    };
    (void)s;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        cnx_state_stage stage;
        cnx_state_issue issue;
        cnx_request_state st;
        memset(&st, 0, sizeof(st));
        memset(&stage, 0, sizeof(stage));
        memset(&issue, 0, sizeof(issue));
        st.type = CNX_STATE_FINISHED;
        st.slo = rows[i].missed ? CNX_SLO_MISSED : CNX_SLO_MET;
        st.outcome_failed = rows[i].failed;
        st.repeated = 10;
        st.identical = rows[i].mismatch ? 9 : 10;
        stage.dead = rows[i].dead;
        stage.never_run = rows[i].never;
        st.nstages = 1;
        st.stages = &stage;
        st.nviolations = (size_t)rows[i].violations;
        st.violations = &issue;
        st.nfailures = (size_t)rows[i].failures;
        st.failures = &issue;
        if (cnx_reprocess_exit_code(&st) != rows[i].want)
            fail_msg("row %zu: exit %d, want %d", i,
                     cnx_reprocess_exit_code(&st), rows[i].want);
    }
}

static void test_reprocess__summary_text_has_the_figures(void **s)
{
    cnx_request_state *st = parse_ok(finished_msg);
    char *text = NULL;
    static const char *const want[] = {
        "request r1: failed",
        "12.5 s",
        "SLO MISSED (incomplete: 1 task dead, 4 never ran)",
        "ds1",
        "31/32",
        "0/4",
        "16.4 MVx/s",
        "0.00089 core-hours",
        "3.4e-05 mm³",
        "44.1 GB/mm³",
        "no $/mm³",
        "$0.05/core-hour",
        "35 of 36 repeated tasks bit-identical",
        "VIOLATION (reproducibility) task " KEY,
        "expected " DG1,
        "got      " DG2,
        "file:///d/pyramid/v1/16_16_16/0-64_0-64_0-64",
        "FAILED task " KEY,
        "EDIGEST: input",
        "[128,0,0]-[256,128,128]",
        "exit status 3: reproducibility"};
    (void)s;
    assert_int_equal(cnx_reprocess_summary_text(st, &text), 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (strstr(text, want[i]) == NULL)
            fail_msg("summary lacks '%s':\n%s", want[i], text);
    free(text);
    cnx_request_state_free(st);
}

/* A finished message that says "met" in time, with dead and never-run
 * tasks in its one stage. */
static char *met_msg(int dead, int never_run)
{
    static const char fmt[] =
        HEAD("finished") "\"outcome\":\"%s\","
        "\"submitted\":\"2026-11-22T12:00:00Z\","
        "\"deadline\":\"2026-11-23T12:00:00Z\",\"elapsed_s\":12.5,"
        "\"slo\":\"met\",\"repeated\":0,\"identical\":0,"
        "\"stages\":[{\"stage\":\"ds1\",\"worker\":\"downsample\","
        "\"total\":12,\"done\":%d,\"dead\":%d,\"never_run\":%d,"
        "\"reused\":0,\"attempts\":12,\"voxels\":0,\"cpu_s\":0,"
        "\"wall_s\":0,\"bytes_read\":0,\"bytes_written\":0,"
        "\"mvx_per_s\":null,\"core_hours\":0,\"mm3\":0,"
        "\"gb_per_mm3\":null,\"usd_per_mm3\":null}],\"violations\":[],"
        "\"failures\":[],\"price_per_core_hour\":null}";
    static char msg[2048];
    snprintf(msg, sizeof(msg), fmt, dead + never_run ? "failed" : "done",
             12 - dead - never_run, dead, never_run);
    return msg;
}

/* Regression: a request with dead-lettered or never-run tasks was
 * summarised as "SLO met" when it finished before its deadline. */
static void test_reprocess__summary_never_says_slo_met_with_dead_tasks(void **s)
{
    static const struct {
        int dead, never_run;
        const char *want;
    } rows[] = {
        {0, 0, "deadline 2026-11-23T12:00:00Z: SLO met\n"},
        {12, 0, "SLO MISSED (incomplete: 12 tasks dead, 0 never ran)\n"},
        {1, 3, "SLO MISSED (incomplete: 1 task dead, 3 never ran)\n"},
        {0, 2, "SLO MISSED (incomplete: 0 tasks dead, 2 never ran)\n"},
    };
    (void)s;
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        cnx_request_state *st =
            parse_ok(met_msg(rows[i].dead, rows[i].never_run));
        char *text = NULL;
        assert_int_equal(cnx_reprocess_summary_text(st, &text), 0);
        if (strstr(text, rows[i].want) == NULL)
            fail_msg("row %zu: summary lacks '%s':\n%s", i, rows[i].want, text);
        if (rows[i].dead + rows[i].never_run > 0 &&
            strstr(text, "SLO met") != NULL)
            fail_msg("row %zu: says SLO met with tasks left:\n%s", i, text);
        free(text);
        cnx_request_state_free(st);
    }
}

static void test_reprocess__result_json_adds_exit_code_and_plan(void **s)
{
    char *out = NULL;
    json_t *doc;
    (void)s;
    assert_int_equal(
        cnx_reprocess_result_json(finished_msg, strlen(finished_msg),
                                  accepted_msg, strlen(accepted_msg), 3, &out),
        0);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_int_equal(json_integer_value(json_object_get(doc, "exit_code")), 3);
    assert_null(json_object_get(doc, "schema"));
    assert_int_equal(json_integer_value(json_object_get(doc, "tasks")), 36);
    assert_int_equal(json_array_size(json_object_get(doc, "notes")), 1);
    assert_int_equal(json_array_size(json_object_get(doc, "violations")), 1);
    json_decref(doc);
    free(out);
    assert_int_equal(cnx_reprocess_error_json("r1", "no answer", 1, &out), 0);
    assert_string_equal(out, "{\"error\":\"no answer\",\"exit_code\":1,"
                             "\"request\":\"r1\"}");
    free(out);
}

/* ---- progress ---------------------------------------------------------- */

static void test_reprocess__plain_progress_at_most_every_5s(void **s)
{
    cnx_reprocess_view *v = NULL;
    cnx_request_state *st = parse_ok(progress_msg);
    char *out = NULL;
    (void)s;
    assert_int_equal(cnx_reprocess_view_new(&v, 0), 0);
    /* First message: the stage line and the SLO change (ok -> at risk). */
    assert_int_equal(cnx_reprocess_view_update(v, st, 100.0, NOW, &out), 0);
    assert_non_null(strstr(out, "ds1: 10/32 done, 2 running, 1 failed"));
    assert_non_null(strstr(out, "SLO AT RISK"));
    assert_null(strstr(out, "\033["));
    free(out);
    /* Changed counts 1 s later are held back ... */
    st->stages[0].done = 11;
    assert_int_equal(cnx_reprocess_view_update(v, st, 101.0, NOW, &out), 0);
    assert_string_equal(out, "");
    free(out);
    assert_int_equal(cnx_reprocess_view_tick(v, 104.0, NOW, &out), 0);
    assert_string_equal(out, "");
    free(out);
    /* ... until 5 s have passed. */
    assert_int_equal(cnx_reprocess_view_tick(v, 105.5, NOW, &out), 0);
    assert_non_null(strstr(out, "ds1: 11/32 done"));
    free(out);
    /* Unchanged counts print nothing; an SLO change prints at once. */
    st->slo = CNX_SLO_MISSED;
    assert_int_equal(cnx_reprocess_view_update(v, st, 111.0, NOW, &out), 0);
    assert_non_null(strstr(out, "SLO MISSED"));
    assert_null(strstr(out, "ds1:"));
    free(out);
    cnx_request_state_free(st);
    cnx_reprocess_view_free(v);
}

static void test_reprocess__terminal_progress_redraws_in_place(void **s)
{
    cnx_reprocess_view *v = NULL;
    cnx_request_state *st = parse_ok(progress_msg);
    char *out = NULL;
    (void)s;
    assert_int_equal(cnx_reprocess_view_new(&v, 1), 0);
    assert_int_equal(cnx_reprocess_view_update(v, st, 100.0, NOW, &out), 0);
    assert_non_null(strstr(out, "ds1"));
    assert_non_null(strstr(out, "10/32"));
    assert_non_null(strstr(out, "1 failed, 0 dead"));
    assert_non_null(strstr(out, "ETA 00:30:00 vs deadline 24:00:00"));
    assert_non_null(strstr(out, "AT RISK"));
    assert_null(strstr(out, "\033[2A")); /* nothing drawn before */
    free(out);
    /* A second of clock later the block is redrawn: up two lines. */
    assert_int_equal(cnx_reprocess_view_tick(v, 101.0, NOW + 1, &out), 0);
    assert_non_null(strstr(out, "\033[2A"));
    assert_non_null(strstr(out, "ETA 00:29:59 vs deadline 23:59:59"));
    free(out);
    /* Nothing more within the second. */
    assert_int_equal(cnx_reprocess_view_tick(v, 101.5, NOW + 1, &out), 0);
    assert_string_equal(out, "");
    free(out);
    cnx_reprocess_view_detach(v);
    assert_int_equal(cnx_reprocess_view_tick(v, 103.0, NOW + 3, &out), 0);
    assert_null(strstr(out, "\033[2A"));
    free(out);
    cnx_request_state_free(st);
    cnx_reprocess_view_free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_reprocess__durations_parse_and_name_what_is_wrong),
        cmocka_unit_test(
            test_reprocess__deadline_is_a_duration_or_a_future_time),
        cmocka_unit_test(test_reprocess__roi_needs_six_integers_max_over_min),
        cmocka_unit_test(test_reprocess__request_ids_match_the_pattern),
        cmocka_unit_test(test_reprocess__dataset_urls_and_local_directories),
        cmocka_unit_test(test_reprocess__request_embeds_the_canonical_workflow),
        cmocka_unit_test(test_reprocess__state_messages_parse),
        cmocka_unit_test(test_reprocess__other_schemas_are_skipped_not_errors),
        cmocka_unit_test(
            test_reprocess__malformed_state_messages_name_the_field),
        cmocka_unit_test(test_reprocess__damaged_state_messages_never_crash),
        cmocka_unit_test(test_reprocess__exit_code_table),
        cmocka_unit_test(test_reprocess__summary_text_has_the_figures),
        cmocka_unit_test(
            test_reprocess__summary_never_says_slo_met_with_dead_tasks),
        cmocka_unit_test(test_reprocess__result_json_adds_exit_code_and_plan),
        cmocka_unit_test(test_reprocess__plain_progress_at_most_every_5s),
        cmocka_unit_test(test_reprocess__terminal_progress_redraws_in_place),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
