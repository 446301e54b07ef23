/*
 * test_store_cache.c - the digest-keyed read cache (store_cache.c), ranged
 * reads and concurrent reads of the store, on file:// (the remote backends
 * are exercised against a real S3 server in tests/integration/store_s3.sh).
 *
 * The cache is checked against a reference model of least-recently-used
 * eviction written from its contract: entries are touched on a hit, and a
 * pass removes the oldest until the total is at most 90 % of the bound.
 */
#include "cnx_test.h"

#include <sys/stat.h>
#include <time.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/store.h"
#include "store_int.h"

static void fill(uint8_t *buf, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(seed * 131u + i * 7u + (i >> 8));
}

static int entry_exists(const char *dir, const char *digest)
{
    char path[256];
    struct stat st;
    snprintf(path, sizeof(path), "%s/sha256/%.2s/%s", dir, digest + 7,
             digest + 7);
    return stat(path, &st) == 0;
}

static void test_store_cache__hit_returns_the_bytes_and_counts(void **state)
{
    char dir[64], digest[CNX_DIGEST_LEN];
    uint8_t buf[1000], *data = NULL;
    size_t len = 0;
    cnx_store_stats before, after;
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_cache_configure(dir, 1 << 20), 0);
    fill(buf, sizeof(buf), 1);
    cnx_digest(buf, sizeof(buf), digest);
    cnx_store_stats_get(&before);
    assert_int_equal(cnx__cache_get(digest, 1 << 20, &data, &len),
                     CNX_ENOTFOUND);
    cnx__cache_put(digest, buf, sizeof(buf));
    assert_true(entry_exists(dir, digest));
    assert_int_equal(cnx__cache_get(digest, 1 << 20, &data, &len), 0);
    assert_int_equal(len, sizeof(buf));
    assert_memory_equal(data, buf, len);
    free(data);
    /* A read limit below the entry's size is a miss, not a truncation. */
    assert_int_equal(cnx__cache_get(digest, 10, &data, &len), CNX_ENOTFOUND);
    assert_null(data);
    cnx_store_stats_get(&after);
    assert_int_equal(after.cache_hits - before.cache_hits, 1);
    assert_int_equal(after.cache_misses - before.cache_misses, 2);
    assert_int_equal(after.cache_hit_bytes - before.cache_hit_bytes,
                     sizeof(buf));
    assert_int_equal(cnx_store_cache_configure(NULL, 0), 0);
    cnx_test_rmtree(dir);
}

/* The first put into a directory without its tmp/ (a fresh directory
 * named by CNX_CACHE_DIR alone, or one a cleaner emptied) is kept, not
 * dropped until the next put. */
static void test_store_cache__first_put_into_a_fresh_directory_is_kept(
    void **state)
{
    char dir[64], tmp[96], digest[CNX_DIGEST_LEN];
    uint8_t buf[500], *data = NULL;
    size_t len = 0;
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_cache_configure(dir, 1 << 20), 0);
    snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
    assert_int_equal(rmdir(tmp), 0);
    fill(buf, sizeof(buf), 7);
    cnx_digest(buf, sizeof(buf), digest);
    cnx__cache_put(digest, buf, sizeof(buf));
    assert_true(entry_exists(dir, digest));
    assert_int_equal(cnx__cache_get(digest, 1 << 20, &data, &len), 0);
    assert_int_equal(len, sizeof(buf));
    assert_memory_equal(data, buf, len);
    free(data);
    assert_int_equal(cnx_store_cache_configure(NULL, 0), 0);
    cnx_test_rmtree(dir);
}

static void test_store_cache__damaged_entry_is_a_miss_and_removed(void **state)
{
    char dir[64], digest[CNX_DIGEST_LEN], path[256];
    uint8_t buf[100], *data = NULL;
    size_t len = 0;
    FILE *f;
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_cache_configure(dir, 1 << 20), 0);
    fill(buf, sizeof(buf), 2);
    cnx_digest(buf, sizeof(buf), digest);
    cnx__cache_put(digest, buf, sizeof(buf));
    snprintf(path, sizeof(path), "%s/sha256/%.2s/%s", dir, digest + 7,
             digest + 7);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fputc(buf[0] ^ 1, f);
    fclose(f);
    assert_int_equal(cnx__cache_get(digest, 1 << 20, &data, &len),
                     CNX_ENOTFOUND);
    assert_null(data);
    assert_false(entry_exists(dir, digest));
    /* Malformed keys never touch the disk. */
    assert_int_equal(cnx__cache_get("sha256:zz", 100, &data, &len),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx__cache_get("md5:00", 100, &data, &len),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_store_cache_configure(NULL, 0), 0);
    cnx_test_rmtree(dir);
}

/* Reference model: entries in use order (oldest first). */
typedef struct model {
    char digest[64][CNX_DIGEST_LEN];
    size_t size[64];
    int n;
} model;

static void model_touch(model *m, const char *digest, size_t size)
{
    int i;
    for (i = 0; i < m->n; i++)
        if (strcmp(m->digest[i], digest) == 0)
            break;
    if (i < m->n) {
        memmove(&m->digest[i], &m->digest[i + 1],
                (size_t)(m->n - i - 1) * sizeof(m->digest[0]));
        memmove(&m->size[i], &m->size[i + 1],
                (size_t)(m->n - i - 1) * sizeof(m->size[0]));
        m->n--;
    }
    snprintf(m->digest[m->n], CNX_DIGEST_LEN, "%s", digest);
    m->size[m->n++] = size;
}

static void model_evict(model *m, uint64_t max)
{
    uint64_t total = 0;
    for (int i = 0; i < m->n; i++)
        total += m->size[i];
    if (total <= max)
        return;
    while (m->n > 0 && total > max / 10 * 9) {
        total -= m->size[0];
        memmove(&m->digest[0], &m->digest[1],
                (size_t)(m->n - 1) * sizeof(m->digest[0]));
        memmove(&m->size[0], &m->size[1],
                (size_t)(m->n - 1) * sizeof(m->size[0]));
        m->n--;
    }
}

static void sleep_a_little(void)
{
    /* mtimes must differ between uses for the order to be observable */
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
}

static void test_store_cache__evicts_least_recently_used_like_the_model(
    void **state)
{
    const uint64_t max = 8 * 1000; /* entries of 1000 bytes: 8 fit */
    char dir[64], digests[20][CNX_DIGEST_LEN];
    uint8_t buf[1000], *data;
    size_t len;
    model m = {0};
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_cache_configure(dir, max), 0);
    for (int i = 0; i < 20; i++) {
        fill(buf, sizeof(buf), (unsigned)(100 + i));
        cnx_digest(buf, sizeof(buf), digests[i]);
        cnx__cache_put(digests[i], buf, sizeof(buf));
        model_touch(&m, digests[i], sizeof(buf));
        /* The cache scans once the bound is passed; so does the model. */
        model_evict(&m, max);
        sleep_a_little();
        /* Every third step, use an old entry if the model still has it. */
        if (i % 3 == 2 && m.n > 2) {
            const char *old = m.digest[0];
            char keep[CNX_DIGEST_LEN];
            snprintf(keep, sizeof(keep), "%s", old);
            assert_int_equal(cnx__cache_get(keep, max, &data, &len), 0);
            free(data);
            model_touch(&m, keep, len);
            sleep_a_little();
        }
    }
    /* Exactly the model's entries are left. */
    for (int i = 0; i < 20; i++) {
        int in_model = 0;
        for (int j = 0; j < m.n; j++)
            in_model |= strcmp(m.digest[j], digests[i]) == 0;
        assert_int_equal(entry_exists(dir, digests[i]), in_model);
    }
    assert_true(m.n <= 8);
    assert_int_equal(cnx_store_cache_configure(NULL, 0), 0);
    cnx_test_rmtree(dir);
}

static void test_store__range_reads_and_short_tails(void **state)
{
    char dir[64];
    cnx_store *store = NULL;
    uint8_t buf[4096], *data = NULL;
    size_t got = 0;
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&store, dir), 0);
    fill(buf, sizeof(buf), 3);
    assert_int_equal(cnx_store_put(store, "a/b", buf, sizeof(buf), NULL), 0);
    assert_int_equal(cnx_store_get_range(store, "a/b", 100, 50, &data, &got),
                     0);
    assert_int_equal(got, 50);
    assert_memory_equal(data, buf + 100, 50);
    free(data);
    assert_int_equal(
        cnx_store_get_range(store, "a/b", 4000, 500, &data, &got), 0);
    assert_int_equal(got, 96);
    assert_memory_equal(data, buf + 4000, 96);
    free(data);
    assert_int_equal(cnx_store_get_range(store, "a/c", 0, 5, &data, &got),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_store_get_range(store, "a/b", 0, 0, &data, &got),
                     CNX_ERANGE);
    assert_int_equal(cnx_store_get_range(store, "../x", 0, 5, &data, &got),
                     CNX_ENAME);
    cnx_store_free(store);
    cnx_test_rmtree(dir);
}

/* file:// ranges decide as HTTP does: a range ending at the end is whole,
 * one starting at or after the end is empty (0 bytes, not an error). */
static void test_store__range_at_and_past_the_end_is_short_not_an_error(
    void **state)
{
    char dir[64];
    cnx_store *store = NULL;
    uint8_t buf[1000], *data = NULL;
    size_t got = 99;
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&store, dir), 0);
    fill(buf, sizeof(buf), 5);
    assert_int_equal(cnx_store_put(store, "x", buf, sizeof(buf), NULL), 0);
    assert_int_equal(cnx_store_get_range(store, "x", 900, 100, &data, &got),
                     0);
    assert_int_equal(got, 100);
    assert_memory_equal(data, buf + 900, 100);
    free(data);
    assert_int_equal(cnx_store_get_range(store, "x", 0, 1000, &data, &got), 0);
    assert_int_equal(got, 1000);
    assert_memory_equal(data, buf, 1000);
    free(data);
    assert_int_equal(cnx_store_get_range(store, "x", 1000, 10, &data, &got),
                     0);
    assert_int_equal(got, 0);
    assert_non_null(data);
    assert_int_equal(data[0], 0); /* NUL-terminated, even when empty */
    free(data);
    assert_int_equal(
        cnx_store_get_range(store, "x", (uint64_t)1 << 40, 10, &data, &got), 0);
    assert_int_equal(got, 0);
    free(data);
    assert_int_equal(cnx_store_get_range(store, "missing/x", 0, 1, &data,
                                         &got),
                     CNX_ENOTFOUND);
    assert_null(data);
    assert_int_equal(got, 0);
    cnx_store_free(store);
    cnx_test_rmtree(dir);
}

static void test_store__get_many_keeps_results_in_request_order(void **state)
{
    char dir[64], names[6][16], digests[6][CNX_DIGEST_LEN];
    cnx_store *store = NULL;
    cnx_store_get_req reqs[6];
    uint8_t buf[300];
    (void)state;

    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&store, dir), 0);
    for (int i = 0; i < 6; i++) {
        snprintf(names[i], sizeof(names[i]), "o%d", i);
        fill(buf, sizeof(buf), (unsigned)i);
        if (i != 4) /* o4 is missing */
            assert_int_equal(cnx_store_put(store, names[i], buf, sizeof(buf),
                                           digests[i]),
                             0);
    }
    snprintf(digests[4], sizeof(digests[4]), "%s", digests[0]);
    memset(reqs, 0, sizeof(reqs));
    for (int i = 0; i < 6; i++) {
        reqs[i].name = names[i];
        reqs[i].expected = digests[i];
    }
    reqs[2].expected = digests[1]; /* o2 checked against o1's digest */
    assert_int_equal(cnx_store_get_many(store, reqs, 6, 0), CNX_EDIGEST);
    assert_non_null(strstr(cnx_error_last()->message, "o2"));
    assert_int_equal(reqs[0].rc, 0);
    assert_int_equal(reqs[2].rc, CNX_EDIGEST);
    assert_int_equal(reqs[4].rc, CNX_ENOTFOUND);
    assert_int_equal(reqs[5].rc, 0);
    fill(buf, sizeof(buf), 5);
    assert_int_equal(reqs[5].len, sizeof(buf));
    assert_memory_equal(reqs[5].data, buf, sizeof(buf));
    for (int i = 0; i < 6; i++)
        free(reqs[i].data);
    cnx_store_free(store);
    cnx_test_rmtree(dir);
}

static void test_store__sizes_parse_with_binary_units(void **state)
{
    uint64_t v = 0;
    (void)state;
    assert_int_equal(cnx_store_parse_size("123", &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(cnx_store_parse_size("2K", &v), 0);
    assert_int_equal(v, 2048);
    assert_int_equal(cnx_store_parse_size("3M", &v), 0);
    assert_int_equal(v, 3u << 20);
    assert_int_equal(cnx_store_parse_size("10G", &v), 0);
    assert_int_equal(v, (uint64_t)10 << 30);
    assert_int_equal(cnx_store_parse_size("0", &v), CNX_EINVAL);
    assert_int_equal(cnx_store_parse_size("-1", &v), CNX_EINVAL);
    assert_int_equal(cnx_store_parse_size("1T", &v), CNX_EINVAL);
    assert_int_equal(cnx_store_parse_size("", &v), CNX_EINVAL);
    assert_int_equal(cnx_store_cache_configure("relative/dir", 0),
                     CNX_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store_cache__hit_returns_the_bytes_and_counts),
        cmocka_unit_test(
            test_store_cache__first_put_into_a_fresh_directory_is_kept),
        cmocka_unit_test(
            test_store_cache__damaged_entry_is_a_miss_and_removed),
        cmocka_unit_test(
            test_store_cache__evicts_least_recently_used_like_the_model),
        cmocka_unit_test(test_store__range_reads_and_short_tails),
        cmocka_unit_test(
            test_store__range_at_and_past_the_end_is_short_not_an_error),
        cmocka_unit_test(
            test_store__get_many_keeps_results_in_request_order),
        cmocka_unit_test(test_store__sizes_parse_with_binary_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
