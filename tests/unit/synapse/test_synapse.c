/*
 * test_synapse.c - the synapse kernel (cnx/synapse.h) against constructed
 * volumes, a naive reference model, and cnx-synth ground truth.
 *
 * Parameters: defaults, every key, the exact message for an unknown key, a
 * wrong type and a value out of range. Constructed: a slab cleft between
 * two segments with a PSD on one side gives its centre as the site, the
 * partners, partner sites inside them and an exact score; 26-connectivity
 * joins diagonal voxels; min_size drops small clefts (counted). Reference
 * model: on random volumes, components (flood fill), sizes and sites
 * (brute-force distance to the nearest non-component voxel, centroid and
 * raster ties) equal the kernel's. cnx-synth (128^3): every true synapse
 * is found once with its partners and a site within 5 voxels, nothing
 * else is; a 2x2x2 split with halo 16 in either order gives the whole-
 * volume bytes; a small halo never reports a cleft twice. Tables round-trip;
 * the reader names the line of each malformed one; edges; bad blocks are
 * refused.
 */
#include "cnx/error.h"
#include "cnx/synapse_io.h"
#include "cnx/synth.h"
#include "cnx_test.h"

/* ---- parameters --------------------------------------------------------- */

static void test_synapse__defaults(void **state)
{
    cnx_synapse_params p, q;
    (void)state;
    cnx_synapse_params_default(&p);
    assert_int_equal(p.cleft_threshold, 128);
    assert_int_equal(p.psd_threshold, 128);
    assert_int_equal(p.min_size, 20);
    assert_int_equal(p.partner_radius, 4);
    assert_int_equal(cnx_synapse_params_check(&p), 0);
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_synapse_params_parse(NULL, &q), 0);
    assert_memory_equal(&p, &q, sizeof(p));
    memset(&q, 0x5A, sizeof(q));
    assert_int_equal(cnx_synapse_params_parse("{}", &q), 0);
    assert_memory_equal(&p, &q, sizeof(p));
}

static void test_synapse__parse_every_key(void **state)
{
    cnx_synapse_params p;
    (void)state;
    assert_int_equal(cnx_synapse_params_parse(
                         "{\"cleft_threshold\":1,\"psd_threshold\":255,"
                         "\"min_size\":2147483648,\"partner_radius\":16}",
                         &p),
                     0);
    assert_int_equal(p.cleft_threshold, 1);
    assert_int_equal(p.psd_threshold, 255);
    assert_int_equal(p.min_size, (int64_t)1 << 31);
    assert_int_equal(p.partner_radius, 16);
}

static const struct {
    const char *json;
    const char *message;
} bad_params[] = {
    {"{\"cleft_treshold\":3}",
     "synapses: parameters: unknown key 'cleft_treshold'"},
    {"{\"zz\":1,\"aa\":2}", "synapses: parameters: unknown key 'zz'"},
    {"{\"cleft_threshold\":0}",
     "synapses: parameters.cleft_threshold: must be an integer in [1, 255]"},
    {"{\"cleft_threshold\":128.0}",
     "synapses: parameters.cleft_threshold: must be an integer in [1, 255]"},
    {"{\"psd_threshold\":256}",
     "synapses: parameters.psd_threshold: must be an integer in [1, 255]"},
    {"{\"psd_threshold\":\"128\"}",
     "synapses: parameters.psd_threshold: must be an integer in [1, 255]"},
    {"{\"min_size\":-1}",
     "synapses: parameters.min_size: must be an integer in [0, 2147483648]"},
    {"{\"partner_radius\":0}",
     "synapses: parameters.partner_radius: must be an integer in [1, 16]"},
    {"{\"partner_radius\":17}",
     "synapses: parameters.partner_radius: must be an integer in [1, 16]"},
    {"{\"partner_radius\":null}",
     "synapses: parameters.partner_radius: must be an integer in [1, 16]"},
    {"[]", "synapses: parameters: must be an object"},
};

static void test_synapse__parse_refuses_bad_values(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_params) / sizeof(bad_params[0]); i++) {
        cnx_synapse_params p, before;
        memset(&p, 0x33, sizeof(p));
        before = p;
        int rc = cnx_synapse_params_parse(bad_params[i].json, &p);
        if (rc != CNX_ESCHEMA)
            fail_msg("%s: rc %d", bad_params[i].json, rc);
        assert_string_equal(cnx_error_last()->message, bad_params[i].message);
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_memory_equal(&p, &before, sizeof(p));
    }
    cnx_synapse_params p;
    assert_int_equal(cnx_synapse_params_parse("{\"min_size\":", &p),
                     CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "synapses: parameters"));
    cnx_synapse_params_default(&p);
    p.partner_radius = 0;
    assert_int_equal(cnx_synapse_params_check(&p), CNX_EINVAL);
    assert_string_equal(cnx_error_last()->message,
                        "synapses: partner_radius: out of range");
}

/* ---- constructed volumes ------------------------------------------------ */

/* Volumes over one box, all owned by the test. */
typedef struct vols {
    int64_t size[3];
    size_t n;
    uint8_t *cleft, *psd;
    uint64_t *seg;
} vols;

static vols vols_new(int64_t x, int64_t y, int64_t z)
{
    vols v = {{x, y, z}, (size_t)(x * y * z), NULL, NULL, NULL};
    v.cleft = calloc(v.n, 1);
    v.psd = calloc(v.n, 1);
    v.seg = calloc(v.n, sizeof(*v.seg));
    assert_non_null(v.cleft);
    assert_non_null(v.psd);
    assert_non_null(v.seg);
    return v;
}

static void vols_free(vols *v)
{
    free(v->cleft);
    free(v->psd);
    free(v->seg);
}

static size_t at(const vols *v, int64_t x, int64_t y, int64_t z)
{
    return (size_t)(x + v->size[0] * (y + v->size[1] * z));
}

/* The whole volume as one block (bounds = read box = own). */
static cnx_synapse_block whole_block(const vols *v)
{
    cnx_synapse_block b;
    memset(&b, 0, sizeof(b));
    b.cleft = v->cleft;
    b.psd = v->psd;
    b.seg = v->seg;
    for (int i = 0; i < 3; i++) {
        b.size[i] = v->size[i];
        b.own.max[i] = b.bounds.max[i] = v->size[i];
        b.resolution[i] = 8.0;
    }
    return b;
}

static void detect_ok(const cnx_synapse_block *b, const cnx_synapse_params *p,
                      cnx_synapse **s, size_t *n, cnx_synapse_stats *st)
{
    int rc = cnx_synapse_detect(b, p, s, n, st);
    if (rc != 0)
        fail_msg("cnx_synapse_detect: %d %s", rc, cnx_error_last()->message);
}

/* A slab cleft x in [10, 20), y in [8, 18), z in {11, 12} between segment
 * 5 (z < 12) and segment 9 (z >= 12); psd on segment 9's side, z 12..14;
 * cleft value 200 (one voxel 150). */
static void slab(vols *v)
{
    for (int64_t z = 0; z < v->size[2]; z++)
        for (int64_t y = 0; y < v->size[1]; y++)
            for (int64_t x = 0; x < v->size[0]; x++) {
                const size_t i = at(v, x, y, z);
                const int in = x >= 10 && x < 20 && y >= 8 && y < 18;
                v->seg[i] = z < 12 ? 5 : 9;
                if (in && (z == 11 || z == 12))
                    v->cleft[i] = 200;
                if (in && z >= 12 && z <= 14)
                    v->psd[i] = 220;
            }
    v->cleft[at(v, 10, 8, 11)] = 150;
}

static void test_synapse__slab_cleft(void **state)
{
    vols v = vols_new(32, 28, 24);
    cnx_synapse_params p;
    cnx_synapse_block b;
    cnx_synapse *s = NULL;
    cnx_synapse_stats st;
    size_t n = 0;
    (void)state;
    slab(&v);
    cnx_synapse_params_default(&p);
    b = whole_block(&v);
    detect_ok(&b, &p, &s, &n, &st);
    assert_int_equal(n, 1);
    assert_int_equal(st.components, 1);
    assert_int_equal(st.too_small + st.truncated + st.owned_elsewhere, 0);
    /* Every voxel of a 2-thick slab is 1 from the background: the site is
     * the voxel nearest the centroid (14.5, 12.5, 11.5): (14, 12, 11),
     * the first in raster order of the eight equally near ones. */
    assert_int_equal(s[0].site[0], 14);
    assert_int_equal(s[0].site[1], 12);
    assert_int_equal(s[0].site[2], 11);
    assert_int_equal(s[0].id, cnx_synapse_id(14, 12, 11));
    assert_int_equal(s[0].size, 200);
    assert_int_equal(s[0].post_id, 9);
    assert_int_equal(s[0].pre_id, 5);
    /* Partner sites: the deepest counted voxel (4 from the cleft) nearest
     * the site; post only where psd is high (z <= 14, 2 from the cleft). */
    assert_int_equal(s[0].pre_site[0], 14);
    assert_int_equal(s[0].pre_site[1], 12);
    assert_int_equal(s[0].pre_site[2], 7);
    assert_int_equal(s[0].post_site[0], 14);
    assert_int_equal(s[0].post_site[1], 12);
    assert_int_equal(s[0].post_site[2], 14);
    assert_int_equal(v.seg[at(&v, 14, 12, 7)], 5);
    assert_int_equal(v.seg[at(&v, 14, 12, 14)], 9);
    /* Score: mean cleft (199 * 200 + 150) / 200 / 255 = 0.783333 (to 1e-6)
     * times the psd fraction on post (all of it). */
    assert_true(s[0].score == 0.783333);
    free(s);

    /* Raise min_size over 200: dropped and counted. */
    p.min_size = 201;
    detect_ok(&b, &p, &s, &n, &st);
    assert_int_equal(n, 0);
    assert_null(s);
    assert_int_equal(st.components, 1);
    assert_int_equal(st.too_small, 1);
    vols_free(&v);
}

static void test_synapse__diagonal_voxels_join(void **state)
{
    vols v = vols_new(8, 8, 8);
    cnx_synapse_params p;
    cnx_synapse_block b;
    cnx_synapse *s = NULL;
    cnx_synapse_stats st;
    size_t n = 0;
    (void)state;
    cnx_synapse_params_default(&p);
    p.min_size = 0;
    /* A 3D diagonal chain (corner-adjacent only) is one component. */
    for (int k = 0; k < 5; k++)
        v.cleft[at(&v, 1 + k, 5 - k, 2 + k)] = 255;
    /* Plus a separate voxel, two apart from the chain. */
    v.cleft[at(&v, 7, 7, 0)] = 128;
    b = whole_block(&v);
    detect_ok(&b, &p, &s, &n, &st);
    assert_int_equal(st.components, 2);
    assert_int_equal(n, 2);
    assert_int_equal(s[0].size, 1); /* (7, 7, 0): lower id, z = 0 */
    assert_int_equal(s[1].size, 5);
    /* No segment labels anywhere: no partners, sites at the site. */
    assert_int_equal(s[1].pre_id, 0);
    assert_int_equal(s[1].post_id, 0);
    assert_memory_equal(s[1].pre_site, s[1].site, sizeof(s[1].site));
    assert_true(s[1].score == 0.0);
    free(s);
    /* The threshold is inclusive: 129 drops the 128 voxel. */
    p.cleft_threshold = 129;
    detect_ok(&b, &p, &s, &n, &st);
    assert_int_equal(n, 1);
    free(s);
    vols_free(&v);
}

/* ---- reference model ---------------------------------------------------- */

/* Naive: flood fill (26) from each unlabelled cleft voxel in raster order;
 * site = brute-force max of the squared distance to the nearest
 * non-component voxel (outside the volume counts), ties to the centroid
 * (rounded to 1/256) and raster order. */
typedef struct ref_comp {
    int64_t size, site[3];
} ref_comp;

static size_t reference(const vols *v, int t, ref_comp *out, size_t cap)
{
    const int64_t sx = v->size[0], sy = v->size[1], sz = v->size[2];
    int32_t *lab = calloc(v->n, sizeof(*lab));
    size_t *stack = malloc(v->n * sizeof(*stack));
    size_t nc = 0;
    assert_non_null(lab);
    assert_non_null(stack);
    for (size_t i0 = 0; i0 < v->n; i0++) {
        size_t top = 0;
        int64_t lo[3] = {sx, sy, sz}, hi[3] = {-1, -1, -1}, sum[3] = {0, 0, 0};
        int64_t best_d = -1, best_t = 0, cent[3], size = 0;
        if (v->cleft[i0] < t || lab[i0] != 0)
            continue;
        assert_true(nc < cap);
        lab[i0] = (int32_t)(nc + 1);
        stack[top++] = i0;
        while (top > 0) {
            const size_t i = stack[--top];
            const int64_t p[3] = {(int64_t)i % sx, (int64_t)i / sx % sy,
                                  (int64_t)i / sx / sy};
            size++;
            for (int a = 0; a < 3; a++) {
                sum[a] += p[a];
                lo[a] = p[a] < lo[a] ? p[a] : lo[a];
                hi[a] = p[a] > hi[a] ? p[a] : hi[a];
            }
            for (int dz = -1; dz <= 1; dz++)
                for (int dy = -1; dy <= 1; dy++)
                    for (int dx = -1; dx <= 1; dx++) {
                        const int64_t x = p[0] + dx, y = p[1] + dy,
                                      z = p[2] + dz;
                        size_t j;
                        if (x < 0 || y < 0 || z < 0 || x >= sx || y >= sy ||
                            z >= sz)
                            continue;
                        j = (size_t)(x + sx * (y + sy * z));
                        if (v->cleft[j] >= t && lab[j] == 0) {
                            lab[j] = (int32_t)(nc + 1);
                            stack[top++] = j;
                        }
                    }
        }
        for (int a = 0; a < 3; a++)
            cent[a] = (256 * sum[a] + size / 2) / size;
        for (int64_t z = lo[2]; z <= hi[2]; z++)
            for (int64_t y = lo[1]; y <= hi[1]; y++)
                for (int64_t x = lo[0]; x <= hi[0]; x++) {
                    int64_t dmin = INT64_MAX, tie;
                    if (lab[x + sx * (y + sy * z)] != (int32_t)(nc + 1))
                        continue;
                    for (int64_t zz = lo[2] - 1; zz <= hi[2] + 1; zz++)
                        for (int64_t yy = lo[1] - 1; yy <= hi[1] + 1; yy++)
                            for (int64_t xx = lo[0] - 1; xx <= hi[0] + 1;
                                 xx++) {
                                int64_t d;
                                int in = xx >= 0 && yy >= 0 && zz >= 0 &&
                                         xx < sx && yy < sy && zz < sz &&
                                         lab[xx + sx * (yy + sy * zz)] ==
                                             (int32_t)(nc + 1);
                                if (in)
                                    continue;
                                d = (xx - x) * (xx - x) + (yy - y) * (yy - y) +
                                    (zz - z) * (zz - z);
                                dmin = d < dmin ? d : dmin;
                            }
                    tie = (256 * x - cent[0]) * (256 * x - cent[0]) +
                          (256 * y - cent[1]) * (256 * y - cent[1]) +
                          (256 * z - cent[2]) * (256 * z - cent[2]);
                    if (dmin > best_d || (dmin == best_d && tie < best_t)) {
                        best_d = dmin;
                        best_t = tie;
                        out[nc].site[0] = x;
                        out[nc].site[1] = y;
                        out[nc].site[2] = z;
                    }
                }
        out[nc].size = size;
        nc++;
    }
    free(stack);
    free(lab);
    return nc;
}

static int cmp_ref(const void *a, const void *b)
{
    const ref_comp *x = a, *y = b;
    const uint64_t i = cnx_synapse_id(x->site[0], x->site[1], x->site[2]);
    const uint64_t j = cnx_synapse_id(y->site[0], y->site[1], y->site[2]);
    return (i > j) - (i < j);
}

static void test_synapse__matches_reference_model(void **state)
{
    uint64_t rng = 99;
    (void)state;
    for (int round = 0; round < 12; round++) {
        vols v = vols_new(17 + round % 5, 14 + round % 3, 11 + round % 4);
        ref_comp ref[4096];
        cnx_synapse_params p;
        cnx_synapse_block b;
        cnx_synapse *s = NULL;
        cnx_synapse_stats st;
        size_t n = 0, nref;
        /* Random balls of random values: lumpy components, some touching
         * the volume's faces. */
        for (int k = 0; k < 6 + round; k++) {
            const int64_t cx = (int64_t)(cnx_test_rand(&rng) % 20),
                          cy = (int64_t)(cnx_test_rand(&rng) % 16),
                          cz = (int64_t)(cnx_test_rand(&rng) % 14);
            const int64_t r2 = 1 + (int64_t)(cnx_test_rand(&rng) % 12);
            for (int64_t z = 0; z < v.size[2]; z++)
                for (int64_t y = 0; y < v.size[1]; y++)
                    for (int64_t x = 0; x < v.size[0]; x++)
                        if ((x - cx) * (x - cx) + (y - cy) * (y - cy) +
                                (z - cz) * (z - cz) <=
                            r2)
                            v.cleft[at(&v, x, y, z)] =
                                (uint8_t)(cnx_test_rand(&rng) % 256);
        }
        for (size_t i = 0; i < v.n; i++)
            v.seg[i] = 1 + cnx_test_rand(&rng) % 3;
        cnx_synapse_params_default(&p);
        p.min_size = 0;
        p.cleft_threshold = 60;
        b = whole_block(&v);
        detect_ok(&b, &p, &s, &n, &st);
        nref = reference(&v, 60, ref, 4096);
        qsort(ref, nref, sizeof(ref[0]), cmp_ref);
        assert_int_equal(st.components, (int64_t)nref);
        assert_int_equal(n, nref);
        for (size_t k = 0; k < n; k++) {
            assert_int_equal(s[k].size, ref[k].size);
            assert_memory_equal(s[k].site, ref[k].site, sizeof(ref[k].site));
            assert_true(s[k].pre_id != s[k].post_id || s[k].pre_id == 0);
        }
        free(s);
        vols_free(&v);
    }
}

/* ---- cnx-synth ---------------------------------------------------------- */

static cnx_synth *synth;

static int synth_setup(void **state)
{
    cnx_synth_params sp;
    (void)state;
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = sp.shape[2] = 128;
    sp.seed = 3;
    sp.synapses_per_mvx = 8;
    return cnx_synth_generate(&synth, &sp) == 0 && synth->nsynapses >= 10 ? 0
                                                                          : -1;
}

static int synth_teardown(void **state)
{
    (void)state;
    cnx_synth_free(synth);
    synth = NULL;
    return 0;
}

/* The synth volumes over box, copied (the block's read box). */
typedef struct crop {
    uint8_t *cleft, *psd;
    uint64_t *seg;
} crop;

static crop crop_of(const cnx_box *box)
{
    const int64_t *S = synth->params.shape;
    int64_t sz[3];
    size_t k = 0;
    crop c;
    cnx_box_size(box, sz);
    c.cleft = malloc((size_t)(sz[0] * sz[1] * sz[2]));
    c.psd = malloc((size_t)(sz[0] * sz[1] * sz[2]));
    c.seg = malloc((size_t)(sz[0] * sz[1] * sz[2]) * sizeof(uint64_t));
    assert_non_null(c.cleft);
    assert_non_null(c.psd);
    assert_non_null(c.seg);
    for (int64_t z = box->min[2]; z < box->max[2]; z++)
        for (int64_t y = box->min[1]; y < box->max[1]; y++)
            for (int64_t x = box->min[0]; x < box->max[0]; x++, k++) {
                const size_t i = (size_t)(x + S[0] * (y + S[1] * z));
                c.cleft[k] = ((const uint8_t *)synth->cleft->data)[i];
                c.psd[k] = ((const uint8_t *)synth->psd->data)[i];
                c.seg[k] = ((const uint64_t *)synth->gt->data)[i];
            }
    return c;
}

static void crop_free(crop *c)
{
    free(c->cleft);
    free(c->psd);
    free(c->seg);
}

/* Detect in the chunk own of the synth volume with the given halo. */
static void detect_chunk(const cnx_box *own, int64_t halo,
                         const cnx_synapse_params *p, cnx_synapse **s,
                         size_t *n, cnx_synapse_stats *st)
{
    const int64_t *S = synth->params.shape;
    cnx_box bounds = cnx_box_make(0, 0, 0, S[0], S[1], S[2]);
    cnx_box read = cnx_box_grow(own, halo, &bounds);
    crop c = crop_of(&read);
    cnx_synapse_block b;
    memset(&b, 0, sizeof(b));
    b.cleft = c.cleft;
    b.psd = c.psd;
    b.seg = c.seg;
    for (int i = 0; i < 3; i++) {
        b.origin[i] = read.min[i];
        b.size[i] = read.max[i] - read.min[i];
        b.resolution[i] = synth->params.resolution[i];
    }
    b.own = *own;
    b.bounds = bounds;
    detect_ok(&b, p, s, n, st);
    crop_free(&c);
}

static char *table(const cnx_synapse *s, size_t n)
{
    char *t = NULL;
    size_t len = 0;
    assert_int_equal(
        cnx_synapse_table_json(s, n, synth->params.resolution, &t, &len), 0);
    assert_int_equal(strlen(t), len);
    return t;
}

static void test_synapse__synth_matches_ground_truth(void **state)
{
    const int64_t *S = synth->params.shape;
    const uint64_t *gt = synth->gt->data;
    cnx_box all = cnx_box_make(0, 0, 0, S[0], S[1], S[2]);
    cnx_synapse_params p;
    cnx_synapse *s = NULL;
    cnx_synapse_stats st;
    size_t n = 0;
    int *used;
    (void)state;
    cnx_synapse_params_default(&p);
    detect_chunk(&all, 0, &p, &s, &n, &st);
    used = calloc(n + 1, sizeof(*used));
    assert_non_null(used);
    assert_int_equal(n, synth->nsynapses);
    assert_int_equal(st.truncated, 0);
    assert_int_equal(st.owned_elsewhere, 0);
    for (size_t g = 0; g < synth->nsynapses; g++) {
        const cnx_synth_synapse *t = &synth->synapses[g];
        size_t hit = n;
        for (size_t k = 0; k < n; k++) {
            int64_t d2 = 0;
            for (int i = 0; i < 3; i++)
                d2 += (s[k].site[i] - t->site[i]) * (s[k].site[i] - t->site[i]);
            if (d2 <= 25)
                hit = k;
        }
        if (hit == n)
            fail_msg("true synapse %llu at (%lld, %lld, %lld) not found",
                     (unsigned long long)t->id, (long long)t->site[0],
                     (long long)t->site[1], (long long)t->site[2]);
        assert_int_equal(used[hit], 0);
        used[hit] = 1;
        assert_int_equal(s[hit].pre_id, t->pre_id);
        assert_int_equal(s[hit].post_id, t->post_id);
        assert_int_equal(
            gt[s[hit].pre_site[0] +
               S[0] * (s[hit].pre_site[1] + S[1] * s[hit].pre_site[2])],
            t->pre_id);
        assert_int_equal(
            gt[s[hit].post_site[0] +
               S[0] * (s[hit].post_site[1] + S[1] * s[hit].post_site[2])],
            t->post_id);
        assert_true(s[hit].score > 0.5 && s[hit].score <= 1.0);
        /* Sorted by id, ids from sites. */
        assert_int_equal(
            s[hit].id,
            cnx_synapse_id(s[hit].site[0], s[hit].site[1], s[hit].site[2]));
    }
    for (size_t k = 1; k < n; k++)
        assert_true(s[k - 1].id < s[k].id);
    free(used);
    free(s);
}

/* Run the 2x2x2 split at (53, 70, 61) in the given order, every chunk's
 * table into tables[k] (k the chunk's index in forward order); return the
 * merged table (sorted by id). */
static char *chunked(int64_t halo, int reverse, char *tables[8],
                     cnx_synapse_stats *sum)
{
    const int64_t *S = synth->params.shape;
    const int64_t cut[3] = {53, 70, 61};
    cnx_synapse_params p;
    cnx_synapse *all = NULL;
    size_t nall = 0;
    char *t;
    cnx_synapse_params_default(&p);
    memset(sum, 0, sizeof(*sum));
    for (int j = 0; j < 8; j++) {
        const int k = reverse ? 7 - j : j;
        cnx_box own;
        cnx_synapse *s = NULL;
        cnx_synapse_stats st;
        size_t n = 0;
        for (int i = 0; i < 3; i++) {
            const int hi = (k >> i) & 1;
            own.min[i] = hi ? cut[i] : 0;
            own.max[i] = hi ? S[i] : cut[i];
        }
        detect_chunk(&own, halo, &p, &s, &n, &st);
        sum->components += st.components;
        sum->too_small += st.too_small;
        sum->truncated += st.truncated;
        sum->owned_elsewhere += st.owned_elsewhere;
        tables[k] = table(s, n);
        all = realloc(all, (nall + n + 1) * sizeof(*all));
        assert_non_null(all);
        if (n > 0)
            memcpy(all + nall, s, n * sizeof(*s));
        nall += n;
        free(s);
    }
    /* Merge: sort by id; an id twice would be a cleft reported twice. */
    for (size_t i = 1; i < nall; i++)
        for (size_t j = i; j > 0 && all[j - 1].id >= all[j].id; j--) {
            cnx_synapse tmp = all[j];
            assert_true(all[j - 1].id != all[j].id);
            all[j] = all[j - 1];
            all[j - 1] = tmp;
        }
    t = table(all, nall);
    free(all);
    return t;
}

static void test_synapse__chunked_equals_whole_in_any_order(void **state)
{
    const int64_t *S = synth->params.shape;
    cnx_box allbox = cnx_box_make(0, 0, 0, S[0], S[1], S[2]);
    cnx_synapse_params p;
    cnx_synapse *s = NULL;
    cnx_synapse_stats st, fwd_st, rev_st;
    size_t n = 0;
    char *fwd[8], *rev[8], *whole, *tf, *tr;
    (void)state;
    cnx_synapse_params_default(&p);
    detect_chunk(&allbox, 0, &p, &s, &n, &st);
    whole = table(s, n);
    free(s);
    tf = chunked(16, 0, fwd, &fwd_st);
    tr = chunked(16, 1, rev, &rev_st);
    assert_string_equal(tf, whole);
    assert_string_equal(tr, whole);
    for (int k = 0; k < 8; k++) {
        assert_string_equal(fwd[k], rev[k]);
        free(fwd[k]);
        free(rev[k]);
    }
    assert_int_equal(fwd_st.truncated, 0);
    assert_memory_equal(&fwd_st, &rev_st, sizeof(fwd_st));
    /* Every component is seen by one chunk as its own: the owned ones are
     * the whole run's. */
    assert_int_equal(fwd_st.components - fwd_st.owned_elsewhere, st.components);
    free(tf);
    free(tr);

    /* Halo 2: clefts cut by the seams are truncated, never doubled (the
     * merge asserts distinct ids) and never made up. */
    tf = chunked(2, 0, fwd, &fwd_st);
    assert_true(fwd_st.truncated > 0);
    for (int k = 0; k < 8; k++)
        free(fwd[k]);
    {
        cnx_synapse *a = NULL, *w = NULL;
        size_t na = 0, nw = 0;
        assert_int_equal(
            cnx_synapse_table_parse(tf, strlen(tf), "halo2", &a, &na), 0);
        assert_int_equal(
            cnx_synapse_table_parse(whole, strlen(whole), "whole", &w, &nw), 0);
        assert_true(na <= nw);
        for (size_t i = 0; i < na; i++) {
            size_t j = 0;
            while (j < nw && w[j].id != a[i].id)
                j++;
            assert_true(j < nw);
        }
        free(a);
        free(w);
    }
    free(tf);
    free(whole);
}

/* ---- tables and edges --------------------------------------------------- */

static void test_synapse__table_round_trips(void **state)
{
    const double res[3] = {4.0, 4.5, 40.0};
    cnx_synapse s[3], *back = NULL;
    char *t = NULL, *t2 = NULL;
    size_t len = 0, len2 = 0, n = 0;
    (void)state;
    memset(s, 0, sizeof(s));
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 3; i++) {
            s[k].site[i] = 3 + k * 7 + i;
            s[k].pre_site[i] = s[k].site[i] - 2;
            s[k].post_site[i] = s[k].site[i] + 2;
        }
        s[k].id = cnx_synapse_id(s[k].site[0], s[k].site[1], s[k].site[2]);
        s[k].size = 40 + k;
        s[k].pre_id = (uint64_t)k;
        s[k].post_id = (uint64_t)INT64_MAX - (uint64_t)k;
        s[k].score = k == 0 ? 1.0 : k == 1 ? 0.0 : 0.123457;
    }
    s[2].site[0] = CNX_SYNAPSE_COORD_MAX - 1;
    s[2].id = cnx_synapse_id(s[2].site[0], s[2].site[1], s[2].site[2]);
    assert_int_equal(cnx_synapse_table_json(s, 3, res, &t, &len), 0);
    /* Sorted keys, whole numbers as integers, 4.5 * 11 = 49.5 a real. */
    assert_non_null(strstr(t, "{\"id\":"));
    assert_non_null(strstr(t, "\"score\":1,\"site\":[3,4,5],"
                              "\"site_nm\":[12,18,200],\"size\":40}\n"));
    assert_non_null(strstr(t, "\"site_nm\":[40,49.5,"));
    assert_int_equal(cnx_synapse_table_parse(t, len, "tbl", &back, &n), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(back, s, sizeof(s));
    assert_int_equal(cnx_synapse_table_json(back, n, res, &t2, &len2), 0);
    assert_int_equal(len, len2);
    assert_memory_equal(t, t2, len);
    free(t2);
    free(back);
    free(t);

    /* Empty. */
    assert_int_equal(cnx_synapse_table_json(NULL, 0, res, &t, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(cnx_synapse_table_parse(t, 0, "tbl", &back, &n), 0);
    assert_int_equal(n, 0);
    assert_null(back);
    free(t);

    /* Ids past 2^63 - 1 do not fit a JSON integer. */
    s[0].post_id = (uint64_t)INT64_MAX + 1;
    assert_int_equal(cnx_synapse_table_json(s, 1, res, &t, &len), CNX_ERANGE);
}

#define LINE(id, site)                                                         \
    "{\"id\":" id ",\"post_id\":2,\"post_site\":[1,2,3],\"pre_id\":1,"         \
    "\"pre_site\":[1,2,3],\"score\":0.5,\"site\":" site ","                    \
    "\"site_nm\":[8,8,8],\"size\":30}\n"
#define GOOD LINE("2", "[1,0,0]")

static const struct {
    const char *text;
    const char *message; /* a prefix of the message */
} bad_tables[] = {
    {GOOD "{\"id\":\n", "t: line 2: "},
    {GOOD GOOD "[]\n", "t: line 3: must be a JSON object"},
    {GOOD "\n" GOOD, "t: line 2: empty line"},
    {GOOD GOOD, NULL},
    {GOOD "{\"id\":2}", "t: line 2: no newline at the end of the table"},
    {"{\"extra\":1,\"id\":2,\"post_id\":2,\"post_site\":[1,2,3],"
     "\"pre_id\":1,\"pre_site\":[1,2,3],\"score\":0.5,\"site\":[1,0,0],"
     "\"site_nm\":[8,8,8],\"size\":30}\n",
     "t: line 1: unknown key 'extra'"},
    {"{\"id\":2,\"post_id\":2,\"post_site\":[1,2,3],\"pre_id\":1,"
     "\"pre_site\":[1,2,3],\"site\":[1,0,0],\"site_nm\":[8,8,8],"
     "\"size\":30}\n",
     "t: line 1: missing key 'score'"},
    {GOOD LINE("3", "[1,0,0]"), "t: line 2: id 3 is not the id of site"},
    {GOOD LINE("2", "[1,0]"), "t: line 2: site: must be an array of 3"},
    {GOOD LINE("2", "[1,0,-1]"), "t: line 2: site[2]: must be an integer"},
    {GOOD LINE("0", "[1,0,0]"), "t: line 2: id: must be an integer >= 1"},
    {GOOD LINE("\"2\"", "[1,0,0]"), "t: line 2: id: must be an integer"},
    {LINE("2", "[1,0,0]") "{\"id\":2,\"post_id\":2,\"post_site\":[1,2,3],"
                          "\"pre_id\":1,\"pre_site\":[1,2,3],\"score\":1.5,"
                          "\"site\":[1,0,0],\"site_nm\":[8,8,8],"
                          "\"size\":30}\n",
     "t: line 2: score: must be a number in [0, 1]"},
};

static void test_synapse__table_parse_names_the_line(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_tables) / sizeof(bad_tables[0]); i++) {
        cnx_synapse *s = (cnx_synapse *)&s;
        size_t n = 77;
        int rc = cnx_synapse_table_parse(
            bad_tables[i].text, strlen(bad_tables[i].text), "t", &s, &n);
        if (bad_tables[i].message == NULL) {
            /* Duplicates are the caller's business: parsed as written. */
            assert_int_equal(rc, 0);
            assert_int_equal(n, 2);
            free(s);
            continue;
        }
        if (rc != CNX_ECORRUPT)
            fail_msg("case %zu: rc %d", i, rc);
        if (strncmp(cnx_error_last()->message, bad_tables[i].message,
                    strlen(bad_tables[i].message)) != 0)
            fail_msg("case %zu: message '%s'", i, cnx_error_last()->message);
        assert_int_equal(n, 77); /* outputs untouched */
    }
}

static void test_synapse__edges(void **state)
{
    /* (pre, post): (7,3) x2, (3,7), (3,0) dropped, (0,9) dropped, (7,3)
     * again, (3,3) kept (an autapse is an edge). */
    const uint64_t pairs[][2] = {{7, 3}, {3, 7}, {3, 0}, {7, 3},
                                 {0, 9}, {7, 3}, {3, 3}, {10, 2}};
    cnx_synapse s[8];
    cnx_synapse_edge *e = NULL;
    size_t n = 0, len = 0;
    char *t = NULL;
    (void)state;
    memset(s, 0, sizeof(s));
    for (int k = 0; k < 8; k++) {
        s[k].pre_id = pairs[k][0];
        s[k].post_id = pairs[k][1];
    }
    assert_int_equal(cnx_synapse_edges(s, 8, &e, &n), 0);
    assert_int_equal(n, 4);
    assert_int_equal(e[0].pre_id, 3);
    assert_int_equal(e[0].post_id, 3);
    assert_int_equal(e[0].count, 1);
    assert_int_equal(e[1].pre_id, 3);
    assert_int_equal(e[1].post_id, 7);
    assert_int_equal(e[2].pre_id, 7);
    assert_int_equal(e[2].post_id, 3);
    assert_int_equal(e[2].count, 3);
    assert_int_equal(e[3].pre_id, 10);
    assert_int_equal(cnx_synapse_edges_json(e, n, &t, &len), 0);
    assert_string_equal(t, "{\"count\":1,\"post_id\":3,\"pre_id\":3}\n"
                           "{\"count\":1,\"post_id\":7,\"pre_id\":3}\n"
                           "{\"count\":3,\"post_id\":3,\"pre_id\":7}\n"
                           "{\"count\":1,\"post_id\":2,\"pre_id\":10}\n");
    assert_int_equal(strlen(t), len);
    free(t);
    free(e);
    assert_int_equal(cnx_synapse_edges(s, 0, &e, &n), 0);
    assert_int_equal(n, 0);
    assert_null(e);
}

/* ---- bad input ---------------------------------------------------------- */

static void expect_refused(const cnx_synapse_block *b,
                           const cnx_synapse_params *p, int code,
                           const char *part)
{
    cnx_synapse *s = (cnx_synapse *)&s;
    size_t n = 77;
    int rc = cnx_synapse_detect(b, p, &s, &n, NULL);
    if (rc != code)
        fail_msg("rc %d, expected %d (%s)", rc, code,
                 cnx_error_last()->message);
    if (strstr(cnx_error_last()->message, part) == NULL)
        fail_msg("message '%s' lacks '%s'", cnx_error_last()->message, part);
    assert_int_equal(n, 77);
    assert_true(s == (cnx_synapse *)&s);
}

static void test_synapse__refuses_bad_blocks(void **state)
{
    vols v = vols_new(20, 20, 20);
    cnx_synapse_params p;
    cnx_synapse_block b, g;
    cnx_synapse *s = NULL;
    size_t n = 0;
    (void)state;
    slab(&v);
    cnx_synapse_params_default(&p);
    g = whole_block(&v);

    b = g;
    b.cleft = NULL;
    expect_refused(&b, &p, CNX_EINVAL, "buffer");
    b = g;
    b.seg = NULL;
    expect_refused(&b, &p, CNX_EINVAL, "buffer");
    b = g;
    b.size[1] = 0;
    expect_refused(&b, &p, CNX_EINVAL, "size");
    b = g;
    b.own.max[0] = 21;
    expect_refused(&b, &p, CNX_EINVAL, "own box");
    b = g;
    b.own.max[2] = b.own.min[2];
    expect_refused(&b, &p, CNX_EINVAL, "own box");
    b = g;
    b.bounds.max[0] = 19;
    expect_refused(&b, &p, CNX_EINVAL, "bounds");
    b = g;
    b.resolution[2] = 0.0;
    expect_refused(&b, &p, CNX_EINVAL, "resolution");
    b = g;
    b.size[0] = (int64_t)1 << 21;
    expect_refused(&b, &p, CNX_ETOOBIG, "read box");
    b = g;
    p.partner_radius = 99;
    expect_refused(&b, &p, CNX_EINVAL, "partner_radius");
    cnx_synapse_params_default(&p);
    assert_int_equal(cnx_synapse_detect(NULL, &p, &s, &n, NULL), CNX_EINVAL);
    assert_int_equal(cnx_synapse_detect(&g, NULL, &s, &n, NULL), CNX_EINVAL);

    /* A cleft whose site lies at a negative coordinate (the layer starts
     * at -100), and one past 2^21: not representable in an id. */
    for (int k = 0; k < 2; k++) {
        b = g;
        for (int i = 0; i < 3; i++) {
            b.origin[i] = k == 0 ? -100 : CNX_SYNAPSE_COORD_MAX - 5;
            b.own.min[i] = b.bounds.min[i] = b.origin[i];
            b.own.max[i] = b.bounds.max[i] = b.origin[i] + b.size[i];
        }
        expect_refused(&b, &p, CNX_ERANGE, "outside [0, 2^21)");
    }
    /* The same block at origin 0 is fine. */
    assert_int_equal(cnx_synapse_detect(&g, &p, &s, &n, NULL), 0);
    assert_int_equal(n, 1);
    free(s);
    vols_free(&v);
}

int main(void)
{
    const struct CMUnitTest plain[] = {
        cmocka_unit_test(test_synapse__defaults),
        cmocka_unit_test(test_synapse__parse_every_key),
        cmocka_unit_test(test_synapse__parse_refuses_bad_values),
        cmocka_unit_test(test_synapse__slab_cleft),
        cmocka_unit_test(test_synapse__diagonal_voxels_join),
        cmocka_unit_test(test_synapse__matches_reference_model),
        cmocka_unit_test(test_synapse__table_round_trips),
        cmocka_unit_test(test_synapse__table_parse_names_the_line),
        cmocka_unit_test(test_synapse__edges),
        cmocka_unit_test(test_synapse__refuses_bad_blocks),
    };
    const struct CMUnitTest with_synth[] = {
        cmocka_unit_test(test_synapse__synth_matches_ground_truth),
        cmocka_unit_test(test_synapse__chunked_equals_whole_in_any_order),
    };
    int failed = cmocka_run_group_tests(plain, NULL, NULL);
    failed += cmocka_run_group_tests(with_synth, synth_setup, synth_teardown);
    return failed;
}
