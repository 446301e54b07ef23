/*
 * cnx/montage_io.h - the montage stage's documents: the parameters object
 * (read through the kernel's bounds table) and the per-section report
 * (cnx.montage/1, docs/montage.md). This module owns both; the kernel
 * (cnx/montage.h) never sees JSON.
 */
#ifndef CNX_MONTAGE_IO_H
#define CNX_MONTAGE_IO_H

#include <stdint.h>

#include "cnx/montage.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The report's "format". */
#define CNX_MONTAGE_FORMAT "cnx.montage/1"

/**
 * Parse a JSON object of parameters over the defaults. Keys (all
 * optional): "search" (integer), "min_peak_ratio", "max_residual"
 * (numbers), "normalize" (boolean or 0/1), with the ranges of
 * cnx_montage_params. NULL means "{}".
 *
 * @param json   the parameters object, NUL-terminated, or NULL
 * @param[out] p filled on success only
 * @return 0; CNX_ESCHEMA for malformed JSON, a non-object, an unknown key,
 *         a wrong type or a value out of range, with a one-line message
 *         naming the key ("montage: parameters.search: must be an integer
 *         in [0, 4096]"); CNX_ETOOBIG over the JSON size limit. Fatal.
 */
int cnx_montage_params_parse(const char *json, cnx_montage_params *p);

/**
 * The canonical JSON report (sorted keys, no whitespace, reals with 17
 * significant digits):
 * {"format":"cnx.montage/1","z":z,
 *  "tiles":[{"id","nominal":[x,y],"x","y","gain","offset","placed"}...],
 *  "pairs":[{"a":id,"b":id,"dx","dy","peak_ratio","residual","used"}...],
 *  "summary":{"tiles","pairs","used","rejected","median_residual",
 *             "max_residual","fixed":id}}
 * ("placed" and "used" are booleans.) A zeroed result (a section the
 * tile set has no tiles for: the stage writes it black) gives no tiles, no
 * pairs, zero counts and "fixed": null.
 * @param[out] out  caller frees with free()
 * @return 0; CNX_EINVAL for a result that does not fit tiles; CNX_ENOMEM.
 */
int cnx_montage_report_json(const cnx_montage_tile *tiles,
                            const cnx_montage_result *r, int64_t z, char **out);

#ifdef __cplusplus
}
#endif
#endif
