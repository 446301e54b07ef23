/*
 * fuzz_statement.c - the in-toto statement as cnx-verify reads it
 * (verify_stmt.c: the light reader, jansson, the SLSA provenance checks,
 * the embedded task and the relocation of names), through
 * vf_manifest_check. The input is the statement: the harness signs it
 * with the fixed test key (fuzz_common.h) so that the signature passes
 * and the statement's parser is reached.
 *
 * An input starting with '@' holds, up to its first newline, the layer
 * the envelope was found in (so a statement naming another layer is
 * relocated), and the check is also given a fixed relocation of
 * file:///data to s3://fuzz-bucket/copy (--relocate).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/digest.h"
#include "cnx/lineage.h"
#include "fuzz_common.h"
#include "verify_int.h"

static cnx_key *signer, *trusted[1];
static vf_reloc given;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    signer = fuzz_key_private();
    trusted[0] = fuzz_key_public();
    given.from = strdup("file:///data");
    given.to = strdup("s3://fuzz-bucket/copy");
    if (given.from == NULL || given.to == NULL)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    vf_manifest m;
    char *envelope = NULL;
    const uint8_t *body = data;
    size_t blen = size, ngiven = 0;
    memset(&m, 0, sizeof(m));
    m.ledger_partition = -1;
    if (size > 0 && data[0] == '@') {
        const uint8_t *nl = memchr(data, '\n', size);
        if (nl == NULL)
            return 0;
        m.stored_layer = fuzz_strndup(data + 1, (size_t)(nl - data) - 1);
        body = nl + 1;
        blen = size - (size_t)(body - data);
        ngiven = 1;
    }
    if (cnx_dsse_sign(signer, CNX_DSSE_PAYLOAD_TYPE, body, blen,
                      &envelope) != 0) {
        free(m.stored_layer);
        return 0; /* too big for an envelope */
    }
    m.origin = strdup("fuzz");
    m.text = envelope;
    m.len = strlen(envelope);
    if (m.origin == NULL)
        abort();
    cnx_digest(m.text, m.len, m.env_digest);
    vf_manifest_check(&m, trusted, 1, &given, ngiven);
    if (!m.sig_ok)
        abort(); /* our own signature refused */
    vf_manifest_dispose(&m);
    return 0;
}
