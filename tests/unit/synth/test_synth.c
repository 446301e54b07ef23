/*
 * Synthetic dataset kernel: determinism, the shape of the objects, the
 * appearance of each layer, synapse ground truth, montage tiles, parameter
 * checks, section distortions (the warp draws, the map against an
 * independent B-spline, S_z against the image sampled at U_z, the drift,
 * --distort none, missing sections), and the writer's write-once
 * behaviour. One dataset of 96x80x48
 * is generated once for the read-only tests. The hard style and --chunk
 * get their own small tests here; tests/py/synth_check.py measures the
 * hard style's geometry and maps (tests/integration/synth.sh).
 */
#include "cnx_test.h"

#include <math.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/synth.h"
#include "cnx/tileset.h"

#define SX 96
#define SY 80
#define SZ 48

static cnx_synth *shared;

static void small_params(cnx_synth_params *p, uint64_t seed)
{
    cnx_synth_params_init(p);
    p->shape[0] = SX;
    p->shape[1] = SY;
    p->shape[2] = SZ;
    p->seed = seed;
    p->synapses_per_mvx = 40; /* ~15 in this small volume */
}

static int setup(void **state)
{
    cnx_synth_params p;
    (void)state;
    small_params(&p, 7);
    return cnx_synth_generate(&shared, &p) == 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    cnx_synth_free(shared);
    return 0;
}

static int64_t at(int64_t x, int64_t y, int64_t z)
{
    return (z * SY + y) * SX + x;
}

static const uint64_t *gt_of(const cnx_synth *s)
{
    return s->gt->data;
}

/* 1 where a voxel has a 6-neighbour with another label (reference). */
static uint8_t *membrane_mask(const uint64_t *gt)
{
    uint8_t *m = calloc(SX * SY * SZ, 1);
    int64_t x, y, z;
    assert_non_null(m);
    for (z = 0; z < SZ; z++)
        for (y = 0; y < SY; y++)
            for (x = 0; x < SX; x++) {
                const uint64_t l = gt[at(x, y, z)];
                m[at(x, y, z)] = (x > 0 && gt[at(x - 1, y, z)] != l) ||
                                 (x < SX - 1 && gt[at(x + 1, y, z)] != l) ||
                                 (y > 0 && gt[at(x, y - 1, z)] != l) ||
                                 (y < SY - 1 && gt[at(x, y + 1, z)] != l) ||
                                 (z > 0 && gt[at(x, y, z - 1)] != l) ||
                                 (z < SZ - 1 && gt[at(x, y, z + 1)] != l);
            }
    return m;
}

static void test_synth__same_seed_gives_identical_bytes(void **state)
{
    cnx_synth_params p;
    cnx_synth *again = NULL;
    const int64_t n = SX * SY * SZ;
    (void)state;
    small_params(&p, 7);
    assert_int_equal(cnx_synth_generate(&again, &p), 0);
    assert_int_equal(again->nobjects, shared->nobjects);
    assert_memory_equal(again->gt->data, shared->gt->data, 8 * n);
    assert_memory_equal(again->image->data, shared->image->data, n);
    assert_memory_equal(again->boundary->data, shared->boundary->data, n);
    assert_memory_equal(again->cleft->data, shared->cleft->data, n);
    assert_memory_equal(again->psd->data, shared->psd->data, n);
    assert_int_equal(again->nsynapses, shared->nsynapses);
    if (shared->nsynapses > 0)
        assert_memory_equal(again->synapses, shared->synapses,
                            shared->nsynapses * sizeof(cnx_synth_synapse));
    cnx_synth_free(again);
}

static void test_synth__different_seed_differs(void **state)
{
    cnx_synth_params p;
    cnx_synth *other = NULL;
    const int64_t n = SX * SY * SZ;
    (void)state;
    small_params(&p, 8);
    assert_int_equal(cnx_synth_generate(&other, &p), 0);
    assert_true(memcmp(other->gt->data, shared->gt->data, 8 * n) != 0);
    assert_true(memcmp(other->image->data, shared->image->data, n) != 0);
    cnx_synth_free(other);
}

static void test_synth__every_voxel_has_a_label_from_1_to_n(void **state)
{
    const uint64_t *gt = gt_of(shared);
    const uint64_t nobj = shared->nobjects;
    uint8_t *seen;
    int64_t i;
    uint64_t k;
    (void)state;
    assert_true(nobj >= 10);
    seen = calloc(nobj + 1, 1);
    assert_non_null(seen);
    for (i = 0; i < SX * SY * SZ; i++) {
        assert_true(gt[i] >= 1 && gt[i] <= nobj);
        seen[gt[i]] = 1;
    }
    for (k = 1; k <= nobj; k++)
        assert_true(seen[k]);
    free(seen);
}

/* Flood fill (reference): every object is one 6-connected component. */
static void test_synth__each_object_is_one_component(void **state)
{
    const uint64_t *gt = gt_of(shared);
    const int64_t n = SX * SY * SZ;
    uint8_t *done = calloc(n, 1), *started;
    int64_t *queue = malloc(n * sizeof(*queue)), i;
    (void)state;
    started = calloc(shared->nobjects + 1, 1);
    assert_non_null(done);
    assert_non_null(queue);
    assert_non_null(started);
    for (i = 0; i < n; i++) {
        int64_t head = 0, tail = 0;
        if (done[i])
            continue;
        assert_false(started[gt[i]]); /* a second piece of this object */
        started[gt[i]] = 1;
        queue[tail++] = i;
        done[i] = 1;
        while (head < tail) {
            const int64_t v = queue[head++];
            const int64_t x = v % SX, y = v / SX % SY, z = v / (SX * SY);
            const int64_t nb[6] = {
                x > 0 ? v - 1 : -1,       x < SX - 1 ? v + 1 : -1,
                y > 0 ? v - SX : -1,      y < SY - 1 ? v + SX : -1,
                z > 0 ? v - SX * SY : -1, z < SZ - 1 ? v + SX * SY : -1};
            int k;
            for (k = 0; k < 6; k++) {
                if (nb[k] >= 0 && !done[nb[k]] && gt[nb[k]] == gt[v]) {
                    done[nb[k]] = 1;
                    queue[tail++] = nb[k];
                }
            }
        }
    }
    free(done);
    free(queue);
    free(started);
}

static void test_synth__objects_are_not_convex_blobs(void **state)
{
    const uint64_t *gt = gt_of(shared);
    const uint64_t nobj = shared->nobjects;
    int64_t(*lo)[3] = malloc((nobj + 1) * sizeof(*lo));
    int64_t(*hi)[3] = malloc((nobj + 1) * sizeof(*hi));
    int64_t *count = calloc(nobj + 1, sizeof(*count));
    int64_t x, y, z, sparse = 0;
    uint64_t k;
    (void)state;
    assert_non_null(lo);
    assert_non_null(hi);
    assert_non_null(count);
    for (k = 0; k <= nobj; k++) {
        lo[k][0] = lo[k][1] = lo[k][2] = INT64_MAX;
        hi[k][0] = hi[k][1] = hi[k][2] = -1;
    }
    for (z = 0; z < SZ; z++)
        for (y = 0; y < SY; y++)
            for (x = 0; x < SX; x++) {
                const uint64_t l = gt[at(x, y, z)];
                const int64_t c[3] = {x, y, z};
                int i;
                count[l]++;
                for (i = 0; i < 3; i++) {
                    lo[l][i] = c[i] < lo[l][i] ? c[i] : lo[l][i];
                    hi[l][i] = c[i] > hi[l][i] ? c[i] : hi[l][i];
                }
            }
    /* A convex blob fills half or more of its box (a ball: 52%); a bent
     * or branching tube fills far less. */
    for (k = 1; k <= nobj; k++) {
        const int64_t box = (hi[k][0] - lo[k][0] + 1) *
                            (hi[k][1] - lo[k][1] + 1) *
                            (hi[k][2] - lo[k][2] + 1);
        if (count[k] * 4 < box)
            sparse++;
    }
    assert_true(sparse * 4 >= (int64_t)nobj); /* a quarter at least */
    free(lo);
    free(hi);
    free(count);
}

static void test_synth__objects_touch_many_neighbours(void **state)
{
    const uint64_t *gt = gt_of(shared);
    const uint64_t nobj = shared->nobjects;
    uint8_t *adj = calloc((nobj + 1) * (nobj + 1), 1);
    int64_t x, y, z, pairs = 0;
    uint64_t a, b;
    (void)state;
    assert_non_null(adj);
    for (z = 0; z < SZ; z++)
        for (y = 0; y < SY; y++)
            for (x = 0; x + 1 < SX; x++) {
                a = gt[at(x, y, z)];
                b = gt[at(x + 1, y, z)];
                if (a != b)
                    adj[a * (nobj + 1) + b] = adj[b * (nobj + 1) + a] = 1;
            }
    for (a = 1; a <= nobj; a++)
        for (b = a + 1; b <= nobj; b++)
            pairs += adj[a * (nobj + 1) + b];
    /* Densely packed: on average each object touches several others. */
    assert_true(pairs >= (int64_t)(2 * nobj));
    free(adj);
}

static void mean_by_mask(const uint8_t *v, const uint8_t *mask, double *on,
                         double *off)
{
    double s[2] = {0, 0}, c[2] = {0, 0};
    int64_t i;
    for (i = 0; i < SX * SY * SZ; i++) {
        s[mask[i] ? 1 : 0] += v[i];
        c[mask[i] ? 1 : 0] += 1;
    }
    *on = s[1] / c[1];
    *off = s[0] / c[0];
}

static void test_synth__membranes_are_dark_interiors_bright(void **state)
{
    uint8_t *mem = membrane_mask(gt_of(shared));
    double on, off;
    (void)state;
    mean_by_mask(shared->image->data, mem, &on, &off);
    assert_true(on + 40.0 < off);
    assert_true(off > 120.0 && off < 210.0);
    free(mem);
}

static void test_synth__boundary_is_high_on_membranes(void **state)
{
    uint8_t *mem = membrane_mask(gt_of(shared));
    uint8_t *far = calloc(SX * SY * SZ, 1);
    const uint8_t *bnd = shared->boundary->data;
    double on, off, s = 0, c = 0;
    int64_t x, y, z;
    (void)state;
    assert_non_null(far);
    /* Voxels two or more steps from any membrane voxel. */
    for (z = 1; z < SZ - 1; z++)
        for (y = 1; y < SY - 1; y++)
            for (x = 1; x < SX - 1; x++) {
                const int64_t i = at(x, y, z);
                far[i] = !mem[i] && !mem[i - 1] && !mem[i + 1] &&
                         !mem[i - SX] && !mem[i + SX] && !mem[i - SX * SY] &&
                         !mem[i + SX * SY];
            }
    mean_by_mask(bnd, mem, &on, &off);
    assert_true(on > 128.0);
    for (x = 0; x < SX * SY * SZ; x++) {
        if (far[x]) {
            s += bnd[x];
            c += 1;
        }
    }
    assert_true(c > 0 && s / c < 32.0);
    free(mem);
    free(far);
}

static int64_t dist2(const int64_t a[3], const int64_t b[3])
{
    const int64_t dx = a[0] - b[0], dy = a[1] - b[1], dz = a[2] - b[2];
    return dx * dx + dy * dy + dz * dz;
}

static void test_synth__synapse_sites_lie_in_their_partners(void **state)
{
    const uint64_t *gt = gt_of(shared);
    size_t k, j;
    (void)state;
    assert_true(shared->nsynapses >= 5);
    for (k = 0; k < shared->nsynapses; k++) {
        const cnx_synth_synapse *s = &shared->synapses[k];
        const uint64_t site = gt[at(s->site[0], s->site[1], s->site[2])];
        assert_int_equal(s->id, k + 1);
        assert_int_not_equal(s->pre_id, s->post_id);
        assert_int_equal(gt[at(s->pre_site[0], s->pre_site[1], s->pre_site[2])],
                         s->pre_id);
        assert_int_equal(
            gt[at(s->post_site[0], s->post_site[1], s->post_site[2])],
            s->post_id);
        assert_true(site == s->pre_id || site == s->post_id);
        /* Partner points a few voxels either side of the cleft. */
        assert_true(dist2(s->pre_site, s->site) >= 4 &&
                    dist2(s->pre_site, s->site) <= 49);
        assert_true(dist2(s->post_site, s->site) >= 4 &&
                    dist2(s->post_site, s->site) <= 49);
        assert_true(s->radius >= 4 && s->radius <= 6);
        assert_true(s->size >= 30);
        for (j = 0; j < k; j++)
            assert_true(dist2(s->site, shared->synapses[j].site) >= 24 * 24);
        if (k > 0) { /* sorted by (z, y, x) */
            const int64_t *a = shared->synapses[k - 1].site, *b = s->site;
            assert_true(a[2] < b[2] ||
                        (a[2] == b[2] &&
                         (a[1] < b[1] || (a[1] == b[1] && a[0] < b[0]))));
        }
    }
}

static void test_synth__cleft_high_at_sites_and_only_near_them(void **state)
{
    const uint8_t *cleft = shared->cleft->data;
    int64_t x, y, z;
    size_t k;
    (void)state;
    for (k = 0; k < shared->nsynapses; k++) {
        const int64_t *s = shared->synapses[k].site;
        assert_true(cleft[at(s[0], s[1], s[2])] > 128);
    }
    for (z = 0; z < SZ; z++)
        for (y = 0; y < SY; y++)
            for (x = 0; x < SX; x++) {
                const int64_t v[3] = {x, y, z};
                int near = 0;
                if (cleft[at(x, y, z)] < 100)
                    continue;
                for (k = 0; k < shared->nsynapses && !near; k++) {
                    const int r = shared->synapses[k].radius + 2;
                    near = dist2(v, shared->synapses[k].site) <= r * r;
                }
                assert_true(near);
            }
}

static void test_synth__psd_lies_on_the_post_side(void **state)
{
    const uint64_t *gt = gt_of(shared);
    const uint8_t *psd = shared->psd->data;
    size_t k;
    (void)state;
    for (k = 0; k < shared->nsynapses; k++) {
        const cnx_synth_synapse *s = &shared->synapses[k];
        double sum[2] = {0, 0}, cnt[2] = {0, 0};
        int64_t x, y, z;
        for (z = s->site[2] - 3; z <= s->site[2] + 3; z++)
            for (y = s->site[1] - 3; y <= s->site[1] + 3; y++)
                for (x = s->site[0] - 3; x <= s->site[0] + 3; x++) {
                    const int64_t v[3] = {x, y, z};
                    uint64_t l;
                    int side;
                    if (x < 0 || y < 0 || z < 0 || x >= SX || y >= SY ||
                        z >= SZ || dist2(v, s->site) > 9)
                        continue;
                    l = gt[at(x, y, z)];
                    if (l != s->pre_id && l != s->post_id)
                        continue;
                    side = l == s->post_id;
                    sum[side] += psd[at(x, y, z)];
                    cnt[side] += 1;
                }
        assert_true(cnt[0] > 0 && cnt[1] > 0);
        assert_true(sum[1] / cnt[1] > 150.0); /* post side */
        assert_true(sum[0] / cnt[0] < 100.0); /* pre side */
    }
}

/* Section z as recorded (S_z), with the dataset's distortion; caller
 * frees. */
static uint8_t *recorded_section(const cnx_synth *s, int64_t z)
{
    cnx_synth_section_warp w;
    uint8_t *out = malloc(SX * SY);
    assert_non_null(out);
    assert_int_equal(cnx_synth_section_warp_draw(&w, &s->params, z), 0);
    assert_int_equal(
        cnx_synth_distort_section(
            out, (const uint8_t *)s->image->data + z * SX * SY, &w),
        0);
    return out;
}

static void test_synth__tiles_cover_the_section_near_their_truth(void **state)
{
    const cnx_synth_params *p = &shared->params;
    const cnx_synth_tile_grid g = cnx_synth_tile_layout(p);
    const int64_t zs[3] = {0, SZ / 2, SZ - 1};
    int i;
    (void)state;
    assert_int_equal(p->distort, CNX_SYNTH_DISTORT_DEFAULT);
    for (i = 0; i < 3; i++) {
        uint8_t *plane = recorded_section(shared, zs[i]);
        cnx_synth_tile *tiles = NULL;
        size_t count = 0, k;
        uint8_t *covered = calloc(SX * SY, 1);
        int64_t px, py;
        assert_non_null(covered);
        assert_int_equal(cnx_synth_tiles(&tiles, &count, shared, zs[i]), 0);
        assert_int_equal(count, (size_t)(g.rows * g.cols));
        for (k = 0; k < count; k++) {
            const cnx_synth_tile *t = &tiles[k];
            assert_true(t->x >= 0 && t->x + t->width <= SX);
            assert_true(t->y >= 0 && t->y + t->height <= SY);
            assert_true(llabs(t->nominal_x - t->x) <= 20);
            assert_true(llabs(t->nominal_y - t->y) <= 20);
            assert_true(t->gain_milli >= 850 && t->gain_milli <= 1150);
            assert_true(t->offset >= -15 && t->offset <= 15);
            for (py = 0; py < t->height; py++)
                for (px = 0; px < t->width; px++) {
                    const int64_t src = plane[(t->y + py) * SX + t->x + px];
                    const int64_t want =
                        (src * t->gain_milli + 500) / 1000 + t->offset;
                    const int64_t got = t->pixels[py * t->width + px];
                    covered[(t->y + py) * SX + t->x + px] = 1;
                    if (want >= 2 && want <= 253)
                        assert_true(llabs(got - want) <= 2);
                }
        }
        for (px = 0; px < SX * SY; px++)
            assert_true(covered[px]);
        cnx_synth_tiles_free(tiles, count);
        free(covered);
        free(plane);
    }
}

/* Section distortions (docs/synth.md, "Section distortions"). */

static int file_exists(const char *dir, const char *name);

static void test_synth__distort_none_cuts_tiles_from_the_image(void **state)
{
    cnx_synth alt = *shared; /* shares the volumes; params differ */
    cnx_synth_section_warp w;
    cnx_synth_tile *a = NULL, *b = NULL;
    size_t na = 0, nb = 0, k;
    const uint8_t *plane = (const uint8_t *)shared->image->data + 7 * SX * SY;
    uint8_t *out = malloc(SX * SY);
    int64_t px, py;
    (void)state;
    assert_non_null(out);
    alt.params.distort = CNX_SYNTH_DISTORT_NONE;
    /* The identity: no rotation, translation, warp or drift. */
    assert_int_equal(cnx_synth_section_warp_draw(&w, &alt.params, 7), 0);
    assert_true(w.sin_angle == 0.0 && w.cos_angle == 1.0);
    assert_true(w.translation[0] == 0.0 && w.translation[1] == 0.0);
    assert_int_equal(w.gain_milli, 1000);
    assert_int_equal(w.offset_milli, 0);
    for (k = 0; k < 36; k++)
        assert_true(w.dx[k] == 0.0 && w.dy[k] == 0.0);
    assert_int_equal(cnx_synth_distort_section(out, plane, &w), 0);
    assert_memory_equal(out, plane, SX * SY);
    /* Tiles: the same positions, gains and offsets either way; without
     * distortion exactly the old formula on the image itself. */
    assert_int_equal(cnx_synth_tiles(&a, &na, &alt, 7), 0);
    assert_int_equal(cnx_synth_tiles(&b, &nb, shared, 7), 0);
    assert_int_equal(na, nb);
    for (k = 0; k < na; k++) {
        const cnx_synth_tile *t = &a[k];
        assert_int_equal(t->x, b[k].x);
        assert_int_equal(t->nominal_y, b[k].nominal_y);
        assert_int_equal(t->gain_milli, b[k].gain_milli);
        assert_true(memcmp(t->pixels, b[k].pixels, t->width * t->height) != 0);
        for (py = 0; py < t->height; py++)
            for (px = 0; px < t->width; px++) {
                const int64_t src = plane[(t->y + py) * SX + t->x + px];
                const int64_t want =
                    (src * t->gain_milli + 500) / 1000 + t->offset;
                const int64_t got = t->pixels[py * t->width + px];
                if (want >= 2 && want <= 253)
                    assert_true(llabs(got - want) <= 2);
            }
    }
    cnx_synth_tiles_free(a, na);
    cnx_synth_tiles_free(b, nb);
    free(out);
}

static void test_synth__warp_draws_are_deterministic_and_bounded(void **state)
{
    cnx_synth_params p;
    cnx_synth_section_warp a, b, c;
    int64_t z;
    int k, gains_differ = 0;
    (void)state;
    small_params(&p, 7);
    assert_int_equal(p.distort_grid, 6);
    assert_true(p.distort_translation == 12.0 && p.distort_rotation == 0.01 &&
                p.distort_warp == 1.5);
    for (z = 0; z < SZ; z++) {
        assert_int_equal(cnx_synth_section_warp_draw(&a, &p, z), 0);
        assert_int_equal(cnx_synth_section_warp_draw(&b, &p, z), 0);
        assert_memory_equal(&a, &b, sizeof(a));
        assert_true(fabs(a.sin_angle) <= 0.01);
        assert_true(a.cos_angle == sqrt(1.0 - a.sin_angle * a.sin_angle));
        assert_true(fabs(a.translation[0]) <= 12.0);
        assert_true(fabs(a.translation[1]) <= 12.0);
        for (k = 0; k < 36; k++)
            assert_true(fabs(a.dx[k]) <= 1.5 && fabs(a.dy[k]) <= 1.5);
        assert_in_range(a.gain_milli, 900, 1100);
        assert_in_range(a.offset_milli + 10000, 0, 20000);
        assert_true(a.centre[0] == 47.5 && a.centre[1] == 39.5);
        assert_true(a.spacing[0] == 95.0 / 3.0 && a.origin[1] == -79.0 / 3.0);
        if (z > 0)
            gains_differ |= a.gain_milli != c.gain_milli;
        c = a;
    }
    assert_true(gains_differ);
    assert_int_equal(cnx_synth_section_warp_draw(&a, &p, 1), 0);
    assert_int_equal(cnx_synth_section_warp_draw(&b, &p, 2), 0);
    assert_true(a.sin_angle != b.sin_angle && a.dx[0] != b.dx[0]);
    p.seed = 8;
    assert_int_equal(cnx_synth_section_warp_draw(&c, &p, 1), 0);
    assert_true(c.translation[0] != a.translation[0]);
    assert_int_equal(cnx_synth_section_warp_draw(&c, &p, SZ), CNX_EINVAL);
    /* Strengths scale the draws. */
    small_params(&p, 7);
    p.distort_translation = 0.0;
    p.distort_warp = 0.0;
    assert_int_equal(cnx_synth_section_warp_draw(&c, &p, 1), 0);
    assert_true(c.translation[0] == 0.0 && c.dx[5] == 0.0);
    assert_true(c.sin_angle == a.sin_angle); /* same stream, same order */
}

/* The centred cubic B-spline kernel: an independent form of the basis. */
static double beta3(double x)
{
    const double a = fabs(x);
    if (a < 1.0)
        return 2.0 / 3.0 - a * a + a * a * a / 2.0;
    if (a < 2.0)
        return (2.0 - a) * (2.0 - a) * (2.0 - a) / 6.0;
    return 0.0;
}

static void test_synth__map_matches_an_independent_evaluation(void **state)
{
    static const double pts[][2] = {{0, 0},      {95, 79},  {47.5, 39.5},
                                    {10.25, 70}, {31.6, 3}, {95, 0},
                                    {63.3, 26.4}};
    cnx_synth_params p;
    cnx_synth_section_warp w;
    size_t n;
    (void)state;
    small_params(&p, 7);
    assert_int_equal(cnx_synth_section_warp_draw(&w, &p, 11), 0);
    for (n = 0; n < sizeof(pts) / sizeof(pts[0]); n++) {
        const double px = pts[n][0], py = pts[n][1];
        const double ux = px / w.spacing[0] + 1.0, uy = py / w.spacing[1] + 1.0;
        double th = asin(w.sin_angle), wx = 0, wy = 0, tx, ty, ex, ey;
        int i, j;
        for (j = 0; j < 6; j++)
            for (i = 0; i < 6; i++) {
                const double k = beta3(ux - i) * beta3(uy - j);
                wx += k * w.dx[j * 6 + i];
                wy += k * w.dy[j * 6 + i];
            }
        ex = 47.5 + cos(th) * (px - 47.5) - sin(th) * (py - 39.5) +
             w.translation[0] + wx;
        ey = 39.5 + sin(th) * (px - 47.5) + cos(th) * (py - 39.5) +
             w.translation[1] + wy;
        cnx_synth_section_map(&w, px, py, &tx, &ty);
        assert_true(fabs(tx - ex) < 1e-9);
        assert_true(fabs(ty - ey) < 1e-9);
    }
}

/* Mirror index and the documented bilinear / rounding / drift. */
static int64_t mirror(int64_t i, int64_t n)
{
    while (i < 0 || i >= n)
        i = i < 0 ? -i : 2 * (n - 1) - i;
    return i;
}

static void test_synth__distorted_section_samples_the_image_at_U(void **state)
{
    cnx_synth_params p;
    cnx_synth_section_warp w;
    const int64_t z = 9;
    const uint8_t *in = (const uint8_t *)shared->image->data + z * SX * SY;
    uint8_t *out = malloc(SX * SY);
    int64_t x, y, near = 0, exact = 0, interior = 0;
    (void)state;
    assert_non_null(out);
    small_params(&p, 7);
    assert_int_equal(cnx_synth_section_warp_draw(&w, &p, z), 0);
    assert_int_equal(cnx_synth_distort_section(out, in, &w), 0);
    for (y = 0; y < SY; y++)
        for (x = 0; x < SX; x++) {
            double ux, uy, fx, fy, x0, y0, top, bot, v;
            int64_t r, n, want;
            cnx_synth_section_map(&w, (double)x, (double)y, &ux, &uy);
            x0 = floor(ux);
            y0 = floor(uy);
            fx = ux - x0;
            fy = uy - y0;
            /* The documented arithmetic: equal everywhere, bit for bit. */
#define IN(yy, xx) ((double)in[mirror(yy, SY) * SX + mirror(xx, SX)])
            top = IN(y0, x0) + fx * (IN(y0, x0 + 1) - IN(y0, x0));
            bot = IN(y0 + 1, x0) + fx * (IN(y0 + 1, x0 + 1) - IN(y0 + 1, x0));
            v = top + fy * (bot - top);
            r = (int64_t)floor(v + 0.5);
            n = r * w.gain_milli + w.offset_milli + 500;
            want = n < 0 ? 0 : (n / 1000 > 255 ? 255 : n / 1000);
            assert_int_equal(out[y * SX + x], want);
            /* Away from the borders, against the weighted form of the
             * bilinear sample with a real drift: within one level. */
            if (ux >= 1 && uy >= 1 && ux <= SX - 2 && uy <= SY - 2) {
                const double s = (1 - fx) * (1 - fy) * IN(y0, x0) +
                                 fx * (1 - fy) * IN(y0, x0 + 1) +
                                 (1 - fx) * fy * IN(y0 + 1, x0) +
                                 fx * fy * IN(y0 + 1, x0 + 1);
                const double d = floor(s + 0.5) * (w.gain_milli / 1000.0) +
                                 w.offset_milli / 1000.0;
                const double c = d < 0 ? 0 : (d > 255 ? 255 : d);
                interior++;
                near += fabs(out[y * SX + x] - c) <= 1.0;
                exact += out[y * SX + x] == (int64_t)floor(c + 0.5);
            }
#undef IN
        }
    assert_true(interior > SX * SY / 2);
    assert_int_equal(near, interior);
    assert_true(exact * 100 >= interior * 99);
    /* It is a real distortion: most pixels moved. */
    assert_true(memcmp(out, in, SX * SY) != 0);
    free(out);
}

static void test_synth__intensity_drift_stays_in_bounds(void **state)
{
    cnx_synth_params p;
    cnx_synth_section_warp w;
    uint8_t in[16 * 12], out[16 * 12];
    int64_t z;
    size_t k;
    (void)state;
    small_params(&p, 7);
    p.shape[0] = 16;
    p.shape[1] = 12;
    memset(in, 128, sizeof(in));
    for (z = 0; z < SZ; z++) {
        assert_int_equal(cnx_synth_section_warp_draw(&w, &p, z), 0);
        assert_int_equal(cnx_synth_distort_section(out, in, &w), 0);
        for (k = 0; k < sizeof(out); k++) {
            /* round(128 g + o), g in 0.9..1.1, o in -10..10 */
            assert_in_range(out[k], 105, 151);
            assert_int_equal(out[k], out[0]); /* a flat image stays flat */
        }
    }
    memset(in, 250, sizeof(in));
    w.gain_milli = 1100;
    w.offset_milli = 10000;
    assert_int_equal(cnx_synth_distort_section(out, in, &w), 0);
    assert_int_equal(out[3], 255); /* clamped */
    memset(in, 3, sizeof(in));
    w.gain_milli = 900;
    w.offset_milli = -10000;
    assert_int_equal(cnx_synth_distort_section(out, in, &w), 0);
    assert_int_equal(out[3], 0);
}

static void test_synth__missing_sections_have_no_tiles(void **state)
{
    static const int64_t gone[] = {5, 2};
    cnx_synth alt = *shared;
    cnx_synth_params p;
    cnx_synth_tile *t = NULL;
    cnx_tileset *ts = NULL;
    size_t n = 1;
    int64_t all[SZ], z;
    char dir[64], path[128];
    (void)state;
    alt.params.missing = gone;
    alt.params.nmissing = 2;
    assert_int_equal(cnx_synth_params_check(&alt.params), 0);
    assert_true(cnx_synth_section_is_missing(&alt.params, 2));
    assert_false(cnx_synth_section_is_missing(&alt.params, 3));
    assert_int_equal(cnx_synth_tiles(&t, &n, &alt, 5), 0);
    assert_null(t);
    assert_int_equal(n, 0);
    assert_int_equal(cnx_synth_tiles(&t, &n, &alt, 3), 0);
    assert_true(n > 0);
    cnx_synth_tiles_free(t, n);
    /* Checked: in range, no repeats, not all. */
    small_params(&p, 7);
    p.missing = all;
    for (z = 0; z < SZ; z++)
        all[z] = z;
    p.nmissing = SZ;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "every section"));
    p.nmissing = SZ - 1;
    assert_int_equal(cnx_synth_params_check(&p), 0);
    all[1] = 0;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    all[1] = SZ;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    /* Written: the tile set leaves the section out, and still loads. */
    cnx_test_tmpdir(dir);
    cnx_synth_params_init(&p);
    p.shape[0] = 40;
    p.shape[1] = 36;
    p.shape[2] = 6;
    p.missing = gone + 1;
    p.nmissing = 1;
    {
        cnx_synth_summary sum;
        assert_int_equal(cnx_synth_run(&p, dir, 1, &sum), 0);
        assert_int_equal(sum.tiles, 5);
    }
    assert_true(file_exists(dir, "tiles/sections.json"));
    assert_false(file_exists(dir, "tiles/z00002/r00-c00.png"));
    assert_true(file_exists(dir, "tiles/z00003/r00-c00.png"));
    snprintf(path, sizeof(path), "%s/tiles/tiles.json", dir);
    assert_int_equal(cnx_tileset_load(&ts, path, CNX_TILESET_MAX_ERROR), 0);
    assert_int_equal(ts->nsections, 5);
    assert_int_equal(ts->sections[2].z, 3);
    cnx_tileset_free(ts);
    /* Other missing sections, or none: another dataset. */
    p.nmissing = 0;
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), CNX_EIMMUTABLE);
    p.distort = CNX_SYNTH_DISTORT_NONE;
    p.missing = gone + 1;
    p.nmissing = 1;
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), CNX_EIMMUTABLE);
    cnx_test_rmtree(dir);
}

static void test_synth__distort_settings_are_checked(void **state)
{
    cnx_synth_params p;
    cnx_synth_distort d = CNX_SYNTH_DISTORT_NONE;
    (void)state;
    cnx_synth_params_init(&p);
    assert_int_equal(p.distort, CNX_SYNTH_DISTORT_DEFAULT);
    p.distort_grid = 3;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "distort_grid"));
    p.distort_grid = CNX_SYNTH_WARP_GRID_MAX + 1;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    cnx_synth_params_init(&p);
    p.distort_rotation = NAN;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    cnx_synth_params_init(&p);
    p.distort_translation = -1;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    cnx_synth_params_init(&p);
    p.distort = (cnx_synth_distort)5;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_string_equal(cnx_synth_distort_name(CNX_SYNTH_DISTORT_NONE), "none");
    assert_int_equal(cnx_synth_distort_parse("default", &d), 0);
    assert_int_equal(d, CNX_SYNTH_DISTORT_DEFAULT);
    assert_int_equal(cnx_synth_distort_parse("Default", &d), CNX_EINVAL);
}

static void test_synth__tile_layout_overlaps_enough(void **state)
{
    cnx_synth_params p;
    cnx_synth_tile_grid g;
    (void)state;
    cnx_synth_params_init(&p);
    g = cnx_synth_tile_layout(&p); /* 256 x 256 sections */
    assert_int_equal(g.rows, 3);
    assert_int_equal(g.cols, 3);
    assert_int_equal(g.width, 128);
    assert_int_equal(g.height, 128);
    p.shape[0] = 1000;
    p.shape[1] = 100;
    g = cnx_synth_tile_layout(&p);
    assert_int_equal(g.rows, 1);
    assert_int_equal(g.height, 100);
    assert_int_equal(g.width, 128);
    /* Evenly spread, neighbours overlap by >= 15% + 2 x jitter. */
    assert_true((1000 - 128) / (g.cols - 1) + 1 <= 128 - 20 - 6);
}

static void test_synth__sections_cut_alike_in_any_order(void **state)
{
    cnx_synth_tile *a = NULL, *b = NULL, *c = NULL;
    size_t na, nb, nc, k;
    (void)state;
    assert_int_equal(cnx_synth_tiles(&a, &na, shared, 5), 0);
    assert_int_equal(cnx_synth_tiles(&b, &nb, shared, 3), 0);
    assert_int_equal(cnx_synth_tiles(&c, &nc, shared, 5), 0);
    assert_int_equal(na, nc);
    for (k = 0; k < na; k++) {
        assert_int_equal(a[k].x, c[k].x);
        assert_int_equal(a[k].nominal_y, c[k].nominal_y);
        assert_memory_equal(a[k].pixels, c[k].pixels, a[k].width * a[k].height);
    }
    /* Sections differ from each other. */
    assert_true(a[0].x != b[0].x || a[0].nominal_x != b[0].nominal_x ||
                a[0].gain_milli != b[0].gain_milli);
    cnx_synth_tiles_free(a, na);
    cnx_synth_tiles_free(b, nb);
    cnx_synth_tiles_free(c, nc);
    assert_int_equal(cnx_synth_tiles(&a, &na, shared, SZ), CNX_EINVAL);
    assert_null(a);
}

static void test_synth__bad_params_are_refused(void **state)
{
    cnx_synth_params p;
    cnx_synth *s = NULL;
    (void)state;
    cnx_synth_params_init(&p);
    assert_int_equal(cnx_synth_params_check(&p), 0);
    p.shape[1] = 0;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "shape y"));
    assert_int_equal(cnx_synth_generate(&s, &p), CNX_EINVAL);
    assert_null(s);
    p.shape[1] = 4097;
    assert_int_equal(cnx_synth_params_check(&p), CNX_ERANGE);
    p.shape[0] = p.shape[1] = p.shape[2] = 4096;
    assert_int_equal(cnx_synth_params_check(&p), CNX_ETOOBIG);
    cnx_synth_params_init(&p);
    p.seed = UINT64_MAX;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    cnx_synth_params_init(&p);
    p.resolution[2] = 0.0;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    cnx_synth_params_init(&p);
    p.radius_min = 11;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
}

static void hard_params(cnx_synth_params *p, uint64_t seed)
{
    cnx_synth_params_init(p);
    p->shape[0] = 64;
    p->shape[1] = 56;
    p->shape[2] = 24;
    p->resolution[2] = 30.0;
    p->style = CNX_SYNTH_STYLE_HARD;
    p->seed = seed;
}

/* Volumes smaller than a neurite still get a full labelling (1..nobjects
 * everywhere) in the given style. */
static void check_tiny_volumes(cnx_synth_style style)
{
    static const int64_t shapes[][3] = {{1, 1, 1}, {3, 40, 2}, {17, 5, 9}};
    size_t k;
    for (k = 0; k < sizeof(shapes) / sizeof(shapes[0]); k++) {
        cnx_synth_params p;
        cnx_synth *s = NULL;
        const uint64_t *gt;
        int64_t i, n = shapes[k][0] * shapes[k][1] * shapes[k][2];
        if (style == CNX_SYNTH_STYLE_HARD)
            hard_params(&p, 1);
        else
            cnx_synth_params_init(&p);
        memcpy(p.shape, shapes[k], sizeof(p.shape));
        assert_int_equal(cnx_synth_generate(&s, &p), 0);
        assert_true(s->nobjects >= 1);
        gt = s->gt->data;
        for (i = 0; i < n; i++)
            assert_true(gt[i] >= 1 && gt[i] <= s->nobjects);
        cnx_synth_free(s);
    }
}

static void test_synth__tiny_volumes_still_work(void **state)
{
    (void)state;
    check_tiny_volumes(CNX_SYNTH_STYLE_CLASSIC);
}

static int file_exists(const char *dir, const char *name)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void test_synth__run_is_write_once(void **state)
{
    cnx_synth_params p;
    cnx_synth_summary sum;
    cnx_tileset *ts = NULL;
    char dir[64], path[128];
    (void)state;
    cnx_test_tmpdir(dir);
    cnx_synth_params_init(&p);
    p.shape[0] = 40;
    p.shape[1] = 36;
    p.shape[2] = 6;
    assert_int_equal(cnx_synth_run(&p, dir, 1, &sum), 0);
    assert_true(sum.objects >= 1);
    assert_int_equal(sum.tiles, 6);
    assert_true(sum.files > 6 && sum.bytes > 0);
    assert_true(file_exists(dir, "synth.json"));
    assert_true(file_exists(dir, "gt/info"));
    assert_true(file_exists(dir, "gt/8_8_8/0-40_0-36_0-6"));
    assert_true(file_exists(dir, "image/8_8_8/0-40_0-36_0-6"));
    assert_true(file_exists(dir, "gt-synapses.json"));
    assert_true(file_exists(dir, "tiles/tiles.json"));
    assert_true(file_exists(dir, "tiles/truth.json"));
    assert_true(file_exists(dir, "tiles/z00005/r00-c00.png"));
    /* The tile set passes the checks cnx-ingest applies. */
    snprintf(path, sizeof(path), "%s/tiles/tiles.json", dir);
    assert_int_equal(cnx_tileset_load(&ts, path, CNX_TILESET_MAX_ERROR), 0);
    assert_int_equal(ts->nsections, 6);
    assert_int_equal(ts->sections[5].z, 5);
    assert_int_equal(ts->sections[5].ntiles, 1);
    assert_int_equal(ts->sections[5].tiles[0].width, 40);
    cnx_tileset_free(ts);
    /* The same dataset again is a no-op; another one is refused. */
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), 0);
    p.seed = 2;
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), CNX_EIMMUTABLE);
    assert_non_null(strstr(cnx_error_last()->message, "different dataset"));
    cnx_test_rmtree(dir);
}

static void test_synth__style_and_chunk_are_checked(void **state)
{
    cnx_synth_params p;
    cnx_synth_style style = CNX_SYNTH_STYLE_CLASSIC;
    (void)state;
    cnx_synth_params_init(&p);
    assert_int_equal(p.style, CNX_SYNTH_STYLE_CLASSIC);
    assert_int_equal(p.chunk[0], 128);
    assert_int_equal(p.chunk[2], 128);
    p.chunk[1] = 0;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "chunk y"));
    p.chunk[1] = CNX_SYNTH_MAX_CHUNK + 1;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    p.chunk[1] = CNX_SYNTH_MAX_CHUNK;
    assert_int_equal(cnx_synth_params_check(&p), 0);
    p.style = (cnx_synth_style)7;
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    p.style = CNX_SYNTH_STYLE_HARD;
    assert_int_equal(cnx_synth_params_check(&p), 0);
    p.resolution[2] = 1.5; /* the hard style's geometry needs 2..200 nm */
    assert_int_equal(cnx_synth_params_check(&p), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "resolution z"));
    p.style = CNX_SYNTH_STYLE_CLASSIC;
    assert_int_equal(cnx_synth_params_check(&p), 0);
    assert_string_equal(cnx_synth_style_name(CNX_SYNTH_STYLE_HARD), "hard");
    assert_null(cnx_synth_style_name((cnx_synth_style)2));
    assert_int_equal(cnx_synth_style_parse("hard", &style), 0);
    assert_int_equal(style, CNX_SYNTH_STYLE_HARD);
    assert_int_equal(cnx_synth_style_parse("Hard", &style), CNX_EINVAL);
    assert_int_equal(style, CNX_SYNTH_STYLE_HARD);
}

static void test_synth__hard_style_is_deterministic_and_labels_all(void **state)
{
    cnx_synth_params p;
    cnx_synth *a = NULL, *b = NULL, *c = NULL;
    const int64_t n = 64 * 56 * 24;
    const uint64_t *gt;
    int64_t i, zfaces = 0, xfaces = 0;
    (void)state;
    hard_params(&p, 3);
    assert_int_equal(cnx_synth_generate(&a, &p), 0);
    assert_int_equal(cnx_synth_generate(&b, &p), 0);
    p.chunk[0] = 16; /* the volumes do not depend on the chunking */
    assert_int_equal(cnx_synth_generate(&c, &p), 0);
    assert_true(a->nobjects >= 5);
    assert_int_equal(a->nobjects, b->nobjects);
    assert_memory_equal(a->gt->data, b->gt->data, (size_t)n * 8);
    assert_memory_equal(a->gt->data, c->gt->data, (size_t)n * 8);
    assert_memory_equal(a->image->data, b->image->data, (size_t)n);
    assert_memory_equal(a->boundary->data, c->boundary->data, (size_t)n);
    assert_memory_equal(a->cleft->data, b->cleft->data, (size_t)n);
    assert_memory_equal(a->psd->data, b->psd->data, (size_t)n);
    assert_int_equal(a->nsynapses, b->nsynapses);
    for (i = 0; i < (int64_t)a->nsynapses; i++) {
        assert_int_equal(a->synapses[i].radius, 0);
        assert_in_range(a->synapses[i].radius_nm, 32, 48);
    }
    gt = a->gt->data;
    for (i = 0; i < n; i++)
        assert_true(gt[i] >= 1 && gt[i] <= a->nobjects);
    /* Geometry in nm: 30 nm sections cut objects about 30/8 times as often
     * per voxel step as 8 nm pixels do (classic geometry: about as often). */
    for (i = 0; i < n; i++) {
        if (i % 64 != 63 && gt[i] != gt[i + 1])
            xfaces++;
        if (i + 64 * 56 < n && gt[i] != gt[i + 64 * 56])
            zfaces++;
    }
    assert_true(zfaces * 10 > xfaces * 20);
    cnx_synth_free(a);
    cnx_synth_free(b);
    cnx_synth_free(c);
}

static void test_synth__hard_tiny_volumes_still_work(void **state)
{
    (void)state;
    check_tiny_volumes(CNX_SYNTH_STYLE_HARD);
}

static void test_synth__run_writes_the_chunks_asked_for(void **state)
{
    cnx_synth_params p;
    char dir[64];
    (void)state;
    cnx_test_tmpdir(dir);
    cnx_synth_params_init(&p);
    p.shape[0] = 40;
    p.shape[1] = 36;
    p.shape[2] = 6;
    p.chunk[0] = 16;
    p.chunk[1] = 36;
    p.chunk[2] = 4;
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), 0);
    assert_true(file_exists(dir, "gt/8_8_8/0-16_0-36_0-4"));
    assert_true(file_exists(dir, "gt/8_8_8/32-40_0-36_4-6"));
    assert_true(file_exists(dir, "psd/8_8_8/16-32_0-36_0-4"));
    assert_false(file_exists(dir, "gt/8_8_8/0-40_0-36_0-6"));
    /* Other chunks into the same directory: another dataset. */
    p.chunk[0] = 8;
    assert_int_equal(cnx_synth_run(&p, dir, 1, NULL), CNX_EIMMUTABLE);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth__same_seed_gives_identical_bytes),
        cmocka_unit_test(test_synth__different_seed_differs),
        cmocka_unit_test(test_synth__every_voxel_has_a_label_from_1_to_n),
        cmocka_unit_test(test_synth__each_object_is_one_component),
        cmocka_unit_test(test_synth__objects_are_not_convex_blobs),
        cmocka_unit_test(test_synth__objects_touch_many_neighbours),
        cmocka_unit_test(test_synth__membranes_are_dark_interiors_bright),
        cmocka_unit_test(test_synth__boundary_is_high_on_membranes),
        cmocka_unit_test(test_synth__synapse_sites_lie_in_their_partners),
        cmocka_unit_test(test_synth__cleft_high_at_sites_and_only_near_them),
        cmocka_unit_test(test_synth__psd_lies_on_the_post_side),
        cmocka_unit_test(test_synth__tiles_cover_the_section_near_their_truth),
        cmocka_unit_test(test_synth__distort_none_cuts_tiles_from_the_image),
        cmocka_unit_test(test_synth__warp_draws_are_deterministic_and_bounded),
        cmocka_unit_test(test_synth__map_matches_an_independent_evaluation),
        cmocka_unit_test(test_synth__distorted_section_samples_the_image_at_U),
        cmocka_unit_test(test_synth__intensity_drift_stays_in_bounds),
        cmocka_unit_test(test_synth__missing_sections_have_no_tiles),
        cmocka_unit_test(test_synth__distort_settings_are_checked),
        cmocka_unit_test(test_synth__tile_layout_overlaps_enough),
        cmocka_unit_test(test_synth__sections_cut_alike_in_any_order),
        cmocka_unit_test(test_synth__bad_params_are_refused),
        cmocka_unit_test(test_synth__tiny_volumes_still_work),
        cmocka_unit_test(test_synth__run_is_write_once),
        cmocka_unit_test(test_synth__style_and_chunk_are_checked),
        cmocka_unit_test(test_synth__hard_style_is_deterministic_and_labels_all),
        cmocka_unit_test(test_synth__hard_tiny_volumes_still_work),
        cmocka_unit_test(test_synth__run_writes_the_chunks_asked_for),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
