/*
 * test_http_route.c - the metrics server's request router
 * (cnx__http_route, http_metrics.c) and the process series
 * (cnx__process_metrics_render, process_metrics.c).
 *
 * Router: a table of request heads and the route each must take (GET of
 * the three paths, with and without a query string or fragment, CRLF or
 * LF; other paths 404 whatever the method; other methods on the three
 * paths 405; malformed request lines 400). Partial reads: every proper
 * prefix of a request line is INCOMPLETE, and the whole line routes the
 * same however the headers after it are cut. Process series: every name
 * is there once with its HELP and TYPE; process_open_fds goes up by
 * exactly the descriptors the test opens; cnx_build_info carries the
 * commit cnx_build_commit() gives; a small buffer holds only whole lines.
 */
#include <fcntl.h>

#include "cnx/lineage.h"
#include "cnx_test.h"
#include "worker_int.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static cnx_http_route route_of(const char *head)
{
    return cnx__http_route(head, strlen(head));
}

static void test_http_route__table(void **state)
{
    static const struct {
        const char *head;
        cnx_http_route want;
    } cases[] = {
        {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", CNX_HTTP_METRICS},
        {"GET /metrics HTTP/1.0\n\n", CNX_HTTP_METRICS},
        {"GET /metrics?x=1&y HTTP/1.1\r\n\r\n", CNX_HTTP_METRICS},
        {"GET /metrics#top HTTP/1.1\r\n\r\n", CNX_HTTP_METRICS},
        {"GET /healthz HTTP/1.1\r\n\r\n", CNX_HTTP_HEALTHZ},
        {"GET /readyz?verbose HTTP/1.1\r\n\r\n", CNX_HTTP_READYZ},
        {"GET / HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"GET /ready HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"GET /metrics/ HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"GET /metricsx HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"GET /healthz/x HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"POST /nope HTTP/1.1\r\n\r\n", CNX_HTTP_NOT_FOUND},
        {"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
         CNX_HTTP_BAD_METHOD},
        {"HEAD /healthz HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_METHOD},
        {"get /metrics HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_METHOD},
        {"DELETE /readyz HTTP/1.0\r\n\r\n", CNX_HTTP_BAD_METHOD},
        {"GET /metrics\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"GET metrics HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"GET  /metrics HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"GET /metrics HTTP/2.0\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"GET /metrics HTTP/1.1 \r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"GET /metrics FTP/1.1\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {" GET /metrics HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"G(T /metrics HTTP/1.1\r\n\r\n", CNX_HTTP_BAD_REQUEST},
        {"\r\n", CNX_HTTP_BAD_REQUEST},
        {"", CNX_HTTP_INCOMPLETE},
        {"GET /metrics HTTP/1.1", CNX_HTTP_INCOMPLETE},
    };
    (void)state;
    for (size_t i = 0; i < LEN(cases); i++)
        if (route_of(cases[i].head) != cases[i].want)
            fail_msg("case %zu (%s): got %d, want %d", i, cases[i].head,
                     (int)route_of(cases[i].head), (int)cases[i].want);
}

static void test_http_route__partial_reads(void **state)
{
    const char *req = "GET /readyz?x=1 HTTP/1.1\r\nHost: a\r\nAccept: "
                      "*/*\r\n\r\n";
    size_t line = strcspn(req, "\n");
    (void)state;
    for (size_t n = 0; n < strlen(req); n++) {
        cnx_http_route want = n <= line ? CNX_HTTP_INCOMPLETE : CNX_HTTP_READYZ;
        if (cnx__http_route(req, n) != want)
            fail_msg("prefix of %zu bytes: got %d, want %d", n,
                     (int)cnx__http_route(req, n), (int)want);
    }
}

static void test_http_route__long_line_is_bad(void **state)
{
    size_t n = 9000;
    char *head = malloc(n);
    (void)state;
    assert_non_null(head);
    memcpy(head, "GET /", 5);
    memset(head + 5, 'a', n - 5);
    assert_int_equal(cnx__http_route(head, n), CNX_HTTP_BAD_REQUEST);
    /* Under the bound, it may still be on its way. */
    assert_int_equal(cnx__http_route(head, 4000), CNX_HTTP_INCOMPLETE);
    free(head);
}

/* The value of the sample line "name value" in text, or -1. */
static double sample(const char *text, const char *name)
{
    char key[128];
    const char *p;
    snprintf(key, sizeof(key), "\n%s ", name);
    p = strstr(text, key);
    return p != NULL ? strtod(p + strlen(key), NULL) : -1;
}

static int count(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p != NULL;
         p = strstr(p + 1, needle))
        n++;
    return n;
}

static void test_process_metrics__series(void **state)
{
    static const char *names[] = {"process_cpu_seconds_total",
                                  "process_resident_memory_bytes",
                                  "process_virtual_memory_bytes",
                                  "process_start_time_seconds",
                                  "process_open_fds",
                                  "process_max_fds",
                                  "cnx_build_info"};
    char text[4096], more[4096], label[128];
    int fds[5];
    size_t n = cnx__process_metrics_render(text, sizeof(text));
    (void)state;
    assert_int_equal(n, strlen(text));
    for (size_t i = 0; i < LEN(names); i++) {
        char help[160], type[160];
        snprintf(help, sizeof(help), "# HELP %s ", names[i]);
        snprintf(type, sizeof(type), "# TYPE %s ", names[i]);
        if (count(text, help) != 1 || count(text, type) != 1)
            fail_msg("%s: HELP or TYPE not there once:\n%s", names[i], text);
    }
    snprintf(label, sizeof(label), "commit=\"%s\"",
             cnx_build_commit()[0] ? cnx_build_commit() : "unknown");
    assert_non_null(strstr(text, label));
    assert_true(sample(text, "process_resident_memory_bytes") > 0);
    assert_true(sample(text, "process_virtual_memory_bytes") >=
                sample(text, "process_resident_memory_bytes"));
    assert_true(sample(text, "process_start_time_seconds") > 1.5e9);
    for (size_t i = 0; i < LEN(fds); i++) {
        fds[i] = open("/dev/null", O_RDONLY);
        assert_true(fds[i] >= 0);
    }
    cnx__process_metrics_render(more, sizeof(more));
    for (size_t i = 0; i < LEN(fds); i++)
        close(fds[i]);
    assert_int_equal((long long)sample(more, "process_open_fds"),
                     (long long)sample(text, "process_open_fds") + 5);
}

static void test_process_metrics__small_buffer_whole_lines(void **state)
{
    char text[300];
    size_t n = cnx__process_metrics_render(text, sizeof(text));
    (void)state;
    assert_true(n < sizeof(text));
    assert_int_equal(n, strlen(text));
    assert_true(n == 0 || text[n - 1] == '\n');
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_route__table),
        cmocka_unit_test(test_http_route__partial_reads),
        cmocka_unit_test(test_http_route__long_line_is_bad),
        cmocka_unit_test(test_process_metrics__series),
        cmocka_unit_test(test_process_metrics__small_buffer_whole_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
