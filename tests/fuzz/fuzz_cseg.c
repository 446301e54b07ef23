/*
 * fuzz_cseg.c - compressed_segmentation chunks (cnx_cseg_decode), read
 * from any store that holds a segmentation layer. The first 8 bytes
 * choose the chunk: byte 0 the type (uint32 or uint64), bytes 1-3 the
 * size (1..20 per axis), byte 4 the channels (1..3), bytes 5-7 the block
 * (1..16 per axis); the rest is the encoded chunk. A chunk that decodes
 * must re-encode (cnx_cseg_encode) to bytes that decode to the same
 * labels.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cseg.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cnx_dtype dtype;
    int64_t dims[3], block[3], channels;
    size_t elem, count, bytes, enc_len = 0;
    uint8_t *enc = NULL;
    void *labels, *again;
    if (size < 8)
        return 0;
    dtype = (data[0] & 1) ? CNX_DT_UINT64 : CNX_DT_UINT32;
    elem = dtype == CNX_DT_UINT64 ? 8 : 4;
    for (int i = 0; i < 3; i++) {
        dims[i] = 1 + data[1 + i] % 20;
        block[i] = 1 + data[5 + i] % 16;
    }
    channels = 1 + data[4] % 3;
    count = (size_t)(dims[0] * dims[1] * dims[2] * channels);
    bytes = count * elem;
    labels = malloc(bytes);
    again = malloc(bytes);
    if (labels == NULL || again == NULL)
        abort();
    if (cnx_cseg_decode(labels, data + 8, size - 8, dtype, dims, channels,
                        block) == 0) {
        if (cnx_cseg_encode(&enc, &enc_len, labels, dtype, dims, channels,
                            block) == 0) {
            if (cnx_cseg_decode(again, enc, enc_len, dtype, dims, channels,
                                block) != 0 ||
                memcmp(labels, again, bytes) != 0)
                abort(); /* our own encoding does not decode back */
        }
        free(enc);
    }
    free(again);
    free(labels);
    return 0;
}
