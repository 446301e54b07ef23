/*
 * Tile sets: a good set loads, serialises canonically and records into a
 * store (tiles copied write-once, tiles.json with digests and store names,
 * re-recording a no-op, the recorded set loadable again); every kind of bad
 * set is refused with its own code and a message that says what and where.
 */
#include "cnx_test.h"

#include <sys/stat.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/store.h"
#include "cnx/tileset.h"

/* clang-format off */
#define TILE(id, file, x, y, w, h)                                            \
    "{\"id\":\"" id "\",\"file\":\"" file "\",\"x\":" #x ",\"y\":" #y         \
    ",\"width\":" #w ",\"height\":" #h "}"
#define TILE_SHA(id, file, x, y, w, h, sha)                                   \
    "{\"id\":\"" id "\",\"file\":\"" file "\",\"x\":" #x ",\"y\":" #y         \
    ",\"width\":" #w ",\"height\":" #h ",\"sha256\":\"" sha "\"}"
/* A 2x2 grid of 64-pixel tiles overlapping by 10 pixels. */
#define GRID                                                                  \
    TILE("a", "z0/a.png", 0, 0, 64, 64) ","                                   \
    TILE("b", "z0/b.png", 54, 0, 64, 64) ","                                  \
    TILE("c", "z0/c.png", 0, 54, 64, 64) ","                                  \
    TILE("d", "z0/d.png", 54, 54, 64, 64)
#define DOC2(z0, tiles0, z1, tiles1)                                          \
    "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,4,50],\"dtype\":"       \
    "\"uint8\",\"sections\":[{\"z\":" #z0 ",\"tiles\":[" tiles0 "]},{\"z\":" \
    #z1 ",\"tiles\":[" tiles1 "]}]}"
#define TILE_E TILE("e", "z1/e.png", 0, 0, 64, 64)
#define DOC_WITH(tiles0) DOC2(0, tiles0, 1, TILE_E)
/* clang-format on */
#define ZEROS "0000000000000000000000000000000000000000000000000000000000000000"

typedef struct fixture {
    char dir[64];
    char path[256];
} fixture;

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (len > 0)
        assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static const char *fpath(fixture *f, const char *name)
{
    snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
    return f->path;
}

static void write_png(fixture *f, const char *name, int64_t w, int64_t h,
                      int bits, uint64_t seed, size_t cut)
{
    cnx_image img = {w, h, bits, NULL};
    size_t n = (size_t)(w * h) * (size_t)(bits / 8);
    uint8_t *png;
    size_t len;
    img.pixels = malloc(n);
    assert_non_null(img.pixels);
    for (size_t i = 0; i < n; i++)
        ((uint8_t *)img.pixels)[i] = (uint8_t)cnx_test_rand(&seed);
    assert_int_equal(cnx_png_encode(&img, &png, &len), 0);
    write_file(fpath(f, name), png, cut != 0 && cut < len ? cut : len);
    free(png);
    free(img.pixels);
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    char dir[300];
    cnx_test_tmpdir(f->dir);
    snprintf(dir, sizeof(dir), "%s/z0", f->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    snprintf(dir, sizeof(dir), "%s/z1", f->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_png(f, "z0/a.png", 64, 64, 8, 1, 0);
    write_png(f, "z0/b.png", 64, 64, 8, 2, 0);
    write_png(f, "z0/c.png", 64, 64, 8, 3, 0);
    write_png(f, "z0/d.png", 64, 64, 8, 4, 0);
    write_png(f, "z1/e.png", 64, 64, 8, 5, 0);
    write_png(f, "z0/deep.png", 64, 64, 16, 6, 0);
    write_png(f, "z0/cut.png", 64, 64, 8, 7, 300);
    write_file(fpath(f, "z0/text.png"), "not an image\n", 13);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cnx_test_rmtree(f->dir);
    free(f);
    return 0;
}

static int load_doc(fixture *f, const char *doc, cnx_tileset **ts,
                    int64_t max_error)
{
    write_file(fpath(f, "tiles.json"), doc, strlen(doc));
    return cnx_tileset_load(ts, f->path, max_error);
}

static void test_tileset__good_set_loads_with_digests(void **state)
{
    fixture *f = *state;
    cnx_tileset *ts = NULL;
    uint8_t *bytes;
    size_t len;
    char want[CNX_DIGEST_LEN];
    FILE *fp;

    if (load_doc(f, DOC_WITH(GRID), &ts, CNX_TILESET_MAX_ERROR) != 0)
        fail_msg("%s", cnx_error_last()->message);
    assert_int_equal(ts->nsections, 2);
    assert_int_equal(ts->sections[0].ntiles, 4);
    assert_int_equal(ts->sections[1].z, 1);
    assert_int_equal(ts->dtype, CNX_DT_UINT8);
    assert_true(ts->resolution[2] == 50.0);
    assert_string_equal(ts->sections[0].tiles[1].id, "b");
    assert_int_equal(ts->sections[0].tiles[1].x, 54);
    /* The check recorded the digest of each file's bytes. */
    fp = fopen(fpath(f, "z0/b.png"), "rb");
    assert_non_null(fp);
    bytes = malloc(1 << 20);
    len = fread(bytes, 1, 1 << 20, fp);
    fclose(fp);
    cnx_digest(bytes, len, want);
    free(bytes);
    assert_string_equal(ts->sections[0].tiles[1].sha256, want);
    cnx_tileset_free(ts);
}

static void test_tileset__json_is_canonical_and_round_trips(void **state)
{
    const char *doc = DOC_WITH(GRID);
    cnx_tileset *ts, *again;
    char *json, *json2;
    (void)state;
    assert_int_equal(cnx_tileset_parse(&ts, doc, strlen(doc), "t.json", 25), 0);
    assert_int_equal(cnx_tileset_to_json(ts, &json), 0);
    /* Sorted keys, no whitespace, integral resolutions stay integers. */
    assert_non_null(strstr(json, "{\"dtype\":\"uint8\",\"format\":\"cnx."
                                 "tileset/1\",\"resolution\":[4,4,50],"
                                 "\"sections\":[{\"tiles\":[{\"file\":\"z0/"
                                 "a.png\",\"height\":64,\"id\":\"a\","
                                 "\"width\":64,\"x\":0,\"y\":0}"));
    assert_null(strchr(json, ' '));
    assert_null(strstr(json, "sha256"));
    assert_int_equal(
        cnx_tileset_parse(&again, json, strlen(json), "t.json", 25), 0);
    assert_int_equal(cnx_tileset_to_json(again, &json2), 0);
    assert_string_equal(json, json2);
    free(json);
    free(json2);
    cnx_tileset_free(ts);
    cnx_tileset_free(again);
}

static void
test_tileset__record_copies_tiles_and_writes_tiles_json(void **state)
{
    fixture *f = *state;
    cnx_tileset *ts = NULL, *recorded = NULL;
    cnx_tileset_stats stats;
    cnx_store *store;
    char url[300], base[300], *json;
    uint8_t *got, *orig;
    size_t got_len, orig_len;
    FILE *fp;

    assert_int_equal(load_doc(f, DOC_WITH(GRID), &ts, 25), 0);
    snprintf(url, sizeof(url), "file://%s/store", f->dir);
    if (cnx_tileset_record(ts, f->dir, url, &stats) != 0)
        fail_msg("%s", cnx_error_last()->message);
    assert_int_equal(stats.tiles, 5);
    assert_int_equal(stats.sections, 2);
    assert_true(stats.bytes > 5 * 64 * 64 / 2);
    assert_true(cnx_digest_valid(stats.digest));
    assert_string_equal(ts->sections[0].tiles[0].file, "tiles/z0/a.png");

    assert_int_equal(cnx_store_open(&store, url), 0);
    assert_int_equal(cnx_store_get(store, "tiles/z0/c.png", 0, &got, &got_len),
                     0);
    fp = fopen(fpath(f, "z0/c.png"), "rb");
    assert_non_null(fp);
    orig = malloc(1 << 20);
    orig_len = fread(orig, 1, 1 << 20, fp);
    fclose(fp);
    assert_int_equal(got_len, orig_len);
    assert_memory_equal(got, orig, orig_len);
    free(got);
    free(orig);

    /* tiles.json: the same set with digests and store names, canonical. */
    assert_int_equal(cnx_store_get(store, "tiles.json", 0, &got, &got_len), 0);
    assert_int_equal(cnx_tileset_to_json(ts, &json), 0);
    assert_int_equal(strlen(json), got_len);
    assert_memory_equal(json, got, got_len);
    assert_non_null(strstr(json, "\"file\":\"tiles/z1/e.png\""));
    assert_non_null(strstr(json, "\"sha256\":\"sha256:"));
    {
        char d[CNX_DIGEST_LEN];
        cnx_digest(got, got_len, d);
        assert_string_equal(d, stats.digest);
    }
    free(json);
    free(got);
    cnx_store_free(store);

    /* The recorded set loads from the store's directory (and so checks
     * every digest), and re-recording it elsewhere is deterministic. */
    snprintf(base, sizeof(base), "%s/store/tiles.json", f->dir);
    if (cnx_tileset_load(&recorded, base, 25) != 0)
        fail_msg("%s", cnx_error_last()->message);
    cnx_tileset_free(recorded);

    /* Recording again is a no-op success. */
    cnx_tileset_free(ts);
    assert_int_equal(load_doc(f, DOC_WITH(GRID), &ts, 25), 0);
    assert_int_equal(cnx_tileset_record(ts, f->dir, url, NULL), 0);
    cnx_tileset_free(ts);
}

static void
test_tileset__record_refuses_a_file_changed_since_check(void **state)
{
    fixture *f = *state;
    cnx_tileset *ts = NULL;
    char url[300];
    int exists = 1;
    cnx_store *store;
    assert_int_equal(load_doc(f, DOC_WITH(GRID), &ts, 25), 0);
    write_png(f, "z0/d.png", 64, 64, 8, 99, 0);
    snprintf(url, sizeof(url), "file://%s/store2", f->dir);
    assert_int_equal(cnx_tileset_record(ts, f->dir, url, NULL), CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "tile 'd'"));
    assert_int_equal(cnx_store_open(&store, url), 0);
    assert_int_equal(cnx_store_exists(store, "tiles.json", &exists), 0);
    assert_int_equal(exists, 0);
    cnx_store_free(store);
    cnx_tileset_free(ts);
}

typedef struct bad_case {
    const char *name;
    const char *doc;
    int64_t max_error;
    int code;
    const char *needle;
} bad_case;

static const bad_case bad_cases[] = {
    {"missing file",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/nope.png",
                                                           54, 0, 64, 64)),
     25, CNX_ENOTFOUND, "tile 'b' (sections[0].tiles[1]): "},
    {"size mismatch",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 60) "," TILE("b", "z0/b.png", 54,
                                                           0, 64, 64)),
     25, CNX_EINVAL, "a.png is 64x64 pixels, the tile set says 64x60"},
    {"duplicate id",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("a", "z0/b.png", 54,
                                                           0, 64, 64)),
     25, CNX_EINVAL,
     "sections[0].tiles[1]: duplicate id 'a' repeats "
     "sections[0].tiles[0]"},
    {"duplicate id across sections",
     DOC2(0, TILE("e", "z0/a.png", 0, 0, 64, 64), 1, TILE_E), 25, CNX_EINVAL,
     "sections[1].tiles[0]: duplicate id 'e' repeats sections[0].tiles[0]"},
    {"duplicate file",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/a.png", 54,
                                                           0, 64, 64)),
     25, CNX_EINVAL, "duplicate file 'z0/a.png'"},
    {"dot-dot",
     DOC_WITH(TILE("a", "../x.png", 0, 0, 64, 64) "," TILE("b", "z0/b.png", 54,
                                                           0, 64, 64)),
     25, CNX_ENAME,
     "sections[0].tiles[0].file: object name '../x.png' has "
     "a '..' component"},
    {"absolute path",
     DOC_WITH(TILE("a", "/etc/passwd", 0, 0, 64, 64) "," TILE("b", "z0/b.png",
                                                              54, 0, 64, 64)),
     25, CNX_ENAME,
     "sections[0].tiles[0].file: object name '/etc/passwd' "
     "is absolute"},
    {"unknown tile key",
     DOC_WITH("{\"id\":\"a\",\"file\":\"z0/a.png\",\"x\":0,\"y\":0,"
              "\"width\":64,\"height\":64,\"colour\":1}"),
     25, CNX_ESCHEMA, "sections[0].tiles[0]: unknown key 'colour'"},
    {"unknown top-level key",
     "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,4,50],\"dtype\":"
     "\"uint8\",\"extra\":true,\"sections\":[]}",
     25, CNX_ESCHEMA, "unknown key 'extra'"},
    {"unknown section key",
     "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,4,50],\"dtype\":"
     "\"uint8\",\"sections\":[{\"z\":0,\"angle\":0,\"tiles\":[]}]}",
     25, CNX_ESCHEMA, "sections[0]: unknown key 'angle'"},
    {"no overlap",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE(
         "b", "z0/b.png", 54, 0, 64, 64) "," TILE("c", "z0/c.png", 500, 500, 64,
                                                  64)),
     25, CNX_EINVAL, "tile 'c' at (500, 500), 64x64, overlaps no other tile"},
    {"gap beyond the tolerance",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/b.png", 74,
                                                           0, 64, 64)),
     5, CNX_EINVAL, "tile 'a' at (0, 0), 64x64, overlaps no other tile"},
    {"tiles nearly coincide",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/b.png", 2,
                                                           1, 64, 64)),
     0, CNX_EINVAL, "tiles 'a' and 'b' overlap by more than 90%"},
    {"wrong digest",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE_SHA(
         "b", "z0/b.png", 54, 0, 64, 64, "sha256:" ZEROS)),
     25, CNX_EDIGEST, "tile 'b'"},
    {"malformed digest",
     DOC_WITH(TILE_SHA("a", "z0/a.png", 0, 0, 64, 64, "md5:1234")), 25,
     CNX_ESCHEMA, "sections[0].tiles[0].sha256: must be"},
    {"duplicate z", DOC2(1, TILE("a", "z0/a.png", 0, 0, 64, 64), 1, TILE_E), 25,
     CNX_EINVAL, "sections[1]: duplicate z 1 (also sections[0])"},
    {"wrong format",
     "{\"format\":\"cnx.tileset/2\",\"resolution\":[4,4,50],\"dtype\":"
     "\"uint8\",\"sections\":[]}",
     25, CNX_ESCHEMA,
     "format: expected \"cnx.tileset/1\", got "
     "\"cnx.tileset/2\""},
    {"missing key",
     DOC_WITH("{\"id\":\"a\",\"file\":\"z0/a.png\",\"x\":0,"
              "\"width\":64,\"height\":64}"),
     25, CNX_ESCHEMA, "sections[0].tiles[0]: missing key 'y'"},
    {"real position", DOC_WITH(TILE("a", "z0/a.png", 0.5, 0, 64, 64)), 25,
     CNX_ESCHEMA, "x and y must be integers"},
    {"zero width", DOC_WITH(TILE("a", "z0/a.png", 0, 0, 0, 64)), 25,
     CNX_ESCHEMA, "width and height must be integers in [1, 65536]"},
    {"bad dtype",
     "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,4,50],\"dtype\":"
     "\"float32\",\"sections\":[]}",
     25, CNX_ESCHEMA, "dtype: must be"},
    {"bad resolution",
     "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,0,50],\"dtype\":"
     "\"uint8\",\"sections\":[]}",
     25, CNX_ESCHEMA, "resolution: must be an array of 3 positive"},
    {"no sections",
     "{\"format\":\"cnx.tileset/1\",\"resolution\":[4,4,50],\"dtype\":"
     "\"uint8\",\"sections\":[]}",
     25, CNX_ESCHEMA, "sections: must be a non-empty array"},
    {"malformed JSON", "{\"format\":", 25, CNX_ESCHEMA, "malformed JSON"},
    {"duplicate key",
     "{\"format\":\"cnx.tileset/1\",\"format\":\"cnx.tileset/1\"}", 25,
     CNX_ESCHEMA, "malformed JSON"},
    {"depth mismatch",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/deep.png",
                                                           54, 0, 64, 64)),
     25, CNX_EINVAL, "deep.png is 16-bit, the tile set says uint8"},
    {"truncated tile",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/cut.png",
                                                           54, 0, 64, 64)),
     25, CNX_ECORRUPT, "cut.png: truncated PNG"},
    {"not an image",
     DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE("b", "z0/text.png",
                                                           54, 0, 64, 64)),
     25, CNX_EUNSUPPORTED, "text.png: not a PNG or TIFF file"},
};

static void
test_tileset__bad_sets_are_refused_with_specific_messages(void **state)
{
    fixture *f = *state;
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const bad_case *c = &bad_cases[i];
        cnx_tileset *ts = (cnx_tileset *)&ts;
        int rc = load_doc(f, c->doc, &ts, c->max_error);
        const char *msg = cnx_error_last()->message;
        if (rc != c->code)
            fail_msg("%s: rc %s, want %s (%s)", c->name, cnx_error_name(rc),
                     cnx_error_name(c->code), msg);
        if (strstr(msg, c->needle) == NULL)
            fail_msg("%s: message '%s' lacks '%s'", c->name, msg, c->needle);
        /* Every message names the document. */
        if (strstr(msg, "tiles.json") == NULL)
            fail_msg("%s: message '%s' does not name the file", c->name, msg);
        assert_null(ts);
    }
}

static void test_tileset__tolerance_admits_small_gaps(void **state)
{
    /* A 10 px gap is a plausible overlap if positions may be 25 px off. */
    const char *doc = DOC_WITH(TILE("a", "z0/a.png", 0, 0, 64, 64) "," TILE(
        "b", "z0/b.png", 74, 3, 64, 64));
    cnx_tileset *ts;
    (void)state;
    assert_int_equal(cnx_tileset_parse(&ts, doc, strlen(doc), "t", 25), 0);
    cnx_tileset_free(ts);
    assert_int_equal(cnx_tileset_parse(&ts, doc, strlen(doc), "t", 11), 0);
    cnx_tileset_free(ts);
    assert_int_equal(cnx_tileset_parse(&ts, doc, strlen(doc), "t", 10),
                     CNX_EINVAL);
    assert_int_equal(cnx_tileset_parse(&ts, doc, strlen(doc), "t", -1),
                     CNX_EINVAL);
    cnx_tileset_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_tileset__good_set_loads_with_digests, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tileset__json_is_canonical_and_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tileset__record_copies_tiles_and_writes_tiles_json, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_tileset__record_refuses_a_file_changed_since_check, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_tileset__bad_sets_are_refused_with_specific_messages, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_tileset__tolerance_admits_small_gaps, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
