/*
 * cli.c - strict option and number parsing for the executables (see
 * cnx/cli.h). strtoll/strtod with errno and end-pointer checks; a number is
 * accepted only if the whole string is that number and it is in range.
 */
#include "cnx/cli.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cnx_cli_option(int argc, char **argv, int *i, const char *name,
                   const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}

int cnx_cli_int(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v;
    if (text == NULL || text[0] == '\0' || text[0] == ' ' || text[0] == '+')
        return -1;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int cnx_cli_double(const char *text, double lo, double hi, double *out)
{
    char *end;
    double v;
    if (text == NULL || text[0] == '\0' || text[0] == ' ' || text[0] == '+')
        return -1;
    errno = 0;
    v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(v) ||
        !(v >= lo && v <= hi))
        return -1;
    *out = v;
    return 0;
}

/* Copy the i-th of n comma-separated fields of *p into buf; advance *p. */
static int next_field(const char **p, size_t i, size_t n, char *buf,
                      size_t cap)
{
    const char *end = i + 1 < n ? strchr(*p, ',') : *p + strlen(*p);
    size_t len;
    if (end == NULL)
        return -1;
    len = (size_t)(end - *p);
    if (len == 0 || len >= cap)
        return -1;
    memcpy(buf, *p, len);
    buf[len] = '\0';
    *p = end + 1;
    return 0;
}

int cnx_cli_ints_in(const char *text, int64_t lo, int64_t hi, int64_t *out,
                    size_t n)
{
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char buf[32];
        if (next_field(&p, i, n, buf, sizeof(buf)) != 0 ||
            cnx_cli_int(buf, lo, hi, &out[i]) != 0)
            return -1;
    }
    return 0;
}

int cnx_cli_ints(const char *text, int64_t *out, size_t n)
{
    return cnx_cli_ints_in(text, INT64_MIN, INT64_MAX, out, n);
}

int cnx_cli_doubles(const char *text, double lo, double hi, double *out,
                    size_t n)
{
    const char *p = text;
    for (size_t i = 0; i < n; i++) {
        char buf[64];
        if (next_field(&p, i, n, buf, sizeof(buf)) != 0 ||
            cnx_cli_double(buf, lo, hi, &out[i]) != 0)
            return -1;
    }
    return 0;
}

int cnx_cli_usage_error(const char *prog, int code, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s (see --help)\n", prog, line);
    return code;
}
