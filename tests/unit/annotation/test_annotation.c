/*
 * test_annotation.c - the synapse annotation collection (cnx/annotation.h)
 * on hand-made synapses, its bytes checked against layouts written out by
 * hand from the neuroglancer_annotations_v1 spec: one record (point,
 * properties, no padding), a by-id entry with and without partners, a list
 * (count, records, ids), the object names and their order, the sorting of
 * the relationship indexes, only cells that hold a synapse written (no
 * object is an empty list), the info's keys and limit; an empty table;
 * input order does not change a byte; refusals (a site outside the bounds,
 * an id twice, a bad space, too many cells) with one-line messages. The
 * sharded layout: the spec rule's figures, and a sharded collection read
 * back chunk by chunk through cnx_sharded_read_chunk gives the unsharded
 * objects' bytes, under the ids the spec names (annotation id, segment id,
 * compressed Morton code of the cell); AUTO shards from
 * CNX_ANNOTATION_SHARD_MIN synapses. tests/py/annotations_ref.py reads
 * both layouts from the spec in the integration test.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "cnx/annotation.h"
#include "cnx/error.h"
#include "cnx/synapse_io.h"
#include "cnx_test.h"

static uint32_t u32_at(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

static uint64_t u64_at(const uint8_t *p)
{
    return (uint64_t)u32_at(p) | (uint64_t)u32_at(p + 4) << 32;
}

static float f32_at(const uint8_t *p)
{
    uint32_t v = u32_at(p);
    float f;
    memcpy(&f, &v, sizeof(f));
    return f;
}

static cnx_synapse syn(int64_t x, int64_t y, int64_t z, uint64_t pre,
                       uint64_t post)
{
    cnx_synapse s;
    memset(&s, 0, sizeof(s));
    s.site[0] = x;
    s.site[1] = y;
    s.site[2] = z;
    s.id = cnx_synapse_id(x, y, z);
    for (int i = 0; i < 3; i++) {
        s.pre_site[i] = s.site[i] + (i == 0 ? -2 : 0);
        s.post_site[i] = s.site[i] + (i == 0 ? 3 : 0);
    }
    s.pre_id = pre;
    s.post_id = post;
    s.size = 100 + x;
    s.score = 0.658189;
    return s;
}

static cnx_annotation_space space(int64_t nx, int64_t ny, int64_t nz)
{
    cnx_annotation_space sp = {{8, 8, 40}, {0, 0, 0}, {nx, ny, nz}};
    return sp;
}

static const cnx_annotation_object *find(const cnx_annotation_objects *o,
                                         const char *name)
{
    for (size_t i = 0; i < o->count; i++)
        if (strcmp(o->items[i].name, name) == 0)
            return &o->items[i];
    return NULL;
}

static void test_annotation__record_layout(void **state)
{
    cnx_synapse s = syn(76, 231, 9, 369, 351);
    uint8_t r[CNX_ANNOTATION_RECORD];
    (void)state;
    assert_int_equal(CNX_ANNOTATION_RECORD, 44);
    cnx_annotation_record(&s, r);
    assert_true(f32_at(r + 0) == 76.5f);
    assert_true(f32_at(r + 4) == 231.5f);
    assert_true(f32_at(r + 8) == 9.5f);
    assert_true(f32_at(r + 12) == 0.658189f);
    assert_int_equal(u32_at(r + 16), 176);
    assert_true(f32_at(r + 20) == 74.5f); /* pre_x */
    assert_true(f32_at(r + 24) == 231.5f);
    assert_true(f32_at(r + 28) == 9.5f);
    assert_true(f32_at(r + 32) == 79.5f); /* post_x */
    assert_true(f32_at(r + 36) == 231.5f);
    assert_true(f32_at(r + 40) == 9.5f);
    /* the score's millionths survive float32 */
    assert_true(lround((double)f32_at(r + 12) * 1e6) == 658189);
}

static void test_annotation__by_id_entry(void **state)
{
    cnx_synapse s = syn(1, 2, 3, 0x1122334455667788ull, 7);
    uint8_t *b = NULL;
    size_t len = 0;
    (void)state;
    assert_int_equal(cnx_annotation_encode_by_id(&s, &b, &len), 0);
    assert_int_equal(len, 44 + 4 + 8 + 4 + 8);
    assert_int_equal(u32_at(b + 44), 1);
    assert_true(u64_at(b + 48) == 0x1122334455667788ull);
    assert_int_equal(b[48], 0x88); /* little-endian */
    assert_int_equal(u32_at(b + 56), 1);
    assert_true(u64_at(b + 60) == 7);
    free(b);
    /* no pre-synaptic partner: an empty list */
    s.pre_id = 0;
    assert_int_equal(cnx_annotation_encode_by_id(&s, &b, &len), 0);
    assert_int_equal(len, 44 + 4 + 4 + 8);
    assert_int_equal(u32_at(b + 44), 0);
    assert_int_equal(u32_at(b + 48), 1);
    assert_true(u64_at(b + 52) == 7);
    free(b);
    assert_int_equal(cnx_annotation_encode_by_id(NULL, &b, &len), CNX_EINVAL);
}

static void test_annotation__list_layout(void **state)
{
    cnx_synapse a = syn(1, 2, 3, 5, 6), b = syn(4, 5, 6, 5, 7);
    const cnx_synapse *items[2] = {&b, &a};
    uint8_t *buf = NULL, rec[CNX_ANNOTATION_RECORD];
    size_t len = 0;
    (void)state;
    assert_int_equal(cnx_annotation_encode_list(items, 2, &buf, &len), 0);
    assert_int_equal(len, 8 + 2 * 44 + 2 * 8);
    assert_true(u64_at(buf) == 2);
    cnx_annotation_record(&b, rec);
    assert_memory_equal(buf + 8, rec, sizeof(rec));
    cnx_annotation_record(&a, rec);
    assert_memory_equal(buf + 8 + 44, rec, sizeof(rec));
    assert_true(u64_at(buf + 8 + 88) == b.id);
    assert_true(u64_at(buf + 8 + 96) == a.id);
    free(buf);
    assert_int_equal(cnx_annotation_encode_list(NULL, 0, &buf, &len), 0);
    assert_int_equal(len, 8);
    assert_true(u64_at(buf) == 0);
    free(buf);
}

static void test_annotation__collection(void **state)
{
    /* 2048 x 100 x 10 voxels: 2 cells along x, 1024 voxels each */
    cnx_annotation_space sp = space(2048, 100, 10);
    cnx_synapse s[4] = {syn(1500, 10, 1, 9, 8), syn(10, 10, 1, 8, 9),
                        syn(20, 50, 2, 8, 0), syn(1023, 99, 9, 8, 8)};
    cnx_synapse rev[4] = {s[3], s[2], s[1], s[0]};
    cnx_annotation_objects o = {NULL, 0}, o2 = {NULL, 0};
    const cnx_annotation_object *it;
    const char *want[] = {"info",
                          NULL, /* the four by_id in id order: checked below */
                          NULL,
                          NULL,
                          NULL,
                          "rel_pre_synaptic_cell/8",
                          "rel_pre_synaptic_cell/9",
                          "rel_post_synaptic_cell/8",
                          "rel_post_synaptic_cell/9",
                          "spatial0/0_0_0",
                          "spatial0/1_0_0"};
    uint64_t ids[4];
    char name[64];
    (void)state;
    assert_int_equal(cnx_annotation_build(s, 4, &sp, &o), 0);
    assert_int_equal(o.count, 11);
    for (int i = 0; i < 4; i++)
        ids[i] = s[i].id;
    /* ids ascending: s[1] (10,10,1) < s[3] (1023,99,9)? compare by id */
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++)
            if (ids[j] < ids[i]) {
                uint64_t t = ids[i];
                ids[i] = ids[j];
                ids[j] = t;
            }
    for (size_t i = 0; i < o.count; i++) {
        if (want[i] == NULL) {
            snprintf(name, sizeof(name), "by_id/%llu",
                     (unsigned long long)ids[i - 1]);
            assert_string_equal(o.items[i].name, name);
        } else {
            assert_string_equal(o.items[i].name, want[i]);
        }
    }
    /* pre 8: three synapses, in id order */
    it = find(&o, "rel_pre_synaptic_cell/8");
    assert_non_null(it);
    assert_int_equal(it->len, 8 + 3 * 52);
    assert_true(u64_at(it->data) == 3);
    for (int i = 0; i < 2; i++)
        assert_true(u64_at(it->data + 8 + 3 * 44 + 8 * i) <
                    u64_at(it->data + 8 + 3 * 44 + 8 * (i + 1)));
    /* post 8: s[0] and the autapse s[3]; post 0 has no index */
    it = find(&o, "rel_post_synaptic_cell/8");
    assert_true(u64_at(it->data) == 2);
    assert_null(find(&o, "rel_post_synaptic_cell/0"));
    /* cells: x < 1024 holds three (1023.5 included), the other one */
    it = find(&o, "spatial0/0_0_0");
    assert_true(u64_at(it->data) == 3);
    it = find(&o, "spatial0/1_0_0");
    assert_true(u64_at(it->data) == 1);
    assert_true(u64_at(it->data + 8 + 44) == s[0].id);
    /* the info */
    it = find(&o, "info");
    {
        char *info = strndup((const char *)it->data, it->len);
        assert_non_null(
            strstr(info, "\"@type\":\"neuroglancer_annotations_v1\""));
        assert_non_null(strstr(info, "\"annotation_type\":\"POINT\""));
        assert_non_null(strstr(info, "\"dimensions\":{\"x\":[8,\"nm\"],"
                                     "\"y\":[8,\"nm\"],\"z\":[40,\"nm\"]}"));
        assert_non_null(strstr(info, "\"lower_bound\":[0,0,0]"));
        assert_non_null(strstr(info, "\"upper_bound\":[2048,100,10]"));
        assert_non_null(strstr(info, "\"chunk_size\":[1024,100,10]"));
        assert_non_null(strstr(info, "\"grid_shape\":[2,1,1]"));
        assert_non_null(strstr(info, "\"limit\":3"));
        assert_non_null(strstr(info, "\"by_id\":{\"key\":\"by_id\"}"));
        assert_non_null(strstr(info, "{\"id\":\"pre_synaptic_cell\","
                                     "\"key\":\"rel_pre_synaptic_cell\"}"));
        free(info);
    }
    /* any input order: the same bytes */
    assert_int_equal(cnx_annotation_build(rev, 4, &sp, &o2), 0);
    assert_int_equal(o2.count, o.count);
    for (size_t i = 0; i < o.count; i++) {
        assert_string_equal(o.items[i].name, o2.items[i].name);
        assert_int_equal(o.items[i].len, o2.items[i].len);
        assert_memory_equal(o.items[i].data, o2.items[i].data, o.items[i].len);
    }
    cnx_annotation_objects_free(&o);
    cnx_annotation_objects_free(&o2);
    cnx_annotation_objects_free(NULL);
}

static void test_annotation__empty_table(void **state)
{
    cnx_annotation_space sp = space(3000, 10, 10);
    cnx_annotation_objects o = {NULL, 0};
    (void)state;
    assert_int_equal(cnx_annotation_build(NULL, 0, &sp, &o), 0);
    /* the info alone: no empty cell is written (a missing one reads as
     * none; Neuroglancer refuses an 8-byte list) */
    assert_int_equal(o.count, 1);
    assert_string_equal(o.items[0].name, "info");
    assert_non_null(strstr((const char *)o.items[0].data, "\"limit\":1"));
    assert_non_null(
        strstr((const char *)o.items[0].data, "\"chunk_size\":[1000,10,10]"));
    cnx_annotation_objects_free(&o);
}

static void test_annotation__refusals(void **state)
{
    cnx_annotation_space sp = space(100, 100, 100);
    cnx_annotation_objects o = {NULL, 0};
    cnx_synapse s[2] = {syn(10, 10, 10, 1, 2), syn(10, 10, 10, 1, 2)};
    (void)state;
    assert_int_equal(cnx_annotation_build(s, 2, &sp, &o), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "given twice"));
    assert_null(o.items);
    s[1] = syn(99, 10, 10, 1, 2); /* post_site x = 102: outside */
    assert_int_equal(cnx_annotation_build(s + 1, 1, &sp, &o), CNX_ERANGE);
    assert_non_null(strstr(cnx_error_last()->message, "outside the layer"));
    s[1] = syn(20, 10, 10, 1, 2);
    s[1].score = 1.5;
    assert_int_equal(cnx_annotation_build(s + 1, 1, &sp, &o), CNX_ERANGE);
    s[1].score = 0.5;
    s[1].size = (int64_t)1 << 32;
    assert_int_equal(cnx_annotation_build(s + 1, 1, &sp, &o), CNX_ERANGE);
    sp.resolution[1] = 0;
    assert_int_equal(cnx_annotation_build(s, 1, &sp, &o), CNX_EINVAL);
    sp = space(100, 100, 100);
    sp.upper[2] = 0;
    assert_int_equal(cnx_annotation_build(s, 1, &sp, &o), CNX_EINVAL);
    sp = space((int64_t)1 << 23, (int64_t)1 << 23, 1024);
    assert_int_equal(cnx_annotation_build(s, 1, &sp, &o), CNX_ERANGE);
    assert_non_null(strstr(cnx_error_last()->message, "spatial cells"));
    assert_int_equal(cnx_annotation_build(NULL, 1, &sp, &o), CNX_EINVAL);
    assert_null(o.items);
}

static void test_annotation__sharding_rule(void **state)
{
    cnx_sharding sh;
    (void)state;
    cnx_annotation_sharding(0, 0, &sh);
    assert_int_equal(sh.shard_bits + sh.minishard_bits, 0);
    assert_int_equal(sh.preshift_bits, 0);
    assert_int_equal(sh.hash, CNX_SHARD_HASH_MURMUR3);
    assert_int_equal(sh.data_encoding, CNX_SHARD_ENC_GZIP);
    assert_int_equal(sh.minishard_index_encoding, CNX_SHARD_ENC_GZIP);
    cnx_annotation_sharding(64, 64 * 60, &sh);
    assert_int_equal(sh.shard_bits + sh.minishard_bits, 0);
    cnx_annotation_sharding(65, 65 * 60, &sh);
    assert_int_equal(sh.minishard_bits, 1);
    assert_int_equal(sh.shard_bits, 0);
    /* 1e6 chunks of 64 B: 2^14 minishards; 61 MiB: one shard */
    cnx_annotation_sharding(1000000, 64000000, &sh);
    assert_int_equal(sh.minishard_bits, 14);
    assert_int_equal(sh.shard_bits, 0);
    /* 1e7 of 64 B: 2^18 minishards in 2^4 shards of < 64 MiB */
    cnx_annotation_sharding(10000000, 640000000, &sh);
    assert_int_equal(sh.minishard_bits + sh.shard_bits, 18);
    assert_int_equal(sh.shard_bits, 4);
    assert_int_equal(cnx_sharding_check(&sh), 0);
}

/* A cnx_shard_read_fn over a collection's objects: shard_name is looked
 * up as "<dir>/<shard_name>". */
typedef struct mem_shards {
    const cnx_annotation_objects *o;
    const char *dir;
} mem_shards;

static int mem_read(void *ctx, const char *shard_name, uint64_t offset,
                    uint64_t length, uint8_t **out)
{
    const mem_shards *m = ctx;
    char name[64];
    const cnx_annotation_object *it;
    snprintf(name, sizeof(name), "%s/%s", m->dir, shard_name);
    it = find(m->o, name);
    if (it == NULL)
        return CNX_ENOTFOUND;
    if (offset > it->len || length > it->len - offset)
        return CNX_ERANGE;
    *out = malloc(length ? length : 1);
    if (*out == NULL)
        return CNX_ENOMEM;
    memcpy(*out, it->data + offset, length);
    return 0;
}

static void test_annotation__sharded(void **state)
{
    /* 3000 x 2100 x 10 voxels: a 3 x 3 x 1 grid of cells */
    cnx_annotation_space sp = space(3000, 2100, 10);
    enum { N = 300 };
    cnx_synapse *s = calloc(N, sizeof(*s));
    cnx_annotation_objects u = {NULL, 0}, o = {NULL, 0}, a = {NULL, 0};
    cnx_sharding specs[4];
    size_t counts[4] = {0, 0, 0, 0}, nshards = 0;
    static const char *const dirs[4] = {"by_id", "rel_pre_synaptic_cell",
                                        "rel_post_synaptic_cell", "spatial0"};
    (void)state;
    assert_non_null(s);
    for (int i = 0; i < N; i++)
        s[i] = syn(5 + (i * 37) % 2980, (i * 53) % 2090, i % 10,
                   (uint64_t)(1 + i % 97),
                   (uint64_t)(i % 5 == 0 ? 0 : 1000 + i % 89));
    assert_int_equal(
        cnx_annotation_build_layout(s, N, &sp, CNX_ANNOTATION_UNSHARDED, &u),
        0);
    assert_int_equal(
        cnx_annotation_build_layout(s, N, &sp, CNX_ANNOTATION_SHARDED, &o), 0);
    assert_int_equal(cnx_annotation_build(s, N, &sp, &a), 0);
    /* AUTO below CNX_ANNOTATION_SHARD_MIN: unsharded */
    assert_int_equal(a.count, u.count);
    assert_null(strstr((const char *)a.items[0].data, "sharding"));
    /* the info names each index's spec, the one the rule gives */
    assert_string_equal(o.items[0].name, "info");
    for (size_t i = 1; i < u.count; i++)
        for (int k = 0; k < 4; k++)
            if (strncmp(u.items[i].name, dirs[k], strlen(dirs[k])) == 0 &&
                u.items[i].name[strlen(dirs[k])] == '/')
                counts[k]++;
    assert_int_equal(counts[0], N);
    for (int k = 0; k < 4; k++) {
        uint64_t bytes = 0;
        for (size_t i = 1; i < u.count; i++)
            if (strncmp(u.items[i].name, dirs[k], strlen(dirs[k])) == 0 &&
                u.items[i].name[strlen(dirs[k])] == '/')
                bytes += u.items[i].len;
        cnx_annotation_sharding(counts[k], bytes, &specs[k]);
    }
    assert_true(specs[0].minishard_bits == 3); /* 300 ids: 8 minishards */
    assert_non_null(strstr((const char *)o.items[0].data,
                           "\"by_id\":{\"key\":\"by_id\",\"sharding\":"));
    assert_non_null(strstr((const char *)o.items[0].data,
                           "\"hash\":\"murmurhash3_x86_128\""));
    /* every other object is a shard file of one of the four indexes */
    for (size_t i = 1; i < o.count; i++) {
        const char *dot = strrchr(o.items[i].name, '.');
        assert_non_null(dot);
        assert_string_equal(dot, ".shard");
        nshards++;
    }
    assert_int_equal(nshards, 4); /* one shard per index at this size */
    /* each unsharded object is the chunk of its id in the shards */
    for (size_t i = 1; i < u.count; i++) {
        const char *name = u.items[i].name, *leaf = strchr(name, '/') + 1;
        uint64_t id = 0;
        uint8_t *data = NULL;
        size_t len = 0;
        int k = 0;
        mem_shards m;
        while (strncmp(name, dirs[k], strlen(dirs[k])) != 0 ||
               name[strlen(dirs[k])] != '/')
            k++;
        if (k == 3) {
            uint64_t pos[3];
            assert_int_equal(sscanf(leaf, "%" SCNu64 "_%" SCNu64 "_%" SCNu64,
                                    &pos[0], &pos[1], &pos[2]),
                             3);
            /* compressed Morton code over the 3 x 3 x 1 grid, by hand:
             * bits x0 y0 x1 y1 */
            id = (pos[0] & 1) | (pos[1] & 1) << 1 | (pos[0] >> 1 & 1) << 2 |
                 (pos[1] >> 1 & 1) << 3;
        } else {
            id = strtoull(leaf, NULL, 10);
        }
        m.o = &o;
        m.dir = dirs[k];
        assert_int_equal(
            cnx_sharded_read_chunk(&specs[k], id, mem_read, &m, &data, &len),
            0);
        assert_int_equal(len, u.items[i].len);
        assert_memory_equal(data, u.items[i].data, len);
        free(data);
    }
    cnx_annotation_objects_free(&u);
    cnx_annotation_objects_free(&o);
    cnx_annotation_objects_free(&a);
    free(s);
}

static void test_annotation__edges_params(void **state)
{
    cnx_annotation_layout l = CNX_ANNOTATION_SHARDED;
    (void)state;
    assert_int_equal(cnx_synapse_edges_params_parse(NULL, &l), 0);
    assert_int_equal(l, CNX_ANNOTATION_AUTO);
    assert_int_equal(cnx_synapse_edges_params_parse("{}", &l), 0);
    assert_int_equal(l, CNX_ANNOTATION_AUTO);
    assert_int_equal(
        cnx_synapse_edges_params_parse("{\"annotation_sharding\":\"on\"}", &l),
        0);
    assert_int_equal(l, CNX_ANNOTATION_SHARDED);
    assert_int_equal(
        cnx_synapse_edges_params_parse("{\"annotation_sharding\":\"off\"}", &l),
        0);
    assert_int_equal(l, CNX_ANNOTATION_UNSHARDED);
    assert_int_equal(
        cnx_synapse_edges_params_parse("{\"annotation_sharding\":true}", &l),
        CNX_ESCHEMA);
    assert_non_null(
        strstr(cnx_error_last()->message,
               "synapse-edges: parameters.annotation_sharding: must be"));
    assert_int_equal(cnx_synapse_edges_params_parse("{\"shard\":1}", &l),
                     CNX_ESCHEMA);
    assert_null(strchr(cnx_error_last()->message, '\n'));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_annotation__record_layout),
        cmocka_unit_test(test_annotation__by_id_entry),
        cmocka_unit_test(test_annotation__list_layout),
        cmocka_unit_test(test_annotation__collection),
        cmocka_unit_test(test_annotation__empty_table),
        cmocka_unit_test(test_annotation__refusals),
        cmocka_unit_test(test_annotation__sharding_rule),
        cmocka_unit_test(test_annotation__sharded),
        cmocka_unit_test(test_annotation__edges_params),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
