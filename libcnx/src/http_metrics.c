/*
 * http_metrics.c - a minimal HTTP/1.0 server for Prometheus scrapes and
 * health probes: GET /metrics, /healthz and /readyz; 404 for any other
 * path, 405 for any other method on those three, 400 for a request line
 * that does not parse.
 *
 * One thread accepts a connection, reads the request head (up to
 * HEAD_MAX bytes, across as many reads as it takes, for at most
 * READ_MS), answers and closes: one request per connection. It polls with
 * a timeout so it notices the stop flag within 200 ms. /metrics is what
 * render() returns, followed by the series every process has (cnx_ready,
 * cnx_build_info, process_*: process_metrics.c). /healthz and /readyz
 * read the health state the owner's main thread publishes at every turn
 * of its loop (cnx__http_health_update): alive while the last turn is
 * under CNX_HTTP_WEDGED_S old; ready while the last published state says
 * so. Used by the workers and the controller (--metrics-port); one server
 * per process, hence the file-level state.
 */
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "worker_int.h"

/* Largest request head read (request line and headers); a longer one is
 * answered from what was read, or 400 if its request line is longer. */
#define HEAD_MAX 8192
/* How long a client has to send its request head. */
#define READ_MS 1000
/* Room for the series process_metrics.c appends. */
#define PROCESS_MAX 4096

static struct {
    pthread_t thread;
    int fd;
    int running;
    char *(*render)(void *ctx);
    void *ctx;
    atomic_int *stop;
} server = {.fd = -1};

/* Published by the main thread (cnx__http_health_update), read by the
 * server thread. Guarded by lock. */
static struct {
    pthread_mutex_t lock;
    double tick; /* cnx_now() of the main loop's last turn; 0: none yet */
    int ready;
    char why[256]; /* when not ready: the failing condition, one line */
} health = {PTHREAD_MUTEX_INITIALIZER, 0, 0, "starting"};

void cnx__http_health_update(const char *not_ready)
{
    pthread_mutex_lock(&health.lock);
    health.tick = cnx_now();
    health.ready = not_ready == NULL;
    snprintf(health.why, sizeof(health.why), "%s",
             not_ready != NULL ? not_ready : "");
    pthread_mutex_unlock(&health.lock);
}

/* ---- the request line -------------------------------------------------- */

static int is_tchar(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
           (ch >= '0' && ch <= '9') || strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

cnx_http_route cnx__http_route(const char *head, size_t len)
{
    const char *eol = memchr(head, '\n', len);
    const char *p = head, *method, *path, *version;
    size_t mlen, plen, vlen, end;
    static const struct {
        const char *path;
        cnx_http_route route;
    } paths[] = {{"/metrics", CNX_HTTP_METRICS},
                 {"/healthz", CNX_HTTP_HEALTHZ},
                 {"/readyz", CNX_HTTP_READYZ}};
    cnx_http_route route = CNX_HTTP_NOT_FOUND;

    assert(head != NULL || len == 0);
    if (eol == NULL)
        return len >= HEAD_MAX ? CNX_HTTP_BAD_REQUEST : CNX_HTTP_INCOMPLETE;
    end = (size_t)(eol - head);
    if (end > 0 && head[end - 1] == '\r')
        end--;
    /* method SP request-target SP HTTP-version */
    method = p;
    while (p < head + end && is_tchar(*p))
        p++;
    mlen = (size_t)(p - method);
    if (mlen == 0 || p >= head + end || *p != ' ')
        return CNX_HTTP_BAD_REQUEST;
    path = ++p;
    while (p < head + end && *p != ' ')
        p++;
    if (p >= head + end || p == path || *path != '/')
        return CNX_HTTP_BAD_REQUEST;
    plen = (size_t)(p - path);
    version = ++p;
    vlen = (size_t)(head + end - version);
    if (vlen != 8 || memcmp(version, "HTTP/1.", 7) != 0 || version[7] < '0' ||
        version[7] > '9')
        return CNX_HTTP_BAD_REQUEST;
    /* The query string and fragment do not choose the resource. */
    for (size_t i = 0; i < plen; i++)
        if (path[i] == '?' || path[i] == '#') {
            plen = i;
            break;
        }
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (strlen(paths[i].path) == plen &&
            memcmp(paths[i].path, path, plen) == 0)
            route = paths[i].route;
    if (route != CNX_HTTP_NOT_FOUND &&
        !(mlen == 3 && memcmp(method, "GET", 3) == 0))
        return CNX_HTTP_BAD_METHOD;
    return route;
}

/* ---- answers ------------------------------------------------------------ */

static void send_all(int fd, const char *data, size_t len)
{
    while (len > 0) {
        ssize_t w = write(fd, data, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        data += w;
        len -= (size_t)w;
    }
}

static void answer(int fd, int code, const char *extra_header, const char *type,
                   const char *body)
{
    static const struct {
        int code;
        const char *text;
    } reasons[] = {{200, "OK"},
                   {400, "Bad Request"},
                   {404, "Not Found"},
                   {405, "Method Not Allowed"},
                   {500, "Internal Server Error"},
                   {503, "Service Unavailable"}};
    const char *reason = "Error";
    char head[512];
    int n;
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
        if (reasons[i].code == code)
            reason = reasons[i].text;
    n = snprintf(head, sizeof(head),
                 "HTTP/1.0 %d %s\r\nContent-Type: %s\r\n%sContent-Length: "
                 "%zu\r\nConnection: close\r\n\r\n",
                 code, reason, type, extra_header ? extra_header : "",
                 strlen(body));
    assert(n > 0 && (size_t)n < sizeof(head));
    send_all(fd, head, (size_t)n);
    send_all(fd, body, strlen(body));
}

/* The health state as a /healthz or /readyz answer. */
static void answer_health(int fd, int readiness)
{
    char body[320];
    double age;
    int ok;
    pthread_mutex_lock(&health.lock);
    age = health.tick > 0 ? cnx_now() - health.tick : 0;
    if (!readiness) {
        ok = age < CNX_HTTP_WEDGED_S;
        if (ok)
            snprintf(body, sizeof(body), "ok\n");
        else
            snprintf(body, sizeof(body),
                     "wedged: the main loop last turned "
                     "%.0f s ago\n",
                     age);
    } else {
        ok = health.ready;
        snprintf(body, sizeof(body), "%s\n", ok ? "ready" : health.why);
    }
    pthread_mutex_unlock(&health.lock);
    answer(fd, ok ? 200 : 503, NULL, "text/plain; charset=utf-8", body);
}

/* render()'s exposition, then the series of every process. */
static void answer_metrics(int fd)
{
    char *own = server.render(server.ctx);
    char *all;
    size_t n;
    int ready;
    if (own == NULL) {
        answer(fd, 500, NULL, "text/plain; charset=utf-8",
               "cannot render the metrics\n");
        return;
    }
    n = strlen(own);
    all = malloc(n + PROCESS_MAX);
    if (all == NULL) {
        free(own);
        answer(fd, 500, NULL, "text/plain; charset=utf-8", "out of memory\n");
        return;
    }
    memcpy(all, own, n);
    free(own);
    pthread_mutex_lock(&health.lock);
    ready = health.ready;
    pthread_mutex_unlock(&health.lock);
    n += (size_t)snprintf(all + n, 256,
                          "# HELP cnx_ready 1 while /readyz answers 200.\n"
                          "# TYPE cnx_ready gauge\ncnx_ready %d\n",
                          ready);
    cnx__process_metrics_render(all + n, PROCESS_MAX - 256);
    answer(fd, 200, NULL, "text/plain; version=0.0.4; charset=utf-8", all);
    free(all);
}

/* Whether head[0..len) holds a blank line (the end of the head). */
static int head_ended(const char *head, size_t len)
{
    for (size_t i = 1; i < len; i++)
        if (head[i] == '\n' &&
            (head[i - 1] == '\n' ||
             (i >= 2 && head[i - 1] == '\r' && head[i - 2] == '\n')))
            return 1;
    return 0;
}

static void serve_one(int fd)
{
    char head[HEAD_MAX];
    size_t len = 0;
    double until = cnx_now() + READ_MS / 1000.0;
    cnx_http_route route = CNX_HTTP_INCOMPLETE;

    /* Read until the head ends (a blank line), the buffer is full or the
     * client stops sending: the request line may come in pieces. */
    while (len < sizeof(head)) {
        struct pollfd p = {fd, POLLIN, 0};
        int left = (int)((until - cnx_now()) * 1000);
        ssize_t r;
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        r = read(fd, head + len, sizeof(head) - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (head_ended(head, len))
            break;
    }
    route = cnx__http_route(head, len);
    switch (route) {
    case CNX_HTTP_INCOMPLETE:
        if (len == 0)
            return; /* connected and said nothing */
        /* fall through */
    case CNX_HTTP_BAD_REQUEST:
        answer(fd, 400, NULL, "text/plain; charset=utf-8", "bad request\n");
        break;
    case CNX_HTTP_NOT_FOUND:
        answer(fd, 404, NULL, "text/plain; charset=utf-8",
               "not found: try /metrics, /healthz or /readyz\n");
        break;
    case CNX_HTTP_BAD_METHOD:
        answer(fd, 405, "Allow: GET\r\n", "text/plain; charset=utf-8",
               "method not allowed: GET only\n");
        break;
    case CNX_HTTP_METRICS:
        answer_metrics(fd);
        break;
    case CNX_HTTP_HEALTHZ:
        answer_health(fd, 0);
        break;
    case CNX_HTTP_READYZ:
        answer_health(fd, 1);
        break;
    }
    /* Close gracefully: whatever the client sent beyond the head (a
     * body) is drained, so the close does not reset the connection
     * before the client has read the answer. */
    shutdown(fd, SHUT_WR);
    for (int i = 0; i < 4; i++) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0 || read(fd, head, sizeof(head)) <= 0)
            break;
    }
}

static void *serve(void *arg)
{
    (void)arg;
    while (!atomic_load(server.stop)) {
        struct pollfd p = {server.fd, POLLIN, 0};
        if (poll(&p, 1, 200) <= 0)
            continue;
        int c = accept(server.fd, NULL, NULL);
        if (c < 0)
            continue;
        serve_one(c);
        close(c);
    }
    return NULL;
}

int cnx__http_metrics_start(int port, char *(*render)(void *ctx), void *ctx,
                            atomic_int *stop)
{
    struct sockaddr_in addr;
    int one = 1;
    assert(!server.running);
    server.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (server.fd < 0)
        return cnx_error_set(CNX_EIO, 0, "metrics: socket: %s",
                             strerror(errno));
    setsockopt(server.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons((uint16_t)port);
    if (bind(server.fd, (struct sockaddr *)&addr, sizeof(addr)) != 0 ||
        listen(server.fd, 16) != 0) {
        int rc = cnx_error_set(CNX_EIO, 0,
                               "metrics: cannot listen on port "
                               "%d: %s",
                               port, strerror(errno));
        close(server.fd);
        server.fd = -1;
        return rc;
    }
    server.render = render;
    server.ctx = ctx;
    server.stop = stop;
    /* Until the main loop first turns: alive (counted from now), not
     * ready. */
    pthread_mutex_lock(&health.lock);
    health.tick = cnx_now();
    health.ready = 0;
    snprintf(health.why, sizeof(health.why), "starting");
    pthread_mutex_unlock(&health.lock);
    if (pthread_create(&server.thread, NULL, serve, NULL) != 0) {
        close(server.fd);
        server.fd = -1;
        return cnx_error_set(CNX_EIO, 0, "metrics: cannot start thread");
    }
    server.running = 1;
    return 0;
}

void cnx__http_metrics_stop(void)
{
    if (!server.running)
        return;
    pthread_join(server.thread, NULL);
    close(server.fd);
    server.fd = -1;
    server.running = 0;
}
