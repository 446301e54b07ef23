/*
 * fuzz_sigv4.c - the SigV4 canonical request (sigv4.c:
 * cnx__sigv4_canonical_request) over a path, a query and headers from the
 * input, then the string to sign and the Authorization header of the
 * same request with fixed credentials. The path and query are what
 * store_s3.c builds from object names and listing prefixes, so any bytes
 * may reach them.
 *
 * Input: byte 0 picks the options (bit 0: normalise the path, as every
 * service but S3; bit 1: UNSIGNED-PAYLOAD instead of the empty body's
 * hash; bits 2-3: GET, PUT, HEAD or DELETE); the rest is lines: the
 * path, the query, then up to 8 headers "name:value" (a line without ':'
 * is a name with an empty value).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "sigv4_int.h"

#define MAX_HEADERS 8
#define EMPTY_SHA256 \
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[4] = {"GET", "PUT", "HEAD", "DELETE"};
    char *fields[2 + MAX_HEADERS], *buf = NULL, *creq = NULL, *sts = NULL;
    size_t lens[2 + MAX_HEADERS], n;
    cnx__sigv4_header headers[MAX_HEADERS];
    cnx__sigv4_request req;
    char auth[CNX_SIGV4_AUTH_MAX];
    if (size < 1)
        return 0;
    n = fuzz_split(data + 1, size - 1, '\n', fields, lens, 2 + MAX_HEADERS,
                   &buf);
    memset(&req, 0, sizeof(req));
    req.method = methods[(data[0] >> 2) & 3];
    req.path = fields[0];
    req.query = n > 1 ? fields[1] : "";
    req.payload_hash = (data[0] & 2) ? "UNSIGNED-PAYLOAD" : EMPTY_SHA256;
    req.normalize_path = data[0] & 1;
    for (size_t i = 2; i < n; i++) {
        char *colon = strchr(fields[i], ':');
        headers[i - 2].name = fields[i];
        headers[i - 2].value = "";
        if (colon != NULL) {
            *colon = '\0';
            headers[i - 2].value = colon + 1;
        }
    }
    req.headers = headers;
    req.nheaders = n > 2 ? n - 2 : 0;
    if (cnx__sigv4_canonical_request(&req, &creq) == 0) {
        if (cnx__sigv4_string_to_sign(&req, "20150830T123600Z", "us-east-1",
                                      "s3", &sts) != 0)
            abort(); /* a canonical request whose string to sign fails */
        (void)cnx__sigv4_authorization(
            &req, "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            "20150830T123600Z", "us-east-1", "s3", auth);
    }
    free(sts);
    free(creq);
    free(buf);
    return 0;
}
