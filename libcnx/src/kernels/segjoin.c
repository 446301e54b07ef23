/*
 * segjoin.c - segmentation across chunk seams: fragments with geometry ids
 * and face records, the join over shared faces, mappings and relabelling.
 * See cnx/segjoin.h for the method and docs/formats.md for the layouts;
 * the segment properties document is segjoin_io.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "segment_int.h"

#define FACE_MAGIC "CNXFACE1"
#define MAP_MAGIC "CNXMAP01"

static int nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "segjoin: out of memory");
}

/* ---- little-endian buffers ---------------------------------------------- */

typedef struct buf {
    uint8_t *data;
    size_t len, cap;
    int failed;
} buf;

static void put(buf *b, const void *p, size_t n)
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

static void put_u64(buf *b, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, 8);
}

static void put_u32(buf *b, uint32_t v)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, 4);
}

typedef struct rd {
    const uint8_t *p;
    size_t left;
    int bad;
} rd;

static uint64_t get_u64(rd *r)
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

static uint32_t get_u32(rd *r)
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

static const uint8_t *get_bytes(rd *r, size_t n)
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
static void face_axes(int a, int *u, int *v)
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
static void put_face(buf *b, int f, const cnx_box *roi, const uint64_t *labels,
                     const float *boundary, const cnx_box *bbox)
{
    int a = f / 2, u, v;
    int64_t g[3], nruns = 0, run = 0;
    uint64_t cur = 0;
    size_t at;
    face_axes(a, &u, &v);
    g[a] = f % 2 ? roi->max[a] - 1 : roi->min[a];
    at = b->len;
    put_u64(b, 0); /* run count, patched below */
    for (g[v] = roi->min[v]; g[v] < roi->max[v]; g[v]++)
        for (g[u] = roi->min[u]; g[u] < roi->max[u]; g[u]++) {
            uint64_t l = labels[box_index(roi, g)];
            if (run > 0 && l == cur && run < UINT32_MAX) {
                run++;
                continue;
            }
            if (run > 0) {
                put_u64(b, cur);
                put_u32(b, (uint32_t)run);
                nruns++;
            }
            cur = l;
            run = 1;
        }
    put_u64(b, cur);
    put_u32(b, (uint32_t)run);
    nruns++;
    if (!b->failed)
        for (int i = 0; i < 8; i++)
            b->data[at + (size_t)i] = (uint8_t)((uint64_t)nruns >> (8 * i));
    for (g[v] = roi->min[v]; g[v] < roi->max[v]; g[v]++)
        for (g[u] = roi->min[u]; g[u] < roi->max[u]; g[u]++) {
            uint8_t q = (uint8_t)cnx_segment_quantize(
                boundary[box_index(bbox, g)]);
            put(b, &q, 1);
        }
}

static int box_ok(const cnx_box *b)
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
                    buf *b)
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
        return nomem();
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
    put_u64(b, nfrag);
    for (size_t i = 0; i < nfrag; i++) {
        put_u64(b, id[order[i]]);
        put_u64(b, count[order[i]]);
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
    buf b = {0};
    int rc;

    *face = NULL;
    *face_len = 0;
    if (boundary == NULL || bbox == NULL || roi == NULL || p == NULL ||
        labels == NULL || !box_ok(bbox) || !box_ok(roi) || !inside(roi, bbox))
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: fragments: the chunk must lie in the "
                             "block, both in [0, 2^21) on every axis");
    cnx_box_size(bbox, size);
    block = malloc((size_t)cnx_box_voxels(bbox) * sizeof(*block));
    if (block == NULL)
        return nomem();
    rc = cnx_segment_volume(boundary, size, p, block, &nlabels);
    if (rc == 0) {
        put(&b, FACE_MAGIC, 8);
        for (int i = 0; i < 3; i++)
            put_u64(&b, (uint64_t)roi->min[i]);
        for (int i = 0; i < 3; i++)
            put_u64(&b, (uint64_t)roi->max[i]);
        rc = crop_ids(block, nlabels, bbox, roi, labels, &b);
    }
    free(block);
    for (int f = 0; f < 6 && rc == 0; f++)
        put_face(&b, f, roi, labels, boundary, bbox);
    if (rc == 0 && b.failed)
        rc = nomem();
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
        !box_ok(bbox) || !box_ok(roi) || !inside(roi, bbox))
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
        return nomem();
    rc = dtype == CNX_DT_UINT8
             ? cnx_segment_boundary_u8_region(in, size, p, lo, osize, b)
             : cnx_segment_boundary_f32_region(in, size, p, lo, osize, b);
    if (rc == 0)
        rc = cnx_segjoin_fragments(b, &seen, roi, p, labels, face, face_len);
    free(b);
    return rc;
}

/* ---- reading face records -------------------------------------------------- */

typedef struct face_rec {
    cnx_box roi;
    size_t nfrag;
    const uint8_t *frags;   /* nfrag * 16 bytes */
    size_t nruns[6];
    const uint8_t *runs[6]; /* nruns * 12 bytes */
    const uint8_t *vals[6]; /* face voxels */
} face_rec;

static int corrupt(const char *name, const char *what)
{
    return cnx_error_set(CNX_ECORRUPT, 0, "segjoin: face record %s: %s",
                         name ? name : "(unnamed)", what);
}

static int parse_face(const cnx_segjoin_input *in, face_rec *f)
{
    rd r = {in->data, in->len, 0};
    const uint8_t *magic = get_bytes(&r, 8);
    if (magic == NULL || memcmp(magic, FACE_MAGIC, 8) != 0)
        return corrupt(in->name, "not a face record (magic)");
    for (int i = 0; i < 3; i++)
        f->roi.min[i] = (int64_t)get_u64(&r);
    for (int i = 0; i < 3; i++)
        f->roi.max[i] = (int64_t)get_u64(&r);
    if (r.bad || !box_ok(&f->roi))
        return corrupt(in->name, "bad chunk box");
    f->nfrag = get_u64(&r);
    if (r.bad || f->nfrag > r.left / 16)
        return corrupt(in->name, "fragment count over the record's length");
    f->frags = get_bytes(&r, f->nfrag * 16);
    for (int k = 0; k < 6; k++) {
        int a = k / 2, u, v;
        uint64_t n, total = 0;
        face_axes(a, &u, &v);
        n = (uint64_t)(f->roi.max[u] - f->roi.min[u]) *
            (uint64_t)(f->roi.max[v] - f->roi.min[v]);
        f->nruns[k] = get_u64(&r);
        if (r.bad || f->nruns[k] > r.left / 12 || f->nruns[k] == 0)
            return corrupt(in->name, "face run count over the record's "
                                     "length");
        f->runs[k] = get_bytes(&r, f->nruns[k] * 12);
        for (size_t i = 0; i < f->nruns[k]; i++) {
            rd q = {f->runs[k] + i * 12 + 8, 4, 0};
            total += get_u32(&q);
        }
        if (total != n)
            return corrupt(in->name, "face runs do not cover the face");
        f->vals[k] = get_bytes(&r, (size_t)n);
        if (r.bad)
            return corrupt(in->name, "truncated face values");
    }
    if (r.left != 0)
        return corrupt(in->name, "bytes after the last face");
    return 0;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint32_t le32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

/* Expand face k's runs into labels[]. */
static void expand_face(const face_rec *f, int k, uint64_t *labels)
{
    size_t at = 0;
    for (size_t i = 0; i < f->nruns[k]; i++) {
        uint64_t l = le64(f->runs[k] + i * 12);
        uint32_t n = le32(f->runs[k] + i * 12 + 8);
        for (uint32_t j = 0; j < n; j++)
            labels[at++] = l;
    }
}

/* ---- the join ---------------------------------------------------------- */

typedef struct edge {
    uint64_t a, b;
    uint64_t sum, n; /* of cnx_segment_pair_value over the face pairs */
} edge;

typedef struct edges {
    edge *e;
    size_t n, cap;
} edges;

static int cmp_edge(const void *x, const void *y)
{
    const edge *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    if (p->b != q->b)
        return p->b < q->b ? -1 : 1;
    return 0;
}

static int add_edge(edges *es, uint64_t a, uint64_t b, uint64_t v, uint64_t n)
{
    if (es->n == es->cap) {
        size_t cap = es->cap ? es->cap * 2 : 1024;
        edge *e = realloc(es->e, cap * sizeof(*e));
        if (e == NULL)
            return nomem();
        es->e = e;
        es->cap = cap;
    }
    es->e[es->n++] = (edge){a, b, v, n};
    return 0;
}

/* Sort edges by (a, b) and sum duplicates (integers: exact in any order). */
static void merge_edges(edges *es, size_t from)
{
    size_t w = from;
    if (es->n <= from)
        return;
    qsort(es->e + from, es->n - from, sizeof(*es->e), cmp_edge);
    for (size_t i = from; i < es->n; i++) {
        if (w > from && cmp_edge(&es->e[w - 1], &es->e[i]) == 0) {
            es->e[w - 1].sum += es->e[i].sum;
            es->e[w - 1].n += es->e[i].n;
        } else {
            es->e[w++] = es->e[i];
        }
    }
    es->n = w;
}

/* Edges across the face between chunk lo (its high side) and hi. */
static int face_edges(const face_rec *lo, const face_rec *hi, int a,
                      edges *es)
{
    int u, v;
    size_t n, from = es->n;
    uint64_t *la, *lb;
    int rc = 0;
    face_axes(a, &u, &v);
    n = (size_t)((lo->roi.max[u] - lo->roi.min[u]) *
                 (lo->roi.max[v] - lo->roi.min[v]));
    la = malloc(n * sizeof(*la));
    lb = malloc(n * sizeof(*lb));
    if (la == NULL || lb == NULL) {
        free(la);
        free(lb);
        return nomem();
    }
    expand_face(lo, 2 * a + 1, la);
    expand_face(hi, 2 * a, lb);
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t w = cnx_segment_pair_value_q(lo->vals[2 * a + 1][i],
                                              hi->vals[2 * a][i]);
        if (es->n > from && es->e[es->n - 1].a == la[i] &&
            es->e[es->n - 1].b == lb[i]) {
            es->e[es->n - 1].sum += w;
            es->e[es->n - 1].n++;
        } else {
            rc = add_edge(es, la[i], lb[i], w, 1);
        }
    }
    free(la);
    free(lb);
    if (rc == 0)
        merge_edges(es, from);
    return rc;
}

static int cmp_min(const void *x, const void *y)
{
    const face_rec *p = *(const face_rec *const *)x;
    const face_rec *q = *(const face_rec *const *)y;
    for (int i = 2; i >= 0; i--)
        if (p->roi.min[i] != q->roi.min[i])
            return p->roi.min[i] < q->roi.min[i] ? -1 : 1;
    return 0;
}

/* The chunk whose min corner is m, or NULL. */
static const face_rec *find_chunk(face_rec *const *by_min, size_t n,
                                  const int64_t m[3])
{
    face_rec key, *kp = &key;
    face_rec *const *hit;
    memcpy(key.roi.min, m, sizeof(key.roi.min));
    hit = bsearch(&kp, by_min, n, sizeof(*by_min), cmp_min);
    return hit ? *hit : NULL;
}

/* Union-find over fragment indices; the root of a set is its least index
 * (= least id, the fragments being sorted). */
static size_t find(size_t *parent, size_t x)
{
    while (parent[x] != x) {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    return x;
}

static int cmp_u64(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static size_t index_of(const uint64_t *ids, size_t n, uint64_t id)
{
    const uint64_t *hit = bsearch(&id, ids, n, sizeof(*ids), cmp_u64);
    return hit ? (size_t)(hit - ids) : (size_t)-1;
}

/* Chunks, fragments (per chunk and all sorted) and sizes into j. */
static int collect(cnx_segjoin *j, const face_rec *recs, size_t n,
                   uint64_t **all, uint64_t **sizes, size_t *nall)
{
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        total += recs[k].nfrag;
    j->nchunks = n;
    j->chunks = malloc((n ? n : 1) * sizeof(*j->chunks));
    j->first = malloc((n + 1) * sizeof(*j->first));
    j->frag = malloc((total ? total : 1) * sizeof(*j->frag));
    j->seg = malloc((total ? total : 1) * sizeof(*j->seg));
    *all = malloc((total ? total : 1) * 16);
    if (j->chunks == NULL || j->first == NULL || j->frag == NULL ||
        j->seg == NULL || *all == NULL)
        return nomem();
    *sizes = NULL;
    total = 0;
    for (size_t k = 0; k < n; k++) {
        j->chunks[k] = recs[k].roi;
        j->first[k] = total;
        for (size_t i = 0; i < recs[k].nfrag; i++) {
            j->frag[total] = le64(recs[k].frags + i * 16);
            (*all)[2 * total] = j->frag[total];
            (*all)[2 * total + 1] = le64(recs[k].frags + i * 16 + 8);
            total++;
        }
    }
    j->first[n] = total;
    /* Sort (id, count) pairs by id: the pairs are 16-byte records. */
    qsort(*all, total, 16, cmp_u64);
    *sizes = malloc((total ? total : 1) * sizeof(**sizes));
    if (*sizes == NULL)
        return nomem();
    for (size_t i = 0; i < total; i++) {
        (*sizes)[i] = (*all)[2 * i + 1];
        (*all)[i] = (*all)[2 * i];
        if (i > 0 && (*all)[i] == (*all)[i - 1])
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segjoin: fragment %" PRIu64 " is in two "
                                 "chunks (overlapping chunks?)",
                                 (*all)[i]);
    }
    *nall = total;
    return 0;
}

/* Segments: roots, their ids and summed sizes; j->seg per fragment. */
static int segments(cnx_segjoin *j, size_t *parent, const uint64_t *all,
                    const uint64_t *sizes, size_t nall)
{
    uint64_t *acc = calloc(nall ? nall : 1, sizeof(*acc));
    size_t ns = 0;
    if (acc == NULL)
        return nomem();
    for (size_t i = 0; i < nall; i++)
        acc[find(parent, i)] += sizes[i];
    for (size_t i = 0; i < nall; i++)
        ns += find(parent, i) == i;
    j->nsegs = ns;
    j->seg_ids = malloc((ns ? ns : 1) * sizeof(*j->seg_ids));
    j->seg_size = malloc((ns ? ns : 1) * sizeof(*j->seg_size));
    if (j->seg_ids == NULL || j->seg_size == NULL) {
        free(acc);
        return nomem();
    }
    ns = 0;
    for (size_t i = 0; i < nall; i++)
        if (parent[i] == i) {
            j->seg_ids[ns] = all[i];
            j->seg_size[ns++] = acc[i];
        }
    for (size_t f = 0; f < j->first[j->nchunks]; f++)
        j->seg[f] = all[find(parent, index_of(all, nall, j->frag[f]))];
    free(acc);
    return 0;
}

static int join_edges(face_rec *recs, size_t n, int sections, edges *es)
{
    face_rec **by_min = malloc((n ? n : 1) * sizeof(*by_min));
    int rc = 0;
    if (by_min == NULL)
        return nomem();
    for (size_t k = 0; k < n; k++)
        by_min[k] = &recs[k];
    qsort(by_min, n, sizeof(*by_min), cmp_min);
    for (size_t k = 1; k < n; k++)
        if (cmp_min(&by_min[k - 1], &by_min[k]) == 0)
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "segjoin: two face records for one chunk");
    for (size_t k = 0; k < n && rc == 0; k++) {
        const face_rec *lo = by_min[k];
        for (int a = 0; a < (sections ? 2 : 3) && rc == 0; a++) {
            int64_t m[3];
            const face_rec *hi;
            int u, v;
            memcpy(m, lo->roi.min, sizeof(m));
            m[a] = lo->roi.max[a];
            hi = find_chunk(by_min, n, m);
            if (hi == NULL)
                continue;
            face_axes(a, &u, &v);
            if (hi->roi.max[u] != lo->roi.max[u] ||
                hi->roi.max[v] != lo->roi.max[v])
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "segjoin: chunks at %s do not share a "
                                   "whole face",
                                   "a seam");
            else
                rc = face_edges(lo, hi, a, es);
        }
    }
    free(by_min);
    return rc;
}

/*
 * The join's agglomeration: the kernel's own (steps 4 and 5 of
 * cnx/segment.h, seg__agglomerate_graph) on the graph whose nodes are the
 * chunks' fragments (node i + 1 is all[i]) and whose edges are the seam
 * edges: the lowest edge merges first while below the level, a merged
 * segment's edges to a common neighbour add their sums and counts (the
 * mean over the whole seam contact), then segments under min_size join
 * their lowest neighbour. An edge seen over fewer than
 * CNX_SEGJOIN_MIN_CONTACT face pairs counts the missing pairs as membrane
 * (255): a seam shows only a cross-section of a contact, and one or two
 * interior-looking pairs where a membrane crosses it obliquely must not
 * join two segments. parent[i]: the index of fragment i's segment's
 * least fragment.
 */
static int agglomerate_seams(const edges *es, const uint64_t *all,
                             const uint64_t *sizes, size_t nall,
                             uint64_t level, uint64_t min_size,
                             size_t *parent, size_t *nmerged)
{
    seg_graph_edge *ge = malloc((es->n ? es->n : 1) * sizeof(*ge));
    uint32_t *p32 = malloc((nall ? nall : 1) * sizeof(*p32));
    int rc = ge != NULL && p32 != NULL ? 0 : nomem();
    if (rc == 0 && nall >= UINT32_MAX)
        rc = cnx_error_set(CNX_ETOOBIG, 0,
                           "segjoin: %zu fragments, over 2^32 - 2", nall);
    for (size_t i = 0; i < es->n && rc == 0; i++) {
        size_t x = index_of(all, nall, es->e[i].a);
        size_t y = index_of(all, nall, es->e[i].b);
        uint64_t sum = es->e[i].sum, count = es->e[i].n;
        if (x == (size_t)-1 || y == (size_t)-1) {
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "segjoin: a face names fragment %" PRIu64
                               " that its chunk does not list",
                               x == (size_t)-1 ? es->e[i].a : es->e[i].b);
            break;
        }
        if (count < CNX_SEGJOIN_MIN_CONTACT) {
            sum += 255u * (CNX_SEGJOIN_MIN_CONTACT - count);
            count = CNX_SEGJOIN_MIN_CONTACT;
        }
        ge[i] = (seg_graph_edge){(uint32_t)(x < y ? x : y) + 1,
                                 (uint32_t)(x < y ? y : x) + 1, sum, count};
    }
    if (rc == 0)
        rc = seg__agglomerate_graph((uint32_t)nall, sizes, ge, es->n, level,
                                    min_size, p32);
    for (size_t i = 0; i < nall && rc == 0; i++) {
        parent[i] = p32[i];
        *nmerged += p32[i] != i;
    }
    free(ge);
    free(p32);
    return rc;
}

int cnx_segjoin_run(const cnx_segjoin_input *in, size_t n,
                    const cnx_segment_params *p, cnx_segjoin *out)
{
    face_rec *recs = calloc(n ? n : 1, sizeof(*recs));
    uint64_t *all = NULL, *sizes = NULL;
    size_t *parent = NULL, nall = 0;
    edges es = {0};
    uint64_t level = cnx_segment_merge_level(p->merge_threshold);
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (recs == NULL)
        return nomem();
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = parse_face(&in[k], &recs[k]);
    if (rc == 0)
        rc = collect(out, recs, n, &all, &sizes, &nall);
    if (rc == 0)
        rc = join_edges(recs, n,
                        cnx_segment_mode_of(p) == CNX_SEGMENT_MODE_2D, &es);
    if (rc == 0) {
        /* Edges from all faces, summed per fragment pair. */
        merge_edges(&es, 0);
        out->nedges = es.n;
        parent = malloc((nall ? nall : 1) * sizeof(*parent));
        rc = parent != NULL ? 0 : nomem();
    }
    if (rc == 0)
        rc = agglomerate_seams(&es, all, sizes, nall, level,
                               (uint64_t)cnx_segment_min_voxels(p), parent,
                               &out->nmerged);
    if (rc == 0)
        rc = segments(out, parent, all, sizes, nall);
    free(recs);
    free(all);
    free(sizes);
    free(parent);
    free(es.e);
    if (rc != 0)
        cnx_segjoin_free(out);
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
    memset(j, 0, sizeof(*j));
}

/* ---- mappings and properties ------------------------------------------- */

int cnx_segjoin_mapping_encode(const cnx_segjoin *j, size_t k, uint8_t **out,
                               size_t *len)
{
    buf b = {0};
    *out = NULL;
    *len = 0;
    if (k >= j->nchunks)
        return cnx_error_set(CNX_EINVAL, 0, "segjoin: no chunk %zu", k);
    put(&b, MAP_MAGIC, 8);
    put_u64(&b, j->first[k + 1] - j->first[k]);
    for (size_t f = j->first[k]; f < j->first[k + 1]; f++) {
        put_u64(&b, j->frag[f]);
        put_u64(&b, j->seg[f]);
    }
    if (b.failed) {
        free(b.data);
        return nomem();
    }
    *out = b.data;
    *len = b.len;
    return 0;
}

int cnx_segjoin_relabel(uint64_t *labels, size_t n, const uint8_t *mapping,
                        size_t len)
{
    rd r = {mapping, len, 0};
    const uint8_t *magic = get_bytes(&r, 8), *pairs;
    uint64_t m = get_u64(&r), last = 0, to = 0;
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
                if (le64(pairs + mid * 16) < last)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo == m || le64(pairs + lo * 16) != last)
                return cnx_error_set(CNX_ECORRUPT, 0,
                                     "segjoin: mapping: no entry for "
                                     "fragment %" PRIu64,
                                     last);
            to = le64(pairs + lo * 16 + 8);
            have = 1;
        }
        labels[i] = to;
    }
    return 0;
}
