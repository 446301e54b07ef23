/*
 * workflow.c - workflow documents: parse, check, order.
 *
 * One pass over the jansson tree checks every field in document order and
 * stops at the first bad one with a message naming its path
 * ("workflow: stages[1].inputs.source: unknown key 'scal'"); then the graph
 * is checked by name (duplicates, unknown references, output layers that
 * are also external inputs) and ordered with Kahn's algorithm, taking the
 * earliest stage in the file among the ready ones, so the order depends on
 * the document alone. A cycle is reported as the stages along it. A
 * workflow is small (at most CNX_WF_MAX_STAGES stages), so the quadratic
 * graph work is nothing; the document is untrusted (it arrives inside
 * requests): every string and array has a limit. No global state.
 */
#include "cnx/workflow.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/task.h"
#include "json_int.h"

#define DESCRIPTION_MAX 4096

/* A stage as read, before references are resolved (file order). */
typedef struct raw_stage {
    cnx_wf_stage st;
    char dep_names[CNX_WF_MAX_DEPS][33]; /* depends_on */
    size_t ndep_names;
    char src[CNX_WF_MAX_INPUTS][33]; /* producing stage per input, "" */
} raw_stage;

static int bad(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int bad(const char *path, const char *fmt, ...)
{
    char why[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    return cnx_error_set(CNX_ESCHEMA, 0, "workflow: %s: %s", path, why);
}

static int nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "workflow: out of memory");
}

/*
 * An identifier of 1..max characters: the first a letter a-z when
 * letter_first, every one from a-z 0-9 and extra.
 */
static int ident_ok(const char *s, size_t max, int letter_first,
                    const char *extra)
{
    size_t n = strlen(s);
    if (n == 0 || n > max)
        return 0;
    if (letter_first && !(s[0] >= 'a' && s[0] <= 'z'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
              strchr(extra, c) != NULL))
            return 0;
    }
    return 1;
}

/* The string at key (NUL-free), or NULL with an error set. */
static const char *get_string(const json_t *obj, const char *key,
                              const char *path, int required, int *rc)
{
    const json_t *v = json_object_get(obj, key);
    *rc = 0;
    if (v == NULL) {
        if (required)
            *rc = bad(path, "missing");
        return NULL;
    }
    if (!json_is_string(v) ||
        strlen(json_string_value(v)) != json_string_length(v)) {
        *rc = bad(path, "must be a string");
        return NULL;
    }
    return json_string_value(v);
}

/*
 * A layer path relative to the dataset: components of [A-Za-z0-9._-]+
 * joined by '/', none "." or "..", at most CNX_WF_PATH_MAX bytes. With
 * versioned, the last component must be v<positive integer>.
 */
static int check_path(const char *s, const char *path, int versioned)
{
    size_t n = strlen(s), start = 0;
    const char *last;
    if (n == 0 || n > CNX_WF_PATH_MAX)
        return bad(path, "must be a path of 1 to %d characters",
                   CNX_WF_PATH_MAX);
    if (s[0] == '/')
        return bad(path,
                   "'%.128s' must be relative to the dataset (no "
                   "leading '/')",
                   s);
    for (size_t i = 0; i <= n; i++) {
        char c = s[i];
        if (c == '/' || c == '\0') {
            size_t len = i - start;
            if (len == 0)
                return bad(path, "'%.128s' has an empty component", s);
            if ((len == 1 && s[start] == '.') ||
                (len == 2 && s[start] == '.' && s[start + 1] == '.'))
                return bad(path,
                           "'%.128s' must not have a '.' or '..' "
                           "component",
                           s);
            start = i + 1;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return bad(path,
                       "'%.128s': character '%c' not allowed "
                       "(allowed: A-Z a-z 0-9 . _ - and '/' between "
                       "components)",
                       s, c >= 0x20 && c < 0x7f ? c : '?');
    }
    if (!versioned)
        return 0;
    last = strrchr(s, '/');
    last = last ? last + 1 : s;
    if (last[0] != 'v' || last[1] < '1' || last[1] > '9' || strlen(last) > 10 ||
        strspn(last + 1, "0123456789") != strlen(last + 1))
        return bad(path,
                   "'%.128s' is not a versioned namespace: its last "
                   "component must be v<positive integer>, as in "
                   "'pyramid/v1'",
                   s);
    return 0;
}

static int dup_into(char **dst, const char *s)
{
    *dst = strdup(s);
    return *dst == NULL ? nomem() : 0;
}

static int parse_input(raw_stage *rs, size_t k, const char *role,
                       const json_t *v, const char *spath)
{
    static const char *const keys[] = {"layer", "scale", "stage", "objects",
                                       "tileset", NULL};
    cnx_wf_input *in = &rs->st.inputs[k];
    char path[160], sub[192];
    const char *s;
    int rc;

    snprintf(path, sizeof(path), "%s.inputs.%s", spath, role);
    if (!ident_ok(role, 63, 0, "_-"))
        return bad(path, "role must be 1 to 63 characters of a-z 0-9 _ -");
    snprintf(in->role, sizeof(in->role), "%s", role);
    in->stage = -1;
    if (!json_is_object(v))
        return bad(path, "must be an object {\"layer\": ...}, "
                         "{\"tileset\": ...} or {\"stage\": ...}");
    rc = cnx__json_only_keys(v, keys, CNX_ESCHEMA, path);
    if (rc != 0)
        return cnx_error_wrap("workflow");
    if (json_object_get(v, "stage") != NULL) {
        if (json_object_get(v, "layer") != NULL ||
            json_object_get(v, "scale") != NULL)
            return bad(path, "an input from a stage takes only \"stage\" "
                             "and \"objects\" (not \"layer\" or "
                             "\"scale\")");
        snprintf(sub, sizeof(sub), "%s.stage", path);
        s = get_string(v, "stage", sub, 1, &rc);
        if (rc != 0)
            return rc;
        if (!ident_ok(s, 32, 1, "_-"))
            return bad(sub, "'%.64s' is not a stage name", s);
        snprintf(rs->src[k], sizeof(rs->src[k]), "%s", s);
        snprintf(sub, sizeof(sub), "%s.objects", path);
        s = get_string(v, "objects", sub, 0, &rc);
        if (rc != 0)
            return rc;
        if (s != NULL && !ident_ok(s, 32, 1, "_-"))
            return bad(sub, "'%.64s' is not a directory name (a-z first, "
                            "then a-z 0-9 _ -, at most 32)", s);
        snprintf(in->objects, sizeof(in->objects), "%s", s ? s : "");
        return 0;
    }
    if (json_object_get(v, "objects") != NULL)
        return bad(path, "\"objects\" names a side output of a stage: it "
                         "needs \"stage\", not \"layer\"");
    if (json_object_get(v, "tileset") != NULL) {
        if (json_object_get(v, "layer") != NULL ||
            json_object_get(v, "scale") != NULL)
            return bad(path, "a tile set input takes only \"tileset\" (the "
                             "directory holding tiles.json), not \"layer\" "
                             "or \"scale\"");
        snprintf(sub, sizeof(sub), "%s.tileset", path);
        s = get_string(v, "tileset", sub, 1, &rc);
        if (rc == 0)
            rc = check_path(s, sub, 0);
        if (rc == 0)
            rc = dup_into(&in->layer, s);
        in->tileset = 1;
        return rc;
    }
    snprintf(sub, sizeof(sub), "%s.layer", path);
    s = get_string(v, "layer", sub, 1, &rc);
    if (rc != 0) {
        if (json_object_get(v, "layer") == NULL)
            return bad(path, "needs \"layer\", \"tileset\" or \"stage\"");
        return rc;
    }
    rc = check_path(s, sub, 0);
    if (rc == 0)
        rc = dup_into(&in->layer, s);
    if (rc != 0)
        return rc;
    snprintf(sub, sizeof(sub), "%s.scale", path);
    s = get_string(v, "scale", sub, 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL) {
        if (strlen(s) == 0 || strlen(s) >= CNX_SCALE_KEY_MAX ||
            strchr(s, '/') != NULL || strcmp(s, ".") == 0 ||
            strcmp(s, "..") == 0)
            return bad(sub,
                       "must be a scale key (1 to %d characters, no "
                       "'/')",
                       CNX_SCALE_KEY_MAX - 1);
        rc = dup_into(&in->scale, s);
    }
    return rc;
}

static int cmp_input(const void *a, const void *b)
{
    return strcmp(((const cnx_wf_input *)a)->role,
                  ((const cnx_wf_input *)b)->role);
}

/* Sort inputs by role, keeping each input's producing-stage name with it. */
static void sort_inputs(raw_stage *rs)
{
    for (size_t i = 1; i < rs->st.ninputs; i++) {
        for (size_t j = i;
             j > 0 && cmp_input(&rs->st.inputs[j - 1], &rs->st.inputs[j]) > 0;
             j--) {
            cnx_wf_input t = rs->st.inputs[j];
            char name[33];
            rs->st.inputs[j] = rs->st.inputs[j - 1];
            rs->st.inputs[j - 1] = t;
            memcpy(name, rs->src[j], sizeof(name));
            memcpy(rs->src[j], rs->src[j - 1], sizeof(name));
            memcpy(rs->src[j - 1], name, sizeof(name));
        }
    }
}

static int parse_output(cnx_wf_stage *st, const json_t *v, const char *spath)
{
    static const char *const keys[] = {"layer", "type", "data_type", "encoding",
                                       "part",  NULL};
    char path[96], sub[128];
    const char *s;
    int rc;

    snprintf(path, sizeof(path), "%s.output", spath);
    st->out_type = st->out_dtype = st->out_encoding = -1;
    if (v == NULL)
        return bad(path, "missing");
    if (!json_is_object(v))
        return bad(path, "must be an object {\"layer\": \"name/v1\"}");
    rc = cnx__json_only_keys(v, keys, CNX_ESCHEMA, path);
    if (rc != 0)
        return cnx_error_wrap("workflow");
    snprintf(sub, sizeof(sub), "%s.layer", path);
    s = get_string(v, "layer", sub, 1, &rc);
    if (rc == 0)
        rc = check_path(s, sub, 1);
    if (rc == 0)
        rc = dup_into(&st->output_layer, s);
    if (rc != 0)
        return rc;
    snprintf(sub, sizeof(sub), "%s.part", path);
    s = get_string(v, "part", sub, 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL && !ident_ok(s, 32, 1, "_-"))
        return bad(sub, "'%.64s' is not a part name (a-z first, then a-z "
                        "0-9 _ -, at most 32)", s);
    snprintf(st->output_part, sizeof(st->output_part), "%s", s ? s : "");
    snprintf(sub, sizeof(sub), "%s.type", path);
    s = get_string(v, "type", sub, 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL) {
        if (strcmp(s, "image") == 0)
            st->out_type = CNX_LAYER_IMAGE;
        else if (strcmp(s, "segmentation") == 0)
            st->out_type = CNX_LAYER_SEGMENTATION;
        else
            return bad(sub, "must be \"image\" or \"segmentation\"");
    }
    snprintf(sub, sizeof(sub), "%s.data_type", path);
    s = get_string(v, "data_type", sub, 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL) {
        cnx_dtype dt;
        if (cnx_dtype_parse(s, &dt) != 0)
            return bad(sub, "must be uint8, uint16, uint32, uint64 or "
                            "float32");
        st->out_dtype = (int)dt;
    }
    snprintf(sub, sizeof(sub), "%s.encoding", path);
    s = get_string(v, "encoding", sub, 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL) {
        if (strcmp(s, "raw") == 0)
            st->out_encoding = CNX_ENC_RAW;
        else if (strcmp(s, "compressed_segmentation") == 0)
            st->out_encoding = CNX_ENC_CSEG;
        else
            return bad(sub, "must be \"raw\" or "
                            "\"compressed_segmentation\"");
    }
    if (st->out_type == CNX_LAYER_SEGMENTATION &&
        st->out_dtype == CNX_DT_FLOAT32)
        return bad(sub, "a segmentation cannot be float32");
    if (st->out_encoding == CNX_ENC_CSEG && st->out_dtype != -1 &&
        st->out_dtype != CNX_DT_UINT32 && st->out_dtype != CNX_DT_UINT64)
        return bad(sub, "compressed_segmentation needs uint32 or uint64");
    return 0;
}

static int parse_depends(raw_stage *rs, const json_t *v, const char *spath)
{
    char path[96], sub[128];
    snprintf(path, sizeof(path), "%s.depends_on", spath);
    if (v == NULL)
        return 0;
    if (!json_is_array(v))
        return bad(path, "must be an array of stage names");
    if (json_array_size(v) > CNX_WF_MAX_DEPS)
        return bad(path, "at most %d stages", CNX_WF_MAX_DEPS);
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *e = json_array_get(v, i);
        const char *s = json_is_string(e) ? json_string_value(e) : NULL;
        snprintf(sub, sizeof(sub), "%s[%zu]", path, i);
        if (s == NULL || strlen(s) != json_string_length(e) ||
            !ident_ok(s, 32, 1, "_-"))
            return bad(sub, "must be a stage name");
        for (size_t j = 0; j < rs->ndep_names; j++)
            if (strcmp(rs->dep_names[j], s) == 0)
                return bad(sub, "'%s' is listed twice", s);
        snprintf(rs->dep_names[rs->ndep_names++], 33, "%s", s);
    }
    return 0;
}

static int parse_stage(raw_stage *rs, const json_t *js, size_t idx)
{
    static const char *const keys[] = {
        "name",    "worker",     "kind", "kernel_version", "inputs",
        "output",  "parameters", "halo", "task_size",      "retry_budget",
        "lease_s", "depends_on", NULL};
    cnx_wf_stage *st = &rs->st;
    char spath[32], path[96];
    const json_t *v;
    const char *s, *role;
    json_t *in;
    int rc;

    snprintf(spath, sizeof(spath), "stages[%zu]", idx);
    st->file_index = (int)idx;
    if (!json_is_object(js))
        return bad(spath, "must be an object");
    rc = cnx__json_only_keys(js, keys, CNX_ESCHEMA, spath);
    if (rc != 0)
        return cnx_error_wrap("workflow");

    snprintf(path, sizeof(path), "%s.name", spath);
    s = get_string(js, "name", path, 1, &rc);
    if (rc != 0)
        return rc;
    if (!ident_ok(s, 32, 1, "_-"))
        return bad(path, "'%.64s' must match ^[a-z][a-z0-9_-]{0,31}$", s);
    snprintf(st->name, sizeof(st->name), "%s", s);

    snprintf(path, sizeof(path), "%s.worker", spath);
    s = get_string(js, "worker", path, 1, &rc);
    if (rc != 0)
        return rc;
    if (!ident_ok(s, 32, 1, "-"))
        return bad(path, "'%.64s' must match ^[a-z][a-z0-9-]{0,31}$", s);
    snprintf(st->worker, sizeof(st->worker), "%s", s);

    snprintf(path, sizeof(path), "%s.kind", spath);
    s = get_string(js, "kind", path, 1, &rc);
    if (rc != 0)
        return rc;
    if (strcmp(s, "map") == 0)
        st->kind = CNX_WF_MAP;
    else if (strcmp(s, "reduce") == 0)
        st->kind = CNX_WF_REDUCE;
    else
        return bad(path, "must be \"map\" or \"reduce\"");

    snprintf(path, sizeof(path), "%s.kernel_version", spath);
    v = json_object_get(js, "kernel_version");
    if (v == NULL)
        return bad(path, "missing");
    if (!cnx__json_int_in(v, 1, 1000000))
        return bad(path, "must be an integer in [1, 1000000]");
    st->kernel_version = json_integer_value(v);

    snprintf(path, sizeof(path), "%s.inputs", spath);
    v = json_object_get(js, "inputs");
    if (v == NULL)
        return bad(path, "missing");
    if (!json_is_object(v))
        return bad(path, "must be an object of role -> input");
    if (json_object_size(v) < 1 || json_object_size(v) > CNX_WF_MAX_INPUTS)
        return bad(path, "must have 1 to %d inputs", CNX_WF_MAX_INPUTS);
    json_object_foreach((json_t *)v, role, in)
    {
        size_t k = st->ninputs++;
        rc = parse_input(rs, k, role, in, spath);
        if (rc != 0)
            return rc;
    }
    sort_inputs(rs);

    rc = parse_output(st, json_object_get(js, "output"), spath);
    if (rc != 0)
        return rc;

    snprintf(path, sizeof(path), "%s.parameters", spath);
    v = json_object_get(js, "parameters");
    if (v != NULL && !json_is_object(v))
        return bad(path, "must be an object");
    if (v != NULL)
        st->parameters = cnx__json_canonical(v);
    else
        st->parameters = strdup("{}");
    if (st->parameters == NULL)
        return nomem();

    snprintf(path, sizeof(path), "%s.halo", spath);
    v = json_object_get(js, "halo");
    if (v != NULL && !cnx__json_int_in(v, 0, CNX_TASK_HALO_MAX))
        return bad(path, "must be an integer in [0, 256]"); /* the max */
    /* Absent: the planner derives it from the worker's footprint. */
    st->halo_pinned = v != NULL;
    st->halo = v ? json_integer_value(v) : -1;

    snprintf(path, sizeof(path), "%s.task_size", spath);
    v = json_object_get(js, "task_size");
    if (v == NULL) {
        st->task_size[0] = st->task_size[1] = st->task_size[2] = 128;
    } else {
        char what[128];
        snprintf(what, sizeof(what), "workflow: %s", path);
        rc = cnx__json_ivec(v, 3, 1, (int64_t)1 << 30, st->task_size,
                            CNX_ESCHEMA, what);
        if (rc != 0)
            return rc;
    }

    snprintf(path, sizeof(path), "%s.retry_budget", spath);
    v = json_object_get(js, "retry_budget");
    if (v != NULL && !cnx__json_int_in(v, 0, 100))
        return bad(path, "must be an integer in [0, 100]");
    st->retry_budget = v ? json_integer_value(v) : 3;

    snprintf(path, sizeof(path), "%s.lease_s", spath);
    v = json_object_get(js, "lease_s");
    if (v != NULL &&
        (!json_is_number(v) || !(json_number_value(v) > 0.0) ||
         !isfinite(json_number_value(v)) || json_number_value(v) > 1e9))
        return bad(path, "must be a number of seconds > 0");
    st->lease_s = v ? json_number_value(v) : 600.0;

    return parse_depends(rs, json_object_get(js, "depends_on"), spath);
}

/* File index of the stage called name, or -1. */
static int find_raw(const raw_stage *rs, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(rs[i].st.name, name) == 0)
            return (int)i;
    return -1;
}

static void add_dep(cnx_wf_stage *st, int d)
{
    for (size_t i = 0; i < st->ndeps; i++)
        if (st->deps[i] == d)
            return;
    st->deps[st->ndeps++] = d;
}

/* Resolve names to file indices: effective dependencies, input stages. */
static int resolve(raw_stage *rs, size_t n, const char *wname)
{
    for (size_t i = 0; i < n; i++) {
        cnx_wf_stage *st = &rs[i].st;
        int deps[2 * CNX_WF_MAX_DEPS], nd = 0;
        for (size_t j = 0; j < i; j++)
            if (strcmp(rs[j].st.name, st->name) == 0)
                return cnx_error_set(CNX_ESCHEMA, 0,
                                     "workflow %s: stages[%zu].name: "
                                     "duplicate stage name '%s'",
                                     wname, i, st->name);
        for (size_t k = 0; k < rs[i].ndep_names; k++) {
            int d = find_raw(rs, n, rs[i].dep_names[k]);
            if (d < 0)
                return cnx_error_set(CNX_ESCHEMA, 0,
                                     "workflow %s: stage %s depends on "
                                     "unknown stage '%s'",
                                     wname, st->name, rs[i].dep_names[k]);
            deps[nd++] = d;
        }
        for (size_t k = 0; k < st->ninputs; k++) {
            int d;
            if (rs[i].src[k][0] == '\0')
                continue;
            d = find_raw(rs, n, rs[i].src[k]);
            if (d < 0)
                return cnx_error_set(CNX_ESCHEMA, 0,
                                     "workflow %s: stage %s depends on "
                                     "unknown stage '%s' (input %s)",
                                     wname, st->name, rs[i].src[k],
                                     st->inputs[k].role);
            st->inputs[k].stage = d;
            deps[nd++] = d;
        }
        st->ndeps = 0;
        for (int k = 0; k < nd; k++) {
            int seen = 0;
            for (size_t j = 0; j < st->ndeps; j++)
                seen |= st->deps[j] == deps[k];
            if (!seen && st->ndeps == CNX_WF_MAX_DEPS)
                return cnx_error_set(CNX_ESCHEMA, 0,
                                     "workflow %s: stage %s: more than %d "
                                     "stages to depend on",
                                     wname, st->name, CNX_WF_MAX_DEPS);
            add_dep(st, deps[k]);
        }
    }
    /* A layer the workflow writes cannot also be one it takes as given. */
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < n; j++) {
            for (size_t k = 0; k < rs[j].st.ninputs; k++) {
                const cnx_wf_input *in = &rs[j].st.inputs[k];
                if (in->layer == NULL ||
                    strcmp(in->layer, rs[i].st.output_layer) != 0)
                    continue;
                return cnx_error_set(
                    CNX_ESCHEMA, 0,
                    "workflow %s: stage %s: output layer '%.128s' is also "
                    "an external input (stage %s, input %s); read a "
                    "stage's output with {\"stage\": \"%s\"}",
                    wname, rs[i].st.name, rs[i].st.output_layer, rs[j].st.name,
                    in->role, rs[i].st.name);
            }
        }
    }
    return 0;
}

/*
 * Name a cycle among the stages not yet placed (every one of them has an
 * unplaced dependency): walk dependencies from the earliest unplaced stage
 * until a stage repeats, then print the loop in data-flow order starting
 * from its earliest stage.
 */
static int report_cycle(const raw_stage *rs, size_t n, const int *placed,
                        const char *wname)
{
    int walk[CNX_WF_MAX_STAGES + 1] = {0}, seen_at[CNX_WF_MAX_STAGES];
    int len = 0, v = -1, start, best;
    char msg[400];
    size_t off;

    for (size_t i = 0; i < n; i++) {
        seen_at[i] = -1;
        if (!placed[i] && v < 0)
            v = (int)i;
    }
    while (seen_at[v] < 0) {
        const cnx_wf_stage *st = &rs[v].st;
        int next = -1;
        seen_at[v] = len;
        walk[len++] = v;
        for (size_t k = 0; k < st->ndeps; k++)
            if (!placed[st->deps[k]] && (next < 0 || st->deps[k] < next))
                next = st->deps[k];
        assert(next >= 0);
        v = next;
    }
    /* walk[seen_at[v] .. len) is the loop, each a dependent of the next. */
    start = seen_at[v];
    best = start;
    for (int k = start; k < len; k++)
        if (walk[k] < walk[best])
            best = k;
    off = (size_t)snprintf(msg, sizeof(msg), "%s", rs[walk[best]].st.name);
    for (int step = 1; step <= len - start; step++) {
        /* Data flows from a dependency to its dependent: walk backwards. */
        int k = best - step;
        while (k < start)
            k += len - start;
        if (off < sizeof(msg))
            off += (size_t)snprintf(msg + off, sizeof(msg) - off, " -> %s",
                                    rs[walk[k]].st.name);
    }
    return cnx_error_set(CNX_ESCHEMA, 0, "workflow %s: cycle %s", wname, msg);
}

/* Order the stages (stable Kahn) into wf->stages, remapping indices. */
static int order(cnx_workflow *wf, raw_stage *rs, size_t n)
{
    int placed[CNX_WF_MAX_STAGES] = {0}, pos[CNX_WF_MAX_STAGES];
    size_t done = 0;

    while (done < n) {
        int pick = -1;
        for (size_t i = 0; i < n && pick < 0; i++) {
            int ready = !placed[i];
            for (size_t k = 0; ready && k < rs[i].st.ndeps; k++)
                ready = placed[rs[i].st.deps[k]];
            if (ready)
                pick = (int)i;
        }
        if (pick < 0)
            return report_cycle(rs, n, placed, wf->name);
        placed[pick] = 1;
        pos[pick] = (int)done;
        wf->stages[done++] = rs[pick].st;
        wf->nstages = done; /* freed with wf from here on */
        memset(&rs[pick].st, 0, sizeof(rs[pick].st)); /* moved */
    }
    for (size_t i = 0; i < n; i++) {
        cnx_wf_stage *st = &wf->stages[i];
        for (size_t k = 0; k < st->ninputs; k++)
            if (st->inputs[k].stage >= 0)
                st->inputs[k].stage = pos[st->inputs[k].stage];
        for (size_t k = 0; k < st->ndeps; k++)
            st->deps[k] = pos[st->deps[k]];
        /* ascending, for deterministic dependency listings */
        for (size_t a = 1; a < st->ndeps; a++)
            for (size_t b = a; b > 0 && st->deps[b - 1] > st->deps[b]; b--) {
                int t = st->deps[b];
                st->deps[b] = st->deps[b - 1];
                st->deps[b - 1] = t;
            }
    }
    return 0;
}

static void stage_dispose(cnx_wf_stage *st)
{
    for (size_t k = 0; k < st->ninputs; k++) {
        free(st->inputs[k].layer);
        free(st->inputs[k].scale);
    }
    free(st->output_layer);
    free(st->parameters);
}

static int parse_tree(cnx_workflow *wf, const json_t *js)
{
    static const char *const keys[] = {"schema", "name", "description",
                                       "stages", NULL};
    raw_stage *rs = NULL;
    const json_t *v;
    const char *s;
    size_t n = 0;
    int rc;

    if (!json_is_object(js))
        return cnx_error_set(CNX_ESCHEMA, 0, "workflow: must be a JSON object");
    rc = cnx__json_only_keys(js, keys, CNX_ESCHEMA, "workflow");
    if (rc != 0)
        return rc;
    s = get_string(js, "schema", "schema", 1, &rc);
    if (rc != 0)
        return rc;
    if (strcmp(s, CNX_WORKFLOW_SCHEMA) != 0)
        return bad("schema", "must be \"" CNX_WORKFLOW_SCHEMA "\"");
    s = get_string(js, "name", "name", 1, &rc);
    if (rc != 0)
        return rc;
    if (!ident_ok(s, 64, 1, "_-"))
        return bad("name", "'%.80s' must match ^[a-z][a-z0-9_-]{0,63}$", s);
    snprintf(wf->name, sizeof(wf->name), "%s", s);
    s = get_string(js, "description", "description", 0, &rc);
    if (rc != 0)
        return rc;
    if (s != NULL && strlen(s) > DESCRIPTION_MAX)
        return bad("description", "at most %d bytes", DESCRIPTION_MAX);
    v = json_object_get(js, "stages");
    if (v == NULL)
        return bad("stages", "missing");
    if (!json_is_array(v) || json_array_size(v) < 1 ||
        json_array_size(v) > CNX_WF_MAX_STAGES)
        return bad("stages", "must be an array of 1 to %d stages",
                   CNX_WF_MAX_STAGES);
    n = json_array_size(v);
    rs = calloc(n, sizeof(*rs));
    wf->stages = calloc(n, sizeof(*wf->stages));
    if (rs == NULL || wf->stages == NULL) {
        free(rs);
        return nomem();
    }
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = parse_stage(&rs[i], json_array_get(v, i), i);
    if (rc == 0)
        rc = resolve(rs, n, wf->name);
    if (rc == 0)
        rc = order(wf, rs, n);
    for (size_t i = 0; i < n; i++)
        stage_dispose(&rs[i].st); /* what was not moved */
    free(rs);
    return rc;
}

int cnx_workflow_parse(cnx_workflow **out, const char *json, size_t len)
{
    cnx_workflow *wf;
    json_t *js = NULL;
    int rc;

    *out = NULL;
    rc = cnx__json_parse(&js, json, len, CNX_ESCHEMA, "workflow");
    if (rc != 0)
        return rc;
    wf = calloc(1, sizeof(*wf));
    if (wf == NULL) {
        json_decref(js);
        return nomem();
    }
    rc = parse_tree(wf, js);
    if (rc == 0) {
        wf->json = cnx__json_canonical(js);
        if (wf->json == NULL)
            rc = nomem();
        else
            cnx_digest(wf->json, strlen(wf->json), wf->digest);
    }
    json_decref(js);
    if (rc != 0) {
        cnx_workflow_free(wf);
        return rc;
    }
    *out = wf;
    return 0;
}

/* Directory of the running executable, or "" if unknown. */
static void exe_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    char *slash;
    if (len <= 0) {
        buf[0] = '\0';
        return;
    }
    buf[len] = '\0';
    slash = strrchr(buf, '/');
    if (slash != NULL)
        *slash = '\0';
}

static int path_fits(int len, size_t n, const char *name)
{
    if (len < 0 || (size_t)len >= n)
        return cnx_error_set(CNX_EINVAL, 0,
                             "workflow %s: the path is too long", name);
    return 0;
}

int cnx_workflow_path(const char *name, const char *dir, char *out, size_t n)
{
    size_t len = strlen(name);
    const char *env = getenv("CNX_WORKFLOWS");
    char bin[PATH_MAX], fallback[PATH_MAX + 32];
    const char *candidates[2];
    size_t k = 0;

    assert(out != NULL && n > 0);
    if (strchr(name, '/') != NULL ||
        (len > 5 && strcmp(name + len - 5, ".json") == 0))
        return path_fits(snprintf(out, n, "%s", name), n, name);
    if (dir != NULL) {
        candidates[k++] = dir;
    } else if (env != NULL && env[0] != '\0') {
        candidates[k++] = env;
    } else {
        exe_dir(bin, sizeof(bin));
        if (bin[0] != '\0') {
            snprintf(fallback, sizeof(fallback), "%s/../../workflows", bin);
            candidates[k++] = fallback;
        }
        candidates[k++] = "/usr/share/cnx/workflows";
    }
    for (size_t i = 0; i < k; i++) {
        int w = snprintf(out, n, "%s/%s.json", candidates[i], name);
        if (w >= 0 && (size_t)w < n && access(out, R_OK) == 0)
            return 0;
    }
    /* Not found: the first place looked, for the caller's error. */
    return path_fits(snprintf(out, n, "%s/%s.json", candidates[0], name), n,
                     name);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The workflows beside path (NAME.json in its directory), sorted, as
 * "a, b, c" into out (n bytes), or "none". */
static void workflows_beside(const char *path, char *out, size_t n)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    char *names[256];
    size_t k = 0, at = 0;
    struct dirent *e;
    DIR *d;
    snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - path) : 1,
             slash ? path : ".");
    d = opendir(dir);
    while (d != NULL && (e = readdir(d)) != NULL && k < 256) {
        size_t len = strlen(e->d_name);
        if (len > 5 && e->d_name[0] != '.' &&
            strcmp(e->d_name + len - 5, ".json") == 0 &&
            (names[k] = strndup(e->d_name, len - 5)) != NULL)
            k++;
    }
    if (d != NULL)
        closedir(d);
    qsort(names, k, sizeof(*names), cmp_name);
    snprintf(out, n, "none");
    for (size_t i = 0; i < k; i++) {
        int w = snprintf(out + at, n - at, "%s%s", i ? ", " : "", names[i]);
        if (w > 0 && (size_t)w < n - at)
            at += (size_t)w;
        free(names[i]);
    }
}

int cnx_workflow_load(cnx_workflow **out, const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc;

    *out = NULL;
    if (f == NULL && errno == ENOENT) {
        char have[1024];
        workflows_beside(path, have, sizeof(have));
        return cnx_error_set(CNX_ENOTFOUND, 0,
                             "workflow %s: no such file; the workflows "
                             "there: %s",
                             path, have);
    }
    if (f == NULL)
        return cnx_error_set(CNX_EIO, 1, "workflow %s: %s", path,
                             strerror(errno));
    for (;;) {
        size_t got;
        if (len == cap) {
            char *bigger;
            if (cap > CNX_JSON_MAX) {
                free(buf);
                fclose(f);
                return cnx_error_set(CNX_ETOOBIG, 0,
                                     "workflow %s: over %u bytes", path,
                                     CNX_JSON_MAX);
            }
            cap = cap ? cap * 2 : 8192;
            bigger = realloc(buf, cap);
            if (bigger == NULL) {
                free(buf);
                fclose(f);
                return nomem();
            }
            buf = bigger;
        }
        got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    if (ferror(f)) {
        free(buf);
        fclose(f);
        return cnx_error_set(CNX_EIO, 1, "workflow %s: read failed", path);
    }
    fclose(f);
    rc = cnx_workflow_parse(out, buf, len);
    free(buf);
    return rc;
}

void cnx_workflow_free(cnx_workflow *wf)
{
    if (wf == NULL)
        return;
    for (size_t i = 0; wf->stages != NULL && i < wf->nstages; i++)
        stage_dispose(&wf->stages[i]);
    free(wf->stages);
    free(wf->json);
    free(wf);
}

int cnx_workflow_find_stage(const cnx_workflow *wf, const char *name)
{
    for (size_t i = 0; i < wf->nstages; i++)
        if (strcmp(wf->stages[i].name, name) == 0)
            return (int)i;
    return -1;
}
