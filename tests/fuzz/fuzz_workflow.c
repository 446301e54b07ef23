/*
 * fuzz_workflow.c - workflow documents (cnx_workflow_parse): the files in
 * workflows/ and the copy embedded in every request. A workflow that
 * parses keeps its canonical text, which must parse again to the same
 * digest (the ledger records it), and every stage must be found by name.
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
    cnx_workflow *wf = NULL, *again = NULL;
    cnx_plan_ref refs[8];
    if (cnx_workflow_parse(&wf, (const char *)data, size) != 0)
        return 0;
    for (size_t i = 0; i < wf->nstages; i++)
        if (cnx_workflow_find_stage(wf, wf->stages[i].name) != (int)i)
            abort();
    (void)cnx_plan_externals(wf, refs, sizeof(refs) / sizeof(refs[0]));
    if (cnx_workflow_parse(&again, wf->json, strlen(wf->json)) != 0 ||
        strcmp(again->digest, wf->digest) != 0)
        abort(); /* canonical text does not parse back to the same */
    cnx_workflow_free(again);
    cnx_workflow_free(wf);
    return 0;
}
