/*
 * cnx/sharded.h - the Neuroglancer precomputed sharded format
 * (neuroglancer_uint64_sharded_v1): reading, and encoding one shard.
 *
 * A sharded scale packs its chunks, each keyed by a uint64 chunk id (for a
 * volume: the compressed Morton code of the chunk's grid position), into
 * 2^shard_bits files "<shard hex>.shard". Each file opens with a fixed shard
 * index (2^minishard_bits entries of 16 bytes) locating its minishard
 * indexes; a minishard index lists chunk ids, offsets and sizes. This module
 * is pure: no JSON (precomputed.c parses the "sharding" member) and no
 * storage: chunk lookups go through a caller-given ranged read, so a file
 * store and an object store can both serve them (cnx_sharded_store_read
 * adapts a cnx_store: sharded_store.c). Every offset and length read from a
 * shard is checked before use. The write side is a pure encoder
 * (cnx_shard_encode: chunks in, one shard file's bytes out) and the rule
 * that picks a spec for a volume (cnx_sharding_choose); where the bytes
 * go is the caller's business.
 */
#ifndef CNX_SHARDED_H
#define CNX_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_shard_hash {
    CNX_SHARD_HASH_IDENTITY = 1,
    CNX_SHARD_HASH_MURMUR3 = 2, /* murmurhash3_x86_128, seed 0, low 64 bits */
} cnx_shard_hash;

typedef enum cnx_shard_encoding {
    CNX_SHARD_ENC_RAW = 1,
    CNX_SHARD_ENC_GZIP = 2,
} cnx_shard_encoding;

/* The sharding spec of one scale (its "sharding" JSON member). */
typedef struct cnx_sharding {
    int preshift_bits;  /* 0..64 */
    int minishard_bits; /* 0..CNX_SHARD_MAX_MINISHARD_BITS */
    int shard_bits;     /* 0..64 - minishard_bits */
    cnx_shard_hash hash;
    cnx_shard_encoding minishard_index_encoding;
    cnx_shard_encoding data_encoding;
} cnx_sharding;

/* A shard index of 2^40 entries is 16 TiB: no real layer has one. */
#define CNX_SHARD_MAX_MINISHARD_BITS 40
/* Limits on what one lookup reads or inflates (decoded sizes). */
#define CNX_SHARD_MAX_MINISHARD_INDEX ((uint64_t)64 << 20)
#define CNX_SHARD_MAX_CHUNK ((uint64_t)1 << 30)
/* "<16 hex digits>.shard" and its NUL. */
#define CNX_SHARD_NAME_MAX 24

/**
 * Check a spec's ranges and enums.
 * @return 0; CNX_EINVAL naming the bad field ("sharding: shard_bits: ...").
 */
int cnx_sharding_check(const cnx_sharding *spec);

/**
 * MurmurHash3_x86_128 of len bytes with a 32-bit seed: out[0..3] are the
 * four 32-bit words h1..h4 (out[0] | out[1] << 32 is the low 64 bits).
 */
void cnx_murmur3_x86_128(const void *key, size_t len, uint32_t seed,
                         uint32_t out[4]);

/**
 * Compressed Morton code of grid position pos in a grid of shape grid:
 * bit i of axis d (x, y, z in turn, bit 0 first) is taken while
 * 2^i < grid[d], so an axis of extent 1 spends no bits.
 * @param[out] code  the chunk id
 * @return 0; CNX_ERANGE if pos lies outside the grid or the code needs more
 *         than 64 bits.
 */
int cnx_sharding_morton(const uint64_t pos[3], const uint64_t grid[3],
                        uint64_t *code);

/** @return hash(chunk_id >> preshift_bits) under the spec's hash. */
uint64_t cnx_sharding_hash(const cnx_sharding *spec, uint64_t chunk_id);

/** The shard and minishard that hold chunk_id (spec must be checked). */
void cnx_sharding_locate(const cnx_sharding *spec, uint64_t chunk_id,
                         uint64_t *shard, uint64_t *minishard);

/**
 * Name of shard file shard: lowercase hex zero-padded to
 * ceil(shard_bits/4) digits (at least one), then ".shard": "0.shard" for
 * shard_bits 0, "0a3.shard" for shard 0xa3 of 12 shard bits.
 */
void cnx_sharding_shard_name(const cnx_sharding *spec, uint64_t shard,
                             char name[CNX_SHARD_NAME_MAX]);

/** @return the size of a shard index in bytes: 16 << minishard_bits. */
uint64_t cnx_sharding_index_size(const cnx_sharding *spec);

/** A byte range [start, end) of a shard file, absolute. */
typedef struct cnx_shard_range {
    uint64_t start;
    uint64_t end;
} cnx_shard_range;

/**
 * Decode a whole shard index: one absolute range per minishard.
 * @param data  the first cnx_sharding_index_size() bytes of a shard file
 * @param[out] out  2^minishard_bits ranges; caller frees with free()
 * @return 0; CNX_ECORRUPT naming the entry for a wrong length, an end before
 *         its start or an offset that overflows; CNX_ETOOBIG if the index is
 *         over 64 MiB (read single entries with cnx_sharded_read_chunk).
 */
int cnx_shard_index_decode(const cnx_sharding *spec, const uint8_t *data,
                           size_t len, cnx_shard_range **out);

/** One chunk of a minishard index, located absolutely in its shard file. */
typedef struct cnx_minishard_entry {
    uint64_t chunk_id;
    uint64_t offset;
    uint64_t size;
} cnx_minishard_entry;

/**
 * Decode a minishard index as stored (gunzipped first when the spec's
 * minishard_index_encoding is gzip).
 * @param[out] out  n entries in stored order; caller frees with free()
 *                  (NULL when n is 0)
 * @return 0; CNX_ECORRUPT for a length not a multiple of 24, bad gzip, or a
 *         chunk id or offset that overflows 64 bits; CNX_ETOOBIG over
 *         CNX_SHARD_MAX_MINISHARD_INDEX decoded.
 */
int cnx_minishard_index_decode(const cnx_sharding *spec, const uint8_t *data,
                               size_t len, cnx_minishard_entry **out,
                               size_t *n);

/**
 * Inflate a gzip stream (one or more members) of at most max_out bytes.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ECORRUPT for bad or truncated gzip; CNX_ETOOBIG if the
 *         output would pass max_out; CNX_ENOMEM.
 */
int cnx_sharded_gunzip(const uint8_t *data, size_t len, size_t max_out,
                       uint8_t **out, size_t *out_len);

/**
 * Ranged read of a shard file, given by the caller.
 * Contract: on 0, *out holds exactly length bytes from offset (malloc'd, the
 * caller of the callback frees it; NULL is allowed when length is 0).
 * @return 0; CNX_ENOTFOUND if the shard file does not exist; CNX_ERANGE if
 *         [offset, offset + length) is not inside the file; CNX_EIO (and
 *         the error message set) on storage failure.
 */
typedef int (*cnx_shard_read_fn)(void *ctx, const char *shard_name,
                                 uint64_t offset, uint64_t length,
                                 uint8_t **out);

/**
 * Read one chunk: hash its id, read its minishard's entry of the shard
 * index, the minishard index, then the chunk's bytes, decoded per the
 * spec's data_encoding. Three ranged reads; no cache.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ENOTFOUND if the chunk is in no minishard (or its shard
 *         file is missing); CNX_ECORRUPT naming the shard and what is wrong
 *         (a range past the end of the file, a bad index, bad gzip);
 *         CNX_ETOOBIG; the read callback's CNX_EIO.
 */
int cnx_sharded_read_chunk(const cnx_sharding *spec, uint64_t chunk_id,
                           cnx_shard_read_fn read, void *ctx, uint8_t **out,
                           size_t *len);

/**
 * Read and decode the minishard index of minishard of shard (two ranged
 * reads: its shard index entry, then the index): what
 * cnx_sharded_read_chunk does first, for a caller that keeps indexes.
 * @param[out] out  n entries (n is 0 for an empty minishard, out NULL);
 *                   caller frees with free()
 * @return 0; CNX_ENOTFOUND if the shard file is missing; CNX_ECORRUPT;
 *         CNX_ETOOBIG; the read callback's CNX_EIO.
 */
int cnx_sharded_read_minishard(const cnx_sharding *spec, uint64_t shard,
                               uint64_t minishard, cnx_shard_read_fn read,
                               void *ctx, cnx_minishard_entry **out,
                               size_t *n);

/**
 * Read the chunk that entry (from shard's minishard index) locates, decoded
 * per the spec's data_encoding: one ranged read.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ECORRUPT (past the end of the shard, bad gzip);
 *         CNX_ETOOBIG; CNX_ENOTFOUND if the shard file is missing; CNX_EIO.
 */
int cnx_sharded_read_entry(const cnx_sharding *spec, uint64_t shard,
                           const cnx_minishard_entry *entry,
                           cnx_shard_read_fn read, void *ctx, uint8_t **out,
                           size_t *len);

/* Where a scale's shards live: a store and the scale's directory in it. */
typedef struct cnx_sharded_source {
    cnx_store *store;   /* borrowed */
    const char *prefix; /* the scale's key ("8_8_8"); "" or NULL: the root */
} cnx_sharded_source;

/**
 * A cnx_shard_read_fn over a store: ctx is a cnx_sharded_source, the shard
 * is the object "<prefix>/<shard_name>", read with cnx_store_get_range
 * (file://: pread; s3://, gs://, http(s)://: one GET with Range; never
 * through the read cache). A range the object does not hold in full is
 * CNX_ERANGE (the store itself returns a short read). A zero-length range
 * reads nothing but is still checked: the object must exist and hold at
 * least offset bytes (one 1-byte ranged read, or an exists at offset 0).
 * @return 0; CNX_ENOTFOUND (no such shard); CNX_ERANGE; CNX_ETOOBIG
 *         (length over CNX_STORE_MAX_OBJECT); CNX_ENAME (the joined name
 *         is not a valid object name); the store's CNX_EIO.
 * Thread-safety: as the store (the source is only read).
 */
int cnx_sharded_store_read(void *ctx, const char *shard_name, uint64_t offset,
                           uint64_t length, uint8_t **out);

/* --- write side ---------------------------------------------------------- */

/* One chunk given to the encoder: its id and its (unencoded) bytes, and
 * optionally bytes stored raw immediately before them that no minishard
 * index entry covers (the fragment data of a sharded multi-resolution
 * mesh, which precede its manifest: docs/formats.md). */
typedef struct cnx_shard_chunk {
    uint64_t chunk_id;
    const uint8_t *data; /* borrowed; may be NULL when len is 0 */
    size_t len;
    const uint8_t *prefix; /* borrowed; NULL when prefix_len is 0 */
    size_t prefix_len;
} cnx_shard_chunk;

/* The gzip level of the encoder (fixed: the same chunks give the same
 * bytes on every run and every build). */
#define CNX_SHARD_GZIP_LEVEL 6

/**
 * Encode shard file shard of spec from n chunks (any order). Layout: the
 * shard index, then minishard by minishard in increasing order, its chunks
 * by increasing id (each stored per data_encoding, after its prefix, stored
 * raw, if any) followed by its
 * minishard index (ids delta-coded, offsets from the end of the previous
 * chunk, sizes; per minishard_index_encoding). Deterministic: gzip at
 * CNX_SHARD_GZIP_LEVEL with mtime 0, no name, OS byte 255, so the input
 * set alone decides the bytes (not its order). n == 0 gives a valid shard
 * whose minishards are all empty; writers omit such a shard (a missing
 * shard reads as one holding no chunks).
 * @param[out] out  caller frees with free()
 * @return 0; CNX_EINVAL naming the chunk if one is not in this shard or an
 *         id repeats (spec must pass cnx_sharding_check); CNX_ETOOBIG if
 *         a chunk is over CNX_SHARD_MAX_CHUNK or the shard index over
 *         CNX_SHARD_MAX_MINISHARD_INDEX; CNX_ENOMEM.
 */
int cnx_shard_encode(const cnx_sharding *spec, uint64_t shard,
                     const cnx_shard_chunk *chunks, size_t n, uint8_t **out,
                     size_t *len);

/* What a shard and a minishard should hold; 0 takes the default. */
typedef struct cnx_sharding_target {
    uint64_t shard_bytes;      /* unencoded chunk bytes a shard holds at
                                  most (default CNX_SHARD_TARGET_BYTES) */
    uint64_t minishard_chunks; /* chunks a minishard holds at most
                                  (default CNX_SHARD_TARGET_MINISHARD) */
} cnx_sharding_target;

#define CNX_SHARD_TARGET_BYTES ((uint64_t)256 << 20)
#define CNX_SHARD_TARGET_MINISHARD 64

/**
 * Choose a sharding spec for a volume scale of grid chunks per axis, each
 * chunk chunk_bytes unencoded bytes (x*y*z*channels*bytes per voxel).
 * Identity hash over compressed Morton ids, so a shard is an aligned
 * block of the chunk grid (a contiguous Morton range) and a minishard a
 * smaller one inside it:
 *   B = bits of the compressed Morton id (sum over axes of ceil(log2 n));
 *   c = floor(log2(max(1, shard_bytes / chunk_bytes))), at most B:
 *       a shard holds 2^c chunks;
 *   preshift_bits = min(c, floor(log2 minishard_chunks)): a minishard
 *       holds 2^preshift_bits consecutive ids (raised so that
 *       minishard_bits is at most 22: a shard index of at most 64 MiB);
 *   minishard_bits = c - preshift_bits;  shard_bits = B - c.
 * Minishard index: gzip; data: raw (the chunk encoding compresses).
 * @return 0; CNX_EINVAL for a zero axis or chunk_bytes 0; CNX_ERANGE if
 *         the grid needs more than 64 bits of id.
 */
int cnx_sharding_choose(const uint64_t grid[3], uint64_t chunk_bytes,
                        const cnx_sharding_target *target, cnx_sharding *out);

/**
 * Choose a sharding spec for n ids that are not grid positions (segment
 * ids: of meshes, skeletons), holding total_bytes in all (as stored):
 * murmurhash3_x86_128 hash, preshift_bits 0, so ids spread evenly over
 * shards and minishards whatever their values;
 *   shard_bits = ceil(log2(ceil(total_bytes / shard_bytes))), at most
 *       ceil(log2 n): a shard holds about shard_bytes;
 *   minishard_bits = ceil(log2(ceil(n / 2^shard_bits / minishard_chunks))),
 *       at most 22: a minishard lists about minishard_chunks ids;
 *   shard_bits + minishard_bits at most 64.
 * Minishard index: gzip; data: raw (a mesh's fragments are read from the
 * shard by byte range, so they cannot be compressed as a whole).
 * @return 0 (n 0 gives a spec of one shard and one minishard).
 */
int cnx_sharding_choose_ids(uint64_t n, uint64_t total_bytes,
                            const cnx_sharding_target *target,
                            cnx_sharding *out);

/**
 * The block of the chunk grid that one shard of a spec chosen by
 * cnx_sharding_choose covers (identity hash): the low preshift_bits +
 * minishard_bits bits of a compressed Morton id are the lowest bits of
 * each axis's position, taken x, y, z in turn while the axis has bits.
 * @param grid  chunks per axis
 * @param[out] block  chunks per axis in one shard (powers of two)
 */
void cnx_sharding_block(const cnx_sharding *spec, const uint64_t grid[3],
                        uint64_t block[3]);

#ifdef __cplusplus
}
#endif
#endif
