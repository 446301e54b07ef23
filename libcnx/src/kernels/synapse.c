/*
 * synapse.c - the synapse kernel's parameters (the bounds table, defaults,
 * checks) and detection (cnx/synapse.h): cleft components, ownership,
 * sites and partners for one block. The JSON parameters are synapse_io.c.
 *
 * Pass 1 walks the read box once in raster order; rows are skipped eight
 * voxels at a time while no byte reaches the cleft threshold (SWAR test).
 * A cleft voxel takes the provisional label of its 13 earlier 26-
 * neighbours (two z planes of uint32 labels are kept) and unites theirs;
 * the union-find root is always the smallest label, i.e. the label of the
 * component's first voxel in raster order. Every cleft voxel is listed
 * (local x, y, z and label), so later steps touch only clefts and the
 * small boxes around the clefts this chunk owns: the component's box
 * grown by one voxel for the distance transform that places the site, and
 * grown by partner_radius (clipped to the read box) for the partner
 * votes. Load: one call per chunk (128^3 plus halo); memory two label
 * planes, 16 bytes per cleft voxel and 8 bytes per voxel of the largest
 * owned cleft's neighbourhood box. Single-threaded, no shared state.
 */
#include "cnx/synapse.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "synapse_int.h"
#include "unionfind_int.h"

/* ---- parameters ---------------------------------------------------------- */

#define ROW(field, kind, lo, hi, def, unit)                                    \
    CNX_PARAM_ROW(cnx_synapse_params, field, kind, lo, hi, 0, def, unit)

/* In the order the parser reads them and the check names them. */
static const cnx_param bounds[] = {
    ROW(cleft_threshold, CNX_PARAM_INT, 1, 255, 128, ""),
    ROW(min_size, CNX_PARAM_INT64, 0, CNX_SYNAPSE_MAX_VOXELS, 20, "voxels"),
    ROW(partner_radius, CNX_PARAM_INT, 1, CNX_SYNAPSE_MAX_RADIUS, 4, "voxels"),
    ROW(psd_threshold, CNX_PARAM_INT, 1, 255, 128, ""),
};

const cnx_param *cnx_synapse_param_bounds(size_t *n)
{
    *n = sizeof(bounds) / sizeof(bounds[0]);
    return bounds;
}

void cnx_synapse_params_default(cnx_synapse_params *p)
{
    memset(p, 0, sizeof(*p));
    cnx_param_defaults(bounds, sizeof(bounds) / sizeof(bounds[0]), p);
}

int cnx_synapse_params_check(const cnx_synapse_params *p)
{
    if (p == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: no parameters");
    return cnx_param_check(bounds, sizeof(bounds) / sizeof(bounds[0]), p,
                           "synapses");
}

/* ---- the block ---------------------------------------------------------- */

static int check_block(const cnx_synapse_block *b)
{
    cnx_box read;
    int64_t voxels = 1;
    if (b->cleft == NULL || b->psd == NULL || b->seg == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "synapses: block without cleft, psd or "
                             "segmentation buffer");
    for (int i = 0; i < 3; i++) {
        if (b->size[i] < 1)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synapses: read box size %lld on axis %d",
                                 (long long)b->size[i], i);
        if (b->size[i] > CNX_SYNAPSE_MAX_SIDE ||
            voxels > CNX_SYNAPSE_MAX_VOXELS / b->size[i])
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "synapses: read box over %lld voxels or a "
                                 "side over %lld",
                                 (long long)CNX_SYNAPSE_MAX_VOXELS,
                                 (long long)CNX_SYNAPSE_MAX_SIDE);
        voxels *= b->size[i];
        if (b->origin[i] < -CNX_SYNAPSE_COORD_LIMIT ||
            b->origin[i] > CNX_SYNAPSE_COORD_LIMIT)
            return cnx_error_set(CNX_ERANGE, 0,
                                 "synapses: read box origin out of range");
        if (!(b->resolution[i] > 0.0 && b->resolution[i] < 1e300))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synapses: resolution must be positive");
        read.min[i] = b->origin[i];
        read.max[i] = b->origin[i] + b->size[i];
    }
    if (cnx_box_empty(&b->own) || !cnx_box_contains(&read, &b->own))
        return cnx_error_set(CNX_EINVAL, 0,
                             "synapses: own box empty or outside the read "
                             "box");
    if (!cnx_box_contains(&b->bounds, &read))
        return cnx_error_set(CNX_EINVAL, 0,
                             "synapses: read box outside the layer bounds");
    return 0;
}

/* ---- pass 1: components ------------------------------------------------- */

/* Growable arrays of fixed-size elements. */
static int grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    size_t cap2 = *cap != 0 ? *cap : 1024;
    void *g;
    if (need <= *cap)
        return 0;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / elem)
            return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
        cap2 *= 2;
    }
    g = realloc(*buf, cap2 * elem);
    if (g == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    *buf = g;
    *cap = cap2;
    return 0;
}

/* Nonzero if one of the 8 bytes of w is >= t (1..255), exactly: each
 * byte's low 7 bits are compared without carries into the next byte. */
static inline uint64_t any_ge(uint64_t w, unsigned t)
{
    const uint64_t l = UINT64_C(0x0101010101010101);
    const uint64_t h = UINT64_C(0x8080808080808080);
    const uint64_t low = w & ~h;
    if (t <= 128)
        return ((low + l * (uint64_t)(128 - t)) | w) & h;
    return (low + l * (uint64_t)(255 - t)) & w & h;
}

/* The provisional label at one neighbour, 0 outside the plane. */
#define NB(plane, xx, yy)                                                      \
    (((xx) >= 0 && (xx) < sx && (yy) >= 0)                                     \
         ? (plane)[(size_t)(yy) * (size_t)sx + (size_t)(xx)]                   \
         : 0u)

/* Label the cleft voxels; fills cc->vox (raster order) and cc->parent. */
static int label_clefts(const cnx_synapse_block *b, unsigned t, syn_cc *cc)
{
    const int64_t sx = b->size[0], sy = b->size[1], sz = b->size[2];
    const size_t plane = (size_t)(sx * sy);
    uint32_t *pl[2] = {NULL, NULL};
    size_t start_zm2 = 0, start_zm1 = 0; /* where planes z-2, z-1 start */
    int rc = 0;

    pl[0] = calloc(plane, sizeof(uint32_t));
    pl[1] = calloc(plane, sizeof(uint32_t));
    rc = grow((void **)&cc->parent, &cc->parent_cap, 1, sizeof(uint32_t));
    if (pl[0] == NULL || pl[1] == NULL || rc != 0) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
        goto done;
    }
    cc->parent[0] = 0;
    cc->nlabels = 0;
    for (int64_t z = 0; z < sz; z++) {
        uint32_t *cur = pl[z & 1], *prev = pl[(z + 1) & 1];
        /* cur still holds plane z-2: clear its cleft voxels. */
        for (size_t k = start_zm2; z >= 2 && k < start_zm1; k++)
            cur[(size_t)cc->vox[k].y * (size_t)sx + (size_t)cc->vox[k].x] = 0;
        start_zm2 = start_zm1;
        start_zm1 = cc->nvox;
        for (int64_t y = 0; y < sy; y++) {
            const uint8_t *row =
                b->cleft + ((size_t)z * (size_t)sy + (size_t)y) * (size_t)sx;
            int64_t x = 0;
            while (x < sx) {
                uint32_t l = 0, m;
                if (x + 8 <= sx) {
                    uint64_t w;
                    memcpy(&w, row + x, sizeof(w));
                    if (any_ge(w, t) == 0) {
                        x += 8;
                        continue;
                    }
                }
                if (row[x] < t) {
                    x++;
                    continue;
                }
                /* The 13 earlier neighbours, a fixed order. */
                static const int8_t dxy[13][3] = {
                    {-1, 0, 0},  {-1, -1, 0}, {0, -1, 0}, {1, -1, 0},
                    {-1, -1, 1}, {0, -1, 1},  {1, -1, 1}, {-1, 0, 1},
                    {0, 0, 1},   {1, 0, 1},   {-1, 1, 1}, {0, 1, 1},
                    {1, 1, 1}};
                for (int k = 0; k < 13; k++) {
                    const uint32_t *pp = dxy[k][2] ? prev : cur;
                    if (dxy[k][2] && z == 0)
                        break;
                    if (y + dxy[k][1] >= sy)
                        continue;
                    m = NB(pp, x + dxy[k][0], y + dxy[k][1]);
                    if (m == 0 || m == l)
                        continue;
                    if (l == 0)
                        l = m;
                    else
                        cnx__uf_union(cc->parent, l, m);
                }
                if (l == 0) {
                    if (cc->nlabels >= UINT32_MAX - 1) {
                        rc = cnx_error_set(CNX_ETOOBIG, 0,
                                           "synapses: too many clefts");
                        goto done;
                    }
                    l = ++cc->nlabels;
                    rc = grow((void **)&cc->parent, &cc->parent_cap,
                              (size_t)l + 1, sizeof(uint32_t));
                    if (rc != 0)
                        goto done;
                    cc->parent[l] = l;
                }
                cur[(size_t)y * (size_t)sx + (size_t)x] = l;
                rc = grow((void **)&cc->vox, &cc->vox_cap, cc->nvox + 1,
                          sizeof(syn_vox));
                if (rc != 0)
                    goto done;
                cc->vox[cc->nvox].x = (int32_t)x;
                cc->vox[cc->nvox].y = (int32_t)y;
                cc->vox[cc->nvox].z = (int32_t)z;
                cc->vox[cc->nvox].label = l;
                cc->nvox++;
                x++;
            }
        }
    }
done:
    free(pl[0]);
    free(pl[1]);
    return rc;
}

/* Number the components 0.. in raster order of first voxels (the roots in
 * increasing order), rewrite every voxel's label to its component and
 * gather per-component sums. */
static int gather(const cnx_synapse_block *b, syn_cc *cc)
{
    uint32_t *parent = cc->parent;
    const int64_t sx = b->size[0], sy = b->size[1];
    uint32_t ncomp = 0;
    for (uint32_t l = 1; l <= cc->nlabels; l++) {
        if (parent[l] == l)
            parent[l] = ncomp++;
        else
            parent[l] = parent[parent[l]];
    }
    cc->ncomp = ncomp;
    cc->comp = calloc(ncomp != 0 ? ncomp : 1, sizeof(*cc->comp));
    if (cc->comp == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    for (size_t k = 0; k < cc->nvox; k++) {
        syn_vox *v = &cc->vox[k];
        syn_comp *c;
        const int32_t p[3] = {v->x, v->y, v->z};
        v->label = parent[v->label];
        c = &cc->comp[v->label];
        if (c->size == 0) {
            for (int i = 0; i < 3; i++)
                c->first[i] = c->lo[i] = c->hi[i] = p[i];
        }
        c->size++;
        for (int i = 0; i < 3; i++) {
            c->sum[i] += p[i];
            c->lo[i] = p[i] < c->lo[i] ? p[i] : c->lo[i];
            c->hi[i] = p[i] > c->hi[i] ? p[i] : c->hi[i];
        }
        c->cleft_sum +=
            b->cleft[((size_t)v->z * (size_t)sy + (size_t)v->y) * (size_t)sx +
                     (size_t)v->x];
    }
    return 0;
}

/* ---- ownership ---------------------------------------------------------- */

static syn_state classify(const cnx_synapse_block *b,
                          const cnx_synapse_params *p, const syn_comp *c)
{
    const int64_t r = p->partner_radius;
    for (int i = 0; i < 3; i++) {
        const int64_t f = b->origin[i] + c->first[i];
        if (f < b->own.min[i] || f >= b->own.max[i])
            return SYN_ELSEWHERE;
    }
    for (int i = 0; i < 3; i++) {
        const int lo_edge = b->origin[i] == b->bounds.min[i];
        const int hi_edge = b->origin[i] + b->size[i] == b->bounds.max[i];
        if ((!lo_edge && c->lo[i] < r) ||
            (!hi_edge && c->hi[i] + r > b->size[i] - 1))
            return SYN_TRUNCATED;
    }
    if (c->size < p->min_size)
        return SYN_TOO_SMALL;
    return SYN_OWNED;
}

/* ---- detection ---------------------------------------------------------- */

static int cmp_id(const void *a, const void *b)
{
    const uint64_t x = ((const cnx_synapse *)a)->id;
    const uint64_t y = ((const cnx_synapse *)b)->id;
    return (x > y) - (x < y);
}

int cnx_synapse_detect(const cnx_synapse_block *b, const cnx_synapse_params *p,
                       cnx_synapse **out, size_t *n, cnx_synapse_stats *stats)
{
    syn_cc cc;
    syn_scratch sc;
    cnx_synapse_stats st = {0, 0, 0, 0};
    cnx_synapse *res = NULL;
    size_t nres = 0, nowned = 0, *start = NULL;
    syn_vox *sorted = NULL;
    int rc;

    memset(&cc, 0, sizeof(cc));
    memset(&sc, 0, sizeof(sc));
    if (b == NULL || out == NULL || n == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: NULL argument");
    rc = cnx_synapse_params_check(p);
    if (rc == 0)
        rc = check_block(b);
    if (rc == 0)
        rc = label_clefts(b, (unsigned)p->cleft_threshold, &cc);
    if (rc == 0)
        rc = gather(b, &cc);
    if (rc != 0)
        goto done;

    /* Classify; the owned components' voxels are gathered contiguously
     * (a counting sort by component, raster order kept). */
    st.components = cc.ncomp;
    start = calloc((size_t)cc.ncomp + 1, sizeof(*start));
    if (start == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
        goto done;
    }
    for (uint32_t k = 0; k < cc.ncomp; k++) {
        syn_comp *c = &cc.comp[k];
        c->state = classify(b, p, c);
        st.owned_elsewhere += c->state == SYN_ELSEWHERE;
        st.truncated += c->state == SYN_TRUNCATED;
        st.too_small += c->state == SYN_TOO_SMALL;
        start[k + 1] = start[k] + (c->state == SYN_OWNED ? (size_t)c->size : 0);
        nowned += c->state == SYN_OWNED;
    }
    if (nowned > 0) {
        size_t *fill = NULL;
        sorted = malloc(start[cc.ncomp] * sizeof(*sorted));
        res = calloc(nowned, sizeof(*res));
        fill = malloc((size_t)cc.ncomp * sizeof(*fill));
        if (sorted == NULL || res == NULL || fill == NULL) {
            free(fill);
            rc = cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
            goto done;
        }
        memcpy(fill, start, (size_t)cc.ncomp * sizeof(*fill));
        for (size_t k = 0; k < cc.nvox; k++)
            if (cc.comp[cc.vox[k].label].state == SYN_OWNED)
                sorted[fill[cc.vox[k].label]++] = cc.vox[k];
        free(fill);
    }
    /* The cleft list is no longer needed; the scratch may reuse memory. */
    free(cc.vox);
    cc.vox = NULL;
    for (uint32_t k = 0; k < cc.ncomp && rc == 0; k++) {
        if (cc.comp[k].state != SYN_OWNED)
            continue;
        rc =
            synapse__one(b, p, &cc.comp[k], sorted + start[k], &sc, &res[nres]);
        nres += rc == 0;
    }
    if (rc != 0)
        goto done;
    if (nres > 1)
        qsort(res, nres, sizeof(*res), cmp_id);
    *out = nres > 0 ? res : NULL;
    *n = nres;
    if (nres == 0)
        free(res);
    res = NULL;
    if (stats != NULL)
        *stats = st;
done:
    free(res);
    free(sorted);
    free(start);
    synapse__scratch_dispose(&sc);
    free(cc.vox);
    free(cc.parent);
    free(cc.comp);
    return rc;
}
