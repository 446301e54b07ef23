/*
 * synth_hard.c - the ground-truth objects of the hard synthetic style.
 *
 * Everything is defined in nm and sampled with the resolution, so an
 * 8x8x30 nm volume shows physically round neurites that span many voxels
 * in a section and few sections in z. Neurites first: each has a base
 * radius (uniform in 40..160 nm) and a radius that varies smoothly
 * along its length (0.5x..1.5x the base, a smoothstep between random
 * values every 300 nm); it starts in one of three orientation families
 * (along z, near the section plane, any), wanders with a smoothly changing
 * bend, branches, and is painted as capsules. Neurites may touch but never
 * overlap. Then cells fill the rest: each unpainted voxel goes to the
 * nearest seed of a jittered grid (800 nm) under a power distance taken at
 * a warped position (two octaves of a smooth random displacement field),
 * so cells are irregular and wrap around the neurites. Last, 6-connected
 * pieces under 0.0002 um^3 join the neighbour they share most faces with
 * and every other piece becomes an object of its own. Floating point uses
 * only + - * / and sqrt in a fixed order; all randomness comes from the
 * seed (synth_int.h). The constants are documented, with their values,
 * in docs/synth.md ("Hard style"); they are not parameters. Single-
 * threaded; memory: one uint32 per voxel besides the labels while
 * settling.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

/* Neurites (all lengths in nm). */
#define HN_BASE_MIN 40.0 /* base radius, uniform in this range */
#define HN_BASE_MAX 160.0
#define HN_VAR_MIN 0.6 /* radius = base x a multiplier in this range, */
#define HN_VAR_MAX 1.4
#define HN_VAR_LEN 300.0 /* a new multiplier every this much arc length */
#define HN_STEP 32.0     /* walk step */
#define HN_BEND 0.06     /* bend: keep 0.75 of it, add this x a random unit */
#define HN_BEND_KEEP 0.75
#define HN_BRANCH_CHANCE 0.02 /* per step */
#define HN_MAX_BRANCHES 5
#define HN_MAX_DEPTH 2
#define HN_TURN_TRIES 6
#define HN_FILL_PERCENT 30 /* paint neurites until this share of voxels */
#define HN_MAX_FAILS 400
#define HN_MIN_LENGTH 1000.0 /* shorter objects (stubs) are removed */
/* Orientation families, in hundredths: along z, in the section plane; the
 * rest are uniform. */
#define HN_ALONG_Z 60
#define HN_IN_PLANE 15

/* Cells. */
#define HC_CELL 800.0  /* seed grid spacing */
#define HC_WEIGHT 0.3  /* power weight up to (0.3 cell)^2 */
#define HC_WARP1 600.0 /* warp octaves: field spacing, amplitude */
#define HC_WARP1_AMP 160.0
#define HC_WARP2 200.0
#define HC_WARP2_AMP 50.0
/* Settling: pieces below this volume join a neighbour, nm^3. */
#define HS_MIN_VOLUME 2.0e5
#define HS_ROUNDS 32

/* ---- smooth random fields --------------------------------------------- */

int cnx_synth__field_init(synth_field *f, const synth_dims *d,
                          const double res[3], double spacing_nm, uint64_t seed,
                          uint64_t stream)
{
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    const uint64_t key = cnx_synth__hash_key(seed, stream);
    int64_t total = 1, i;
    int a;

    memset(f, 0, sizeof(*f));
    for (a = 0; a < 3; a++) {
        f->step[a] = spacing_nm / res[a];
        /* Nodes 0..n-1 cover voxels 0..ext-1, plus one for the last
         * interval's far end. */
        f->n[a] = (int64_t)floor((double)(ext[a] - 1) / f->step[a]) + 2;
        total *= f->n[a];
    }
    f->v = malloc((size_t)total * sizeof(*f->v));
    f->col = malloc((size_t)f->n[0] * sizeof(*f->col));
    if (f->v == NULL || f->col == NULL) {
        cnx_synth__field_free(f);
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    }
    for (i = 0; i < total; i++) {
        const uint64_t h = cnx_synth__mix(key + (uint64_t)i);
        f->v[i] = (double)(h >> 11) * 0x1.0p-52 - 1.0;
    }
    return 0;
}

void cnx_synth__field_free(synth_field *f)
{
    free(f->v);
    free(f->col);
    f->v = NULL;
    f->col = NULL;
}

void cnx_synth__field_row(synth_field *f, int64_t sx, int64_t y, int64_t z,
                          double *out)
{
    const double ty = (double)y / f->step[1], tz = (double)z / f->step[2];
    const int64_t ly = (int64_t)ty, lz = (int64_t)tz;
    const double wy = ty - (double)ly, wz = tz - (double)lz;
    const int64_t nx = f->n[0], nxy = f->n[0] * f->n[1];
    int64_t i, x;

    for (i = 0; i < nx; i++) {
        const double *p = f->v + lz * nxy + ly * nx + i;
        const double lo = p[0] + wy * (p[nx] - p[0]);
        const double hi = p[nxy] + wy * (p[nxy + nx] - p[nxy]);
        f->col[i] = lo + wz * (hi - lo);
    }
    for (x = 0; x < sx; x++) {
        const double tx = (double)x / f->step[0];
        const int64_t lx = (int64_t)tx;
        const double wx = tx - (double)lx;
        out[x] = f->col[lx] + wx * (f->col[lx + 1] - f->col[lx]);
    }
}

/* ---- neurites ------------------------------------------------------------ */

typedef struct harm {
    double pos[3]; /* nm */
    double dir[3]; /* unit */
    double bend[3];
    double base;   /* base radius, nm */
    double m0, m1; /* radius multipliers at the last and next control point */
    double s;      /* arc length since the last control point, nm */
    double radius; /* current, nm */
    int depth;
} harm;

static double smoothstep(double t)
{
    return t * t * (3.0 - 2.0 * t);
}

static double draw_multiplier(synth_rng *rng)
{
    return HN_VAR_MIN + (HN_VAR_MAX - HN_VAR_MIN) * cnx_synth__rng_unit(rng);
}

/* Spawn a branch of arm a onto the stack. */
static void hbranch(synth_rng *rng, const harm *a, harm *b)
{
    int i;
    memcpy(b->pos, a->pos, sizeof(b->pos));
    cnx_synth__branch_dir(rng, a->dir, b->dir);
    for (i = 0; i < 3; i++)
        b->bend[i] = 0.0;
    b->base = a->base * (0.55 + 0.3 * cnx_synth__rng_unit(rng));
    b->base = b->base < HN_BASE_MIN ? HN_BASE_MIN : b->base;
    /* Start no thicker than the parent is here. */
    b->m0 = a->radius / b->base;
    b->m0 = b->m0 < HN_VAR_MIN ? HN_VAR_MIN
                               : (b->m0 > HN_VAR_MAX ? HN_VAR_MAX : b->m0);
    b->m1 = draw_multiplier(rng);
    b->s = 0.0;
    b->radius = b->base * b->m0;
    b->depth = a->depth + 1;
}

/* Walk one arm until it leaves the volume, is blocked or runs out of steps;
 * @return its length, nm. */
static double hwalk(synth_painter *pt, synth_rng *rng, harm *a, uint32_t id,
                    harm *stack, int *nstack, int *nbranches, int64_t max_steps)
{
    double length = 0.0;
    int64_t step;

    for (step = 0; step < max_steps; step++) {
        double dir[3], bend[3], next[3], u[3], m0 = a->m0, m1 = a->m1;
        double s = a->s + HN_STEP, r;
        int ok = 0, tries, i;

        if (s >= HN_VAR_LEN) {
            s -= HN_VAR_LEN;
            m0 = m1;
            m1 = draw_multiplier(rng);
        }
        r = a->base * (m0 + (m1 - m0) * smoothstep(s / HN_VAR_LEN));
        for (tries = 0; tries < HN_TURN_TRIES && !ok; tries++) {
            cnx_synth__random_unit(rng, u);
            for (i = 0; i < 3; i++) {
                if (tries == 0) {
                    /* A bend that changes smoothly: curved paths. */
                    bend[i] = HN_BEND_KEEP * a->bend[i] + HN_BEND * u[i];
                    dir[i] = a->dir[i] + bend[i];
                } else {
                    /* Blocked: turn harder, forget the bend. */
                    bend[i] = 0.0;
                    dir[i] = a->dir[i] + (0.6 + 0.2 * tries) * u[i];
                }
            }
            if (cnx_synth__dot3(dir, dir) < 1e-6)
                continue;
            cnx_synth__normalize3(dir);
            for (i = 0; i < 3; i++)
                next[i] = a->pos[i] + HN_STEP * dir[i];
            ok = cnx_synth__painter_free(pt, a->pos, next, a->radius, r, 0.0,
                                         id);
        }
        if (!ok)
            break;
        cnx_synth__painter_paint(pt, a->pos, next, a->radius, r, id);
        length += HN_STEP;
        memcpy(a->pos, next, sizeof(next));
        memcpy(a->dir, dir, sizeof(dir));
        memcpy(a->bend, bend, sizeof(bend));
        a->radius = r;
        a->s = s;
        a->m0 = m0;
        a->m1 = m1;
        if (cnx_synth__painter_outside(pt, a->pos))
            break;
        if (a->depth < HN_MAX_DEPTH && *nbranches < HN_MAX_BRANCHES &&
            cnx_synth__rng_unit(rng) < HN_BRANCH_CHANCE) {
            (*nbranches)++;
            hbranch(rng, a, &stack[(*nstack)++]);
        }
    }
    return length;
}

/* A start direction from one of the orientation families. */
static void start_direction(synth_rng *rng, double dir[3])
{
    const int64_t family = cnx_synth__rng_range(rng, 0, 99);
    cnx_synth__random_unit(rng, dir);
    if (family < HN_ALONG_Z) {
        /* Within 24 degrees of z. */
        dir[0] *= 0.45;
        dir[1] *= 0.45;
        dir[2] = dir[2] < 0.0 ? -1.0 : 1.0;
    } else if (family < HN_ALONG_Z + HN_IN_PLANE) {
        /* Near the section plane: median 8 degrees from it, 90 % within
         * 27 degrees (z of a uniform direction is uniform in -1..1). */
        dir[2] *= 0.25;
        if (cnx_synth__dot3(dir, dir) < 1e-6)
            dir[0] = 1.0;
    }
    cnx_synth__normalize3(dir);
}

int cnx_synth__hard_neurites(uint32_t *label, uint32_t *count,
                             const synth_dims *d, const cnx_synth_params *p)
{
    const int64_t share =
        d->n / 100 * HN_FILL_PERCENT + d->n % 100 * HN_FILL_PERCENT / 100;
    const int64_t target = share > 0 ? share : 1;
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    double longest = 0.0, sum = 0.0, min_length;
    harm stack[2 + HN_MAX_BRANCHES];
    int64_t max_steps;
    synth_painter pt;
    synth_rng rng;
    uint32_t id = 1;
    int fails = 0, i;

    memset(&pt, 0, sizeof(pt));
    pt.label = label;
    pt.d = d;
    for (i = 0; i < 3; i++) {
        const double len = (double)ext[i] * p->resolution[i];
        pt.res[i] = p->resolution[i];
        longest = len > longest ? len : longest;
        sum += len;
    }
    max_steps = 4 * (int64_t)(sum / HN_STEP) + 4;
    min_length = longest / 4.0 < HN_MIN_LENGTH ? longest / 4.0 : HN_MIN_LENGTH;
    cnx_synth__rng_init(&rng, p->seed, SYNTH_STREAM_HARD_NEURITES);

    while (pt.painted < target && fails < HN_MAX_FAILS && id < UINT32_MAX) {
        double start[3], dir[3], base, mstart, r, length = 0.0, u;
        int64_t x, y, z;
        int nstack = 0, nbranches = 0;

        x = cnx_synth__rng_range(&rng, 0, d->sx - 1);
        y = cnx_synth__rng_range(&rng, 0, d->sy - 1);
        z = cnx_synth__rng_range(&rng, 0, d->sz - 1);
        u = cnx_synth__rng_unit(&rng);
        base = HN_BASE_MIN + (HN_BASE_MAX - HN_BASE_MIN) * u;
        mstart = draw_multiplier(&rng);
        r = base * mstart;
        start_direction(&rng, dir);
        start[0] = (double)x * pt.res[0];
        start[1] = (double)y * pt.res[1];
        start[2] = (double)z * pt.res[2];
        if (label[(z * d->sy + y) * d->sx + x] != 0 ||
            !cnx_synth__painter_free(&pt, start, start, r, r, 0.0, id)) {
            fails++;
            continue;
        }
        cnx_synth__painter_begin(&pt);
        cnx_synth__painter_paint(&pt, start, start, r, r, id);
        for (i = 0; i < 2; i++) {
            harm *a = &stack[nstack++];
            int k;
            memcpy(a->pos, start, sizeof(start));
            for (k = 0; k < 3; k++) {
                a->dir[k] = i == 0 ? dir[k] : -dir[k];
                a->bend[k] = 0.0;
            }
            a->base = base;
            a->m0 = mstart;
            a->m1 = draw_multiplier(&rng);
            a->s = 0.0;
            a->radius = r;
            a->depth = 0;
        }
        for (i = 0; i < nstack; i++) {
            harm a = stack[i];
            length +=
                hwalk(&pt, &rng, &a, id, stack, &nstack, &nbranches, max_steps);
        }
        if (length < min_length) {
            cnx_synth__painter_erase(&pt, id);
            fails++;
            continue;
        }
        id++;
        fails = 0;
    }
    *count = id - 1;
    return 0;
}

/* ---- cells ------------------------------------------------------------- */

int cnx_synth__hard_cells(uint32_t *label, uint32_t nneurites,
                          const synth_dims *d, const cnx_synth_params *p)
{
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    const uint64_t key = cnx_synth__hash_key(p->seed, SYNTH_STREAM_HARD_CELLS);
    const double wmax = (HC_WEIGHT * HC_CELL) * (HC_WEIGHT * HC_CELL);
    synth_field warp[6];
    double *seeds = NULL, *wrow[6] = {NULL};
    int64_t g[3], ncells = 1, c, x, y, z;
    int a, k, rc = 0;

    memset(warp, 0, sizeof(warp));
    for (a = 0; a < 3; a++) {
        g[a] = (int64_t)ceil((double)ext[a] * p->resolution[a] / HC_CELL);
        g[a] = g[a] < 1 ? 1 : g[a];
        ncells *= g[a];
    }
    if ((uint64_t)ncells + nneurites >= UINT32_MAX)
        return cnx_error_set(CNX_ERANGE, 0, "synth: too many cells");
    /* Seeds: one per grid cell, anywhere in it, with a power weight. */
    seeds = malloc((size_t)ncells * 4 * sizeof(*seeds));
    if (seeds == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    c = 0;
    for (z = 0; z < g[2]; z++) {
        for (y = 0; y < g[1]; y++) {
            for (x = 0; x < g[0]; x++, c++) {
                const int64_t cell[3] = {x, y, z};
                double w;
                for (a = 0; a < 3; a++) {
                    const uint64_t h =
                        cnx_synth__mix(key + (uint64_t)(4 * c + a));
                    seeds[4 * c + a] =
                        ((double)cell[a] + (double)(h >> 11) * 0x1.0p-53) *
                        HC_CELL;
                }
                w = (double)(cnx_synth__mix(key + (uint64_t)(4 * c + 3)) >>
                             11) *
                    0x1.0p-53;
                seeds[4 * c + 3] = w * w * wmax;
            }
        }
    }
    for (k = 0; k < 6 && rc == 0; k++) {
        const int octave = k / 3, axis = k % 3;
        rc = cnx_synth__field_init(&warp[k], d, p->resolution,
                                   octave == 0 ? HC_WARP1 : HC_WARP2, p->seed,
                                   SYNTH_STREAM_HARD_WARP +
                                       ((uint64_t)octave << 8) +
                                       ((uint64_t)axis << 4));
        if (rc == 0) {
            wrow[k] = malloc((size_t)d->sx * sizeof(*wrow[k]));
            if (wrow[k] == NULL)
                rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        }
    }
    if (rc < 0)
        goto done;

    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            uint32_t *row = label + (z * d->sy + y) * d->sx;
            int any = 0;
            for (x = 0; x < d->sx && !any; x++)
                any = row[x] == 0;
            if (!any)
                continue;
            for (k = 0; k < 6; k++)
                cnx_synth__field_row(&warp[k], d->sx, y, z, wrow[k]);
            for (x = 0; x < d->sx; x++) {
                const int64_t v[3] = {x, y, z};
                double q[3], best = HUGE_VAL;
                int64_t cc[3], lo[3], hi[3], bx, by, bz, pick = 0;
                if (row[x] != 0)
                    continue;
                for (a = 0; a < 3; a++) {
                    q[a] = (double)v[a] * p->resolution[a] +
                           HC_WARP1_AMP * wrow[a][x] +
                           HC_WARP2_AMP * wrow[3 + a][x];
                    cc[a] = (int64_t)floor(q[a] / HC_CELL);
                    cc[a] = cc[a] < 0 ? 0 : (cc[a] >= g[a] ? g[a] - 1 : cc[a]);
                    lo[a] = cc[a] > 0 ? cc[a] - 1 : 0;
                    hi[a] = cc[a] + 1 < g[a] ? cc[a] + 1 : g[a] - 1;
                }
                for (bz = lo[2]; bz <= hi[2]; bz++) {
                    for (by = lo[1]; by <= hi[1]; by++) {
                        for (bx = lo[0]; bx <= hi[0]; bx++) {
                            const int64_t s = (bz * g[1] + by) * g[0] + bx;
                            const double *sd = seeds + 4 * s;
                            const double ex = q[0] - sd[0], ey = q[1] - sd[1],
                                         ez = q[2] - sd[2];
                            const double e =
                                ex * ex + ey * ey + ez * ez - sd[3];
                            if (e < best) {
                                best = e;
                                pick = s;
                            }
                        }
                    }
                }
                row[x] = nneurites + 1 + (uint32_t)pick;
            }
        }
    }
done:
    for (k = 0; k < 6; k++) {
        cnx_synth__field_free(&warp[k]);
        free(wrow[k]);
    }
    free(seeds);
    return rc;
}

/* ---- settling ---------------------------------------------------------- */

/*
 * One round: every piece under min_voxels that touches a piece that is not
 * small takes the label it shares most faces with among those (ties: the
 * lower label). Labels change only after all decisions. @return the number
 * of pieces relabelled, or a negative error.
 */
static int64_t settle_round(uint32_t *label, uint32_t *comp,
                            const synth_dims *d, int64_t min_voxels)
{
    const int64_t sxy = d->sx * d->sy;
    const uint32_t ncomp = cnx_synth__components(comp, label, d);
    int64_t *size = calloc(ncomp, sizeof(*size));
    int64_t *slot = malloc((size_t)ncomp * sizeof(*slot));
    uint32_t *clabel = malloc((size_t)ncomp * sizeof(*clabel));
    synth_contacts *pieces = NULL;
    int64_t nsmall = 0, moved = 0, i, x, y, z;
    uint32_t c;

    if (size == NULL || slot == NULL || clabel == NULL) {
        moved = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i < d->n; i++) {
        size[comp[i]]++;
        clabel[comp[i]] = label[i];
    }
    for (c = 0; c < ncomp; c++)
        slot[c] = size[c] < min_voxels && ncomp > 1 ? nsmall++ : -1;
    if (nsmall == 0)
        goto done;
    pieces = calloc((size_t)nsmall, sizeof(*pieces));
    if (pieces == NULL) {
        moved = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const int64_t s = slot[comp[i]];
                int64_t nb[6];
                int k, nnb = 0, rc = 0;
                if (s < 0)
                    continue;
                if (x > 0)
                    nb[nnb++] = i - 1;
                if (x + 1 < d->sx)
                    nb[nnb++] = i + 1;
                if (y > 0)
                    nb[nnb++] = i - d->sx;
                if (y + 1 < d->sy)
                    nb[nnb++] = i + d->sx;
                if (z > 0)
                    nb[nnb++] = i - sxy;
                if (z + 1 < d->sz)
                    nb[nnb++] = i + sxy;
                for (k = 0; k < nnb; k++) {
                    const uint32_t o = comp[nb[k]];
                    if (o != comp[i] && slot[o] < 0)
                        rc |= cnx_synth__contacts_add(&pieces[s], label[nb[k]]);
                }
                if (rc != 0) {
                    moved = CNX_ENOMEM;
                    goto done;
                }
            }
        }
    }
    for (c = 0; c < ncomp; c++) {
        const synth_contacts *pc;
        if (slot[c] < 0)
            continue;
        pc = &pieces[slot[c]];
        if (pc->count == 0)
            continue;
        clabel[c] = cnx_synth__contacts_pick(pc);
        moved++;
    }
    for (i = 0; i < d->n; i++) {
        if (slot[comp[i]] >= 0)
            label[i] = clabel[comp[i]];
    }
done:
    if (pieces != NULL) {
        for (i = 0; i < nsmall; i++)
            free(pieces[i].c);
    }
    free(pieces);
    free(size);
    free(slot);
    free(clabel);
    return moved;
}

typedef struct piece_key {
    uint32_t label;
    uint32_t comp;
} piece_key;

static int piece_cmp(const void *pa, const void *pb)
{
    const piece_key *a = pa, *b = pb;
    if (a->label != b->label)
        return a->label < b->label ? -1 : 1;
    return a->comp < b->comp ? -1 : (a->comp > b->comp ? 1 : 0);
}

int cnx_synth__hard_settle(uint32_t *label, uint32_t *nobjects,
                           const synth_dims *d, const cnx_synth_params *p)
{
    const double voxel = p->resolution[0] * p->resolution[1] * p->resolution[2];
    const int64_t min_voxels = (int64_t)ceil(HS_MIN_VOLUME / voxel);
    uint32_t *comp = malloc((size_t)d->n * sizeof(*comp));
    uint32_t *rank = NULL, ncomp, c;
    piece_key *keys = NULL;
    int64_t moved = 1, i;
    int round, rc = 0;

    if (comp == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    for (round = 0; round < HS_ROUNDS && moved > 0; round++)
        moved = settle_round(label, comp, d, min_voxels);
    if (moved < 0) {
        rc = (int)moved;
        goto done;
    }
    /* Every piece is an object, numbered in (old label, scan) order:
     * neurites first, in the order they were made, then cells. */
    ncomp = cnx_synth__components(comp, label, d);
    keys = malloc((size_t)ncomp * sizeof(*keys));
    rank = malloc((size_t)ncomp * sizeof(*rank));
    if (keys == NULL || rank == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i < d->n; i++) {
        keys[comp[i]].label = label[i];
        keys[comp[i]].comp = comp[i];
    }
    qsort(keys, ncomp, sizeof(*keys), piece_cmp);
    for (c = 0; c < ncomp; c++)
        rank[keys[c].comp] = c + 1;
    for (i = 0; i < d->n; i++)
        label[i] = rank[comp[i]];
    *nobjects = ncomp;
done:
    free(comp);
    free(keys);
    free(rank);
    return rc;
}
