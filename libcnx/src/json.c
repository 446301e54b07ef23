/*
 * json.c - canonical JSON on top of jansson.
 *
 * jansson parses (with JSON_REJECT_DUPLICATES and without
 * JSON_ALLOW_NUL, so a document has one meaning) and serialises with
 * JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17): sorted keys, no
 * whitespace, round-trippable reals. That serialisation is our canonical
 * form; it is what task keys and manifests hash.
 */
#include "cnx/json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "json_int.h"

int cnx__json_parse(json_t **out, const char *buf, size_t len, int code,
                    const char *what)
{
    json_error_t jerr;
    json_t *json;

    *out = NULL;
    if (len > CNX_JSON_MAX)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "%s: %zu bytes, over the %u "
                             "byte limit",
                             what, len, CNX_JSON_MAX);
    json = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
    if (json == NULL)
        return cnx_error_set(code, 0,
                             "%s: malformed JSON at line %d column "
                             "%d: %s",
                             what, jerr.line, jerr.column, jerr.text);
    *out = json;
    return 0;
}

char *cnx__json_canonical(const json_t *json)
{
    return json_dumps(json, JSON_SORT_KEYS | JSON_COMPACT |
                                JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
}

int cnx_json_canonicalize(const char *in, size_t len, const char *what,
                          char **out)
{
    json_t *json;
    int rc = cnx__json_parse(&json, in, len, CNX_ESCHEMA, what);
    *out = NULL;
    if (rc != 0)
        return rc;
    *out = cnx__json_canonical(json);
    json_decref(json);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", what);
    return 0;
}

int cnx__json_int_in(const json_t *json, int64_t lo, int64_t hi)
{
    json_int_t v;
    if (!json_is_integer(json))
        return 0;
    v = json_integer_value(json);
    return v >= lo && v <= hi;
}

int cnx__json_ivec(const json_t *json, size_t n, int64_t lo, int64_t hi,
                   int64_t *out, int code, const char *what)
{
    if (!json_is_array(json) || json_array_size(json) != n)
        return cnx_error_set(code, 0, "%s: must be an array of %zu integers",
                             what, n);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(json, i);
        if (!cnx__json_int_in(v, lo, hi))
            return cnx_error_set(code, 0,
                                 "%s[%zu]: must be an integer in [%lld, "
                                 "%lld]",
                                 what, i, (long long)lo, (long long)hi);
        out[i] = json_integer_value(v);
    }
    return 0;
}

int cnx__json_only_keys(const json_t *obj, const char *const *allowed, int code,
                        const char *what)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)obj, key, value)
    {
        int known = 0;
        (void)value;
        for (const char *const *a = allowed; *a != NULL; a++) {
            if (strcmp(*a, key) == 0) {
                known = 1;
                break;
            }
        }
        if (!known)
            return cnx_error_set(code, 0, "%s: unknown key '%.64s'", what, key);
    }
    return 0;
}

int cnx__json_params(json_t **out, const char *text, const char *const *allowed,
                     const char *what)
{
    json_t *js = NULL;
    int rc;
    *out = NULL;
    if (text == NULL)
        return 0;
    rc = cnx__json_parse(&js, text, strlen(text), CNX_ESCHEMA, what);
    if (rc != 0)
        return rc;
    if (!json_is_object(js))
        rc = cnx_error_set(CNX_ESCHEMA, 0, "%s: must be an object", what);
    if (rc == 0)
        rc = cnx__json_only_keys(js, allowed, CNX_ESCHEMA, what);
    if (rc != 0) {
        json_decref(js);
        return rc;
    }
    *out = js;
    return 0;
}

int cnx__json_param_flag(const json_t *js, const char *key, const char *what,
                         int *out)
{
    const json_t *v = js ? json_object_get(js, key) : NULL;
    if (v == NULL)
        return 0;
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (!cnx__json_int_in(v, 0, 1))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.%s: must be a boolean (or 0 or 1)", what, key);
    *out = (int)json_integer_value(v);
    return 0;
}

int cnx__json_param_int(const json_t *js, const char *key, int64_t lo,
                        int64_t hi, const char *what, int64_t *out)
{
    const json_t *v = js ? json_object_get(js, key) : NULL;
    if (v == NULL)
        return 0;
    if (!cnx__json_int_in(v, lo, hi))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.%s: must be an integer in [%lld, %lld]", what,
                             key, (long long)lo, (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

int cnx__json_param_number(const json_t *js, const char *key, double lo,
                           double hi, int open_lo, const char *what,
                           double *out)
{
    const json_t *v = js ? json_object_get(js, key) : NULL;
    double d;
    if (v == NULL)
        return 0;
    d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!((open_lo ? d > lo : d >= lo) && d <= hi))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.%s: must be a number in %s%g, %g]", what, key,
                             open_lo ? "(" : "[", lo, hi);
    *out = d;
    return 0;
}
