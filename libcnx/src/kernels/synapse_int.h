/*
 * synapse_int.h - what the synapse kernel's files share (not public API):
 * the cleft voxel list and component records of synapse.c, and the per-
 * cleft step (site, partners, score) of synapse_site.c.
 */
#ifndef CNX_SYNAPSE_INT_H
#define CNX_SYNAPSE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/synapse.h"

/* One cleft voxel, read box coordinates; label: provisional, then the
 * component. */
typedef struct syn_vox {
    int32_t x, y, z;
    uint32_t label;
} syn_vox;

typedef enum syn_state {
    SYN_OWNED = 0,
    SYN_ELSEWHERE,
    SYN_TRUNCATED,
    SYN_TOO_SMALL,
} syn_state;

/* One component, read box coordinates. */
typedef struct syn_comp {
    int64_t size;
    int64_t sum[3];    /* coordinate sums */
    int64_t cleft_sum; /* sum of cleft values */
    int32_t first[3];  /* first voxel in raster order */
    int32_t lo[3];     /* bounding box, inclusive */
    int32_t hi[3];
    syn_state state;
} syn_comp;

/* The components of a block. */
typedef struct syn_cc {
    syn_vox *vox; /* cleft voxels in raster order */
    size_t nvox, vox_cap;
    uint32_t *parent; /* union-find over provisional labels 1..nlabels */
    size_t parent_cap;
    uint32_t nlabels;
    syn_comp *comp;
    uint32_t ncomp;
} syn_cc;

/* Buffers reused from one cleft to the next. */
typedef struct syn_scratch {
    int64_t *dist; /* a box of squared distances */
    size_t dist_cap;
    int64_t *line; /* one line of the distance transform: g, v, t */
    size_t line_cap;
    uint64_t *labels; /* votes */
    size_t labels_cap;
} syn_scratch;

void synapse__scratch_dispose(syn_scratch *sc);

/*
 * The synapse of one owned component c whose voxels (raster order) are
 * vox[0 .. c->size).
 * @return 0; CNX_ERANGE (site outside [0, 2^21)); CNX_ENOMEM.
 */
int synapse__one(const cnx_synapse_block *b, const cnx_synapse_params *p,
                 const syn_comp *c, const syn_vox *vox, syn_scratch *sc,
                 cnx_synapse *out);

#endif
