/*
 * test_align_match.c - the align kernel's parameters, node grid, section
 * statistics, matching (cnx_align_match_sections) and rendering
 * (cnx_align_render) against an independent truth.
 *
 * Truth: a continuous texture f (a sum of Gaussian blobs, deterministic)
 * in layer coordinates. Section a shows f; section b is recorded with a
 * known displacement field d: b's pixel at p holds f(p + d(p)) (so b's
 * point p shows what a shows at p + d, the convention of cnx/align.h),
 * both rounded to 1..255. Every valid node's (dx, dy) must be d at the
 * node within 0.2 px for clean data (integer, sub-pixel and bilinear
 * resampled translations, a smooth field), the coarse shift the mean
 * shift. Flags are checked against the geometry: a node whose patch or
 * window certainly leaves the section or touches a 0 pixel is NODATA, one
 * whose generously grown rectangles are clear is valid; flat regions are
 * FLAT, a planted local displacement is an OUTLIER, a high min_peak_ratio
 * makes WEAK nodes. Render is compared with a bilinear sampler written
 * here from the header's contract.
 */
#include <math.h>

#include "cnx/align.h"
#include "cnx/error.h"
#include "cnx_test.h"

/* Sections of W x H pixels at layer (X0, Y0). */
#define W 256
#define H 256
#define X0 1000
#define Y0 (-200)
#define TOL 0.2
#define TOL_INT 0.1 /* integer shifts (measured: under 0.03 px) */

/* ---- the texture --------------------------------------------------------- */

/* Blobs generated per CELL x CELL cell, BLOBS per cell, over a region that
 * covers the sections and any displacement used here. */
#define CELL 32
#define BLOBS 10
#define TCX0 (X0 - 4 * CELL)
#define TCY0 (Y0 - 4 * CELL)
#define TNX (W / CELL + 8)
#define TNY (H / CELL + 8)

typedef struct blob {
    double x, y, s2, amp, r2; /* centre, 2 sigma^2, amplitude, cut-off^2 */
} blob;

static blob *blobs; /* TNX * TNY * BLOBS, cell-major */

static double urand(uint64_t *seed, double lo, double hi)
{
    return lo + (hi - lo) * (double)(cnx_test_rand(seed) >> 11) * 0x1p-53;
}

static int setup(void **state)
{
    uint64_t seed = 20240611;
    (void)state;
    blobs = calloc((size_t)TNX * TNY * BLOBS, sizeof(*blobs));
    if (blobs == NULL)
        return -1;
    for (int64_t cj = 0; cj < TNY; cj++)
        for (int64_t ci = 0; ci < TNX; ci++)
            for (int k = 0; k < BLOBS; k++) {
                blob *b = &blobs[(cj * TNX + ci) * BLOBS + k];
                const double s = urand(&seed, 1.5, 4.0);
                b->x = TCX0 + CELL * (double)ci + urand(&seed, 0, CELL);
                b->y = TCY0 + CELL * (double)cj + urand(&seed, 0, CELL);
                b->s2 = 2.0 * s * s;
                b->amp = urand(&seed, 30, 70) *
                         (cnx_test_rand(&seed) & 1 ? 1.0 : -1.0);
                b->r2 = 16.0 * s * s;
            }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(blobs);
    return 0;
}

/* f at layer point (x, y): 128 plus the blobs (cut off at 4 sigma, which
 * is less than a cell, so the 3 x 3 cells around the point hold all). */
static double texture(double x, double y)
{
    const int64_t ci = (int64_t)floor((x - TCX0) / CELL);
    const int64_t cj = (int64_t)floor((y - TCY0) / CELL);
    double v = 128.0;
    assert_true(ci >= 1 && ci < TNX - 1 && cj >= 1 && cj < TNY - 1);
    for (int64_t j = cj - 1; j <= cj + 1; j++)
        for (int64_t i = ci - 1; i <= ci + 1; i++)
            for (int k = 0; k < BLOBS; k++) {
                const blob *b = &blobs[(j * TNX + i) * BLOBS + k];
                const double ex = x - b->x, ey = y - b->y;
                const double r2 = ex * ex + ey * ey;
                if (r2 < b->r2)
                    v += b->amp * exp(-r2 / b->s2);
            }
    return v;
}

static uint8_t quantise(double v)
{
    v = floor(v + 0.5);
    return (uint8_t)(v < 1 ? 1 : v > 255 ? 255 : v);
}

/* Displacement fields: b's point p shows f(p + d(p)). */
typedef struct field {
    double tx, ty;    /* constant part */
    double amp, wave; /* smooth part: amplitude, wavelength (0: none) */
    double bx0, by0, bx1, by1, bdx, bdy; /* bump: + (bdx, bdy) inside */
} field;

static void field_at(const field *d, double x, double y, double *dx, double *dy)
{
    const double pi = 3.14159265358979323846;
    *dx = d->tx;
    *dy = d->ty;
    if (d->wave > 0) {
        const double u = (x - X0) / d->wave, v = (y - Y0) / d->wave;
        *dx += d->amp * sin(2 * pi * u + 0.3) * cos(pi * v);
        *dy += d->amp * cos(2 * pi * u) * sin(2 * pi * v + 0.7);
    }
    if (x >= d->bx0 && x < d->bx1 && y >= d->by0 && y < d->by1) {
        *dx += d->bdx;
        *dy += d->bdy;
    }
}

/* A section W x H at (X0, Y0) recorded through d (NULL: identity). */
static uint8_t *section_make(const field *d)
{
    uint8_t *px = malloc((size_t)W * H);
    assert_non_null(px);
    for (int64_t j = 0; j < H; j++)
        for (int64_t i = 0; i < W; i++) {
            const double x = (double)(X0 + i), y = (double)(Y0 + j);
            double dx = 0, dy = 0;
            if (d != NULL)
                field_at(d, x, y, &dx, &dy);
            px[j * W + i] = quantise(texture(x + dx, y + dy));
        }
    return px;
}

static cnx_align_image image_of(const uint8_t *px)
{
    return (cnx_align_image){X0, Y0, W, H, px};
}

/* Set the section-local rectangle [x0, x1) x [y0, y1) of px to v. */
static void fill(uint8_t *px, int64_t x0, int64_t y0, int64_t x1, int64_t y1,
                 uint8_t v)
{
    for (int64_t j = y0; j < y1; j++)
        for (int64_t i = x0; i < x1; i++)
            px[j * W + i] = v;
}

/* ---- node geometry, from the header's description ------------------------ */

static void node_pos(const cnx_align_grid *g, size_t n, double *x, double *y)
{
    *x = g->x0 + g->step * (double)((int64_t)n % g->nx);
    *y = g->y0 + g->step * (double)((int64_t)n / g->nx);
}

/* 1 if the section-local pixel square [x0, x1] x [y0, y1] (inclusive)
 * lies inside the section and holds no 0. */
static int clear(const uint8_t *px, int64_t x0, int64_t y0, int64_t x1,
                 int64_t y1)
{
    if (x0 < 0 || y0 < 0 || x1 >= W || y1 >= H)
        return 0;
    for (int64_t j = y0; j <= y1; j++)
        for (int64_t i = x0; i <= x1; i++)
            if (px[j * W + i] == 0)
                return 0;
    return 1;
}

enum { MUST_OK, MUST_NODATA, EITHER };

/* Box [x0, x1) x [y0, y1) of the pixels != 0, less 2 px on each side (the
 * kernel's data box). */
static void data_box_of(const uint8_t *px, double box[4])
{
    int64_t lo[2] = {W, H}, hi[2] = {-1, -1};
    for (int64_t j = 0; j < H; j++)
        for (int64_t i = 0; i < W; i++)
            if (px[j * W + i] != 0) {
                lo[0] = i < lo[0] ? i : lo[0];
                hi[0] = i > hi[0] ? i : hi[0];
                lo[1] = j < lo[1] ? j : lo[1];
                hi[1] = j > hi[1] ? j : hi[1];
            }
    box[0] = (double)lo[0] + 2;
    box[1] = (double)lo[1] + 2;
    box[2] = (double)hi[0] - 1;
    box[3] = (double)hi[1] - 1;
}

/*
 * What the flags must say at a node g (layer) from the geometry alone:
 * b's patch is P x P around g, clipped per axis to where both sections
 * have data (b's data box, and a's moved by -c and shrunk by r); it must
 * keep at least P / 2 on each axis, and a's window is the clipped patch
 * moved by c and grown by r. Long enough and clear in both with a 2 px
 * slack: the node has its data (MUST_OK, given texture); too short, or
 * touching a 0 even shrunk by the slack: MUST_NODATA; else no claim.
 */
static int expect(const uint8_t *a, const uint8_t *b, double gx, double gy,
                  const double c[2], int64_t P, int64_t r, double centre[2])
{
    const double h = (double)P / 2.0, s = 2.0;
    const double l[2] = {gx - X0, gy - Y0};
    const double cc[2] = {floor(c[0] + 0.5), floor(c[1] + 0.5)};
    double ba[4], bb[4], x0[2], x1[2];
    int longer = 1, shorter = 0;
    data_box_of(a, ba);
    data_box_of(b, bb);
    for (int k = 0; k < 2; k++) {
        const double lo = fmax(bb[k], ba[k] - cc[k] + (double)r);
        const double hi = fmin(bb[k + 2], ba[k + 2] - cc[k] - (double)r);
        x0[k] = fmax(l[k] - h, lo);
        x1[k] = fmin(l[k] + h, hi);
        longer &= x1[k] - x0[k] >= h + s;
        shorter |= x1[k] - x0[k] < h - s;
        /* what the node measures: the middle of its clipped patch */
        centre[k] =
            (x1[k] - x0[k] >= (double)P ? l[k] : (x0[k] + x1[k]) / 2.0) +
            (k == 0 ? X0 : Y0);
    }
    if (shorter)
        return MUST_NODATA;
    if (longer &&
        clear(b, (int64_t)floor(x0[0] - s), (int64_t)floor(x0[1] - s),
              (int64_t)ceil(x1[0] + s), (int64_t)ceil(x1[1] + s)) &&
        clear(a, (int64_t)floor(x0[0] + cc[0] - r - s),
              (int64_t)floor(x0[1] + cc[1] - r - s),
              (int64_t)ceil(x1[0] + cc[0] + r + s),
              (int64_t)ceil(x1[1] + cc[1] + r + s)))
        return MUST_OK;
    if (!clear(b, (int64_t)ceil(x0[0] + s), (int64_t)ceil(x0[1] + s),
               (int64_t)floor(x1[0] - s), (int64_t)floor(x1[1] - s)) ||
        !clear(a, (int64_t)ceil(x0[0] + cc[0] - r + s),
               (int64_t)ceil(x0[1] + cc[1] - r + s),
               (int64_t)floor(x1[0] + cc[0] + r - s),
               (int64_t)floor(x1[1] + cc[1] + r - s)))
        return MUST_NODATA;
    return EITHER;
}

/* Match b against a and check every node against d: valid nodes within
 * tol of d(g), flags as the geometry demands. @return the valid nodes. */
static size_t check_match(const uint8_t *a, const uint8_t *b, const field *d,
                          const cnx_align_params *p, double tol,
                          cnx_align_match *m)
{
    const cnx_align_image ia = image_of(a), ib = image_of(b);
    const cnx_align_grid g = cnx_align_grid_of(X0, Y0, W, H, p);
    size_t valid = 0, must_ok = 0;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, p, m), 0);
    assert_int_equal(m->nodes, (size_t)(g.nx * g.ny));
    assert_true(m->coarse_peak > 0.0);
    for (size_t n = 0; n < m->nodes; n++) {
        double gx, gy, tx, ty, centre[2];
        int e;
        node_pos(&g, n, &gx, &gy);
        e = expect(a, b, gx, gy, m->coarse, p->patch, p->patch_search, centre);
        field_at(d, centre[0], centre[1], &tx, &ty);
        if (e == MUST_NODATA) {
            if (m->flag[n] != CNX_ALIGN_NODE_NODATA)
                fail_msg("node %zu at (%g, %g): flag %d, want NODATA", n, gx,
                         gy, m->flag[n]);
        }
        if (e == MUST_OK) {
            must_ok++;
            if (m->flag[n] != CNX_ALIGN_NODE_OK)
                fail_msg("node %zu at (%g, %g): flag %d (peak %g), want OK", n,
                         gx, gy, m->flag[n], m->peak[n]);
        }
        if (m->flag[n] == CNX_ALIGN_NODE_OK) {
            valid++;
            assert_true(m->peak[n] >= p->min_peak_ratio);
            if (fabs(m->dx[n] - tx) > tol || fabs(m->dy[n] - ty) > tol)
                fail_msg("node %zu at (%g, %g): (%.4f, %.4f), truth "
                         "(%.4f, %.4f)",
                         n, gx, gy, m->dx[n], m->dy[n], tx, ty);
        } else {
            assert_true(m->dx[n] == 0.0 && m->dy[n] == 0.0);
        }
    }
    assert_true(must_ok > 0);
    assert_int_equal(m->valid, valid);
    return valid;
}

/* ---- parameters, grid, statistics ---------------------------------------- */

static void test_align_params__defaults_pass_the_check(void **state)
{
    cnx_align_params p;
    (void)state;
    cnx_align_params_default(&p);
    assert_int_equal(p.stride, 32);
    assert_int_equal(p.patch, 64);
    assert_int_equal(p.search, 64);
    assert_int_equal(p.patch_search, 8);
    assert_int_equal(p.highpass, 8);
    assert_true(p.min_peak_ratio == 2.5 && p.max_deviation == 2.0);
    assert_true(p.min_valid == 0.1 && p.stiffness == 0.05);
    assert_int_equal(p.block, 128);
    assert_int_equal(p.overlap, 32);
    assert_int_equal(p.normalize, 1);
    assert_int_equal(cnx_align_params_check(&p), 0);
}

/* One field set to a value; the check's verdict and the field it names. */
typedef struct param_case {
    const char *field;
    int64_t iv;
    double dv;
    int ok;
} param_case;

static void set_field(cnx_align_params *p, const param_case *c)
{
    if (strcmp(c->field, "stride") == 0)
        p->stride = c->iv;
    else if (strcmp(c->field, "patch") == 0)
        p->patch = c->iv;
    else if (strcmp(c->field, "search") == 0)
        p->search = c->iv;
    else if (strcmp(c->field, "patch_search") == 0)
        p->patch_search = c->iv;
    else if (strcmp(c->field, "highpass") == 0)
        p->highpass = c->iv;
    else if (strcmp(c->field, "min_peak_ratio") == 0)
        p->min_peak_ratio = c->dv;
    else if (strcmp(c->field, "max_deviation") == 0)
        p->max_deviation = c->dv;
    else if (strcmp(c->field, "min_valid") == 0)
        p->min_valid = c->dv;
    else if (strcmp(c->field, "stiffness") == 0)
        p->stiffness = c->dv;
    else if (strcmp(c->field, "block") == 0)
        p->block = c->iv;
    else if (strcmp(c->field, "overlap") == 0)
        p->overlap = c->iv;
    else if (strcmp(c->field, "normalize") == 0)
        p->normalize = (int)c->iv;
    else
        fail_msg("unknown field %s", c->field);
}

static void test_align_params__each_field_range_checked_and_named(void **state)
{
    const param_case cases[] = {
        {"stride", 8, 0, 1},
        {"stride", 4096, 0, 1},
        {"stride", 7, 0, 0},
        {"stride", 4097, 0, 0},
        {"patch", 16, 0, 1},
        {"patch", 4096, 0, 1},
        {"patch", 15, 0, 0},
        {"patch", 4097, 0, 0},
        {"search", 0, 0, 1},
        {"search", 4096, 0, 1},
        {"search", -1, 0, 0},
        {"search", 4097, 0, 0},
        {"patch_search", 1, 0, 1},
        {"patch_search", 256, 0, 1},
        {"patch_search", 0, 0, 0},
        {"patch_search", 257, 0, 0},
        {"highpass", 0, 0, 1},
        {"highpass", 256, 0, 1},
        {"highpass", -1, 0, 0},
        {"highpass", 257, 0, 0},
        {"min_peak_ratio", 0, 1.0, 1},
        {"min_peak_ratio", 0, 1e6, 1},
        {"min_peak_ratio", 0, 0.999, 0},
        {"min_peak_ratio", 0, 1.000001e6, 0},
        {"min_peak_ratio", 0, NAN, 0},
        {"max_deviation", 0, 1e-9, 1},
        {"max_deviation", 0, 1e6, 1},
        {"max_deviation", 0, 0.0, 0},
        {"max_deviation", 0, -1.0, 0},
        {"max_deviation", 0, NAN, 0},
        {"max_deviation", 0, INFINITY, 0},
        {"min_valid", 0, 0.0, 1},
        {"min_valid", 0, 1.0, 1},
        {"min_valid", 0, -0.01, 0},
        {"min_valid", 0, 1.01, 0},
        {"min_valid", 0, NAN, 0},
        {"stiffness", 0, 1e-9, 1},
        {"stiffness", 0, 1e6, 1},
        {"stiffness", 0, 0.0, 0},
        {"stiffness", 0, 2e6, 0},
        {"stiffness", 0, NAN, 0},
        {"block", 2, 0, 0}, /* overlap 32 > 2 / 2: names overlap */
        {"block", 1, 0, 0},
        {"block", 1000001, 0, 0},
        {"overlap", 1, 0, 1},
        {"overlap", 64, 0, 1},
        {"overlap", 0, 0, 0},
        {"overlap", 65, 0, 0},
        {"normalize", 0, 0, 1},
        {"normalize", 1, 0, 1},
        {"normalize", 2, 0, 0},
        {"normalize", -1, 0, 0},
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        const param_case *c = &cases[k];
        /* block 2 with the default overlap is refused for the overlap */
        const char *named =
            strcmp(c->field, "block") == 0 && c->iv == 2 ? "overlap" : c->field;
        cnx_align_params p;
        char want[64];
        int rc;
        cnx_align_params_default(&p);
        set_field(&p, c);
        rc = cnx_align_params_check(&p);
        if (c->ok) {
            if (rc != 0)
                fail_msg("%s = %lld / %g refused: %s", c->field,
                         (long long)c->iv, c->dv, cnx_error_last()->message);
            continue;
        }
        if (rc != CNX_EINVAL)
            fail_msg("%s = %lld / %g: rc %d", c->field, (long long)c->iv, c->dv,
                     rc);
        snprintf(want, sizeof(want), "align: %s: out of range", named);
        if (strstr(cnx_error_last()->message, want) == NULL)
            fail_msg("%s: message '%s' does not name it", c->field,
                     cnx_error_last()->message);
    }
}

static void test_align_grid__nodes_centred_in_the_section(void **state)
{
    /* w, stride -> nx and the first node's offset from x0 */
    static const struct {
        int64_t w, stride, nx;
        double first;
    } cases[] = {
        {1, 32, 1, 0.0},      {2, 32, 1, 0.5},   {32, 32, 1, 15.5},
        {33, 32, 2, 0.0},     {65, 32, 3, 0.0},  {64, 32, 2, 15.5},
        {256, 32, 8, 15.5},   {100, 8, 13, 1.5}, {4096, 4096, 1, 2047.5},
        {4097, 4096, 2, 0.0}, {256, 48, 6, 7.5},
    };
    cnx_align_params p;
    (void)state;
    cnx_align_params_default(&p);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cnx_align_grid g;
        double last, lo, hi;
        p.stride = cases[k].stride;
        g = cnx_align_grid_of(-7, 13, cases[k].w, 5, &p);
        assert_int_equal(g.nx, cases[k].nx);
        assert_true(g.x0 == -7.0 + cases[k].first);
        assert_true(g.step == (double)cases[k].stride);
        /* equally far from both edges (pixel centres -7 .. -7 + w - 1) */
        last = g.x0 + g.step * (double)(g.nx - 1);
        lo = g.x0 - (-7.0);
        hi = (-7.0 + (double)(cases[k].w - 1)) - last;
        assert_true(lo == hi && lo >= 0.0 && lo < g.step);
        /* the other axis, with h = 5 */
        assert_int_equal(g.ny, 1);
        assert_true(g.y0 == 15.0);
    }
}

static void test_align_stats__match_a_direct_computation(void **state)
{
    uint64_t seed = 7;
    uint8_t *px = malloc(300 * 170);
    cnx_align_image im = {5, 6, 300, 170, px};
    cnx_align_stats st;
    double sum = 0, sq = 0, mean;
    int64_t n = 0;
    (void)state;
    assert_non_null(px);
    for (size_t i = 0; i < 300 * 170; i++) {
        const uint64_t r = cnx_test_rand(&seed);
        px[i] = (r & 3) == 0 ? 0 : (uint8_t)(r >> 32);
    }
    for (size_t i = 0; i < 300 * 170; i++)
        if (px[i] != 0) {
            sum += px[i];
            n++;
        }
    mean = sum / (double)n;
    for (size_t i = 0; i < 300 * 170; i++)
        if (px[i] != 0)
            sq += (px[i] - mean) * (px[i] - mean);
    st = cnx_align_stats_of(&im);
    assert_int_equal(st.count, n);
    assert_true(fabs(st.mean - mean) < 1e-9);
    assert_true(fabs(st.sd - sqrt(sq / (double)n)) < 1e-9);

    /* no data: zeros; a constant: sd 0 */
    memset(px, 0, 300 * 170);
    st = cnx_align_stats_of(&im);
    assert_true(st.count == 0 && st.mean == 0.0 && st.sd == 0.0);
    px[17] = 200;
    px[18] = 200;
    st = cnx_align_stats_of(&im);
    assert_true(st.count == 2 && st.mean == 200.0 && st.sd == 0.0);
    free(px);
}

/* ---- matching --------------------------------------------------------------
 */

static void test_align_match__bad_input_is_refused(void **state)
{
    uint8_t *a = section_make(NULL);
    cnx_align_image ia = image_of(a), ib = image_of(a);
    cnx_align_params p;
    cnx_align_match m;
    (void)state;
    cnx_align_params_default(&p);
    p.stride = 4;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "stride"));
    cnx_align_match_free(&m);
    cnx_align_params_default(&p);
    ib.x0 += 1;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    cnx_align_match_free(&m);
    ib = image_of(a);
    ib.w -= 1;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    cnx_align_match_free(&m);
    ib = image_of(a);
    ib.pixels = NULL;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    cnx_align_match_free(&m);
    ia.w = ib.w = 0;
    ib.pixels = a;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    cnx_align_match_free(&m);
    ia.w = ib.w = CNX_ALIGN_MAX_SIDE + 1;
    ia.h = ib.h = 1;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), CNX_EINVAL);
    assert_null(m.dx);
    cnx_align_match_free(&m);
    free(a);
}

/* b's pixel p holds a's pixel p + (5, -3) where both exist: the fixture
 * follows the header's convention, and the nodes say (+5, -3). Also with
 * the high-pass off. */
static void
test_align_match__integer_shift_b_at_p_shows_a_at_p_plus_d(void **state)
{
    const field d = {5, -3, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    (void)state;
    for (int64_t j = 3; j < H; j++)
        for (int64_t i = 0; i + 5 < W; i++)
            assert_int_equal(b[j * W + i], a[(j - 3) * W + i + 5]);
    for (int hp = 0; hp <= 8; hp += 8) {
        cnx_align_params p;
        cnx_align_match m;
        size_t valid;
        cnx_align_params_default(&p);
        p.highpass = hp;
        valid = check_match(a, b, &d, &p, TOL_INT, &m);
        assert_true(valid >= 30); /* 6 x 6 interior nodes of 8 x 8 */
        assert_true(fabs(m.coarse[0] - 5) < TOL && fabs(m.coarse[1] + 3) < TOL);
        assert_true(m.za == 0 && m.zb == 0);
        cnx_align_match_free(&m);
    }
    free(a);
    free(b);
}

static void test_align_match__subpixel_shifts_within_a_fifth_px(void **state)
{
    static const double shifts[][2] = {
        {2.4, -1.7}, {-6.5, 0.25}, {0.8, 7.1}, {-3.3, -4.6}, {12.5, -9.75},
    };
    (void)state;
    for (size_t k = 0; k < sizeof(shifts) / sizeof(shifts[0]); k++) {
        const field d = {shifts[k][0], shifts[k][1], 0, 0, 0, 0, 0, 0, 0, 0};
        uint8_t *a = section_make(NULL), *b = section_make(&d);
        cnx_align_params p;
        cnx_align_match m;
        cnx_align_params_default(&p);
        check_match(a, b, &d, &p, TOL, &m);
        if (fabs(m.coarse[0] - d.tx) > TOL || fabs(m.coarse[1] - d.ty) > TOL)
            fail_msg("coarse (%g, %g), truth (%g, %g)", m.coarse[0],
                     m.coarse[1], d.tx, d.ty);
        cnx_align_match_free(&m);
        free(a);
        free(b);
    }
}

/* b resampled bilinearly from a's pixels (not from the texture): the
 * discrete image moved by a sub-pixel shift. */
static void test_align_match__bilinear_resampled_shift(void **state)
{
    const field d = {3.5, -2.25, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = malloc((size_t)W * H);
    cnx_align_params p;
    cnx_align_match m;
    (void)state;
    assert_non_null(b);
    for (int64_t j = 0; j < H; j++)
        for (int64_t i = 0; i < W; i++) {
            const double sx = (double)i + d.tx, sy = (double)j + d.ty;
            const int64_t ix = (int64_t)floor(sx), iy = (int64_t)floor(sy);
            const double fx = sx - (double)ix, fy = sy - (double)iy;
            if (ix < 0 || iy < 0 || ix + 1 >= W || iy + 1 >= H) {
                b[j * W + i] = 0; /* no data beyond a */
                continue;
            }
            b[j * W + i] = quantise((1 - fy) * ((1 - fx) * a[iy * W + ix] +
                                                fx * a[iy * W + ix + 1]) +
                                    fy * ((1 - fx) * a[(iy + 1) * W + ix] +
                                          fx * a[(iy + 1) * W + ix + 1]));
        }
    cnx_align_params_default(&p);
    check_match(a, b, &d, &p, TOL, &m);
    assert_true(fabs(m.coarse[0] - d.tx) < TOL &&
                fabs(m.coarse[1] - d.ty) < TOL);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_match__smooth_field_node_by_node(void **state)
{
    const field d = {-4.0, 2.5, 1.5, 512.0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    cnx_align_params p;
    cnx_align_match m;
    size_t valid;
    (void)state;
    cnx_align_params_default(&p);
    valid = check_match(a, b, &d, &p, TOL, &m);
    assert_true(valid >= 30);
    /* the coarse shift lies within the field's range */
    assert_true(m.coarse[0] > -5.6 && m.coarse[0] < -2.4);
    assert_true(m.coarse[1] > 0.9 && m.coarse[1] < 4.1);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_match__nodata_border_and_holes(void **state)
{
    const field d = {3, 4, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    cnx_align_params p;
    cnx_align_match m;
    cnx_align_grid g;
    size_t nodata = 0, ok = 0;
    (void)state;
    cnx_align_params_default(&p);
    g = cnx_align_grid_of(X0, Y0, W, H, &p);
    fill(b, 0, 0, 40, H, 0);        /* b: a black border on the left */
    fill(b, 120, 140, 150, 170, 0); /* b: a hole */
    fill(a, 180, 40, 200, 60, 0);   /* a: a hole (the windows) */
    check_match(a, b, &d, &p, TOL_INT, &m);
    for (size_t n = 0; n < m.nodes; n++) {
        double gx, gy;
        node_pos(&g, n, &gx, &gy);
        nodata += m.flag[n] == CNX_ALIGN_NODE_NODATA;
        ok += m.flag[n] == CNX_ALIGN_NODE_OK;
        /* the node at local (143.5, 143.5) has the hole in its patch,
         * the one at (175.5, 47.5) in its window */
        if ((gx - X0 == 143.5 && gy - Y0 == 143.5) ||
            (gx - X0 == 175.5 && gy - Y0 == 47.5))
            assert_int_equal(m.flag[n], CNX_ALIGN_NODE_NODATA);
        if (m.flag[n] == CNX_ALIGN_NODE_NODATA)
            assert_true(m.peak[n] == 0.0);
    }
    /* nodes near the border keep the part of their patch with data (at
     * least half): only the outer ring and the holes' nodes are lost */
    print_message("nodata %zu, ok %zu\n", nodata, ok);
    assert_true(nodata > 20 && ok > 30);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_match__flat_region_is_flat(void **state)
{
    const field d = {2, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    cnx_align_params p;
    cnx_align_match m;
    const cnx_align_image ia = image_of(a), ib = image_of(b);
    cnx_align_grid g;
    size_t flat = 0;
    (void)state;
    cnx_align_params_default(&p);
    g = cnx_align_grid_of(X0, Y0, W, H, &p);
    /* a constant square (local 60 .. 196) in a, where b shows it (moved
     * by -d): nodes whose window, high-pass radius included, lies inside
     * it see no texture */
    fill(a, 60, 60, 196, 196, 90);
    fill(b, 60 - 2, 60 + 1, 196 - 2, 196 + 1, 90);
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
    for (size_t n = 0; n < m.nodes; n++) {
        double gx, gy, lx, ly;
        node_pos(&g, n, &gx, &gy);
        lx = gx - X0;
        ly = gy - Y0;
        /* window: patch/2 + patch_search + |shift| + high-pass radius */
        if (lx - 32 - 8 - 3 - 8 > 60 && lx + 32 + 8 + 3 + 8 < 196 &&
            ly - 32 - 8 - 3 - 8 > 60 && ly + 32 + 8 + 3 + 8 < 196) {
            if (m.flag[n] != CNX_ALIGN_NODE_FLAT)
                fail_msg("node at local (%g, %g): flag %d, want FLAT", lx, ly,
                         m.flag[n]);
            assert_true(m.peak[n] == 0.0 && m.dx[n] == 0.0);
            flat++;
        }
        /* valid nodes (the textured frame) still agree with d */
        if (m.flag[n] == CNX_ALIGN_NODE_OK &&
            (fabs(m.dx[n] - 2) > TOL_INT || fabs(m.dy[n] + 1) > TOL_INT))
            fail_msg("node at local (%g, %g): (%g, %g), truth (2, -1)", lx, ly,
                     m.dx[n], m.dy[n]);
    }
    assert_true(flat >= 1);
    assert_true(m.valid >= 10);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_match__planted_local_shift_is_an_outlier(void **state)
{
    cnx_align_params p;
    cnx_align_grid g;
    field d = {2, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a, *b;
    cnx_align_match m;
    size_t target = 0, valid = 0;
    double tx, ty;
    (void)state;
    /* stride 48, patch 32: a node's patch lies in the 48 px square around
     * it and no neighbour's patch reaches into that square */
    cnx_align_params_default(&p);
    p.stride = 48;
    p.patch = 32;
    g = cnx_align_grid_of(X0, Y0, W, H, &p);
    assert_true(g.nx == 6 && g.x0 == X0 + 7.5);
    /* node (2, 2) at local (103.5, 103.5): + (5, 0) in [80, 128)^2 */
    d.bx0 = X0 + 80;
    d.bx1 = X0 + 128;
    d.by0 = Y0 + 80;
    d.by1 = Y0 + 128;
    d.bdx = 5;
    d.bdy = 0;
    a = section_make(NULL);
    b = section_make(&d);
    {
        const cnx_align_image ia = image_of(a), ib = image_of(b);
        assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
    }
    target = (size_t)(2 * g.nx + 2);
    assert_int_equal(m.flag[target], CNX_ALIGN_NODE_OUTLIER);
    assert_true(m.dx[target] == 0.0 && m.dy[target] == 0.0);
    assert_true(m.peak[target] >= p.min_peak_ratio); /* it was registered */
    for (size_t n = 0; n < m.nodes; n++) {
        double gx, gy;
        node_pos(&g, n, &gx, &gy);
        field_at(&d, gx, gy, &tx, &ty);
        if (m.flag[n] == CNX_ALIGN_NODE_OK) {
            valid++;
            assert_true(fabs(m.dx[n] - 2) < TOL_INT &&
                        fabs(m.dy[n] - 1) < TOL_INT);
        }
        /* every interior node other than the target stays valid */
        if (n != target && n % (size_t)g.nx > 0 &&
            n % (size_t)g.nx < (size_t)g.nx - 1 && n / (size_t)g.nx > 0 &&
            n / (size_t)g.nx < (size_t)g.ny - 1)
            assert_int_equal(m.flag[n], CNX_ALIGN_NODE_OK);
    }
    assert_int_equal(m.valid, valid);
    assert_true(valid >= 15);
    cnx_align_match_free(&m);

    /* with a tolerance larger than the bump, the node is kept and right */
    p.max_deviation = 6;
    {
        const cnx_align_image ia = image_of(a), ib = image_of(b);
        assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
    }
    assert_int_equal(m.flag[target], CNX_ALIGN_NODE_OK);
    assert_true(fabs(m.dx[target] - 7) < TOL && fabs(m.dy[target] - 1) < TOL);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_match__high_min_peak_ratio_makes_weak_nodes(void **state)
{
    const field d = {1.5, 2.5, 0, 0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    const cnx_align_image ia = image_of(a), ib = image_of(b);
    cnx_align_params p;
    cnx_align_match m;
    double lo = INFINITY, hi = 0;
    size_t weak = 0;
    (void)state;
    cnx_align_params_default(&p);
    p.min_peak_ratio = 1e6;
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
    assert_int_equal(m.valid, 0);
    for (size_t n = 0; n < m.nodes; n++) {
        assert_true(m.flag[n] == CNX_ALIGN_NODE_NODATA ||
                    m.flag[n] == CNX_ALIGN_NODE_WEAK);
        if (m.flag[n] == CNX_ALIGN_NODE_WEAK) {
            weak++;
            assert_true(m.peak[n] > 0.0 && m.peak[n] < 1e6);
            assert_true(m.dx[n] == 0.0 && m.dy[n] == 0.0);
            lo = m.peak[n] < lo ? m.peak[n] : lo;
            hi = m.peak[n] > hi ? m.peak[n] : hi;
        }
    }
    assert_true(weak >= 30);
    cnx_align_match_free(&m);

    /* a threshold between the lowest and highest peak splits them */
    if (lo < hi) {
        size_t ok = 0, w2 = 0;
        p.min_peak_ratio = (lo + hi) / 2;
        assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
        for (size_t n = 0; n < m.nodes; n++) {
            if (m.flag[n] == CNX_ALIGN_NODE_WEAK) {
                assert_true(m.peak[n] < p.min_peak_ratio);
                w2++;
            } else if (m.flag[n] != CNX_ALIGN_NODE_NODATA) {
                assert_true(m.peak[n] >= p.min_peak_ratio);
                ok++;
            }
        }
        assert_true(w2 > 0 && ok > 0);
        cnx_align_match_free(&m);
    }
    free(a);
    free(b);
}

static void test_align_match__blank_sections_give_no_valid_node(void **state)
{
    uint8_t *t = section_make(NULL), *z = calloc((size_t)W * H, 1),
            *c = malloc((size_t)W * H);
    const uint8_t *pairs[][2] = {{z, z}, {t, z}, {z, t}, {c, c}, {c, t}};
    cnx_align_params p;
    (void)state;
    assert_non_null(z);
    assert_non_null(c);
    memset(c, 77, (size_t)W * H);
    cnx_align_params_default(&p);
    for (size_t k = 0; k < sizeof(pairs) / sizeof(pairs[0]); k++) {
        const cnx_align_image ia = image_of(pairs[k][0]),
                              ib = image_of(pairs[k][1]);
        cnx_align_match m;
        assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
        assert_int_equal(m.nodes, 64);
        assert_int_equal(m.valid, 0);
        for (size_t n = 0; n < m.nodes; n++) {
            assert_true(m.flag[n] != CNX_ALIGN_NODE_OK);
            assert_true(m.dx[n] == 0.0 && m.dy[n] == 0.0);
        }
        if (pairs[k][0] == z || pairs[k][1] == z) {
            assert_true(m.coarse_peak == 0.0);
            assert_true(m.coarse[0] == 0.0 && m.coarse[1] == 0.0);
            for (size_t n = 0; n < m.nodes; n++)
                assert_int_equal(m.flag[n], CNX_ALIGN_NODE_NODATA);
        }
        cnx_align_match_free(&m);
    }
    free(t);
    free(z);
    free(c);
}

static void test_align_match__same_input_same_bytes(void **state)
{
    const field d = {-4.0, 2.5, 1.5, 512.0, 0, 0, 0, 0, 0, 0};
    uint8_t *a = section_make(NULL), *b = section_make(&d);
    const cnx_align_image ia = image_of(a), ib = image_of(b);
    cnx_align_params p;
    cnx_align_match m1, m2;
    (void)state;
    cnx_align_params_default(&p);
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m1), 0);
    assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m2), 0);
    assert_int_equal(m1.nodes, m2.nodes);
    assert_int_equal(m1.valid, m2.valid);
    assert_memory_equal(m1.coarse, m2.coarse, sizeof(m1.coarse));
    assert_memory_equal(&m1.coarse_peak, &m2.coarse_peak, sizeof(double));
    assert_memory_equal(m1.dx, m2.dx, m1.nodes * sizeof(double));
    assert_memory_equal(m1.dy, m2.dy, m1.nodes * sizeof(double));
    assert_memory_equal(m1.peak, m2.peak, m1.nodes * sizeof(double));
    assert_memory_equal(m1.flag, m2.flag, m1.nodes);
    cnx_align_match_free(&m1);
    cnx_align_match_free(&m2);
    free(a);
    free(b);
}

static void test_align_match__free_accepts_null_and_zeroes(void **state)
{
    cnx_align_match m;
    (void)state;
    cnx_align_match_free(NULL);
    memset(&m, 0, sizeof(m));
    cnx_align_match_free(&m);
    assert_null(m.dx);
}

/* ---- render ----------------------------------------------------------------
 */

/* The reference sampler, from the header: bilinear in the four pixels
 * around local (sx, sy), pixels 0 left out and the weights of the others
 * renormalised; -1 when outside [-0.5, w - 0.5) or no data. */
static double ref_sample(const uint8_t *px, int64_t w, int64_t h, double sx,
                         double sy)
{
    const double fx0 = floor(sx), fy0 = floor(sy);
    const double fx = sx - fx0, fy = sy - fy0;
    double ws = 0, vs = 0;
    if (sx < -0.5 || sy < -0.5 || sx >= w - 0.5 || sy >= h - 0.5)
        return -1;
    for (int v = 0; v < 2; v++)
        for (int u = 0; u < 2; u++) {
            int64_t x = (int64_t)fx0 + u, y = (int64_t)fy0 + v;
            const double wt = (u ? fx : 1 - fx) * (v ? fy : 1 - fy);
            x = x < 0 ? 0 : x > w - 1 ? w - 1 : x;
            y = y < 0 ? 0 : y > h - 1 ? h - 1 : y;
            if (wt > 0 && px[y * w + x] != 0) {
                ws += wt;
                vs += wt * px[y * w + x];
            }
        }
    return ws > 0 ? vs / ws : -1;
}

static uint8_t ref_value(double v, double gain, double offset)
{
    if (v < 0)
        return 0;
    v = gain * v + offset;
    v = v < 0 ? -floor(-v + 0.5) : floor(v + 0.5);
    return (uint8_t)(v < 1 ? 1 : v > 255 ? 255 : v);
}

/* A small source with some no-data pixels, at (x0, y0). */
#define RW 70
#define RH 50
static uint8_t *render_source(int holes)
{
    uint64_t seed = 99;
    uint8_t *px = malloc(RW * RH);
    assert_non_null(px);
    for (size_t i = 0; i < RW * RH; i++) {
        const uint64_t r = cnx_test_rand(&seed);
        px[i] = holes && (r & 15) == 0 ? 0 : (uint8_t)(1 + (r >> 40) % 255);
    }
    return px;
}

/* A grid over the source with every node displaced by (cx, cy). */
static void const_field(double cx, double cy, cnx_align_grid *g, double *dx,
                        double *dy)
{
    *g = (cnx_align_grid){-3.5, 12.5, 16.0, 5, 4};
    for (int i = 0; i < 20; i++) {
        dx[i] = cx;
        dy[i] = cy;
    }
}

static void test_align_render__identity_reproduces_the_source(void **state)
{
    uint8_t *src = render_source(1), *out = malloc(RW * RH);
    const cnx_align_image im = {-10, 7, RW, RH, src};
    const int64_t box[4] = {-10, 7, RW, RH};
    cnx_align_grid g;
    double dx[20], dy[20];
    (void)state;
    assert_non_null(out);
    const_field(0, 0, &g, dx, dy);
    assert_int_equal(cnx_align_render(&im, &g, dx, dy, 1, 0, box, out), 0);
    assert_memory_equal(out, src, RW * RH);
    free(src);
    free(out);
}

static void
test_align_render__integer_shift_is_exact_and_zero_outside(void **state)
{
    uint8_t *src = render_source(1), *out = malloc(RW * RH);
    const cnx_align_image im = {-10, 7, RW, RH, src};
    const int64_t box[4] = {-10, 7, RW, RH};
    cnx_align_grid g;
    double dx[20], dy[20];
    (void)state;
    assert_non_null(out);
    const_field(3, -2, &g, dx, dy);
    assert_int_equal(cnx_align_render(&im, &g, dx, dy, 1, 0, box, out), 0);
    for (int64_t j = 0; j < RH; j++)
        for (int64_t i = 0; i < RW; i++) {
            const int64_t si = i + 3, sj = j - 2;
            const uint8_t want = si < RW && sj >= 0 ? src[sj * RW + si] : 0;
            assert_int_equal(out[j * RW + i], want);
        }
    free(src);
    free(out);
}

static void test_align_render__half_pixels_blend_bilinearly(void **state)
{
    static const double shifts[][2] = {
        {0.5, 0}, {0, -0.5}, {-1.5, 2.5}, {0.25, 0.75}, {-0.5, -0.5}};
    uint8_t *src = render_source(1), *out = malloc(RW * RH);
    const cnx_align_image im = {-10, 7, RW, RH, src};
    const int64_t box[4] = {-10, 7, RW, RH};
    (void)state;
    assert_non_null(out);
    for (size_t k = 0; k < sizeof(shifts) / sizeof(shifts[0]); k++) {
        cnx_align_grid g;
        double dx[20], dy[20];
        const_field(shifts[k][0], shifts[k][1], &g, dx, dy);
        assert_int_equal(cnx_align_render(&im, &g, dx, dy, 1, 0, box, out), 0);
        for (int64_t j = 0; j < RH; j++)
            for (int64_t i = 0; i < RW; i++) {
                const uint8_t want =
                    ref_value(ref_sample(src, RW, RH, (double)i + shifts[k][0],
                                         (double)j + shifts[k][1]),
                              1, 0);
                if (out[j * RW + i] != want)
                    fail_msg("shift (%g, %g) pixel (%lld, %lld): %d, want %d",
                             shifts[k][0], shifts[k][1], (long long)i,
                             (long long)j, out[j * RW + i], want);
            }
    }
    /* a half-pixel blend of two pixels with data is their mean, rounded
     * half up: checked by hand on one pair */
    {
        cnx_align_grid g;
        double dx[20], dy[20];
        const int v0 = src[5 * RW + 10], v1 = src[5 * RW + 11];
        const_field(0.5, 0, &g, dx, dy);
        assert_int_equal(cnx_align_render(&im, &g, dx, dy, 1, 0, box, out), 0);
        if (v0 != 0 && v1 != 0)
            assert_int_equal(out[5 * RW + 10], (v0 + v1 + 1) / 2);
    }
    free(src);
    free(out);
}

static void test_align_render__gain_offset_clamped_zero_kept(void **state)
{
    static const double go[][2] = {
        {2.0, -50.0}, {1.0, -300.0}, {1.0, 300.0}, {0.5, 0.0}, {-1.0, 256.0}};
    uint8_t *src = render_source(1), *out = malloc(RW * RH);
    const cnx_align_image im = {-10, 7, RW, RH, src};
    const int64_t box[4] = {-10, 7, RW, RH};
    cnx_align_grid g;
    double dx[20], dy[20];
    (void)state;
    assert_non_null(out);
    const_field(0, 0, &g, dx, dy);
    for (size_t k = 0; k < sizeof(go) / sizeof(go[0]); k++) {
        assert_int_equal(
            cnx_align_render(&im, &g, dx, dy, go[k][0], go[k][1], box, out), 0);
        for (size_t i = 0; i < RW * RH; i++) {
            const uint8_t want =
                src[i] == 0 ? 0 : ref_value(src[i], go[k][0], go[k][1]);
            assert_int_equal(out[i], want);
        }
    }
    free(src);
    free(out);
}

static void test_align_render__any_box_and_a_varying_field(void **state)
{
    uint8_t *src = render_source(0);
    const cnx_align_image im = {-10, 7, RW, RH, src};
    /* a box larger than the source on every side */
    const int64_t box[4] = {-30, -5, RW + 50, RH + 30};
    uint8_t *out = malloc((size_t)(box[2] * box[3]));
    /* nodes over part of the source only; d linear in x and y on the
     * nodes, so bilinear interpolation reproduces it between them and it
     * is clamped to the outer nodes beyond */
    const cnx_align_grid g = {0.5, 15.0, 10.0, 4, 3};
    double dx[12], dy[12];
    (void)state;
    assert_non_null(out);
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < 4; i++) {
            dx[j * 4 + i] = 0.3 * i - 0.2 * j + 1.0;
            dy[j * 4 + i] = -0.25 * i + 0.4 * j - 0.5;
        }
    assert_int_equal(cnx_align_render(&im, &g, dx, dy, 1, 0, box, out), 0);
    for (int64_t j = 0; j < box[3]; j++)
        for (int64_t i = 0; i < box[2]; i++) {
            const double qx = (double)(box[0] + i), qy = (double)(box[1] + j);
            double u = (qx - g.x0) / g.step, v = (qy - g.y0) / g.step, fx, fy;
            uint8_t want;
            u = u < 0 ? 0 : u > 3 ? 3 : u;
            v = v < 0 ? 0 : v > 2 ? 2 : v;
            fx = 0.3 * u - 0.2 * v + 1.0;
            fy = -0.25 * u + 0.4 * v - 0.5;
            want = ref_value(
                ref_sample(src, RW, RH, qx + fx - im.x0, qy + fy - im.y0), 1,
                0);
            /* the field is exact up to rounding: skip values on a
             * rounding edge */
            if (out[j * box[2] + i] != want) {
                const double s =
                    ref_sample(src, RW, RH, qx + fx - im.x0, qy + fy - im.y0);
                if (!(s >= 0 && fabs(s - floor(s) - 0.5) < 1e-9))
                    fail_msg("pixel (%lld, %lld): %d, want %d",
                             (long long)(box[0] + i), (long long)(box[1] + j),
                             out[j * box[2] + i], want);
            }
        }
    /* the corners of the box are outside the source */
    assert_int_equal(out[0], 0);
    assert_int_equal(out[box[2] * box[3] - 1], 0);
    free(src);
    free(out);
}

static void test_align_render__bad_geometry_is_refused(void **state)
{
    uint8_t px[4] = {1, 2, 3, 4}, out[4];
    cnx_align_image im = {0, 0, 2, 2, px};
    cnx_align_grid g = {0, 0, 8, 1, 1};
    double d = 0;
    int64_t box[4] = {0, 0, 2, 2};
    (void)state;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out), 0);
    box[2] = 0;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out),
                     CNX_EINVAL);
    box[2] = 2;
    g.nx = 0;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out),
                     CNX_EINVAL);
    g.nx = 1;
    g.step = 0;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out),
                     CNX_EINVAL);
    g.step = 8;
    im.w = 0;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out),
                     CNX_EINVAL);
    im.w = 2;
    im.pixels = NULL;
    assert_int_equal(cnx_align_render(&im, &g, &d, &d, 1, 0, box, out),
                     CNX_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_align_params__defaults_pass_the_check),
        cmocka_unit_test(test_align_params__each_field_range_checked_and_named),
        cmocka_unit_test(test_align_grid__nodes_centred_in_the_section),
        cmocka_unit_test(test_align_stats__match_a_direct_computation),
        cmocka_unit_test(test_align_match__bad_input_is_refused),
        cmocka_unit_test(
            test_align_match__integer_shift_b_at_p_shows_a_at_p_plus_d),
        cmocka_unit_test(test_align_match__subpixel_shifts_within_a_fifth_px),
        cmocka_unit_test(test_align_match__bilinear_resampled_shift),
        cmocka_unit_test(test_align_match__smooth_field_node_by_node),
        cmocka_unit_test(test_align_match__nodata_border_and_holes),
        cmocka_unit_test(test_align_match__flat_region_is_flat),
        cmocka_unit_test(test_align_match__planted_local_shift_is_an_outlier),
        cmocka_unit_test(
            test_align_match__high_min_peak_ratio_makes_weak_nodes),
        cmocka_unit_test(test_align_match__blank_sections_give_no_valid_node),
        cmocka_unit_test(test_align_match__same_input_same_bytes),
        cmocka_unit_test(test_align_match__free_accepts_null_and_zeroes),
        cmocka_unit_test(test_align_render__identity_reproduces_the_source),
        cmocka_unit_test(
            test_align_render__integer_shift_is_exact_and_zero_outside),
        cmocka_unit_test(test_align_render__half_pixels_blend_bilinearly),
        cmocka_unit_test(test_align_render__gain_offset_clamped_zero_kept),
        cmocka_unit_test(test_align_render__any_box_and_a_varying_field),
        cmocka_unit_test(test_align_render__bad_geometry_is_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
