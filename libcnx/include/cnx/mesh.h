/*
 * cnx/mesh.h - surface mesh of one label of a segmentation (pure kernel).
 *
 * Marching cubes at iso level 0.5 on the indicator function of one label,
 * on the dual grid (cube corners are voxel centres), with the volume padded
 * by one voxel of "outside" on every face so every object comes out closed.
 * Every crossing lies at the midpoint of a grid edge (the indicator is 0 or
 * 1), and there is exactly one vertex per crossing grid edge.
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
 * the cube, so no triangle has zero area.
 */
#ifndef CNX_MESH_H
#define CNX_MESH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever the meshes it writes are meant to change. */
#define CNX_MESH_VERSION 1

typedef struct cnx_mesh {
    size_t nverts, ntris;
    float *verts;    /* 3 per vertex: x, y, z in the caller's units */
    uint32_t *tris;  /* 3 vertex indices per triangle, counter-clockwise
                        seen from outside (normals point out) */
} cnx_mesh;

/** Free the arrays of a mesh and zero it (the struct is the caller's).
 * Accepts NULL and a zeroed mesh. */
void cnx_mesh_free(cnx_mesh *m);

/**
 * Mesh the voxels of `labels` equal to `label`.
 *
 * Vertex position = grid coordinate * scale + offset, computed in double
 * and rounded to float; voxel (x, y, z)'s centre has grid coordinate
 * (x, y, z). Vertex ids follow a fixed traversal (cubes in z, y, x order,
 * a vertex numbered when first used), so the output bytes depend only on
 * the input. A label absent from the volume gives an empty mesh (0, NULL).
 *
 * @param labels  sx*sy*sz labels, x fastest (borrowed)
 * @param size    sx, sy, sz >= 1
 * @param label   the label to mesh (any value, 0 included)
 * @param scale   grid-to-caller units per axis (e.g. nm per voxel)
 * @param offset  caller position of voxel (0, 0, 0)'s centre
 * @param[out] out  arrays owned by the caller, free with cnx_mesh_free();
 *                  zeroed on failure
 * @return 0; CNX_EINVAL for NULL arguments or a size < 1; CNX_ETOOBIG for
 *         more than 2^40 voxels or more than 2^32 - 1 vertices or
 *         triangles; CNX_ENOMEM.
 * Memory: the mesh plus about 16 bytes per voxel of one xy section.
 * Thread-safety: no shared state; call from any number of threads.
 */
int cnx_mesh_label(const uint64_t *labels, const int64_t size[3],
                   uint64_t label, const double scale[3],
                   const double offset[3], cnx_mesh *out);

#ifdef __cplusplus
}
#endif
#endif
