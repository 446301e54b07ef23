/*
 * fuzz_dsse.c - DSSE envelopes (cnx_dsse_verify_type), the untrusted
 * outer layer of every manifest the controller and cnx-verify read,
 * verified against the fixed test key (fuzz_common.h). Seeds signed with
 * that key reach the end of the check; mutations of them exercise the
 * envelope's JSON, its base64 and the signature's rejection.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/lineage.h"
#include "fuzz_common.h"

static cnx_key *trusted[1];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    trusted[0] = fuzz_key_public();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *payload = NULL;
    size_t plen = 0;
    int signer = -1;
    char *type = NULL;
    if (cnx_dsse_verify_type((const char *)data, size, trusted, 1, &payload,
                             &plen, &signer, &type) == 0) {
        if (signer != 0 || type == NULL || payload == NULL ||
            payload[plen] != '\0')
            abort(); /* success without what it promises */
    }
    free(type);
    free(payload);
    return 0;
}
