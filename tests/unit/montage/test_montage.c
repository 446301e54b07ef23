/*
 * test_montage.c - the montage kernel (cnx/montage.h) against cnx-synth
 * tile sets, whose true positions, gains and offsets are known, and
 * against constructed tiles.
 *
 * Parameters: defaults, every key, and the one-line message naming the key
 * for an unknown key, a wrong type and a value out of range. Input checks
 * name the tile. The FFT matches a naive DFT and its twiddles match cos/sin
 * to a few ulps. On synthetic sections (256^2, 3 x 3 tiles of 128, nominal
 * errors up to 20 px): every placed tile lands within 1 px of its true
 * position once the mean translation is removed, the median pair residual
 * is under 1 px, the gains found undo the true ones (gain x true gain is
 * the same for every tile within 2%), intensity steps across seams are
 * under 5% of the mean after normalisation and several times larger
 * before, and the rendered section matches the true section. A tile of
 * noise is left out without disturbing the rest. The same input gives the
 * same report bytes and the same rendered bytes, also at another z.
 */
#include <math.h>

#include "cnx/error.h"
#include "cnx/montage_io.h"
#include "cnx/synth.h"
#include "cnx_test.h"
#include "kernels/montage_int.h"

/* ---- fixtures ------------------------------------------------------------ */

/* One synthetic dataset for all tests (generated once). */
static cnx_synth *shared;

static int setup(void **state)
{
    cnx_synth_params sp;
    (void)state;
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = 256;
    sp.shape[2] = 4;
    sp.seed = 5;
    /* Tiles cut from the image itself: the rendered section is compared
     * with synth->image (cnx-synth's section distortions would make it
     * S_z, docs/synth.md). */
    sp.distort = CNX_SYNTH_DISTORT_NONE;
    return cnx_synth_generate(&shared, &sp);
}

static int teardown(void **state)
{
    (void)state;
    cnx_synth_free(shared);
    return 0;
}

/* A section's synthetic tiles and their montage view. */
typedef struct section {
    cnx_synth_tile *st;
    size_t n;
    cnx_montage_tile *mt;
    char (*ids)[32];
} section;

static void section_load(section *s, int64_t z)
{
    assert_int_equal(cnx_synth_tiles(&s->st, &s->n, shared, z), 0);
    s->mt = calloc(s->n, sizeof(*s->mt));
    s->ids = calloc(s->n, sizeof(*s->ids));
    assert_non_null(s->mt);
    assert_non_null(s->ids);
    for (size_t i = 0; i < s->n; i++) {
        const cnx_synth_tile *t = &s->st[i];
        snprintf(s->ids[i], sizeof(s->ids[i]), "r%02lld-c%02lld",
                 (long long)t->row, (long long)t->col);
        s->mt[i] = (cnx_montage_tile){s->ids[i], t->nominal_x, t->nominal_y,
                                      t->width,  t->height,    t->pixels};
    }
}

static void section_free(section *s)
{
    cnx_synth_tiles_free(s->st, s->n);
    free(s->mt);
    free(s->ids);
}

/* Largest distance of a placed tile from its true position once the mean
 * translation over placed tiles is removed. */
static double position_error(const section *s, const cnx_montage_result *r)
{
    double mx = 0, my = 0, worst = 0;
    size_t k = 0;
    for (size_t i = 0; i < s->n; i++)
        if (r->placed[i]) {
            mx += r->x[i] - (double)s->st[i].x;
            my += r->y[i] - (double)s->st[i].y;
            k++;
        }
    mx /= (double)k;
    my /= (double)k;
    for (size_t i = 0; i < s->n; i++)
        if (r->placed[i]) {
            const double ex = r->x[i] - (double)s->st[i].x - mx;
            const double ey = r->y[i] - (double)s->st[i].y - my;
            const double e = sqrt(ex * ex + ey * ey);
            worst = e > worst ? e : worst;
        }
    return worst;
}

/* Mean of tile t's pixels (gain g, offset o applied) over the section
 * rectangle [x0, x1) x [y0, y1), at its true position. */
static double rect_mean(const cnx_synth_tile *t, double g, double o, int64_t x0,
                        int64_t x1, int64_t y0, int64_t y1)
{
    double s = 0;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t x = x0; x < x1; x++)
            s += g * t->pixels[(y - t->y) * t->width + (x - t->x)] + o;
    return s / (double)((x1 - x0) * (y1 - y0));
}

/* Largest relative step of mean intensity across the true overlap of the
 * used pairs, with (corrected = 1) or without the solved gains. */
static double seam_step(const section *s, const cnx_montage_result *r,
                        int corrected)
{
    double worst = 0;
    for (size_t k = 0; k < r->npairs; k++) {
        const cnx_montage_pair *q = &r->pairs[k];
        const cnx_synth_tile *a = &s->st[q->a], *b = &s->st[q->b];
        int64_t x0 = a->x > b->x ? a->x : b->x;
        int64_t y0 = a->y > b->y ? a->y : b->y;
        int64_t x1 = a->x + a->width < b->x + b->width ? a->x + a->width
                                                       : b->x + b->width;
        int64_t y1 = a->y + a->height < b->y + b->height ? a->y + a->height
                                                         : b->y + b->height;
        double ma, mb, step;
        if (!q->used || x1 <= x0 || y1 <= y0)
            continue;
        ma = rect_mean(a, corrected ? r->gain[q->a] : 1.0,
                       corrected ? r->offset[q->a] : 0.0, x0, x1, y0, y1);
        mb = rect_mean(b, corrected ? r->gain[q->b] : 1.0,
                       corrected ? r->offset[q->b] : 0.0, x0, x1, y0, y1);
        step = fabs(ma - mb) / (0.5 * (ma + mb));
        worst = step > worst ? step : worst;
    }
    return worst;
}

/* ---- parameters ---------------------------------------------------------- */

static void test_montage__defaults(void **state)
{
    cnx_montage_params p;
    (void)state;
    cnx_montage_params_default(&p);
    assert_int_equal(p.search, 50);
    assert_true(p.min_peak_ratio == 3.0);
    assert_true(p.max_residual == 2.0);
    assert_int_equal(p.normalize, 1);
    assert_int_equal(cnx_montage_params_check(&p), 0);
    memset(&p, 0, sizeof(p));
    assert_int_equal(cnx_montage_params_parse(NULL, &p), 0);
    assert_int_equal(p.search, 50);
    assert_int_equal(cnx_montage_params_parse("{}", &p), 0);
    assert_true(p.max_residual == 2.0);
}

static void test_montage__parse_every_key(void **state)
{
    cnx_montage_params p;
    (void)state;
    assert_int_equal(
        cnx_montage_params_parse("{\"search\":12,\"min_peak_ratio\":2.5,"
                                 "\"max_residual\":0.75,\"normalize\":false}",
                                 &p),
        0);
    assert_int_equal(p.search, 12);
    assert_true(p.min_peak_ratio == 2.5);
    assert_true(p.max_residual == 0.75);
    assert_int_equal(p.normalize, 0);
    assert_int_equal(cnx_montage_params_parse("{\"normalize\":1}", &p), 0);
    assert_int_equal(p.normalize, 1);
}

static void test_montage__parse_refuses_bad_values(void **state)
{
    static const struct {
        const char *json;
        const char *message;
    } cases[] = {
        {"{\"serach\":3}", "serach"},
        {"{\"search\":-1}",
         "montage: parameters.search: must be an integer in [0, 4096]"},
        {"{\"search\":4097}", "parameters.search"},
        {"{\"search\":2.5}", "parameters.search"},
        {"{\"search\":\"5\"}", "parameters.search"},
        {"{\"min_peak_ratio\":0.5}", "parameters.min_peak_ratio"},
        {"{\"min_peak_ratio\":\"x\"}", "parameters.min_peak_ratio"},
        {"{\"max_residual\":0}", "parameters.max_residual"},
        {"{\"max_residual\":null}", "parameters.max_residual"},
        {"{\"normalize\":2}", "parameters.normalize"},
        {"{\"normalize\":\"yes\"}", "parameters.normalize"},
        {"[1]", "montage: parameters: must be an object"},
        {"{\"search\":", "montage: parameters"},
    };
    cnx_montage_params p;
    (void)state;
    cnx_montage_params_default(&p);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        p.search = 7;
        assert_int_equal(cnx_montage_params_parse(cases[i].json, &p),
                         CNX_ESCHEMA);
        assert_int_equal(p.search, 7); /* untouched on failure */
        if (strstr(cnx_error_last()->message, cases[i].message) == NULL)
            fail_msg("%s: message \"%s\" lacks \"%s\"", cases[i].json,
                     cnx_error_last()->message, cases[i].message);
        assert_null(strchr(cnx_error_last()->message, '\n'));
    }
}

/* ---- input checks -------------------------------------------------------- */

static void test_montage__refuses_bad_input(void **state)
{
    uint8_t px[16 * 16] = {0};
    cnx_montage_tile t[2] = {{"a", 0, 0, 16, 16, px}, {"b", 10, 0, 16, 16, px}};
    cnx_montage_result r;
    cnx_montage_params p;
    (void)state;
    assert_int_equal(cnx_montage_solve(t, 0, NULL, &r), CNX_EINVAL);
    assert_int_equal(cnx_montage_solve(NULL, 2, NULL, &r), CNX_EINVAL);
    t[1].pixels = NULL;
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "tile b: no pixels"));
    t[1].pixels = px;
    t[1].width = 0;
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "tile b"));
    t[1].width = 65537;
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    t[1].width = 16;
    t[1].id = "a";
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "tile a: id repeated"));
    t[1].id = NULL;
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    t[1].id = "b";
    t[1].x = (int64_t)1 << 41;
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), CNX_EINVAL);
    t[1].x = 10;
    cnx_montage_params_default(&p);
    p.search = -1;
    assert_int_equal(cnx_montage_solve(t, 2, &p, &r), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "search"));
    assert_int_equal(cnx_montage_render(t, 2, NULL, 0, 0, 4, 4, px),
                     CNX_EINVAL);
    cnx_montage_result_free(NULL);

    /* flat tiles: valid input, nothing to register, both kept nominal */
    assert_int_equal(cnx_montage_solve(t, 2, NULL, &r), 0);
    assert_int_equal(r.npairs, 1);
    assert_int_equal(r.pairs[0].used, 0);
    assert_true(r.pairs[0].peak_ratio == 0.0);
    assert_true(r.x[1] == 10.0 && r.y[1] == 0.0);
    assert_int_equal(r.placed[0] + r.placed[1], 1);
    assert_int_equal(cnx_montage_render(t, 2, &r, 0, 0, 0, 4, px), CNX_EINVAL);
    cnx_montage_result_free(&r);
}

/* ---- FFT ------------------------------------------------------------------
 */

static void test_montage__fft_matches_naive_dft(void **state)
{
    enum { N = 64 };
    double d[2 * N], ref[2 * N];
    mont_fft f;
    uint64_t seed = 11;
    (void)state;
    memset(&f, 0, sizeof(f));
    assert_int_equal(mont_fft_plan(&f, N), 0);
    for (int i = 0; i < 2 * N; i++)
        d[i] = (double)(cnx_test_rand(&seed) % 1000) / 10.0 - 50.0;
    for (int k = 0; k < N; k++) {
        double sr = 0, si = 0;
        for (int j = 0; j < N; j++) {
            const double c = cos(2 * M_PI * j * k / N);
            const double s = -sin(2 * M_PI * j * k / N);
            sr += d[2 * j] * c - d[2 * j + 1] * s;
            si += d[2 * j] * s + d[2 * j + 1] * c;
        }
        ref[2 * k] = sr;
        ref[2 * k + 1] = si;
    }
    mont_fft_1d(&f, d, 0);
    for (int i = 0; i < 2 * N; i++)
        assert_true(fabs(d[i] - ref[i]) < 1e-9);
    mont_fft_1d(&f, d, 1); /* inverse, unscaled */
    for (int i = 0; i < 2 * N; i++)
        d[i] /= N;
    seed = 11;
    for (int i = 0; i < 2 * N; i++)
        assert_true(fabs(d[i] - ((double)(cnx_test_rand(&seed) % 1000) / 10.0 -
                                 50.0)) < 1e-12);
    mont_fft_dispose(&f);
    /* twiddles against libm (used here only) */
    for (uint64_t n = 1; n <= 4096; n *= 2)
        for (uint64_t k = 0; k < n; k++) {
            double c, s;
            mont_cos_sin(k, n, &c, &s);
            assert_true(fabs(c - cos(2 * M_PI * (double)k / (double)n)) <
                        1e-14);
            assert_true(fabs(s - sin(2 * M_PI * (double)k / (double)n)) <
                        1e-14);
        }
}

/* The column transform gives every column the bits mont_fft_1d gives it,
 * forward and inverse, for sizes with and without the general stages and
 * widths with and without an odd last column. */
static void test_montage__fft_cols_same_bits_as_1d(void **state)
{
    static const size_t sizes[] = {1, 2, 4, 8, 64};
    static const size_t widths[] = {1, 2, 5, 16};
    uint64_t seed = 5;
    (void)state;
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++)
        for (size_t wi = 0; wi < sizeof(widths) / sizeof(widths[0]); wi++)
            for (int inverse = 0; inverse <= 1; inverse++) {
                const size_t n = sizes[si], m = widths[wi];
                double *g = malloc(2 * n * m * sizeof(*g));
                double *ref = malloc(2 * n * m * sizeof(*ref));
                double *col = malloc(2 * n * sizeof(*col));
                mont_fft f;
                memset(&f, 0, sizeof(f));
                assert_true(g != NULL && ref != NULL && col != NULL);
                assert_int_equal(mont_fft_plan(&f, n), 0);
                for (size_t i = 0; i < 2 * n * m; i++)
                    g[i] = ref[i] =
                        (double)(cnx_test_rand(&seed) % 20001) / 100.0 - 100.0;
                for (size_t x = 0; x < m; x++) {
                    /* the reference: column x through mont_fft_1d */
                    for (size_t y = 0; y < n; y++) {
                        col[2 * y] = ref[2 * (y * m + x)];
                        col[2 * y + 1] = ref[2 * (y * m + x) + 1];
                    }
                    mont_fft_1d(&f, col, inverse);
                    for (size_t y = 0; y < n; y++) {
                        ref[2 * (y * m + x)] = col[2 * y];
                        ref[2 * (y * m + x) + 1] = col[2 * y + 1];
                    }
                }
                mont_fft_cols(&f, g, m, inverse);
                assert_memory_equal(g, ref, 2 * n * m * sizeof(*g));
                free(col);
                free(ref);
                free(g);
                mont_fft_dispose(&f);
            }
}

/* ---- registration of constructed pairs ---------------------------------- */

/* Reference model: NCC of a and b with b's top-left at (dx, dy), means
 * first, in doubles. */
static double naive_ncc(const cnx_montage_tile *a, const cnx_montage_tile *b,
                        int64_t dx, int64_t dy)
{
    const int64_t x0 = dx > 0 ? dx : 0, y0 = dy > 0 ? dy : 0;
    const int64_t x1 = a->width < dx + b->width ? a->width : dx + b->width;
    const int64_t y1 = a->height < dy + b->height ? a->height : dy + b->height;
    double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0, n;
    n = (double)((x1 - x0) * (y1 - y0));
    for (int64_t y = y0; y < y1; y++)
        for (int64_t x = x0; x < x1; x++) {
            ma += a->pixels[y * a->width + x];
            mb += b->pixels[(y - dy) * b->width + x - dx];
        }
    ma /= n;
    mb /= n;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t x = x0; x < x1; x++) {
            const double u = a->pixels[y * a->width + x] - ma;
            const double v = b->pixels[(y - dy) * b->width + x - dx] - mb;
            sab += u * v;
            saa += u * u;
            sbb += v * v;
        }
    return sab / sqrt(saa * sbb);
}

/* The refined NCC is the NCC of the pixels at the integer offset found,
 * and no 8-neighbour within search beats it: odd widths (the vector cross
 * sums' tails), noise so that the NCC stays under 1, both tile orders. */
static void test_montage__register_pair_refined_ncc_is_direct(void **state)
{
    enum { W = 53, H = 41, BIG = 200 };
    uint8_t *img = malloc(BIG * BIG), *pa = malloc(W * H), *pb = malloc(W * H);
    uint64_t seed = 9;
    cnx_montage_params p;
    (void)state;
    assert_true(img && pa && pb);
    for (int y = 0; y < BIG; y++)
        for (int x = 0; x < BIG; x++) {
            uint64_t s = (uint64_t)((y / 2) * 1000 + x / 2) * 104729 + 5;
            img[y * BIG + x] = (uint8_t)(cnx_test_rand(&s) % 180 + 30);
        }
    /* b 35 px right of and 4 px below a, with noise of +-12 */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            const int v = img[(34 + y) * BIG + 65 + x] +
                          (int)(cnx_test_rand(&seed) % 25) - 12;
            pa[y * W + x] = img[(30 + y) * BIG + 30 + x];
            pb[y * W + x] = (uint8_t)v;
        }
    cnx_montage_params_default(&p);
    for (int64_t search = 6; search <= 20; search += 14)
        for (int swap = 0; swap <= 1; swap++) {
            const cnx_montage_tile ta = {"a", 0, 0, W, H, pa};
            const cnx_montage_tile tb = {"b", 35 - 3, 4 + 2, W, H, pb};
            cnx_montage_tile a = ta, b = tb;
            cnx_montage_pair q;
            int64_t ix, iy;
            if (swap) {
                a = (cnx_montage_tile){"b", 0, 0, W, H, pb};
                b = (cnx_montage_tile){"a", -(35 - 3), -(4 + 2), W, H, pa};
            }
            p.search = search;
            assert_int_equal(cnx_montage_register_pair(&a, &b, &p, &q), 0);
            ix = (int64_t)floor(q.dx + 0.5);
            iy = (int64_t)floor(q.dy + 0.5);
            assert_int_equal(ix, swap ? -35 : 35);
            assert_int_equal(iy, swap ? -4 : 4);
            assert_true(q.ncc > 0.8 && q.ncc < 0.999);
            assert_true(fabs(q.ncc - naive_ncc(&a, &b, ix, iy)) < 1e-9);
            for (int j = -1; j <= 1; j++)
                for (int i = -1; i <= 1; i++)
                    if (i != 0 || j != 0)
                        assert_true(naive_ncc(&a, &b, ix + i, iy + j) < q.ncc);
        }
    free(img);
    free(pa);
    free(pb);
}

static void test_montage__register_pair_known_offset(void **state)
{
    enum { W = 96, H = 80, BIG = 240 };
    uint8_t *img = malloc(BIG * BIG), *pa = malloc(W * H), *pb = malloc(W * H);
    uint64_t seed = 3;
    cnx_montage_params p;
    cnx_montage_pair q;
    (void)state;
    assert_true(img && pa && pb);
    /* blocky texture: random values on a 3-pixel lattice */
    for (int y = 0; y < BIG; y++)
        for (int x = 0; x < BIG; x++) {
            uint64_t s = (uint64_t)((y / 3) * 1000 + x / 3) * 7919 + 17;
            img[y * BIG + x] = (uint8_t)(cnx_test_rand(&s) % 200 + 20);
        }
    (void)seed;
    /* a at (10, 20), b at (10 + 70, 20 + 7): 26 px overlap in x */
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            pa[y * W + x] = img[(20 + y) * BIG + 10 + x];
            pb[y * W + x] = img[(27 + y) * BIG + 80 + x];
        }
    cnx_montage_params_default(&p);
    {
        /* nominal b is off by (-23, +15) */
        cnx_montage_tile a = {"a", 0, 0, W, H, pa};
        cnx_montage_tile b = {"b", 70 - 23, 7 + 15, W, H, pb};
        assert_int_equal(cnx_montage_register_pair(&a, &b, &p, &q), 0);
        print_message("known offset (70, 7): found (%.3f, %.3f), ratio "
                      "%.2f, ncc %.3f\n",
                      q.dx, q.dy, q.peak_ratio, q.ncc);
        assert_true(fabs(q.dx - 70.0) < 0.25);
        assert_true(fabs(q.dy - 7.0) < 0.25);
        assert_true(q.peak_ratio >= p.min_peak_ratio);
        assert_true(q.ncc > 0.99);
        /* out of reach: more than search away */
        b.x = 200;
        assert_int_equal(cnx_montage_register_pair(&a, &b, &p, &q),
                         CNX_ENOTFOUND);
        assert_non_null(strstr(cnx_error_last()->message, "tiles a and b"));
        /* the same offset without binning (small search) */
        b.x = 70 - 5;
        b.y = 7 + 3;
        p.search = 6;
        assert_int_equal(cnx_montage_register_pair(&a, &b, &p, &q), 0);
        assert_true(fabs(q.dx - 70.0) < 0.25 && fabs(q.dy - 7.0) < 0.25);
        /* a true offset outside the window is not found there */
        b.x = 70 - 12;
        assert_int_equal(cnx_montage_register_pair(&a, &b, &p, &q), 0);
        assert_true(fabs(q.dx - 70.0) > 5.0 || q.peak_ratio < 3.0);
    }
    free(img);
    free(pa);
    free(pb);
}

/* ---- synthetic sections -------------------------------------------------- */

static void test_montage__synth_sections_land_on_truth(void **state)
{
    (void)state;
    for (int64_t z = 0; z < 4; z++) {
        section s;
        cnx_montage_result r;
        double err, before, after, cmean = 0, cworst = 0;
        size_t used = 0;
        section_load(&s, z);
        assert_int_equal(s.n, 9);
        assert_int_equal(cnx_montage_solve(s.mt, s.n, NULL, &r), 0);
        for (size_t k = 0; k < r.npairs; k++)
            used += r.pairs[k].used;
        err = position_error(&s, &r);
        before = seam_step(&s, &r, 0);
        after = seam_step(&s, &r, 1);
        for (size_t i = 0; i < s.n; i++)
            cmean += r.gain[i] * s.st[i].gain_milli / 1000.0 / (double)s.n;
        for (size_t i = 0; i < s.n; i++) {
            const double c = r.gain[i] * s.st[i].gain_milli / 1000.0 / cmean;
            cworst = fabs(c - 1) > cworst ? fabs(c - 1) : cworst;
        }
        print_message("z %lld: %zu pairs, %zu used, position error %.3f px, "
                      "median residual %.3f, max %.3f, seam step %.1f%% -> "
                      "%.2f%%, gain spread %.2f%%\n",
                      (long long)z, r.npairs, used, err, r.median_residual,
                      r.max_residual, 100 * before, 100 * after, 100 * cworst);
        for (size_t i = 0; i < s.n; i++)
            assert_int_equal(r.placed[i], 1);
        assert_true(used >= 12); /* at least the 12 edge neighbours */
        assert_true(err < 1.0);
        assert_true(r.median_residual < 1.0);
        assert_true(r.max_residual <= 2.0);
        assert_true(after < 0.05);
        assert_true(before > 3 * after);
        assert_true(cworst < 0.02);
        cnx_montage_result_free(&r);
        section_free(&s);
    }
}

static void test_montage__render_matches_true_section(void **state)
{
    const int64_t W = shared->params.shape[0], H = shared->params.shape[1];
    const int64_t z = 2;
    const uint8_t *img = (const uint8_t *)shared->image->data + z * W * H;
    uint8_t *out = malloc((size_t)(W * H)), *out2 = malloc((size_t)(W * H));
    section s;
    cnx_montage_result r;
    double sx = 0, sy = 0, spp = 0, sp = 0, sv = 0, spv = 0, a, b, mad = 0;
    int64_t tx, ty;
    (void)state;
    assert_true(out && out2);
    section_load(&s, z);
    assert_int_equal(cnx_montage_solve(s.mt, s.n, NULL, &r), 0);
    /* the solution sits at truth + round(mean(nominal - true)) */
    for (size_t i = 0; i < s.n; i++) {
        sx += (double)(s.st[i].nominal_x - s.st[i].x);
        sy += (double)(s.st[i].nominal_y - s.st[i].y);
    }
    tx = (int64_t)mont_round(sx / (double)s.n);
    ty = (int64_t)mont_round(sy / (double)s.n);
    for (size_t i = 0; i < s.n; i++) {
        assert_true(fabs(r.x[i] - (double)(s.st[i].x + tx)) < 1.0);
        assert_true(fabs(r.y[i] - (double)(s.st[i].y + ty)) < 1.0);
    }
    assert_int_equal(cnx_montage_render(s.mt, s.n, &r, tx, ty, W, H, out), 0);
    assert_int_equal(cnx_montage_render(s.mt, s.n, &r, tx, ty, W, H, out2), 0);
    assert_memory_equal(out, out2, (size_t)(W * H));
    /* out ~ a * img + b (the normalised gain/offset gauge) */
    for (int64_t i = 0; i < W * H; i++) {
        const double p = img[i], v = out[i];
        sp += p;
        sv += v;
        spp += p * p;
        spv += p * v;
    }
    a = (spv - sp * sv / (double)(W * H)) / (spp - sp * sp / (double)(W * H));
    b = (sv - a * sp) / (double)(W * H);
    for (int64_t i = 0; i < W * H; i++)
        mad += fabs(out[i] - (a * img[i] + b)) / (double)(W * H);
    print_message("render z %lld: out = %.3f img + %.2f, mean |diff| %.3f\n",
                  (long long)z, a, b, mad);
    assert_true(a > 0.85 && a < 1.15);
    assert_true(mad < 2.0);
    /* outside every tile: 0 */
    assert_int_equal(cnx_montage_render(s.mt, s.n, &r, -1000, -1000, 4, 4, out),
                     0);
    for (int i = 0; i < 16; i++)
        assert_int_equal(out[i], 0);
    cnx_montage_result_free(&r);
    section_free(&s);
    free(out);
    free(out2);
}

static void test_montage__noise_tile_is_left_out(void **state)
{
    section s;
    cnx_montage_result r;
    uint64_t seed = 99;
    uint8_t *noise;
    (void)state;
    section_load(&s, 1);
    noise = malloc((size_t)(s.mt[4].width * s.mt[4].height));
    assert_non_null(noise);
    for (int64_t i = 0; i < s.mt[4].width * s.mt[4].height; i++)
        noise[i] = (uint8_t)cnx_test_rand(&seed);
    s.mt[4].pixels = noise; /* the centre tile */
    assert_int_equal(cnx_montage_solve(s.mt, s.n, NULL, &r), 0);
    for (size_t k = 0; k < r.npairs; k++)
        if (r.pairs[k].a == 4 || r.pairs[k].b == 4)
            assert_int_equal(r.pairs[k].used, 0);
    assert_int_equal(r.placed[4], 0);
    assert_true(r.x[4] == (double)(s.mt[4].x + r.shift[0]));
    assert_true(r.gain[4] == 1.0 && r.offset[4] == 0.0);
    r.placed[4] = 0;
    assert_true(position_error(&s, &r) < 1.0);
    assert_true(r.median_residual < 1.0);
    cnx_montage_result_free(&r);
    section_free(&s);
    free(noise);
}

static void test_montage__same_input_same_bytes(void **state)
{
    char *j1 = NULL, *j2 = NULL, *j3 = NULL;
    section s;
    cnx_montage_result r1, r2;
    (void)state;
    section_load(&s, 3);
    assert_int_equal(cnx_montage_solve(s.mt, s.n, NULL, &r1), 0);
    assert_int_equal(cnx_montage_solve(s.mt, s.n, NULL, &r2), 0);
    assert_int_equal(cnx_montage_report_json(s.mt, &r1, 3, &j1), 0);
    assert_int_equal(cnx_montage_report_json(s.mt, &r2, 3, &j2), 0);
    assert_string_equal(j1, j2);
    assert_int_equal(cnx_montage_report_json(s.mt, &r2, 4, &j3), 0);
    assert_string_not_equal(j1, j3);
    assert_non_null(strstr(j1, "{\"format\":\"cnx.montage/1\",\"pairs\":[{\"a\""
                               ":\"r00-c00\",\"b\":\"r00-c01\",\"dx\":"));
    assert_non_null(strstr(j1, "\"summary\":{\"fixed\":\"r00-c00\","
                               "\"max_residual\":"));
    assert_non_null(strstr(j1, "\"tiles\":[{\"gain\":"));
    assert_non_null(strstr(j1, "\"z\":3}"));
    cnx_montage_result_free(&r1);
    cnx_montage_result_free(&r2);
    free(j1);
    free(j2);
    free(j3);
    section_free(&s);
}

/* A section without tiles: an empty report, not an error. */
static void test_montage__empty_section_report(void **state)
{
    cnx_montage_result r;
    char *j = NULL;
    (void)state;
    memset(&r, 0, sizeof(r));
    assert_int_equal(cnx_montage_report_json(NULL, &r, 77, &j), 0);
    assert_non_null(strstr(j, "\"tiles\":[]"));
    assert_non_null(strstr(j, "\"pairs\":[]"));
    assert_non_null(strstr(j, "\"fixed\":null"));
    assert_non_null(strstr(j, "\"z\":77"));
    free(j);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_montage__empty_section_report),
        cmocka_unit_test(test_montage__defaults),
        cmocka_unit_test(test_montage__parse_every_key),
        cmocka_unit_test(test_montage__parse_refuses_bad_values),
        cmocka_unit_test(test_montage__refuses_bad_input),
        cmocka_unit_test(test_montage__fft_matches_naive_dft),
        cmocka_unit_test(test_montage__fft_cols_same_bits_as_1d),
        cmocka_unit_test(test_montage__register_pair_refined_ncc_is_direct),
        cmocka_unit_test(test_montage__register_pair_known_offset),
        cmocka_unit_test(test_montage__synth_sections_land_on_truth),
        cmocka_unit_test(test_montage__render_matches_true_section),
        cmocka_unit_test(test_montage__noise_tile_is_left_out),
        cmocka_unit_test(test_montage__same_input_same_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
