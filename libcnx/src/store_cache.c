/*
 * store_cache.c - the local read cache of remote objects, keyed by digest.
 *
 * Every verified read already names the SHA-256 its bytes must have, so an
 * entry is the object's bytes filed under that digest
 * (DIR/sha256/<2 hex>/<64 hex>): the same key can only ever hold the same
 * bytes, and the cache is coherent by construction, whatever the store or
 * the object's name. A hit is checked against its digest again (a damaged
 * entry is removed and counted as a miss). Entries are published with
 * link(2) from a temporary file, so several processes can share one
 * directory; a reader never sees half an entry. The size is bounded: a hit
 * touches the entry's mtime, and once this process's estimate of the total
 * passes the bound (or every eighth of it added), an eviction pass under an
 * flock'd DIR/lock removes the least recently used entries down to 90 % of
 * the bound. Other processes' additions are seen at their own passes, so
 * the directory may briefly exceed the bound by up to an eighth of it per
 * process. Failures of the cache never fail a read: it is skipped.
 * Thread-safe: configuration under a once/mutex, counters atomic.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/store.h"
#include "fd_int.h"
#include "store_int.h"

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static char cache_dir[PATH_MAX - 128]; /* "" when disabled */
static uint64_t cache_max = CNX_STORE_CACHE_DEFAULT_MAX;
static int cache_configured; /* set explicitly: the environment is ignored */
static uint64_t cache_estimate; /* bytes, as of this process's last scan + */
static uint64_t cache_added;    /* bytes added since the last scan */
static int cache_scanned;

static atomic_ullong st_hits, st_misses, st_hit_bytes, st_miss_bytes;
static atomic_ullong st_evictions, st_refetches;
static atomic_ulong tmp_counter;

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    unsigned long long v;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        v <<= 30, end++;
    if (*end != '\0' || v == 0)
        return -1;
    *out = v;
    return 0;
}

int cnx_store_parse_size(const char *text, uint64_t *out)
{
    if (parse_size(text, out) != 0)
        return cnx_error_set(CNX_EINVAL, 0,
                             "size '%.40s': expected a positive number of "
                             "bytes, optionally with K, M or G",
                             text ? text : "");
    return 0;
}

/* Settings from CNX_CACHE_DIR / CNX_CACHE_MAX_BYTES, unless configured. */
static void cache_from_env(void)
{
    const char *dir = getenv("CNX_CACHE_DIR");
    const char *max = getenv("CNX_CACHE_MAX_BYTES");
    uint64_t v;

    pthread_mutex_lock(&cache_lock);
    if (!cache_configured) {
        if (max != NULL && parse_size(max, &v) == 0)
            cache_max = v;
        if (dir != NULL && dir[0] == '/' && strlen(dir) < sizeof(cache_dir))
            snprintf(cache_dir, sizeof(cache_dir), "%s", dir);
    }
    pthread_mutex_unlock(&cache_lock);
}

/* mkdir -p, errno set on failure. */
static int mkdir_p(const char *path)
{
    char failed[PATH_MAX];
    return cnx__mkdir_p(path, failed, sizeof(failed));
}

int cnx_store_cache_configure(const char *dir, uint64_t max_bytes)
{
    char tmp[PATH_MAX];
    if (dir != NULL && (dir[0] != '/' || strlen(dir) >= sizeof(cache_dir)))
        return cnx_error_set(CNX_EINVAL, 0,
                             "cache directory '%.200s': must be an absolute "
                             "path under %zu bytes",
                             dir, sizeof(cache_dir));
    if (dir != NULL) {
        snprintf(tmp, sizeof(tmp), "%s/tmp", dir);
        if (mkdir_p(tmp) != 0)
            return cnx_error_set(CNX_EIO, 0,
                                 "cache directory %s: cannot create: %s", dir,
                                 strerror(errno));
    }
    pthread_once(&cache_once, cache_from_env);
    pthread_mutex_lock(&cache_lock);
    cache_configured = 1;
    snprintf(cache_dir, sizeof(cache_dir), "%s", dir ? dir : "");
    if (max_bytes > 0)
        cache_max = max_bytes;
    cache_scanned = 0;
    cache_added = 0;
    pthread_mutex_unlock(&cache_lock);
    return 0;
}

/* Copy the directory (or "" when disabled) under the lock. */
static void cache_settings(char *dir, size_t cap, uint64_t *max)
{
    pthread_once(&cache_once, cache_from_env);
    pthread_mutex_lock(&cache_lock);
    snprintf(dir, cap, "%s", cache_dir);
    *max = cache_max;
    pthread_mutex_unlock(&cache_lock);
}

/* DIR/sha256/ab/abcdef... of a "sha256:<64 hex>" digest, or -1. */
static int entry_path(const char *dir, const char *digest, char *out,
                      size_t cap)
{
    const char *hex;
    if (digest == NULL || strncmp(digest, "sha256:", 7) != 0 ||
        strlen(digest) != 7 + 64)
        return -1;
    hex = digest + 7;
    for (int i = 0; i < 64; i++) {
        char c = hex[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return -1;
    }
    if ((size_t)snprintf(out, cap, "%s/sha256/%.2s/%s", dir, hex, hex) >= cap)
        return -1;
    return 0;
}

int cnx__cache_get(const char *digest, size_t max_len, uint8_t **data,
                   size_t *len)
{
    char dir[PATH_MAX], path[PATH_MAX];
    uint64_t max;
    struct stat st;
    uint8_t *buf;
    size_t got = 0;
    int fd;

    *data = NULL;
    *len = 0;
    cache_settings(dir, sizeof(dir), &max);
    if (dir[0] == '\0' || entry_path(dir, digest, path, sizeof(path)) != 0)
        return CNX_ENOTFOUND;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        goto miss;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
        (uint64_t)st.st_size > max_len) {
        close(fd);
        goto miss;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        goto miss;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    if (cnx_digest_check(buf, got, digest, path) != 0) {
        /* A damaged entry: never served, removed, fetched again. */
        free(buf);
        unlink(path);
        cnx_error_clear();
        goto miss;
    }
    (void)utimensat(AT_FDCWD, path, NULL, 0); /* most recently used */
    *data = buf;
    *len = got;
    atomic_fetch_add(&st_hits, 1);
    atomic_fetch_add(&st_hit_bytes, got);
    return 0;
miss:
    atomic_fetch_add(&st_misses, 1);
    return CNX_ENOTFOUND;
}

typedef struct entry {
    struct timespec mtime;
    uint64_t size;
    char *path;
} entry;

static int entry_older(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return strcmp(x->path, y->path);
}

/* Scan every entry; when over max remove the least recently used down to
 * 90 % of it. Under DIR/lock, so one process evicts at a time.
 * @return the total after the pass. */
static uint64_t evict(const char *dir, uint64_t max)
{
    char path[PATH_MAX], sub[PATH_MAX];
    entry *list = NULL;
    size_t n = 0, cap = 0;
    uint64_t total = 0;
    DIR *top, *d;
    struct dirent *de, *fe;
    int lock;

    if ((size_t)snprintf(path, sizeof(path), "%s/lock", dir) >= sizeof(path))
        return 0;
    lock = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock < 0 || flock(lock, LOCK_EX) != 0) {
        if (lock >= 0)
            close(lock);
        return 0;
    }
    top = (size_t)snprintf(path, sizeof(path), "%s/sha256", dir) <
                  sizeof(path)
              ? opendir(path)
              : NULL;
    while (top != NULL && (de = readdir(top)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >=
            sizeof(sub))
            continue;
        d = opendir(sub);
        while (d != NULL && (fe = readdir(d)) != NULL) {
            struct stat st;
            char full[PATH_MAX];
            if (fe->d_name[0] == '.')
                continue;
            if ((size_t)snprintf(full, sizeof(full), "%s/%s", sub,
                                 fe->d_name) >= sizeof(full) ||
                stat(full, &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            if (n == cap) {
                size_t ncap = cap ? cap * 2 : 256;
                entry *grown = realloc(list, ncap * sizeof(*list));
                if (grown == NULL)
                    break;
                list = grown;
                cap = ncap;
            }
            list[n].path = strdup(full);
            if (list[n].path == NULL)
                break;
            list[n].mtime = st.st_mtim;
            list[n].size = (uint64_t)st.st_size;
            total += list[n].size;
            n++;
        }
        if (d != NULL)
            closedir(d);
    }
    if (top != NULL)
        closedir(top);
    if (total > max && n > 0) {
        uint64_t low = max / 10 * 9;
        qsort(list, n, sizeof(*list), entry_older);
        for (size_t i = 0; i < n && total > low; i++) {
            if (unlink(list[i].path) == 0) {
                total -= list[i].size;
                atomic_fetch_add(&st_evictions, 1);
            }
        }
    }
    for (size_t i = 0; i < n; i++)
        free(list[i].path);
    free(list);
    close(lock); /* releases the flock */
    return total;
}

void cnx__cache_put(const char *digest, const uint8_t *data, size_t len)
{
    char dir[PATH_MAX], path[PATH_MAX], tmp[PATH_MAX], parent[PATH_MAX];
    uint64_t max;
    int fd, scan;

    cache_settings(dir, sizeof(dir), &max);
    if (dir[0] == '\0' || entry_path(dir, digest, path, sizeof(path)) != 0)
        return;
    atomic_fetch_add(&st_miss_bytes, len);
    if ((uint64_t)len > max / 4)
        return; /* one object would evict most of the cache */
    snprintf(parent, sizeof(parent), "%s", path);
    *strrchr(parent, '/') = '\0';
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s/tmp/%ld.%lu", dir,
                         (long)getpid(),
                         (unsigned long)atomic_fetch_add(&tmp_counter, 1)) >=
        sizeof(tmp))
        return;
    if (mkdir_p(parent) != 0)
        return; /* the next put tries again */
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && errno == ENOENT) {
        /* A directory named by CNX_CACHE_DIR alone (no configure) has no
         * tmp/ yet, or a cleaner removed it: make it and try once more,
         * so that the first put into a fresh directory is kept. */
        char tmpdir[PATH_MAX];
        if ((size_t)snprintf(tmpdir, sizeof(tmpdir), "%s/tmp", dir) <
                sizeof(tmpdir) &&
            mkdir_p(tmpdir) == 0)
            fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    }
    if (fd < 0)
        return; /* the next put tries again */
    if (cnx__write_all(fd, data, len) != 0) {
        close(fd);
        unlink(tmp);
        return;
    }
    close(fd);
    if (link(tmp, path) != 0 && errno != EEXIST) {
        unlink(tmp);
        return;
    }
    unlink(tmp);

    pthread_mutex_lock(&cache_lock);
    cache_added += len;
    scan = !cache_scanned || cache_estimate + cache_added > max ||
           cache_added > max / 8;
    if (scan) {
        cache_scanned = 1;
        cache_added = 0;
    }
    pthread_mutex_unlock(&cache_lock);
    if (scan) {
        uint64_t total = evict(dir, max);
        pthread_mutex_lock(&cache_lock);
        cache_estimate = total;
        pthread_mutex_unlock(&cache_lock);
    }
}

uint64_t cnx__cache_bound(void)
{
    char dir[PATH_MAX];
    uint64_t max;
    cache_settings(dir, sizeof(dir), &max);
    return dir[0] == '\0' ? 0 : max;
}

void cnx__store_count_refetch(void)
{
    atomic_fetch_add(&st_refetches, 1);
}

void cnx_store_stats_get(cnx_store_stats *out)
{
    memset(out, 0, sizeof(*out));
    out->cache_hits = atomic_load(&st_hits);
    out->cache_misses = atomic_load(&st_misses);
    out->cache_hit_bytes = atomic_load(&st_hit_bytes);
    out->cache_miss_bytes = atomic_load(&st_miss_bytes);
    out->cache_evictions = atomic_load(&st_evictions);
    out->digest_refetches = atomic_load(&st_refetches);
    cnx__http_stats(&out->requests, &out->retries, &out->bytes_in,
                    &out->bytes_out);
}
