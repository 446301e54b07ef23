/*
 * segjoin_io.c - the segment join's JSON document (cnx/segjoin_io.h): the
 * segment properties, Neuroglancer's inline form, one voxel count per
 * segment in the join's segment order, written canonically.
 */
#include "cnx/segjoin_io.h"

#include <inttypes.h>
#include <stdio.h>

#include "cnx/error.h"
#include "json_int.h"

int cnx_segjoin_properties_json(const cnx_segjoin *j, char **out)
{
    json_t *ids = json_array(), *vals = json_array(), *doc;
    const char *dtype = "uint32";
    char text[24];
    *out = NULL;
    for (size_t i = 0; i < j->nsegs; i++)
        if (j->seg_size[i] > UINT32_MAX)
            dtype = "float32"; /* documented: counts over 2^32 - 1 */
    for (size_t i = 0; ids && vals && i < j->nsegs; i++) {
        snprintf(text, sizeof(text), "%" PRIu64, j->seg_ids[i]);
        json_array_append_new(ids, json_string(text));
        json_array_append_new(vals, json_integer((json_int_t)j->seg_size[i]));
    }
    doc = json_pack("{s:s,s:{s:o,s:[{s:s,s:s,s:s,s:s,s:o}]}}", "@type",
                    "neuroglancer_segment_properties", "inline", "ids", ids,
                    "properties", "id", "voxels", "type", "number", "data_type",
                    dtype, "description", "voxel count of the segment",
                    "values", vals);
    if (doc != NULL)
        *out = cnx__json_canonical(doc);
    json_decref(doc);
    return *out ? 0 : cnx_error_set(CNX_ENOMEM, 0, "segjoin: out of memory");
}
