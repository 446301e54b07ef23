/*
 * synth_layers.c - the image, boundary, cleft and psd volumes.
 *
 * Each layer is built in 16-bit fixed point (gray level x 16) in one work
 * buffer, blurred with [1 2 1]/4 on each axis, then given white noise from
 * a per-voxel counter hash and rounded and clamped to uint8. The image is a
 * per-object mean plus a smooth two-octave lattice texture, dark membranes
 * (voxels with a 6-neighbour of another object) and dark organelle specks.
 * The boundary map is the membrane mask with a few gaps where it fades to
 * nothing, weak responses on specks, then blur and noise. Cleft and psd are
 * the synapses' voxel sets (synth_synapses.c), blurred, with faint noise.
 * All arithmetic is integer; every value depends only on the seed and the
 * voxel, never on visiting order.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

/* Gray levels (0..255). */
#define MEMBRANE_LEVEL 52
#define MEAN_MIN 142
#define MEAN_SPAN 56 /* object means in MEAN_MIN .. MEAN_MIN+SPAN-1 */
#define SPECK_DARKEN 70
#define IMAGE_NOISE 7 /* standard deviation, gray levels */
#define BOUNDARY_NOISE 6
#define SYNAPSE_NOISE 3
#define SPECK_BOUNDARY 64
/* Texture lattices: spacing in voxels; the fine octave has half weight. */
#define TEX_COARSE 12
#define TEX_FINE 5
/* One speck per this many voxels, one boundary gap per this many. */
#define SPECK_VOXELS 5000
#define GAP_VOXELS ((int64_t)1 << 21)

/* Blur along the row index: groups of rows rows of len values each; prev
 * and cur hold len values. Rows are updated in place, keeping the original
 * of the row before and of the current row. */
static void blur_rows(uint16_t *v, int64_t groups, int64_t group_stride,
                      int64_t rows, int64_t len, uint16_t *prev, uint16_t *cur)
{
    int64_t g, r, k;
    for (g = 0; g < groups; g++) {
        uint16_t *base = v + g * group_stride;
        memcpy(prev, base, (size_t)len * sizeof(*prev));
        for (r = 0; r < rows; r++) {
            uint16_t *row = base + r * len;
            const uint16_t *next;
            uint16_t *t;
            memcpy(cur, row, (size_t)len * sizeof(*cur));
            next = r + 1 < rows ? row + len : cur;
            for (k = 0; k < len; k++)
                row[k] = (uint16_t)(((uint32_t)prev[k] + 2u * cur[k] + next[k] +
                                     2u) >>
                                    2);
            t = prev;
            prev = cur;
            cur = t;
        }
    }
}

int cnx_synth__blur(uint16_t *v, const synth_dims *d)
{
    const int64_t plane = d->sx * d->sy;
    const int64_t lmax = plane > d->sx ? plane : d->sx;
    uint16_t *prev = malloc((size_t)lmax * sizeof(*prev));
    uint16_t *cur = malloc((size_t)lmax * sizeof(*cur));
    int64_t r, x;

    if (prev == NULL || cur == NULL) {
        free(prev);
        free(cur);
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    }
    /* x: each row on its own. */
    for (r = 0; r < d->sy * d->sz; r++) {
        uint16_t *row = v + r * d->sx;
        memcpy(cur, row, (size_t)d->sx * sizeof(*cur));
        for (x = 0; x < d->sx; x++) {
            const uint32_t l = cur[x > 0 ? x - 1 : 0];
            const uint32_t h = cur[x + 1 < d->sx ? x + 1 : x];
            row[x] = (uint16_t)((l + 2u * cur[x] + h + 2u) >> 2);
        }
    }
    /* y: rows of each plane; z: whole planes. */
    blur_rows(v, d->sz, plane, d->sy, d->sx, prev, cur);
    blur_rows(v, 1, 0, d->sz, plane, prev, cur);
    free(prev);
    free(cur);
    return 0;
}

/* Add noise of standard deviation sigma gray levels to a 16x fixed-point
 * buffer and store it rounded and clamped as uint8. */
static void finish(uint8_t *out, const uint16_t *v, const synth_dims *d,
                   uint64_t seed, uint64_t stream, int sigma)
{
    const uint64_t key = cnx_synth__hash_key(seed, stream);
    int64_t i;
    for (i = 0; i < d->n; i++) {
        const int32_t nz = cnx_synth__noise(cnx_synth__mix(key + (uint64_t)i));
        int32_t val = (int32_t)v[i] + nz * sigma * 16 / 148;
        val = val < 0 ? 0 : (val + 8) / 16;
        out[i] = (uint8_t)(val > 255 ? 255 : val);
    }
}

/* A lattice of random values in -64..64 for the texture. */
typedef struct lattice {
    int64_t step;
    int64_t n[3];
    int16_t *v;
} lattice;

static int lattice_init(lattice *lat, const synth_dims *d, int64_t step,
                        uint64_t seed, uint64_t stream)
{
    int64_t i, total;
    lat->step = step;
    lat->n[0] = d->sx / step + 2;
    lat->n[1] = d->sy / step + 2;
    lat->n[2] = d->sz / step + 2;
    total = lat->n[0] * lat->n[1] * lat->n[2];
    lat->v = malloc((size_t)total * sizeof(*lat->v));
    if (lat->v == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    for (i = 0; i < total; i++)
        lat->v[i] =
            (int16_t)((int64_t)(cnx_synth__hash(seed, stream, (uint64_t)i) %
                                129) -
                      64);
    return 0;
}

/*
 * Trilinear texture along row (y, z): out[x] in -1024..1024 (value x 16).
 * col is scratch of lat->n[0] entries.
 */
static void lattice_row(const lattice *lat, int64_t sx, int64_t y, int64_t z,
                        int32_t *out, int64_t *col)
{
    const int64_t s = lat->step;
    const int64_t ly = y / s, wy = y % s, lz = z / s, wz = z % s;
    const int64_t nx = lat->n[0], nxy = lat->n[0] * lat->n[1];
    int64_t i, x;
    /* Bilinear in (y, z) at every lattice x: scale s^2. */
    for (i = 0; i < nx; i++) {
        const int16_t *p = lat->v + lz * nxy + ly * nx + i;
        col[i] = (int64_t)p[0] * (s - wy) * (s - wz) +
                 (int64_t)p[nx] * wy * (s - wz) +
                 (int64_t)p[nxy] * (s - wy) * wz +
                 (int64_t)p[nxy + nx] * wy * wz;
    }
    for (x = 0; x < sx; x++) {
        const int64_t lx = x / s, wx = x % s;
        const int64_t t = col[lx] * (s - wx) + col[lx + 1] * wx;
        /* t / s^3 is in -64..64; times 16, rounded toward zero. */
        out[x] = (int32_t)(t * 16 / (s * s * s));
    }
}

typedef struct look {
    int32_t mean; /* gray level */
    int32_t amp;  /* texture amplitude, gray levels */
} look;

static void add_specks(uint8_t *flags, const uint32_t *label,
                       const synth_dims *d, uint64_t seed)
{
    const int64_t count = d->n / SPECK_VOXELS;
    int64_t k, x, y, z;
    synth_rng rng;

    cnx_synth__rng_init(&rng, seed, SYNTH_STREAM_SPECKS);
    for (k = 0; k < count; k++) {
        const int64_t cx = cnx_synth__rng_range(&rng, 0, d->sx - 1);
        const int64_t cy = cnx_synth__rng_range(&rng, 0, d->sy - 1);
        const int64_t cz = cnx_synth__rng_range(&rng, 0, d->sz - 1);
        const int64_t r =
            cnx_synth__rng_range(&rng, 1, 2) + cnx_synth__rng_range(&rng, 0, 1);
        const int64_t r2 = r * r + 1;
        const int64_t c = (cz * d->sy + cy) * d->sx + cx;
        const uint32_t own = label[c];
        if (flags[c] & SYNTH_MEMBRANE)
            continue;
        for (z = cz - r; z <= cz + r; z++) {
            for (y = cy - r; y <= cy + r; y++) {
                for (x = cx - r; x <= cx + r; x++) {
                    const int64_t dx = x - cx, dy = y - cy, dz = z - cz;
                    int64_t i;
                    if (x < 0 || y < 0 || z < 0 || x >= d->sx || y >= d->sy ||
                        z >= d->sz || dx * dx + dy * dy + dz * dz > r2)
                        continue;
                    i = (z * d->sy + y) * d->sx + x;
                    if (label[i] == own && !(flags[i] & SYNTH_MEMBRANE))
                        flags[i] |= SYNTH_SPECK;
                }
            }
        }
    }
}

static int render_image(uint8_t *out, uint16_t *v, const uint32_t *label,
                        const uint8_t *flags, const synth_dims *d,
                        uint64_t seed, uint64_t nobjects)
{
    lattice coarse = {0}, fine = {0};
    look *looks = malloc(((size_t)nobjects + 1) * sizeof(*looks));
    int32_t *tc = malloc((size_t)d->sx * sizeof(*tc));
    int32_t *tf = malloc((size_t)d->sx * sizeof(*tf));
    int64_t *col = NULL, i, x, y, z;
    int rc = 0;

    if (looks == NULL || tc == NULL || tf == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i <= (int64_t)nobjects; i++) {
        const uint64_t h =
            cnx_synth__hash(seed, SYNTH_STREAM_OBJECTS, (uint64_t)i);
        looks[i].mean = MEAN_MIN + (int32_t)(h % MEAN_SPAN);
        looks[i].amp = 8 + (int32_t)((h >> 32) % 13);
    }
    rc = lattice_init(&coarse, d, TEX_COARSE, seed, SYNTH_STREAM_TEXTURE);
    if (rc == 0)
        rc = lattice_init(&fine, d, TEX_FINE, seed,
                          SYNTH_STREAM_TEXTURE + 0x100);
    if (rc < 0)
        goto done;
    col = malloc((size_t)fine.n[0] * sizeof(*col));
    if (col == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            lattice_row(&coarse, d->sx, y, z, tc, col);
            lattice_row(&fine, d->sx, y, z, tf, col);
            for (x = 0; x < d->sx; x++, i++) {
                const look *lk = &looks[label[i]];
                int32_t g;
                if (flags[i] & SYNTH_MEMBRANE) {
                    g = 16 * MEMBRANE_LEVEL;
                } else {
                    /* (tc + tf/2) * amp / 64 is +-1.5 amp gray levels. */
                    g = 16 * lk->mean + (2 * tc[x] + tf[x]) * lk->amp / 128;
                    if (flags[i] & SYNTH_SPECK)
                        g -= 16 * SPECK_DARKEN;
                    g = g < 16 * 20 ? 16 * 20 : g;
                }
                v[i] = (uint16_t)g;
            }
        }
    }
    rc = cnx_synth__blur(v, d);
    if (rc == 0)
        finish(out, v, d, seed, SYNTH_STREAM_IMAGE_NOISE, IMAGE_NOISE);
done:
    free(looks);
    free(tc);
    free(tf);
    free(col);
    free(coarse.v);
    free(fine.v);
    return rc;
}

static int render_boundary(uint8_t *out, uint16_t *v, const uint8_t *flags,
                           const synth_dims *d, uint64_t seed)
{
    const int64_t gaps =
        d->n / GAP_VOXELS > 0 ? d->n / GAP_VOXELS : (d->n >= 32768 ? 1 : 0);
    int64_t i, g, x, y, z;
    synth_rng rng;

    for (i = 0; i < d->n; i++) {
        if (flags[i] & SYNTH_MEMBRANE)
            v[i] = 16 * 255;
        else if (flags[i] & SYNTH_SPECK)
            v[i] = 16 * SPECK_BOUNDARY;
        else
            v[i] = 0;
    }
    /* Gaps: around a membrane voxel the boundary fades towards the centre
     * (value times d^2 / R^2), as where a network misses a membrane. */
    cnx_synth__rng_init(&rng, seed, SYNTH_STREAM_GAPS);
    for (g = 0; g < gaps; g++) {
        int64_t c[3] = {0, 0, 0}, tries, r;
        int found = 0;
        r = cnx_synth__rng_range(&rng, 3, 5);
        for (tries = 0; tries < 256 && !found; tries++) {
            c[0] = cnx_synth__rng_range(&rng, 0, d->sx - 1);
            c[1] = cnx_synth__rng_range(&rng, 0, d->sy - 1);
            c[2] = cnx_synth__rng_range(&rng, 0, d->sz - 1);
            found = (flags[(c[2] * d->sy + c[1]) * d->sx + c[0]] &
                     SYNTH_MEMBRANE) != 0;
        }
        if (!found)
            continue;
        for (z = c[2] - r; z <= c[2] + r; z++) {
            for (y = c[1] - r; y <= c[1] + r; y++) {
                for (x = c[0] - r; x <= c[0] + r; x++) {
                    const int64_t dx = x - c[0], dy = y - c[1], dz = z - c[2];
                    const int64_t d2 = dx * dx + dy * dy + dz * dz;
                    if (x < 0 || y < 0 || z < 0 || x >= d->sx || y >= d->sy ||
                        z >= d->sz || d2 >= r * r)
                        continue;
                    i = (z * d->sy + y) * d->sx + x;
                    v[i] = (uint16_t)((int64_t)v[i] * d2 / (r * r));
                }
            }
        }
    }
    if (cnx_synth__blur(v, d) < 0)
        return CNX_ENOMEM;
    finish(out, v, d, seed, SYNTH_STREAM_BOUNDARY_NOISE, BOUNDARY_NOISE);
    return 0;
}

typedef struct mark_ctx {
    uint16_t *v;
    const synth_dims *d;
} mark_ctx;

static void mark(void *ctx, int64_t x, int64_t y, int64_t z)
{
    mark_ctx *m = ctx;
    m->v[(z * m->d->sy + y) * m->d->sx + x] = 16 * 255;
}

static int render_synapses(uint8_t *out, uint16_t *v, const cnx_synth *synth,
                           const uint32_t *label, const synth_dims *d,
                           int which, uint64_t stream)
{
    mark_ctx m = {v, d};
    synth_metric metric;
    size_t k;
    cnx_synth__metric(&metric, &synth->params);
    memset(v, 0, (size_t)d->n * sizeof(*v));
    for (k = 0; k < synth->nsynapses; k++) {
        if (cnx_synth__synapse_voxels(&synth->synapses[k], which, &metric,
                                      label, d, mark, &m) < 0)
            return CNX_ENOMEM;
    }
    if (cnx_synth__blur(v, d) < 0)
        return CNX_ENOMEM;
    finish(out, v, d, synth->params.seed, stream, SYNAPSE_NOISE);
    return 0;
}

int cnx_synth__render(cnx_synth *synth, const uint32_t *label, uint8_t *flags,
                      const synth_dims *d)
{
    const uint64_t seed = synth->params.seed;
    uint16_t *v = malloc((size_t)d->n * sizeof(*v));
    int rc;

    if (v == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    add_specks(flags, label, d, seed);
    rc = render_image(synth->image->data, v, label, flags, d, seed,
                      synth->nobjects);
    if (rc == 0)
        rc = render_boundary(synth->boundary->data, v, flags, d, seed);
    if (rc == 0)
        rc = render_synapses(synth->cleft->data, v, synth, label, d,
                             SYNTH_CLEFT, SYNTH_STREAM_CLEFT_NOISE);
    if (rc == 0)
        rc = render_synapses(synth->psd->data, v, synth, label, d, SYNTH_PSD,
                             SYNTH_STREAM_PSD_NOISE);
    free(v);
    return rc;
}
