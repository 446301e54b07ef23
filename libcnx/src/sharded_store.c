/*
 * sharded_store.c - the ranged read of cnx/sharded.h over a cnx_store.
 *
 * cnx_sharded_read_chunk asks for exact ranges of a shard file; a store's
 * ranged get answers with fewer bytes when the object ends first (file://
 * pread stops at the end, an HTTP 416 is an empty answer). This adapter
 * turns every short answer into CNX_ERANGE, which the reader reports as a
 * corrupt shard (an index pointed past its end). Kept apart from sharded.c
 * so that the format module stays free of storage. Stateless: thread-safe
 * as the store is.
 */
#include "cnx/sharded.h"

#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cnx/error.h"
#include "cnx/store.h"

/* Object names are at most 1024 bytes (cnx_store_check_name). */
#define NAME_CAP 1100

int cnx_sharded_store_read(void *ctx, const char *shard_name, uint64_t offset,
                           uint64_t length, uint8_t **out)
{
    const cnx_sharded_source *src = ctx;
    char name[NAME_CAP];
    uint8_t *data = NULL;
    size_t got = 0;
    int n, rc, exists;

    assert(src != NULL && src->store != NULL && shard_name != NULL);
    *out = NULL;
    if (src->prefix != NULL && src->prefix[0] != '\0')
        n = snprintf(name, sizeof(name), "%s/%s", src->prefix, shard_name);
    else
        n = snprintf(name, sizeof(name), "%s", shard_name);
    if (n < 0 || (size_t)n >= sizeof(name))
        return cnx_error_set(CNX_ENAME, 0, "shard name too long: %.100s",
                             shard_name);
    if (length > CNX_STORE_MAX_OBJECT)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "%s: range of %" PRIu64 " bytes, over the %zu "
                             "limit",
                             name, length, CNX_STORE_MAX_OBJECT);
    if (offset > UINT64_MAX - length)
        return cnx_error_set(CNX_ERANGE, 0,
                             "%s: range at %" PRIu64 " of %" PRIu64
                             " bytes overflows",
                             name, offset, length);
    if (length == 0 && offset == 0) {
        rc = cnx_store_exists(src->store, name, &exists);
        if (rc == 0 && !exists)
            rc = cnx_error_set(CNX_ENOTFOUND, 0, "object %s not found", name);
        return rc;
    }
    if (length == 0) {
        /* Nothing to read, but offset must lie inside: its last byte. */
        rc = cnx_store_get_range(src->store, name, offset - 1, 1, &data, &got);
        free(data);
        if (rc == 0 && got != 1)
            rc = cnx_error_set(CNX_ERANGE, 0,
                               "%s: offset %" PRIu64 " lies past the end", name,
                               offset);
        return rc;
    }
    rc = cnx_store_get_range(src->store, name, offset, (size_t)length, &data,
                             &got);
    if (rc != 0)
        return rc;
    if (got != length) {
        free(data);
        return cnx_error_set(CNX_ERANGE, 0,
                             "%s: bytes [%" PRIu64 ", %" PRIu64
                             ") asked, the object ends after %zu of them",
                             name, offset, offset + length, got);
    }
    *out = data;
    return 0;
}
