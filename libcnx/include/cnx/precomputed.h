/*
 * cnx/precomputed.h - Neuroglancer precomputed volume layers.
 *
 * A layer is a store URL holding `info` (JSON) and, per scale, chunk objects
 * named "<key>/x0-x1_y0-y1_z0-z1". Encodings: `raw` (little-endian, x
 * fastest, then y, z, channel) and `compressed_segmentation` (uint32/uint64).
 * Reads assemble any box from whatever chunking the layer has; writes take
 * chunk-aligned volumes and put every chunk write-once, returning each
 * object's digest for the manifest. Every chunk read may be checked against
 * a digest its task expects.
 */
#ifndef CNX_PRECOMPUTED_H
#define CNX_PRECOMPUTED_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/geom.h"
#include "cnx/sharded.h"
#include "cnx/store.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_layer_type {
    CNX_LAYER_IMAGE = 1,
    CNX_LAYER_SEGMENTATION = 2,
} cnx_layer_type;

typedef enum cnx_encoding {
    CNX_ENC_RAW = 1,
    CNX_ENC_CSEG = 2, /* compressed_segmentation */
    CNX_ENC_JPEG = 3, /* read only: uint8, one channel */
    CNX_ENC_PNG = 4,  /* read only: uint8 or uint16, one channel */
} cnx_encoding;

/* Room for the members of an info (or of a scale) that cnx does not use,
 * kept as canonical JSON and written back as they were. */
#define CNX_INFO_EXTRA_MAX 4096
#define CNX_SCALE_EXTRA_MAX 512

#define CNX_MAX_SCALES 16
#define CNX_SCALE_KEY_MAX 128

typedef struct cnx_scale {
    char key[CNX_SCALE_KEY_MAX]; /* sub-directory, a valid object name */
    int64_t size[3];
    double resolution[3];        /* nm */
    int64_t voxel_offset[3];
    int64_t chunk[3];            /* the first of chunk_sizes */
    cnx_encoding encoding;
    int64_t cseg_block[3];       /* compressed_segmentation_block_size */
    int sharded;                 /* 1: chunks are in shards (sharding) */
    cnx_sharding sharding;       /* valid when sharded */
    char extra[CNX_SCALE_EXTRA_MAX]; /* other members ("hidden",
                                      * "jpeg_quality", ...): "" or a
                                      * canonical JSON object */
} cnx_scale;

typedef struct cnx_layer_info {
    cnx_layer_type type;
    cnx_dtype dtype;
    int64_t channels;
    int nscales;
    cnx_scale scales[CNX_MAX_SCALES];
    char mesh[CNX_SCALE_KEY_MAX];     /* "" if none */
    char segment_properties[CNX_SCALE_KEY_MAX]; /* "" if none */
    char extra[CNX_INFO_EXTRA_MAX]; /* other top-level members: "" or a
                                     * canonical JSON object */
} cnx_layer_info;

/**
 * Fill info with one scale: key "<rx>_<ry>_<rz>" from the resolution, the
 * given size and chunk, offset 0, encoding raw for images and
 * compressed_segmentation (block 8,8,8) for segmentations.
 */
void cnx_info_init(cnx_layer_info *info, cnx_layer_type type, cnx_dtype dtype,
                   const int64_t size[3], const double resolution[3],
                   const int64_t chunk[3]);

/**
 * Parse and check an `info` document. Members cnx does not use, at the top
 * and in a scale ("hidden", "jpeg_quality", other tools' own), are kept in
 * extra and written back by cnx_info_to_json (more than
 * CNX_INFO_EXTRA_MAX / CNX_SCALE_EXTRA_MAX bytes of them is CNX_ETOOBIG);
 * every field we use is checked and a bad one named
 * ("info: scales[0].chunk_sizes: ..."). A
 * scale's "sharding" (neuroglancer_uint64_sharded_v1) is parsed into
 * scale->sharding; its unknown members are ignored, as the format allows.
 * cnx_layer_read and cnx_layer_digests read a sharded scale;
 * cnx_layer_write refuses one (CNX_EUNSUPPORTED).
 * @return 0; CNX_ECORRUPT for malformed JSON or a bad field;
 *         CNX_EUNSUPPORTED for a valid encoding we lack (compresso) or
 *         jpeg/png of a type or channel count we do not read.
 */
int cnx_info_parse(cnx_layer_info *info, const char *json, size_t len);

/**
 * Serialise info as canonical JSON (sorted keys, no whitespace).
 * @param[out] out  caller frees with free()
 */
int cnx_info_to_json(const cnx_layer_info *info, char **out);

/** @return the chunk grid of a scale (its bounds: cnx_grid_bounds). */
cnx_grid cnx_scale_grid(const cnx_scale *scale);

/** @return the chunk grid of scale s. */
cnx_grid cnx_info_grid(const cnx_layer_info *info, int s);

/**
 * Encode one chunk (vol->box must be a chunk of scale s).
 * @param[out] out  caller frees with free()
 */
int cnx_chunk_encode(const cnx_layer_info *info, int s, const cnx_volume *vol,
                     uint8_t **out, size_t *len);
/**
 * Decode one chunk's bytes into vol (vol->box is the chunk's box; its type
 * and channels match info). A wrong size or corrupt data is CNX_ECORRUPT.
 */
int cnx_chunk_decode(const cnx_layer_info *info, int s, const uint8_t *data,
                     size_t len, cnx_volume *vol);

typedef struct cnx_layer cnx_layer;

/**
 * Create a layer at url: write its info (write-once: an identical existing
 * info is fine, a different one is CNX_EIMMUTABLE).
 */
int cnx_layer_create(cnx_layer **out, const char *url,
                     const cnx_layer_info *info);
/** Open an existing layer by reading and checking its info. */
int cnx_layer_open(cnx_layer **out, const char *url);
void cnx_layer_free(cnx_layer *layer);
/** @return the layer's info (borrowed). */
const cnx_layer_info *cnx_layer_get_info(const cnx_layer *layer);
/** @return the layer's store (borrowed). */
cnx_store *cnx_layer_store(cnx_layer *layer);

/**
 * Add a scale to the layer's info, safely when several processes do it at
 * once (read, append, compare-and-swap, retry). A scale with the same key
 * that is already there must be identical (else CNX_EIMMUTABLE). The
 * layer's cached info is refreshed.
 * @param[out] index  the scale's index in the info
 */
int cnx_layer_add_scale(cnx_layer *layer, const cnx_scale *scale, int *index);

/** Re-read the layer's info from storage. */
int cnx_layer_reload(cnx_layer *layer);

/** @return the index of the scale with that key, or -1. */
int cnx_info_find_scale(const cnx_layer_info *info, const char *key);

/** Chunk object name of box at scale s: "<key>/x0-x1_y0-y1_z0-z1". */
int cnx_layer_chunk_name(const cnx_layer_info *info, int s, const cnx_box *box,
                         char *buf, size_t n);

/**
 * Name of a side object of a chunk of scale key: "<dir>/<key>/<x0-x1_y0-
 * y1_z0-z1>", what a stage writes beside (or instead of) the chunk box's
 * voxels, e.g. the face record "faces/8_8_8/0-128_0-128_0-128"
 * (docs/formats.md).
 */
int cnx_side_object_name(const char *dir, const char *key, const cnx_box *box,
                         char *buf, size_t n);

/** An object written or read, with its digest. */
typedef struct cnx_object {
    char name[1536]; /* object name, or "<layer url>/<object name>" */
    char digest[CNX_DIGEST_LEN];
    size_t bytes; /* stored size (0 where the lister does not know it) */
} cnx_object;

/** A growable list of objects (for manifests). */
typedef struct cnx_object_list {
    cnx_object *items;
    size_t count;
    size_t cap;
} cnx_object_list;

void cnx_object_list_init(cnx_object_list *list);
void cnx_object_list_dispose(cnx_object_list *list);
int cnx_object_list_add(cnx_object_list *list, const char *name,
                        const char *digest);

/**
 * Expected digest lookup: return the digest a chunk must have, or NULL if
 * the caller has no expectation for that object.
 */
typedef const char *(*cnx_expect_fn)(void *ctx, const char *name);

enum {
    CNX_READ_FILL_MISSING = 1, /* a missing chunk reads as zeros */
};

/**
 * Read any box of scale s (it must lie inside the scale's bounds) into a new
 * volume, assembling it from the chunks it touches.
 * @param expect   optional expected-digest lookup (NULL: none)
 * @param read     optional: receives every chunk read with its digest
 * A sharded scale's chunks are read from their shards (cnx/sharded.h:
 * compressed Morton id, three ranged reads each); a chunk absent from its
 * shard is a missing chunk. Such a chunk keeps its chunk name
 * ("<key>/<box>"); its digest is that of its bytes as the shard holds them.
 * @return 0; CNX_ERANGE for a box outside the scale; CNX_ENOTFOUND for a
 *         missing chunk (unless CNX_READ_FILL_MISSING); CNX_EDIGEST;
 *         CNX_ECORRUPT for a truncated or corrupt chunk (or shard); CNX_EIO.
 */
int cnx_layer_read(cnx_layer *layer, int s, const cnx_box *box,
                   unsigned flags, cnx_expect_fn expect, void *expect_ctx,
                   cnx_object_list *read, cnx_volume **out);

/**
 * Digest every chunk object of scale s that box touches (box is clipped to
 * the scale), in z, y, x order: what a task that reads box must expect.
 * @return 0; CNX_ENOTFOUND for a missing chunk; CNX_EIO.
 */
int cnx_layer_digests(cnx_layer *layer, int s, const cnx_box *box,
                      cnx_object_list *out);

/**
 * Digest of object name of the layer whose store is given (borrowed), as
 * a task names it: a stored object, or, when none is stored under that name and the
 * layer's info has a sharded scale whose key starts the name, the chunk
 * "<key>/<x0-x1_y0-y1_z0-z1>" inside its shard (its bytes as the shard
 * holds them, after the shard's data encoding: what cnx_layer_read checks
 * and lists).
 * @param size  optional: the object's length in bytes
 * @return 0; CNX_ENOTFOUND; CNX_ECORRUPT for a damaged shard; CNX_EIO.
 */
int cnx_layer_object_digest(cnx_store *store, const char *name,
                            char digest[CNX_DIGEST_LEN], uint64_t *size);

/**
 * Write a chunk-aligned volume (cnx_grid_is_aligned) to scale s: every chunk
 * it covers is encoded and put write-once.
 * @param written  optional: receives every chunk written with its digest,
 *                 in z, y, x chunk order
 * @return 0; CNX_EINVAL if not aligned or of the wrong type;
 *         CNX_EIMMUTABLE; CNX_EIO.
 */
int cnx_layer_write(cnx_layer *layer, int s, const cnx_volume *vol,
                    cnx_object_list *written);

#ifdef __cplusplus
}
#endif
#endif
