/* Canonical JSON: sorted keys, no whitespace, one form per document. */
#include "cnx_test.h"

#include "cnx/error.h"
#include "cnx/json.h"

static void canon_is(const char *in, const char *want)
{
    char *out = NULL;
    assert_int_equal(cnx_json_canonicalize(in, strlen(in), "doc", &out), 0);
    assert_string_equal(out, want);
    free(out);
}

static void test_json__sorts_keys_and_drops_whitespace(void **state)
{
    (void)state;
    canon_is("{ \"b\" : 1,\n \"a\" : [ 1 , 2, {\"z\":null, \"y\":true} ] }",
             "{\"a\":[1,2,{\"y\":true,\"z\":null}],\"b\":1}");
    canon_is("{\"\\u00e9\":\"caf\\u00e9\",\"e\":\"x\"}",
             "{\"e\":\"x\",\"\xc3\xa9\":\"caf\xc3\xa9\"}");
    canon_is("{\"n\":-0,\"r\":0.1,\"big\":12345678901234}",
             "{\"big\":12345678901234,\"n\":0,\"r\":0.10000000000000001}");
}

static void test_json__same_content_same_bytes(void **state)
{
    char *a, *b;
    const char *x = "{\"p\":{\"t\":0.5,\"s\":[3,2]},\"q\":\"v\"}";
    const char *y = "{\"q\" : \"v\", \"p\" : {\"s\" : [3, 2], \"t\" : 5e-1}}";
    (void)state;
    assert_int_equal(cnx_json_canonicalize(x, strlen(x), "x", &a), 0);
    assert_int_equal(cnx_json_canonicalize(y, strlen(y), "y", &b), 0);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void test_json__rejects_malformed_and_ambiguous(void **state)
{
    static const char *bad[] = {"{", "{\"a\":1,\"a\":2}", "{\"a\":NaN}",
                                "[1,]", "{\"a\":\"\\u0000\"}", "", "{'a':1}"};
    char *out;
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_json_canonicalize(bad[i], strlen(bad[i]), "msg",
                                               &out),
                         CNX_ESCHEMA);
        assert_null(out);
        assert_non_null(strstr(cnx_error_last()->message, "msg: malformed"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json__sorts_keys_and_drops_whitespace),
        cmocka_unit_test(test_json__same_content_same_bytes),
        cmocka_unit_test(test_json__rejects_malformed_and_ambiguous),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
