/*
 * cnx/cseg.h - Neuroglancer compressed_segmentation codec (pure kernel).
 *
 * Encodes uint32 or uint64 label chunks block by block into the format that
 * Neuroglancer, CloudVolume and TensorStore read, byte for byte as the
 * reference encoder writes it (see docs/formats.md and REFERENCE.md): a
 * uint32 per channel with that channel's offset in words; per channel a
 * 64-bit header per block (x fastest), then for each block its packed
 * indices followed by its sorted value table, an identical earlier table
 * being re-used instead of written again. Buffers in, buffers out; no I/O.
 */
#ifndef CNX_CSEG_H
#define CNX_CSEG_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Encode labels (x fastest, then y, z, channel).
 *
 * The output depends only on the label values (never on addresses), so the
 * same chunk always gives the same bytes; they are little-endian words.
 *
 * @param[out] out      encoded bytes, caller frees with free(); NULL on error
 * @param[out] out_len  their length (a multiple of 4)
 * @param labels    uint32_t or uint64_t array, size[0]*size[1]*size[2]*channels
 * @param dtype     CNX_DT_UINT32 or CNX_DT_UINT64
 * @param size      chunk extent in voxels (each >= 1)
 * @param channels  >= 1
 * @param block     block size (Neuroglancer uses 8,8,8), each >= 1, at most
 *                  2^24 voxels in all
 * @return 0; CNX_EINVAL for a bad type or size; CNX_ERANGE if an offset does
 *         not fit the format's 24-bit table field; CNX_ENOMEM.
 * Thread-safety: reentrant; no shared state.
 */
int cnx_cseg_encode(uint8_t **out, size_t *out_len, const void *labels,
                    cnx_dtype dtype, const int64_t size[3], int64_t channels,
                    const int64_t block[3]);

/**
 * Decode into labels (x fastest, then y, z, channel), checking every offset
 * and bit width against the buffer, so a truncated or corrupt chunk fails
 * cleanly with CNX_ECORRUPT and a message saying which block and why
 * ("compressed_segmentation: block (2,0,1): table offset 9123 beyond end
 * (4100 words)"). Any valid placement of values and tables is accepted, not
 * only the reference encoder's; indices of voxels past the chunk edge are
 * not read.
 *
 * @param labels  output array of size[0]*size[1]*size[2]*channels elements;
 *                its contents are unspecified after an error
 * @param data    the encoded chunk (borrowed; any alignment)
 * @param len     its length in bytes
 * @return 0; CNX_EINVAL for bad arguments (as for cnx_cseg_encode);
 *         CNX_ECORRUPT (fatal) for bad data; CNX_ENOMEM.
 * Thread-safety: reentrant; no shared state.
 */
int cnx_cseg_decode(void *labels, const uint8_t *data, size_t len,
                    cnx_dtype dtype, const int64_t size[3], int64_t channels,
                    const int64_t block[3]);

#ifdef __cplusplus
}
#endif
#endif
