/*
 * synth_synapses.c - synapse sites on the interfaces between objects.
 *
 * A candidate is a random voxel on the interface of two objects a and b
 * with a random cleft radius R (4..6). Its cleft is the interface voxels of
 * a and b (either side) within R; the candidate is kept if that disk is
 * well filled (at least ~1.2 pi R^2 voxels, i.e. the contact is broad, not
 * an edge), the site (the cleft voxel nearest the cleft's centroid) lies at
 * least synapse_spacing from every earlier site, and points 3-5 voxels
 * along the cleft normal on either side fall inside the pre- and
 * post-synaptic objects. Which side is pre is a coin flip. Kept synapses
 * are sorted by site (z, y, x) and numbered from 1. Sums are integers, so
 * centroids and normals do not depend on summation order.
 * The hard style measures every distance in nm (voxel offsets times the
 * resolution, synth_metric) with the classic sizes times 8 nm (R 32..48
 * nm, PSD 24 nm, sites 24..40 nm, spacing synapse_spacing x 8 nm), and
 * judges a contact by its area (faces between the two objects within R,
 * at least 0.6 pi R^2) rather than by a voxel count, which would depend
 * on the contact's orientation in an anisotropic grid. The classic style
 * takes exactly the integer paths it always took.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

#define CLEFT_RADIUS_MIN 4
#define CLEFT_RADIUS_MAX 6
/* PSD: post-synaptic voxels within this distance of the cleft, voxels. */
#define PSD_DEPTH 3
/* Distances tried for the pre and post sites, in order, voxels. */
static const int site_depths[] = {4, 3, 5};
/* Voxels from the faces kept free of sites where the volume allows it. */
#define FACE_MARGIN 8
/* The hard style's sizes are the classic ones in 8 nm reference voxels. */
#define REF_NM 8

typedef struct cleft_stats {
    int64_t count[2];  /* voxels on the a side, the b side */
    int64_t sum[2][3]; /* their coordinate sums */
    double area;       /* physical metric: a|b face area, nm^2 */
} cleft_stats;

/* r^2 in the metric's units: classic voxels (exact integers), hard nm. */
static int in_ball(const synth_metric *m, int64_t dx, int64_t dy, int64_t dz,
                   int64_t r)
{
    double ex, ey, ez;
    if (!m->physical)
        return dx * dx + dy * dy + dz * dz <= r * r;
    ex = (double)dx * m->w[0];
    ey = (double)dy * m->w[1];
    ez = (double)dz * m->w[2];
    return ex * ex + ey * ey + ez * ez <= (double)r * (double)r;
}

/* Voxels a ball of radius r reaches along axis i. */
static int64_t ball_reach(const synth_metric *m, int64_t r, int i)
{
    return m->physical ? (int64_t)floor((double)r / m->w[i]) : r;
}

static int64_t idx3(const synth_dims *d, int64_t x, int64_t y, int64_t z)
{
    return (z * d->sy + y) * d->sx + x;
}

/* 1 if the voxel has a 6-neighbour labelled other. */
static int touches(const uint32_t *label, const synth_dims *d, int64_t x,
                   int64_t y, int64_t z, uint32_t other)
{
    const int64_t i = idx3(d, x, y, z);
    const int64_t sxy = d->sx * d->sy;
    return (x > 0 && label[i - 1] == other) ||
           (x + 1 < d->sx && label[i + 1] == other) ||
           (y > 0 && label[i - d->sx] == other) ||
           (y + 1 < d->sy && label[i + d->sx] == other) ||
           (z > 0 && label[i - sxy] == other) ||
           (z + 1 < d->sz && label[i + sxy] == other);
}

/* @return 0 for a voxel not on the a|b interface, 1 on the a side, 2 on
 * the b side. */
static int cleft_side(const uint32_t *label, const synth_dims *d, int64_t x,
                      int64_t y, int64_t z, uint32_t a, uint32_t b)
{
    const uint32_t l = label[idx3(d, x, y, z)];
    if (l == a && touches(label, d, x, y, z, b))
        return 1;
    if (l == b && touches(label, d, x, y, z, a))
        return 2;
    return 0;
}

/* Clipped inclusive box of radius r around c. */
static void ball_box(const synth_metric *m, const synth_dims *d,
                     const int64_t c[3], int64_t r, int64_t lo[3],
                     int64_t hi[3])
{
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    int i;
    for (i = 0; i < 3; i++) {
        const int64_t ri = ball_reach(m, r, i);
        lo[i] = c[i] - ri < 0 ? 0 : c[i] - ri;
        hi[i] = c[i] + ri > ext[i] - 1 ? ext[i] - 1 : c[i] + ri;
    }
}

/* Area of the faces between voxel (x, y, z) and its 6-neighbours labelled
 * other, nm^2. */
static double face_area(const synth_metric *m, const uint32_t *label,
                        const synth_dims *d, int64_t x, int64_t y, int64_t z,
                        uint32_t other)
{
    const int64_t i = idx3(d, x, y, z);
    const int64_t sxy = d->sx * d->sy;
    const double ax = m->w[1] * m->w[2], ay = m->w[0] * m->w[2],
                 az = m->w[0] * m->w[1];
    double area = 0.0;
    if (x > 0 && label[i - 1] == other)
        area += ax;
    if (x + 1 < d->sx && label[i + 1] == other)
        area += ax;
    if (y > 0 && label[i - d->sx] == other)
        area += ay;
    if (y + 1 < d->sy && label[i + d->sx] == other)
        area += ay;
    if (z > 0 && label[i - sxy] == other)
        area += az;
    if (z + 1 < d->sz && label[i + sxy] == other)
        area += az;
    return area;
}

static void cleft_measure(cleft_stats *st, const synth_metric *m,
                          const uint32_t *label, const synth_dims *d,
                          const int64_t c[3], int r, uint32_t a, uint32_t b)
{
    int64_t lo[3], hi[3], x, y, z;
    memset(st, 0, sizeof(*st));
    ball_box(m, d, c, r, lo, hi);
    for (z = lo[2]; z <= hi[2]; z++) {
        for (y = lo[1]; y <= hi[1]; y++) {
            for (x = lo[0]; x <= hi[0]; x++) {
                const int64_t dx = x - c[0], dy = y - c[1], dz = z - c[2];
                int side;
                if (!in_ball(m, dx, dy, dz, r))
                    continue;
                side = cleft_side(label, d, x, y, z, a, b);
                if (side == 0)
                    continue;
                st->count[side - 1]++;
                st->sum[side - 1][0] += x;
                st->sum[side - 1][1] += y;
                st->sum[side - 1][2] += z;
                if (m->physical && side == 1)
                    st->area += face_area(m, label, d, x, y, z, b);
            }
        }
    }
}

/* A broad contact: both sides present and the two-voxel-thick disk at
 * least 60% full (1.2 pi R^2 of an ideal 2 pi R^2); hard style: the faces
 * between the sides cover at least 0.6 pi R^2. */
static int cleft_decent(const cleft_stats *st, const synth_metric *m, int r)
{
    const int64_t total = st->count[0] + st->count[1];
    if (st->count[0] == 0 || st->count[1] == 0)
        return 0;
    if (m->physical)
        return st->area >= 1.885 * (double)r * (double)r;
    return total * 100 >= (int64_t)377 * r * r;
}

/* The cleft voxel nearest the cleft centroid (ties: first in scan order). */
static void cleft_centre(int64_t site[3], const cleft_stats *st,
                         const synth_metric *m, const uint32_t *label,
                         const synth_dims *d, const int64_t c[3], int r,
                         uint32_t a, uint32_t b)
{
    const int64_t total = st->count[0] + st->count[1];
    double centroid[3], best = HUGE_VAL;
    int64_t lo[3], hi[3], x, y, z;
    int i;

    for (i = 0; i < 3; i++)
        centroid[i] = (double)(st->sum[0][i] + st->sum[1][i]) / (double)total;
    ball_box(m, d, c, r, lo, hi);
    for (z = lo[2]; z <= hi[2]; z++) {
        for (y = lo[1]; y <= hi[1]; y++) {
            for (x = lo[0]; x <= hi[0]; x++) {
                const int64_t dx = x - c[0], dy = y - c[1], dz = z - c[2];
                double ex, ey, ez, e2;
                if (!in_ball(m, dx, dy, dz, r) ||
                    cleft_side(label, d, x, y, z, a, b) == 0)
                    continue;
                ex = (double)x - centroid[0];
                ey = (double)y - centroid[1];
                ez = (double)z - centroid[2];
                if (m->physical) {
                    ex *= m->w[0];
                    ey *= m->w[1];
                    ez *= m->w[2];
                }
                e2 = ex * ex + ey * ey + ez * ez;
                if (e2 < best) {
                    best = e2;
                    site[0] = x;
                    site[1] = y;
                    site[2] = z;
                }
            }
        }
    }
}

/* Find a voxel of object want at mid + sign * depth * normal (normal in the
 * metric's units: hard style nm, converted back to voxels per axis). */
static int find_site(int64_t out[3], const synth_metric *m,
                     const uint32_t *label, const synth_dims *d,
                     const double mid[3], const double normal[3], double sign,
                     uint32_t want)
{
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    size_t k;
    int i;
    for (k = 0; k < sizeof(site_depths) / sizeof(site_depths[0]); k++) {
        int ok = 1;
        for (i = 0; i < 3; i++) {
            if (m->physical)
                out[i] =
                    (int64_t)floor(mid[i] +
                                   sign * (double)(site_depths[k] * REF_NM) *
                                       normal[i] / m->w[i] +
                                   0.5);
            else
                out[i] = (int64_t)floor(
                    mid[i] + sign * site_depths[k] * normal[i] + 0.5);
            if (out[i] < 0 || out[i] >= ext[i])
                ok = 0;
        }
        if (ok && label[idx3(d, out[0], out[1], out[2])] == want)
            return 1;
    }
    return 0;
}

/* Sites kept so far, on a grid of cells of side spacing/2 (hard style: at
 * most spacing/2 nm per axis, at least one voxel): a cell's diagonal is
 * shorter than the spacing, so a cell holds at most one site. */
typedef struct site_grid {
    int64_t cell[3], reach[3];
    int64_t n[3];
    int32_t *slot; /* synapse index or -1 */
} site_grid;

static int grid_far_enough(const site_grid *g, const synth_metric *m,
                           const cnx_synth_synapse *syn, const int64_t s[3],
                           int64_t spacing)
{
    int64_t c[3], lo[3], hi[3], x, y, z;
    int i;
    for (i = 0; i < 3; i++) {
        c[i] = s[i] / g->cell[i];
        lo[i] = c[i] - g->reach[i] < 0 ? 0 : c[i] - g->reach[i];
        hi[i] =
            c[i] + g->reach[i] >= g->n[i] ? g->n[i] - 1 : c[i] + g->reach[i];
    }
    for (z = lo[2]; z <= hi[2]; z++) {
        for (y = lo[1]; y <= hi[1]; y++) {
            for (x = lo[0]; x <= hi[0]; x++) {
                const int32_t j = g->slot[(z * g->n[1] + y) * g->n[0] + x];
                int64_t dx, dy, dz;
                if (j < 0)
                    continue;
                dx = syn[j].site[0] - s[0];
                dy = syn[j].site[1] - s[1];
                dz = syn[j].site[2] - s[2];
                if (m->physical) {
                    const double ex = (double)dx * m->w[0],
                                 ey = (double)dy * m->w[1],
                                 ez = (double)dz * m->w[2];
                    if (ex * ex + ey * ey + ez * ez <
                        (double)spacing * (double)spacing)
                        return 0;
                } else if (dx * dx + dy * dy + dz * dz < spacing * spacing) {
                    return 0;
                }
            }
        }
    }
    return 1;
}

static int site_cmp(const void *pa, const void *pb)
{
    const cnx_synth_synapse *a = pa, *b = pb;
    int i;
    for (i = 2; i >= 0; i--) {
        if (a->site[i] != b->site[i])
            return a->site[i] < b->site[i] ? -1 : 1;
    }
    return 0;
}

/* How many synapses to aim for: synapses_per_mvx per 10^6 voxels; hard
 * style per 10^6 reference voxels of (8 nm)^3. */
static int64_t synapse_target(const synth_metric *m, const synth_dims *d,
                              const cnx_synth_params *p)
{
    double ref;
    if (!m->physical)
        return (d->n * (int64_t)p->synapses_per_mvx + 500000) / 1000000;
    ref = (double)d->n * (m->w[0] * m->w[1] * m->w[2]) /
          (double)(REF_NM * REF_NM * REF_NM);
    return (int64_t)floor(ref * (double)p->synapses_per_mvx / 1e6 + 0.5);
}

int cnx_synth__synapses(cnx_synth_synapse **out, size_t *count,
                        const uint32_t *label, const synth_dims *d,
                        const cnx_synth_params *p)
{
    static const int64_t nb[6][3] = {{1, 0, 0},  {-1, 0, 0}, {0, 1, 0},
                                     {0, -1, 0}, {0, 0, 1},  {0, 0, -1}};
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    synth_metric metric;
    const synth_metric *m = &metric;
    int64_t target, attempts, spacing;
    cnx_synth_synapse *syn = NULL;
    site_grid grid;
    int64_t margin[3], att, kept = 0;
    synth_rng rng;
    int i, rc = 0;

    *out = NULL;
    *count = 0;
    cnx_synth__metric(&metric, p);
    target = synapse_target(m, d, p);
    attempts = 200 * target + 2000;
    spacing =
        m->physical ? (int64_t)p->synapse_spacing * REF_NM : p->synapse_spacing;
    if (target == 0)
        return 0;
    memset(&grid, 0, sizeof(grid));
    for (i = 0; i < 3; i++) {
        int64_t edge = FACE_MARGIN;
        if (m->physical) {
            const double half = (double)spacing / 2.0 / m->w[i];
            grid.cell[i] = half < 1.0 ? 1 : (int64_t)half;
            grid.reach[i] =
                (int64_t)ceil((double)spacing / m->w[i] / (double)grid.cell[i]);
            edge = (int64_t)ceil((double)(FACE_MARGIN * REF_NM) / m->w[i]);
        } else {
            grid.cell[i] = p->synapse_spacing / 2;
            grid.reach[i] =
                (p->synapse_spacing + grid.cell[i] - 1) / grid.cell[i];
        }
        grid.n[i] = (ext[i] + grid.cell[i] - 1) / grid.cell[i];
        /* Keep clefts and partner sites off the faces where there is room. */
        margin[i] = (ext[i] - 1) / 2 < edge ? (ext[i] - 1) / 2 : edge;
    }
    grid.slot = malloc((size_t)(grid.n[0] * grid.n[1] * grid.n[2]) *
                       sizeof(*grid.slot));
    syn = calloc((size_t)target, sizeof(*syn));
    if (grid.slot == NULL || syn == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i < grid.n[0] * grid.n[1] * grid.n[2]; i++)
        grid.slot[i] = -1;
    cnx_synth__rng_init(&rng, p->seed, SYNTH_STREAM_SYNAPSES);

    for (att = 0; att < attempts && kept < target; att++) {
        cnx_synth_synapse *s = &syn[kept];
        int64_t c[3], site[3];
        double ca[3], cb[3], mid[3], normal[3], n2 = 0.0, len;
        uint32_t a, b = 0;
        int k0, k, r, pre_is_a;
        cleft_stats st;

        /* Same draws for every attempt, whatever becomes of it. */
        for (i = 0; i < 3; i++)
            c[i] =
                cnx_synth__rng_range(&rng, margin[i], ext[i] - 1 - margin[i]);
        k0 = (int)cnx_synth__rng_range(&rng, 0, 5);
        if (m->physical)
            r = (int)cnx_synth__rng_range(&rng, CLEFT_RADIUS_MIN * REF_NM,
                                          CLEFT_RADIUS_MAX * REF_NM);
        else
            r = (int)cnx_synth__rng_range(&rng, CLEFT_RADIUS_MIN,
                                          CLEFT_RADIUS_MAX);
        pre_is_a = (int)cnx_synth__rng_range(&rng, 0, 1);

        a = label[idx3(d, c[0], c[1], c[2])];
        for (k = 0; k < 6 && b == 0; k++) {
            const int64_t *o = nb[(k0 + k) % 6];
            const int64_t x = c[0] + o[0], y = c[1] + o[1], z = c[2] + o[2];
            if (x < 0 || y < 0 || z < 0 || x >= d->sx || y >= d->sy ||
                z >= d->sz)
                continue;
            if (label[idx3(d, x, y, z)] != a)
                b = label[idx3(d, x, y, z)];
        }
        if (b == 0)
            continue;
        cleft_measure(&st, m, label, d, c, r, a, b);
        if (!cleft_decent(&st, m, r))
            continue;
        cleft_centre(site, &st, m, label, d, c, r, a, b);
        cleft_measure(&st, m, label, d, site, r, a, b);
        if (!cleft_decent(&st, m, r) ||
            !grid_far_enough(&grid, m, syn, site, spacing))
            continue;
        for (i = 0; i < 3; i++) {
            ca[i] = (double)st.sum[0][i] / (double)st.count[0];
            cb[i] = (double)st.sum[1][i] / (double)st.count[1];
            normal[i] = cb[i] - ca[i]; /* from a towards b */
            if (m->physical)
                normal[i] *= m->w[i]; /* nm */
            mid[i] = 0.5 * (ca[i] + cb[i]);
            n2 += normal[i] * normal[i];
        }
        /* Half a voxel (hard: half the finest voxel side) at least. */
        if (n2 < 0.25 * (m->physical ? m->wmin * m->wmin : 1.0))
            continue;
        len = sqrt(n2);
        for (i = 0; i < 3; i++)
            normal[i] /= len;
        s->pre_id = pre_is_a ? a : b;
        s->post_id = pre_is_a ? b : a;
        if (!find_site(s->pre_site, m, label, d, mid, normal,
                       pre_is_a ? -1.0 : 1.0, s->pre_id) ||
            !find_site(s->post_site, m, label, d, mid, normal,
                       pre_is_a ? 1.0 : -1.0, s->post_id))
            continue;
        memcpy(s->site, site, sizeof(site));
        s->radius = m->physical ? 0 : r;
        s->radius_nm = m->physical ? r : 0;
        s->size = st.count[0] + st.count[1];
        grid.slot[((site[2] / grid.cell[2]) * grid.n[1] +
                   site[1] / grid.cell[1]) *
                      grid.n[0] +
                  site[0] / grid.cell[0]] = (int32_t)kept;
        kept++;
    }
    qsort(syn, (size_t)kept, sizeof(*syn), site_cmp);
    for (att = 0; att < kept; att++)
        syn[att].id = (uint64_t)att + 1;
    *out = syn;
    *count = (size_t)kept;
    syn = NULL;
done:
    free(grid.slot);
    free(syn);
    return rc;
}

int64_t cnx_synth__synapse_voxels(
    const cnx_synth_synapse *syn, int which, const synth_metric *m,
    const uint32_t *label, const synth_dims *d,
    void (*fn)(void *ctx, int64_t x, int64_t y, int64_t z), void *ctx)
{
    const int r = m->physical ? syn->radius_nm : syn->radius;
    const int psd = m->physical ? PSD_DEPTH * REF_NM : PSD_DEPTH;
    const uint32_t pre = (uint32_t)syn->pre_id, post = (uint32_t)syn->post_id;
    int64_t lo[3], hi[3], x, y, z, n = 0, ncleft = 0, k;
    int64_t(*cleft)[3] = NULL;

    if (which == SYNTH_PSD) {
        int64_t box = 1;
        int i;
        for (i = 0; i < 3; i++)
            box *= 2 * ball_reach(m, r, i) + 1;
        cleft = malloc((size_t)box * sizeof(*cleft));
        if (cleft == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    }
    ball_box(m, d, syn->site, r, lo, hi);
    for (z = lo[2]; z <= hi[2]; z++) {
        for (y = lo[1]; y <= hi[1]; y++) {
            for (x = lo[0]; x <= hi[0]; x++) {
                const int64_t dx = x - syn->site[0], dy = y - syn->site[1],
                              dz = z - syn->site[2];
                if (!in_ball(m, dx, dy, dz, r) ||
                    cleft_side(label, d, x, y, z, pre, post) == 0)
                    continue;
                if (which == SYNTH_CLEFT) {
                    if (fn != NULL)
                        fn(ctx, x, y, z);
                    n++;
                } else {
                    cleft[ncleft][0] = x;
                    cleft[ncleft][1] = y;
                    cleft[ncleft][2] = z;
                    ncleft++;
                }
            }
        }
    }
    if (which == SYNTH_CLEFT)
        return n;
    ball_box(m, d, syn->site, r + psd, lo, hi);
    for (z = lo[2]; z <= hi[2]; z++) {
        for (y = lo[1]; y <= hi[1]; y++) {
            for (x = lo[0]; x <= hi[0]; x++) {
                if (label[idx3(d, x, y, z)] != post)
                    continue;
                for (k = 0; k < ncleft; k++) {
                    const int64_t dx = x - cleft[k][0], dy = y - cleft[k][1],
                                  dz = z - cleft[k][2];
                    if (in_ball(m, dx, dy, dz, psd)) {
                        if (fn != NULL)
                            fn(ctx, x, y, z);
                        n++;
                        break;
                    }
                }
            }
        }
    }
    free(cleft);
    return n;
}
