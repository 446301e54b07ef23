/*
 * fuzz_params.c - stage parameters, the "parameters" object of a task
 * that each stage's kernel reads (cnx_montage_params_parse,
 * cnx_segment_params_parse, cnx_synapse_params_parse). Byte 0 picks the
 * stage; the rest is the JSON. Parameters that parse must pass the same
 * stage's range check (one table of bounds, two users). The segmentation
 * kernel's lengths are nm and its check also bounds them in voxels at the
 * resolution (not a key: the stage sets it from the layer): parsed values
 * must pass at the coarsest resolution, and at the default 8 nm fail, if
 * at all, only on a voxel limit; what passes has a halo and a mode.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/montage_io.h"
#include "cnx/segment_io.h"
#include "cnx/synapse_io.h"
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
    char *json;
    if (size < 1)
        return 0;
    json = fuzz_strndup(data + 1, size - 1);
    switch (data[0] % 3) {
    case 0: {
        cnx_montage_params p;
        cnx_montage_params_default(&p);
        if (cnx_montage_params_parse(json, &p) == 0 &&
            cnx_montage_params_check(&p) != 0)
            abort();
        break;
    }
    case 1: {
        cnx_segment_params p, coarse;
        cnx_segment_params_default(&p);
        if (cnx_segment_params_parse(&p, json) != 0)
            break;
        coarse = p;
        coarse.resolution[0] = coarse.resolution[1] = 1e6;
        coarse.resolution[2] = 1e6;
        if (cnx_segment_params_check(&coarse) != 0)
            abort();
        if (cnx_segment_params_check(&p) != 0) {
            if (strstr(cnx_error_last()->message,
                       "voxels at this resolution") == NULL)
                abort();
            break;
        }
        if (cnx_segment_halo(&p) < 8 ||
            cnx_segment_mode_of(&p) == CNX_SEGMENT_MODE_AUTO ||
            cnx_segment_min_voxels(&p) < 0 ||
            cnx_segment_min_voxels(&p) > CNX_SEGMENT_MAX_VOXELS)
            abort();
        break;
    }
    default: {
        cnx_synapse_params p;
        cnx_synapse_params_default(&p);
        if (cnx_synapse_params_parse(json, &p) == 0 &&
            cnx_synapse_params_check(&p) != 0)
            abort();
        break;
    }
    }
    free(json);
    return 0;
}
