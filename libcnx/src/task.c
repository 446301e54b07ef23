/*
 * task.c - task messages.
 *
 * Parsing is a single pass over the jansson tree that checks each field in
 * schema order and stops at the first bad one with a message naming its
 * path, so a dead-lettered task says exactly what was wrong. Inputs are
 * kept sorted (roles, then object names) so lookups are binary searches and
 * serialisation is canonical. Messages are untrusted: every string and
 * array has a size limit.
 */
#include "cnx/task.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/url.h"
#include "json_int.h"

#define COORD_LIMIT ((int64_t)1 << 40)

static int bad(const char *path, const char *why)
{
    return cnx_error_set(CNX_ESCHEMA, 0, "task: %s: %s", path, why);
}

/* A string of 1..max bytes with no NUL and only chars in class. */
static int get_ident(const json_t *obj, const char *key, const char *path,
                     size_t max, const char *extra, char *dst)
{
    const json_t *v = json_object_get(obj, key);
    const char *s;
    size_t len;
    if (v == NULL)
        return bad(path, "missing");
    if (!json_is_string(v))
        return bad(path, "must be a string");
    s = json_string_value(v);
    len = json_string_length(v);
    if (len == 0 || len > max || strlen(s) != len)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "task: %s: must be 1 to %zu characters", path,
                             max);
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                 (extra != NULL && c != '\0' && strchr(extra, c) != NULL);
        if (!ok)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "task: %s: character '%c' not allowed "
                                 "(allowed: a-z 0-9 %s)",
                                 path, c >= 0x20 && c < 0x7f ? c : '?',
                                 extra ? extra : "");
    }
    memcpy(dst, s, len + 1);
    return 0;
}

/* A store URL: at most 2048 bytes, a URL by cnx/url.h (a plain path is
 * not), and canonical, so that one layer has one spelling in task keys. */
static int get_url(const json_t *obj, const char *key, const char *path,
                   char **dst)
{
    const json_t *v = json_object_get(obj, key);
    char why[sizeof(cnx_error_last()->message)];
    const char *s;
    cnx_url url;
    size_t len;
    if (v == NULL)
        return bad(path, "missing");
    if (!json_is_string(v))
        return bad(path, "must be a string");
    s = json_string_value(v);
    len = json_string_length(v);
    if (len == 0 || len > 2048 || strlen(s) != len)
        return bad(path, "must be a URL of 1 to 2048 characters");
    if (cnx_url_parse(&url, s, 0) != 0) {
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return bad(path, why);
    }
    if (strcmp(url.canonical, s) != 0) {
        snprintf(why, sizeof(why),
                 "URL '%.200s' is not canonical (write '%.200s')", s,
                 url.canonical);
        return bad(path, why);
    }
    *dst = strdup(s);
    if (*dst == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    return 0;
}

static int get_name(const json_t *v, const char *path, char **dst)
{
    char why[sizeof(cnx_error_last()->message)];
    if (!json_is_string(v) || strlen(json_string_value(v)) !=
                                  json_string_length(v))
        return bad(path, "must be a string without NUL");
    if (cnx_url_check_name(json_string_value(v)) != 0) {
        snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
        return bad(path, why);
    }
    *dst = strdup(json_string_value(v));
    if (*dst == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    return 0;
}

int cnx_rfc3339_parse(const char *text, int64_t *out)
{
    struct tm tm;
    int y, mo, d, h, mi, s, n = 0;
    const char *p;
    static const int mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

    memset(&tm, 0, sizeof(tm));
    if (strlen(text) < 20 ||
        sscanf(text, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &s,
               &n) != 6 ||
        n != 19)
        goto fail;
    for (int i = 0; i < 19; i++) {
        if (i == 4 || i == 7) {
            if (text[i] != '-')
                goto fail;
        } else if (i == 10) {
            if (text[i] != 'T')
                goto fail;
        } else if (i == 13 || i == 16) {
            if (text[i] != ':')
                goto fail;
        } else if (text[i] < '0' || text[i] > '9') {
            goto fail;
        }
    }
    p = text + 19;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            goto fail;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (strcmp(p, "Z") != 0)
        goto fail;
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] ||
        h > 23 || mi > 59 || s > 60)
        goto fail;
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    *out = (int64_t)timegm(&tm);
    return 0;
fail:
    return cnx_error_set(CNX_EINVAL, 0,
                         "'%.40s' is not an RFC 3339 UTC time "
                         "(YYYY-MM-DDTHH:MM:SSZ)",
                         text);
}

static int cmp_object(const void *a, const void *b)
{
    return strcmp(((const cnx_task_object *)a)->name,
                  ((const cnx_task_object *)b)->name);
}

static int cmp_input(const void *a, const void *b)
{
    return strcmp(((const cnx_task_input *)a)->role,
                  ((const cnx_task_input *)b)->role);
}

static int parse_input(cnx_task_input *in, const char *role, const json_t *v)
{
    static const char *const keys[] = {"layer", "scale", "objects", NULL};
    char path[160];
    const json_t *objs;
    const char *name;
    json_t *dig;
    size_t k = 0;
    int rc;

    snprintf(in->role, sizeof(in->role), "%s", role);
    snprintf(path, sizeof(path), "inputs.%s", role);
    if (!json_is_object(v))
        return bad(path, "must be an object");
    rc = cnx__json_only_keys(v, keys, CNX_ESCHEMA, path);
    if (rc != 0)
        return cnx_error_wrap("task");
    snprintf(path, sizeof(path), "inputs.%s.layer", role);
    rc = get_url(v, "layer", path, &in->layer);
    if (rc != 0)
        return rc;
    snprintf(path, sizeof(path), "inputs.%s.scale", role);
    if (json_object_get(v, "scale") == NULL)
        return bad(path, "missing");
    rc = get_name(json_object_get(v, "scale"), path, &in->scale);
    if (rc != 0)
        return rc;
    snprintf(path, sizeof(path), "inputs.%s.objects", role);
    objs = json_object_get(v, "objects");
    if (objs == NULL)
        return bad(path, "missing");
    if (!json_is_object(objs))
        return bad(path, "must be an object of name -> sha256 digest");
    if (json_object_size(objs) > CNX_TASK_MAX_OBJECTS)
        return bad(path, "too many objects");
    in->objects = calloc(json_object_size(objs) + 1, sizeof(*in->objects));
    if (in->objects == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    json_object_foreach((json_t *)objs, name, dig) {
        cnx_task_object *o = &in->objects[k];
        snprintf(path, sizeof(path), "inputs.%s.objects[\"%.64s\"]", role,
                 name);
        if (cnx_url_check_name(name) != 0) {
            char why[sizeof(cnx_error_last()->message)];
            snprintf(why, sizeof(why), "%s", cnx_error_last()->message);
            return bad(path, why);
        }
        if (!json_is_string(dig) || !cnx_digest_valid(json_string_value(dig)))
            return bad(path, "must be \"sha256:\" followed by 64 lowercase "
                             "hex digits");
        o->name = strdup(name);
        if (o->name == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
        memcpy(o->digest, json_string_value(dig), CNX_DIGEST_LEN);
        in->nobjects = ++k;
    }
    qsort(in->objects, in->nobjects, sizeof(*in->objects), cmp_object);
    return 0;
}

static int parse_roi(cnx_task *task, const json_t *v)
{
    static const char *const keys[] = {"min", "max", NULL};
    int rc;
    if (v == NULL)
        return bad("roi", "missing");
    if (!json_is_object(v))
        return bad("roi", "must be an object {\"min\":[x,y,z],\"max\":[x,y,z]}");
    rc = cnx__json_only_keys(v, keys, CNX_ESCHEMA, "roi");
    if (rc != 0)
        return cnx_error_wrap("task");
    rc = cnx__json_ivec(json_object_get(v, "min"), 3, -COORD_LIMIT,
                        COORD_LIMIT, task->roi.min, CNX_ESCHEMA, "roi.min");
    if (rc == 0)
        rc = cnx__json_ivec(json_object_get(v, "max"), 3, -COORD_LIMIT,
                            COORD_LIMIT, task->roi.max, CNX_ESCHEMA,
                            "roi.max");
    if (rc != 0)
        return cnx_error_wrap("task");
    for (int i = 0; i < 3; i++) {
        if (task->roi.max[i] <= task->roi.min[i]) {
            char path[32];
            snprintf(path, sizeof(path), "roi.max[%d]", i);
            return bad(path, "must be greater than roi.min on the same axis");
        }
    }
    return 0;
}

static int parse_tree(cnx_task *task, const json_t *js)
{
    static const char *const keys[] = {
        "schema", "request", "stage", "kernel_version", "roi", "halo",
        "inputs", "output", "parameters", "deadline", "retry_budget",
        "priority", NULL};
    static const char *const out_keys[] = {"layer", "scale", NULL};
    const json_t *v;
    const char *role;
    json_t *in;
    int rc;

    if (!json_is_object(js))
        return cnx_error_set(CNX_ESCHEMA, 0, "task: must be a JSON object");
    rc = cnx__json_only_keys(js, keys, CNX_ESCHEMA, "task");
    if (rc != 0)
        return rc;
    v = json_object_get(js, "schema");
    if (v == NULL)
        return bad("schema", "missing");
    if (!json_is_string(v) || strcmp(json_string_value(v), CNX_TASK_SCHEMA))
        return bad("schema", "must be \"" CNX_TASK_SCHEMA "\"");
    rc = get_ident(js, "request", "request", 128, "ABCDEFGHIJKLMNOPQRSTUVWXYZ._:-",
                   task->request);
    if (rc != 0)
        return rc;
    rc = get_ident(js, "stage", "stage", 32, "-", task->stage);
    if (rc != 0)
        return rc;
    if (task->stage[0] < 'a' || task->stage[0] > 'z')
        return bad("stage", "must start with a letter a-z");
    v = json_object_get(js, "kernel_version");
    if (v == NULL)
        return bad("kernel_version", "missing");
    if (!cnx__json_int_in(v, 1, 1000000))
        return bad("kernel_version", "must be an integer in [1, 1000000]");
    task->kernel_version = json_integer_value(v);
    rc = parse_roi(task, json_object_get(js, "roi"));
    if (rc != 0)
        return rc;
    v = json_object_get(js, "halo");
    if (v == NULL)
        task->halo = 2;
    else if (!cnx__json_int_in(v, 0, CNX_TASK_HALO_MAX))
        return bad("halo", "must be an integer in [0, 256]"); /* the max */
    else
        task->halo = json_integer_value(v);
    v = json_object_get(js, "inputs");
    if (v == NULL)
        return bad("inputs", "missing");
    if (!json_is_object(v))
        return bad("inputs", "must be an object of role -> input");
    if (json_object_size(v) > CNX_TASK_MAX_INPUTS)
        return bad("inputs", "too many inputs (at most 16)");
    json_object_foreach((json_t *)v, role, in) {
        char path[96];
        char tmp[64];
        json_t *holder = json_object();
        snprintf(path, sizeof(path), "inputs.%.40s (role)", role);
        if (holder == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
        json_object_set_new(holder, "r", json_string(role));
        rc = get_ident(holder, "r", path, 63, "_-", tmp);
        json_decref(holder);
        if (rc != 0)
            return rc;
        rc = parse_input(&task->inputs[task->ninputs], role, in);
        task->ninputs++;
        if (rc != 0)
            return rc;
    }
    qsort(task->inputs, task->ninputs, sizeof(task->inputs[0]), cmp_input);
    v = json_object_get(js, "output");
    if (v == NULL)
        return bad("output", "missing");
    if (!json_is_object(v))
        return bad("output", "must be an object {\"layer\",\"scale\"}");
    rc = cnx__json_only_keys(v, out_keys, CNX_ESCHEMA, "output");
    if (rc != 0)
        return cnx_error_wrap("task");
    rc = get_url(v, "layer", "output.layer", &task->output_layer);
    if (rc != 0)
        return rc;
    if (json_object_get(v, "scale") == NULL)
        return bad("output.scale", "missing");
    rc = get_name(json_object_get(v, "scale"), "output.scale",
                  &task->output_scale);
    if (rc != 0)
        return rc;
    v = json_object_get(js, "parameters");
    if (v == NULL)
        return bad("parameters", "missing");
    if (!json_is_object(v))
        return bad("parameters", "must be an object");
    task->parameters = cnx__json_canonical(v);
    if (task->parameters == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    v = json_object_get(js, "deadline");
    if (v == NULL)
        return bad("deadline", "missing");
    if (!json_is_string(v) ||
        strlen(json_string_value(v)) >= sizeof(task->deadline) ||
        cnx_rfc3339_parse(json_string_value(v), &task->deadline_unix) != 0)
        return bad("deadline", "must be an RFC 3339 UTC time "
                               "(YYYY-MM-DDTHH:MM:SSZ)");
    snprintf(task->deadline, sizeof(task->deadline), "%s",
             json_string_value(v));
    v = json_object_get(js, "retry_budget");
    if (v == NULL)
        task->retry_budget = 3;
    else if (!cnx__json_int_in(v, 0, 100))
        return bad("retry_budget", "must be an integer in [0, 100]");
    else
        task->retry_budget = json_integer_value(v);
    v = json_object_get(js, "priority");
    if (v != NULL) {
        const char *p = json_is_string(v) ? json_string_value(v) : "";
        if (strcmp(p, "urgent") == 0)
            task->urgent = 1;
        else if (strcmp(p, "bulk") != 0)
            return bad("priority", "must be \"bulk\" or \"urgent\"");
    }
    return 0;
}

static json_t *ivec(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

/* The inputs as role -> {objects} (with_layer adds layer and scale). */
static json_t *inputs_json(const cnx_task *task, int with_layer)
{
    json_t *inputs = json_object();
    for (size_t i = 0; inputs != NULL && i < task->ninputs; i++) {
        const cnx_task_input *in = &task->inputs[i];
        json_t *objs = json_object();
        json_t *entry = json_object();
        for (size_t k = 0; objs != NULL && k < in->nobjects; k++)
            json_object_set_new(objs, in->objects[k].name,
                                json_string(in->objects[k].digest));
        json_object_set_new(entry, "objects", objs);
        if (with_layer) {
            json_object_set_new(entry, "layer", json_string(in->layer));
            json_object_set_new(entry, "scale", json_string(in->scale));
        }
        json_object_set_new(inputs, in->role, entry);
    }
    return inputs;
}

static int dump(json_t *js, char **out)
{
    *out = js ? cnx__json_canonical(js) : NULL;
    json_decref(js);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    return 0;
}

int cnx_task_key_material(const cnx_task *task, char **out)
{
    json_t *params = json_loads(task->parameters, 0, NULL);
    json_t *js = json_pack("{s:I,s:o,s:I,s:o,s:{s:o,s:o},s:s}", "halo",
                           (json_int_t)task->halo, "inputs",
                           inputs_json(task, 0), "kernel_version",
                           (json_int_t)task->kernel_version, "parameters",
                           params, "roi", "min", ivec(task->roi.min), "max",
                           ivec(task->roi.max), "stage", task->stage);
    return dump(js, out);
}

int cnx_task_to_json(const cnx_task *task, char **out)
{
    json_t *params = json_loads(task->parameters, 0, NULL);
    json_t *js = json_pack(
        "{s:s,s:s,s:s,s:I,s:{s:o,s:o},s:I,s:o,s:{s:s,s:s},s:o,s:s,s:I,s:s}",
        "schema", CNX_TASK_SCHEMA, "request", task->request, "stage",
        task->stage, "kernel_version", (json_int_t)task->kernel_version,
        "roi", "min", ivec(task->roi.min), "max", ivec(task->roi.max), "halo",
        (json_int_t)task->halo, "inputs", inputs_json(task, 1), "output",
        "layer", task->output_layer, "scale", task->output_scale,
        "parameters", params, "deadline", task->deadline, "retry_budget",
        (json_int_t)task->retry_budget, "priority",
        task->urgent ? "urgent" : "bulk");
    return dump(js, out);
}

int cnx_task_parse(cnx_task **out, const char *json, size_t len)
{
    cnx_task *task;
    json_t *js = NULL;
    char *material = NULL;
    int rc;

    *out = NULL;
    rc = cnx__json_parse(&js, json, len, CNX_ESCHEMA, "task");
    if (rc != 0)
        return rc;
    task = calloc(1, sizeof(*task));
    if (task == NULL) {
        json_decref(js);
        return cnx_error_set(CNX_ENOMEM, 0, "task: out of memory");
    }
    rc = parse_tree(task, js);
    json_decref(js);
    if (rc == 0)
        rc = cnx_task_key_material(task, &material);
    if (rc != 0) {
        cnx_task_free(task);
        return rc;
    }
    cnx_digest(material, strlen(material), task->key);
    free(material);
    *out = task;
    return 0;
}

void cnx_task_free(cnx_task *task)
{
    if (task == NULL)
        return;
    for (size_t i = 0; i < task->ninputs; i++) {
        cnx_task_input *in = &task->inputs[i];
        for (size_t k = 0; k < in->nobjects; k++)
            free(in->objects[k].name);
        free(in->objects);
        free(in->layer);
        free(in->scale);
    }
    free(task->output_layer);
    free(task->output_scale);
    free(task->parameters);
    free(task);
}

const cnx_task_input *cnx_task_input_get(const cnx_task *task,
                                         const char *role)
{
    for (size_t i = 0; i < task->ninputs; i++)
        if (strcmp(task->inputs[i].role, role) == 0)
            return &task->inputs[i];
    return NULL;
}

const char *cnx_task_expected(const cnx_task *task, const char *role,
                              const char *name)
{
    const cnx_task_input *in = cnx_task_input_get(task, role);
    cnx_task_object key, *hit;
    if (in == NULL)
        return NULL;
    key.name = (char *)name;
    hit = bsearch(&key, in->objects, in->nobjects, sizeof(*in->objects),
                  cmp_object);
    return hit ? hit->digest : NULL;
}
