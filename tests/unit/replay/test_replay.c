/*
 * cnx-replay's library half: the replay request built from the original
 * (same workflow, dataset and region; new id, times, submitter; reuse on),
 * dead letters and release decisions picked by request, and the refusals.
 */
#include "cnx_test.h"

#include <jansson.h>

#include "cnx/error.h"
#include "cnx/replay.h"
#include "cnx/reprocess.h"

#define NOW ((int64_t)1795348800) /* 2026-11-22T12:00:00Z */
#define KEY                                                                    \
    "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

static const char *original =
    "{\"dataset\":\"s3://bkt/ds\",\"deadline\":\"2026-11-20T12:00:00Z\","
    "\"request\":\"req-b\",\"reuse\":false,\"roi\":{\"max\":[256,256,128],"
    "\"min\":[0,0,0]},\"schema\":\"cnx.request/1\",\"submitted\":"
    "\"2026-11-19T12:00:00Z\",\"submitter\":\"ana@lab\",\"workflow\":"
    "{\"name\":\"pyramid\",\"schema\":\"cnx.workflow/1\",\"stages\":[]}}";

static cnx_request_spec spec_now(const char *id)
{
    cnx_request_spec s;
    memset(&s, 0, sizeof(s));
    s.request = id;
    s.submitted = NOW;
    s.deadline = NOW + 86400;
    s.submitter = "ops@host";
    return s;
}

static void test_replay__request_keeps_the_work_and_turns_reuse_on(void **st)
{
    cnx_request_spec s = spec_now("req-b.replay");
    char *out = NULL;
    json_t *doc;
    (void)st;
    assert_int_equal(cnx_replay_request_build(original, strlen(original),
                                              "req-b", &s, &out), 0);
    doc = json_loads(out, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "request")),
                        "req-b.replay");
    assert_true(json_is_true(json_object_get(doc, "reuse")));
    assert_string_equal(json_string_value(json_object_get(doc, "dataset")),
                        "s3://bkt/ds");
    assert_string_equal(
        json_string_value(json_object_get(doc, "submitted")),
        "2026-11-22T12:00:00Z");
    assert_string_equal(
        json_string_value(json_object_get(doc, "submitter")), "ops@host");
    assert_int_equal(json_integer_value(json_array_get(
                         json_object_get(json_object_get(doc, "roi"), "max"),
                         2)),
                     128);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(doc, "workflow"), "name")),
                        "pyramid");
    json_decref(doc);
    free(out);
}

static void test_replay__request_of_another_id_or_schema_is_refused(void **st)
{
    cnx_request_spec s = spec_now("x.replay");
    const char *state = "{\"schema\":\"cnx.request-state/1\",\"request\":"
                        "\"req-b\"}";
    char *out = NULL;
    (void)st;
    assert_int_equal(cnx_replay_request_build(original, strlen(original),
                                              "req-c", &s, &out),
                     CNX_ESCHEMA);
    assert_null(out);
    assert_non_null(strstr(cnx_error_last()->message, "req-c"));
    assert_int_equal(cnx_replay_request_build(state, strlen(state), "req-b",
                                              &s, &out),
                     CNX_ESCHEMA);
    assert_int_equal(cnx_replay_request_build("{", 1, "req-b", &s, &out),
                     CNX_ESCHEMA);
    s.request = "bad id!";
    assert_int_equal(cnx_replay_request_build(original, strlen(original),
                                              "req-b", &s, &out),
                     CNX_EINVAL);
    assert_null(out);
}

static void test_replay__dead_letters_are_picked_by_request(void **st)
{
    const char *dl =
        "{\"schema\":\"cnx.dlq/1\",\"reason\":\"PUT s3://b/x: 503\\n\","
        "\"error\":{\"code\":\"EIO\",\"message\":\"m\",\"retriable\":true},"
        "\"attempts\":4,\"task_key\":\"" KEY "\",\"task\":{\"request\":"
        "\"req-b\",\"stage\":\"ds1\",\"roi\":{\"min\":[0,0,0],\"max\":"
        "[128,128,128]}},\"input_digests\":{\"source\":{\"a\":\"" KEY
        "\",\"b\":\"" KEY "\"}}}";
    const char *raw = "{\"schema\":\"cnx.dlq/1\",\"message\":\"x\"}";
    cnx_replay_dead d;
    (void)st;
    assert_int_equal(cnx_replay_dead_parse(dl, strlen(dl), "req-b", &d), 0);
    assert_string_equal(d.task_key, KEY);
    assert_string_equal(d.stage, "ds1");
    assert_int_equal(d.roi.max[0], 128);
    assert_int_equal(d.attempts, 4);
    assert_int_equal(d.inputs, 2);
    assert_string_equal(d.reason, "PUT s3://b/x: 503 "); /* no newline */
    assert_int_equal(cnx_replay_dead_parse(dl, strlen(dl), "req-c", &d),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_replay_dead_parse(raw, strlen(raw), "req-b", &d),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_replay_dead_parse("[]", 2, "req-b", &d),
                     CNX_ESCHEMA);
}

static void test_replay__releases_of_the_replay_are_found(void **st)
{
    /* Complete decisions, as the controller writes them (a decision the
     * schema refuses is no release: cnx_control_parse). */
#define DECISION(type)                                                         \
    "{\"attempt\":1,\"index\":0,\"lane\":\"bulk\",\"reason\":\"ready\","       \
    "\"request\":\"r2\",\"schema\":\"cnx.control/1\",\"stage\":\"ds1\","       \
    "\"task_key\":\"" KEY "\",\"time\":\"2026-01-01T00:00:00Z\",\"type\":\""     \
    type "\"}"
    const char *rel = DECISION("released");
    const char *reu = DECISION("reused");
    const char *dead = DECISION("dead_lettered");
    const char *partial = "{\"schema\":\"cnx.control/1\",\"type\":"
                          "\"released\",\"request\":\"r2\",\"task_key\":\""
                          KEY "\"}";
#undef DECISION
    char key[CNX_DIGEST_LEN];
    int reused = -1;
    (void)st;
    assert_int_equal(cnx_replay_release_parse(rel, strlen(rel), "r2", key,
                                              &reused), 0);
    assert_string_equal(key, KEY);
    assert_int_equal(reused, 0);
    assert_int_equal(cnx_replay_release_parse(reu, strlen(reu), "r2", key,
                                              &reused), 0);
    assert_int_equal(reused, 1);
    assert_int_equal(cnx_replay_release_parse(rel, strlen(rel), "r1", key,
                                              &reused), CNX_ENOTFOUND);
    assert_int_equal(cnx_replay_release_parse(dead, strlen(dead), "r2", key,
                                              &reused), CNX_ENOTFOUND);
    assert_int_equal(cnx_replay_release_parse("{x", 2, "r2", key, &reused),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_replay_release_parse(partial, strlen(partial), "r2",
                                              key, &reused),
                     CNX_ENOTFOUND);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            test_replay__request_keeps_the_work_and_turns_reuse_on),
        cmocka_unit_test(
            test_replay__request_of_another_id_or_schema_is_refused),
        cmocka_unit_test(test_replay__dead_letters_are_picked_by_request),
        cmocka_unit_test(test_replay__releases_of_the_replay_are_found),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
