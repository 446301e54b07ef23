/*
 * cnx-keygen - make a worker's lineage signing key.
 *
 * Thin: arguments -> cnx_key_generate -> cnx_key_write -> print the keyid.
 * Writes DIR/cnx.key (PKCS#8 PEM, 0600) and DIR/cnx.pub (public key PEM);
 * never replaces an existing key. Exit status 0 done, 1 runtime failure,
 * 2 bad usage; every failure is one line on stderr. docs/lineage.md says
 * how the key is used and how to check signatures with openssl.
 */
#include <stdio.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/lineage.h"

#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cnx-keygen --out DIR\n"
            "\n"
            "Generate an Ed25519 key pair for signing lineage: DIR/cnx.key\n"
            "(private, PKCS#8 PEM, mode 0600) and DIR/cnx.pub (public,\n"
            "SubjectPublicKeyInfo PEM). DIR is created if missing. An\n"
            "existing key is never overwritten. Prints the keyid, the\n"
            "sha256 of the DER public key, as \"sha256:<hex>\".\n"
            "\n"
            "  --out DIR   directory for cnx.key and cnx.pub\n"
            "  --help      this text\n"
            "\n"
            "Exit status: 0 done, 1 failed, 2 bad arguments.\n");
}

static int bad_usage(const char *what, const char *arg)
{
    fprintf(stderr, "cnx-keygen: %s%.100s (see cnx-keygen --help)\n", what,
            arg);
    return EXIT_USAGE;
}

int main(int argc, char **argv)
{
    const char *out = NULL;
    char id[CNX_DIGEST_LEN];
    cnx_key *key = NULL;
    int i;

    for (i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = NULL;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strncmp(arg, "--out=", 6) == 0) {
            value = arg + 6;
        } else if (strcmp(arg, "--out") == 0) {
            if (i + 1 >= argc)
                return bad_usage("--out needs a value", "");
            value = argv[++i];
        } else {
            return bad_usage("unknown argument ", arg);
        }
        if (out != NULL)
            return bad_usage("--out given twice", "");
        out = value;
    }
    if (out == NULL || out[0] == '\0')
        return bad_usage("--out DIR is required", "");

    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, out) != 0) {
        fprintf(stderr, "cnx-keygen: %s\n", cnx_error_last()->message);
        cnx_key_free(key);
        return 1;
    }
    cnx_key_id(key, id);
    cnx_key_free(key);
    if (printf("%s\n", id) < 0 || fflush(stdout) != 0) {
        fprintf(stderr, "cnx-keygen: cannot write to stdout\n");
        return 1;
    }
    return 0;
}
