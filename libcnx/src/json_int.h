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
int cnx__json_only_keys(const json_t *obj, const char *const *allowed,
                        int code, const char *what);

#endif
