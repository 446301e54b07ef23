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
#include <unistd.h>

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

/* The path of a peer script: $CNX_SOURCE/bench/<name>, else beside the
 * bench's source file (CMake passes absolute paths). */
#define bench_peer_path(buf, n, name) bench_peer_path_(buf, n, name, __FILE__)
static inline void bench_peer_path_(char *buf, size_t n, const char *name,
                                    const char *file)
{
    const char *src = getenv("CNX_SOURCE");
    if (src != NULL && src[0] != '\0') {
        snprintf(buf, n, "%s/bench/%s", src, name);
    } else {
        const char *slash = strrchr(file, '/');
        int dlen = slash != NULL ? (int)(slash - file) : 1;
        snprintf(buf, n, "%.*s/%s", dlen, slash != NULL ? file : ".", name);
    }
}

/*
 * Ready a peer run: the interpreter ($CNX_PYTHON, else /usr/bin/python3)
 * into *py, the script's path (bench_peer_path) into peer, and a fresh
 * temporary directory into dir (a mkdtemp template, changed in place).
 * @return 0, or -1 after printing "peer   : FAILED (why)".
 */
#define bench_peer_setup(py, peer, n, name, dir)                               \
    bench_peer_setup_(py, peer, n, name, dir, __FILE__)
static inline int bench_peer_setup_(const char **py, char *peer, size_t n,
                                    const char *name, char *dir,
                                    const char *file)
{
    *py = getenv("CNX_PYTHON");
    if (*py == NULL || (*py)[0] == '\0')
        *py = "/usr/bin/python3";
    bench_peer_path_(peer, n, name, file);
    if (access(peer, R_OK) != 0 || strchr(peer, '\'') != NULL ||
        strchr(*py, '\'') != NULL) {
        printf("peer   : FAILED (%s not readable)\n", peer);
        return -1;
    }
    if (mkdtemp(dir) == NULL) {
        printf("peer   : FAILED (no temporary directory)\n");
        return -1;
    }
    return 0;
}

/* A .npy (format 1.0) of a 3-D array of s[0]*s[1]*s[2] elements of `elem`
 * bytes, x fastest, stored with shape (z, y, x); descr e.g. "|u1", "<u8". */
static inline int bench_write_npy(const char *path, const void *data,
                                  size_t elem, const char *descr,
                                  const int64_t s[3])
{
    char hdr[128];
    const size_t n = (size_t)(s[0] * s[1] * s[2]);
    int len = snprintf(hdr + 10, sizeof(hdr) - 10,
                       "{'descr': '%s', 'fortran_order': False, "
                       "'shape': (%lld, %lld, %lld), }",
                       descr, (long long)s[2], (long long)s[1],
                       (long long)s[0]);
    FILE *f;
    int ok;
    if (len < 0 || len > 100)
        return -1;
    memcpy(hdr, "\x93NUMPY\x01\x00", 8);
    while ((10 + len + 1) % 64 != 0)
        hdr[10 + len++] = ' ';
    hdr[10 + len++] = '\n';
    hdr[8] = (char)(len & 0xff);
    hdr[9] = (char)(len >> 8);
    f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    ok = fwrite(hdr, 1, (size_t)(10 + len), f) == (size_t)(10 + len);
    ok &= fwrite(data, elem, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? 0 : -1;
}

#endif
