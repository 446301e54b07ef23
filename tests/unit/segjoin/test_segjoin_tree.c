/*
 * test_segjoin_tree.c - the join as a tree of blocks gives, fragment for
 * fragment and segment for segment, what the one-task join gives, and
 * both give what a reference written from the rule gives.
 *
 * Truth: a reference model of the join's rule (docs/segment.md, "Across
 * chunk seams") computed here from the whole label volume and boundary,
 * not from face records: every voxel pair straddling a chunk seam adds
 * max(q, q') to the edge of its two fragments; edges of fewer than
 * CNX_SEGJOIN_MIN_CONTACT pairs count the rest as 255; an edge under 80 %
 * of the merge level joins; a component under min_voxels links along its lowest
 * edge (value, lesser id, greater id) leaving it; a segment is named by
 * the component at the root of its links (a pair linking to each other:
 * the lesser least fragment id).
 * Volumes: noisy boxes with chunks of 8 (partial chunks at the far
 * faces), minimum sizes from 40 to 6000 voxels (from a few small
 * components to nearly all), in 3D and 2D; trees of two, three and four
 * levels (components open and small over several merges).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"

#define SX 40
#define SY 36
#define SZ 28
#define CH 8
#define NV ((size_t)SX * SY * SZ)

typedef struct fixture {
    float *b;
    uint64_t *lab; /* fragment ids, whole volume */
    size_t nchunks;
    cnx_box chunks[128];
    uint8_t *face[128];
    size_t flen[128];
    cnx_segjoin_input in[128];
    cnx_segment_params p;
} fixture;

static void noisy_boxes(float *b, uint64_t seed)
{
    size_t i = 0;
    for (int z = 0; z < SZ; z++)
        for (int y = 0; y < SY; y++)
            for (int x = 0; x < SX; x++, i++) {
                int wall = x % 11 == 0 || y % 9 == 0 || z % 7 == 0;
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                b[i] = (wall ? 0.75f : 0.0f) +
                       (float)(seed >> 40) / (float)(1 << 24) * 0.45f;
            }
}

/* Fragments and face records of every chunk (halo 2). */
static void make(fixture *f, int mode, uint64_t seed, double minv)
{
    const cnx_box whole = {{0, 0, 0}, {SX, SY, SZ}};
    f->b = malloc(NV * sizeof(*f->b));
    f->lab = malloc(NV * sizeof(*f->lab));
    assert_true(f->b && f->lab);
    noisy_boxes(f->b, seed);
    cnx_segment_params_default(&f->p);
    f->p.mode = (cnx_segment_mode)mode;
    f->p.min_size_nm3 = minv * 512.0; /* voxels of 8 nm */
    f->nchunks = 0;
    for (int z = 0; z < SZ; z += CH)
        for (int y = 0; y < SY; y += CH)
            for (int x = 0; x < SX; x += CH) {
                cnx_box c = {{x, y, z},
                             {x + CH < SX ? x + CH : SX,
                              y + CH < SY ? y + CH : SY,
                              z + CH < SZ ? z + CH : SZ}};
                cnx_box bb = cnx_box_grow(&c, 2, &whole);
                int64_t bs[3];
                float *part;
                uint64_t *lab;
                size_t k = f->nchunks++, i = 0;
                cnx_box_size(&bb, bs);
                part = malloc((size_t)cnx_box_voxels(&bb) * sizeof(*part));
                lab = malloc((size_t)cnx_box_voxels(&c) * sizeof(*lab));
                for (int64_t zz = bb.min[2]; zz < bb.max[2]; zz++)
                    for (int64_t yy = bb.min[1]; yy < bb.max[1]; yy++)
                        for (int64_t xx = bb.min[0]; xx < bb.max[0]; xx++)
                            part[i++] = f->b[xx + SX * (yy + SY * zz)];
                assert_int_equal(cnx_segjoin_fragments(part, &bb, &c, &f->p,
                                                       lab, &f->face[k],
                                                       &f->flen[k]),
                                 0);
                i = 0;
                for (int64_t zz = c.min[2]; zz < c.max[2]; zz++)
                    for (int64_t yy = c.min[1]; yy < c.max[1]; yy++)
                        for (int64_t xx = c.min[0]; xx < c.max[0]; xx++)
                            f->lab[xx + SX * (yy + SY * zz)] = lab[i++];
                f->chunks[k] = c;
                f->in[k] = (cnx_segjoin_input){f->face[k], f->flen[k],
                                               "chunk"};
                free(part);
                free(lab);
            }
}

static void unmake(fixture *f)
{
    for (size_t k = 0; k < f->nchunks; k++)
        free(f->face[k]);
    free(f->b);
    free(f->lab);
}

/* ---- the reference ------------------------------------------------------ */

typedef struct redge {
    uint64_t a, b, sum, n;
} redge;

static int cmp_redge(const void *x, const void *y)
{
    const redge *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static size_t at(const uint64_t *ids, size_t n, uint64_t id)
{
    const uint64_t *h = bsearch(&id, ids, n, sizeof(*ids), cmp_u64);
    assert_non_null(h);
    return (size_t)(h - ids);
}

static size_t root(size_t *par, size_t x)
{
    while (par[x] != x)
        x = par[x];
    return x;
}

/* ids[nids] (sorted fragment ids) and each one's segment in seg[]. */
static void reference(const fixture *f, uint64_t **ids_out, uint64_t **seg_out,
                      size_t *nids_out)
{
    uint64_t *ids = malloc(NV * sizeof(*ids)), *size, *rep;
    redge *e = malloc(3 * NV * sizeof(*e));
    size_t nids = 0, ne = 0, w = 0, *par, *best, *link;
    uint64_t level = cnx_segment_merge_level(f->p.merge_threshold) * 80 / 100;
    uint64_t minv = (uint64_t)cnx_segment_min_voxels(&f->p);
    int axes = cnx_segment_mode_of(&f->p) == CNX_SEGMENT_MODE_2D ? 2 : 3;
    const int64_t step[3] = {1, SX, (int64_t)SX * SY}, sz[3] = {SX, SY, SZ};

    memcpy(ids, f->lab, NV * sizeof(*ids));
    qsort(ids, NV, sizeof(*ids), cmp_u64);
    for (size_t i = 0; i < NV; i++)
        if (i == 0 || ids[i] != ids[i - 1])
            ids[nids++] = ids[i];
    size = calloc(nids, sizeof(*size));
    for (size_t i = 0; i < NV; i++)
        size[at(ids, nids, f->lab[i])]++;
    for (int z = 0; z < SZ; z++)
        for (int y = 0; y < SY; y++)
            for (int x = 0; x < SX; x++) {
                const int64_t g[3] = {x, y, z};
                size_t v = (size_t)(x + SX * (y + SY * z));
                for (int a = 0; a < axes; a++) {
                    size_t u = v + (size_t)step[a];
                    if (g[a] % CH != CH - 1 || g[a] + 1 >= sz[a])
                        continue;
                    e[ne++] = (redge){
                        f->lab[v], f->lab[u],
                        cnx_segment_pair_value(f->b[v], f->b[u]), 1};
                }
            }
    qsort(e, ne, sizeof(*e), cmp_redge);
    for (size_t i = 0; i < ne; i++)
        if (w > 0 && cmp_redge(&e[w - 1], &e[i]) == 0) {
            e[w - 1].sum += e[i].sum;
            e[w - 1].n += e[i].n;
        } else {
            e[w++] = e[i];
        }
    ne = w;
    par = malloc(nids * sizeof(*par));
    for (size_t i = 0; i < nids; i++)
        par[i] = i;
    for (size_t i = 0; i < ne; i++) {
        uint64_t s = e[i].sum, n = e[i].n;
        if (n < CNX_SEGJOIN_MIN_CONTACT) {
            s += 255u * (CNX_SEGJOIN_MIN_CONTACT - n);
            n = CNX_SEGJOIN_MIN_CONTACT;
        }
        e[i].sum = cnx_segment_edge_value(s, n); /* now the value */
        if (e[i].sum < level) {
            size_t x = root(par, at(ids, nids, e[i].a));
            size_t y = root(par, at(ids, nids, e[i].b));
            par[x > y ? x : y] = x < y ? x : y;
        }
    }
    rep = calloc(nids, sizeof(*rep));
    best = malloc(nids * sizeof(*best));
    link = malloc(nids * sizeof(*link));
    {
        uint64_t *csize = calloc(nids, sizeof(*csize));
        for (size_t i = 0; i < nids; i++) {
            csize[root(par, i)] += size[i];
            best[i] = (size_t)-1;
        }
        for (size_t i = 0; i < ne; i++) {
            size_t x = root(par, at(ids, nids, e[i].a));
            size_t y = root(par, at(ids, nids, e[i].b));
            uint64_t lo = e[i].a < e[i].b ? e[i].a : e[i].b;
            uint64_t hi = e[i].a < e[i].b ? e[i].b : e[i].a;
            for (int side = 0; side < 2 && x != y; side++) {
                size_t c = side ? y : x;
                size_t bi = best[c];
                if (csize[c] >= minv)
                    continue;
                if (bi == (size_t)-1 || e[i].sum < e[bi].sum ||
                    (e[i].sum == e[bi].sum &&
                     (lo < (e[bi].a < e[bi].b ? e[bi].a : e[bi].b) ||
                      (lo == (e[bi].a < e[bi].b ? e[bi].a : e[bi].b) &&
                       hi < (e[bi].a < e[bi].b ? e[bi].b : e[bi].a)))))
                    best[c] = i;
            }
        }
        for (size_t c = 0; c < nids; c++) {
            link[c] = c;
            if (root(par, c) == c && best[c] != (size_t)-1) {
                size_t x = root(par, at(ids, nids, e[best[c]].a));
                size_t y = root(par, at(ids, nids, e[best[c]].b));
                link[c] = x == c ? y : x;
            }
        }
        /* Follow the links to the root (or the pair) of each component. */
        for (size_t c = 0; c < nids; c++) {
            size_t r = root(par, c), steps = 0;
            while (link[r] != r && link[link[r]] != r && steps++ < nids)
                r = link[r];
            if (link[r] != r) /* a pair */
                rep[c] = ids[r < link[r] ? r : link[r]];
            else
                rep[c] = ids[r];
        }
        free(csize);
    }
    *ids_out = ids;
    *seg_out = rep;
    *nids_out = nids;
    free(size);
    free(e);
    free(par);
    free(best);
    free(link);
}

/* ---- checks ------------------------------------------------------------- */

/* Every fragment of j has the reference's segment; the segments' voxel
 * counts are those of the reference. */
static void same_as_reference(const cnx_segjoin *j, const uint64_t *ids,
                              const uint64_t *seg, size_t nids,
                              int check_segments)
{
    size_t seen = 0;
    for (size_t k = 0; k < j->nchunks; k++)
        for (size_t i = j->first[k]; i < j->first[k + 1]; i++, seen++)
            if (j->seg[i] != seg[at(ids, nids, j->frag[i])])
                fail_msg("fragment %llu: segment %llu, the rule gives %llu",
                         (unsigned long long)j->frag[i],
                         (unsigned long long)j->seg[i],
                         (unsigned long long)seg[at(ids, nids, j->frag[i])]);
    assert_true(seen > 0);
    if (check_segments) {
        size_t n = 0;
        uint64_t *u = malloc(nids * sizeof(*u));
        memcpy(u, seg, nids * sizeof(*u));
        qsort(u, nids, sizeof(*u), cmp_u64);
        for (size_t i = 0; i < nids; i++)
            if (i == 0 || u[i] != u[i - 1])
                u[n++] = u[i];
        assert_int_equal(j->nsegs, n);
        assert_memory_equal(j->seg_ids, u, n * sizeof(*u));
        free(u);
    }
}

/* Summaries of level-1 blocks of bs over the region. */
static size_t level1(const fixture *f, const int64_t bs[3], uint8_t **out,
                     size_t *len, cnx_box *boxes)
{
    const cnx_box whole = {{0, 0, 0}, {SX, SY, SZ}};
    size_t n = 0;
    for (int64_t z = 0; z < SZ; z += bs[2])
        for (int64_t y = 0; y < SY; y += bs[1])
            for (int64_t x = 0; x < SX; x += bs[0]) {
                cnx_box blk = {{x, y, z},
                               {x + bs[0] < SX ? x + bs[0] : SX,
                                y + bs[1] < SY ? y + bs[1] : SY,
                                z + bs[2] < SZ ? z + bs[2] : SZ}};
                /* every record, in reverse: extra and unordered inputs */
                cnx_segjoin_input rev[128];
                for (size_t k = 0; k < f->nchunks; k++)
                    rev[k] = f->in[f->nchunks - 1 - k];
                if (cnx_segjoin_block(rev, f->nchunks, &blk, &whole, &f->p,
                                      &out[n], &len[n]) != 0)
                    fail_msg("block: %s", cnx_error_last()->message);
                boxes[n++] = blk;
            }
    return n;
}

/* Summaries of blocks of bs from the summaries below (inside each). */
static size_t level_up(const fixture *f, const int64_t bs[3], uint8_t **below,
                       size_t *blen, const cnx_box *bbox, size_t nb,
                       uint8_t **out, size_t *len, cnx_box *boxes)
{
    const cnx_box whole = {{0, 0, 0}, {SX, SY, SZ}};
    size_t n = 0;
    for (int64_t z = 0; z < SZ; z += bs[2])
        for (int64_t y = 0; y < SY; y += bs[1])
            for (int64_t x = 0; x < SX; x += bs[0]) {
                cnx_box blk = {{x, y, z},
                               {x + bs[0] < SX ? x + bs[0] : SX,
                                y + bs[1] < SY ? y + bs[1] : SY,
                                z + bs[2] < SZ ? z + bs[2] : SZ}};
                cnx_segjoin_input in[128];
                size_t m = 0;
                for (size_t k = 0; k < nb; k++) {
                    int inside = 1;
                    for (int i = 0; i < 3; i++)
                        inside = inside && bbox[k].min[i] >= blk.min[i] &&
                                 bbox[k].max[i] <= blk.max[i];
                    if (inside)
                        in[m++] = (cnx_segjoin_input){below[k], blen[k],
                                                      "below"};
                }
                if (cnx_segjoin_merge(in, m, &blk, &whole, &f->p, &out[n],
                                      &len[n]) != 0)
                    fail_msg("merge: %s", cnx_error_last()->message);
                boxes[n++] = blk;
            }
    (void)f;
    return n;
}

/* Every level-1 block's fragments through the tree: the reference's. */
static void check_tree(const fixture *f, uint8_t **l1, size_t *l1len,
                       size_t n1, uint8_t **ups, size_t *uplen, size_t nup,
                       const uint64_t *ids, const uint64_t *seg, size_t nids)
{
    cnx_segjoin_input up[257];
    cnx_segjoin_tree *t;
    cnx_segjoin all;
    (void)f;
    for (size_t k = 0; k < nup; k++)
        up[k] = (cnx_segjoin_input){ups[k], uplen[k], "up"};
    assert_int_equal(cnx_segjoin_tree_open(up, nup, &t), 0);
    memset(&all, 0, sizeof(all));
    assert_int_equal(cnx_segjoin_tree_segments(t, &all), 0);
    for (size_t k = 0; k < n1; k++) {
        cnx_segjoin j;
        cnx_segjoin_input in = {l1[k], l1len[k], "l1"};
        memset(&j, 0, sizeof(j));
        if (cnx_segjoin_tree_block(t, &in, &j) != 0)
            fail_msg("tree_block: %s", cnx_error_last()->message);
        same_as_reference(&j, ids, seg, nids, 0);
        cnx_segjoin_free(&j);
    }
    {
        /* the segments: those of the one-task join, voxel counts too */
        cnx_segjoin one;
        assert_int_equal(cnx_segjoin_run(f->in, f->nchunks, &f->p, &one), 0);
        assert_int_equal(all.nsegs, one.nsegs);
        assert_memory_equal(all.seg_ids, one.seg_ids,
                            one.nsegs * sizeof(*one.seg_ids));
        assert_memory_equal(all.seg_size, one.seg_size,
                            one.nsegs * sizeof(*one.seg_size));
        assert_memory_equal(all.seg_multi, one.seg_multi,
                            one.nsegs * sizeof(*one.seg_multi));
        cnx_segjoin_free(&one);
    }
    cnx_segjoin_free(&all);
    cnx_segjoin_tree_free(t);
}

static void free_all(uint8_t **p, size_t n)
{
    for (size_t k = 0; k < n; k++)
        free(p[k]);
}

static void trees(int mode, uint64_t seed, double minv)
{
    static const int64_t l1s[][3] = {
        {8, 8, 8}, {16, 16, 16}, {16, 8, 24}, {40, 40, 8}, {40, 40, 40}};
    const cnx_box whole = {{0, 0, 0}, {SX, SY, SZ}};
    fixture f;
    uint64_t *ids, *seg;
    size_t nids;
    cnx_segjoin one;

    make(&f, mode, seed, minv);
    reference(&f, &ids, &seg, &nids);
    /* the one-task join is the rule */
    assert_int_equal(cnx_segjoin_run(f.in, f.nchunks, &f.p, &one), 0);
    same_as_reference(&one, ids, seg, nids, 1);
    assert_true(one.nmerged > 0);
    assert_true(one.nsegs < nids); /* something joined or linked */
    cnx_segjoin_free(&one);

    for (size_t c = 0; c < sizeof(l1s) / sizeof(l1s[0]); c++) {
        uint8_t *l1[128], *top[1];
        size_t l1len[128], toplen[1], n1;
        cnx_box b1[128], bt[1];
        n1 = level1(&f, l1s[c], l1, l1len, b1);
        /* two levels: the blocks, then the top */
        level_up(&f, (const int64_t[3]){SX, SY, SZ}, l1, l1len, b1, n1, top,
                 toplen, bt);
        check_tree(&f, l1, l1len, n1, top, toplen, 1, ids, seg, nids);
        free_all(top, 1);
        if (l1s[c][0] == 8) {
            /* three levels: 8^3 -> 16 x 24 x 16 -> the top */
            uint8_t *l2[128], *ups[257];
            size_t l2len[128], uplen[257], n2;
            cnx_box b2[128];
            n2 = level_up(&f, (const int64_t[3]){16, 24, 16}, l1, l1len, b1,
                          n1, l2, l2len, b2);
            level_up(&f, (const int64_t[3]){SX, SY, SZ}, l2, l2len, b2, n2,
                     top, toplen, bt);
            for (size_t k = 0; k < n2; k++) {
                ups[k] = l2[k];
                uplen[k] = l2len[k];
            }
            ups[n2] = top[0];
            uplen[n2] = toplen[0];
            check_tree(&f, l1, l1len, n1, ups, uplen, n2 + 1, ids, seg, nids);
            free_all(top, 1);
            {
                /* four levels: ... -> 32 x 24 x 16 -> the top; components
                 * stay open (and small) over two merges */
                uint8_t *l3[128];
                size_t l3len[128], n3;
                cnx_box b3[128];
                n3 = level_up(&f, (const int64_t[3]){32, 24, 16}, l2, l2len,
                              b2, n2, l3, l3len, b3);
                level_up(&f, (const int64_t[3]){SX, SY, SZ}, l3, l3len, b3,
                         n3, top, toplen, bt);
                for (size_t k = 0; k < n3; k++) {
                    ups[n2 + k] = l3[k];
                    uplen[n2 + k] = l3len[k];
                }
                ups[n2 + n3] = top[0];
                uplen[n2 + n3] = toplen[0];
                check_tree(&f, l1, l1len, n1, ups, uplen, n2 + n3 + 1, ids,
                           seg, nids);
                free_all(l3, n3);
                free_all(top, 1);
            }
            free_all(l2, n2);
        }
        free_all(l1, n1);
    }
    (void)whole;
    free(ids);
    free(seg);
    unmake(&f);
}

static void test_tree_3d(void **state)
{
    (void)state;
    trees(CNX_SEGMENT_MODE_3D, 7, 40);
    trees(CNX_SEGMENT_MODE_3D, 9, 150);
    trees(CNX_SEGMENT_MODE_3D, 13, 400);
    trees(CNX_SEGMENT_MODE_3D, 17, 1500);
    trees(CNX_SEGMENT_MODE_3D, 19, 6000);
    trees(CNX_SEGMENT_MODE_3D, 11, 40);
}

static void test_tree_2d(void **state)
{
    (void)state;
    trees(CNX_SEGMENT_MODE_2D, 5, 40);
    trees(CNX_SEGMENT_MODE_2D, 6, 150);
}

/* Summaries are refused, with their name, when malformed or misplaced. */
static void test_bad_summaries(void **state)
{
    const cnx_box whole = {{0, 0, 0}, {SX, SY, SZ}};
    const cnx_box half = {{0, 0, 0}, {24, SY, SZ}};
    fixture f;
    uint8_t *l1[128], *out;
    size_t l1len[128], n1, len;
    cnx_box b1[128];
    (void)state;
    make(&f, CNX_SEGMENT_MODE_3D, 3, 40);
    n1 = level1(&f, (const int64_t[3]){24, SY, SZ}, l1, l1len, b1);
    assert_int_equal(n1, 2);
    for (size_t cut = 0; cut < l1len[0]; cut += 1 + l1len[0] / 50) {
        cnx_segjoin_input in[2] = {{l1[0], cut, "blk0"},
                                   {l1[1], l1len[1], "blk1"}};
        assert_int_equal(cnx_segjoin_merge(in, 2, &whole, &whole, &f.p, &out,
                                           &len),
                         CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "blk0"));
    }
    {
        /* one block missing: the blocks do not fill the region */
        cnx_segjoin_input in[1] = {{l1[0], l1len[0], "blk0"}};
        assert_int_equal(cnx_segjoin_merge(in, 1, &whole, &whole, &f.p, &out,
                                           &len),
                         CNX_EINVAL);
        assert_non_null(strstr(cnx_error_last()->message, "fill"));
        /* a block that leaves components open is no top */
        cnx_segjoin_tree *t;
        assert_int_equal(cnx_segjoin_tree_open(in, 1, &t), CNX_ECORRUPT);
    }
    {
        /* a chunk beside the block with no record */
        assert_int_equal(cnx_segjoin_block(f.in, 3, &half, &whole, &f.p, &out,
                                           &len),
                         CNX_EINVAL);
    }
    free_all(l1, n1);
    unmake(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_3d),
        cmocka_unit_test(test_tree_2d),
        cmocka_unit_test(test_bad_summaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
