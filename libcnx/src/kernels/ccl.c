/*
 * ccl.c - 4-connected component labelling of one 2D section.
 *
 * Pass 1 scans in raster order and gives each non-zero pixel the label of
 * its left or upper non-zero neighbour, or a new provisional label when it
 * has neither; when both exist with different labels, their sets are united
 * in a union-find forest whose root is always the smallest label of the set
 * (so a root is the provisional label of the set's first pixel in raster
 * order). Flattening the forest in increasing label order then numbers the
 * roots 1, 2, 3, ... -- exactly raster order of first pixels -- and pass 2
 * rewrites every pixel through that table. Deterministic and O(pixels);
 * memory: the output plus one uint32 per provisional label (grown on
 * demand, at most half a uint32 per pixel).
 */
#include "cnx/ccl.h"

#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "unionfind_int.h"

/* Provisional labels: parent[l] <= l, parent[l] == l at a root. */
typedef struct ccl_forest {
    uint32_t *parent;
    size_t cap;
    uint32_t n; /* labels in use are 1..n; parent[0] = 0 */
} ccl_forest;

/* @return a new label, or 0 if the table cannot grow. */
static uint32_t forest_new(ccl_forest *f)
{
    uint32_t l;
    if ((size_t)f->n + 1 >= f->cap) {
        size_t cap = f->cap * 2;
        uint32_t *grown = realloc(f->parent, cap * sizeof(*grown));
        if (grown == NULL)
            return 0;
        f->parent = grown;
        f->cap = cap;
    }
    l = ++f->n;
    f->parent[l] = l;
    return l;
}

/*
 * Pass 1 for one pixel type. `left` carries the label of the pixel to the
 * left (0 if background or at the row start), so the common run case costs
 * one compare; `up` is read from the previous output row.
 */
#define CCL_PASS1(NAME, T)                                                     \
    static int NAME(uint32_t *labels, const T *px, int64_t w, int64_t h,       \
                    ccl_forest *f)                                             \
    {                                                                          \
        for (int64_t y = 0; y < h; y++) {                                      \
            const T *row = px + (size_t)y * (size_t)w;                         \
            uint32_t *out = labels + (size_t)y * (size_t)w;                    \
            const uint32_t *above = y > 0 ? out - w : NULL;                    \
            uint32_t left = 0;                                                 \
            for (int64_t x = 0; x < w; x++) {                                  \
                uint32_t up, l;                                                \
                if (row[x] == 0) {                                             \
                    out[x] = 0;                                                \
                    left = 0;                                                  \
                    continue;                                                  \
                }                                                              \
                up = above != NULL ? above[x] : 0;                             \
                if (left != 0) {                                               \
                    l = left;                                                  \
                    if (up != 0 && up != left)                                 \
                        cnx__uf_union(f->parent, up, left);                    \
                } else if (up != 0) {                                          \
                    l = up;                                                    \
                } else {                                                       \
                    l = forest_new(f);                                         \
                    if (l == 0)                                                \
                        return CNX_ENOMEM;                                     \
                }                                                              \
                out[x] = l;                                                    \
                left = l;                                                      \
            }                                                                  \
        }                                                                      \
        return 0;                                                              \
    }

CCL_PASS1(pass1_u8, uint8_t)
CCL_PASS1(pass1_u16, uint16_t)
CCL_PASS1(pass1_u32, uint32_t)
CCL_PASS1(pass1_u64, uint64_t)

int cnx_ccl2d(uint32_t *labels, uint32_t *count, const void *pixels,
              cnx_dtype dtype, int64_t width, int64_t height)
{
    ccl_forest f;
    size_t npix, i;
    uint32_t next = 0;
    int rc;

    *count = 0;
    if (width < 1 || height < 1 || width > ((int64_t)1 << 32) ||
        height > ((int64_t)1 << 32) ||
        (uint64_t)width * (uint64_t)height > ((uint64_t)1 << 32))
        return cnx_error_set(CNX_EINVAL, 0,
                             "ccl: image of %lldx%lld pixels (each side >= "
                             "1, at most 2^32 pixels)",
                             (long long)width, (long long)height);
    npix = (size_t)width * (size_t)height;
    /* A new label needs a background pixel to its left, so there are at
     * most ceil(w/2) per row; start small and grow on demand. */
    f.cap = 4096;
    f.n = 0;
    f.parent = malloc(f.cap * sizeof(*f.parent));
    if (f.parent == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "ccl: out of memory");
    f.parent[0] = 0;

    switch (dtype) {
    case CNX_DT_UINT8:
        rc = pass1_u8(labels, pixels, width, height, &f);
        break;
    case CNX_DT_UINT16:
        rc = pass1_u16(labels, pixels, width, height, &f);
        break;
    case CNX_DT_UINT32:
        rc = pass1_u32(labels, pixels, width, height, &f);
        break;
    case CNX_DT_UINT64:
        rc = pass1_u64(labels, pixels, width, height, &f);
        break;
    default:
        free(f.parent);
        return cnx_error_set(CNX_EINVAL, 0,
                             "ccl: pixel type %d is not an unsigned integer",
                             (int)dtype);
    }
    if (rc != 0) {
        free(f.parent);
        return cnx_error_set(CNX_ENOMEM, 0,
                             "ccl: out of memory for provisional labels");
    }

    /* Flatten: roots get final labels in increasing (raster) order; every
     * other label takes its parent's final label, already computed because
     * parent[l] < l. */
    for (uint32_t l = 1; l <= f.n; l++) {
        if (f.parent[l] < l)
            f.parent[l] = f.parent[f.parent[l]];
        else
            f.parent[l] = ++next;
    }
    for (i = 0; i < npix; i++)
        labels[i] = f.parent[labels[i]];
    free(f.parent);
    *count = next;
    return 0;
}
