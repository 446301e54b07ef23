/*
 * cnx/cli.h - command-line helpers shared by the tools and workers, so that
 * every executable parses options and numbers the same strict way: a whole
 * decimal string, no sign where none is allowed, no trailing characters,
 * inside a stated range (no atoi, no silent truncation).
 */
#ifndef CNX_CLI_H
#define CNX_CLI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Match option name at argv[*i], as "--name VALUE" or "--name=VALUE".
 * @return 1 with *value set (and *i advanced past a separate value); 0 if
 *         argv[*i] is not this option; -1 if its value is missing.
 */
int cnx_cli_option(int argc, char **argv, int *i, const char *name,
                   const char **value);

/** Parse a whole decimal integer in [lo, hi]. @return 0 or -1. */
int cnx_cli_int(const char *text, int64_t lo, int64_t hi, int64_t *out);

/** Parse a whole finite decimal number in [lo, hi]. @return 0 or -1. */
int cnx_cli_double(const char *text, double lo, double hi, double *out);

/** Parse exactly n comma-separated integers ("1,2,3"). @return 0 or -1. */
int cnx_cli_ints(const char *text, int64_t *out, size_t n);

/** Exactly n comma-separated integers, each in [lo, hi]. @return 0 or -1. */
int cnx_cli_ints_in(const char *text, int64_t lo, int64_t hi, int64_t *out,
                    size_t n);

/** Exactly n comma-separated finite numbers, each in [lo, hi]. */
int cnx_cli_doubles(const char *text, double lo, double hi, double *out,
                    size_t n);

/**
 * A usage error, as every tool reports one: "<prog>: <message> (see
 * --help)" on stderr, one line (the message cut at 1 KiB).
 * @param prog  the executable's name
 * @param code  returned as it is: the tool's exit status for bad usage
 * @return code
 */
int cnx_cli_usage_error(const char *prog, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#ifdef __cplusplus
}
#endif
#endif
