/*
 * sign_fixture.c - signed lineage fixtures for tests/integration/
 * lineage_openssl.sh and the acceptance scripts.
 *
 *   sign_fixture DIR N
 *
 * writes a fresh key pair DIR/cnx.key, DIR/cnx.pub and, for i in 0..N-1,
 * DIR/statement-<iii>.json (a sample provenance statement, canonical JSON)
 * and DIR/envelope-<iii>.json (its DSSE envelope). The samples vary the
 * number of outputs and inputs, the container digest, the dirty flag and an
 * unknown commit; every fourth envelope is re-encoded with URL-safe base64
 * without padding, which verifiers must accept. Each envelope is checked
 * with cnx_dsse_verify before it is written. Exit status 0, 1 with a message
 * on stderr, 2 for bad usage. Single-threaded.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/task.h"

#define MAX_SAMPLES 1000
#define MAX_ARTIFACTS 8

static int fail(const char *what)
{
    fprintf(stderr, "sign_fixture: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    size_t len = strlen(text);
    if (f == NULL || fwrite(text, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "sign_fixture: cannot write %s: %s\n", path,
                strerror(errno));
        return 1;
    }
    return 0;
}

/* Standard base64 text to URL-safe without padding, in place. */
static void urlsafe(char *s)
{
    for (char *p = s; *p != '\0'; p++) {
        if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
        else if (*p == '=')
            *p = '\0';
    }
}

/* The same envelope with URL-safe, unpadded base64; NULL on failure. */
static char *reencode_urlsafe(const char *env)
{
    json_t *js = json_loads(env, 0, NULL), *sig;
    char *payload, *text, *out = NULL;
    if (js == NULL)
        return NULL;
    payload = strdup(json_string_value(json_object_get(js, "payload")));
    sig = json_array_get(json_object_get(js, "signatures"), 0);
    text = strdup(json_string_value(json_object_get(sig, "sig")));
    if (payload != NULL && text != NULL) {
        urlsafe(payload);
        urlsafe(text);
        json_object_set_new(js, "payload", json_string(payload));
        json_object_set_new(sig, "sig", json_string(text));
        out = json_dumps(js, JSON_SORT_KEYS | JSON_COMPACT);
    }
    free(payload);
    free(text);
    json_decref(js);
    return out;
}

static int cmp_artifact(const void *a, const void *b)
{
    return strcmp(((const cnx_artifact *)a)->name,
                  ((const cnx_artifact *)b)->name);
}

typedef struct sample {
    char task[4096];
    char names[2][MAX_ARTIFACTS][256];
    char digests[2][MAX_ARTIFACTS][CNX_DIGEST_LEN];
    cnx_artifact outputs[MAX_ARTIFACTS];
    cnx_artifact inputs[MAX_ARTIFACTS];
} sample;

/* Sample i: a segment task over box i with i % 3 + 1 outputs. */
static int make_sample(int i, sample *s, cnx_provenance *p, cnx_task **task,
                       char **task_json)
{
    const int64_t x0 = (int64_t)i * 64;
    const size_t nout = (size_t)(i % 3) + 1, nin = (size_t)(i % 4);
    char objects[2048] = "";
    size_t used = 0;
    int n;

    for (size_t k = 0; k < nin; k++) {
        char blob[64];
        snprintf(s->names[0][k], sizeof(s->names[0][k]),
                 "8_8_8/%" PRId64 "-%" PRId64 "_%zu-%zu_0-64", x0, x0 + 64,
                 k * 64, k * 64 + 64);
        snprintf(blob, sizeof(blob), "input %d %zu", i, k);
        cnx_digest(blob, strlen(blob), s->digests[0][k]);
        n = snprintf(objects + used, sizeof(objects) - used, "%s\"%s\":\"%s\"",
                     k > 0 ? "," : "", s->names[0][k], s->digests[0][k]);
        if (n < 0 || (size_t)n >= sizeof(objects) - used)
            return 1;
        used += (size_t)n;
    }
    n = snprintf(s->task, sizeof(s->task),
                 "{\"schema\":\"cnx.task/1\",\"request\":\"req-fixture.%03d\","
                 "\"stage\":\"segment\",\"kernel_version\":3,"
                 "\"roi\":{\"min\":[%" PRId64 ",0,0],\"max\":[%" PRId64
                 ",64,64]},\"halo\":2,\"inputs\":{%s%s%s},"
                 "\"output\":{\"layer\":\"file:///data/synth/segments/v3\","
                 "\"scale\":\"8_8_8\"},"
                 "\"parameters\":{\"threshold\":0.5,\"seed_distance\":6},"
                 "\"deadline\":\"2026-11-23T10:00:00Z\"}",
                 i, x0, x0 + 64,
                 nin > 0 ? "\"boundary\":{\"layer\":"
                           "\"file:///data/synth/boundary\","
                           "\"scale\":\"8_8_8\",\"objects\":{"
                         : "",
                 objects, nin > 0 ? "}}" : "");
    if (n < 0 || (size_t)n >= sizeof(s->task))
        return 1;
    if (cnx_task_parse(task, s->task, strlen(s->task)) != 0)
        return fail("sample task");
    if (cnx_task_to_json(*task, task_json) != 0)
        return fail("sample task");
    for (size_t k = 0; k < nin; k++) {
        char full[256];
        snprintf(full, sizeof(full), "file:///data/synth/boundary/%s",
                 s->names[0][k]);
        memcpy(s->names[0][k], full, sizeof(full));
        s->inputs[k].name = s->names[0][k];
        s->inputs[k].digest = s->digests[0][k];
    }
    for (size_t k = 0; k < nout; k++) {
        char blob[64];
        snprintf(s->names[1][k], sizeof(s->names[1][k]),
                 "file:///data/synth/segments/v3/8_8_8/%" PRId64 "-%" PRId64
                 "_%zu-%zu_0-64%s",
                 x0, x0 + 64, k * 64, k * 64 + 64,
                 i % 7 == 6 ? "-r\xc3\xa9sum\xc3\xa9" : "");
        snprintf(blob, sizeof(blob), "output %d %zu", i, k);
        cnx_digest(blob, strlen(blob), s->digests[1][k]);
        s->outputs[k].name = s->names[1][k];
        s->outputs[k].digest = s->digests[1][k];
    }
    /* Callers pass subjects and dependencies sorted by name. */
    qsort(s->inputs, nin, sizeof(s->inputs[0]), cmp_artifact);
    qsort(s->outputs, nout, sizeof(s->outputs[0]), cmp_artifact);
    memset(p, 0, sizeof(*p));
    p->task_json = *task_json;
    p->task_key = (*task)->key;
    p->stage = (*task)->stage;
    p->kernel_version = (*task)->kernel_version;
    p->outputs = s->outputs;
    p->noutputs = nout;
    p->inputs = s->inputs;
    p->ninputs = nin;
    /* Sample 0 carries this build's identity; the rest fixed values. */
    p->git_commit = i == 0       ? cnx_build_commit()
                    : i % 5 == 4 ? ""
                                 : "4b825dc642cb6eb9a060e54bf8d69288fbee4904";
    p->git_dirty = i == 0 ? cnx_build_dirty() : i % 3 == 0;
    p->container_digest = i % 2 == 0 ? s->digests[1][0] : NULL;
    p->worker = "segment-fixture";
    p->attempt = i % 4 + 1;
    p->started = 1795341600.0 + i * 10.125;
    p->finished = p->started + 3.5;
    return 0;
}

static int one(const char *dir, int i, const cnx_key *key, cnx_key *pub)
{
    sample *s = calloc(1, sizeof(*s));
    cnx_provenance p;
    cnx_task *task = NULL;
    char *task_json = NULL, *st = NULL, *env = NULL, *url = NULL;
    char path[4096];
    cnx_key *trusted[1] = {pub};
    int rc = 1;

    if (s == NULL || make_sample(i, s, &p, &task, &task_json) != 0)
        goto done;
    if (cnx_provenance_statement(&p, &st) != 0) {
        rc = fail("statement");
        goto done;
    }
    if (cnx_dsse_sign(key, CNX_DSSE_PAYLOAD_TYPE, st, strlen(st), &env) != 0) {
        rc = fail("sign");
        goto done;
    }
    if (i % 4 == 3) {
        url = reencode_urlsafe(env);
        if (url == NULL) {
            fprintf(stderr, "sign_fixture: cannot re-encode envelope\n");
            goto done;
        }
        free(env);
        env = url;
    }
    if (cnx_dsse_verify(env, strlen(env), trusted, 1, NULL, NULL, NULL) != 0) {
        rc = fail("own verification");
        goto done;
    }
    snprintf(path, sizeof(path), "%s/statement-%03d.json", dir, i);
    if (write_file(path, st) != 0)
        goto done;
    snprintf(path, sizeof(path), "%s/envelope-%03d.json", dir, i);
    if (write_file(path, env) != 0)
        goto done;
    rc = 0;
done:
    free(env);
    free(st);
    free(task_json);
    cnx_task_free(task);
    free(s);
    return rc;
}

int main(int argc, char **argv)
{
    cnx_key *key = NULL, *pub = NULL;
    char path[4096], *end;
    long n;
    int rc = 1;

    if (argc != 3) {
        fprintf(stderr, "usage: sign_fixture DIR N\n");
        return 2;
    }
    errno = 0;
    n = strtol(argv[2], &end, 10);
    if (errno != 0 || *end != '\0' || n < 1 || n > MAX_SAMPLES) {
        fprintf(stderr, "sign_fixture: N must be 1..%d\n", MAX_SAMPLES);
        return 2;
    }
    if (cnx_key_generate(&key) != 0 || cnx_key_write(key, argv[1]) != 0)
        return fail("key");
    snprintf(path, sizeof(path), "%s/cnx.pub", argv[1]);
    if (cnx_key_load_public(&pub, path) != 0) {
        rc = fail("key");
        goto done;
    }
    for (int i = 0; i < (int)n; i++)
        if (one(argv[1], i, key, pub) != 0)
            goto done;
    rc = 0;
done:
    cnx_key_free(pub);
    cnx_key_free(key);
    return rc;
}
