/*
 * precomputed.c - Neuroglancer precomputed volume layers over a cnx_store.
 *
 * `info` is parsed field by field with a message naming any bad field, and
 * written in canonical JSON so that the same layer always has the same info
 * bytes. Reads walk the chunks a box touches in z, y, x order, fetch each
 * (checking its expected digest when the caller has one), decode it into a
 * scratch chunk volume and copy the overlap into the result (a sharded
 * scale's chunks come from their shards through cnx/sharded.h, then the
 * same decoding); writes cut a chunk-aligned volume into its chunks and put
 * each write-once. Chunk bytes are little-endian; this file refuses to
 * build on a big-endian host rather than silently writing the wrong bytes.
 */
#include "cnx/precomputed.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cseg.h"
#include "cnx/error.h"
#include "cnx/imageio.h"
#include "json_int.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "precomputed raw chunks are little-endian; add byte swapping first"
#endif

/* Coordinates beyond 2^40 voxels per axis are not a real volume. */
#define AXIS_LIMIT ((int64_t)1 << 40)

void cnx_info_init(cnx_layer_info *info, cnx_layer_type type, cnx_dtype dtype,
                   const int64_t size[3], const double resolution[3],
                   const int64_t chunk[3])
{
    cnx_scale *s = &info->scales[0];
    memset(info, 0, sizeof(*info));
    info->type = type;
    info->dtype = dtype;
    info->channels = 1;
    info->nscales = 1;
    snprintf(s->key, sizeof(s->key), "%g_%g_%g", resolution[0], resolution[1],
             resolution[2]);
    for (int i = 0; i < 3; i++) {
        s->size[i] = size[i];
        s->resolution[i] = resolution[i];
        s->chunk[i] = chunk[i];
        s->voxel_offset[i] = 0;
        s->cseg_block[i] = 8;
    }
    s->encoding = type == CNX_LAYER_SEGMENTATION ? CNX_ENC_CSEG : CNX_ENC_RAW;
}

cnx_grid cnx_scale_grid(const cnx_scale *scale)
{
    cnx_grid grid;
    for (int i = 0; i < 3; i++) {
        grid.offset[i] = scale->voxel_offset[i];
        grid.size[i] = scale->size[i];
        grid.chunk[i] = scale->chunk[i];
    }
    return grid;
}

cnx_grid cnx_info_grid(const cnx_layer_info *info, int s)
{
    return cnx_scale_grid(&info->scales[s]);
}

static int copy_key(char *dst, const json_t *value, const char *what)
{
    const char *text;
    size_t len;
    if (!json_is_string(value))
        return cnx_error_set(CNX_ECORRUPT, 0, "info: %s: must be a string",
                             what);
    text = json_string_value(value);
    len = json_string_length(value);
    if (len >= CNX_SCALE_KEY_MAX || strlen(text) != len)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: %s: longer than %d bytes or holds NUL",
                             what, CNX_SCALE_KEY_MAX - 1);
    if (cnx_store_check_name(text) != 0) {
        char why[sizeof(cnx_error_last()->message)];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return cnx_error_set(CNX_ECORRUPT, 0, "info: %s: %s", what, why);
    }
    memcpy(dst, text, len + 1);
    return 0;
}

/* One of two encodings ("raw" when absent), by name. */
static int parse_shard_encoding(cnx_shard_encoding *out, const json_t *v,
                                int idx, const char *field)
{
    const char *s = json_is_string(v) ? json_string_value(v) : NULL;
    if (v == NULL || (s != NULL && strcmp(s, "raw") == 0)) {
        *out = CNX_SHARD_ENC_RAW;
        return 0;
    }
    if (s != NULL && strcmp(s, "gzip") == 0) {
        *out = CNX_SHARD_ENC_GZIP;
        return 0;
    }
    return cnx_error_set(CNX_ECORRUPT, 0,
                         "info: scales[%d].sharding.%s: must be \"raw\" or "
                         "\"gzip\"",
                         idx, field);
}

/* A scale's "sharding" member (neuroglancer_uint64_sharded_v1). Members we
 * do not know are ignored: the format lets writers add their own. */
static int parse_sharding(cnx_sharding *sh, const json_t *js, int idx)
{
    static const char *const bits[] = {"preshift_bits", "minishard_bits",
                                       "shard_bits"};
    int *const dst[] = {&sh->preshift_bits, &sh->minishard_bits,
                        &sh->shard_bits};
    const json_t *v;
    const char *s;
    int rc;

    if (!json_is_object(js))
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].sharding: must be an object",
                             idx);
    v = json_object_get(js, "@type");
    if (!json_is_string(v) || strcmp(json_string_value(v),
                                     "neuroglancer_uint64_sharded_v1") != 0)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].sharding.@type: must be "
                             "\"neuroglancer_uint64_sharded_v1\"",
                             idx);
    for (int i = 0; i < 3; i++) {
        v = json_object_get(js, bits[i]);
        if (!cnx__json_int_in(v, 0, 64))
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "info: scales[%d].sharding.%s: must be an "
                                 "integer in 0..64",
                                 idx, bits[i]);
        *dst[i] = (int)json_integer_value(v);
    }
    v = json_object_get(js, "hash");
    s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "identity") == 0)
        sh->hash = CNX_SHARD_HASH_IDENTITY;
    else if (strcmp(s, "murmurhash3_x86_128") == 0)
        sh->hash = CNX_SHARD_HASH_MURMUR3;
    else
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].sharding.hash: must be "
                             "\"identity\" or \"murmurhash3_x86_128\"",
                             idx);
    rc = parse_shard_encoding(&sh->minishard_index_encoding,
                              json_object_get(js, "minishard_index_encoding"),
                              idx, "minishard_index_encoding");
    if (rc == 0)
        rc = parse_shard_encoding(&sh->data_encoding,
                                  json_object_get(js, "data_encoding"), idx,
                                  "data_encoding");
    if (rc != 0)
        return rc;
    if (cnx_sharding_check(sh) != 0) {
        char why[sizeof(cnx_error_last()->message)];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return cnx_error_set(CNX_ECORRUPT, 0, "info: scales[%d].%s", idx,
                             why);
    }
    return 0;
}

/* The members of obj not in known, as canonical JSON into dst ("" if
 * none): kept so that an info cnx writes back keeps what others put in. */
static int keep_extra(char *dst, size_t cap, const json_t *obj,
                      const char *const *known, const char *what)
{
    json_t *rest = json_object();
    const char *k;
    json_t *v;
    char *text;
    int rc = 0;

    dst[0] = '\0';
    if (rest == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "info: out of memory");
    json_object_foreach((json_t *)obj, k, v) {
        int found = 0;
        for (size_t i = 0; known[i] != NULL && !found; i++)
            found = strcmp(k, known[i]) == 0;
        if (!found)
            json_object_set(rest, k, v);
    }
    if (json_object_size(rest) > 0) {
        text = cnx__json_canonical(rest);
        if (text == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "info: out of memory");
        else if (strlen(text) >= cap)
            rc = cnx_error_set(CNX_ETOOBIG, 0,
                               "%s: members cnx does not use take %zu bytes, "
                               "over the %zu kept",
                               what, strlen(text), cap - 1);
        else
            memcpy(dst, text, strlen(text) + 1);
        free(text);
    }
    json_decref(rest);
    return rc;
}

/* Put the kept members back into obj (never over one cnx wrote). */
static int put_extra(json_t *obj, const char *text)
{
    json_t *rest;
    const char *k;
    json_t *v;
    if (text[0] == '\0')
        return 0;
    rest = json_loads(text, 0, NULL);
    if (!json_is_object(rest)) {
        json_decref(rest);
        return cnx_error_set(CNX_EINVAL, 0, "info: kept members are not a "
                                            "JSON object");
    }
    json_object_foreach(rest, k, v) {
        if (json_object_get(obj, k) == NULL)
            json_object_set(obj, k, v);
    }
    json_decref(rest);
    return 0;
}

static int parse_scale(cnx_scale *sc, const json_t *js, int idx,
                       const cnx_layer_info *info)
{
    static const char *const keys[] = {
        "key", "size", "resolution", "voxel_offset", "chunk_sizes",
        "encoding", "compressed_segmentation_block_size", "sharding", NULL};
    char what[96];
    const json_t *v;
    const char *enc;
    int rc;

    snprintf(what, sizeof(what), "info: scales[%d]", idx);
    if (!json_is_object(js))
        return cnx_error_set(CNX_ECORRUPT, 0, "%s: must be an object", what);
    rc = keep_extra(sc->extra, sizeof(sc->extra), js, keys, what);
    if (rc != 0)
        return rc;
    snprintf(what, sizeof(what), "scales[%d].key", idx);
    rc = copy_key(sc->key, json_object_get(js, "key"), what);
    if (rc != 0)
        return CNX_ECORRUPT;
    snprintf(what, sizeof(what), "info: scales[%d].size", idx);
    rc = cnx__json_ivec(json_object_get(js, "size"), 3, 1, AXIS_LIMIT,
                        sc->size, CNX_ECORRUPT, what);
    if (rc != 0)
        return rc;
    v = json_object_get(js, "voxel_offset");
    snprintf(what, sizeof(what), "info: scales[%d].voxel_offset", idx);
    if (v == NULL)
        memset(sc->voxel_offset, 0, sizeof(sc->voxel_offset));
    else if ((rc = cnx__json_ivec(v, 3, -AXIS_LIMIT, AXIS_LIMIT,
                                  sc->voxel_offset, CNX_ECORRUPT, what)) != 0)
        return rc;
    v = json_object_get(js, "resolution");
    if (!json_is_array(v) || json_array_size(v) != 3)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].resolution: must be an array "
                             "of 3 numbers",
                             idx);
    for (int i = 0; i < 3; i++) {
        const json_t *r = json_array_get(v, (size_t)i);
        double d = json_is_number(r) ? json_number_value(r) : -1.0;
        if (!(d > 0.0) || !isfinite(d))
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "info: scales[%d].resolution[%d]: must be a "
                                 "positive number",
                                 idx, i);
        sc->resolution[i] = d;
    }
    v = json_object_get(js, "chunk_sizes");
    if (!json_is_array(v) || json_array_size(v) < 1)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].chunk_sizes: must be a "
                             "non-empty array of [x,y,z]",
                             idx);
    snprintf(what, sizeof(what), "info: scales[%d].chunk_sizes[0]", idx);
    rc = cnx__json_ivec(json_array_get(v, 0), 3, 1, 1 << 20, sc->chunk,
                        CNX_ECORRUPT, what);
    if (rc != 0)
        return rc;
    v = json_object_get(js, "sharding");
    sc->sharded = 0;
    memset(&sc->sharding, 0, sizeof(sc->sharding));
    if (v != NULL && !json_is_null(v)) {
        rc = parse_sharding(&sc->sharding, v, idx);
        if (rc != 0)
            return rc;
        sc->sharded = 1;
    }
    v = json_object_get(js, "encoding");
    enc = json_is_string(v) ? json_string_value(v) : NULL;
    if (enc == NULL)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].encoding: must be a string",
                             idx);
    if (strcmp(enc, "raw") == 0) {
        sc->encoding = CNX_ENC_RAW;
    } else if (strcmp(enc, "compressed_segmentation") == 0) {
        sc->encoding = CNX_ENC_CSEG;
        if (info->dtype != CNX_DT_UINT32 && info->dtype != CNX_DT_UINT64)
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "info: scales[%d].encoding: "
                                 "compressed_segmentation needs uint32 or "
                                 "uint64, not %s",
                                 idx, cnx_dtype_name(info->dtype));
        snprintf(what, sizeof(what),
                 "info: scales[%d].compressed_segmentation_block_size", idx);
        rc = cnx__json_ivec(
            json_object_get(js, "compressed_segmentation_block_size"), 3, 1,
            1 << 10, sc->cseg_block, CNX_ECORRUPT, what);
        if (rc != 0)
            return rc;
    } else if (strcmp(enc, "jpeg") == 0 || strcmp(enc, "png") == 0) {
        /* Read as gray images: Neuroglancer's layout, x by y * z. */
        int jpeg = enc[0] == 'j';
        sc->encoding = jpeg ? CNX_ENC_JPEG : CNX_ENC_PNG;
        if (info->channels != 1 ||
            !(info->dtype == CNX_DT_UINT8 ||
              (!jpeg && info->dtype == CNX_DT_UINT16)))
            return cnx_error_set(CNX_EUNSUPPORTED, 0,
                                 "info: scales[%d].encoding: %s is read for "
                                 "one channel of %s, not %" PRId64
                                 " of %s",
                                 idx, enc, jpeg ? "uint8" : "uint8 or uint16",
                                 info->channels, cnx_dtype_name(info->dtype));
    } else if (strcmp(enc, "compresso") == 0) {
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "info: scales[%d].encoding: '%s' is not "
                             "supported (raw, compressed_segmentation, jpeg, "
                             "png are)",
                             idx, enc);
    } else {
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "info: scales[%d].encoding: unknown encoding "
                             "'%.64s'",
                             idx, enc);
    }
    return 0;
}

int cnx_info_parse(cnx_layer_info *info, const char *text, size_t len)
{
    static const char *const top_keys[] = {
        "@type", "type", "data_type", "num_channels", "scales", "mesh",
        "segment_properties", NULL};
    json_t *js = NULL;
    const json_t *v;
    const char *s;
    int rc;

    memset(info, 0, sizeof(*info));
    rc = cnx__json_parse(&js, text, len, CNX_ECORRUPT, "info");
    if (rc != 0)
        return rc;
    if (!json_is_object(js)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0, "info: must be a JSON object");
        goto done;
    }
    v = json_object_get(js, "@type");
    if (v != NULL && (!json_is_string(v) ||
                      strcmp(json_string_value(v),
                             "neuroglancer_multiscale_volume") != 0)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: @type: must be "
                           "\"neuroglancer_multiscale_volume\"");
        goto done;
    }
    v = json_object_get(js, "type");
    s = json_is_string(v) ? json_string_value(v) : "";
    if (strcmp(s, "image") == 0) {
        info->type = CNX_LAYER_IMAGE;
    } else if (strcmp(s, "segmentation") == 0) {
        info->type = CNX_LAYER_SEGMENTATION;
    } else {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: type: must be \"image\" or "
                           "\"segmentation\"");
        goto done;
    }
    v = json_object_get(js, "data_type");
    if (!json_is_string(v) ||
        cnx_dtype_parse(json_string_value(v), &info->dtype) != 0) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: data_type: must be uint8, uint16, uint32, "
                           "uint64 or float32");
        goto done;
    }
    if (info->type == CNX_LAYER_SEGMENTATION &&
        (info->dtype == CNX_DT_FLOAT32)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: data_type: a segmentation cannot be "
                           "float32");
        goto done;
    }
    v = json_object_get(js, "num_channels");
    if (!cnx__json_int_in(v, 1, 4096) ||
        (info->type == CNX_LAYER_SEGMENTATION && json_integer_value(v) != 1)) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: num_channels: must be an integer >= 1 (1 "
                           "for a segmentation)");
        goto done;
    }
    info->channels = json_integer_value(v);
    v = json_object_get(js, "scales");
    if (!json_is_array(v) || json_array_size(v) < 1 ||
        json_array_size(v) > CNX_MAX_SCALES) {
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "info: scales: must be an array of 1 to %d scales",
                           CNX_MAX_SCALES);
        goto done;
    }
    info->nscales = (int)json_array_size(v);
    for (int i = 0; i < info->nscales; i++) {
        rc = parse_scale(&info->scales[i], json_array_get(v, (size_t)i), i,
                         info);
        if (rc != 0)
            goto done;
    }
    v = json_object_get(js, "mesh");
    if (v != NULL && (rc = copy_key(info->mesh, v, "mesh")) != 0) {
        rc = CNX_ECORRUPT;
        goto done;
    }
    v = json_object_get(js, "segment_properties");
    if (v != NULL &&
        (rc = copy_key(info->segment_properties, v, "segment_properties")) !=
            0) {
        rc = CNX_ECORRUPT;
        goto done;
    }
    rc = keep_extra(info->extra, sizeof(info->extra), js, top_keys, "info");
done:
    json_decref(js);
    return rc;
}

/* A resolution as an integer when it is one, so info reads naturally. */
static json_t *json_resolution(double r)
{
    if (r == floor(r) && fabs(r) < 1e15)
        return json_integer((json_int_t)r);
    return json_real(r);
}

static json_t *json_ivec(const int64_t *v, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a != NULL && i < n; i++)
        json_array_append_new(a, json_integer(v[i]));
    return a;
}

json_t *cnx__json_sharding(const cnx_sharding *sh)
{
    json_t *js = json_object();
    json_object_set_new(js, "@type",
                        json_string("neuroglancer_uint64_sharded_v1"));
    json_object_set_new(js, "preshift_bits", json_integer(sh->preshift_bits));
    json_object_set_new(js, "minishard_bits",
                        json_integer(sh->minishard_bits));
    json_object_set_new(js, "shard_bits", json_integer(sh->shard_bits));
    json_object_set_new(js, "hash",
                        json_string(sh->hash == CNX_SHARD_HASH_MURMUR3
                                        ? "murmurhash3_x86_128"
                                        : "identity"));
    json_object_set_new(js, "minishard_index_encoding",
                        json_string(sh->minishard_index_encoding ==
                                            CNX_SHARD_ENC_GZIP
                                        ? "gzip"
                                        : "raw"));
    json_object_set_new(js, "data_encoding",
                        json_string(sh->data_encoding == CNX_SHARD_ENC_GZIP
                                        ? "gzip"
                                        : "raw"));
    return js;
}

static const char *encoding_name(cnx_encoding e)
{
    switch (e) {
    case CNX_ENC_CSEG: return "compressed_segmentation";
    case CNX_ENC_JPEG: return "jpeg";
    case CNX_ENC_PNG: return "png";
    case CNX_ENC_RAW: break;
    }
    return "raw";
}

int cnx_info_to_json(const cnx_layer_info *info, char **out)
{
    json_t *js = json_object();
    json_t *scales = json_array();
    *out = NULL;
    if (js == NULL || scales == NULL)
        goto nomem;
    json_object_set_new(js, "@type",
                        json_string("neuroglancer_multiscale_volume"));
    json_object_set_new(js, "type",
                        json_string(info->type == CNX_LAYER_SEGMENTATION
                                        ? "segmentation"
                                        : "image"));
    json_object_set_new(js, "data_type",
                        json_string(cnx_dtype_name(info->dtype)));
    json_object_set_new(js, "num_channels", json_integer(info->channels));
    for (int i = 0; i < info->nscales; i++) {
        const cnx_scale *sc = &info->scales[i];
        json_t *s = json_object();
        json_t *res = json_array();
        json_t *chunks = json_array();
        if (s == NULL || res == NULL || chunks == NULL) {
            json_decref(s);
            json_decref(res);
            json_decref(chunks);
            goto nomem;
        }
        for (int k = 0; k < 3; k++)
            json_array_append_new(res, json_resolution(sc->resolution[k]));
        json_array_append_new(chunks, json_ivec(sc->chunk, 3));
        json_object_set_new(s, "key", json_string(sc->key));
        json_object_set_new(s, "size", json_ivec(sc->size, 3));
        json_object_set_new(s, "resolution", res);
        json_object_set_new(s, "voxel_offset", json_ivec(sc->voxel_offset, 3));
        json_object_set_new(s, "chunk_sizes", chunks);
        json_object_set_new(s, "encoding",
                            json_string(encoding_name(sc->encoding)));
        if (sc->encoding == CNX_ENC_CSEG)
            json_object_set_new(s, "compressed_segmentation_block_size",
                                json_ivec(sc->cseg_block, 3));
        if (sc->sharded)
            json_object_set_new(s, "sharding",
                                cnx__json_sharding(&sc->sharding));
        if (put_extra(s, sc->extra) != 0) {
            json_decref(s);
            goto bad_extra;
        }
        json_array_append_new(scales, s);
    }
    json_object_set_new(js, "scales", scales);
    scales = NULL;
    if (info->mesh[0] != '\0')
        json_object_set_new(js, "mesh", json_string(info->mesh));
    if (info->segment_properties[0] != '\0')
        json_object_set_new(js, "segment_properties",
                            json_string(info->segment_properties));
    if (put_extra(js, info->extra) != 0)
        goto bad_extra;
    *out = cnx__json_canonical(js);
    json_decref(js);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "info: out of memory");
    return 0;
nomem:
    json_decref(js);
    json_decref(scales);
    return cnx_error_set(CNX_ENOMEM, 0, "info: out of memory");
bad_extra:
    json_decref(js);
    json_decref(scales);
    return CNX_EINVAL;
}

/* Scale s exists and keeps one object per chunk: writing the chunks of a
 * sharded scale through a layer is not built (shards are written whole). */
static int check_unsharded(const cnx_layer_info *info, int s)
{
    if (s < 0 || s >= info->nscales)
        return cnx_error_set(CNX_EINVAL, 0, "scale %d out of range", s);
    if (info->scales[s].sharded)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "scale '%s' is sharded: its chunks are not "
                             "written one by one",
                             info->scales[s].key);
    return 0;
}

/* Check that vol fits scale s of info as a whole chunk's worth of data. */
static int check_chunk_volume(const cnx_layer_info *info, int s,
                              const cnx_volume *vol)
{
    if (s < 0 || s >= info->nscales)
        return cnx_error_set(CNX_EINVAL, 0, "scale %d out of range", s);
    if (vol->dtype != info->dtype || vol->channels != info->channels)
        return cnx_error_set(CNX_EINVAL, 0,
                             "chunk volume is %s x%lld, layer is %s x%lld",
                             cnx_dtype_name(vol->dtype),
                             (long long)vol->channels,
                             cnx_dtype_name(info->dtype),
                             (long long)info->channels);
    return 0;
}

int cnx_chunk_encode(const cnx_layer_info *info, int s, const cnx_volume *vol,
                     uint8_t **out, size_t *len)
{
    int64_t size[3];
    int rc = check_chunk_volume(info, s, vol);
    *out = NULL;
    *len = 0;
    if (rc != 0)
        return rc;
    if (info->scales[s].encoding == CNX_ENC_JPEG ||
        info->scales[s].encoding == CNX_ENC_PNG)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "scale '%s': %s chunks are read, not written",
                             info->scales[s].key,
                             encoding_name(info->scales[s].encoding));
    if (info->scales[s].encoding == CNX_ENC_CSEG) {
        cnx_box_size(&vol->box, size);
        return cnx_cseg_encode(out, len, vol->data, vol->dtype, size,
                               vol->channels, info->scales[s].cseg_block);
    }
    *len = cnx_volume_bytes(vol);
    *out = malloc(*len ? *len : 1);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "chunk: out of memory");
    memcpy(*out, vol->data, *len);
    return 0;
}

/* A jpeg or png chunk: one gray image x wide and y * z high (the z
 * sections one under the other), 8-bit for uint8, 16-bit for uint16. */
static int decode_image_chunk(const cnx_layer_info *info, int s,
                              const uint8_t *data, size_t len, cnx_volume *vol,
                              const char *name)
{
    const char *enc = encoding_name(info->scales[s].encoding);
    int bits = vol->dtype == CNX_DT_UINT16 ? 16 : 8;
    cnx_image *img = NULL;
    int64_t size[3];
    char what[256];
    int rc;

    snprintf(what, sizeof(what), "chunk %s/%s", info->scales[s].key, name);
    cnx_box_size(&vol->box, size);
    rc = cnx_image_decode(&img, data, len, what);
    if (rc == CNX_EUNSUPPORTED)
        rc = cnx_error_set(CNX_ECORRUPT, 0, "%s", cnx_error_last()->message);
    if (rc != 0)
        return rc;
    if (img->width != size[0] || img->height != size[1] * size[2] ||
        img->bits != bits)
        rc = cnx_error_set(CNX_ECORRUPT, 0,
                           "%s: %s image of %" PRId64 "x%" PRId64
                           " pixels, %d-bit; expected %" PRId64 "x%" PRId64
                           " (x by y*z), %d-bit",
                           what, enc, img->width, img->height, img->bits,
                           size[0], size[1] * size[2], bits);
    else
        memcpy(vol->data, img->pixels, cnx_volume_bytes(vol));
    cnx_image_free(img);
    return rc;
}

int cnx_chunk_decode(const cnx_layer_info *info, int s, const uint8_t *data,
                     size_t len, cnx_volume *vol)
{
    int64_t size[3];
    char name[128];
    int rc = check_chunk_volume(info, s, vol);
    if (rc != 0)
        return rc;
    cnx_box_format(&vol->box, name, sizeof(name));
    if (info->scales[s].encoding == CNX_ENC_CSEG) {
        cnx_box_size(&vol->box, size);
        rc = cnx_cseg_decode(vol->data, data, len, vol->dtype, size,
                             vol->channels, info->scales[s].cseg_block);
        if (rc != 0)
            return cnx_error_wrap("chunk %s/%s", info->scales[s].key, name);
        return 0;
    }
    if (info->scales[s].encoding == CNX_ENC_JPEG ||
        info->scales[s].encoding == CNX_ENC_PNG)
        return decode_image_chunk(info, s, data, len, vol, name);
    if (len != cnx_volume_bytes(vol))
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "chunk %s/%s: %zu bytes, expected %zu for raw "
                             "%s%s",
                             info->scales[s].key, name, len,
                             cnx_volume_bytes(vol), cnx_dtype_name(vol->dtype),
                             len < cnx_volume_bytes(vol) ? " (truncated)" : "");
    memcpy(vol->data, data, len);
    return 0;
}

/*
 * Decoded minishard indexes of the layer's sharded scales, so that reading
 * many chunks of one minishard reads its shard index entry and its index
 * once (then one ranged read a chunk). Bounded by count and by decoded
 * bytes; the least recently used goes first. Absent shards are not kept
 * (a shard may appear later). Guarded by its own mutex: reads of one layer
 * may run in several threads, as the store allows.
 */
#define SHARD_CACHE_MAX 64
#define SHARD_CACHE_BYTES ((size_t)64 << 20)

typedef struct shard_cached {
    int scale;
    uint64_t shard, minishard;
    cnx_minishard_entry *entries; /* n entries, owned; NULL when n is 0 */
    size_t n;
    uint64_t used; /* tick of the last use */
} shard_cached;

typedef struct shard_cache {
    pthread_mutex_t lock;
    shard_cached items[SHARD_CACHE_MAX];
    int count;
    size_t bytes;
    uint64_t tick;
} shard_cache;

struct cnx_layer {
    cnx_store *store;
    int store_borrowed; /* 1: the caller's store, not freed with the layer */
    cnx_layer_info info;
    shard_cache shards;
};

/* Drop every cached index (the info changed, or the layer is freed). */
static void shard_cache_clear(shard_cache *c)
{
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->count; i++)
        free(c->items[i].entries);
    c->count = 0;
    c->bytes = 0;
    pthread_mutex_unlock(&c->lock);
}

/* Find chunk_id in a cached minishard index: 1 and *hit if that index is
 * cached (*found says whether the chunk is in it), 0 if not cached. */
static int shard_cache_find(shard_cache *c, int scale, uint64_t shard,
                            uint64_t minishard, uint64_t chunk_id,
                            cnx_minishard_entry *hit, int *found)
{
    int cached = 0;
    *found = 0;
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->count && !cached; i++) {
        shard_cached *e = &c->items[i];
        if (e->scale != scale || e->shard != shard || e->minishard != minishard)
            continue;
        cached = 1;
        e->used = ++c->tick;
        for (size_t k = 0; k < e->n; k++)
            if (e->entries[k].chunk_id == chunk_id) {
                *hit = e->entries[k];
                *found = 1;
                break;
            }
    }
    pthread_mutex_unlock(&c->lock);
    return cached;
}

/* Keep a decoded minishard index (takes entries; frees it when it is not
 * kept: too big, or another thread kept the same one first). */
static void shard_cache_put(shard_cache *c, int scale, uint64_t shard,
                            uint64_t minishard, cnx_minishard_entry *entries,
                            size_t n)
{
    size_t bytes = n * sizeof(*entries);
    if (bytes > SHARD_CACHE_BYTES) {
        free(entries);
        return;
    }
    pthread_mutex_lock(&c->lock);
    for (int i = 0; i < c->count; i++)
        if (c->items[i].scale == scale && c->items[i].shard == shard &&
            c->items[i].minishard == minishard) {
            pthread_mutex_unlock(&c->lock);
            free(entries);
            return;
        }
    while (c->count > 0 && (c->count == SHARD_CACHE_MAX ||
                            c->bytes + bytes > SHARD_CACHE_BYTES)) {
        int old = 0;
        for (int i = 1; i < c->count; i++)
            if (c->items[i].used < c->items[old].used)
                old = i;
        c->bytes -= c->items[old].n * sizeof(*entries);
        free(c->items[old].entries);
        c->items[old] = c->items[--c->count];
    }
    assert(c->count < SHARD_CACHE_MAX);
    c->items[c->count++] =
        (shard_cached){scale, shard, minishard, entries, n, ++c->tick};
    c->bytes += bytes;
    pthread_mutex_unlock(&c->lock);
}

/* A layer (no info yet) over store; borrowed: the caller keeps it. */
static int layer_new(cnx_layer **out, cnx_store *store, int borrowed)
{
    cnx_layer *layer = calloc(1, sizeof(*layer));
    *out = NULL;
    if (layer == NULL) {
        if (!borrowed)
            cnx_store_free(store);
        return cnx_error_set(CNX_ENOMEM, 0, "layer: out of memory");
    }
    layer->store = store;
    layer->store_borrowed = borrowed;
    pthread_mutex_init(&layer->shards.lock, NULL);
    *out = layer;
    return 0;
}

static int layer_alloc(cnx_layer **out, const char *url)
{
    cnx_store *store = NULL;
    int rc = cnx_store_open(&store, url);
    *out = NULL;
    return rc != 0 ? rc : layer_new(out, store, 0);
}

static int read_info(cnx_layer *layer, cnx_layer_info *info,
                     char digest[CNX_DIGEST_LEN]);

static int check_info(const cnx_layer_info *info)
{
    char *json = NULL;
    cnx_layer_info again;
    int rc = cnx_info_to_json(info, &json);
    if (rc != 0)
        return rc;
    /* The parser is the one place that knows every rule: round-trip. */
    rc = cnx_info_parse(&again, json, strlen(json));
    free(json);
    if (rc != 0)
        return cnx_error_set(CNX_EINVAL, 0, "layer info is invalid: %s",
                             cnx_error_last()->message);
    return 0;
}

int cnx_layer_create(cnx_layer **out, const char *url,
                     const cnx_layer_info *info)
{
    cnx_layer *layer = NULL;
    char *json = NULL;
    int rc = check_info(info);
    *out = NULL;
    if (rc != 0)
        return rc;
    rc = layer_alloc(&layer, url);
    if (rc != 0)
        return rc;
    layer->info = *info;
    rc = cnx_info_to_json(info, &json);
    if (rc == 0)
        rc = cnx_store_put(layer->store, "info", json, strlen(json), NULL);
    free(json);
    if (rc != 0) {
        cnx_layer_free(layer);
        return rc;
    }
    *out = layer;
    return 0;
}

int cnx_layer_open(cnx_layer **out, const char *url)
{
    cnx_layer *layer = NULL;
    char digest[CNX_DIGEST_LEN];
    int rc = layer_alloc(&layer, url);
    *out = NULL;
    if (rc != 0)
        return rc;
    rc = read_info(layer, &layer->info, digest);
    if (rc != 0) {
        cnx_error_wrap("layer %s", url);
        cnx_layer_free(layer);
        return rc;
    }
    *out = layer;
    return 0;
}

void cnx_layer_free(cnx_layer *layer)
{
    if (layer == NULL)
        return;
    shard_cache_clear(&layer->shards);
    pthread_mutex_destroy(&layer->shards.lock);
    if (!layer->store_borrowed)
        cnx_store_free(layer->store);
    free(layer);
}

const cnx_layer_info *cnx_layer_get_info(const cnx_layer *layer)
{
    return &layer->info;
}

cnx_store *cnx_layer_store(cnx_layer *layer)
{
    return layer->store;
}

int cnx_layer_chunk_name(const cnx_layer_info *info, int s, const cnx_box *box,
                         char *buf, size_t n)
{
    char name[128];
    int rc = cnx_box_format(box, name, sizeof(name));
    if (rc != 0)
        return rc;
    if (snprintf(buf, n, "%s/%s", info->scales[s].key, name) >= (int)n)
        return cnx_error_set(CNX_ERANGE, 0, "chunk name too long");
    return 0;
}

int cnx_side_object_name(const char *dir, const char *key, const cnx_box *box,
                         char *buf, size_t n)
{
    char name[128];
    int rc = cnx_box_format(box, name, sizeof(name));
    if (rc != 0)
        return rc;
    if (snprintf(buf, n, "%s/%s/%s", dir, key, name) >= (int)n)
        return cnx_error_set(CNX_ERANGE, 0, "side object name too long");
    return 0;
}

void cnx_object_list_init(cnx_object_list *list)
{
    memset(list, 0, sizeof(*list));
}

void cnx_object_list_dispose(cnx_object_list *list)
{
    free(list->items);
    memset(list, 0, sizeof(*list));
}

int cnx_object_list_add(cnx_object_list *list, const char *name,
                        const char *digest)
{
    cnx_object *o;
    if (strlen(name) >= sizeof(o->name))
        return cnx_error_set(CNX_ERANGE, 0, "object name too long: %.64s",
                             name);
    if (list->count == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        cnx_object *items = realloc(list->items, cap * sizeof(*items));
        if (items == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "object list: out of memory");
        list->items = items;
        list->cap = cap;
    }
    o = &list->items[list->count++];
    snprintf(o->name, sizeof(o->name), "%s", name);
    snprintf(o->digest, sizeof(o->digest), "%s", digest);
    o->bytes = 0;
    return 0;
}

/* Largest encoded chunk we accept: raw size x2 plus headers. */
static size_t chunk_read_limit(const cnx_layer_info *info, int s)
{
    const cnx_scale *sc = &info->scales[s];
    size_t raw = (size_t)sc->chunk[0] * (size_t)sc->chunk[1] *
                 (size_t)sc->chunk[2] * (size_t)info->channels *
                 cnx_dtype_size(info->dtype);
    return raw * 2 + (1 << 16);
}

static void prefetch_free(cnx_store_get_req *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(reqs[i].data);
    free(reqs);
}

/*
 * Fetch every chunk of the range [lo, hi) of a remote layer concurrently,
 * in the order cnx_layer_read visits them. Each result (bytes or failure)
 * is kept for the visit, so which chunks fail and which error is reported
 * do not depend on the threads.
 */
static int prefetch(cnx_layer *layer, int s, const int64_t lo[3],
                    const int64_t hi[3], cnx_expect_fn expect,
                    void *expect_ctx, cnx_store_get_req **out, size_t *nout)
{
    const cnx_layer_info *info = &layer->info;
    cnx_grid grid = cnx_info_grid(info, s);
    size_t n = (size_t)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
    cnx_store_get_req *reqs;
    char(*names)[256];
    int64_t g[3];
    size_t k = 0;
    int rc = 0;

    *out = NULL;
    *nout = 0;
    /* names live right after the requests, in the same block */
    reqs = calloc(n, sizeof(*reqs) + sizeof(*names));
    if (reqs == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "read: out of memory");
    names = (char(*)[256])(reqs + n);
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++)
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++)
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++, k++) {
                cnx_box cbox = cnx_grid_chunk_box(&grid, g);
                rc = cnx_layer_chunk_name(info, s, &cbox, names[k],
                                          sizeof(names[k]));
                if (rc != 0) {
                    free(reqs);
                    return rc;
                }
                reqs[k].name = names[k];
                reqs[k].expected =
                    expect ? expect(expect_ctx, names[k]) : NULL;
            }
    (void)cnx_store_get_many(layer->store, reqs, n,
                             chunk_read_limit(info, s));
    cnx_error_clear(); /* failures are reported per chunk, in order */
    *out = reqs;
    *nout = n;
    return 0;
}

/* Chunk id of sharded scale s through the layer's index cache: on a miss,
 * read and keep its minishard index; then one ranged read of the chunk.
 * Messages as cnx_sharded_read_chunk's. */
static int sharded_read(cnx_layer *layer, int s, uint64_t id,
                        cnx_sharded_source *src, uint8_t **bytes, size_t *len)
{
    const cnx_sharding *spec = &layer->info.scales[s].sharding;
    char name[CNX_SHARD_NAME_MAX];
    uint64_t shard, minishard;
    cnx_minishard_entry hit, *entries = NULL;
    size_t n = 0;
    int found, rc;

    *bytes = NULL;
    *len = 0;
    cnx_sharding_locate(spec, id, &shard, &minishard);
    if (!shard_cache_find(&layer->shards, s, shard, minishard, id, &hit,
                          &found)) {
        rc = cnx_sharded_read_minishard(
            spec, shard, minishard, cnx_sharded_store_read, src, &entries, &n);
        if (rc != 0)
            return rc;
        found = 0;
        for (size_t i = 0; i < n && !found; i++)
            if (entries[i].chunk_id == id) {
                hit = entries[i];
                found = 1;
            }
        shard_cache_put(&layer->shards, s, shard, minishard, entries, n);
    }
    if (!found) {
        cnx_sharding_shard_name(spec, shard, name);
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "sharded: chunk %" PRIu64 " not found (not in "
                             "minishard %" PRIu64 " of %s)",
                             id, minishard, name);
    }
    return cnx_sharded_read_entry(spec, shard, &hit, cnx_sharded_store_read,
                                  src, bytes, len);
}

/*
 * Fetch the stored bytes of chunk g of sharded scale s: its grid position
 * -> compressed Morton chunk id -> cnx_sharded_read_chunk over the layer's
 * store (ranged reads of the shard "<key>/<shard>.shard", its minishard
 * index kept in the layer's cache). CNX_ENOTFOUND when the shard file or
 * the chunk is absent.
 * A raw chunk at the upper bound may be stored whole rather than truncated
 * (writers differ): if its size says so, *cbox is widened to the whole
 * chunk and the caller copies only the part inside the scale.
 */
static int sharded_fetch(cnx_layer *layer, int s, const cnx_grid *grid,
                         const int64_t g[3], cnx_box *cbox, uint8_t **bytes,
                         size_t *len)
{
    const cnx_scale *sc = &layer->info.scales[s];
    cnx_sharded_source src = {layer->store, sc->key};
    uint64_t pos[3], shape[3], id;
    int64_t counts[3];
    int rc;

    cnx_grid_counts(grid, counts);
    for (int i = 0; i < 3; i++) {
        assert(g[i] >= 0 && g[i] < counts[i]);
        pos[i] = (uint64_t)g[i];
        shape[i] = (uint64_t)counts[i];
    }
    rc = cnx_sharding_morton(pos, shape, &id);
    if (rc != 0)
        return rc;
    rc = sharded_read(layer, s, id, &src, bytes, len);
    if (rc != 0 && rc != CNX_ENOTFOUND)
        cnx_error_wrap("scale %s: chunk %" PRId64 ",%" PRId64 ",%" PRId64,
                       sc->key, g[0], g[1], g[2]);
    if (rc == 0 && *len > chunk_read_limit(&layer->info, s)) {
        free(*bytes);
        *bytes = NULL;
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "scale %s: chunk %" PRId64 ",%" PRId64 ",%" PRId64
                             " of %zu bytes is over the limit",
                             sc->key, g[0], g[1], g[2], *len);
    }
    if (rc == 0 && sc->encoding == CNX_ENC_RAW) {
        cnx_volume whole = {layer->info.dtype, *cbox, layer->info.channels,
                            NULL};
        for (int i = 0; i < 3; i++)
            whole.box.max[i] = whole.box.min[i] + sc->chunk[i];
        if (*len == cnx_volume_bytes(&whole))
            *cbox = whole.box;
    }
    return rc;
}

int cnx_layer_read(cnx_layer *layer, int s, const cnx_box *box,
                   unsigned flags, cnx_expect_fn expect, void *expect_ctx,
                   cnx_object_list *read, cnx_volume **out)
{
    cnx_store_get_req *pre = NULL;
    size_t npre = 0, ipre = 0;
    const cnx_layer_info *info = &layer->info;
    cnx_volume *vol = NULL, *chunk = NULL;
    cnx_grid grid;
    cnx_box bounds;
    int64_t lo[3], hi[3], g[3];
    int rc, sharded;

    *out = NULL;
    if (s < 0 || s >= info->nscales)
        return cnx_error_set(CNX_EINVAL, 0, "scale %d out of range", s);
    sharded = info->scales[s].sharded;
    grid = cnx_info_grid(info, s);
    bounds = cnx_grid_bounds(&grid);
    if (cnx_box_empty(box) || !cnx_box_contains(&bounds, box))
        return cnx_error_set(CNX_ERANGE, 0,
                             "read box [%" PRId64 ",%" PRId64 ",%" PRId64
                             ")-[%" PRId64 ",%" PRId64 ",%" PRId64
                             ") is empty or outside the layer",
                             box->min[0], box->min[1], box->min[2],
                             box->max[0], box->max[1], box->max[2]);
    rc = cnx_volume_new(&vol, info->dtype, box, info->channels);
    if (rc != 0)
        return rc;
    cnx_grid_chunk_range(&grid, box, lo, hi);
    if (!sharded && cnx_store_is_remote(layer->store)) {
        rc = prefetch(layer, s, lo, hi, expect, expect_ctx, &pre, &npre);
        if (rc != 0)
            goto fail;
    }
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++) {
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                cnx_box cbox = cnx_grid_chunk_box(&grid, g);
                char name[256];
                const char *want;
                uint8_t *bytes = NULL;
                size_t len = 0;

                rc = cnx_layer_chunk_name(info, s, &cbox, name, sizeof(name));
                if (rc != 0)
                    goto fail;
                want = expect ? expect(expect_ctx, name) : NULL;
                if (sharded) {
                    /* A chunk inside a shard keeps its chunk name; its
                     * digest is of its bytes as the shard holds them. */
                    rc = sharded_fetch(layer, s, &grid, g, &cbox, &bytes, &len);
                    if (rc == 0 && want != NULL)
                        rc = cnx_digest_check(bytes, len, want, name);
                    if (rc != 0) {
                        free(bytes);
                        bytes = NULL;
                    }
                } else {
                    if (pre != NULL) {
                        /* Fetched concurrently above, in this same order. */
                        cnx_store_get_req *r = &pre[ipre++];
                        assert(ipre <= npre);
                        bytes = r->data;
                        len = r->len;
                        r->data = NULL;
                        rc = r->rc == 0 ? 0
                                        : cnx_error_set(r->rc, r->retriable,
                                                        "%s", r->message);
                    } else if (want != NULL)
                        rc = cnx_store_get_verified(layer->store, name, want,
                                                    chunk_read_limit(info, s),
                                                    &bytes, &len);
                    else
                        rc = cnx_store_get(layer->store, name,
                                           chunk_read_limit(info, s), &bytes,
                                           &len);
                }
                if (rc == CNX_ENOTFOUND && (flags & CNX_READ_FILL_MISSING))
                    continue;
                if (rc != 0)
                    goto fail;
                if (read != NULL) {
                    char digest[CNX_DIGEST_LEN];
                    if (want != NULL)
                        snprintf(digest, sizeof(digest), "%s", want);
                    else
                        cnx_digest(bytes, len, digest);
                    rc = cnx_object_list_add(read, name, digest);
                    if (rc != 0) {
                        free(bytes);
                        goto fail;
                    }
                    read->items[read->count - 1].bytes = len;
                }
                if (cnx_box_equal(&cbox, box)) {
                    rc = cnx_chunk_decode(info, s, bytes, len, vol);
                } else if (info->scales[s].encoding == CNX_ENC_RAW) {
                    /* Raw bytes are already a volume: view them in place
                     * (after the size check) and copy the overlap once. */
                    cnx_volume view = {info->dtype, cbox, info->channels,
                                       bytes};
                    if (len != cnx_volume_bytes(&view)) {
                        rc = cnx_chunk_decode(info, s, bytes, len, &view);
                    } else {
                        rc = cnx_volume_copy(vol, &view);
                    }
                } else {
                    rc = cnx_volume_new(&chunk, info->dtype, &cbox,
                                        info->channels);
                    if (rc == 0)
                        rc = cnx_chunk_decode(info, s, bytes, len, chunk);
                    if (rc == 0)
                        rc = cnx_volume_copy(vol, chunk);
                    cnx_volume_free(chunk);
                    chunk = NULL;
                }
                free(bytes);
                if (rc != 0)
                    goto fail;
            }
        }
    }
    prefetch_free(pre, npre);
    *out = vol;
    return 0;
fail:
    prefetch_free(pre, npre);
    cnx_volume_free(vol);
    return rc;
}

/* Chunk g of sharded scale s named name ("<key>/<box>"), if it names one
 * exactly: the box must be that chunk's box inside the scale. */
static int sharded_chunk_of(const cnx_layer_info *info, const char *name,
                            int *scale, int64_t g[3])
{
    for (int s = 0; s < info->nscales; s++) {
        const cnx_scale *sc = &info->scales[s];
        size_t k = strlen(sc->key);
        cnx_grid grid;
        cnx_box box, want;
        int64_t counts[3];
        if (!sc->sharded || strncmp(name, sc->key, k) != 0 || name[k] != '/')
            continue;
        if (cnx_box_parse(name + k + 1, &box) != 0)
            return cnx_error_set(CNX_ENOTFOUND, 0,
                                 "%s: not a chunk of sharded scale %s", name,
                                 sc->key);
        grid = cnx_scale_grid(sc);
        cnx_grid_counts(&grid, counts);
        for (int i = 0; i < 3; i++) {
            int64_t rel = box.min[i] - sc->voxel_offset[i];
            g[i] = rel >= 0 ? rel / sc->chunk[i] : -1;
            if (g[i] < 0 || g[i] >= counts[i])
                return cnx_error_set(CNX_ENOTFOUND, 0,
                                     "%s: outside sharded scale %s", name,
                                     sc->key);
        }
        want = cnx_grid_chunk_box(&grid, g);
        if (!cnx_box_equal(&want, &box))
            return cnx_error_set(CNX_ENOTFOUND, 0,
                                 "%s: not a chunk of sharded scale %s", name,
                                 sc->key);
        *scale = s;
        return 0;
    }
    return CNX_ENOTFOUND;
}

int cnx_layer_object_digest(cnx_store *store, const char *name,
                            char digest[CNX_DIGEST_LEN], uint64_t *size)
{
    cnx_layer *layer = NULL;
    uint8_t *bytes = NULL;
    size_t len = 0;
    int64_t g[3];
    int s = -1;
    int rc = cnx_store_get(store, name, 0, &bytes, &len);
    if (rc == CNX_ENOTFOUND && strchr(name, '/') != NULL) {
        /* Not stored as an object: a chunk inside a shard, if the layer
         * has an info with a sharded scale of that key. */
        char why[sizeof(cnx_error_last()->message)];
        char info_digest[CNX_DIGEST_LEN];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        rc = layer_new(&layer, store, 1);
        if (rc == 0 && read_info(layer, &layer->info, info_digest) == 0 &&
            sharded_chunk_of(&layer->info, name, &s, g) == 0) {
            cnx_grid grid = cnx_info_grid(&layer->info, s);
            cnx_box cbox = cnx_grid_chunk_box(&grid, g);
            rc = sharded_fetch(layer, s, &grid, g, &cbox, &bytes, &len);
        } else if (rc == 0) {
            rc = cnx_error_set(CNX_ENOTFOUND, 0, "%s", why);
        }
        cnx_layer_free(layer);
    }
    if (rc == 0) {
        cnx_digest(bytes, len, digest);
        if (size != NULL)
            *size = (uint64_t)len;
    }
    free(bytes);
    return rc;
}

int cnx_layer_write(cnx_layer *layer, int s, const cnx_volume *vol,
                    cnx_object_list *written)
{
    const cnx_layer_info *info = &layer->info;
    cnx_grid grid;
    int64_t lo[3], hi[3], g[3];
    int rc;

    rc = check_unsharded(info, s);
    if (rc != 0)
        return rc;
    rc = check_chunk_volume(info, s, vol);
    if (rc != 0)
        return rc;
    grid = cnx_info_grid(info, s);
    if (!cnx_grid_is_aligned(&grid, &vol->box))
        return cnx_error_set(CNX_EINVAL, 0,
                             "write box [%" PRId64 ",%" PRId64 ",%" PRId64
                             ")-[%" PRId64 ",%" PRId64 ",%" PRId64
                             ") is not aligned to the chunk grid of scale %s",
                             vol->box.min[0], vol->box.min[1], vol->box.min[2],
                             vol->box.max[0], vol->box.max[1], vol->box.max[2],
                             info->scales[s].key);
    cnx_grid_chunk_range(&grid, &vol->box, lo, hi);
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++) {
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                cnx_box cbox = cnx_grid_chunk_box(&grid, g);
                cnx_volume *chunk = NULL;
                const cnx_volume *src = vol;
                char name[256], digest[CNX_DIGEST_LEN];
                uint8_t *bytes = NULL;
                size_t len = 0;

                if (!cnx_box_equal(&cbox, &vol->box)) {
                    rc = cnx_volume_crop(&chunk, vol, &cbox);
                    if (rc != 0)
                        return rc;
                    src = chunk;
                }
                rc = cnx_chunk_encode(info, s, src, &bytes, &len);
                cnx_volume_free(chunk);
                if (rc == 0)
                    rc = cnx_layer_chunk_name(info, s, &cbox, name,
                                              sizeof(name));
                if (rc == 0)
                    rc = cnx_store_put(layer->store, name, bytes, len, digest);
                free(bytes);
                if (rc == 0 && written != NULL) {
                    rc = cnx_object_list_add(written, name, digest);
                    if (rc == 0)
                        written->items[written->count - 1].bytes = len;
                }
                if (rc != 0)
                    return rc;
            }
        }
    }
    return 0;
}

int cnx_info_find_scale(const cnx_layer_info *info, const char *key)
{
    for (int i = 0; i < info->nscales; i++)
        if (strcmp(info->scales[i].key, key) == 0)
            return i;
    return -1;
}

static int scale_equal(const cnx_scale *a, const cnx_scale *b)
{
    if (strcmp(a->key, b->key) != 0 || a->encoding != b->encoding ||
        a->sharded != b->sharded ||
        (a->sharded && memcmp(&a->sharding, &b->sharding,
                              sizeof(a->sharding)) != 0))
        return 0;
    for (int i = 0; i < 3; i++) {
        if (a->size[i] != b->size[i] || a->resolution[i] != b->resolution[i] ||
            a->voxel_offset[i] != b->voxel_offset[i] ||
            a->chunk[i] != b->chunk[i] ||
            (a->encoding == CNX_ENC_CSEG && a->cseg_block[i] != b->cseg_block[i]))
            return 0;
    }
    return 1;
}

/* Read and parse the stored info; *digest gets the digest of its bytes. */
static int read_info(cnx_layer *layer, cnx_layer_info *info,
                     char digest[CNX_DIGEST_LEN])
{
    uint8_t *text = NULL;
    size_t len = 0;
    int rc = cnx_store_get(layer->store, "info", 1 << 20, &text, &len);
    if (rc == 0) {
        cnx_digest(text, len, digest);
        rc = cnx_info_parse(info, (const char *)text, len);
    }
    free(text);
    return rc;
}

int cnx_layer_reload(cnx_layer *layer)
{
    char digest[CNX_DIGEST_LEN];
    cnx_layer_info info;
    int rc = read_info(layer, &info, digest);
    if (rc == 0) {
        layer->info = info;
        shard_cache_clear(&layer->shards);
    }
    return rc;
}

int cnx_layer_add_scale(cnx_layer *layer, const cnx_scale *scale, int *index)
{
    for (int attempt = 0; attempt < 1000; attempt++) {
        char digest[CNX_DIGEST_LEN], *json = NULL;
        cnx_layer_info info;
        int rc = read_info(layer, &info, digest), at;
        if (rc != 0)
            return rc;
        at = cnx_info_find_scale(&info, scale->key);
        if (at >= 0) {
            layer->info = info;
            shard_cache_clear(&layer->shards);
            *index = at;
            if (!scale_equal(&info.scales[at], scale))
                return cnx_error_set(CNX_EIMMUTABLE, 0,
                                     "info: scale '%s' exists with other "
                                     "geometry",
                                     scale->key);
            return 0;
        }
        if (info.nscales >= CNX_MAX_SCALES)
            return cnx_error_set(CNX_ERANGE, 0, "info: already %d scales",
                                 CNX_MAX_SCALES);
        info.scales[info.nscales++] = *scale;
        rc = check_info(&info);
        if (rc == 0)
            rc = cnx_info_to_json(&info, &json);
        if (rc == 0)
            rc = cnx_store_swap(layer->store, "info", digest, json,
                                strlen(json));
        free(json);
        if (rc == CNX_ECONFLICT)
            continue; /* another task added a scale first: re-read */
        if (rc != 0)
            return rc;
        layer->info = info;
        shard_cache_clear(&layer->shards);
        *index = info.nscales - 1;
        return 0;
    }
    return cnx_error_set(CNX_ECONFLICT, 1, "info: too many concurrent "
                         "updates while adding scale '%s'", scale->key);
}

int cnx_layer_digests(cnx_layer *layer, int s, const cnx_box *box,
                      cnx_object_list *out)
{
    const cnx_layer_info *info = &layer->info;
    cnx_grid grid;
    int64_t lo[3], hi[3], g[3];
    int rc;

    if (s < 0 || s >= info->nscales)
        return cnx_error_set(CNX_EINVAL, 0, "scale %d out of range", s);
    grid = cnx_info_grid(info, s);
    cnx_grid_chunk_range(&grid, box, lo, hi);
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++) {
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++) {
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++) {
                cnx_box cbox = cnx_grid_chunk_box(&grid, g);
                char name[256], digest[CNX_DIGEST_LEN];
                uint8_t *bytes = NULL;
                size_t len = 0;
                rc = cnx_layer_chunk_name(info, s, &cbox, name, sizeof(name));
                if (rc == 0 && info->scales[s].sharded)
                    rc = sharded_fetch(layer, s, &grid, g, &cbox, &bytes,
                                       &len);
                else if (rc == 0)
                    rc = cnx_store_get(layer->store, name,
                                       chunk_read_limit(info, s), &bytes,
                                       &len);
                if (rc != 0)
                    return rc;
                cnx_digest(bytes, len, digest);
                free(bytes);
                rc = cnx_object_list_add(out, name, digest);
                if (rc != 0)
                    return rc;
                out->items[out->count - 1].bytes = len;
            }
        }
    }
    return 0;
}
