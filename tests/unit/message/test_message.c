/*
 * Messages: the schema-to-topic rule, the signed type, detached signatures
 * checked against OpenSSL over a PAE built here by hand from the spec
 * (docs/security.md), every way a signed message can fail (unsigned,
 * untrusted key, altered body, moved to another topic or key), and the
 * event and dead-letter documents against hand-written expected text.
 */
#include "cnx_test.h"

#include <jansson.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "cnx/controller.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/message.h"

static cnx_key *new_key(void)
{
    cnx_key *key;
    assert_int_equal(cnx_key_generate(&key), 0);
    return key;
}

/* A message as the consumer would hand it over, with our headers. */
static cnx_message message(const char *topic, const char *key,
                           const char *body, cnx_kafka_header *h, size_t nh)
{
    cnx_message m;
    memset(&m, 0, sizeof(m));
    m.topic = topic;
    m.key = key;
    m.key_len = key ? strlen(key) : 0;
    m.value = body;
    m.len = strlen(body);
    m.headers = h;
    m.nheaders = nh;
    return m;
}

static void sign_into(const cnx_key *k, const char *topic, const char *key,
                      const char *body, char sig[CNX_DSSE_SIG_MAX],
                      char keyid[CNX_DIGEST_LEN], cnx_kafka_header h[2])
{
    char type[CNX_MSG_TYPE_MAX + 1];
    assert_int_equal(cnx_msg_signed_type(type, topic, key,
                                         key ? strlen(key) : 0), 0);
    assert_int_equal(cnx_dsse_sign_detached(k, type, body, strlen(body), sig),
                     0);
    cnx_key_id(k, keyid);
    h[0].name = CNX_MSG_HEADER_SIG;
    h[0].value = sig;
    h[1].name = CNX_MSG_HEADER_KEYID;
    h[1].value = keyid;
}

static void test_message__kinds_belong_to_their_topics(void **state)
{
    cnx_msg_kind k;
    (void)state;
    assert_int_equal(cnx_msg_kind_of("cnx.events", "cnx.event/1", &k), 0);
    assert_int_equal(k, CNX_MSG_EVENT);
    assert_int_equal(cnx_msg_kind_signer(k), 0);
    assert_int_equal(cnx_msg_kind_of("cnx.events", "cnx.control/1", &k), 0);
    assert_int_equal(cnx_msg_kind_signer(k), 1);
    assert_int_equal(cnx_msg_kind_of("cnx.requests", "cnx.request-state/1",
                                     &k), 0);
    assert_int_equal(cnx_msg_kind_signer(k), 1);
    assert_int_equal(cnx_msg_kind_of("cnx.requests", "cnx.request/1", &k), 0);
    assert_int_equal(cnx_msg_kind_signer(k), -1);
    assert_int_equal(cnx_msg_kind_of("cnx.dlq", "cnx.dlq/1", &k), 0);
    assert_int_equal(cnx_msg_kind_signer(k), 0);
    /* A decision on the requests topic, an event on the dlq: refused. */
    assert_int_equal(cnx_msg_kind_of("cnx.requests", "cnx.control/1", &k),
                     CNX_ESCHEMA);
    assert_non_null(strstr(cnx_error_last()->message, "does not belong"));
    assert_int_equal(cnx_msg_kind_of("cnx.dlq", "cnx.event/1", &k),
                     CNX_ESCHEMA);
}

static void test_message__signed_type_names_topic_and_key(void **state)
{
    char type[CNX_MSG_TYPE_MAX + 1], longkey[300];
    (void)state;
    assert_int_equal(cnx_msg_signed_type(type, "cnx.events", "k1", 2), 0);
    assert_string_equal(type,
                        "application/vnd.cnx.message+json;topic=cnx.events;"
                        "key=k1");
    assert_int_equal(cnx_msg_signed_type(type, "cnx.dlq", NULL, 0), 0);
    assert_string_equal(type,
                        "application/vnd.cnx.message+json;topic=cnx.dlq;key=");
    assert_int_equal(cnx_msg_signed_type(type, "cnx.events", "a b", 3),
                     CNX_EINVAL);
    memset(longkey, 'k', sizeof(longkey));
    assert_int_equal(cnx_msg_signed_type(type, "cnx.events", longkey,
                                         sizeof(longkey)),
                     CNX_EINVAL);
}

/* The signature is Ed25519 over "DSSEv1 <len> <type> <len> <body>",
 * checked by OpenSSL directly over a PAE built here. */
static void test_message__signature_is_ed25519_over_the_pae(void **state)
{
    cnx_key *k = new_key();
    const char *body = "{\"schema\":\"cnx.event/1\"}";
    const char *type =
        "application/vnd.cnx.message+json;topic=cnx.events;key=tk";
    char sig[CNX_DSSE_SIG_MAX], keyid[CNX_DIGEST_LEN], pae[512];
    char dir[64], path[128];
    cnx_kafka_header h[2];
    uint8_t *raw = NULL;
    size_t raw_len = 0;
    EVP_PKEY *pkey;
    EVP_MD_CTX *md;
    FILE *f;
    int n;
    (void)state;

    sign_into(k, "cnx.events", "tk", body, sig, keyid, h);
    n = snprintf(pae, sizeof(pae), "DSSEv1 %zu %s %zu %s", strlen(type),
                 type, strlen(body), body);
    assert_int_equal(cnx_base64_decode(sig, strlen(sig), &raw, &raw_len), 0);
    assert_int_equal(raw_len, 64);
    cnx_test_tmpdir(dir);
    snprintf(path, sizeof(path), "%s/k", dir);
    assert_int_equal(cnx_key_write(k, path), 0);
    snprintf(path, sizeof(path), "%s/k/cnx.pub", dir);
    f = fopen(path, "r");
    assert_non_null(f);
    pkey = PEM_read_PUBKEY(f, NULL, NULL, NULL);
    fclose(f);
    assert_non_null(pkey);
    md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, NULL, NULL, pkey), 1);
    assert_int_equal(EVP_DigestVerify(md, raw, raw_len, (uint8_t *)pae,
                                      (size_t)n), 1);
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pkey);
    free(raw);
    cnx_key_free(k);
}

static void test_message__verify_finds_every_failure(void **state)
{
    cnx_key *worker = new_key(), *other = new_key();
    cnx_key *trusted[1] = {worker};
    const char *body = "{\"schema\":\"cnx.event/1\",\"task_key\":\"t1\"}";
    char sig[CNX_DSSE_SIG_MAX], keyid[CNX_DIGEST_LEN];
    cnx_kafka_header h[2];
    cnx_message m;
    int signer = -2;
    (void)state;

    sign_into(worker, "cnx.events", "t1", body, sig, keyid, h);
    m = message("cnx.events", "t1", body, h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, &signer), 0);
    assert_int_equal(signer, 0);

    /* Moved to another key (task), another topic, or altered. */
    m = message("cnx.events", "t2", body, h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, &signer), CNX_EDIGEST);
    assert_int_equal(signer, -1);
    assert_non_null(strstr(cnx_error_last()->message, "does not verify"));
    m = message("cnx.dlq", "t1", body, h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);
    m = message("cnx.events", "t1",
                "{\"schema\":\"cnx.event/1\",\"task_key\":\"t3\"}", h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);

    /* Unsigned. */
    m = message("cnx.events", "t1", body, NULL, 0);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "unsigned"));

    /* Signed by a key that is not trusted: named as such. */
    sign_into(other, "cnx.events", "t1", body, sig, keyid, h);
    m = message("cnx.events", "t1", body, h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "not trusted"));
    /* ... and without its key id: it simply does not verify. */
    m = message("cnx.events", "t1", body, h, 1);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "does not verify"));
    /* A garbled signature header. */
    h[0].value = "!!not base64!!";
    m = message("cnx.events", "t1", body, h, 2);
    assert_int_equal(cnx_msg_verify(&m, trusted, 1, NULL), CNX_EDIGEST);
    cnx_key_free(worker);
    cnx_key_free(other);
}

static void test_message__event_is_canonical_and_complete(void **state)
{
    cnx_error err;
    cnx_event ev;
    char *text = NULL;
    (void)state;

    memset(&ev, 0, sizeof(ev));
    ev.type = "started";
    ev.stage = "downsample";
    ev.task_key = "sha256:ab";
    ev.request = "r1";
    ev.attempt = 2;
    ev.worker = "w1";
    ev.run = "0123456789abcdef";
    ev.time = "2026-01-01T00:00:00.000Z";
    ev.roi = cnx_box_make(0, 0, 0, 64, 64, 32);
    assert_int_equal(cnx_event_build(&ev, &text), 0);
    assert_string_equal(
        text, "{\"attempt\":2,\"request\":\"r1\",\"roi\":{\"max\":[64,64,32],"
              "\"min\":[0,0,0]},\"run\":\"0123456789abcdef\",\"schema\":"
              "\"cnx.event/1\",\"stage\":\"downsample\",\"task_key\":"
              "\"sha256:ab\",\"time\":\"2026-01-01T00:00:00.000Z\",\"type\":"
              "\"started\",\"worker\":\"w1\"}");
    free(text);

    memset(&err, 0, sizeof(err));
    err.code = CNX_EIO;
    err.retriable = 1;
    snprintf(err.message, sizeof(err.message), "disk gone");
    ev.type = "failed";
    ev.run = NULL;
    ev.has_io = 1;
    ev.total_s = 1.5;
    ev.outputs = 3;
    ev.error = &err;
    ev.manifest = NULL;
    assert_int_equal(cnx_event_build(&ev, &text), 0);
    assert_non_null(strstr(text, "\"error\":{\"code\":\"EIO\",\"message\":"
                                 "\"disk gone\",\"retriable\":true}"));
    assert_non_null(strstr(text, "\"outputs\":3"));
    assert_non_null(strstr(text, "\"total_s\":1.5"));
    assert_null(strstr(text, "\"run\""));
    free(text);
}

static void test_message__dead_letter_keeps_the_replay_bundle(void **state)
{
    cnx_error err;
    cnx_dead_letter dl;
    cnx_message src;
    json_t *doc;
    char *text = NULL;
    (void)state;

    memset(&err, 0, sizeof(err));
    err.code = CNX_ESCHEMA;
    snprintf(err.message, sizeof(err.message), "task: roi: bad");
    src = message("cnx.tasks.downsample", NULL, "{\"x\":1", NULL, 0);
    src.partition = 3;
    src.offset = 17;
    memset(&dl, 0, sizeof(dl));
    dl.error = &err;
    dl.stage = "downsample";
    dl.worker = "w1";
    dl.time = "2026-01-01T00:00:00.000Z";
    dl.source = &src;
    dl.attempts = 0;
    assert_int_equal(cnx_dead_letter_build(&dl, &text), 0);
    doc = json_loads(text, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "reason")),
                        "task: roi: bad");
    assert_string_equal(json_string_value(json_object_get(doc, "message")),
                        "{\"x\":1");
    assert_string_equal(
        json_string_value(json_object_get(doc, "message_base64")),
        "eyJ4Ijox");
    assert_int_equal(json_integer_value(json_object_get(
                         json_object_get(doc, "source"), "offset")),
                     17);
    json_decref(doc);
    free(text);

    /* A valid task: its document and input digests, no raw message. */
    dl.task_json = "{\"inputs\":{\"image\":{\"layer\":\"file:///d\","
                   "\"objects\":{\"a\":\"sha256:01\"},\"scale\":\"s\"}}}";
    dl.task_key = "sha256:ab";
    dl.attempts = 4;
    assert_int_equal(cnx_dead_letter_build(&dl, &text), 0);
    doc = json_loads(text, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(doc,
                                                            "input_digests"),
                                            "image"),
                            "a")),
                        "sha256:01");
    assert_null(json_object_get(doc, "message"));
    assert_int_equal(json_integer_value(json_object_get(doc, "attempts")), 4);
    json_decref(doc);
    free(text);
}

static void test_message__control_round_trips_and_is_checked(void **state)
{
    static const char *const key =
        "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    cnx_control d, back;
    char *text = NULL, bad[1200];
    (void)state;

    memset(&d, 0, sizeof(d));
    snprintf(d.type, sizeof(d.type), "reused");
    snprintf(d.request, sizeof(d.request), "r-1");
    snprintf(d.stage, sizeof(d.stage), "ds1");
    d.index = 7;
    snprintf(d.task_key, sizeof(d.task_key), "%s", key);
    snprintf(d.lane, sizeof(d.lane), "bulk");
    snprintf(d.time, sizeof(d.time), "2026-01-01T00:00:00.125Z");
    snprintf(d.reason, sizeof(d.reason), "--reuse");
    snprintf(d.manifest, sizeof(d.manifest), "%s", key);
    assert_int_equal(cnx_control_build(&d, &text), 0);
    assert_int_equal(cnx_control_parse(&back, text, strlen(text)), 0);
    assert_memory_equal(&d, &back, sizeof(d));
    free(text);

    /* Each field's rule, one corruption at a time. */
    static const struct {
        const char *from, *to, *why;
    } cases[] = {
        {"\"lane\":\"bulk\"", "\"lane\":\"fast\"", "lane: must be bulk"},
        {"\"type\":\"reused\"", "\"type\":\"teleported\"", "type: must be"},
        {"\"index\":7", "\"index\":-1", "index: must be an integer >= 0"},
        {"\"index\":7", "\"index\":7,\"extra\":1", "unknown key 'extra'"},
        {"\"request\":\"r-1\"", "\"request\":\"../x\"", "request: must be"},
        {"\"time\":\"2026-01-01T00:00:00.125Z\"", "\"time\":\"yesterday\"",
         "time: must be RFC 3339"},
        {"\"reason\":\"--reuse\",", "", "reason: missing"},
        {"\"manifest\":\"sha256:0123", "\"manifest\":\"md5:0123",
         "manifest: must be sha256"},
    };
    snprintf(d.manifest, sizeof(d.manifest), "%s", key);
    assert_int_equal(cnx_control_build(&d, &text), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *at = strstr(text, cases[i].from);
        assert_non_null(at);
        snprintf(bad, sizeof(bad), "%.*s%s%s", (int)(at - text), text,
                 cases[i].to, at + strlen(cases[i].from));
        assert_int_equal(cnx_control_parse(&back, bad, strlen(bad)),
                         CNX_ESCHEMA);
        if (strstr(cnx_error_last()->message, cases[i].why) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i,
                     cnx_error_last()->message, cases[i].why);
    }
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message__kinds_belong_to_their_topics),
        cmocka_unit_test(test_message__signed_type_names_topic_and_key),
        cmocka_unit_test(test_message__signature_is_ed25519_over_the_pae),
        cmocka_unit_test(test_message__verify_finds_every_failure),
        cmocka_unit_test(test_message__event_is_canonical_and_complete),
        cmocka_unit_test(test_message__dead_letter_keeps_the_replay_bundle),
        cmocka_unit_test(test_message__control_round_trips_and_is_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
