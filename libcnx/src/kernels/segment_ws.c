/*
 * segment_ws.c - the seeded watershed of the segmentation kernel (step 2
 * of cnx/segment.h) on the padded quantised boundary.
 *
 * A priority flood from the seeds (segment_seeds.c): a monotone queue of
 * 256 FIFO buckets, one growable array each, so every voxel is queued once
 * and the order is fixed by the raster order of the seeds and the order of
 * the neighbours alone. A voxel takes the label of the voxel that queued
 * it, at the level max(its q, the level being flooded). The flood visits
 * the volume in wave-front order, so neighbour accesses are prefetched a
 * few voxels ahead, and an unlabelled voxel keeps its q inside the label
 * array (SEG_UNLABELLED | q) so that a step touches one array, not two.
 * Load: one visit per voxel; memory: the queue, 4 bytes per voxel.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "segment_int.h"

int seg__bq_grow(seg_bucket *b)
{
    size_t cap = b->cap ? b->cap * 2 : 256;
    uint32_t *grown = realloc(b->v, cap * sizeof(*grown));
    if (grown == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    b->v = grown;
    b->cap = cap;
    return 0;
}

/* Voxels popped this far ahead have their neighbourhoods prefetched: the
 * flood visits the volume in wave-front order, so nearly every neighbour
 * access would otherwise miss the cache. */
#define PREFETCH 16

static inline void prefetch_around(const seg_grid *g, const uint32_t *lab,
                                   uint32_t v)
{
#if defined(__GNUC__)
    for (int k = 0; k < g->nnb; k++)
        __builtin_prefetch(lab + (ptrdiff_t)v + g->nb[k]);
#else
    (void)g, (void)lab, (void)v;
#endif
}

/* Flood one level: pop its bucket until empty; neighbours at or below the
 * level join it, the others the bucket of their own value. */
static int flood_level(const seg_grid *g, uint32_t *lab, seg_bucket *bq,
                       uint32_t level)
{
    seg_bucket *b = &bq[level];
    while (b->rd < b->len) {
        const uint32_t v = b->v[b->rd++];
        const uint32_t l = lab[v];
        if (b->rd + PREFETCH < b->len)
            prefetch_around(g, lab, b->v[b->rd + PREFETCH]);
        for (int k = 0; k < g->nnb; k++) {
            const uint32_t u = (uint32_t)((ptrdiff_t)v + g->nb[k]);
            const uint32_t w = lab[u];
            if (seg__is_unlabelled(w)) {
                const uint32_t qu = w & 255u;
                lab[u] = l;
                if (seg__bq_push(&bq[qu > level ? qu : level], u) != 0)
                    return CNX_ENOMEM;
            }
        }
    }
    free(b->v);
    memset(b, 0, sizeof(*b));
    return 0;
}

/* Queue the seeds in raster order, flood. */
static int flood(const seg_grid *g, const uint8_t *q, uint32_t *lab)
{
    const int64_t *s = g->size;
    seg_bucket *bq = calloc(256, sizeof(*bq));
    int rc = 0;
    if (bq == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (int64_t z = 0; z < s[2] && rc == 0; z++)
        for (int64_t y = 0; y < s[1] && rc == 0; y++) {
            size_t row = seg__at(g, 0, y, z);
            for (size_t v = row; v < row + (size_t)s[0] && rc == 0; v++)
                if (!seg__is_unlabelled(lab[v]))
                    rc = seg__bq_push(&bq[q[v]], (uint32_t)v);
        }
    for (uint32_t level = 0; level < 256 && rc == 0; level++)
        rc = flood_level(g, lab, bq, level);
    for (int l = 0; l < 256; l++)
        free(bq[l].v);
    free(bq);
    return rc;
}

int seg__watershed(const seg_grid *g, const seg_cfg *p,
                   const uint8_t *q, uint32_t *lab, uint32_t *nbasins)
{
    int rc = seg__seeds(g, p, q, lab, nbasins);
    if (rc != 0)
        return rc;
    return flood(g, q, lab);
}
