/*
 * Lineage: DSSE PAE against the reference vector, Ed25519 sign/verify and
 * every way an envelope can be altered or malformed, key files and their
 * permissions, the provenance statement's structure and determinism,
 * RFC 3339 formatting and base64 against RFC 4648.
 */
#include "cnx_test.h"

#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/json.h"
#include "cnx/lineage.h"
#include "cnx/task.h"

#define TYPE CNX_DSSE_PAYLOAD_TYPE

static const char *const D1 =
    "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char *const D2 =
    "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
static const char *const D3 =
    "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1";
static const char *const COMMIT = "0123456789abcdef0123456789abcdef01234567";

/* ---- helpers --------------------------------------------------------- */

static cnx_key *new_key(void)
{
    cnx_key *key;
    assert_int_equal(cnx_key_generate(&key), 0);
    return key;
}

static char *sign(const cnx_key *key, const char *type, const char *body)
{
    char *env;
    assert_int_equal(cnx_dsse_sign(key, type, body, strlen(body), &env), 0);
    return env;
}

static int verify(const char *env, cnx_key *key)
{
    cnx_key *trusted[1] = {key};
    return cnx_dsse_verify(env, strlen(env), trusted, 1, NULL, NULL, NULL);
}

static void assert_message_has(const char *needle)
{
    if (strstr(cnx_error_last()->message, needle) == NULL)
        fail_msg("message '%s' does not mention '%s'",
                 cnx_error_last()->message, needle);
}

static uint8_t *b64d(const char *text, size_t *len)
{
    uint8_t *out;
    assert_int_equal(cnx_base64_decode(text, strlen(text), &out, len), 0);
    return out;
}

/* Decode the base64 string member, flip one bit of byte at, re-encode. */
static void flip_b64_member(json_t *obj, const char *key, size_t at)
{
    size_t len;
    uint8_t *raw = b64d(json_string_value(json_object_get(obj, key)), &len);
    char *text;
    assert_true(at < len);
    raw[at] ^= 0x01;
    text = cnx_base64_encode(raw, len);
    json_object_set_new(obj, key, json_string(text));
    free(text);
    free(raw);
}

static json_t *load(const char *env)
{
    json_t *js = json_loads(env, 0, NULL);
    assert_non_null(js);
    return js;
}

static char *dump(const json_t *js)
{
    char *s = json_dumps(js, JSON_SORT_KEYS | JSON_COMPACT);
    assert_non_null(s);
    return s;
}

static json_t *sig0(json_t *env)
{
    return json_array_get(json_object_get(env, "signatures"), 0);
}

/* Standard base64 to URL-safe without padding, in place. */
static void to_urlsafe_unpadded(char *s)
{
    for (char *p = s; *p; p++) {
        if (*p == '+')
            *p = '-';
        else if (*p == '/')
            *p = '_';
        else if (*p == '=')
            *p = '\0';
    }
}

/* ---- DSSE ------------------------------------------------------------ */

static void test_lineage__pae_matches_reference_vector(void **state)
{
    const char *expect = "DSSEv1 29 http://example.com/HelloWorld 11 "
                         "hello world";
    uint8_t *pae;
    size_t len;
    (void)state;
    assert_int_equal(cnx_dsse_pae("http://example.com/HelloWorld",
                                  "hello world", 11, &pae, &len),
                     0);
    assert_int_equal(len, strlen(expect));
    assert_memory_equal(pae, expect, len);
    free(pae);
    /* Empty body, and a body with a NUL: lengths count bytes. */
    assert_int_equal(cnx_dsse_pae("t", "", 0, &pae, &len), 0);
    assert_string_equal((char *)pae, "DSSEv1 1 t 0 ");
    free(pae);
    assert_int_equal(cnx_dsse_pae("t", "a\0b", 3, &pae, &len), 0);
    assert_int_equal(len, 16);
    assert_memory_equal(pae, "DSSEv1 1 t 3 a\0b", 16);
    free(pae);
}

static void
test_lineage__sign_then_verify_returns_payload_and_signer(void **state)
{
    cnx_key *key = new_key(), *other = new_key();
    cnx_key *trusted[2] = {other, key};
    const char *body = "{\"hello\":\"world\"}";
    char *env = sign(key, TYPE, body);
    char id[CNX_DIGEST_LEN];
    uint8_t *payload;
    size_t len;
    int signer;
    json_t *js = load(env);
    char *canon;
    (void)state;

    /* The envelope is canonical JSON with the documented members. */
    assert_int_equal(cnx_json_canonicalize(env, strlen(env), "env", &canon), 0);
    assert_string_equal(canon, env);
    free(canon);
    assert_string_equal(json_string_value(json_object_get(js, "payloadType")),
                        TYPE);
    cnx_key_id(key, id);
    assert_string_equal(json_string_value(json_object_get(sig0(js), "keyid")),
                        id);
    assert_int_equal(json_object_size(js), 3);

    assert_int_equal(
        cnx_dsse_verify(env, strlen(env), trusted, 2, &payload, &len, &signer),
        0);
    assert_int_equal(signer, 1);
    assert_int_equal(len, strlen(body));
    assert_memory_equal(payload, body, len);
    assert_int_equal(payload[len], '\0');
    free(payload);
    json_decref(js);
    free(env);
    cnx_key_free(key);
    cnx_key_free(other);
}

static void
test_lineage__altered_payload_signature_or_type_is_edigest(void **state)
{
    cnx_key *key = new_key();
    char *env = sign(key, TYPE, "{\"subject\":[1,2,3]}");
    char *bad;
    json_t *js;
    (void)state;
    assert_int_equal(verify(env, key), 0);

    /* Each byte of the payload, flipped in turn. */
    for (size_t at = 0; at < strlen("{\"subject\":[1,2,3]}"); at++) {
        js = load(env);
        flip_b64_member(js, "payload", at);
        bad = dump(js);
        assert_int_equal(verify(bad, key), CNX_EDIGEST);
        assert_message_has("altered");
        free(bad);
        json_decref(js);
    }
    /* One byte of the signature: first, middle and last. */
    for (size_t at = 0; at < 64; at += 31) {
        js = load(env);
        flip_b64_member(sig0(js), "sig", at);
        bad = dump(js);
        assert_int_equal(verify(bad, key), CNX_EDIGEST);
        free(bad);
        json_decref(js);
    }
    /* Another payloadType: the PAE binds it. */
    js = load(env);
    json_object_set_new(js, "payloadType", json_string("application/json"));
    bad = dump(js);
    assert_int_equal(verify(bad, key), CNX_EDIGEST);
    free(bad);
    json_decref(js);
    /* A truncated signature is a failed signature, not a crash. */
    js = load(env);
    json_object_set_new(sig0(js), "sig", json_string("AAAA"));
    bad = dump(js);
    assert_int_equal(verify(bad, key), CNX_EDIGEST);
    free(bad);
    json_decref(js);

    free(env);
    cnx_key_free(key);
}

static void test_lineage__untrusted_key_is_refused(void **state)
{
    cnx_key *key = new_key(), *stranger = new_key();
    char *env = sign(stranger, TYPE, "payload");
    cnx_key *pub;
    char dir[64], path[128];
    (void)state;
    assert_int_equal(verify(env, key), CNX_EDIGEST);
    assert_message_has("untrusted");
    /* A public key alone verifies what its pair signed, nothing else. */
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_key_write(key, dir), 0);
    snprintf(path, sizeof(path), "%s/cnx.pub", dir);
    assert_int_equal(cnx_key_load_public(&pub, path), 0);
    assert_int_equal(verify(env, pub), CNX_EDIGEST);
    free(env);
    env = sign(key, TYPE, "payload");
    assert_int_equal(verify(env, pub), 0);
    /* No trusted keys at all is a caller error. */
    assert_int_equal(
        cnx_dsse_verify(env, strlen(env), NULL, 0, NULL, NULL, NULL),
        CNX_EINVAL);
    free(env);
    cnx_key_free(pub);
    cnx_key_free(key);
    cnx_key_free(stranger);
    cnx_test_rmtree(dir);
}

static void test_lineage__keyid_is_only_a_hint(void **state)
{
    cnx_key *key = new_key(), *stranger = new_key();
    char *env = sign(key, TYPE, "x"), *s;
    char id[CNX_DIGEST_LEN];
    json_t *js, *extra;
    int signer;
    cnx_key *trusted[1] = {key};
    (void)state;
    /* A wrong keyid, and no keyid, still verify. */
    js = load(env);
    json_object_set_new(sig0(js), "keyid", json_string("someone-else"));
    s = dump(js);
    assert_int_equal(verify(s, key), 0);
    free(s);
    json_object_del(sig0(js), "keyid");
    s = dump(js);
    assert_int_equal(verify(s, key), 0);
    free(s);
    json_decref(js);
    /* An untrusted signature claiming our keyid, then the real one. */
    js = load(env);
    extra = json_deep_copy(sig0(js));
    flip_b64_member(extra, "sig", 5);
    json_array_insert_new(json_object_get(js, "signatures"), 0, extra);
    s = dump(js);
    assert_int_equal(
        cnx_dsse_verify(s, strlen(s), trusted, 1, NULL, NULL, &signer), 0);
    assert_int_equal(signer, 0);
    free(s);
    /* Only the forged one left: the message says a trusted keyid failed. */
    json_array_remove(json_object_get(js, "signatures"), 1);
    s = dump(js);
    assert_int_equal(verify(s, key), CNX_EDIGEST);
    cnx_key_id(key, id);
    assert_message_has(id);
    assert_message_has("altered");
    free(s);
    json_decref(js);
    free(env);
    cnx_key_free(key);
    cnx_key_free(stranger);
}

static void test_lineage__urlsafe_and_unpadded_base64_accepted(void **state)
{
    cnx_key *key = new_key();
    /* 0xfb 0xff 0xfe encodes as "+//+", and 13 bytes need padding. */
    const char body[] = "\xfb\xff\xfe{\"a\":1}\xfb\xef!";
    char *env, *s, *p;
    uint8_t *payload;
    size_t len;
    int signer;
    json_t *js;
    cnx_key *trusted[1] = {key};
    (void)state;
    assert_int_equal(cnx_dsse_sign(key, TYPE, body, sizeof(body) - 1, &env), 0);
    js = load(env);
    p = strdup(json_string_value(json_object_get(js, "payload")));
    assert_non_null(strchr(p, '+'));
    assert_non_null(strchr(p, '='));
    to_urlsafe_unpadded(p);
    json_object_set_new(js, "payload", json_string(p));
    free(p);
    p = strdup(json_string_value(json_object_get(sig0(js), "sig")));
    to_urlsafe_unpadded(p);
    json_object_set_new(sig0(js), "sig", json_string(p));
    free(p);
    s = dump(js);
    assert_null(strchr(s, '='));
    assert_int_equal(
        cnx_dsse_verify(s, strlen(s), trusted, 1, &payload, &len, &signer), 0);
    assert_int_equal(len, sizeof(body) - 1);
    assert_memory_equal(payload, body, len);
    free(payload);
    free(s);
    json_decref(js);
    free(env);
    cnx_key_free(key);
}

typedef struct bad_envelope {
    const char *why;
    const char *mutation; /* applied to a valid envelope, see mutate() */
    int code;
    const char *field; /* the message must mention it */
} bad_envelope;

static const bad_envelope bad_envelopes[] = {
    {"not JSON", "text", CNX_ESCHEMA, "malformed JSON"},
    {"an array", "array", CNX_ESCHEMA, "object"},
    {"missing payload", "del payload", CNX_ESCHEMA, "payload: missing"},
    {"missing payloadType", "del payloadType", CNX_ESCHEMA, "payloadType"},
    {"missing signatures", "del signatures", CNX_ESCHEMA, "signatures"},
    {"numeric payload", "num payload", CNX_ESCHEMA, "payload: must be"},
    {"non-string sig", "num sig", CNX_ESCHEMA, "signatures[0].sig"},
    {"non-string keyid", "num keyid", CNX_ESCHEMA, "signatures[0].keyid"},
    {"missing sig", "del sig", CNX_ESCHEMA, "signatures[0].sig: missing"},
    {"empty sig", "empty sig", CNX_ESCHEMA, "signatures[0].sig: empty"},
    {"bad base64 payload", "b64 payload", CNX_ESCHEMA, "payload: not base64"},
    {"bad base64 sig", "b64 sig", CNX_ESCHEMA, "signatures[0].sig: not base64"},
    {"17 signatures", "17 sigs", CNX_ESCHEMA, "signatures: 17"},
    {"no signatures", "0 sigs", CNX_ESCHEMA, "signatures: 0"},
    {"signatures not an array", "obj sigs", CNX_ESCHEMA, "signatures"},
    {"signature not an object", "str sig0", CNX_ESCHEMA, "signatures[0]"},
    {"unknown member", "extra", CNX_ESCHEMA, "unknown key 'extra'"},
    {"unknown signature member", "sig extra", CNX_ESCHEMA, "signatures[0]"},
    {"duplicate member", "dup", CNX_ESCHEMA, "duplicate"},
    {"over the size limit", "huge", CNX_ETOOBIG, "limit"},
};

static char *mutate(const char *env, const char *m)
{
    json_t *js = load(env), *sigs = json_object_get(js, "signatures");
    char *out;
    if (strcmp(m, "text") == 0) {
        json_decref(js);
        return strdup("{\"payload\": ");
    }
    if (strcmp(m, "dup") == 0) {
        size_t n = strlen(env) + 32;
        out = malloc(n);
        snprintf(out, n, "{\"payload\":\"\",%s", env + 1);
        json_decref(js);
        return out;
    }
    if (strcmp(m, "huge") == 0) {
        size_t n = CNX_JSON_MAX + 16;
        out = malloc(n + 1);
        memset(out, ' ', n);
        out[n] = '\0';
        memcpy(out, env, strlen(env));
        json_decref(js);
        return out;
    }
    if (strcmp(m, "array") == 0) {
        json_t *arr = json_array();
        json_array_append_new(arr, js);
        js = arr;
    } else if (strncmp(m, "del ", 4) == 0 && strcmp(m + 4, "sig") == 0) {
        json_object_del(sig0(js), "sig");
    } else if (strncmp(m, "del ", 4) == 0) {
        json_object_del(js, m + 4);
    } else if (strcmp(m, "num payload") == 0) {
        json_object_set_new(js, "payload", json_integer(1));
    } else if (strcmp(m, "num sig") == 0) {
        json_object_set_new(sig0(js), "sig", json_integer(1));
    } else if (strcmp(m, "num keyid") == 0) {
        json_object_set_new(sig0(js), "keyid", json_true());
    } else if (strcmp(m, "empty sig") == 0) {
        json_object_set_new(sig0(js), "sig", json_string(""));
    } else if (strcmp(m, "b64 payload") == 0) {
        json_object_set_new(js, "payload", json_string("eyJh*In0="));
    } else if (strcmp(m, "b64 sig") == 0) {
        json_object_set_new(sig0(js), "sig", json_string("A B"));
    } else if (strcmp(m, "17 sigs") == 0) {
        for (int i = 0; i < 16; i++)
            json_array_append_new(sigs, json_deep_copy(sig0(js)));
    } else if (strcmp(m, "0 sigs") == 0) {
        json_array_clear(sigs);
    } else if (strcmp(m, "obj sigs") == 0) {
        json_object_set_new(js, "signatures", json_deep_copy(sig0(js)));
    } else if (strcmp(m, "str sig0") == 0) {
        json_array_set_new(sigs, 0, json_string("sig"));
    } else if (strcmp(m, "extra") == 0) {
        json_object_set_new(js, "extra", json_null());
    } else if (strcmp(m, "sig extra") == 0) {
        json_object_set_new(sig0(js), "alg", json_string("ed25519"));
    } else {
        fail_msg("unknown mutation %s", m);
    }
    out = dump(js);
    json_decref(js);
    return out;
}

static void test_lineage__malformed_envelopes_name_the_field(void **state)
{
    cnx_key *key = new_key();
    char *env = sign(key, TYPE, "{}");
    (void)state;
    for (size_t i = 0; i < sizeof(bad_envelopes) / sizeof(bad_envelopes[0]);
         i++) {
        const bad_envelope *b = &bad_envelopes[i];
        char *s = mutate(env, b->mutation);
        uint8_t *payload = (uint8_t *)"sentinel";
        size_t len = 7;
        int signer = 5;
        cnx_key *trusted[1] = {key};
        int rc =
            cnx_dsse_verify(s, strlen(s), trusted, 1, &payload, &len, &signer);
        if (rc != b->code)
            fail_msg("%s: got %s (%s), expected %s", b->why, cnx_error_name(rc),
                     cnx_error_last()->message, cnx_error_name(b->code));
        assert_message_has(b->field);
        assert_null(strchr(cnx_error_last()->message, '\n'));
        assert_null(payload);
        assert_int_equal(len, 0);
        assert_int_equal(signer, -1);
        free(s);
    }
    /* Sixteen signatures are still accepted. */
    {
        json_t *js = load(env);
        char *s;
        for (int i = 0; i < 15; i++)
            json_array_append_new(json_object_get(js, "signatures"),
                                  json_deep_copy(sig0(js)));
        s = dump(js);
        assert_int_equal(verify(s, key), 0);
        free(s);
        json_decref(js);
    }
    /* Truncation anywhere is refused, never a crash. */
    for (size_t n = 0; n + 1 < strlen(env); n += 3)
        assert_int_equal(cnx_dsse_verify(env, n, (cnx_key *const[]){key}, 1,
                                         NULL, NULL, NULL),
                         CNX_ESCHEMA);
    free(env);
    cnx_key_free(key);
}

static void test_lineage__sign_refuses_public_keys_and_bad_types(void **state)
{
    cnx_key *key = new_key(), *pub;
    char dir[64], path[128], *env = (char *)"x";
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_key_write(key, dir), 0);
    snprintf(path, sizeof(path), "%s/cnx.pub", dir);
    assert_int_equal(cnx_key_load_public(&pub, path), 0);
    assert_int_equal(cnx_dsse_sign(pub, TYPE, "a", 1, &env), CNX_EINVAL);
    assert_null(env);
    assert_int_equal(cnx_key_write(pub, dir), CNX_EINVAL);
    assert_int_equal(cnx_dsse_sign(key, "", "a", 1, &env), CNX_EINVAL);
    assert_int_equal(cnx_dsse_sign(key, "a b", "a", 1, &env), CNX_EINVAL);
    /* An empty body is fine. */
    assert_int_equal(cnx_dsse_sign(key, TYPE, "", 0, &env), 0);
    assert_int_equal(verify(env, pub), 0);
    free(env);
    cnx_key_free(pub);
    cnx_key_free(key);
    cnx_test_rmtree(dir);
}

/* ---- key files ------------------------------------------------------- */

static void read_whole(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    size_t n;
    assert_non_null(f);
    n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

static void test_lineage__key_files_are_0600_and_reload(void **state)
{
    cnx_key *key = new_key(), *priv, *pub;
    char dir[64], sub[128], kpath[160], ppath[160], pem[4096];
    char id[CNX_DIGEST_LEN], id2[CNX_DIGEST_LEN], id3[CNX_DIGEST_LEN];
    struct stat st;
    mode_t old = umask(0);
    char *env;
    (void)state;
    cnx_test_tmpdir(dir);
    /* A missing directory is created. */
    snprintf(sub, sizeof(sub), "%s/keys", dir);
    assert_int_equal(cnx_key_write(key, sub), 0);
    umask(old);
    snprintf(kpath, sizeof(kpath), "%s/cnx.key", sub);
    snprintf(ppath, sizeof(ppath), "%s/cnx.pub", sub);
    assert_int_equal(stat(kpath, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(stat(ppath, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(stat(sub, &st), 0);
    assert_int_equal(st.st_mode & 077, 0);
    read_whole(kpath, pem, sizeof(pem));
    assert_non_null(strstr(pem, "-----BEGIN PRIVATE KEY-----"));
    read_whole(ppath, pem, sizeof(pem));
    assert_non_null(strstr(pem, "-----BEGIN PUBLIC KEY-----"));

    assert_int_equal(cnx_key_load_private(&priv, kpath), 0);
    assert_int_equal(cnx_key_load_public(&pub, ppath), 0);
    cnx_key_id(key, id);
    cnx_key_id(priv, id2);
    cnx_key_id(pub, id3);
    assert_true(cnx_digest_valid(id));
    assert_string_equal(id, id2);
    assert_string_equal(id, id3);
    env = sign(priv, TYPE, "reloaded");
    assert_int_equal(verify(env, pub), 0);
    assert_int_equal(verify(env, key), 0);
    free(env);
    cnx_key_free(priv);
    cnx_key_free(pub);
    cnx_key_free(key);
    cnx_test_rmtree(dir);
}

static void test_lineage__group_or_world_readable_key_is_refused(void **state)
{
    cnx_key *key = new_key(), *loaded = (cnx_key *)1;
    char dir[64], kpath[128];
    static const mode_t modes[] = {0644, 0640, 0604, 0601, 0610};
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_key_write(key, dir), 0);
    snprintf(kpath, sizeof(kpath), "%s/cnx.key", dir);
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        assert_int_equal(chmod(kpath, modes[i]), 0);
        assert_int_equal(cnx_key_load_private(&loaded, kpath), CNX_EINVAL);
        assert_null(loaded);
        assert_message_has("chmod 600");
    }
    /* 0400 is as private as 0600. */
    assert_int_equal(chmod(kpath, 0400), 0);
    assert_int_equal(cnx_key_load_private(&loaded, kpath), 0);
    cnx_key_free(loaded);
    cnx_key_free(key);
    cnx_test_rmtree(dir);
}

static void test_lineage__keygen_refuses_to_overwrite(void **state)
{
    cnx_key *a = new_key(), *b = new_key();
    char dir[64], kpath[128], ppath[128], before[4096], after[4096];
    char pub_before[4096], pub_after[4096];
    FILE *f;
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(kpath, sizeof(kpath), "%s/cnx.key", dir);
    snprintf(ppath, sizeof(ppath), "%s/cnx.pub", dir);
    assert_int_equal(cnx_key_write(a, dir), 0);
    read_whole(kpath, before, sizeof(before));
    read_whole(ppath, pub_before, sizeof(pub_before));
    assert_int_equal(cnx_key_write(b, dir), CNX_EIMMUTABLE);
    assert_message_has("refusing to overwrite");
    read_whole(kpath, after, sizeof(after));
    read_whole(ppath, pub_after, sizeof(pub_after));
    assert_string_equal(before, after);
    assert_string_equal(pub_before, pub_after);
    /* A lone cnx.pub is protected too, and no cnx.key appears. */
    assert_int_equal(unlink(kpath), 0);
    assert_int_equal(cnx_key_write(b, dir), CNX_EIMMUTABLE);
    assert_int_equal(access(kpath, F_OK), -1);
    /* A dangling link at cnx.key is not followed. */
    assert_int_equal(unlink(ppath), 0);
    assert_int_equal(symlink("/tmp/cnx-test-nowhere", kpath), 0);
    assert_int_equal(cnx_key_write(b, dir), CNX_EIMMUTABLE);
    assert_int_equal(access("/tmp/cnx-test-nowhere", F_OK), -1);
    assert_int_equal(unlink(kpath), 0);
    /* A file where the directory should be. */
    snprintf(kpath, sizeof(kpath), "%s/plain", dir);
    f = fopen(kpath, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(cnx_key_write(b, kpath), CNX_EINVAL);
    cnx_key_free(a);
    cnx_key_free(b);
    cnx_test_rmtree(dir);
}

static void test_lineage__bad_key_files_are_refused(void **state)
{
    char dir[64], path[128];
    cnx_key *key;
    EVP_PKEY *ec;
    FILE *f;
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(path, sizeof(path), "%s/missing.key", dir);
    assert_int_equal(cnx_key_load_private(&key, path), CNX_ENOTFOUND);
    assert_int_equal(cnx_key_load_public(&key, path), CNX_ENOTFOUND);
    /* Not PEM. */
    snprintf(path, sizeof(path), "%s/garbage.key", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("not a key\n", f);
    fclose(f);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(cnx_key_load_private(&key, path), CNX_ECORRUPT);
    assert_int_equal(cnx_key_load_public(&key, path), CNX_ECORRUPT);
    /* Empty. */
    f = fopen(path, "w");
    fclose(f);
    assert_int_equal(cnx_key_load_private(&key, path), CNX_ECORRUPT);
    /* A directory. */
    assert_int_equal(cnx_key_load_public(&key, dir), CNX_EINVAL);
    /* A P-256 key is valid PEM but not a lineage key. */
    ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
    assert_non_null(ec);
    snprintf(path, sizeof(path), "%s/ec.pub", dir);
    f = fopen(path, "w");
    assert_int_equal(PEM_write_PUBKEY(f, ec), 1);
    fclose(f);
    assert_int_equal(cnx_key_load_public(&key, path), CNX_EUNSUPPORTED);
    assert_message_has("Ed25519");
    EVP_PKEY_free(ec);
    cnx_test_rmtree(dir);
}

/* ---- provenance ------------------------------------------------------ */

static const char *const TASK =
    "{\"halo\":2,\"kernel_version\":3,\"parameters\":{\"threshold\":0.5},"
    "\"stage\":\"segment\"}";

static const cnx_artifact OUTPUTS[] = {
    {"file:///data/seg/v3/8_8_8/0-64_0-64_0-64", NULL},
    {"file:///data/seg/v3/8_8_8/64-128_0-64_0-64", NULL},
};
static const cnx_artifact INPUTS[] = {
    {"file:///data/boundary/8_8_8/0-128_0-64_0-64", NULL},
};

static void sample(cnx_provenance *p, cnx_artifact out[2], cnx_artifact in[1])
{
    memcpy(out, OUTPUTS, sizeof(OUTPUTS));
    memcpy(in, INPUTS, sizeof(INPUTS));
    out[0].digest = D1;
    out[1].digest = D2;
    in[0].digest = D3;
    memset(p, 0, sizeof(*p));
    p->task_json = TASK;
    p->task_key = D3;
    p->stage = "segment";
    p->kernel_version = 3;
    p->outputs = out;
    p->noutputs = 2;
    p->inputs = in;
    p->ninputs = 1;
    p->git_commit = COMMIT;
    p->git_dirty = 0;
    p->container_digest = D2;
    p->worker = "segment-7f9c";
    p->attempt = 2;
    p->started = 1795341600.25; /* 2026-11-22T10:00:00.250Z */
    p->finished = 1795341612.5;
}

/* Member at a dotted path ("subject.0.digest.sha256"); digits index. */
static json_t *path_get(json_t *js, const char *path)
{
    char part[64];
    const char *p = path;
    while (js != NULL && *p != '\0') {
        const char *dot = strchr(p, '.');
        size_t n = dot != NULL ? (size_t)(dot - p) : strlen(p);
        assert_true(n < sizeof(part));
        memcpy(part, p, n);
        part[n] = '\0';
        if (part[0] >= '0' && part[0] <= '9')
            js = json_array_get(js, (size_t)strtoul(part, NULL, 10));
        else
            js = json_object_get(js, part);
        p += n + (dot != NULL);
    }
    if (js == NULL)
        fail_msg("statement has no %s", path);
    return js;
}

static void assert_str_at(json_t *js, const char *path, const char *want)
{
    json_t *v = path_get(js, path);
    if (!json_is_string(v) || strcmp(json_string_value(v), want) != 0)
        fail_msg("%s: got %s, expected %s", path,
                 json_is_string(v) ? json_string_value(v) : "(not a string)",
                 want);
}

static void test_lineage__statement_has_the_documented_structure(void **state)
{
    cnx_provenance p;
    cnx_artifact out[2], in[1];
    char *text, *canon;
    json_t *st, *deps, *task;
    (void)state;
    sample(&p, out, in);
    assert_int_equal(cnx_provenance_statement(&p, &text), 0);
    assert_int_equal(cnx_json_canonicalize(text, strlen(text), "st", &canon),
                     0);
    assert_string_equal(canon, text);
    free(canon);
    st = load(text);
    assert_int_equal(json_object_size(st), 4);
    assert_str_at(st, "_type", "https://in-toto.io/Statement/v1");
    assert_str_at(st, "predicateType", "https://slsa.dev/provenance/v1");
    assert_int_equal(json_array_size(path_get(st, "subject")), 2);
    assert_str_at(st, "subject.0.name", OUTPUTS[0].name);
    assert_str_at(st, "subject.0.digest.sha256", D1 + 7);
    assert_str_at(st, "subject.1.name", OUTPUTS[1].name);
    assert_str_at(st, "subject.1.digest.sha256", D2 + 7);
    assert_int_equal(json_object_size(path_get(st, "subject.0.digest")), 1);

    assert_int_equal(json_object_size(path_get(st, "predicate")), 2);
    assert_str_at(st, "predicate.buildDefinition.buildType", CNX_BUILD_TYPE);
    task = path_get(st, "predicate.buildDefinition.externalParameters.task");
    canon = json_dumps(task,
                       JSON_SORT_KEYS | JSON_COMPACT | JSON_REAL_PRECISION(17));
    assert_string_equal(canon, TASK);
    free(canon);
    assert_str_at(st, "predicate.buildDefinition.externalParameters.taskKey",
                  D3);
    assert_str_at(st, "predicate.buildDefinition.externalParameters.stage",
                  "segment");
    assert_int_equal(json_integer_value(path_get(
                         st, "predicate.buildDefinition.externalParameters."
                             "kernelVersion")),
                     3);
    assert_int_equal(json_object_size(path_get(
                         st, "predicate.buildDefinition.externalParameters")),
                     4);
    deps = path_get(st, "predicate.buildDefinition.resolvedDependencies");
    assert_int_equal(json_array_size(deps), 3);
    assert_str_at(deps, "0.name", INPUTS[0].name);
    assert_str_at(deps, "0.digest.sha256", D3 + 7);
    assert_str_at(deps, "1.name", "git+cnx");
    assert_str_at(deps, "1.digest.gitCommit", COMMIT);
    assert_true(json_is_false(path_get(deps, "1.annotations.dirty")));
    assert_str_at(deps, "2.name", "container");
    assert_str_at(deps, "2.digest.sha256", D2 + 7);

    assert_str_at(st, "predicate.runDetails.builder.id",
                  "cnx-worker:segment-7f9c");
    {
        char inv[128];
        snprintf(inv, sizeof(inv), "%s/2", D3);
        assert_str_at(st, "predicate.runDetails.metadata.invocationId", inv);
    }
    assert_str_at(st, "predicate.runDetails.metadata.startedOn",
                  "2026-11-22T10:00:00.250Z");
    assert_str_at(st, "predicate.runDetails.metadata.finishedOn",
                  "2026-11-22T10:00:12.500Z");
    assert_true(json_is_array(path_get(st, "predicate.runDetails.byproducts")));
    assert_int_equal(
        json_array_size(path_get(st, "predicate.runDetails.byproducts")), 0);
    json_decref(st);
    free(text);
}

static void test_lineage__statement_is_deterministic(void **state)
{
    cnx_provenance p;
    cnx_artifact out[2], in[1];
    char *a, *b, *c;
    (void)state;
    sample(&p, out, in);
    assert_int_equal(cnx_provenance_statement(&p, &a), 0);
    assert_int_equal(cnx_provenance_statement(&p, &b), 0);
    assert_string_equal(a, b);
    free(b);
    /* The same task written with other spacing and key order. */
    p.task_json = "{ \"stage\" : \"segment\", \"parameters\": {\"threshold\":"
                  " 5e-1}, \"kernel_version\": 3, \"halo\": 2 }";
    assert_int_equal(cnx_provenance_statement(&p, &b), 0);
    assert_string_equal(a, b);
    free(b);
    /* Any difference shows: another attempt, another order of outputs. */
    p.attempt = 3;
    assert_int_equal(cnx_provenance_statement(&p, &b), 0);
    assert_string_not_equal(a, b);
    free(b);
    p.attempt = 2;
    out[0].digest = D2;
    out[1].digest = D1;
    assert_int_equal(cnx_provenance_statement(&p, &c), 0);
    assert_string_not_equal(a, c);
    free(c);
    free(a);
}

static void test_lineage__statement_optional_parts(void **state)
{
    cnx_provenance p;
    cnx_artifact out[2], in[1];
    char *text;
    json_t *st, *deps, *git;
    (void)state;
    sample(&p, out, in);
    p.container_digest = NULL;
    p.git_commit = "";
    p.git_dirty = 7;
    p.inputs = NULL;
    p.ninputs = 0;
    assert_int_equal(cnx_provenance_statement(&p, &text), 0);
    st = load(text);
    deps = path_get(st, "predicate.buildDefinition.resolvedDependencies");
    assert_int_equal(json_array_size(deps), 1);
    git = json_array_get(deps, 0);
    assert_str_at(git, "name", "git+cnx");
    assert_null(json_object_get(git, "digest"));
    assert_true(json_is_true(path_get(git, "annotations.dirty")));
    json_decref(st);
    free(text);
    p.container_digest = "";
    p.git_commit = NULL;
    assert_int_equal(cnx_provenance_statement(&p, &text), 0);
    free(text);
}

typedef struct bad_prov {
    const char *field;
    void (*spoil)(cnx_provenance *p, cnx_artifact *out, cnx_artifact *in);
} bad_prov;

#define SPOIL(name, body)                                                      \
    static void name(cnx_provenance *p, cnx_artifact *out, cnx_artifact *in)   \
    {                                                                          \
        (void)p;                                                               \
        (void)out;                                                             \
        (void)in;                                                              \
        body;                                                                  \
    }
SPOIL(spoil_out_digest, out[1].digest = "sha256:ABC")
SPOIL(spoil_in_digest, in[0].digest = "md5:d41d8cd98f00b204e9800998ecf8427e")
SPOIL(spoil_no_outputs, p->noutputs = 0)
SPOIL(spoil_attempt, p->attempt = 0)
SPOIL(spoil_order, p->finished = p->started - 1)
SPOIL(spoil_nan, p->started = NAN)
SPOIL(spoil_negative, p->started = -1)
SPOIL(spoil_commit, p->git_commit = "0123abc")
SPOIL(spoil_commit_case,
      p->git_commit = "0123456789ABCDEF0123456789abcdef01234567")
SPOIL(spoil_container, p->container_digest = "sha256:00")
SPOIL(spoil_task_key, p->task_key = "task-1")
SPOIL(spoil_task_json, p->task_json = "{\"stage\":")
SPOIL(spoil_task_array, p->task_json = "[1]")
SPOIL(spoil_stage, p->stage = "mesh")
SPOIL(spoil_stage_chars, p->stage = "Segment")
SPOIL(spoil_kernel, p->kernel_version = 4)
SPOIL(spoil_kernel_zero, p->kernel_version = 0)
SPOIL(spoil_worker, p->worker = "")
SPOIL(spoil_worker_ctl, p->worker = "a\nb")
SPOIL(spoil_name_utf8, out[0].name = "caf\xc3")
SPOIL(spoil_name_null, in[0].name = NULL)

static const bad_prov bad_provs[] = {
    {"outputs[1].digest", spoil_out_digest},
    {"inputs[0].digest", spoil_in_digest},
    {"outputs", spoil_no_outputs},
    {"attempt", spoil_attempt},
    {"finished", spoil_order},
    {"started", spoil_nan},
    {"started", spoil_negative},
    {"git_commit", spoil_commit},
    {"git_commit", spoil_commit_case},
    {"container_digest", spoil_container},
    {"task_key", spoil_task_key},
    {"task_json", spoil_task_json},
    {"task_json", spoil_task_array},
    {"stage", spoil_stage},
    {"stage", spoil_stage_chars},
    {"kernel_version", spoil_kernel},
    {"kernel_version", spoil_kernel_zero},
    {"worker", spoil_worker},
    {"worker", spoil_worker_ctl},
    {"outputs[0].name", spoil_name_utf8},
    {"inputs[0].name", spoil_name_null},
};

static void test_lineage__statement_inputs_are_checked(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_provs) / sizeof(bad_provs[0]); i++) {
        cnx_provenance p;
        cnx_artifact out[2], in[1];
        char *text = (char *)"x";
        int rc;
        sample(&p, out, in);
        bad_provs[i].spoil(&p, out, in);
        rc = cnx_provenance_statement(&p, &text);
        if (rc != CNX_EINVAL)
            fail_msg("case %zu (%s): got %s", i, bad_provs[i].field,
                     cnx_error_name(rc));
        assert_null(text);
        assert_message_has(bad_provs[i].field);
        assert_non_null(strstr(cnx_error_last()->message, "provenance"));
    }
}

static void test_lineage__signed_statement_verifies(void **state)
{
    cnx_provenance p;
    cnx_artifact out[2], in[1];
    cnx_key *key = new_key();
    char *text, *env;
    uint8_t *payload;
    size_t len;
    cnx_key *trusted[1] = {key};
    (void)state;
    sample(&p, out, in);
    assert_int_equal(cnx_provenance_statement(&p, &text), 0);
    env = sign(key, TYPE, text);
    assert_int_equal(
        cnx_dsse_verify(env, strlen(env), trusted, 1, &payload, &len, NULL), 0);
    assert_string_equal((char *)payload, text);
    free(payload);
    free(env);
    free(text);
    cnx_key_free(key);
}

/* ---- RFC 3339 -------------------------------------------------------- */

static void test_lineage__rfc3339_edge_cases(void **state)
{
    static const struct {
        double t;
        const char *want;
    } cases[] = {
        {0.0, "1970-01-01T00:00:00.000Z"},
        {0.0004, "1970-01-01T00:00:00.000Z"},
        {0.0005, "1970-01-01T00:00:00.001Z"},
        {0.999, "1970-01-01T00:00:00.999Z"},
        {59.9996, "1970-01-01T00:01:00.000Z"},     /* rounds over a minute */
        {86399.9999, "1970-01-02T00:00:00.000Z"},  /* ... and a day */
        {951782400.0, "2000-02-29T00:00:00.000Z"}, /* leap day, 400 rule */
        {946684799.999, "1999-12-31T23:59:59.999Z"},
        {1709164800.5, "2024-02-29T00:00:00.500Z"},
        {1700000000.123, "2023-11-14T22:13:20.123Z"},
        {1795341600.25, "2026-11-22T10:00:00.250Z"},
        {4102444800.0, "2100-01-01T00:00:00.000Z"}, /* 2100: not leap */
        {4107456000.0, "2100-02-28T00:00:00.000Z"},
        {253402300799.999, "9999-12-31T23:59:59.999Z"},
        {1e300, "9999-12-31T23:59:59.999Z"},
        {INFINITY, "9999-12-31T23:59:59.999Z"},
        {-1.0, "1970-01-01T00:00:00.000Z"},
        {NAN, "1970-01-01T00:00:00.000Z"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[32];
        memset(out, 'x', sizeof(out));
        cnx_rfc3339_format(cases[i].t, out);
        if (strcmp(out, cases[i].want) != 0)
            fail_msg("%.6f: got %s, expected %s", cases[i].t, out,
                     cases[i].want);
    }
    /* Whole seconds round-trip through the parser. */
    for (int64_t t = 0; t < 4102444800; t += 86400 * 37 + 3607) {
        char out[32];
        int64_t back;
        cnx_rfc3339_format((double)t, out);
        assert_int_equal(cnx_rfc3339_parse(out, &back), 0);
        assert_int_equal(back, t);
    }
}

/* ---- base64 ---------------------------------------------------------- */

static void test_lineage__base64_rfc4648_vectors(void **state)
{
    static const char *const vec[][2] = {
        {"", ""},
        {"f", "Zg=="},
        {"fo", "Zm8="},
        {"foo", "Zm9v"},
        {"foob", "Zm9vYg=="},
        {"fooba", "Zm9vYmE="},
        {"foobar", "Zm9vYmFy"},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
        char *enc = cnx_base64_encode(vec[i][0], strlen(vec[i][0]));
        char unpadded[16];
        uint8_t *dec;
        size_t len;
        assert_string_equal(enc, vec[i][1]);
        free(enc);
        dec = b64d(vec[i][1], &len);
        assert_int_equal(len, strlen(vec[i][0]));
        assert_memory_equal(dec, vec[i][0], len);
        free(dec);
        snprintf(unpadded, sizeof(unpadded), "%s", vec[i][1]);
        to_urlsafe_unpadded(unpadded);
        dec = b64d(unpadded, &len);
        assert_int_equal(len, strlen(vec[i][0]));
        assert_memory_equal(dec, vec[i][0], len);
        free(dec);
    }
}

static void test_lineage__base64_alphabets_and_round_trips(void **state)
{
    const uint8_t hi[] = {0xfb, 0xff, 0xbf};
    uint8_t buf[300], *dec;
    uint64_t rng = 7;
    char *enc;
    size_t len;
    (void)state;
    enc = cnx_base64_encode(hi, sizeof(hi));
    assert_string_equal(enc, "+/+/");
    free(enc);
    dec = b64d("-_-_", &len);
    assert_int_equal(len, 3);
    assert_memory_equal(dec, hi, 3);
    free(dec);
    for (size_t n = 0; n <= sizeof(buf); n++) {
        for (size_t i = 0; i < n; i++)
            buf[i] = (uint8_t)cnx_test_rand(&rng);
        enc = cnx_base64_encode(buf, n);
        assert_int_equal(strlen(enc), (n + 2) / 3 * 4);
        dec = b64d(enc, &len);
        assert_int_equal(len, n);
        assert_memory_equal(dec, buf, n);
        free(dec);
        to_urlsafe_unpadded(enc);
        dec = b64d(enc, &len);
        assert_int_equal(len, n);
        assert_memory_equal(dec, buf, n);
        free(dec);
        free(enc);
    }
}

static void test_lineage__base64_rejects_malformed_text(void **state)
{
    static const char *const bad[] = {
        "Z",        /* a lone character is no byte */
        "Zm9vY",    /* 5 characters */
        "Zg=",      /* padded but not a multiple of 4 */
        "Zg===",    /* three pads */
        "=Zg=",     /* pad at the start */
        "Z=g=",     /* pad in the middle */
        "Zm9v!A==", /* not in either alphabet */
        "Zm9 v",    /* whitespace */
        "Zm9v\n",   /* newline */
        "Zh==",     /* non-zero trailing bits */
        "Zm9=",     /* non-zero trailing bits */
        "Zm8.",
    };
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t *out = (uint8_t *)"x";
        size_t len = 9;
        int rc = cnx_base64_decode(bad[i], strlen(bad[i]), &out, &len);
        if (rc != CNX_EINVAL)
            fail_msg("'%s' decoded (rc %d)", bad[i], rc);
        assert_null(out);
        assert_int_equal(len, 0);
        assert_null(strchr(cnx_error_last()->message, '\n'));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lineage__pae_matches_reference_vector),
        cmocka_unit_test(
            test_lineage__sign_then_verify_returns_payload_and_signer),
        cmocka_unit_test(
            test_lineage__altered_payload_signature_or_type_is_edigest),
        cmocka_unit_test(test_lineage__untrusted_key_is_refused),
        cmocka_unit_test(test_lineage__keyid_is_only_a_hint),
        cmocka_unit_test(test_lineage__urlsafe_and_unpadded_base64_accepted),
        cmocka_unit_test(test_lineage__malformed_envelopes_name_the_field),
        cmocka_unit_test(test_lineage__sign_refuses_public_keys_and_bad_types),
        cmocka_unit_test(test_lineage__key_files_are_0600_and_reload),
        cmocka_unit_test(test_lineage__group_or_world_readable_key_is_refused),
        cmocka_unit_test(test_lineage__keygen_refuses_to_overwrite),
        cmocka_unit_test(test_lineage__bad_key_files_are_refused),
        cmocka_unit_test(test_lineage__statement_has_the_documented_structure),
        cmocka_unit_test(test_lineage__statement_is_deterministic),
        cmocka_unit_test(test_lineage__statement_optional_parts),
        cmocka_unit_test(test_lineage__statement_inputs_are_checked),
        cmocka_unit_test(test_lineage__signed_statement_verifies),
        cmocka_unit_test(test_lineage__rfc3339_edge_cases),
        cmocka_unit_test(test_lineage__base64_rfc4648_vectors),
        cmocka_unit_test(test_lineage__base64_alphabets_and_round_trips),
        cmocka_unit_test(test_lineage__base64_rejects_malformed_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
