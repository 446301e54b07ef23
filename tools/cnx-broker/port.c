/*
 * port.c - lets cnx-broker --port choose where the mock cluster listens.
 *
 * librdkafka 2.0.2's mock cluster binds each broker's listener to
 * 127.0.0.1 port 0 (any free port) and has no setting for it, but a test
 * that kills the broker and starts it again needs the clients' bootstrap
 * list to stay right. So this executable defines bind(): while ports are
 * claimed, a bind of an IPv4 loopback socket to port 0 gets the next
 * claimed port instead; every other bind goes to the C library's as it
 * is. librdkafka, linked dynamically, resolves bind() to this definition.
 * The mock creates its brokers' listeners on the thread that creates the
 * cluster, which is the only one that claims ports.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include "port.h"

static int next_port, ports_left;

void broker_ports_claim(int first, int count)
{
    next_port = first;
    ports_left = count;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);
    static bind_fn real;
    struct sockaddr_in sin;

    if (real == NULL) {
        void *sym = dlsym(RTLD_NEXT, "bind");
        memcpy(&real, &sym, sizeof(real));
    }
    if (ports_left > 0 && addr != NULL && addr->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(sin)) {
        memcpy(&sin, addr, sizeof(sin));
        if (sin.sin_port == 0 && sin.sin_addr.s_addr == htonl(INADDR_LOOPBACK)) {
            sin.sin_port = htons((uint16_t)next_port++);
            ports_left--;
            return real(fd, (const struct sockaddr *)&sin, sizeof(sin));
        }
    }
    return real(fd, addr, len);
}
