/*
 * digest_file - print "<sha256:hex> <path>" for each file, read through the
 * store (cnx_store_get) and digested with cnx_digest. The digest test
 * compares the output with the openssl and sha256sum command-line tools.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/store.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        char *dcopy = strdup(argv[i]), *bcopy = strdup(argv[i]);
        cnx_store *store;
        uint8_t *data;
        size_t len;
        char d[CNX_DIGEST_LEN];
        if (cnx_store_open(&store, dirname(dcopy)) != 0 ||
            cnx_store_get(store, basename(bcopy), 0, &data, &len) != 0) {
            fprintf(stderr, "digest_file: %s\n", cnx_error_last()->message);
            return 1;
        }
        cnx_digest(data, len, d);
        printf("%s %s\n", d, argv[i]);
        free(data);
        cnx_store_free(store);
        free(dcopy);
        free(bcopy);
    }
    return 0;
}
