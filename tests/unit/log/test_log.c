/* Logging levels and line format; progress output off a terminal. */
#include "cnx_test.h"

#include <fcntl.h>

#include "cnx/log.h"

/* Run fn with stderr redirected to a file; return what it wrote. */
static char *capture_stderr(void (*fn)(void))
{
    char path[] = "/tmp/cnx-test-log-XXXXXX";
    int fd = mkstemp(path), saved = dup(STDERR_FILENO);
    static char buf[8192];
    ssize_t n;
    assert_true(fd >= 0);
    dup2(fd, STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, buf, sizeof(buf) - 1);
    buf[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
    return buf;
}

static void log_some(void)
{
    cnx_log_set_level(CNX_LOG_WARN);
    CNX_ERROR("store", "disk %s", "full");
    CNX_WARN("worker", "slow");
    CNX_INFO("worker", "hidden info");
    CNX_DEBUG("worker", "hidden debug");
    cnx_log_set_level(CNX_LOG_INFO);
}

static void test_log__levels_filter_and_lines_are_formatted(void **state)
{
    char *out;
    (void)state;
    out = capture_stderr(log_some);
    assert_non_null(strstr(out, " error store: disk full\n"));
    assert_non_null(strstr(out, " warn worker: slow\n"));
    assert_null(strstr(out, "hidden"));
    /* Lines start with an RFC 3339 UTC timestamp. */
    assert_true(out[4] == '-' && out[10] == 'T' && out[19] == 'Z');
}

static void progress_some(void)
{
    cnx_progress *bar = cnx_progress_start("chunks", 100, 0);
    for (int i = 1; i <= 100; i++)
        cnx_progress_update(bar, i);
    cnx_progress_finish(bar);
    bar = cnx_progress_start("quiet", 10, 1);
    cnx_progress_update(bar, 5);
    cnx_progress_finish(bar);
    cnx_progress_update(NULL, 1);
    cnx_progress_finish(NULL);
}

static void test_log__progress_prints_few_lines_off_a_terminal(void **state)
{
    char *out;
    int lines = 0;
    (void)state;
    out = capture_stderr(progress_some);
    for (char *p = out; *p; p++)
        lines += *p == '\n';
    /* One line per 10% step (0%..90%) plus the final line; nothing when
     * quiet. */
    assert_int_equal(lines, 11);
    assert_non_null(strstr(out, "100/100"));
    assert_null(strstr(out, "quiet"));
    assert_null(strchr(out, '\r'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log__levels_filter_and_lines_are_formatted),
        cmocka_unit_test(test_log__progress_prints_few_lines_off_a_terminal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
