/*
 * cnx/synapse_io.h - the synapse stages' documents (docs/synapses.md): the
 * parameters object (read through the kernel's bounds table), the synapse
 * table and the connectivity edges as JSON lines, and the strict table
 * reader. This module owns these formats; the kernel (cnx/synapse.h)
 * never sees JSON.
 */
#ifndef CNX_SYNAPSE_IO_H
#define CNX_SYNAPSE_IO_H

#include <stddef.h>

#include "cnx/annotation.h"
#include "cnx/synapse.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Parse a JSON object of parameters over the defaults. Keys (all optional,
 * integers): "cleft_threshold", "psd_threshold", "min_size",
 * "partner_radius", with the ranges of cnx_synapse_params. NULL means
 * "{}".
 *
 * @param json    the parameters object, NUL-terminated, or NULL
 * @param[out] p  filled on success only
 * @return 0; CNX_ESCHEMA for malformed JSON, a non-object, an unknown key,
 *         a wrong type or a value out of range, with a one-line message
 *         naming the key ("synapses: parameters.min_size: must be an
 *         integer in [0, 2147483648]"); CNX_ETOOBIG for a document over the
 *         JSON size limit. Fatal.
 */
int cnx_synapse_params_parse(const char *json, cnx_synapse_params *p);

/**
 * The synapse-edges stage's parameters: {} (or NULL) or
 * {"annotation_sharding": "auto" | "on" | "off"}: the layout of the
 * annotation collection's indexes (cnx/annotation.h).
 * @param[out] out  CNX_ANNOTATION_AUTO when absent
 * @return 0; CNX_ESCHEMA ("synapse-edges: parameters...: ...") for
 *         anything else. Fatal.
 */
int cnx_synapse_edges_params_parse(const char *json,
                                   cnx_annotation_layout *out);

/**
 * The synapse table: JSON lines, one canonical JSON object per line
 * (sorted keys, compact, "\n" after each), in the given order:
 * {"id","post_id","post_site","pre_id","pre_site","score","site",
 * "site_nm","size"}; site_nm = site * resolution, whole numbers written as
 * integers, others as reals with 17 significant digits.
 *
 * @param[out] out  NUL-terminated text, caller frees with free(); "" for
 *                  n == 0
 * @param[out] len  its length
 * @return 0; CNX_EINVAL for NULL pointers (s may be NULL when n is 0) or
 *         a non-positive resolution; CNX_ERANGE for an id, pre_id or
 *         post_id over 2^63 - 1 (JSON integers are signed 64-bit) or a
 *         score outside [0, 1]; CNX_ENOMEM.
 */
int cnx_synapse_table_json(const cnx_synapse *s, size_t n,
                           const double resolution[3], char **out, size_t *len);

/**
 * Parse a table back. Strict: every line must be one JSON object with
 * exactly the keys above (site_nm is read and checked to be 3 numbers but
 * not stored), integers in range, score in [0, 1]; empty lines are
 * refused except after the final "\n"; text must end with "\n" unless
 * empty.
 *
 * @param what     named in messages ("<what>: line N: ...")
 * @param[out] out caller frees with free() (NULL when empty)
 * @return 0; CNX_ECORRUPT for a malformed line; CNX_EINVAL for NULL
 *         pointers; CNX_ENOMEM.
 */
int cnx_synapse_table_parse(const char *text, size_t len, const char *what,
                            cnx_synapse **out, size_t *n);

/**
 * Edges as JSON lines {"count","post_id","pre_id"}, canonical, in the
 * given order.
 * @return 0; CNX_EINVAL; CNX_ERANGE for ids over 2^63 - 1; CNX_ENOMEM.
 */
int cnx_synapse_edges_json(const cnx_synapse_edge *e, size_t n, char **out,
                           size_t *len);

#ifdef __cplusplus
}
#endif
#endif
