/*
 * geom.c - boxes, chunk grids and the deterministic task box generator.
 *
 * All arithmetic is int64 on voxel indices; boxes are half-open. The box
 * generator's invariant: the boxes it returns are pairwise disjoint, each is
 * a union of whole (edge-truncated) chunks of the grid, and together they
 * cover the roi widened to whole chunks -- so no two tasks ever write the
 * same chunk object. Order is z-major, then y, then x, independent of
 * anything but the arguments.
 */
#include "cnx/geom.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

cnx_box cnx_box_make(int64_t x0, int64_t y0, int64_t z0, int64_t x1,
                     int64_t y1, int64_t z1)
{
    cnx_box box = {{x0, y0, z0}, {x1, y1, z1}};
    return box;
}

int cnx_box_empty(const cnx_box *box)
{
    for (int i = 0; i < 3; i++)
        if (box->max[i] <= box->min[i])
            return 1;
    return 0;
}

void cnx_box_size(const cnx_box *box, int64_t size[3])
{
    for (int i = 0; i < 3; i++)
        size[i] = cnx_imax(0, box->max[i] - box->min[i]);
}

int64_t cnx_box_voxels(const cnx_box *box)
{
    int64_t s[3];
    cnx_box_size(box, s);
    return s[0] * s[1] * s[2];
}

cnx_box cnx_box_intersect(const cnx_box *a, const cnx_box *b)
{
    cnx_box r;
    for (int i = 0; i < 3; i++) {
        r.min[i] = cnx_imax(a->min[i], b->min[i]);
        r.max[i] = cnx_imin(a->max[i], b->max[i]);
        if (r.max[i] < r.min[i])
            r.max[i] = r.min[i];
    }
    return r;
}

cnx_box cnx_box_hull(const cnx_box *a, const cnx_box *b)
{
    cnx_box r;
    for (int i = 0; i < 3; i++) {
        r.min[i] = cnx_imin(a->min[i], b->min[i]);
        r.max[i] = cnx_imax(a->max[i], b->max[i]);
    }
    return r;
}

int cnx_box_contains(const cnx_box *outer, const cnx_box *inner)
{
    if (cnx_box_empty(inner))
        return 1;
    for (int i = 0; i < 3; i++)
        if (inner->min[i] < outer->min[i] || inner->max[i] > outer->max[i])
            return 0;
    return 1;
}

int cnx_box_equal(const cnx_box *a, const cnx_box *b)
{
    for (int i = 0; i < 3; i++)
        if (a->min[i] != b->min[i] || a->max[i] != b->max[i])
            return 0;
    return 1;
}

cnx_box cnx_box_grow(const cnx_box *box, int64_t halo, const cnx_box *bounds)
{
    cnx_box r;
    for (int i = 0; i < 3; i++) {
        r.min[i] = box->min[i] - halo;
        r.max[i] = box->max[i] + halo;
    }
    if (bounds != NULL)
        r = cnx_box_intersect(&r, bounds);
    return r;
}

int cnx_box_format(const cnx_box *box, char *buf, size_t n)
{
    int len = snprintf(buf, n,
                       "%" PRId64 "-%" PRId64 "_%" PRId64 "-%" PRId64
                       "_%" PRId64 "-%" PRId64,
                       box->min[0], box->max[0], box->min[1], box->max[1],
                       box->min[2], box->max[2]);
    if (len < 0 || (size_t)len >= n)
        return cnx_error_set(CNX_ERANGE, 0, "box name does not fit %zu bytes",
                             n);
    return 0;
}

/* Parse one decimal int64 (optional '-') at *p; advance *p. */
static int parse_i64(const char **p, int64_t *out)
{
    const char *s = *p;
    int neg = 0;
    int64_t v = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    }
    if (*s < '0' || *s > '9')
        return -1;
    while (*s >= '0' && *s <= '9') {
        if (v > (INT64_MAX - (*s - '0')) / 10)
            return -1;
        v = v * 10 + (*s - '0');
        s++;
    }
    *out = neg ? -v : v;
    *p = s;
    return 0;
}

int cnx_box_parse(const char *text, cnx_box *out)
{
    const char *p = text;
    for (int i = 0; i < 3; i++) {
        if (parse_i64(&p, &out->min[i]) != 0 || *p++ != '-' ||
            parse_i64(&p, &out->max[i]) != 0)
            goto bad;
        if (i < 2 && *p++ != '_')
            goto bad;
    }
    if (*p != '\0')
        goto bad;
    return 0;
bad:
    return cnx_error_set(CNX_EINVAL, 0,
                         "bad box name '%s': expected x0-x1_y0-y1_z0-z1",
                         text);
}

int cnx_grid_check(const cnx_grid *grid)
{
    for (int i = 0; i < 3; i++) {
        if (grid->size[i] < 0 || grid->chunk[i] <= 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "bad chunk grid: axis %d size %" PRId64
                                 " chunk %" PRId64,
                                 i, grid->size[i], grid->chunk[i]);
    }
    return 0;
}

cnx_box cnx_grid_bounds(const cnx_grid *grid)
{
    cnx_box b;
    for (int i = 0; i < 3; i++) {
        b.min[i] = grid->offset[i];
        b.max[i] = grid->offset[i] + grid->size[i];
    }
    return b;
}

void cnx_grid_counts(const cnx_grid *grid, int64_t counts[3])
{
    for (int i = 0; i < 3; i++)
        counts[i] = cnx_ceildiv(grid->size[i], grid->chunk[i]);
}

cnx_box cnx_grid_chunk_box(const cnx_grid *grid, const int64_t g[3])
{
    cnx_box b;
    for (int i = 0; i < 3; i++) {
        b.min[i] = grid->offset[i] + g[i] * grid->chunk[i];
        b.max[i] = grid->offset[i] +
                   cnx_imin((g[i] + 1) * grid->chunk[i], grid->size[i]);
    }
    return b;
}

int cnx_grid_is_aligned(const cnx_grid *grid, const cnx_box *box)
{
    cnx_box bounds = cnx_grid_bounds(grid);
    if (cnx_box_empty(box) || !cnx_box_contains(&bounds, box))
        return 0;
    for (int i = 0; i < 3; i++) {
        int64_t lo = box->min[i] - grid->offset[i];
        int64_t hi = box->max[i] - grid->offset[i];
        if (lo % grid->chunk[i] != 0)
            return 0;
        if (hi % grid->chunk[i] != 0 && box->max[i] != bounds.max[i])
            return 0;
    }
    return 1;
}

void cnx_grid_chunk_range(const cnx_grid *grid, const cnx_box *box,
                          int64_t lo[3], int64_t hi[3])
{
    cnx_box bounds = cnx_grid_bounds(grid);
    cnx_box clip = cnx_box_intersect(box, &bounds);
    for (int i = 0; i < 3; i++) {
        if (clip.max[i] <= clip.min[i]) {
            lo[i] = hi[i] = 0;
            continue;
        }
        lo[i] = cnx_floordiv(clip.min[i] - grid->offset[i], grid->chunk[i]);
        hi[i] = cnx_ceildiv(clip.max[i] - grid->offset[i], grid->chunk[i]);
    }
}

int cnx_boxgen(cnx_box **out, size_t *count, const cnx_grid *grid,
               const cnx_box *roi, const int64_t task_size[3])
{
    int64_t first[3], lo[3], hi[3], step[3], n[3];
    cnx_box *boxes;
    size_t k = 0;
    int rc = cnx_grid_check(grid);

    *out = NULL;
    *count = 0;
    if (rc != 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        if (task_size[i] <= 0 || task_size[i] % grid->chunk[i] != 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "task size %" PRId64 " on axis %d is not a "
                                 "positive multiple of the chunk size %" PRId64,
                                 task_size[i], i, grid->chunk[i]);
    }
    cnx_grid_chunk_range(grid, roi, first, hi);
    for (int i = 0; i < 3; i++) {
        if (hi[i] <= first[i])
            return 0;
        step[i] = task_size[i] / grid->chunk[i];
        /* Task cells are aligned to the grid origin, not to the roi, so two
         * requests over overlapping regions cut identical tasks. */
        lo[i] = cnx_floordiv(first[i], step[i]) * step[i];
        n[i] = cnx_ceildiv(hi[i] - lo[i], step[i]);
    }
    if (n[0] * n[1] * n[2] > (int64_t)(SIZE_MAX / sizeof(cnx_box)))
        return cnx_error_set(CNX_ETOOBIG, 0, "too many task boxes");
    boxes = calloc((size_t)(n[0] * n[1] * n[2]), sizeof(*boxes));
    if (boxes == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory for task boxes");
    for (int64_t z = 0; z < n[2]; z++) {
        for (int64_t y = 0; y < n[1]; y++) {
            for (int64_t x = 0; x < n[0]; x++) {
                const int64_t c[3] = {x, y, z};
                cnx_box b;
                for (int i = 0; i < 3; i++) {
                    /* Chunk indices [g0, g1) of this cell that the widened
                     * roi covers. */
                    int64_t g0 = cnx_imax(lo[i] + c[i] * step[i], first[i]);
                    int64_t g1 = cnx_imin(lo[i] + (c[i] + 1) * step[i], hi[i]);
                    b.min[i] = grid->offset[i] + g0 * grid->chunk[i];
                    b.max[i] = grid->offset[i] +
                               cnx_imin(g1 * grid->chunk[i], grid->size[i]);
                }
                if (!cnx_box_empty(&b))
                    boxes[k++] = b;
            }
        }
    }
    *out = boxes;
    *count = k;
    return 0;
}
