/*
 * error.c - the per-thread last error.
 *
 * One thread-local cnx_error per thread; set once at the lowest level that
 * knows the cause, read once at the top. cnx_error_wrap lets a caller add
 * context ("chunk 0-64_0-64_0-64: ...") without losing the original cause or
 * its retriable flag.
 */
#include "cnx/error.h"

#include <stdio.h>
#include <string.h>

static _Thread_local cnx_error last_error;

const cnx_error *cnx_error_last(void)
{
    return &last_error;
}

void cnx_error_clear(void)
{
    last_error.code = CNX_OK;
    last_error.retriable = 0;
    last_error.message[0] = '\0';
}

int cnx_error_set(int code, int retriable, const char *fmt, ...)
{
    va_list ap;
    last_error.code = code;
    last_error.retriable = retriable;
    va_start(ap, fmt);
    vsnprintf(last_error.message, sizeof(last_error.message), fmt, ap);
    va_end(ap);
    return code;
}

int cnx_error_wrap(const char *fmt, ...)
{
    char old[sizeof(last_error.message)];
    size_t cap = sizeof(last_error.message);
    size_t n, oldlen;
    va_list ap;

    memcpy(old, last_error.message, sizeof(old));
    va_start(ap, fmt);
    vsnprintf(last_error.message, cap, fmt, ap);
    va_end(ap);
    /* Append ": <old message>", truncating at the buffer's end. */
    n = strlen(last_error.message);
    if (n + 2 < cap) {
        memcpy(last_error.message + n, ": ", 2);
        n += 2;
        oldlen = strnlen(old, cap - 1);
        if (oldlen > cap - 1 - n)
            oldlen = cap - 1 - n;
        memcpy(last_error.message + n, old, oldlen);
        last_error.message[n + oldlen] = '\0';
    }
    return last_error.code;
}

const char *cnx_error_name(int code)
{
    switch (code) {
    case CNX_OK: return "OK";
    case CNX_EINVAL: return "EINVAL";
    case CNX_ENOMEM: return "ENOMEM";
    case CNX_EIO: return "EIO";
    case CNX_ENOTFOUND: return "ENOTFOUND";
    case CNX_EIMMUTABLE: return "EIMMUTABLE";
    case CNX_EDIGEST: return "EDIGEST";
    case CNX_ECORRUPT: return "ECORRUPT";
    case CNX_ESCHEMA: return "ESCHEMA";
    case CNX_ENAME: return "ENAME";
    case CNX_EUNSUPPORTED: return "EUNSUPPORTED";
    case CNX_ERANGE: return "ERANGE";
    case CNX_ETOOBIG: return "ETOOBIG";
    case CNX_ECONFLICT: return "ECONFLICT";
    default: return "EUNKNOWN";
    }
}
