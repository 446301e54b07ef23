/*
 * fuzz_plan_externals.c - the external inputs' geometry a controller
 * logs with an accepted request and re-plans from without storage
 * (cnx_plan_externals_from_json). What parses must serialise and parse
 * back to the same text.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/workflow.h"
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
    cnx_plan_external *ext = NULL, *ext2 = NULL;
    size_t next = 0, next2 = 0;
    char *json = NULL, *json2 = NULL;
    if (cnx_plan_externals_from_json(&ext, &next, (const char *)data,
                                     size) != 0)
        return 0;
    if (cnx_plan_externals_to_json(ext, next, &json) != 0)
        abort();
    if (cnx_plan_externals_from_json(&ext2, &next2, json, strlen(json)) != 0 ||
        next2 != next || cnx_plan_externals_to_json(ext2, next2, &json2) != 0 ||
        strcmp(json, json2) != 0)
        abort(); /* not a fixed point */
    free(json2);
    free(json);
    free(ext2);
    free(ext);
    return 0;
}
