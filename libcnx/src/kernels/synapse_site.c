/*
 * synapse_site.c - one owned cleft component to one synapse: its site (the
 * distance transform's maximum), its partners (votes of the segmentation
 * around it) and its score.
 *
 * Two exact squared Euclidean distance transforms run per cleft, each on
 * a small box: the component's bounding box grown by one voxel (distance
 * of every component voxel to the nearest non-component voxel; the grown
 * ring guarantees one exists) and the box grown by partner_radius, clipped
 * to the read box (distance of every voxel to the nearest component
 * voxel). Both use Meijster's separable algorithm, integer throughout
 * (parabola envelopes with floor-division separators), one axis at a
 * time. Votes are collected into a buffer and sorted, so the winner does
 * not depend on any hash or visiting order: the most votes, ties to the
 * lower id. Single-threaded; buffers are reused across clefts.
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/geom.h"
#include "synapse_int.h"

/* "No source on this line yet": larger than any squared distance in a box
 * of side <= 2^20 (3 * 2^40), small enough that sums never overflow. */
#define SYN_INF ((int64_t)1 << 46)

void synapse__scratch_dispose(syn_scratch *sc)
{
    free(sc->dist);
    free(sc->line);
    free(sc->labels);
    memset(sc, 0, sizeof(*sc));
}

static int reserve(void **buf, size_t *cap, size_t need, size_t elem)
{
    void *g;
    if (need <= *cap)
        return 0;
    if (need > SIZE_MAX / elem)
        return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    g = realloc(*buf, need * elem);
    if (g == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    *buf = g;
    *cap = need;
    return 0;
}

/* ---- distance transform ------------------------------------------------- */

/* One line of m values at stride in f: f[u] = min_i (u - i)^2 + g(i)
 * (Meijster, Roerdink & Hesselink 2000, phase 2, squared form). */
static void edt_line(int64_t *f, int64_t m, int64_t stride, int64_t *g,
                     int64_t *s, int64_t *t)
{
    int64_t q = 0;
#define F(x, i) (((x) - (i)) * ((x) - (i)) + g[i])
    for (int64_t u = 0; u < m; u++)
        g[u] = f[u * stride];
    s[0] = 0;
    t[0] = 0;
    for (int64_t u = 1; u < m; u++) {
        while (q >= 0 && F(t[q], s[q]) > F(t[q], u))
            q--;
        if (q < 0) {
            q = 0;
            s[0] = u;
        } else {
            const int64_t i = s[q];
            const int64_t w =
                1 + cnx_floordiv(u * u - i * i + g[u] - g[i], 2 * (u - i));
            if (w < m) {
                q++;
                s[q] = u;
                t[q] = w;
            }
        }
    }
    for (int64_t u = m - 1; u >= 0; u--) {
        f[u * stride] = F(u, s[q]);
        if (u == t[q])
            q--;
    }
#undef F
}

/* In place over a box of d[0] x d[1] x d[2] (x fastest): on entry 0 at the
 * sources and SYN_INF elsewhere, on exit the squared distance to the
 * nearest source. line holds 3 * max(d) values. */
static void edt3(int64_t *f, const int64_t d[3], int64_t *line)
{
    const int64_t m =
        d[0] > d[1] ? (d[0] > d[2] ? d[0] : d[2]) : (d[1] > d[2] ? d[1] : d[2]);
    int64_t *g = line, *s = line + m, *t = line + 2 * m;
    for (int64_t z = 0; z < d[2]; z++)
        for (int64_t y = 0; y < d[1]; y++)
            edt_line(f + (z * d[1] + y) * d[0], d[0], 1, g, s, t);
    for (int64_t z = 0; z < d[2]; z++)
        for (int64_t x = 0; x < d[0]; x++)
            edt_line(f + z * d[1] * d[0] + x, d[1], d[0], g, s, t);
    for (int64_t y = 0; y < d[1]; y++)
        for (int64_t x = 0; x < d[0]; x++)
            edt_line(f + y * d[0] + x, d[2], d[0] * d[1], g, s, t);
}

/* ---- votes -------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The most frequent value of v[0..n) other than skip (0 never occurs),
 * ties to the lower; 0 if there is none. Sorts v. */
static uint64_t mode(uint64_t *v, size_t n, uint64_t skip, int64_t *count)
{
    uint64_t best = 0;
    int64_t best_n = 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && v[j] == v[i])
            j++;
        if (v[i] != skip && (int64_t)(j - i) > best_n) {
            best = v[i];
            best_n = (int64_t)(j - i);
        }
        i = j;
    }
    if (count != NULL)
        *count = best_n;
    return best;
}

/* ---- one synapse -------------------------------------------------------- */

/* A candidate point for a site: the larger key wins, then the smaller
 * tie, then the earlier (raster order, strict comparisons). */
typedef struct pick {
    int64_t key, tie;
    int64_t p[3];
    int found;
} pick;

static void pick_offer(pick *k, int64_t key, int64_t tie, int64_t x, int64_t y,
                       int64_t z)
{
    if (!k->found || key > k->key || (key == k->key && tie < k->tie)) {
        k->found = 1;
        k->key = key;
        k->tie = tie;
        k->p[0] = x;
        k->p[1] = y;
        k->p[2] = z;
    }
}

static int64_t sqdist(const int64_t a[3], int64_t x, int64_t y, int64_t z)
{
    return (a[0] - x) * (a[0] - x) + (a[1] - y) * (a[1] - y) +
           (a[2] - z) * (a[2] - z);
}

/* The site: the distance transform's maximum; ties to the voxel nearest
 * the centroid (rounded to 1/256 voxel), then raster order. */
static int find_site(const syn_comp *c, const syn_vox *vox, syn_scratch *sc,
                     int64_t site[3])
{
    int64_t d[3], lo[3], cent[3];
    size_t nbox;
    pick best = {0, 0, {0, 0, 0}, 0};
    int rc;
    for (int i = 0; i < 3; i++) {
        lo[i] = (int64_t)c->lo[i] - 1;
        d[i] = (int64_t)c->hi[i] - c->lo[i] + 3;
        cent[i] = (256 * c->sum[i] + c->size / 2) / c->size;
    }
    nbox = (size_t)(d[0] * d[1] * d[2]);
    rc = reserve((void **)&sc->dist, &sc->dist_cap, nbox, sizeof(int64_t));
    if (rc == 0)
        rc = reserve((void **)&sc->line, &sc->line_cap,
                     3 * (size_t)(d[0] > d[1] ? (d[0] > d[2] ? d[0] : d[2])
                                              : (d[1] > d[2] ? d[1] : d[2])),
                     sizeof(int64_t));
    if (rc != 0)
        return rc;
    memset(sc->dist, 0, nbox * sizeof(int64_t));
    for (int64_t k = 0; k < c->size; k++)
        sc->dist[((vox[k].z - lo[2]) * d[1] + (vox[k].y - lo[1])) * d[0] +
                 (vox[k].x - lo[0])] = SYN_INF;
    edt3(sc->dist, d, sc->line);
    for (int64_t k = 0; k < c->size; k++) {
        const int64_t x = vox[k].x, y = vox[k].y, z = vox[k].z;
        const int64_t dt =
            sc->dist[((z - lo[2]) * d[1] + (y - lo[1])) * d[0] + (x - lo[0])];
        const int64_t ex = 256 * x - cent[0], ey = 256 * y - cent[1],
                      ez = 256 * z - cent[2];
        pick_offer(&best, dt, ex * ex + ey * ey + ez * ez, x, y, z);
    }
    memcpy(site, best.p, sizeof(best.p));
    return 0;
}

int synapse__one(const cnx_synapse_block *b, const cnx_synapse_params *p,
                 const syn_comp *c, const syn_vox *vox, syn_scratch *sc,
                 cnx_synapse *out)
{
    const int64_t r = p->partner_radius, r2 = r * r;
    const int64_t sx = b->size[0], sy = b->size[1];
    const unsigned pt = (unsigned)p->psd_threshold;
    int64_t site[3], lo[3], d[3];
    int64_t post_n = 0, psd_n = 0, npsd = 0, nlow = 0, m1;
    uint64_t post, pre, micro;
    int pre_low = 1;
    size_t nbox;
    pick pk_post = {0, 0, {0, 0, 0}, 0}, pk_pre = {0, 0, {0, 0, 0}, 0};
    int rc = find_site(c, vox, sc, site);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        const int64_t g = b->origin[i] + site[i];
        if (g < 0 || g >= CNX_SYNAPSE_COORD_MAX)
            return cnx_error_set(CNX_ERANGE, 0,
                                 "synapses: site (%lld, %lld, %lld) outside "
                                 "[0, 2^21)",
                                 (long long)(b->origin[0] + site[0]),
                                 (long long)(b->origin[1] + site[1]),
                                 (long long)(b->origin[2] + site[2]));
    }

    /* The neighbourhood: distance to the cleft within the grown box. */
    for (int i = 0; i < 3; i++) {
        const int64_t hi = cnx_imin((int64_t)c->hi[i] + r, b->size[i] - 1);
        lo[i] = cnx_imax((int64_t)c->lo[i] - r, 0);
        d[i] = hi - lo[i] + 1;
    }
    nbox = (size_t)(d[0] * d[1] * d[2]);
    rc = reserve((void **)&sc->dist, &sc->dist_cap, nbox, sizeof(int64_t));
    if (rc == 0)
        rc = reserve((void **)&sc->line, &sc->line_cap,
                     3 * (size_t)(d[0] > d[1] ? (d[0] > d[2] ? d[0] : d[2])
                                              : (d[1] > d[2] ? d[1] : d[2])),
                     sizeof(int64_t));
    if (rc == 0)
        rc = reserve((void **)&sc->labels, &sc->labels_cap, nbox,
                     sizeof(uint64_t));
    if (rc != 0)
        return rc;
    for (size_t k = 0; k < nbox; k++)
        sc->dist[k] = SYN_INF;
    for (int64_t k = 0; k < c->size; k++)
        sc->dist[((vox[k].z - lo[2]) * d[1] + (vox[k].y - lo[1])) * d[0] +
                 (vox[k].x - lo[0])] = 0;
    edt3(sc->dist, d, sc->line);

    /* Votes: psd voxels from the front of the buffer, the others from the
     * back; label 0 never votes (but psd voxels on it count for the
     * score). */
    for (int64_t z = 0; z < d[2]; z++)
        for (int64_t y = 0; y < d[1]; y++) {
            const size_t row =
                ((size_t)(z + lo[2]) * (size_t)sy + (size_t)(y + lo[1])) *
                    (size_t)sx +
                (size_t)lo[0];
            const int64_t *dr = sc->dist + (z * d[1] + y) * d[0];
            for (int64_t x = 0; x < d[0]; x++) {
                uint64_t l;
                if (dr[x] > r2)
                    continue;
                l = b->seg[row + (size_t)x];
                if (b->psd[row + (size_t)x] >= pt) {
                    psd_n++;
                    if (l != 0)
                        sc->labels[npsd++] = l;
                } else if (l != 0) {
                    sc->labels[nbox - 1 - (size_t)nlow++] = l;
                }
            }
        }
    post = mode(sc->labels, (size_t)npsd, 0, &post_n);
    pre = mode(sc->labels + nbox - (size_t)nlow, (size_t)nlow, post, NULL);
    if (pre == 0) {
        /* No other segment off the PSD: any voxel around the cleft. */
        memmove(sc->labels + npsd, sc->labels + nbox - (size_t)nlow,
                (size_t)nlow * sizeof(uint64_t));
        pre = mode(sc->labels, (size_t)(npsd + nlow), post, NULL);
        pre_low = 0;
    }

    /* Partner sites: the counted voxel of the segment deepest in it (the
     * farthest from the cleft), ties to the nearest to the site. */
    for (int64_t z = 0; z < d[2]; z++)
        for (int64_t y = 0; y < d[1]; y++) {
            const size_t row =
                ((size_t)(z + lo[2]) * (size_t)sy + (size_t)(y + lo[1])) *
                    (size_t)sx +
                (size_t)lo[0];
            const int64_t *dr = sc->dist + (z * d[1] + y) * d[0];
            const int64_t gy = y + lo[1], gz = z + lo[2];
            for (int64_t x = 0; x < d[0]; x++) {
                const int64_t gx = x + lo[0];
                uint64_t l;
                int high;
                if (dr[x] > r2)
                    continue;
                l = b->seg[row + (size_t)x];
                if (l == 0 || (l != post && l != pre))
                    continue;
                high = b->psd[row + (size_t)x] >= pt;
                if (l == post && high)
                    pick_offer(&pk_post, dr[x], sqdist(site, gx, gy, gz), gx,
                               gy, gz);
                if (l == pre && (!pre_low || !high))
                    pick_offer(&pk_pre, dr[x], sqdist(site, gx, gy, gz), gx, gy,
                               gz);
            }
        }

    /* Score: mean cleft value / 255 times the psd support of post, in
     * millionths, each step rounded half up. */
    m1 = (c->cleft_sum * 1000000 + 255 * c->size / 2) / (255 * c->size);
    micro = psd_n > 0 ? (uint64_t)((m1 * post_n + psd_n / 2) / psd_n) : 0;

    memset(out, 0, sizeof(*out));
    for (int i = 0; i < 3; i++) {
        out->site[i] = b->origin[i] + site[i];
        out->post_site[i] =
            b->origin[i] + (pk_post.found ? pk_post.p[i] : site[i]);
        out->pre_site[i] =
            b->origin[i] + (pk_pre.found ? pk_pre.p[i] : site[i]);
    }
    out->id = cnx_synapse_id(out->site[0], out->site[1], out->site[2]);
    out->size = c->size;
    out->pre_id = pre;
    out->post_id = post;
    out->score = (double)micro / 1e6;
    return 0;
}
