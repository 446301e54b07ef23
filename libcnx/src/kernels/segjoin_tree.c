/*
 * segjoin_tree.c - the join across chunk seams, in one task or as a tree
 * of blocks (cnx/segjoin.h; the method in docs/segment.md, "Across chunk
 * seams", the summary layout in docs/formats.md).
 *
 * The rule is a function of the face records alone:
 *  - a seam edge (a, b) sums cnx_segment_pair_value over the face
 *    positions pairing fragment a with fragment b; an edge of fewer than
 *    CNX_SEGJOIN_MIN_CONTACT pairs counts the missing ones as membrane
 *    (255). Its value is cnx_segment_edge_value; edges are ordered by
 *    (value, lesser fragment id, greater fragment id), a total order.
 *  - components: every edge of value below the merge level joins its two
 *    fragments (union-find).
 *  - a component of fewer than min_voxels links to the far end of its
 *    lowest edge that leaves it (none: it stays). In a total order the
 *    links cannot cycle except in pairs that pick the same edge.
 *  - a segment is a tree of links; its id is its root component's least
 *    fragment id (a pair at the root: the lesser of the two).
 * Every step is a union or a minimum, so the result does not depend on
 * the order of anything, nor on how the region is cut into blocks: a
 * block decides every component that cannot reach its outer faces and
 * hands the rest up (open components, the seam edges leaving it, the
 * small open components' best edges, and voxel counts per segment).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "segjoin_int.h"

#define SUM_MAGIC "CNXJOIN1"

/* ---- the summary -------------------------------------------------------- */

/* A segment id (pending 0), or an open component named by its least
 * fragment id (pending 1; inside the engine, a node index). */
typedef struct ref {
    uint64_t id, pending;
} ref;

typedef struct opencomp {
    uint64_t rep, size, chunk, multi;
} opencomp;

/* A small open component's best edge: to a closed component (closed 1:
 * nb is its least fragment id, tgt its segment) or to an open one of the
 * same block (closed 0: nb is its rep). */
typedef struct cand {
    uint64_t rep, value, lo, hi, nb;
    ref tgt;
    uint64_t closed;
} cand;

typedef struct outer {
    uint64_t id, rep, faces; /* faces: bit f for the block's face f */
} outer;

typedef struct contrib {
    ref tgt;
    uint64_t size, chunk, multi;
} contrib;

typedef struct resent {
    uint64_t key;
    ref tgt;
} resent;

typedef struct summary {
    cnx_box box;
    size_t nchunks;
    cnx_box *chunks;
    size_t *first;
    uint64_t *frag;
    ref *ftgt;
    size_t nres, nopen, ncand, ncross, nouter, ncontrib;
    resent *res;
    opencomp *open;
    cand *cand;
    sj_edge *cross;
    outer *outer;
    contrib *contrib;
} summary;

static void summary_free(summary *s)
{
    free(s->chunks);
    free(s->first);
    free(s->frag);
    free(s->ftgt);
    free(s->res);
    free(s->open);
    free(s->cand);
    free(s->cross);
    free(s->outer);
    free(s->contrib);
    memset(s, 0, sizeof(*s));
}

static int bad_summary(const char *name, const char *what)
{
    return cnx_error_set(CNX_ECORRUPT, 0, "segjoin: block summary %s: %s",
                         name ? name : "(unnamed)", what);
}

static void put_box(sj_buf *b, const cnx_box *x)
{
    for (int i = 0; i < 3; i++)
        sj__put_u64(b, (uint64_t)x->min[i]);
    for (int i = 0; i < 3; i++)
        sj__put_u64(b, (uint64_t)x->max[i]);
}

static void get_box(sj_rd *r, cnx_box *x)
{
    for (int i = 0; i < 3; i++)
        x->min[i] = (int64_t)sj__get_u64(r);
    for (int i = 0; i < 3; i++)
        x->max[i] = (int64_t)sj__get_u64(r);
}

static void put_ref(sj_buf *b, ref r)
{
    sj__put_u64(b, r.id);
    sj__put_u64(b, r.pending);
}

static ref get_ref(sj_rd *r)
{
    ref x;
    x.id = sj__get_u64(r);
    x.pending = sj__get_u64(r);
    if (x.pending > 1)
        r->bad = 1;
    return x;
}

static int encode(const summary *s, uint8_t **out, size_t *len)
{
    sj_buf b = {0};
    sj__put(&b, SUM_MAGIC, 8);
    put_box(&b, &s->box);
    sj__put_u64(&b, s->nchunks);
    for (size_t k = 0; k < s->nchunks; k++) {
        put_box(&b, &s->chunks[k]);
        sj__put_u64(&b, s->first[k + 1] - s->first[k]);
        for (size_t f = s->first[k]; f < s->first[k + 1]; f++) {
            sj__put_u64(&b, s->frag[f]);
            put_ref(&b, s->ftgt[f]);
        }
    }
    sj__put_u64(&b, s->nres);
    for (size_t i = 0; i < s->nres; i++) {
        sj__put_u64(&b, s->res[i].key);
        put_ref(&b, s->res[i].tgt);
    }
    sj__put_u64(&b, s->nopen);
    for (size_t i = 0; i < s->nopen; i++) {
        sj__put_u64(&b, s->open[i].rep);
        sj__put_u64(&b, s->open[i].size);
        sj__put_u64(&b, s->open[i].chunk);
        sj__put_u64(&b, s->open[i].multi);
    }
    sj__put_u64(&b, s->ncand);
    for (size_t i = 0; i < s->ncand; i++) {
        const cand *c = &s->cand[i];
        sj__put_u64(&b, c->rep);
        sj__put_u64(&b, c->value);
        sj__put_u64(&b, c->lo);
        sj__put_u64(&b, c->hi);
        sj__put_u64(&b, c->nb);
        put_ref(&b, c->tgt);
        sj__put_u64(&b, c->closed);
    }
    sj__put_u64(&b, s->ncross);
    for (size_t i = 0; i < s->ncross; i++) {
        sj__put_u64(&b, s->cross[i].a);
        sj__put_u64(&b, s->cross[i].b);
        sj__put_u64(&b, s->cross[i].sum);
        sj__put_u64(&b, s->cross[i].n);
    }
    sj__put_u64(&b, s->nouter);
    for (size_t i = 0; i < s->nouter; i++) {
        sj__put_u64(&b, s->outer[i].id);
        sj__put_u64(&b, s->outer[i].rep);
        sj__put_u64(&b, s->outer[i].faces);
    }
    sj__put_u64(&b, s->ncontrib);
    for (size_t i = 0; i < s->ncontrib; i++) {
        put_ref(&b, s->contrib[i].tgt);
        sj__put_u64(&b, s->contrib[i].size);
        sj__put_u64(&b, s->contrib[i].chunk);
        sj__put_u64(&b, s->contrib[i].multi);
    }
    if (b.failed) {
        free(b.data);
        return sj__nomem();
    }
    *out = b.data;
    *len = b.len;
    return 0;
}

/* A count of records of rec bytes each, at most what is left. */
static int get_count(sj_rd *r, size_t rec, size_t *n)
{
    uint64_t v = sj__get_u64(r);
    if (r->bad || v > r->left / rec) {
        r->bad = 1;
        return -1;
    }
    *n = (size_t)v;
    return 0;
}

/* calloc(n ? n : 1, size), failing the reader on exhaustion. */
static void *alloc_n(size_t n, size_t size, int *failed)
{
    void *p = calloc(n ? n : 1, size);
    if (p == NULL)
        *failed = 1;
    return p;
}

static int decode(const cnx_segjoin_input *in, summary *s)
{
    sj_rd r = {in->data, in->len, 0};
    const uint8_t *magic = sj__get_bytes(&r, 8);
    size_t total = 0;
    int failed = 0;
    memset(s, 0, sizeof(*s));
    if (magic == NULL || memcmp(magic, SUM_MAGIC, 8) != 0)
        return bad_summary(in->name, "not a block summary (magic)");
    get_box(&r, &s->box);
    if (r.bad || !sj__box_ok(&s->box))
        return bad_summary(in->name, "bad block box");
    if (get_count(&r, 56, &s->nchunks) != 0)
        return bad_summary(in->name, "chunk count over its length");
    s->chunks = alloc_n(s->nchunks, sizeof(*s->chunks), &failed);
    s->first = alloc_n(s->nchunks + 1, sizeof(*s->first), &failed);
    /* Fragments: read per chunk, grown as they come. */
    for (size_t k = 0; k < s->nchunks && !failed && !r.bad; k++) {
        size_t nf;
        get_box(&r, &s->chunks[k]);
        if (!sj__box_ok(&s->chunks[k]) || get_count(&r, 24, &nf) != 0) {
            r.bad = 1;
            break;
        }
        s->first[k] = total;
        if (nf > 0) {
            uint64_t *f = realloc(s->frag, (total + nf) * sizeof(*f));
            ref *t = f ? realloc(s->ftgt, (total + nf) * sizeof(*t)) : NULL;
            if (f != NULL)
                s->frag = f;
            if (t == NULL) {
                failed = 1;
                break;
            }
            s->ftgt = t;
        }
        for (size_t i = 0; i < nf; i++) {
            s->frag[total + i] = sj__get_u64(&r);
            s->ftgt[total + i] = get_ref(&r);
        }
        total += nf;
    }
    if (!failed && s->first != NULL)
        s->first[s->nchunks] = total;
    if (!failed && !r.bad && get_count(&r, 24, &s->nres) == 0) {
        s->res = alloc_n(s->nres, sizeof(*s->res), &failed);
        for (size_t i = 0; i < s->nres && !failed; i++) {
            s->res[i].key = sj__get_u64(&r);
            s->res[i].tgt = get_ref(&r);
        }
    }
    if (!failed && !r.bad && get_count(&r, 32, &s->nopen) == 0) {
        s->open = alloc_n(s->nopen, sizeof(*s->open), &failed);
        for (size_t i = 0; i < s->nopen && !failed; i++) {
            s->open[i].rep = sj__get_u64(&r);
            s->open[i].size = sj__get_u64(&r);
            s->open[i].chunk = sj__get_u64(&r);
            s->open[i].multi = sj__get_u64(&r);
        }
    }
    if (!failed && !r.bad && get_count(&r, 64, &s->ncand) == 0) {
        s->cand = alloc_n(s->ncand, sizeof(*s->cand), &failed);
        for (size_t i = 0; i < s->ncand && !failed; i++) {
            cand *c = &s->cand[i];
            c->rep = sj__get_u64(&r);
            c->value = sj__get_u64(&r);
            c->lo = sj__get_u64(&r);
            c->hi = sj__get_u64(&r);
            c->nb = sj__get_u64(&r);
            c->tgt = get_ref(&r);
            c->closed = sj__get_u64(&r);
        }
    }
    if (!failed && !r.bad && get_count(&r, 32, &s->ncross) == 0) {
        s->cross = alloc_n(s->ncross, sizeof(*s->cross), &failed);
        for (size_t i = 0; i < s->ncross && !failed; i++) {
            s->cross[i].a = sj__get_u64(&r);
            s->cross[i].b = sj__get_u64(&r);
            s->cross[i].sum = sj__get_u64(&r);
            s->cross[i].n = sj__get_u64(&r);
            if (s->cross[i].n == 0)
                r.bad = 1;
        }
    }
    if (!failed && !r.bad && get_count(&r, 24, &s->nouter) == 0) {
        s->outer = alloc_n(s->nouter, sizeof(*s->outer), &failed);
        for (size_t i = 0; i < s->nouter && !failed; i++) {
            s->outer[i].id = sj__get_u64(&r);
            s->outer[i].rep = sj__get_u64(&r);
            s->outer[i].faces = sj__get_u64(&r);
        }
    }
    if (!failed && !r.bad && get_count(&r, 40, &s->ncontrib) == 0) {
        s->contrib = alloc_n(s->ncontrib, sizeof(*s->contrib), &failed);
        for (size_t i = 0; i < s->ncontrib && !failed; i++) {
            s->contrib[i].tgt = get_ref(&r);
            s->contrib[i].size = sj__get_u64(&r);
            s->contrib[i].chunk = sj__get_u64(&r);
            s->contrib[i].multi = sj__get_u64(&r);
        }
    }
    if (failed) {
        summary_free(s);
        return sj__nomem();
    }
    if (r.bad || r.left != 0) {
        summary_free(s);
        return bad_summary(in->name, r.bad ? "truncated or malformed"
                                           : "bytes after the last section");
    }
    return 0;
}

/* ---- the engine ---------------------------------------------------------- */

/* A node: a fragment (level 1) or an open component of a block below. */
typedef struct node {
    uint64_t rep, size, chunk, multi;
    int open;
} node;

/* An edge inside the block between nodes x and y (fragments a, b). */
typedef struct iedge {
    size_t x, y;
    uint64_t a, b, value;
} iedge;

/* A candidate link of node from: to node `to` (kind 0), or to a closed
 * component (kind 1: nb its least fragment id, tgt its segment; pending:
 * a node index). */
typedef struct link {
    size_t from, to;
    uint64_t value, lo, hi, nb;
    ref tgt;
    int kind;
} link;

typedef struct engine {
    const cnx_box *block;
    uint64_t level, min_size;
    size_t nn;
    node *nd;
    size_t ne, cape;
    iedge *ie;
    size_t nl, capl;
    link *lk;
    size_t nc, capc;
    contrib *ct;
    size_t no, capo;
    outer *ou; /* rep holds a node index until the output */
    size_t nx, capx;
    sj_edge *cross;
    /* derived */
    size_t *par;  /* union-find over node indices: the root is the least */
    int *state;   /* per root: 0 unresolved, 1 on the path, 2 resolved */
    ref *tgt;     /* per root once resolved (pending: a root index) */
    size_t *best; /* per root: index into lk of its best link, or -1 */
    size_t merged;
} engine;

static int grow(void **p, size_t *cap, size_t n, size_t size)
{
    if (n < *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 1024;
    void *q = realloc(*p, c * size);
    if (q == NULL)
        return sj__nomem();
    *p = q;
    *cap = c;
    return 0;
}

static void engine_free(engine *e)
{
    free(e->nd);
    free(e->ie);
    free(e->lk);
    free(e->ct);
    free(e->ou);
    free(e->cross);
    free(e->par);
    free(e->state);
    free(e->tgt);
    free(e->best);
}

/* The contact term, then cnx_segment_edge_value. */
static uint64_t edge_value(uint64_t sum, uint64_t n)
{
    if (n < CNX_SEGJOIN_MIN_CONTACT) {
        sum += 255u * (CNX_SEGJOIN_MIN_CONTACT - n);
        n = CNX_SEGJOIN_MIN_CONTACT;
    }
    return cnx_segment_edge_value(sum, n);
}

static int link_less(const link *p, const link *q)
{
    if (p->value != q->value)
        return p->value < q->value;
    if (p->lo != q->lo)
        return p->lo < q->lo;
    return p->hi < q->hi;
}

static size_t uf_find(size_t *par, size_t x)
{
    size_t root = x;
    while (par[root] != root)
        root = par[root];
    while (par[x] != root) {
        size_t next = par[x];
        par[x] = root;
        x = next;
    }
    return root;
}

static int add_iedge(engine *e, size_t x, size_t y, uint64_t a, uint64_t b,
                     uint64_t sum, uint64_t n)
{
    int rc = grow((void **)&e->ie, &e->cape, e->ne, sizeof(*e->ie));
    if (rc == 0)
        e->ie[e->ne++] = (iedge){x, y, a, b, edge_value(sum, n)};
    return rc;
}

static int add_link(engine *e, const link *l)
{
    int rc = grow((void **)&e->lk, &e->capl, e->nl, sizeof(*e->lk));
    if (rc == 0)
        e->lk[e->nl++] = *l;
    return rc;
}

static int add_contrib(engine *e, ref tgt, uint64_t size, uint64_t chunk,
                       uint64_t multi)
{
    int rc = grow((void **)&e->ct, &e->capc, e->nc, sizeof(*e->ct));
    if (rc == 0)
        e->ct[e->nc++] = (contrib){tgt, size, chunk, multi};
    return rc;
}

static int add_outer(engine *e, uint64_t id, size_t node, uint64_t faces)
{
    int rc = grow((void **)&e->ou, &e->capo, e->no, sizeof(*e->ou));
    if (rc == 0)
        e->ou[e->no++] = (outer){id, (uint64_t)node, faces};
    return rc;
}

static int add_cross(engine *e, const sj_edge *x)
{
    int rc = grow((void **)&e->cross, &e->capx, e->nx, sizeof(*e->cross));
    if (rc == 0)
        e->cross[e->nx++] = *x;
    return rc;
}

/* Chunk identity and the "more than one chunk" flag, combined. */
static void mix(uint64_t *chunk, uint64_t *multi, uint64_t c, uint64_t m)
{
    *multi = *multi || m || *chunk != c;
    if (c < *chunk)
        *chunk = c;
}

static int cmp_node_rep(const void *x, const void *y)
{
    const node *p = x, *q = y;
    return p->rep < q->rep ? -1 : p->rep > q->rep;
}

/* Index of the node whose rep is id (nodes sorted by rep), or -1. */
static size_t node_of(const engine *e, uint64_t id)
{
    size_t lo = 0, hi = e->nn;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->nd[mid].rep < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < e->nn && e->nd[lo].rep == id ? lo : (size_t)-1;
}

/* Both ends of every internal edge are candidates of each other. */
static int edge_links(engine *e)
{
    int rc = 0;
    for (size_t i = 0; i < e->ne && rc == 0; i++) {
        const iedge *d = &e->ie[i];
        uint64_t lo = d->a < d->b ? d->a : d->b, hi = d->a ^ d->b ^ lo;
        link l = {d->x, d->y, d->value, lo, hi, 0, {0, 0}, 0};
        rc = add_link(e, &l);
        l.from = d->y;
        l.to = d->x;
        if (rc == 0)
            rc = add_link(e, &l);
    }
    return rc;
}

/* Resolve root c's segment (closed roots follow their links). */
static ref resolve(engine *e, size_t c, const uint64_t *crep,
                   const uint64_t *csize, size_t *stack)
{
    size_t depth = 0, cur = c;
    ref val;
    for (;;) {
        const link *l;
        size_t next;
        if (e->state[cur] == 2) {
            val = e->tgt[cur];
            break;
        }
        if (e->state[cur] == 1) {
            /* A pair picking the same edge (or a closed component below
             * pending on this one): the lesser of the two. */
            const link *b = &e->lk[e->best[cur]];
            uint64_t other = b->kind == 0 ? crep[uf_find(e->par, b->to)]
                                          : b->nb;
            val = (ref){crep[cur] < other ? crep[cur] : other, 0};
            break;
        }
        e->state[cur] = 1;
        stack[depth++] = cur;
        if (e->nd[cur].open) {
            val = (ref){cur, 1};
            break;
        }
        if (csize[cur] >= e->min_size || e->best[cur] == (size_t)-1) {
            val = (ref){crep[cur], 0};
            break;
        }
        l = &e->lk[e->best[cur]];
        if (l->kind == 0)
            next = uf_find(e->par, l->to);
        else if (l->tgt.pending)
            next = uf_find(e->par, (size_t)l->tgt.id);
        else {
            val = l->tgt;
            break;
        }
        cur = next;
    }
    while (depth > 0) {
        size_t k = stack[--depth];
        e->state[k] = 2;
        e->tgt[k] = val;
    }
    return val;
}

static int cmp_contrib(const void *x, const void *y)
{
    const contrib *p = x, *q = y;
    if (p->tgt.pending != q->tgt.pending)
        return p->tgt.pending < q->tgt.pending ? -1 : 1;
    return p->tgt.id < q->tgt.id ? -1 : p->tgt.id > q->tgt.id;
}

static int cmp_cand(const void *x, const void *y)
{
    const cand *p = x, *q = y;
    if (p->rep != q->rep)
        return p->rep < q->rep ? -1 : 1;
    if (p->closed != q->closed)
        return p->closed > q->closed ? -1 : 1; /* the closed one first */
    if (p->nb != q->nb)
        return p->nb < q->nb ? -1 : 1;
    if (p->value != q->value)
        return p->value < q->value ? -1 : 1;
    if (p->lo != q->lo)
        return p->lo < q->lo ? -1 : 1;
    return p->hi < q->hi ? -1 : p->hi > q->hi;
}

static int cmp_outer(const void *x, const void *y)
{
    const outer *p = x, *q = y;
    return p->id < q->id ? -1 : p->id > q->id;
}

static int cmp_cross(const void *x, const void *y)
{
    const sj_edge *p = x, *q = y;
    if (p->a != q->a)
        return p->a < q->a ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

static int cmp_res(const void *x, const void *y)
{
    const resent *p = x, *q = y;
    return p->key < q->key ? -1 : p->key > q->key;
}

/* Map an engine ref (pending: a node) to an output ref (pending: the rep
 * of the open root). */
static ref out_ref(engine *e, ref r, const uint64_t *crep, const uint64_t *csize,
                   size_t *stack)
{
    if (!r.pending)
        return r;
    r = resolve(e, uf_find(e->par, (size_t)r.id), crep, csize, stack);
    if (r.pending)
        r.id = crep[r.id];
    return r;
}

/*
 * Unions, links, resolution; then the summary: res (level > 1: each node's
 * segment or open root), ftgt (level 1, per node), open roots and their
 * candidates, crossing edges, outer fragments, contributions.
 */
static int engine_run(engine *e, summary *s, ref *node_tgt)
{
    size_t nn = e->nn;
    uint64_t *crep = calloc(nn ? nn : 1, sizeof(*crep));
    uint64_t *csize = calloc(nn ? nn : 1, sizeof(*csize));
    uint64_t *cchunk = calloc(nn ? nn : 1, sizeof(*cchunk));
    uint64_t *cmulti = calloc(nn ? nn : 1, sizeof(*cmulti));
    size_t *stack = calloc(nn ? nn : 1, sizeof(*stack));
    int rc = 0;

    e->par = calloc(nn ? nn : 1, sizeof(*e->par));
    e->state = calloc(nn ? nn : 1, sizeof(*e->state));
    e->tgt = calloc(nn ? nn : 1, sizeof(*e->tgt));
    e->best = malloc((nn ? nn : 1) * sizeof(*e->best));
    if (crep == NULL || csize == NULL || cchunk == NULL || cmulti == NULL ||
        stack == NULL || e->par == NULL || e->state == NULL ||
        e->tgt == NULL || e->best == NULL) {
        rc = sj__nomem();
        goto done;
    }
    for (size_t i = 0; i < nn; i++) {
        e->par[i] = i;
        e->best[i] = (size_t)-1;
    }
    /* Components: nodes are sorted by rep, so the least index is the
     * least fragment id. */
    for (size_t i = 0; i < e->ne; i++)
        if (e->ie[i].value < e->level) {
            size_t a = uf_find(e->par, e->ie[i].x);
            size_t b = uf_find(e->par, e->ie[i].y);
            if (a != b) {
                e->par[a > b ? a : b] = a < b ? a : b;
                e->merged++;
            }
        }
    for (size_t i = 0; i < nn; i++) {
        size_t r = uf_find(e->par, i);
        if (r == i) {
            crep[r] = e->nd[i].rep;
            cchunk[r] = e->nd[i].chunk;
            cmulti[r] = e->nd[i].multi;
        } else {
            mix(&cchunk[r], &cmulti[r], e->nd[i].chunk, e->nd[i].multi);
            if (e->nd[i].open)
                e->nd[r].open = 1;
        }
        csize[r] += e->nd[i].size;
    }
    for (size_t i = 0; i < nn; i++)
        if (e->par[i] != i && e->nd[i].open)
            e->nd[uf_find(e->par, i)].open = 1;
    /* Each small component's best link leaving it. */
    for (size_t i = 0; i < e->nl; i++) {
        const link *l = &e->lk[i];
        size_t r = uf_find(e->par, l->from);
        if (csize[r] >= e->min_size)
            continue;
        if (l->kind == 0 && uf_find(e->par, l->to) == r)
            continue;
        if (e->best[r] == (size_t)-1 || link_less(l, &e->lk[e->best[r]]))
            e->best[r] = i;
    }
    for (size_t i = 0; i < nn; i++)
        if (uf_find(e->par, i) == i)
            resolve(e, i, crep, csize, stack);
    for (size_t i = 0; i < nn; i++) {
        ref t = e->tgt[uf_find(e->par, i)];
        if (t.pending)
            t.id = crep[t.id];
        node_tgt[i] = t;
    }

    /* Open roots and the small ones' candidates. */
    for (size_t i = 0; i < nn; i++)
        s->nopen += uf_find(e->par, i) == i && e->nd[i].open;
    s->open = calloc(s->nopen ? s->nopen : 1, sizeof(*s->open));
    s->cand = calloc(e->nl ? e->nl : 1, sizeof(*s->cand));
    if (s->open == NULL || s->cand == NULL) {
        rc = sj__nomem();
        goto done;
    }
    s->nopen = 0;
    for (size_t i = 0; i < nn; i++)
        if (uf_find(e->par, i) == i && e->nd[i].open)
            s->open[s->nopen++] =
                (opencomp){crep[i], csize[i], cchunk[i], cmulti[i]};
    for (size_t i = 0; i < e->nl; i++) {
        const link *l = &e->lk[i];
        size_t r = uf_find(e->par, l->from), t;
        cand c = {crep[r], l->value, l->lo, l->hi, 0, {0, 0}, 1};
        if (!e->nd[r].open || csize[r] >= e->min_size)
            continue;
        if (l->kind == 0) {
            t = uf_find(e->par, l->to);
            if (t == r)
                continue;
            if (e->nd[t].open) {
                c.closed = 0;
                c.nb = crep[t];
            } else {
                c.nb = crep[t];
                c.tgt = out_ref(e, (ref){t, 1}, crep, csize, stack);
            }
        } else {
            c.nb = l->nb;
            c.tgt = out_ref(e, l->tgt, crep, csize, stack);
        }
        s->cand[s->ncand++] = c;
    }
    /* Keep the best closed candidate per component, and the best per open
     * neighbour. */
    if (s->ncand > 0) {
        size_t w = 0;
        qsort(s->cand, s->ncand, sizeof(*s->cand), cmp_cand);
        for (size_t i = 0; i < s->ncand; i++) {
            const cand *c = &s->cand[i];
            if (w > 0 && s->cand[w - 1].rep == c->rep &&
                s->cand[w - 1].closed == c->closed &&
                (c->closed || s->cand[w - 1].nb == c->nb)) {
                link p = {0, 0, c->value, c->lo, c->hi, 0, {0, 0}, 0};
                link q = {0, 0, s->cand[w - 1].value, s->cand[w - 1].lo,
                          s->cand[w - 1].hi, 0, {0, 0}, 0};
                if (link_less(&p, &q))
                    s->cand[w - 1] = *c;
                continue;
            }
            s->cand[w++] = *c;
        }
        s->ncand = w;
    }

    /* Crossing edges and outer fragments, named by the open roots. */
    if (e->nx > 0)
        qsort(e->cross, e->nx, sizeof(*e->cross), cmp_cross);
    s->cross = e->cross;
    s->ncross = e->nx;
    e->cross = NULL;
    for (size_t i = 0; i < e->no; i++)
        e->ou[i].rep = crep[uf_find(e->par, (size_t)e->ou[i].rep)];
    if (e->no > 0)
        qsort(e->ou, e->no, sizeof(*e->ou), cmp_outer);
    s->outer = e->ou;
    s->nouter = e->no;
    e->ou = NULL;

    /* Contributions: the closed roots', and those from below, summed per
     * segment (or open root). */
    for (size_t i = 0; i < e->nc; i++)
        e->ct[i].tgt = out_ref(e, e->ct[i].tgt, crep, csize, stack);
    for (size_t i = 0; i < nn && rc == 0; i++)
        if (uf_find(e->par, i) == i && !e->nd[i].open)
            rc = add_contrib(e, node_tgt[i], csize[i], cchunk[i], cmulti[i]);
    if (rc == 0 && e->nc > 0) {
        size_t w = 0;
        qsort(e->ct, e->nc, sizeof(*e->ct), cmp_contrib);
        for (size_t i = 0; i < e->nc; i++) {
            if (w > 0 && cmp_contrib(&e->ct[w - 1], &e->ct[i]) == 0) {
                e->ct[w - 1].size += e->ct[i].size;
                mix(&e->ct[w - 1].chunk, &e->ct[w - 1].multi, e->ct[i].chunk,
                    e->ct[i].multi);
            } else {
                e->ct[w++] = e->ct[i];
            }
        }
        e->nc = w;
    }
    s->contrib = e->ct;
    s->ncontrib = e->nc;
    e->ct = NULL;
done:
    free(crep);
    free(csize);
    free(cchunk);
    free(cmulti);
    free(stack);
    return rc;
}

/* ---- level 1: face records ---------------------------------------------- */

static int inside_box(const cnx_box *in, const cnx_box *out)
{
    for (int i = 0; i < 3; i++)
        if (in->min[i] < out->min[i] || in->max[i] > out->max[i])
            return 0;
    return 1;
}

static int cmp_face_min(const void *x, const void *y)
{
    const sj_face *p = *(const sj_face *const *)x;
    const sj_face *q = *(const sj_face *const *)y;
    for (int i = 2; i >= 0; i--)
        if (p->roi.min[i] != q->roi.min[i])
            return p->roi.min[i] < q->roi.min[i] ? -1 : 1;
    return 0;
}

static const sj_face *face_at(sj_face *const *sorted, size_t n,
                              const int64_t m[3])
{
    sj_face key, *kp = &key;
    sj_face *const *hit;
    memcpy(key.roi.min, m, sizeof(key.roi.min));
    hit = bsearch(&kp, sorted, n, sizeof(*sorted), cmp_face_min);
    return hit ? *hit : NULL;
}

/* Does face f of box b lead to a chunk of region outside block? */
static int face_outward(const cnx_box *b, int f, const cnx_box *block,
                        const cnx_box *region)
{
    int a = f / 2;
    if (f % 2)
        return b->max[a] == block->max[a] && b->max[a] < region->max[a];
    return b->min[a] == block->min[a] && b->min[a] > region->min[a];
}

static int boxes_ok(const cnx_box *block, const cnx_box *region)
{
    return block != NULL && region != NULL && sj__box_ok(block) &&
           sj__box_ok(region) && inside_box(block, region);
}

typedef struct level1 {
    sj_face *recs;
    sj_face **own, **nbr;
    size_t nown, nnbr;
    uint64_t *ids; /* fragment ids, sorted; node i has rep ids[i] */
} level1;

static void level1_free(level1 *l)
{
    free(l->recs);
    free(l->own);
    free(l->nbr);
    free(l->ids);
}

static size_t id_index(const uint64_t *ids, size_t n, uint64_t id)
{
    const uint64_t *hit = bsearch(&id, ids, n, sizeof(*ids), sj__cmp_u64);
    return hit ? (size_t)(hit - ids) : (size_t)-1;
}

static int unlisted(uint64_t id)
{
    return cnx_error_set(CNX_ECORRUPT, 0,
                         "segjoin: a face names fragment %" PRIu64
                         " that its chunk does not list",
                         id);
}

/* Parse, sort the block's own chunks, check they fill it; the nodes. */
static int level1_nodes(const cnx_segjoin_input *in, size_t n,
                        const cnx_box *block, level1 *l, engine *e)
{
    int64_t filled = 0;
    size_t total = 0;
    int rc = 0;
    l->recs = calloc(n ? n : 1, sizeof(*l->recs));
    l->own = calloc(n ? n : 1, sizeof(*l->own));
    l->nbr = calloc(n ? n : 1, sizeof(*l->nbr));
    if (l->recs == NULL || l->own == NULL || l->nbr == NULL)
        return sj__nomem();
    for (size_t k = 0; k < n && rc == 0; k++) {
        rc = sj__parse_face(&in[k], &l->recs[k]);
        if (rc == 0 && inside_box(&l->recs[k].roi, block)) {
            l->own[l->nown++] = &l->recs[k];
            filled += cnx_box_voxels(&l->recs[k].roi);
            total += l->recs[k].nfrag;
        } else if (rc == 0) {
            l->nbr[l->nnbr++] = &l->recs[k];
        }
    }
    if (rc != 0)
        return rc;
    qsort(l->own, l->nown, sizeof(*l->own), cmp_face_min);
    qsort(l->nbr, l->nnbr, sizeof(*l->nbr), cmp_face_min);
    for (size_t k = 1; k < l->nown; k++)
        if (cmp_face_min(&l->own[k - 1], &l->own[k]) == 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segjoin: two face records for one chunk");
    if (filled != cnx_box_voxels(block))
        return cnx_error_set(
            CNX_EINVAL, 0,
            "segjoin: the chunks' face records do not fill the block "
            "%" PRId64 "-%" PRId64 "_%" PRId64 "-%" PRId64 "_%" PRId64
            "-%" PRId64 " (%" PRId64 " of %" PRId64 " voxels)",
            block->min[0], block->max[0], block->min[1], block->max[1],
            block->min[2], block->max[2], filled, cnx_box_voxels(block));
    e->nd = calloc(total ? total : 1, sizeof(*e->nd));
    l->ids = calloc(total ? total : 1, sizeof(*l->ids));
    if (e->nd == NULL || l->ids == NULL)
        return sj__nomem();
    for (size_t k = 0; k < l->nown; k++) {
        const sj_face *f = l->own[k];
        uint64_t key = cnx_segjoin_id(f->roi.min[0], f->roi.min[1],
                                      f->roi.min[2]);
        for (size_t i = 0; i < f->nfrag; i++)
            e->nd[e->nn++] = (node){sj__le64(f->frags + i * 16),
                                    sj__le64(f->frags + i * 16 + 8), key, 0,
                                    0};
    }
    qsort(e->nd, e->nn, sizeof(*e->nd), cmp_node_rep);
    for (size_t i = 0; i < e->nn; i++) {
        l->ids[i] = e->nd[i].rep;
        if (i > 0 && l->ids[i] == l->ids[i - 1])
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segjoin: fragment %" PRIu64 " is in two "
                                 "chunks (overlapping chunks?)",
                                 l->ids[i]);
    }
    return 0;
}

/* Seam edges on the high faces of the block's chunks; outer fragments. */
static int level1_edges(level1 *l, engine *e, const cnx_box *region,
                        int sections, size_t *nseen)
{
    int rc = 0;
    sj_edges es = {0};
    for (size_t k = 0; k < l->nown && rc == 0; k++) {
        const sj_face *lo = l->own[k];
        for (int a = 0; a < (sections ? 2 : 3) && rc == 0; a++) {
            int64_t m[3];
            const sj_face *hi;
            int internal = 1, u, v;
            memcpy(m, lo->roi.min, sizeof(m));
            m[a] = lo->roi.max[a];
            if (m[a] >= region->max[a])
                continue;
            hi = face_at(l->own, l->nown, m);
            if (hi == NULL) {
                hi = face_at(l->nbr, l->nnbr, m);
                internal = 0;
            }
            if (hi == NULL)
                return cnx_error_set(
                    CNX_EINVAL, 0,
                    "segjoin: no face record for the chunk at %" PRId64
                    ",%" PRId64 ",%" PRId64 " beside the block",
                    m[0], m[1], m[2]);
            sj__face_axes(a, &u, &v);
            if (hi->roi.max[u] != lo->roi.max[u] ||
                hi->roi.max[v] != lo->roi.max[v])
                return cnx_error_set(CNX_EINVAL, 0,
                                     "segjoin: chunks at a seam do not share "
                                     "a whole face");
            es.n = 0;
            rc = sj__face_edges(lo, hi, a, &es);
            *nseen += es.n;
            for (size_t i = 0; i < es.n && rc == 0; i++) {
                size_t x = id_index(l->ids, e->nn, es.e[i].a);
                size_t y = internal ? id_index(l->ids, e->nn, es.e[i].b) : 0;
                if (x == (size_t)-1 || y == (size_t)-1)
                    rc = unlisted(x == (size_t)-1 ? es.e[i].a : es.e[i].b);
                else if (internal)
                    rc = add_iedge(e, x, y, es.e[i].a, es.e[i].b,
                                   es.e[i].sum, es.e[i].n);
                else
                    rc = add_cross(e, &es.e[i]);
            }
        }
    }
    free(es.e);
    return rc;
}

static int level1_outer(level1 *l, engine *e, const cnx_box *block,
                        const cnx_box *region, int sections)
{
    uint64_t *lab = NULL, *faces = calloc(e->nn ? e->nn : 1, sizeof(*faces));
    size_t cap = 0;
    int rc = faces != NULL ? 0 : sj__nomem();
    for (size_t k = 0; k < l->nown && rc == 0; k++) {
        const sj_face *c = l->own[k];
        for (int f = 0; f < (sections ? 4 : 6) && rc == 0; f++) {
            int u, v;
            size_t n;
            if (!face_outward(&c->roi, f, block, region))
                continue;
            sj__face_axes(f / 2, &u, &v);
            n = (size_t)((c->roi.max[u] - c->roi.min[u]) *
                         (c->roi.max[v] - c->roi.min[v]));
            if (n > cap) {
                uint64_t *p = realloc(lab, n * sizeof(*lab));
                if (p == NULL) {
                    rc = sj__nomem();
                    break;
                }
                lab = p;
                cap = n;
            }
            sj__expand_face(c, f, lab);
            for (size_t i = 0; i < n && rc == 0; i++) {
                size_t x = id_index(l->ids, e->nn, lab[i]);
                if (x == (size_t)-1)
                    rc = unlisted(lab[i]);
                else
                    faces[x] |= (uint64_t)1 << f;
            }
        }
    }
    for (size_t i = 0; i < e->nn && rc == 0; i++)
        if (faces[i] != 0) {
            e->nd[i].open = 1;
            rc = add_outer(e, e->nd[i].rep, i, faces[i]);
        }
    free(lab);
    free(faces);
    return rc;
}

/* The per-chunk fragment targets of a level-1 summary. */
static int level1_chunks(const level1 *l, const ref *node_tgt, size_t nn,
                         summary *s)
{
    size_t total = 0;
    s->nchunks = l->nown;
    s->chunks = calloc(l->nown ? l->nown : 1, sizeof(*s->chunks));
    s->first = calloc(l->nown + 1, sizeof(*s->first));
    for (size_t k = 0; k < l->nown; k++)
        total += l->own[k]->nfrag;
    s->frag = calloc(total ? total : 1, sizeof(*s->frag));
    s->ftgt = calloc(total ? total : 1, sizeof(*s->ftgt));
    if (s->chunks == NULL || s->first == NULL || s->frag == NULL ||
        s->ftgt == NULL)
        return sj__nomem();
    total = 0;
    for (size_t k = 0; k < l->nown; k++) {
        const sj_face *f = l->own[k];
        s->chunks[k] = f->roi;
        s->first[k] = total;
        for (size_t i = 0; i < f->nfrag; i++) {
            uint64_t id = sj__le64(f->frags + i * 16);
            s->frag[total] = id;
            s->ftgt[total++] = node_tgt[id_index(l->ids, nn, id)];
        }
    }
    s->first[l->nown] = total;
    return 0;
}

static int segjoin_block_stats(const cnx_segjoin_input *faces, size_t n,
                               const cnx_box *block, const cnx_box *region,
                               const cnx_segment_params *p, summary *s,
                               size_t *nedges, size_t *nmerged)
{
    engine e = {0};
    level1 l = {0};
    ref *node_tgt = NULL;
    int sections = cnx_segment_mode_of(p) == CNX_SEGMENT_MODE_2D;
    int rc;

    memset(s, 0, sizeof(*s));
    if (!boxes_ok(block, region) || p == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: block: the block must lie in the "
                             "region, both in [0, 2^21) on every axis");
    e.block = block;
    e.level = cnx_segjoin_seam_level(p);
    e.min_size = (uint64_t)cnx_segment_min_voxels(p);
    rc = level1_nodes(faces, n, block, &l, &e);
    if (rc == 0)
        rc = level1_edges(&l, &e, region, sections, nedges);
    if (rc == 0)
        rc = level1_outer(&l, &e, block, region, sections);
    if (rc == 0)
        rc = edge_links(&e);
    if (rc == 0) {
        node_tgt = calloc(e.nn ? e.nn : 1, sizeof(*node_tgt));
        rc = node_tgt != NULL ? 0 : sj__nomem();
    }
    if (rc == 0)
        rc = engine_run(&e, s, node_tgt);
    if (rc == 0)
        rc = level1_chunks(&l, node_tgt, e.nn, s);
    s->box = *block;
    *nmerged = e.merged;
    free(node_tgt);
    level1_free(&l);
    engine_free(&e);
    if (rc != 0)
        summary_free(s);
    return rc;
}

int cnx_segjoin_block(const cnx_segjoin_input *faces, size_t n,
                      const cnx_box *block, const cnx_box *region,
                      const cnx_segment_params *p, uint8_t **out,
                      size_t *len)
{
    summary s;
    size_t nedges = 0, nmerged = 0;
    int rc;
    *out = NULL;
    *len = 0;
    rc = segjoin_block_stats(faces, n, block, region, p, &s, &nedges,
                             &nmerged);
    if (rc == 0)
        rc = encode(&s, out, len);
    summary_free(&s);
    return rc;
}

/* ---- level k: summaries -------------------------------------------------- */

/* The first voxel of fragment id. */
static void frag_voxel(uint64_t id, int64_t g[3])
{
    uint64_t v = id - 1, mask = ((uint64_t)1 << 21) - 1;
    g[0] = (int64_t)(v & mask);
    g[1] = (int64_t)((v >> 21) & mask);
    g[2] = (int64_t)(v >> 42);
}

static int voxel_in(const cnx_box *b, const int64_t g[3])
{
    for (int i = 0; i < 3; i++)
        if (g[i] < b->min[i] || g[i] >= b->max[i])
            return 0;
    return 1;
}

static int cmp_sum_min(const void *x, const void *y)
{
    const summary *p = x, *q = y;
    for (int i = 2; i >= 0; i--)
        if (p->box.min[i] != q->box.min[i])
            return p->box.min[i] < q->box.min[i] ? -1 : 1;
    return 0;
}

/* Index of the outer fragment id in the sorted table, or -1. */
static size_t outer_index(const outer *o, size_t n, uint64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (o[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && o[lo].id == id ? lo : (size_t)-1;
}

/* A pending ref of a child (its open component's rep) as a node ref. */
static int child_ref(const engine *e, ref *r, const char *name)
{
    size_t x;
    if (!r->pending)
        return 0;
    x = node_of(e, r->id);
    if (x == (size_t)-1)
        return bad_summary(name, "names an open component it does not "
                                 "list");
    r->id = x;
    return 0;
}

static int merge_inputs(engine *e, summary *kids, size_t n,
                        const cnx_segjoin_input *in, const cnx_box *block,
                        const cnx_box *region)
{
    int64_t filled = 0;
    size_t total = 0, nout = 0;
    outer *all = NULL;
    int rc = 0;

    for (size_t k = 0; k < n; k++) {
        if (!inside_box(&kids[k].box, block))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segjoin: block summary %s lies outside "
                                 "the block",
                                 in[k].name ? in[k].name : "(unnamed)");
        filled += cnx_box_voxels(&kids[k].box);
        total += kids[k].nopen;
        nout += kids[k].nouter;
    }
    /* kids[] is sorted by box; in[] names are looked up by box below. */
    for (size_t k = 1; k < n; k++)
        if (cmp_sum_min(&kids[k - 1], &kids[k]) == 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "segjoin: two block summaries for one "
                                 "block");
    if (filled != cnx_box_voxels(block))
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: the block summaries do not fill the "
                             "block (%" PRId64 " of %" PRId64 " voxels)",
                             filled, cnx_box_voxels(block));
    e->nd = calloc(total ? total : 1, sizeof(*e->nd));
    all = calloc(nout ? nout : 1, sizeof(*all));
    if (e->nd == NULL || all == NULL) {
        free(all);
        return sj__nomem();
    }
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < kids[k].nopen; i++) {
            const opencomp *o = &kids[k].open[i];
            e->nd[e->nn++] = (node){o->rep, o->size, o->chunk, o->multi, 0};
        }
    qsort(e->nd, e->nn, sizeof(*e->nd), cmp_node_rep);
    for (size_t i = 1; i < e->nn; i++)
        if (e->nd[i].rep == e->nd[i - 1].rep)
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "segjoin: open component %" PRIu64
                               " in two block summaries",
                               e->nd[i].rep);
    /* Outer fragments: node indices, and those on this block's faces. */
    nout = 0;
    for (size_t k = 0; k < n && rc == 0; k++)
        for (size_t i = 0; i < kids[k].nouter && rc == 0; i++) {
            outer o = kids[k].outer[i];
            size_t x = node_of(e, o.rep);
            uint64_t faces = 0;
            if (x == (size_t)-1) {
                rc = bad_summary(in[k].name, "an outer fragment names no "
                                             "open component");
                break;
            }
            all[nout++] = (outer){o.id, x, 0};
            for (int f = 0; f < 6; f++)
                if ((o.faces >> f & 1) &&
                    face_outward(&kids[k].box, f, block, region))
                    faces |= (uint64_t)1 << f;
            if (faces != 0) {
                e->nd[x].open = 1;
                rc = add_outer(e, o.id, x, faces);
            }
        }
    if (rc == 0)
        qsort(all, nout, sizeof(*all), cmp_outer);
    for (size_t i = 1; i < nout && rc == 0; i++)
        if (all[i].id == all[i - 1].id)
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "segjoin: outer fragment %" PRIu64
                               " in two block summaries",
                               all[i].id);
    /* Seam edges between the blocks; those leaving this block go up. */
    for (size_t k = 0; k < n && rc == 0; k++)
        for (size_t i = 0; i < kids[k].ncross && rc == 0; i++) {
            const sj_edge *c = &kids[k].cross[i];
            size_t xa = outer_index(all, nout, c->a), xb;
            int64_t g[3];
            frag_voxel(c->b, g);
            if (xa == (size_t)-1) {
                rc = bad_summary(in[k].name, "a seam edge leaves from a "
                                             "fragment not on its faces");
                break;
            }
            if (!voxel_in(block, g)) {
                rc = add_cross(e, c);
                continue;
            }
            xb = outer_index(all, nout, c->b);
            if (xb == (size_t)-1)
                rc = cnx_error_set(CNX_ECORRUPT, 0,
                                   "segjoin: a seam edge of %s reaches "
                                   "fragment %" PRIu64 ", on no block's "
                                   "faces",
                                   in[k].name ? in[k].name : "(unnamed)",
                                   c->b);
            else
                rc = add_iedge(e, (size_t)all[xa].rep, (size_t)all[xb].rep,
                               c->a, c->b, c->sum, c->n);
        }
    free(all);
    if (rc == 0)
        rc = edge_links(e);
    /* The blocks' candidates and contributions, in node terms. */
    for (size_t k = 0; k < n && rc == 0; k++) {
        for (size_t i = 0; i < kids[k].ncand && rc == 0; i++) {
            const cand *c = &kids[k].cand[i];
            link l = {node_of(e, c->rep), 0, c->value, c->lo, c->hi, c->nb,
                      c->tgt, c->closed ? 1 : 0};
            if (l.from == (size_t)-1)
                rc = bad_summary(in[k].name, "a candidate of no open "
                                             "component");
            else if (!c->closed && (l.to = node_of(e, c->nb)) == (size_t)-1)
                rc = bad_summary(in[k].name, "a candidate to no open "
                                             "component");
            else
                rc = child_ref(e, &l.tgt, in[k].name);
            if (rc == 0)
                rc = add_link(e, &l);
        }
        for (size_t i = 0; i < kids[k].ncontrib && rc == 0; i++) {
            contrib c = kids[k].contrib[i];
            rc = child_ref(e, &c.tgt, in[k].name);
            if (rc == 0)
                rc = add_contrib(e, c.tgt, c.size, c.chunk, c.multi);
        }
    }
    return rc;
}

int cnx_segjoin_merge(const cnx_segjoin_input *blocks, size_t n,
                      const cnx_box *block, const cnx_box *region,
                      const cnx_segment_params *p, uint8_t **out,
                      size_t *len)
{
    summary *kids = NULL, s;
    cnx_segjoin_input *named = NULL;
    engine e = {0};
    ref *node_tgt = NULL;
    int rc = 0;

    *out = NULL;
    *len = 0;
    memset(&s, 0, sizeof(s));
    if (!boxes_ok(block, region) || p == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "segjoin: merge: the block must lie in the "
                             "region, both in [0, 2^21) on every axis");
    kids = calloc(n ? n : 1, sizeof(*kids));
    named = calloc(n ? n : 1, sizeof(*named));
    if (kids == NULL || named == NULL)
        rc = sj__nomem();
    for (size_t k = 0; k < n && rc == 0; k++)
        rc = decode(&blocks[k], &kids[k]);
    /* Sort the blocks (and their names with them) by box. */
    for (size_t k = 1; k < n && rc == 0; k++)
        for (size_t j = k; j > 0 && cmp_sum_min(&kids[j - 1], &kids[j]) > 0;
             j--) {
            summary t = kids[j];
            kids[j] = kids[j - 1];
            kids[j - 1] = t;
        }
    for (size_t k = 0; k < n && rc == 0; k++) {
        named[k].name = "(unnamed)";
        for (size_t j = 0; j < n; j++) {
            cnx_box b;
            int open;
            if (cnx_segjoin_summary_box(&blocks[j], &b, &open) == 0 &&
                memcmp(&b, &kids[k].box, sizeof(b)) == 0)
                named[k].name = blocks[j].name;
        }
    }
    e.block = block;
    e.level = cnx_segjoin_seam_level(p);
    e.min_size = (uint64_t)cnx_segment_min_voxels(p);
    if (rc == 0)
        rc = merge_inputs(&e, kids, n, named, block, region);
    if (rc == 0) {
        node_tgt = calloc(e.nn ? e.nn : 1, sizeof(*node_tgt));
        rc = node_tgt != NULL ? 0 : sj__nomem();
    }
    if (rc == 0)
        rc = engine_run(&e, &s, node_tgt);
    if (rc == 0) {
        s.nres = e.nn;
        s.res = calloc(e.nn ? e.nn : 1, sizeof(*s.res));
        rc = s.res != NULL ? 0 : sj__nomem();
        for (size_t i = 0; i < e.nn && rc == 0; i++)
            s.res[i] = (resent){e.nd[i].rep, node_tgt[i]};
    }
    s.box = *block;
    if (rc == 0)
        rc = encode(&s, out, len);
    summary_free(&s);
    for (size_t k = 0; kids != NULL && k < n; k++)
        summary_free(&kids[k]);
    free(kids);
    free(named);
    free(node_tgt);
    engine_free(&e);
    return rc;
}

int cnx_segjoin_summary_box(const cnx_segjoin_input *summary, cnx_box *box,
                            int *open)
{
    sj_rd r = {summary->data, summary->len, 0};
    const uint8_t *magic = sj__get_bytes(&r, 8);
    if (magic == NULL || memcmp(magic, SUM_MAGIC, 8) != 0)
        return bad_summary(summary->name, "not a block summary (magic)");
    get_box(&r, box);
    if (r.bad || !sj__box_ok(box))
        return bad_summary(summary->name, "bad block box");
    if (open != NULL) {
        struct summary s;
        int rc = decode(summary, &s);
        if (rc != 0)
            return rc;
        *open = s.nopen > 0;
        summary_free(&s);
    }
    return 0;
}

/* ---- the way down ------------------------------------------------------- */

struct cnx_segjoin_tree {
    size_t n;
    summary *ups; /* by volume, ascending; the last is the top */
};

static int64_t vol(const cnx_box *b)
{
    return cnx_box_voxels(b);
}

static int cmp_sum_vol(const void *x, const void *y)
{
    const summary *p = x, *q = y;
    int64_t a = vol(&p->box), b = vol(&q->box);
    if (a != b)
        return a < b ? -1 : 1;
    return cmp_sum_min(x, y);
}

void cnx_segjoin_tree_free(cnx_segjoin_tree *t)
{
    if (t == NULL)
        return;
    for (size_t k = 0; k < t->n; k++)
        summary_free(&t->ups[k]);
    free(t->ups);
    free(t);
}

int cnx_segjoin_tree_open(const cnx_segjoin_input *ups, size_t n,
                          cnx_segjoin_tree **out)
{
    cnx_segjoin_tree *t = calloc(1, sizeof(*t));
    int rc = 0;
    *out = NULL;
    if (t == NULL || (t->ups = calloc(n ? n : 1, sizeof(*t->ups))) == NULL) {
        free(t);
        return sj__nomem();
    }
    for (size_t k = 0; k < n && rc == 0; k++) {
        rc = decode(&ups[k], &t->ups[k]);
        if (rc == 0)
            t->n++;
    }
    if (rc == 0 && n == 0)
        rc = cnx_error_set(CNX_EINVAL, 0, "segjoin: no top summary");
    if (rc == 0) {
        const summary *top;
        qsort(t->ups, t->n, sizeof(*t->ups), cmp_sum_vol);
        top = &t->ups[t->n - 1];
        if (top->nopen != 0)
            rc = bad_summary(ups[0].name, "the largest summary leaves "
                                          "components open: not the top");
        for (size_t i = 0; i < top->ncontrib && rc == 0; i++)
            if (top->contrib[i].tgt.pending)
                rc = bad_summary(ups[0].name, "the top's voxel counts name "
                                              "an open component");
    }
    if (rc != 0) {
        cnx_segjoin_tree_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

int cnx_segjoin_tree_segments(const cnx_segjoin_tree *t, cnx_segjoin *out)
{
    const summary *top = &t->ups[t->n - 1];
    size_t n = top->ncontrib;
    out->nsegs = n;
    out->seg_ids = calloc(n ? n : 1, sizeof(*out->seg_ids));
    out->seg_size = calloc(n ? n : 1, sizeof(*out->seg_size));
    out->seg_multi = calloc(n ? n : 1, sizeof(*out->seg_multi));
    if (out->seg_ids == NULL || out->seg_size == NULL ||
        out->seg_multi == NULL)
        return sj__nomem();
    for (size_t i = 0; i < n; i++) {
        out->seg_ids[i] = top->contrib[i].tgt.id;
        out->seg_size[i] = top->contrib[i].size;
        out->seg_multi[i] = top->contrib[i].multi != 0;
    }
    return 0;
}

/* The target of key in a summary's resolution table, or NULL. */
static const ref *res_find(const summary *s, uint64_t key)
{
    resent k = {key, {0, 0}};
    const resent *hit = bsearch(&k, s->res, s->nres, sizeof(*s->res),
                                cmp_res);
    return hit ? &hit->tgt : NULL;
}

int cnx_segjoin_tree_block(const cnx_segjoin_tree *t,
                           const cnx_segjoin_input *l1, cnx_segjoin *out)
{
    summary s;
    size_t chain[64], depth = 0, nf;
    const cnx_box *at;
    int rc = decode(l1, &s);
    if (rc != 0)
        return rc;
    /* The blocks above this one, smallest first. */
    at = &s.box;
    for (size_t k = 0; k < t->n && depth < 64; k++)
        if (inside_box(at, &t->ups[k].box) &&
            memcmp(at, &t->ups[k].box, sizeof(*at)) != 0) {
            chain[depth++] = k;
            at = &t->ups[k].box;
        }
    nf = s.first[s.nchunks];
    out->nchunks = s.nchunks;
    out->chunks = s.chunks;
    out->first = s.first;
    out->frag = s.frag;
    s.chunks = NULL;
    s.first = NULL;
    s.frag = NULL;
    out->seg = calloc(nf ? nf : 1, sizeof(*out->seg));
    if (out->seg == NULL)
        rc = sj__nomem();
    for (size_t f = 0; f < nf && rc == 0; f++) {
        ref r = s.ftgt[f];
        for (size_t d = 0; d < depth && r.pending; d++) {
            const ref *next = res_find(&t->ups[chain[d]], r.id);
            if (next != NULL)
                r = *next;
        }
        if (r.pending)
            rc = bad_summary(l1->name, "an open component no summary "
                                       "above resolves");
        out->seg[f] = r.id;
    }
    summary_free(&s);
    return rc;
}

/* ---- one task ----------------------------------------------------------- */

int cnx_segjoin_run(const cnx_segjoin_input *in, size_t n,
                    const cnx_segment_params *p, cnx_segjoin *out)
{
    summary s;
    cnx_box region;
    cnx_segjoin_input top = {NULL, 0, "(the region)"};
    cnx_segjoin_tree *t = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0, nedges = 0, nmerged = 0;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    /* The region: the box of every chunk. */
    for (size_t k = 0; k < n && rc == 0; k++) {
        sj_face f;
        rc = sj__parse_face(&in[k], &f);
        for (int i = 0; i < 3 && rc == 0; i++) {
            if (k == 0 || f.roi.min[i] < region.min[i])
                region.min[i] = f.roi.min[i];
            if (k == 0 || f.roi.max[i] > region.max[i])
                region.max[i] = f.roi.max[i];
        }
    }
    if (rc != 0)
        return rc;
    if (n == 0)
        return 0;
    rc = segjoin_block_stats(in, n, &region, &region, p, &s, &nedges,
                             &nmerged);
    if (rc == 0)
        rc = encode(&s, &bytes, &len);
    summary_free(&s);
    top.data = bytes;
    top.len = len;
    if (rc == 0)
        rc = cnx_segjoin_tree_open(&top, 1, &t);
    if (rc == 0)
        rc = cnx_segjoin_tree_segments(t, out);
    if (rc == 0) {
        cnx_segjoin b;
        memset(&b, 0, sizeof(b));
        rc = cnx_segjoin_tree_block(t, &top, &b);
        out->nchunks = b.nchunks;
        out->chunks = b.chunks;
        out->first = b.first;
        out->frag = b.frag;
        out->seg = b.seg;
    }
    out->nedges = nedges;
    out->nmerged = nmerged;
    cnx_segjoin_tree_free(t);
    free(bytes);
    if (rc != 0)
        cnx_segjoin_free(out);
    return rc;
}
