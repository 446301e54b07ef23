/*
 * file:// store: names, atomic write-once puts, verified gets, and racing
 * writers (exactly one wins, the others agree or fail EIMMUTABLE).
 */
#include "cnx_test.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "cnx/error.h"
#include "cnx/store.h"

static void test_store__names_are_checked(void **state)
{
    static const char *bad[] = {"", "/abs", "a/../b", "..", "../x", "a/./b",
                                ".", "a//b", "a/", "back\\slash", "tab\there",
                                "a/..", "nl\n"};
    static const char *good[] = {"info", "8_8_8/0-64_0-64_0-64", "a/b/c",
                                 "...", "a..b", ".hidden", "z/x-1"};
    (void)state;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(cnx_store_check_name(bad[i]), CNX_ENAME);
        assert_true(strlen(cnx_error_last()->message) > 0);
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(cnx_store_check_name(good[i]), 0);
    char long_name[1100];
    memset(long_name, 'a', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    assert_int_equal(cnx_store_check_name(long_name), CNX_ENAME);
}

static void test_store__open_accepts_file_urls_and_paths(void **state)
{
    char dir[64], url[128];
    cnx_store *s;
    (void)state;
    cnx_test_tmpdir(dir);
    snprintf(url, sizeof(url), "file://%s/layer/", dir);
    assert_int_equal(cnx_store_open(&s, url), 0);
    snprintf(url, sizeof(url), "file://%s/layer", dir);
    assert_string_equal(cnx_store_url(s), url);
    cnx_store_free(s);
    assert_int_equal(cnx_store_open(&s, "file://relative"), CNX_EINVAL);
    assert_int_equal(cnx_store_open(&s, "ftp://x/y"), CNX_EUNSUPPORTED);
    assert_int_equal(cnx_store_open(&s, ""), CNX_EINVAL);
    cnx_test_rmtree(dir);
}

static void test_store__put_is_write_once(void **state)
{
    char dir[64];
    char d1[CNX_DIGEST_LEN], d2[CNX_DIGEST_LEN];
    cnx_store *s;
    uint8_t *data;
    size_t len;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    assert_int_equal(cnx_store_put(s, "a/b/obj", "hello", 5, d1), 0);
    /* Identical bytes again: an idempotent retry, success. */
    assert_int_equal(cnx_store_put(s, "a/b/obj", "hello", 5, d2), 0);
    assert_string_equal(d1, d2);
    /* Different bytes: refused, and the object keeps its old bytes. */
    assert_int_equal(cnx_store_put(s, "a/b/obj", "HELLO", 5, NULL),
                     CNX_EIMMUTABLE);
    assert_int_equal(cnx_store_put(s, "a/b/obj", "hello!", 6, NULL),
                     CNX_EIMMUTABLE);
    assert_int_equal(cnx_store_put(s, "a/b/obj", "hell", 4, NULL),
                     CNX_EIMMUTABLE);
    assert_non_null(strstr(cnx_error_last()->message, "a/b/obj"));
    assert_int_equal(cnx_store_get(s, "a/b/obj", 0, &data, &len), 0);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "hello", 5);
    free(data);
    /* No temporary files are left behind. */
    char sub[128];
    snprintf(sub, sizeof(sub), "%s/a/b", dir);
    DIR *dh = opendir(sub);
    struct dirent *e;
    int files = 0;
    while ((e = readdir(dh)) != NULL)
        if (e->d_name[0] != '.' || strncmp(e->d_name, ".tmp", 4) == 0)
            files++;
    closedir(dh);
    assert_int_equal(files, 1);
    /* Unsafe names never touch the disk. */
    assert_int_equal(cnx_store_put(s, "../escape", "x", 1, NULL), CNX_ENAME);
    char esc[128];
    struct stat st;
    snprintf(esc, sizeof(esc), "%s/../escape", dir);
    assert_int_not_equal(stat(esc, &st), 0);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

static void test_store__empty_object_round_trips(void **state)
{
    char dir[64];
    cnx_store *s;
    uint8_t *data;
    size_t len;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    assert_int_equal(cnx_store_put(s, "empty", "", 0, NULL), 0);
    assert_int_equal(cnx_store_get(s, "empty", 0, &data, &len), 0);
    assert_int_equal(len, 0);
    free(data);
    assert_int_equal(cnx_store_put(s, "empty", "x", 1, NULL), CNX_EIMMUTABLE);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

static void test_store__get_verified_and_limits(void **state)
{
    char dir[64], d[CNX_DIGEST_LEN], wrong[CNX_DIGEST_LEN];
    cnx_store *s;
    uint8_t *data;
    size_t len;
    int exists;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    assert_int_equal(cnx_store_put(s, "x", "0123456789", 10, d), 0);
    assert_int_equal(cnx_store_get_verified(s, "x", d, 0, &data, &len), 0);
    free(data);
    cnx_digest("other", 5, wrong);
    assert_int_equal(cnx_store_get_verified(s, "x", wrong, 0, &data, &len),
                     CNX_EDIGEST);
    assert_null(data);
    assert_non_null(strstr(cnx_error_last()->message, "x: digest mismatch"));
    assert_int_equal(cnx_store_get(s, "x", 9, &data, &len), CNX_ETOOBIG);
    assert_int_equal(cnx_store_get(s, "missing", 0, &data, &len),
                     CNX_ENOTFOUND);
    assert_int_equal(cnx_error_last()->retriable, 0);
    assert_int_equal(cnx_store_exists(s, "x", &exists), 0);
    assert_true(exists);
    assert_int_equal(cnx_store_exists(s, "nope/x", &exists), 0);
    assert_false(exists);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

struct racer {
    cnx_store *store;
    int id;
    int rc;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    char buf[4096];
    /* Half the racers write the same bytes, half different ones. */
    memset(buf, r->id % 2 ? 'a' : 'b', sizeof(buf));
    r->rc = cnx_store_put(r->store, "race/obj", buf, sizeof(buf), NULL);
    return NULL;
}

static void test_store__racing_writers_never_mix_bytes(void **state)
{
    char dir[64];
    cnx_store *s;
    pthread_t t[8];
    struct racer r[8];
    uint8_t *data;
    size_t len;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    for (int i = 0; i < 8; i++) {
        r[i].store = s;
        r[i].id = i;
        assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(cnx_store_get(s, "race/obj", 0, &data, &len), 0);
    assert_int_equal(len, 4096);
    for (size_t i = 1; i < len; i++)
        assert_int_equal(data[i], data[0]);
    for (int i = 0; i < 8; i++) {
        char mine = i % 2 ? 'a' : 'b';
        assert_int_equal(r[i].rc, mine == (char)data[0] ? 0 : CNX_EIMMUTABLE);
    }
    free(data);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

/* A writer killed at a random moment (a spot machine vanishing) leaves
 * every object it wrote either absent or whole, never partial. */
static void test_store__killed_writer_leaves_no_partial_object(void **state)
{
    const size_t len = (size_t)8 << 20;
    char dir[64];
    uint64_t rng = 99;
    (void)state;
    cnx_test_tmpdir(dir);
    for (int round = 0; round < 6; round++) {
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            cnx_store *s;
            uint8_t *buf = malloc(len);
            if (buf == NULL || cnx_store_open(&s, dir) != 0)
                _exit(3);
            for (int k = 0;; k++) {
                char name[64];
                memset(buf, (k + round * 64) & 0xff, len);
                snprintf(name, sizeof(name), "r%d/obj%d", round, k);
                if (cnx_store_put(s, name, buf, len, NULL) != 0)
                    _exit(4);
            }
        }
        usleep((useconds_t)(20000 + cnx_test_rand(&rng) % 200000));
        kill(pid, SIGKILL);
        int status;
        waitpid(pid, &status, 0);
        assert_true(WIFSIGNALED(status));
        cnx_store *s;
        assert_int_equal(cnx_store_open(&s, dir), 0);
        for (int k = 0; k < 1000; k++) {
            char name[64];
            uint8_t *data;
            size_t got;
            snprintf(name, sizeof(name), "r%d/obj%d", round, k);
            int rc = cnx_store_get(s, name, 0, &data, &got);
            if (rc == CNX_ENOTFOUND)
                break;
            assert_int_equal(rc, 0);
            assert_int_equal(got, len);
            for (size_t i = 0; i < got; i += 4096)
                assert_int_equal(data[i], (uint8_t)((k + round * 64) & 0xff));
            free(data);
        }
        cnx_store_free(s);
    }
    cnx_test_rmtree(dir);
}

static void test_store__swap_is_compare_and_swap(void **state)
{
    char dir[64], d[CNX_DIGEST_LEN];
    cnx_store *s;
    uint8_t *data;
    size_t len;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    assert_int_equal(cnx_store_swap(s, "m/info", NULL, "v1", 2), 0);
    assert_int_equal(cnx_store_swap(s, "m/info", NULL, "v2", 2), CNX_ECONFLICT);
    cnx_digest("v0", 2, d);
    assert_int_equal(cnx_store_swap(s, "m/info", d, "v2", 2), CNX_ECONFLICT);
    cnx_digest("v1", 2, d);
    assert_int_equal(cnx_store_swap(s, "m/info", d, "v2", 2), 0);
    assert_int_equal(cnx_store_get(s, "m/info", 0, &data, &len), 0);
    assert_memory_equal(data, "v2", 2);
    free(data);
    assert_int_equal(cnx_store_swap(s, "../x", NULL, "v", 1), CNX_ENAME);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

struct counter {
    const char *dir;
    int conflicts;
};

/* Each thread adds 1 to a decimal counter 50 times by read + swap. */
static void *count_up(void *arg)
{
    struct counter *c = arg;
    cnx_store *s;
    if (cnx_store_open(&s, c->dir) != 0)
        return NULL;
    for (int i = 0; i < 50;) {
        uint8_t *data = NULL;
        size_t len = 0;
        char d[CNX_DIGEST_LEN], next[32];
        long v;
        if (cnx_store_get(s, "counter", 0, &data, &len) != 0)
            break;
        cnx_digest(data, len, d);
        v = strtol((char *)data, NULL, 10);
        free(data);
        snprintf(next, sizeof(next), "%ld", v + 1);
        int rc = cnx_store_swap(s, "counter", d, next, strlen(next));
        if (rc == 0)
            i++;
        else if (rc == CNX_ECONFLICT)
            c->conflicts++;
        else
            break;
    }
    cnx_store_free(s);
    return NULL;
}

static void test_store__concurrent_swaps_lose_no_update(void **state)
{
    char dir[64];
    cnx_store *s;
    pthread_t t[4];
    struct counter c[4];
    uint8_t *data;
    size_t len;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    assert_int_equal(cnx_store_swap(s, "counter", NULL, "0", 1), 0);
    for (int i = 0; i < 4; i++) {
        c[i].dir = dir;
        c[i].conflicts = 0;
        assert_int_equal(pthread_create(&t[i], NULL, count_up, &c[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(cnx_store_get(s, "counter", 0, &data, &len), 0);
    assert_int_equal(strtol((char *)data, NULL, 10), 200);
    free(data);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

typedef struct listing {
    char names[16][64];
    size_t n;
    int stop_after;
} listing;

static int collect(void *ctx, const char *name)
{
    listing *l = ctx;
    if (l->n >= 16)
        return -100;
    snprintf(l->names[l->n++], 64, "%s", name);
    return l->stop_after > 0 && (int)l->n == l->stop_after ? 7 : 0;
}

static void test_store__list_is_sorted_recursive_and_skips_temporaries(
    void **state)
{
    static const char *objects[] = {"info", "b/2", "a0", "a/x/1", "a/y",
                                    "lineage/k/d.dsse.json"};
    char dir[64], path[128];
    cnx_store *s;
    listing l;
    FILE *f;
    (void)state;
    cnx_test_tmpdir(dir);
    assert_int_equal(cnx_store_open(&s, dir), 0);
    for (size_t i = 0; i < sizeof(objects) / sizeof(objects[0]); i++)
        assert_int_equal(cnx_store_put(s, objects[i], "x", 1, NULL), 0);
    snprintf(path, sizeof(path), "%s/a/.tmp.1.2", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);

    memset(&l, 0, sizeof(l));
    assert_int_equal(cnx_store_list(s, NULL, collect, &l), 0);
    assert_int_equal(l.n, 6);
    assert_string_equal(l.names[0], "a/x/1");
    assert_string_equal(l.names[1], "a/y");
    assert_string_equal(l.names[2], "a0");
    assert_string_equal(l.names[3], "b/2");
    assert_string_equal(l.names[4], "info");
    assert_string_equal(l.names[5], "lineage/k/d.dsse.json");

    memset(&l, 0, sizeof(l));
    assert_int_equal(cnx_store_list(s, "lineage", collect, &l), 0);
    assert_int_equal(l.n, 1);
    assert_string_equal(l.names[0], "lineage/k/d.dsse.json");

    memset(&l, 0, sizeof(l));
    assert_int_equal(cnx_store_list(s, "missing", collect, &l), 0);
    assert_int_equal(l.n, 0);
    assert_int_equal(cnx_store_list(s, "../up", collect, &l), CNX_ENAME);

    memset(&l, 0, sizeof(l));
    l.stop_after = 2;
    assert_int_equal(cnx_store_list(s, "", collect, &l), 7);
    assert_int_equal(l.n, 2);
    cnx_store_free(s);
    cnx_test_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_store__names_are_checked),
        cmocka_unit_test(test_store__open_accepts_file_urls_and_paths),
        cmocka_unit_test(test_store__put_is_write_once),
        cmocka_unit_test(test_store__empty_object_round_trips),
        cmocka_unit_test(test_store__get_verified_and_limits),
        cmocka_unit_test(test_store__racing_writers_never_mix_bytes),
        cmocka_unit_test(test_store__killed_writer_leaves_no_partial_object),
        cmocka_unit_test(test_store__swap_is_compare_and_swap),
        cmocka_unit_test(test_store__concurrent_swaps_lose_no_update),
        cmocka_unit_test(
            test_store__list_is_sorted_recursive_and_skips_temporaries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
