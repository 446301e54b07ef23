/*
 * fuzz_mesh_legacy.c - Neuroglancer legacy mesh fragments
 * (cnx_mesh_legacy_decode), which the mesh-manifest stage reads back from
 * a store. A fragment that decodes must encode to the same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/mesh.h"
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
    cnx_mesh m;
    memset(&m, 0, sizeof(m));
    if (cnx_mesh_legacy_decode(data, size, &m) == 0) {
        uint8_t *enc = NULL;
        size_t len = 0;
        for (size_t i = 0; i < 3 * m.ntris; i++)
            if (m.tris[i] >= m.nverts)
                abort(); /* an index out of range got through */
        if (cnx_mesh_legacy_encode(&m, &enc, &len) != 0 || len != size ||
            memcmp(enc, data, size) != 0)
            abort(); /* not the bytes it was decoded from */
        free(enc);
    }
    cnx_mesh_free(&m);
    return 0;
}
