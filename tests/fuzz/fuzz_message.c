/*
 * fuzz_message.c - a message as it comes off a topic (cnx/message.h):
 * fields topic, key, signature header, key-id header and body, separated
 * by NUL bytes. The harness checks the schema-to-topic rule on the body's
 * schema (cnx_msg_kind_of), the signature against the fixed test key
 * (cnx_msg_verify: any header, key or body), and that a message it signs
 * itself verifies while the same message with its body changed does not.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cnx/message.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    fuzz_key_private();
    fuzz_key_public();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *f[5], *buf = NULL, type[CNX_MSG_TYPE_MAX + 1];
    char sig[CNX_DSSE_SIG_MAX];
    size_t len[5], n;
    cnx_key *pub = fuzz_key_public();
    cnx_kafka_header h[2];
    cnx_message m;
    cnx_msg_kind kind;
    json_t *doc;

    n = fuzz_split(data, size, '\0', f, len, 5, &buf);
    while (n < 5) {
        f[n] = buf + size; /* "" */
        len[n++] = 0;
    }
    memset(&m, 0, sizeof(m));
    m.topic = f[0];
    m.key = len[1] ? f[1] : NULL;
    m.key_len = len[1];
    m.value = f[4];
    m.len = len[4];
    h[0].name = CNX_MSG_HEADER_SIG;
    h[0].value = f[2];
    h[1].name = CNX_MSG_HEADER_KEYID;
    h[1].value = f[3];
    m.headers = h;
    m.nheaders = len[2] ? (len[3] ? 2 : 1) : 0;
    (void)cnx_msg_verify(&m, &pub, 1, NULL);
    doc = json_loadb(f[4], len[4], 0, NULL);
    if (json_is_string(json_object_get(doc, "schema")))
        (void)cnx_msg_kind_of(f[0], json_string_value(json_object_get(doc,
                                                                      "schema")),
                              &kind);
    json_decref(doc);
    /* Signed by the harness: verifies; one byte more: does not. */
    if (cnx_msg_signed_type(type, m.topic, m.key, m.key_len) == 0 &&
        cnx_dsse_sign_detached(fuzz_key_private(), type, m.value, m.len,
                               sig) == 0) {
        h[0].value = sig;
        m.nheaders = 1;
        if (cnx_msg_verify(&m, &pub, 1, NULL) != 0)
            abort();
        if (m.len > 0) {
            m.len--;
            if (cnx_msg_verify(&m, &pub, 1, NULL) == 0)
                abort();
        }
    }
    free(buf);
    return 0;
}
