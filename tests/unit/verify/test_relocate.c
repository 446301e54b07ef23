/*
 * The relocation of a moved dataset's names (verify_util.c): which root a
 * layer written as L and found under L' was moved from and to (the longest
 * common suffix of whole path components), how a name under the old root
 * is read under the new one, and which of several relocations applies
 * (the longest root). Table-driven: file to file, file to s3 (the bucket
 * is never taken for a path component), nested layers, to and from the
 * root, no common suffix, and names that share a prefix but not a
 * component ("ds1" against "xds1", "/data" against "/database").
 */
#include "cnx_test.h"

#include "cnx/error.h"
#include "verify_int.h"

typedef struct derive_case {
    const char *written, *found;
    int rc;           /* 1 derived, 0 none, < 0 error */
    const char *from; /* when derived */
    const char *to;
} derive_case;

static const derive_case derive_cases[] = {
    /* file to file: the dataset copied to another directory */
    {"file:///data/ds/seg/v1", "file:///backup/ds/seg/v1", 1, "file:///data",
     "file:///backup"},
    /* ... under another name: only the layer's own place matches */
    {"file:///data/ds/seg/v1", "file:///copies/ds2/seg/v1", 1,
     "file:///data/ds", "file:///copies/ds2"},
    /* file to s3: the bucket is the authority, not a component */
    {"file:///data/ds/seg/v1", "s3://bucket/ds/seg/v1", 1, "file:///data",
     "s3://bucket"},
    {"file:///data/ds/seg/v1", "s3://bucket/archive/2026/ds/seg/v1", 1,
     "file:///data", "s3://bucket/archive/2026"},
    {"file:///data/bucket/ds/seg", "s3://bucket/ds/seg", 1,
     "file:///data/bucket", "s3://bucket"},
    /* bucket to bucket, s3 to gs, to http */
    {"s3://old-bucket/ds/seg/v1", "s3://new-bucket/ds/seg/v1", 1,
     "s3://old-bucket", "s3://new-bucket"},
    {"s3://a-bucket/ds/seg", "gs://b-bucket/x/ds/seg", 1, "s3://a-bucket",
     "gs://b-bucket/x"},
    {"file:///d/ds/seg", "https://data.example.org:8443/p/ds/seg", 1,
     "file:///d", "https://data.example.org:8443/p"},
    /* nested layers: every matching component belongs to the layer */
    {"file:///d/ds/pyramid/v1", "file:///e/f/ds/pyramid/v1", 1, "file:///d",
     "file:///e/f"},
    {"file:///a/seg/seg", "file:///b/seg/seg", 1, "file:///a", "file:///b"},
    /* to and from the root */
    {"file:///ds/seg", "file:///mnt/ds/seg", 1, "file:///", "file:///mnt"},
    {"file:///mnt/ds/seg", "file:///ds/seg", 1, "file:///mnt", "file:///"},
    {"file:///ds/seg", "s3://bucket/ds/seg", 1, "file:///", "s3://bucket"},
    /* a component matches whole or not at all */
    {"file:///x/ds1/seg", "file:///x/xds1/seg", 1, "file:///x/ds1",
     "file:///x/xds1"},
    {"file:///x/ds1/seg", "file:///x/ds1/xseg", 0, NULL, NULL},
    {"file:///x/ds1/seg", "file:///x/ds1/seg2", 0, NULL, NULL},
    /* no common suffix: another layer, not a move */
    {"file:///data/ds/seg/v1", "file:///data/ds/seg/v2", 0, NULL, NULL},
    {"s3://bucket/ds/seg", "s3://bucket/ds/img", 0, NULL, NULL},
    /* the same layer (also spelled another way) */
    {"file:///data/ds/seg", "file:///data/ds/seg", 0, NULL, NULL},
    {"file:///data/ds/seg", "file:///data//ds/seg/", 0, NULL, NULL},
    /* not URLs */
    {"not a url", "file:///data/ds/seg", CNX_EINVAL, NULL, NULL},
    {"file:///data/ds/seg", "ftp://host/ds/seg", CNX_EINVAL, NULL, NULL},
};

static void test_relocate__derive_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(derive_cases) / sizeof(derive_cases[0]);
         i++) {
        const derive_case *c = &derive_cases[i];
        char from[CNX_URL_MAX], to[CNX_URL_MAX];
        int rc = cnx__verify_reloc_derive(c->written, c->found, from, to);
        if (rc != c->rc)
            fail_msg("%s found as %s: %d, expected %d (%s)", c->written,
                     c->found, rc, c->rc, cnx_error_last()->message);
        if (rc != 1)
            continue;
        if (strcmp(from, c->from) != 0 || strcmp(to, c->to) != 0)
            fail_msg("%s found as %s: %s -> %s, expected %s -> %s", c->written,
                     c->found, from, to, c->from, c->to);
    }
}

/* Whatever is derived maps the layer as written onto the layer as found. */
static void test_relocate__derived_maps_written_onto_found(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(derive_cases) / sizeof(derive_cases[0]);
         i++) {
        const derive_case *c = &derive_cases[i];
        char from[CNX_URL_MAX], to[CNX_URL_MAX], *moved = NULL;
        vf_reloc r;
        cnx_url found;
        if (c->rc != 1)
            continue;
        assert_int_equal(
            cnx__verify_reloc_derive(c->written, c->found, from, to), 1);
        r.from = from;
        r.to = to;
        assert_int_equal(cnx__verify_reloc_apply(&r, c->written, &moved), 1);
        assert_int_equal(cnx_url_parse(&found, c->found, 0), 0);
        assert_string_equal(moved, found.canonical);
        free(moved);
    }
}

typedef struct apply_case {
    const char *from, *to, *url;
    int rc;
    const char *moved;
} apply_case;

static void test_relocate__apply_table(void **state)
{
    static const apply_case cases[] = {
        {"file:///data", "s3://bucket/archive",
         "file:///data/ds/seg/v1/8_8_8/0-64_0-64_0-64", 1,
         "s3://bucket/archive/ds/seg/v1/8_8_8/0-64_0-64_0-64"},
        {"file:///data", "s3://bucket/archive", "file:///data", 1,
         "s3://bucket/archive"},
        {"file:///data", "file:///copy", "file:///data/ds/raw/8_8_8/x", 1,
         "file:///copy/ds/raw/8_8_8/x"},
        /* a prefix that is not a component: not under it */
        {"file:///data", "file:///copy", "file:///database/x", 0, NULL},
        {"file:///x/ds1", "file:///y/ds1", "file:///x/ds10/seg/a", 0, NULL},
        {"file:///data", "file:///copy", "file:///other/x", 0, NULL},
        {"file:///data", "file:///copy", "s3://data/x", 0, NULL},
        /* from the root, and to it */
        {"file:///", "file:///mnt", "file:///ds/seg/a", 1,
         "file:///mnt/ds/seg/a"},
        {"file:///mnt", "file:///", "file:///mnt/ds/seg/a", 1,
         "file:///ds/seg/a"},
        {"s3://bucket", "file:///restore", "s3://bucket/ds/seg/a", 1,
         "file:///restore/ds/seg/a"},
        {"s3://bucket", "file:///restore", "s3://bucket2/ds/seg/a", 0, NULL},
    };
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const apply_case *c = &cases[i];
        vf_reloc r;
        char *moved = NULL;
        int rc;
        memset(&r, 0, sizeof(r));
        r.from = (char *)c->from;
        r.to = (char *)c->to;
        rc = cnx__verify_reloc_apply(&r, c->url, &moved);
        if (rc != c->rc)
            fail_msg("%s by %s -> %s: %d, expected %d", c->url, c->from, c->to,
                     rc, c->rc);
        if (c->moved == NULL)
            assert_null(moved);
        else if (moved == NULL || strcmp(moved, c->moved) != 0)
            fail_msg("%s by %s -> %s: %s, expected %s", c->url, c->from, c->to,
                     moved ? moved : "(none)", c->moved);
        free(moved);
    }
}

static void test_relocate__longest_root_wins(void **state)
{
    vf_reloc list[3];
    (void)state;
    memset(list, 0, sizeof(list));
    list[0].from = "file:///data";
    list[0].to = "file:///a";
    list[1].from = "file:///data/ds";
    list[1].to = "file:///b";
    list[2].from = "file:///data/ds";
    list[2].to = "file:///c"; /* equal roots: the first wins */
    assert_ptr_equal(cnx__verify_reloc_find(list, 3, "file:///data/ds/x"),
                     &list[1]);
    assert_ptr_equal(cnx__verify_reloc_find(list, 3, "file:///data/ds"),
                     &list[1]);
    assert_ptr_equal(cnx__verify_reloc_find(list, 3, "file:///data/dsx/y"),
                     &list[0]);
    assert_ptr_equal(cnx__verify_reloc_find(list, 3, "file:///data/other"),
                     &list[0]);
    assert_null(cnx__verify_reloc_find(list, 3, "file:///dat/x"));
    assert_null(cnx__verify_reloc_find(list, 0, "file:///data/x"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relocate__derive_table),
        cmocka_unit_test(test_relocate__derived_maps_written_onto_found),
        cmocka_unit_test(test_relocate__apply_table),
        cmocka_unit_test(test_relocate__longest_root_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
