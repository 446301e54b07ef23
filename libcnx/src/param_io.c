/*
 * param_io.c - a JSON parameters object read through a kernel's bounds
 * table (param_io_int.h): the allowed keys, the types and the ranges all
 * come from the table's rows, so the parser and the kernel's check agree
 * by construction. The messages are those of json.c's parameter helpers.
 */
#include "param_io_int.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cnx/error.h"
#include "json_int.h"

/* More than any kernel's table plus its refused keys. */
#define MAX_KEYS 64

int cnx__param_json_open(json_t **js, const char *text, const cnx_param *t,
                         size_t n, const char *const *extra, const char *what)
{
    const char *keys[MAX_KEYS + 1];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MAX_KEYS; i++)
        keys[k++] = t[i].key;
    for (size_t i = 0; extra != NULL && extra[i] != NULL && k < MAX_KEYS; i++)
        keys[k++] = extra[i];
    assert(k < MAX_KEYS);
    keys[k] = NULL;
    return cnx__json_params(js, text, keys, what);
}

/* A CHOICE row: the index of its string value in names (or kept). */
static int get_choice(const json_t *js, const cnx_param *row, const char *what,
                      void *p)
{
    const json_t *v = js != NULL ? json_object_get(js, row->key) : NULL;
    char list[128] = "";
    const char *s;
    const int n = row->nnames;
    if (v == NULL)
        return 0;
    s = json_is_string(v) ? json_string_value(v) : "";
    for (int i = 0; i < n; i++)
        if (strcmp(s, row->names[i]) == 0) {
            cnx_param_set(row, p, (double)i);
            return 0;
        }
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s\"%s\"",
                 i == 0       ? ""
                 : i == n - 1 ? " or "
                              : ", ",
                 row->names[i]);
    }
    return cnx_error_set(CNX_ESCHEMA, 0, "%s.%s: must be %s", what, row->key,
                         list);
}

static int get_row(const json_t *js, const cnx_param *row, const char *what,
                   void *p)
{
    int flag, rc;
    int64_t l;
    double d;
    switch (row->kind) {
    case CNX_PARAM_FLAG:
        flag = (int)cnx_param_get(row, p);
        rc = cnx__json_param_flag(js, row->key, what, &flag);
        if (rc == 0)
            cnx_param_set(row, p, (double)flag);
        return rc;
    case CNX_PARAM_CHOICE:
        return get_choice(js, row, what, p);
    case CNX_PARAM_REAL:
        d = cnx_param_get(row, p);
        rc = cnx__json_param_number(js, row->key, row->lo, row->hi,
                                    row->open_lo, what, &d);
        if (rc == 0)
            cnx_param_set(row, p, d);
        return rc;
    default: /* INT, INT64: ranges within +-2^53, exact as doubles */
        l = (int64_t)cnx_param_get(row, p);
        rc = cnx__json_param_int(js, row->key, (int64_t)row->lo,
                                 (int64_t)row->hi, what, &l);
        if (rc == 0)
            cnx_param_set(row, p, (double)l);
        return rc;
    }
}

int cnx__param_json_rows(const json_t *js, const cnx_param *t, size_t n,
                         const char *what, void *p)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = get_row(js, &t[i], what, p);
    return rc;
}

int cnx__param_json_parse(const char *text,
                          const cnx_param *(*bounds)(size_t *n),
                          const char *what, void *tmp, void *out, size_t size)
{
    json_t *js = NULL;
    size_t n;
    const cnx_param *t = bounds(&n);
    int rc;
    assert(out != NULL);
    rc = cnx__param_json_open(&js, text, t, n, NULL, what);
    if (rc == 0)
        rc = cnx__param_json_rows(js, t, n, what, tmp);
    if (rc == 0)
        memcpy(out, tmp, size);
    json_decref(js);
    return rc;
}
