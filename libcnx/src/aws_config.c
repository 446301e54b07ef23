/*
 * aws_config.c - the credentials, region and endpoint every AWS tool reads:
 * environment variables first, then the shared credentials and config files
 * (INI), in the AWS CLI's order (see cnx__aws_config_load in sigv4_int.h).
 *
 * The INI reader is deliberately small and strict: "[section]", "key =
 * value", whole-line comments starting with '#' or ';', inline comments
 * after white space, and the CLI's indented sub-settings ("s3 =" followed by
 * indented lines), which are skipped. Anything else is CNX_EINVAL naming the
 * file and line. Values are never put in messages: they may be secrets.
 * Load: once per process, at start-up. Threading: reads the environment
 * with getenv, so it must not race a setenv in another thread.
 */
#include "sigv4_int.h"

#include <assert.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#include "cnx/error.h"

/* Longest line in a shared file: session tokens run to a few KiB. */
#define INI_LINE_MAX (16 * 1024)
#define CFG_PATH_MAX 4096

/* What one profile section of one file says. */
typedef struct file_values {
    const char *path;    /* the file, for messages */
    const char *profile; /* the profile wanted */
    int is_config;       /* config file ("[profile p]") or credentials */
    int found;           /* the profile's section exists */
    char access_key[128];
    char secret_key[128];
    char session_token[4096];
    char region[64];
    char endpoint[512];
} file_values;

/* ---- a strict, small INI reader ---------------------------------------- */

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Trim white space at both ends of s in place; return the new start. */
static char *trim(char *s)
{
    while (is_blank(*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && is_blank(s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Cut an inline comment: '#' or ';' after white space. */
static void cut_inline_comment(char *s)
{
    for (char *p = s; *p; p++) {
        if ((*p == '#' || *p == ';') && p > s && is_blank(p[-1])) {
            *p = '\0';
            return;
        }
    }
}

typedef int (*ini_visit)(file_values *fv, const char *section, const char *key,
                         const char *value, int line);

/* Parse one line of a section's body or a header. section holds the
 * current section name (cap bytes); *key_indent is the indentation of the
 * last key line, or -1 when the section has none yet. */
static int ini_line(file_values *fv, char *line, int lineno, char *section,
                    size_t cap, int *key_indent, ini_visit visit)
{
    int indent = 0;
    while (is_blank(line[indent]))
        indent++;
    char *s = line + indent;
    if (*s == '\0' || *s == '#' || *s == ';')
        return 0;
    /* A line indented under a key continues it (the CLI's nested
     * settings, "s3 =\n  addressing_style = path"): nothing we read. */
    if (*key_indent >= 0 && indent > *key_indent)
        return 0;
    if (*s == '[') {
        char *close = strchr(s, ']');
        if (close == NULL)
            return cnx_error_set(CNX_EINVAL, 0, "%s:%d: '[' without ']'",
                                 fv->path, lineno);
        char *rest = trim(close + 1);
        if (*rest != '\0' && *rest != '#' && *rest != ';')
            return cnx_error_set(CNX_EINVAL, 0,
                                 "%s:%d: text after a section header", fv->path,
                                 lineno);
        *close = '\0';
        char *name = trim(s + 1);
        if (*name == '\0')
            return cnx_error_set(CNX_EINVAL, 0, "%s:%d: empty section name",
                                 fv->path, lineno);
        size_t n = strlen(name);
        if (n >= cap)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "%s:%d: section name longer than %zu bytes",
                                 fv->path, lineno, cap - 1);
        memcpy(section, name, n + 1);
        *key_indent = -1;
        return 0;
    }
    char *eq = strchr(s, '=');
    if (eq == NULL)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s:%d: expected \"[section]\", \"key = value\" "
                             "or a comment",
                             fv->path, lineno);
    if (section[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s:%d: \"key = value\" before any [section]",
                             fv->path, lineno);
    *eq = '\0';
    char *key = trim(s);
    if (*key == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "%s:%d: empty key", fv->path,
                             lineno);
    for (const char *k = key; *k; k++)
        if (is_blank(*k))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "%s:%d: white space inside a key", fv->path,
                                 lineno);
    cut_inline_comment(eq + 1);
    *key_indent = indent;
    return visit(fv, section, key, trim(eq + 1), lineno);
}

/* Read path line by line into visit. A file that does not exist is no
 * error (nothing is visited); one that cannot be read is. */
static int ini_parse(file_values *fv, ini_visit visit)
{
    char section[256] = "";
    int key_indent = -1, lineno = 0, rc = 0;
    char *line = NULL;
    size_t line_cap = 0;
    FILE *f = fopen(fv->path, "r");
    if (f == NULL) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return cnx_error_set(CNX_EINVAL, 0, "%s: cannot open: %s", fv->path,
                             strerror(errno));
    }
    for (;;) {
        ssize_t n = getline(&line, &line_cap, f);
        if (n < 0)
            break;
        lineno++;
        if (n > INI_LINE_MAX) {
            rc =
                cnx_error_set(CNX_EINVAL, 0, "%s:%d: line longer than %d bytes",
                              fv->path, lineno, INI_LINE_MAX);
            break;
        }
        if ((size_t)n != strlen(line)) {
            rc = cnx_error_set(CNX_EINVAL, 0, "%s:%d: NUL byte in line",
                               fv->path, lineno);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        rc = ini_line(fv, line, lineno, section, sizeof(section), &key_indent,
                      visit);
        if (rc < 0)
            break;
    }
    if (rc == 0 && ferror(f))
        rc = cnx_error_set(CNX_EINVAL, 0, "%s: read error after line %d",
                           fv->path, lineno);
    if (line != NULL)
        OPENSSL_cleanse(line, line_cap); /* it held secrets */
    free(line);
    fclose(f);
    return rc;
}

/* ---- the two shared files ---------------------------------------------- */

/* Copy a value read from a file; over-long is an error naming the key. */
static int set_from_file(char *dst, size_t cap, const char *value,
                         const char *key, const file_values *fv, int line)
{
    size_t n = strlen(value);
    if (n >= cap)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s:%d: %s is longer than %zu bytes", fv->path,
                             line, key, cap - 1);
    memcpy(dst, value, n + 1);
    return 0;
}

/* Is section the wanted profile? The credentials file names profiles bare
 * ("[p]"); the config file as "[profile p]", the default one as
 * "[default]" (the CLI also takes "[profile default]"). */
static int section_matches(const file_values *fv, const char *section)
{
    const char *want = fv->profile;
    if (!fv->is_config)
        return strcmp(section, want) == 0;
    if (strcmp(want, "default") == 0 && strcmp(section, "default") == 0)
        return 1;
    if (strncmp(section, "profile", 7) != 0 || !is_blank(section[7]))
        return 0;
    const char *name = section + 7;
    while (is_blank(*name))
        name++;
    return strcmp(name, want) == 0;
}

static int visit_profile(file_values *fv, const char *section, const char *key,
                         const char *value, int line)
{
    if (!section_matches(fv, section))
        return 0;
    fv->found = 1;
    /* Keys are case-insensitive, as Python's configparser makes them. */
    if (strcasecmp(key, "aws_access_key_id") == 0)
        return set_from_file(fv->access_key, sizeof(fv->access_key), value, key,
                             fv, line);
    if (strcasecmp(key, "aws_secret_access_key") == 0)
        return set_from_file(fv->secret_key, sizeof(fv->secret_key), value, key,
                             fv, line);
    if (strcasecmp(key, "aws_session_token") == 0)
        return set_from_file(fv->session_token, sizeof(fv->session_token),
                             value, key, fv, line);
    if (fv->is_config && strcasecmp(key, "region") == 0)
        return set_from_file(fv->region, sizeof(fv->region), value, key, fv,
                             line);
    if (fv->is_config && strcasecmp(key, "endpoint_url") == 0)
        return set_from_file(fv->endpoint, sizeof(fv->endpoint), value, key, fv,
                             line);
    return 0;
}

/* The file named by env_var, else $HOME/<home_rel>; "" when neither. */
static int file_path(char *out, size_t cap, const char *env_var,
                     const char *home_rel)
{
    const char *p = getenv(env_var);
    int n = 0;
    if (p != NULL && p[0] != '\0') {
        n = snprintf(out, cap, "%s", p);
    } else {
        const char *home = getenv("HOME");
        if (home == NULL || home[0] == '\0') {
            out[0] = '\0';
            return 0;
        }
        n = snprintf(out, cap, "%s/%s", home, home_rel);
    }
    if (n < 0 || (size_t)n >= cap)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s (or $HOME) is longer than %zu bytes", env_var,
                             cap - 1);
    return 0;
}

static int load_file(file_values *fv)
{
    if (fv->path[0] == '\0')
        return 0;
    int rc = ini_parse(fv, visit_profile);
    if (rc < 0)
        return rc;
    if ((fv->access_key[0] != '\0') != (fv->secret_key[0] != '\0'))
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s [%s]: aws_access_key_id and "
                             "aws_secret_access_key must be set together",
                             fv->path, fv->profile);
    return 0;
}

/* ---- the environment --------------------------------------------------- */

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return (v != NULL && v[0] != '\0') ? v : NULL;
}

static int set_from_env(char *dst, size_t cap, const char *name)
{
    const char *v = env(name);
    assert(v != NULL);
    size_t n = strlen(v);
    if (n >= cap)
        return cnx_error_set(CNX_EINVAL, 0, "%s is longer than %zu bytes", name,
                             cap - 1);
    memcpy(dst, v, n + 1);
    return 0;
}

/* The first of the variables that is set, into dst; 1 if one was. */
static int first_env(char *dst, size_t cap, const char *a, const char *b,
                     int *rc)
{
    const char *name = env(a) ? a : (b != NULL && env(b)) ? b : NULL;
    if (name == NULL)
        return 0;
    *rc = set_from_env(dst, cap, name);
    return 1;
}

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    assert(n < cap);
    (void)cap;
    memcpy(dst, src, n + 1);
}

int cnx__aws_config_load(cnx__aws_config *out)
{
    char creds_path[CFG_PATH_MAX], config_path[CFG_PATH_MAX];
    int rc = 0;
    assert(out != NULL);
    memset(out, 0, sizeof(*out));
    file_values *creds = calloc(2, sizeof(*creds));
    if (creds == NULL)
        return cnx_error_set(CNX_ENOMEM, 1, "aws config: out of memory");
    file_values *config = creds + 1;

    const char *profile = env("AWS_PROFILE");
    int profile_named = profile != NULL;
    if (profile == NULL)
        profile = "default";
    if (strlen(profile) >= sizeof(out->profile)) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "AWS_PROFILE is longer than %zu "
                           "bytes",
                           sizeof(out->profile) - 1);
        goto done;
    }
    copy_str(out->profile, sizeof(out->profile), profile);

    rc = file_path(creds_path, sizeof(creds_path),
                   "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
    if (rc == 0)
        rc = file_path(config_path, sizeof(config_path), "AWS_CONFIG_FILE",
                       ".aws/config");
    if (rc < 0)
        goto done;
    creds->path = creds_path;
    creds->profile = out->profile;
    config->path = config_path;
    config->profile = out->profile;
    config->is_config = 1;
    /* The config file is always read (region, endpoint); the credentials
     * file only when the environment has no keys, as the CLI does. */
    rc = load_file(config);
    if (rc < 0)
        goto done;

    /* Credentials: environment, credentials file, config file. */
    const char *ak = env("AWS_ACCESS_KEY_ID");
    const char *sk = env("AWS_SECRET_ACCESS_KEY");
    if ((ak != NULL) != (sk != NULL)) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must "
                           "be set together");
        goto done;
    }
    if (ak == NULL) {
        rc = load_file(creds);
        if (rc < 0)
            goto done;
    }
    if (ak != NULL) {
        rc = set_from_env(out->access_key, sizeof(out->access_key),
                          "AWS_ACCESS_KEY_ID");
        if (rc == 0)
            rc = set_from_env(out->secret_key, sizeof(out->secret_key),
                              "AWS_SECRET_ACCESS_KEY");
        if (rc == 0 && env("AWS_SESSION_TOKEN") != NULL)
            rc = set_from_env(out->session_token, sizeof(out->session_token),
                              "AWS_SESSION_TOKEN");
        copy_str(out->source, sizeof(out->source), "environment");
    } else {
        const file_values *from = creds->access_key[0]    ? creds
                                  : config->access_key[0] ? config
                                                          : NULL;
        if (from == NULL && profile_named && !creds->found && !config->found) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "AWS_PROFILE names profile '%s', found in "
                               "neither %s nor %s",
                               out->profile, creds_path[0] ? creds_path : "-",
                               config_path[0] ? config_path : "-");
            goto done;
        }
        if (from != NULL) {
            copy_str(out->access_key, sizeof(out->access_key),
                     from->access_key);
            copy_str(out->secret_key, sizeof(out->secret_key),
                     from->secret_key);
            copy_str(out->session_token, sizeof(out->session_token),
                     from->session_token);
            /* A long path is cut short: the source is for messages only. */
            int n = snprintf(out->source, sizeof(out->source), "%s [%s]",
                             from->path, out->profile);
            (void)n;
        } else {
            copy_str(out->source, sizeof(out->source), "none");
        }
    }
    if (rc < 0)
        goto done;

    /* Region: AWS_REGION, AWS_DEFAULT_REGION, config file, us-east-1. */
    if (!first_env(out->region, sizeof(out->region), "AWS_REGION",
                   "AWS_DEFAULT_REGION", &rc))
        copy_str(out->region, sizeof(out->region),
                 config->region[0] ? config->region : "us-east-1");
    if (rc < 0)
        goto done;

    /* Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, config file. */
    if (!first_env(out->endpoint, sizeof(out->endpoint), "AWS_ENDPOINT_URL_S3",
                   "AWS_ENDPOINT_URL", &rc))
        copy_str(out->endpoint, sizeof(out->endpoint), config->endpoint);

done:
    OPENSSL_cleanse(creds, 2 * sizeof(*creds));
    free(creds);
    if (rc < 0)
        OPENSSL_cleanse(out, sizeof(*out));
    return rc;
}
