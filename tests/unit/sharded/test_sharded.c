/*
 * Sharded format (cnx/sharded.h): MurmurHash3_x86_128 against SMHasher's
 * published verification value, compressed Morton codes, shard location
 * and names, index decoding of truncated and forged input, bounded gzip,
 * lookups through an in-memory shard, and the "sharding" member of info.
 * tests/integration/sharded_ref.sh checks against an independent writer.
 */
#include "cnx_test.h"

#include <inttypes.h>

#include <zlib.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/sharded.h"
#include "cnx/store.h"

static void test_sharded__murmur3_matches_smhasher_verification(void **state)
{
    /* SMHasher's VerificationTest: keys {}, {0}, {0,1}, ... hashed with seed
     * 256 - length; the digests hashed with seed 0; its first word. */
    uint8_t key[256], digests[256 * 16];
    uint32_t h[4];
    (void)state;
    for (int i = 0; i < 256; i++) {
        key[i] = (uint8_t)i;
        cnx_murmur3_x86_128(key, (size_t)i, 256u - (uint32_t)i, h);
        for (int w = 0; w < 4; w++)
            for (int b = 0; b < 4; b++)
                digests[16 * i + 4 * w + b] = (uint8_t)(h[w] >> (8 * b));
    }
    cnx_murmur3_x86_128(digests, sizeof(digests), 0, h);
    assert_int_equal(h[0], 0xB3ECE62Au);
}

static void test_sharded__morton_skips_axes_without_bits(void **state)
{
    uint64_t code;
    (void)state;
    /* x fastest: on 2x2x2, (1,0,0) -> 1, (0,1,0) -> 2, (0,0,1) -> 4 */
    assert_int_equal(cnx_sharding_morton((uint64_t[]){1, 0, 0},
                                         (uint64_t[]){2, 2, 2}, &code),
                     0);
    assert_int_equal(code, 1);
    assert_int_equal(cnx_sharding_morton((uint64_t[]){0, 0, 1},
                                         (uint64_t[]){2, 2, 2}, &code),
                     0);
    assert_int_equal(code, 4);
    /* grid 1x1x8: only z has bits */
    assert_int_equal(cnx_sharding_morton((uint64_t[]){0, 0, 5},
                                         (uint64_t[]){1, 1, 8}, &code),
                     0);
    assert_int_equal(code, 5);
    /* grid 4x2x1: x0 y0 x1 */
    assert_int_equal(cnx_sharding_morton((uint64_t[]){2, 1, 0},
                                         (uint64_t[]){4, 2, 1}, &code),
                     0);
    assert_int_equal(code, 6);
    assert_int_equal(cnx_sharding_morton((uint64_t[]){4, 0, 0},
                                         (uint64_t[]){4, 2, 1}, &code),
                     CNX_ERANGE);
    assert_int_equal(
        cnx_sharding_morton((uint64_t[]){0, 0, 0},
                            (uint64_t[]){1ull << 22, 1ull << 22, 1ull << 22},
                            &code),
        CNX_ERANGE);
}

static void test_sharded__locate_and_name(void **state)
{
    cnx_sharding spec = {
        0, 2, 5, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW, CNX_SHARD_ENC_RAW};
    uint64_t shard, mini;
    char name[CNX_SHARD_NAME_MAX];
    (void)state;
    assert_int_equal(cnx_sharding_check(&spec), 0);
    cnx_sharding_locate(&spec, 0x7b, &shard, &mini); /* 111 1011 */
    assert_int_equal(mini, 3);
    assert_int_equal(shard, 0x1e);
    cnx_sharding_shard_name(&spec, shard, name);
    assert_string_equal(name, "1e.shard");
    spec.shard_bits = 0;
    cnx_sharding_shard_name(&spec, 0, name);
    assert_string_equal(name, "0.shard");
    spec.shard_bits = 9;
    cnx_sharding_shard_name(&spec, 10, name);
    assert_string_equal(name, "00a.shard");
    spec.preshift_bits = 64;
    assert_int_equal(cnx_sharding_hash(&spec, UINT64_MAX), 0);
    spec.shard_bits = 63;
    assert_int_equal(cnx_sharding_check(&spec), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "shard_bits"));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_sharded__index_decode_refuses_forged_entries(void **state)
{
    cnx_sharding spec = {
        0, 1, 0, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW, CNX_SHARD_ENC_RAW};
    uint8_t idx[32] = {0};
    cnx_shard_range *r;
    uint8_t ms[48];
    cnx_minishard_entry *e;
    size_t n;
    (void)state;
    put64(idx + 16, 10);
    put64(idx + 24, 58);
    assert_int_equal(cnx_shard_index_decode(&spec, idx, 32, &r), 0);
    assert_int_equal(r[1].start, 42);
    assert_int_equal(r[1].end, 90);
    free(r);
    assert_int_equal(cnx_shard_index_decode(&spec, idx, 31, &r), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "truncated"));
    put64(idx + 24, 9);
    assert_int_equal(cnx_shard_index_decode(&spec, idx, 32, &r), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "entry 1"));
    put64(idx + 24, UINT64_MAX);
    assert_int_equal(cnx_shard_index_decode(&spec, idx, 32, &r), CNX_ECORRUPT);

    /* two chunks: ids 5, 5+3; offsets 0, +4 after the first's end */
    put64(ms, 5);
    put64(ms + 8, 3);
    put64(ms + 16, 0);
    put64(ms + 24, 4);
    put64(ms + 32, 10);
    put64(ms + 40, 2);
    assert_int_equal(cnx_minishard_index_decode(&spec, ms, 48, &e, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(e[1].chunk_id, 8);
    assert_int_equal(e[0].offset, 32);
    assert_int_equal(e[1].offset, 32 + 10 + 4);
    free(e);
    assert_int_equal(cnx_minishard_index_decode(&spec, ms, 47, &e, &n),
                     CNX_ECORRUPT);
    put64(ms + 24, UINT64_MAX - 20);
    assert_int_equal(cnx_minishard_index_decode(&spec, ms, 48, &e, &n),
                     CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "overflows"));
}

static size_t gzip_bytes(const uint8_t *in, size_t len, uint8_t *out,
                         size_t cap)
{
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    assert_int_equal(
        deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
        Z_OK);
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.avail_in = (uInt)len;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    deflateEnd(&zs);
    return cap - zs.avail_out;
}

static void test_sharded__gunzip_is_bounded(void **state)
{
    static uint8_t zeros[100000];
    uint8_t gz[2048], *out;
    size_t n, len;
    (void)state;
    n = gzip_bytes(zeros, sizeof(zeros), gz, sizeof(gz));
    assert_int_equal(cnx_sharded_gunzip(gz, n, sizeof(zeros), &out, &len), 0);
    assert_int_equal(len, sizeof(zeros));
    free(out);
    assert_int_equal(cnx_sharded_gunzip(gz, n, sizeof(zeros) - 1, &out, &len),
                     CNX_ETOOBIG);
    assert_int_equal(cnx_sharded_gunzip(gz, n - 5, sizeof(zeros), &out, &len),
                     CNX_ECORRUPT);
    assert_int_equal(
        cnx_sharded_gunzip((const uint8_t *)"nope", 4, 100, &out, &len),
        CNX_ECORRUPT);
    assert_int_equal(cnx_sharded_gunzip(gz, 0, 100, &out, &len), CNX_ECORRUPT);
}

/* An in-memory shard "0.shard" for lookups. */
typedef struct mem_shard {
    const uint8_t *data;
    size_t len;
} mem_shard;

static int mem_read(void *ctx, const char *name, uint64_t offset,
                    uint64_t length, uint8_t **out)
{
    const mem_shard *m = ctx;
    if (strcmp(name, "0.shard") != 0)
        return CNX_ENOTFOUND;
    if (offset > m->len || length > m->len - offset)
        return CNX_ERANGE;
    *out = malloc(length + 1);
    assert_non_null(*out);
    memcpy(*out, m->data + offset, (size_t)length);
    return 0;
}

static void test_sharded__lookup_reads_chunks_and_reports_missing(void **st)
{
    /* minishard_bits 0, identity: one minishard holding chunks 7 and 9 */
    cnx_sharding spec = {
        0, 0, 0, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW, CNX_SHARD_ENC_RAW};
    uint8_t shard[16 + 8 + 48];
    mem_shard m = {shard, sizeof(shard)};
    uint8_t *out;
    size_t len;
    (void)st;
    put64(shard, 8);
    put64(shard + 8, 56);
    memcpy(shard + 16, "abcdefgh", 8);
    put64(shard + 24, 7);
    put64(shard + 32, 2);
    put64(shard + 40, 0);
    put64(shard + 48, 1);
    put64(shard + 56, 3);
    put64(shard + 64, 4);
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, mem_read, &m, &out, &len),
                     0);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "efgh", 4);
    free(out);
    assert_int_equal(cnx_sharded_read_chunk(&spec, 8, mem_read, &m, &out, &len),
                     CNX_ENOTFOUND);
    spec.shard_bits = 1; /* chunk 9 now in "1.shard", which is absent */
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, mem_read, &m, &out, &len),
                     CNX_ENOTFOUND);
    spec.shard_bits = 0;
    m.len = 60; /* the minishard index runs past the end */
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, mem_read, &m, &out, &len),
                     CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "past the end"));
    m.len = 10; /* the shard index itself is cut */
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, mem_read, &m, &out, &len),
                     CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "0.shard"));
}

/* The adapter over a file:// store: exact ranges or CNX_ERANGE, never a
 * short read; missing shards CNX_ENOTFOUND; then a lookup through it. */
static void test_sharded__store_read_gives_exact_ranges_or_erange(void **st)
{
    cnx_sharding spec = {
        0, 0, 0, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW, CNX_SHARD_ENC_RAW};
    uint8_t shard[16 + 8 + 48], *out = NULL;
    char dir[64];
    cnx_store *store = NULL;
    cnx_sharded_source src = {NULL, "s"}, root = {NULL, ""};
    size_t len;
    (void)st;

    for (size_t i = 0; i < sizeof(shard); i++)
        shard[i] = (uint8_t)(i * 7 + 1);
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&store, dir), 0);
    src.store = root.store = store;
    assert_int_equal(cnx_store_put(store, "s/0.shard", shard, sizeof(shard),
                                   NULL),
                     0);
    assert_int_equal(cnx_store_put(store, "0.shard", shard, 10, NULL), 0);
    /* inside, and ending exactly at the end */
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 3, 20, &out), 0);
    assert_memory_equal(out, shard + 3, 20);
    free(out);
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 60, 12, &out), 0);
    assert_memory_equal(out, shard + 60, 12);
    free(out);
    /* running past the end, starting at it, starting after it */
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 60, 13, &out),
                     CNX_ERANGE);
    assert_null(out);
    assert_non_null(strstr(cnx_error_last()->message, "s/0.shard"));
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 72, 1, &out),
                     CNX_ERANGE);
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 500, 8, &out),
                     CNX_ERANGE);
    /* zero lengths: inside or at the end is fine, after it is not */
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 0, 0, &out), 0);
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 72, 0, &out), 0);
    assert_null(out);
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 73, 0, &out),
                     CNX_ERANGE);
    /* missing shard, whatever the range; overflow; too big */
    assert_int_equal(cnx_sharded_store_read(&src, "1.shard", 0, 16, &out),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_sharded_store_read(&src, "1.shard", 0, 0, &out),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_sharded_store_read(&src, "1.shard", 5, 0, &out),
                     CNX_ENOTFOUND);
    assert_int_equal(
        cnx_sharded_store_read(&src, "0.shard", UINT64_MAX - 3, 8, &out),
        CNX_ERANGE);
    assert_int_equal(cnx_sharded_store_read(&src, "0.shard", 0,
                                            (uint64_t)CNX_STORE_MAX_OBJECT + 1,
                                            &out),
                     CNX_ETOOBIG);
    /* an empty prefix names the object at the root */
    assert_int_equal(cnx_sharded_store_read(&root, "0.shard", 0, 10, &out), 0);
    assert_memory_equal(out, shard, 10);
    free(out);
    assert_int_equal(cnx_sharded_store_read(&root, "0.shard", 0, 11, &out),
                     CNX_ERANGE);

    /* the lookup of test_sharded__lookup_reads_chunks_and_reports_missing,
     * through the store */
    put64(shard, 8);
    put64(shard + 8, 56);
    memcpy(shard + 16, "abcdefgh", 8);
    put64(shard + 24, 7);
    put64(shard + 32, 2);
    put64(shard + 40, 0);
    put64(shard + 48, 1);
    put64(shard + 56, 3);
    put64(shard + 64, 4);
    assert_int_equal(cnx_store_put(store, "t/0.shard", shard, sizeof(shard),
                                   NULL),
                     0);
    src.prefix = "t";
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, cnx_sharded_store_read,
                                            &src, &out, &len),
                     0);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "efgh", 4);
    free(out);
    assert_int_equal(cnx_sharded_read_chunk(&spec, 8, cnx_sharded_store_read,
                                            &src, &out, &len),
                     CNX_ENOTFOUND);
    /* the same shard cut short: the minishard index runs past its end */
    assert_int_equal(cnx_store_put(store, "u/0.shard", shard, 60, NULL), 0);
    src.prefix = "u";
    assert_int_equal(cnx_sharded_read_chunk(&spec, 9, cnx_sharded_store_read,
                                            &src, &out, &len),
                     CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "past the end"));
    cnx_store_free(store);
    cnx_test_rmtree(dir);
}

static const char *info_head =
    "{\"type\":\"image\",\"data_type\":\"uint8\",\"num_channels\":1,"
    "\"scales\":[{\"key\":\"s\",\"size\":[64,64,64],\"resolution\":[4,4,40],"
    "\"chunk_sizes\":[[16,16,16]],\"encoding\":\"raw\",\"sharding\":";

static int parse_with(const char *sharding, cnx_layer_info *info)
{
    char text[1024];
    snprintf(text, sizeof(text), "%s%s}]}", info_head, sharding);
    return cnx_info_parse(info, text, strlen(text));
}

static void test_sharded__info_sharding_parses_and_round_trips(void **state)
{
    cnx_layer_info info, again;
    char *json;
    (void)state;
    assert_int_equal(
        parse_with("{\"@type\":\"neuroglancer_uint64_sharded_v1\","
                   "\"preshift_bits\":3,\"hash\":\"murmurhash3_x86_128\","
                   "\"minishard_bits\":6,\"shard_bits\":2,"
                   "\"data_encoding\":\"gzip\",\"x-writer\":\"kept out\"}",
                   &info),
        0);
    assert_int_equal(info.scales[0].sharded, 1);
    assert_int_equal(info.scales[0].sharding.preshift_bits, 3);
    assert_int_equal(info.scales[0].sharding.hash, CNX_SHARD_HASH_MURMUR3);
    assert_int_equal(info.scales[0].sharding.minishard_index_encoding,
                     CNX_SHARD_ENC_RAW);
    assert_int_equal(info.scales[0].sharding.data_encoding, CNX_SHARD_ENC_GZIP);
    assert_int_equal(cnx_info_to_json(&info, &json), 0);
    assert_non_null(strstr(json, "neuroglancer_uint64_sharded_v1"));
    assert_int_equal(cnx_info_parse(&again, json, strlen(json)), 0);
    assert_memory_equal(&info, &again, sizeof(info));
    free(json);
    assert_int_equal(parse_with("null", &info), 0);
    assert_int_equal(info.scales[0].sharded, 0);
}

static void test_sharded__info_bad_sharding_is_named(void **state)
{
    static const struct {
        const char *sharding;
        const char *part;
    } cases[] = {
        {"[]", "sharding: must be an object"},
        {"{\"@type\":\"v2\",\"preshift_bits\":0,\"hash\":\"identity\","
         "\"minishard_bits\":0,\"shard_bits\":0}",
         "sharding.@type"},
        {"{\"@type\":\"neuroglancer_uint64_sharded_v1\",\"preshift_bits\":0,"
         "\"hash\":\"md5\",\"minishard_bits\":0,\"shard_bits\":0}",
         "sharding.hash"},
        {"{\"@type\":\"neuroglancer_uint64_sharded_v1\",\"preshift_bits\":0,"
         "\"hash\":\"identity\",\"shard_bits\":0}",
         "sharding.minishard_bits"},
        {"{\"@type\":\"neuroglancer_uint64_sharded_v1\",\"preshift_bits\":65,"
         "\"hash\":\"identity\",\"minishard_bits\":0,\"shard_bits\":0}",
         "sharding.preshift_bits"},
        {"{\"@type\":\"neuroglancer_uint64_sharded_v1\",\"preshift_bits\":0,"
         "\"hash\":\"identity\",\"minishard_bits\":30,\"shard_bits\":40}",
         "sharding: shard_bits"},
        {"{\"@type\":\"neuroglancer_uint64_sharded_v1\",\"preshift_bits\":0,"
         "\"hash\":\"identity\",\"minishard_bits\":0,\"shard_bits\":0,"
         "\"data_encoding\":\"zstd\"}",
         "sharding.data_encoding"},
    };
    cnx_layer_info info;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(parse_with(cases[i].sharding, &info), CNX_ECORRUPT);
        if (strstr(cnx_error_last()->message, cases[i].part) == NULL)
            fail_msg("case %zu: '%s' lacks '%s'", i, cnx_error_last()->message,
                     cases[i].part);
        assert_non_null(strstr(cnx_error_last()->message, "info: scales[0]"));
    }
}

static const char *expect_nothing(void *ctx, const char *name)
{
    (void)ctx;
    (void)name;
    return NULL;
}

static void test_sharded__layer_reads_sharded_scale_refuses_chunk_writes(void **state)
{
    char dir[64], url[128];
    cnx_layer_info info;
    cnx_layer *layer;
    cnx_volume *vol = NULL, *other = NULL;
    cnx_object_list list;
    cnx_box box = {{0, 0, 0}, {16, 16, 16}};
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(url, sizeof(url), "file://%s/layer", dir);
    cnx_object_list_init(&list);
    assert_int_equal(parse_with("{\"@type\":\"neuroglancer_uint64_sharded_v1\","
                                "\"preshift_bits\":0,\"hash\":\"identity\","
                                "\"minishard_bits\":0,\"shard_bits\":0}",
                                &info),
                     0);
    assert_int_equal(cnx_layer_create(&layer, url, &info), 0);
    /* No shard file yet: a missing chunk, as for an unsharded scale. */
    assert_int_equal(cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol),
                     CNX_ENOTFOUND);
    assert_null(vol);
    assert_int_equal(cnx_layer_read(layer, 0, &box, CNX_READ_FILL_MISSING, NULL,
                                    NULL, NULL, &vol),
                     0);
    assert_non_null(vol);
    for (size_t i = 0; i < cnx_volume_bytes(vol); i++)
        assert_int_equal(((const uint8_t *)vol->data)[i], 0);
    /* With an expectation, a missing chunk is still missing (filled). */
    assert_int_equal(cnx_layer_read(layer, 0, &box, CNX_READ_FILL_MISSING,
                                    expect_nothing, NULL, &list, &other),
                     0);
    assert_int_equal(list.count, 0);
    cnx_volume_free(other);
    assert_int_equal(cnx_layer_digests(layer, 0, &box, &list), CNX_ENOTFOUND);
    assert_int_equal(cnx_layer_write(layer, 0, vol, NULL), CNX_EUNSUPPORTED);
    assert_non_null(strstr(cnx_error_last()->message, "sharded"));
    cnx_volume_free(vol);
    cnx_object_list_dispose(&list);
    cnx_layer_free(layer);
    cnx_test_rmtree(dir);
}

/* --- the encoder -------------------------------------------------------- */

/* Many in-memory shard files, looked up by name, for round trips. */
typedef struct mem_shards {
    char names[64][CNX_SHARD_NAME_MAX];
    uint8_t *data[64];
    size_t len[64];
    int n;
} mem_shards;

static int mems_read(void *ctx, const char *name, uint64_t offset,
                     uint64_t length, uint8_t **out)
{
    const mem_shards *ms = ctx;
    for (int i = 0; i < ms->n; i++) {
        if (strcmp(ms->names[i], name) != 0)
            continue;
        if (offset > ms->len[i] || length > ms->len[i] - offset)
            return CNX_ERANGE;
        *out = malloc(length + 1);
        assert_non_null(*out);
        memcpy(*out, ms->data[i] + offset, (size_t)length);
        return 0;
    }
    return CNX_ENOTFOUND;
}

static void mems_free(mem_shards *ms)
{
    for (int i = 0; i < ms->n; i++)
        free(ms->data[i]);
    ms->n = 0;
}

/* Chunks with random ids (below id_limit, or any 64-bit id when 0) and
 * random bytes, some empty, some compressible. */
static cnx_shard_chunk *random_chunks(uint64_t *rng, size_t n,
                                      uint64_t id_limit, uint8_t **pool)
{
    cnx_shard_chunk *c = calloc(n, sizeof(*c));
    size_t total = 0, at = 0;
    assert_non_null(c);
    for (size_t i = 0; i < n; i++) {
        uint64_t id;
        int again;
        do {
            id = cnx_test_rand(rng);
            if (id_limit > 0)
                id %= id_limit;
            again = 0;
            for (size_t j = 0; j < i; j++)
                again |= c[j].chunk_id == id;
        } while (again);
        c[i].chunk_id = id;
        c[i].len =
            (size_t)(cnx_test_rand(rng) % 5 == 0 ? 0
                                                 : cnx_test_rand(rng) % 3000);
        total += c[i].len;
    }
    *pool = malloc(total + 1);
    assert_non_null(*pool);
    for (size_t i = 0; i < n; i++) {
        int flat = (int)(cnx_test_rand(rng) % 2);
        uint8_t v = (uint8_t)cnx_test_rand(rng);
        for (size_t k = 0; k < c[i].len; k++)
            (*pool)[at + k] = flat ? v : (uint8_t)cnx_test_rand(rng);
        c[i].data = c[i].len > 0 ? *pool + at : NULL;
        at += c[i].len;
    }
    return c;
}

/* Encode chunks shard by shard into ms (empty shards left out). */
static void encode_all(const cnx_sharding *spec, const cnx_shard_chunk *c,
                       size_t n, mem_shards *ms)
{
    cnx_shard_chunk *mine = calloc(n, sizeof(*mine));
    int *done = calloc(n, sizeof(*done));
    assert_non_null(mine);
    assert_non_null(done);
    for (size_t i = 0; i < n; i++) {
        uint64_t shard, m, s2;
        size_t k = 0;
        if (done[i])
            continue;
        cnx_sharding_locate(spec, c[i].chunk_id, &shard, &m);
        for (size_t j = i; j < n; j++) {
            cnx_sharding_locate(spec, c[j].chunk_id, &s2, &m);
            if (s2 == shard) {
                mine[k++] = c[j];
                done[j] = 1;
            }
        }
        assert_true(ms->n < 64);
        cnx_sharding_shard_name(spec, shard, ms->names[ms->n]);
        assert_int_equal(cnx_shard_encode(spec, shard, mine, k,
                                          &ms->data[ms->n], &ms->len[ms->n]),
                         0);
        ms->n++;
    }
    free(done);
    free(mine);
}

static void test_sharded__encode_round_trips_through_the_reader(void **st)
{
    /* preshift, minishard, shard bits; hash; index and data encodings;
     * ids below a limit (identity) or anywhere (murmur) */
    static const struct {
        cnx_sharding spec;
        uint64_t id_limit;
    } cases[] = {
        {{0, 0, 0, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW,
          CNX_SHARD_ENC_RAW},
         1000},
        {{0, 2, 3, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW,
          CNX_SHARD_ENC_GZIP},
         4096},
        {{2, 3, 2, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_GZIP,
          CNX_SHARD_ENC_RAW},
         4096},
        {{6, 1, 3, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_GZIP,
          CNX_SHARD_ENC_GZIP},
         1 << 12},
        {{0, 0, 0, CNX_SHARD_HASH_MURMUR3, CNX_SHARD_ENC_GZIP,
          CNX_SHARD_ENC_GZIP},
         0},
        {{1, 4, 2, CNX_SHARD_HASH_MURMUR3, CNX_SHARD_ENC_RAW,
          CNX_SHARD_ENC_RAW},
         0},
        {{3, 6, 1, CNX_SHARD_HASH_MURMUR3, CNX_SHARD_ENC_GZIP,
          CNX_SHARD_ENC_RAW},
         0},
        {{0, 1, 5, CNX_SHARD_HASH_MURMUR3, CNX_SHARD_ENC_RAW,
          CNX_SHARD_ENC_GZIP},
         0},
    };
    uint64_t rng = 41;
    (void)st;
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        const cnx_sharding *spec = &cases[t].spec;
        uint8_t *pool;
        size_t n = 120;
        cnx_shard_chunk *c = random_chunks(&rng, n, cases[t].id_limit, &pool);
        mem_shards ms = {0};
        assert_int_equal(cnx_sharding_check(spec), 0);
        encode_all(spec, c, n, &ms);
        for (size_t i = 0; i < n; i++) {
            uint8_t *got;
            size_t len;
            int rc = cnx_sharded_read_chunk(spec, c[i].chunk_id, mems_read, &ms,
                                            &got, &len);
            if (rc != 0)
                fail_msg("case %zu chunk %" PRIu64 ": %s", t, c[i].chunk_id,
                         cnx_error_last()->message);
            assert_int_equal(len, c[i].len);
            if (len > 0)
                assert_memory_equal(got, c[i].data, len);
            free(got);
        }
        for (int k = 0; k < 40; k++) { /* ids not written: absent */
            uint64_t id = cnx_test_rand(&rng);
            int known = 0;
            uint8_t *got;
            size_t len;
            if (cases[t].id_limit > 0)
                id %= cases[t].id_limit;
            for (size_t i = 0; i < n; i++)
                known |= c[i].chunk_id == id;
            if (known)
                continue;
            assert_int_equal(
                cnx_sharded_read_chunk(spec, id, mems_read, &ms, &got, &len),
                CNX_ENOTFOUND);
        }
        mems_free(&ms);
        free(c);
        free(pool);
    }
}

static void test_sharded__encode_is_deterministic_and_order_free(void **st)
{
    cnx_sharding spec = {1,
                         3,
                         0,
                         CNX_SHARD_HASH_MURMUR3,
                         CNX_SHARD_ENC_GZIP,
                         CNX_SHARD_ENC_GZIP};
    uint64_t rng = 7;
    uint8_t *pool, *a, *b;
    size_t n = 60, alen, blen;
    cnx_shard_chunk *c = random_chunks(&rng, n, 0, &pool);
    (void)st;
    assert_int_equal(cnx_shard_encode(&spec, 0, c, n, &a, &alen), 0);
    for (size_t i = 0; i < n / 2; i++) { /* reverse the order */
        cnx_shard_chunk tmp = c[i];
        c[i] = c[n - 1 - i];
        c[n - 1 - i] = tmp;
    }
    assert_int_equal(cnx_shard_encode(&spec, 0, c, n, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    /* the first chunk follows the shard index (8 minishards: 128 bytes)
     * as a gzip member with mtime 0 and OS 255 */
    {
        assert_int_equal(a[128], 0x1f);
        assert_int_equal(a[129], 0x8b);
        assert_memory_equal(a + 132, "\0\0\0\0", 4);
        assert_int_equal(a[137], 255);
    }
    free(a);
    free(b);
    free(c);
    free(pool);
}

static void test_sharded__encode_refuses_foreign_and_repeated_chunks(void **st)
{
    cnx_sharding spec = {
        0, 1, 2, CNX_SHARD_HASH_IDENTITY, CNX_SHARD_ENC_RAW, CNX_SHARD_ENC_RAW};
    /* identity: id 5 = shard 2 minishard 1; id 4 = shard 2 minishard 0 */
    cnx_shard_chunk c[2] = {{5, (const uint8_t *)"ab", 2, NULL, 0},
                            {4, (const uint8_t *)"cd", 2, NULL, 0}};
    uint8_t *out;
    size_t len;
    (void)st;
    assert_int_equal(cnx_shard_encode(&spec, 1, c, 2, &out, &len), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "chunk 5"));
    assert_non_null(strstr(cnx_error_last()->message, "shard 2"));
    c[1].chunk_id = 5;
    assert_int_equal(cnx_shard_encode(&spec, 2, c, 2, &out, &len), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "given twice"));
    assert_null(out);
    /* no chunks: a valid shard of empty minishards, all of it the index */
    assert_int_equal(cnx_shard_encode(&spec, 2, c, 0, &out, &len), 0);
    assert_int_equal(len, 32);
    for (size_t i = 0; i < len; i++)
        assert_int_equal(out[i], 0);
    {
        mem_shard m = {out, len};
        uint8_t *got;
        size_t glen;
        spec.shard_bits = 0; /* so that the shard is "0.shard" */
        assert_int_equal(
            cnx_sharded_read_chunk(&spec, 1, mem_read, &m, &got, &glen),
            CNX_ENOTFOUND);
        assert_non_null(strstr(cnx_error_last()->message, "is empty"));
    }
    free(out);
}

static void test_sharded__choose_follows_the_documented_rule(void **st)
{
    /* grid; chunk bytes; target (bytes, minishard chunks); expected
     * preshift, minishard, shard bits */
    static const struct {
        uint64_t grid[3], chunk_bytes, shard_bytes, mini;
        int pre, mbits, sbits;
    } cases[] = {
        /* 64^3 uint64 chunks (2 MiB): 128 a shard = 2^7, minishards of 64;
         * grid 32x32x16 = 5+5+4 = 14 bits */
        {{32, 32, 16}, 2 << 20, 0, 0, 6, 1, 7},
        /* 64x64x64 uint8 (256 KiB): 1024 a shard */
        {{100, 100, 40}, 256 << 10, 0, 0, 6, 4, 10},
        /* a small volume: everything in one shard, one minishard */
        {{2, 2, 1}, 256 << 10, 0, 0, 2, 0, 0},
        /* a grid of one chunk: no id bits at all */
        {{1, 1, 1}, 1 << 20, 0, 0, 0, 0, 0},
        /* chunks bigger than the target: one chunk a shard */
        {{8, 8, 8}, 512 << 20, 0, 0, 0, 0, 9},
        /* explicit target: 1 MiB shards of 64 KiB chunks (16), minishards
         * of 4 (a non-power of two rounds down) */
        {{16, 16, 16}, 64 << 10, 1 << 20, 5, 2, 2, 8},
        /* tiny chunks: the shard index is capped at 2^22 minishards */
        {{1 << 12, 1 << 12, 1 << 4}, 1, 0, 1, 6, 22, 0},
    };
    cnx_sharding out;
    (void)st;
    for (size_t t = 0; t < sizeof(cases) / sizeof(cases[0]); t++) {
        cnx_sharding_target target = {cases[t].shard_bytes, cases[t].mini};
        assert_int_equal(cnx_sharding_choose(cases[t].grid,
                                             cases[t].chunk_bytes, &target,
                                             &out),
                         0);
        if (out.preshift_bits != cases[t].pre ||
            out.minishard_bits != cases[t].mbits ||
            out.shard_bits != cases[t].sbits)
            fail_msg("case %zu: got %d/%d/%d, expected %d/%d/%d", t,
                     out.preshift_bits, out.minishard_bits, out.shard_bits,
                     cases[t].pre, cases[t].mbits, cases[t].sbits);
        assert_int_equal(out.hash, CNX_SHARD_HASH_IDENTITY);
        assert_int_equal(cnx_sharding_check(&out), 0);
    }
    assert_int_equal(cnx_sharding_choose((uint64_t[]){4, 0, 4}, 10, NULL, &out),
                     CNX_EINVAL);
    assert_int_equal(cnx_sharding_choose((uint64_t[]){4, 4, 4}, 0, NULL, &out),
                     CNX_EINVAL);
    assert_int_equal(
        cnx_sharding_choose((uint64_t[]){1ull << 22, 1ull << 22, 1ull << 22},
                            10, NULL, &out),
        CNX_ERANGE);
}

/* A whole volume: every shard chosen by the rule and encoded holds exactly
 * its aligned block of the grid, and every chunk reads back. */
static void test_sharded__chosen_shards_are_grid_blocks(void **st)
{
    uint64_t grid[3] = {7, 5, 3};
    cnx_sharding_target target = {8 * 100, 2}; /* 8 chunks a shard */
    cnx_sharding spec;
    cnx_shard_chunk c[105] = {{0}};
    uint8_t bytes[105][4];
    mem_shards ms = {0};
    size_t n = 0;
    (void)st;
    assert_int_equal(cnx_sharding_choose(grid, 100, &target, &spec), 0);
    assert_int_equal(spec.preshift_bits, 1);
    assert_int_equal(spec.minishard_bits, 2);
    assert_int_equal(spec.shard_bits, 3 + 3 + 2 - 3);
    for (uint64_t z = 0; z < grid[2]; z++)
        for (uint64_t y = 0; y < grid[1]; y++)
            for (uint64_t x = 0; x < grid[0]; x++) {
                uint64_t id, shard, m, block;
                assert_int_equal(
                    cnx_sharding_morton((uint64_t[]){x, y, z}, grid, &id), 0);
                cnx_sharding_locate(&spec, id, &shard, &m);
                /* a shard is the 2x2x2 block at (x/2, y/2, z/2): the low
                 * 3 id bits are x0 y0 z0, the rest the block's own code
                 * in the 4x3x2 grid of blocks */
                assert_int_equal(
                    cnx_sharding_morton((uint64_t[]){x / 2, y / 2, z / 2},
                                        (uint64_t[]){4, 3, 2}, &block),
                    0);
                assert_int_equal(shard, block);
                assert_int_equal(m, (id >> 1) & 3);
                memcpy(bytes[n],
                       (uint8_t[]){(uint8_t)x, (uint8_t)y, (uint8_t)z, 9}, 4);
                c[n] = (cnx_shard_chunk){id, bytes[n], 4, NULL, 0};
                n++;
            }
    encode_all(&spec, c, n, &ms);
    assert_int_equal(ms.n, 4 * 3 * 2);
    for (size_t i = 0; i < n; i++) {
        uint8_t *got;
        size_t len;
        assert_int_equal(cnx_sharded_read_chunk(&spec, c[i].chunk_id, mems_read,
                                                &ms, &got, &len),
                         0);
        assert_int_equal(len, 4);
        assert_memory_equal(got, c[i].data, 4);
        free(got);
    }
    mems_free(&ms);
}

/* A prefix is stored raw immediately before its chunk, outside every
 * minishard index entry: the chunk reads back alone, and the prefix is
 * the prefix_len bytes before the chunk's offset (how a sharded
 * multi-resolution mesh stores fragment data before its manifest). */
static void test_sharded__encode_places_prefix_just_before_chunk(void **st)
{
    cnx_sharding spec = {
        0, 1, 0, CNX_SHARD_HASH_MURMUR3, CNX_SHARD_ENC_GZIP, CNX_SHARD_ENC_RAW};
    static const char *const pre[3] = {"fragments-a", "", "frag-c-longer"};
    static const char *const man[3] = {"MANIFEST-A", "M-B", "manifest c"};
    cnx_shard_chunk c[3];
    uint8_t *out = NULL;
    size_t len = 0;
    (void)st;
    for (int i = 0; i < 3; i++)
        c[i] = (cnx_shard_chunk){(uint64_t)(1000 + 77 * i),
                                 (const uint8_t *)man[i], strlen(man[i]),
                                 (const uint8_t *)pre[i], strlen(pre[i])};
    assert_int_equal(cnx_shard_encode(&spec, 0, c, 3, &out, &len), 0);
    for (int i = 0; i < 3; i++) {
        uint64_t shard, m;
        cnx_minishard_entry *e = NULL;
        size_t n = 0, k;
        mem_shard ms = {out, len};
        uint8_t *got = NULL;
        size_t glen = 0;
        cnx_sharding_locate(&spec, c[i].chunk_id, &shard, &m);
        assert_int_equal(cnx_sharded_read_minishard(&spec, shard, m, mem_read,
                                                    &ms, &e, &n),
                         0);
        for (k = 0; k < n && e[k].chunk_id != c[i].chunk_id; k++)
            ;
        assert_true(k < n);
        assert_int_equal(e[k].size, strlen(man[i]));
        assert_true(e[k].offset >= 16 * 2 + strlen(pre[i]));
        assert_memory_equal(out + e[k].offset - strlen(pre[i]), pre[i],
                            strlen(pre[i]));
        assert_int_equal(cnx_sharded_read_chunk(&spec, c[i].chunk_id,
                                                mem_read, &ms, &got, &glen),
                         0);
        assert_int_equal(glen, strlen(man[i]));
        assert_memory_equal(got, man[i], glen);
        free(got);
        free(e);
    }
    free(out);
}

/* cnx_sharding_choose_ids: the rule of sharded.h, case by case. */
static void test_sharded__choose_ids_follows_the_documented_rule(void **st)
{
    static const struct {
        uint64_t n, bytes, shard_bytes, mini;
        int sb, mb;
    } cases[] = {
        {0, 0, 0, 0, 0, 0},
        {1, 5, 0, 0, 0, 0},
        {64, 1000, 0, 0, 0, 0},
        {65, 1000, 0, 0, 0, 1},
        {1000, 1000, 100, 8, 4, 3},  /* 10 shards -> 16; 63 ids -> 8 mini */
        {3, 1 << 30, 1, 0, 2, 0},    /* no more shards than ids */
        {4096, 4096, 1 << 20, 1, 0, 12},
        {1u << 30, 1, 0, 1, 0, 22},  /* shard index capped at 64 MiB */
    };
    (void)st;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cnx_sharding_target t = {cases[i].shard_bytes, cases[i].mini};
        cnx_sharding spec;
        assert_int_equal(
            cnx_sharding_choose_ids(cases[i].n, cases[i].bytes, &t, &spec), 0);
        assert_int_equal(spec.shard_bits, cases[i].sb);
        assert_int_equal(spec.minishard_bits, cases[i].mb);
        assert_int_equal(spec.preshift_bits, 0);
        assert_int_equal(spec.hash, CNX_SHARD_HASH_MURMUR3);
        assert_int_equal(spec.minishard_index_encoding, CNX_SHARD_ENC_GZIP);
        assert_int_equal(spec.data_encoding, CNX_SHARD_ENC_RAW);
        assert_int_equal(cnx_sharding_check(&spec), 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sharded__murmur3_matches_smhasher_verification),
        cmocka_unit_test(test_sharded__morton_skips_axes_without_bits),
        cmocka_unit_test(test_sharded__locate_and_name),
        cmocka_unit_test(test_sharded__index_decode_refuses_forged_entries),
        cmocka_unit_test(test_sharded__gunzip_is_bounded),
        cmocka_unit_test(test_sharded__lookup_reads_chunks_and_reports_missing),
        cmocka_unit_test(test_sharded__store_read_gives_exact_ranges_or_erange),
        cmocka_unit_test(test_sharded__info_sharding_parses_and_round_trips),
        cmocka_unit_test(test_sharded__info_bad_sharding_is_named),
        cmocka_unit_test(
            test_sharded__layer_reads_sharded_scale_refuses_chunk_writes),
        cmocka_unit_test(test_sharded__encode_round_trips_through_the_reader),
        cmocka_unit_test(test_sharded__encode_is_deterministic_and_order_free),
        cmocka_unit_test(
            test_sharded__encode_refuses_foreign_and_repeated_chunks),
        cmocka_unit_test(test_sharded__choose_follows_the_documented_rule),
        cmocka_unit_test(test_sharded__chosen_shards_are_grid_blocks),
        cmocka_unit_test(test_sharded__encode_places_prefix_just_before_chunk),
        cmocka_unit_test(test_sharded__choose_ids_follows_the_documented_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
