/*
 * cnx-verify's library on a tiny two-level lineage built in a temporary
 * directory: a raw layer with one object (no lineage), a first stage whose
 * two tasks each read it and write one object, and a second stage that
 * reads the first stage's object A; envelopes signed with a generated key
 * and stored write-once in each layer's lineage/, a git repository made
 * with libgit2 holding the code commit, and a ledger with the controller's
 * schema and chain. Clean, it has no finding; each alteration (a flipped
 * output byte, an edited payload, an untrusted signer, a swapped input, a
 * removed manifest, an unknown commit, a deleted or edited ledger row,
 * other parameters, malformed envelopes) gives its own check and message.
 * Copied as a whole to another directory, with the originals removed, the
 * lineage verifies at the copy (relocated), and a chunk swapped in the
 * copy is still a finding that names it there.
 */
#include "cnx_test.h"

#include <git2.h>
#include <jansson.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/store.h"
#include "cnx/task.h"
#include "cnx/verify.h"
#include "ledger_schema.sql.h"

#define REQUEST "req-verify"
#define RAW_OBJ "8_8_8/0-64_0-64_0-64"
#define OBJ_A "8_8_8/0-64_0-64_0-64"
#define OBJ_B "8_8_8/64-128_0-64_0-64"
#define GENESIS \
    "sha256:0000000000000000000000000000000000000000000000000000000000000000"
#define OTHER_COMMIT "0123456789abcdef0123456789abcdef01234567"

typedef struct manifest {
    char key[CNX_DIGEST_LEN];
    char digest[CNX_DIGEST_LEN];
    char *envelope;
    char path[300]; /* the stored file */
    char layer[128];
    char out_url[256];
    char out_digest[CNX_DIGEST_LEN];
} manifest;

typedef struct fixture {
    char dir[64];
    char raw[128], s1[128], s2[128], trust[128], repo[128], ledger[128];
    char commit[41];
    cnx_key *key;
    char d_raw[CNX_DIGEST_LEN], d_a[CNX_DIGEST_LEN], d_b[CNX_DIGEST_LEN];
    char d_out[CNX_DIGEST_LEN];
    manifest ma, mb, m2;
} fixture;

typedef struct options {
    const char *commit;     /* NULL: the repository's */
    int swap;               /* stage two reads A as B's bytes */
    const char *params_two; /* parameters of stage two's task */
} options;

static const char workflow_json[] =
    "{\"schema\":\"cnx.workflow/1\",\"name\":\"twostage\","
    "\"stages\":[{\"name\":\"one\",\"worker\":\"segment\",\"kind\":\"map\","
    "\"kernel_version\":1,\"inputs\":{\"source\":{\"layer\":\"raw\"}},"
    "\"output\":{\"layer\":\"s1/v1\"},\"parameters\":{\"t\":1},\"halo\":0,"
    "\"task_size\":[64,64,64],\"retry_budget\":3,\"lease_s\":600,"
    "\"depends_on\":[]},"
    "{\"name\":\"two\",\"worker\":\"segment\",\"kind\":\"map\","
    "\"kernel_version\":1,\"inputs\":{\"source\":{\"stage\":\"one\"}},"
    "\"output\":{\"layer\":\"s2/v1\"},\"parameters\":{\"t\":2},\"halo\":0,"
    "\"task_size\":[64,64,64],\"retry_budget\":3,\"lease_s\":600,"
    "\"depends_on\":[\"one\"]}]}";

/* ---- building the lineage --------------------------------------------- */

static void put(const char *layer, const char *name, const char *bytes,
                char digest[CNX_DIGEST_LEN])
{
    cnx_store *s;
    assert_int_equal(cnx_store_open(&s, layer), 0);
    assert_int_equal(cnx_store_put(s, name, bytes, strlen(bytes), digest), 0);
    cnx_store_free(s);
}

static void make_repo(fixture *fx)
{
    git_repository *repo;
    git_signature *sig;
    git_index *index;
    git_oid tree_id, commit_id;
    git_tree *tree;
    git_libgit2_init();
    assert_int_equal(git_repository_init(&repo, fx->repo, 0), 0);
    assert_int_equal(git_signature_new(&sig, "t", "t@example.com", 1700000000,
                                       0), 0);
    assert_int_equal(git_repository_index(&index, repo), 0);
    assert_int_equal(git_index_write_tree(&tree_id, index), 0);
    assert_int_equal(git_tree_lookup(&tree, repo, &tree_id), 0);
    assert_int_equal(git_commit_create_v(&commit_id, repo, "HEAD", sig, sig,
                                         NULL, "first", tree, 0), 0);
    git_oid_tostr(fx->commit, sizeof(fx->commit), &commit_id);
    git_tree_free(tree);
    git_index_free(index);
    git_signature_free(sig);
    git_repository_free(repo);
    git_libgit2_shutdown();
}

/* Sign and store the manifest of one task: reads in_layer/in_obj (as
 * in_digest), writes out_layer/out_obj with out_bytes. */
static void sign_task(fixture *fx, const cnx_key *key, manifest *m,
                      int64_t x0, const char *in_layer, const char *in_obj,
                      const char *in_digest, const char *out_layer,
                      const char *out_obj, const char *out_bytes,
                      const char *params, const char *commit)
{
    char task_text[2048], in_url[256], *task_json, *stmt;
    cnx_task *task;
    cnx_provenance p;
    cnx_artifact out, in;
    cnx_store *s;
    const char *k, *d;

    if (out_bytes != NULL)
        put(out_layer, out_obj, out_bytes, m->out_digest);
    snprintf(task_text, sizeof(task_text),
             "{\"schema\":\"cnx.task/1\",\"request\":\"" REQUEST "\","
             "\"stage\":\"segment\",\"kernel_version\":1,"
             "\"roi\":{\"min\":[%lld,0,0],\"max\":[%lld,64,64]},\"halo\":0,"
             "\"inputs\":{\"source\":{\"layer\":\"%s\",\"scale\":\"8_8_8\","
             "\"objects\":{\"%s\":\"%s\"}}},"
             "\"output\":{\"layer\":\"%s\",\"scale\":\"8_8_8\"},"
             "\"parameters\":%s,\"deadline\":\"2026-11-23T10:00:00Z\"}",
             (long long)x0, (long long)x0 + 64, in_layer, in_obj, in_digest,
             out_layer, params);
    assert_int_equal(cnx_task_parse(&task, task_text, strlen(task_text)), 0);
    assert_int_equal(cnx_task_to_json(task, &task_json), 0);
    snprintf(m->key, sizeof(m->key), "%s", task->key);
    snprintf(in_url, sizeof(in_url), "%s/%s", in_layer, in_obj);
    snprintf(m->out_url, sizeof(m->out_url), "%s/%s", out_layer, out_obj);
    snprintf(m->layer, sizeof(m->layer), "%s", out_layer);
    out.name = m->out_url;
    out.digest = m->out_digest;
    in.name = in_url;
    in.digest = in_digest;
    memset(&p, 0, sizeof(p));
    p.task_json = task_json;
    p.task_key = task->key;
    p.stage = "segment";
    p.kernel_version = 1;
    p.outputs = &out;
    p.noutputs = 1;
    p.inputs = &in;
    p.ninputs = 1;
    p.git_commit = commit != NULL ? commit : fx->commit;
    p.worker = "test-0";
    p.attempt = 1;
    p.started = 1790000000.0;
    p.finished = 1790000001.5;
    assert_int_equal(cnx_provenance_statement(&p, &stmt), 0);
    assert_int_equal(cnx_dsse_sign(key, CNX_DSSE_PAYLOAD_TYPE, stmt,
                                   strlen(stmt), &m->envelope),
                     0);
    cnx_digest(m->envelope, strlen(m->envelope), m->digest);
    k = strchr(m->key, ':') + 1;
    d = strchr(m->digest, ':') + 1;
    {
        char name[256];
        snprintf(name, sizeof(name), "%s/%s/%s%s", CNX_LINEAGE_DIR, k, d,
                 CNX_LINEAGE_SUFFIX);
        assert_int_equal(cnx_store_open(&s, out_layer), 0);
        assert_int_equal(cnx_store_put(s, name, m->envelope,
                                       strlen(m->envelope), NULL),
                         0);
        cnx_store_free(s);
        assert_true((size_t)snprintf(m->path, sizeof(m->path), "%.100s/%.190s",
                                     out_layer + 7, name) < sizeof(m->path));
    }
    free(stmt);
    free(task_json);
    cnx_task_free(task);
}

static void exec_sql(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK)
        fail_msg("sql: %s: %s", sql, err);
}

static void ledger_row(sqlite3 *db, int offset, const manifest *m,
                       char prev[CNX_DIGEST_LEN], int idx, const char *stage)
{
    char chain[512], row[CNX_DIGEST_LEN];
    sqlite3_stmt *st;
    snprintf(chain, sizeof(chain), "cnx.lineage-row/1\n%s\n%d\n%d\n%s\n%d\n",
             prev, 0, offset, m->digest, 1);
    cnx_digest(chain, strlen(chain), row);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "INSERT INTO lineage VALUES(0, ?, ?, ?, ?, "
                           "'segment', 'inv', 'k.pub', 1, NULL, ?, ?, ?, "
                           "NULL)",
                           -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_int(st, 1, offset);
    sqlite3_bind_text(st, 2, m->digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, m->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, REQUEST, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, m->envelope, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 6, prev, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 7, row, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    memcpy(prev, row, CNX_DIGEST_LEN);
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "INSERT INTO tasks(request, idx, stage, x0, y0, "
                           "z0, x1, y1, z1, deps_left, state, task_key, "
                           "manifest) VALUES(?, ?, ?, 0, 0, 0, 64, 64, 64, "
                           "0, 'done', ?, ?)",
                           -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, REQUEST, -1, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, idx);
    sqlite3_bind_text(st, 3, stage, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, m->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 5, m->digest, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO outputs VALUES(?, ?, ?, "
                                        "?)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, m->key, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, m->out_url, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, m->out_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 4, m->digest, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
}

static void make_ledger(fixture *fx)
{
    sqlite3 *db;
    sqlite3_stmt *st;
    char prev[CNX_DIGEST_LEN] = GENESIS;
    assert_int_equal(sqlite3_open(fx->ledger, &db), SQLITE_OK);
    exec_sql(db, ledger_schema_sql);
    exec_sql(db, "INSERT INTO meta VALUES('schema', '1')");
    assert_int_equal(
        sqlite3_prepare_v2(db,
                           "INSERT INTO requests(id, workflow, "
                           "workflow_digest, workflow_json, dataset, roi, "
                           "submitted, deadline, reuse, state) VALUES(?, "
                           "'twostage', 'sha256:x', ?, 'file:///d', '{}', "
                           "'t', 't', 0, 'done')",
                           -1, &st, NULL),
        SQLITE_OK);
    sqlite3_bind_text(st, 1, REQUEST, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, workflow_json, -1, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    ledger_row(db, 0, &fx->ma, prev, 0, "one");
    ledger_row(db, 1, &fx->mb, prev, 1, "one");
    ledger_row(db, 2, &fx->m2, prev, 2, "two");
    sqlite3_close(db);
}

static void build(fixture *fx, const options *o)
{
    cnx_key *pub;
    char path[256];
    cnx_test_tmpdir(fx->dir);
    snprintf(fx->raw, sizeof(fx->raw), "file://%s/raw", fx->dir);
    snprintf(fx->s1, sizeof(fx->s1), "file://%s/s1", fx->dir);
    snprintf(fx->s2, sizeof(fx->s2), "file://%s/s2", fx->dir);
    snprintf(fx->trust, sizeof(fx->trust), "%s/trust", fx->dir);
    snprintf(fx->repo, sizeof(fx->repo), "%s/repo", fx->dir);
    snprintf(fx->ledger, sizeof(fx->ledger), "%s/ledger.db", fx->dir);
    make_repo(fx);
    assert_int_equal(cnx_key_generate(&fx->key), 0);
    assert_int_equal(mkdir(fx->trust, 0755), 0);
    {
        /* the trust directory holds only the public half */
        char keydir[100];
        snprintf(keydir, sizeof(keydir), "%s/keys", fx->dir);
        assert_int_equal(cnx_key_write(fx->key, keydir), 0);
        snprintf(path, sizeof(path), "%s/cnx.pub", keydir);
        assert_int_equal(cnx_key_load_public(&pub, path), 0);
        cnx_key_free(pub);
        char cmd[400];
        snprintf(cmd, sizeof(cmd), "cp %s %s/worker.pub", path, fx->trust);
        assert_int_equal(system(cmd), 0);
    }
    put(fx->raw, RAW_OBJ, "raw chunk", fx->d_raw);
    put(fx->raw, "info", "{}", NULL);
    sign_task(fx, fx->key, &fx->ma, 0, fx->raw, RAW_OBJ, fx->d_raw, fx->s1,
              OBJ_A, "segments A", "{\"t\":1}", o->commit);
    sign_task(fx, fx->key, &fx->mb, 64, fx->raw, RAW_OBJ, fx->d_raw, fx->s1,
              OBJ_B, "segments B", "{\"t\":1}", o->commit);
    snprintf(fx->d_a, sizeof(fx->d_a), "%s", fx->ma.out_digest);
    snprintf(fx->d_b, sizeof(fx->d_b), "%s", fx->mb.out_digest);
    put(fx->s1, "info", "{}", NULL);
    if (o->swap) {
        /* A's bytes replaced by B's, then stage two read them */
        snprintf(path, sizeof(path), "%s/s1/" OBJ_A, fx->dir);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fputs("segments B", f);
        fclose(f);
    }
    sign_task(fx, fx->key, &fx->m2, 0, fx->s1, OBJ_A,
              o->swap ? fx->d_b : fx->d_a, fx->s2, OBJ_A, "agglomerated",
              o->params_two != NULL ? o->params_two : "{\"t\":2}", o->commit);
    snprintf(fx->d_out, sizeof(fx->d_out), "%s", fx->m2.out_digest);
    make_ledger(fx);
}

static void teardown_fx(fixture *fx)
{
    free(fx->ma.envelope);
    free(fx->mb.envelope);
    free(fx->m2.envelope);
    cnx_key_free(fx->key);
    cnx_test_rmtree(fx->dir);
}

/* ---- running ------------------------------------------------------------ */

typedef struct run_opts {
    int ledger, repo, layers, manifest_only, request;
} run_opts;

static cnx_verify *run(const fixture *fx, const run_opts *r)
{
    cnx_verify_config cfg;
    cnx_verify *v;
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = fx->trust;
    cfg.threads = 2;
    if (r->ledger)
        cfg.ledger = fx->ledger;
    if (r->repo) {
        cfg.repo = fx->repo;
        cfg.ref = "HEAD";
    }
    assert_int_equal(cnx_verify_new(&v, &cfg), 0);
    if (r->layers) {
        assert_int_equal(cnx_verify_add_layer(v, fx->s1), 0);
        assert_int_equal(cnx_verify_add_layer(v, fx->s2), 0);
    }
    if (r->manifest_only)
        assert_int_equal(cnx_verify_add_file(v, fx->m2.path), 0);
    if (r->request)
        assert_int_equal(cnx_verify_add_request(v, REQUEST), 0);
    assert_int_equal(cnx_verify_run(v), 0);
    return v;
}

static void dump(const cnx_verify *v)
{
    size_t n;
    const cnx_verify_finding *f = cnx_verify_findings(v, &n);
    for (size_t i = 0; i < n; i++)
        print_message("  %s: %s: %s\n", f[i].object, f[i].check,
                      f[i].reason);
}

/* A finding of check whose object and reason contain the given texts. */
static void expect(const cnx_verify *v, const char *check, const char *object,
                   const char *reason)
{
    size_t n;
    const cnx_verify_finding *f = cnx_verify_findings(v, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(f[i].check, check) == 0 &&
            (object == NULL || strstr(f[i].object, object) != NULL) &&
            strstr(f[i].reason, reason) != NULL)
            return;
    dump(v);
    fail_msg("no %s finding on '%s' saying '%s'", check,
             object ? object : "*", reason);
}

static void expect_none(const cnx_verify *v)
{
    size_t n;
    cnx_verify_findings(v, &n);
    if (n != 0) {
        dump(v);
        fail_msg("%zu findings on a clean lineage", n);
    }
}

static const run_opts ALL = {1, 1, 1, 0, 0};

/* ---- tests ---------------------------------------------------------------- */

static void test_verify__clean_lineage_has_no_finding(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify_stats stats;
    cnx_verify *v;
    char *json;
    (void)state;
    build(&fx, &o);
    v = run(&fx, &ALL);
    expect_none(v);
    cnx_verify_get_stats(v, &stats);
    assert_int_equal(stats.manifests, 3);
    assert_int_equal(stats.objects, 4); /* A, B, the output, raw */
    assert_int_equal(stats.inputs, 3);
    assert_int_equal(cnx_verify_report_json(v, &json), 0);
    assert_non_null(strstr(json, "\"ok\":true"));
    assert_non_null(strstr(json, "\"findings\":[]"));
    free(json);
    cnx_verify_free(v);

    /* one manifest alone walks back through s1's lineage to raw */
    run_opts one = {1, 1, 0, 1, 0};
    v = run(&fx, &one);
    expect_none(v);
    cnx_verify_get_stats(v, &stats);
    assert_int_equal(stats.manifests, 3);
    assert_int_equal(stats.manifests_given, 1);
    cnx_verify_free(v);

    /* and the request from the ledger */
    run_opts req = {1, 1, 0, 0, 1};
    v = run(&fx, &req);
    expect_none(v);
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void overwrite(const char *path, const char *text);

/* Regression: hash jobs live in an array that grows; a job once pointed
 * into its own slot, so past 256 objects (the first growth) a job read a
 * name from freed memory. 300 tasks of one object each into a third layer
 * verify clean, and a flipped one among them is still found by name. */
static void test_verify__hundreds_of_objects_grow_the_job_list(void **state)
{
    enum { N = 300 };
    fixture fx;
    options o = {0};
    manifest *many = calloc(N, sizeof(*many));
    char layer[128], obj[64], bytes[32], path[256];
    cnx_verify_config cfg;
    cnx_verify_stats stats;
    cnx_verify *v;
    (void)state;
    assert_non_null(many);
    build(&fx, &o);
    snprintf(layer, sizeof(layer), "file://%s/many", fx.dir);
    for (int i = 0; i < N; i++) {
        snprintf(obj, sizeof(obj), "8_8_8/%d-%d_0-64_0-64", i * 64,
                 i * 64 + 64);
        snprintf(bytes, sizeof(bytes), "chunk %d", i);
        sign_task(&fx, fx.key, &many[i], (int64_t)i * 64, fx.raw, RAW_OBJ,
                  fx.d_raw, layer, obj, bytes, "{\"t\":1}", NULL);
    }
    put(layer, "info", "{}", NULL);
    for (int pass = 0; pass < 2; pass++) {
        cnx_verify_config_init(&cfg);
        cfg.trust_dir = fx.trust;
        cfg.threads = 2;
        assert_int_equal(cnx_verify_new(&v, &cfg), 0);
        assert_int_equal(cnx_verify_add_layer(v, layer), 0);
        assert_int_equal(cnx_verify_run(v), 0);
        cnx_verify_get_stats(v, &stats);
        assert_int_equal(stats.manifests, N);
        assert_true(stats.objects >= N);
        if (pass == 0) {
            expect_none(v);
            /* then one object's bytes change under its manifest */
            snprintf(path, sizeof(path), "%s/many/8_8_8/%d-%d_0-64_0-64",
                     fx.dir, 277 * 64, 278 * 64);
            overwrite(path, "chunk X");
        } else {
            expect(v, "subject", many[277].out_url, "");
        }
        cnx_verify_free(v);
    }
    for (int i = 0; i < N; i++)
        free(many[i].envelope);
    free(many);
    teardown_fx(&fx);
}

static void test_verify__flipped_output_byte_is_a_subject_finding(
    void **state)
{
    fixture fx;
    options o = {0};
    char path[256];
    FILE *f;
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    snprintf(path, sizeof(path), "%s/s2/" OBJ_A, fx.dir);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fputc('A', f);
    fclose(f);
    v = run(&fx, &ALL);
    expect(v, "subject", fx.m2.out_url, "storage now holds");
    expect(v, "subject", fx.m2.out_url, fx.d_out);
    cnx_verify_free(v);
    teardown_fx(&fx);
}

/* Replace a stored envelope by other text (same name). */
static void overwrite(const char *path, const char *text)
{
    FILE *f;
    chmod(path, 0644);
    f = fopen(path, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_verify__edited_payload_is_a_signature_finding(void **state)
{
    fixture fx;
    options o = {0};
    json_t *env;
    uint8_t *body;
    size_t len;
    char *b64, *text, *at;
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    env = json_loads(fx.m2.envelope, 0, NULL);
    assert_int_equal(
        cnx_base64_decode(json_string_value(json_object_get(env, "payload")),
                          strlen(json_string_value(
                              json_object_get(env, "payload"))),
                          &body, &len),
        0);
    at = strstr((char *)body, "\"t\":2");
    assert_non_null(at);
    at[4] = '3';
    b64 = cnx_base64_encode(body, len);
    json_object_set_new(env, "payload", json_string(b64));
    text = json_dumps(env, JSON_SORT_KEYS | JSON_COMPACT);
    overwrite(fx.m2.path, text);
    v = run(&fx, &ALL);
    expect(v, "signature", fx.m2.path,
           "signature does not verify (payload or signature altered)");
    expect(v, "statement", fx.m2.path, "edited after it was written");
    /* its output is no longer covered by a verified manifest */
    expect(v, "coverage", fx.m2.out_url, "no verified manifest covers it");
    cnx_verify_free(v);
    free(text);
    free(b64);
    free(body);
    json_decref(env);
    teardown_fx(&fx);
}

static void test_verify__untrusted_signer_is_a_signature_finding(void **state)
{
    fixture fx;
    options o = {0};
    cnx_key *other;
    manifest m;
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    assert_int_equal(cnx_key_generate(&other), 0);
    memset(&m, 0, sizeof(m));
    unlink(fx.m2.path);
    snprintf(m.out_digest, sizeof(m.out_digest), "%s", fx.d_out);
    sign_task(&fx, other, &m, 0, fx.s1, OBJ_A, fx.d_a, fx.s2, OBJ_A, NULL,
              "{\"t\":2}", NULL);
    v = run(&fx, &ALL);
    expect(v, "signature", m.path, "signed by an untrusted key");
    expect(v, "coverage", fx.m2.out_url, "no verified manifest covers it");
    cnx_verify_free(v);
    free(m.envelope);
    cnx_key_free(other);
    teardown_fx(&fx);
}

static void test_verify__swapped_input_names_the_other_object(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    char b_url[256];
    (void)state;
    o.swap = 1;
    build(&fx, &o);
    snprintf(b_url, sizeof(b_url), "%s/" OBJ_B, fx.s1);
    v = run(&fx, &ALL);
    /* stage two read A as B's bytes */
    expect(v, "input", fx.m2.path, "reads");
    expect(v, "input", fx.m2.path, "bytes of");
    expect(v, "input", fx.m2.path, b_url);
    /* and A now holds B's bytes */
    expect(v, "subject", fx.ma.out_url, "the bytes of");
    expect(v, "subject", fx.ma.out_url, fx.mb.key);
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__removed_manifest_is_a_coverage_finding(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    assert_int_equal(unlink(fx.m2.path), 0);
    v = run(&fx, &ALL);
    expect(v, "coverage", fx.m2.out_url, "no verified manifest covers it");
    /* the ledger still has it: removed from storage */
    expect(v, "ledger", "offset 2", "manifest removed");
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__unknown_commit_is_a_commit_finding(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    (void)state;
    o.commit = OTHER_COMMIT;
    build(&fx, &o);
    v = run(&fx, &ALL);
    expect(v, "commit", fx.m2.path, "is not in repository");
    expect(v, "commit", fx.m2.path, OTHER_COMMIT);
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__deleted_ledger_row_breaks_the_chain(void **state)
{
    fixture fx;
    options o = {0};
    sqlite3 *db;
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    assert_int_equal(sqlite3_open(fx.ledger, &db), SQLITE_OK);
    exec_sql(db, "DELETE FROM lineage WHERE partition = 0 AND offset = 1");
    sqlite3_close(db);
    v = run(&fx, &ALL);
    expect(v, "ledger", "lineage partition 0 offset 2", "chain broken");
    expect(v, "ledger", "lineage partition 0 offset 2", "offset 0");
    expect(v, "ledger", fx.mb.path, "not in the ledger");
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__edited_ledger_row_is_caught(void **state)
{
    fixture fx;
    options o = {0};
    sqlite3 *db;
    cnx_verify *v;
    (void)state;
    build(&fx, &o);
    assert_int_equal(sqlite3_open(fx.ledger, &db), SQLITE_OK);
    exec_sql(db, "UPDATE lineage SET verified = 0 WHERE offset = 1");
    exec_sql(db, "UPDATE outputs SET digest = 'sha256:"
                 "1111111111111111111111111111111111111111111111111111111111111111"
                 "' WHERE object LIKE '%/s2/%'");
    sqlite3_close(db);
    v = run(&fx, &ALL);
    expect(v, "ledger", "lineage partition 0 offset 1",
           "the row was edited");
    expect(v, "ledger", fx.m2.out_url, "outputs row");
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__other_parameters_name_both(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    (void)state;
    o.params_two = "{\"t\":7}";
    build(&fx, &o);
    v = run(&fx, &ALL);
    expect(v, "parameters", fx.m2.path, "{\"t\":7}");
    expect(v, "parameters", fx.m2.path, "{\"t\":2}");
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__malformed_envelopes_are_findings(void **state)
{
    static const char *bad[] = {
        "", "{", "[]", "{\"payload\":1}", "null",
        "{\"payload\":\"e30=\",\"payloadType\":\"x\",\"signatures\":[]}",
        "{\"payload\":\"e30\",\"payloadType\":\"application/vnd.in-toto+json\","
        "\"signatures\":[{\"sig\":\"AAAA\"}]}",
    };
    fixture fx;
    options o = {0};
    cnx_verify_config cfg;
    cnx_verify *v;
    size_t n;
    uint64_t seed = 7;
    (void)state;
    build(&fx, &o);
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = fx.trust;
    assert_int_equal(cnx_verify_new(&v, &cfg), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "bad-%zu", i);
        assert_int_equal(cnx_verify_add_envelope(v, name, bad[i],
                                                 strlen(bad[i])),
                         0);
    }
    /* truncations and random byte flips of a good envelope */
    size_t len = strlen(fx.m2.envelope);
    for (int i = 0; i < 200; i++) {
        char *copy = strdup(fx.m2.envelope), name[32];
        size_t cut = len;
        if (i % 2 == 0)
            cut = (size_t)(cnx_test_rand(&seed) % len);
        else
            copy[cnx_test_rand(&seed) % len] ^=
                (char)(1 + cnx_test_rand(&seed) % 255);
        snprintf(name, sizeof(name), "fuzz-%d", i);
        assert_int_equal(cnx_verify_add_envelope(v, name, copy, cut), 0);
        free(copy);
    }
    assert_int_equal(cnx_verify_add_file(v, "/nonexistent/envelope.json"), 0);
    assert_int_equal(cnx_verify_run(v), 0);
    cnx_verify_findings(v, &n);
    assert_true(n >= 8);
    expect(v, "statement", "/nonexistent/envelope.json", "cannot read");
    expect(v, "signature", "bad-1", "malformed envelope");
    cnx_verify_free(v);
    teardown_fx(&fx);
}

/* ---- a copied dataset ---------------------------------------------------- */

/* Move the fixture's layers s1 and s2 (and raw, if with_raw) to a new
 * directory dst: copied there (s1 named as given), originals removed. */
static void copy_dataset(const fixture *fx, char dst[64], const char *s1_as,
                         int with_raw)
{
    char cmd[600];
    cnx_test_tmpdir(dst);
    snprintf(cmd, sizeof(cmd),
             "cp -a '%s/s1' '%s/%s' && cp -a '%s/s2' '%s/s2' && "
             "rm -rf '%s/s1' '%s/s2'",
             fx->dir, dst, s1_as, fx->dir, dst, fx->dir, fx->dir);
    assert_int_equal(system(cmd), 0);
    if (with_raw) {
        snprintf(cmd, sizeof(cmd),
                 "cp -a '%s/raw' '%s/raw' && rm -rf "
                 "'%s/raw'",
                 fx->dir, dst, fx->dir);
        assert_int_equal(system(cmd), 0);
    }
}

static cnx_verify *run_copy(const fixture *fx, const char *copy,
                            const char *relocate_to, const char *manifest)
{
    cnx_verify_config cfg;
    cnx_verify *v;
    char url[128], old[128];
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = fx->trust;
    cfg.threads = 2;
    cfg.ledger = fx->ledger;
    cfg.repo = fx->repo;
    assert_int_equal(cnx_verify_new(&v, &cfg), 0);
    if (relocate_to != NULL) {
        snprintf(old, sizeof(old), "file://%s", fx->dir);
        assert_int_equal(cnx_verify_add_relocation(v, old, relocate_to), 0);
    }
    if (manifest != NULL) {
        assert_int_equal(cnx_verify_add_file(v, manifest), 0);
    } else {
        snprintf(url, sizeof(url), "file://%s/s1", copy);
        assert_int_equal(cnx_verify_add_layer(v, url), 0);
        snprintf(url, sizeof(url), "%s/s2", copy); /* a path will do */
        assert_int_equal(cnx_verify_add_layer(v, url), 0);
    }
    assert_int_equal(cnx_verify_run(v), 0);
    return v;
}

static void test_verify__copied_dataset_verifies_where_it_is(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    cnx_verify_stats stats;
    const cnx_verify_relocation *rel;
    size_t nrel;
    char copy[64], from[128], to[128], path[256], url[256], saved[128];
    char *json;
    (void)state;
    build(&fx, &o);
    copy_dataset(&fx, copy, "s1", 1);
    snprintf(from, sizeof(from), "file://%s", fx.dir);
    snprintf(to, sizeof(to), "file://%s", copy);

    /* every layer, the raw input and the ledger's rows, at the copy */
    v = run_copy(&fx, copy, NULL, NULL);
    expect_none(v);
    cnx_verify_get_stats(v, &stats);
    assert_int_equal(stats.manifests, 3);
    assert_int_equal(stats.objects, 4); /* A, B, the output, raw */
    rel = cnx_verify_relocations(v, &nrel);
    assert_int_equal(nrel, 1);
    assert_string_equal(rel[0].from, from);
    assert_string_equal(rel[0].to, to);
    assert_non_null(rel[0].found);
    assert_non_null(strstr(rel[0].written, fx.dir));
    assert_int_equal(cnx_verify_report_json(v, &json), 0);
    assert_non_null(strstr(json, "\"ok\":true"));
    assert_non_null(strstr(json, "\"relocations\":[{\"found\":\"file://"));
    assert_non_null(strstr(json, to));
    free(json);
    cnx_verify_free(v);

    /* one envelope of the copy, told where the dataset went */
    snprintf(path, sizeof(path), "%s/s2/%s", copy,
             fx.m2.path + strlen(fx.dir) + 4);
    v = run_copy(&fx, copy, to, path);
    expect_none(v);
    rel = cnx_verify_relocations(v, &nrel);
    assert_int_equal(nrel, 1); /* the given one moves s1's manifests too */
    assert_null(rel[0].found);
    assert_string_equal(rel[0].to, to);
    cnx_verify_free(v);
    /* ... and not told: its output is not where it says */
    v = run_copy(&fx, copy, NULL, path);
    expect(v, "subject", fx.m2.out_url, "missing from storage");
    cnx_verify_free(v);

    /* the request from the ledger, told where the dataset went: its rows'
     * envelopes are looked for at the copy */
    {
        cnx_verify_config cfg;
        cnx_verify_config_init(&cfg);
        cfg.trust_dir = fx.trust;
        cfg.ledger = fx.ledger;
        assert_int_equal(cnx_verify_new(&v, &cfg), 0);
        assert_int_equal(cnx_verify_add_relocation(v, from, copy), 0);
        assert_int_equal(cnx_verify_add_request(v, REQUEST), 0);
        assert_int_equal(cnx_verify_run(v), 0);
        expect_none(v);
        cnx_verify_free(v);
    }

    /* a manifest removed from the copy: the ledger's row names where */
    snprintf(path, sizeof(path), "%s/s2/%s", copy,
             fx.m2.path + strlen(fx.dir) + 4);
    snprintf(saved, sizeof(saved), "%s/saved-envelope", copy);
    assert_int_equal(rename(path, saved), 0);
    v = run_copy(&fx, copy, NULL, NULL);
    snprintf(url, sizeof(url), "is not stored at %s/s2/lineage/", to);
    expect(v, "ledger", "offset 2", url);
    expect(v, "coverage", "/s2/" OBJ_A, "no verified manifest covers it");
    cnx_verify_free(v);
    assert_int_equal(rename(saved, path), 0);

    /* a chunk of the copy swapped for another's bytes: named, at the copy */
    snprintf(path, sizeof(path), "%s/s1/" OBJ_B, copy);
    overwrite(path, "segments A");
    v = run_copy(&fx, copy, NULL, NULL);
    snprintf(url, sizeof(url), "%s/s1/" OBJ_B, to);
    expect(v, "subject", url, "the bytes of");
    snprintf(url, sizeof(url), "%s/s1/" OBJ_A, to);
    expect(v, "subject", "/s1/" OBJ_B, url);
    cnx_verify_free(v);
    cnx_test_rmtree(copy);
    teardown_fx(&fx);
}

/* The raw layer stayed where it was: under the copied layers' own root,
 * it is looked for at the copy, unless a longer --relocate says where it
 * is (here: where it always was). */
static void test_verify__longer_relocation_keeps_an_input_in_place(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    char copy[64], raw[128], raw_url[256];
    const cnx_verify_relocation *rel;
    size_t nrel;
    (void)state;
    build(&fx, &o);
    copy_dataset(&fx, copy, "s1", 0);
    snprintf(raw_url, sizeof(raw_url), "file://%s/raw/" RAW_OBJ, copy);
    v = run_copy(&fx, copy, NULL, NULL);
    expect(v, "input", "/s1/lineage/", "no longer in storage");
    expect(v, "input", "/s1/lineage/", raw_url);
    cnx_verify_free(v);

    snprintf(raw, sizeof(raw), "%s/raw", fx.dir);
    {
        cnx_verify_config cfg;
        char url[128];
        cnx_verify_config_init(&cfg);
        cfg.trust_dir = fx.trust;
        cfg.ledger = fx.ledger;
        assert_int_equal(cnx_verify_new(&v, &cfg), 0);
        assert_int_equal(cnx_verify_add_relocation(v, raw, raw), 0);
        snprintf(url, sizeof(url), "%s/s1", copy);
        assert_int_equal(cnx_verify_add_layer(v, url), 0);
        snprintf(url, sizeof(url), "%s/s2", copy);
        assert_int_equal(cnx_verify_add_layer(v, url), 0);
        assert_int_equal(cnx_verify_run(v), 0);
    }
    expect_none(v);
    rel = cnx_verify_relocations(v, &nrel);
    assert_int_equal(nrel, 2); /* the given one, then the layers' own */
    assert_null(rel[0].found);
    assert_non_null(rel[1].found);
    cnx_verify_free(v);
    cnx_test_rmtree(copy);
    teardown_fx(&fx);
}

static void
test_verify__layer_copied_under_another_name_is_no_move(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    cnx_verify_config cfg;
    char copy[64], url[128];
    (void)state;
    build(&fx, &o);
    copy_dataset(&fx, copy, "other", 1);
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = fx.trust;
    assert_int_equal(cnx_verify_new(&v, &cfg), 0);
    snprintf(url, sizeof(url), "file://%s/other", copy);
    assert_int_equal(cnx_verify_add_layer(v, url), 0);
    assert_int_equal(cnx_verify_run(v), 0);
    expect(v, "statement", url, "but its task writes");
    expect(v, "coverage", url, "no verified manifest covers it");
    cnx_verify_free(v);
    cnx_test_rmtree(copy);
    teardown_fx(&fx);
}

static void test_verify__missing_or_empty_layer_cannot_run(void **state)
{
    fixture fx;
    options o = {0};
    cnx_verify *v;
    cnx_verify_config cfg;
    char url[128];
    (void)state;
    build(&fx, &o);
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = fx.trust;
    assert_int_equal(cnx_verify_new(&v, &cfg), 0);
    snprintf(url, sizeof(url), "file://%s/nothing", fx.dir);
    assert_int_equal(cnx_verify_add_layer(v, url), CNX_ENOTFOUND);
    assert_non_null(strstr(cnx_error_last()->message, "does not exist"));
    /* nothing was made there */
    assert_int_not_equal(access(url + 7, F_OK), 0);
    snprintf(url, sizeof(url), "file://%s/empty", fx.dir);
    assert_int_equal(mkdir(url + 7, 0755), 0);
    assert_int_equal(cnx_verify_add_layer(v, url), CNX_ENOTFOUND);
    assert_int_equal(cnx_verify_add_layer(v, "ftp://x/y"), CNX_EINVAL);
    assert_int_equal(cnx_verify_add_relocation(v, "a", "file:///b:c"), 0);
    assert_int_equal(cnx_verify_add_relocation(v, "s3://x", "file:///b"),
                     CNX_EINVAL);
    cnx_verify_free(v);
    teardown_fx(&fx);
}

static void test_verify__cannot_run_without_keys_or_ledger(void **state)
{
    char dir[64], path[128];
    cnx_verify_config cfg;
    cnx_verify *v;
    (void)state;
    cnx_test_tmpdir(dir);
    cnx_verify_config_init(&cfg);
    cfg.trust_dir = dir;
    assert_int_equal(cnx_verify_new(&v, &cfg), CNX_ENOTFOUND);
    assert_non_null(strstr(cnx_error_last()->message, "no *.pub"));
    snprintf(path, sizeof(path), "%s/missing", dir);
    cfg.trust_dir = path;
    assert_int_equal(cnx_verify_new(&v, &cfg), CNX_ENOTFOUND);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify__clean_lineage_has_no_finding),
        cmocka_unit_test(test_verify__hundreds_of_objects_grow_the_job_list),
        cmocka_unit_test(test_verify__flipped_output_byte_is_a_subject_finding),
        cmocka_unit_test(test_verify__edited_payload_is_a_signature_finding),
        cmocka_unit_test(test_verify__untrusted_signer_is_a_signature_finding),
        cmocka_unit_test(test_verify__swapped_input_names_the_other_object),
        cmocka_unit_test(test_verify__removed_manifest_is_a_coverage_finding),
        cmocka_unit_test(test_verify__unknown_commit_is_a_commit_finding),
        cmocka_unit_test(test_verify__deleted_ledger_row_breaks_the_chain),
        cmocka_unit_test(test_verify__edited_ledger_row_is_caught),
        cmocka_unit_test(test_verify__other_parameters_name_both),
        cmocka_unit_test(test_verify__malformed_envelopes_are_findings),
        cmocka_unit_test(test_verify__copied_dataset_verifies_where_it_is),
        cmocka_unit_test(
            test_verify__longer_relocation_keeps_an_input_in_place),
        cmocka_unit_test(
            test_verify__layer_copied_under_another_name_is_no_move),
        cmocka_unit_test(test_verify__missing_or_empty_layer_cannot_run),
        cmocka_unit_test(test_verify__cannot_run_without_keys_or_ledger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
