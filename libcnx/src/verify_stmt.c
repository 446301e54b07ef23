/*
 * verify_stmt.c - one manifest's signature and statement, for cnx-verify.
 *
 * The envelope is untrusted: cnx_dsse_verify checks its form and its
 * Ed25519 signature against the trusted keys; the payload is then parsed
 * and every field the rest of the verification relies on is checked
 * (in-toto Statement v1, SLSA provenance v1, the embedded cnx.task/1 and
 * its recomputed key, subjects and dependencies with sha256 digests, the
 * code commit). Each problem becomes a finding on the manifest's own list,
 * never an abort, so one thread can own one manifest without locks. Last,
 * the names are resolved where they are now: a manifest found under a
 * layer other than the one its task wrote was moved with its dataset, and
 * its names under the dataset's old root are read under the new one
 * (relocate() below; docs/verify.md, "Copied and moved datasets").
 * Expected load: tens of thousands of manifests of a few KiB. The Ed25519
 * verification is about two thirds of a manifest's time, cnx_task_parse
 * of the embedded task (its key recomputed) most of the rest; the payload
 * itself is read without jansson where it can be (the light reader below).
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/task.h"
#include "json_int.h"
#include "verify_int.h"

#define TEXT_MAX 4096
#define LIGHT_DEPTH 32 /* deeper statements go to jansson */

/* ---- the statement's JSON: jansson, or a light reader ----------------- */

/*
 * statement() reads the payload through the accessors below, over one of
 * two trees. The light tree is read in one pass into one array, without
 * an allocation per value, from the form cnx_provenance_statement writes
 * and a little more: no whitespace, object keys in strictly increasing
 * byte order (so none repeats), strings of printable ASCII without
 * escapes, integers of at most 18 digits, reals of at most 18 integer
 * digits and no exponent, at most LIGHT_DEPTH levels. jansson parses any
 * such text to the same values (it rejects duplicate keys, and these
 * numbers cannot overflow), so the checks find the same; the embedded
 * task's own bytes then stand for its canonical text (same tree, so
 * cnx_task_parse gives the same task and key). Any other text is parsed by
 * jansson. A statement read through the light tree makes no finding: at
 * its first problem the manifest is read again through jansson, so every
 * finding and its message comes from the one path that handles all JSON.
 */

enum {
    VJ_OBJECT,
    VJ_ARRAY,
    VJ_STRING,
    VJ_INTEGER,
    VJ_REAL,
    VJ_TRUE,
    VJ_FALSE,
    VJ_NULL
};

typedef struct vj_node {
    int type;          /* VJ_* */
    uint32_t first;    /* arrays, objects: first element or member (0: none) */
    uint32_t next;     /* next sibling (0: none) */
    uint32_t count;    /* arrays, objects: elements or members */
    const char *key;   /* as an object member: its key (NUL-ended) */
    const char *str;   /* strings: the value (NUL-ended) */
    int64_t num;       /* integers */
    size_t start, end; /* the value's bytes in the payload */
} vj_node;

typedef struct vj_doc {
    json_t *js;     /* jansson's tree, or NULL */
    vj_node *nodes; /* the light tree (root: node 1; node 0 unused, so a
                       link 0 means none), or NULL */
    size_t n, cap;
    char *buf;        /* light: a copy of the payload, strings NUL-ended */
    const char *text; /* the payload */
} vj_doc;

/* A value of either tree (const json_t * or const vj_node *); NULL: none */
typedef const void *vj_val;

/* One statement read: the manifest, the tree, and whether problems are
 * findings (jansson) or only a reason to read again (light). */
typedef struct stmt_ctx {
    vf_manifest *m;
    const vj_doc *d;
    int quiet;
} stmt_ctx;

static void vj_dispose(vj_doc *d)
{
    json_decref(d->js);
    free(d->nodes);
    free(d->buf);
    memset(d, 0, sizeof(*d));
}

static int vj_type(const vj_doc *d, vj_val v)
{
    if (v == NULL)
        return -1;
    if (d->nodes != NULL)
        return ((const vj_node *)v)->type;
    switch (json_typeof((const json_t *)v)) {
    case JSON_OBJECT:
        return VJ_OBJECT;
    case JSON_ARRAY:
        return VJ_ARRAY;
    case JSON_STRING:
        return VJ_STRING;
    case JSON_INTEGER:
        return VJ_INTEGER;
    case JSON_REAL:
        return VJ_REAL;
    case JSON_TRUE:
        return VJ_TRUE;
    case JSON_FALSE:
        return VJ_FALSE;
    default:
        return VJ_NULL;
    }
}

/* obj's member key, or NULL (also when obj is no object). */
static vj_val vj_get(const vj_doc *d, vj_val obj, const char *key)
{
    const vj_node *o = obj;
    if (d->nodes == NULL)
        return obj != NULL ? json_object_get(obj, key) : NULL;
    if (o == NULL || o->type != VJ_OBJECT)
        return NULL;
    for (uint32_t k = o->first; k != 0; k = d->nodes[k].next)
        if (strcmp(d->nodes[k].key, key) == 0)
            return &d->nodes[k];
    return NULL;
}

/* A string's value, or NULL if v is not a string. */
static const char *vj_string(const vj_doc *d, vj_val v)
{
    if (vj_type(d, v) != VJ_STRING)
        return NULL;
    return d->nodes != NULL ? ((const vj_node *)v)->str : json_string_value(v);
}

static int64_t vj_integer(const vj_doc *d, vj_val v)
{
    return d->nodes != NULL ? ((const vj_node *)v)->num
                            : (int64_t)json_integer_value(v);
}

/* An array's size; 0 if v is not an array. */
static size_t vj_size(const vj_doc *d, vj_val v)
{
    if (vj_type(d, v) != VJ_ARRAY)
        return 0;
    return d->nodes != NULL ? ((const vj_node *)v)->count : json_array_size(v);
}

/* Element i of array arr, given element i - 1 as prev (NULL for i = 0):
 * arrays are walked in order. */
static vj_val vj_item(const vj_doc *d, vj_val arr, vj_val prev, size_t i)
{
    uint32_t k;
    if (d->nodes == NULL)
        return json_array_get(arr, i);
    k = prev == NULL ? ((const vj_node *)arr)->first
                     : ((const vj_node *)prev)->next;
    return k != 0 ? &d->nodes[k] : NULL;
}

/* The text cnx_task_parse reads for the task object v (free() it): its
 * canonical form, or under the light tree its own bytes. */
static char *vj_task_text(const vj_doc *d, vj_val v)
{
    const vj_node *t = v;
    char *out;
    if (d->nodes == NULL)
        return cnx__json_canonical(v);
    out = malloc(t->end - t->start + 1);
    if (out != NULL) {
        memcpy(out, d->text + t->start, t->end - t->start);
        out[t->end - t->start] = '\0';
    }
    return out;
}

static uint32_t vj_new(vj_doc *d, int type, size_t start)
{
    vj_node *x;
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        vj_node *grown;
        if (cap > UINT32_MAX)
            return 0;
        grown = realloc(d->nodes, cap * sizeof(*grown));
        if (grown == NULL)
            return 0;
        d->nodes = grown;
        d->cap = cap;
    }
    x = &d->nodes[d->n];
    memset(x, 0, sizeof(*x));
    x->type = type;
    x->start = start;
    return (uint32_t)d->n++;
}

/* A string at *p (just past its opening quote): printable ASCII, no
 * escapes; the closing quote becomes NUL in the copy. 0 if not light. */
static int vj_chars(vj_doc *d, size_t *p, size_t end, const char **out)
{
    size_t q = *p;
    while (q < end) {
        unsigned char c = (unsigned char)d->text[q];
        if (c == '"')
            break;
        if (c < 0x20 || c >= 0x7f || c == '\\')
            return 0;
        q++;
    }
    if (q >= end)
        return 0;
    d->buf[q] = '\0';
    *out = d->buf + *p;
    *p = q + 1;
    return 1;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* One value at *p into a new node (*out); 0 if the text is not light. */
static int vj_value(vj_doc *d, size_t *p, size_t end, int depth, uint32_t *out)
{
    const char *t = d->text;
    size_t q = *p;
    uint32_t self, last = 0;
    char open;
    if (q >= end || depth > LIGHT_DEPTH)
        return 0;
    open = t[q];
    if (open == '"') {
        self = vj_new(d, VJ_STRING, q);
        q++;
        if (self == 0 || !vj_chars(d, &q, end, &d->nodes[self].str))
            return 0;
    } else if (open == '-' || is_digit(open)) {
        size_t digits = 0, first;
        uint64_t v = 0;
        int real = 0;
        self = vj_new(d, VJ_INTEGER, q);
        if (self == 0)
            return 0;
        q += open == '-';
        first = q;
        while (q < end && is_digit(t[q]) && digits < 19) {
            v = v * 10 + (uint64_t)(t[q++] - '0');
            digits++;
        }
        if (digits == 0 || digits > 18 || (t[first] == '0' && digits > 1))
            return 0;
        if (q < end && t[q] == '.') {
            size_t frac = ++q;
            while (q < end && is_digit(t[q]))
                q++;
            if (q == frac)
                return 0;
            real = 1;
        }
        if (q < end && (t[q] == 'e' || t[q] == 'E'))
            return 0;
        d->nodes[self].type = real ? VJ_REAL : VJ_INTEGER;
        d->nodes[self].num = open == '-' ? -(int64_t)v : (int64_t)v;
    } else if (open == 't' || open == 'f' || open == 'n') {
        static const char *const word[] = {"true", "false", "null"};
        static const int type[] = {VJ_TRUE, VJ_FALSE, VJ_NULL};
        int w = open == 't' ? 0 : open == 'f' ? 1 : 2;
        size_t len = strlen(word[w]);
        if (end - q < len || memcmp(t + q, word[w], len) != 0)
            return 0;
        self = vj_new(d, type[w], q);
        if (self == 0)
            return 0;
        q += len;
    } else if (open == '{' || open == '[') {
        const char *prev_key = NULL;
        self = vj_new(d, open == '{' ? VJ_OBJECT : VJ_ARRAY, q);
        if (self == 0)
            return 0;
        q++;
        if (q < end && t[q] == (open == '{' ? '}' : ']')) {
            q++;
        } else {
            for (;;) {
                const char *key = NULL;
                uint32_t kid;
                if (open == '{') {
                    if (q >= end || t[q] != '"')
                        return 0;
                    q++;
                    if (!vj_chars(d, &q, end, &key) ||
                        (prev_key != NULL && strcmp(prev_key, key) >= 0) ||
                        q >= end || t[q] != ':')
                        return 0;
                    q++;
                    prev_key = key;
                }
                if (!vj_value(d, &q, end, depth + 1, &kid))
                    return 0;
                d->nodes[kid].key = key;
                if (last == 0)
                    d->nodes[self].first = kid;
                else
                    d->nodes[last].next = kid;
                last = kid;
                d->nodes[self].count++;
                if (q < end && t[q] == ',') {
                    q++;
                    continue;
                }
                if (q < end && t[q] == (open == '{' ? '}' : ']')) {
                    q++;
                    break;
                }
                return 0;
            }
        }
    } else {
        return 0;
    }
    d->nodes[self].end = q;
    *p = q;
    *out = self;
    return 1;
}

/* Read the payload as a light tree: 0, or -1 if it is not one (or on
 * allocation failure: jansson then has its say). */
static int vj_read_light(vj_doc *d, const char *text, size_t len)
{
    size_t p = 0;
    uint32_t root;
    memset(d, 0, sizeof(*d));
    d->text = text;
    d->cap = len / 16 + 16;
    d->nodes = malloc(d->cap * sizeof(*d->nodes));
    d->buf = malloc(len + 1);
    if (d->nodes == NULL || d->buf == NULL)
        return -1;
    memcpy(d->buf, text, len);
    d->buf[len] = '\0';
    memset(&d->nodes[0], 0, sizeof(d->nodes[0]));
    d->n = 1; /* node 0 unused: the root is node 1 */
    if (len == 0 || text[0] != '{' || !vj_value(d, &p, len, 0, &root) ||
        p != len)
        return -1;
    return 0;
}

/* ---- checks ----------------------------------------------------------- */

static int stmt_bad(stmt_ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A statement finding on the manifest (none when quiet); always returns
 * -1 (the statement is bad). */
static int stmt_bad(stmt_ctx *c, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    if (c->quiet)
        return -1;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    vf_add(&c->m->findings, c->m->origin, "statement", "%s", reason);
    return -1;
}

/* Untrusted text for a message: at most 200 bytes, non-printables '?'. */
static const char *shown(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    if (cap > 201)
        cap = 201;
    for (; s != NULL && s[i] != '\0' && i + 1 < cap; i++)
        buf[i] = (unsigned char)s[i] >= 0x20 && s[i] != 0x7f ? s[i] : '?';
    buf[i] = '\0';
    return buf;
}

static const char *str_member(const stmt_ctx *c, vj_val obj, const char *key)
{
    return vj_string(c->d, vj_get(c->d, obj, key));
}

static int is_object(const stmt_ctx *c, vj_val v)
{
    return vj_type(c->d, v) == VJ_OBJECT;
}

static int hex64(const char *s)
{
    if (s == NULL || strlen(s) != 64)
        return 0;
    for (int i = 0; i < 64; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

static int name_ok(const char *s)
{
    size_t n = s != NULL ? strlen(s) : 0;
    if (n == 0 || n > TEXT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 0;
    return 1;
}

/* An artifact {name, digest: {sha256}} into out; -1 after a finding. */
static int artifact(stmt_ctx *c, vj_val js, const char *path, vf_art *out)
{
    vj_val dig = vj_get(c->d, js, "digest");
    const char *name = str_member(c, js, "name");
    const char *hex = str_member(c, dig, "sha256");
    char buf[201];
    if (!is_object(c, js))
        return stmt_bad(c, "%s: must be an object", path);
    if (!name_ok(name))
        return stmt_bad(c, "%s.name: must be 1 to %d bytes of text", path,
                        TEXT_MAX);
    if (!is_object(c, dig))
        return stmt_bad(c, "%s (%s): digest must be an object", path,
                        shown(name, buf, sizeof(buf)));
    if (!hex64(hex))
        return stmt_bad(c, "%s (%s): digest.sha256 must be 64 lowercase hex",
                        path, shown(name, buf, sizeof(buf)));
    out->name = strdup(name);
    if (out->name == NULL)
        return stmt_bad(c, "out of memory");
    memcpy(out->digest, "sha256:", 7);
    memcpy(out->digest + 7, hex, 65);
    return 0;
}

/* The code entry: gitCommit and the dirty flag. */
static int code_entry(stmt_ctx *c, vj_val dep, size_t i)
{
    vj_val dig = vj_get(c->d, dep, "digest");
    vj_val ann = vj_get(c->d, dep, "annotations");
    const char *commit = str_member(c, dig, "gitCommit");
    vj_val dirty = vj_get(c->d, ann, "dirty");
    int dirty_type = vj_type(c->d, dirty);
    if (commit == NULL || strlen(commit) != 40 ||
        strspn(commit, "0123456789abcdef") != 40)
        return stmt_bad(c, "resolvedDependencies[%zu] (git+cnx): "
                           "digest.gitCommit must be 40 lowercase hex", i);
    if (ann != NULL && !is_object(c, ann))
        return stmt_bad(c, "resolvedDependencies[%zu] (git+cnx): "
                           "annotations must be an object", i);
    if (dirty != NULL && dirty_type != VJ_TRUE && dirty_type != VJ_FALSE)
        return stmt_bad(c, "resolvedDependencies[%zu] (git+cnx): "
                           "annotations.dirty must be a boolean", i);
    memcpy(c->m->commit, commit, 41);
    c->m->dirty = dirty_type == VJ_TRUE;
    return 0;
}

/* The layer of the task input an input URL lies in; NULL if none. */
static const char *input_layer(const cnx_task *task, const char *url,
                               const cnx_task_input **which)
{
    for (size_t k = 0; k < task->ninputs; k++) {
        size_t n = strlen(task->inputs[k].layer);
        if (strncmp(url, task->inputs[k].layer, n) == 0 && url[n] == '/') {
            *which = &task->inputs[k];
            return task->inputs[k].layer;
        }
    }
    return NULL;
}

static int dependencies(stmt_ctx *c, vj_val deps, const cnx_task *task)
{
    vf_manifest *m = c->m;
    size_t n = vj_size(c->d, deps), k = 0;
    vj_val dep = NULL;
    int code = 0, rc = 0;
    char buf[201];
    if (vj_type(c->d, deps) != VJ_ARRAY)
        return stmt_bad(c, "resolvedDependencies: must be an array");
    m->inputs = calloc(n + 1, sizeof(*m->inputs));
    if (m->inputs == NULL)
        return stmt_bad(c, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const char *name;
        char path[48];
        const cnx_task_input *in = NULL;
        vf_art *a;
        const char *want;
        dep = vj_item(c->d, deps, dep, i);
        name = str_member(c, dep, "name");
        snprintf(path, sizeof(path), "resolvedDependencies[%zu]", i);
        if (!is_object(c, dep) || name == NULL) {
            rc = stmt_bad(c, "%s: must be an object with a name", path);
            break;
        }
        if (strcmp(name, "git+cnx") == 0) {
            rc = code_entry(c, dep, i);
            code = 1;
            continue;
        }
        a = &m->inputs[k];
        rc = artifact(c, dep, path, a);
        if (rc != 0)
            break;
        m->ninputs = ++k;
        if (strcmp(name, "container") == 0) {
            /* The image, not an object: not walked. */
            free(a->name);
            m->ninputs = --k;
            continue;
        }
        if (input_layer(task, a->name, &in) == NULL) {
            rc = stmt_bad(c, "input %s is in none of the task's input "
                             "layers", shown(a->name, buf, sizeof(buf)));
            break;
        }
        a->layer = strdup(in->layer);
        if (a->layer == NULL) {
            rc = stmt_bad(c, "out of memory");
            break;
        }
        want = cnx_task_expected(task, in->role,
                                 a->name + strlen(a->layer) + 1);
        if (want != NULL && strcmp(want, a->digest) != 0) {
            rc = stmt_bad(c, "input %s: resolvedDependencies says %s but "
                             "the task asked for %s",
                          shown(a->name, buf, sizeof(buf)), a->digest, want);
            break;
        }
    }
    if (rc == 0 && !code)
        rc = stmt_bad(c, "resolvedDependencies: no git+cnx entry with a "
                         "gitCommit");
    return rc;
}

/* The statement (the tree's root) of m: every field the checks rely on. */
static int statement(stmt_ctx *c, cnx_task **task_out)
{
    const vj_doc *d = c->d;
    vf_manifest *m = c->m;
    vj_val st = d->js != NULL ? (vj_val)d->js : (vj_val)&d->nodes[1];
    vj_val pred, bd, ext, task_js, subj, kv, meta, item = NULL;
    const char *key, *stage, *inv, *type;
    char *task_text = NULL, buf[201];
    cnx_task *task = NULL;
    size_t n;
    int rc = -1;

    type = str_member(c, st, "_type");
    if (type == NULL || strcmp(type, CNX_STATEMENT_TYPE) != 0) {
        stmt_bad(c, "_type must be %s", CNX_STATEMENT_TYPE);
        goto done;
    }
    type = str_member(c, st, "predicateType");
    if (type == NULL || strcmp(type, CNX_SLSA_PREDICATE) != 0) {
        stmt_bad(c, "predicateType must be %s", CNX_SLSA_PREDICATE);
        goto done;
    }
    pred = vj_get(d, st, "predicate");
    bd = vj_get(d, pred, "buildDefinition");
    if (!is_object(c, pred) || !is_object(c, bd)) {
        stmt_bad(c, "predicate.buildDefinition: must be an object");
        goto done;
    }
    type = str_member(c, bd, "buildType");
    if (type == NULL || strcmp(type, CNX_BUILD_TYPE) != 0) {
        stmt_bad(c, "buildDefinition.buildType must be %s", CNX_BUILD_TYPE);
        goto done;
    }
    ext = vj_get(d, bd, "externalParameters");
    task_js = vj_get(d, ext, "task");
    if (!is_object(c, ext) || !is_object(c, task_js)) {
        stmt_bad(c, "externalParameters.task: must be an object");
        goto done;
    }
    task_text = vj_task_text(d, task_js);
    if (task_text == NULL) {
        stmt_bad(c, "out of memory");
        goto done;
    }
    if (cnx_task_parse(&task, task_text, strlen(task_text)) != 0) {
        stmt_bad(c, "externalParameters.task is not a valid %s: %s",
                 CNX_TASK_SCHEMA, cnx_error_last()->message);
        goto done;
    }
    key = str_member(c, ext, "taskKey");
    if (key == NULL || !cnx_digest_valid(key)) {
        stmt_bad(c, "externalParameters.taskKey: must be sha256:<64 hex>");
        goto done;
    }
    if (strcmp(key, task->key) != 0) {
        stmt_bad(c, "externalParameters.taskKey is %s but the task's "
                    "content has key %s", key, task->key);
        goto done;
    }
    stage = str_member(c, ext, "stage");
    if (stage == NULL || strcmp(stage, task->stage) != 0) {
        stmt_bad(c, "externalParameters.stage must equal task.stage (%s)",
                 task->stage);
        goto done;
    }
    kv = vj_get(d, ext, "kernelVersion");
    if (vj_type(d, kv) != VJ_INTEGER ||
        vj_integer(d, kv) != (int64_t)task->kernel_version) {
        stmt_bad(c, "externalParameters.kernelVersion must equal "
                    "task.kernel_version (%lld)",
                 (long long)task->kernel_version);
        goto done;
    }
    meta = vj_get(d, vj_get(d, pred, "runDetails"), "metadata");
    inv = str_member(c, meta, "invocationId");
    n = strlen(key);
    if (inv == NULL || strncmp(inv, key, n) != 0 || inv[n] != '/') {
        stmt_bad(c, "runDetails.metadata.invocationId must be "
                    "<taskKey>/<attempt>");
        goto done;
    }
    subj = vj_get(d, st, "subject");
    n = vj_size(d, subj);
    if (vj_type(d, subj) != VJ_ARRAY || n == 0) {
        stmt_bad(c, "subject: must be a non-empty array");
        goto done;
    }
    m->subjects = calloc(n, sizeof(*m->subjects));
    if (m->subjects == NULL) {
        stmt_bad(c, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char path[32];
        size_t ln = strlen(task->output_layer);
        snprintf(path, sizeof(path), "subject[%zu]", i);
        item = vj_item(d, subj, item, i);
        if (artifact(c, item, path, &m->subjects[i]) != 0)
            goto done;
        m->nsubjects = i + 1;
        if (strncmp(m->subjects[i].name, task->output_layer, ln) != 0 ||
            m->subjects[i].name[ln] != '/') {
            stmt_bad(c, "subject %s is outside the task's output layer %s",
                     shown(m->subjects[i].name, buf, sizeof(buf)),
                     task->output_layer);
            goto done;
        }
    }
    if (dependencies(c, vj_get(d, bd, "resolvedDependencies"), task) != 0)
        goto done;
    memcpy(m->task_key, key, CNX_DIGEST_LEN);
    m->kernel_version = task->kernel_version;
    m->request = strdup(task->request);
    m->stage = strdup(task->stage);
    m->parameters = strdup(task->parameters != NULL ? task->parameters : "{}");
    m->output_layer = strdup(task->output_layer);
    if (m->request == NULL || m->stage == NULL || m->parameters == NULL ||
        m->output_layer == NULL) {
        stmt_bad(c, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(task_text);
    *task_out = task;
    return rc;
}

/* Undo what a statement read left in m (before reading it again). */
static void statement_reset(vf_manifest *m)
{
    free(m->request);
    free(m->stage);
    free(m->parameters);
    free(m->output_layer);
    m->request = m->stage = m->parameters = m->output_layer = NULL;
    for (size_t i = 0; i < m->nsubjects; i++) {
        free(m->subjects[i].name);
        free(m->subjects[i].signed_name);
    }
    for (size_t i = 0; i < m->ninputs; i++) {
        free(m->inputs[i].name);
        free(m->inputs[i].layer);
        free(m->inputs[i].signed_name);
    }
    free(m->subjects);
    free(m->inputs);
    m->subjects = m->inputs = NULL;
    m->nsubjects = m->ninputs = 0;
    m->task_key[0] = '\0';
    m->kernel_version = 0;
    m->commit[0] = '\0';
    m->dirty = 0;
    cnx__verify_reloc_dispose(&m->reloc);
}

/* Read and check the statement: through the light tree if the payload is
 * one and passes every check, else through jansson (with findings). */
static int statement_read(vf_manifest *m, const char *payload, size_t len,
                          cnx_task **task_out)
{
    vj_doc d;
    stmt_ctx c = {m, &d, 1};
    json_error_t jerr;
    int rc;

    *task_out = NULL;
    if (vj_read_light(&d, payload, len) == 0) {
        rc = statement(&c, task_out);
        vj_dispose(&d);
        if (rc == 0)
            return 0;
        cnx_task_free(*task_out);
        *task_out = NULL;
        statement_reset(m);
    } else {
        vj_dispose(&d);
    }
    c.quiet = 0;
    d.js = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    if (d.js == NULL || !json_is_object(d.js))
        rc = stmt_bad(&c, "payload is not a JSON object (%s)",
                      d.js == NULL ? jerr.text : "other type");
    else
        rc = statement(&c, task_out);
    vj_dispose(&d);
    return rc;
}

/* ---- relocation ------------------------------------------------------ */

/* Move one name (in place) by the relocation with the longest root it
 * lies under, among the manifest's own (which wins a tie, and alone moves
 * its outputs: outputs follow the layer they were found in) and the given
 * ones. keep: the name as signed goes to *keep (else it is freed).
 * @return 0, or -1 after a finding. */
static int move_name(stmt_ctx *c, const vf_reloc *given, size_t ngiven,
                     int output, char **name, char **keep)
{
    const vf_manifest *m = c->m;
    const vf_reloc *r = NULL, *g;
    const char *rel;
    char *moved = NULL, buf[201];
    int rc = 0;
    if (m->reloc.from != NULL && cnx_url_under(m->reloc.from, *name, &rel))
        r = &m->reloc;
    g = r != NULL && output ? NULL
                            : cnx__verify_reloc_find(given, ngiven, *name);
    if (g != NULL && (r == NULL || strlen(g->from) > strlen(r->from)))
        r = g;
    if (r != NULL)
        rc = cnx__verify_reloc_apply(r, *name, &moved);
    if (rc < 0)
        return stmt_bad(c, "%s cannot be relocated from %s to %s: %s",
                        shown(*name, buf, sizeof(buf)), r->from, r->to,
                        cnx_error_last()->message);
    if (moved == NULL)
        return 0;
    if (keep != NULL)
        *keep = *name;
    else
        free(*name);
    *name = moved;
    return 0;
}

/*
 * Resolve m's names where they are now. A manifest found under a layer
 * its task does not write was moved with its dataset, or is not that
 * layer's: the longest common suffix of whole components of the two layer
 * URLs is the layer's place in its dataset, what precedes it the roots
 * (cnx__verify_reloc_derive); without one it is a statement finding, as
 * before. Only names are moved: every digest is checked as signed.
 */
static int relocate(stmt_ctx *c, const vf_reloc *given, size_t ngiven)
{
    vf_manifest *m = c->m;
    char from[CNX_URL_MAX], to[CNX_URL_MAX];
    int rc;
    if (m->stored_layer != NULL) {
        const vf_reloc *g =
            cnx__verify_reloc_find(given, ngiven, m->output_layer);
        char *out = NULL;
        int same;
        rc = g != NULL ? cnx__verify_reloc_apply(g, m->output_layer, &out) : 0;
        if (rc < 0)
            return stmt_bad(c, "out of memory");
        same =
            strcmp(out != NULL ? out : m->output_layer, m->stored_layer) == 0;
        free(out);
        rc = same ? 0
                  : cnx__verify_reloc_derive(m->output_layer, m->stored_layer,
                                             from, to);
        if (rc <= 0 && !same)
            return stmt_bad(c, "stored in layer %s but its task writes %s",
                            m->stored_layer, m->output_layer);
        if (rc == 1) {
            m->reloc.from = strdup(from);
            m->reloc.to = strdup(to);
            m->reloc.written = strdup(m->output_layer);
            m->reloc.found = strdup(m->stored_layer);
            if (m->reloc.from == NULL || m->reloc.to == NULL ||
                m->reloc.written == NULL || m->reloc.found == NULL)
                return stmt_bad(c, "out of memory");
        }
    }
    if (m->reloc.from == NULL && ngiven == 0)
        return 0;
    rc = move_name(c, given, ngiven, 1, &m->output_layer, NULL);
    for (size_t i = 0; rc == 0 && i < m->nsubjects; i++)
        rc = move_name(c, given, ngiven, 1, &m->subjects[i].name,
                       &m->subjects[i].signed_name);
    for (size_t i = 0; rc == 0 && i < m->ninputs; i++) {
        rc = move_name(c, given, ngiven, 0, &m->inputs[i].name,
                       &m->inputs[i].signed_name);
        if (rc == 0)
            rc = move_name(c, given, ngiven, 0, &m->inputs[i].layer, NULL);
    }
    /* The output layer is now where it was found, unless the signed URL
     * is not canonical (the roots are): untrusted text, so checked. */
    if (rc == 0 && m->stored_layer != NULL &&
        strcmp(m->output_layer, m->stored_layer) != 0)
        rc = stmt_bad(
            c, "stored in layer %s but its task writes %s", m->stored_layer,
            m->reloc.written != NULL ? m->reloc.written : m->output_layer);
    return rc;
}

void vf_manifest_check(vf_manifest *m, cnx_key *const *keys, size_t nkeys,
                       const vf_reloc *given, size_t ngiven)
{
    uint8_t *payload = NULL;
    size_t plen = 0;
    cnx_task *task = NULL;
    char hint[41], *type = NULL;
    stmt_ctx c = {m, NULL, 0}; /* findings outside the statement read */
    int rc;

    if (m->text == NULL)
        return;
    /* m->env_digest: computed when the envelope was added */
    if (m->expect_digest[0] != '\0' &&
        strcmp(m->expect_digest, m->env_digest) != 0)
        vf_add(&m->findings, m->origin, "statement",
               "stored as envelope %s but its bytes hash to %s (edited "
               "after it was written)", m->expect_digest, m->env_digest);
    rc = cnx_dsse_verify_type(m->text, m->len, keys, nkeys, &payload, &plen,
                              NULL, &type);
    if (rc == CNX_EDIGEST) {
        const char *msg = cnx_error_last()->message;
        const char *kid = strstr(msg, "keyid '");
        if (strstr(msg, "names trusted key") != NULL) {
            vf_add(&m->findings, m->origin, "signature",
                   "signature does not verify (payload or signature "
                   "altered): it names a trusted key");
        } else {
            snprintf(hint, sizeof(hint), "%s", kid != NULL ? kid + 7 : "?");
            hint[strcspn(hint, "'")] = '\0';
            vf_add(&m->findings, m->origin, "signature",
                   "signed by an untrusted key (keyid %s...), or altered",
                   hint);
        }
        goto done;
    }
    if (rc != 0) {
        const char *msg = cnx_error_last()->message;
        if (strncmp(msg, "envelope: ", 10) == 0)
            msg += 10;
        vf_add(&m->findings, m->origin, "signature",
               "malformed envelope: %s", msg);
        goto done;
    }
    m->sig_ok = 1;
    if (strcmp(type, CNX_DSSE_PAYLOAD_TYPE) != 0) {
        stmt_bad(&c, "payloadType must be %s", CNX_DSSE_PAYLOAD_TYPE);
        goto done;
    }
    if (statement_read(m, (const char *)payload, plen, &task) != 0)
        goto done;
    if (m->expect_key[0] != '\0' && strcmp(m->expect_key, m->task_key) != 0) {
        stmt_bad(&c, "stored under task key %s but states %s",
                 m->expect_key, m->task_key);
        goto done;
    }
    if (relocate(&c, given, ngiven) != 0)
        goto done;
    m->stmt_ok = 1;
done:
    cnx_task_free(task);
    free(type);
    free(payload);
    free(m->text);
    m->text = NULL;
}

void vf_manifest_dispose(vf_manifest *m)
{
    if (m == NULL)
        return;
    free(m->origin);
    free(m->text);
    free(m->stored_layer);
    statement_reset(m);
    vf_findings_dispose(&m->findings);
}

static const char *js_str_member(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int vf_envelope_locate(const char *text, size_t len, char **layer,
                       char key[CNX_DIGEST_LEN])
{
    json_t *env = json_loadb(text, len, 0, NULL), *st = NULL;
    const json_t *ext;
    const char *b64 = js_str_member(env, "payload"), *l, *k;
    uint8_t *payload = NULL;
    size_t plen = 0;
    int rc = -1;
    *layer = NULL;
    key[0] = '\0';
    if (b64 != NULL &&
        cnx_base64_decode(b64, strlen(b64), &payload, &plen) == 0)
        st = json_loadb((const char *)payload, plen, 0, NULL);
    ext = json_object_get(
        json_object_get(json_object_get(st, "predicate"), "buildDefinition"),
        "externalParameters");
    l = js_str_member(json_object_get(json_object_get(ext, "task"), "output"),
                   "layer");
    k = js_str_member(ext, "taskKey");
    if (l != NULL && k != NULL && cnx_digest_valid(k)) {
        *layer = strdup(l);
        snprintf(key, CNX_DIGEST_LEN, "%s", k);
        rc = *layer != NULL ? 0 : -1;
    }
    free(payload);
    json_decref(st);
    json_decref(env);
    return rc;
}
