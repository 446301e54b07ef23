/*
 * param.c - the bounds tables of the kernels' parameters (cnx/param.h):
 * defaults, range checks and field access by offset. A row's field is an
 * int (FLAG, INT, CHOICE: enums are int-sized), an int64_t (INT64) or a
 * double (REAL); memcpy reads and writes it, so the struct's alignment is
 * never assumed. Pure, no shared state.
 */
#include "cnx/param.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>

#include "cnx/error.h"

double cnx_param_get(const cnx_param *row, const void *p)
{
    const char *at = (const char *)p + row->offset;
    int i;
    int64_t l;
    double d;
    switch (row->kind) {
    case CNX_PARAM_INT64:
        memcpy(&l, at, sizeof(l));
        return (double)l;
    case CNX_PARAM_REAL:
        memcpy(&d, at, sizeof(d));
        return d;
    default:
        memcpy(&i, at, sizeof(i));
        return (double)i;
    }
}

/* v is within the row's limits (the callers check first); each kind
 * converts only to its own type, so a real or an int64 value beyond the
 * range of int is never converted to int. */
void cnx_param_set(const cnx_param *row, void *p, double v)
{
    char *at = (char *)p + row->offset;
    int i;
    int64_t l;
    switch (row->kind) {
    case CNX_PARAM_INT64:
        l = (int64_t)v;
        memcpy(at, &l, sizeof(l));
        break;
    case CNX_PARAM_REAL:
        memcpy(at, &v, sizeof(v));
        break;
    default:
        i = (int)v;
        memcpy(at, &i, sizeof(i));
    }
}

int cnx_param_ok(const cnx_param *row, double v)
{
    switch (row->kind) {
    case CNX_PARAM_FLAG:
        return v == 0.0 || v == 1.0;
    case CNX_PARAM_CHOICE:
        return v >= 0.0 && v <= (double)(row->nnames - 1);
    case CNX_PARAM_REAL:
        return (row->open_lo ? v > row->lo : v >= row->lo) && v <= row->hi;
    default:
        return v >= row->lo && v <= row->hi;
    }
}

void cnx_param_defaults(const cnx_param *t, size_t n, void *p)
{
    for (size_t i = 0; i < n; i++) {
        assert(cnx_param_ok(&t[i], t[i].def));
        cnx_param_set(&t[i], p, t[i].def);
    }
}

int cnx_param_check(const cnx_param *t, size_t n, const void *p,
                    const char *module)
{
    for (size_t i = 0; i < n; i++)
        if (!cnx_param_ok(&t[i], cnx_param_get(&t[i], p)))
            return cnx_error_set(CNX_EINVAL, 0, "%s: %s: out of range", module,
                                 t[i].key);
    return 0;
}

const cnx_param *cnx_param_find(const cnx_param *t, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].key, key) == 0)
            return &t[i];
    return NULL;
}
