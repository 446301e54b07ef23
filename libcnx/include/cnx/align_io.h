/*
 * cnx/align_io.h - the documents of the alignment stages (docs/align.md):
 * the parameters object, the per-slab match records (cnx.align-match/1)
 * and the per-slab transforms with their report (cnx.align/1). This module
 * owns both formats; the kernel (cnx/align.h) never sees JSON.
 */
#ifndef CNX_ALIGN_IO_H
#define CNX_ALIGN_IO_H

#include <stddef.h>

#include "cnx/align.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Formats of the side objects. */
#define CNX_ALIGN_MATCH_FORMAT "cnx.align-match/1"
#define CNX_ALIGN_FORMAT "cnx.align/1"

/** Sections per side object (a slab): the chunk depth of the alignment
 * layer and of the aligned image, and the unit of the stages' tasks. */
#define CNX_ALIGN_SLAB 64

/** Largest side object the stages read, bytes. */
#define CNX_ALIGN_MAX_OBJECT ((size_t)256 << 20)

/**
 * Parse the stage parameters over the defaults. Keys (all optional):
 * "stride", "patch", "search", "patch_search", "highpass", "bin", "block",
 * "overlap" (integers), "min_peak_ratio", "max_deviation", "min_valid", "stiffness"
 * (numbers), "normalize" (boolean or 0/1). NULL means "{}".
 * @return 0; CNX_ESCHEMA naming the key ("align: parameters.stride: must
 *         be an integer in [8, 4096]") for malformed JSON, an unknown key,
 *         a wrong type or a value out of range.
 */
int cnx_align_params_parse(const char *json, cnx_align_params *p);

/** The match records of one slab of sections. */
typedef struct cnx_align_slab_matches {
    cnx_align_grid grid;
    size_t nsections;
    int64_t *z;             /* nsections */
    cnx_align_stats *stats; /* nsections */
    size_t nmatches;
    cnx_align_match *matches; /* each with its za, zb */
} cnx_align_slab_matches;

/** Canonical JSON of a slab's matches; free() *out. */
int cnx_align_matches_encode(const cnx_align_slab_matches *s, char **out);

/**
 * Parse and check one slab's matches (what = the object's name, for
 * messages). @return 0; CNX_ECORRUPT naming the object and the field;
 * CNX_ENOMEM.
 */
int cnx_align_matches_decode(const char *json, size_t len, const char *what,
                             cnx_align_slab_matches *out);

void cnx_align_slab_matches_free(cnx_align_slab_matches *s);

/**
 * Canonical JSON of sections [first, first + n) of a solution (their
 * transforms and reports); free() *out.
 */
int cnx_align_transforms_encode(const cnx_align_solution *s, size_t first,
                                size_t n, char **out);

/**
 * Parse and check one slab's transforms into sol (grid, z0 = the first
 * section's z, nz sections, consecutive). @return 0; CNX_ECORRUPT naming
 * the object and the field; CNX_ENOMEM.
 */
int cnx_align_transforms_decode(const char *json, size_t len, const char *what,
                                cnx_align_solution *sol);

/** "ok", "failed" or "empty". */
const char *cnx_align_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif
