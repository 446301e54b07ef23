/*
 * segment_rag.c - region adjacency graph, greedy agglomeration, small-
 * fragment cleanup and raster numbering (steps 3-6 of cnx/segment.h).
 *
 * One pass over the watershed basins sums the pair values of every face
 * pair that straddles two basins into an edge, found through an open-
 * addressing table keyed (lower id << 32 | higher id); runs of the same
 * pair (per direction) reuse the last slot. The table stays: it maps every
 * live edge's current pair to the edge. Each node keeps a list of edge
 * indices (dead ones are skipped, and dropped when they outnumber the
 * live). Merging b into a (a < b) walks b's list only: an edge to a
 * neighbour o that a already has (a table look-up of (a, o)) is added into
 * a's edge and dies, the others are re-pointed (re-keyed) and appended to
 * a's list; so a merge costs b's degree, not a's (a region that grows
 * large and keeps the lower id absorbs its neighbours in constant time
 * each). Edge endpoints are always current region ids, and at most one
 * live edge joins two regions. The priority queue is a binary heap with lazy
 * deletion: an entry stands only while its edge's version is unchanged.
 * Decisions depend only on (value, ids), never on hash or list order.
 * Memory: O(basins + edges); time O(voxels + merges x degree + E log E).
 */
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "segment_int.h"

typedef struct seg_edge {
    uint32_t a, b; /* current endpoints, a < b */
    uint64_t sum, count;
    uint32_t version;
    uint16_t alive;
    uint16_t z; /* joins two sections (sections mode) */
} seg_edge;

typedef struct seg_node {
    uint32_t *list; /* edge indices (some may be dead) */
    uint32_t len, cap;
    int owned; /* list was malloc'd (else it points into the initial block) */
} seg_node;

/* Heap entry: ordered by (k1, k2); ref/ver identify what it stands for. */
typedef struct heap_entry {
    uint64_t k1, k2;
    uint32_t ref, ver;
} heap_entry;

typedef struct heap {
    heap_entry *e;
    size_t len, cap;
} heap;

typedef struct edge_table {
    uint64_t *keys; /* 0: empty (ids are >= 1, so no key is 0) */
    uint32_t *index;
    size_t cap; /* power of two */
} edge_table;

typedef struct rag {
    seg_edge *edges;
    size_t nedges, cap_edges;
    seg_node *nodes; /* 1..nnodes */
    uint32_t *block; /* the initial lists */
    uint32_t *parent;
    uint64_t *size;
    uint32_t *deg; /* per node: live edges in its list */
    uint32_t nnodes;
    uint64_t level; /* merge while an edge's value is below this */
    int planar;     /* first pass of sections mode: z edges wait */
    heap queue;
    edge_table table; /* (a << 32 | b) of every live edge -> its index */
} rag;

/* ---- heap ---------------------------------------------------------------- */

static int entry_less(const heap_entry *x, const heap_entry *y)
{
    return x->k1 < y->k1 || (x->k1 == y->k1 && x->k2 < y->k2);
}

static int heap_push(heap *h, heap_entry e)
{
    size_t i;
    if (h->len == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 1024;
        heap_entry *grown = realloc(h->e, cap * sizeof(*grown));
        if (grown == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
        h->e = grown;
        h->cap = cap;
    }
    i = h->len++;
    while (i > 0 && entry_less(&e, &h->e[(i - 1) / 2])) {
        h->e[i] = h->e[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->e[i] = e;
    return 0;
}

static heap_entry heap_pop(heap *h)
{
    heap_entry top = h->e[0], last = h->e[--h->len];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len)
            break;
        if (c + 1 < h->len && entry_less(&h->e[c + 1], &h->e[c]))
            c++;
        if (!entry_less(&h->e[c], &last))
            break;
        h->e[i] = h->e[c];
        i = c;
    }
    if (h->len > 0)
        h->e[i] = last;
    return top;
}

/* ---- building the graph ------------------------------------------------ */


static size_t key_slot(uint64_t key, size_t cap)
{
    return (size_t)((key * UINT64_C(0x9E3779B97F4A7C15)) >> 20) & (cap - 1);
}

static int table_init(edge_table *t, size_t cap)
{
    t->keys = calloc(cap, sizeof(*t->keys));
    t->index = malloc(cap * sizeof(*t->index));
    t->cap = cap;
    return t->keys != NULL && t->index != NULL ? 0 : CNX_ENOMEM;
}

static void table_dispose(edge_table *t)
{
    free(t->keys);
    free(t->index);
}

static int table_grow(edge_table *t)
{
    edge_table big;
    if (table_init(&big, t->cap * 2) != 0) {
        table_dispose(&big);
        return CNX_ENOMEM;
    }
    for (size_t i = 0; i < t->cap; i++) {
        size_t j;
        if (t->keys[i] == 0)
            continue;
        j = key_slot(t->keys[i], big.cap);
        while (big.keys[j] != 0)
            j = (j + 1) & (big.cap - 1);
        big.keys[j] = t->keys[i];
        big.index[j] = t->index[i];
    }
    table_dispose(t);
    *t = big;
    return 0;
}

static uint64_t pair_key(uint32_t a, uint32_t b)
{
    return a < b ? (uint64_t)a << 32 | b : (uint64_t)b << 32 | a;
}

/* The slot of key, or the empty slot where it would go. */
static size_t table_find(const edge_table *t, uint64_t key)
{
    size_t j = key_slot(key, t->cap);
    while (t->keys[j] != 0 && t->keys[j] != key)
        j = (j + 1) & (t->cap - 1);
    return j;
}

/* Remove the key of slot i (linear probing, backward shift: no
 * tombstones, so the load never grows). */
static void table_remove_at(edge_table *t, size_t i)
{
    const size_t mask = t->cap - 1;
    size_t j = i;
    for (;;) {
        size_t k;
        j = (j + 1) & mask;
        if (t->keys[j] == 0)
            break;
        k = key_slot(t->keys[j], t->cap);
        /* the entry at j may move to i unless its home lies in (i, j] */
        if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
            continue;
        t->keys[i] = t->keys[j];
        t->index[i] = t->index[j];
        i = j;
    }
    t->keys[i] = 0;
}

/* The edge of key, created (sum 0) if new. @return its index or SEG_NONE
 * when out of memory. */
static uint32_t edge_of(rag *r, edge_table *t, uint64_t key)
{
    size_t j = key_slot(key, t->cap);
    while (t->keys[j] != 0) {
        if (t->keys[j] == key)
            return t->index[j];
        j = (j + 1) & (t->cap - 1);
    }
    if (r->nedges == r->cap_edges) {
        size_t cap = r->cap_edges * 2;
        seg_edge *grown;
        if (r->nedges >= SEG_NONE - 1)
            return SEG_NONE;
        grown = realloc(r->edges, cap * sizeof(*grown));
        if (grown == NULL)
            return SEG_NONE;
        r->edges = grown;
        r->cap_edges = cap;
    }
    if ((r->nedges + 1) * 2 > t->cap) {
        if (table_grow(t) != 0)
            return SEG_NONE;
        return edge_of(r, t, key);
    }
    t->keys[j] = key;
    t->index[j] = (uint32_t)r->nedges;
    r->edges[r->nedges] =
        (seg_edge){(uint32_t)(key >> 32), (uint32_t)key, 0, 0, 0, 1, 0};
    return (uint32_t)r->nedges++;
}

/* Sum the face pairs between basins into edges; count basin sizes. */
static int build_edges(rag *r, const seg_grid *g, const uint8_t *q,
                       const uint32_t *lab)
{
    const int64_t *s = g->size;
    const int ndirs = g->z_edges ? 3 : 2;
    const ptrdiff_t dir[3] = {g->nb[1], g->nb[3], g->nb[5]};
    edge_table *t = &r->table;
    uint64_t last_key[3] = {0, 0, 0}; /* per direction: runs of one pair */
    uint32_t last[3] = {SEG_NONE, SEG_NONE, SEG_NONE};
    int rc = 0;
    if (table_init(t, 4096) != 0)
        goto oom;
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            size_t row = seg__at(g, 0, y, z);
            for (size_t v = row; v < row + (size_t)s[0]; v++) {
                uint32_t lv = lab[v];
                r->size[lv]++;
                /* The common case, inside a basin: one branch. */
                if (((lab[v + dir[0]] ^ lv) | (lab[v + dir[1]] ^ lv) |
                     (ndirs == 3 ? lab[v + dir[2]] ^ lv : 0)) == 0)
                    continue;
                for (int d = 0; d < ndirs; d++) {
                    size_t u = v + (size_t)dir[d];
                    uint32_t lu = lab[u];
                    uint64_t key;
                    if (lu == lv || lu == SEG_BORDER)
                        continue;
                    key = lu < lv ? (uint64_t)lu << 32 | lv
                                  : (uint64_t)lv << 32 | lu;
                    if (key != last_key[d]) {
                        last[d] = edge_of(r, t, key);
                        if (last[d] == SEG_NONE)
                            goto oom;
                        last_key[d] = key;
                    }
                    r->edges[last[d]].sum +=
                        cnx_segment_pair_value_q(q[v], q[u]);
                    r->edges[last[d]].count++;
                }
            }
        }
    return rc;
oom:
    return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory (graph)");
}

/* Each node's initial list of edges, in one block. */
static int build_lists(rag *r)
{
    size_t at = 0;
    r->block = malloc((2 * r->nedges + 1) * sizeof(*r->block));
    if (r->block == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t e = 0; e < r->nedges; e++) {
        r->nodes[r->edges[e].a].cap++;
        r->nodes[r->edges[e].b].cap++;
    }
    for (uint32_t i = 1; i <= r->nnodes; i++) {
        r->nodes[i].list = r->block + at;
        at += r->nodes[i].cap;
    }
    for (size_t e = 0; e < r->nedges; e++) {
        seg_node *na = &r->nodes[r->edges[e].a], *nb = &r->nodes[r->edges[e].b];
        na->list[na->len++] = (uint32_t)e;
        nb->list[nb->len++] = (uint32_t)e;
    }
    for (uint32_t i = 1; i <= r->nnodes; i++)
        r->deg[i] = r->nodes[i].len;
    return 0;
}

static void rag_dispose(rag *r)
{
    if (r->nodes != NULL)
        for (uint32_t i = 1; i <= r->nnodes; i++)
            if (r->nodes[i].owned)
                free(r->nodes[i].list);
    free(r->nodes);
    free(r->block);
    free(r->edges);
    free(r->parent);
    free(r->size);
    free(r->deg);
    free(r->queue.e);
    table_dispose(&r->table);
}

/* Sections mode: mark the edges that join two sections (every basin lies
 * in one section). */
static int mark_z_edges(rag *r, const seg_grid *g, const uint32_t *lab)
{
    const int64_t *s = g->size;
    int64_t *zof = malloc(((size_t)r->nnodes + 1) * sizeof(*zof));
    if (zof == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            const uint32_t *row = lab + seg__at(g, 0, y, z);
            for (int64_t x = 0; x < s[0]; x++)
                zof[row[x]] = z;
        }
    for (size_t e = 0; e < r->nedges; e++)
        r->edges[e].z = zof[r->edges[e].a] != zof[r->edges[e].b];
    free(zof);
    return 0;
}

/* An empty graph of nnodes nodes (1..nnodes, each its own region) with
 * room for cap_edges edges. */
static int rag_alloc(rag *r, uint32_t nnodes, uint64_t level, size_t cap_edges)
{
    const size_t nn = (size_t)nnodes + 1;
    memset(r, 0, sizeof(*r));
    r->nnodes = nnodes;
    r->level = level;
    r->cap_edges = cap_edges ? cap_edges : 1;
    r->edges = malloc(r->cap_edges * sizeof(*r->edges));
    r->nodes = calloc(nn, sizeof(*r->nodes));
    r->parent = malloc(nn * sizeof(*r->parent));
    r->size = calloc(nn, sizeof(*r->size));
    r->deg = calloc(nn, sizeof(*r->deg));
    if (r->edges == NULL || r->nodes == NULL || r->parent == NULL ||
        r->size == NULL || r->deg == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    for (size_t i = 0; i < nn; i++)
        r->parent[i] = (uint32_t)i;
    return 0;
}

static int rag_init(rag *r, const seg_grid *g, const seg_cfg *p,
                    const uint8_t *q, const uint32_t *lab, uint32_t nbasins)
{
    int rc = rag_alloc(r, nbasins, cnx_segment_merge_level(p->merge_threshold),
                       1024);
    if (rc != 0)
        return rc;
    if (build_edges(r, g, q, lab) != 0)
        return CNX_ENOMEM;
    if (g->sections && g->z_edges && mark_z_edges(r, g, lab) != 0)
        return CNX_ENOMEM;
    return build_lists(r);
}

/* ---- merging ------------------------------------------------------------- */

static uint64_t edge_value(const seg_edge *e)
{
    return cnx_segment_edge_value(e->sum, e->count);
}

static uint32_t other_end(const seg_edge *e, uint32_t node)
{
    return e->a == node ? e->b : e->a;
}

/* The edge changed (sums or endpoints): invalidate its queue entries and,
 * when queueing is on and it is below the level, queue it again. */
static int touch(rag *r, uint32_t e, int queue)
{
    seg_edge *ed = &r->edges[e];
    heap_entry h;
    ed->version++;
    if (!queue || edge_value(ed) >= r->level || (r->planar && ed->z))
        return 0;
    h.k1 = edge_value(ed);
    h.k2 = (uint64_t)ed->a << 32 | ed->b;
    h.ref = e;
    h.ver = ed->version;
    return heap_push(&r->queue, h);
}

static int node_append(seg_node *n, uint32_t e)
{
    if (n->len == n->cap) {
        uint32_t cap = n->cap * 2 + 4;
        uint32_t *list = malloc((size_t)cap * sizeof(*list));
        if (list == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
        memcpy(list, n->list, (size_t)n->len * sizeof(*list));
        if (n->owned)
            free(n->list);
        n->list = list;
        n->cap = cap;
        n->owned = 1;
    }
    n->list[n->len++] = e;
    return 0;
}

/* Drop the dead edges of node's list once they outnumber the live ones
 * (the list's order does not matter: decisions use values and ids). */
static void node_compact(rag *r, uint32_t node)
{
    seg_node *n = &r->nodes[node];
    uint32_t kept = 0;
    if (n->len <= 2 * r->deg[node] + 16)
        return;
    for (uint32_t i = 0; i < n->len; i++)
        if (r->edges[n->list[i]].alive)
            n->list[kept++] = n->list[i];
    n->len = kept;
}

/* Kill edge e (its pair leaves the table). */
static void edge_kill(rag *r, uint32_t e)
{
    seg_edge *ed = &r->edges[e];
    ed->alive = 0;
    r->deg[ed->a]--;
    r->deg[ed->b]--;
    table_remove_at(&r->table, table_find(&r->table, pair_key(ed->a, ed->b)));
}

/* Move b's edge e (to o != a) over to a: combine with a's edge to o, or
 * re-point it. */
static int move_edge(rag *r, uint32_t a, uint32_t b, uint32_t e, uint32_t o,
                     int queue)
{
    seg_edge *ed = &r->edges[e];
    const size_t j = table_find(&r->table, pair_key(a, o));
    if (r->table.keys[j] != 0) {
        const uint32_t f = r->table.index[j];
        r->edges[f].sum += ed->sum;
        r->edges[f].count += ed->count;
        edge_kill(r, e);
        return touch(r, f, queue);
    }
    /* (b, o) becomes (a, o): re-keyed (the removal may shift entries,
     * so the free slot is looked up again after it). */
    table_remove_at(&r->table, table_find(&r->table, pair_key(b, o)));
    {
        const size_t k = table_find(&r->table, pair_key(a, o));
        r->table.keys[k] = pair_key(a, o);
        r->table.index[k] = e;
    }
    ed->a = a < o ? a : o;
    ed->b = a < o ? o : a;
    r->deg[b]--;
    r->deg[a]++;
    if (node_append(&r->nodes[a], e) != 0)
        return CNX_ENOMEM;
    return touch(r, e, queue);
}

/* Merge region b into region a (a < b, both current): b's edges only. */
static int merge(rag *r, uint32_t a, uint32_t b, int queue)
{
    seg_node *nb = &r->nodes[b];
    int rc = 0;
    for (uint32_t i = 0; i < nb->len && rc == 0; i++) {
        uint32_t e = nb->list[i], o;
        if (!r->edges[e].alive)
            continue;
        o = other_end(&r->edges[e], b);
        if (o == a)
            edge_kill(r, e);
        else
            rc = move_edge(r, a, b, e, o, queue);
    }
    node_compact(r, a);
    if (nb->owned)
        free(nb->list);
    memset(nb, 0, sizeof(*nb));
    r->parent[b] = a;
    r->size[a] += r->size[b];
    r->size[b] = 0;
    return rc;
}

/* Step 4: merge the lowest edge while it is below the level. */
static int agglomerate(rag *r)
{
    for (size_t e = 0; e < r->nedges; e++)
        if (r->edges[e].alive && touch(r, (uint32_t)e, 1) != 0)
            return CNX_ENOMEM;
    while (r->queue.len > 0) {
        heap_entry h = heap_pop(&r->queue);
        const seg_edge *ed = &r->edges[h.ref];
        if (!ed->alive || ed->version != h.ver)
            continue;
        if (merge(r, ed->a, ed->b, 1) != 0)
            return CNX_ENOMEM;
    }
    return 0;
}

/* The live edge of node with the lowest (value, other id), or SEG_NONE. */
static uint32_t lowest_edge(const rag *r, uint32_t node)
{
    const seg_node *n = &r->nodes[node];
    uint32_t best = SEG_NONE, best_o = 0;
    uint64_t best_v = 0;
    for (uint32_t i = 0; i < n->len; i++) {
        const seg_edge *ed = &r->edges[n->list[i]];
        uint64_t v;
        uint32_t o;
        if (!ed->alive)
            continue;
        v = edge_value(ed);
        o = other_end(ed, node);
        if (best == SEG_NONE || v < best_v || (v == best_v && o < best_o)) {
            best = n->list[i];
            best_v = v;
            best_o = o;
        }
    }
    return best;
}

static int push_small(rag *r, uint32_t node, uint64_t min_size)
{
    heap_entry h = {r->size[node], node, node, 0};
    if (r->size[node] >= min_size)
        return 0;
    return heap_push(&r->queue, h);
}

/* Step 5: the smallest region under min_size joins its lowest neighbour. */
static int cleanup(rag *r, uint64_t min_size)
{
    r->queue.len = 0;
    for (uint32_t i = 1; i <= r->nnodes; i++)
        if (r->parent[i] == i && push_small(r, i, min_size) != 0)
            return CNX_ENOMEM;
    while (r->queue.len > 0) {
        heap_entry h = heap_pop(&r->queue);
        uint32_t node = h.ref, e, o, a;
        if (r->parent[node] != node || r->size[node] != h.k1)
            continue;
        e = lowest_edge(r, node);
        if (e == SEG_NONE)
            continue;
        o = other_end(&r->edges[e], node);
        a = node < o ? node : o;
        if (merge(r, a, node < o ? o : node, 0) != 0 ||
            push_small(r, a, min_size) != 0)
            return CNX_ENOMEM;
    }
    return 0;
}

/* ---- numbering ----------------------------------------------------------- */

/* Step 6: final region of every basin, numbered in raster order. */
static int number(rag *r, const seg_grid *g, const uint32_t *lab,
                  uint32_t *labels, uint32_t *nlabels)
{
    const int64_t *s = g->size;
    uint32_t *id = calloc((size_t)r->nnodes + 1, sizeof(*id)), n = 0;
    if (id == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory");
    /* parent[i] <= i: roots are found in increasing order. */
    for (uint32_t i = 1; i <= r->nnodes; i++)
        r->parent[i] = r->parent[r->parent[i]];
    for (int64_t z = 0; z < s[2]; z++)
        for (int64_t y = 0; y < s[1]; y++) {
            const uint32_t *src = lab + seg__at(g, 0, y, z);
            uint32_t *dst = labels + (size_t)(s[0] * (y + s[1] * z));
            for (int64_t x = 0; x < s[0]; x++) {
                uint32_t root = r->parent[src[x]];
                if (id[root] == 0)
                    id[root] = ++n;
                dst[x] = id[root];
            }
        }
    free(id);
    *nlabels = n;
    return 0;
}

int seg__agglomerate(const seg_grid *g, const seg_cfg *p,
                     const uint8_t *q, const uint32_t *lab, uint32_t nbasins,
                     uint32_t *labels, uint32_t *nlabels)
{
    rag r;
    int rc = rag_init(&r, g, p, q, lab, nbasins);
    if (rc == 0 && g->sections && g->z_edges) {
        /* sections: within each section first, then across them */
        r.planar = 1;
        rc = agglomerate(&r);
        r.planar = 0;
    }
    if (rc == 0)
        rc = agglomerate(&r);
    if (rc == 0 && p->min_size > 1)
        rc = cleanup(&r, p->min_size);
    if (rc == 0)
        rc = number(&r, g, lab, labels, nlabels);
    rag_dispose(&r);
    return rc;
}

int seg__agglomerate_graph(uint32_t nnodes, const uint64_t *sizes,
                           const seg_graph_edge *edges, size_t nedges,
                           uint64_t level, uint64_t min_size, uint32_t *parent)
{
    rag r;
    int rc = rag_alloc(&r, nnodes, level, nedges);
    for (uint32_t i = 1; i <= nnodes && rc == 0; i++)
        r.size[i] = sizes[i - 1];
    for (size_t e = 0; e < nedges && rc == 0; e++)
        r.edges[e] = (seg_edge){edges[e].a, edges[e].b, edges[e].sum,
                                edges[e].count, 0, 1, 0};
    r.nedges = rc == 0 ? nedges : 0;
    if (rc == 0) {
        size_t cap = 4096;
        while (cap < 2 * (nedges + 1))
            cap *= 2;
        rc = table_init(&r.table, cap) != 0
                 ? cnx_error_set(CNX_ENOMEM, 0, "segment: out of memory")
                 : 0;
        for (size_t e = 0; e < nedges && rc == 0; e++) {
            const uint64_t key = pair_key(edges[e].a, edges[e].b);
            const size_t j = table_find(&r.table, key);
            r.table.keys[j] = key;
            r.table.index[j] = (uint32_t)e;
        }
    }
    if (rc == 0)
        rc = build_lists(&r);
    if (rc == 0)
        rc = agglomerate(&r);
    if (rc == 0 && min_size > 1)
        rc = cleanup(&r, min_size);
    for (uint32_t i = 1; i <= nnodes && rc == 0; i++) {
        r.parent[i] = r.parent[r.parent[i]]; /* parent[i] <= i */
        parent[i - 1] = r.parent[i] - 1;
    }
    rag_dispose(&r);
    return rc;
}
