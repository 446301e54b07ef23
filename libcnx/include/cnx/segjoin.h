/*
 * cnx/segjoin.h - segmentation across chunk seams (pure kernels).
 *
 * A volume is segmented in three steps that workers run as three stages
 * (docs/segment.md):
 *
 *  1. fragments (map, one task per chunk): the segmentation kernel
 *     (cnx/segment.h) runs on the chunk grown by the task's halo; the
 *     result is cropped to the chunk and every segment gets a 64-bit id
 *     derived from geometry: 1 + the packed global coordinate of its first
 *     voxel in raster order within the chunk (x | y << 21 | z << 42). The
 *     task also writes a face record: its fragments' voxel counts and, on
 *     each of its six faces, the fragment ids and quantised boundary values
 *     of the face's voxel layer.
 *  2. join (reduce: one task, or a tree of block tasks): for every pair
 *     of chunks that share a face, each face position pairs the two
 *     layers' fragments; the edge between two fragments sums
 *     cnx_segment_pair_value over its positions (an edge of fewer than
 *     CNX_SEGJOIN_MIN_CONTACT positions counts the rest as 255) and its
 *     value is cnx_segment_edge_value. Every edge under the seam level
 *     (cnx_segjoin_seam_level) joins its fragments (union-find); then each component under
 *     min_size_nm3 links to the far end of its lowest edge leaving it
 *     (edges ordered by value, then the two fragment ids), and a segment
 *     is a tree of links, named by the least fragment id of the component
 *     at its root (of a pair linking to each other: the lesser). In mode
 *     2D (cnx_segment_mode_of) no edge crosses a z face. Unions and
 *     minima only: nothing depends on the order of chunks, edges or
 *     blocks, so a tree of blocks (cnx_segjoin_block, cnx_segjoin_merge)
 *     gives the bytes of the one task (cnx_segjoin_run). The join writes
 *     one mapping per chunk (fragment -> segment for the chunk's
 *     fragments) and the segment properties (voxel count per segment).
 *  3. relabel (map, one task per chunk): fragment ids -> segment ids.
 *
 * The face record and the mapping are little-endian binary documents
 * (layouts in docs/formats.md); decoders check every length and count.
 * The segment properties (JSON) are cnx/segjoin_io.h.
 */
#ifndef CNX_SEGJOIN_H
#define CNX_SEGJOIN_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"
#include "cnx/segment.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * The join's contact-area term: a seam edge of fewer face pairs than this
 * never joins its fragments (the cleanup may still fold a small segment
 * across it). A seam shows only a cross-section of two segments' contact,
 * and a membrane that crosses it obliquely can leave one or two pairs of
 * interior-looking voxels between different segments; on ISBI 2012 in
 * 128 x 128 chunks such edges merged 52 pairs of segments the whole-volume
 * run keeps apart (docs/segment.md).
 */
#define CNX_SEGJOIN_MIN_CONTACT 5

/**
 * A seam edge joins its two fragments below this share (percent) of the
 * merge level (cnx_segment_merge_level): one fragment pair's edge decides
 * alone (the kernel's agglomeration, inside a chunk, sums a merged
 * segment's edges first), so it must be lower. Tuned on a cnx-synth hard
 * volume in 64^3 chunks (docs/segment.md, "What chunking changes").
 */
#define CNX_SEGJOIN_SEAM_PERCENT 80

/** The value below which a seam edge joins: CNX_SEGJOIN_SEAM_PERCENT of
 * cnx_segment_merge_level(p->merge_threshold). */
static inline uint64_t cnx_segjoin_seam_level(const cnx_segment_params *p)
{
    return cnx_segment_merge_level(p->merge_threshold) *
           CNX_SEGJOIN_SEAM_PERCENT / 100;
}

/** Coordinates must be in [0, 2^21) per axis to pack into an id. */
#define CNX_SEGJOIN_COORD_MAX ((int64_t)1 << 21)

/**
 * Version of the segment-join stage's outputs (mappings and segment
 * properties): 5 is the rule above (unions under the level, then links of
 * the small components), which a tree of blocks computes exactly; 4 (the
 * greedy agglomeration of the segment kernel over the seam edges) could
 * only be computed in one task.
 */
#define CNX_SEGJOIN_VERSION 5

/** The geometry-derived id of a fragment whose first voxel is (x, y, z). */
static inline uint64_t cnx_segjoin_id(int64_t x, int64_t y, int64_t z)
{
    return 1 + ((uint64_t)x | (uint64_t)y << 21 | (uint64_t)z << 42);
}

/**
 * Fragments of one chunk.
 *
 * @param boundary  boundary map over bbox in [0, 1] (x fastest; borrowed),
 *                  as cnx_segment_boundary_* make it
 * @param bbox      the box boundary covers: the chunk grown by the halo
 *                  and clipped to the volume
 * @param roi       the chunk, inside bbox
 * @param[out] labels  cnx_box_voxels(roi) fragment ids, x fastest
 * @param[out] face    the face record (caller frees with free())
 * @return 0; CNX_EINVAL (bad boxes); CNX_ERANGE (coordinates out of
 *         [0, 2^21)); CNX_ENOMEM; what cnx_segment_volume returns.
 */
int cnx_segjoin_fragments(const float *boundary, const cnx_box *bbox,
                          const cnx_box *roi, const cnx_segment_params *p,
                          uint64_t *labels, uint8_t **face, size_t *face_len);

/**
 * Fragments of one chunk from its input, what the segment stage runs per
 * chunk: the boundary (cnx_segment_boundary_*_region) over the part the
 * seeds and watershed see, then cnx_segjoin_fragments there. That part
 * is the chunk grown by cnx_segment_context and clipped to bbox with
 * raw_input (the rest of the halo only feeds the membrane filter), else
 * the whole of bbox.
 *
 * @param in     the input over bbox, x fastest: uint8_t (dtype
 *               CNX_DT_UINT8) or float (CNX_DT_FLOAT32)
 * @param bbox   the chunk grown by the halo and clipped to the volume
 * @param roi    the chunk, inside bbox
 * Outputs and errors as cnx_segjoin_fragments (CNX_EINVAL also for
 * another dtype).
 */
int cnx_segjoin_chunk(const void *in, cnx_dtype dtype, const cnx_box *bbox,
                      const cnx_box *roi, const cnx_segment_params *p,
                      uint64_t *labels, uint8_t **face, size_t *face_len);

/** One chunk's face record, for the join. */
typedef struct cnx_segjoin_input {
    const uint8_t *data;
    size_t len;
    const char *name; /* for error messages */
} cnx_segjoin_input;

/** The result of a join: every fragment's segment, and the segments. */
typedef struct cnx_segjoin {
    size_t nchunks;
    cnx_box *chunks;    /* the chunks, in input order (block order for
                         * cnx_segjoin_block_result) */
    size_t *first;      /* chunk k's fragments: frag[first[k] .. first[k+1]) */
    uint64_t *frag;     /* fragment ids, ascending within each chunk */
    uint64_t *seg;      /* segment of each fragment */
    size_t nsegs;
    uint64_t *seg_ids;  /* segment ids ascending */
    uint64_t *seg_size; /* voxel count of each */
    uint8_t *seg_multi; /* 1: fragments in more than one chunk */
    size_t nedges, nmerged; /* seam edges seen and joined (union-find) */
} cnx_segjoin;

/**
 * Join the fragments of chunks across their shared faces, in one task:
 * cnx_segjoin_block over the box of all the chunks, then
 * cnx_segjoin_block_result. The result is, byte for byte, what a tree of
 * blocks over the same records gives (cnx_segjoin_merge).
 * @param p  merge_threshold, the mode (2D: no edge across z) and
 *           min_size_nm3 at p->resolution (the cleanup) are used
 * @param[out] out  free with cnx_segjoin_free()
 * @return 0; CNX_ECORRUPT naming the input for a malformed record;
 *         CNX_EINVAL for overlapping chunks, a fragment in two chunks or
 *         chunks that do not fill their box; CNX_ENOMEM.
 */
int cnx_segjoin_run(const cnx_segjoin_input *in, size_t n,
                    const cnx_segment_params *p, cnx_segjoin *out);

/*
 * The join as a tree (docs/segment.md, "The join as a tree"). The region
 * is cut into blocks of whole chunks; each block's task turns its chunks'
 * face records into a block summary (cnx_segjoin_block); a level above
 * merges the summaries of the blocks inside its own block
 * (cnx_segjoin_merge), and so on up to one block over the whole region,
 * whose summary leaves nothing open. A summary holds what the levels
 * above need and nothing else: the components that touch the block's
 * outer faces (open), the seam edges leaving the block, the smallest
 * components' candidate edges, and per segment its voxel count; plus,
 * for the way down, each of its chunks' fragments (level 1) or each open
 * component below (higher levels) with its segment or the open
 * component it belongs to. Memory per task is bounded by its block, not
 * by the region. Layout: docs/formats.md ("Join block summary").
 */

/**
 * Level 1: the summary of block from the face records of its chunks and
 * of the chunks just beyond its high faces (records of other chunks are
 * ignored). Every chunk of block inside region must have its record, and
 * so must every chunk beside a high face of block inside region.
 * @param block   whole chunks; inside region
 * @param region  the stage's region: faces on it lead nowhere
 * @param[out] out, len  the summary (free())
 */
int cnx_segjoin_block(const cnx_segjoin_input *faces, size_t n,
                      const cnx_box *block, const cnx_box *region,
                      const cnx_segment_params *p, uint8_t **out,
                      size_t *len);

/**
 * Level k > 1: the summary of block from the summaries of the blocks that
 * tile it (any level, any sizes). With block = region the result has
 * nothing open: the top.
 */
int cnx_segjoin_merge(const cnx_segjoin_input *blocks, size_t n,
                      const cnx_box *block, const cnx_box *region,
                      const cnx_segment_params *p, uint8_t **out,
                      size_t *len);

/** The summaries above level 1, decoded once for the way down. */
typedef struct cnx_segjoin_tree cnx_segjoin_tree;

/**
 * Open the summaries above level 1: any levels, any number of blocks;
 * the largest must be the top (nothing open).
 * @return 0; CNX_ECORRUPT (malformed, or no top); CNX_ENOMEM.
 */
int cnx_segjoin_tree_open(const cnx_segjoin_input *ups, size_t n,
                          cnx_segjoin_tree **out);

/** Every segment of the region into out (nsegs, seg_ids, seg_size,
 * seg_multi). */
int cnx_segjoin_tree_segments(const cnx_segjoin_tree *t, cnx_segjoin *out);

/**
 * A level-1 block's chunks, their fragments and each fragment's segment
 * into out (nchunks, chunks, first, frag, seg), following each open
 * component up through the summaries whose boxes hold the block, smallest
 * first.
 * @return 0; CNX_ECORRUPT (a malformed summary, or an open component no
 *         summary above resolves); CNX_ENOMEM.
 */
int cnx_segjoin_tree_block(const cnx_segjoin_tree *t,
                           const cnx_segjoin_input *l1, cnx_segjoin *out);

void cnx_segjoin_tree_free(cnx_segjoin_tree *t);

/** The box a summary covers, and whether it leaves anything open. */
int cnx_segjoin_summary_box(const cnx_segjoin_input *summary, cnx_box *box,
                            int *open);

void cnx_segjoin_free(cnx_segjoin *j);

/** Encode chunk k's mapping. @param[out] out  free() it. */
int cnx_segjoin_mapping_encode(const cnx_segjoin *j, size_t k, uint8_t **out,
                               size_t *len);

/**
 * Relabel fragment ids in place with a mapping document (an id the mapping
 * does not name is CNX_ECORRUPT: the mapping is not this chunk's).
 */
int cnx_segjoin_relabel(uint64_t *labels, size_t n, const uint8_t *mapping,
                        size_t len);

/** How cnx_segjoin_chunked schedules the chunks (never what it computes). */
typedef struct cnx_segjoin_schedule {
    int threads; /* chunks segmented at once, >= 1 */
    int reverse; /* 1: chunks (and their records) in reverse order */
} cnx_segjoin_schedule;

/**
 * The whole three-step method in one process, over a volume held in
 * memory: what the workers compute, for tests and benchmarks. The result
 * is the same bytes for every schedule.
 * @param boundary  size[0]*size[1]*size[2] boundary values in [0, 1]
 * @param chunk     chunk size per axis
 * @param halo      voxels each chunk's fragments see beyond it
 * @param sched     NULL: one thread, forward
 * @param[out] labels  segment ids, x fastest
 */
int cnx_segjoin_chunked(const float *boundary, const int64_t size[3],
                        const int64_t chunk[3], int64_t halo,
                        const cnx_segment_params *p,
                        const cnx_segjoin_schedule *sched, uint64_t *labels);

#ifdef __cplusplus
}
#endif
#endif
