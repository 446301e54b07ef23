/*
 * synth_neurites.c - the ground-truth objects of a synthetic dataset.
 *
 * Objects are grown as branching skeletons: an object starts at a random
 * free voxel and walks both ways as random walks with momentum (the
 * direction keeps most of itself each step), its radius drifting within
 * radius_min..radius_max, sometimes spawning a thinner branch. Each step is
 * painted as a capsule (a cone frustum with round ends); a step that would
 * come within one voxel of another object is turned or, failing that, ends
 * the arm, so objects never merge and each stays connected. Objects are
 * numbered 1..N in the order they are kept. Then every empty voxel takes the
 * label of its nearest painted voxel (an exact labelled Euclidean distance
 * transform, Felzenszwalb & Huttenlocher, one axis at a time), so objects
 * pack like neuropil, and digitisation slivers are merged into a neighbour
 * so that every object is one 6-connected component.
 * Floating point here uses only + - * / and sqrt (IEEE, correctly rounded),
 * in a fixed order, so results are identical on every machine. The
 * capsule painter (synth_painter) is shared with the hard style, which
 * paints in nm (synth_hard.c).
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"
#include "kernels/unionfind_int.h"

/* Walk step length, voxels; capsules join end to end, so any step works. */
#define STEP_LEN 2.0
/* Free space kept between objects while painting, voxels. */
#define MARGIN 1.0
/* Chance per step of spawning a branch, and limits on branching. */
#define BRANCH_CHANCE 0.025
#define MAX_BRANCHES 5
#define MAX_DEPTH 2
/* Direction tries before a blocked arm ends. */
#define TURN_TRIES 6
/* Consecutive failed starts after which the volume counts as full. */
#define MAX_FAILS 400

typedef struct arm {
    double pos[3];
    double dir[3];
    double radius; /* current */
    double base;   /* the radius it drifts back to */
    int depth;
} arm;

/* Clipped inclusive voxel box of capsule a-b grown by r; 0 if empty. */
static int capsule_box(const synth_painter *pt, const double a[3],
                       const double b[3], double r, int64_t lo[3],
                       int64_t hi[3])
{
    const synth_dims *d = pt->d;
    const int64_t ext[3] = {d->sx, d->sy, d->sz};
    int i;
    for (i = 0; i < 3; i++) {
        const double mn = ((a[i] < b[i] ? a[i] : b[i]) - r) / pt->res[i];
        const double mx = ((a[i] > b[i] ? a[i] : b[i]) + r) / pt->res[i];
        if (mx < 0.0 || mn > (double)(ext[i] - 1))
            return 0;
        lo[i] = mn < 0.0 ? 0 : (int64_t)ceil(mn);
        hi[i] = mx > (double)(ext[i] - 1) ? ext[i] - 1 : (int64_t)floor(mx);
        if (lo[i] > hi[i])
            return 0;
    }
    return 1;
}

/* A capsule: segment a-b, radius ra at a to rb at b, grown by grow. */
typedef struct capsule {
    double a[3];
    double ab[3];
    double ab2;
    double ra, rb, grow;
} capsule;

static void capsule_init(capsule *c, const double a[3], const double b[3],
                         double ra, double rb, double grow)
{
    int i;
    for (i = 0; i < 3; i++) {
        c->a[i] = a[i];
        c->ab[i] = b[i] - a[i];
    }
    c->ab2 = cnx_synth__dot3(c->ab, c->ab);
    c->ra = ra;
    c->rb = rb;
    c->grow = grow;
}

/* 1 if the voxel centre p lies in the capsule. */
static int capsule_has(const capsule *c, const double p[3])
{
    double ac[3], t = 0.0, d2 = 0.0, r;
    int i;
    for (i = 0; i < 3; i++)
        ac[i] = p[i] - c->a[i];
    if (c->ab2 > 0.0) {
        t = cnx_synth__dot3(ac, c->ab) / c->ab2;
        t = t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
    }
    for (i = 0; i < 3; i++) {
        const double e = ac[i] - t * c->ab[i];
        d2 += e * e;
    }
    r = c->ra + t * (c->rb - c->ra) + c->grow;
    return d2 <= r * r;
}

void cnx_synth__painter_begin(synth_painter *pt)
{
    int i;
    for (i = 0; i < 3; i++) {
        pt->bmin[i] = INT64_MAX;
        pt->bmax[i] = -1;
    }
}

int cnx_synth__painter_free(const synth_painter *pt, const double a[3],
                            const double b[3], double ra, double rb,
                            double grow, uint32_t id)
{
    const synth_dims *d = pt->d;
    int64_t lo[3], hi[3], x, y, z;
    capsule c;
    double p[3];

    if (!capsule_box(pt, a, b, (ra > rb ? ra : rb) + grow, lo, hi))
        return 1;
    capsule_init(&c, a, b, ra, rb, grow);
    for (z = lo[2]; z <= hi[2]; z++) {
        p[2] = (double)z * pt->res[2];
        for (y = lo[1]; y <= hi[1]; y++) {
            const uint32_t *row = pt->label + (z * d->sy + y) * d->sx;
            p[1] = (double)y * pt->res[1];
            for (x = lo[0]; x <= hi[0]; x++) {
                if (row[x] == 0 || row[x] == id)
                    continue;
                p[0] = (double)x * pt->res[0];
                if (capsule_has(&c, p))
                    return 0;
            }
        }
    }
    return 1;
}

void cnx_synth__painter_paint(synth_painter *pt, const double a[3],
                              const double b[3], double ra, double rb,
                              uint32_t id)
{
    const synth_dims *d = pt->d;
    int64_t lo[3], hi[3], x, y, z;
    capsule c;
    double p[3];
    int i;

    if (!capsule_box(pt, a, b, ra > rb ? ra : rb, lo, hi))
        return;
    capsule_init(&c, a, b, ra, rb, 0.0);
    for (z = lo[2]; z <= hi[2]; z++) {
        p[2] = (double)z * pt->res[2];
        for (y = lo[1]; y <= hi[1]; y++) {
            uint32_t *row = pt->label + (z * d->sy + y) * d->sx;
            p[1] = (double)y * pt->res[1];
            for (x = lo[0]; x <= hi[0]; x++) {
                if (row[x] != 0)
                    continue;
                p[0] = (double)x * pt->res[0];
                if (capsule_has(&c, p)) {
                    row[x] = id;
                    pt->painted++;
                }
            }
        }
    }
    for (i = 0; i < 3; i++) {
        if (lo[i] < pt->bmin[i])
            pt->bmin[i] = lo[i];
        if (hi[i] > pt->bmax[i])
            pt->bmax[i] = hi[i];
    }
}

void cnx_synth__painter_erase(synth_painter *pt, uint32_t id)
{
    const synth_dims *d = pt->d;
    int64_t x, y, z;
    for (z = pt->bmin[2]; z <= pt->bmax[2]; z++) {
        for (y = pt->bmin[1]; y <= pt->bmax[1]; y++) {
            uint32_t *row = pt->label + (z * d->sy + y) * d->sx;
            for (x = pt->bmin[0]; x <= pt->bmax[0]; x++) {
                if (row[x] == id) {
                    row[x] = 0;
                    pt->painted--;
                }
            }
        }
    }
}

int cnx_synth__painter_outside(const synth_painter *pt, const double p[3])
{
    const int64_t ext[3] = {pt->d->sx, pt->d->sy, pt->d->sz};
    int i;
    for (i = 0; i < 3; i++) {
        if (p[i] < -0.5 * pt->res[i] ||
            p[i] > ((double)ext[i] - 0.5) * pt->res[i])
            return 1;
    }
    return 0;
}

void cnx_synth__branch_dir(synth_rng *rng, const double dir[3], double out[3])
{
    double u[3], along;
    int i;
    cnx_synth__random_unit(rng, u);
    along = cnx_synth__dot3(u, dir);
    for (i = 0; i < 3; i++)
        u[i] -= along * dir[i];
    if (cnx_synth__dot3(u, u) < 1e-6) {
        u[0] = -dir[1];
        u[1] = dir[0];
        u[2] = 0.0;
        if (cnx_synth__dot3(u, u) < 1e-6) {
            u[0] = 1.0;
            u[1] = 0.0;
        }
    }
    cnx_synth__normalize3(u);
    for (i = 0; i < 3; i++)
        out[i] = 0.5 * dir[i] + u[i];
    cnx_synth__normalize3(out);
}

/*
 * Walk one arm until it leaves the volume, is blocked or runs out of steps,
 * painting as it goes and pushing branches onto stack. @return its length.
 */
static double walk(synth_painter *pt, synth_rng *rng, const cnx_synth_params *p,
                   arm *a, uint32_t id, arm *stack, int *nstack, int *nbranches,
                   int64_t max_steps)
{
    const double rmin = p->radius_min, rmax = p->radius_max;
    double length = 0.0;
    int64_t step;

    for (step = 0; step < max_steps; step++) {
        double dir[3], next[3], r, u[3];
        int ok = 0, tries, i;

        r = a->radius + 0.5 * cnx_synth__rng_unit(rng) - 0.25 +
            0.1 * (a->base - a->radius);
        r = r < rmin ? rmin : (r > rmax ? rmax : r);
        for (tries = 0; tries < TURN_TRIES && !ok; tries++) {
            /* Momentum: keep the direction, add a small random turn; turn
             * harder when the way ahead is blocked. */
            const double wobble = tries == 0 ? 0.3 : 0.6 + 0.2 * tries;
            cnx_synth__random_unit(rng, u);
            for (i = 0; i < 3; i++)
                dir[i] = a->dir[i] + wobble * u[i];
            if (cnx_synth__dot3(dir, dir) < 1e-6)
                continue;
            cnx_synth__normalize3(dir);
            for (i = 0; i < 3; i++)
                next[i] = a->pos[i] + STEP_LEN * dir[i];
            ok = cnx_synth__painter_free(pt, a->pos, next, a->radius, r,
                                         MARGIN, id);
        }
        if (!ok)
            break;
        cnx_synth__painter_paint(pt, a->pos, next, a->radius, r, id);
        length += STEP_LEN;
        memcpy(a->pos, next, sizeof(next));
        memcpy(a->dir, dir, sizeof(dir));
        a->radius = r;
        if (cnx_synth__painter_outside(pt, a->pos))
            break;
        if (a->depth < MAX_DEPTH && *nbranches < MAX_BRANCHES &&
            cnx_synth__rng_unit(rng) < BRANCH_CHANCE) {
            arm *b = &stack[(*nstack)++];
            (*nbranches)++;
            memcpy(b->pos, a->pos, sizeof(b->pos));
            cnx_synth__branch_dir(rng, a->dir, b->dir);
            b->base = a->base * (0.55 + 0.3 * cnx_synth__rng_unit(rng));
            b->base = b->base < rmin ? rmin : b->base;
            b->radius = b->base < a->radius ? b->base : a->radius;
            b->depth = a->depth + 1;
        }
    }
    return length;
}

int cnx_synth__neurites(uint32_t *label, uint32_t *nobjects,
                        const synth_dims *d, const cnx_synth_params *p)
{
    const int64_t share =
        d->n / 100 * p->fill_percent + d->n % 100 * p->fill_percent / 100;
    const int64_t target = share > 0 ? share : 1;
    const int64_t max_steps = 4 * (d->sx + d->sy + d->sz);
    int64_t longest = d->sx > d->sy ? d->sx : d->sy;
    double min_length;
    arm stack[2 + MAX_BRANCHES];
    synth_painter pt;
    synth_rng rng;
    uint32_t id = 1;
    int fails = 0;

    longest = longest > d->sz ? longest : d->sz;
    /* Tiny objects are blobs, not neurites; tiny volumes still get one. */
    min_length = (double)longest / 4.0 < 16.0 ? (double)longest / 4.0 : 16.0;
    memset(&pt, 0, sizeof(pt));
    pt.label = label;
    pt.d = d;
    pt.res[0] = pt.res[1] = pt.res[2] = 1.0;
    cnx_synth__rng_init(&rng, p->seed, SYNTH_STREAM_NEURITES);

    while (pt.painted < target && fails < MAX_FAILS && id < UINT32_MAX) {
        const double rmin = p->radius_min, rmax = p->radius_max;
        double start[3], dir[3], r, u, length = 0.0;
        int64_t x, y, z;
        int nstack = 0, nbranches = 0, i;

        x = cnx_synth__rng_range(&rng, 0, d->sx - 1);
        y = cnx_synth__rng_range(&rng, 0, d->sy - 1);
        z = cnx_synth__rng_range(&rng, 0, d->sz - 1);
        u = cnx_synth__rng_unit(&rng);
        r = rmin + (rmax - rmin) * u * u; /* thin neurites are common */
        cnx_synth__random_unit(&rng, dir);
        start[0] = (double)x;
        start[1] = (double)y;
        start[2] = (double)z;
        if (label[(z * d->sy + y) * d->sx + x] != 0 ||
            !cnx_synth__painter_free(&pt, start, start, r, r, MARGIN, id)) {
            fails++;
            continue;
        }
        cnx_synth__painter_begin(&pt);
        cnx_synth__painter_paint(&pt, start, start, r, r, id);
        /* Two arms from the start, back to back: the neurite passes
         * through the volume rather than starting in the middle of it. */
        for (i = 0; i < 2; i++) {
            arm *a = &stack[nstack++];
            memcpy(a->pos, start, sizeof(start));
            a->dir[0] = i == 0 ? dir[0] : -dir[0];
            a->dir[1] = i == 0 ? dir[1] : -dir[1];
            a->dir[2] = i == 0 ? dir[2] : -dir[2];
            a->radius = r;
            a->base = r;
            a->depth = 0;
        }
        /* Arms are walked first-pushed first so both main arms go before
         * the branches; branches are appended behind them. */
        for (i = 0; i < nstack; i++) {
            arm a = stack[i];
            length += walk(&pt, &rng, p, &a, id, stack, &nstack, &nbranches,
                           max_steps);
        }
        if (length < min_length) {
            cnx_synth__painter_erase(&pt, id);
            fails++;
            continue;
        }
        id++;
        fails = 0;
    }
    *nobjects = id - 1;
    if (id == 1)
        return cnx_error_set(CNX_EINVAL, 0, "synth: no object fits the volume");
    return 0;
}

/* ---- labelled Euclidean distance transform ---------------------------- */

#define DIST_INF INT32_MAX

/*
 * One line of the squared-distance transform with labels (Felzenszwalb &
 * Huttenlocher 2012): the lower envelope of parabolas rooted at the finite
 * samples. v (n) and z (n + 1) are scratch. Equal values keep the earlier
 * sample, so the result does not depend on anything but the input.
 */
static void edt_line(const int32_t *f, const uint32_t *l, int32_t *fo,
                     uint32_t *lo, int64_t n, int64_t *v, double *z)
{
    int64_t k = -1, q;

    for (q = 0; q < n; q++) {
        double s = 0.0;
        if (f[q] == DIST_INF)
            continue;
        if (k < 0) {
            k = 0;
            v[0] = q;
            z[0] = -HUGE_VAL;
            z[1] = HUGE_VAL;
            continue;
        }
        for (;;) {
            const int64_t r = v[k];
            s = (double)(((int64_t)f[q] + q * q) - ((int64_t)f[r] + r * r)) /
                (double)(2 * (q - r));
            if (s > z[k])
                break;
            k--; /* never below 0: z[0] is -infinity */
        }
        k++;
        v[k] = q;
        z[k] = s;
        z[k + 1] = HUGE_VAL;
    }
    if (k < 0) {
        for (q = 0; q < n; q++) {
            fo[q] = DIST_INF;
            lo[q] = 0;
        }
        return;
    }
    k = 0;
    for (q = 0; q < n; q++) {
        int64_t r, dq;
        while (z[k + 1] < (double)q)
            k++;
        r = v[k];
        dq = q - r;
        fo[q] = (int32_t)(dq * dq + f[r]);
        lo[q] = l[r];
    }
}

/* Lines along y and z are processed this many at a time, adjacent in x, so
 * that gathering them reads whole cache lines. */
#define EDT_BLOCK 16

static int edt_pass(int32_t *f, uint32_t *l, const synth_dims *d, int axis)
{
    const int64_t n = axis == 0 ? d->sx : (axis == 1 ? d->sy : d->sz);
    const int64_t stride = axis == 0 ? 1 : (axis == 1 ? d->sx : d->sx * d->sy);
    const int64_t outer = axis == 2 ? d->sy : d->sz;
    const int64_t outer_stride = axis == 2 ? d->sx : d->sx * d->sy;
    int32_t *fin = NULL, *fout = NULL;
    uint32_t *lin = NULL, *lout = NULL;
    int64_t *v = NULL, o, x0, k, b;
    double *z = NULL;
    int rc = 0;

    fin = malloc((size_t)(EDT_BLOCK * n) * sizeof(*fin));
    fout = malloc((size_t)(EDT_BLOCK * n) * sizeof(*fout));
    lin = malloc((size_t)(EDT_BLOCK * n) * sizeof(*lin));
    lout = malloc((size_t)(EDT_BLOCK * n) * sizeof(*lout));
    v = malloc((size_t)n * sizeof(*v));
    z = malloc((size_t)(n + 1) * sizeof(*z));
    if (fin == NULL || fout == NULL || lin == NULL || lout == NULL ||
        v == NULL || z == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    if (axis == 0) {
        for (o = 0; o < d->sy * d->sz; o++) {
            int32_t *fl = f + o * d->sx;
            uint32_t *ll = l + o * d->sx;
            edt_line(fl, ll, fout, lout, n, v, z);
            memcpy(fl, fout, (size_t)n * sizeof(*fl));
            memcpy(ll, lout, (size_t)n * sizeof(*ll));
        }
        goto done;
    }
    for (o = 0; o < outer; o++) {
        for (x0 = 0; x0 < d->sx; x0 += EDT_BLOCK) {
            const int64_t bw = d->sx - x0 < EDT_BLOCK ? d->sx - x0 : EDT_BLOCK;
            const int64_t base = o * outer_stride + x0;
            for (k = 0; k < n; k++) {
                for (b = 0; b < bw; b++) {
                    fin[b * n + k] = f[base + k * stride + b];
                    lin[b * n + k] = l[base + k * stride + b];
                }
            }
            for (b = 0; b < bw; b++)
                edt_line(fin + b * n, lin + b * n, fout + b * n, lout + b * n,
                         n, v, z);
            for (k = 0; k < n; k++) {
                for (b = 0; b < bw; b++) {
                    f[base + k * stride + b] = fout[b * n + k];
                    l[base + k * stride + b] = lout[b * n + k];
                }
            }
        }
    }
done:
    free(fin);
    free(fout);
    free(lin);
    free(lout);
    free(v);
    free(z);
    return rc;
}

int cnx_synth__fill(uint32_t *label, const synth_dims *d)
{
    int32_t *f = malloc((size_t)d->n * sizeof(*f));
    int64_t i;
    int axis, rc = 0;

    if (f == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    for (i = 0; i < d->n; i++)
        f[i] = label[i] != 0 ? 0 : DIST_INF;
    for (axis = 0; axis < 3 && rc == 0; axis++)
        rc = edt_pass(f, label, d, axis);
    free(f);
    return rc;
}

/* ---- one component per object ----------------------------------------- */

/* Also the hard style's (synth_hard.c); see synth_int.h. */
uint32_t cnx_synth__components(uint32_t *comp, const uint32_t *label,
                               const synth_dims *d)
{
    const int64_t sxy = d->sx * d->sy;
    uint32_t next = 0;
    int64_t i, x, y, z;

    /* After voxel i, it is joined to every earlier same-label neighbour; a
     * union is skipped when a chain through earlier voxels already joins
     * them (left and upper-left both the same label, and so on). */
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const uint32_t l = label[i];
                const int left = x > 0 && label[i - 1] == l;
                const int up = y > 0 && label[i - d->sx] == l;
                comp[i] = left ? comp[i - 1] : (uint32_t)i;
                if (up && !(left && label[i - 1 - d->sx] == l))
                    cnx__uf_union(comp, (uint32_t)(i - d->sx), (uint32_t)i);
                if (z > 0 && label[i - sxy] == l &&
                    !(left && label[i - 1 - sxy] == l) &&
                    !(up && label[i - d->sx - sxy] == l))
                    cnx__uf_union(comp, (uint32_t)(i - sxy), (uint32_t)i);
            }
        }
    }
    /* A root is the lowest index of its component and every parent lies
     * below its child, so in one ascending pass a root gets the next
     * number and any other voxel copies its (already renumbered) parent's. */
    for (i = 0; i < d->n; i++) {
        if (comp[i] == (uint32_t)i)
            comp[i] = next++;
        else
            comp[i] = comp[comp[i]];
    }
    return next;
}

int cnx_synth__contacts_add(synth_contacts *s, uint32_t label)
{
    size_t k;
    for (k = 0; k < s->count; k++) {
        if (s->c[k].label == label) {
            s->c[k].faces++;
            return 0;
        }
    }
    if (s->count == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        struct synth_contact *c = realloc(s->c, cap * sizeof(*c));
        if (c == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        s->c = c;
        s->cap = cap;
    }
    s->c[s->count].label = label;
    s->c[s->count].faces = 1;
    s->count++;
    return 0;
}

uint32_t cnx_synth__contacts_pick(const synth_contacts *s)
{
    size_t k, pick = 0;
    assert(s->count > 0);
    for (k = 1; k < s->count; k++) {
        if (s->c[k].faces > s->c[pick].faces ||
            (s->c[k].faces == s->c[pick].faces &&
             s->c[k].label < s->c[pick].label))
            pick = k;
    }
    return s->c[pick].label;
}

/*
 * One round: find pieces that are not their object's largest component and
 * give each the label it shares most faces with (ties: the lower label).
 * @return the number of pieces relabelled, or a negative error.
 */
static int64_t connect_round(uint32_t *label, uint32_t *comp,
                             const synth_dims *d)
{
    const int64_t sxy = d->sx * d->sy;
    uint32_t ncomp = cnx_synth__components(comp, label, d);
    uint32_t maxlabel = 0, c;
    int64_t *size = calloc(ncomp, sizeof(*size));
    uint32_t *clabel = calloc(ncomp, sizeof(*clabel));
    int64_t *slot = NULL, nstray = 0, i, x, y, z;
    uint32_t *best = NULL;
    synth_contacts *strays = NULL;

    if (size == NULL || clabel == NULL) {
        nstray = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i < d->n; i++) {
        size[comp[i]]++;
        clabel[comp[i]] = label[i];
        if (label[i] > maxlabel)
            maxlabel = label[i];
    }
    best = malloc(((size_t)maxlabel + 1) * sizeof(*best));
    slot = malloc((size_t)ncomp * sizeof(*slot));
    if (best == NULL || slot == NULL) {
        nstray = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    for (i = 0; i <= (int64_t)maxlabel; i++)
        best[i] = UINT32_MAX;
    for (c = 0; c < ncomp; c++) {
        uint32_t *b = &best[clabel[c]];
        if (*b == UINT32_MAX || size[c] > size[*b])
            *b = c;
    }
    for (c = 0; c < ncomp; c++)
        slot[c] = best[clabel[c]] == c ? -1 : nstray++;
    if (nstray == 0)
        goto done;
    strays = calloc((size_t)nstray, sizeof(*strays));
    if (strays == NULL) {
        nstray = cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        goto done;
    }
    i = 0;
    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const int64_t s = slot[comp[i]];
                const uint32_t l = label[i];
                int rc = 0;
                if (s < 0)
                    continue;
                if (x > 0 && label[i - 1] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i - 1]);
                if (x + 1 < d->sx && label[i + 1] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i + 1]);
                if (y > 0 && label[i - d->sx] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i - d->sx]);
                if (y + 1 < d->sy && label[i + d->sx] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i + d->sx]);
                if (z > 0 && label[i - sxy] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i - sxy]);
                if (z + 1 < d->sz && label[i + sxy] != l)
                    rc |= cnx_synth__contacts_add(&strays[s], label[i + sxy]);
                if (rc != 0) {
                    nstray = CNX_ENOMEM;
                    goto done;
                }
            }
        }
    }
    /* Decide every piece's new label before changing any voxel. */
    for (c = 0; c < ncomp; c++) {
        const synth_contacts *st;
        if (slot[c] < 0)
            continue;
        st = &strays[slot[c]];
        if (st->count == 0)
            continue;
        clabel[c] = cnx_synth__contacts_pick(st);
    }
    for (i = 0; i < d->n; i++) {
        if (slot[comp[i]] >= 0)
            label[i] = clabel[comp[i]];
    }
done:
    if (strays != NULL) {
        for (i = 0; i < nstray; i++)
            free(strays[i].c);
    }
    free(strays);
    free(size);
    free(clabel);
    free(best);
    free(slot);
    return nstray;
}

int cnx_synth__connect(uint32_t *label, const synth_dims *d)
{
    uint32_t *comp = malloc((size_t)d->n * sizeof(*comp));
    int64_t moved = 1;
    int round;

    if (comp == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    /* A relabelled piece can land next to a stray piece of its new label;
     * a few rounds settle everything (one is almost always enough). */
    for (round = 0; round < 16 && moved > 0; round++)
        moved = connect_round(label, comp, d);
    free(comp);
    return moved < 0 ? (int)moved : 0;
}

void cnx_synth__membrane(uint8_t *flags, const uint32_t *label,
                         const synth_dims *d)
{
    const int64_t sxy = d->sx * d->sy;
    int64_t i = 0, x, y, z;

    for (z = 0; z < d->sz; z++) {
        for (y = 0; y < d->sy; y++) {
            for (x = 0; x < d->sx; x++, i++) {
                const uint32_t l = label[i];
                flags[i] = ((x > 0 && label[i - 1] != l) ||
                            (x + 1 < d->sx && label[i + 1] != l) ||
                            (y > 0 && label[i - d->sx] != l) ||
                            (y + 1 < d->sy && label[i + d->sx] != l) ||
                            (z > 0 && label[i - sxy] != l) ||
                            (z + 1 < d->sz && label[i + sxy] != l))
                               ? SYNTH_MEMBRANE
                               : 0;
            }
        }
    }
}
