/*
 * align_io.c - the alignment stages' documents (cnx/align_io.h,
 * docs/align.md): parameters, match records, transforms and reports.
 * Reals are written with 17 significant digits, so a document read back
 * gives the very doubles that were written (the solve and the render are
 * byte-identical whether or not their input went through a store).
 */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/align_io.h"
#include "cnx/error.h"
#include "json_int.h"
#include "param_io_int.h"

#define WHAT "align: parameters"

int cnx_align_params_parse(const char *json, cnx_align_params *p)
{
    cnx_align_params tmp, q;
    int rc;
    cnx_align_params_default(&tmp);
    rc = cnx__param_json_parse(json, cnx_align_param_bounds, WHAT, &tmp, &q,
                               sizeof(q));
    /* The table's ranges held, so the kernel's check can only refuse the
     * one bound across fields: overlap <= block / 2. */
    if (rc == 0 && cnx_align_params_check(&q) != 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "%s.overlap: must be an integer in [1, block / 2] "
                           "(block %lld)",
                           WHAT, (long long)q.block);
    if (rc == 0)
        *p = q;
    return rc;
}

const char *cnx_align_status_name(int status)
{
    return status == CNX_ALIGN_SECTION_OK       ? "ok"
           : status == CNX_ALIGN_SECTION_FAILED ? "failed"
                                                : "empty";
}

/* ---- writing ------------------------------------------------------------ */

static json_t *reals(const double *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        if (json_array_append_new(a, json_real(v[i])) != 0) {
            json_decref(a);
            return NULL;
        }
    return a;
}

static json_t *grid_json(const cnx_align_grid *g)
{
    return json_pack("{s:[f,f],s:f,s:[I,I]}", "origin", g->x0, g->y0, "step",
                     g->step, "shape", (json_int_t)g->nx, (json_int_t)g->ny);
}

/* Serialise doc (stolen) canonically into out. */
static int finish(json_t *doc, char **out)
{
    *out = doc != NULL ? cnx__json_canonical(doc) : NULL;
    json_decref(doc);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
    return 0;
}

static json_t *match_json(const cnx_align_match *m)
{
    json_t *flags = json_array();
    for (size_t n = 0; flags != NULL && n < m->nodes; n++)
        if (json_array_append_new(flags, json_integer(m->flag[n])) != 0) {
            json_decref(flags);
            flags = NULL;
        }
    return json_pack("{s:I,s:[f,f],s:f,s:I,s:o,s:o,s:o,s:o}", "a",
                     (json_int_t)m->za, "coarse", m->coarse[0], m->coarse[1],
                     "coarse_peak", m->coarse_peak, "valid",
                     (json_int_t)m->valid, "dx", reals(m->dx, m->nodes), "dy",
                     reals(m->dy, m->nodes), "peak", reals(m->peak, m->nodes),
                     "flag", flags);
}

int cnx_align_matches_encode(const cnx_align_slab_matches *s, char **out)
{
    json_t *secs = json_array();
    for (size_t k = 0; secs != NULL && k < s->nsections; k++) {
        json_t *pairs = json_array(), *sec;
        for (size_t m = 0; pairs != NULL && m < s->nmatches; m++)
            if (s->matches[m].zb == s->z[k] &&
                json_array_append_new(pairs, match_json(&s->matches[m])) != 0) {
                json_decref(pairs);
                pairs = NULL;
            }
        sec = json_pack("{s:I,s:{s:I,s:f,s:f},s:o}", "z", (json_int_t)s->z[k],
                        "stats", "count", (json_int_t)s->stats[k].count, "mean",
                        s->stats[k].mean, "sd", s->stats[k].sd, "pairs", pairs);
        if (sec == NULL || json_array_append_new(secs, sec) != 0) {
            json_decref(secs);
            secs = NULL;
        }
    }
    return finish(json_pack("{s:s,s:o,s:o}", "format", CNX_ALIGN_MATCH_FORMAT,
                            "grid", grid_json(&s->grid), "sections", secs),
                  out);
}

int cnx_align_transforms_encode(const cnx_align_solution *s, size_t first,
                                size_t n, char **out)
{
    json_t *secs = json_array();
    for (size_t k = first; secs != NULL && k < first + n; k++) {
        const cnx_align_section *c = &s->sections[k];
        json_t *sec = json_pack(
            "{s:I,s:s,s:o,s:o,s:f,s:f,s:{s:f,s:f},s:f,s:{s:I,s:I},s:I}", "z",
            (json_int_t)c->z, "status", cnx_align_status_name(c->status), "dx",
            reals(c->dx, s->nodes), "dy", reals(c->dy, s->nodes), "gain",
            c->gain, "offset", c->offset, "residual", "median",
            c->residual_median, "max", c->residual_max, "confidence",
            c->confidence, "nodes", "valid", (json_int_t)c->nodes_valid,
            "rejected", (json_int_t)c->nodes_rejected, "pairs_used",
            (json_int_t)c->pairs_used);
        if (sec == NULL || json_array_append_new(secs, sec) != 0) {
            json_decref(secs);
            secs = NULL;
        }
    }
    return finish(json_pack("{s:s,s:o,s:I,s:o}", "format", CNX_ALIGN_FORMAT,
                            "grid", grid_json(&s->grid), "blocks",
                            (json_int_t)s->blocks, "sections", secs),
                  out);
}

/* ---- reading ------------------------------------------------------------ */

typedef struct rd {
    const char *what;
    int rc;
} rd;

static int bad(rd *r, const char *field, const char *why)
{
    if (r->rc == 0)
        r->rc =
            cnx_error_set(CNX_ECORRUPT, 0, "%s: %s: %s", r->what, field, why);
    return r->rc;
}

static double real_at(rd *r, const json_t *v, const char *field)
{
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!isfinite(d) || d < -1e15 || d > 1e15) {
        bad(r, field, "must be a finite number");
        return 0.0;
    }
    return d;
}

static int64_t int_at(rd *r, const json_t *v, const char *field, int64_t lo,
                      int64_t hi)
{
    if (!cnx__json_int_in(v, lo, hi)) {
        bad(r, field, "must be an integer in range");
        return lo;
    }
    return json_integer_value(v);
}

/* n reals of array v into a fresh array (NULL on failure, r->rc set). */
static double *reals_at(rd *r, const json_t *v, size_t n, const char *field)
{
    double *out;
    if (!json_is_array(v) || json_array_size(v) != n) {
        bad(r, field, "must be an array of one number per node");
        return NULL;
    }
    out = malloc((n ? n : 1) * sizeof(*out));
    if (out == NULL) {
        r->rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n && r->rc == 0; i++)
        out[i] = real_at(r, json_array_get(v, i), field);
    return out;
}

static void grid_at(rd *r, const json_t *g, cnx_align_grid *out)
{
    const json_t *o = json_object_get(g, "origin"),
                 *s = json_object_get(g, "shape");
    if (!json_is_object(g) || !json_is_array(o) || json_array_size(o) != 2 ||
        !json_is_array(s) || json_array_size(s) != 2) {
        bad(r, "grid", "must be {origin: [x, y], step, shape: [nx, ny]}");
        return;
    }
    out->x0 = real_at(r, json_array_get(o, 0), "grid.origin");
    out->y0 = real_at(r, json_array_get(o, 1), "grid.origin");
    out->step = real_at(r, json_object_get(g, "step"), "grid.step");
    out->nx = int_at(r, json_array_get(s, 0), "grid.shape", 1, 1 << 20);
    out->ny = int_at(r, json_array_get(s, 1), "grid.shape", 1, 1 << 20);
    if (r->rc == 0 && !(out->step > 0.0))
        bad(r, "grid.step", "must be positive");
    if (r->rc == 0 && out->nx * out->ny > (int64_t)1 << 24)
        bad(r, "grid.shape", "more than 2^24 nodes");
}

static int parse_doc(rd *r, const char *json, size_t len, const char *format,
                     json_t **doc)
{
    const json_t *f;
    int rc = cnx__json_parse(doc, json, len, CNX_ECORRUPT, r->what);
    if (rc != 0)
        return r->rc = rc;
    f = json_object_get(*doc, "format");
    if (!json_is_string(f) || strcmp(json_string_value(f), format) != 0)
        return bad(r, "format", "is not the expected one");
    if (!json_is_array(json_object_get(*doc, "sections")))
        return bad(r, "sections", "must be an array");
    return 0;
}

static void match_at(rd *r, const json_t *v, int64_t zb, size_t nodes,
                     cnx_align_match *m)
{
    const json_t *c = json_object_get(v, "coarse"), *f;
    m->zb = zb;
    m->za = int_at(r, json_object_get(v, "a"), "pairs.a", zb - 2, zb - 1);
    if (!json_is_array(c) || json_array_size(c) != 2) {
        bad(r, "pairs.coarse", "must be [x, y]");
        return;
    }
    m->coarse[0] = real_at(r, json_array_get(c, 0), "pairs.coarse");
    m->coarse[1] = real_at(r, json_array_get(c, 1), "pairs.coarse");
    m->coarse_peak =
        real_at(r, json_object_get(v, "coarse_peak"), "pairs.coarse_peak");
    m->nodes = nodes;
    m->dx = reals_at(r, json_object_get(v, "dx"), nodes, "pairs.dx");
    m->dy = reals_at(r, json_object_get(v, "dy"), nodes, "pairs.dy");
    m->peak = reals_at(r, json_object_get(v, "peak"), nodes, "pairs.peak");
    f = json_object_get(v, "flag");
    m->flag = malloc(nodes ? nodes : 1);
    if (m->flag == NULL) {
        r->rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        return;
    }
    if (!json_is_array(f) || json_array_size(f) != nodes) {
        bad(r, "pairs.flag", "must be an array of one flag per node");
        return;
    }
    m->valid = 0;
    for (size_t n = 0; n < nodes && r->rc == 0; n++) {
        m->flag[n] = (uint8_t)int_at(r, json_array_get(f, n), "pairs.flag",
                                     CNX_ALIGN_NODE_OK, CNX_ALIGN_NODE_OUTLIER);
        m->valid += m->flag[n] == CNX_ALIGN_NODE_OK;
    }
    if (r->rc == 0 &&
        (int64_t)m->valid != int_at(r, json_object_get(v, "valid"),
                                    "pairs.valid", 0, (int64_t)nodes))
        bad(r, "pairs.valid", "does not count the flags 0");
}

int cnx_align_matches_decode(const char *json, size_t len, const char *what,
                             cnx_align_slab_matches *out)
{
    rd r = {what, 0};
    json_t *doc = NULL, *secs;
    size_t nodes, total = 0;

    memset(out, 0, sizeof(*out));
    if (parse_doc(&r, json, len, CNX_ALIGN_MATCH_FORMAT, &doc) != 0)
        goto done;
    grid_at(&r, json_object_get(doc, "grid"), &out->grid);
    if (r.rc != 0)
        goto done;
    nodes = (size_t)(out->grid.nx * out->grid.ny);
    secs = json_object_get(doc, "sections");
    for (size_t k = 0; k < json_array_size(secs); k++) {
        const json_t *p = json_object_get(json_array_get(secs, k), "pairs");
        total += json_is_array(p) ? json_array_size(p) : 0;
    }
    out->nsections = json_array_size(secs);
    out->z = calloc(out->nsections + 1, sizeof(*out->z));
    out->stats = calloc(out->nsections + 1, sizeof(*out->stats));
    out->matches = calloc(total + 1, sizeof(*out->matches));
    if (out->z == NULL || out->stats == NULL || out->matches == NULL) {
        r.rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        goto done;
    }
    for (size_t k = 0; k < out->nsections && r.rc == 0; k++) {
        const json_t *s = json_array_get(secs, k);
        const json_t *st = json_object_get(s, "stats");
        const json_t *pairs = json_object_get(s, "pairs");
        out->z[k] = int_at(&r, json_object_get(s, "z"), "sections.z",
                           -((int64_t)1 << 40), (int64_t)1 << 40);
        if (k > 0 && r.rc == 0 && out->z[k] <= out->z[k - 1])
            bad(&r, "sections.z", "must increase");
        if (!json_is_object(st) || !json_is_array(pairs)) {
            bad(&r, "sections", "must hold stats and pairs");
            break;
        }
        out->stats[k].count = int_at(&r, json_object_get(st, "count"),
                                     "stats.count", 0, INT64_MAX);
        out->stats[k].mean =
            real_at(&r, json_object_get(st, "mean"), "stats.mean");
        out->stats[k].sd = real_at(&r, json_object_get(st, "sd"), "stats.sd");
        for (size_t m = 0; m < json_array_size(pairs) && r.rc == 0; m++)
            match_at(&r, json_array_get(pairs, m), out->z[k], nodes,
                     &out->matches[out->nmatches++]);
    }
done:
    json_decref(doc);
    if (r.rc != 0)
        cnx_align_slab_matches_free(out);
    return r.rc;
}

void cnx_align_slab_matches_free(cnx_align_slab_matches *s)
{
    if (s == NULL)
        return;
    for (size_t m = 0; s->matches != NULL && m < s->nmatches; m++)
        cnx_align_match_free(&s->matches[m]);
    free(s->matches);
    free(s->z);
    free(s->stats);
    memset(s, 0, sizeof(*s));
}

static int status_at(rd *r, const json_t *v)
{
    const char *s = json_is_string(v) ? json_string_value(v) : "";
    for (int k = CNX_ALIGN_SECTION_OK; k <= CNX_ALIGN_SECTION_EMPTY; k++)
        if (strcmp(s, cnx_align_status_name(k)) == 0)
            return k;
    bad(r, "sections.status", "must be \"ok\", \"failed\" or \"empty\"");
    return CNX_ALIGN_SECTION_FAILED;
}

int cnx_align_transforms_decode(const char *json, size_t len, const char *what,
                                cnx_align_solution *sol)
{
    rd r = {what, 0};
    json_t *doc = NULL, *secs;

    memset(sol, 0, sizeof(*sol));
    if (parse_doc(&r, json, len, CNX_ALIGN_FORMAT, &doc) != 0)
        goto done;
    grid_at(&r, json_object_get(doc, "grid"), &sol->grid);
    sol->blocks =
        int_at(&r, json_object_get(doc, "blocks"), "blocks", 0, INT64_MAX);
    if (r.rc != 0)
        goto done;
    sol->nodes = (size_t)(sol->grid.nx * sol->grid.ny);
    secs = json_object_get(doc, "sections");
    sol->nz = (int64_t)json_array_size(secs);
    sol->sections = calloc((size_t)sol->nz + 1, sizeof(*sol->sections));
    if (sol->sections == NULL) {
        r.rc = cnx_error_set(CNX_ENOMEM, 0, "align: out of memory");
        goto done;
    }
    for (int64_t k = 0; k < sol->nz && r.rc == 0; k++) {
        const json_t *s = json_array_get(secs, (size_t)k);
        const json_t *res = json_object_get(s, "residual");
        const json_t *nd = json_object_get(s, "nodes");
        cnx_align_section *c = &sol->sections[k];
        c->z = int_at(&r, json_object_get(s, "z"), "sections.z",
                      -((int64_t)1 << 40), (int64_t)1 << 40);
        if (k == 0)
            sol->z0 = c->z;
        else if (r.rc == 0 && c->z != sol->z0 + k)
            bad(&r, "sections.z", "must be consecutive");
        c->status = status_at(&r, json_object_get(s, "status"));
        c->dx =
            reals_at(&r, json_object_get(s, "dx"), sol->nodes, "sections.dx");
        c->dy =
            reals_at(&r, json_object_get(s, "dy"), sol->nodes, "sections.dy");
        c->gain = real_at(&r, json_object_get(s, "gain"), "sections.gain");
        c->offset =
            real_at(&r, json_object_get(s, "offset"), "sections.offset");
        c->residual_median = real_at(&r, json_object_get(res, "median"),
                                     "sections.residual.median");
        c->residual_max =
            real_at(&r, json_object_get(res, "max"), "sections.residual.max");
        c->confidence = real_at(&r, json_object_get(s, "confidence"),
                                "sections.confidence");
        c->nodes_valid = (size_t)int_at(&r, json_object_get(nd, "valid"),
                                        "sections.nodes.valid", 0, INT64_MAX);
        c->nodes_rejected =
            (size_t)int_at(&r, json_object_get(nd, "rejected"),
                           "sections.nodes.rejected", 0, INT64_MAX);
        c->pairs_used = (size_t)int_at(&r, json_object_get(s, "pairs_used"),
                                       "sections.pairs_used", 0, 4);
    }
done:
    json_decref(doc);
    if (r.rc != 0)
        cnx_align_solution_free(sol);
    return r.rc;
}
