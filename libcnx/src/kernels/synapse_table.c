/*
 * synapse_table.c - the connectivity edges of a synapse table
 * (cnx/synapse.h): the synapses with both partners, counted per (pre_id,
 * post_id) pair, in that order. The table and the edges as JSON lines are
 * synapse_io.c. Tables are small (one entry per synapse); the sort is
 * O(n log n) in memory.
 */
#include <stdlib.h>

#include "cnx/error.h"
#include "cnx/synapse.h"

/* ---- edges -------------------------------------------------------------- */

static int cmp_edge(const void *a, const void *b)
{
    const cnx_synapse_edge *x = a, *y = b;
    if (x->pre_id != y->pre_id)
        return x->pre_id < y->pre_id ? -1 : 1;
    return (x->post_id > y->post_id) - (x->post_id < y->post_id);
}

int cnx_synapse_edges(const cnx_synapse *s, size_t n, cnx_synapse_edge **out,
                      size_t *nedges)
{
    cnx_synapse_edge *e = NULL;
    size_t m = 0, k = 0;
    if ((s == NULL && n > 0) || out == NULL || nedges == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: NULL argument");
    if (n > 0)
        e = malloc(n * sizeof(*e));
    if (n > 0 && e == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    for (size_t i = 0; i < n; i++) {
        if (s[i].pre_id == 0 || s[i].post_id == 0)
            continue;
        e[m].pre_id = s[i].pre_id;
        e[m].post_id = s[i].post_id;
        e[m].count = 1;
        m++;
    }
    if (m > 0)
        qsort(e, m, sizeof(*e), cmp_edge);
    for (size_t i = 0; i < m; i++) {
        if (k > 0 && e[k - 1].pre_id == e[i].pre_id &&
            e[k - 1].post_id == e[i].post_id)
            e[k - 1].count++;
        else
            e[k++] = e[i];
    }
    if (k == 0) {
        free(e);
        e = NULL;
    }
    *out = e;
    *nedges = k;
    return 0;
}
