/* cnx_report_html_escape: every HTML special becomes a character
 * reference, everything else passes through byte for byte. */
#include "cnx_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "cnx/report.h"

static char *escaped(const char *text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    cnx_report_html_escape(f, text);
    assert_int_equal(fclose(f), 0);
    return buf;
}

static void test_report__escape_replaces_each_special(void **state)
{
    static const char *const cases[][2] = {
        {"", ""},
        {"plain ds1", "plain ds1"},
        {"<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"},
        {"a\"b'c&d", "a&quot;b&#39;c&amp;d"},
        {"&amp;", "&amp;amp;"},
        {"\xc2\xb5m \xe2\x86\x92", "\xc2\xb5m \xe2\x86\x92"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *got = escaped(cases[i][0]);
        assert_string_equal(got, cases[i][1]);
        free(got);
    }
}

static void test_report__escape_of_null_writes_nothing(void **state)
{
    char *got = escaped(NULL);
    (void)state;
    assert_string_equal(got, "");
    free(got);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report__escape_replaces_each_special),
        cmocka_unit_test(test_report__escape_of_null_writes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
