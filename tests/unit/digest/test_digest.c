/* SHA-256 digests against the FIPS 180-2 test vectors. */
#include "cnx_test.h"

#include "cnx/digest.h"
#include "cnx/error.h"

static void test_digest__fips_vectors(void **state)
{
    char d[CNX_DIGEST_LEN];
    (void)state;
    cnx_digest("abc", 3, d);
    assert_string_equal(d, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a3"
                           "96177a9cb410ff61f20015ad");
    cnx_digest("", 0, d);
    assert_string_equal(d, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4"
                           "649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopn"
                      "opq";
    cnx_digest(two, strlen(two), d);
    assert_string_equal(d, "sha256:248d6a61d20638b8e5c026930c3e6039a33ce459"
                           "64ff2167f6ecedd419db06c1");
}

static void test_digest__incremental_equals_one_shot(void **state)
{
    uint8_t buf[100000];
    uint64_t rng = 1;
    char a[CNX_DIGEST_LEN], b[CNX_DIGEST_LEN];
    cnx_digest_ctx *ctx;
    (void)state;
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)cnx_test_rand(&rng);
    cnx_digest(buf, sizeof(buf), a);
    assert_int_equal(cnx_digest_ctx_new(&ctx), 0);
    for (size_t off = 0; off < sizeof(buf); off += 777)
        cnx_digest_ctx_update(ctx, buf + off,
                              off + 777 > sizeof(buf) ? sizeof(buf) - off : 777);
    cnx_digest_ctx_final(ctx, b);
    cnx_digest_ctx_free(ctx);
    assert_string_equal(a, b);
}

static void test_digest__check_reports_mismatch_with_both_digests(void **state)
{
    char d[CNX_DIGEST_LEN];
    (void)state;
    cnx_digest("abc", 3, d);
    assert_int_equal(cnx_digest_check("abc", 3, d, "obj"), 0);
    assert_int_equal(cnx_digest_check("abd", 3, d, "scale/0-1_0-1_0-1"),
                     CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "scale/0-1_0-1_0-1"));
    assert_non_null(strstr(cnx_error_last()->message, d));
    assert_int_equal(cnx_digest_check("abc", 3, "md5:00", "obj"), CNX_EINVAL);
}

static void test_digest__valid_format(void **state)
{
    char d[CNX_DIGEST_LEN];
    (void)state;
    cnx_digest("x", 1, d);
    assert_true(cnx_digest_valid(d));
    d[10] = 'A';
    assert_false(cnx_digest_valid(d));
    assert_false(cnx_digest_valid("sha256:abc"));
    assert_false(cnx_digest_valid(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_digest__fips_vectors),
        cmocka_unit_test(test_digest__incremental_equals_one_shot),
        cmocka_unit_test(test_digest__check_reports_mismatch_with_both_digests),
        cmocka_unit_test(test_digest__valid_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
