/*
 * reprocess.c - the pure part of cnx-reprocess: argument parsing, the
 * request message, the controller's state messages, progress lines, the
 * summary and the exit status (see cnx/reprocess.h, docs/reprocess.md).
 *
 * State messages come from the network: the parser is one pass over the
 * jansson tree, per message type, that refuses unknown keys and names the
 * first bad field, with a size limit on every string and array; it agrees
 * with schemas/request-state.schema.json (tests/integration/
 * reprocess_cli.sh checks the messages it plays against both). Text is
 * built in open_memstream buffers. No function here reads a clock, a
 * terminal or the network; single-threaded use per object, no globals.
 */
#include "cnx/reprocess.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/task.h"
#include "cnx/url.h"
#include "json_int.h"

#define COORD_LIMIT ((int64_t)1 << 40)
#define COUNT_LIMIT ((int64_t)1 << 53)
#define MAX_DURATION_S ((int64_t)3650 * 86400)
#define URL_MAX 2048
#define SUBMITTER_MAX 256

static int oom(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "reprocess: out of memory");
}

/* "YYYY-MM-DDTHH:MM:SSZ" of a Unix time. */
static void fmt_utc(int64_t t, char out[32])
{
    struct tm tm;
    time_t tt = (time_t)t;
    if (gmtime_r(&tt, &tm) == NULL ||
        strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
        snprintf(out, 32, "1970-01-01T00:00:00Z");
}

/* "hh:mm:ss" (hours unbounded), "-hh:mm:ss" before zero. */
static void fmt_hms(double seconds, char out[32])
{
    int neg = seconds < 0;
    double s = neg ? -seconds : seconds;
    long long whole;
    if (!isfinite(s) || s > 1e12)
        s = 1e12;
    whole = (long long)(s + 0.5);
    snprintf(out, 32, "%s%02lld:%02lld:%02lld", neg ? "-" : "", whole / 3600,
             whole / 60 % 60, whole % 60);
}

/* ---- text buffers ---------------------------------------------------- */

typedef struct text {
    FILE *f;
    char *buf;
    size_t len;
} text;

static int text_open(text *t)
{
    t->buf = NULL;
    t->len = 0;
    t->f = open_memstream(&t->buf, &t->len);
    return t->f != NULL ? 0 : oom();
}

/* Close t and hand its text to *out (on success only). */
static int text_close(text *t, char **out)
{
    int failed = ferror(t->f);
    if (fclose(t->f) != 0)
        failed = 1;
    t->f = NULL;
    if (failed) {
        free(t->buf);
        t->buf = NULL;
        return oom();
    }
    *out = t->buf;
    t->buf = NULL;
    return 0;
}

/* ---- arguments ------------------------------------------------------- */

int cnx_duration_parse(const char *text_, int64_t *seconds)
{
    static const struct {
        char unit;
        int64_t seconds;
    } units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
    size_t n = text_ != NULL ? strlen(text_) : 0;
    char num[24];
    int64_t v;

    if (n < 2 || n > sizeof(num))
        goto bad;
    for (size_t i = 0; i + 1 < n; i++)
        if (text_[i] < '0' || text_[i] > '9')
            goto bad;
    snprintf(num, sizeof(num), "%.*s", (int)(n - 1), text_);
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        if (text_[n - 1] != units[u].unit)
            continue;
        if (cnx_cli_int(num, 0, MAX_DURATION_S, &v) != 0 ||
            v > MAX_DURATION_S / units[u].seconds)
            return cnx_error_set(
                CNX_EINVAL, 0, "duration '%.40s': more than 3650 days", text_);
        if (v == 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "duration '%.40s': must be at least 1%c",
                                 text_, units[u].unit);
        *seconds = v * units[u].seconds;
        return 0;
    }
bad:
    return cnx_error_set(CNX_EINVAL, 0,
                         "duration '%.40s': want a whole number and a unit "
                         "s, m, h or d (90s, 30m, 24h, 2d)",
                         text_ != NULL ? text_ : "");
}

int cnx_reprocess_deadline_parse(const char *text_, int64_t now,
                                 int64_t *deadline)
{
    size_t n = strlen(text_);
    int64_t t;

    if (n > 0 && strchr("smhd", text_[n - 1]) != NULL) {
        int64_t d;
        if (cnx_duration_parse(text_, &d) != 0)
            return cnx_error_wrap("--deadline");
        *deadline = now + d;
        return 0;
    }
    if (cnx_rfc3339_parse(text_, &t) != 0)
        return cnx_error_set(CNX_EINVAL, 0,
                             "--deadline '%.40s': neither a duration (90s, "
                             "30m, 24h, 2d) nor an RFC 3339 UTC time "
                             "(2026-11-23T13:00:00Z)",
                             text_);
    if (t <= now)
        return cnx_error_set(CNX_EINVAL, 0,
                             "--deadline '%.40s': not in the future", text_);
    *deadline = t;
    return 0;
}

int cnx_reprocess_roi_parse(const char *text_, cnx_box *roi)
{
    static const char axis[] = "xyz";
    int64_t v[6];

    if (cnx_cli_ints(text_, v, 6) != 0)
        return cnx_error_set(CNX_EINVAL, 0,
                             "--roi '%.80s': want six comma-separated "
                             "integers x0,y0,z0,x1,y1,z1",
                             text_);
    for (int i = 0; i < 6; i++)
        if (v[i] < -COORD_LIMIT || v[i] > COORD_LIMIT)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "--roi: %c%d = %lld is out of range "
                                 "(at most 2^40 in magnitude)",
                                 axis[i % 3], i / 3, (long long)v[i]);
    for (int a = 0; a < 3; a++)
        if (v[a + 3] <= v[a])
            return cnx_error_set(CNX_EINVAL, 0,
                                 "--roi: %c1 (%lld) must be greater than "
                                 "%c0 (%lld)",
                                 axis[a], (long long)v[a + 3], axis[a],
                                 (long long)v[a]);
    *roi = cnx_box_make(v[0], v[1], v[2], v[3], v[4], v[5]);
    return 0;
}

static int id_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
           c == '-';
}

int cnx_request_id_check(const char *id)
{
    size_t n = strlen(id);
    if (n == 0)
        return cnx_error_set(CNX_EINVAL, 0, "request id: empty");
    if (n > CNX_REQUEST_ID_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "request id: %zu characters, over %d", n,
                             CNX_REQUEST_ID_MAX);
    for (size_t i = 0; i < n; i++)
        if (!id_char(id[i]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "request id '%.128s': character '%c' not "
                                 "allowed (allowed: A-Z a-z 0-9 . _ : -)",
                                 id,
                                 id[i] >= 0x20 && id[i] < 0x7f ? id[i] : '?');
    return 0;
}

void cnx_request_id_default(char out[CNX_REQUEST_ID_MAX + 1], int64_t now,
                            const char *host, long pid)
{
    char stamp[32], tail[32];
    struct tm tm;
    time_t tt = (time_t)now;
    size_t used, room, i;

    if (gmtime_r(&tt, &tm) == NULL ||
        strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm) == 0)
        snprintf(stamp, sizeof(stamp), "19700101T000000Z");
    snprintf(tail, sizeof(tail), "-%ld", pid < 0 ? 0 : pid);
    used = (size_t)snprintf(out, CNX_REQUEST_ID_MAX + 1, "req-%s-", stamp);
    room = CNX_REQUEST_ID_MAX - used - strlen(tail);
    if (host == NULL || host[0] == '\0')
        host = "localhost";
    for (i = 0; host[i] != '\0' && i < room; i++)
        out[used + i] = id_char(host[i]) ? host[i] : '-';
    snprintf(out + used + i, CNX_REQUEST_ID_MAX + 1 - used - i, "%s", tail);
}

/* A store URL by cnx/url.h (not a plain path), of at most URL_MAX bytes
 * as the task parser accepts them; its canonical form into canonical
 * (may be NULL). */
static int check_url(const char *what, const char *s,
                     char canonical[CNX_URL_MAX])
{
    char why[sizeof(cnx_error_last()->message)];
    size_t len = strlen(s);
    cnx_url url;
    if (len == 0 || len > URL_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s: must be a URL of 1 to %d characters", what,
                             URL_MAX);
    if (cnx_url_parse(&url, s, 0) != 0) {
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return cnx_error_set(CNX_EINVAL, 0, "%s: %s", what, why);
    }
    if (canonical != NULL)
        memcpy(canonical, url.canonical, strlen(url.canonical) + 1);
    return 0;
}

int cnx_reprocess_dataset_url(const char *arg, char **out)
{
    char why[sizeof(cnx_error_last()->message)];
    struct stat st;
    char *real = NULL;
    cnx_url url;
    int rc;

    *out = NULL;
    if (strstr(arg, "://") != NULL) {
        rc = check_url("--dataset", arg, url.canonical);
        if (rc != 0)
            return rc;
        *out = strdup(url.canonical);
        return *out != NULL ? 0 : oom();
    }
    if (arg[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "--dataset: empty");
    if (stat(arg, &st) != 0)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "--dataset '%.200s': no such directory", arg);
    if (!S_ISDIR(st.st_mode))
        return cnx_error_set(CNX_EINVAL, 0,
                             "--dataset '%.200s': not a directory", arg);
    real = realpath(arg, NULL);
    if (real == NULL)
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "--dataset '%.200s': cannot resolve the path",
                             arg);
    /* the real path of a local directory, as a file:// URL */
    rc = cnx_url_parse(&url, real, CNX_URL_ALLOW_PATH);
    free(real);
    if (rc != 0) {
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return cnx_error_set(rc, 0, "--dataset: %s", why);
    }
    rc = check_url("--dataset", url.canonical, NULL);
    if (rc != 0)
        return rc;
    *out = strdup(url.canonical);
    return *out != NULL ? 0 : oom();
}

/* ---- the request ------------------------------------------------------ */

static json_t *vec3(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

int cnx_request_build(const cnx_request_spec *spec, char **out)
{
    json_t *workflow = NULL, *doc = NULL;
    char submitted[32], deadline[32];
    int rc;

    *out = NULL;
    rc = cnx_request_id_check(spec->request);
    if (rc != 0)
        return rc;
    if (spec->workflow == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "request: workflow: missing");
    rc = cnx__json_parse(&workflow, spec->workflow, strlen(spec->workflow),
                         CNX_EINVAL, "request: workflow");
    if (rc != 0)
        return rc;
    if (!json_is_object(workflow)) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request: workflow: must be a JSON object");
        goto done;
    }
    rc = check_url("request: dataset", spec->dataset, NULL);
    if (rc != 0)
        goto done;
    for (int a = 0; a < 3; a++) {
        if (spec->roi.min[a] < -COORD_LIMIT || spec->roi.max[a] > COORD_LIMIT ||
            spec->roi.max[a] <= spec->roi.min[a]) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "request: roi: max[%d] must be greater than "
                               "min[%d], both at most 2^40 in magnitude",
                               a, a);
            goto done;
        }
    }
    if (spec->deadline <= spec->submitted) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request: deadline: must be after the "
                           "submission time");
        goto done;
    }
    if (spec->submitter == NULL || spec->submitter[0] == '\0' ||
        strlen(spec->submitter) > SUBMITTER_MAX) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request: submitter: must be 1 to %d characters",
                           SUBMITTER_MAX);
        goto done;
    }
    for (const char *p = spec->submitter; *p != '\0'; p++) {
        if ((unsigned char)*p < 0x20 || *p == 0x7f) {
            rc = cnx_error_set(CNX_EINVAL, 0,
                               "request: submitter: control character");
            goto done;
        }
    }
    fmt_utc(spec->submitted, submitted);
    fmt_utc(spec->deadline, deadline);
    doc = json_pack("{s:s, s:s, s:O, s:s, s:{s:o, s:o}, s:s, s:s, s:b, s:s}",
                    "schema", CNX_REQUEST_SCHEMA, "request", spec->request,
                    "workflow", workflow, "dataset", spec->dataset, "roi",
                    "min", vec3(spec->roi.min), "max", vec3(spec->roi.max),
                    "deadline", deadline, "submitted", submitted, "reuse",
                    spec->reuse ? 1 : 0, "submitter", spec->submitter);
    if (doc == NULL) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "request: a string is not valid UTF-8");
        goto done;
    }
    *out = cnx__json_canonical(doc);
    if (*out == NULL)
        rc = oom();
done:
    json_decref(doc);
    json_decref(workflow);
    return rc;
}

/* ---- state messages ----------------------------------------------------- */

const char *cnx_slo_name(cnx_slo slo)
{
    switch (slo) {
    case CNX_SLO_OK:
        return "ok";
    case CNX_SLO_AT_RISK:
        return "at_risk";
    case CNX_SLO_MISSED:
        return "missed";
    case CNX_SLO_MET:
        return "met";
    case CNX_SLO_NONE:
        break;
    }
    return "none";
}

/* Path of field key under prefix ("stages[2]" + "done"). */
typedef struct fpath {
    char s[96];
} fpath;

static fpath at(const char *prefix, const char *key)
{
    fpath p;
    if (prefix == NULL || prefix[0] == '\0')
        snprintf(p.s, sizeof(p.s), "%s", key);
    else
        snprintf(p.s, sizeof(p.s), "%s.%s", prefix, key);
    return p;
}

static int bad(const fpath *p, const char *why)
{
    return cnx_error_set(CNX_ESCHEMA, 0, "request-state: %s: %s", p->s, why);
}

static const json_t *field(const json_t *obj, const char *key)
{
    return json_object_get(obj, key);
}

/* A string of 1..max bytes, no NUL or control character. */
static int get_text(const json_t *obj, const char *prefix, const char *key,
                    size_t max, char *dst, char **dup)
{
    const json_t *v = field(obj, key);
    fpath p = at(prefix, key);
    const char *s;
    size_t len;
    if (v == NULL)
        return bad(&p, "missing");
    if (!json_is_string(v))
        return bad(&p, "must be a string");
    s = json_string_value(v);
    len = json_string_length(v);
    if (len == 0 || len > max || strlen(s) != len)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "request-state: %s: must be 1 to %zu "
                             "characters",
                             p.s, max);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return bad(&p, "control character");
    if (dst != NULL)
        memcpy(dst, s, len + 1);
    if (dup != NULL) {
        *dup = strdup(s);
        if (*dup == NULL)
            return oom();
    }
    return 0;
}

/* A store URL (see check_url). */
static int get_url(const json_t *obj, const char *prefix, const char *key,
                   char **dup)
{
    fpath p = at(prefix, key);
    int rc = get_text(obj, prefix, key, URL_MAX, NULL, dup);
    if (rc == 0 && check_url(p.s, *dup, NULL) != 0) {
        char why[sizeof(cnx_error_last()->message)];
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return cnx_error_set(CNX_ESCHEMA, 0, "request-state: %s", why);
    }
    return rc;
}

/* ^[a-z][a-z0-9-]{0,31}$, as stage names are. */
static int get_name32(const json_t *obj, const char *prefix, const char *key,
                      char dst[33])
{
    fpath p = at(prefix, key);
    int rc = get_text(obj, prefix, key, 32, dst, NULL);
    if (rc != 0)
        return rc;
    if (dst[0] < 'a' || dst[0] > 'z')
        return bad(&p, "must start with a-z");
    for (const char *c = dst; *c != '\0'; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
              *c == '-'))
            return bad(&p, "only a-z 0-9 - allowed");
    return 0;
}

/* RFC 3339 UTC, "YYYY-MM-DDTHH:MM:SS[.1-9 digits]Z". */
static int get_time_value(const json_t *v, const fpath *p, char dst[32],
                          int64_t *unix_time)
{
    const char *s;
    size_t len;
    if (v == NULL)
        return bad(p, "missing");
    if (!json_is_string(v))
        return bad(p, "must be a string");
    s = json_string_value(v);
    len = json_string_length(v);
    if (len > 30 || strlen(s) != len ||
        (len > 20 && (s[19] != '.' || len < 22)) ||
        cnx_rfc3339_parse(s, unix_time) != 0)
        return bad(p, "must be an RFC 3339 UTC time "
                      "(YYYY-MM-DDTHH:MM:SS[.fraction]Z)");
    memcpy(dst, s, len + 1);
    return 0;
}

static int get_time(const json_t *obj, const char *key, char dst[32],
                    int64_t *unix_time)
{
    fpath p = at("", key);
    return get_time_value(field(obj, key), &p, dst, unix_time);
}

static int get_count(const json_t *obj, const char *prefix, const char *key,
                     int64_t *dst)
{
    const json_t *v = field(obj, key);
    fpath p = at(prefix, key);
    if (v == NULL)
        return bad(&p, "missing");
    if (!cnx__json_int_in(v, 0, COUNT_LIMIT))
        return bad(&p, "must be an integer >= 0");
    *dst = json_integer_value(v);
    return 0;
}

/* A number >= 0; with nullable, null gives NAN. */
static int get_number(const json_t *obj, const char *prefix, const char *key,
                      int nullable, double *dst)
{
    const json_t *v = field(obj, key);
    fpath p = at(prefix, key);
    double d;
    if (v == NULL)
        return bad(&p, "missing");
    if (nullable && json_is_null(v)) {
        *dst = NAN;
        return 0;
    }
    if (!json_is_number(v))
        return bad(&p, nullable ? "must be a number >= 0 or null"
                                : "must be a number >= 0");
    d = json_number_value(v);
    if (!(d >= 0) || !isfinite(d))
        return bad(&p, "must be >= 0");
    *dst = d;
    return 0;
}

static int get_digest(const json_t *obj, const char *prefix, const char *key,
                      char dst[CNX_DIGEST_LEN])
{
    fpath p = at(prefix, key);
    char buf[CNX_DIGEST_LEN + 1];
    int rc = get_text(obj, prefix, key, CNX_DIGEST_LEN, buf, NULL);
    if (rc != 0)
        return rc;
    if (!cnx_digest_valid(buf))
        return bad(&p, "must be sha256: and 64 lowercase hex digits");
    memcpy(dst, buf, strlen(buf) + 1);
    return 0;
}

static int get_box(const json_t *obj, const char *prefix, const char *key,
                   cnx_box *dst)
{
    static const char *const keys[] = {"min", "max", NULL};
    const json_t *v = field(obj, key);
    fpath p = at(prefix, key);
    fpath pm;
    int rc;
    if (v == NULL)
        return bad(&p, "missing");
    if (!json_is_object(v))
        return bad(&p, "must be an object {min, max}");
    rc = cnx__json_only_keys(v, keys, CNX_ESCHEMA, p.s);
    if (rc != 0)
        return cnx_error_wrap("request-state");
    pm = at(p.s, "min");
    if (field(v, "min") == NULL)
        return bad(&pm, "missing");
    rc = cnx__json_ivec(field(v, "min"), 3, -COORD_LIMIT, COORD_LIMIT, dst->min,
                        CNX_ESCHEMA, pm.s);
    if (rc != 0)
        return cnx_error_wrap("request-state");
    pm = at(p.s, "max");
    if (field(v, "max") == NULL)
        return bad(&pm, "missing");
    rc = cnx__json_ivec(field(v, "max"), 3, -COORD_LIMIT, COORD_LIMIT, dst->max,
                        CNX_ESCHEMA, pm.s);
    if (rc != 0)
        return cnx_error_wrap("request-state");
    return 0;
}

static int get_enum(const json_t *obj, const char *prefix, const char *key,
                    const char *const *names, int *dst)
{
    const json_t *v = field(obj, key);
    fpath p = at(prefix, key);
    char why[160];
    size_t used = 0;
    if (v == NULL)
        return bad(&p, "missing");
    if (json_is_string(v)) {
        for (int i = 0; names[i] != NULL; i++) {
            if (strcmp(json_string_value(v), names[i]) == 0 &&
                strlen(names[i]) == json_string_length(v)) {
                *dst = i;
                return 0;
            }
        }
    }
    used = (size_t)snprintf(why, sizeof(why), "must be one of");
    for (int i = 0; names[i] != NULL && used < sizeof(why); i++)
        used += (size_t)snprintf(why + used, sizeof(why) - used, "%s \"%s\"",
                                 i > 0 ? "," : "", names[i]);
    return bad(&p, why);
}

static int check_keys(const json_t *obj, const char *const *allowed,
                      const char *path)
{
    char what[128];
    snprintf(what, sizeof(what), "request-state: %s", path);
    return cnx__json_only_keys(obj, allowed, CNX_ESCHEMA,
                               path[0] != '\0' ? what : "request-state");
}

/* An array field of at most max items. */
static int get_array(const json_t *obj, const char *key, size_t max,
                     const json_t **dst)
{
    const json_t *v = field(obj, key);
    fpath p = at("", key);
    if (v == NULL)
        return bad(&p, "missing");
    if (!json_is_array(v))
        return bad(&p, "must be an array");
    if (json_array_size(v) > max)
        return cnx_error_set(
            CNX_ESCHEMA, 0, "request-state: %s: more than %zu items", p.s, max);
    *dst = v;
    return 0;
}

static const char *const accepted_stage_keys[] = {
    "stage", "worker", "kind", "tasks", "region", "scale", "output", NULL};
static const char *const progress_stage_keys[] = {
    "stage", "total", "done", "running", "failed", "dead", "reused", NULL};
static const char *const finished_stage_keys[] = {
    "stage",     "worker",     "total",         "done",      "dead",
    "never_run", "reused",     "attempts",      "voxels",    "cpu_s",
    "wall_s",    "bytes_read", "bytes_written", "mvx_per_s", "core_hours",
    "mm3",       "gb_per_mm3", "usd_per_mm3",   NULL};

static int parse_stage(const json_t *v, cnx_state_type type, const char *p,
                       cnx_state_stage *st)
{
    static const char *const kinds[] = {"map", "reduce", NULL};
    static const char *const out_keys[] = {"layer", "scale", NULL};
    fpath fp;
    int rc;

    st->mvx_per_s = st->gb_per_mm3 = st->usd_per_mm3 = NAN;
    if (!json_is_object(v)) {
        fpath self = at("", p);
        return bad(&self, "must be an object");
    }
    rc = check_keys(v,
                    type == CNX_STATE_ACCEPTED   ? accepted_stage_keys
                    : type == CNX_STATE_PROGRESS ? progress_stage_keys
                                                 : finished_stage_keys,
                    p);
    if (rc == 0)
        rc = get_name32(v, p, "stage", st->stage);
    if (rc != 0)
        return rc;
    if (type == CNX_STATE_ACCEPTED) {
        const json_t *o;
        rc = get_name32(v, p, "worker", st->worker);
        if (rc == 0)
            rc = get_enum(v, p, "kind", kinds, &st->reduce);
        if (rc == 0)
            rc = get_count(v, p, "tasks", &st->tasks);
        if (rc == 0)
            rc = get_box(v, p, "region", &st->region);
        if (rc == 0)
            rc = get_text(v, p, "scale", 128, st->scale, NULL);
        if (rc != 0)
            return rc;
        fp = at(p, "output");
        o = field(v, "output");
        if (o == NULL)
            return bad(&fp, "missing");
        if (!json_is_object(o))
            return bad(&fp, "must be an object {layer, scale}");
        rc = check_keys(o, out_keys, fp.s);
        if (rc == 0)
            rc = get_url(o, fp.s, "layer", &st->output_layer);
        if (rc == 0)
            rc = get_text(o, fp.s, "scale", 128, st->output_scale, NULL);
        return rc;
    }
    if (type == CNX_STATE_FINISHED)
        rc = get_name32(v, p, "worker", st->worker);
    if (rc == 0)
        rc = get_count(v, p, "total", &st->total);
    if (rc == 0)
        rc = get_count(v, p, "done", &st->done);
    if (rc == 0 && type == CNX_STATE_PROGRESS)
        rc = get_count(v, p, "running", &st->running);
    if (rc == 0 && type == CNX_STATE_PROGRESS)
        rc = get_count(v, p, "failed", &st->failed);
    if (rc == 0)
        rc = get_count(v, p, "dead", &st->dead);
    if (rc == 0 && type == CNX_STATE_FINISHED)
        rc = get_count(v, p, "never_run", &st->never_run);
    if (rc == 0)
        rc = get_count(v, p, "reused", &st->reused);
    if (rc != 0 || type != CNX_STATE_FINISHED)
        return rc;
    rc = get_count(v, p, "attempts", &st->attempts);
    if (rc == 0)
        rc = get_count(v, p, "voxels", &st->voxels);
    if (rc == 0)
        rc = get_number(v, p, "cpu_s", 0, &st->cpu_s);
    if (rc == 0)
        rc = get_number(v, p, "wall_s", 0, &st->wall_s);
    if (rc == 0)
        rc = get_count(v, p, "bytes_read", &st->bytes_read);
    if (rc == 0)
        rc = get_count(v, p, "bytes_written", &st->bytes_written);
    if (rc == 0)
        rc = get_number(v, p, "mvx_per_s", 1, &st->mvx_per_s);
    if (rc == 0)
        rc = get_number(v, p, "core_hours", 0, &st->core_hours);
    if (rc == 0)
        rc = get_number(v, p, "mm3", 0, &st->mm3);
    if (rc == 0)
        rc = get_number(v, p, "gb_per_mm3", 1, &st->gb_per_mm3);
    if (rc == 0)
        rc = get_number(v, p, "usd_per_mm3", 1, &st->usd_per_mm3);
    return rc;
}

static int parse_issue(const json_t *v, int violation, const char *p,
                       cnx_state_issue *is)
{
    static const char *const vkeys[] = {"kind",   "task_key", "stage",
                                        "roi",    "object",   "expected",
                                        "got",    NULL};
    static const char *const kinds[] = {"reproducibility", "immutability",
                                        NULL};
    static const char *const fkeys[] = {"task_key", "stage", "roi", "error",
                                        NULL};
    int rc;
    if (!json_is_object(v)) {
        fpath self = at("", p);
        return bad(&self, "must be an object");
    }
    rc = check_keys(v, violation ? vkeys : fkeys, p);
    if (rc == 0)
        rc = get_digest(v, p, "task_key", is->task_key);
    if (rc == 0)
        rc = get_name32(v, p, "stage", is->stage);
    if (rc == 0)
        rc = get_box(v, p, "roi", &is->roi);
    if (rc != 0)
        return rc;
    if (!violation)
        return get_text(v, p, "error", CNX_STATE_MAX_TEXT, NULL, &is->error);
    {
        int k = 0;
        rc = get_enum(v, p, "kind", kinds, &k);
        if (rc != 0)
            return rc;
        snprintf(is->kind, sizeof(is->kind), "%s", kinds[k]);
    }
    rc = get_url(v, p, "object", &is->object);
    if (rc == 0)
        rc = get_digest(v, p, "expected", is->expected);
    if (rc == 0)
        rc = get_digest(v, p, "got", is->got);
    return rc;
}

/* eta: RFC 3339 time or null (required). */
static int get_eta(const json_t *obj, cnx_request_state *st)
{
    const json_t *v = field(obj, "eta");
    fpath p = at("", "eta");
    if (v == NULL)
        return bad(&p, "missing");
    if (json_is_null(v)) {
        st->eta[0] = '\0';
        st->eta_unix = 0;
        return 0;
    }
    if (!json_is_string(v))
        return bad(&p, "must be an RFC 3339 UTC time or null");
    return get_time_value(v, &p, st->eta, &st->eta_unix);
}

static int parse_stages(const json_t *obj, cnx_request_state *st)
{
    const json_t *arr;
    int rc = get_array(obj, "stages", CNX_STATE_MAX_STAGES, &arr);
    if (rc != 0)
        return rc;
    if (json_array_size(arr) == 0)
        return 0;
    st->stages = calloc(json_array_size(arr), sizeof(*st->stages));
    if (st->stages == NULL)
        return oom();
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char p[32];
        snprintf(p, sizeof(p), "stages[%zu]", i);
        st->nstages = i + 1;
        rc = parse_stage(json_array_get(arr, i), st->type, p, &st->stages[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int parse_issues(const json_t *obj, int violation, cnx_request_state *st)
{
    const char *key = violation ? "violations" : "failures";
    cnx_state_issue **list = violation ? &st->violations : &st->failures;
    size_t *n = violation ? &st->nviolations : &st->nfailures;
    const json_t *arr;
    int rc = get_array(obj, key, CNX_STATE_MAX_ISSUES, &arr);
    if (rc != 0 || json_array_size(arr) == 0)
        return rc;
    *list = calloc(json_array_size(arr), sizeof(**list));
    if (*list == NULL)
        return oom();
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char p[40];
        snprintf(p, sizeof(p), "%s[%zu]", key, i);
        *n = i + 1;
        rc = parse_issue(json_array_get(arr, i), violation, p, &(*list)[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int parse_notes(const json_t *obj, cnx_request_state *st)
{
    const json_t *arr;
    int rc = get_array(obj, "notes", CNX_STATE_MAX_NOTES, &arr);
    if (rc != 0 || json_array_size(arr) == 0)
        return rc;
    st->notes = calloc(json_array_size(arr), sizeof(*st->notes));
    if (st->notes == NULL)
        return oom();
    for (size_t i = 0; i < json_array_size(arr); i++) {
        const json_t *v = json_array_get(arr, i);
        fpath p;
        snprintf(p.s, sizeof(p.s), "notes[%zu]", i);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > CNX_STATE_MAX_TEXT ||
            strlen(json_string_value(v)) != json_string_length(v))
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "request-state: %s: must be a string of 1 "
                                 "to %d characters",
                                 p.s, CNX_STATE_MAX_TEXT);
        st->notes[i] = strdup(json_string_value(v));
        if (st->notes[i] == NULL)
            return oom();
        st->nnotes = i + 1;
    }
    return 0;
}

static const char *const type_names[] = {"accepted", "refused",  "progress",
                                         "slo",      "finished", NULL};
static const char *const accepted_keys[] = {
    "schema", "request", "type",  "time",      "deadline",
    "tasks",  "stages",  "notes", "externals", NULL};
static const char *const refused_keys[] = {"schema", "request", "type",
                                           "time",   "error",   NULL};
static const char *const progress_keys[] = {
    "schema", "request", "type",   "time",   "deadline",
    "eta",    "slo",     "urgent", "stages", NULL};
static const char *const slo_keys[] = {"schema", "request", "type",     "time",
                                       "slo",    "eta",     "deadline", NULL};
static const char *const finished_keys[] = {
    "schema",    "request",  "type",       "time",     "outcome",
    "submitted", "deadline", "elapsed_s",  "slo",      "repeated",
    "identical", "stages",   "violations", "failures", "price_per_core_hour",
    NULL};

static int parse_body(const json_t *doc, cnx_request_state *st)
{
    static const char *const progress_slo[] = {"ok", "at_risk", "missed", NULL};
    static const char *const slo_slo[] = {"ok", "at_risk", "missed", "met",
                                          NULL};
    static const char *const finished_slo[] = {"met", "missed", NULL};
    static const char *const outcomes[] = {"done", "failed", NULL};
    static const cnx_slo slo_of[] = {CNX_SLO_OK, CNX_SLO_AT_RISK,
                                     CNX_SLO_MISSED, CNX_SLO_MET};
    static const char *const *const keys_of[] = {
        accepted_keys, refused_keys, progress_keys, slo_keys, finished_keys};
    int t, rc, i;

    rc = get_text(doc, "", "request", CNX_REQUEST_ID_MAX, st->request, NULL);
    if (rc == 0 && cnx_request_id_check(st->request) != 0) {
        fpath p = at("", "request");
        rc = bad(&p, "must be 1 to 128 of A-Z a-z 0-9 . _ : -");
    }
    if (rc == 0)
        rc = get_enum(doc, "", "type", type_names, &t);
    if (rc != 0)
        return rc;
    st->type = (cnx_state_type)(t + 1);
    rc = check_keys(doc, keys_of[t], "");
    if (rc == 0)
        rc = get_time(doc, "time", st->time, &st->time_unix);
    if (rc == 0 && st->type != CNX_STATE_REFUSED)
        rc = get_time(doc, "deadline", st->deadline, &st->deadline_unix);
    if (rc != 0)
        return rc;
    switch (st->type) {
    case CNX_STATE_ACCEPTED:
        rc = get_count(doc, "", "tasks", &st->tasks);
        if (rc == 0)
            rc = parse_stages(doc, st);
        if (rc == 0)
            rc = parse_notes(doc, st);
        return rc;
    case CNX_STATE_REFUSED:
        return get_text(doc, "", "error", CNX_STATE_MAX_TEXT, NULL, &st->error);
    case CNX_STATE_PROGRESS:
        rc = get_eta(doc, st);
        if (rc == 0)
            rc = get_enum(doc, "", "slo", progress_slo, &i);
        if (rc != 0)
            return rc;
        st->slo = slo_of[i];
        if (field(doc, "urgent") == NULL ||
            !json_is_boolean(field(doc, "urgent"))) {
            fpath p = at("", "urgent");
            return bad(&p, field(doc, "urgent") == NULL ? "missing"
                                                        : "must be a boolean");
        }
        st->urgent = json_is_true(field(doc, "urgent"));
        return parse_stages(doc, st);
    case CNX_STATE_SLO:
        rc = get_enum(doc, "", "slo", slo_slo, &i);
        if (rc == 0)
            rc = get_eta(doc, st);
        if (rc == 0)
            st->slo = slo_of[i];
        return rc;
    case CNX_STATE_FINISHED:
        rc = get_enum(doc, "", "outcome", outcomes, &st->outcome_failed);
        if (rc == 0)
            rc = get_time(doc, "submitted", st->submitted, &st->submitted_unix);
        if (rc == 0)
            rc = get_number(doc, "", "elapsed_s", 0, &st->elapsed_s);
        if (rc == 0)
            rc = get_enum(doc, "", "slo", finished_slo, &i);
        if (rc != 0)
            return rc;
        st->slo = i == 0 ? CNX_SLO_MET : CNX_SLO_MISSED;
        rc = get_count(doc, "", "repeated", &st->repeated);
        if (rc == 0)
            rc = get_count(doc, "", "identical", &st->identical);
        if (rc == 0)
            rc = parse_stages(doc, st);
        if (rc == 0)
            rc = parse_issues(doc, 1, st);
        if (rc == 0)
            rc = parse_issues(doc, 0, st);
        if (rc == 0)
            rc = get_number(doc, "", "price_per_core_hour", 1,
                            &st->price_per_core_hour);
        return rc;
    }
    return cnx_error_set(CNX_ESCHEMA, 0, "request-state: type: unknown");
}

int cnx_request_state_parse(cnx_request_state **out, const char *json,
                            size_t len)
{
    cnx_request_state *st = NULL;
    json_t *doc = NULL;
    const json_t *schema;
    int rc;

    *out = NULL;
    rc = cnx__json_parse(&doc, json, len, CNX_ESCHEMA, "request-state");
    if (rc != 0)
        return rc;
    if (!json_is_object(doc)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "request-state: must be a JSON object");
        goto done;
    }
    schema = field(doc, "schema");
    if (schema == NULL || !json_is_string(schema)) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "request-state: schema: %s",
                           schema == NULL ? "missing" : "must be a string");
        goto done;
    }
    if (strcmp(json_string_value(schema), CNX_REQUEST_STATE_SCHEMA) != 0) {
        rc = cnx_error_set(CNX_ENOTFOUND, 0,
                           "not a request-state message (schema '%.64s')",
                           json_string_value(schema));
        goto done;
    }
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
        rc = oom();
        goto done;
    }
    st->price_per_core_hour = NAN;
    rc = parse_body(doc, st);
    if (rc == 0) {
        *out = st;
        st = NULL;
    }
done:
    cnx_request_state_free(st);
    json_decref(doc);
    return rc;
}

void cnx_request_state_free(cnx_request_state *state)
{
    if (state == NULL)
        return;
    for (size_t i = 0; i < state->nstages; i++)
        free(state->stages[i].output_layer);
    free(state->stages);
    for (size_t i = 0; i < state->nnotes; i++)
        free(state->notes[i]);
    free(state->notes);
    for (size_t i = 0; i < state->nviolations; i++) {
        free(state->violations[i].object);
        free(state->violations[i].error);
    }
    free(state->violations);
    for (size_t i = 0; i < state->nfailures; i++) {
        free(state->failures[i].object);
        free(state->failures[i].error);
    }
    free(state->failures);
    free(state->error);
    free(state);
}

/* ---- results ------------------------------------------------------------ */

int cnx_reprocess_exit_code(const cnx_request_state *fin)
{
    int failed = fin->outcome_failed || fin->nfailures > 0;

    assert(fin->type == CNX_STATE_FINISHED);
    for (size_t i = 0; i < fin->nstages; i++)
        if (fin->stages[i].dead > 0 || fin->stages[i].never_run > 0)
            failed = 1;
    /* A repeated task that did not finish this time is a failure, not a
     * violation: only a mismatch that failures do not explain is. */
    if (fin->nviolations > 0 || (fin->identical < fin->repeated && !failed))
        return CNX_REPROCESS_VIOLATION;
    if (failed)
        return CNX_REPROCESS_FAILED;
    if (fin->slo == CNX_SLO_MISSED)
        return CNX_REPROCESS_MISSED;
    return CNX_REPROCESS_DONE;
}

const char *cnx_reprocess_exit_name(int code)
{
    switch (code) {
    case CNX_REPROCESS_DONE:
        return "done, every repeated task bit-identical";
    case CNX_REPROCESS_ERROR:
        return "error";
    case CNX_REPROCESS_USAGE:
        return "usage error or request refused";
    case CNX_REPROCESS_VIOLATION:
        return "reproducibility or immutability violation";
    case CNX_REPROCESS_FAILED:
        return "tasks failed (dead-lettered or never run)";
    case CNX_REPROCESS_MISSED:
        return "deadline missed";
    }
    return "unknown";
}

/* A figure, or "n/a" for null. */
static const char *fig(double v, const char *fmt, char buf[32])
{
    if (isnan(v))
        return "n/a";
    snprintf(buf, 32, fmt, v);
    return buf;
}

static void put_roi(FILE *f, const cnx_box *b)
{
    fprintf(f, "[%lld,%lld,%lld]-[%lld,%lld,%lld]", (long long)b->min[0],
            (long long)b->min[1], (long long)b->min[2], (long long)b->max[0],
            (long long)b->max[1], (long long)b->max[2]);
}

int cnx_reprocess_summary_text(const cnx_request_state *fin, char **out)
{
    int code = cnx_reprocess_exit_code(fin);
    char hms[32], b1[32], b2[32], b3[32], b4[32], b5[32];
    double core_hours = 0;
    int64_t voxels = 0, dead = 0, never_run = 0;
    text t;
    int rc;

    *out = NULL;
    rc = text_open(&t);
    if (rc != 0)
        return rc;
    fmt_hms(fin->elapsed_s, hms);
    for (size_t i = 0; i < fin->nstages; i++) {
        dead += fin->stages[i].dead;
        never_run += fin->stages[i].never_run;
    }
    fprintf(t.f, "request %s: %s in %s (%.1f s); deadline %s: SLO ",
            fin->request, fin->outcome_failed ? "failed" : "done", hms,
            fin->elapsed_s, fin->deadline);
    /* Never "met" while a task is dead or never ran, whatever the
     * message says: the region was not processed. */
    if (dead + never_run > 0)
        fprintf(t.f, "MISSED (incomplete: %lld task%s dead, %lld never ran)\n",
                (long long)dead, dead == 1 ? "" : "s", (long long)never_run);
    else
        fprintf(t.f, "%s\n", fin->slo == CNX_SLO_MET ? "met" : "MISSED");
    fprintf(t.f, "  %-16s %-12s %13s %8s %9s %8s %8s\n", "stage", "worker",
            "done/total", "dead", "never-run", "reused", "attempts");
    for (size_t i = 0; i < fin->nstages; i++) {
        const cnx_state_stage *s = &fin->stages[i];
        char dt[48];
        snprintf(dt, sizeof(dt), "%lld/%lld", (long long)s->done,
                 (long long)s->total);
        fprintf(t.f, "  %-16s %-12s %13s %8lld %9lld %8lld %8lld\n", s->stage,
                s->worker, dt, (long long)s->dead, (long long)s->never_run,
                (long long)s->reused, (long long)s->attempts);
    }
    fprintf(t.f, "cost:\n");
    for (size_t i = 0; i < fin->nstages; i++) {
        const cnx_state_stage *s = &fin->stages[i];
        core_hours += s->core_hours;
        voxels += s->voxels;
        fprintf(t.f,
                "  %-16s %s MVx/s, %s core-hours, %s mm³, %s GB/mm³, "
                "%s%s/mm³ (%lld voxels, %.1f cpu-s, %.1f wall-s)\n",
                s->stage, fig(s->mvx_per_s, "%.4g", b1),
                fig(s->core_hours, "%.4g", b2), fig(s->mm3, "%.4g", b3),
                fig(s->gb_per_mm3, "%.4g", b4),
                isnan(s->usd_per_mm3) ? "no $" : "$",
                isnan(s->usd_per_mm3) ? "" : fig(s->usd_per_mm3, "%.4g", b5),
                (long long)s->voxels, s->cpu_s, s->wall_s);
    }
    fprintf(t.f, "  total: %lld voxels, %s core-hours", (long long)voxels,
            fig(core_hours, "%.4g", b1));
    if (!isnan(fin->price_per_core_hour))
        fprintf(t.f, ", $%s at $%s/core-hour",
                fig(core_hours * fin->price_per_core_hour, "%.4g", b2),
                fig(fin->price_per_core_hour, "%.4g", b3));
    else
        fprintf(t.f, " (no price per core-hour given)");
    fprintf(t.f, "\n");
    if (fin->repeated == 0)
        fprintf(t.f, "0 of 0 repeated tasks bit-identical (no task had been "
                     "done before)\n");
    else
        fprintf(t.f, "%lld of %lld repeated tasks bit-identical\n",
                (long long)fin->identical, (long long)fin->repeated);
    if (fin->nviolations > 0)
        fprintf(t.f, "%zu violation(s):\n", fin->nviolations);
    for (size_t i = 0; i < fin->nviolations; i++) {
        const cnx_state_issue *v = &fin->violations[i];
        fprintf(t.f, "  VIOLATION (%s) task %s stage %s roi ", v->kind,
                v->task_key, v->stage);
        put_roi(t.f, &v->roi);
        fprintf(t.f, "\n    object   %s\n    expected %s\n    got      %s\n",
                v->object, v->expected, v->got);
    }
    if (fin->nfailures > 0)
        fprintf(t.f, "%zu failure(s):\n", fin->nfailures);
    for (size_t i = 0; i < fin->nfailures; i++) {
        const cnx_state_issue *f = &fin->failures[i];
        fprintf(t.f, "  FAILED task %s stage %s roi ", f->task_key, f->stage);
        put_roi(t.f, &f->roi);
        fprintf(t.f, "\n    %s\n", f->error);
    }
    fprintf(t.f, "exit status %d: %s\n", code, cnx_reprocess_exit_name(code));
    return text_close(&t, out);
}

int cnx_reprocess_result_json(const char *msg, size_t len, const char *plan,
                              size_t plan_len, int exit_code, char **out)
{
    json_t *doc = NULL, *p = NULL;
    int rc;

    *out = NULL;
    rc = cnx__json_parse(&doc, msg, len, CNX_ESCHEMA, "result");
    if (rc == 0 && plan != NULL)
        rc = cnx__json_parse(&p, plan, plan_len, CNX_ESCHEMA, "result plan");
    if (rc != 0)
        goto done;
    if (!json_is_object(doc) || (p != NULL && !json_is_object(p))) {
        rc = cnx_error_set(CNX_ESCHEMA, 0, "result: not a JSON object");
        goto done;
    }
    json_object_del(doc, "schema");
    if (p != NULL) {
        if (json_object_get(doc, "tasks") == NULL &&
            json_object_get(p, "tasks") != NULL)
            json_object_set(doc, "tasks", json_object_get(p, "tasks"));
        if (json_object_get(doc, "notes") == NULL &&
            json_object_get(p, "notes") != NULL)
            json_object_set(doc, "notes", json_object_get(p, "notes"));
    }
    if (json_object_set_new(doc, "exit_code", json_integer(exit_code)) != 0) {
        rc = oom();
        goto done;
    }
    /* For people and scripts, not for hashing: 15 significant digits give
     * back the controller's short decimals (0.00089, not
     * 0.00088999999999999995). */
    *out = json_dumps(doc,
                      JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(15));
    if (*out == NULL)
        rc = oom();
done:
    json_decref(p);
    json_decref(doc);
    return rc;
}

int cnx_reprocess_error_json(const char *request, const char *error,
                             int exit_code, char **out)
{
    json_t *doc = json_pack("{s:s, s:s, s:i}", "request", request, "error",
                            error, "exit_code", exit_code);
    *out = NULL;
    if (doc == NULL)
        return oom();
    *out = cnx__json_canonical(doc);
    json_decref(doc);
    return *out != NULL ? 0 : oom();
}

/* ---- progress --------------------------------------------------------- */

#define BAR_WIDTH 24
#define PLAIN_EVERY_S 5.0
#define TTY_MIN_S 0.1
#define TTY_TICK_S 1.0

typedef struct view_stage {
    char stage[33];
    int64_t n[6];     /* total, done, running, failed, dead, reused */
    int64_t shown[6]; /* as last printed (plain) */
    int ever_shown;
} view_stage;

struct cnx_reprocess_view {
    int tty;
    int drawn;         /* lines of the block on the terminal */
    int dirty;         /* counts not yet drawn / printed */
    int have_progress; /* a progress message was seen */
    double last_draw;  /* mono time of the last redraw or plain print */
    int printed;       /* plain: anything printed yet */
    cnx_slo slo;
    int urgent;
    int64_t deadline_unix;
    int64_t eta_unix; /* 0: unknown */
    char deadline[32];
    char eta[32];
    size_t nstages;
    view_stage *stages;
};

int cnx_reprocess_view_new(cnx_reprocess_view **out, int tty)
{
    cnx_reprocess_view *v = calloc(1, sizeof(*v));
    *out = NULL;
    if (v == NULL)
        return oom();
    v->tty = tty;
    v->slo = CNX_SLO_OK;
    *out = v;
    return 0;
}

void cnx_reprocess_view_free(cnx_reprocess_view *view)
{
    if (view == NULL)
        return;
    free(view->stages);
    free(view);
}

void cnx_reprocess_view_detach(cnx_reprocess_view *view)
{
    view->drawn = 0;
}

static const char *slo_word(cnx_slo slo)
{
    switch (slo) {
    case CNX_SLO_AT_RISK:
        return "AT RISK";
    case CNX_SLO_MISSED:
        return "MISSED";
    case CNX_SLO_MET:
        return "met";
    default:
        return "ok";
    }
}

static void draw_block(cnx_reprocess_view *v, int64_t now, FILE *f)
{
    char eta[32], dl[32];
    const char *color;
    int lines = (int)v->nstages + 1;

    if (v->drawn > 0)
        fprintf(f, "\033[%dA", v->drawn);
    for (size_t i = 0; i < v->nstages; i++) {
        const view_stage *s = &v->stages[i];
        int64_t total = s->n[0], done = s->n[1];
        int fill =
            total > 0 ? (int)((done > total ? total : done) * BAR_WIDTH / total)
                      : 0;
        char bar[BAR_WIDTH + 1];
        for (int b = 0; b < BAR_WIDTH; b++)
            bar[b] = b < fill ? '#' : '.';
        bar[BAR_WIDTH] = '\0';
        fprintf(f,
                "\r\033[2K%-12.12s [%s] %5lld/%-5lld %lld running, "
                "%lld failed, %lld dead",
                s->stage, bar, (long long)done, (long long)total,
                (long long)s->n[2], (long long)s->n[3], (long long)s->n[4]);
        if (s->n[5] > 0)
            fprintf(f, ", %lld reused", (long long)s->n[5]);
        fprintf(f, "\n");
    }
    if (v->eta_unix > 0)
        fmt_hms((double)(v->eta_unix - now), eta);
    else
        snprintf(eta, sizeof(eta), "--:--:--");
    fmt_hms((double)(v->deadline_unix - now), dl);
    color = v->slo == CNX_SLO_AT_RISK  ? "\033[33m"
            : v->slo == CNX_SLO_MISSED ? "\033[31m"
                                       : "";
    fprintf(f, "\r\033[2KETA %s vs deadline %s (%s%s%s%s)\n", eta, dl, color,
            slo_word(v->slo), color[0] != '\0' ? "\033[0m" : "",
            v->urgent ? ", urgent lane" : "");
    /* A shorter block than before: clear the rest and come back up. */
    if (v->drawn > lines) {
        for (int i = lines; i < v->drawn; i++)
            fprintf(f, "\r\033[2K\n");
        fprintf(f, "\033[%dA", v->drawn - lines);
    }
    v->drawn = lines;
}

static void print_changes(cnx_reprocess_view *v, FILE *f)
{
    int any = 0;
    for (size_t i = 0; i < v->nstages; i++) {
        view_stage *s = &v->stages[i];
        if (s->ever_shown && memcmp(s->n, s->shown, sizeof(s->n)) == 0)
            continue;
        fprintf(f,
                "cnx-reprocess: %s: %lld/%lld done, %lld running, %lld "
                "failed attempts, %lld dead",
                s->stage, (long long)s->n[1], (long long)s->n[0],
                (long long)s->n[2], (long long)s->n[3], (long long)s->n[4]);
        if (s->n[5] > 0)
            fprintf(f, ", %lld reused", (long long)s->n[5]);
        fprintf(f, "\n");
        memcpy(s->shown, s->n, sizeof(s->n));
        s->ever_shown = 1;
        any = 1;
    }
    if (any && v->have_progress)
        fprintf(f, "cnx-reprocess: ETA %s, deadline %s, SLO %s\n",
                v->eta[0] != '\0' ? v->eta : "unknown",
                v->deadline[0] != '\0' ? v->deadline : "unknown",
                slo_word(v->slo));
}

/* Take in the stages of a progress message, keeping what was printed. */
static int take_stages(cnx_reprocess_view *v, const cnx_request_state *st)
{
    view_stage *ns = NULL;
    if (st->nstages > 0) {
        ns = calloc(st->nstages, sizeof(*ns));
        if (ns == NULL)
            return oom();
    }
    for (size_t i = 0; i < st->nstages; i++) {
        const cnx_state_stage *s = &st->stages[i];
        snprintf(ns[i].stage, sizeof(ns[i].stage), "%s", s->stage);
        for (size_t j = 0; j < v->nstages; j++) {
            if (strcmp(v->stages[j].stage, s->stage) == 0) {
                memcpy(ns[i].shown, v->stages[j].shown, sizeof(ns[i].shown));
                ns[i].ever_shown = v->stages[j].ever_shown;
                break;
            }
        }
        ns[i].n[0] = s->total;
        ns[i].n[1] = s->done;
        ns[i].n[2] = s->running;
        ns[i].n[3] = s->failed;
        ns[i].n[4] = s->dead;
        ns[i].n[5] = s->reused;
    }
    free(v->stages);
    v->stages = ns;
    v->nstages = st->nstages;
    return 0;
}

/* Write what is due: the block (terminal) or changed stages (plain). */
static void flush_due(cnx_reprocess_view *v, double mono, int64_t now,
                      int force, FILE *f)
{
    if (!v->have_progress)
        return;
    if (v->tty) {
        if ((v->dirty && (force || mono - v->last_draw >= TTY_MIN_S)) ||
            mono - v->last_draw >= TTY_TICK_S) {
            draw_block(v, now, f);
            v->last_draw = mono;
            v->dirty = 0;
        }
    } else if (v->dirty &&
               (!v->printed || mono - v->last_draw >= PLAIN_EVERY_S)) {
        print_changes(v, f);
        v->last_draw = mono;
        v->printed = 1;
        v->dirty = 0;
    }
}

int cnx_reprocess_view_update(cnx_reprocess_view *view,
                              const cnx_request_state *st, double mono,
                              int64_t now, char **out)
{
    cnx_slo before = view->slo;
    text t;
    int rc;

    *out = NULL;
    rc = text_open(&t);
    if (rc != 0)
        return rc;
    if (st->type == CNX_STATE_PROGRESS || st->type == CNX_STATE_SLO) {
        snprintf(view->deadline, sizeof(view->deadline), "%s", st->deadline);
        view->deadline_unix = st->deadline_unix;
        snprintf(view->eta, sizeof(view->eta), "%s", st->eta);
        view->eta_unix = st->eta[0] != '\0' ? st->eta_unix : 0;
        view->slo = st->slo;
        view->dirty = 1;
    }
    if (st->type == CNX_STATE_PROGRESS) {
        rc = take_stages(view, st);
        if (rc != 0) {
            fclose(t.f);
            free(t.buf);
            return rc;
        }
        view->urgent = st->urgent;
        view->have_progress = 1;
    }
    if (!view->tty && view->slo != before)
        fprintf(t.f, "cnx-reprocess: SLO %s: ETA %s, deadline %s%s\n",
                slo_word(view->slo),
                view->eta[0] != '\0' ? view->eta : "unknown", view->deadline,
                view->urgent ? " (urgent lane)" : "");
    flush_due(view, mono, now, view->tty && view->slo != before, t.f);
    return text_close(&t, out);
}

int cnx_reprocess_view_tick(cnx_reprocess_view *view, double mono, int64_t now,
                            char **out)
{
    text t;
    int rc;

    *out = NULL;
    rc = text_open(&t);
    if (rc != 0)
        return rc;
    flush_due(view, mono, now, 0, t.f);
    return text_close(&t, out);
}
