/*
 * fuzz_info.c - a precomputed layer's `info` document (cnx_info_parse),
 * read from every store, ours or a third party's. What parses must
 * serialise (cnx_info_to_json) to a fixed point, and every scale's grid
 * must pass its own check.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/geom.h"
#include "cnx/precomputed.h"
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
    cnx_layer_info info, again;
    char *json = NULL, *json2 = NULL;
    memset(&info, 0, sizeof(info));
    memset(&again, 0, sizeof(again));
    if (cnx_info_parse(&info, (const char *)data, size) != 0)
        return 0;
    for (int s = 0; s < info.nscales; s++) {
        cnx_grid grid = cnx_info_grid(&info, s);
        int64_t counts[3];
        if (cnx_grid_check(&grid) != 0)
            abort(); /* a parsed scale whose grid is invalid */
        cnx_grid_counts(&grid, counts);
    }
    if (cnx_info_to_json(&info, &json) != 0)
        abort();
    if (cnx_info_parse(&again, json, strlen(json)) != 0 ||
        cnx_info_to_json(&again, &json2) != 0 || strcmp(json, json2) != 0)
        abort(); /* canonical form is not a fixed point */
    free(json2);
    free(json);
    return 0;
}
