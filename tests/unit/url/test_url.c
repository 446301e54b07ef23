/*
 * cnx/url.h: parsing and canonical forms of every scheme (tables of valid
 * and invalid URLs, one row per rule), relative plain paths, object names,
 * join, component-wise under, and split_object.
 */
#include "cnx_test.h"

#include <limits.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/url.h"

#define P CNX_URL_ALLOW_PATH

/* The last error is one line and contains want. */
static void assert_error_says(const char *want)
{
    const char *msg = cnx_error_last()->message;
    if (strstr(msg, want) == NULL)
        fail_msg("message '%s' does not say '%s'", msg, want);
    assert_null(strchr(msg, '\n'));
}

struct valid {
    const char *in;
    unsigned flags;
    const char *canonical;
};

static const struct valid valid[] = {
    /* file:// */
    {"file:///data/ds", 0, "file:///data/ds"},
    {"file:///data/ds/", 0, "file:///data/ds"},
    {"file:////data//ds//", 0, "file:///data/ds"},
    {"file:///", 0, "file:///"},
    {"file:////", 0, "file:///"},
    {"FILE:///x", 0, "file:///x"},
    {"file:///a b/c%20d/e@f", 0, "file:///a b/c%20d/e@f"},
    {"file:///.../a..b/.hidden", 0, "file:///.../a..b/.hidden"},
    {"file:///data/ds", P, "file:///data/ds"},
    /* plain absolute paths */
    {"/abs/dir", P, "file:///abs/dir"},
    {"/abs/./dir/", P, "file:///abs/dir"},
    {"//abs//dir", P, "file:///abs/dir"},
    {"/", P, "file:///"},
    {"/a/b://c", P, "file:///a/b:/c"},
    /* s3 */
    {"s3://bucket", 0, "s3://bucket"},
    {"s3://bucket/", 0, "s3://bucket"},
    {"s3://bucket/a/b/", 0, "s3://bucket/a/b"},
    {"s3://bucket//a//b", 0, "s3://bucket/a/b"},
    {"S3://bucket/x", 0, "s3://bucket/x"},
    {"s3://abc", 0, "s3://abc"},
    {"s3://my.bucket-1_x/p", 0, "s3://my.bucket-1_x/p"},
    {"s3://b-1/a@b/c%20d", 0, "s3://b-1/a@b/c%20d"},
    {"s3://bucket/ds", P, "s3://bucket/ds"},
    /* gs */
    {"gs://bucket/p", 0, "gs://bucket/p"},
    {"gs://bucket.example.com/p/", 0, "gs://bucket.example.com/p"},
    /* http(s) */
    {"http://example.com/p", 0, "http://example.com/p"},
    {"http://example.com", 0, "http://example.com"},
    {"http://example.com/", 0, "http://example.com"},
    {"https://Example.COM:8443/A/", 0, "https://example.com:8443/A"},
    {"http://h:1", 0, "http://h:1"},
    {"http://h:65535/x", 0, "http://h:65535/x"},
    {"http://127.0.0.1:9000/bucket", 0, "http://127.0.0.1:9000/bucket"},
    {"http://[::1]:8080/x", 0, "http://[::1]:8080/x"},
    {"http://[2001:DB8::1]/x", 0, "http://[2001:db8::1]/x"},
    {"https://[::ffff:1.2.3.4]", 0, "https://[::ffff:1.2.3.4]"},
    {"http://a-b.c-d/x", 0, "http://a-b.c-d/x"},
};

struct invalid {
    const char *in;
    unsigned flags;
    const char *says;
};

static const struct invalid invalid[] = {
    {"", 0, "URL is empty"},
    {"", P, "URL is empty"},
    {"ftp://x/y", 0, "must start with file:///, s3://"},
    {"ftp://x/y", P, "must start with"},
    {"data://x", P, "must start with"},
    {"/abs", 0, "must start with"},
    {"rel/dir", 0, "must start with"},
    {"file:/x", P, "has no '//' after 'file:'"},
    {"s3:bucket/x", P, "has no '//' after 's3:'"},
    {"http:", 0, "has no '//'"},
    /* file:// */
    {"file://host/a", 0, "absolute path and no host"},
    {"file://", 0, "absolute path"},
    {"file://relative", 0, "absolute path"},
    {"file:///a/../b", 0, "has a '..' component"},
    {"file:///a/..", 0, "'..' component"},
    {"file:///..", 0, "'..' component"},
    {"file:///a/./b", 0, "has a '.' component"},
    {"file:///a/.", 0, "'.' component"},
    {"/a/../b", P, "'..' component"},
    {"/..", P, "'..' component"},
    /* characters */
    {"file:///a?x=1", 0, "has a '?'"},
    {"s3://bucket/a#frag", 0, "has a '#'"},
    {"https://h/x?y", 0, "'?'"},
    {"http://h?x", 0, "'?'"},
    {"/a/b#c", P, "'#'"},
    {"file:///a\\b", 0, "backslash"},
    {"file:///a\tb", 0, "control character at byte 9"},
    {"file:///a\nb", 0, "control character"},
    {"file:///a\x7f", 0, "control character"},
    {"s3://buc\x01ket", 0, "control character"},
    /* user info */
    {"http://user@h/x", 0, "user info"},
    {"http://user:pw@h/x", 0, "user info"},
    {"s3://key@bucket/x", 0, "user info"},
    {"https://@h", 0, "user info"},
    /* buckets */
    {"s3://", 0, "has no bucket"},
    {"s3:///x", 0, "has no bucket"},
    {"gs://", 0, "has no bucket"},
    {"s3://ab", 0, "is 2 characters, not 3 to 63"},
    {"gs://ab/x", 0, "not 3 to 222"},
    {"s3://Bucket", 0, "character 'B' not allowed"},
    {"s3://bucket:9000/x", 0, "character ':'"},
    {"s3://buck et", 0, "character ' '"},
    {"s3://-bucket", 0, "start and end with a letter or digit"},
    {"s3://bucket-", 0, "start and end"},
    {"gs://.bucket", 0, "start and end"},
    {"s3://my..bucket", 0, "two dots in a row"},
    {"s3://bucket/a/../x", 0, "'..' component"},
    {"s3://bucket/./x", 0, "'.' component"},
    /* hosts and ports */
    {"http://", 0, "has no host"},
    {"http:///x", 0, "has no host"},
    {"https://:8080/x", 0, "has no host"},
    {"http://h:0", 0, "port '0'"},
    {"http://h:65536", 0, "port '65536'"},
    {"http://h:", 0, "port ''"},
    {"http://h:080/x", 0, "port '080'"},
    {"http://h:8a", 0, "port '8a'"},
    {"http://h:123456", 0, "port '123456'"},
    {"http://h:-1", 0, "port '-1'"},
    {"http://h:80:80", 0, "port '80:80'"},
    {"http://a..b/x", 0, "empty label"},
    {"http://.a/x", 0, "empty label"},
    {"http://a./x", 0, "empty label"},
    {"http://h_x/y", 0, "character '_'"},
    {"http://h%41/y", 0, "character '%'"},
    {"http://[::1", 0, "'[' without ']'"},
    {"http://[::g]/x", 0, "not an IPv6 address"},
    {"http://[]/x", 0, "not an IPv6 address"},
    {"http://[1.2.3.4]/x", 0, "not an IPv6 address"},
    {"http://[fe80::1%25eth0]/", 0, "not an IPv6 address"},
    {"http://[::1]x/y", 0, "followed by 'x'"},
    {"http://[::1]:0/y", 0, "port '0'"},
    {"http://::1/x", 0, "has no host"},
};

static void test_url__valid_urls_have_canonical_forms(void **state)
{
    cnx_url url, again;
    (void)state;
    for (size_t i = 0; i < sizeof(valid) / sizeof(valid[0]); i++) {
        const struct valid *v = &valid[i];
        if (cnx_url_parse(&url, v->in, v->flags) != 0)
            fail_msg("'%s' refused: %s", v->in, cnx_error_last()->message);
        if (strcmp(url.canonical, v->canonical) != 0)
            fail_msg("'%s' gave '%s', not '%s'", v->in, url.canonical,
                     v->canonical);
        /* the canonical form is a fixed point, without flags */
        assert_int_equal(cnx_url_parse(&again, url.canonical, 0), 0);
        assert_string_equal(again.canonical, url.canonical);
        assert_int_equal(again.scheme, url.scheme);
        assert_string_equal(again.host, url.host);
        assert_string_equal(again.path, url.path);
    }
}

static void test_url__invalid_urls_are_refused_naming_the_rule(void **state)
{
    cnx_url url;
    (void)state;
    for (size_t i = 0; i < sizeof(invalid) / sizeof(invalid[0]); i++) {
        const struct invalid *v = &invalid[i];
        int rc = cnx_url_parse(&url, v->in, v->flags);
        if (rc != CNX_EINVAL)
            fail_msg("'%s' gave %d (%s), not EINVAL", v->in, rc,
                     rc == 0 ? url.canonical : cnx_error_last()->message);
        assert_int_equal(cnx_error_last()->retriable, 0);
        assert_error_says(v->says);
        if (v->in[0] != '\0' && strpbrk(v->in, "\t\n\x01\x7f") == NULL) {
            char named[256];
            snprintf(named, sizeof(named), "URL '%s'", v->in);
            assert_error_says(named);
        }
    }
}

static void test_url__parts_are_split_into_the_struct(void **state)
{
    cnx_url url;
    (void)state;
    assert_int_equal(cnx_url_parse(&url, "s3://bucket/a/b/", 0), 0);
    assert_int_equal(url.scheme, CNX_URL_S3);
    assert_string_equal(url.host, "bucket");
    assert_string_equal(url.path, "a/b");
    assert_int_equal(cnx_url_parse(&url, "gs://bucket", 0), 0);
    assert_int_equal(url.scheme, CNX_URL_GS);
    assert_string_equal(url.path, "");
    assert_int_equal(cnx_url_parse(&url, "HTTPS://Ex.COM:8443/A", 0), 0);
    assert_int_equal(url.scheme, CNX_URL_HTTPS);
    assert_string_equal(url.host, "ex.com:8443");
    assert_string_equal(url.path, "A");
    assert_int_equal(cnx_url_parse(&url, "http://[::1]", 0), 0);
    assert_int_equal(url.scheme, CNX_URL_HTTP);
    assert_string_equal(url.host, "[::1]");
    assert_int_equal(cnx_url_parse(&url, "file:///data//ds/", 0), 0);
    assert_int_equal(url.scheme, CNX_URL_FILE);
    assert_string_equal(url.host, "");
    assert_string_equal(url.path, "/data/ds");
    assert_int_equal(cnx_url_parse(&url, "file:///", 0), 0);
    assert_string_equal(url.path, "/");
    assert_string_equal(cnx_url_scheme_name(CNX_URL_FILE), "file");
    assert_string_equal(cnx_url_scheme_name(CNX_URL_S3), "s3");
    assert_string_equal(cnx_url_scheme_name(CNX_URL_GS), "gs");
    assert_string_equal(cnx_url_scheme_name(CNX_URL_HTTP), "http");
    assert_string_equal(cnx_url_scheme_name(CNX_URL_HTTPS), "https");
    assert_true(cnx_url_writable(CNX_URL_FILE));
    assert_true(cnx_url_writable(CNX_URL_S3));
    assert_true(cnx_url_writable(CNX_URL_GS));
    assert_false(cnx_url_writable(CNX_URL_HTTP));
    assert_false(cnx_url_writable(CNX_URL_HTTPS));
}

/* Lengths: buckets, gs parts, host labels, the whole URL, messages. */
static void test_url__length_limits(void **state)
{
    char buf[CNX_URL_MAX + 64];
    cnx_url url;
    (void)state;
    /* s3 bucket: 63 yes, 64 no */
    snprintf(buf, sizeof(buf), "s3://%063d", 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), 0);
    snprintf(buf, sizeof(buf), "s3://%064d", 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("is 64 characters, not 3 to 63");
    /* gs bucket: 222 in parts of 63 yes; 223, or a part of 64, no */
    snprintf(buf, sizeof(buf), "gs://%063d.%063d.%063d.%030d", 0, 0, 0, 0);
    assert_int_equal(strlen(buf), 5 + 222);
    assert_int_equal(cnx_url_parse(&url, buf, 0), 0);
    snprintf(buf, sizeof(buf), "gs://%063d.%063d.%063d.%031d", 0, 0, 0, 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("not 3 to 222");
    snprintf(buf, sizeof(buf), "gs://%064d.a", 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("part over 63");
    /* host label 63 yes, 64 no; a name over 253 no */
    snprintf(buf, sizeof(buf), "http://%063d.x/p", 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), 0);
    snprintf(buf, sizeof(buf), "http://%064d.x/p", 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("label over 63");
    snprintf(buf, sizeof(buf), "http://%063d.%063d.%063d.%063d/p", 0, 0, 0, 0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("host is 255 characters, over 253");
    /* 253-character host plus a port: over the struct's 255 */
    snprintf(buf, sizeof(buf), "http://%063d.%063d.%063d.%061d:8080", 0, 0, 0,
             0);
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("over 255");
    /* the whole URL: 4095 bytes yes, 4096 no; long ones are cut in the
     * message */
    memset(buf, 'a', sizeof(buf));
    memcpy(buf, "s3://bucket/", 12);
    buf[CNX_URL_MAX - 1] = '\0';
    assert_int_equal(cnx_url_parse(&url, buf, 0), 0);
    assert_int_equal(strlen(url.canonical), CNX_URL_MAX - 1);
    buf[CNX_URL_MAX - 1] = 'a';
    buf[CNX_URL_MAX] = '\0';
    assert_int_equal(cnx_url_parse(&url, buf, 0), CNX_EINVAL);
    assert_error_says("is 4096 bytes, over 4095");
    assert_error_says("aaaa...'");
    assert_true(strlen(cnx_error_last()->message) < 300);
    /* control and non-ASCII bytes are shown as '?' */
    assert_int_equal(cnx_url_parse(&url, "s3://b\xc3\xa9/x\n", 0), CNX_EINVAL);
    assert_error_says("URL 's3://b?"
                      "?/x?'");
}

/* Relative plain paths are made absolute from the working directory. */
static void test_url__relative_paths_use_the_working_directory(void **state)
{
    char dir[64], old[PATH_MAX], cwd[PATH_MAX], parent[PATH_MAX];
    char want[PATH_MAX + 64], weird[PATH_MAX + 16];
    cnx_url url;
    (void)state;
    assert_non_null(getcwd(old, sizeof(old)));
    cnx_test_tmpdir(dir);
    assert_int_equal(chdir(dir), 0);
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    snprintf(parent, sizeof(parent), "%s", cwd);
    *strrchr(parent, '/') = '\0';

    assert_int_equal(cnx_url_parse(&url, "rel/dir/", P), 0);
    snprintf(want, sizeof(want), "file://%s/rel/dir", cwd);
    assert_string_equal(url.canonical, want);
    assert_int_equal(url.scheme, CNX_URL_FILE);
    assert_int_equal(cnx_url_parse(&url, "./a/./b", P), 0);
    snprintf(want, sizeof(want), "file://%s/a/b", cwd);
    assert_string_equal(url.canonical, want);
    assert_int_equal(cnx_url_parse(&url, ".", P), 0);
    snprintf(want, sizeof(want), "file://%s", cwd);
    assert_string_equal(url.canonical, want);
    /* leading ".." climbs from the (physical) working directory */
    assert_int_equal(cnx_url_parse(&url, "../x", P), 0);
    snprintf(want, sizeof(want), "file://%s/x", parent);
    assert_string_equal(url.canonical, want);
    assert_int_equal(cnx_url_parse(&url, "./../x", P), 0);
    assert_string_equal(url.canonical, want);
    assert_int_equal(
        cnx_url_parse(&url, "../../../../../../../../../../../..", P), 0);
    assert_string_equal(url.canonical, "file:///");
    /* any other ".." is refused */
    assert_int_equal(cnx_url_parse(&url, "a/../b", P), CNX_EINVAL);
    assert_error_says("URL 'a/../b': has a '..' component");
    assert_int_equal(cnx_url_parse(&url, "../a/../b", P), CNX_EINVAL);
    assert_int_equal(cnx_url_parse(&url, "x#y", P), CNX_EINVAL);
    assert_error_says("'#'");
    /* a working directory that no URL can hold */
    snprintf(weird, sizeof(weird), "%s/we#ird", cwd);
    assert_int_equal(mkdir(weird, 0700), 0);
    assert_int_equal(chdir(weird), 0);
    assert_int_equal(cnx_url_parse(&url, "rel", P), CNX_EINVAL);
    assert_error_says("URL 'rel': the working directory");
    assert_int_equal(cnx_url_parse(&url, "/abs", P), 0);

    assert_int_equal(chdir(old), 0);
    cnx_test_rmtree(dir);
}

static void test_url__object_names_keep_the_store_rules(void **state)
{
    static const struct {
        const char *name;
        const char *says;
    } bad[] = {
        {"", "object name is empty"},
        {"/abs", "object name '/abs' is absolute"},
        {"a/../b", "has a '..' component"},
        {"..", "'..' component"},
        {"../x", "'..' component"},
        {"a/..", "'..' component"},
        {"a/./b", "has a '.' component"},
        {".", "'.' component"},
        {"a//b", "has an empty path component"},
        {"a/", "empty path component"},
        {"back\\slash", "has a backslash"},
        {"tab\there", "control character at byte 3"},
        {"nl\n", "control character at byte 2"},
        {"del\x7f", "control character at byte 3"},
    };
    static const char *good[] = {"info",  "8_8_8/0-64_0-64_0-64",
                                 "a/b/c", "...",
                                 "a..b",  ".hidden",
                                 "z/x-1", "a#b",
                                 "q?x",   "sp ace"};
    char name[1100];
    (void)state;
    assert_int_equal(cnx_url_check_name(NULL), CNX_ENAME);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_url_check_name(bad[i].name), CNX_ENAME);
        assert_int_equal(cnx_error_last()->retriable, 0);
        if (strstr(cnx_error_last()->message, bad[i].says) == NULL)
            fail_msg("'%s': message '%s'", bad[i].name,
                     cnx_error_last()->message);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(cnx_url_check_name(good[i]), 0);
    memset(name, 'a', 1024);
    name[1024] = '\0';
    assert_int_equal(cnx_url_check_name(name), 0);
    name[1024] = 'a';
    name[1025] = '\0';
    assert_int_equal(cnx_url_check_name(name), CNX_ENAME);
    assert_error_says("object name is 1025 bytes, over 1024");
}

static void test_url__join(void **state)
{
    static const struct {
        const char *base;
        unsigned flags;
        const char *name;
        int rc;
        const char *want;
    } cases[] = {
        {"s3://bucket/ds/", 0, "raw/v1", 0, "s3://bucket/ds/raw/v1"},
        {"s3://bucket", 0, "info", 0, "s3://bucket/info"},
        {"S3://bucket//ds", 0, "info", 0, "s3://bucket/ds/info"},
        {"file:///", 0, "x", 0, "file:///x"},
        {"file:///data/ds", 0, "8_8_8/0-64_0-64_0-64", 0,
         "file:///data/ds/8_8_8/0-64_0-64_0-64"},
        {"/abs/ds/", P, "info", 0, "file:///abs/ds/info"},
        {"https://H:8443/p", 0, "a/b", 0, "https://h:8443/p/a/b"},
        {"http://[::1]", 0, "a", 0, "http://[::1]/a"},
        {"/abs/ds", 0, "info", CNX_EINVAL, "must start with"},
        {"s3://ab", 0, "info", CNX_EINVAL, "bucket"},
        {"s3://bucket/ds", 0, "../x", CNX_ENAME, "'..' component"},
        {"s3://bucket/ds", 0, "a//b", CNX_ENAME, "empty path component"},
        {"s3://bucket/ds", 0, "", CNX_ENAME, "empty"},
        {"s3://bucket/ds", 0, "/x", CNX_ENAME, "absolute"},
        {"s3://bucket/ds", 0, "a/", CNX_ENAME, "empty path component"},
        {"s3://bucket/ds", 0, "a#b", CNX_ENAME, "'#', which a URL"},
        {"s3://bucket/ds", 0, "a?b", CNX_ENAME, "'?', which a URL"},
    };
    char base[CNX_URL_MAX], *out;
    cnx_url url;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        out = (char *)1;
        int rc =
            cnx_url_join(&out, cases[i].base, cases[i].flags, cases[i].name);
        if (rc != cases[i].rc)
            fail_msg("join('%s', '%s') gave %d: %s", cases[i].base,
                     cases[i].name, rc, cnx_error_last()->message);
        if (rc == 0) {
            assert_string_equal(out, cases[i].want);
            /* a joined URL is canonical */
            assert_int_equal(cnx_url_parse(&url, out, 0), 0);
            assert_string_equal(url.canonical, out);
            free(out);
        } else {
            assert_null(out);
            assert_error_says(cases[i].want);
        }
    }
    /* the joined URL must fit too */
    memset(base, 'a', sizeof(base));
    memcpy(base, "s3://bucket/", 12);
    base[CNX_URL_MAX - 10] = '\0';
    assert_int_equal(cnx_url_join(&out, base, 0, "abcdefghij"), CNX_EINVAL);
    assert_null(out);
    assert_error_says("is over 4095 bytes");
    assert_int_equal(cnx_url_join(&out, base, 0, "abcdefgh"), 0);
    assert_int_equal(strlen(out), CNX_URL_MAX - 1);
    free(out);
}

static void test_url__under_is_component_wise(void **state)
{
    static const struct {
        const char *base, *url;
        int under;
        const char *rel;
    } cases[] = {
        {"s3://b/ds", "s3://b/ds", 1, ""},
        {"s3://b/ds", "s3://b/ds/x/y", 1, "x/y"},
        {"s3://b", "s3://b/ds", 1, "ds"},
        {"s3://b/d", "s3://b/ds", 0, NULL},
        {"s3://b/d", "s3://b/ds/x", 0, NULL},
        {"s3://bkt", "s3://bkt2/x", 0, NULL},
        {"s3://b/ds/x", "s3://b/ds", 0, NULL},
        {"s3://b/ds", "gs://b/ds/x", 0, NULL},
        {"file:///", "file:///a/b", 1, "a/b"},
        {"file:///", "file:///", 1, ""},
        {"file:///a", "file:///ab", 0, NULL},
        {"file:///a", "file:///a/b", 1, "b"},
        {"http://h", "http://h:8080/x", 0, NULL},
        {"http://h", "http://h/x", 1, "x"},
        {"http://h", "http://hx/x", 0, NULL},
    };
    const char *rel;
    (void)state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        rel = NULL;
        if (cnx_url_under(cases[i].base, cases[i].url, &rel) != cases[i].under)
            fail_msg("under('%s', '%s') is not %d", cases[i].base, cases[i].url,
                     cases[i].under);
        if (cases[i].under) {
            assert_string_equal(rel, cases[i].rel);
            /* rel is borrowed from url */
            assert_true(rel >= cases[i].url &&
                        rel <= cases[i].url + strlen(cases[i].url));
        }
        assert_int_equal(cnx_url_under(cases[i].base, cases[i].url, NULL),
                         cases[i].under);
    }
}

static void test_url__split_object(void **state)
{
    static const struct {
        const char *url, *store, *name;
    } ok[] = {
        {"s3://bucket/ds/raw/info", "s3://bucket/ds/raw", "info"},
        {"s3://bucket/info", "s3://bucket", "info"},
        {"gs://bucket/a/b", "gs://bucket/a", "b"},
        {"file:///info", "file:///", "info"},
        {"file:///a/b", "file:///a", "b"},
        {"http://h:8080/x", "http://h:8080", "x"},
        {"https://[::1]/a/b", "https://[::1]/a", "b"},
    };
    static const struct {
        const char *url, *says;
    } bad[] = {
        {"s3://bucket", "names no object"},
        {"file:///", "names no object"},
        {"http://h", "names no object"},
        {"s3://bucket/a/", "not canonical (it would be 's3://bucket/a')"},
        {"s3://bucket//a", "not canonical"},
        {"S3://bucket/a", "not canonical"},
        {"ftp://x/y", "must start with"},
        {"/abs/x", "must start with"},
        {"file:///a/../b", "'..'"},
    };
    char store[CNX_URL_MAX], *joined;
    const char *name;
    (void)state;
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        if (cnx_url_split_object(ok[i].url, store, &name) != 0)
            fail_msg("split('%s'): %s", ok[i].url, cnx_error_last()->message);
        assert_string_equal(store, ok[i].store);
        assert_string_equal(name, ok[i].name);
        assert_true(name > ok[i].url && name < ok[i].url + strlen(ok[i].url));
        /* join undoes split */
        assert_int_equal(cnx_url_join(&joined, store, 0, name), 0);
        assert_string_equal(joined, ok[i].url);
        free(joined);
        assert_int_equal(cnx_url_under(store, ok[i].url, NULL), 1);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        name = "stale";
        assert_int_equal(cnx_url_split_object(bad[i].url, store, &name),
                         CNX_EINVAL);
        assert_null(name);
        assert_string_equal(store, "");
        assert_error_says(bad[i].says);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url__valid_urls_have_canonical_forms),
        cmocka_unit_test(test_url__invalid_urls_are_refused_naming_the_rule),
        cmocka_unit_test(test_url__parts_are_split_into_the_struct),
        cmocka_unit_test(test_url__length_limits),
        cmocka_unit_test(test_url__relative_paths_use_the_working_directory),
        cmocka_unit_test(test_url__object_names_keep_the_store_rules),
        cmocka_unit_test(test_url__join),
        cmocka_unit_test(test_url__under_is_component_wise),
        cmocka_unit_test(test_url__split_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
