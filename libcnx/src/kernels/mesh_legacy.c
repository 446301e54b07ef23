/*
 * mesh_legacy.c - Neuroglancer precomputed legacy mesh fragments.
 *
 * A fragment is a uint32le vertex count n, then n float32le x, y, z, then
 * uint32le vertex indices, three per triangle, to the end of the buffer
 * (the triangle count is implied by the length). Bytes are written and
 * read one by one, so the result does not depend on the host's byte
 * order. Decoding trusts nothing: lengths and indices are checked before
 * anything is allocated or used.
 */
#include "cnx/mesh.h"

#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

int cnx_mesh_legacy_encode(const cnx_mesh *m, uint8_t **out, size_t *len)
{
    uint8_t *buf, *p;
    size_t n;
    if (out != NULL)
        *out = NULL;
    if (len != NULL)
        *len = 0;
    if (m == NULL || out == NULL || len == NULL ||
        (m->nverts > 0 && m->verts == NULL) ||
        (m->ntris > 0 && m->tris == NULL))
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    if (m->nverts > UINT32_MAX || m->ntris > SIZE_MAX / 12 - m->nverts)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "mesh: %zu vertices, %zu triangles: too many "
                             "for a legacy fragment",
                             m->nverts, m->ntris);
    for (size_t i = 0; i < 3 * m->ntris; i++)
        if (m->tris[i] >= m->nverts)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "mesh: triangle %zu has index %u of %zu "
                                 "vertices",
                                 i / 3, m->tris[i], m->nverts);
    n = 4 + 12 * (m->nverts + m->ntris);
    buf = malloc(n);
    if (buf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    put_u32(buf, (uint32_t)m->nverts);
    p = buf + 4;
    for (size_t i = 0; i < 3 * m->nverts; i++, p += 4) {
        uint32_t bits;
        memcpy(&bits, &m->verts[i], 4);
        put_u32(p, bits);
    }
    for (size_t i = 0; i < 3 * m->ntris; i++, p += 4)
        put_u32(p, m->tris[i]);
    *out = buf;
    *len = n;
    return 0;
}

int cnx_mesh_legacy_decode(const uint8_t *buf, size_t len, cnx_mesh *out)
{
    size_t nv, nt, rest;
    const uint8_t *p;
    if (out != NULL)
        memset(out, 0, sizeof(*out));
    if ((buf == NULL && len > 0) || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "mesh: NULL argument");
    if (len < 4)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "mesh: legacy fragment of %zu bytes has no "
                             "vertex count",
                             len);
    nv = get_u32(buf);
    if (nv > (len - 4) / 12)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "mesh: legacy fragment of %zu bytes is short "
                             "of its %zu vertices (%zu bytes)",
                             len, nv, 4 + 12 * nv);
    rest = len - 4 - 12 * nv;
    if (rest % 12 != 0)
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "mesh: legacy fragment's triangle indices are "
                             "%zu bytes, not a multiple of 12",
                             rest);
    nt = rest / 12;
    p = buf + 4 + 12 * nv;
    for (size_t i = 0; i < 3 * nt; i++)
        if (get_u32(p + 4 * i) >= nv)
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "mesh: legacy fragment's triangle %zu has "
                                 "index %u of %zu vertices",
                                 i / 3, get_u32(p + 4 * i), nv);
    if (nv > 0) {
        out->verts = malloc(3 * nv * sizeof(*out->verts));
        if (out->verts == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    }
    if (nt > 0) {
        out->tris = malloc(3 * nt * sizeof(*out->tris));
        if (out->tris == NULL) {
            cnx_mesh_free(out);
            return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
        }
    }
    for (size_t i = 0; i < 3 * nv; i++) {
        const uint32_t bits = get_u32(buf + 4 + 4 * i);
        memcpy(&out->verts[i], &bits, 4);
    }
    for (size_t i = 0; i < 3 * nt; i++)
        out->tris[i] = get_u32(p + 4 * i);
    out->nverts = nv;
    out->ntris = nt;
    return 0;
}
