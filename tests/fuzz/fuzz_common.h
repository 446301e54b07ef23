/*
 * fuzz_common.h - what the libFuzzer harnesses share: quiet logs, a
 * NUL-terminated copy of the input, splitting an input into fields, and
 * the fixed Ed25519 test key that signs and verifies DSSE envelopes.
 *
 * The key is a test key made for the fuzzers only (docs/fuzzing.md), never
 * trusted anywhere else: a harness that needs a signed envelope signs the
 * fuzzer's bytes with it, so that the parser behind the signature check is
 * reached. cnx_key_load_private refuses a key file readable by others, so
 * the PEM text is written to a private temporary file, loaded and removed.
 * Header-only (static functions): each harness is one program.
 */
#ifndef CNX_FUZZ_COMMON_H
#define CNX_FUZZ_COMMON_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"

#define FUZZ_KEY_PEM                                                        \
    "-----BEGIN PRIVATE KEY-----\n"                                         \
    "MC4CAQAwBQYDK2VwBCIEIK+SKra+7pRb75r/Z/fGzJzyYpC47O8IfD3XXj+18W8W\n"    \
    "-----END PRIVATE KEY-----\n"
#define FUZZ_PUB_PEM                                                        \
    "-----BEGIN PUBLIC KEY-----\n"                                          \
    "MCowBQYDK2VwAyEAHrG4Zun6jDwQiXeUtD0qmaFz0tYbtbZ9Kp8srq+mB/I=\n"        \
    "-----END PUBLIC KEY-----\n"

/* Abort: a harness whose own setup fails must not report "no crash". */
static inline void fuzz_die(const char *what)
{
    fprintf(stderr, "fuzz: setup failed: %s: %s\n", what,
            cnx_error_last()->message);
    abort();
}

/* Logs at error level only: rejected messages would otherwise print a
 * warning per input. */
static inline void fuzz_quiet(void)
{
    cnx_log_set_level(CNX_LOG_ERROR);
}

/* A NUL-terminated copy of data (free() it). */
static inline char *fuzz_strndup(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        abort();
    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* Write text to a new private file under dir (or $TMPDIR, /tmp) with name
 * name; @return its path (free() it). */
static inline char *fuzz_write_private(const char *dir, const char *name,
                                const char *text)
{
    const char *base = dir != NULL ? dir : getenv("TMPDIR");
    char *path;
    size_t n;
    int fd;
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    n = strlen(base) + strlen(name) + 2;
    path = malloc(n);
    if (path == NULL)
        abort();
    snprintf(path, n, "%s/%s", base, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) ||
        close(fd) != 0) {
        fprintf(stderr, "fuzz: cannot write %s\n", path);
        abort();
    }
    return path;
}

/* A private temporary directory (free() the path; remove it with
 * fuzz_rmdir_files). */
static inline char *fuzz_tmpdir(void)
{
    const char *base = getenv("TMPDIR");
    char *path;
    size_t n;
    if (base == NULL || base[0] == '\0')
        base = "/tmp";
    n = strlen(base) + 32;
    path = malloc(n);
    if (path == NULL)
        abort();
    snprintf(path, n, "%s/cnx-fuzz-XXXXXX", base);
    if (mkdtemp(path) == NULL) {
        fprintf(stderr, "fuzz: mkdtemp %s failed\n", path);
        abort();
    }
    return path;
}

/* The fixed test key pair (private: signs) and its public half
 * (verifies), loaded once. */
static inline cnx_key *fuzz_key_private(void)
{
    static cnx_key *key;
    if (key == NULL) {
        char *dir = fuzz_tmpdir();
        char *path = fuzz_write_private(dir, "fuzz.key", FUZZ_KEY_PEM);
        if (cnx_key_load_private(&key, path) != 0)
            fuzz_die("test key");
        unlink(path);
        rmdir(dir);
        free(path);
        free(dir);
    }
    return key;
}

static inline cnx_key *fuzz_key_public(void)
{
    static cnx_key *key;
    if (key == NULL) {
        char *dir = fuzz_tmpdir();
        char *path = fuzz_write_private(dir, "fuzz.pub", FUZZ_PUB_PEM);
        if (cnx_key_load_public(&key, path) != 0)
            fuzz_die("test public key");
        unlink(path);
        rmdir(dir);
        free(path);
        free(dir);
    }
    return key;
}

/*
 * Split data at each byte sep into at most max fields (the last takes the
 * rest, separators included); each field NUL-terminated in one buffer
 * (free() *buf). @return the number of fields (>= 1).
 */
static inline size_t fuzz_split(const uint8_t *data, size_t size, uint8_t sep,
                         char **fields, size_t *lens, size_t max, char **buf)
{
    char *b = fuzz_strndup(data, size);
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= size && n < max; i++) {
        if (i == size || (b[i] == (char)sep && n + 1 < max)) {
            b[i] = '\0';
            fields[n] = b + start;
            lens[n] = i - start;
            n++;
            start = i + 1;
        }
    }
    *buf = b;
    return n;
}

#endif
