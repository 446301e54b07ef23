/*
 * fuzz_tileset.c - montage tile sets (cnx_tileset_parse), what
 * cnx-ingest --tiles and the montage worker read. The tolerance on
 * nominal positions is the default; a set that parses must serialise
 * (cnx_tileset_to_json) to a fixed point.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/tileset.h"
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
    cnx_tileset *ts = NULL, *again = NULL;
    char *json = NULL, *json2 = NULL;
    if (cnx_tileset_parse(&ts, (const char *)data, size, "tiles.json",
                          CNX_TILESET_MAX_ERROR) != 0)
        return 0;
    if (cnx_tileset_to_json(ts, &json) != 0)
        abort();
    if (cnx_tileset_parse(&again, json, strlen(json), "tiles.json",
                          CNX_TILESET_MAX_ERROR) != 0 ||
        cnx_tileset_to_json(again, &json2) != 0 || strcmp(json, json2) != 0)
        abort(); /* canonical form is not a fixed point */
    free(json2);
    free(json);
    cnx_tileset_free(again);
    cnx_tileset_free(ts);
    return 0;
}
