/*
 * volume.c - typed volume buffers.
 *
 * A volume owns one calloc'd block: voxels(box) * channels * dtype size
 * bytes, x fastest. Copies between volumes work row by row (memcpy of x
 * runs) over the intersection of their boxes, so a read that assembles a box
 * from many chunks costs one pass over the bytes.
 */
#include "cnx/volume.h"

#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

size_t cnx_dtype_size(cnx_dtype dtype)
{
    switch (dtype) {
    case CNX_DT_UINT8: return 1;
    case CNX_DT_UINT16: return 2;
    case CNX_DT_UINT32: return 4;
    case CNX_DT_UINT64: return 8;
    case CNX_DT_FLOAT32: return 4;
    }
    return 0;
}

const char *cnx_dtype_name(cnx_dtype dtype)
{
    switch (dtype) {
    case CNX_DT_UINT8: return "uint8";
    case CNX_DT_UINT16: return "uint16";
    case CNX_DT_UINT32: return "uint32";
    case CNX_DT_UINT64: return "uint64";
    case CNX_DT_FLOAT32: return "float32";
    }
    return NULL;
}

int cnx_dtype_parse(const char *name, cnx_dtype *out)
{
    static const cnx_dtype all[] = {CNX_DT_UINT8, CNX_DT_UINT16, CNX_DT_UINT32,
                                    CNX_DT_UINT64, CNX_DT_FLOAT32};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        if (strcmp(name, cnx_dtype_name(all[i])) == 0) {
            *out = all[i];
            return 0;
        }
    }
    return cnx_error_set(CNX_EINVAL, 0, "unknown data type '%s'", name);
}

int cnx_volume_new(cnx_volume **out, cnx_dtype dtype, const cnx_box *box,
                   int64_t channels)
{
    cnx_volume *vol;
    size_t esize = cnx_dtype_size(dtype);
    int64_t voxels;

    *out = NULL;
    if (esize == 0)
        return cnx_error_set(CNX_EINVAL, 0, "volume: unknown data type %d",
                             (int)dtype);
    if (cnx_box_empty(box) || channels < 1)
        return cnx_error_set(CNX_EINVAL, 0,
                             "volume: empty box or channels < 1");
    voxels = cnx_box_voxels(box);
    if (voxels > ((int64_t)1 << 40) / (int64_t)esize / channels)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "volume: %lld voxels x %lld channels is too big",
                             (long long)voxels, (long long)channels);
    vol = calloc(1, sizeof(*vol));
    if (vol == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "volume: out of memory");
    vol->data = calloc((size_t)(voxels * channels), esize);
    if (vol->data == NULL) {
        free(vol);
        return cnx_error_set(CNX_ENOMEM, 0, "volume: out of memory for %lld "
                             "voxels", (long long)voxels);
    }
    vol->dtype = dtype;
    vol->box = *box;
    vol->channels = channels;
    *out = vol;
    return 0;
}

void cnx_volume_free(cnx_volume *vol)
{
    if (vol == NULL)
        return;
    free(vol->data);
    free(vol);
}

int64_t cnx_volume_voxels(const cnx_volume *vol)
{
    return cnx_box_voxels(&vol->box);
}

size_t cnx_volume_bytes(const cnx_volume *vol)
{
    return (size_t)cnx_volume_voxels(vol) * (size_t)vol->channels *
           cnx_dtype_size(vol->dtype);
}

int cnx_volume_copy(cnx_volume *dst, const cnx_volume *src)
{
    const size_t esize = cnx_dtype_size(src->dtype);
    cnx_box in = cnx_box_intersect(&dst->box, &src->box);
    size_t run;

    if (dst->dtype != src->dtype || dst->channels != src->channels)
        return cnx_error_set(CNX_EINVAL, 0,
                             "volume copy: type or channel mismatch");
    if (cnx_box_empty(&in))
        return 0;
    run = (size_t)(in.max[0] - in.min[0]) * esize;
    for (int64_t c = 0; c < src->channels; c++) {
        for (int64_t z = in.min[2]; z < in.max[2]; z++) {
            for (int64_t y = in.min[1]; y < in.max[1]; y++) {
                int64_t di = cnx_volume_index(dst, in.min[0], y, z, c);
                int64_t si = cnx_volume_index(src, in.min[0], y, z, c);
                memcpy((uint8_t *)dst->data + (size_t)di * esize,
                       (const uint8_t *)src->data + (size_t)si * esize, run);
            }
        }
    }
    return 0;
}

int cnx_volume_crop(cnx_volume **out, const cnx_volume *src,
                    const cnx_box *box)
{
    int rc;
    *out = NULL;
    if (!cnx_box_contains(&src->box, box) || cnx_box_empty(box))
        return cnx_error_set(CNX_ERANGE, 0,
                             "volume crop: box not inside the volume");
    rc = cnx_volume_new(out, src->dtype, box, src->channels);
    if (rc != 0)
        return rc;
    return cnx_volume_copy(*out, src);
}
