/*
 * fuzz_segjoin.c - the join's inputs: face records and block summaries
 * (cnx/segjoin.h). Byte 0 chooses: even, the rest is one face record for
 * cnx_segjoin_run and, as a level-1 block over its own box,
 * cnx_segjoin_block; odd, the rest is a block summary for
 * cnx_segjoin_merge over its own box, cnx_segjoin_tree_open and
 * cnx_segjoin_tree_block. Every failure is a cnx error code; a summary the
 * merge accepts opens as a top when the merge says nothing is open.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

static void expect(int rc)
{
    if (rc != 0 && rc != CNX_ECORRUPT && rc != CNX_EINVAL &&
        rc != CNX_ERANGE && rc != CNX_ETOOBIG && rc != CNX_ENOMEM)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cnx_segjoin_input in;
    cnx_segment_params p;
    cnx_segjoin j;
    cnx_box box;
    uint8_t *out = NULL;
    size_t len = 0;
    int rc;
    if (size < 1)
        return 0;
    cnx_segment_params_default(&p);
    p.min_size_nm3 = 40.0 * 512.0;
    in = (cnx_segjoin_input){data + 1, size - 1, "fuzz"};
    if (data[0] % 2 == 0) {
        rc = cnx_segjoin_run(&in, 1, &p, &j);
        expect(rc);
        if (rc == 0) {
            box = j.chunks[0];
            cnx_segjoin_free(&j);
            expect(cnx_segjoin_block(&in, 1, &box, &box, &p, &out, &len));
            free(out);
        }
        return 0;
    }
    rc = cnx_segjoin_summary_box(&in, &box, NULL);
    expect(rc);
    if (rc == 0) {
        cnx_segjoin_input top;
        cnx_segjoin_tree *t = NULL;
        rc = cnx_segjoin_merge(&in, 1, &box, &box, &p, &out, &len);
        expect(rc);
        top = (cnx_segjoin_input){out, len, "top"};
        if (rc == 0 && cnx_segjoin_tree_open(&top, 1, &t) != 0)
            abort(); /* a merge over its own box leaves nothing open */
        if (t != NULL) {
            memset(&j, 0, sizeof(j));
            expect(cnx_segjoin_tree_block(t, &in, &j));
            cnx_segjoin_free(&j);
            memset(&j, 0, sizeof(j));
            expect(cnx_segjoin_tree_segments(t, &j));
            cnx_segjoin_free(&j);
        }
        cnx_segjoin_tree_free(t);
        free(out);
    }
    return 0;
}
