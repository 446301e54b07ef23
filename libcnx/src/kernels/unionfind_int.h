/*
 * unionfind_int.h - the union-find the kernels share (private to libcnx).
 *
 * A forest over uint32 indices in a caller-owned parent array (parent[i] ==
 * i at a root). Union makes the smaller root the parent, so a set's root is
 * its least member whatever the order of the unions: the property the
 * kernels' deterministic numbering relies on (and a single relabelling pass
 * in index order, since every parent index is below its child's). Find
 * compresses the path it walks.
 */
#ifndef CNX_UNIONFIND_INT_H
#define CNX_UNIONFIND_INT_H

#include <stdint.h>

static inline uint32_t cnx__uf_find(uint32_t *parent, uint32_t a)
{
    uint32_t root = a;
    while (parent[root] != root)
        root = parent[root];
    while (parent[a] != root) {
        uint32_t next = parent[a];
        parent[a] = root;
        a = next;
    }
    return root;
}

static inline void cnx__uf_union(uint32_t *parent, uint32_t a, uint32_t b)
{
    a = cnx__uf_find(parent, a);
    b = cnx__uf_find(parent, b);
    if (a < b)
        parent[b] = a;
    else if (b < a)
        parent[a] = b;
}

#endif
