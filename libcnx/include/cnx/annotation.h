/*
 * cnx/annotation.h - synapses as a Neuroglancer precomputed annotation
 * collection (neuroglancer_annotations_v1, docs/formats.md "Synapse
 * annotations"): POINT annotations at each synapse's site, with the
 * properties score, size and the pre- and post-synaptic points, the
 * relationships pre_synaptic_cell and post_synaptic_cell (the partner
 * segment ids), the annotation id index (by_id/<id>), one related object
 * id index per relationship (rel_<relationship>/<segment id>) and a
 * one-level spatial index (spatial0/<i>_<j>_<k>); each index unsharded
 * (one object per id or cell) or sharded (neuroglancer_uint64_sharded_v1,
 * <key>/<shard>.shard, cnx/sharded.h), by a size rule or the caller.
 *
 * This module owns the format: the encoders are pure (records in, bytes
 * out, no storage); cnx_annotation_build returns every object of a
 * collection, its info included, for the caller to store.
 */
#ifndef CNX_ANNOTATION_H
#define CNX_ANNOTATION_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/sharded.h"
#include "cnx/synapse.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of one encoded annotation without its relationships: the point
 *  (3 float32) and 8 four-byte properties (score, size, pre_x, pre_y,
 *  pre_z, post_x, post_y, post_z); a multiple of 4, so no padding. */
#define CNX_ANNOTATION_RECORD 44

/** Largest spatial cell side, voxels: level 0's grid has
 *  ceil(extent / CNX_ANNOTATION_CELL) cells per axis. */
#define CNX_ANNOTATION_CELL 1024

/** Most cells in the spatial grid (each is one object). */
#define CNX_ANNOTATION_MAX_CELLS 4096

/** How a collection's indexes are stored. */
typedef enum cnx_annotation_layout {
    CNX_ANNOTATION_AUTO = 0, /* sharded from CNX_ANNOTATION_SHARD_MIN
                                synapses on, else unsharded */
    CNX_ANNOTATION_UNSHARDED = 1,
    CNX_ANNOTATION_SHARDED = 2,
} cnx_annotation_layout;

/** CNX_ANNOTATION_AUTO shards a collection of this many synapses or more
 *  (an unsharded one is about 2 objects per synapse). */
#define CNX_ANNOTATION_SHARD_MIN 100000

/** Sharded indexes: chunks a minishard holds at most, and the encoded
 *  chunk bytes a shard holds at most (cnx_annotation_sharding). */
#define CNX_ANNOTATION_MINISHARD_CHUNKS 64
#define CNX_ANNOTATION_SHARD_BYTES ((uint64_t)64 << 20)

/** The coordinate space of a collection: that of one segmentation scale. */
typedef struct cnx_annotation_space {
    double resolution[3]; /* nm per voxel: the info's "dimensions" */
    int64_t lower[3];     /* bounds in voxels (the scale's voxel_offset) */
    int64_t upper[3];     /* exclusive (voxel_offset + size) */
} cnx_annotation_space;

/** One object of a collection, named relative to its directory. */
typedef struct cnx_annotation_object {
    char name[64]; /* "info", "by_id/<id>", "rel_<rel>/<id>", "spatial0/.." */
    uint8_t *data; /* owned */
    size_t len;
} cnx_annotation_object;

/** Every object of a collection; free with cnx_annotation_objects_free. */
typedef struct cnx_annotation_objects {
    cnx_annotation_object *items;
    size_t count;
} cnx_annotation_objects;

/**
 * The spatial grid of level 0: ceil(extent / CNX_ANNOTATION_CELL) cells
 * per axis, each extent / grid voxels wide.
 * @return 0; CNX_EINVAL for an empty or inverted box; CNX_ERANGE for
 *         more than CNX_ANNOTATION_MAX_CELLS cells.
 */
int cnx_annotation_grid(const cnx_annotation_space *sp, int64_t grid[3]);

/**
 * Encode one annotation without its relationships, into
 * CNX_ANNOTATION_RECORD bytes: the point site + 0.5 (the voxel's centre)
 * as float32, then float32 score, uint32 size, float32 pre_site + 0.5 and
 * post_site + 0.5; little-endian. Pure, cannot fail (the caller checks
 * ranges: cnx_annotation_build does).
 */
void cnx_annotation_record(const cnx_synapse *s,
                           uint8_t out[CNX_ANNOTATION_RECORD]);

/**
 * The annotation id index entry of s: its record, then per relationship
 * (pre_synaptic_cell, post_synaptic_cell) a uint32 count and the uint64
 * ids: one id, or none when the id is 0 (no partner found).
 * @param[out] out  caller frees with free()
 * @return 0; CNX_EINVAL for NULL pointers; CNX_ENOMEM.
 */
int cnx_annotation_encode_by_id(const cnx_synapse *s, uint8_t **out,
                                size_t *len);

/**
 * The multiple annotation encoding of items, in the given order: uint64
 * count, the records, then the uint64 ids.
 * @param items  n pointers (may be NULL when n is 0)
 * @param[out] out  caller frees with free()
 * @return 0; CNX_EINVAL for NULL pointers; CNX_ENOMEM.
 */
int cnx_annotation_encode_list(const cnx_synapse *const *items, size_t n,
                               uint8_t **out, size_t *len);

/**
 * The sharding spec of one sharded index of count chunks holding bytes
 * bytes in all (unencoded): murmurhash3_x86_128, preshift 0, gzip
 * minishard indexes and data;
 *   m = ceil(log2(ceil(count / CNX_ANNOTATION_MINISHARD_CHUNKS))) bits of
 *       minishard and shard in all (0 up to 64 chunks);
 *   shard_bits = min(m, ceil(log2(ceil(bytes / CNX_ANNOTATION_SHARD_BYTES))));
 *   minishard_bits = m - shard_bits.
 * Pure, cannot fail.
 */
void cnx_annotation_sharding(uint64_t count, uint64_t bytes, cnx_sharding *out);

/**
 * Every object of the collection of synapses s (any order; ids unique):
 * "info" (canonical JSON), "by_id/<id>" per synapse,
 * "rel_pre_synaptic_cell/<id>" and "rel_post_synaptic_cell/<id>" per
 * non-zero partner id (its synapses in id order), and "spatial0/<i>_<j>_<k>"
 * for every cell of the grid that holds a synapse (its synapses in the
 * order of a hash of their ids, a fixed pseudo-random order); no object
 * is an empty list (Neuroglancer refuses one; a missing one reads as
 * none). Objects are listed info first, then by name within each
 * directory in the order above. The layout is CNX_ANNOTATION_AUTO
 * (cnx_annotation_build_layout).
 *
 * @param[out] out  filled on success only
 * @return 0; CNX_EINVAL for NULL pointers or a bad space (non-positive
 *         resolution, empty box); CNX_ERANGE for a site, pre_site or
 *         post_site outside the space, a size outside [0, 2^32), a score
 *         outside [0, 1] or too many cells; CNX_ECORRUPT for an id given
 *         twice; CNX_ENOMEM. All fatal, one line starting "annotations: ".
 * Memory O(n); time O(n log n).
 */
int cnx_annotation_build(const cnx_synapse *s, size_t n,
                         const cnx_annotation_space *sp,
                         cnx_annotation_objects *out);

/**
 * As cnx_annotation_build, with the indexes laid out per layout. Sharded
 * (CNX_ANNOTATION_SHARDED, or AUTO at CNX_ANNOTATION_SHARD_MIN synapses
 * or more): each index (by_id, each rel_<relationship>, spatial0) is the
 * shard files "<key>/<shard>.shard" (cnx_shard_encode, a spec from
 * cnx_annotation_sharding over the index's objects) of its objects,
 * keyed by annotation id, segment id and the compressed Morton code of
 * the cell over grid_shape (cnx_sharding_morton); the info gives each
 * index its "sharding" member. Shards holding no chunk are not written.
 * @return as cnx_annotation_build; CNX_EINVAL for a bad layout.
 */
int cnx_annotation_build_layout(const cnx_synapse *s, size_t n,
                                const cnx_annotation_space *sp,
                                cnx_annotation_layout layout,
                                cnx_annotation_objects *out);

/** Free the objects (NULL-safe) and zero the struct. */
void cnx_annotation_objects_free(cnx_annotation_objects *objs);

#ifdef __cplusplus
}
#endif
#endif
