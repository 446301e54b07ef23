/*
 * synth_int.h - shared internals of the synthetic dataset kernel.
 *
 * Random numbers: every stage draws from its own xoshiro256** stream,
 * seeded through splitmix64 from (seed, stream tag), so stages do not shift
 * each other's draws when one changes. Per-voxel noise comes from a counter
 * hash of (seed, tag, index) instead, so it does not depend on visiting
 * order. Volumes are x fastest, then y, then z; index = x + sx*(y + sy*z).
 */
#ifndef CNX_SYNTH_INT_H
#define CNX_SYNTH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/synth.h"

/* Stream tags: one per stage, never reused for another purpose. */
enum {
    SYNTH_STREAM_NEURITES = 1,
    SYNTH_STREAM_OBJECTS = 2, /* per-object appearance */
    SYNTH_STREAM_TEXTURE = 3,
    SYNTH_STREAM_SPECKS = 4,
    SYNTH_STREAM_IMAGE_NOISE = 5,
    SYNTH_STREAM_GAPS = 6,
    SYNTH_STREAM_BOUNDARY_NOISE = 7,
    SYNTH_STREAM_SYNAPSES = 8,
    SYNTH_STREAM_CLEFT_NOISE = 9,
    SYNTH_STREAM_PSD_NOISE = 10,
    SYNTH_STREAM_TILES = 11,      /* + section index << 8 */
    SYNTH_STREAM_TILE_NOISE = 12, /* + section index << 8 */
};

typedef struct synth_rng {
    uint64_t s[4];
} synth_rng;

/** splitmix64 output function: a strong 64-bit mix. */
static inline uint64_t cnx_synth__mix(uint64_t z)
{
    z += UINT64_C(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/** Key of the counter hash for (seed, stream). */
static inline uint64_t cnx_synth__hash_key(uint64_t seed, uint64_t stream)
{
    return cnx_synth__mix(seed ^ cnx_synth__mix(stream));
}

/** Counter hash of (seed, stream, index) = mix(key + index): per-voxel
 *  noise; loops compute the key once. */
static inline uint64_t cnx_synth__hash(uint64_t seed, uint64_t stream,
                                       uint64_t index)
{
    return cnx_synth__mix(cnx_synth__hash_key(seed, stream) + index);
}

void cnx_synth__rng_init(synth_rng *rng, uint64_t seed, uint64_t stream);

static inline uint64_t cnx_synth__rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/** xoshiro256** next output. */
static inline uint64_t cnx_synth__rng_next(synth_rng *rng)
{
    uint64_t *s = rng->s;
    const uint64_t result = cnx_synth__rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = cnx_synth__rotl(s[3], 45);
    return result;
}

/** Uniform integer in [lo, hi] (hi - lo < 2^32). */
static inline int64_t cnx_synth__rng_range(synth_rng *rng, int64_t lo,
                                           int64_t hi)
{
    const uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(((cnx_synth__rng_next(rng) >> 32) * span) >> 32);
}

/** Uniform double in [0, 1), 53 random bits. */
static inline double cnx_synth__rng_unit(synth_rng *rng)
{
    return (double)(cnx_synth__rng_next(rng) >> 11) * 0x1.0p-53;
}

/**
 * Noise from a hash: the sum of its four low 16-bit halves' top bytes,
 * centred, so roughly Gaussian with standard deviation ~147.8 over the
 * range -510..510.
 */
static inline int32_t cnx_synth__noise(uint64_t h)
{
    return (int32_t)((h >> 8) & 0xff) + (int32_t)((h >> 24) & 0xff) +
           (int32_t)((h >> 40) & 0xff) + (int32_t)((h >> 56) & 0xff) - 510;
}

/** Extents of a volume being generated. */
typedef struct synth_dims {
    int64_t sx, sy, sz;
    int64_t n; /* sx * sy * sz */
} synth_dims;

/**
 * Paint branching neurite skeletons as capsules into label (0 = empty),
 * objects numbered 1..*nobjects in generation order, no two objects closer
 * than one voxel. @return 0 or CNX_ENOMEM.
 */
int cnx_synth__neurites(uint32_t *label, uint32_t *nobjects,
                        const synth_dims *d, const cnx_synth_params *p);

/**
 * Give every empty voxel the label of its nearest labelled voxel (exact
 * Euclidean feature transform, separable; ties go by a fixed rule, see
 * edt_line). At least one voxel must be labelled. @return 0 or CNX_ENOMEM.
 */
int cnx_synth__fill(uint32_t *label, const synth_dims *d);

/**
 * Make every object one 6-connected component: a stray piece of an object
 * (not its largest) joins the neighbouring object it shares most faces
 * with. @return 0 or CNX_ENOMEM.
 */
int cnx_synth__connect(uint32_t *label, const synth_dims *d);

/** flags[i] = SYNTH_MEMBRANE where voxel i has a 6-neighbour with another
 *  label, else 0. */
void cnx_synth__membrane(uint8_t *flags, const uint32_t *label,
                         const synth_dims *d);

/**
 * Choose synapse sites on object interfaces and fill in their sites,
 * partners and sizes, sorted by site (z, y, x) and numbered 1..n.
 * @param[out] out  caller frees with free()
 * @return 0 or CNX_ENOMEM.
 */
int cnx_synth__synapses(cnx_synth_synapse **out, size_t *count,
                        const uint32_t *label, const synth_dims *d,
                        const cnx_synth_params *p);

/** Which voxel set of a synapse cnx_synth__synapse_voxels visits. */
enum { SYNTH_CLEFT = 0, SYNTH_PSD = 1 };

/**
 * Visit the cleft or PSD voxels of a synapse (see cnx_synth_synapse):
 * calls fn(ctx, x, y, z) once per voxel, in scan order.
 * @return the number of voxels visited (fn may be NULL just to count).
 */
int64_t cnx_synth__synapse_voxels(const cnx_synth_synapse *syn, int which,
                                  const uint32_t *label, const synth_dims *d,
                                  void (*fn)(void *ctx, int64_t x, int64_t y,
                                             int64_t z),
                                  void *ctx);

/* Bits of the per-voxel flag array shared by the rendering stages. */
enum { SYNTH_MEMBRANE = 1, SYNTH_SPECK = 2 };

/**
 * Render the image, boundary, cleft and psd volumes of synth (allocated by
 * the caller) from label and the synapse list. flags holds SYNTH_MEMBRANE
 * bits on entry; rendering adds SYNTH_SPECK bits. @return 0 or CNX_ENOMEM.
 */
int cnx_synth__render(cnx_synth *synth, const uint32_t *label, uint8_t *flags,
                      const synth_dims *d);

/**
 * Blur a volume of 16-bit values in place with the separable kernel
 * [1 2 1]/4 on each axis, edges replicated, rounding half up.
 * @return 0 or CNX_ENOMEM.
 */
int cnx_synth__blur(uint16_t *v, const synth_dims *d);

#endif
