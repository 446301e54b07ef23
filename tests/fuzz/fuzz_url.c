/*
 * fuzz_url.c - dataset, layer and object URLs (cnx/url.h): cnx_url_parse
 * with and without plain paths, and what is built on it: joining a name,
 * checking a name, "under" and splitting an object URL. The first byte
 * picks the flags; the rest is "URL" or "URL\nNAME". A URL that parses
 * must be a fixed point of parsing (its canonical form parses to itself)
 * and lie under itself.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/url.h"
#include "fuzz_common.h"

static cnx_url url, again;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *fields[2], *buf = NULL, *joined = NULL;
    char store_url[CNX_URL_MAX];
    const char *rel = NULL, *name = NULL;
    size_t lens[2], n;
    unsigned flags;
    if (size < 1)
        return 0;
    flags = (data[0] & 1) ? CNX_URL_ALLOW_PATH : 0;
    n = fuzz_split(data + 1, size - 1, '\n', fields, lens, 2, &buf);
    if (cnx_url_parse(&url, fields[0], flags) == 0) {
        if (cnx_url_parse(&again, url.canonical, 0) != 0 ||
            strcmp(again.canonical, url.canonical) != 0 ||
            again.scheme != url.scheme)
            abort(); /* canonical form is not a fixed point */
        if (cnx_url_under(url.canonical, url.canonical, &rel) != 1 ||
            rel == NULL || rel[0] != '\0')
            abort();
        if (cnx_url_split_object(url.canonical, store_url, &name) == 0 &&
            (cnx_url_under(store_url, url.canonical, &rel) != 1 ||
             strcmp(rel, name) != 0))
            abort(); /* an object not under its own store */
        (void)cnx_url_scheme_name(url.scheme);
        (void)cnx_url_writable(url.scheme);
    }
    if (n == 2) {
        (void)cnx_url_check_name(fields[1]);
        if (cnx_url_join(&joined, fields[0], flags, fields[1]) == 0) {
            if (cnx_url_parse(&again, joined, 0) != 0 ||
                strcmp(again.canonical, joined) != 0)
                abort(); /* a join that is no canonical URL */
            (void)cnx_url_under(fields[0], joined, &rel);
        }
        free(joined);
    }
    free(buf);
    return 0;
}
