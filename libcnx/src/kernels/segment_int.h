/*
 * segment_int.h - shared internals of the segmentation kernel.
 *
 * The watershed and graph stages work on padded copies of the volume: one
 * voxel of margin on every side, so a face neighbour of a real voxel is
 * always a valid index and no loop checks bounds. In the label array the
 * margin holds SEG_BORDER, which is never 0 (never flooded) and never a
 * region id (skipped by the graph). Padded indices fit in uint32.
 */
#ifndef CNX_SEGMENT_INT_H
#define CNX_SEGMENT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/error.h"
#include "cnx/segment.h"

/* Label of the margin voxels. */
#define SEG_BORDER UINT32_MAX

/* "No voxel" / "no edge" in uint32 index lists. */
#define SEG_NONE UINT32_MAX

/*
 * While seeding and flooding, an unlabelled voxel holds SEG_UNLABELLED | q
 * in the label array. Labels stay below 2^31 (there are at most voxels / 2
 * + 1 seeds), and SEG_BORDER is outside SEG_UNLABELLED .. + 255.
 */
#define SEG_UNLABELLED 0x80000000u

static inline int seg__is_unlabelled(uint32_t w)
{
    return w - SEG_UNLABELLED < 256u;
}

/* A growable array of voxel indices: a FIFO (read from rd) or a stack. */
typedef struct seg_bucket {
    uint32_t *v;
    size_t len, cap, rd;
} seg_bucket;

/** Double b's capacity. @return 0 or CNX_ENOMEM. */
int seg__bq_grow(seg_bucket *b);

static inline int seg__bq_push(seg_bucket *b, uint32_t v)
{
    if (b->len == b->cap && seg__bq_grow(b) != 0)
        return CNX_ENOMEM;
    b->v[b->len++] = v;
    return 0;
}

/*
 * The parameters in the units the kernel works in (voxels, quantised
 * levels), from cnx_segment_params and its resolution (seg__cfg).
 */
typedef struct seg_cfg {
    int raw_input;
    int sections;  /* filter, seeds and watershed per z section */
    int z_edges;   /* the graph links sections (0: 2D mode) */
    double sigma[3];      /* filter scale per axis, voxels (z unused with sections) */
    int64_t background[3]; /* shading box radius per axis, voxels; 0: none */
    double ridge;         /* filter_ridge */
    int64_t seed_r[3];    /* seed window half side per axis, voxels */
    double seed_threshold;
    cnx_segment_seeds seed_method;
    double merge_threshold;
    uint64_t min_size;    /* voxels */
} seg_cfg;

/** Fill c from checked parameters p. */
void seg__cfg(const cnx_segment_params *p, seg_cfg *c);

/* A padded volume's geometry. */
typedef struct seg_grid {
    int64_t size[3]; /* the real extent */
    int64_t px, py;  /* padded extents of x and y (size + 2) */
    size_t n;        /* padded voxels, (sx + 2)(sy + 2)(sz + 2) */
    int sections;    /* 1: seeds and watershed see no neighbour across z */
    int z_edges;     /* 1: the graph has edges across z */
    int nnb;         /* face neighbours used: 6, or 4 with sections */
    ptrdiff_t nb[6]; /* their index offsets: -x, +x, -y, +y, -z, +z */
} seg_grid;

/* Padded index of real voxel (x, y, z). */
static inline size_t seg__at(const seg_grid *g, int64_t x, int64_t y, int64_t z)
{
    return (size_t)((x + 1) + g->px * ((y + 1) + g->py * (z + 1)));
}

/**
 * Check a size and fill g. @return 0; CNX_EINVAL for a size below 1;
 * CNX_ETOOBIG over the voxel, side or padded-index limits.
 */
int seg__grid_init(seg_grid *g, const int64_t size[3], int sections,
                   int z_edges);

/**
 * Seeds: lab (padded) out with the margin SEG_BORDER, the seeds labelled
 * 1..*nseeds in raster order of their first voxels, every other voxel
 * SEG_UNLABELLED | q. @return 0; CNX_ENOMEM.
 */
int seg__seeds(const seg_grid *g, const seg_cfg *p, const uint8_t *q,
               uint32_t *lab, uint32_t *nseeds);

/**
 * Seeds and watershed: q (padded, the quantised boundary; margin any
 * value) in, lab (padded) out with every real voxel labelled 1..*nbasins
 * and the margin SEG_BORDER.
 * @return 0; CNX_ENOMEM.
 */
int seg__watershed(const seg_grid *g, const seg_cfg *p,
                   const uint8_t *q, uint32_t *lab, uint32_t *nbasins);

/**
 * Graph, agglomeration, cleanup and raster numbering: lab (padded, from
 * seg__watershed) in, labels (real layout) out.
 * @return 0; CNX_ENOMEM.
 */
int seg__agglomerate(const seg_grid *g, const seg_cfg *p,
                     const uint8_t *q, const uint32_t *lab, uint32_t nbasins,
                     uint32_t *labels, uint32_t *nlabels);

/** An edge of a region graph given as such (the cross-chunk join). */
typedef struct seg_graph_edge {
    uint32_t a, b; /* nodes 1..nnodes, a < b, each pair once */
    uint64_t sum, count;
} seg_graph_edge;

/**
 * Steps 4 and 5 (agglomeration below level, cleanup under min_size) on a
 * graph: node i (1..nnodes) has sizes[i - 1] voxels. Writes parent[i - 1]
 * = the 0-based index of node i's final region's smallest node.
 * @return 0; CNX_ENOMEM.
 */
int seg__agglomerate_graph(uint32_t nnodes, const uint64_t *sizes,
                           const seg_graph_edge *edges, size_t nedges,
                           uint64_t level, uint64_t min_size, uint32_t *parent);

/**
 * The membrane filter of a raw image (cnx_segment_boundary_*): img holds
 * the voxels as floats, normalised to [0, 1] (1 = bright); writes the
 * boundary map to out.
 * @return 0; CNX_ENOMEM.
 */
int seg__membrane_filter(const float *img, const int64_t size[3],
                         const seg_cfg *p, float *out);

/**
 * The same filter, written for the region at lo of size osize only (out:
 * osize voxels): the shading still over the whole volume, the rest over
 * the region grown by its footprint, each term stretched by its
 * percentiles over the region. lo = 0, osize = size: the filter above.
 * @return 0; CNX_ENOMEM.
 */
int seg__membrane_filter_region(const float *img, const int64_t size[3],
                                const seg_cfg *p, const int64_t lo[3],
                                const int64_t osize[3], float *out);

#endif
