/* Per-thread last error: set, wrap, clear, names, thread isolation. */
#include "cnx_test.h"

#include <pthread.h>

#include "cnx/error.h"

static void test_error__set_records_code_flag_and_message(void **state)
{
    (void)state;
    int rc = cnx_error_set(CNX_EIO, 1, "cannot write %s", "x/y");
    assert_int_equal(rc, CNX_EIO);
    assert_int_equal(cnx_error_last()->code, CNX_EIO);
    assert_int_equal(cnx_error_last()->retriable, 1);
    assert_string_equal(cnx_error_last()->message, "cannot write x/y");
}

static void test_error__wrap_prefixes_and_keeps_code(void **state)
{
    (void)state;
    cnx_error_set(CNX_EDIGEST, 0, "digest mismatch");
    assert_int_equal(cnx_error_wrap("chunk %d", 7), CNX_EDIGEST);
    assert_string_equal(cnx_error_last()->message, "chunk 7: digest mismatch");
    assert_int_equal(cnx_error_last()->retriable, 0);
}

static void test_error__long_messages_are_truncated_not_overflowed(void **state)
{
    char big[2000];
    (void)state;
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cnx_error_set(CNX_EINVAL, 0, "%s", big);
    assert_int_equal(strlen(cnx_error_last()->message), 511);
    cnx_error_wrap("%s", big);
    assert_int_equal(strlen(cnx_error_last()->message), 511);
}

static void test_error__clear_resets(void **state)
{
    (void)state;
    cnx_error_set(CNX_EIO, 1, "x");
    cnx_error_clear();
    assert_int_equal(cnx_error_last()->code, CNX_OK);
    assert_string_equal(cnx_error_last()->message, "");
}

static void test_error__names_are_stable(void **state)
{
    (void)state;
    assert_string_equal(cnx_error_name(CNX_EIMMUTABLE), "EIMMUTABLE");
    assert_string_equal(cnx_error_name(CNX_EDIGEST), "EDIGEST");
    assert_string_equal(cnx_error_name(-999), "EUNKNOWN");
    /* Append-only: the numeric values are part of the ABI. */
    assert_int_equal(CNX_EIMMUTABLE, -5);
    assert_int_equal(CNX_ETOOBIG, -12);
}

static void *other_thread(void *arg)
{
    (void)arg;
    cnx_error_set(CNX_ENOTFOUND, 0, "other thread");
    return NULL;
}

static void test_error__is_per_thread(void **state)
{
    pthread_t t;
    (void)state;
    cnx_error_set(CNX_EIO, 1, "main thread");
    assert_int_equal(pthread_create(&t, NULL, other_thread, NULL), 0);
    pthread_join(t, NULL);
    assert_string_equal(cnx_error_last()->message, "main thread");
    assert_int_equal(cnx_error_last()->code, CNX_EIO);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error__set_records_code_flag_and_message),
        cmocka_unit_test(test_error__wrap_prefixes_and_keeps_code),
        cmocka_unit_test(test_error__long_messages_are_truncated_not_overflowed),
        cmocka_unit_test(test_error__clear_resets),
        cmocka_unit_test(test_error__names_are_stable),
        cmocka_unit_test(test_error__is_per_thread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
