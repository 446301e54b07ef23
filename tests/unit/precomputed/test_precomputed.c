/*
 * Precomputed layers: info parsing (each field corrupted in turn), chunk
 * encode/decode, writing aligned volumes and reading arbitrary boxes back
 * from a different chunking, and bad stored data (truncated chunks, digest
 * mismatches, missing chunks) refused with specific errors.
 */
#include "cnx_test.h"

#include <jansson.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"

static const char *valid_info =
    "{\"@type\":\"neuroglancer_multiscale_volume\",\"type\":\"segmentation\","
    "\"data_type\":\"uint64\",\"num_channels\":1,\"scales\":[{\"key\":"
    "\"8_8_8\",\"size\":[100,60,40],\"resolution\":[8,8,8],\"voxel_offset\":"
    "[0,0,0],\"chunk_sizes\":[[64,64,32]],\"encoding\":"
    "\"compressed_segmentation\",\"compressed_segmentation_block_size\":"
    "[8,8,8]}],\"mesh\":\"mesh\"}";

static void test_precomputed__info_parses_and_round_trips(void **state)
{
    cnx_layer_info info, again;
    char *json;
    (void)state;
    assert_int_equal(cnx_info_parse(&info, valid_info, strlen(valid_info)), 0);
    assert_int_equal(info.type, CNX_LAYER_SEGMENTATION);
    assert_int_equal(info.dtype, CNX_DT_UINT64);
    assert_int_equal(info.scales[0].chunk[2], 32);
    assert_int_equal(info.scales[0].encoding, CNX_ENC_CSEG);
    assert_string_equal(info.mesh, "mesh");
    assert_int_equal(cnx_info_to_json(&info, &json), 0);
    assert_int_equal(cnx_info_parse(&again, json, strlen(json)), 0);
    assert_memory_equal(&info, &again, sizeof(info));
    free(json);
}

/* Members cnx does not use ("hidden", other tools' own) are kept and
 * written back; more of them than the room kept is refused, not cut. */
static void test_precomputed__unknown_members_are_kept(void **state)
{
    json_t *root = json_loads(valid_info, 0, NULL);
    json_t *scale = json_array_get(json_object_get(root, "scales"), 0);
    cnx_layer_info info, again;
    char *text, *json, big[CNX_SCALE_EXTRA_MAX + 16];
    json_t *back;
    (void)state;
    json_object_set_new(scale, "hidden", json_true());
    json_object_set_new(scale, "jpeg_quality", json_integer(80));
    json_object_set_new(root, "x_tool", json_pack("{s:[i,i]}", "v", 1, 2));
    text = json_dumps(root, 0);
    assert_int_equal(cnx_info_parse(&info, text, strlen(text)), 0);
    assert_string_equal(info.scales[0].extra, "{\"hidden\":true,\"jpeg_quality\":80}");
    assert_string_equal(info.extra, "{\"x_tool\":{\"v\":[1,2]}}");
    assert_int_equal(cnx_info_to_json(&info, &json), 0);
    back = json_loads(json, 0, NULL);
    assert_non_null(back);
    assert_true(json_is_true(json_object_get(
        json_array_get(json_object_get(back, "scales"), 0), "hidden")));
    assert_non_null(json_object_get(back, "x_tool"));
    assert_int_equal(cnx_info_parse(&again, json, strlen(json)), 0);
    assert_memory_equal(&info, &again, sizeof(info));
    json_decref(back);
    free(json);
    free(text);
    memset(big, 'a', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    json_object_set_new(scale, "note", json_string(big));
    text = json_dumps(root, 0);
    assert_int_equal(cnx_info_parse(&info, text, strlen(text)), CNX_ETOOBIG);
    assert_non_null(strstr(cnx_error_last()->message, "info: scales[0]"));
    free(text);
    json_decref(root);
}

struct corruption {
    const char *scale_key; /* NULL: top level */
    const char *key;
    const char *value;     /* NULL: delete */
    int code;
    const char *names;
};

static const struct corruption corruptions[] = {
    {NULL, "type", "\"volume\"", CNX_ECORRUPT, "type"},
    {NULL, "type", NULL, CNX_ECORRUPT, "type"},
    {NULL, "data_type", "\"int7\"", CNX_ECORRUPT, "data_type"},
    {NULL, "data_type", "\"float32\"", CNX_ECORRUPT, "data_type"},
    {NULL, "num_channels", "0", CNX_ECORRUPT, "num_channels"},
    {NULL, "num_channels", "2", CNX_ECORRUPT, "num_channels"},
    {NULL, "scales", "[]", CNX_ECORRUPT, "scales"},
    {NULL, "scales", "{}", CNX_ECORRUPT, "scales"},
    {NULL, "@type", "\"neuroglancer_legacy_mesh\"", CNX_ECORRUPT, "@type"},
    {NULL, "mesh", "\"../escape\"", CNX_ECORRUPT, "mesh"},
    {"0", "key", "\"../x\"", CNX_ECORRUPT, "scales[0].key"},
    {"0", "key", "5", CNX_ECORRUPT, "scales[0].key"},
    {"0", "size", "[100,60]", CNX_ECORRUPT, "scales[0].size"},
    {"0", "size", "[100,0,40]", CNX_ECORRUPT, "scales[0].size[1]"},
    {"0", "resolution", "[8,-8,8]", CNX_ECORRUPT, "scales[0].resolution[1]"},
    {"0", "voxel_offset", "[0,0]", CNX_ECORRUPT, "scales[0].voxel_offset"},
    {"0", "chunk_sizes", "[]", CNX_ECORRUPT, "scales[0].chunk_sizes"},
    {"0", "chunk_sizes", "[[64,0,32]]", CNX_ECORRUPT,
     "scales[0].chunk_sizes[0][1]"},
    {"0", "encoding", "\"lz4\"", CNX_ECORRUPT, "scales[0].encoding"},
    {"0", "encoding", "\"jpeg\"", CNX_EUNSUPPORTED, "scales[0].encoding"},
    {"0", "compressed_segmentation_block_size", NULL, CNX_ECORRUPT,
     "compressed_segmentation_block_size"},
    {"0", "sharding", "{\"@type\":\"neuroglancer_uint64_sharded_v1\"}",
     CNX_ECORRUPT, "sharding.preshift_bits"},
    {"0", "sharding", "{\"@type\":\"neuroglancer_uint64_sharded_v2\"}",
     CNX_ECORRUPT, "sharding.@type"},
    {"0", "encoding", "\"png\"", CNX_EUNSUPPORTED,
     "png is read for one channel of uint8 or uint16"},
};

static void test_precomputed__corrupt_info_names_the_field(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(corruptions) / sizeof(corruptions[0]);
         i++) {
        const struct corruption *c = &corruptions[i];
        json_t *root = json_loads(valid_info, 0, NULL);
        json_t *obj = c->scale_key
                          ? json_array_get(json_object_get(root, "scales"), 0)
                          : root;
        cnx_layer_info info;
        char *text;
        int rc;
        if (c->value == NULL)
            json_object_del(obj, c->key);
        else
            json_object_set_new(obj, c->key,
                                json_loads(c->value, JSON_DECODE_ANY, NULL));
        text = json_dumps(root, 0);
        rc = cnx_info_parse(&info, text, strlen(text));
        if (rc != c->code || !strstr(cnx_error_last()->message, c->names))
            fail_msg("corruption %zu (%s): rc %d message '%s'", i, c->key, rc,
                     cnx_error_last()->message);
        free(text);
        json_decref(root);
    }
    cnx_layer_info info;
    assert_int_equal(cnx_info_parse(&info, "{\"type\":", 8), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "info: malformed"));
}

/* Fill a volume with a value that encodes the global position. */
static uint64_t voxel_value(int64_t x, int64_t y, int64_t z)
{
    return (uint64_t)(x * 7 + y * 3) / 11 + ((uint64_t)z << 33);
}

static cnx_volume *make_volume(cnx_dtype dt, const cnx_box *box)
{
    cnx_volume *v;
    assert_int_equal(cnx_volume_new(&v, dt, box, 1), 0);
    for (int64_t z = box->min[2]; z < box->max[2]; z++)
        for (int64_t y = box->min[1]; y < box->max[1]; y++)
            for (int64_t x = box->min[0]; x < box->max[0]; x++) {
                int64_t i = cnx_volume_index(v, x, y, z, 0);
                uint64_t val = voxel_value(x, y, z);
                if (dt == CNX_DT_UINT8)
                    ((uint8_t *)v->data)[i] = (uint8_t)(val ^ (val >> 33));
                else
                    ((uint64_t *)v->data)[i] = val;
            }
    return v;
}

static void check_volume(const cnx_volume *v)
{
    cnx_volume *want = make_volume(v->dtype, &v->box);
    assert_memory_equal(v->data, want->data, cnx_volume_bytes(v));
    cnx_volume_free(want);
}

static void write_layer(const char *url, cnx_layer_type type, cnx_dtype dt,
                        const int64_t size[3], const int64_t chunk[3],
                        cnx_object_list *written)
{
    const double res[3] = {4, 4, 40};
    cnx_layer_info info;
    cnx_layer *layer;
    cnx_volume *v;
    cnx_box all = cnx_box_make(0, 0, 0, size[0], size[1], size[2]);
    cnx_info_init(&info, type, dt, size, res, chunk);
    assert_string_equal(info.scales[0].key, "4_4_40");
    assert_int_equal(cnx_layer_create(&layer, url, &info), 0);
    v = make_volume(dt, &all);
    assert_int_equal(cnx_layer_write(layer, 0, v, written), 0);
    cnx_volume_free(v);
    cnx_layer_free(layer);
}

static void test_precomputed__any_box_reads_back_exactly(void **state)
{
    static const cnx_dtype types[] = {CNX_DT_UINT8, CNX_DT_UINT64};
    char dir[64], url[128];
    (void)state;
    cnx_test_tmpdir(dir);
    for (int t = 0; t < 2; t++) {
        const int64_t size[3] = {100, 70, 33}, chunk[3] = {32, 64, 16};
        cnx_object_list written;
        cnx_layer *layer;
        uint64_t rng = 7;
        cnx_object_list_init(&written);
        snprintf(url, sizeof(url), "file://%s/layer%d", dir, t);
        write_layer(url, t ? CNX_LAYER_SEGMENTATION : CNX_LAYER_IMAGE,
                    types[t], size, chunk, &written);
        assert_int_equal(written.count, 4 * 2 * 3);
        assert_string_equal(written.items[0].name, "4_4_40/0-32_0-64_0-16");
        assert_string_equal(written.items[3].name, "4_4_40/96-100_0-64_0-16");
        assert_int_equal(cnx_layer_open(&layer, url), 0);
        for (int trial = 0; trial < 40; trial++) {
            cnx_box b;
            cnx_volume *v;
            for (int a = 0; a < 3; a++) {
                b.min[a] = (int64_t)(cnx_test_rand(&rng) % (uint64_t)size[a]);
                b.max[a] = b.min[a] + 1 +
                           (int64_t)(cnx_test_rand(&rng) %
                                     (uint64_t)(size[a] - b.min[a]));
            }
            assert_int_equal(
                cnx_layer_read(layer, 0, &b, 0, NULL, NULL, NULL, &v), 0);
            check_volume(v);
            cnx_volume_free(v);
        }
        cnx_box outside = cnx_box_make(90, 0, 0, 101, 10, 10);
        cnx_volume *v;
        assert_int_equal(
            cnx_layer_read(layer, 0, &outside, 0, NULL, NULL, NULL, &v),
            CNX_ERANGE);
        cnx_layer_free(layer);
        cnx_object_list_dispose(&written);
    }
    cnx_test_rmtree(dir);
}

static void test_precomputed__writes_are_aligned_and_write_once(void **state)
{
    char dir[64];
    const int64_t size[3] = {64, 64, 64}, chunk[3] = {32, 32, 32};
    const double res[3] = {8, 8, 8};
    cnx_layer_info info, other;
    cnx_layer *layer, *again;
    cnx_volume *v;
    cnx_box unaligned = cnx_box_make(16, 0, 0, 48, 32, 32);
    cnx_box aligned = cnx_box_make(32, 0, 0, 64, 32, 32);
    (void)state;
    cnx_test_tmpdir(dir);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    assert_int_equal(cnx_layer_create(&layer, dir, &info), 0);
    /* Creating the same layer again is an idempotent no-op... */
    assert_int_equal(cnx_layer_create(&again, dir, &info), 0);
    cnx_layer_free(again);
    /* ...a different one is refused. */
    other = info;
    other.scales[0].chunk[0] = 64;
    assert_int_equal(cnx_layer_create(&again, dir, &other), CNX_EIMMUTABLE);
    v = make_volume(CNX_DT_UINT8, &unaligned);
    assert_int_equal(cnx_layer_write(layer, 0, v, NULL), CNX_EINVAL);
    assert_non_null(strstr(cnx_error_last()->message, "not aligned"));
    cnx_volume_free(v);
    v = make_volume(CNX_DT_UINT8, &aligned);
    assert_int_equal(cnx_layer_write(layer, 0, v, NULL), 0);
    assert_int_equal(cnx_layer_write(layer, 0, v, NULL), 0);
    ((uint8_t *)v->data)[5] ^= 1;
    assert_int_equal(cnx_layer_write(layer, 0, v, NULL), CNX_EIMMUTABLE);
    cnx_volume_free(v);
    v = make_volume(CNX_DT_UINT64, &aligned);
    assert_int_equal(cnx_layer_write(layer, 0, v, NULL), CNX_EINVAL);
    cnx_volume_free(v);
    cnx_layer_free(layer);
    cnx_test_rmtree(dir);
}

/* Expected digests keyed by object name, for the expect callback. */
static const char *expect_from_list(void *ctx, const char *name)
{
    const cnx_object_list *list = ctx;
    for (size_t i = 0; i < list->count; i++)
        if (strcmp(list->items[i].name, name) == 0)
            return list->items[i].digest;
    return NULL;
}

static void corrupt_file(const char *dir, const char *layer, const char *name,
                         long keep, int flip)
{
    char path[2048];
    FILE *f;
    snprintf(path, sizeof(path), "%s/%s/%s", dir, layer, name);
    if (keep >= 0)
        assert_int_equal(truncate(path, keep), 0);
    if (flip) {
        f = fopen(path, "r+b");
        assert_non_null(f);
        fseek(f, 9, SEEK_SET);
        int c = fgetc(f);
        fseek(f, 9, SEEK_SET);
        fputc(c ^ 0x40, f);
        fclose(f);
    }
}

static void test_precomputed__bad_chunks_are_refused(void **state)
{
    char dir[64], url[128];
    const int64_t size[3] = {64, 64, 16}, chunk[3] = {32, 32, 16};
    cnx_object_list written, read;
    cnx_layer *layer;
    cnx_volume *v = NULL;
    cnx_box all = cnx_box_make(0, 0, 0, 64, 64, 16);
    (void)state;
    cnx_test_tmpdir(dir);
    for (int t = 0; t < 2; t++) {
        const char *lname = t ? "seg" : "img";
        cnx_object_list_init(&written);
        cnx_object_list_init(&read);
        snprintf(url, sizeof(url), "file://%s/%s", dir, lname);
        write_layer(url, t ? CNX_LAYER_SEGMENTATION : CNX_LAYER_IMAGE,
                    t ? CNX_DT_UINT64 : CNX_DT_UINT8, size, chunk, &written);
        assert_int_equal(cnx_layer_open(&layer, url), 0);
        /* Clean read with expectations: records what it read. */
        assert_int_equal(cnx_layer_read(layer, 0, &all, 0, expect_from_list,
                                        &written, &read, &v),
                         0);
        assert_int_equal(read.count, 4);
        assert_string_equal(read.items[2].digest, written.items[2].digest);
        cnx_volume_free(v);
        /* A flipped byte: the digest check catches it. */
        corrupt_file(dir, lname, written.items[1].name, -1, 1);
        assert_int_equal(cnx_layer_read(layer, 0, &all, 0, expect_from_list,
                                        &written, NULL, &v),
                         CNX_EDIGEST);
        assert_non_null(strstr(cnx_error_last()->message,
                               written.items[1].name));
        assert_null(v);
        /* A truncated chunk without expectations: a decode error. */
        corrupt_file(dir, lname, written.items[2].name, 100, 0);
        cnx_box third = cnx_box_make(0, 32, 0, 32, 64, 16);
        assert_int_equal(
            cnx_layer_read(layer, 0, &third, 0, NULL, NULL, NULL, &v),
            CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "0-32_32-64_0-16"));
        /* A missing chunk: not found, or zeros when asked. */
        char path[2048];
        snprintf(path, sizeof(path), "%s/%s/%s", dir, lname,
                 written.items[3].name);
        assert_int_equal(unlink(path), 0);
        cnx_box last = cnx_box_make(40, 40, 0, 50, 50, 16);
        assert_int_equal(
            cnx_layer_read(layer, 0, &last, 0, NULL, NULL, NULL, &v),
            CNX_ENOTFOUND);
        assert_int_equal(cnx_layer_read(layer, 0, &last, CNX_READ_FILL_MISSING,
                                        NULL, NULL, NULL, &v),
                         0);
        for (size_t i = 0; i < cnx_volume_bytes(v); i++)
            assert_int_equal(((uint8_t *)v->data)[i], 0);
        cnx_volume_free(v);
        cnx_layer_free(layer);
        cnx_object_list_dispose(&written);
        cnx_object_list_dispose(&read);
    }
    /* A corrupt info makes the layer refuse to open, naming the layer. */
    snprintf(url, sizeof(url), "%s/img/info", dir);
    FILE *f = fopen(url, "wb");
    fputs("{\"type\":\"image\",", f);
    fclose(f);
    snprintf(url, sizeof(url), "file://%s/img", dir);
    assert_int_equal(cnx_layer_open(&layer, url), CNX_ECORRUPT);
    assert_non_null(strstr(cnx_error_last()->message, "info: malformed"));
    snprintf(url, sizeof(url), "file://%s/none", dir);
    assert_int_equal(cnx_layer_open(&layer, url), CNX_ENOTFOUND);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_precomputed__info_parses_and_round_trips),
        cmocka_unit_test(test_precomputed__corrupt_info_names_the_field),
        cmocka_unit_test(test_precomputed__unknown_members_are_kept),
        cmocka_unit_test(test_precomputed__any_box_reads_back_exactly),
        cmocka_unit_test(test_precomputed__writes_are_aligned_and_write_once),
        cmocka_unit_test(test_precomputed__bad_chunks_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
