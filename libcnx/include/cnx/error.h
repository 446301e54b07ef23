/*
 * cnx/error.h - error codes and the per-thread last error.
 *
 * Every libcnx function that can fail returns 0 or a negative CNX_E* code and
 * sets, at the lowest level that knows what went wrong, a one-line message
 * and whether the failure is retriable (a transient storage or network
 * fault: try again later) or fatal (bad input, corrupt data: retrying cannot
 * help; dead-letter it). Callers pass the code up and read the message once,
 * at the top, with cnx_error_last(). The codes are append-only.
 */
#ifndef CNX_ERROR_H
#define CNX_ERROR_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cnx_error_code {
    CNX_OK = 0,
    CNX_EINVAL = -1,      /* invalid argument or input */
    CNX_ENOMEM = -2,      /* allocation failed */
    CNX_EIO = -3,         /* storage or system I/O failed (retriable) */
    CNX_ENOTFOUND = -4,   /* object, file or key does not exist */
    CNX_EIMMUTABLE = -5,  /* object exists with different bytes */
    CNX_EDIGEST = -6,     /* bytes do not match their expected digest */
    CNX_ECORRUPT = -7,    /* stored data malformed: truncated chunk, bad info */
    CNX_ESCHEMA = -8,     /* message does not follow its schema */
    CNX_ENAME = -9,       /* object name unsafe: "..", absolute, NUL, ... */
    CNX_EUNSUPPORTED = -10, /* valid but not supported by this build */
    CNX_ERANGE = -11,     /* value or size out of the allowed range */
    CNX_ETOOBIG = -12,    /* input over its size limit */
    CNX_ECONFLICT = -13,  /* a compare-and-swap lost to another writer */
} cnx_error_code;

/** The last error of the calling thread. Never NULL. */
typedef struct cnx_error {
    int code;        /* CNX_E* of the failure, CNX_OK after a clear */
    int retriable;   /* 1: transient, try again; 0: fatal for this input */
    char message[512];
} cnx_error;

/** @return the calling thread's last error (borrowed, thread-local). */
const cnx_error *cnx_error_last(void);

/** Reset the calling thread's last error to CNX_OK / "". */
void cnx_error_clear(void);

/**
 * Record an error for the calling thread.
 * @return code, so that `return cnx_error_set(...)` reads naturally.
 */
int cnx_error_set(int code, int retriable, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/** Like cnx_error_set but prefixes the existing message ("ctx: old"). */
int cnx_error_wrap(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** @return a static name for a code ("EDIGEST"), never NULL. */
const char *cnx_error_name(int code);

#ifdef __cplusplus
}
#endif
#endif
