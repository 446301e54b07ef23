/*
 * cnx/json.h - canonical JSON.
 *
 * The canonical form cnx hashes and signs: UTF-8, object keys sorted by
 * byte value, no insignificant whitespace, integers as integers, reals with
 * 17 significant digits, strings escaped minimally (only '"', '\\' and
 * control characters). Parsing rejects duplicate keys, NaN/Infinity and
 * embedded NUL in strings, so one document has exactly one canonical form.
 */
#ifndef CNX_JSON_H
#define CNX_JSON_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest JSON document cnx parses, bytes (a network-fed buffer limit). */
#define CNX_JSON_MAX (16u << 20)

/**
 * Re-serialise a JSON document in canonical form.
 * @param what  what the document is, for the error message ("task")
 * @param[out] out  caller frees with free()
 * @return 0; CNX_ESCHEMA for malformed JSON (message gives line and
 *         column); CNX_ETOOBIG over CNX_JSON_MAX; CNX_ENOMEM.
 */
int cnx_json_canonicalize(const char *in, size_t len, const char *what,
                          char **out);

#ifdef __cplusplus
}
#endif
#endif
