/*
 * montage_io.c - the montage stage's documents (cnx/montage_io.h): the
 * parameters object, parsed over the defaults through the kernel's bounds
 * table, and the canonical per-section report (cnx.montage/1). Reals are
 * written with 17 significant digits, so the report's bytes are a
 * function of the solve only.
 */
#include "cnx/montage_io.h"

#include <stdlib.h>

#include "cnx/error.h"
#include "json_int.h"
#include "param_io_int.h"

int cnx_montage_params_parse(const char *json, cnx_montage_params *p)
{
    cnx_montage_params tmp;
    cnx_montage_params_default(&tmp);
    return cnx__param_json_parse(json, cnx_montage_param_bounds,
                                 "montage: parameters", &tmp, p, sizeof(tmp));
}

/* ---- report -------------------------------------------------------------- */

static int set_new(json_t *obj, const char *key, json_t *v)
{
    return v == NULL || json_object_set_new(obj, key, v) != 0 ? -1 : 0;
}

int cnx_montage_report_json(const cnx_montage_tile *tiles,
                            const cnx_montage_result *r, int64_t z, char **out)
{
    json_t *doc = json_object(), *jt = json_array(), *jp = json_array();
    json_t *sum = json_object();
    size_t used = 0;
    int bad = doc == NULL || jt == NULL || jp == NULL || sum == NULL;

    if (out != NULL)
        *out = NULL;
    /* A section without tiles (r zeroed, no solve) reports no tiles, no
     * pairs and no fixed tile. */
    if (r == NULL || out == NULL ||
        (r->ntiles > 0 &&
         (tiles == NULL || r->x == NULL || r->fixed >= r->ntiles))) {
        json_decref(doc);
        json_decref(jt);
        json_decref(jp);
        json_decref(sum);
        return cnx_error_set(CNX_EINVAL, 0, "montage: report: no result");
    }
    for (size_t t = 0; t < r->ntiles && !bad; t++) {
        json_t *o = json_object(), *nom = json_array();
        bad = o == NULL || nom == NULL;
        if (!bad)
            bad = json_array_append_new(nom, json_integer(tiles[t].x)) ||
                  json_array_append_new(nom, json_integer(tiles[t].y));
        bad = bad || set_new(o, "id", json_string(tiles[t].id)) ||
              set_new(o, "nominal", nom) ||
              set_new(o, "x", json_real(r->x[t])) ||
              set_new(o, "y", json_real(r->y[t])) ||
              set_new(o, "gain", json_real(r->gain[t])) ||
              set_new(o, "offset", json_real(r->offset[t])) ||
              set_new(o, "placed", json_boolean(r->placed[t]));
        if (nom != NULL && bad && json_object_get(o, "nominal") != nom)
            json_decref(nom);
        if (bad || json_array_append_new(jt, o) != 0) {
            bad = 1;
            json_decref(o);
        }
    }
    for (size_t k = 0; k < r->npairs && !bad; k++) {
        const cnx_montage_pair *q = &r->pairs[k];
        json_t *o = json_object();
        if (q->a >= r->ntiles || q->b >= r->ntiles) {
            json_decref(o);
            bad = 2;
            break;
        }
        used += q->used != 0;
        bad = o == NULL || set_new(o, "a", json_string(tiles[q->a].id)) ||
              set_new(o, "b", json_string(tiles[q->b].id)) ||
              set_new(o, "dx", json_real(q->dx)) ||
              set_new(o, "dy", json_real(q->dy)) ||
              set_new(o, "peak_ratio", json_real(q->peak_ratio)) ||
              set_new(o, "residual", json_real(q->residual)) ||
              set_new(o, "used", json_boolean(q->used));
        if (bad || json_array_append_new(jp, o) != 0) {
            bad = 1;
            json_decref(o);
        }
    }
    if (!bad)
        bad = set_new(sum, "tiles", json_integer((json_int_t)r->ntiles)) ||
              set_new(sum, "pairs", json_integer((json_int_t)r->npairs)) ||
              set_new(sum, "used", json_integer((json_int_t)used)) ||
              set_new(sum, "rejected", json_integer((json_int_t)r->rejected)) ||
              set_new(sum, "median_residual", json_real(r->median_residual)) ||
              set_new(sum, "max_residual", json_real(r->max_residual)) ||
              set_new(sum, "fixed",
                      r->ntiles > 0 ? json_string(tiles[r->fixed].id)
                                    : json_null());
    if (!bad) {
        bad = set_new(doc, "format", json_string(CNX_MONTAGE_FORMAT)) ||
              set_new(doc, "z", json_integer(z));
        bad |= set_new(doc, "tiles", jt) != 0;
        jt = NULL;
        bad |= set_new(doc, "pairs", jp) != 0;
        jp = NULL;
        bad |= set_new(doc, "summary", sum) != 0;
        sum = NULL;
    }
    if (!bad) {
        *out = cnx__json_canonical(doc);
        bad = *out == NULL;
    }
    json_decref(doc);
    json_decref(jt);
    json_decref(jp);
    json_decref(sum);
    if (bad == 2)
        return cnx_error_set(CNX_EINVAL, 0, "montage: report: bad pair");
    if (bad)
        return cnx_error_set(CNX_ENOMEM, 0,
                             "montage: report: out of memory or non-finite "
                             "value");
    return 0;
}
