/* Strict option and number parsing shared by the executables. */
#include "cnx_test.h"

#include "cnx/cli.h"

static void test_cli__option_forms(void **state)
{
    char *argv[] = {"prog", "--out", "dir", "--seed=7", "--outx", "--shape"};
    const char *v = NULL;
    int i = 1;
    (void)state;
    assert_int_equal(cnx_cli_option(6, argv, &i, "--out", &v), 1);
    assert_string_equal(v, "dir");
    assert_int_equal(i, 2);
    i = 3;
    assert_int_equal(cnx_cli_option(6, argv, &i, "--seed", &v), 1);
    assert_string_equal(v, "7");
    i = 4;
    assert_int_equal(cnx_cli_option(6, argv, &i, "--out", &v), 0);
    i = 5;
    assert_int_equal(cnx_cli_option(6, argv, &i, "--shape", &v), -1);
}

static void test_cli__integers_are_whole_and_in_range(void **state)
{
    static const char *bad[] = {"", " 1", "+1", "1x", "0x10", "1.0",
                                "99999999999999999999", "-"};
    int64_t v;
    (void)state;
    assert_int_equal(cnx_cli_int("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(cnx_cli_int("-3", -5, 5, &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(cnx_cli_int("101", 0, 100, &v), -1);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(cnx_cli_int(bad[i], INT64_MIN, INT64_MAX, &v), -1);
}

static void test_cli__doubles_and_lists(void **state)
{
    double d;
    int64_t v[3];
    (void)state;
    assert_int_equal(cnx_cli_double("2.5", 0, 10, &d), 0);
    assert_true(d == 2.5);
    assert_int_equal(cnx_cli_double("nan", 0, 10, &d), -1);
    assert_int_equal(cnx_cli_double("inf", 0, 1e300, &d), -1);
    assert_int_equal(cnx_cli_double("11", 0, 10, &d), -1);
    assert_int_equal(cnx_cli_ints("1,-2,3", v, 3), 0);
    assert_int_equal(v[1], -2);
    assert_int_equal(cnx_cli_ints("1,2", v, 3), -1);
    assert_int_equal(cnx_cli_ints("1,2,3,4", v, 3), -1);
    assert_int_equal(cnx_cli_ints("1,,3", v, 3), -1);
    assert_int_equal(cnx_cli_ints("1,2,3x", v, 3), -1);
    assert_int_equal(cnx_cli_ints_in("1,2,3", 1, 2, v, 3), -1);
    assert_int_equal(cnx_cli_ints_in("1,2,2", 1, 2, v, 3), 0);
    double r[3];
    assert_int_equal(cnx_cli_doubles("4,4,40.5", 0, 100, r, 3), 0);
    assert_true(r[2] == 40.5);
    assert_int_equal(cnx_cli_doubles("4,4,nan", 0, 100, r, 3), -1);
    assert_int_equal(cnx_cli_doubles("4,4", 0, 100, r, 3), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli__option_forms),
        cmocka_unit_test(test_cli__integers_are_whole_and_in_range),
        cmocka_unit_test(test_cli__doubles_and_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
