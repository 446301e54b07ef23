/*
 * test_cseg.c - the compressed_segmentation codec against its spec.
 *
 * Hand-computed byte vectors pin the layout for tiny chunks; a naive
 * reference encoder written straight from the format description (sort,
 * unique, bsearch, linear table search) must produce the same bytes as the
 * fast one on random and structured labels of both types, odd sizes, odd
 * block sizes and several channels; every round trip must be exact. The
 * decoder must turn every truncation and random bit flip of a valid
 * encoding into CNX_ECORRUPT or correct data, never a crash (the test
 * build runs under ASan and UBSan), and name the bad block in its message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cnx/cseg.h"
#include "cnx/error.h"

/* ------------------------------------------------------------------ */
/* Helpers.                                                            */

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static size_t voxels(const int64_t size[3])
{
    return (size_t)(size[0] * size[1] * size[2]);
}

static uint64_t get_label(const void *labels, size_t es, size_t i)
{
    return es == 8 ? ((const uint64_t *)labels)[i]
                   : ((const uint32_t *)labels)[i];
}

static void set_label(void *labels, size_t es, size_t i, uint64_t v)
{
    if (es == 8) {
        ((uint64_t *)labels)[i] = v;
    } else {
        ((uint32_t *)labels)[i] = (uint32_t)v;
    }
}

static cnx_dtype dtype_of(size_t es)
{
    return es == 8 ? CNX_DT_UINT64 : CNX_DT_UINT32;
}

static uint32_t word_at(const uint8_t *p, size_t i)
{
    return (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 |
           (uint32_t)p[4 * i + 2] << 16 | (uint32_t)p[4 * i + 3] << 24;
}

static void put_word(uint8_t *p, size_t i, uint32_t v)
{
    p[4 * i] = (uint8_t)v;
    p[4 * i + 1] = (uint8_t)(v >> 8);
    p[4 * i + 2] = (uint8_t)(v >> 16);
    p[4 * i + 3] = (uint8_t)(v >> 24);
}

/* ------------------------------------------------------------------ */
/* Naive reference encoder, straight from the format description.      */

typedef struct wvec {
    uint32_t *w;
    size_t n, cap;
} wvec;

static void wvec_push(wvec *v, uint32_t x)
{
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->w = realloc(v->w, v->cap * sizeof(*v->w));
        assert_non_null(v->w);
    }
    v->w[v->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

typedef struct ref_table {
    size_t off; /* words, relative to the channel */
    size_t n;
} ref_table;

static void ref_encode(wvec *out, const void *labels, size_t es,
                       const int64_t size[3], int64_t channels,
                       const int64_t block[3])
{
    const size_t wpl = es / 4;
    int64_t grid[3], c, gx, gy, gz, x, y, z;
    size_t bvox = (size_t)(block[0] * block[1] * block[2]);
    uint64_t *vals = malloc(bvox * sizeof(*vals));
    int i;

    assert_non_null(vals);
    for (i = 0; i < 3; i++) {
        grid[i] = (size[i] + block[i] - 1) / block[i];
    }
    out->n = 0;
    for (c = 0; c < channels; c++) {
        wvec_push(out, 0);
    }
    for (c = 0; c < channels; c++) {
        const size_t base = out->n;
        const size_t nblk = (size_t)(grid[0] * grid[1] * grid[2]);
        ref_table *tabs = calloc(nblk, sizeof(*tabs));
        size_t ntabs = 0;
        size_t k;
        assert_non_null(tabs);
        out->w[c] = (uint32_t)base;
        for (k = 0; k < 2 * nblk; k++) {
            wvec_push(out, 0);
        }
        for (gz = 0; gz < grid[2]; gz++) {
            for (gy = 0; gy < grid[1]; gy++) {
                for (gx = 0; gx < grid[0]; gx++) {
                    size_t n = 0, u = 0, nvw, voff, toff = 0, t;
                    unsigned bits = 0;
                    const size_t hdr =
                        base + 2 * (size_t)(gx + grid[0] * (gy + grid[1] * gz));
                    int64_t a[3] = {block[0], block[1], block[2]};
                    int64_t lo[3] = {gx * block[0], gy * block[1],
                                     gz * block[2]};
                    int found = 0;
                    for (i = 0; i < 3; i++) {
                        if (lo[i] + a[i] > size[i]) {
                            a[i] = size[i] - lo[i];
                        }
                    }
                    for (z = 0; z < a[2]; z++) {
                        for (y = 0; y < a[1]; y++) {
                            for (x = 0; x < a[0]; x++) {
                                vals[n++] = get_label(
                                    labels, es,
                                    (size_t)(c * size[0] * size[1] * size[2] +
                                             (lo[0] + x) +
                                             size[0] *
                                                 ((lo[1] + y) +
                                                  size[1] * (lo[2] + z))));
                            }
                        }
                    }
                    qsort(vals, n, sizeof(*vals), cmp_u64);
                    for (k = 0; k < n; k++) {
                        if (k == 0 || vals[k] != vals[u - 1]) {
                            vals[u++] = vals[k];
                        }
                    }
                    if (u > 1) {
                        bits = 1;
                        while (((size_t)1 << bits) < u) {
                            bits *= 2;
                        }
                    }
                    nvw = (bits * bvox + 31) / 32;
                    voff = out->n - base;
                    for (k = 0; k < nvw; k++) {
                        wvec_push(out, 0);
                    }
                    for (z = 0; z < a[2] && bits > 0; z++) {
                        for (y = 0; y < a[1]; y++) {
                            for (x = 0; x < a[0]; x++) {
                                uint64_t v = get_label(
                                    labels, es,
                                    (size_t)(c * size[0] * size[1] * size[2] +
                                             (lo[0] + x) +
                                             size[0] *
                                                 ((lo[1] + y) +
                                                  size[1] * (lo[2] + z))));
                                const uint64_t *hit = bsearch(
                                    &v, vals, u, sizeof(*vals), cmp_u64);
                                size_t off =
                                    (size_t)(x + block[0] * (y + block[1] * z));
                                assert_non_null(hit);
                                out->w[base + voff + off * bits / 32] |=
                                    (uint32_t)(hit - vals) << (off * bits % 32);
                            }
                        }
                    }
                    for (t = 0; t < ntabs && !found; t++) {
                        if (tabs[t].n != u) {
                            continue;
                        }
                        found = 1;
                        for (k = 0; k < u && found; k++) {
                            uint64_t w = out->w[base + tabs[t].off + k * wpl];
                            if (wpl == 2) {
                                w |=
                                    (uint64_t)
                                        out->w[base + tabs[t].off + k * wpl + 1]
                                    << 32;
                            }
                            found = w == vals[k];
                        }
                        if (found) {
                            toff = tabs[t].off;
                        }
                    }
                    if (!found) {
                        toff = out->n - base;
                        for (k = 0; k < u; k++) {
                            wvec_push(out, (uint32_t)vals[k]);
                            if (wpl == 2) {
                                wvec_push(out, (uint32_t)(vals[k] >> 32));
                            }
                        }
                        tabs[ntabs].off = toff;
                        tabs[ntabs].n = u;
                        ntabs++;
                    }
                    out->w[hdr] = (uint32_t)toff | (uint32_t)bits << 24;
                    out->w[hdr + 1] = (uint32_t)voff;
                }
            }
        }
        free(tabs);
    }
    free(vals);
}

/*
 * Encode with the codec and the reference; demand identical bytes and an
 * exact round trip. Returns nothing; fails the test on any difference.
 */
static void check_codec(const void *labels, size_t es, const int64_t size[3],
                        int64_t channels, const int64_t block[3])
{
    uint8_t *enc = NULL;
    size_t len = 0;
    wvec ref = {0};
    size_t total = voxels(size) * (size_t)channels;
    void *back = malloc(total * es + 1);
    size_t i;

    assert_non_null(back);
    assert_int_equal(cnx_cseg_encode(&enc, &len, labels, dtype_of(es), size,
                                     channels, block),
                     0);
    ref_encode(&ref, labels, es, size, channels, block);
    assert_int_equal(len, ref.n * 4);
    for (i = 0; i < ref.n; i++) {
        if (word_at(enc, i) != ref.w[i]) {
            fail_msg("word %zu: codec %08x, reference %08x (size %lldx%lldx"
                     "%lld block %lldx%lldx%lld)",
                     i, word_at(enc, i), ref.w[i], (long long)size[0],
                     (long long)size[1], (long long)size[2],
                     (long long)block[0], (long long)block[1],
                     (long long)block[2]);
        }
    }
    memset(back, 0xA5, total * es);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, dtype_of(es), size, channels, block),
        0);
    assert_memory_equal(back, labels, total * es);
    free(back);
    free(enc);
    free(ref.w);
}

/*
 * Random labels with about `distinct` labels per block: each block draws
 * its labels from its own pool of that many values.
 */
static void *random_labels(size_t es, const int64_t size[3], int64_t channels,
                           const int64_t block[3], uint64_t distinct,
                           uint64_t seed)
{
    size_t total = voxels(size) * (size_t)channels;
    void *labels = malloc(total * es);
    uint64_t s = seed;
    int64_t x, y, z, c;

    assert_non_null(labels);
    for (c = 0; c < channels; c++) {
        for (z = 0; z < size[2]; z++) {
            for (y = 0; y < size[1]; y++) {
                for (x = 0; x < size[0]; x++) {
                    uint64_t blk = (uint64_t)(x / block[0]) * 73856093u ^
                                   (uint64_t)(y / block[1]) * 19349663u ^
                                   (uint64_t)(z / block[2]) * 83492791u;
                    uint64_t pick = rng_next(&s) % distinct;
                    uint64_t v = (blk * 1000003u + pick) * 2654435761u;
                    if (es == 8) {
                        v = v * UINT64_C(0x9E3779B97F4A7C15) + pick;
                    } else {
                        v &= 0xFFFFFFFFu;
                    }
                    set_label(
                        labels, es,
                        (size_t)(x +
                                 size[0] * (y + size[1] * (z + size[2] * c))),
                        v);
                }
            }
        }
    }
    return labels;
}

/* ------------------------------------------------------------------ */
/* Exact bytes for tiny cases.                                         */

static void expect_words(const uint8_t *enc, size_t len, const uint32_t *want,
                         size_t nwant)
{
    size_t i;

    assert_int_equal(len, nwant * 4);
    for (i = 0; i < nwant; i++) {
        if (word_at(enc, i) != want[i]) {
            fail_msg("word %zu: got %08x, want %08x", i, word_at(enc, i),
                     want[i]);
        }
    }
}

static void test_cseg__single_value_block_has_zero_bits(void **state)
{
    const int64_t size[3] = {8, 8, 8}, block[3] = {8, 8, 8};
    uint32_t labels[512];
    uint64_t labels64[512];
    /* channel offset 1; header: table at 2, 0 bits; values at 2; table */
    const uint32_t want32[] = {1, 2, 2, 42};
    const uint32_t want64[] = {1, 2, 2, 42, 0};
    uint8_t *enc = NULL;
    size_t len = 0, i;

    (void)state;
    for (i = 0; i < 512; i++) {
        labels[i] = 42;
        labels64[i] = 42;
    }
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    expect_words(enc, len, want32, 4);
    free(enc);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels64, CNX_DT_UINT64, size, 1, block),
        0);
    expect_words(enc, len, want64, 5);
    free(enc);
}

static void test_cseg__two_voxel_chunk_packs_a_full_block(void **state)
{
    /* 2x1x1 chunk {5, 3}, block 8^3: table [3, 5], one bit per voxel, 16
     * words of values for the whole 512-voxel block; voxel 0 -> index 1. */
    const int64_t size[3] = {2, 1, 1}, block[3] = {8, 8, 8};
    const uint32_t labels[2] = {5, 3};
    uint32_t want[21] = {1, 18u | 1u << 24, 2, 1};
    uint32_t back[2];
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    want[19] = 3;
    want[20] = 5;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    expect_words(enc, len, want, 21);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT32, size, 1, block), 0);
    assert_int_equal(back[0], 5);
    assert_int_equal(back[1], 3);
    free(enc);
}

static void test_cseg__identical_table_is_reused(void **state)
{
    /* 16x8x8, two blocks with table [7, 9]: the second block's header
     * points at the first block's table, which is not written again. */
    const int64_t size[3] = {16, 8, 8}, block[3] = {8, 8, 8};
    uint32_t labels[16 * 8 * 8];
    uint32_t want[39] = {0};
    uint8_t *enc = NULL;
    size_t len = 0, i;

    (void)state;
    for (i = 0; i < 16 * 8 * 8; i++) {
        labels[i] = i % 16 < 8 ? 9 : 7;
    }
    labels[0] = 7; /* block 0: index 0 at voxel 0, else 1 */
    labels[8] = 9; /* block 1: index 1 at voxel 0, else 0 */
    want[0] = 1;
    want[1] = 20u | 1u << 24; /* block 0: table at 20 */
    want[2] = 4;              /* values at 4 */
    want[3] = 20u | 1u << 24; /* block 1: the same table */
    want[4] = 22;             /* values right after that table */
    want[5] = 0xFFFFFFFEu;
    for (i = 6; i < 21; i++) {
        want[i] = 0xFFFFFFFFu;
    }
    want[21] = 7;
    want[22] = 9;
    want[23] = 1;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    expect_words(enc, len, want, 39);
    free(enc);
}

static void test_cseg__uint64_table_is_low_word_then_high_word(void **state)
{
    /* 1x1x2 chunk {0x1_00000002, 1}: table [1, 0x1_00000002] written as
     * 1, 0, 2, 1; voxel (0,0,1) is block offset 64 -> word 2, bit 0. */
    const int64_t size[3] = {1, 1, 2}, block[3] = {8, 8, 8};
    const uint64_t labels[2] = {UINT64_C(0x100000002), 1};
    uint32_t want[23] = {1, 18u | 1u << 24, 2, 1};
    uint64_t back[2];
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    want[19] = 1;
    want[20] = 0;
    want[21] = 2;
    want[22] = 1;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT64, size, 1, block), 0);
    expect_words(enc, len, want, 23);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT64, size, 1, block), 0);
    assert_true(back[0] == UINT64_C(0x100000002));
    assert_true(back[1] == 1);
    free(enc);
}

static void test_cseg__three_labels_use_two_bits(void **state)
{
    /* 4x1x1 chunk {30, 10, 20, 30} with block 4x1x1: table [10, 20, 30],
     * indices 2, 0, 1, 2 at two bits: 0b10_01_00_10 = 0x92. */
    const int64_t size[3] = {4, 1, 1}, block[3] = {4, 1, 1};
    const uint32_t labels[4] = {30, 10, 20, 30};
    const uint32_t want[] = {1, 3u | 2u << 24, 2, 0x92, 10, 20, 30};
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    expect_words(enc, len, want, 7);
    free(enc);
}

static void
test_cseg__two_channels_have_their_own_offsets_and_tables(void **state)
{
    /* 1x1x1, two channels {4}, {4}: offsets 2 and 5; each channel writes
     * its own table (re-use is per channel). */
    const int64_t size[3] = {1, 1, 1}, block[3] = {8, 8, 8};
    const uint32_t labels[2] = {4, 4};
    const uint32_t want[] = {2, 5, 2, 2, 4, 2, 2, 4};
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 2, block), 0);
    expect_words(enc, len, want, 8);
    free(enc);
}

/* ------------------------------------------------------------------ */
/* Against the reference encoder.                                      */

static void
test_cseg__random_labels_match_reference_and_round_trip(void **state)
{
    const uint64_t counts[] = {1, 2, 3, 5, 17, 300, 512, 100000};
    const int64_t size[3] = {24, 16, 17}, block[3] = {8, 8, 8};
    size_t es, k;

    (void)state;
    for (es = 4; es <= 8; es += 4) {
        for (k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            void *labels =
                random_labels(es, size, 1, block, counts[k], 1000 + k + es);
            check_codec(labels, es, size, 1, block);
            free(labels);
        }
    }
}

static void test_cseg__odd_sizes_and_block_sizes_match_reference(void **state)
{
    const int64_t sizes[][3] = {{13, 7, 20}, {1, 1, 1},  {9, 1, 3},
                                {8, 8, 8},   {17, 9, 8}, {5, 33, 2}};
    const int64_t blocks[][3] = {{8, 8, 8},  {4, 4, 4},   {8, 4, 2},
                                 {3, 5, 7},  {1, 1, 1},   {16, 16, 16},
                                 {2, 1, 32}, {64, 64, 64}};
    const uint64_t counts[] = {1, 2, 5, 40};
    size_t i, j, k, es;

    (void)state;
    for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (j = 0; j < sizeof(blocks) / sizeof(blocks[0]); j++) {
            for (k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                for (es = 4; es <= 8; es += 4) {
                    void *labels =
                        random_labels(es, sizes[i], 1, blocks[j], counts[k],
                                      i * 100 + j * 10 + k);
                    check_codec(labels, es, sizes[i], 1, blocks[j]);
                    free(labels);
                }
            }
        }
    }
}

static void test_cseg__structured_labels_match_reference(void **state)
{
    const int64_t size[3] = {40, 37, 29}, block[3] = {8, 8, 8};
    const size_t n = 40 * 37 * 29;
    uint64_t *slabs = malloc(n * sizeof(*slabs));
    uint64_t *balls = malloc(n * sizeof(*balls));
    uint32_t *balls32 = malloc(n * sizeof(*balls32));
    int64_t x, y, z;

    (void)state;
    assert_non_null(slabs);
    assert_non_null(balls);
    assert_non_null(balls32);
    for (z = 0; z < size[2]; z++) {
        for (y = 0; y < size[1]; y++) {
            for (x = 0; x < size[0]; x++) {
                size_t i = (size_t)(x + size[0] * (y + size[1] * z));
                int64_t dx = x - 20, dy = y - 18, dz = z - 14;
                int64_t r2 = dx * dx + dy * dy + dz * dz;
                slabs[i] = UINT64_C(0xABCDEF0000000000) + (uint64_t)(z / 3);
                /* nested shells around a centre, background 0 */
                balls[i] = r2 < 36    ? 3
                           : r2 < 100 ? 1000000007
                           : r2 < 196 ? 2
                                      : 0;
                balls32[i] = (uint32_t)balls[i];
            }
        }
    }
    check_codec(slabs, 8, size, 1, block);
    check_codec(balls, 8, size, 1, block);
    check_codec(balls32, 4, size, 1, block);
    free(slabs);
    free(balls);
    free(balls32);
}

static void test_cseg__multiple_channels_match_reference(void **state)
{
    const int64_t size[3] = {13, 7, 20}, block[3] = {8, 8, 8};
    size_t es;

    (void)state;
    for (es = 4; es <= 8; es += 4) {
        void *labels = random_labels(es, size, 3, block, 3, 77 + es);
        check_codec(labels, es, size, 3, block);
        free(labels);
    }
}

static void test_cseg__many_repeated_tables_are_shared(void **state)
{
    /* 64^3 with blocks alternating between two label pairs: only two
     * tables may be written, whatever the hash does. */
    const int64_t size[3] = {64, 64, 64}, block[3] = {8, 8, 8};
    const size_t n = 64 * 64 * 64;
    uint64_t *labels = malloc(n * sizeof(*labels));
    uint8_t *enc = NULL;
    size_t len = 0, i;

    (void)state;
    assert_non_null(labels);
    for (i = 0; i < n; i++) {
        size_t x = i % 64, y = i / 64 % 64, z = i / 4096;
        size_t b = x / 8 + y / 8 + z / 8;
        labels[i] = (b % 2 ? 100 : 200) + (x + y + z) % 2;
    }
    check_codec(labels, 8, size, 1, block);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT64, size, 1, block), 0);
    /* 1 + headers + values (16 words a block) + two 2-entry tables */
    assert_int_equal(len / 4, 1 + 2 * 512 + 16 * 512 + 2 * 4);
    free(enc);
    free(labels);
}

static void test_cseg__output_is_deterministic(void **state)
{
    const int64_t size[3] = {33, 20, 19}, block[3] = {8, 8, 8};
    const size_t n = 33 * 20 * 19;
    void *labels = random_labels(8, size, 1, block, 9, 5);
    uint64_t *copy = malloc(n * sizeof(*copy) + 64);
    uint8_t *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;

    (void)state;
    assert_non_null(copy);
    /* Same values at another address must give the same bytes. */
    memcpy(copy + 3, labels, n * sizeof(*copy));
    assert_int_equal(
        cnx_cseg_encode(&a, &la, labels, CNX_DT_UINT64, size, 1, block), 0);
    assert_int_equal(
        cnx_cseg_encode(&b, &lb, copy + 3, CNX_DT_UINT64, size, 1, block), 0);
    assert_int_equal(la, lb);
    assert_memory_equal(a, b, la);
    free(a);
    free(b);
    free(copy);
    free(labels);
}

/* ------------------------------------------------------------------ */
/* Decoder robustness.                                                 */

/* Decode every prefix of enc (exact-size copies, so that ASan sees any
 * over-read): each must fail with CNX_ECORRUPT or give labels back. */
static void check_truncations(const uint8_t *enc, size_t len,
                              const void *labels, size_t es,
                              const int64_t size[3], int64_t channels,
                              const int64_t block[3])
{
    const size_t bytes = voxels(size) * (size_t)channels * es;
    void *back = malloc(bytes);
    size_t cut;

    assert_non_null(back);
    for (cut = 0; cut < len; cut++) {
        uint8_t *part = malloc(cut ? cut : 1);
        int rc;
        assert_non_null(part);
        memcpy(part, enc, cut);
        rc = cnx_cseg_decode(back, part, cut, dtype_of(es), size, channels,
                             block);
        if (rc == 0) {
            assert_memory_equal(back, labels, bytes);
        } else {
            assert_int_equal(rc, CNX_ECORRUPT);
            assert_true(strlen(cnx_error_last()->message) > 0);
        }
        free(part);
    }
    free(back);
}

static void
test_cseg__every_truncation_fails_cleanly_or_decodes_equal(void **state)
{
    const int64_t size[3] = {13, 7, 20}, block[3] = {8, 8, 8};
    const int64_t usize[3] = {24, 8, 16};
    const uint64_t counts[] = {1, 2, 4, 300};
    size_t es, k;

    (void)state;
    for (es = 4; es <= 8; es += 4) {
        for (k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            void *labels =
                random_labels(es, size, 2, block, counts[k], 11 + es + k);
            uint8_t *enc = NULL;
            size_t len = 0;
            assert_int_equal(cnx_cseg_encode(&enc, &len, labels, dtype_of(es),
                                             size, 2, block),
                             0);
            check_truncations(enc, len, labels, es, size, 2, block);
            free(enc);
            free(labels);
        }
        {
            /* Single-label blocks, each with its own table: cuts land in
             * and right before the last tables. */
            void *labels = malloc(24 * 8 * 16 * es);
            uint8_t *enc = NULL;
            size_t len = 0, i;
            assert_non_null(labels);
            for (i = 0; i < 24 * 8 * 16; i++) {
                set_label(labels, es, i,
                          (i % 24 / 8 + 3 * (i / (24 * 8 * 8))) *
                              UINT64_C(0x100000001));
            }
            assert_int_equal(cnx_cseg_encode(&enc, &len, labels, dtype_of(es),
                                             usize, 1, block),
                             0);
            check_truncations(enc, len, labels, es, usize, 1, block);
            free(enc);
            free(labels);
        }
    }
}

static void test_cseg__random_bit_flips_never_crash(void **state)
{
    const int64_t size[3] = {13, 7, 20}, block[3] = {8, 8, 8};
    const size_t n = 13 * 7 * 20;
    uint64_t s = 99;
    size_t es;
    int trial;

    (void)state;
    for (es = 4; es <= 8; es += 4) {
        void *labels = random_labels(es, size, 1, block, 5, 3 + es);
        void *back = malloc(n * es);
        uint8_t *enc = NULL;
        size_t len = 0;
        int errors = 0;
        assert_non_null(back);
        assert_int_equal(
            cnx_cseg_encode(&enc, &len, labels, dtype_of(es), size, 1, block),
            0);
        for (trial = 0; trial < 3000; trial++) {
            uint8_t *bad = malloc(len);
            int flips = 1 + (int)(rng_next(&s) % 4), f, rc;
            assert_non_null(bad);
            memcpy(bad, enc, len);
            for (f = 0; f < flips; f++) {
                uint64_t bit = rng_next(&s) % (len * 8);
                bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            }
            rc = cnx_cseg_decode(back, bad, len, dtype_of(es), size, 1, block);
            assert_true(rc == 0 || rc == CNX_ECORRUPT);
            errors += rc != 0;
            free(bad);
        }
        /* Header flips are common enough that some must be caught. */
        assert_true(errors > 0);
        free(enc);
        free(back);
        free(labels);
    }
}

/* A 3x1x2 grid of single-label blocks, one channel: headers at words
 * 1..12, tables at 13.. */
static uint8_t *six_block_encoding(size_t *len, uint32_t *labels,
                                   int64_t size[3], int64_t block[3])
{
    uint8_t *enc = NULL;
    size_t i;

    size[0] = 24;
    size[1] = 8;
    size[2] = 16;
    block[0] = block[1] = block[2] = 8;
    for (i = 0; i < 24 * 8 * 16; i++) {
        labels[i] = (uint32_t)(i % 24 / 8 + 3 * (i / (24 * 8 * 8)));
    }
    assert_int_equal(
        cnx_cseg_encode(&enc, len, labels, CNX_DT_UINT32, size, 1, block), 0);
    return enc;
}

static void test_cseg__bad_table_offset_names_the_block(void **state)
{
    static uint32_t labels[24 * 8 * 16], back[24 * 8 * 16];
    int64_t size[3], block[3];
    size_t len;
    uint8_t *enc = six_block_encoding(&len, labels, size, block);
    const cnx_error *err;

    (void)state;
    /* block (2,0,1) is block index 5: header words 1 + 10, 1 + 11 */
    put_word(enc, 11, 9123);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT32, size, 1, block),
        CNX_ECORRUPT);
    err = cnx_error_last();
    assert_int_equal(err->code, CNX_ECORRUPT);
    assert_false(err->retriable);
    assert_non_null(strstr(err->message, "block (2,0,1)"));
    assert_non_null(strstr(err->message, "table offset 9123 beyond end"));
    free(enc);
}

static void test_cseg__bad_bit_width_is_corrupt(void **state)
{
    static uint32_t labels[24 * 8 * 16], back[24 * 8 * 16];
    int64_t size[3], block[3];
    size_t len;
    uint8_t *enc = six_block_encoding(&len, labels, size, block);
    const unsigned widths[] = {3, 5, 7, 12, 31, 33, 64, 255};
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
        uint8_t *bad = malloc(len);
        assert_non_null(bad);
        memcpy(bad, enc, len);
        put_word(bad, 3, (word_at(bad, 3) & 0xFFFFFFu) | widths[i] << 24);
        assert_int_equal(
            cnx_cseg_decode(back, bad, len, CNX_DT_UINT32, size, 1, block),
            CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "block (1,0,0)"));
        assert_non_null(strstr(cnx_error_last()->message, "bit width"));
        free(bad);
    }
    free(enc);
}

static void test_cseg__index_beyond_table_is_corrupt(void **state)
{
    /* One 4x1x1 block {1, 2, 1, 2}: table [1, 2] is the last two words.
     * Pointing the table at its last entry leaves index 1 outside. */
    const int64_t size[3] = {4, 1, 1}, block[3] = {4, 1, 1};
    const uint32_t labels[4] = {1, 2, 1, 2};
    uint32_t back[4];
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    assert_int_equal(len, 6 * 4); /* 1 + 2 + 1 value word + 2 table */
    put_word(enc, 1, 4u | 1u << 24);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT32, size, 1, block),
        CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "block (0,0,0)"));
    assert_non_null(strstr(cnx_error_last()->message, "table index 1"));
    free(enc);
}

static void test_cseg__values_beyond_end_are_corrupt(void **state)
{
    const int64_t size[3] = {4, 1, 1}, block[3] = {4, 1, 1};
    const uint32_t labels[4] = {1, 2, 1, 2};
    uint32_t back[4];
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block), 0);
    put_word(enc, 2, 5); /* values at the channel's last word + 1 */
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT32, size, 1, block),
        CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "encoded value"));
    put_word(enc, 2, 0xFFFFFFFFu);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len, CNX_DT_UINT32, size, 1, block),
        CNX_ECORRUPT);
    free(enc);
}

static void test_cseg__bad_channel_offsets_are_corrupt(void **state)
{
    const int64_t size[3] = {4, 1, 1}, block[3] = {4, 1, 1};
    const uint32_t labels[8] = {1, 2, 1, 2, 3, 3, 3, 3};
    const uint32_t offsets[] = {0, 1, 1000, 0xFFFFFFFFu};
    uint32_t back[8];
    uint8_t *enc = NULL;
    size_t len = 0, i;

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 2, block), 0);
    for (i = 0; i < sizeof(offsets) / sizeof(offsets[0]); i++) {
        uint8_t *bad = malloc(len);
        assert_non_null(bad);
        memcpy(bad, enc, len);
        put_word(bad, 1, offsets[i]);
        assert_int_equal(
            cnx_cseg_decode(back, bad, len, CNX_DT_UINT32, size, 2, block),
            CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "channel 1"));
        free(bad);
    }
    /* Too short for the offset words themselves. */
    assert_int_equal(
        cnx_cseg_decode(back, enc, 4, CNX_DT_UINT32, size, 2, block),
        CNX_ECORRUPT);
    assert_int_equal(
        cnx_cseg_decode(back, enc, 0, CNX_DT_UINT32, size, 2, block),
        CNX_ECORRUPT);
    assert_int_equal(
        cnx_cseg_decode(back, enc, len - 1, CNX_DT_UINT32, size, 2, block),
        CNX_ECORRUPT);
    free(enc);
}

static void test_cseg__decoder_accepts_other_valid_layouts(void **state)
{
    /* Tables first, values after, and a table shared by two blocks that
     * are not neighbours: the format allows any placement. 2x1x1 blocks
     * of 2x1x1 voxels in a 4x1x1 chunk: {6, 8}, {8, 6}. */
    const int64_t size[3] = {4, 1, 1}, block[3] = {2, 1, 1};
    const uint32_t words[] = {
        1, /* channel 0 at word 1 */
        4u | 1u << 24,
        6, /* block 0: table at 4, values at 6 */
        4u | 1u << 24,
        7, /* block 1: same table, values at 7 */
        6,
        8,   /* table [6, 8] */
        0x2, /* block 0: indices 0, 1 */
        0x1, /* block 1: indices 1, 0 */
    };
    uint8_t buf[sizeof(words)];
    uint32_t back[4];
    size_t i;

    (void)state;
    for (i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        put_word(buf, i, words[i]);
    }
    assert_int_equal(
        cnx_cseg_decode(back, buf, sizeof(buf), CNX_DT_UINT32, size, 1, block),
        0);
    assert_int_equal(back[0], 6);
    assert_int_equal(back[1], 8);
    assert_int_equal(back[2], 8);
    assert_int_equal(back[3], 6);
}

/* ------------------------------------------------------------------ */
/* Arguments and limits.                                               */

static void test_cseg__bad_arguments_are_einval(void **state)
{
    const int64_t size[3] = {4, 4, 4}, block[3] = {8, 8, 8};
    const int64_t zero[3] = {4, 0, 4}, neg[3] = {-1, 4, 4};
    const int64_t huge_block[3] = {1024, 1024, 1024};
    uint32_t labels[64] = {0};
    uint8_t *enc = NULL;
    size_t len = 0;
    const uint8_t data[16] = {1};

    (void)state;
    assert_int_equal(
        cnx_cseg_encode(NULL, &len, labels, CNX_DT_UINT32, size, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, NULL, labels, CNX_DT_UINT32, size, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, NULL, CNX_DT_UINT32, size, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT8, size, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_FLOAT32, size, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, zero, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, neg, 1, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 0, block),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, zero),
        CNX_EINVAL);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, huge_block),
        CNX_EINVAL);
    assert_null(enc);
    assert_int_equal(cnx_cseg_decode(NULL, data, sizeof(data), CNX_DT_UINT32,
                                     size, 1, block),
                     CNX_EINVAL);
    assert_int_equal(cnx_cseg_decode(labels, NULL, sizeof(data), CNX_DT_UINT32,
                                     size, 1, block),
                     CNX_EINVAL);
    assert_int_equal(cnx_cseg_decode(labels, data, sizeof(data), CNX_DT_UINT16,
                                     size, 1, block),
                     CNX_EINVAL);
    assert_int_equal(cnx_cseg_decode(labels, data, sizeof(data), CNX_DT_UINT32,
                                     zero, 1, block),
                     CNX_EINVAL);
    assert_int_equal(cnx_cseg_decode(labels, data, sizeof(data), CNX_DT_UINT32,
                                     size, -2, block),
                     CNX_EINVAL);
    assert_int_equal(cnx_error_last()->code, CNX_EINVAL);
}

static void test_cseg__table_offset_past_24_bits_is_erange(void **state)
{
    /* 1x1x1 blocks: 2 header words a voxel put the first table, right
     * after the headers, past 2^24 words. */
    const int64_t size[3] = {256, 256, 129}, block[3] = {1, 1, 1};
    uint32_t *labels = calloc(256 * 256 * 129, sizeof(*labels));
    uint8_t *enc = NULL;
    size_t len = 0;

    (void)state;
    assert_non_null(labels);
    assert_int_equal(
        cnx_cseg_encode(&enc, &len, labels, CNX_DT_UINT32, size, 1, block),
        CNX_ERANGE);
    assert_null(enc);
    assert_non_null(strstr(cnx_error_last()->message, "block (0,0,0)"));
    assert_non_null(strstr(cnx_error_last()->message, "24 bits"));
    free(labels);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cseg__single_value_block_has_zero_bits),
        cmocka_unit_test(test_cseg__two_voxel_chunk_packs_a_full_block),
        cmocka_unit_test(test_cseg__identical_table_is_reused),
        cmocka_unit_test(test_cseg__uint64_table_is_low_word_then_high_word),
        cmocka_unit_test(test_cseg__three_labels_use_two_bits),
        cmocka_unit_test(
            test_cseg__two_channels_have_their_own_offsets_and_tables),
        cmocka_unit_test(
            test_cseg__random_labels_match_reference_and_round_trip),
        cmocka_unit_test(test_cseg__odd_sizes_and_block_sizes_match_reference),
        cmocka_unit_test(test_cseg__structured_labels_match_reference),
        cmocka_unit_test(test_cseg__multiple_channels_match_reference),
        cmocka_unit_test(test_cseg__many_repeated_tables_are_shared),
        cmocka_unit_test(test_cseg__output_is_deterministic),
        cmocka_unit_test(
            test_cseg__every_truncation_fails_cleanly_or_decodes_equal),
        cmocka_unit_test(test_cseg__random_bit_flips_never_crash),
        cmocka_unit_test(test_cseg__bad_table_offset_names_the_block),
        cmocka_unit_test(test_cseg__bad_bit_width_is_corrupt),
        cmocka_unit_test(test_cseg__index_beyond_table_is_corrupt),
        cmocka_unit_test(test_cseg__values_beyond_end_are_corrupt),
        cmocka_unit_test(test_cseg__bad_channel_offsets_are_corrupt),
        cmocka_unit_test(test_cseg__decoder_accepts_other_valid_layouts),
        cmocka_unit_test(test_cseg__bad_arguments_are_einval),
        cmocka_unit_test(test_cseg__table_offset_past_24_bits_is_erange),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
