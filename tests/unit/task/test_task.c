/*
 * Task messages: a valid task parses and keys deterministically; each field
 * made wrong in turn is refused with CNX_ESCHEMA and a message naming it.
 * The same table is checked against the JSON Schema by
 * tests/integration/task_schema.sh, so the C parser and the published schema
 * cannot drift apart.
 */
#include "cnx_test.h"

#include <jansson.h>

#include "cnx/error.h"
#include "cnx/task.h"

static char *valid_text(void)
{
    char path[512];
    FILE *f;
    long n;
    char *buf;
    snprintf(path, sizeof(path), "%s/tests/data/tasks/valid.json",
             getenv("CNX_SOURCE") ? getenv("CNX_SOURCE") : ".");
    f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = calloc(1, (size_t)n + 1);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    return buf;
}

static void test_task__valid_task_parses(void **state)
{
    char *text = valid_text();
    cnx_task *t;
    (void)state;
    assert_int_equal(cnx_task_parse(&t, text, strlen(text)), 0);
    assert_string_equal(t->stage, "segment");
    assert_int_equal(t->kernel_version, 3);
    assert_int_equal(t->roi.min[2], 256);
    assert_int_equal(t->roi.max[0], 128);
    assert_int_equal(t->halo, 2);
    assert_int_equal(t->ninputs, 1);
    assert_string_equal(t->inputs[0].role, "boundary");
    assert_int_equal(t->inputs[0].nobjects, 2);
    assert_string_equal(t->parameters,
                        "{\"min_size\":100,\"seed_distance\":6,"
                        "\"threshold\":0.5}");
    assert_int_equal(t->deadline_unix, 1795428000);
    assert_true(cnx_digest_valid(t->key));
    assert_string_equal(
        cnx_task_expected(t, "boundary", "8_8_8/128-256_128-256_256-384"),
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b"
        "855");
    assert_null(cnx_task_expected(t, "boundary", "8_8_8/nope"));
    assert_null(cnx_task_expected(t, "image", "x"));
    cnx_task_free(t);
    free(text);
}

static void test_task__key_hashes_exactly_the_keyed_content(void **state)
{
    char *text = valid_text(), *material, *json;
    cnx_task *t, *t2;
    char d[CNX_DIGEST_LEN];
    (void)state;
    assert_int_equal(cnx_task_parse(&t, text, strlen(text)), 0);
    assert_int_equal(cnx_task_key_material(t, &material), 0);
    /* The keyed content, written out by hand from DESIGN.md's rule. */
    assert_string_equal(
        material,
        "{\"halo\":2,\"inputs\":{\"boundary\":{\"objects\":{"
        "\"8_8_8/0-128_128-256_256-384\":\"sha256:ba7816bf8f01cfea414140de5dae"
        "2223b00361a396177a9cb410ff61f20015ad\","
        "\"8_8_8/128-256_128-256_256-384\":\"sha256:e3b0c44298fc1c149afbf4c89"
        "96fb92427ae41e4649b934ca495991b7852b855\"}}},\"kernel_version\":3,"
        "\"parameters\":{\"min_size\":100,\"seed_distance\":6,"
        "\"threshold\":0.5},\"roi\":{\"max\":[128,256,384],\"min\":[0,128,"
        "256]},\"stage\":\"segment\"}");
    cnx_digest(material, strlen(material), d);
    assert_string_equal(d, t->key);
    /* Serialise and parse again: same key; request, deadline, layer URLs
     * and budget are not part of the key. */
    assert_int_equal(cnx_task_to_json(t, &json), 0);
    json_t *js = json_loads(json, 0, NULL);
    json_object_set_new(js, "request", json_string("another-request"));
    json_object_set_new(js, "deadline", json_string("2030-01-01T00:00:00Z"));
    json_object_set_new(js, "retry_budget", json_integer(9));
    json_object_set_new(json_object_get(json_object_get(js, "inputs"),
                                        "boundary"),
                        "layer", json_string("s3://bucket/boundary"));
    char *moved = json_dumps(js, JSON_INDENT(2));
    assert_int_equal(cnx_task_parse(&t2, moved, strlen(moved)), 0);
    assert_string_equal(t->key, t2->key);
    cnx_task_free(t2);
    free(moved);
    /* A parameter change changes the key. */
    json_object_set_new(json_object_get(js, "parameters"), "threshold",
                        json_real(0.6));
    moved = json_dumps(js, 0);
    assert_int_equal(cnx_task_parse(&t2, moved, strlen(moved)), 0);
    assert_string_not_equal(t->key, t2->key);
    cnx_task_free(t2);
    free(moved);
    json_decref(js);
    free(json);
    free(material);
    cnx_task_free(t);
    free(text);
}

/* One field made wrong: path (dot-separated, into objects), new value as
 * JSON (NULL: delete the key), and what the message must name. */
struct mutation {
    const char *path;
    const char *value;
    const char *names;
};

static const struct mutation mutations[] = {
    {"schema", "\"cnx.task/2\"", "schema"},
    {"schema", NULL, "schema: missing"},
    {"request", "\"\"", "request"},
    {"request", "\"has space\"", "request"},
    {"request", "42", "request"},
    {"stage", "\"Segment\"", "stage"},
    {"stage", "\"9lives\"", "stage"},
    {"stage", NULL, "stage: missing"},
    {"kernel_version", "0", "kernel_version"},
    {"kernel_version", "1.5", "kernel_version"},
    {"kernel_version", "\"3\"", "kernel_version"},
    {"roi", "[0,0,0]", "roi"},
    {"roi", NULL, "roi: missing"},
    {"roi.min", "[0,0]", "roi.min"},
    {"roi.min", "[0,0,\"0\"]", "roi.min[2]"},
    {"roi.max", "[128,256,256]", "roi.max[2]"},
    {"roi.extra", "1", "unknown key 'extra'"},
    {"halo", "-1", "halo"},
    {"halo", "1000", "halo"},
    {"inputs", "[]", "inputs"},
    {"inputs", NULL, "inputs: missing"},
    {"inputs.boundary", "7", "inputs.boundary"},
    {"inputs.boundary.layer", "\"/no/scheme\"", "inputs.boundary.layer"},
    {"inputs.boundary.layer", "\"file:///a/../etc\"", "inputs.boundary.layer"},
    {"inputs.boundary.scale", "\"../up\"", "inputs.boundary.scale"},
    {"inputs.boundary.scale", NULL, "inputs.boundary.scale: missing"},
    {"inputs.boundary.objects", "[]", "inputs.boundary.objects"},
    {"inputs.boundary.objects.8_8_8/0-128_128-256_256-384", "\"sha256:abc\"",
     "inputs.boundary.objects[\"8_8_8/0-128_128-256_256-384\"]"},
    {"inputs.boundary.objects.8_8_8/0-128_128-256_256-384", "\"SHA256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"",
     "inputs.boundary.objects"},
    {"inputs.boundary.objects.../../etc/passwd",
     "\"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\"",
     "'..' component"},
    {"inputs.boundary.unknown", "1", "unknown key 'unknown'"},
    {"inputs.Bad Role", "{}", "inputs.Bad Role (role)"},
    {"output", "\"file:///x\"", "output"},
    {"output.layer", NULL, "output.layer: missing"},
    {"output.scale", "\"/abs\"", "output.scale"},
    {"output.extra", "true", "unknown key 'extra'"},
    {"parameters", "[1]", "parameters"},
    {"parameters", NULL, "parameters: missing"},
    {"deadline", "\"tomorrow\"", "deadline"},
    {"deadline", "\"2026-11-23T10:00:00+01:00\"", "deadline"},
    {"deadline", "\"2026-02-30T10:00:00Z\"", "deadline"},
    {"deadline", NULL, "deadline: missing"},
    {"retry_budget", "-1", "retry_budget"},
    {"retry_budget", "true", "retry_budget"},
    {"priority", "\"now\"", "priority"},
    {"surprise", "1", "unknown key 'surprise'"},
};

/* Apply a mutation to a parsed copy of the valid task. Path parts are
 * dot-separated, except that everything after "objects." is one key (object
 * names may hold dots). */
static char *mutate(const char *text, const struct mutation *m)
{
    json_t *root = json_loads(text, 0, NULL), *obj = root;
    char path[256], *part, *dot, *out;
    assert_non_null(root);
    snprintf(path, sizeof(path), "%s", m->path);
    part = path;
    while (json_is_object(obj) &&
           (dot = strchr(part, '.')) != NULL) {
        int last = strncmp(part, "objects.", 8) == 0;
        *dot = '\0';
        obj = json_object_get(obj, part);
        assert_non_null(obj);
        part = dot + 1;
        if (last)
            break;
    }
    if (m->value == NULL) {
        assert_int_equal(json_object_del(obj, part), 0);
    } else {
        json_t *v = json_loads(m->value, JSON_DECODE_ANY, NULL);
        assert_non_null(v);
        json_object_set_new(obj, part, v);
    }
    out = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    return out;
}

static void test_task__each_field_wrong_in_turn_is_named(void **state)
{
    char *text = valid_text();
    (void)state;
    for (size_t i = 0; i < sizeof(mutations) / sizeof(mutations[0]); i++) {
        char *bad = mutate(text, &mutations[i]);
        cnx_task *t = NULL;
        int rc = cnx_task_parse(&t, bad, strlen(bad));
        if (rc != CNX_ESCHEMA ||
            strstr(cnx_error_last()->message, mutations[i].names) == NULL)
            fail_msg("mutation %zu (%s = %s): rc %d, message '%s'", i,
                     mutations[i].path,
                     mutations[i].value ? mutations[i].value : "(deleted)",
                     rc, cnx_error_last()->message);
        assert_null(t);
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_non_null(strstr(cnx_error_last()->message, "task: "));
        free(bad);
    }
    free(text);
}

static void test_task__malformed_json_is_refused(void **state)
{
    static const char *bad[] = {"", "{", "null", "[]", "\"task\"",
                                "{\"schema\":\"cnx.task/1\",}",
                                "{\"schema\":\"cnx.task/1\",\"schema\":\"x\"}"};
    cnx_task *t;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_task_parse(&t, bad[i], strlen(bad[i])),
                         CNX_ESCHEMA);
        assert_null(t);
    }
    /* Truncating a valid task anywhere is refused, never a crash. */
    char *text = valid_text();
    for (size_t n = 0; n < strlen(text) - 2; n += 7) {
        assert_int_equal(cnx_task_parse(&t, text, n), CNX_ESCHEMA);
    }
    free(text);
}

static void test_task__defaults_apply(void **state)
{
    char *text = valid_text();
    json_t *js = json_loads(text, 0, NULL);
    cnx_task *t;
    (void)state;
    json_object_del(js, "halo");
    json_object_del(js, "retry_budget");
    json_object_del(js, "priority");
    char *s = json_dumps(js, 0);
    assert_int_equal(cnx_task_parse(&t, s, strlen(s)), 0);
    assert_int_equal(t->halo, 2);
    assert_int_equal(t->retry_budget, 3);
    assert_int_equal(t->urgent, 0);
    cnx_task_free(t);
    free(s);
    json_decref(js);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_task__valid_task_parses),
        cmocka_unit_test(test_task__key_hashes_exactly_the_keyed_content),
        cmocka_unit_test(test_task__each_field_wrong_in_turn_is_named),
        cmocka_unit_test(test_task__malformed_json_is_refused),
        cmocka_unit_test(test_task__defaults_apply),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
