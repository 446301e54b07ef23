/*
 * synth_hard_layers.c - the image, boundary, cleft and psd volumes of the
 * hard synthetic style.
 *
 * Membrane strength comes from the geometry in nm: a membrane is 16 nm
 * thick, centred on the face between two objects; a voxel gets the share
 * of its extent along an axis that the membrane covers there (at least
 * 0.7 next to the face: a membrane seen edge-on in a thick section is
 * still visible). The boundary map is what a decent but imperfect network
 * outputs: that membrane, with gaps (patches where it fades to interior
 * level, cores on 1.5 % of the membrane voxels), false membranes (partial
 * sheets inside large objects, weak outlines of mitochondria), a
 * Gaussian-like blur of 6 nm on each axis, a smooth change of confidence, a
 * faint haze, per-voxel noise and, in anisotropic volumes, a contrast, offset
 * and noise level of its own for every section. The image follows the same
 * geometry: per-object gray and texture, dark membranes, mitochondria.
 * Every value is a function of the seed and the voxel (fields, hashes)
 * or of sequential draws of a stage's own stream; arithmetic on outputs is
 * integer or IEEE + - * / and sqrt in a fixed order. The strengths are
 * fixed (docs/synth.md, "Hard style", gives each value); none is a
 * parameter. Memory: one int32 and three bytes per voxel while rendering.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

/* Membranes (nm). */
#define HB_MEM_HALF 8.0 /* half thickness */
#define HB_EDGE_ON 0.7  /* least strength of a voxel next to a face */
#define HB_BLUR_NM 6.0  /* blur sigma, every map */
/* Boundary (gray levels; 16x fixed point inside): the level a flat
 * membrane at full strength has after the blur, whatever its orientation
 * (the level before the blur is scaled per axis to give it). */
#define HB_PEAK 235
/* Gaps: until this share (per mille) of membrane voxels lies in gap cores;
 * a gap of radius R = 40..120 nm scales the membrane by the floor within
 * R/2 of its centre (the core), rising smoothly to 1 at R. */
#define HB_GAP_PERMILLE 15
#define HB_GAP_RMIN 30
#define HB_GAP_RMAX 80
#define HB_GAP_FLOOR 0.08
/* False sheets: disks of radius 60..160 nm inside objects, at 0.55..0.95
 * of a membrane, until this share (per mille) of the non-membrane voxels. */
#define HB_SHEET_PERMILLE 6
#define HB_SHEET_RMIN 60
#define HB_SHEET_RMAX 160
#define HB_SHEET_MIN 0.55
#define HB_SHEET_MAX 0.95
#define HB_SHEET_CLEAR 16.0 /* nm kept free around a sheet */
/* Mitochondria: ellipsoids (long semi-axis 60..140, short 35..55 nm) until
 * this share (%) of the voxels; their outline in the boundary map at this
 * share of a membrane (before the blur). */
#define HB_MITO_PERCENT 4
#define HB_MITO_LONG_MIN 60
#define HB_MITO_LONG_MAX 140
#define HB_MITO_SHORT_MIN 35
#define HB_MITO_SHORT_MAX 55
#define HB_MITO_BOUNDARY 0.4
/* Confidence: the blurred map times 1 + 0.2 f, f a field of 400 nm; haze:
 * + 24 max(0, f) gray, f a field of 600 nm. */
#define HB_CONF_SPACING 400.0
#define HB_CONF_AMP 0.2
#define HB_HAZE_SPACING 600.0
#define HB_HAZE 24.0
/* Sections: isotropic volumes gain 1, offset 6, noise 8; anisotropic ones
 * (z at least 1.5x the finer of x, y) draw per section gain 0.80..1.10,
 * offset 0..12, noise 5..14. */
#define HB_OFFSET 6
#define HB_NOISE 8
#define HB_GAIN_MIN 800
#define HB_GAIN_MAX 1100
#define HB_OFFSET_MAX 12
#define HB_NOISE_MIN 5
#define HB_NOISE_MAX 14
/* Image (gray levels). */
#define HI_MEAN_MIN 150
#define HI_MEAN_SPAN 56
#define HI_AMP_MIN 6
#define HI_AMP_SPAN 11
#define HI_TEX1 96.0 /* texture octaves, nm; the second at half weight */
#define HI_TEX2 40.0
#define HI_MEMBRANE 45
#define HI_MITO_DARKEN 55
#define HI_MITO_EDGE 85
#define HI_NOISE 7
#define HI_GAIN_MIN 900
#define HI_GAIN_MAX 1100
#define HI_OFFSET_MAX 10
#define HI_NOISE_MIN 5
#define HI_NOISE_MAX 10
#define SYN_NOISE 3

#define BLUR_MAX_PASSES 64

/* Bits of the organelle / bookkeeping array. */
enum { ORG_MITO = 1, ORG_SHELL = 2, ORG_GAP = 4 };

static int64_t vidx(const synth_dims *d, int64_t x, int64_t y, int64_t z)
{
    return (z * d->sy + y) * d->sx + x;
}

/* ---- blur ---------------------------------------------------------------- */

/* Passes of [a, 4096 - 2a, a] / 4096 along one axis: [1 2 1]/4 (variance
 * 1/2) as often as it fits sigma^2, then one smaller kernel for the rest. */
typedef struct blur_plan {
    int n;
    int64_t a[BLUR_MAX_PASSES];
} blur_plan;

static void blur_plan_init(blur_plan *b, double sigma)
{
    double v = sigma * sigma;
    b->n = 0;
    while (v >= 0.5 && b->n < BLUR_MAX_PASSES) {
        b->a[b->n++] = 1024;
        v -= 0.5;
    }
    if (v > 1e-3 && b->n < BLUR_MAX_PASSES)
        b->a[b->n++] = (int64_t)floor(v / 2.0 * 4096.0 + 0.5);
}

/* One pass along the row index of groups of rows (len values each), in
 * place; prev and cur are scratch of len values. Edges replicated. */
static void blur_rows(int32_t *v, int64_t groups, int64_t group_stride,
                      int64_t rows, int64_t len, int64_t a, int32_t *prev,
                      int32_t *cur)
{
    const int64_t c = 4096 - 2 * a;
    int64_t g, r, k;
    for (g = 0; g < groups; g++) {
        int32_t *base = v + g * group_stride;
        memcpy(prev, base, (size_t)len * sizeof(*prev));
        for (r = 0; r < rows; r++) {
            int32_t *row = base + r * len;
            const int32_t *next;
            int32_t *t;
            memcpy(cur, row, (size_t)len * sizeof(*cur));
            next = r + 1 < rows ? row + len : cur;
            for (k = 0; k < len; k++)
                row[k] = (int32_t)((a * ((int64_t)prev[k] + next[k]) +
                                    c * cur[k] + 2048) >>
                                   12);
            t = prev;
            prev = cur;
            cur = t;
        }
    }
}

/* Gaussian-like blur of HB_BLUR_NM on every axis (non-negative values). */
static int hard_blur(int32_t *v, const synth_dims *d, const double res[3])
{
    const int64_t plane = d->sx * d->sy;
    int32_t *prev = malloc((size_t)plane * sizeof(*prev));
    int32_t *cur = malloc((size_t)plane * sizeof(*cur));
    blur_plan plan[3];
    int64_t r, x;
    int a, k;

    if (prev == NULL || cur == NULL) {
        free(prev);
        free(cur);
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    }
    for (a = 0; a < 3; a++)
        blur_plan_init(&plan[a], HB_BLUR_NM / res[a]);
    for (k = 0; k < plan[0].n; k++) {
        const int64_t w = plan[0].a[k], c = 4096 - 2 * w;
        for (r = 0; r < d->sy * d->sz; r++) {
            int32_t *row = v + r * d->sx;
            memcpy(cur, row, (size_t)d->sx * sizeof(*cur));
            for (x = 0; x < d->sx; x++) {
                const int64_t l = cur[x > 0 ? x - 1 : 0];
                const int64_t h = cur[x + 1 < d->sx ? x + 1 : x];
                row[x] = (int32_t)((w * (l + h) + c * cur[x] + 2048) >> 12);
            }
        }
    }
    for (k = 0; k < plan[1].n; k++)
        blur_rows(v, d->sz, plane, d->sy, d->sx, plan[1].a[k], prev, cur);
    for (k = 0; k < plan[2].n; k++)
        blur_rows(v, 1, 0, d->sz, plane, plan[2].a[k], prev, cur);
    free(prev);
    free(cur);
    return 0;
}

/* ---- membrane strength ----------------------------------------------- */

/*
 * A membrane is 2 HB_MEM_HALF thick, centred on the face between two
 * objects. Voxel i whose neighbour k voxels away along axis a has another
 * label lies (k - 1/2) voxels from that face; the membrane covers the
 * share s(a, k) of its extent along a (at least HB_EDGE_ON for k = 1).
 * level[a][k] is what such a voxel gets in the map being rendered.
 */
typedef struct mem_table {
    int64_t reach[3];
    double s[3][8];
} mem_table;

static void mem_table_init(mem_table *t, const double res[3])
{
    int a, k;
    for (a = 0; a < 3; a++) {
        t->reach[a] = (int64_t)ceil(HB_MEM_HALF / res[a]);
        t->reach[a] = t->reach[a] < 1 ? 1 : (t->reach[a] > 7 ? 7 : t->reach[a]);
        for (k = 1; k <= t->reach[a]; k++) {
            double ov = HB_MEM_HALF - (double)(k - 1) * res[a];
            ov = ov < 0.0 ? 0.0 : (ov > res[a] ? res[a] : ov);
            t->s[a][k] = ov / res[a];
            if (k == 1 && t->s[a][k] < HB_EDGE_ON)
                t->s[a][k] = HB_EDGE_ON;
        }
    }
}

/* out[i] = the largest level[a][k] over the faces near voxel i, else 0. */
static void membrane_scan(int32_t *out, const uint32_t *label,
                          const synth_dims *d, const mem_table *t,
                          const int32_t level[3][8])
{
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    const int64_t stride[3] = {1, d->sx, d->sx * d->sy};
    int64_t x, y, z, i = 0;
    int a, k;

    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const int64_t v[3] = {x, y, z};
                const uint32_t l = label[i];
                int32_t best = 0;
                for (a = 0; a < 3; a++) {
                    for (k = 1; k <= t->reach[a] && level[a][k] > best; k++) {
                        if ((v[a] >= k && label[i - k * stride[a]] != l) ||
                            (v[a] + k < ext[a] &&
                             label[i + k * stride[a]] != l)) {
                            best = level[a][k];
                            break;
                        }
                    }
                }
                out[i] = best;
            }
        }
    }
}

/*
 * The peak that the blur of axis a leaves of a full-strength membrane
 * facing along a, over 4096: a band of 2 reach voxels at 4096, blurred in
 * integers exactly as hard_blur does.
 */
static int64_t membrane_peak(const mem_table *t, int a, const double res[3])
{
    enum { LEN = 2 * (7 + 2 * BLUR_MAX_PASSES) + 2 };
    int64_t line[LEN], tmp[LEN], best = 0;
    const int64_t mid = LEN / 2;
    blur_plan plan;
    int k, j;

    memset(line, 0, sizeof(line));
    for (k = 1; k <= t->reach[a]; k++) {
        /* Full strength where the membrane covers the voxel at all. */
        const int64_t v = t->s[a][k] > 0.0 ? 4096 : 0;
        line[mid - k] = v; /* one object's side of the face */
        line[mid + k - 1] = v;
    }
    blur_plan_init(&plan, HB_BLUR_NM / res[a]);
    for (k = 0; k < plan.n; k++) {
        const int64_t w = plan.a[k], c = 4096 - 2 * w;
        memcpy(tmp, line, sizeof(line));
        for (j = 0; j < LEN; j++) {
            const int64_t l = tmp[j > 0 ? j - 1 : 0];
            const int64_t h = tmp[j + 1 < LEN ? j + 1 : j];
            line[j] = (w * (l + h) + c * tmp[j] + 2048) >> 12;
        }
    }
    for (j = 0; j < LEN; j++)
        best = line[j] > best ? line[j] : best;
    return best > 0 ? best : 1;
}

/* ---- organelles and failures --------------------------------------- */

typedef struct hctx {
    const uint32_t *label;
    const synth_dims *d;
    const double *res;
    uint64_t seed;
    uint8_t *mstr;
    uint8_t *org;
    uint8_t *fstr; /* false membrane strength, 0..255 */
    mem_table mt;
} hctx;

/* Clipped box of voxels within r nm of voxel c. */
static void nm_box(const hctx *h, const int64_t c[3], double r, int64_t lo[3],
                   int64_t hi[3])
{
    const int64_t ext[3] = {h->d->sx, h->d->sy, h->d->sz};
    int a;
    for (a = 0; a < 3; a++) {
        const int64_t k = (int64_t)floor(r / h->res[a]);
        lo[a] = c[a] - k < 0 ? 0 : c[a] - k;
        hi[a] = c[a] + k > ext[a] - 1 ? ext[a] - 1 : c[a] + k;
    }
}

static void random_voxel(synth_rng *rng, const synth_dims *d, int64_t c[3])
{
    c[0] = cnx_synth__rng_range(rng, 0, d->sx - 1);
    c[1] = cnx_synth__rng_range(rng, 0, d->sy - 1);
    c[2] = cnx_synth__rng_range(rng, 0, d->sz - 1);
}

/* Ellipsoid value of offset e (nm): (e.n)^2/a^2 + (|e|^2 - (e.n)^2)/b^2. */
static double ellipsoid(const double e[3], const double n[3], double along2,
                        double across2)
{
    const double t = e[0] * n[0] + e[1] * n[1] + e[2] * n[2];
    const double e2 = e[0] * e[0] + e[1] * e[1] + e[2] * e[2];
    return t * t / along2 + (e2 - t * t) / across2;
}

static void add_mitochondria(hctx *h)
{
    const synth_dims *d = h->d;
    const int64_t target =
        d->n / 100 * HB_MITO_PERCENT + d->n % 100 * HB_MITO_PERCENT / 100;
    const int64_t sxy = d->sx * d->sy;
    int64_t placed = 0, tries, i, x, y, z;
    synth_rng rng;

    cnx_synth__rng_init(&rng, h->seed, SYNTH_STREAM_HARD_MITO);
    /* Enough tries for the share, bounded for volumes with no room. */
    for (tries = 0; placed < target && tries < 64 + target / 8; tries++) {
        int64_t c[3], lo[3], hi[3];
        double n[3], a2, b2, e[3];
        const double along = (double)cnx_synth__rng_range(
            &rng, HB_MITO_LONG_MIN, HB_MITO_LONG_MAX);
        const double across = (double)cnx_synth__rng_range(
            &rng, HB_MITO_SHORT_MIN, HB_MITO_SHORT_MAX);
        uint32_t own;
        int ok = 1;

        random_voxel(&rng, d, c);
        cnx_synth__random_unit(&rng, n);
        own = h->label[vidx(d, c[0], c[1], c[2])];
        if (h->mstr[vidx(d, c[0], c[1], c[2])] != 0)
            continue;
        /* The ellipsoid grown by 30 % must lie in one object, off its
         * membrane and off other mitochondria. */
        a2 = 1.69 * along * along;
        b2 = 1.69 * across * across;
        nm_box(h, c, 1.3 * along, lo, hi);
        for (z = lo[2]; z <= hi[2] && ok; z++) {
            for (y = lo[1]; y <= hi[1] && ok; y++) {
                for (x = lo[0]; x <= hi[0]; x++) {
                    i = vidx(d, x, y, z);
                    e[0] = (double)(x - c[0]) * h->res[0];
                    e[1] = (double)(y - c[1]) * h->res[1];
                    e[2] = (double)(z - c[2]) * h->res[2];
                    if (ellipsoid(e, n, a2, b2) <= 1.0 &&
                        (h->label[i] != own || h->mstr[i] != 0 ||
                         h->org[i] != 0)) {
                        ok = 0;
                        break;
                    }
                }
            }
        }
        if (!ok)
            continue;
        a2 = along * along;
        b2 = across * across;
        for (z = lo[2]; z <= hi[2]; z++) {
            for (y = lo[1]; y <= hi[1]; y++) {
                for (x = lo[0]; x <= hi[0]; x++) {
                    e[0] = (double)(x - c[0]) * h->res[0];
                    e[1] = (double)(y - c[1]) * h->res[1];
                    e[2] = (double)(z - c[2]) * h->res[2];
                    if (ellipsoid(e, n, a2, b2) <= 1.0) {
                        h->org[vidx(d, x, y, z)] |= ORG_MITO;
                        placed++;
                    }
                }
            }
        }
    }
    /* The outline: mitochondrion voxels with a face outside it. */
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                if (!(h->org[i] & ORG_MITO))
                    continue;
                if ((x > 0 && !(h->org[i - 1] & ORG_MITO)) ||
                    (x + 1 < d->sx && !(h->org[i + 1] & ORG_MITO)) ||
                    (y > 0 && !(h->org[i - d->sx] & ORG_MITO)) ||
                    (y + 1 < d->sy && !(h->org[i + d->sx] & ORG_MITO)) ||
                    (z > 0 && !(h->org[i - sxy] & ORG_MITO)) ||
                    (z + 1 < d->sz && !(h->org[i + sxy] & ORG_MITO)))
                    h->org[i] |= ORG_SHELL;
            }
        }
    }
}

/* Try one sheet of radius r (nm) at voxel c with unit normal n; 1 if it
 * was painted at strength s (0..255) with the voxel count added to *count. */
static int try_sheet(hctx *h, const int64_t c[3], const double n[3], double r,
                     int32_t s, int64_t *count)
{
    const synth_dims *d = h->d;
    const uint32_t own = h->label[vidx(d, c[0], c[1], c[2])];
    /* One voxel's extent along the normal: the sheet is two voxels thick
     * along it whatever its orientation, like a membrane. */
    const double half = fabs(n[0]) * h->res[0] + fabs(n[1]) * h->res[1] +
                        fabs(n[2]) * h->res[2];
    const double outer = r + HB_SHEET_CLEAR;
    int64_t lo[3], hi[3], x, y, z, i;
    double e[3];
    int pass;

    nm_box(h, c, outer + half, lo, hi);
    /* Pass 0: the sheet grown by the clearance must lie in the object,
     * off membranes and mitochondria; pass 1: paint. */
    for (pass = 0; pass < 2; pass++) {
        for (z = lo[2]; z <= hi[2]; z++) {
            for (y = lo[1]; y <= hi[1]; y++) {
                for (x = lo[0]; x <= hi[0]; x++) {
                    double t, rho2;
                    i = vidx(d, x, y, z);
                    e[0] = (double)(x - c[0]) * h->res[0];
                    e[1] = (double)(y - c[1]) * h->res[1];
                    e[2] = (double)(z - c[2]) * h->res[2];
                    t = e[0] * n[0] + e[1] * n[1] + e[2] * n[2];
                    rho2 = e[0] * e[0] + e[1] * e[1] + e[2] * e[2] - t * t;
                    if (pass == 0) {
                        if (fabs(t) <= half + HB_SHEET_CLEAR &&
                            rho2 <= outer * outer &&
                            (h->label[i] != own || h->mstr[i] != 0 ||
                             h->org[i] != 0))
                            return 0;
                    } else if (t > -half && t <= half && rho2 <= r * r) {
                        /* Fades out over the outer third of the radius. */
                        const double rim = 3.0 * (1.0 - sqrt(rho2) / r);
                        const int32_t v =
                            rim >= 1.0 ? s : (int32_t)((double)s * rim);
                        if (v > h->fstr[i]) {
                            if (h->fstr[i] == 0)
                                (*count)++;
                            h->fstr[i] = (uint8_t)v;
                        }
                    }
                }
            }
        }
    }
    return 1;
}

static void add_sheets(hctx *h)
{
    const synth_dims *d = h->d;
    int64_t inner = 0, target, painted = 0, tries, i;
    synth_rng rng;

    for (i = 0; i < d->n; i++)
        inner += h->mstr[i] == 0;
    target = inner / 1000 * HB_SHEET_PERMILLE +
             inner % 1000 * HB_SHEET_PERMILLE / 1000;
    cnx_synth__rng_init(&rng, h->seed, SYNTH_STREAM_HARD_SHEETS);
    for (tries = 0; painted < target && tries < 256 + target / 4; tries++) {
        int64_t c[3];
        double n[3], r;
        int32_t s;
        int k;
        random_voxel(&rng, d, c);
        cnx_synth__random_unit(&rng, n);
        r = (double)cnx_synth__rng_range(&rng, HB_SHEET_RMIN, HB_SHEET_RMAX);
        s = (int32_t)floor(255.0 *
                               (HB_SHEET_MIN + (HB_SHEET_MAX - HB_SHEET_MIN) *
                                                   cnx_synth__rng_unit(&rng)) +
                           0.5);
        i = vidx(d, c[0], c[1], c[2]);
        if (h->mstr[i] != 0 || h->org[i] != 0)
            continue;
        /* Shrink to fit, down to two thirds of the smallest radius. */
        for (k = 0; k < 3; k++, r *= 0.7) {
            if (r < HB_SHEET_RMIN * 2.0 / 3.0)
                break;
            if (try_sheet(h, c, n, r, s, &painted))
                break;
        }
    }
}

/* Gaps: scale the membrane in v (16x gray) down around membrane voxels. */
static void add_gaps(hctx *h, int32_t *v)
{
    const synth_dims *d = h->d;
    int64_t membrane = 0, target, gapped = 0, tries, i, x, y, z;
    synth_rng rng;

    for (i = 0; i < d->n; i++)
        membrane += h->mstr[i] != 0;
    target = membrane / 1000 * HB_GAP_PERMILLE +
             membrane % 1000 * HB_GAP_PERMILLE / 1000;
    cnx_synth__rng_init(&rng, h->seed, SYNTH_STREAM_HARD_GAPS);
    for (tries = 0; gapped < target && tries < 256 + target; tries++) {
        const double r =
            (double)cnx_synth__rng_range(&rng, HB_GAP_RMIN, HB_GAP_RMAX);
        int64_t c[3], lo[3], hi[3];
        random_voxel(&rng, d, c);
        if (h->mstr[vidx(d, c[0], c[1], c[2])] == 0)
            continue;
        nm_box(h, c, r, lo, hi);
        for (z = lo[2]; z <= hi[2]; z++) {
            for (y = lo[1]; y <= hi[1]; y++) {
                for (x = lo[0]; x <= hi[0]; x++) {
                    const double ex = (double)(x - c[0]) * h->res[0];
                    const double ey = (double)(y - c[1]) * h->res[1];
                    const double ez = (double)(z - c[2]) * h->res[2];
                    const double q = (ex * ex + ey * ey + ez * ez) / (r * r);
                    double f;
                    if (q >= 1.0)
                        continue;
                    i = vidx(d, x, y, z);
                    if (h->mstr[i] == 0)
                        continue;
                    if (q <= 0.25) {
                        f = HB_GAP_FLOOR;
                    } else {
                        const double t = 2.0 * sqrt(q) - 1.0; /* 0..1 */
                        f = HB_GAP_FLOOR +
                            (1.0 - HB_GAP_FLOOR) * t * t * (3.0 - 2.0 * t);
                    }
                    v[i] = (int32_t)((double)v[i] * f);
                    if (q <= 0.25 && !(h->org[i] & ORG_GAP)) {
                        h->org[i] |= ORG_GAP;
                        gapped++;
                    }
                }
            }
        }
    }
}

/* ---- sections and finishing ------------------------------------------ */

typedef struct section {
    int64_t gain; /* per mille */
    int64_t offset;
    int64_t sigma;
} section;

static int anisotropic(const double res[3])
{
    const double fine = res[0] < res[1] ? res[0] : res[1];
    return res[2] >= 1.5 * fine;
}

/* Section z's look: drawn from the hash of (seed, z), so it does not
 * depend on the volume's depth. */
static section section_look(uint64_t seed, int64_t z, int aniso, int image)
{
    const uint64_t key =
        cnx_synth__hash_key(seed, SYNTH_STREAM_HARD_SECTIONS + (image << 8));
    const uint64_t h = cnx_synth__mix(key + (uint64_t)z);
    section s;
    if (!aniso) {
        s.gain = 1000;
        s.offset = image ? 0 : HB_OFFSET;
        s.sigma = image ? HI_NOISE : HB_NOISE;
        return s;
    }
    if (image) {
        s.gain = HI_GAIN_MIN +
                 (int64_t)((h & 0xffff) % (HI_GAIN_MAX - HI_GAIN_MIN + 1));
        s.offset =
            (int64_t)((h >> 16) % (2 * HI_OFFSET_MAX + 1)) - HI_OFFSET_MAX;
        s.sigma = HI_NOISE_MIN +
                  (int64_t)((h >> 32) % (HI_NOISE_MAX - HI_NOISE_MIN + 1));
    } else {
        s.gain = HB_GAIN_MIN +
                 (int64_t)((h & 0xffff) % (HB_GAIN_MAX - HB_GAIN_MIN + 1));
        s.offset = (int64_t)((h >> 16) % (HB_OFFSET_MAX + 1));
        s.sigma = HB_NOISE_MIN +
                  (int64_t)((h >> 32) % (HB_NOISE_MAX - HB_NOISE_MIN + 1));
    }
    return s;
}

static uint8_t to_gray(int64_t v16)
{
    int64_t g = v16 < 0 ? 0 : (v16 + 8) / 16;
    return (uint8_t)(g > 255 ? 255 : g);
}

/* ---- the layers ---------------------------------------------------------- */

typedef struct look {
    int32_t mean;
    int32_t amp;
} look;

static int render_image(hctx *h, uint8_t *out, int32_t *v, uint64_t nobjects)
{
    const synth_dims *d = h->d;
    const int aniso = anisotropic(h->res);
    const uint64_t key =
        cnx_synth__hash_key(h->seed, SYNTH_STREAM_HARD_IMAGE_NOISE);
    synth_field t1, t2;
    look *looks = malloc(((size_t)nobjects + 1) * sizeof(*looks));
    double *r1 = malloc((size_t)d->sx * sizeof(*r1));
    double *r2 = malloc((size_t)d->sx * sizeof(*r2));
    int64_t i, x, y, z;
    int rc;

    memset(&t1, 0, sizeof(t1));
    memset(&t2, 0, sizeof(t2));
    if (looks == NULL || r1 == NULL || r2 == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i <= (int64_t)nobjects; i++) {
        const uint64_t hh =
            cnx_synth__hash(h->seed, SYNTH_STREAM_HARD_OBJECTS, (uint64_t)i);
        looks[i].mean = HI_MEAN_MIN + (int32_t)(hh % HI_MEAN_SPAN);
        looks[i].amp = HI_AMP_MIN + (int32_t)((hh >> 32) % HI_AMP_SPAN);
    }
    rc = cnx_synth__field_init(&t1, d, h->res, HI_TEX1, h->seed,
                               SYNTH_STREAM_HARD_TEXTURE);
    if (rc == 0)
        rc = cnx_synth__field_init(&t2, d, h->res, HI_TEX2, h->seed,
                                   SYNTH_STREAM_HARD_TEXTURE + 0x100);
    if (rc < 0)
        goto done;
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            cnx_synth__field_row(&t1, d->sx, y, z, r1);
            cnx_synth__field_row(&t2, d->sx, y, z, r2);
            for (x = 0; x < d->sx; x++, i++) {
                const look *lk = &looks[h->label[i]];
                const double tex = (r1[x] + 0.5 * r2[x]) * (double)lk->amp;
                int32_t g = 16 * lk->mean + (int32_t)floor(16.0 * tex + 0.5);
                if (h->org[i] & ORG_SHELL)
                    g -= 16 * HI_MITO_EDGE;
                else if (h->org[i] & ORG_MITO)
                    g -= 16 * HI_MITO_DARKEN;
                g += (16 * HI_MEMBRANE - g) * (int32_t)h->mstr[i] / 255;
                v[i] = g < 16 * 10 ? 16 * 10 : g;
            }
        }
    }
    rc = hard_blur(v, d, h->res);
    if (rc < 0)
        goto done;
    i = 0;
    for (z = 0; z < d->sz; z++) {
        const section s = section_look(h->seed, z, aniso, 1);
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const int32_t nz =
                    cnx_synth__noise(cnx_synth__mix(key + (uint64_t)i));
                const int64_t val = (int64_t)v[i] * s.gain / 1000 +
                                    16 * s.offset + nz * s.sigma * 16 / 148;
                out[i] = to_gray(val);
            }
        }
    }
done:
    cnx_synth__field_free(&t1);
    cnx_synth__field_free(&t2);
    free(looks);
    free(r1);
    free(r2);
    return rc;
}

static int render_boundary(hctx *h, uint8_t *out, int32_t *v)
{
    const synth_dims *d = h->d;
    const int aniso = anisotropic(h->res);
    const uint64_t key =
        cnx_synth__hash_key(h->seed, SYNTH_STREAM_HARD_BOUNDARY_NOISE);
    int32_t sheet_level = 0, mito;
    synth_field conf, haze;
    double *rc_row = malloc((size_t)d->sx * sizeof(*rc_row));
    double *rh_row = malloc((size_t)d->sx * sizeof(*rh_row));
    int64_t i, x, y, z;
    int rc;

    memset(&conf, 0, sizeof(conf));
    memset(&haze, 0, sizeof(haze));
    if (rc_row == NULL || rh_row == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    {
        int32_t level[3][8];
        int a, k;
        for (a = 0; a < 3; a++) {
            const int64_t peak = membrane_peak(&h->mt, a, h->res);
            for (k = 1; k <= h->mt.reach[a]; k++)
                level[a][k] =
                    (int32_t)floor(16.0 * (double)HB_PEAK * h->mt.s[a][k] *
                                       4096.0 / (double)peak +
                                   0.5);
            /* False membranes: as a membrane facing along x, y. */
            if (a == 0)
                sheet_level = level[0][1];
        }
        membrane_scan(v, h->label, d, &h->mt, (const int32_t(*)[8])level);
    }
    add_gaps(h, v);
    mito = (int32_t)((double)sheet_level * HB_MITO_BOUNDARY);
    for (i = 0; i < d->n; i++) {
        const int32_t f = (int32_t)((int64_t)sheet_level * h->fstr[i] / 255);
        v[i] = f > v[i] ? f : v[i];
        if ((h->org[i] & ORG_SHELL) && mito > v[i])
            v[i] = mito;
    }
    rc = hard_blur(v, d, h->res);
    if (rc == 0)
        rc = cnx_synth__field_init(&conf, d, h->res, HB_CONF_SPACING, h->seed,
                                   SYNTH_STREAM_HARD_FIELD);
    if (rc == 0)
        rc = cnx_synth__field_init(&haze, d, h->res, HB_HAZE_SPACING, h->seed,
                                   SYNTH_STREAM_HARD_FIELD + 0x100);
    if (rc < 0)
        goto done;
    i = 0;
    for (z = 0; z < d->sz; z++) {
        const section s = section_look(h->seed, z, aniso, 0);
        for (y = 0; y < d->sy; y++) {
            cnx_synth__field_row(&conf, d->sx, y, z, rc_row);
            cnx_synth__field_row(&haze, d->sx, y, z, rh_row);
            for (x = 0; x < d->sx; x++, i++) {
                const int32_t nz =
                    cnx_synth__noise(cnx_synth__mix(key + (uint64_t)i));
                const double c = 1.0 + HB_CONF_AMP * rc_row[x];
                const double hz = rh_row[x] > 0.0 ? HB_HAZE * rh_row[x] : 0.0;
                const int64_t m =
                    (int64_t)floor((double)v[i] * c + 16.0 * hz + 0.5);
                const int64_t val =
                    m * s.gain / 1000 + 16 * s.offset + nz * s.sigma * 16 / 148;
                out[i] = to_gray(val);
            }
        }
    }
done:
    cnx_synth__field_free(&conf);
    cnx_synth__field_free(&haze);
    free(rc_row);
    free(rh_row);
    return rc;
}

typedef struct mark_ctx {
    int32_t *v;
    const synth_dims *d;
} mark_ctx;

static void mark(void *ctx, int64_t x, int64_t y, int64_t z)
{
    mark_ctx *m = ctx;
    m->v[vidx(m->d, x, y, z)] = 16 * 255;
}

static int render_synapses(hctx *h, const cnx_synth *synth, uint8_t *out,
                           int32_t *v, int which, uint64_t stream)
{
    const synth_dims *d = h->d;
    const uint64_t key = cnx_synth__hash_key(h->seed, stream);
    mark_ctx m = {v, d};
    synth_metric metric;
    size_t k;
    int64_t i;
    int rc;

    cnx_synth__metric(&metric, &synth->params);
    memset(v, 0, (size_t)d->n * sizeof(*v));
    for (k = 0; k < synth->nsynapses; k++) {
        if (cnx_synth__synapse_voxels(&synth->synapses[k], which, &metric,
                                      h->label, d, mark, &m) < 0)
            return CNX_ENOMEM;
    }
    rc = hard_blur(v, d, h->res);
    if (rc < 0)
        return rc;
    for (i = 0; i < d->n; i++) {
        const int32_t nz = cnx_synth__noise(cnx_synth__mix(key + (uint64_t)i));
        out[i] = to_gray((int64_t)v[i] + nz * SYN_NOISE * 16 / 148);
    }
    return 0;
}

int cnx_synth__hard_render(cnx_synth *synth, const uint32_t *label,
                           const synth_dims *d)
{
    hctx h;
    int32_t *v = malloc((size_t)d->n * sizeof(*v));
    int rc;

    h.label = label;
    h.d = d;
    h.res = synth->params.resolution;
    h.seed = synth->params.seed;
    h.mstr = malloc((size_t)d->n);
    h.org = calloc((size_t)d->n, 1);
    h.fstr = calloc((size_t)d->n, 1);
    if (v == NULL || h.mstr == NULL || h.org == NULL || h.fstr == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    mem_table_init(&h.mt, h.res);
    {
        int32_t level[3][8];
        int64_t i;
        int a, k;
        for (a = 0; a < 3; a++)
            for (k = 1; k <= h.mt.reach[a]; k++)
                level[a][k] = (int32_t)floor(255.0 * h.mt.s[a][k] + 0.5);
        membrane_scan(v, label, d, &h.mt, (const int32_t(*)[8])level);
        for (i = 0; i < d->n; i++)
            h.mstr[i] = (uint8_t)v[i];
    }
    add_mitochondria(&h);
    add_sheets(&h);
    rc = render_image(&h, synth->image->data, v, synth->nobjects);
    if (rc == 0)
        rc = render_boundary(&h, synth->boundary->data, v);
    if (rc == 0)
        rc = render_synapses(&h, synth, synth->cleft->data, v, SYNTH_CLEFT,
                             SYNTH_STREAM_HARD_CLEFT_NOISE);
    if (rc == 0)
        rc = render_synapses(&h, synth, synth->psd->data, v, SYNTH_PSD,
                             SYNTH_STREAM_HARD_PSD_NOISE);
done:
    free(v);
    free(h.mstr);
    free(h.org);
    free(h.fstr);
    return rc;
}
