/*
 * mesh_draco.cc - cnx_mesh_draco_encode() (cnx/mesh.h) on Debian's
 * libdraco. The one C++ file of libcnx: Draco is a C++ library with no C
 * interface, so this file wraps the few calls the multi-resolution mesh
 * writer needs in a C function (docs/architecture.md). Pure, like the
 * other kernels: buffers in, buffers out. No exception leaves it.
 */
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include <draco/compression/config/compression_shared.h>
#include <draco/compression/encode.h>
#include <draco/mesh/mesh.h>

#include "cnx/error.h"
#include "cnx/mesh.h"

static int encode(const uint32_t *pos, size_t nverts, const uint32_t *tris,
                  size_t ntris, uint8_t **out, size_t *len)
{
    draco::Mesh mesh;
    draco::GeometryAttribute ga;
    ga.Init(draco::GeometryAttribute::POSITION, nullptr, 3, draco::DT_UINT32,
            false, 3 * sizeof(uint32_t), 0);
    mesh.set_num_points(static_cast<draco::PointIndex::ValueType>(nverts));
    int att = mesh.AddAttribute(ga, true, static_cast<uint32_t>(nverts));
    if (att < 0)
        return cnx_error_set(CNX_ENOMEM, 0, "draco: out of memory");
    draco::PointAttribute *pa = mesh.attribute(att);
    for (size_t i = 0; i < nverts; i++)
        pa->SetAttributeValue(
            draco::AttributeValueIndex(static_cast<uint32_t>(i)), pos + 3 * i);
    mesh.SetNumFaces(ntris);
    for (size_t t = 0; t < ntris; t++) {
        draco::Mesh::Face f;
        for (int c = 0; c < 3; c++)
            f[c] = draco::PointIndex(tris[3 * t + c]);
        mesh.SetFace(draco::FaceIndex(static_cast<uint32_t>(t)), f);
    }
    draco::Encoder enc;
    enc.SetSpeedOptions(5, 5);
    enc.SetEncodingMethod(draco::MESH_EDGEBREAKER_ENCODING);
    draco::EncoderBuffer buf;
    draco::Status s = enc.EncodeMeshToBuffer(mesh, &buf);
    if (!s.ok())
        return cnx_error_set(CNX_EIO, 0, "draco: %s", s.error_msg());
    *out = static_cast<uint8_t *>(malloc(buf.size() ? buf.size() : 1));
    if (*out == nullptr)
        return cnx_error_set(CNX_ENOMEM, 0, "draco: out of memory");
    memcpy(*out, buf.data(), buf.size());
    *len = buf.size();
    return 0;
}

extern "C" int cnx_mesh_draco_encode(const uint32_t *pos, size_t nverts,
                                     const uint32_t *tris, size_t ntris,
                                     int bits, uint8_t **out, size_t *len)
{
    if (out != nullptr)
        *out = nullptr;
    if (len != nullptr)
        *len = 0;
    if (pos == nullptr || tris == nullptr || out == nullptr || len == nullptr ||
        ntris == 0 || bits < 1 || bits > 31 || nverts > UINT32_MAX ||
        ntris > UINT32_MAX / 3)
        return cnx_error_set(CNX_EINVAL, 0, "draco: invalid arguments");
    for (size_t i = 0; i < 3 * nverts; i++)
        if (pos[i] >> bits)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "draco: vertex %zu: coordinate %u is not "
                                 "below 2^%d",
                                 i / 3, pos[i], bits);
    for (size_t i = 0; i < 3 * ntris; i++)
        if (tris[i] >= nverts)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "draco: triangle %zu: index %u out of range",
                                 i / 3, tris[i]);
    try {
        return encode(pos, nverts, tris, ntris, out, len);
    } catch (const std::bad_alloc &) {
        return cnx_error_set(CNX_ENOMEM, 0, "draco: out of memory");
    } catch (...) {
        return cnx_error_set(CNX_EIO, 0, "draco: the encoder failed");
    }
}
