/*
 * test_align_solve.c - the align kernel's solve (cnx_align_solve) against
 * synthetic stacks whose true per-section maps are known.
 *
 * Truth: section z's stitched point for aligned point q is T_z(q) = c +
 * R(theta_z) (q - c) + t_z + s_z(q) (a rigid motion and, where asked, a
 * smooth field s_z of long wavelength whose amplitudes sum to 0 over the
 * stack). A match (a, b) is computed independently of the kernel: m(g) =
 * T_a(T_b^-1(g)) - g at every node g, T_b^-1 by fixed-point iteration.
 * The matches cannot see a deformation common to the whole stack, which
 * the stiffness settles; so the solution is compared with the truth after
 * removing one best-fitting global similarity (translation, rotation,
 * scale: closed-form least squares about the grid centre).
 *
 * Checks: noise-free rigid stacks are recovered within 1e-3 px, residuals
 * within 1e-3; smooth fields within what bilinear interpolation of m
 * allows; noisy matches with bounded error; a failed section is bridged
 * and its neighbours still align through the z +- 2 matches; an empty
 * section and a pair under min_valid are left out; runs cut apart are
 * each centred; the same input (in any order) gives the same bytes;
 * blocks of 16 with overlap 8 agree with one block on a stack of 40 and
 * their seams have no larger residuals than the rest; normalisation;
 * every bad input is refused with CNX_EINVAL and a message naming it.
 */
#include <math.h>

#include "cnx/align.h"
#include "cnx/error.h"
#include "cnx_test.h"

#define NX 8
#define NY 8
#define NODES (NX * NY)
#define STEP 32.0
#define ORIGIN 16.0
#define PEAK_OF(n) (2.0 + (double)((n) % 5)) /* lower median: 4 */
/* A stiffness low enough that the membrane's pull on rotated sections
 * (see stiffness_bias_is_bounded) stays below 1e-3 px on the stacks here. */
#define K_EXACT 1e-4

/* ---- synthetic stacks ---------------------------------------------------- */

typedef struct stack {
    cnx_align_grid grid;
    double cx, cy; /* grid centre */
    int64_t z0, nz;
    double *th, *tx, *ty, *sa, *sb; /* truth per section */
    cnx_align_match *m;
    size_t nm;
    cnx_align_stats *st;
} stack;

static double urand(uint64_t *seed, double lo, double hi)
{
    return lo + (hi - lo) * (double)(cnx_test_rand(seed) >> 11) * 0x1p-53;
}

/* The smooth part of T_z at q. */
static void smooth_at(const stack *s, int64_t z, double qx, double qy,
                      double *ox, double *oy)
{
    const double L = 2.0 * (double)(NX - 1) * STEP, pi = 3.14159265358979323846;
    const double u = (qx - ORIGIN) / L, v = (qy - ORIGIN) / L;
    *ox = s->sa[z] * sin(2.0 * pi * u) * cos(pi * v) + s->sb[z] * v * v;
    *oy = s->sb[z] * cos(pi * u) * sin(2.0 * pi * v) - s->sa[z] * u * v;
}

static void truth_map(const stack *s, int64_t z, double qx, double qy,
                      double *px, double *py)
{
    const double c = cos(s->th[z]), sn = sin(s->th[z]);
    const double X = qx - s->cx, Y = qy - s->cy;
    double ox, oy;
    smooth_at(s, z, qx, qy, &ox, &oy);
    *px = s->cx + c * X - sn * Y + s->tx[z] + ox;
    *py = s->cy + sn * X + c * Y + s->ty[z] + oy;
}

static void truth_inverse(const stack *s, int64_t z, double px, double py,
                          double *qx, double *qy)
{
    const double c = cos(s->th[z]), sn = sin(s->th[z]);
    double x = px, y = py;
    for (int it = 0; it < 100; it++) {
        double ox, oy, X, Y;
        smooth_at(s, z, x, y, &ox, &oy);
        X = px - s->cx - s->tx[z] - ox;
        Y = py - s->cy - s->ty[z] - oy;
        x = s->cx + c * X + sn * Y;
        y = s->cy - sn * X + c * Y;
    }
    *qx = x;
    *qy = y;
}

static void node_pos(int64_t n, double *gx, double *gy)
{
    *gx = ORIGIN + (double)(n % NX) * STEP;
    *gy = ORIGIN + (double)(n / NX) * STEP;
}

/* A stack of nz sections with every match (k = 1, 2); rotations up to
 * rot rad, translations up to shift px, smooth amplitudes up to amp px
 * (summing to 0 over the stack), match noise up to noise px. */
static void stack_make(stack *s, int64_t nz, double rot, double shift,
                       double amp, double noise, uint64_t seed)
{
    double ma = 0.0, mb = 0.0;
    memset(s, 0, sizeof(*s));
    s->grid = (cnx_align_grid){ORIGIN, ORIGIN, STEP, NX, NY};
    s->cx = ORIGIN + 0.5 * (NX - 1) * STEP;
    s->cy = ORIGIN + 0.5 * (NY - 1) * STEP;
    s->z0 = 100;
    s->nz = nz;
    s->th = calloc((size_t)nz, sizeof(double));
    s->tx = calloc((size_t)nz, sizeof(double));
    s->ty = calloc((size_t)nz, sizeof(double));
    s->sa = calloc((size_t)nz, sizeof(double));
    s->sb = calloc((size_t)nz, sizeof(double));
    s->st = calloc((size_t)nz, sizeof(*s->st));
    s->m = calloc(2 * (size_t)nz, sizeof(*s->m));
    assert_true(s->th && s->tx && s->ty && s->sa && s->sb && s->st && s->m);
    for (int64_t z = 0; z < nz; z++) {
        s->th[z] = urand(&seed, -rot, rot);
        s->tx[z] = urand(&seed, -shift, shift);
        s->ty[z] = urand(&seed, -shift, shift);
        s->sa[z] = urand(&seed, -amp, amp);
        s->sb[z] = urand(&seed, -amp, amp);
        ma += s->sa[z];
        mb += s->sb[z];
        s->st[z] = (cnx_align_stats){120.0, 30.0, 1000};
    }
    for (int64_t z = 0; z < nz; z++) {
        s->sa[z] -= ma / (double)nz;
        s->sb[z] -= mb / (double)nz;
    }
    for (int64_t b = 1; b < nz; b++)
        for (int64_t k = 1; k <= 2 && k <= b; k++) {
            cnx_align_match *m = &s->m[s->nm++];
            const int64_t a = b - k;
            m->za = s->z0 + a;
            m->zb = s->z0 + b;
            m->nodes = NODES;
            m->dx = calloc(NODES, sizeof(double));
            m->dy = calloc(NODES, sizeof(double));
            m->peak = calloc(NODES, sizeof(double));
            m->flag = calloc(NODES, 1);
            assert_true(m->dx && m->dy && m->peak && m->flag);
            for (int64_t n = 0; n < NODES; n++) {
                double gx, gy, qx, qy, px, py;
                node_pos(n, &gx, &gy);
                truth_inverse(s, b, gx, gy, &qx, &qy);
                truth_map(s, a, qx, qy, &px, &py);
                m->dx[n] = px - gx + urand(&seed, -noise, noise);
                m->dy[n] = py - gy + urand(&seed, -noise, noise);
                m->peak[n] = PEAK_OF(n);
            }
            m->valid = NODES;
        }
}

/* Drop every match naming section z (stack index). */
static void stack_drop(stack *s, int64_t z)
{
    size_t w = 0;
    for (size_t k = 0; k < s->nm; k++) {
        cnx_align_match *m = &s->m[k];
        if (m->za == s->z0 + z || m->zb == s->z0 + z)
            cnx_align_match_free(m);
        else
            s->m[w++] = *m;
    }
    s->nm = w;
}

static cnx_align_match *stack_find(stack *s, int64_t za, int64_t zb)
{
    for (size_t k = 0; k < s->nm; k++)
        if (s->m[k].za == s->z0 + za && s->m[k].zb == s->z0 + zb)
            return &s->m[k];
    fail_msg("no match %lld -> %lld", (long long)za, (long long)zb);
    return NULL;
}

static void stack_free(stack *s)
{
    for (size_t k = 0; k < s->nm; k++)
        cnx_align_match_free(&s->m[k]);
    free(s->m);
    free(s->th);
    free(s->tx);
    free(s->ty);
    free(s->sa);
    free(s->sb);
    free(s->st);
}

static void params(cnx_align_params *p, int64_t block, int64_t overlap,
                   double stiffness)
{
    cnx_align_params_default(p);
    p->block = block;
    p->overlap = overlap;
    p->stiffness = stiffness;
    p->anchor = 0.0; /* exact recovery: no pull towards the stitched */
}

static void solve_ok(const stack *s, const cnx_align_params *p,
                     cnx_align_solution *sol)
{
    const int rc =
        cnx_align_solve(&s->grid, s->z0, s->nz, s->m, s->nm, s->st, p, sol);
    if (rc != 0)
        fail_msg("solve: %s", cnx_error_last()->message);
    assert_int_equal(sol->nz, s->nz);
    assert_int_equal(sol->nodes, NODES);
}

/* How far the sections disagree: at aligned node g, section z shows its
 * stitched point g + d_z(g), i.e. the reference point T_z^-1(g + d_z(g));
 * aligned, every OK section in [lo, hi] shows the same one. Returns the
 * largest distance of a section's point from their mean (px, no fit). */
static double recovery_error_rms(const stack *s, const cnx_align_solution *sol,
                                 int64_t lo, int64_t hi, double *rms)
{
    double worst = 0, sq = 0;
    size_t terms = 0;
    for (int64_t n = 0; n < NODES; n++) {
        double gx, gy, mx = 0, my = 0, px[64], py[64];
        size_t cnt = 0;
        node_pos(n, &gx, &gy);
        assert_true(hi - lo < 64);
        for (int64_t z = lo; z <= hi; z++) {
            const cnx_align_section *c = &sol->sections[z];
            if (c->status != CNX_ALIGN_SECTION_OK)
                continue;
            truth_inverse(s, z, gx + c->dx[n], gy + c->dy[n], &px[z - lo],
                          &py[z - lo]);
            mx += px[z - lo];
            my += py[z - lo];
            cnt++;
        }
        assert_true(cnt > 0);
        mx /= (double)cnt;
        my /= (double)cnt;
        for (int64_t z = lo; z <= hi; z++)
            if (sol->sections[z].status == CNX_ALIGN_SECTION_OK) {
                const double e = hypot(px[z - lo] - mx, py[z - lo] - my);
                worst = e > worst ? e : worst;
                sq += e * e;
                terms++;
            }
    }
    if (rms != NULL)
        *rms = sqrt(sq / (double)terms);
    return worst;
}

static double recovery_error(const stack *s, const cnx_align_solution *sol,
                             int64_t lo, int64_t hi)
{
    return recovery_error_rms(s, sol, lo, hi, NULL);
}

/* Mean translation of sections [lo, hi] (all nodes). */
static void mean_translation(const cnx_align_solution *sol, int64_t lo,
                             int64_t hi, double *mx, double *my)
{
    double sx = 0, sy = 0;
    for (int64_t z = lo; z <= hi; z++)
        for (int64_t n = 0; n < NODES; n++) {
            sx += sol->sections[z].dx[n];
            sy += sol->sections[z].dy[n];
        }
    *mx = sx / (double)((hi - lo + 1) * NODES);
    *my = sy / (double)((hi - lo + 1) * NODES);
}

static double max_residual(const cnx_align_solution *sol, int64_t lo,
                           int64_t hi)
{
    double w = 0;
    for (int64_t z = lo; z <= hi; z++)
        w = sol->sections[z].residual_max > w ? sol->sections[z].residual_max
                                              : w;
    return w;
}

/* ---- recovery ------------------------------------------------------------ */

static void test_align_solve__exact_rigid_stack_is_recovered(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    double err, mx, my;
    (void)state;
    stack_make(&s, 12, 0.01, 8.0, 0.0, 0.0, 1);
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    err = recovery_error(&s, &sol, 0, s.nz - 1);
    print_message("exact rigid (12 sections, rot <= 0.01 rad, shift <= 8 px, "
                  "stiffness %g): error %.2e px, residual max %.2e px\n",
                  p.stiffness, err, max_residual(&sol, 0, s.nz - 1));
    assert_true(err < 1e-3);
    assert_int_equal(sol.blocks, 1);
    assert_int_equal(sol.z0, 100);
    mean_translation(&sol, 0, s.nz - 1, &mx, &my);
    assert_true(fabs(mx) < 1e-9 && fabs(my) < 1e-9);
    for (int64_t z = 0; z < s.nz; z++) {
        const cnx_align_section *c = &sol.sections[z];
        const size_t pairs =
            (z > 0) + (z > 1) + (z < s.nz - 1) + (z < s.nz - 2);
        assert_int_equal(c->z, 100 + z);
        assert_int_equal(c->status, CNX_ALIGN_SECTION_OK);
        assert_int_equal(c->pairs_used, pairs);
        assert_int_equal(c->nodes_valid, pairs * NODES);
        assert_int_equal(c->nodes_rejected, 0);
        assert_true(c->confidence == 4.0);
        assert_true(c->residual_max < 1e-3);
        assert_true(c->residual_median <= c->residual_max);
        assert_true(c->gain == 1.0 && c->offset == 0.0);
    }
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

/* The membrane (springs between neighbouring nodes of a section) resists
 * a section's rotation relative to its neighbours at the grid's free
 * edge: the edge nodes move by about stiffness x relative rotation x step
 * / 2 (about 1e-2 px at the defaults and 0.02 rad). A stack that differs
 * only by translations is recovered exactly at any stiffness. */
static void test_align_solve__stiffness_bias_is_bounded(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    double err;
    (void)state;
    stack_make(&s, 12, 0.0, 8.0, 0.0, 0.0, 21);
    cnx_align_params_default(&p);
    p.anchor = 0.0;
    solve_ok(&s, &p, &sol);
    err = recovery_error(&s, &sol, 0, s.nz - 1);
    print_message("translations only, default stiffness: error %.2e px\n", err);
    assert_true(err < 1e-6);
    assert_true(max_residual(&sol, 0, s.nz - 1) < 1e-6);
    cnx_align_solution_free(&sol);
    stack_free(&s);

    stack_make(&s, 12, 0.01, 8.0, 0.0, 0.0, 1);
    solve_ok(&s, &p, &sol);
    err = recovery_error(&s, &sol, 0, s.nz - 1);
    print_message("rotations <= 0.01 rad, default stiffness %.2f: error "
                  "%.2e px, residual max %.2e px\n",
                  p.stiffness, err, max_residual(&sol, 0, s.nz - 1));
    assert_true(err < p.stiffness * 0.02 * STEP);
    assert_true(err > 1e-3); /* the bias is real */
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

static void test_align_solve__smooth_fields_are_recovered(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    double err;
    (void)state;
    stack_make(&s, 12, 0.01, 8.0, 1.5, 0.0, 2);
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    err = recovery_error(&s, &sol, 0, s.nz - 1);
    print_message("smooth fields (amplitude <= 1.5 px): error %.2e px, "
                  "residual max %.2e px\n",
                  err, max_residual(&sol, 0, s.nz - 1));
    /* bilinear interpolation of m between nodes 32 px apart: about
     * step^2 / 8 x |m''| = 128 x 6e-4 px at most */
    assert_true(err < 0.05);
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

static void test_align_solve__noisy_matches_bounded_error(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    uint64_t seed = 77;
    size_t flagged = 0;
    double err, rms, med = 0;
    (void)state;
    stack_make(&s, 12, 0.01, 8.0, 0.0, 0.3, 3);
    /* 10% of the nodes rejected, with garbage in them */
    for (size_t k = 0; k < s.nm; k++)
        for (int64_t n = 0; n < NODES; n++)
            if (cnx_test_rand(&seed) % 10 == 0) {
                s.m[k].flag[n] = CNX_ALIGN_NODE_WEAK;
                s.m[k].dx[n] = 1e6;
                s.m[k].dy[n] = -1e6;
                s.m[k].valid--;
                flagged++;
            }
    params(&p, 128, 32, 0.05);
    solve_ok(&s, &p, &sol);
    err = recovery_error_rms(&s, &sol, 0, s.nz - 1, &rms);
    for (int64_t z = 0; z < s.nz; z++)
        med += sol.sections[z].residual_median / (double)s.nz;
    print_message("noise +-0.3 px (sd 0.17), 10%% rejected: error max %.3f, "
                  "rms %.3f px; mean residual median %.3f px, max %.3f px\n",
                  err, rms, med, max_residual(&sol, 0, s.nz - 1));
    assert_true(err < 0.6);
    assert_true(rms < 0.15);
    assert_true(med > 0.05 && med < 0.4);
    {
        size_t rej = 0;
        for (int64_t z = 0; z < s.nz; z++)
            rej += sol.sections[z].nodes_rejected;
        assert_int_equal(rej, 2 * flagged);
    }
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

/* ---- failed, empty, disconnected ---------------------------------------- */

static void test_align_solve__failed_section_is_bridged(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    cnx_align_match *weak;
    double err;
    (void)state;
    stack_make(&s, 12, 0.01, 8.0, 0.0, 0.0, 4);
    stack_drop(&s, 4);
    s.st[9].count = 0; /* empty; its matches are present but dropped */
    /* 2 -> 3 with too few valid nodes: not used, its nodes rejected */
    weak = stack_find(&s, 2, 3);
    for (int64_t n = 0; n < NODES; n++)
        if (n % 16 != 0) {
            weak->flag[n] = CNX_ALIGN_NODE_FLAT;
            weak->valid--;
        }
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    assert_int_equal(sol.sections[4].status, CNX_ALIGN_SECTION_FAILED);
    assert_int_equal(sol.sections[9].status, CNX_ALIGN_SECTION_EMPTY);
    for (int64_t z = 0; z < s.nz; z++)
        if (z != 4 && z != 9)
            assert_int_equal(sol.sections[z].status, CNX_ALIGN_SECTION_OK);
    /* the neighbours align through 3 -> 5 (and 8 -> 10) */
    err = recovery_error(&s, &sol, 0, s.nz - 1);
    print_message("failed 4, empty 9, weak 2->3: error %.2e px\n", err);
    assert_true(err < 1e-3);
    for (int64_t n = 0; n < NODES; n++) {
        const cnx_align_section *c3 = &sol.sections[3], *c5 = &sol.sections[5],
                                *c8 = &sol.sections[8],
                                *c10 = &sol.sections[10];
        assert_true(sol.sections[4].dx[n] == 0.5 * c3->dx[n] + 0.5 * c5->dx[n]);
        assert_true(sol.sections[4].dy[n] == 0.5 * c3->dy[n] + 0.5 * c5->dy[n]);
        assert_true(sol.sections[9].dx[n] ==
                    0.5 * c8->dx[n] + 0.5 * c10->dx[n]);
        assert_true(sol.sections[9].dy[n] ==
                    0.5 * c8->dy[n] + 0.5 * c10->dy[n]);
    }
    /* 3: 1->3 and 3->5 used, 2->3 not; 4 names nothing */
    assert_int_equal(sol.sections[3].pairs_used, 2);
    assert_int_equal(sol.sections[3].nodes_valid, 2 * NODES);
    assert_int_equal(sol.sections[3].nodes_rejected, NODES - 4);
    assert_int_equal(sol.sections[2].nodes_rejected, NODES - 4);
    assert_int_equal(sol.sections[4].pairs_used, 0);
    assert_true(sol.sections[4].confidence == 0.0);
    assert_true(sol.sections[4].residual_max == 0.0);
    assert_int_equal(sol.sections[9].pairs_used, 0);
    assert_int_equal(sol.sections[8].pairs_used, 3);  /* 6, 7 and 10 */
    assert_int_equal(sol.sections[10].pairs_used, 2); /* 8->10, 10->11 */
    /* EMPTY: gain 1, offset 0 */
    assert_true(sol.sections[9].gain == 1.0 && sol.sections[9].offset == 0.0);
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

static void test_align_solve__disconnected_runs_are_centred(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    double e1, e2, mx, my;
    (void)state;
    stack_make(&s, 12, 0.01, 8.0, 0.0, 0.0, 5);
    stack_drop(&s, 4);
    stack_drop(&s, 5);
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    assert_int_equal(sol.sections[4].status, CNX_ALIGN_SECTION_FAILED);
    assert_int_equal(sol.sections[5].status, CNX_ALIGN_SECTION_FAILED);
    e1 = recovery_error(&s, &sol, 0, 3);
    e2 = recovery_error(&s, &sol, 6, s.nz - 1);
    print_message("runs 0..3 and 6..11: errors %.2e, %.2e px\n", e1, e2);
    assert_true(e1 < 1e-3 && e2 < 1e-3);
    mean_translation(&sol, 0, 3, &mx, &my);
    assert_true(fabs(mx) < 1e-9 && fabs(my) < 1e-9);
    mean_translation(&sol, 6, s.nz - 1, &mx, &my);
    assert_true(fabs(mx) < 1e-9 && fabs(my) < 1e-9);
    for (int64_t n = 0; n < NODES; n++) {
        const double *l = sol.sections[3].dx, *h = sol.sections[6].dx;
        assert_true(sol.sections[4].dx[n] ==
                    2.0 / 3.0 * l[n] + 1.0 / 3.0 * h[n]);
        assert_true(sol.sections[5].dx[n] ==
                    1.0 / 3.0 * l[n] + 2.0 / 3.0 * h[n]);
    }
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

static void test_align_solve__lone_and_edge_sections(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    (void)state;
    /* one section, no matches: FAILED, d = 0 */
    stack_make(&s, 1, 0.0, 0.0, 0.0, 0.0, 6);
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    assert_int_equal(sol.sections[0].status, CNX_ALIGN_SECTION_FAILED);
    assert_true(sol.sections[0].dx[0] == 0.0 && sol.sections[0].dy[63] == 0.0);
    assert_int_equal(sol.blocks, 1);
    cnx_align_solution_free(&sol);
    stack_free(&s);
    /* the first section failed: a copy of the nearest OK one */
    stack_make(&s, 6, 0.01, 5.0, 0.0, 0.0, 7);
    stack_drop(&s, 0);
    solve_ok(&s, &p, &sol);
    assert_int_equal(sol.sections[0].status, CNX_ALIGN_SECTION_FAILED);
    assert_memory_equal(sol.sections[0].dx, sol.sections[1].dx,
                        NODES * sizeof(double));
    assert_memory_equal(sol.sections[0].dy, sol.sections[1].dy,
                        NODES * sizeof(double));
    assert_true(recovery_error(&s, &sol, 1, 5) < 1e-3);
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

/* ---- determinism --------------------------------------------------------- */

static void assert_same_solution(const cnx_align_solution *x,
                                 const cnx_align_solution *y)
{
    assert_int_equal(x->nz, y->nz);
    assert_int_equal(x->blocks, y->blocks);
    assert_memory_equal(&x->grid, &y->grid, sizeof(x->grid));
    for (int64_t z = 0; z < x->nz; z++) {
        cnx_align_section a = x->sections[z], b = y->sections[z];
        assert_memory_equal(a.dx, b.dx, x->nodes * sizeof(double));
        assert_memory_equal(a.dy, b.dy, x->nodes * sizeof(double));
        a.dx = a.dy = b.dx = b.dy = NULL;
        assert_memory_equal(&a, &b, sizeof(a));
    }
}

static void test_align_solve__same_input_same_bytes(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution s1, s2, s3;
    (void)state;
    stack_make(&s, 20, 0.01, 8.0, 1.0, 0.2, 8);
    params(&p, 8, 3, 0.05);
    solve_ok(&s, &p, &s1);
    solve_ok(&s, &p, &s2);
    assert_same_solution(&s1, &s2);
    /* matches in reverse order: the same bytes */
    for (size_t k = 0; k < s.nm / 2; k++) {
        const cnx_align_match t = s.m[k];
        s.m[k] = s.m[s.nm - 1 - k];
        s.m[s.nm - 1 - k] = t;
    }
    solve_ok(&s, &p, &s3);
    assert_same_solution(&s1, &s3);
    cnx_align_solution_free(&s1);
    cnx_align_solution_free(&s2);
    cnx_align_solution_free(&s3);
    stack_free(&s);
}

/* Largest |d_x - d_y - S(g)| over all sections and nodes, S the one
 * similarity (translation, rotation, scale about the grid centre) that
 * fits d_x - d_y best (closed form: the grid is symmetric); *raw: the
 * largest |d_x - d_y|. */
static double similarity_diff(const stack *s, const cnx_align_solution *x,
                              const cnx_align_solution *y, double *raw)
{
    double tx = 0, ty = 0, a = 0, b = 0, rr = 0, worst = 0;
    size_t cnt = 0;
    *raw = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            tx /= (double)cnt;
            ty /= (double)cnt;
            a /= rr;
            b /= rr;
        }
        for (int64_t z = 0; z < s->nz; z++)
            for (int64_t n = 0; n < NODES; n++) {
                double gx, gy;
                const double rx = x->sections[z].dx[n] - y->sections[z].dx[n];
                const double ry = x->sections[z].dy[n] - y->sections[z].dy[n];
                node_pos(n, &gx, &gy);
                gx -= s->cx;
                gy -= s->cy;
                if (pass == 0) {
                    tx += rx;
                    ty += ry;
                    a += rx * gx + ry * gy;
                    b += ry * gx - rx * gy;
                    rr += gx * gx + gy * gy;
                    cnt++;
                    *raw = hypot(rx, ry) > *raw ? hypot(rx, ry) : *raw;
                } else {
                    const double e = hypot(rx - (tx + a * gx - b * gy),
                                           ry - (ty + b * gx + a * gy));
                    worst = e > worst ? e : worst;
                }
            }
    }
    return worst;
}

/* ---- blocks -------------------------------------------------------------- */

/* Stack of 40 in blocks of 16 overlapping by 8: s_k = 0, 8, 16, 24; the
 * unknowns of block k >= 1 start at u_k = s_k + 4 = 12, 20, 28, so the
 * seams lie between sections 11|12, 19|20, 27|28. */
static int is_seam(int64_t z)
{
    return z == 11 || z == 12 || z == 19 || z == 20 || z == 27 || z == 28;
}

static void seam_vs_interior(const cnx_align_solution *sol, double *seam,
                             double *inner, int median)
{
    *seam = *inner = 0;
    for (int64_t z = 0; z < sol->nz; z++) {
        const double r = median ? sol->sections[z].residual_median
                                : sol->sections[z].residual_max;
        double *w = is_seam(z) ? seam : inner;
        *w = r > *w ? r : *w;
    }
}

/* Solve stack s in one block and in blocks of 16 overlapping by 8. */
static void solve_both(const stack *s, double stiff, cnx_align_solution *one,
                       cnx_align_solution *blk)
{
    cnx_align_params p;
    params(&p, 64, 8, stiff);
    solve_ok(s, &p, one);
    params(&p, 16, 8, stiff);
    solve_ok(s, &p, blk);
    assert_int_equal(one->blocks, 1);
    assert_int_equal(blk->blocks, 4);
}

static void test_align_solve__blocks_agree_with_one_block(void **state)
{
    static const double stiffs[2] = {K_EXACT / 2, 0.05};
    (void)state;
    for (int i = 0; i < 2; i++) {
        stack s;
        cnx_align_solution one, blk;
        double diff, raw, seam, inner, e1, e2;
        stack_make(&s, 40, 0.01, 8.0, 0.0, 0.0, 9);
        solve_both(&s, stiffs[i], &one, &blk);
        diff = similarity_diff(&s, &one, &blk, &raw);
        e1 = recovery_error(&s, &one, 0, s.nz - 1);
        e2 = recovery_error(&s, &blk, 0, s.nz - 1);
        seam_vs_interior(&blk, &seam, &inner, 0);
        print_message("40 sections, stiffness %g, blocks 16/8 vs one: max "
                      "difference %.2e px (%.2e before removing one global "
                      "similarity); errors %.2e (one), %.2e (blocks) px; "
                      "residual max at seams %.2e, elsewhere %.2e px\n",
                      stiffs[i], diff, raw, e1, e2, seam, inner);
        if (i == 0) {
            assert_true(diff < 0.05);
            assert_true(e1 < 1e-3 && e2 < 1e-3);
        } else {
            /* the membrane's bias (stiffness_bias_is_bounded) is spread
             * over fewer sections per block: the solutions differ by a
             * fraction of that bias, not of the alignment */
            assert_true(diff < 0.5 * e1);
            assert_true(e2 < 1.25 * e1);
        }
        assert_true(seam <= inner + 1e-4);
        cnx_align_solution_free(&one);
        cnx_align_solution_free(&blk);
        stack_free(&s);
    }
    /* noisy: the seams are no worse than the rest */
    {
        stack s;
        cnx_align_solution one, blk;
        double diff, raw, seam, inner, seam_max, inner_max;
        stack_make(&s, 40, 0.01, 8.0, 1.0, 0.3, 10);
        solve_both(&s, 0.05, &one, &blk);
        diff = similarity_diff(&s, &one, &blk, &raw);
        seam_vs_interior(&blk, &seam, &inner, 1);
        seam_vs_interior(&blk, &seam_max, &inner_max, 0);
        print_message("noisy (0.3 px, smooth 1 px): max difference %.3f px "
                      "(%.3f raw); residual median at seams <= %.3f, "
                      "elsewhere <= %.3f; max %.3f vs %.3f px\n",
                      diff, raw, seam, inner, seam_max, inner_max);
        assert_true(seam <= inner);
        assert_true(seam_max <= inner_max);
        cnx_align_solution_free(&one);
        cnx_align_solution_free(&blk);
        stack_free(&s);
    }
}

/* ---- normalisation ------------------------------------------------------- */

static void test_align_solve__normalisation_to_the_medians(void **state)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    static const cnx_align_stats st[6] = {{100, 20, 10},  {140, 40, 10},
                                          {0, 0, 0},      {120, 10, 10},
                                          {90, 1e-7, 10}, {130, 30, 10}};
    (void)state;
    stack_make(&s, 6, 0.0, 2.0, 0.0, 0.0, 11);
    memcpy(s.st, st, sizeof(st));
    params(&p, 128, 32, K_EXACT);
    solve_ok(&s, &p, &sol);
    /* over the 5 with data: means 90 100 120 130 140 -> 120; sds 1e-7 10
     * 20 30 40 -> 20 */
    assert_true(sol.sections[0].gain == 1.0);
    assert_true(sol.sections[0].offset == 20.0);
    assert_true(sol.sections[1].gain == 0.5);
    assert_true(sol.sections[1].offset == 50.0);
    assert_true(sol.sections[2].gain == 1.0 && sol.sections[2].offset == 0.0);
    assert_int_equal(sol.sections[2].status, CNX_ALIGN_SECTION_EMPTY);
    assert_true(sol.sections[3].gain == 2.0);
    assert_true(sol.sections[3].offset == -120.0);
    assert_true(sol.sections[4].gain == 1.0); /* sd < 1e-6 */
    assert_true(sol.sections[4].offset == 30.0);
    cnx_align_solution_free(&sol);
    /* an even count: the lower middle */
    s.st[5].count = 0;
    solve_ok(&s, &p, &sol);
    /* means 90 100 120 140 -> 100; sds 1e-7 10 20 40 -> 10 */
    assert_true(sol.sections[1].gain == 0.25);
    assert_true(sol.sections[1].offset == 65.0);
    cnx_align_solution_free(&sol);
    p.normalize = 0;
    solve_ok(&s, &p, &sol);
    for (int64_t z = 0; z < s.nz; z++)
        assert_true(sol.sections[z].gain == 1.0 &&
                    sol.sections[z].offset == 0.0);
    cnx_align_solution_free(&sol);
    stack_free(&s);
}

/* ---- bad input ----------------------------------------------------------- */

static void expect_einval(const stack *s, const cnx_align_grid *g, int64_t nz,
                          const cnx_align_match *m, size_t nm,
                          const cnx_align_params *p, const char *message)
{
    cnx_align_solution sol;
    memset(&sol, 0x5a, sizeof(sol));
    assert_int_equal(cnx_align_solve(g, s->z0, nz, m, nm, s->st, p, &sol),
                     CNX_EINVAL);
    if (strstr(cnx_error_last()->message, message) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", cnx_error_last()->message,
                 message);
    assert_null(strchr(cnx_error_last()->message, '\n'));
    assert_null(sol.sections);
    assert_int_equal(sol.nz, 0);
    cnx_align_solution_free(&sol);
}

static void test_align_solve__bad_input_is_refused(void **state)
{
    stack s;
    cnx_align_params p, bad;
    cnx_align_grid g;
    cnx_align_match m;
    (void)state;
    stack_make(&s, 6, 0.0, 2.0, 0.0, 0.0, 12);
    params(&p, 128, 32, K_EXACT);
    bad = p;
    bad.stiffness = 0.0;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &bad, "align: stiffness: out of range");
    bad = p;
    bad.overlap = 100;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &bad, "align: overlap: out of range");
    expect_einval(&s, &s.grid, 0, s.m, s.nm, &p, "align: nz 0");
    g = s.grid;
    g.nx = 0;
    expect_einval(&s, &g, s.nz, s.m, s.nm, &p, "align: grid nx 0, ny 8");
    g = s.grid;
    g.step = 0.0;
    expect_einval(&s, &g, s.nz, s.m, s.nm, &p, "align: grid step");
    /* match 2 is 100 -> 102, match 3 102 -> 103 */
    m = s.m[3];
    s.m[3].zb = 106;
    s.m[3].za = 105;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "align: match 3 (z 105 -> 106): outside the stack 100..105");
    s.m[3].za = 99;
    s.m[3].zb = 100;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p, "match 3 (z 99 -> 100)");
    s.m[3].za = 100;
    s.m[3].zb = 103;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "match 3 (z 100 -> 103): zb - za must be 1 or 2");
    s.m[3].za = 102;
    s.m[3].zb = 101;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "match 3 (z 102 -> 101): zb - za must be 1 or 2");
    s.m[3].za = 100;
    s.m[3].zb = 102; /* as match 2 */
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "match 3 (z 100 -> 102): repeats match 2");
    s.m[3] = m;
    s.m[3].nodes = 63;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "match 3 (z 102 -> 103): nodes 63, the grid has 64");
    s.m[3] = m;
    s.m[3].dx[5] = NAN;
    expect_einval(&s, &s.grid, s.nz, s.m, s.nm, &p,
                  "match 3 (z 102 -> 103): node 5 is valid but not finite");
    s.m[3].flag[5] = CNX_ALIGN_NODE_NODATA; /* not valid: ignored */
    {
        cnx_align_solution sol;
        solve_ok(&s, &p, &sol);
        cnx_align_solution_free(&sol);
    }
    stack_free(&s);
}

static void test_align_solve__free_accepts_null_and_zeroes(void **state)
{
    cnx_align_solution sol;
    (void)state;
    cnx_align_solution_free(NULL);
    memset(&sol, 0, sizeof(sol));
    cnx_align_solution_free(&sol);
    assert_null(sol.sections);
}

/* The anchor: sections with no distortion at all whose matches carry the
 * same small bias pair after pair (what oblique neurites do to real
 * matches) drift along z without it; with it, the drift is held. */
static double drift_with(double anchor)
{
    stack s;
    cnx_align_params p;
    cnx_align_solution sol;
    double lo = 1e9, hi = -1e9;
    stack_make(&s, 64, 0.0, 0.0, 0.0, 0.0, 5);
    for (size_t k = 0; k < s.nm; k++)
        for (size_t n = 0; n < s.m[k].nodes; n++)
            if (s.m[k].flag[n] == CNX_ALIGN_NODE_OK)
                s.m[k].dx[n] += 0.05 * (double)(s.m[k].zb - s.m[k].za);
    params(&p, 128, 32, 0.05);
    p.anchor = anchor;
    solve_ok(&s, &p, &sol);
    for (int64_t z = 0; z < s.nz; z++) {
        double m = 0.0;
        for (size_t n = 0; n < sol.nodes; n++)
            m += sol.sections[z].dx[n] / (double)sol.nodes;
        lo = m < lo ? m : lo;
        hi = m > hi ? m : hi;
    }
    cnx_align_solution_free(&sol);
    stack_free(&s);
    return hi - lo;
}

static void test_align_solve__anchor_holds_a_biased_chain(void **state)
{
    const double free_drift = drift_with(0.0), held = drift_with(1e-2);
    (void)state;
    print_message("bias 0.05 px a pair over 64 sections: drift %.3f px "
                  "without the anchor, %.3f px with 1e-2\n",
                  free_drift, held);
    assert_true(free_drift > 0.05 * 60);
    assert_true(held < 0.6 * free_drift);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_align_solve__exact_rigid_stack_is_recovered),
        cmocka_unit_test(test_align_solve__stiffness_bias_is_bounded),
        cmocka_unit_test(test_align_solve__smooth_fields_are_recovered),
        cmocka_unit_test(test_align_solve__noisy_matches_bounded_error),
        cmocka_unit_test(test_align_solve__failed_section_is_bridged),
        cmocka_unit_test(test_align_solve__disconnected_runs_are_centred),
        cmocka_unit_test(test_align_solve__lone_and_edge_sections),
        cmocka_unit_test(test_align_solve__same_input_same_bytes),
        cmocka_unit_test(test_align_solve__blocks_agree_with_one_block),
        cmocka_unit_test(test_align_solve__normalisation_to_the_medians),
        cmocka_unit_test(test_align_solve__anchor_holds_a_biased_chain),
        cmocka_unit_test(test_align_solve__bad_input_is_refused),
        cmocka_unit_test(test_align_solve__free_accepts_null_and_zeroes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
