/*
 * synapse_io.c - the synapse stages' documents (cnx/synapse_io.h): the
 * parameters object, parsed over the defaults through the kernel's bounds
 * table; the synapse table and connectivity edges as JSON lines, and the
 * strict table reader.
 *
 * One canonical JSON object per line (jansson, sorted keys, compact, reals
 * with 17 significant digits; whole numbers as integers), "\n" after each,
 * so a table's bytes are a function of its synapses only and tables
 * concatenate. The reader refuses anything the writer would not produce:
 * unknown or missing keys, wrong types, out-of-range values, an id that is
 * not its site's, a missing final newline, empty lines. Tables are small
 * (one line per synapse, ~250 bytes); everything is in memory.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/synapse_io.h"
#include "json_int.h"
#include "param_io_int.h"

int cnx_synapse_params_parse(const char *json, cnx_synapse_params *p)
{
    cnx_synapse_params tmp;
    cnx_synapse_params_default(&tmp);
    return cnx__param_json_parse(json, cnx_synapse_param_bounds,
                                 "synapses: parameters", &tmp, p, sizeof(tmp));
}

/* ---- the table ---------------------------------------------------------- */

/* A growable text buffer. */
typedef struct text {
    char *buf;
    size_t len, cap;
} text;

static int text_add(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap != 0 ? t->cap : 4096;
        char *g;
        while (cap < t->len + n + 1) {
            if (cap > SIZE_MAX / 2)
                return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
            cap *= 2;
        }
        g = realloc(t->buf, cap);
        if (g == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
        t->buf = g;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
    return 0;
}

/* A number: an integer when it is whole (and exactly representable). */
static json_t *number(double v)
{
    if (v > -9007199254740992.0 && v < 9007199254740992.0 &&
        v == (double)(int64_t)v)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *ivec(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

static int too_big(uint64_t v)
{
    return v > (uint64_t)INT64_MAX;
}

static int one_line(const cnx_synapse *s, const double res[3], text *t)
{
    json_t *o = NULL;
    char *line = NULL;
    int rc = 0;
    if (too_big(s->id) || too_big(s->pre_id) || too_big(s->post_id))
        return cnx_error_set(CNX_ERANGE, 0,
                             "synapses: id over 2^63 - 1 in the table");
    if (!(s->score >= 0.0 && s->score <= 1.0))
        return cnx_error_set(CNX_ERANGE, 0,
                             "synapses: score outside [0, 1] in the table");
    o = json_pack(
        "{sI sI so sI so so so s[ooo] sI}", "id", (json_int_t)s->id, "post_id",
        (json_int_t)s->post_id, "post_site", ivec(s->post_site), "pre_id",
        (json_int_t)s->pre_id, "pre_site", ivec(s->pre_site), "score",
        number(s->score), "site", ivec(s->site), "site_nm",
        number((double)s->site[0] * res[0]),
        number((double)s->site[1] * res[1]),
        number((double)s->site[2] * res[2]), "size", (json_int_t)s->size);
    line = o != NULL ? cnx__json_canonical(o) : NULL;
    if (line == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
    if (rc == 0)
        rc = text_add(t, line, strlen(line));
    if (rc == 0)
        rc = text_add(t, "\n", 1);
    free(line);
    json_decref(o);
    return rc;
}

int cnx_synapse_table_json(const cnx_synapse *s, size_t n,
                           const double resolution[3], char **out, size_t *len)
{
    text t = {NULL, 0, 0};
    int rc;
    if ((s == NULL && n > 0) || resolution == NULL || out == NULL ||
        len == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: NULL argument");
    for (int i = 0; i < 3; i++)
        if (!(resolution[i] > 0.0 && resolution[i] < 1e300))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "synapses: resolution must be positive");
    rc = text_add(&t, "", 0);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = one_line(&s[i], resolution, &t);
    if (rc != 0) {
        free(t.buf);
        return rc;
    }
    *out = t.buf;
    *len = t.len;
    return 0;
}

/* ---- reading ------------------------------------------------------------ */

static const char *const table_keys[] = {
    "id",    "post_id", "post_site", "pre_id", "pre_site",
    "score", "site",    "site_nm",   "size",   NULL};

/* A non-negative integer member. */
static int get_u(const json_t *o, const char *key, int64_t lo,
                 const char *where, int64_t *v)
{
    const json_t *j = json_object_get(o, key);
    if (!cnx__json_int_in(j, lo, INT64_MAX))
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "%s: %s: must be an integer >= %lld", where, key,
                             (long long)lo);
    *v = json_integer_value(j);
    return 0;
}

static int parse_line(const char *line, size_t n, const char *where,
                      cnx_synapse *s)
{
    json_t *o = NULL, *j;
    char sub[320];
    int64_t v[3];
    int rc = cnx__json_parse(&o, line, n, CNX_ECORRUPT, where);
    if (rc != 0)
        return rc;
    memset(s, 0, sizeof(*s));
    if (!json_is_object(o)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0, "%s: must be a JSON object", where);
        goto done;
    }
    rc = cnx__json_only_keys(o, table_keys, CNX_ECORRUPT, where);
    for (const char *const *k = table_keys; rc == 0 && *k != NULL; k++)
        if (json_object_get(o, *k) == NULL)
            rc = cnx_error_set(CNX_ECORRUPT, 0, "%s: missing key '%s'", where,
                               *k);
    if (rc == 0)
        rc = get_u(o, "id", 1, where, &v[0]);
    if (rc == 0) {
        s->id = (uint64_t)v[0];
        rc = get_u(o, "pre_id", 0, where, &v[0]);
    }
    if (rc == 0) {
        s->pre_id = (uint64_t)v[0];
        rc = get_u(o, "post_id", 0, where, &v[0]);
    }
    if (rc == 0) {
        s->post_id = (uint64_t)v[0];
        rc = get_u(o, "size", 1, where, &s->size);
    }
    if (rc == 0) {
        snprintf(sub, sizeof(sub), "%s: site", where);
        rc = cnx__json_ivec(json_object_get(o, "site"), 3, 0,
                            CNX_SYNAPSE_COORD_MAX - 1, s->site, CNX_ECORRUPT,
                            sub);
    }
    if (rc == 0) {
        snprintf(sub, sizeof(sub), "%s: pre_site", where);
        rc = cnx__json_ivec(json_object_get(o, "pre_site"), 3,
                            -CNX_SYNAPSE_COORD_LIMIT, CNX_SYNAPSE_COORD_LIMIT,
                            s->pre_site, CNX_ECORRUPT, sub);
    }
    if (rc == 0) {
        snprintf(sub, sizeof(sub), "%s: post_site", where);
        rc = cnx__json_ivec(json_object_get(o, "post_site"), 3,
                            -CNX_SYNAPSE_COORD_LIMIT, CNX_SYNAPSE_COORD_LIMIT,
                            s->post_site, CNX_ECORRUPT, sub);
    }
    if (rc != 0)
        goto done;
    j = json_object_get(o, "score");
    if (!json_is_number(j) ||
        !(json_number_value(j) >= 0.0 && json_number_value(j) <= 1.0)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "%s: score: must be a number in [0, 1]", where);
        goto done;
    }
    s->score = json_number_value(j);
    j = json_object_get(o, "site_nm");
    if (!json_is_array(j) || json_array_size(j) != 3 ||
        !json_is_number(json_array_get(j, 0)) ||
        !json_is_number(json_array_get(j, 1)) ||
        !json_is_number(json_array_get(j, 2))) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "%s: site_nm: must be an array of 3 numbers", where);
        goto done;
    }
    if (s->id != cnx_synapse_id(s->site[0], s->site[1], s->site[2]))
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "%s: id %llu is not the id of site [%lld,%lld,%lld]",
                           where, (unsigned long long)s->id,
                           (long long)s->site[0], (long long)s->site[1],
                           (long long)s->site[2]);
done:
    json_decref(o);
    return rc;
}

int cnx_synapse_table_parse(const char *text, size_t len, const char *what,
                            cnx_synapse **out, size_t *n)
{
    cnx_synapse *res = NULL;
    size_t nres = 0, cap = 0, pos = 0, lineno = 0;
    int rc = 0;
    if ((text == NULL && len > 0) || what == NULL || out == NULL || n == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: NULL argument");
    while (pos < len && rc == 0) {
        const char *nl = memchr(text + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - text) : len;
        char where[300];
        lineno++;
        snprintf(where, sizeof(where), "%.200s: line %zu", what, lineno);
        if (nl == NULL) {
            rc = cnx_error_set(CNX_ECORRUPT, 0,
                               "%s: no newline at the end of the table", where);
            break;
        }
        if (end == pos) {
            rc = cnx_error_set(CNX_ECORRUPT, 0, "%s: empty line", where);
            break;
        }
        if (nres == cap) {
            size_t cap2 = cap != 0 ? 2 * cap : 64;
            cnx_synapse *g = realloc(res, cap2 * sizeof(*g));
            if (g == NULL) {
                rc = cnx_error_set(CNX_ENOMEM, 0, "synapses: out of memory");
                break;
            }
            res = g;
            cap = cap2;
        }
        rc = parse_line(text + pos, end - pos, where, &res[nres]);
        nres += rc == 0;
        pos = end + 1;
    }
    if (rc != 0) {
        free(res);
        return rc;
    }
    if (nres == 0) {
        free(res);
        res = NULL;
    }
    *out = res;
    *n = nres;
    return 0;
}

int cnx_synapse_edges_json(const cnx_synapse_edge *e, size_t n, char **out,
                           size_t *len)
{
    text t = {NULL, 0, 0};
    int rc;
    if ((e == NULL && n > 0) || out == NULL || len == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "synapses: NULL argument");
    rc = text_add(&t, "", 0);
    for (size_t i = 0; i < n && rc == 0; i++) {
        char line[128];
        int k;
        if (too_big(e[i].pre_id) || too_big(e[i].post_id)) {
            rc = cnx_error_set(CNX_ERANGE, 0,
                               "synapses: id over 2^63 - 1 in the edges");
            break;
        }
        k = snprintf(line, sizeof(line),
                     "{\"count\":%lld,\"post_id\":%llu,\"pre_id\":%llu}\n",
                     (long long)e[i].count, (unsigned long long)e[i].post_id,
                     (unsigned long long)e[i].pre_id);
        rc = text_add(&t, line, (size_t)k);
    }
    if (rc != 0) {
        free(t.buf);
        return rc;
    }
    *out = t.buf;
    *len = t.len;
    return 0;
}

int cnx_synapse_edges_params_parse(const char *text, cnx_annotation_layout *out)
{
    static const char *const keys[] = {"annotation_sharding", NULL};
    static const char what[] = "synapse-edges: parameters";
    static const char *const names[3] = {"auto", "off", "on"};
    static const cnx_annotation_layout layouts[3] = {
        CNX_ANNOTATION_AUTO, CNX_ANNOTATION_UNSHARDED, CNX_ANNOTATION_SHARDED};
    json_t *js = NULL, *v;
    int rc = cnx__json_params(&js, text, keys, what);
    *out = CNX_ANNOTATION_AUTO;
    v = rc == 0 && js != NULL ? json_object_get(js, "annotation_sharding")
                              : NULL;
    if (v != NULL) {
        int k = 0;
        while (k < 3 && !(json_is_string(v) &&
                          strcmp(json_string_value(v), names[k]) == 0))
            k++;
        if (k == 3)
            rc = cnx_error_set(CNX_ESCHEMA, 0,
                               "%s.annotation_sharding: must be \"auto\", "
                               "\"on\" or \"off\"",
                               what);
        else
            *out = layouts[k];
    }
    json_decref(js);
    return rc;
}
