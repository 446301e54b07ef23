/*
 * Synthetic dataset kernel: determinism, the shape of the objects, the
 * appearance of each layer, synapse ground truth, montage tiles, parameter
 * checks, and the writer's write-once behaviour. One dataset of 96x80x48
 * is generated once for the read-only tests. The hard style and --chunk
 * get their own small tests here; tests/py/synth_check.py measures the
 * hard style's geometry and maps (tests/integration/synth.sh).
 */
#include "cnx_test.h"

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

static void test_synth__tiles_cover_the_section_near_their_truth(void **state)
{
    const cnx_synth_params *p = &shared->params;
    const cnx_synth_tile_grid g = cnx_synth_tile_layout(p);
    const int64_t zs[3] = {0, SZ / 2, SZ - 1};
    int i;
    (void)state;
    for (i = 0; i < 3; i++) {
        const uint8_t *plane =
            (const uint8_t *)shared->image->data + zs[i] * SX * SY;
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
    }
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
