/*
 * cseg.c - Neuroglancer compressed_segmentation encoder and decoder.
 *
 * Both directions go one slab of blocks (fixed y, z block) at a time through
 * a block-major copy, so the chunk itself is read or written row by row.
 * Encode: match each voxel against the block's few labels seen so far
 * (search, then hash, past 8), sort them, pack indices LSB-first in words
 * sized for the full block (index 0 past the chunk edge), append the table
 * unless the channel already holds an identical one. The bytes depend only
 * on the labels. Decode checks every offset, width and index before use.
 * Load: 128^3 uint64 chunks, a few labels per 8^3 block, hundreds of MVx/s.
 * Threading: reentrant; scratch is allocated per call.
 */
#include "cnx/cseg.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

/* Distinct labels searched linearly before a block switches to hashing. */
#define CSEG_SMALL 16
/* Blocks larger than this are refused: scratch is sized by the block. */
#define CSEG_MAX_BLOCK_VOXELS ((uint64_t)1 << 24)
/* Table offsets live in the low 24 bits of a header's first word. */
#define CSEG_MAX_TABLE_OFFSET (((uint64_t)1 << 24) - 1)

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define CSEG_LE32(v) __builtin_bswap32(v)
#else
#define CSEG_LE32(v) (v)
#endif

#define CSEG_INLINE static inline __attribute__((always_inline))

/* Read little-endian word i of an unaligned byte buffer. */
CSEG_INLINE uint32_t cseg_rd32(const uint8_t *p, uint64_t i)
{
    uint32_t v;
    memcpy(&v, p + 4 * i, sizeof(v));
    return CSEG_LE32(v);
}

/* ------------------------------------------------------------------ */
/* Argument checks shared by both directions.                          */

typedef struct cseg_geom {
    size_t es;        /* bytes per label: 4 or 8 */
    size_t wpl;       /* words per label: 1 or 2 */
    int64_t size[3];  /* chunk extent */
    int64_t bs[3];    /* block extent */
    int64_t grid[3];  /* blocks per axis */
    uint64_t nblocks; /* blocks per channel */
    uint64_t bvox;    /* voxels per full block */
    uint64_t cvox;    /* voxels per channel */
    uint64_t maxd;    /* most distinct labels a block can hold */
} cseg_geom;

static int cseg_geom_init(cseg_geom *g, cnx_dtype dtype, const int64_t size[3],
                          int64_t channels, const int64_t block[3])
{
    uint64_t total;
    uint64_t amax = 1;
    int i;

    if (dtype == CNX_DT_UINT32) {
        g->es = 4;
    } else if (dtype == CNX_DT_UINT64) {
        g->es = 8;
    } else {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: data type %d is not "
                             "uint32 or uint64",
                             (int)dtype);
    }
    g->wpl = g->es / 4;
    if (channels < 1 || channels > UINT32_MAX) {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: %lld channels",
                             (long long)channels);
    }
    g->nblocks = 1;
    g->bvox = 1;
    g->cvox = 1;
    for (i = 0; i < 3; i++) {
        if (size[i] < 1 || block[i] < 1 || size[i] > INT32_MAX ||
            block[i] > INT32_MAX) {
            return cnx_error_set(CNX_EINVAL, 0,
                                 "compressed_segmentation: size %lldx%lldx"
                                 "%lld, block %lldx%lldx%lld",
                                 (long long)size[0], (long long)size[1],
                                 (long long)size[2], (long long)block[0],
                                 (long long)block[1], (long long)block[2]);
        }
        g->size[i] = size[i];
        g->bs[i] = block[i];
        g->grid[i] = (size[i] - 1) / block[i] + 1;
        if (__builtin_mul_overflow(g->nblocks, (uint64_t)g->grid[i],
                                   &g->nblocks) ||
            __builtin_mul_overflow(g->bvox, (uint64_t)block[i], &g->bvox) ||
            __builtin_mul_overflow(g->cvox, (uint64_t)size[i], &g->cvox)) {
            return cnx_error_set(CNX_EINVAL, 0,
                                 "compressed_segmentation: size overflows");
        }
        amax *= (uint64_t)(size[i] < block[i] ? size[i] : block[i]);
    }
    if (g->bvox > CSEG_MAX_BLOCK_VOXELS) {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: block %lldx%lldx%lld "
                             "over %llu voxels",
                             (long long)block[0], (long long)block[1],
                             (long long)block[2],
                             (unsigned long long)CSEG_MAX_BLOCK_VOXELS);
    }
    g->maxd = amax;
    if (__builtin_mul_overflow(g->cvox, (uint64_t)channels, &total) ||
        __builtin_mul_overflow(total, (uint64_t)g->es, &total) ||
        total > SIZE_MAX / 2) {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: chunk too large");
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Encoder.                                                            */

typedef struct cseg_pair {
    uint64_t v; /* label */
    uint32_t p; /* its provisional (first-seen) index */
} cseg_pair;

typedef struct cseg_tab_slot {
    uint64_t hash;
    uint32_t off;    /* table offset in words, relative to the channel */
    uint32_t nwords; /* table length in words; 0 marks an empty slot */
} cseg_tab_slot;

typedef struct cseg_enc {
    cseg_geom g;
    /* One slab of blocks (fixed gy, gz) copied block-major: block gx at
     * element gx * bvox, each with the full block's strides. Reading the
     * chunk row by row keeps the memory access sequential. */
    void *brick;
    uint32_t *prov;  /* bvox: provisional index per voxel, block order */
    uint64_t *vals;  /* maxd: distinct labels in first-seen order */
    uint32_t *remap; /* maxd: provisional index -> rank in sorted table */
    cseg_pair *pairs;
    uint32_t *tw;    /* maxd * wpl: the current block's table words */
    uint32_t *slots; /* per-block label hash: provisional index + 1 */
    unsigned slot_shift;
    size_t slot_mask;
    /* output words and their growth */
    uint32_t *out;
    size_t len;
    size_t cap;
    /* tables written in this channel */
    cseg_tab_slot *tabs;
    size_t tab_cap;
    size_t tab_count;
} cseg_enc;

static int cseg_enc_reserve(cseg_enc *e, uint64_t extra)
{
    size_t need;
    size_t cap;
    uint32_t *w;

    if (extra <= e->cap - e->len) {
        return 0;
    }
    if (extra > SIZE_MAX / 8 - e->len) {
        return cnx_error_set(CNX_ENOMEM, 0,
                             "compressed_segmentation: output too large");
    }
    need = e->len + (size_t)extra;
    cap = e->cap ? e->cap : 1024;
    while (cap < need) {
        cap *= 2;
    }
    w = realloc(e->out, cap * sizeof(*w));
    if (w == NULL) {
        return cnx_error_set(CNX_ENOMEM, 0,
                             "compressed_segmentation: out of memory "
                             "(%zu words)",
                             cap);
    }
    e->out = w;
    e->cap = cap;
    return 0;
}

/* Hash of a label for the per-block set (Fibonacci hashing). */
CSEG_INLINE size_t cseg_label_slot(const cseg_enc *e, uint64_t v)
{
    return (size_t)((v * UINT64_C(0x9E3779B97F4A7C15)) >> e->slot_shift);
}

/* Insert label v (not yet present) with provisional index p. */
static void cseg_slots_put(cseg_enc *e, uint64_t v, uint32_t p)
{
    size_t i = cseg_label_slot(e, v);

    while (e->slots[i] != 0) {
        i = (i + 1) & e->slot_mask;
    }
    e->slots[i] = p + 1;
}

/* Index the first n labels of e->vals in the per-block hash. */
static void cseg_slots_build(cseg_enc *e, uint32_t n)
{
    uint32_t i;

    memset(e->slots, 0, (e->slot_mask + 1) * sizeof(*e->slots));
    for (i = 0; i < n; i++) {
        cseg_slots_put(e, e->vals[i], i);
    }
}

/*
 * Slow path of the gather: v is not the last label seen. Returns its
 * provisional index, adding it to the block's set when new.
 */
static uint32_t cseg_lookup_slow(cseg_enc *e, uint64_t v, uint32_t *n)
{
    uint32_t i;
    size_t s;

    if (*n <= CSEG_SMALL) {
        for (i = 0; i < *n; i++) {
            if (e->vals[i] == v) {
                return i;
            }
        }
        e->vals[*n] = v;
        (*n)++;
        if (*n > CSEG_SMALL) {
            /* Now too many for a linear scan: index them all. */
            cseg_slots_build(e, *n);
        }
        return *n - 1;
    }
    s = cseg_label_slot(e, v);
    while (e->slots[s] != 0) {
        if (e->vals[e->slots[s] - 1] == v) {
            return e->slots[s] - 1;
        }
        s = (s + 1) & e->slot_mask;
    }
    e->vals[*n] = v;
    e->slots[s] = *n + 1;
    (*n)++;
    return *n - 1;
}

/* Index among the k candidates r[] of label v as a one-hot mask, 0 if
 * none; unused candidates repeat r[0], so the lowest set bit is the one. */
CSEG_INLINE uint32_t cseg_match(uint64_t v, const uint64_t *r, unsigned k)
{
    uint32_t m = 0;
    unsigned j;

#pragma GCC unroll 8
    for (j = 0; j < k; j++) {
        m |= (uint32_t)(v == r[j]) << j;
    }
    return m;
}

/*
 * Assign provisional indices to voxels *pos.. of a block (nv labels, block
 * order) while every label is among the k candidates r[]. Runs of one
 * label, the common case, cost a compare each; once labels change more
 * often than one voxel in four (*changes counts them over the block) a
 * mispredicted branch per change would cost more than matching every
 * voxel, so the rest of the block is matched without branches.
 * @return 1 when stopped at a label not among r[] (*pos says where), 0 at
 * the end of the block.
 */
CSEG_INLINE int cseg_scan_k(uint32_t *prov, const void *blk, size_t es,
                            size_t nv, const uint64_t *r, unsigned k,
                            size_t *pos, size_t *changes)
{
    const uint32_t *b32 = blk;
    const uint64_t *b64 = blk;
    size_t i = *pos;
    uint64_t last = es == 8 ? b64[i] : b32[i];
    uint32_t lastp = cseg_match(last, r, k);

    if (lastp == 0) {
        return 1;
    }
    lastp = (uint32_t)__builtin_ctz(lastp);
    if (*changes * 4 <= i + 64) {
        for (; i < nv; i++) {
            const uint64_t v = es == 8 ? b64[i] : b32[i];
            if (v != last) {
                const uint32_t m = cseg_match(v, r, k);
                if (m == 0) {
                    *pos = i;
                    return 1;
                }
                lastp = (uint32_t)__builtin_ctz(m);
                last = v;
                (*changes)++;
                if (*changes * 4 > i + 64) {
                    break;
                }
            }
            prov[i] = lastp;
        }
    }
    for (; i < nv; i++) {
        const uint64_t v = es == 8 ? b64[i] : b32[i];
        const uint32_t m = cseg_match(v, r, k);
        if (m == 0) {
            *pos = i;
            return 1;
        }
        prov[i] = (uint32_t)__builtin_ctz(m);
    }
    return 0;
}

/* The same for blocks with many labels: last-label shortcut, then a
 * linear or hashed search. */
CSEG_INLINE void cseg_scan_many(cseg_enc *e, const void *blk, size_t es,
                                size_t nv, size_t pos, uint32_t *n)
{
    const uint32_t *b32 = blk;
    const uint64_t *b64 = blk;
    uint64_t last = e->vals[0];
    uint32_t lastp = 0;
    size_t i;

    if (*n > CSEG_SMALL) {
        cseg_slots_build(e, *n);
    }
    for (i = pos; i < nv; i++) {
        const uint64_t v = es == 8 ? b64[i] : b32[i];
        if (v != last) {
            lastp = cseg_lookup_slow(e, v, n);
            last = v;
        }
        e->prov[i] = lastp;
    }
}

/*
 * Gather the distinct labels of one bricked block (nv labels, padding
 * already set to its first label) into e->vals, in first-seen order, and
 * unless it holds a single label the provisional index of every voxel into
 * e->prov. es is a constant at each call site.
 * @return the number of distinct labels.
 */
CSEG_INLINE uint32_t cseg_gather(cseg_enc *e, const void *blk, size_t es,
                                 size_t nv)
{
    const uint32_t *b32 = blk;
    const uint64_t *b64 = blk;
    const uint64_t first = es == 8 ? b64[0] : b32[0];
    uint64_t r[8];
    uint64_t diff = 0;
    uint32_t n = 1;
    size_t pos = 0;
    size_t changes = 0;
    size_t i, end;
    unsigned j;

    e->vals[0] = first;
    /* Many blocks of a segmentation hold one label: test that first, 64
     * voxels at a time, without a branch per voxel. */
    for (i = 0; i < nv && diff == 0; i = end) {
        end = nv - i > 64 ? i + 64 : nv;
        for (; i + 4 <= end; i += 4) {
            if (es == 8) {
                diff |= (b64[i] ^ first) | (b64[i + 1] ^ first) |
                        (b64[i + 2] ^ first) | (b64[i + 3] ^ first);
            } else {
                diff |= (b32[i] ^ first) | (b32[i + 1] ^ first) |
                        (b32[i + 2] ^ first) | (b32[i + 3] ^ first);
            }
        }
        for (; i < end; i++) {
            diff |= (es == 8 ? b64[i] : b32[i]) ^ first;
        }
    }
    if (diff == 0) {
        return 1;
    }
    for (;;) {
        int stopped;
        for (j = 0; j < 8; j++) {
            r[j] = j < n ? e->vals[j] : first;
        }
        if (n <= 2) {
            stopped = cseg_scan_k(e->prov, blk, es, nv, r, 2, &pos, &changes);
        } else if (n <= 4) {
            stopped = cseg_scan_k(e->prov, blk, es, nv, r, 4, &pos, &changes);
        } else if (n <= 8) {
            stopped = cseg_scan_k(e->prov, blk, es, nv, r, 8, &pos, &changes);
        } else {
            cseg_scan_many(e, blk, es, nv, pos, &n);
            return n;
        }
        if (!stopped) {
            return n;
        }
        /* A label not seen before: every seen one was a candidate. */
        e->vals[n] = es == 8 ? b64[pos] : b32[pos];
        n++;
    }
}

/*
 * Copy slab (gy, gz) of the channel starting at element chan0 into
 * e->brick. Voxels of a block past the chunk edge get the block's first
 * label, which adds no label to the block.
 */
static void cseg_brick_fill(cseg_enc *e, const void *labels, size_t chan0,
                            int64_t gy, int64_t gz)
{
    const cseg_geom *g = &e->g;
    const size_t es = g->es;
    const int64_t bx = g->bs[0], by = g->bs[1], bz = g->bs[2];
    const int64_t ay = g->size[1] - gy * by < by ? g->size[1] - gy * by : by;
    const int64_t az = g->size[2] - gz * bz < bz ? g->size[2] - gz * bz : bz;
    const int64_t gxn = g->grid[0];
    const int64_t lastx = g->size[0] - (gxn - 1) * bx;
    const size_t rowb = (size_t)bx * es;
    const size_t blkb = (size_t)g->bvox * es;
    const size_t rowlen = (size_t)g->size[0] * es;
    uint8_t *brick = e->brick;
    int64_t y, z, gx;

    for (z = 0; z < az; z++) {
        for (y = 0; y < ay; y++) {
            const uint8_t *src =
                (const uint8_t *)labels +
                es * (chan0 + (size_t)g->size[0] *
                                  ((size_t)(gy * by + y) +
                                   (size_t)g->size[1] * (size_t)(gz * bz + z)));
            uint8_t *dst = brick + rowb * (size_t)(y + by * z);
            if (gy * by + by + y < g->size[1]) {
                /* The same row of the next slab, wanted soon. */
                const uint8_t *next = src + (size_t)by * rowlen;
                size_t o;
                for (o = 0; o < rowlen; o += 64) {
                    __builtin_prefetch(next + o);
                }
            }
            if (rowb == 64) {
                for (gx = 0; gx < gxn - 1; gx++) {
                    memcpy(dst, src, 64);
                    dst += blkb;
                    src += 64;
                }
            } else {
                for (gx = 0; gx < gxn - 1; gx++) {
                    memcpy(dst, src, rowb);
                    dst += blkb;
                    src += rowb;
                }
            }
            memcpy(dst, src, (size_t)lastx * es);
        }
    }
    /* Padding: the last block along x, and every block of a short slab. */
    for (gx = 0; gx < gxn; gx++) {
        const int64_t ax = gx == gxn - 1 ? lastx : bx;
        uint8_t *b = brick + blkb * (size_t)gx;
        int64_t x;
        if (ax == bx && ay == by && az == bz) {
            continue;
        }
        for (z = 0; z < bz; z++) {
            for (y = 0; y < by; y++) {
                x = (z < az && y < ay) ? ax : 0;
                for (; x < bx; x++) {
                    memcpy(b + es * (size_t)(x + bx * (y + by * z)), b, es);
                }
            }
        }
    }
}

static int cseg_pair_cmp(const void *pa, const void *pb)
{
    const cseg_pair *a = pa;
    const cseg_pair *b = pb;
    return (a->v > b->v) - (a->v < b->v);
}

/*
 * Sort the n distinct labels; fill e->remap and the table words e->tw.
 * @return 1 if the first-seen order was already sorted (remap identity).
 */
static int cseg_sort_table(cseg_enc *e, uint32_t n)
{
    uint32_t i, j;
    int identity = 1;

    for (i = 0; i < n; i++) {
        e->pairs[i].v = e->vals[i];
        e->pairs[i].p = i;
    }
    if (n <= 32) {
        for (i = 1; i < n; i++) {
            cseg_pair t = e->pairs[i];
            for (j = i; j > 0 && e->pairs[j - 1].v > t.v; j--) {
                e->pairs[j] = e->pairs[j - 1];
            }
            e->pairs[j] = t;
        }
    } else {
        /* Labels are distinct, so any correct sort gives one order. */
        qsort(e->pairs, n, sizeof(*e->pairs), cseg_pair_cmp);
    }
    for (i = 0; i < n; i++) {
        e->remap[e->pairs[i].p] = i;
        identity &= e->pairs[i].p == i;
        if (e->g.wpl == 1) {
            e->tw[i] = (uint32_t)e->pairs[i].v;
        } else {
            e->tw[2 * i] = (uint32_t)e->pairs[i].v;
            e->tw[2 * i + 1] = (uint32_t)(e->pairs[i].v >> 32);
        }
    }
    return identity;
}

/* Give the voxels past the chunk edge provisional index p (rank 0). */
static void cseg_fill_padding(cseg_enc *e, const int64_t a[3], uint32_t p)
{
    const int64_t bx = e->g.bs[0], by = e->g.bs[1], bz = e->g.bs[2];
    int64_t x, y, z;

    for (z = 0; z < bz; z++) {
        for (y = 0; y < by; y++) {
            uint32_t *pr = e->prov + (size_t)(bx * (y + by * z));
            x = (z < a[2] && y < a[1]) ? a[0] : 0;
            for (; x < bx; x++) {
                pr[x] = p;
            }
        }
    }
}

/* Pack remap[prov[i]] for i < bvox at a constant bit width. */
CSEG_INLINE void cseg_pack(uint32_t *dst, const uint32_t *prov,
                           const uint32_t *remap, size_t bvox, unsigned bits)
{
    const unsigned per = 32 / bits;
    const size_t full = bvox / per;
    size_t w, i = 0;
    unsigned k;

    if (remap == NULL) {
        /* First-seen order already sorted: indices are final. */
        for (w = 0; w < full; w++) {
            uint32_t acc = 0;
#pragma GCC unroll 32
            for (k = 0; k < per; k++) {
                acc |= prov[i + k] << (k * bits);
            }
            dst[w] = acc;
            i += per;
        }
    } else {
        for (w = 0; w < full; w++) {
            uint32_t acc = 0;
#pragma GCC unroll 32
            for (k = 0; k < per; k++) {
                acc |= remap[prov[i + k]] << (k * bits);
            }
            dst[w] = acc;
            i += per;
        }
    }
    if (i < bvox) {
        uint32_t acc = 0;
        for (k = 0; i < bvox; k++, i++) {
            acc |= (remap != NULL ? remap[prov[i]] : prov[i]) << (k * bits);
        }
        dst[w] = acc;
    }
}

/* remap NULL: the provisional indices are already the final ones. */
static void cseg_pack_any(uint32_t *dst, const cseg_enc *e,
                          const uint32_t *remap, unsigned bits)
{
    const size_t bvox = (size_t)e->g.bvox;

    switch (bits) {
    case 1:
        cseg_pack(dst, e->prov, remap, bvox, 1);
        break;
    case 2:
        cseg_pack(dst, e->prov, remap, bvox, 2);
        break;
    case 4:
        cseg_pack(dst, e->prov, remap, bvox, 4);
        break;
    case 8:
        cseg_pack(dst, e->prov, remap, bvox, 8);
        break;
    case 16:
        cseg_pack(dst, e->prov, remap, bvox, 16);
        break;
    default:
        assert(bits == 32);
        cseg_pack(dst, e->prov, remap, bvox, 32);
        break;
    }
}

/* FNV-1a over the table words, then a final mix; input-only, so the
 * output never depends on addresses. */
static uint64_t cseg_tab_hash(const uint32_t *tw, size_t nw)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325) ^ nw;
    size_t i;

    for (i = 0; i < nw; i++) {
        h = (h ^ tw[i]) * UINT64_C(0x100000001b3);
    }
    h ^= h >> 33;
    h *= UINT64_C(0xff51afd7ed558ccd);
    h ^= h >> 33;
    return h;
}

/* @return the offset of an identical table written in this channel, or
 * -1. base is the channel's first word. */
static int64_t cseg_tab_find(const cseg_enc *e, size_t base, uint64_t h,
                             size_t nw)
{
    size_t i = (size_t)h & (e->tab_cap - 1);

    while (e->tabs[i].nwords != 0) {
        const cseg_tab_slot *s = &e->tabs[i];
        if (s->hash == h && s->nwords == nw &&
            memcmp(e->out + base + s->off, e->tw, nw * sizeof(uint32_t)) == 0) {
            return s->off;
        }
        i = (i + 1) & (e->tab_cap - 1);
    }
    return -1;
}

static int cseg_tab_add(cseg_enc *e, uint64_t h, uint32_t off, size_t nw)
{
    size_t i;

    if ((e->tab_count + 1) * 2 > e->tab_cap) {
        size_t ncap = e->tab_cap * 2;
        cseg_tab_slot *nt = calloc(ncap, sizeof(*nt));
        if (nt == NULL) {
            return cnx_error_set(CNX_ENOMEM, 0,
                                 "compressed_segmentation: out of memory");
        }
        for (i = 0; i < e->tab_cap; i++) {
            size_t j;
            if (e->tabs[i].nwords == 0) {
                continue;
            }
            j = (size_t)e->tabs[i].hash & (ncap - 1);
            while (nt[j].nwords != 0) {
                j = (j + 1) & (ncap - 1);
            }
            nt[j] = e->tabs[i];
        }
        free(e->tabs);
        e->tabs = nt;
        e->tab_cap = ncap;
    }
    i = (size_t)h & (e->tab_cap - 1);
    while (e->tabs[i].nwords != 0) {
        i = (i + 1) & (e->tab_cap - 1);
    }
    e->tabs[i].hash = h;
    e->tabs[i].off = off;
    e->tabs[i].nwords = (uint32_t)nw;
    e->tab_count++;
    return 0;
}

/* Encode block gpos, bricked at blk, of the channel starting at word base. */
static int cseg_encode_block(cseg_enc *e, const void *blk, size_t base,
                             const int64_t gpos[3])
{
    int64_t a[3];
    uint32_t n;
    unsigned bits = 0;
    uint64_t nvw = 0;
    uint64_t voff, toff;
    uint64_t h;
    int64_t found;
    size_t ntw;
    size_t hdr;
    int full = 1;
    int identity = 1;
    int err;
    int i;

    for (i = 0; i < 3; i++) {
        int64_t lo = gpos[i] * e->g.bs[i];
        a[i] = e->g.size[i] - lo < e->g.bs[i] ? e->g.size[i] - lo : e->g.bs[i];
        full &= a[i] == e->g.bs[i];
    }
    if (e->g.es == 8) {
        n = cseg_gather(e, blk, 8, (size_t)e->g.bvox);
    } else {
        n = cseg_gather(e, blk, 4, (size_t)e->g.bvox);
    }
    if (n == 1) {
        e->remap[0] = 0;
        if (e->g.wpl == 1) {
            e->tw[0] = (uint32_t)e->vals[0];
        } else {
            e->tw[0] = (uint32_t)e->vals[0];
            e->tw[1] = (uint32_t)(e->vals[0] >> 32);
        }
    } else {
        identity = cseg_sort_table(e, n);
        bits = 1;
        while (((uint64_t)1 << bits) < n) {
            bits *= 2;
        }
        nvw = ((uint64_t)bits * e->g.bvox + 31) / 32;
        if (!full) {
            /* The reference leaves these voxels at index 0. */
            cseg_fill_padding(e, a, e->pairs[0].p);
        }
    }
    ntw = (size_t)n * e->g.wpl;

    voff = e->len - base;
    err = cseg_enc_reserve(e, nvw + ntw);
    if (err < 0) {
        return err;
    }
    if (bits != 0) {
        cseg_pack_any(e->out + e->len, e, identity ? NULL : e->remap, bits);
        e->len += (size_t)nvw;
    }
    h = cseg_tab_hash(e->tw, ntw);
    found = cseg_tab_find(e, base, h, ntw);
    if (found >= 0) {
        toff = (uint64_t)found;
    } else {
        toff = e->len - base;
        if (toff > CSEG_MAX_TABLE_OFFSET) {
            return cnx_error_set(CNX_ERANGE, 0,
                                 "compressed_segmentation: block (%lld,%lld,"
                                 "%lld): table offset %llu does not fit 24 "
                                 "bits",
                                 (long long)gpos[0], (long long)gpos[1],
                                 (long long)gpos[2], (unsigned long long)toff);
        }
        memcpy(e->out + e->len, e->tw, ntw * sizeof(uint32_t));
        e->len += ntw;
        err = cseg_tab_add(e, h, (uint32_t)toff, ntw);
        if (err < 0) {
            return err;
        }
    }
    if (voff > UINT32_MAX) {
        return cnx_error_set(CNX_ERANGE, 0,
                             "compressed_segmentation: block (%lld,%lld,%lld)"
                             ": values offset %llu does not fit 32 bits",
                             (long long)gpos[0], (long long)gpos[1],
                             (long long)gpos[2], (unsigned long long)voff);
    }
    hdr = base + 2 * (size_t)(gpos[0] + e->g.grid[0] *
                                            (gpos[1] + e->g.grid[1] * gpos[2]));
    e->out[hdr] = (uint32_t)toff | (uint32_t)bits << 24;
    e->out[hdr + 1] = (uint32_t)voff;
    return 0;
}

int cnx_cseg_encode(uint8_t **out, size_t *out_len, const void *labels,
                    cnx_dtype dtype, const int64_t size[3], int64_t channels,
                    const int64_t block[3])
{
    cseg_enc e;
    size_t slots = 1;
    size_t maxd;
    size_t bvox;
    size_t brick_bytes;
    int64_t c;
    int64_t gpos[3];
    int err;

    memset(&e, 0, sizeof(e));
    if (out == NULL || out_len == NULL || labels == NULL || size == NULL ||
        block == NULL) {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: NULL argument");
    }
    *out = NULL;
    *out_len = 0;
    err = cseg_geom_init(&e.g, dtype, size, channels, block);
    if (err < 0) {
        return err;
    }
    maxd = (size_t)e.g.maxd;
    bvox = (size_t)e.g.bvox;
    while (slots < 2 * maxd) {
        slots *= 2;
    }
    e.slot_mask = slots - 1;
    e.slot_shift = 64;
    while (slots > 1) {
        slots /= 2;
        e.slot_shift--;
    }
    if (e.slot_shift == 64) {
        e.slot_shift = 63; /* one slot: any shift of 63 lands on 0 or 1 */
        e.slot_mask = 1;
    }
    if (__builtin_mul_overflow((size_t)e.g.grid[0], bvox * e.g.es,
                               &brick_bytes)) {
        return cnx_error_set(CNX_ENOMEM, 0,
                             "compressed_segmentation: slab too large");
    }
    e.brick = malloc(brick_bytes);
    e.prov = malloc(bvox * sizeof(*e.prov));
    e.vals = malloc(maxd * sizeof(*e.vals));
    e.remap = malloc(maxd * sizeof(*e.remap));
    e.pairs = malloc(maxd * sizeof(*e.pairs));
    e.tw = malloc(maxd * e.g.wpl * sizeof(*e.tw));
    e.slots = malloc((e.slot_mask + 1) * sizeof(*e.slots));
    e.tab_cap = 256;
    e.tabs = calloc(e.tab_cap, sizeof(*e.tabs));
    if (e.brick == NULL || e.prov == NULL || e.vals == NULL ||
        e.remap == NULL || e.pairs == NULL || e.tw == NULL || e.slots == NULL ||
        e.tabs == NULL) {
        err = cnx_error_set(CNX_ENOMEM, 0,
                            "compressed_segmentation: out of memory");
        goto done;
    }
    /* First guess: headers plus two words per block; grows by doubling. */
    err = cseg_enc_reserve(&e, (uint64_t)channels * (4 * e.g.nblocks + 1));
    if (err < 0) {
        goto done;
    }
    e.len = (size_t)channels;
    for (c = 0; c < channels; c++) {
        size_t base = e.len;
        if (base > UINT32_MAX) {
            err = cnx_error_set(CNX_ERANGE, 0,
                                "compressed_segmentation: channel %lld "
                                "offset %zu does not fit 32 bits",
                                (long long)c, base);
            goto done;
        }
        e.out[c] = (uint32_t)base;
        err = cseg_enc_reserve(&e, 2 * e.g.nblocks);
        if (err < 0) {
            goto done;
        }
        memset(e.out + base, 0, 2 * (size_t)e.g.nblocks * sizeof(uint32_t));
        e.len += 2 * (size_t)e.g.nblocks;
        memset(e.tabs, 0, e.tab_cap * sizeof(*e.tabs));
        e.tab_count = 0;
        for (gpos[2] = 0; gpos[2] < e.g.grid[2]; gpos[2]++) {
            for (gpos[1] = 0; gpos[1] < e.g.grid[1]; gpos[1]++) {
                cseg_brick_fill(&e, labels, (size_t)c * (size_t)e.g.cvox,
                                gpos[1], gpos[2]);
                for (gpos[0] = 0; gpos[0] < e.g.grid[0]; gpos[0]++) {
                    const uint8_t *blk = (const uint8_t *)e.brick +
                                         (size_t)gpos[0] * bvox * e.g.es;
                    err = cseg_encode_block(&e, blk, base, gpos);
                    if (err < 0) {
                        goto done;
                    }
                }
            }
        }
    }
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    for (size_t i = 0; i < e.len; i++) {
        e.out[i] = __builtin_bswap32(e.out[i]);
    }
#endif
    *out = (uint8_t *)e.out;
    *out_len = e.len * sizeof(uint32_t);
    e.out = NULL;
    err = 0;

done:
    free(e.brick);
    free(e.prov);
    free(e.vals);
    free(e.remap);
    free(e.pairs);
    free(e.tw);
    free(e.slots);
    free(e.tabs);
    free(e.out);
    return err;
}

/* ------------------------------------------------------------------ */
/* Decoder.                                                            */

typedef struct cseg_dec {
    cseg_geom g;
    const uint8_t *data;
    uint64_t nwords;
    int64_t channels;
    /* One slab of decoded blocks (fixed gy, gz), block-major like the
     * encoder's, copied out row by row so that writes stay sequential. */
    uint8_t *brick;
} cseg_dec;

/* Write "block (x,y,z)", or "channel c block (x,y,z)", into where. */
static void cseg_where(char *where, size_t n, const cseg_dec *d, int64_t c,
                       const int64_t gpos[3])
{
    if (d->channels > 1) {
        snprintf(where, n, "channel %lld block (%lld,%lld,%lld)", (long long)c,
                 (long long)gpos[0], (long long)gpos[1], (long long)gpos[2]);
    } else {
        snprintf(where, n, "block (%lld,%lld,%lld)", (long long)gpos[0],
                 (long long)gpos[1], (long long)gpos[2]);
    }
}

/* Table entry i (checked by the caller to lie inside the buffer). */
CSEG_INLINE uint64_t cseg_entry(const uint8_t *tab, size_t wpl, uint64_t i)
{
    if (wpl == 2) {
        return cseg_rd32(tab, 2 * i) | (uint64_t)cseg_rd32(tab, 2 * i + 1)
                                           << 32;
    }
    return cseg_rd32(tab, i);
}

CSEG_INLINE void cseg_store(uint8_t *dst, size_t es, size_t i, uint64_t v)
{
    if (es == 8) {
        ((uint64_t *)(void *)dst)[i] = v;
    } else {
        ((uint32_t *)(void *)dst)[i] = (uint32_t)v;
    }
}

/* Where a block's labels come from: packed indices and a table. */
typedef struct cseg_src {
    const uint8_t *vw;   /* encoded values, bounds already checked */
    const uint8_t *tab;  /* table, first entry checked */
    const uint64_t *lut; /* the table copied, for bits <= 8 */
    uint64_t limit;      /* entries that lie inside the buffer, <= 2^bits */
} cseg_src;

/*
 * Decode voxels o .. o + cnt - 1 of a block (block order) into dst[0..cnt),
 * checking each index against src->limit. es and bits are constants at
 * each call site. @return 0, or 1 + the first index out of the table.
 */
CSEG_INLINE uint64_t cseg_run(uint8_t *dst, size_t es, const cseg_src *src,
                              size_t wpl, uint64_t o, size_t cnt, unsigned bits)
{
    const uint32_t mask = bits == 32 ? UINT32_MAX : ((uint32_t)1 << bits) - 1;
    uint64_t bit = o * bits;
    size_t i;

    for (i = 0; i < cnt; i++) {
        const uint32_t idx =
            (cseg_rd32(src->vw, bit >> 5) >> (bit & 31)) & mask;
        bit += bits;
        if (idx >= src->limit) {
            return (uint64_t)idx + 1;
        }
        cseg_store(dst, es, i,
                   bits <= 8 ? src->lut[idx] : cseg_entry(src->tab, wpl, idx));
    }
    return 0;
}

/*
 * Decode a whole block of nv voxels word by word through the copied table,
 * which holds all 2^bits entries, so no index needs a check.
 */
CSEG_INLINE void cseg_flat(uint8_t *dst, size_t es, const cseg_src *src,
                           size_t nv, unsigned bits)
{
    const unsigned per = 32 / bits;
    const uint32_t mask = ((uint32_t)1 << bits) - 1;
    const size_t nfull = nv / per;
    size_t w, i = 0;
    unsigned k;

    for (w = 0; w < nfull; w++) {
        const uint32_t word = cseg_rd32(src->vw, w);
#pragma GCC unroll 32
        for (k = 0; k < per; k++) {
            cseg_store(dst, es, i + k, src->lut[(word >> (k * bits)) & mask]);
        }
        i += per;
    }
    for (; i < nv; i++) {
        const uint32_t word = cseg_rd32(src->vw, i / per);
        cseg_store(dst, es, i, src->lut[(word >> ((i % per) * bits)) & mask]);
    }
}

static void cseg_flat_any(uint8_t *dst, size_t es, const cseg_src *src,
                          size_t nv, unsigned bits)
{
    if (es == 8) {
        switch (bits) {
        case 1:
            cseg_flat(dst, 8, src, nv, 1);
            break;
        case 2:
            cseg_flat(dst, 8, src, nv, 2);
            break;
        case 4:
            cseg_flat(dst, 8, src, nv, 4);
            break;
        default:
            cseg_flat(dst, 8, src, nv, 8);
            break;
        }
    } else {
        switch (bits) {
        case 1:
            cseg_flat(dst, 4, src, nv, 1);
            break;
        case 2:
            cseg_flat(dst, 4, src, nv, 2);
            break;
        case 4:
            cseg_flat(dst, 4, src, nv, 4);
            break;
        default:
            cseg_flat(dst, 4, src, nv, 8);
            break;
        }
    }
}

#define CSEG_RUN_CASES(ES)                                                     \
    switch (bits) {                                                            \
    case 1:                                                                    \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 1);                      \
    case 2:                                                                    \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 2);                      \
    case 4:                                                                    \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 4);                      \
    case 8:                                                                    \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 8);                      \
    case 16:                                                                   \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 16);                     \
    default:                                                                   \
        return cseg_run(dst, ES, src, ES / 4, o, cnt, 32);                     \
    }

static uint64_t cseg_run_any(uint8_t *dst, size_t es, const cseg_src *src,
                             uint64_t o, size_t cnt, unsigned bits)
{
    if (es == 8) {
        CSEG_RUN_CASES(8)
    }
    CSEG_RUN_CASES(4)
}

#undef CSEG_RUN_CASES

/* Decode block gpos of channel c (data at word base) into dst, bricked. */
static int cseg_decode_block(const cseg_dec *d, uint8_t *dst, int64_t c,
                             uint64_t base, const int64_t gpos[3])
{
    const cseg_geom *g = &d->g;
    const uint64_t avail = d->nwords - base;
    const uint8_t *ch = d->data + 4 * base;
    uint64_t lut[256];
    cseg_src src;
    uint64_t hdr, toff, voff, nvw, ntab, bad = 0;
    uint32_t h0;
    unsigned bits;
    int64_t a[3];
    int64_t y, z;
    char where[96];
    int full = 1;
    int i;

    hdr =
        2 * (uint64_t)(gpos[0] + g->grid[0] * (gpos[1] + g->grid[1] * gpos[2]));
    h0 = cseg_rd32(ch, hdr);
    voff = cseg_rd32(ch, hdr + 1);
    toff = h0 & 0xffffffu;
    bits = h0 >> 24;
    for (i = 0; i < 3; i++) {
        int64_t lo = gpos[i] * g->bs[i];
        a[i] = g->size[i] - lo < g->bs[i] ? g->size[i] - lo : g->bs[i];
        full &= a[i] == g->bs[i];
    }
    if (bits != 0 && bits != 1 && bits != 2 && bits != 4 && bits != 8 &&
        bits != 16 && bits != 32) {
        cseg_where(where, sizeof(where), d, c, gpos);
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: %s: bad bit width %u",
                             where, bits);
    }
    if (toff + g->wpl > avail) {
        cseg_where(where, sizeof(where), d, c, gpos);
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: %s: table offset %llu "
                             "beyond end (%llu words)",
                             where, (unsigned long long)toff,
                             (unsigned long long)avail);
    }
    src.tab = ch + 4 * toff;
    src.lut = lut;
    ntab = (avail - toff) / g->wpl;
    if (bits == 0) {
        const uint64_t v = cseg_entry(src.tab, g->wpl, 0);
        const size_t n = full ? (size_t)g->bvox : 0;
        size_t k;
        /* Full blocks in one run; edge blocks row by row. */
        for (k = 0; k < n; k++) {
            cseg_store(dst, g->es, k, v);
        }
        for (z = 0; z < a[2] && !full; z++) {
            for (y = 0; y < a[1]; y++) {
                uint8_t *row =
                    dst + g->es * (size_t)(g->bs[0] * (y + g->bs[1] * z));
                for (k = 0; k < (size_t)a[0]; k++) {
                    cseg_store(row, g->es, k, v);
                }
            }
        }
        return 0;
    }
    nvw = ((uint64_t)bits * g->bvox + 31) / 32;
    if (voff > avail || nvw > avail - voff) {
        cseg_where(where, sizeof(where), d, c, gpos);
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: %s: %llu encoded value "
                             "words at offset %llu beyond end (%llu words)",
                             where, (unsigned long long)nvw,
                             (unsigned long long)voff,
                             (unsigned long long)avail);
    }
    src.vw = ch + 4 * voff;
    src.limit = (uint64_t)1 << bits;
    if (ntab < src.limit) {
        src.limit = ntab;
    }
    if (bits <= 8) {
        uint32_t k;
        for (k = 0; k < (uint32_t)src.limit; k++) {
            lut[k] = cseg_entry(src.tab, g->wpl, k);
        }
    }
    if (full && bits <= 8 && src.limit == ((uint64_t)1 << bits)) {
        cseg_flat_any(dst, g->es, &src, (size_t)g->bvox, bits);
        return 0;
    }
    for (z = 0; z < a[2] && bad == 0; z++) {
        for (y = 0; y < a[1] && bad == 0; y++) {
            const uint64_t o = (uint64_t)(g->bs[0] * (y + g->bs[1] * z));
            bad = cseg_run_any(dst + g->es * (size_t)o, g->es, &src, o,
                               (size_t)a[0], bits);
        }
    }
    if (bad != 0) {
        cseg_where(where, sizeof(where), d, c, gpos);
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: %s: table index %llu "
                             "beyond end of table (%llu entries to the end)",
                             where, (unsigned long long)(bad - 1),
                             (unsigned long long)ntab);
    }
    return 0;
}

/* Copy decoded slab (gy, gz) from the brick into the labels of channel c. */
static void cseg_brick_out(const cseg_dec *d, uint8_t *labels, int64_t c,
                           int64_t gy, int64_t gz)
{
    const cseg_geom *g = &d->g;
    const size_t es = g->es;
    const int64_t bx = g->bs[0], by = g->bs[1], bz = g->bs[2];
    const int64_t ay = g->size[1] - gy * by < by ? g->size[1] - gy * by : by;
    const int64_t az = g->size[2] - gz * bz < bz ? g->size[2] - gz * bz : bz;
    const int64_t gxn = g->grid[0];
    const int64_t lastx = g->size[0] - (gxn - 1) * bx;
    const size_t rowb = (size_t)bx * es;
    const size_t blkb = (size_t)g->bvox * es;
    int64_t y, z, gx;

    for (z = 0; z < az; z++) {
        for (y = 0; y < ay; y++) {
            uint8_t *dst =
                labels +
                es * ((size_t)c * (size_t)g->cvox +
                      (size_t)g->size[0] *
                          ((size_t)(gy * by + y) +
                           (size_t)g->size[1] * (size_t)(gz * bz + z)));
            const uint8_t *src = d->brick + rowb * (size_t)(y + by * z);
            if (rowb == 64) {
                for (gx = 0; gx < gxn - 1; gx++) {
                    memcpy(dst, src, 64);
                    dst += 64;
                    src += blkb;
                }
            } else {
                for (gx = 0; gx < gxn - 1; gx++) {
                    memcpy(dst, src, rowb);
                    dst += rowb;
                    src += blkb;
                }
            }
            memcpy(dst, src, (size_t)lastx * es);
        }
    }
}

int cnx_cseg_decode(void *labels, const uint8_t *data, size_t len,
                    cnx_dtype dtype, const int64_t size[3], int64_t channels,
                    const int64_t block[3])
{
    cseg_dec d;
    size_t brick_bytes;
    int64_t c;
    int64_t gpos[3];
    int err;

    if (labels == NULL || data == NULL || size == NULL || block == NULL) {
        return cnx_error_set(CNX_EINVAL, 0,
                             "compressed_segmentation: NULL argument");
    }
    memset(&d, 0, sizeof(d));
    err = cseg_geom_init(&d.g, dtype, size, channels, block);
    if (err < 0) {
        return err;
    }
    d.data = data;
    d.nwords = len / 4;
    d.channels = channels;
    if (len % 4 != 0) {
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: length %zu is not a "
                             "multiple of 4",
                             len);
    }
    if (d.nwords < (uint64_t)channels) {
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "compressed_segmentation: %llu words, too few "
                             "for %lld channel offsets",
                             (unsigned long long)d.nwords, (long long)channels);
    }
    if (__builtin_mul_overflow((size_t)d.g.grid[0], (size_t)d.g.bvox * d.g.es,
                               &brick_bytes)) {
        return cnx_error_set(CNX_ENOMEM, 0,
                             "compressed_segmentation: slab too large");
    }
    d.brick = malloc(brick_bytes);
    if (d.brick == NULL) {
        return cnx_error_set(CNX_ENOMEM, 0,
                             "compressed_segmentation: out of memory");
    }
    for (c = 0; c < channels; c++) {
        uint64_t base = cseg_rd32(data, (uint64_t)c);
        if (base < (uint64_t)channels || base > d.nwords ||
            d.nwords - base < 2 * d.g.nblocks) {
            err = cnx_error_set(CNX_ECORRUPT, 0,
                                "compressed_segmentation: channel %lld: "
                                "offset %llu leaves no room for %llu block "
                                "headers (%llu words)",
                                (long long)c, (unsigned long long)base,
                                (unsigned long long)d.g.nblocks,
                                (unsigned long long)d.nwords);
            goto done;
        }
        for (gpos[2] = 0; gpos[2] < d.g.grid[2]; gpos[2]++) {
            for (gpos[1] = 0; gpos[1] < d.g.grid[1]; gpos[1]++) {
                for (gpos[0] = 0; gpos[0] < d.g.grid[0]; gpos[0]++) {
                    uint8_t *dst =
                        d.brick + (size_t)gpos[0] * (size_t)d.g.bvox * d.g.es;
                    err = cseg_decode_block(&d, dst, c, base, gpos);
                    if (err < 0) {
                        goto done;
                    }
                }
                cseg_brick_out(&d, labels, c, gpos[1], gpos[2]);
            }
        }
    }
    err = 0;

done:
    free(d.brick);
    return err;
}
