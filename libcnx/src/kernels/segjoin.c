/*
 * segjoin.c - segmentation across chunk seams: fragments with geometry ids
 * and face records, seam edges, mappings and relabelling. The join itself
 * is segjoin_tree.c. See cnx/segjoin.h for the method and docs/formats.md
 * for the layouts; the segment properties document is segjoin_io.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "segment_int.h"
#include "segjoin_int.h"

#define FACE_MAGIC "CNXFACE1"
#define MAP_MAGIC "CNXMAP01"

int sj__nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "segjoin: out of memory");
}

/* ---- little-endian buffers ---------------------------------------------- */


void sj__put(sj_buf *b, const void *p, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (d == NULL) {
            b->failed = 1;
            return;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

void sj__put_u64(sj_buf *b, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    sj__put(b, t, 8);
}

void sj__put_u32(sj_buf *b, uint32_t v)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    sj__put(b, t, 4);
}


uint64_t sj__get_u64(sj_rd *r)
{
    uint64_t v = 0;
    if (r->bad || r->left < 8) {
        r->bad = 1;
        return 0;
    }
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += 8;
    r->left -= 8;
    return v;
}

uint32_t sj__get_u32(sj_rd *r)
{
    uint32_t v = 0;
    if (r->bad || r->left < 4) {
        r->bad = 1;
        return 0;
    }
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)r->p[i] << (8 * i);
    r->p += 4;
    r->left -= 4;
    return v;
}

const uint8_t *sj__get_bytes(sj_rd *r, size_t n)
{
    const uint8_t *p = r->p;
    if (r->bad || r->left < n) {
        r->bad = 1;
        return NULL;
    }
    r->p += n;
    r->left -= n;
    return p;
}

/* ---- faces --------------------------------------------------------------- */

/* The two axes of a face normal to axis a, in increasing order. */
void sj__face_axes(int a, int *u, int *v)
{
    *u = a == 0 ? 1 : 0;
    *v = a == 2 ? 1 : 2;
}

/* Index of global voxel g within box b (x fastest). */
static int64_t box_index(const cnx_box *b, const int64_t g[3])
{
    int64_t sx = b->max[0] - b->min[0], sy = b->max[1] - b->min[1];
    return (g[0] - b->min[0]) +
           sx * ((g[1] - b->min[1]) + sy * (g[2] - b->min[2]));
}

/* Face f (axis f / 2, high side if f odd) of roi: RLE labels, then the
 * boundary values of its voxel layer. */
static void put_face(sj_buf *b, int f, const cnx_box *roi, const uint64_t *labels,
                     const float *boundary, const cnx_box *bbox)
{
    int a = f / 2, u, v;
    int64_t g[3], nruns = 0, run = 0;
    uint64_t cur = 0;
    size_t at;
    sj__face_axes(a, &u, &v);
    g[a] = f % 2 ? roi->max[a] - 1 : roi->min[a];
    at = b->len;
    sj__put_u64(b, 0); /* run count, patched below */
    for (g[v] = roi->min[v]; g[v] < roi->max[v]; g[v]++)
        for (g[u] = roi->min[u]; g[u] < roi->max[u]; g[u]++) {
            uint64_t l = labels[box_index(roi, g)];
            if (run > 0 && l == cur && run < UINT32_MAX) {
                run++;
                continue;
            }
            if (run > 0) {
                sj__put_u64(b, cur);
                sj__put_u32(b, (uint32_t)run);
                nruns++;
            }
            cur = l;
            run = 1;
        }
    sj__put_u64(b, cur);
    sj__put_u32(b, (uint32_t)run);
    nruns++;
    if (!b->failed)
        for (int i = 0; i < 8; i++)
            b->data[at + (size_t)i] = (uint8_t)((uint64_t)nruns >> (8 * i));
    for (g[v] = roi->min[v]; g[v] < roi->max[v]; g[v]++)
        for (g[u] = roi->min[u]; g[u] < roi->max[u]; g[u]++) {
            uint8_t q = (uint8_t)cnx_segment_quantize(
                boundary[box_index(bbox, g)]);
            sj__put(b, &q, 1);
        }
}

int sj__box_ok(const cnx_box *b)
{
    for (int i = 0; i < 3; i++)
        if (b->min[i] < 0 || b->max[i] <= b->min[i] ||
            b->max[i] > CNX_SEGJOIN_COORD_MAX)
            return 0;
    return 1;
}

static int inside(const cnx_box *in, const cnx_box *out)
{
    for (int i = 0; i < 3; i++)
        if (in->min[i] < out->min[i] || in->max[i] > out->max[i])
            return 0;
    return 1;
}

/* Crop the block's labels to roi with geometry ids; count voxels. */
static int crop_ids(const uint32_t *block, uint32_t nlabels,
                    const cnx_box *bbox, const cnx_box *roi, uint64_t *labels,
                    sj_buf *b)
{
    uint64_t *id = calloc((size_t)nlabels + 1, sizeof(*id));
    uint64_t *count = calloc((size_t)nlabels + 1, sizeof(*count));
    uint32_t *order = malloc(((size_t)nlabels + 1) * sizeof(*order));
    size_t nfrag = 0, k = 0;
    int64_t g[3];
    if (id == NULL || count == NULL || order == NULL) {
        free(id);
        free(count);
        free(order);
        return sj__nomem();
    }
    for (g[2] = roi->min[2]; g[2] < roi->max[2]; g[2]++)
        for (g[1] = roi->min[1]; g[1] < roi->max[1]; g[1]++)
            for (g[0] = roi->min[0]; g[0] < roi->max[0]; g[0]++) {
                uint32_t l = block[box_index(bbox, g)];
                if (id[l] == 0) {
                    id[l] = cnx_segjoin_id(g[0], g[1], g[2]);
                    order[nfrag++] = l;
                }
                count[l]++;
                labels[k++] = id[l];
            }
    /* First voxels in raster order have ascending packed ids (z, y, x
     * in the high bits first), so order[] is already sorted by id. */
    sj__put_u64(b, nfrag);
    for (size_t i = 0; i < nfrag; i++) {
        sj__put_u64(b, id[order[i]]);
        sj__put_u64(b, count[order[i]]);
    }
    free(id);
    free(count);
    free(order);
    return 0;
}

int cnx_segjoin_fragments(const float *boundary, const cnx_box *bbox,
                          const cnx_box *roi, const cnx_segment_params *p,
                          uint64_t *labels, uint8_t **face, size_t *face_len)
{
    int64_t size[3];
    uint32_t *block, nlabels = 0;
    sj_buf b = {0};
    int rc;

    *face = NULL;
    *face_len = 0;
    if (boundary == NULL || bbox == NULL || roi == NULL || p == NULL ||
        labels == NULL || !sj__box_ok(bbox) || !sj__box_ok(roi) || !inside(roi, bbox))
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: fragments: the chunk must lie in the "
                             "block, both in [0, 2^21) on every axis");
    cnx_box_size(bbox, size);
    block = malloc((size_t)cnx_box_voxels(bbox) * sizeof(*block));
    if (block == NULL)
        return sj__nomem();
    rc = cnx_segment_volume(boundary, size, p, block, &nlabels);
    if (rc == 0) {
        sj__put(&b, FACE_MAGIC, 8);
        for (int i = 0; i < 3; i++)
            sj__put_u64(&b, (uint64_t)roi->min[i]);
        for (int i = 0; i < 3; i++)
            sj__put_u64(&b, (uint64_t)roi->max[i]);
        rc = crop_ids(block, nlabels, bbox, roi, labels, &b);
    }
    free(block);
    for (int f = 0; f < 6 && rc == 0; f++)
        put_face(&b, f, roi, labels, boundary, bbox);
    if (rc == 0 && b.failed)
        rc = sj__nomem();
    if (rc != 0) {
        free(b.data);
        return rc;
    }
    *face = b.data;
    *face_len = b.len;
    return 0;
}

int cnx_segjoin_chunk(const void *in, cnx_dtype dtype, const cnx_box *bbox,
                      const cnx_box *roi, const cnx_segment_params *p,
                      uint64_t *labels, uint8_t **face, size_t *face_len)
{
    cnx_box seen;
    int64_t size[3], lo[3], osize[3];
    float *b;
    int rc;

    *face = NULL;
    *face_len = 0;
    if (in == NULL || bbox == NULL || roi == NULL || p == NULL ||
        !sj__box_ok(bbox) || !sj__box_ok(roi) || !inside(roi, bbox))
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: chunk: the chunk must lie in the "
                             "block, both in [0, 2^21) on every axis");
    if (dtype != CNX_DT_UINT8 && dtype != CNX_DT_FLOAT32)
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: chunk: input must be uint8 or "
                             "float32");
    seen = *bbox;
    if (p->raw_input)
        seen = cnx_box_grow(roi, cnx_segment_context(p), bbox);
    cnx_box_size(bbox, size);
    cnx_box_size(&seen, osize);
    for (int i = 0; i < 3; i++)
        lo[i] = seen.min[i] - bbox->min[i];
    b = malloc((size_t)cnx_box_voxels(&seen) * sizeof(*b));
    if (b == NULL)
        return sj__nomem();
    rc = dtype == CNX_DT_UINT8
             ? cnx_segment_boundary_u8_region(in, size, p, lo, osize, b)
             : cnx_segment_boundary_f32_region(in, size, p, lo, osize, b);
    if (rc == 0)
        rc = cnx_segjoin_fragments(b, &seen, roi, p, labels, face, face_len);
    free(b);
    return rc;
}

/* ---- reading face records -------------------------------------------------- */


int sj__corrupt(const char *name, const char *what)
{
    return cnx_error_set(CNX_ECORRUPT, 0, "segjoin: face record %s: %s",
                         name ? name : "(unnamed)", what);
}

int sj__parse_face(const cnx_segjoin_input *in, sj_face *f)
{
    sj_rd r = {in->data, in->len, 0};
    const uint8_t *magic = sj__get_bytes(&r, 8);
    if (magic == NULL || memcmp(magic, FACE_MAGIC, 8) != 0)
        return sj__corrupt(in->name, "not a face record (magic)");
    for (int i = 0; i < 3; i++)
        f->roi.min[i] = (int64_t)sj__get_u64(&r);
    for (int i = 0; i < 3; i++)
        f->roi.max[i] = (int64_t)sj__get_u64(&r);
    if (r.bad || !sj__box_ok(&f->roi))
        return sj__corrupt(in->name, "bad chunk box");
    f->nfrag = sj__get_u64(&r);
    if (r.bad || f->nfrag > r.left / 16)
        return sj__corrupt(in->name, "fragment count over the record's length");
    f->frags = sj__get_bytes(&r, f->nfrag * 16);
    for (int k = 0; k < 6; k++) {
        int a = k / 2, u, v;
        uint64_t n, total = 0;
        sj__face_axes(a, &u, &v);
        n = (uint64_t)(f->roi.max[u] - f->roi.min[u]) *
            (uint64_t)(f->roi.max[v] - f->roi.min[v]);
        f->nruns[k] = sj__get_u64(&r);
        if (r.bad || f->nruns[k] > r.left / 12 || f->nruns[k] == 0)
            return sj__corrupt(in->name, "face run count over the record's "
                                     "length");
        f->runs[k] = sj__get_bytes(&r, f->nruns[k] * 12);
        for (size_t i = 0; i < f->nruns[k]; i++) {
            sj_rd q = {f->runs[k] + i * 12 + 8, 4, 0};
            total += sj__get_u32(&q);
        }
        if (total != n)
            return sj__corrupt(in->name, "face runs do not cover the face");
        f->vals[k] = sj__get_bytes(&r, (size_t)n);
        if (r.bad)
            return sj__corrupt(in->name, "truncated face values");
    }
    if (r.left != 0)
        return sj__corrupt(in->name, "bytes after the last face");
    return 0;
}

uint64_t sj__le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

uint32_t sj__le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/* Expand face k's runs into labels[]. */
void sj__expand_face(const sj_face *f, int k, uint64_t *labels)
{
    size_t at = 0;
    for (size_t i = 0; i < f->nruns[k]; i++) {
        uint64_t l = sj__le64(f->runs[k] + i * 12);
        uint32_t n = sj__le32(f->runs[k] + i * 12 + 8);
        for (uint32_t j = 0; j < n; j++)
            labels[at++] = l;
    }
}

/* ---- the join ---------------------------------------------------------- */



static int sj__cmp_edge(const void *x, const void *y)
{
    const sj_edge *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    return 0;
}

static int sj__add_edge(sj_edges *es, uint64_t a, uint64_t b, uint64_t v, uint64_t n)
{
    if (es->n == es->cap) {
        size_t cap = es->cap ? es->cap * 2 : 1024;
        sj_edge *e = realloc(es->e, cap * sizeof(*e));
        if (e == NULL)
            return sj__nomem();
        es->e = e;
        es->cap = cap;
    }
    es->e[es->n++] = (sj_edge){a, b, v, n};
    return 0;
}

/* Sort sj_edges by (a, b) and sum duplicates (integers: exact in any order). */
static void sj__merge_edges(sj_edges *es, size_t from)
{
    size_t w = from;
    if (es->n <= from)
        return;
    qsort(es->e + from, es->n - from, sizeof(*es->e), sj__cmp_edge);
    for (size_t i = from; i < es->n; i++) {
        if (w > from && sj__cmp_edge(&es->e[w - 1], &es->e[i]) == 0) {
            es->e[w - 1].sum += es->e[i].sum;
            es->e[w - 1].n += es->e[i].n;
        } else {
            es->e[w++] = es->e[i];
        }
    }
    es->n = w;
}

int sj__cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

int sj__face_edges(const sj_face *lo, const sj_face *hi, int a,
                      sj_edges *es)
{
    int u, v;
    size_t n, from = es->n;
    uint64_t *la, *lb;
    int rc = 0;
    sj__face_axes(a, &u, &v);
    n = (size_t)((lo->roi.max[u] - lo->roi.min[u]) *
                 (lo->roi.max[v] - lo->roi.min[v]));
    la = malloc(n * sizeof(*la));
    lb = malloc(n * sizeof(*lb));
    if (la == NULL || lb == NULL) {
        free(la);
        free(lb);
        return sj__nomem();
    }
    sj__expand_face(lo, 2 * a + 1, la);
    sj__expand_face(hi, 2 * a, lb);
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t w = cnx_segment_pair_value_q(lo->vals[2 * a + 1][i],
                                              hi->vals[2 * a][i]);
        if (es->n > from && es->e[es->n - 1].a == la[i] &&
            es->e[es->n - 1].b == lb[i]) {
            es->e[es->n - 1].sum += w;
            es->e[es->n - 1].n++;
        } else {
            rc = sj__add_edge(es, la[i], lb[i], w, 1);
        }
    }
    free(la);
    free(lb);
    if (rc == 0)
        sj__merge_edges(es, from);
    return rc;
}

void cnx_segjoin_free(cnx_segjoin *j)
{
    if (j == NULL)
        return;
    free(j->chunks);
    free(j->first);
    free(j->frag);
    free(j->seg);
    free(j->seg_ids);
    free(j->seg_size);
    free(j->seg_multi);
    memset(j, 0, sizeof(*j));
}

/* ---- mappings and properties ------------------------------------------- */

int cnx_segjoin_mapping_encode(const cnx_segjoin *j, size_t k, uint8_t **out,
                               size_t *len)
{
    sj_buf b = {0};
    *out = NULL;
    *len = 0;
    if (k >= j->nchunks)
        return cnx_error_set(CNX_EINVAL, 0, "segjoin: no chunk %zu", k);
    sj__put(&b, MAP_MAGIC, 8);
    sj__put_u64(&b, j->first[k + 1] - j->first[k]);
    for (size_t f = j->first[k]; f < j->first[k + 1]; f++) {
        sj__put_u64(&b, j->frag[f]);
        sj__put_u64(&b, j->seg[f]);
    }
    if (b.failed) {
        free(b.data);
        return sj__nomem();
    }
    *out = b.data;
    *len = b.len;
    return 0;
}

int cnx_segjoin_relabel(uint64_t *labels, size_t n, const uint8_t *mapping,
                        size_t len)
{
    sj_rd r = {mapping, len, 0};
    const uint8_t *magic = sj__get_bytes(&r, 8), *pairs;
    uint64_t m = sj__get_u64(&r), last = 0, to = 0;
    int have = 0;
    if (magic == NULL || memcmp(magic, MAP_MAGIC, 8) != 0 || r.bad ||
        m != r.left / 16 || r.left % 16 != 0)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "segjoin: mapping: not a mapping document of "
                             "its length");
    pairs = r.p;
    for (size_t i = 0; i < n; i++) {
        if (!have || labels[i] != last) {
            uint64_t lo = 0, hi = m;
            last = labels[i];
            while (lo < hi) {
                uint64_t mid = lo + (hi - lo) / 2;
                if (sj__le64(pairs + mid * 16) < last)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo == m || sj__le64(pairs + lo * 16) != last)
                return cnx_error_set(CNX_ECORRUPT, 0,
                                     "segjoin: mapping: no entry for "
                                     "fragment %" PRIu64,
                                     last);
            to = sj__le64(pairs + lo * 16 + 8);
            have = 1;
        }
        labels[i] = to;
    }
    return 0;
}
