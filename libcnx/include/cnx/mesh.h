/*
 * cnx/mesh.h - surface meshes of the labels of a segmentation (pure
 * kernels): multilabel marching cubes over a block of a chunked volume,
 * quadric simplification that keeps chunk-face vertices, and the
 * Neuroglancer legacy mesh fragment format. docs/mesh.md has the method,
 * the seam argument and measured figures.
 *
 * Marching cubes at iso level 0.5 on the indicator function of each label,
 * on the dual grid (cube corners are voxel centres); voxels outside the
 * data read as "outside" (background 0), so every object comes out closed.
 * Every crossing lies at the midpoint of a grid edge (the indicator is 0 or
 * 1), and there is exactly one vertex per crossing grid edge and label.
 *
 * Ambiguity: instead of the classic 256-case table (whose ambiguous faces
 * make holes), each cube's polygons are built from its six faces. A face
 * whose two inside corners are diagonal is always resolved the same way:
 * the inside corners are separated (inside is 6-connected: voxels of the
 * label meeting only at an edge or a corner give separate shells). Because
 * a face's segments depend on that face alone, the two cubes sharing a face
 * agree on them, with opposite directions; chaining the oriented segments
 * of a cube gives closed loops that visit each crossing edge of the cube
 * once. Hence the surface is a closed, consistently oriented 2-manifold for
 * every mask (no interior ambiguity is resolved: there is no tunnel case).
 * A loop of 3 or 4 vertices becomes 1 or 2 triangles; a longer loop gets an
 * extra vertex at its centroid and a fan around it. No three edge
 * midpoints of a cube are collinear and the centroid lies strictly inside
 * the cube, so no triangle has zero area. A cube whose corners carry k
 * labels is polygonised once for each non-zero label among them, with that
 * label's corners as the inside set.
 */
#ifndef CNX_MESH_H
#define CNX_MESH_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/geom.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the meshes it writes are meant to change.
 *  2: multilabel block meshing, voxel-centre positions in nm.
 *  3: a chunk at the volume's low face keeps its own face's vertices (so
 *  no triangle crosses it), mesh indexes carry each fragment's digest,
 *  and multi-resolution Draco meshes. */
#define CNX_MESH_VERSION 3

typedef struct cnx_mesh {
    size_t nverts, ntris;
    float *verts;   /* 3 per vertex: x, y, z in the caller's units */
    uint32_t *tris; /* 3 vertex indices per triangle, counter-clockwise
                       seen from outside (normals point out) */
} cnx_mesh;

/** Free the arrays of a mesh and zero it (the struct is the caller's).
 * Accepts NULL and a zeroed mesh. */
void cnx_mesh_free(cnx_mesh *m);

/**
 * Mesh the voxels of `labels` equal to `label` (voxels outside the volume
 * are not `label`, whatever it is: label 0 may be meshed too).
 *
 * Vertex position = grid coordinate * scale + offset, computed in double
 * and rounded to float; voxel (x, y, z)'s centre has grid coordinate
 * (x, y, z). Vertex ids follow the fixed sweep of cnx_mesh_block_run(),
 * so the output bytes depend only on the input. A label absent from the
 * volume gives an empty mesh (0, NULL).
 * Runs the multilabel pass below on the label's indicator.
 *
 * @param labels  sx*sy*sz labels, x fastest (borrowed)
 * @param size    sx, sy, sz >= 1
 * @param label   the label to mesh (any value, 0 included)
 * @param scale   grid-to-caller units per axis (e.g. nm per voxel)
 * @param offset  caller position of voxel (0, 0, 0)'s centre
 * @param[out] out  arrays owned by the caller, free with cnx_mesh_free();
 *                  zeroed on failure
 * @return 0; CNX_EINVAL for NULL arguments or a size < 1; CNX_ETOOBIG for
 *         more than 2^40 voxels, an xy section over 2^28 voxels, or more
 *         than 2^32 - 2 vertices or 2^32 - 1 triangles; CNX_ENOMEM.
 * Memory: the mesh plus about 70 bytes per voxel of one xy section.
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_mesh_label(const uint64_t *labels, const int64_t size[3],
                   uint64_t label, const double scale[3],
                   const double offset[3], cnx_mesh *out);

/**
 * A block of a segmentation and the dual cells of it to polygonise.
 *
 * A chunking worker meshing chunk [a, b) (per axis) of a volume [v0, v1)
 * reads the voxels [a, min(b + 1, v1)) (one voxel of overlap on the high
 * faces where the volume continues) and polygonises the cells
 * [a - (a == v0), b): cell c has corner voxels c and c + 1, so every cell
 * of the volume padded by one voxel of 0 is polygonised by exactly one
 * chunk, and the fragments of one label join into a closed surface.
 */
typedef struct cnx_mesh_block {
    const uint64_t *labels; /* size[0]*size[1]*size[2], x fastest (borrowed) */
    int64_t size[3];        /* >= 1 each */
    int64_t origin[3];      /* global voxel coordinate of labels[0] */
    cnx_box cells;          /* global range of dual cells to polygonise, min
                               inclusive / max exclusive: cell c has corner
                               voxels c..c+1 on each axis; corner voxels
                               outside the block read as 0 */
    double resolution[3];   /* nm per voxel, > 0 */
} cnx_mesh_block;

/** The meshes of the labels of a block: labels ascending, each with at
 *  least one triangle; label 0 (background) is never meshed. */
typedef struct cnx_mesh_set {
    size_t n;
    uint64_t *labels;
    cnx_mesh *meshes;
} cnx_mesh_set;

/**
 * Mesh every non-zero label of a block in one pass over its cells.
 *
 * Positions: a vertex at global grid coordinate g (voxel i's centre has
 * g = i; crossings are at half-integers) is written at
 * (float)((g + 0.5) * resolution) nm, computed in double: voxel centres,
 * matching Neuroglancer's rendering of voxel i as [i, i+1) * resolution.
 * Positions are a function of global coordinates only, so a vertex on a
 * face between two chunks has the same bytes in both chunks' fragments;
 * the polygons of a cell depend on its eight corner labels only. Vertex
 * ids follow a fixed sweep (docs/mesh.md: section by section in z, the
 * vertices of crossing grid edges row by row, then each layer's cells in
 * y, x order with their loop centroids), triangles the cells' z, y, x
 * order, so the output bytes depend only on the input.
 *
 * @param b  the block (borrowed); an empty `cells` box gives an empty set
 * @param[out] out  owned by the caller, free with cnx_mesh_set_free();
 *                  zeroed on failure
 * @return 0; CNX_EINVAL for NULL arguments, a size < 1, a resolution that
 *         is not finite and > 0, or coordinates beyond +-2^50;
 *         CNX_ETOOBIG for a block or cell box over 2^40 voxels, an xy
 *         section of the cell box over 2^28 cells, or a label over
 *         2^32 - 2 vertices or 2^32 - 1 triangles; CNX_ENOMEM.
 * Memory: the meshes, about 70 bytes per cell of one xy section, and up
 * to 1.2 MB of address space per label, touched only as the mesh grows.
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_mesh_block_run(const cnx_mesh_block *b, cnx_mesh_set *out);

/** Free every mesh of a set and zero it. Accepts NULL and a zeroed set. */
void cnx_mesh_set_free(cnx_mesh_set *s);

/** Options of cnx_mesh_simplify(). */
typedef struct cnx_mesh_simplify_opts {
    double target_fraction; /* stop at <= this fraction of the triangles,
                               in [0, 1] */
    double max_error;       /* make no collapse whose quadric error (sum of
                               squared distances to the original triangles'
                               planes, nm^2) exceeds this; >= 0, INFINITY
                               for no limit */
    int nplanes;            /* 0..6 fixed planes */
    int plane_axis[6];      /* 0, 1, 2: x, y, z */
    double plane_at[6];     /* coordinate in the mesh's units (nm) */
} cnx_mesh_simplify_opts;

/**
 * Set o's fixed planes to the six faces of b's cell box: the planes of
 * grid coordinate cells.min and cells.max on each axis, at
 * (coordinate + 0.5) * resolution, the formula of cnx_mesh_block_run(), so
 * that vertices on a chunk face compare equal. Leaves the other fields.
 */
void cnx_mesh_block_planes(const cnx_mesh_block *b, cnx_mesh_simplify_opts *o);

/**
 * Quadric-error simplification (Garland-Heckbert edge collapse) of a mesh.
 *
 * Merges a vertex into a neighbour at a point of their edge (the minimum
 * of their summed quadrics on the segment, or the neighbour itself if it
 * is fixed), cheapest first, until the mesh has at most target_fraction
 * of its triangles or no collapse costs at most max_error. The order is
 * greedy in passes (as meshoptimizer does): each pass takes the cheaper
 * half of the vertices' best collapses, in vertex order, and skips those
 * next to one made in the same pass; ties go to the lower vertex index.
 * Fixed, never moved or removed: vertices whose coordinate on a plane's
 * axis equals (float)plane_at (chunk-face vertices, so that neighbouring
 * fragments still join), vertices on an open or non-manifold edge, and
 * vertices whose triangles do not form a single fan. A collapse is refused
 * when it would break the link condition (create a non-manifold edge or
 * change the topology), add an edge between two fixed vertices (it could
 * duplicate one of the neighbouring fragment's), turn a triangle's normal
 * by more than about 75 degrees or make a near-degenerate triangle. So a
 * closed (or bordered) consistently oriented 2-manifold stays one, with
 * the same boundary and genus. Deterministic: the same input gives the
 * same bytes. Surviving vertices and triangles keep their relative order.
 *
 * @param m  the mesh, rewritten in place (arrays may be reallocated)
 * @param o  options (borrowed)
 * @return 0; CNX_EINVAL for NULL arguments, an index out of range, a
 *         target_fraction outside [0, 1], a max_error < 0 or NaN, or a bad
 *         plane; CNX_ETOOBIG over 2^32 - 1 vertices or 2^29 triangles;
 *         CNX_ENOMEM (m unchanged on failure).
 * Memory: about 200 bytes per vertex and 52 per triangle.
 * Thread-safety: no shared state.
 */
int cnx_mesh_simplify(cnx_mesh *m, const cnx_mesh_simplify_opts *o);

/**
 * Encode a mesh as a Neuroglancer precomputed legacy mesh fragment:
 * uint32le vertex count, float32le x, y, z per vertex, uint32le vertex
 * indices, 3 per triangle.
 *
 * @param[out] out  malloc'd bytes owned by the caller (free()); NULL on
 *                  failure
 * @param[out] len  their length, 4 + 12 * (nverts + ntris)
 * @return 0; CNX_EINVAL for NULL arguments or an index out of range;
 *         CNX_ETOOBIG for more than 2^32 - 1 vertices; CNX_ENOMEM.
 */
int cnx_mesh_legacy_encode(const cnx_mesh *m, uint8_t **out, size_t *len);

/**
 * Decode a legacy mesh fragment.
 *
 * @param buf, len  the fragment (borrowed)
 * @param[out] out  owned by the caller, free with cnx_mesh_free(); zeroed
 *                  on failure
 * @return 0; CNX_EINVAL for NULL arguments; CNX_ECORRUPT, naming what is
 *         wrong, for a fragment shorter than its header or its vertices, a
 *         triangle section not a multiple of 12 bytes, or an index out of
 *         range; CNX_ENOMEM.
 */
int cnx_mesh_legacy_decode(const uint8_t *buf, size_t len, cnx_mesh *out);

/* ---- multi-resolution meshes (neuroglancer_multilod_draco) ------------- */

/** Vertex quantization bits of the multi-resolution meshes (10 or 16 in
 *  the format; cnx writes 16). */
#define CNX_MESH_MR_BITS 16
/** At most this many levels of detail (the octree of 2^21 cells a side). */
#define CNX_MESH_MR_MAX_LODS 22

/**
 * Morton (z-order) code of an octree position: bit i of x, y, z goes to bit
 * 3i, 3i + 1, 3i + 2 (x lowest), the order Neuroglancer wants fragments in.
 * Coordinates must be below 2^21.
 */
uint64_t cnx_mesh_morton(const uint32_t pos[3]);

/** One fragment of a manifest: its level, octree position, byte size. */
typedef struct cnx_mesh_mr_frag {
    uint32_t lod;
    uint32_t pos[3];
    uint32_t size;
} cnx_mesh_mr_frag;

/** A segment's manifest (<id>.index), as the format has it. */
typedef struct cnx_mesh_mr_index {
    float chunk_shape[3];         /* a level-0 cell, stored model units */
    float grid_origin[3];         /* low corner of cell (0, 0, 0) */
    uint32_t num_lods;            /* 1..CNX_MESH_MR_MAX_LODS */
    const float *lod_scales;      /* num_lods */
    const float *vertex_offsets;  /* num_lods * 3 */
    size_t nfrags;
    const cnx_mesh_mr_frag *frags; /* by lod, then Morton order within it */
} cnx_mesh_mr_index;

/**
 * Encode a manifest: chunk_shape, grid_origin (3 float32le each), num_lods
 * (uint32le), lod_scales, vertex_offsets (float32le), fragments per lod
 * (uint32le), then per lod the positions as a [3][n] uint32le array and the
 * fragment sizes (uint32le).
 * @param[out] out  malloc'd, the caller frees; @param[out] len its length
 * @return 0; CNX_EINVAL for NULL arguments, num_lods out of range, a
 *         fragment whose lod is not below num_lods, fragments not sorted
 *         by lod then strictly increasing Morton code, or a position at or
 *         over 2^21; CNX_ENOMEM.
 */
int cnx_mesh_mr_index_encode(const cnx_mesh_mr_index *ix, uint8_t **out,
                             size_t *len);

/**
 * Draco-encode a mesh whose vertex positions are integers (3 uint32 per
 * vertex, each below 2^bits), as an integer POSITION attribute without
 * Draco's own quantization (edgebreaker, speed 5); deterministic bytes.
 * Implemented in C++ (mesh_draco.cc) on Debian's libdraco: Draco has no C
 * interface.
 * @param[out] out  malloc'd, the caller frees; @param[out] len its length
 * @return 0; CNX_EINVAL for NULL arguments, no triangles, an index out of
 *         range or a coordinate at or over 2^bits; CNX_ENOMEM; CNX_EIO if
 *         Draco refuses the mesh (its message).
 */
int cnx_mesh_draco_encode(const uint32_t *pos, size_t nverts,
                          const uint32_t *tris, size_t ntris, int bits,
                          uint8_t **out, size_t *len);

/** How a segment's multi-resolution mesh is built (cnx_mesh_mr_build). */
typedef struct cnx_mesh_mr_params {
    int64_t origin[3];     /* grid coordinate of cell (0, 0, 0)'s low corner
                              (voxel i's centre has grid coordinate i) */
    int64_t cell[3];       /* a level-0 cell in voxels (the chunk size) */
    double resolution[3];  /* nm per voxel; positions are
                              (float)((g + 0.5) * resolution) nm, the
                              formula of cnx_mesh_block_run() */
    double simplify;       /* target fraction of each coarser level's
                              simplification, in (0, 1] */
} cnx_mesh_mr_params;

/** Per-level figures of one build (summed by the caller if it likes). */
typedef struct cnx_mesh_mr_stats {
    uint32_t num_lods;
    uint64_t frags[CNX_MESH_MR_MAX_LODS];
    uint64_t tris[CNX_MESH_MR_MAX_LODS];
    uint64_t bytes[CNX_MESH_MR_MAX_LODS];
} cnx_mesh_mr_stats;

/**
 * Build one segment's multi-resolution mesh from its chunk meshes (the
 * level-0 pieces, positions in nm as cnx_mesh_block_run() writes them).
 * Level 0: each piece's triangles go to the level-0 cell that holds them
 * (all three vertices inside, faces included); a triangle no cell holds is
 * an error. Level k >= 1: each level-(k-1) fragment, its equal positions
 * welded, is simplified with the six faces of its cell fixed (target
 * fraction p->simplify, no error limit), and the (up to eight) results in
 * one level-k cell make that cell's fragment: no triangle crosses the 2x2x2
 * partition, neighbours still meet vertex for vertex. Levels are added
 * until one cell holds the whole segment. Every fragment is quantized in
 * its cell to CNX_MESH_MR_BITS bits (a vertex on the cell's middle plane
 * gets exactly 2^(bits-1), the partition point Neuroglancer uses) and
 * Draco-encoded; fragments without triangles are left out.
 * @param[out] index, index_len  the manifest (<id>.index), malloc'd
 * @param[out] data, data_len    the fragment data (<id>), malloc'd
 * @param[out] st  per-level figures (may be NULL)
 * @return 0; CNX_EINVAL for bad arguments or a triangle that no level-0
 *         cell holds (naming it); CNX_ETOOBIG past 2^21 cells a side or
 *         4 GiB of fragment data; CNX_ENOMEM; Draco's errors.
 */
int cnx_mesh_mr_build(const cnx_mesh *pieces, size_t npieces,
                      const cnx_mesh_mr_params *p, uint8_t **index,
                      size_t *index_len, uint8_t **data, size_t *data_len,
                      cnx_mesh_mr_stats *st);

#ifdef __cplusplus
}
#endif
#endif