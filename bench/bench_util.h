/*
 * bench_util.h - small helpers the benchmark programs share: medians of
 * repeated timings, and the openssl speed figure they compare SHA-256 with.
 */
#ifndef CNX_BENCH_UTIL_H
#define CNX_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
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
