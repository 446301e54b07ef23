/*
 * cseg_fixture.c - fixtures for the numpy cross-check of the
 * compressed_segmentation codec (tests/integration/cseg_numpy.sh).
 *
 *   write DIR: per volume NAME.bin (raw labels, x fastest, then y, z,
 *     channel), NAME.cseg (our encoding), NAME.json (name, dtype, size,
 *     block, channels, raw, cseg). Volumes are deterministic: random labels,
 *     slabs, spheres, Voronoi cells; both types, odd sizes and blocks.
 *   decode|encode IN DTYPE X Y Z BX BY BZ CHANNELS OUT: run our codec on IN.
 * Raw files are host order, little-endian wherever cnx builds. Exit status
 * 0, or 1 with a message on stderr. Single-threaded.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cseg.h"
#include "cnx/error.h"

typedef enum shape {
    SHAPE_RANDOM,  /* `param` labels drawn per block */
    SHAPE_SLABS,   /* z slabs three voxels thick */
    SHAPE_SPHERES, /* nested shells around the centre */
    SHAPE_VORONOI, /* cells around `param` seeds */
    SHAPE_DISTINCT /* every voxel its own label */
} shape;

typedef struct fixture {
    const char *name;
    cnx_dtype dtype;
    int64_t size[3];
    int64_t block[3];
    int64_t channels;
    shape kind;
    uint64_t param;
} fixture;

static const fixture fixtures[] = {
    {"random_d1", CNX_DT_UINT32, {13, 7, 20}, {8, 8, 8}, 1, SHAPE_RANDOM, 1},
    {"random_d2", CNX_DT_UINT64, {13, 7, 20}, {8, 8, 8}, 1, SHAPE_RANDOM, 2},
    {"random_d3", CNX_DT_UINT32, {64, 64, 64}, {8, 8, 8}, 1, SHAPE_RANDOM, 3},
    {"random_d5", CNX_DT_UINT64, {33, 17, 9}, {8, 8, 8}, 1, SHAPE_RANDOM, 5},
    {"random_d17", CNX_DT_UINT64, {40, 24, 16}, {8, 8, 8}, 1, SHAPE_RANDOM, 17},
    {"random_d300",
     CNX_DT_UINT32,
     {24, 24, 24},
     {8, 8, 8},
     1,
     SHAPE_RANDOM,
     300},
    {"random_odd_block",
     CNX_DT_UINT64,
     {13, 7, 20},
     {3, 5, 7},
     1,
     SHAPE_RANDOM,
     4},
    {"random_flat_block",
     CNX_DT_UINT32,
     {30, 20, 10},
     {16, 4, 2},
     1,
     SHAPE_RANDOM,
     6},
    {"slabs", CNX_DT_UINT64, {40, 37, 29}, {8, 8, 8}, 1, SHAPE_SLABS, 0},
    {"spheres", CNX_DT_UINT32, {40, 37, 29}, {8, 8, 8}, 1, SHAPE_SPHERES, 0},
    {"voronoi", CNX_DT_UINT64, {64, 64, 64}, {8, 8, 8}, 1, SHAPE_VORONOI, 60},
    {"channels", CNX_DT_UINT32, {13, 7, 20}, {8, 8, 8}, 3, SHAPE_RANDOM, 3},
    {"channels64", CNX_DT_UINT64, {9, 9, 9}, {4, 4, 4}, 2, SHAPE_SPHERES, 0},
    {"bits32", CNX_DT_UINT32, {64, 64, 20}, {64, 64, 20}, 1, SHAPE_DISTINCT, 0},
    {"one_voxel", CNX_DT_UINT64, {1, 1, 1}, {8, 8, 8}, 1, SHAPE_RANDOM, 1},
};

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static uint64_t label_at(const fixture *f, uint64_t *s, int64_t x, int64_t y,
                         int64_t z, int64_t c)
{
    switch (f->kind) {
    case SHAPE_RANDOM: {
        uint64_t blk = (uint64_t)(x / f->block[0]) * 73856093u ^
                       (uint64_t)(y / f->block[1]) * 19349663u ^
                       (uint64_t)(z / f->block[2]) * 83492791u ^
                       (uint64_t)c * 2654435761u;
        uint64_t pick = rng_next(s) % f->param;
        return (blk * 1000003u + pick) * UINT64_C(0x9E3779B97F4A7C15) + pick;
    }
    case SHAPE_SLABS:
        return UINT64_C(0xABCDEF0000000000) + (uint64_t)(z / 3) + (uint64_t)c;
    case SHAPE_SPHERES: {
        int64_t dx = x - f->size[0] / 2, dy = y - f->size[1] / 2;
        int64_t dz = z - f->size[2] / 2;
        int64_t r2 = dx * dx + dy * dy + dz * dz + c;
        return r2 < 36    ? 3
               : r2 < 100 ? UINT64_C(0x1000000007)
               : r2 < 196 ? 2
                          : 0;
    }
    case SHAPE_DISTINCT:
        return (uint64_t)(x + f->size[0] * (y + f->size[1] * z)) * 2654435761u +
               1;
    case SHAPE_VORONOI:
    default:
        break;
    }
    return 0;
}

static void fill_voronoi(const fixture *f, uint64_t *out)
{
    double seeds[64][3];
    uint64_t ids[64];
    uint64_t s = 4242;
    int64_t x, y, z;
    size_t k, n = f->param < 64 ? (size_t)f->param : 64;

    for (k = 0; k < n; k++) {
        seeds[k][0] = (double)(rng_next(&s) % 1000) / 1000.0 * f->size[0];
        seeds[k][1] = (double)(rng_next(&s) % 1000) / 1000.0 * f->size[1];
        seeds[k][2] = (double)(rng_next(&s) % 1000) / 1000.0 * f->size[2];
        ids[k] = rng_next(&s);
    }
    for (z = 0; z < f->size[2]; z++) {
        for (y = 0; y < f->size[1]; y++) {
            for (x = 0; x < f->size[0]; x++) {
                double best = 1e300;
                uint64_t id = 0;
                for (k = 0; k < n; k++) {
                    double dx = x - seeds[k][0], dy = y - seeds[k][1];
                    double dz = z - seeds[k][2];
                    double d = dx * dx + dy * dy + dz * dz;
                    if (d < best) {
                        best = d;
                        id = ids[k];
                    }
                }
                out[x + f->size[0] * (y + f->size[1] * z)] = id;
            }
        }
    }
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");

    if (fp == NULL) {
        fprintf(stderr, "cseg_fixture: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (fwrite(data, 1, len, fp) != len || fclose(fp) != 0) {
        fprintf(stderr, "cseg_fixture: %s: write failed\n", path);
        return -1;
    }
    return 0;
}

static int write_fixture(const char *dir, const fixture *f)
{
    const size_t es = f->dtype == CNX_DT_UINT64 ? 8 : 4;
    const size_t n = (size_t)(f->size[0] * f->size[1] * f->size[2]);
    const size_t total = n * (size_t)f->channels;
    uint64_t *v64 = calloc(total, sizeof(*v64));
    void *labels = malloc(total * es);
    uint8_t *enc = NULL;
    size_t len = 0, i;
    uint64_t s = 1;
    char path[4096], json[1024];
    int64_t x, y, z, c;
    int rc = -1;
    FILE *fp;

    for (i = 0; f->name[i] != '\0'; i++) {
        s = s * 131 + (uint8_t)f->name[i];
    }
    if (v64 == NULL || labels == NULL) {
        fprintf(stderr, "cseg_fixture: out of memory\n");
        goto done;
    }
    if (f->kind == SHAPE_VORONOI) {
        for (c = 0; c < f->channels; c++) {
            fill_voronoi(f, v64 + (size_t)c * n);
        }
    } else {
        for (c = 0; c < f->channels; c++) {
            for (z = 0; z < f->size[2]; z++) {
                for (y = 0; y < f->size[1]; y++) {
                    for (x = 0; x < f->size[0]; x++) {
                        v64[(size_t)c * n +
                            (size_t)(x + f->size[0] * (y + f->size[1] * z))] =
                            label_at(f, &s, x, y, z, c);
                    }
                }
            }
        }
    }
    /* Host order is little-endian on every machine cnx builds for, so
     * the labels the codec takes are also the raw file's bytes. */
    for (i = 0; i < total; i++) {
        if (es == 4) {
            ((uint32_t *)labels)[i] = (uint32_t)v64[i];
        } else {
            ((uint64_t *)labels)[i] = v64[i];
        }
    }
    if (cnx_cseg_encode(&enc, &len, labels, f->dtype, f->size, f->channels,
                        f->block) != 0) {
        fprintf(stderr, "cseg_fixture: %s: %s\n", f->name,
                cnx_error_last()->message);
        goto done;
    }
    snprintf(path, sizeof(path), "%s/%s.bin", dir, f->name);
    if (write_file(path, labels, total * es) != 0) {
        goto done;
    }
    snprintf(path, sizeof(path), "%s/%s.cseg", dir, f->name);
    if (write_file(path, enc, len) != 0) {
        goto done;
    }
    snprintf(json, sizeof(json),
             "{\"name\": \"%s\", \"dtype\": \"%s\", \"size\": [%lld, %lld, "
             "%lld], \"block\": [%lld, %lld, %lld], \"channels\": %lld, "
             "\"raw\": \"%s.bin\", \"cseg\": \"%s.cseg\"}\n",
             f->name, es == 8 ? "uint64" : "uint32", (long long)f->size[0],
             (long long)f->size[1], (long long)f->size[2],
             (long long)f->block[0], (long long)f->block[1],
             (long long)f->block[2], (long long)f->channels, f->name, f->name);
    snprintf(path, sizeof(path), "%s/%s.json", dir, f->name);
    fp = fopen(path, "w");
    if (fp == NULL || fputs(json, fp) == EOF || fclose(fp) != 0) {
        fprintf(stderr, "cseg_fixture: cannot write %s\n", path);
        goto done;
    }
    printf("wrote %-18s %s %lldx%lldx%lld block %lldx%lldx%lld x%lld: %zu "
           "bytes\n",
           f->name, es == 8 ? "uint64" : "uint32", (long long)f->size[0],
           (long long)f->size[1], (long long)f->size[2], (long long)f->block[0],
           (long long)f->block[1], (long long)f->block[2],
           (long long)f->channels, len);
    rc = 0;

done:
    free(v64);
    free(labels);
    free(enc);
    return rc;
}

static int parse_int(const char *s, int64_t *out)
{
    char *end = NULL;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0') {
        fprintf(stderr, "cseg_fixture: not an integer: %s\n", s);
        return -1;
    }
    *out = (int64_t)v;
    return 0;
}

/* argv: IN DTYPE X Y Z BX BY BZ CHANNELS OUT; encode or decode IN. */
static int do_codec(char **argv, int encode)
{
    int64_t size[3], block[3], channels;
    cnx_dtype dtype;
    uint8_t *data = NULL;
    void *labels = NULL;
    size_t len = 0, cap = 0, es, total;
    FILE *fp = NULL;
    int rc = 1;
    int i;

    if (strcmp(argv[1], "uint32") == 0) {
        dtype = CNX_DT_UINT32;
        es = 4;
    } else if (strcmp(argv[1], "uint64") == 0) {
        dtype = CNX_DT_UINT64;
        es = 8;
    } else {
        fprintf(stderr, "cseg_fixture: bad dtype %s\n", argv[1]);
        return 1;
    }
    for (i = 0; i < 3; i++) {
        if (parse_int(argv[2 + i], &size[i]) != 0 ||
            parse_int(argv[5 + i], &block[i]) != 0) {
            return 1;
        }
        if (size[i] < 1 || size[i] > 4096) {
            fprintf(stderr, "cseg_fixture: bad size\n");
            return 1;
        }
    }
    if (parse_int(argv[8], &channels) != 0 || channels < 1 || channels > 64) {
        fprintf(stderr, "cseg_fixture: bad channel count\n");
        return 1;
    }
    fp = fopen(argv[0], "rb");
    if (fp == NULL) {
        fprintf(stderr, "cseg_fixture: %s: %s\n", argv[0], strerror(errno));
        return 1;
    }
    for (;;) {
        size_t got;
        if (len == cap) {
            uint8_t *grown;
            cap = cap ? cap * 2 : 65536;
            grown = realloc(data, cap);
            if (grown == NULL) {
                fprintf(stderr, "cseg_fixture: out of memory\n");
                goto done;
            }
            data = grown;
        }
        got = fread(data + len, 1, cap - len, fp);
        len += got;
        if (got == 0) {
            break;
        }
    }
    total = (size_t)(size[0] * size[1] * size[2] * channels);
    if (encode) {
        uint8_t *enc = NULL;
        size_t enc_len = 0;
        if (len != total * es) {
            fprintf(stderr, "cseg_fixture: %s: %zu bytes, want %zu\n", argv[0],
                    len, total * es);
            goto done;
        }
        if (cnx_cseg_encode(&enc, &enc_len, data, dtype, size, channels,
                            block) != 0) {
            fprintf(stderr, "cseg_fixture: %s\n", cnx_error_last()->message);
            goto done;
        }
        rc = write_file(argv[9], enc, enc_len) == 0 ? 0 : 1;
        free(enc);
        goto done;
    }
    labels = malloc(total * es);
    if (labels == NULL) {
        fprintf(stderr, "cseg_fixture: out of memory\n");
        goto done;
    }
    if (cnx_cseg_decode(labels, data, len, dtype, size, channels, block) != 0) {
        fprintf(stderr, "cseg_fixture: %s\n", cnx_error_last()->message);
        goto done;
    }
    if (write_file(argv[9], labels, total * es) != 0) {
        goto done;
    }
    rc = 0;

done:
    if (fp != NULL) {
        fclose(fp);
    }
    free(data);
    free(labels);
    return rc;
}

int main(int argc, char **argv)
{
    size_t i;

    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        for (i = 0; i < sizeof(fixtures) / sizeof(fixtures[0]); i++) {
            if (write_fixture(argv[2], &fixtures[i]) != 0) {
                return 1;
            }
        }
        return 0;
    }
    if (argc == 12 && strcmp(argv[1], "decode") == 0) {
        return do_codec(argv + 2, 0);
    }
    if (argc == 12 && strcmp(argv[1], "encode") == 0) {
        return do_codec(argv + 2, 1);
    }
    fprintf(stderr, "usage: cseg_fixture write DIR\n"
                    "       cseg_fixture decode|encode IN DTYPE X Y Z BX BY "
                    "BZ CHANNELS OUT\n");
    return 2;
}
