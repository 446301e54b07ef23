/*
 * http_metrics.c - a minimal HTTP/1.0 server for Prometheus scrapes.
 *
 * One thread accepts a connection, reads the request, answers any GET
 * with the text render() returns (the exposition format, version 0.0.4)
 * and closes. It polls with a timeout so it notices the stop flag within
 * 200 ms. Used by the workers and the controller (--metrics-port); one
 * server per process.
 */
#include <arpa/inet.h>
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
#include "worker_int.h"

static struct {
    pthread_t thread;
    int fd;
    int running;
    char *(*render)(void *ctx);
    void *ctx;
    atomic_int *stop;
} server = {.fd = -1};

static void serve_one(int fd)
{
    char req[1024], head[256];
    struct pollfd p = {fd, POLLIN, 0};
    char *body;
    int n;
    /* Read the request (we answer any GET with the exposition). */
    if (poll(&p, 1, 1000) <= 0 || read(fd, req, sizeof(req) - 1) <= 0)
        return;
    body = server.render(server.ctx);
    if (body == NULL)
        return;
    n = snprintf(head, sizeof(head),
                 "HTTP/1.0 200 OK\r\nContent-Type: text/plain; "
                 "version=0.0.4\r\nContent-Length: %zu\r\nConnection: "
                 "close\r\n\r\n",
                 strlen(body));
    if (write(fd, head, (size_t)n) == n)
        (void)!write(fd, body, strlen(body));
    free(body);
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
        int rc = cnx_error_set(CNX_EIO, 0, "metrics: cannot listen on port "
                               "%d: %s", port, strerror(errno));
        close(server.fd);
        server.fd = -1;
        return rc;
    }
    server.render = render;
    server.ctx = ctx;
    server.stop = stop;
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
