/*
 * store_tool.c - a small command line over the public store API, for the
 * integration tests of every backend (tests/integration/store_s3.sh):
 *
 *   store_tool put URL NAME FILE            prints the digest
 *   store_tool get URL NAME [EXPECTED]      the bytes to stdout (verified
 *                                           against EXPECTED when given)
 *   store_tool range URL NAME OFFSET LEN    bytes [OFFSET, OFFSET+LEN)
 *   store_tool exists URL NAME              prints 1 or 0
 *   store_tool list URL [PREFIX]            one name per line
 *   store_tool swap URL NAME EXPECTED|- FILE
 *   store_tool fill URL PREFIX COUNT        puts PREFIX/k000000.. (tiny)
 *   store_tool many URL NAME...             reads them concurrently
 *                                           (cnx_store_get_many); prints
 *                                           "NAME DIGEST" per object
 *
 * Exit status: 0 success, 1 a store error (one line on stderr: "store_tool:
 * ENAME: message (retriable|fatal)"), 2 usage or a local file error.
 * Uses only the public API. Single-threaded; no state beyond one call.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/store.h"

static int usage(void)
{
    fprintf(stderr, "usage: store_tool put URL NAME FILE\n"
                    "       store_tool get URL NAME [EXPECTED_DIGEST]\n"
                    "       store_tool range URL NAME OFFSET LEN\n"
                    "       store_tool exists URL NAME\n"
                    "       store_tool list URL [PREFIX]\n"
                    "       store_tool swap URL NAME EXPECTED|- FILE\n"
                    "       store_tool fill URL PREFIX COUNT\n"
                    "       store_tool many URL NAME...\n");
    return 2;
}

static int store_error(void)
{
    const cnx_error *e = cnx_error_last();
    fprintf(stderr, "store_tool: %s: %s (%s)\n", cnx_error_name(e->code),
            e->message, e->retriable ? "retriable" : "fatal");
    return 1;
}

/* A whole local file into memory (at most CNX_STORE_MAX_OBJECT bytes). */
static int read_local(const char *path, uint8_t **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL) {
        fprintf(stderr, "store_tool: %s: %s\n", path, strerror(errno));
        return 2;
    }
    for (;;) {
        size_t got;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            uint8_t *grown;
            if (ncap > CNX_STORE_MAX_OBJECT + 1)
                ncap = CNX_STORE_MAX_OBJECT + 1;
            if (ncap <= cap) {
                fprintf(stderr, "store_tool: %s: over %zu bytes\n", path,
                        CNX_STORE_MAX_OBJECT);
                free(buf);
                fclose(f);
                return 2;
            }
            grown = realloc(buf, ncap);
            if (grown == NULL) {
                fprintf(stderr, "store_tool: out of memory\n");
                free(buf);
                fclose(f);
                return 2;
            }
            buf = grown;
            cap = ncap;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "store_tool: %s: read error\n", path);
        free(buf);
        fclose(f);
        return 2;
    }
    fclose(f);
    *data = buf;
    *len = n;
    return 0;
}

static int write_out(const uint8_t *data, size_t len)
{
    if (fwrite(data, 1, len, stdout) != len || fflush(stdout) != 0) {
        fprintf(stderr, "store_tool: cannot write stdout\n");
        return 2;
    }
    return 0;
}

static int parse_u64(const char *text, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

static int print_name(void *ctx, const char *name)
{
    (void)ctx;
    return printf("%s\n", name) < 0 ? 1 : 0;
}

int main(int argc, char **argv)
{
    cnx_store *store = NULL;
    const char *cmd;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc = 0;

    if (argc < 3)
        return usage();
    cmd = argv[1];
    if (cnx_store_open(&store, argv[2]) != 0)
        return store_error();

    if (strcmp(cmd, "put") == 0 && argc == 5) {
        char digest[CNX_DIGEST_LEN];
        rc = read_local(argv[4], &data, &len);
        if (rc == 0) {
            if (cnx_store_put(store, argv[3], data, len, digest) != 0)
                rc = store_error();
            else
                printf("%s\n", digest);
        }
    } else if (strcmp(cmd, "get") == 0 && (argc == 4 || argc == 5)) {
        int r = argc == 5 ? cnx_store_get_verified(store, argv[3], argv[4], 0,
                                                   &data, &len)
                          : cnx_store_get(store, argv[3], 0, &data, &len);
        rc = r != 0 ? store_error() : write_out(data, len);
    } else if (strcmp(cmd, "range") == 0 && argc == 6) {
        uint64_t off, n;
        if (parse_u64(argv[4], &off) != 0 || parse_u64(argv[5], &n) != 0 ||
            n > SIZE_MAX) {
            rc = usage();
        } else if (cnx_store_get_range(store, argv[3], off, (size_t)n, &data,
                                       &len) != 0) {
            rc = store_error();
        } else {
            rc = write_out(data, len);
        }
    } else if (strcmp(cmd, "exists") == 0 && argc == 4) {
        int exists = 0;
        if (cnx_store_exists(store, argv[3], &exists) != 0)
            rc = store_error();
        else
            printf("%d\n", exists);
    } else if (strcmp(cmd, "list") == 0 && (argc == 3 || argc == 4)) {
        int r =
            cnx_store_list(store, argc == 4 ? argv[3] : NULL, print_name, NULL);
        if (r < 0)
            rc = store_error();
        else if (r > 0)
            rc = 2; /* stdout failed */
    } else if (strcmp(cmd, "swap") == 0 && argc == 6) {
        const char *expected = strcmp(argv[4], "-") == 0 ? NULL : argv[4];
        rc = read_local(argv[5], &data, &len);
        if (rc == 0 && cnx_store_swap(store, argv[3], expected, data, len) != 0)
            rc = store_error();
    } else if (strcmp(cmd, "fill") == 0 && argc == 5) {
        uint64_t count;
        if (parse_u64(argv[4], &count) != 0 || count > 1000000) {
            rc = usage();
        } else {
            for (uint64_t i = 0; i < count && rc == 0; i++) {
                char name[1100], body[32];
                snprintf(name, sizeof(name), "%s/k%06llu", argv[3],
                         (unsigned long long)i);
                snprintf(body, sizeof(body), "%llu\n", (unsigned long long)i);
                if (cnx_store_put(store, name, body, strlen(body), NULL) != 0)
                    rc = store_error();
            }
        }
    } else if (strcmp(cmd, "many") == 0 && argc >= 4) {
        size_t n = (size_t)argc - 3;
        cnx_store_get_req *reqs = calloc(n, sizeof(*reqs));
        if (reqs == NULL) {
            fprintf(stderr, "store_tool: out of memory\n");
            rc = 2;
        } else {
            for (size_t i = 0; i < n; i++)
                reqs[i].name = argv[3 + i];
            if (cnx_store_get_many(store, reqs, n, 0) != 0)
                rc = store_error();
            for (size_t i = 0; i < n; i++) {
                char digest[CNX_DIGEST_LEN];
                if (rc == 0) {
                    cnx_digest(reqs[i].data, reqs[i].len, digest);
                    printf("%s %s\n", reqs[i].name, digest);
                }
                free(reqs[i].data);
            }
            free(reqs);
        }
    } else {
        rc = usage();
    }
    free(data);
    cnx_store_free(store);
    return rc;
}
