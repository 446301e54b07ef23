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

#include <math.h>
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
    /* Hard style only (synth_hard*.c). */
    SYNTH_STREAM_HARD_NEURITES = 13,
    SYNTH_STREAM_HARD_CELLS = 14,   /* cell seeds, hashed per grid cell */
    SYNTH_STREAM_HARD_WARP = 15,    /* + octave << 8 + axis << 4 */
    SYNTH_STREAM_HARD_OBJECTS = 16, /* per-object appearance */
    SYNTH_STREAM_HARD_TEXTURE = 17, /* + octave << 8 */
    SYNTH_STREAM_HARD_MITO = 18,
    SYNTH_STREAM_HARD_GAPS = 19,
    SYNTH_STREAM_HARD_SHEETS = 20,
    SYNTH_STREAM_HARD_FIELD = 21, /* + field << 8 */
    SYNTH_STREAM_HARD_SECTIONS = 22,
    SYNTH_STREAM_HARD_IMAGE_NOISE = 23,
    SYNTH_STREAM_HARD_BOUNDARY_NOISE = 24,
    SYNTH_STREAM_HARD_CLEFT_NOISE = 25,
    SYNTH_STREAM_HARD_PSD_NOISE = 26,
    /* Both styles: section distortions (synth_sections.c). */
    SYNTH_STREAM_SECTIONS = 27, /* + section index << 8 */
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

/** a . b, summed in index order. */
static inline double cnx_synth__dot3(const double a[3], const double b[3])
{
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2];
}

/** Scale v (not zero) to unit length. */
static inline void cnx_synth__normalize3(double v[3])
{
    const double n = sqrt(cnx_synth__dot3(v, v));
    v[0] /= n;
    v[1] /= n;
    v[2] /= n;
}

/** Uniform direction: rejection sampling in the unit ball. */
static inline void cnx_synth__random_unit(synth_rng *rng, double v[3])
{
    double n2;
    do {
        v[0] = 2.0 * cnx_synth__rng_unit(rng) - 1.0;
        v[1] = 2.0 * cnx_synth__rng_unit(rng) - 1.0;
        v[2] = 2.0 * cnx_synth__rng_unit(rng) - 1.0;
        n2 = cnx_synth__dot3(v, v);
    } while (n2 > 1.0 || n2 < 1e-6);
    cnx_synth__normalize3(v);
}

/** Extents of a volume being generated. */
typedef struct synth_dims {
    int64_t sx, sy, sz;
    int64_t n; /* sx * sy * sz */
} synth_dims;

/**
 * How the synapse stage measures distances: classic in voxels (exact
 * integer arithmetic), hard in nm (voxel offsets times w).
 */
typedef struct synth_metric {
    int physical; /* 0: voxels (classic style), 1: nm (hard style) */
    double w[3];  /* nm per voxel when physical, else 1 */
    double wmin;  /* smallest of w */
} synth_metric;

/** The metric of p's style. */
void cnx_synth__metric(synth_metric *m, const cnx_synth_params *p);

/**
 * Paint branching neurite skeletons as capsules into label (0 = empty),
 * objects numbered 1..*nobjects in generation order, no two objects closer
 * than one voxel. @return 0 or CNX_ENOMEM.
 */
int cnx_synth__neurites(uint32_t *label, uint32_t *nobjects,
                        const synth_dims *d, const cnx_synth_params *p);

/**
 * Paints neurites as capsules (a segment a-b, radius ra at a to rb at b)
 * into a label volume. Positions and radii are in voxels when res is
 * {1, 1, 1} (classic style) and in nm when res is the resolution (hard
 * style); voxel centres lie at index x res. Tracks the voxel count painted
 * and the inclusive box of the object being painted (synth_neurites.c).
 */
typedef struct synth_painter {
    uint32_t *label;
    const synth_dims *d;
    double res[3];
    int64_t painted;
    int64_t bmin[3], bmax[3]; /* inclusive box of the current object */
} synth_painter;

/** Start a new object: empty its box. */
void cnx_synth__painter_begin(synth_painter *pt);

/** 1 if no voxel of an object other than id lies within the capsule grown
 *  by grow. */
int cnx_synth__painter_free(const synth_painter *pt, const double a[3],
                            const double b[3], double ra, double rb,
                            double grow, uint32_t id);

/** Label the empty voxels in the capsule id; grows the object's box. */
void cnx_synth__painter_paint(synth_painter *pt, const double a[3],
                              const double b[3], double ra, double rb,
                              uint32_t id);

/** Remove object id (painted inside the box) again. */
void cnx_synth__painter_erase(synth_painter *pt, uint32_t id);

/** 1 if p lies outside the volume (beyond the outer voxels' half). */
int cnx_synth__painter_outside(const synth_painter *pt, const double p[3]);

/**
 * Direction of a branch off an arm heading dir (unit): half dir plus a
 * random unit vector perpendicular to it, normalised. Draws from rng.
 */
void cnx_synth__branch_dir(synth_rng *rng, const double dir[3],
                           double out[3]);

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

/**
 * comp[i] = the 6-connected component (same label) of voxel i, numbered
 * 0.. in scan order of each component's first voxel.
 * @return the number of components.
 */
uint32_t cnx_synth__components(uint32_t *comp, const uint32_t *label,
                               const synth_dims *d);

/** The labels a piece touches, with the faces it shares with each. */
typedef struct synth_contacts {
    struct synth_contact {
        uint32_t label;
        int64_t faces;
    } *c;
    size_t count, cap;
} synth_contacts;

/** Count one more face with label. @return 0 or CNX_ENOMEM. Free c with
 *  free(). */
int cnx_synth__contacts_add(synth_contacts *s, uint32_t label);

/** The label with the most faces (ties: the lower label); count > 0. */
uint32_t cnx_synth__contacts_pick(const synth_contacts *s);

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
 * Visit the cleft or PSD voxels of a synapse (see cnx_synth_synapse) under
 * metric m: calls fn(ctx, x, y, z) once per voxel, in scan order.
 * @return the number of voxels visited (fn may be NULL just to count), or
 *         CNX_ENOMEM.
 */
int64_t cnx_synth__synapse_voxels(
    const cnx_synth_synapse *syn, int which, const synth_metric *m,
    const uint32_t *label, const synth_dims *d,
    void (*fn)(void *ctx, int64_t x, int64_t y, int64_t z), void *ctx);

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

/* ---- hard style (synth_hard.c, synth_hard_layers.c) ------------------ */

/**
 * A smooth random field in [-1, 1]: values on a lattice of the given
 * spacing in nm (so the same physical size on every axis), trilinear in
 * between. Values come from the counter hash of (seed, stream, node).
 */
typedef struct synth_field {
    double step[3]; /* lattice spacing in voxels per axis */
    int64_t n[3];   /* nodes per axis */
    double *v;      /* n[0] * n[1] * n[2] values, x fastest */
    double *col;    /* scratch for cnx_synth__field_row, n[0] values */
} synth_field;

/** @return 0 or CNX_ENOMEM; free with cnx_synth__field_free. */
int cnx_synth__field_init(synth_field *f, const synth_dims *d,
                          const double res[3], double spacing_nm, uint64_t seed,
                          uint64_t stream);
void cnx_synth__field_free(synth_field *f);

/** out[x] = the field at voxel (x, y, z) for x in 0..sx-1. */
void cnx_synth__field_row(synth_field *f, int64_t sx, int64_t y, int64_t z,
                          double *out);

/**
 * Paint neurites in nm: radius varying smoothly along each, wandering
 * paths, branches, several orientation families (docs/synth.md).
 * Objects are numbered 1..*count; they may touch but never overlap.
 * @return 0 or CNX_ENOMEM.
 */
int cnx_synth__hard_neurites(uint32_t *label, uint32_t *count,
                             const synth_dims *d, const cnx_synth_params *p);

/**
 * Give every unlabelled voxel a cell: the nearest seed of a jittered grid
 * under a warped, weighted distance in nm, labels nneurites + 1 + cell.
 * @return 0; CNX_ENOMEM; CNX_ERANGE if the labels would overflow.
 */
int cnx_synth__hard_cells(uint32_t *label, uint32_t nneurites,
                          const synth_dims *d, const cnx_synth_params *p);

/**
 * Make objects of the 6-connected pieces: pieces under the minimum volume
 * join the neighbour they share most faces with, every other piece is an
 * object; objects are numbered 1..*nobjects in (old label, scan) order.
 * @return 0 or CNX_ENOMEM.
 */
int cnx_synth__hard_settle(uint32_t *label, uint32_t *nobjects,
                           const synth_dims *d, const cnx_synth_params *p);

/**
 * Render the hard style's image, boundary, cleft and psd volumes of synth
 * (allocated by the caller) from label and the synapse list.
 * @return 0 or CNX_ENOMEM.
 */
int cnx_synth__hard_render(cnx_synth *synth, const uint32_t *label,
                           const synth_dims *d);

#endif
