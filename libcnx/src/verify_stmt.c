/*
 * verify_stmt.c - one manifest's signature and statement, for cnx-verify.
 *
 * The envelope is untrusted: cnx_dsse_verify checks its form and its
 * Ed25519 signature against the trusted keys; the payload is then parsed
 * and every field the rest of the verification relies on is checked
 * (in-toto Statement v1, SLSA provenance v1, the embedded cnx.task/1 and
 * its recomputed key, subjects and dependencies with sha256 digests, the
 * code commit). Each problem becomes a finding on the manifest's own list,
 * never an abort, so one thread can own one manifest without locks.
 * Expected load: tens of thousands of manifests of a few KiB; the cost is
 * the Ed25519 verification, everything else here is a small fraction.
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

static int stmt_bad(vf_manifest *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* A statement finding on m; always returns -1 (the statement is bad). */
static int stmt_bad(vf_manifest *m, const char *fmt, ...)
{
    char reason[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    vf_add(&m->findings, m->origin, "statement", "%s", reason);
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

static const char *str_member(const json_t *obj, const char *key)
{
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
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
static int artifact(vf_manifest *m, const json_t *js, const char *path,
                    vf_art *out)
{
    const json_t *dig = json_object_get(js, "digest");
    const char *name = str_member(js, "name");
    const char *hex = str_member(dig, "sha256");
    char buf[201];
    if (!json_is_object(js))
        return stmt_bad(m, "%s: must be an object", path);
    if (!name_ok(name))
        return stmt_bad(m, "%s.name: must be 1 to %d bytes of text", path,
                        TEXT_MAX);
    if (!json_is_object(dig))
        return stmt_bad(m, "%s (%s): digest must be an object", path,
                        shown(name, buf, sizeof(buf)));
    if (!hex64(hex))
        return stmt_bad(m, "%s (%s): digest.sha256 must be 64 lowercase hex",
                        path, shown(name, buf, sizeof(buf)));
    out->name = strdup(name);
    if (out->name == NULL)
        return stmt_bad(m, "out of memory");
    snprintf(out->digest, sizeof(out->digest), "sha256:%s", hex);
    return 0;
}

/* The code entry: gitCommit and the dirty flag. */
static int code_entry(vf_manifest *m, const json_t *dep, size_t i)
{
    const json_t *dig = json_object_get(dep, "digest");
    const json_t *ann = json_object_get(dep, "annotations");
    const char *commit = str_member(dig, "gitCommit");
    const json_t *dirty = json_object_get(ann, "dirty");
    if (commit == NULL || strlen(commit) != 40 ||
        strspn(commit, "0123456789abcdef") != 40)
        return stmt_bad(m, "resolvedDependencies[%zu] (git+cnx): "
                           "digest.gitCommit must be 40 lowercase hex", i);
    if (ann != NULL && !json_is_object(ann))
        return stmt_bad(m, "resolvedDependencies[%zu] (git+cnx): "
                           "annotations must be an object", i);
    if (dirty != NULL && !json_is_boolean(dirty))
        return stmt_bad(m, "resolvedDependencies[%zu] (git+cnx): "
                           "annotations.dirty must be a boolean", i);
    snprintf(m->commit, sizeof(m->commit), "%s", commit);
    m->dirty = json_is_true(dirty);
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

static int dependencies(vf_manifest *m, const json_t *deps,
                        const cnx_task *task)
{
    size_t n = json_array_size(deps), k = 0;
    int code = 0, rc = 0;
    char buf[201];
    if (!json_is_array(deps))
        return stmt_bad(m, "resolvedDependencies: must be an array");
    m->inputs = calloc(n + 1, sizeof(*m->inputs));
    if (m->inputs == NULL)
        return stmt_bad(m, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const json_t *dep = json_array_get(deps, i);
        const char *name = str_member(dep, "name");
        char path[48];
        const cnx_task_input *in = NULL;
        vf_art *a;
        const char *want;
        snprintf(path, sizeof(path), "resolvedDependencies[%zu]", i);
        if (!json_is_object(dep) || name == NULL) {
            rc = stmt_bad(m, "%s: must be an object with a name", path);
            break;
        }
        if (strcmp(name, "git+cnx") == 0) {
            rc = code_entry(m, dep, i);
            code = 1;
            continue;
        }
        a = &m->inputs[k];
        rc = artifact(m, dep, path, a);
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
            rc = stmt_bad(m, "input %s is in none of the task's input "
                             "layers", shown(a->name, buf, sizeof(buf)));
            break;
        }
        a->layer = strdup(in->layer);
        if (a->layer == NULL) {
            rc = stmt_bad(m, "out of memory");
            break;
        }
        want = cnx_task_expected(task, in->role,
                                 a->name + strlen(a->layer) + 1);
        if (want != NULL && strcmp(want, a->digest) != 0) {
            rc = stmt_bad(m, "input %s: resolvedDependencies says %s but "
                             "the task asked for %s",
                          shown(a->name, buf, sizeof(buf)), a->digest, want);
            break;
        }
    }
    if (rc == 0 && !code)
        rc = stmt_bad(m, "resolvedDependencies: no git+cnx entry with a "
                         "gitCommit");
    return rc;
}

/* The statement (payload) of m: every field the checks rely on. */
static int statement(vf_manifest *m, const char *payload, size_t len,
                     cnx_task **task_out)
{
    json_t *st = NULL;
    json_error_t jerr;
    const json_t *pred, *bd, *ext, *task_js, *subj, *kv, *meta;
    const char *key, *stage, *inv;
    char *task_text = NULL, buf[201];
    cnx_task *task = NULL;
    size_t n;
    int rc = -1;

    st = json_loadb(payload, len, JSON_REJECT_DUPLICATES, &jerr);
    if (st == NULL || !json_is_object(st)) {
        stmt_bad(m, "payload is not a JSON object (%s)",
                 st == NULL ? jerr.text : "other type");
        goto done;
    }
    if (!json_is_string(json_object_get(st, "_type")) ||
        strcmp(str_member(st, "_type"), CNX_STATEMENT_TYPE) != 0) {
        stmt_bad(m, "_type must be %s", CNX_STATEMENT_TYPE);
        goto done;
    }
    if (!json_is_string(json_object_get(st, "predicateType")) ||
        strcmp(str_member(st, "predicateType"), CNX_SLSA_PREDICATE) != 0) {
        stmt_bad(m, "predicateType must be %s", CNX_SLSA_PREDICATE);
        goto done;
    }
    pred = json_object_get(st, "predicate");
    bd = json_object_get(pred, "buildDefinition");
    if (!json_is_object(pred) || !json_is_object(bd)) {
        stmt_bad(m, "predicate.buildDefinition: must be an object");
        goto done;
    }
    if (str_member(bd, "buildType") == NULL ||
        strcmp(str_member(bd, "buildType"), CNX_BUILD_TYPE) != 0) {
        stmt_bad(m, "buildDefinition.buildType must be %s", CNX_BUILD_TYPE);
        goto done;
    }
    ext = json_object_get(bd, "externalParameters");
    task_js = json_object_get(ext, "task");
    if (!json_is_object(ext) || !json_is_object(task_js)) {
        stmt_bad(m, "externalParameters.task: must be an object");
        goto done;
    }
    task_text = cnx__json_canonical(task_js);
    if (task_text == NULL) {
        stmt_bad(m, "out of memory");
        goto done;
    }
    if (cnx_task_parse(&task, task_text, strlen(task_text)) != 0) {
        stmt_bad(m, "externalParameters.task is not a valid %s: %s",
                 CNX_TASK_SCHEMA, cnx_error_last()->message);
        goto done;
    }
    key = str_member(ext, "taskKey");
    if (key == NULL || !cnx_digest_valid(key)) {
        stmt_bad(m, "externalParameters.taskKey: must be sha256:<64 hex>");
        goto done;
    }
    if (strcmp(key, task->key) != 0) {
        stmt_bad(m, "externalParameters.taskKey is %s but the task's "
                    "content has key %s", key, task->key);
        goto done;
    }
    stage = str_member(ext, "stage");
    if (stage == NULL || strcmp(stage, task->stage) != 0) {
        stmt_bad(m, "externalParameters.stage must equal task.stage (%s)",
                 task->stage);
        goto done;
    }
    kv = json_object_get(ext, "kernelVersion");
    if (!json_is_integer(kv) ||
        json_integer_value(kv) != (json_int_t)task->kernel_version) {
        stmt_bad(m, "externalParameters.kernelVersion must equal "
                    "task.kernel_version (%lld)",
                 (long long)task->kernel_version);
        goto done;
    }
    meta = json_object_get(json_object_get(pred, "runDetails"), "metadata");
    inv = str_member(meta, "invocationId");
    n = strlen(key);
    if (inv == NULL || strncmp(inv, key, n) != 0 || inv[n] != '/') {
        stmt_bad(m, "runDetails.metadata.invocationId must be "
                    "<taskKey>/<attempt>");
        goto done;
    }
    subj = json_object_get(st, "subject");
    n = json_array_size(subj);
    if (!json_is_array(subj) || n == 0) {
        stmt_bad(m, "subject: must be a non-empty array");
        goto done;
    }
    m->subjects = calloc(n, sizeof(*m->subjects));
    if (m->subjects == NULL) {
        stmt_bad(m, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        char path[32];
        size_t ln = strlen(task->output_layer);
        snprintf(path, sizeof(path), "subject[%zu]", i);
        if (artifact(m, json_array_get(subj, i), path, &m->subjects[i]) != 0)
            goto done;
        m->nsubjects = i + 1;
        if (strncmp(m->subjects[i].name, task->output_layer, ln) != 0 ||
            m->subjects[i].name[ln] != '/') {
            stmt_bad(m, "subject %s is outside the task's output layer %s",
                     shown(m->subjects[i].name, buf, sizeof(buf)),
                     task->output_layer);
            goto done;
        }
    }
    if (dependencies(m, json_object_get(bd, "resolvedDependencies"), task) !=
        0)
        goto done;
    snprintf(m->task_key, sizeof(m->task_key), "%s", key);
    m->kernel_version = task->kernel_version;
    m->request = strdup(task->request);
    m->stage = strdup(task->stage);
    m->parameters = strdup(task->parameters != NULL ? task->parameters : "{}");
    m->output_layer = strdup(task->output_layer);
    if (m->request == NULL || m->stage == NULL || m->parameters == NULL ||
        m->output_layer == NULL) {
        stmt_bad(m, "out of memory");
        goto done;
    }
    rc = 0;
done:
    free(task_text);
    json_decref(st);
    *task_out = task;
    return rc;
}

void vf_manifest_check(vf_manifest *m, cnx_key *const *keys, size_t nkeys)
{
    uint8_t *payload = NULL;
    size_t plen = 0;
    cnx_task *task = NULL;
    char hint[41], *type = NULL;
    int rc;

    if (m->text == NULL)
        return;
    cnx_digest(m->text, m->len, m->env_digest);
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
        stmt_bad(m, "payloadType must be %s", CNX_DSSE_PAYLOAD_TYPE);
        goto done;
    }
    if (statement(m, (const char *)payload, plen, &task) != 0)
        goto done;
    if (m->expect_key[0] != '\0' && strcmp(m->expect_key, m->task_key) != 0) {
        stmt_bad(m, "stored under task key %s but states %s",
                 m->expect_key, m->task_key);
        goto done;
    }
    if (m->stored_layer != NULL &&
        strcmp(m->stored_layer, m->output_layer) != 0) {
        stmt_bad(m, "stored in layer %s but its task writes %s",
                 m->stored_layer, m->output_layer);
        goto done;
    }
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
    free(m->request);
    free(m->stage);
    free(m->parameters);
    free(m->output_layer);
    for (size_t i = 0; i < m->nsubjects; i++)
        free(m->subjects[i].name);
    for (size_t i = 0; i < m->ninputs; i++) {
        free(m->inputs[i].name);
        free(m->inputs[i].layer);
    }
    free(m->subjects);
    free(m->inputs);
    vf_findings_dispose(&m->findings);
}

int vf_envelope_locate(const char *text, size_t len, char **layer,
                       char key[CNX_DIGEST_LEN])
{
    json_t *env = json_loadb(text, len, 0, NULL), *st = NULL;
    const json_t *ext;
    const char *b64 = str_member(env, "payload"), *l, *k;
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
    l = str_member(json_object_get(json_object_get(ext, "task"), "output"),
                   "layer");
    k = str_member(ext, "taskKey");
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
