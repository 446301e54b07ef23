/*
 * cnx_test.h - small helpers shared by the cmocka unit tests: a fresh
 * temporary directory per test and deterministic pseudo-random numbers.
 */
#ifndef CNX_TEST_H
#define CNX_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* Make a fresh temporary directory; path must hold 64 bytes. */
static inline void cnx_test_tmpdir(char *path)
{
    snprintf(path, 64, "/tmp/cnx-test-XXXXXX");
    assert_non_null(mkdtemp(path));
}

/* Remove a directory tree made by a test. */
static inline void cnx_test_rmtree(const char *path)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* splitmix64: deterministic test data. */
static inline uint64_t cnx_test_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
