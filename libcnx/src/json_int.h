/*
 * json_int.h - jansson helpers shared inside libcnx (not public API: the
 * public headers keep jansson's types out).
 */
#ifndef CNX_JSON_INT_H
#define CNX_JSON_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/**
 * Parse a JSON document (duplicate keys and NUL in strings rejected).
 * @param code  the error code to use for malformed input (CNX_ESCHEMA for
 *              messages, CNX_ECORRUPT for stored documents)
 * @param what  named in the error message
 */
int cnx__json_parse(json_t **out, const char *buf, size_t len, int code,
                    const char *what);

/** Canonical serialisation; NULL on allocation failure. Free with free(). */
char *cnx__json_canonical(const json_t *json);

/** @return 1 if json is an integer (not a real) in [lo, hi]. */
int cnx__json_int_in(const json_t *json, int64_t lo, int64_t hi);

/**
 * Read an array of n integers in [lo, hi] into out.
 * @return 0 or a CNX code (using code) with "<what>: must be ..." message.
 */
int cnx__json_ivec(const json_t *json, size_t n, int64_t lo, int64_t hi,
                   int64_t *out, int code, const char *what);

/**
 * Fail with code if obj has a key outside the NULL-terminated allowed list.
 */
int cnx__json_only_keys(const json_t *obj, const char *const *allowed, int code,
                        const char *what);

/*
 * A stage kernel's parameters: text (a task's "parameters") parsed as a
 * JSON object holding only the allowed keys. *out is NULL when text is
 * NULL (every parameter at its default); the caller frees it with
 * json_decref. Errors are CNX_ESCHEMA, "<what>: ..." (what is e.g.
 * "montage: parameters").
 */
int cnx__json_params(json_t **out, const char *text, const char *const *allowed,
                     const char *what);

/*
 * One parameter of a cnx__json_params object, left as it is when absent
 * (js may be NULL): a boolean or 0/1; an integer in [lo, hi]; a number in
 * [lo, hi], or (lo, hi] when open_lo. CNX_ESCHEMA "<what>.<key>: must be
 * ..." otherwise.
 */
int cnx__json_param_flag(const json_t *js, const char *key, const char *what,
                         int *out);
int cnx__json_param_int(const json_t *js, const char *key, int64_t lo,
                        int64_t hi, const char *what, int64_t *out);
int cnx__json_param_number(const json_t *js, const char *key, double lo,
                           double hi, int open_lo, const char *what,
                           double *out);

/* A "sharding" member (neuroglancer_uint64_sharded_v1) for spec; NULL when
 * out of memory. precomputed.c owns the format. */
struct cnx_sharding;
json_t *cnx__json_sharding(const struct cnx_sharding *spec);

#endif
