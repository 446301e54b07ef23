/*
 * segment_seeds.c - the seeds of the segmentation kernel (step 1 of
 * cnx/segment.h), on the padded quantised boundary.
 *
 * A uint8 "height" per voxel, 0 where no seed may be: for distance seeds
 * the 3-4-5 chamfer distance to the nearest boundary voxel (3 per voxel
 * step, saturating at 255, i.e. 85 voxels: farther is all one plateau);
 * for minima seeds 255 - q. A separable running maximum over a cube of
 * half side seed_r per axis (van Herk / Gil-Werman, O(1) per voxel whatever
 * the radius), then a flood fill of the voxels equal to their window's
 * maximum, in raster order: seed k is the k-th such component by its
 * first voxel. Row loops run in blocks of 16 so that the compiler can use
 * 16-byte vectors at -O2; the results do not depend on it (integers).
 * Load: 3 passes for the distance, 3 for the maximum, one for the fill;
 * memory: two padded uint8 arrays.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "segment_int.h"

#define FAR 255u /* the height of voxels farther than 84 from a boundary */
#define BLOCK 16

static inline uint8_t min8(uint8_t a, uint8_t b)
{
    return a < b ? a : b;
}

static inline uint8_t max8(uint8_t a, uint8_t b)
{
    return a > b ? a : b;
}

/* a + w, saturating at 255. */
static inline uint8_t add8(uint8_t a, uint8_t w)
{
    return (uint8_t)(min8(a, (uint8_t)(255 - w)) + w);
}

/* ---- chamfer distance ------------------------------------------------- */

/*
 * The part of a chamfer step that reads finished rows only (no dependency
 * from one x to the next): a is the row before in y, and in 3D b, bm, bp
 * the plane before at y, y - 1 and y + 1 (in the pass's own direction).
 * Left-right symmetric, so both passes share it. Indices -1 and n are the
 * margin.
 */
static inline void chamfer_one(uint8_t *restrict d, const uint8_t *restrict a,
                               int64_t x)
{
    uint8_t m = min8(d[x], add8(a[x], 3));
    d[x] = min8(m, add8(min8(a[x - 1], a[x + 1]), 4));
}

static inline void chamfer_one3(uint8_t *restrict d, const uint8_t *restrict a,
                                const uint8_t *restrict b,
                                const uint8_t *restrict bm,
                                const uint8_t *restrict bp, int64_t x)
{
    uint8_t m = min8(d[x], add8(a[x], 3));
    m = min8(m, add8(min8(a[x - 1], a[x + 1]), 4));
    m = min8(m, add8(b[x], 3));
    m = min8(m, add8(min8(min8(b[x - 1], b[x + 1]), min8(bm[x], bp[x])), 4));
    m = min8(
        m,
        add8(min8(min8(bm[x - 1], bm[x + 1]), min8(bp[x - 1], bp[x + 1])), 5));
    d[x] = m;
}

static void chamfer_rows(uint8_t *restrict d, const uint8_t *restrict a,
                         int64_t n)
{
    int64_t x = 0;
    for (; x + BLOCK <= n; x += BLOCK)
        for (int j = 0; j < BLOCK; j++)
            chamfer_one(d, a, x + j);
    for (; x < n; x++)
        chamfer_one(d, a, x);
}

static void chamfer_rows3(uint8_t *restrict d, const uint8_t *restrict a,
                          const uint8_t *restrict b, const uint8_t *restrict bm,
                          const uint8_t *restrict bp, int64_t n)
{
    int64_t x = 0;
    for (; x + BLOCK <= n; x += BLOCK)
        for (int j = 0; j < BLOCK; j++)
            chamfer_one3(d, a, b, bm, bp, x + j);
    for (; x < n; x++)
        chamfer_one3(d, a, b, bm, bp, x);
}

/*
 * One pass of the chamfer over the real voxels: dir +1 in raster order
 * looking at the neighbours already visited, dir -1 in reverse order
 * looking at the others; per row the finished rows first, then the scan
 * along x. The margin holds FAR: it is never a boundary.
 */
static void chamfer_pass(const seg_grid *g, uint8_t *dt, int dir)
{
    const int64_t *s = g->size, n = s[0];
    const ptrdiff_t Y = dir * (ptrdiff_t)g->px;
    const ptrdiff_t Z = dir * (ptrdiff_t)(g->px * g->py);
    for (int64_t zz = 0; zz < s[2]; zz++) {
        int64_t z = dir > 0 ? zz : s[2] - 1 - zz;
        for (int64_t yy = 0; yy < s[1]; yy++) {
            int64_t y = dir > 0 ? yy : s[1] - 1 - yy;
            uint8_t *d = dt + seg__at(g, 0, y, z);
            if (g->sections)
                chamfer_rows(d, d - Y, n);
            else
                chamfer_rows3(d, d - Y, d - Z, d - Z - Y, d - Z + Y, n);
            if (dir > 0)
                for (int64_t x = 1; x < n; x++)
                    d[x] = min8(d[x], add8(d[x - 1], 3));
            else
                for (int64_t x = n - 2; x >= 0; x--)
                    d[x] = min8(d[x], add8(d[x + 1], 3));
        }
    }
}

/* The height of every real voxel from its q: 0 at q >= level, else `in`
 * (FAR for the distance, 255 - q for minima). */
static void init_height(const seg_grid *g, const uint8_t *q, uint32_t level,
                        int minima, uint8_t *h)
{
    const int64_t *s = g->size;
    const uint8_t lv = (uint8_t)level;
    memset(h, level > 0 && !minima ? FAR : 0, g->n);
    if (level == 0) /* nothing is below 0 */
        return;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            const size_t row = seg__at(g, 0, y, z);
            const uint8_t *qr = q + row;
            uint8_t *hr = h + row;
            for (int64_t x = 0; x < s[0]; x++) {
                const uint8_t in = minima ? (uint8_t)(255 - qr[x]) : FAR;
                hr[x] = qr[x] >= lv ? 0 : in;
            }
        }
}

/* ---- running maximum --------------------------------------------------- */

/* o[x] = max(a[x], b[x]) for x < n; o may not alias a or b. */
static void max_row(uint8_t *restrict o, const uint8_t *restrict a,
                    const uint8_t *restrict b, int64_t n)
{
    int64_t x = 0;
    for (; x + BLOCK <= n; x += BLOCK)
        for (int j = 0; j < BLOCK; j++)
            o[x + j] = max8(a[x + j], b[x + j]);
    for (; x < n; x++)
        o[x] = max8(a[x], b[x]);
}

/* o[x] = max(o[x], b[x]) for x < n; b may not overlap o. */
static void max_into(uint8_t *restrict o, const uint8_t *restrict b, int64_t n)
{
    int64_t x = 0;
    for (; x + BLOCK <= n; x += BLOCK)
        for (int j = 0; j < BLOCK; j++)
            o[x + j] = max8(o[x + j], b[x + j]);
    for (; x < n; x++)
        o[x] = max8(o[x], b[x]);
}

/*
 * Running maximum of radius r along w lines at once: element i of line x
 * is f[i * stride + x] (i < len, x < w; rows of w contiguous values), and
 * becomes the maximum of elements i - r .. i + r, clipped to the line.
 * van Herk / Gil-Werman with blocks of k = 2r + 1: fwd holds the maximum
 * from the start of each block, bwd up to its end; a clipped window is a
 * prefix or a suffix of one block. fwd, bwd: len * w scratch values.
 */
static void rows_max(uint8_t *f, size_t stride, int64_t len, int64_t w,
                     int64_t r, uint8_t *fwd, uint8_t *bwd)
{
    const int64_t k = 2 * r + 1;
    for (int64_t b0 = 0; b0 < len; b0 += k) {
        const int64_t b1 = b0 + k < len ? b0 + k : len;
        memcpy(fwd + b0 * w, f + (size_t)b0 * stride, (size_t)w);
        for (int64_t i = b0 + 1; i < b1; i++)
            max_row(fwd + i * w, fwd + (i - 1) * w, f + (size_t)i * stride, w);
        memcpy(bwd + (b1 - 1) * w, f + (size_t)(b1 - 1) * stride, (size_t)w);
        for (int64_t i = b1 - 2; i >= b0; i--)
            max_row(bwd + i * w, bwd + (i + 1) * w, f + (size_t)i * stride, w);
    }
    for (int64_t i = 0; i < len; i++) {
        const int64_t a = i - r, b = i + r;
        uint8_t *row = f + (size_t)i * stride;
        if (a <= 0)
            memcpy(row, fwd + (b < len - 1 ? b : len - 1) * w, (size_t)w);
        else if (b >= len - 1)
            memcpy(row, bwd + a * w, (size_t)w);
        else
            max_row(row, bwd + a * w, fwd + b * w, w);
    }
}

/*
 * Running maximum along x of one row: window by window over a copy with r
 * zeros on each side (0 is below every height), for small r; rows_max on
 * the single line otherwise.
 */
static void row_max_x(uint8_t *f, int64_t n, int64_t r, uint8_t *buf,
                      uint8_t *fwd, uint8_t *bwd)
{
    if (r > 8) {
        rows_max(f, 1, n, 1, r, fwd, bwd);
        return;
    }
    memset(buf, 0, (size_t)r);
    memcpy(buf + r, f, (size_t)n);
    memset(buf + r + n, 0, (size_t)r);
    for (int64_t k = 0; k <= 2 * r; k++)
        if (k != r) /* f itself is buf + r */
            max_into(f, buf + k, n);
}

/* Running maximum of half side r[i] along x, y and (unless sections) z,
 * over the real voxels. */
static int cube_max(const seg_grid *g, uint8_t *f, const int64_t r[3])
{
    const int64_t *s = g->size;
    const size_t sy = (size_t)g->px, sz = (size_t)(g->px * g->py);
    int64_t len = s[0] > s[1] ? s[0] : s[1];
    uint8_t *fwd, *bwd, *buf;
    if (r[0] == 0 && r[1] == 0 && (r[2] == 0 || g->sections))
        return 0;
    len = len > s[2] ? len : s[2];
    fwd = malloc((size_t)(len * s[0]));
    bwd = malloc((size_t)(len * s[0]));
    buf = malloc((size_t)(s[0] + 2 * r[0]));
    if (fwd == NULL || bwd == NULL || buf == NULL) {
        free(fwd);
        free(bwd);
        free(buf);
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    }
    if (r[0] > 0)
        for (int64_t z = 0; z < s[2]; z++)
            for (int64_t y = 0; y < s[1]; y++)
                row_max_x(f + seg__at(g, 0, y, z), s[0], r[0], buf, fwd, bwd);
    if (r[1] > 0)
        for (int64_t z = 0; z < s[2]; z++)
            rows_max(f + seg__at(g, 0, 0, z), sy, s[1], s[0], r[1], fwd, bwd);
    if (!g->sections && r[2] > 0)
        for (int64_t y = 0; y < s[1]; y++)
            rows_max(f + seg__at(g, 0, y, 0), sz, s[2], s[0], r[2], fwd, bwd);
    free(fwd);
    free(bwd);
    free(buf);
    return 0;
}

/* ---- seeds ------------------------------------------------------------- */

/* Margin SEG_BORDER, real voxels unlabelled. */
static void clear_labels(const seg_grid *g, const uint8_t *q, uint32_t *lab)
{
    const int64_t *s = g->size;
    for (size_t i = 0; i < g->n; i++)
        lab[i] = SEG_BORDER;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            const size_t row = seg__at(g, 0, y, z);
            for (size_t v = row; v < row + (size_t)s[0]; v++)
                lab[v] = SEG_UNLABELLED | q[v];
        }
}

static inline int is_seed(const uint8_t *h, const uint8_t *m, size_t v)
{
    return h[v] != 0 && h[v] == m[v];
}

/*
 * Label the face-connected components of the seed voxels 1, 2, ... in
 * raster order of their first voxels.
 */
static int fill_seeds(const seg_grid *g, const uint8_t *h, const uint8_t *m,
                      uint32_t *lab, uint32_t *nseeds)
{
    const int64_t *s = g->size;
    seg_bucket stack = {0};
    int rc = 0;
    *nseeds = 0;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            size_t row = seg__at(g, 0, y, z);
            for (size_t v = row; v < row + (size_t)s[0] && rc == 0; v++) {
                if (!is_seed(h, m, v) || !seg__is_unlabelled(lab[v]))
                    continue;
                lab[v] = ++*nseeds;
                rc = seg__bq_push(&stack, (uint32_t)v);
                while (stack.len > 0 && rc == 0) {
                    size_t u = stack.v[--stack.len];
                    for (int k = 0; k < g->nnb && rc == 0; k++) {
                        size_t w = u + (size_t)g->nb[k];
                        if (seg__is_unlabelled(lab[w]) && is_seed(h, m, w)) {
                            lab[w] = *nseeds;
                            rc = seg__bq_push(&stack, (uint32_t)w);
                        }
                    }
                }
            }
        }
    free(stack.v);
    return rc;
}

/* Seed the first lowest voxel of every domain (the volume, or each section
 * with sections) that has no seed. */
static void seed_empty_domains(const seg_grid *g, const uint8_t *q,
                               uint32_t *lab, uint32_t *nseeds)
{
    const int64_t *s = g->size;
    const int64_t nz = g->sections ? s[2] : 1, dz = g->sections ? 1 : s[2];
    for (int64_t z0 = 0; z0 < nz; z0++) {
        size_t best = 0;
        int seeded = 0;
        for (int64_t z = z0; z < z0 + dz && !seeded; z++)
            for (int64_t y = 0; y < s[1] && !seeded; y++)
                for (int64_t x = 0; x < s[0]; x++) {
                    size_t v = seg__at(g, x, y, z);
                    if (!seg__is_unlabelled(lab[v])) {
                        seeded = 1;
                        break;
                    }
                    if (best == 0 || q[v] < q[best])
                        best = v;
                }
        if (!seeded)
            lab[best] = ++*nseeds;
    }
}

int seg__seeds(const seg_grid *g, const seg_cfg *p, const uint8_t *q,
               uint32_t *lab, uint32_t *nseeds)
{
    const uint32_t level = cnx_segment_quantize((float)p->seed_threshold);
    const int minima = p->seed_method == CNX_SEGMENT_SEEDS_MINIMA;
    uint8_t *h = malloc(g->n), *m = malloc(g->n);
    int rc = 0;
    if (h == NULL || m == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
        goto done;
    }
    init_height(g, q, level, minima, h);
    if (!minima) {
        chamfer_pass(g, h, 1);
        chamfer_pass(g, h, -1);
    }
    memcpy(m, h, g->n);
    rc = cube_max(g, m, p->seed_r);
    if (rc != 0)
        goto done;
    clear_labels(g, q, lab);
    rc = fill_seeds(g, h, m, lab, nseeds);
    if (rc == 0)
        seed_empty_domains(g, q, lab, nseeds);
done:
    free(m);
    free(h);
    return rc;
}
