/*
 * url.c - the one parser of dataset, layer and object URLs (cnx/url.h).
 *
 * A parse is one left-to-right pass: whole-text checks (length, control
 * characters, backslash, query, fragment), the scheme, the authority
 * (bucket or host[:port]), then the path one '/'-separated component at a
 * time into the caller's cnx_url, dropping empty components (so repeated
 * and trailing slashes vanish) and refusing "." and "..". The canonical
 * form is built from the parts, so parsing a canonical URL gives it back
 * unchanged. Every failure is CNX_EINVAL (fatal) with one line that names
 * the URL, shown at most 200 bytes long and with control and non-ASCII
 * bytes as '?', so the message stays one line of valid UTF-8. Pure string
 * work except getcwd() for a relative plain path; no globals, thread-safe.
 */
#include "cnx/url.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/error.h"

#define SHOW_MAX 200     /* bytes of a URL quoted in a message */
#define DNS_NAME_MAX 253 /* a DNS name */
#define LABEL_MAX 63     /* a DNS label, an s3 bucket, a gs bucket's part */

static const struct {
    const char *name;
    cnx_url_scheme scheme;
} schemes[] = {
    {"file", CNX_URL_FILE}, {"s3", CNX_URL_S3},       {"gs", CNX_URL_GS},
    {"http", CNX_URL_HTTP}, {"https", CNX_URL_HTTPS},
};

#define SCHEME_LIST "file:///, s3://, gs://, http:// or https://"

/* text as a message shows it: at most SHOW_MAX bytes, "..." when cut,
 * control and non-ASCII bytes as '?'. */
typedef struct shown {
    char s[SHOW_MAX + 4];
} shown;

static shown show(const char *text)
{
    shown out;
    size_t i;
    for (i = 0; text[i] != '\0' && i < SHOW_MAX; i++) {
        unsigned char c = (unsigned char)text[i];
        out.s[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (text[i] != '\0') {
        memcpy(out.s + i, "...", 3);
        i += 3;
    }
    out.s[i] = '\0';
    return out;
}

/* CNX_EINVAL, "URL '<text>': <why>". */
static int fail(const char *text, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int fail(const char *text, const char *fmt, ...)
{
    char why[sizeof(cnx_error_last()->message)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return cnx_error_set(CNX_EINVAL, 0, "URL '%s': %s", show(text).s, why);
}

/* Characters no URL may hold anywhere. what is "" for the URL itself or
 * "the working directory '...' " for the one a relative path is made
 * absolute from. */
static int check_chars(const char *text, const char *s, const char *what)
{
    for (const char *p = s; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f)
            return fail(text, "%shas a control character at byte %zu", what,
                        (size_t)(p - s));
        if (c == '\\')
            return fail(text, "%shas a backslash", what);
        if (c == '?')
            return fail(text, "%shas a '?' (a query is not allowed)", what);
        if (c == '#')
            return fail(text, "%shas a '#' (a fragment is not allowed)", what);
    }
    return 0;
}

static int is_alpha(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_digit(int c)
{
    return c >= '0' && c <= '9';
}

static int lower(int c)
{
    return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

/* Length of an RFC 3986 scheme name at the start of text, 0 if none. */
static size_t scheme_len(const char *text)
{
    size_t n = 0;
    if (!is_alpha((unsigned char)text[0]))
        return 0;
    while (is_alpha((unsigned char)text[n]) || is_digit(text[n]) ||
           text[n] == '+' || text[n] == '.' || text[n] == '-')
        n++;
    return n;
}

/* Our scheme named by text[0..n), case-insensitively; 0 if none. */
static cnx_url_scheme scheme_lookup(const char *text, size_t n)
{
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++) {
        const char *name = schemes[i].name;
        size_t k = 0;
        if (strlen(name) != n)
            continue;
        while (k < n && lower((unsigned char)text[k]) == name[k])
            k++;
        if (k == n)
            return schemes[i].scheme;
    }
    return (cnx_url_scheme)0;
}

/* The path being built: components joined by '/', no leading slash. */
typedef struct comps {
    char s[CNX_URL_MAX];
    size_t len;
    size_t count;
} comps;

/*
 * Append the '/'-separated components of p to c, skipping empty ones.
 * plain: a plain path, where "." components are dropped and, while climb
 * is set (the leading components of a relative path), ".." removes the
 * last component (exact: the base is getcwd's physical path). Any other
 * "." or ".." is refused.
 */
static int walk(const char *text, const char *p, comps *c, int plain, int climb)
{
    while (*p != '\0') {
        const char *end = strchr(p, '/');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        int dot = n == 1 && p[0] == '.';
        int dotdot = n == 2 && p[0] == '.' && p[1] == '.';
        if (n == 0) {
            /* an empty component: a repeated or trailing slash */
        } else if (plain && dot) {
            /* "./x" is x */
        } else if (plain && climb && dotdot) {
            if (c->count > 0) {
                char *slash = c->count > 1 ? strrchr(c->s, '/') : c->s;
                assert(slash != NULL);
                c->len = (size_t)(slash - c->s);
                c->s[c->len] = '\0';
                c->count--;
            }
        } else if (dot || dotdot) {
            return fail(text, "has a '%.*s' component", (int)n, p);
        } else {
            size_t need = c->len + (c->count > 0) + n;
            if (need >= sizeof(c->s))
                return fail(text, "is over %d bytes", CNX_URL_MAX - 1);
            if (c->count > 0)
                c->s[c->len++] = '/';
            memcpy(c->s + c->len, p, n);
            c->len += n;
            c->s[c->len] = '\0';
            c->count++;
            climb = 0;
        }
        if (end == NULL)
            break;
        p = end + 1;
    }
    return 0;
}

/* out->path and out->canonical of a file URL from its components. */
static int finish_file(cnx_url *out, const char *text, const comps *c)
{
    int n;
    out->scheme = CNX_URL_FILE;
    out->host[0] = '\0';
    n = snprintf(out->path, sizeof(out->path), "/%s", c->s);
    if (n < 0 || (size_t)n >= sizeof(out->path))
        return fail(text, "is over %d bytes", CNX_URL_MAX - 1);
    n = snprintf(out->canonical, sizeof(out->canonical), "file://%s",
                 out->path);
    if (n < 0 || (size_t)n >= sizeof(out->canonical))
        return fail(text, "is over %d bytes", CNX_URL_MAX - 1);
    return 0;
}

/* A plain path: absolute, or relative to the working directory. */
static int parse_plain(cnx_url *out, const char *text)
{
    comps c;
    int rc;
    c.s[0] = '\0';
    c.len = 0;
    c.count = 0;
    if (text[0] != '/') {
        char cwd[PATH_MAX];
        char what[SHOW_MAX + 32];
        if (getcwd(cwd, sizeof(cwd)) == NULL)
            return cnx_error_set(CNX_EIO, 1,
                                 "URL '%s': cannot read the working "
                                 "directory: %s",
                                 show(text).s, strerror(errno));
        snprintf(what, sizeof(what), "the working directory '%s' ",
                 show(cwd).s);
        rc = check_chars(text, cwd, what);
        if (rc == 0)
            rc = walk(text, cwd, &c, 1, 0);
        if (rc == 0)
            rc = walk(text, text, &c, 1, 1);
    } else {
        rc = walk(text, text, &c, 1, 0);
    }
    return rc != 0 ? rc : finish_file(out, text, &c);
}

/* A bucket of s3 (3-63) or gs (3-222, dot-separated parts of <= 63):
 * [a-z0-9._-], first and last a letter or digit, no "..". */
static int check_bucket(const char *text, cnx_url_scheme scheme, const char *b,
                        size_t n)
{
    size_t max = scheme == CNX_URL_S3 ? LABEL_MAX : 222, part = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = b[i];
        if (!((ch >= 'a' && ch <= 'z') || is_digit(ch) || ch == '.' ||
              ch == '_' || ch == '-'))
            return fail(text,
                        "bucket: character '%c' not allowed (allowed: "
                        "a-z 0-9 . _ -)",
                        ((unsigned char)ch >= 0x20 && ch != 0x7f) ? ch : '?');
    }
    if (n < 3 || n > max)
        return fail(text, "bucket '%.*s' is %zu characters, not 3 to %zu",
                    (int)(n < 64 ? n : 64), b, n, max);
    if (!(is_alpha(b[0]) || is_digit(b[0])) ||
        !(is_alpha(b[n - 1]) || is_digit(b[n - 1])))
        return fail(text,
                    "bucket '%.*s' must start and end with a letter or "
                    "digit",
                    (int)n, b);
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '.' && i + 1 < n && b[i + 1] == '.')
            return fail(text, "bucket '%.*s' has two dots in a row", (int)n, b);
        part = b[i] == '.' ? 0 : part + 1;
        if (part > LABEL_MAX)
            return fail(text,
                        "bucket '%.*s' has a dot-separated part over %d "
                        "characters",
                        (int)(n < 64 ? n : 64), b, LABEL_MAX);
    }
    return 0;
}

/* A host name: labels of 1-63 [A-Za-z0-9-] joined by '.', <= 253. */
static int check_host_name(const char *text, const char *h, size_t n)
{
    size_t label = 0;
    if (n == 0)
        return fail(text, "has no host");
    if (n > DNS_NAME_MAX)
        return fail(text, "host is %zu characters, over %d", n, DNS_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        char ch = h[i];
        if (ch == '.') {
            if (label == 0)
                return fail(text, "host '%.*s' has an empty label", (int)n, h);
            label = 0;
            continue;
        }
        if (!(is_alpha(ch) || is_digit(ch) || ch == '-'))
            return fail(text,
                        "host: character '%c' not allowed (allowed: A-Z "
                        "a-z 0-9 . -)",
                        ((unsigned char)ch >= 0x20 && ch != 0x7f) ? ch : '?');
        if (++label > LABEL_MAX)
            return fail(text, "host has a label over %d characters", LABEL_MAX);
    }
    if (label == 0)
        return fail(text, "host '%.*s' has an empty label", (int)n, h);
    return 0;
}

/* A port: 1-65535 in decimal, without leading zeros. */
static int check_port(const char *text, const char *p, size_t n)
{
    unsigned long v = 0;
    if (n == 0 || n > 5 || p[0] == '0')
        goto bad;
    for (size_t i = 0; i < n; i++) {
        if (!is_digit(p[i]))
            goto bad;
        v = v * 10 + (unsigned long)(p[i] - '0');
    }
    if (v >= 1 && v <= 65535)
        return 0;
bad:
    return fail(text,
                "port '%.*s' is not 1 to 65535 (without leading "
                "zeros)",
                (int)(n < 16 ? n : 16), p);
}

/* host[:port] or [IPv6][:port] of an http(s) URL, a[0..n). */
static int check_authority(const char *text, const char *a, size_t n)
{
    const char *colon;
    size_t hn;
    if (n > 0 && a[0] == '[') {
        const char *close = memchr(a, ']', n);
        char addr[64];
        unsigned char bin[16];
        size_t an;
        if (close == NULL)
            return fail(text, "host has '[' without ']'");
        an = (size_t)(close - a) - 1;
        if (an == 0 || an >= sizeof(addr))
            return fail(text, "host '[...]' is not an IPv6 address");
        memcpy(addr, a + 1, an);
        addr[an] = '\0';
        if (inet_pton(AF_INET6, addr, bin) != 1)
            return fail(text, "host '[%s]' is not an IPv6 address", addr);
        hn = an + 2;
        if (hn == n)
            return 0;
        if (a[hn] != ':')
            return fail(text, "host '[%s]' is followed by '%c', not ':port'",
                        addr, a[hn]);
        return check_port(text, a + hn + 1, n - hn - 1);
    }
    colon = memchr(a, ':', n);
    hn = colon != NULL ? (size_t)(colon - a) : n;
    if (check_host_name(text, a, hn) != 0)
        return CNX_EINVAL;
    if (colon != NULL)
        return check_port(text, colon + 1, n - hn - 1);
    return 0;
}

int cnx_url_parse(cnx_url *out, const char *text, unsigned flags)
{
    size_t len, slen, alen;
    cnx_url_scheme scheme;
    const char *rest, *auth, *slash;
    comps c;
    int rc, n;

    assert(out != NULL);
    assert(text != NULL);
    assert((flags & ~(unsigned)CNX_URL_ALLOW_PATH) == 0);
    out->scheme = (cnx_url_scheme)0;
    out->host[0] = '\0';
    out->path[0] = '\0';
    out->canonical[0] = '\0';
    if (text[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "URL is empty");
    len = strlen(text);
    if (len >= CNX_URL_MAX)
        return fail(text, "is %zu bytes, over %d", len, CNX_URL_MAX - 1);
    rc = check_chars(text, text, "");
    if (rc != 0)
        return rc;
    slen = scheme_len(text);
    if (slen == 0 || strncmp(text + slen, "://", 3) != 0) {
        /* "file:/x", "s3:bucket": a URL with its "//" missing, not a
         * directory named "s3:bucket" */
        if (slen > 0 && text[slen] == ':' && scheme_lookup(text, slen) != 0)
            return fail(text, "has no '//' after '%.*s:' (write %.*s://...)",
                        (int)slen, text, (int)slen, text);
        if ((flags & CNX_URL_ALLOW_PATH) == 0)
            return fail(text, "must start with " SCHEME_LIST);
        return parse_plain(out, text);
    }
    scheme = scheme_lookup(text, slen);
    if (scheme == 0)
        return fail(text, "must start with " SCHEME_LIST);
    rest = text + slen + 3;
    c.s[0] = '\0';
    c.len = 0;
    c.count = 0;
    if (scheme == CNX_URL_FILE) {
        if (rest[0] != '/')
            return fail(text, "file:// needs an absolute path and no host "
                              "(file:///dir)");
        rc = walk(text, rest, &c, 0, 0);
        return rc != 0 ? rc : finish_file(out, text, &c);
    }
    auth = rest;
    slash = strchr(auth, '/');
    alen = slash != NULL ? (size_t)(slash - auth) : strlen(auth);
    if (memchr(auth, '@', alen) != NULL)
        return fail(text, "has user info ('@'), which is not allowed");
    if (scheme == CNX_URL_S3 || scheme == CNX_URL_GS) {
        if (alen == 0)
            return fail(text, "has no bucket");
        rc = check_bucket(text, scheme, auth, alen);
    } else {
        rc = check_authority(text, auth, alen);
    }
    if (rc != 0)
        return rc;
    if (alen >= sizeof(out->host))
        return fail(text, "host and port are %zu characters, over %zu", alen,
                    sizeof(out->host) - 1);
    for (size_t i = 0; i < alen; i++)
        out->host[i] = (char)lower((unsigned char)auth[i]);
    out->host[alen] = '\0';
    if (slash != NULL) {
        rc = walk(text, slash + 1, &c, 0, 0);
        if (rc != 0)
            return rc;
    }
    out->scheme = scheme;
    memcpy(out->path, c.s, c.len + 1);
    n = snprintf(out->canonical, sizeof(out->canonical), "%s://%s%s%s",
                 cnx_url_scheme_name(scheme), out->host, c.len > 0 ? "/" : "",
                 c.s);
    if (n < 0 || (size_t)n >= sizeof(out->canonical))
        return fail(text, "is over %d bytes", CNX_URL_MAX - 1);
    return 0;
}

const char *cnx_url_scheme_name(cnx_url_scheme scheme)
{
    for (size_t i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
        if (schemes[i].scheme == scheme)
            return schemes[i].name;
    assert(!"unknown cnx_url_scheme");
    return "?";
}

int cnx_url_writable(cnx_url_scheme scheme)
{
    assert(scheme >= CNX_URL_FILE && scheme <= CNX_URL_HTTPS);
    return scheme == CNX_URL_FILE || scheme == CNX_URL_S3 ||
           scheme == CNX_URL_GS;
}

int cnx_url_check_name(const char *name)
{
    size_t len;
    const char *p, *seg;

    if (name == NULL || name[0] == '\0')
        return cnx_error_set(CNX_ENAME, 0, "object name is empty");
    len = strlen(name);
    if (len > 1024)
        return cnx_error_set(CNX_ENAME, 0,
                             "object name is %zu bytes, over 1024", len);
    if (name[0] == '/')
        return cnx_error_set(CNX_ENAME, 0, "object name '%.100s' is absolute",
                             name);
    for (p = name; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c == 0x7f)
            return cnx_error_set(CNX_ENAME, 0,
                                 "object name '%.100s' has a control "
                                 "character at byte %zu",
                                 name, (size_t)(p - name));
        if (c == '\\')
            return cnx_error_set(CNX_ENAME, 0,
                                 "object name '%.100s' has a backslash", name);
    }
    seg = name;
    for (;;) {
        const char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if (n == 0)
            return cnx_error_set(CNX_ENAME, 0,
                                 "object name '%.100s' has an empty "
                                 "path component",
                                 name);
        if ((n == 1 && seg[0] == '.') ||
            (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return cnx_error_set(CNX_ENAME, 0,
                                 "object name '%.100s' has a '%.*s' "
                                 "component",
                                 name, (int)n, seg);
        if (end == NULL)
            break;
        seg = end + 1;
    }
    return 0;
}

int cnx_url_join(char **out, const char *base, unsigned flags, const char *name)
{
    cnx_url url;
    const char *bad, *sep;
    size_t blen, need;
    int rc;

    assert(out != NULL);
    *out = NULL;
    rc = cnx_url_parse(&url, base, flags);
    if (rc != 0)
        return rc;
    rc = cnx_url_check_name(name);
    if (rc != 0)
        return rc;
    /* check_name allows them, but a URL cannot hold them literally */
    bad = strpbrk(name, "?#");
    if (bad != NULL)
        return cnx_error_set(CNX_ENAME, 0,
                             "object name '%.100s' has a '%c', which a URL "
                             "cannot hold",
                             name, *bad);
    blen = strlen(url.canonical);
    assert(blen > 0);
    sep = url.canonical[blen - 1] == '/' ? "" : "/";
    need = blen + strlen(sep) + strlen(name) + 1;
    if (need > CNX_URL_MAX)
        return fail(url.canonical, "joined with '%.100s' is over %d bytes",
                    name, CNX_URL_MAX - 1);
    *out = malloc(need);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "url: out of memory");
    memcpy(*out, url.canonical, blen);
    memcpy(*out + blen, sep, strlen(sep));
    memcpy(*out + blen + strlen(sep), name, strlen(name) + 1);
    return 0;
}

int cnx_url_under(const char *base, const char *url, const char **rel)
{
    size_t n;
    const char *r = NULL;

    assert(base != NULL && url != NULL);
    n = strlen(base);
    if (n == 0 || strncmp(base, url, n) != 0)
        return 0;
    if (base[n - 1] == '/') /* "file:///": the root holds all */
        r = url + n;
    else if (url[n] == '\0')
        r = url + n;
    else if (url[n] == '/')
        r = url + n + 1;
    if (r == NULL)
        return 0;
    if (rel != NULL)
        *rel = r;
    return 1;
}

int cnx_url_split_object(const char *url, char store_url[CNX_URL_MAX],
                         const char **name)
{
    cnx_url parsed;
    const char *last;
    size_t keep;
    int rc;

    assert(url != NULL && store_url != NULL && name != NULL);
    store_url[0] = '\0';
    *name = NULL;
    rc = cnx_url_parse(&parsed, url, 0);
    if (rc != 0)
        return rc;
    if (strcmp(parsed.canonical, url) != 0)
        return fail(url, "is not canonical (it would be '%s')",
                    show(parsed.canonical).s);
    if (strcmp(parsed.path, "/") == 0 || parsed.path[0] == '\0')
        return fail(url, "names no object (it is a store's root)");
    last = strrchr(url, '/');
    assert(last != NULL && last[1] != '\0');
    keep = (size_t)(last - url);
    /* "file:///obj" keeps its root's slash */
    if (parsed.scheme == CNX_URL_FILE && strchr(parsed.path + 1, '/') == NULL)
        keep++;
    memcpy(store_url, url, keep);
    store_url[keep] = '\0';
    *name = last + 1;
    return 0;
}
