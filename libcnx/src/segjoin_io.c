/*
 * segjoin_io.c - the segment join's JSON document (cnx/segjoin_io.h): the
 * segment properties, Neuroglancer's inline form (a label, the voxel count
 * and tags per segment, in the join's segment order), written canonically.
 */
#include "cnx/segjoin_io.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cnx/error.h"
#include "json_int.h"

/* The size classes' upper bounds (um3), then "large". */
static const double size_class_um3[] = {0.1, 1.0};
static const char *const tag_names[] = {"small", "medium", "large",
                                        "multi_chunk"};
static const char *const tag_descriptions[] = {
    "under 0.1 um3", "0.1 to 1 um3", "1 um3 or more",
    "fragments in more than one chunk"};
enum { TAG_MULTI_CHUNK = 3 };

int cnx_segjoin_properties_json(const cnx_segjoin *j,
                                const double resolution[3], char **out)
{
    json_t *ids = json_array(), *vals = json_array(), *labels = json_array();
    json_t *tags = json_array(), *names = json_array(), *descs = json_array();
    json_t *doc = NULL;
    const char *dtype = "uint32";
    const double um3_per_voxel =
        resolution[0] * resolution[1] * resolution[2] * 1e-9;
    char text[96];

    *out = NULL;
    if (ids == NULL || vals == NULL || labels == NULL || tags == NULL ||
        names == NULL || descs == NULL)
        goto done;
    for (size_t i = 0; i < j->nsegs; i++)
        if (j->seg_size[i] > UINT32_MAX)
            dtype = "float32"; /* documented: counts over 2^32 - 1 */
    for (size_t i = 0; i < j->nsegs; i++) {
        uint64_t v = j->seg_ids[i] - 1, mask = ((uint64_t)1 << 21) - 1;
        double um3 = (double)j->seg_size[i] * um3_per_voxel;
        size_t cls = 0;
        json_t *t;
        while (cls < sizeof(size_class_um3) / sizeof(size_class_um3[0]) &&
               um3 >= size_class_um3[cls])
            cls++;
        snprintf(text, sizeof(text), "%" PRIu64, j->seg_ids[i]);
        json_array_append_new(ids, json_string(text));
        json_array_append_new(vals, json_integer((json_int_t)j->seg_size[i]));
        snprintf(text, sizeof(text), "%.3g um3 @ %" PRIu64 ",%" PRIu64
                 ",%" PRIu64, um3, v & mask, (v >> 21) & mask, v >> 42);
        json_array_append_new(labels, json_string(text));
        t = json_pack("[i]", (json_int_t)cls);
        if (t != NULL && j->seg_multi[i])
            json_array_append_new(t, json_integer(TAG_MULTI_CHUNK));
        json_array_append_new(tags, t);
    }
    for (size_t k = 0; k < sizeof(tag_names) / sizeof(tag_names[0]); k++) {
        json_array_append_new(names, json_string(tag_names[k]));
        json_array_append_new(descs, json_string(tag_descriptions[k]));
    }
    doc = json_pack(
        "{s:s,s:{s:O,s:[{s:s,s:s,s:s,s:O},{s:s,s:s,s:s,s:s,s:O},"
        "{s:s,s:s,s:O,s:O,s:O}]}}",
        "@type", "neuroglancer_segment_properties", "inline", "ids", ids,
        "properties", "id", "label", "type", "label", "description",
        "volume and the voxel the id comes from", "values", labels, "id",
        "voxels", "type", "number", "data_type", dtype, "description",
        "voxel count of the segment", "values", vals, "id", "tags", "type",
        "tags", "tags", names, "tag_descriptions", descs, "values", tags);
    if (doc != NULL)
        *out = cnx__json_canonical(doc);
done:
    json_decref(doc);
    json_decref(ids);
    json_decref(vals);
    json_decref(labels);
    json_decref(tags);
    json_decref(names);
    json_decref(descs);
    return *out ? 0 : cnx_error_set(CNX_ENOMEM, 0, "segjoin: out of memory");
}
