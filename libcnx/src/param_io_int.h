/*
 * param_io_int.h - a kernel's JSON parameters object read through its
 * bounds table (cnx/param.h); shared by the kernels' I/O modules
 * (montage_io.c, segment_io.c, synapse_io.c). Not public API.
 */
#ifndef CNX_PARAM_IO_INT_H
#define CNX_PARAM_IO_INT_H

#include <jansson.h>
#include <stddef.h>

#include "cnx/param.h"

/*
 * Parse text (NULL: "{}") as an object whose keys are the table's plus
 * the NULL-terminated extra (NULL: none), as cnx__json_params does. *js
 * is NULL when text is NULL; the caller frees it with json_decref.
 */
int cnx__param_json_open(json_t **js, const char *text, const cnx_param *t,
                         size_t n, const char *const *extra, const char *what);

/*
 * Every row of the table present in js (may be NULL) over p, in table
 * order; the first bad key is named: CNX_ESCHEMA "<what>.<key>: must be
 * ..." (the messages of cnx__json_param_int, _number and _flag; a CHOICE
 * "must be \"a\", \"b\" or \"c\"").
 */
int cnx__param_json_rows(const json_t *js, const cnx_param *t, size_t n,
                         const char *what, void *p);

/*
 * Both, with the table bounds() returns, over tmp (a parameters struct of
 * size bytes holding the defaults); on success tmp is copied to out,
 * which is left alone on failure.
 */
int cnx__param_json_parse(const char *text,
                          const cnx_param *(*bounds)(size_t *n),
                          const char *what, void *tmp, void *out, size_t size);

#endif
