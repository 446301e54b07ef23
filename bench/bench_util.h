/*
 * bench_util.h - small helpers the benchmark programs share: medians of
 * repeated timings, a seeded generator for synthetic inputs, and the
 * openssl speed figure they compare SHA-256 with.
 */
#ifndef CNX_BENCH_UTIL_H
#define CNX_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/** SplitMix64: the next value of the sequence seeded by *s. */
static inline uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/** A uniform double in [0, 1) from splitmix. */
static inline double unit(uint64_t *s)
{
    return (double)(splitmix(s) >> 11) / 9007199254740992.0;
}

/** Median of n values (sorts v in place). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/**
 * `openssl speed -evp sha256` on 16 KiB blocks, MB/s, run now on this
 * machine (0 if openssl is missing). Its "sha256" line ends with the
 * 16384-byte column, in thousands of bytes per second.
 */
static inline double bench_openssl_sha256_mbs(void)
{
    char line[1024], last[1024] = "";
    FILE *p = popen("openssl speed -evp sha256 -bytes 16384 -seconds 2 "
                    "2>/dev/null | grep -i '^sha256'",
                    "r");
    while (p != NULL && fgets(line, sizeof(line), p) != NULL)
        memcpy(last, line, sizeof(line));
    if (p != NULL)
        pclose(p);
    last[strcspn(last, "\n")] = '\0';
    const char *k = strrchr(last, ' ');
    return k ? strtod(k + 1, NULL) / 1000.0 : 0.0;
}

#endif
