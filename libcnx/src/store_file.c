/*
 * store_file.c - the file:// backend of the store (store_int.h).
 *
 * A put writes a uniquely named temporary file in the object's directory,
 * fdatasyncs it, then link(2)s it to the final name -- link never replaces an
 * existing file, so of two racing writers exactly one wins and the other
 * compares bytes (identical: success; different: CNX_EIMMUTABLE). The
 * directory is fsynced after the link so the name survives a crash. A
 * reader therefore sees either no object or the whole object, never a
 * partial one. A swap (the mutable `info`) holds an flock'd lock file beside
 * the object and installs the new bytes with rename(2). Names arrive
 * checked by store.c. Thread-safe: no shared mutable state after open but
 * the registry of temporary files in flight (for abandon), under a mutex.
 */
#include <assert.h>
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
#include <sys/types.h>
#include <unistd.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "fd_int.h"
#include "store_int.h"

/* The lock file of a swap: ".lock.<name>" beside the object; like
 * temporary files (".tmp.*"), never an object and never listed. */
#define LOCK_PREFIX ".lock."

typedef struct file_impl {
    char *root; /* /abs/dir, no trailing slash */
} file_impl;

static const char *root_of(const cnx_store *store)
{
    return ((const file_impl *)store->impl)->root;
}

static atomic_ulong tmp_counter;

/* Temporary files being written by this process (for abandon). A put
 * registers its temporary before creating it and unregisters it after the
 * link; abandon unlinks whatever is registered and closes the registry. */
#define MAX_INFLIGHT 256
static pthread_mutex_t inflight_lock = PTHREAD_MUTEX_INITIALIZER;
static char *inflight[MAX_INFLIGHT];

static int inflight_add(const char *tmp)
{
    int rc = cnx_error_set(CNX_EIO, 1, "too many writes in flight");
    pthread_mutex_lock(&inflight_lock);
    if (cnx__store_writes_abandoned()) {
        rc = cnx_error_set(CNX_EIO, 1, "writes abandoned: the worker is "
                           "stopping");
    } else {
        for (int i = 0; i < MAX_INFLIGHT; i++) {
            if (inflight[i] == NULL) {
                inflight[i] = strdup(tmp);
                rc = inflight[i] ? 0
                                 : cnx_error_set(CNX_ENOMEM, 0,
                                                 "out of memory");
                break;
            }
        }
    }
    pthread_mutex_unlock(&inflight_lock);
    return rc;
}

static void inflight_remove(const char *tmp)
{
    pthread_mutex_lock(&inflight_lock);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (inflight[i] != NULL && strcmp(inflight[i], tmp) == 0) {
            free(inflight[i]);
            inflight[i] = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&inflight_lock);
}

int cnx__mkdir_p(const char *path, char *failed, size_t cap)
{
    char buf[PATH_MAX];
    size_t len = strlen(path);
    if (len >= sizeof(buf)) {
        errno = ENAMETOOLONG;
        snprintf(failed, cap, "%.100s", path);
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                snprintf(failed, cap, "%s", buf);
                return -1;
            }
            buf[i] = saved;
        }
    }
    return 0;
}

static int make_dirs(const char *path)
{
    char failed[PATH_MAX];
    if (cnx__mkdir_p(path, failed, sizeof(failed)) != 0)
        return cnx_error_set(errno == ENAMETOOLONG ? CNX_ENAME : CNX_EIO,
                             errno != ENAMETOOLONG,
                             "cannot create directory %s: %s", failed,
                             strerror(errno));
    return 0;
}

static int object_path(const cnx_store *store, const char *name, char *buf,
                       size_t n)
{
    if (snprintf(buf, n, "%s/%s", root_of(store), name) >= (int)n)
        return cnx_error_set(CNX_ENAME, 0, "object path too long: %.100s",
                             name);
    return 0;
}

/* Read a whole file into a NUL-terminated buffer. */
static int read_file(const char *path, const char *name, size_t max_len,
                     uint8_t **data, size_t *len)
{
    struct stat st;
    uint8_t *buf = NULL;
    size_t got = 0;
    int fd, rc = 0;

    *data = NULL;
    *len = 0;
    if (max_len == 0)
        max_len = CNX_STORE_MAX_OBJECT;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return cnx_error_set(CNX_ENOTFOUND, 0, "object %s not found",
                                 name);
        return cnx_error_set(CNX_EIO, 1, "cannot open object %s: %s", name,
                             strerror(errno));
    }
    if (fstat(fd, &st) != 0) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot stat object %s: %s", name,
                           strerror(errno));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = cnx_error_set(CNX_ENOTFOUND, 0, "object %s is not a file", name);
        goto done;
    }
    if ((uint64_t)st.st_size > (uint64_t)max_len) {
        rc = cnx_error_set(CNX_ETOOBIG, 0,
                           "object %s is %lld bytes, over the %zu limit", name,
                           (long long)st.st_size, max_len);
        goto done;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory reading %s", name);
        goto done;
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = cnx_error_set(CNX_EIO, 1, "cannot read object %s: %s", name,
                               strerror(errno));
            goto done;
        }
        if (n == 0)
            break; /* shrank under us: return what is there */
        got += (size_t)n;
    }
    buf[got] = '\0';
    *data = buf;
    *len = got;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return rc;
}

static int file_get(cnx_store *store, const char *name, size_t max_len,
                    uint8_t **data, size_t *len)
{
    char path[PATH_MAX];
    int rc = object_path(store, name, path, sizeof(path));
    *data = NULL;
    *len = 0;
    if (rc != 0)
        return rc;
    return read_file(path, name, max_len, data, len);
}

static int file_get_range(cnx_store *store, const char *name,
                          uint64_t offset, size_t len, uint8_t **data,
                          size_t *got)
{
    char path[PATH_MAX];
    uint8_t *buf = NULL;
    size_t have = 0;
    int fd, rc = object_path(store, name, path, sizeof(path));

    *data = NULL;
    *got = 0;
    if (rc != 0)
        return rc;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return cnx_error_set(CNX_ENOTFOUND, 0, "object %s not found",
                                 name);
        return cnx_error_set(CNX_EIO, 1, "cannot open object %s: %s", name,
                             strerror(errno));
    }
    buf = malloc(len + 1);
    if (buf == NULL) {
        close(fd);
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory reading %s", name);
    }
    while (have < len) {
        ssize_t n = pread(fd, buf + have, len - have,
                          (off_t)(offset + have));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = cnx_error_set(CNX_EIO, 1, "cannot read object %s: %s",
                               name, strerror(errno));
            free(buf);
            close(fd);
            return rc;
        }
        if (n == 0)
            break; /* past the end: a short range, as HTTP returns */
        have += (size_t)n;
    }
    close(fd);
    buf[have] = '\0';
    *data = buf;
    *got = have;
    return 0;
}

static int file_exists(cnx_store *store, const char *name, int *exists)
{
    char path[PATH_MAX];
    struct stat st;
    int rc = object_path(store, name, path, sizeof(path));
    *exists = 0;
    if (rc != 0)
        return rc;
    if (stat(path, &st) == 0) {
        *exists = S_ISREG(st.st_mode);
        return 0;
    }
    if (errno == ENOENT || errno == ENOTDIR)
        return 0;
    return cnx_error_set(CNX_EIO, 1, "cannot stat object %s: %s", name,
                         strerror(errno));
}

int cnx__write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* The last write-once refusal on this thread (cnx_store_conflict). */
static int compare_existing(const char *path, const char *name,
                            const void *data, size_t len)
{
    uint8_t *old = NULL;
    size_t old_len = 0;
    int rc = read_file(path, name, len + 1, &old, &old_len);
    if (rc == CNX_ETOOBIG) {
        /* Larger than the new bytes: different; read it all for its
         * digest. */
        free(old);
        old = NULL;
        rc = read_file(path, name, 0, &old, &old_len);
    }
    if (rc == 0 && (old_len != len || memcmp(old, data, len) != 0)) {
        char stored[CNX_DIGEST_LEN], got[CNX_DIGEST_LEN];
        cnx_digest(old, old_len, stored);
        cnx_digest(data, len, got);
        free(old);
        return cnx__store_conflict_record(name, stored, got);
    }
    free(old);
    return rc;
}

static int file_put(cnx_store *store, const char *name, const void *data,
                    size_t len, const char *digest)
{
    char path[PATH_MAX], tmp[PATH_MAX + 64], dir[PATH_MAX];
    char *slash;
    int fd = -1, rc, exists, n;

    rc = object_path(store, name, path, sizeof(path));
    if (rc != 0)
        return rc;
    (void)digest;
    /* Cheap path for an idempotent retry: compare without writing. */
    rc = file_exists(store, name, &exists);
    if (rc != 0)
        return rc;
    if (exists)
        return compare_existing(path, name, data, len);

    memcpy(dir, path, strlen(path) + 1);
    slash = strrchr(dir, '/');
    *slash = '\0';
    rc = make_dirs(dir);
    if (rc != 0)
        return rc;
    n = snprintf(tmp, sizeof(tmp), "%s/.tmp.%ld.%lu", dir, (long)getpid(),
                 (unsigned long)atomic_fetch_add(&tmp_counter, 1));
    if (n < 0 || (size_t)n >= sizeof(tmp))
        return cnx_error_set(CNX_ENAME, 0, "object path too long: %.100s",
                             name);
    rc = inflight_add(tmp);
    if (rc != 0)
        return rc;
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot create %s: %s", tmp,
                           strerror(errno));
        inflight_remove(tmp);
        return rc;
    }
    if (cnx__write_all(fd, data, len) != 0 || fdatasync(fd) != 0) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot write object %s: %s", name,
                           strerror(errno));
        close(fd);
        unlink(tmp);
        inflight_remove(tmp);
        return rc;
    }
    close(fd);
    if (link(tmp, path) != 0) {
        int err = errno;
        unlink(tmp);
        inflight_remove(tmp);
        if (err == EEXIST)
            return compare_existing(path, name, data, len);
        return cnx_error_set(CNX_EIO, 1, "cannot publish object %s: %s", name,
                             strerror(err));
    }
    unlink(tmp);
    inflight_remove(tmp);
    if (fsync_dir(dir) != 0)
        return cnx_error_set(CNX_EIO, 1, "cannot sync directory of %s: %s",
                             name, strerror(errno));
    return 0;
}

static int file_swap(cnx_store *store, const char *name,
                     const char *expected, const void *data, size_t len)
{
    char path[PATH_MAX], lock[PATH_MAX + 16], tmp[PATH_MAX + 64];
    char dir[PATH_MAX], current[CNX_DIGEST_LEN];
    uint8_t *old = NULL;
    size_t old_len = 0;
    int lock_fd = -1, fd = -1, rc, n;
    char *slash;

    rc = object_path(store, name, path, sizeof(path));
    if (rc != 0)
        return rc;
    memcpy(dir, path, strlen(path) + 1);
    slash = strrchr(dir, '/');
    *slash = '\0';
    rc = make_dirs(dir);
    if (rc != 0)
        return rc;
    slash = strrchr(path, '/');
    n = snprintf(lock, sizeof(lock), "%.*s/" LOCK_PREFIX "%s",
                 (int)(slash - path), path, slash + 1);
    if (n < 0 || (size_t)n >= sizeof(lock))
        return cnx_error_set(CNX_ENAME, 0, "object path too long: %.100s",
                             name);
    lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (lock_fd < 0 || flock(lock_fd, LOCK_EX) != 0) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot lock %s: %s", name,
                           strerror(errno));
        goto done;
    }
    rc = read_file(path, name, 0, &old, &old_len);
    if (rc == CNX_ENOTFOUND) {
        if (expected != NULL) {
            rc = cnx_error_set(CNX_ECONFLICT, 0,
                               "object %s: expected %s, but it does not "
                               "exist",
                               name, expected);
            goto done;
        }
    } else if (rc != 0) {
        goto done;
    } else {
        cnx_digest(old, old_len, current);
        if (expected == NULL || strcmp(current, expected) != 0) {
            rc = cnx_error_set(CNX_ECONFLICT, 0,
                               "object %s changed: now %s, expected %s",
                               name, current, expected ? expected : "none");
            goto done;
        }
    }
    n = snprintf(tmp, sizeof(tmp), "%s/.tmp.%ld.%lu", dir, (long)getpid(),
                 (unsigned long)atomic_fetch_add(&tmp_counter, 1));
    if (n < 0 || (size_t)n >= sizeof(tmp)) {
        rc = cnx_error_set(CNX_ENAME, 0, "object path too long: %.100s", name);
        goto done;
    }
    rc = inflight_add(tmp);
    if (rc != 0)
        goto done;
    fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 || cnx__write_all(fd, data, len) != 0 || fsync(fd) != 0 ||
        rename(tmp, path) != 0) {
        rc = cnx_error_set(CNX_EIO, 1, "cannot replace object %s: %s", name,
                           strerror(errno));
        unlink(tmp);
        inflight_remove(tmp);
        goto done;
    }
    inflight_remove(tmp);
    rc = fsync_dir(dir) == 0 ? 0
                             : cnx_error_set(CNX_EIO, 1,
                                             "cannot sync directory of %s: %s",
                                             name, strerror(errno));
done:
    if (fd >= 0)
        close(fd);
    if (lock_fd >= 0)
        close(lock_fd); /* releases the flock */
    free(old);
    return rc;
}

/* ---- listing --------------------------------------------------------- */

static int cmp_cstr(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * List directory `rel` (relative to the store root; "" for the root),
 * depth first, entries in byte order. A directory's entries are read
 * whole and sorted before any is visited, so "a/b" comes after "a" and
 * before "a0" only when byte order says so: names are compared whole.
 */
static int list_dir(const cnx_store *store, const char *rel,
                    cnx_store_list_fn fn, void *ctx, int depth)
{
    char path[PATH_MAX], child[PATH_MAX];
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    DIR *dir;
    int rc = 0;

    if (depth > 64)
        return cnx_error_set(CNX_EIO, 0, "store: %.200s: directories nested "
                             "over 64 deep", rel);
    if (snprintf(path, sizeof(path), "%s%s%s", root_of(store), rel[0] ? "/" : "",
                 rel) >= (int)sizeof(path))
        return cnx_error_set(CNX_ENAME, 0, "store: path too long: %.100s",
                             rel);
    dir = opendir(path);
    if (dir == NULL) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return cnx_error_set(CNX_EIO, 1, "store: cannot list %s: %s", path,
                             strerror(errno));
    }
    while ((de = readdir(dir)) != NULL) {
        int is_dir = de->d_type == DT_DIR;
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
            strncmp(de->d_name, ".tmp.", 5) == 0 ||
            strncmp(de->d_name, LOCK_PREFIX, strlen(LOCK_PREFIX)) == 0)
            continue;
        if (de->d_type == DT_UNKNOWN) {
            struct stat st;
            char full[PATH_MAX];
            is_dir = (size_t)snprintf(full, sizeof(full), "%s/%s", path,
                                      de->d_name) < sizeof(full) &&
                     lstat(full, &st) == 0 && S_ISDIR(st.st_mode);
        }
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            char **grown = realloc(names, ncap * sizeof(*names));
            if (grown == NULL) {
                rc = cnx_error_set(CNX_ENOMEM, 0, "store: out of memory");
                goto done;
            }
            names = grown;
            cap = ncap;
        }
        /* A directory sorts as "name/", so that its objects come where
         * their whole names do in byte order ("a-b" < "a/x" < "a0"). */
        names[n] = malloc(strlen(de->d_name) + 2);
        if (names[n] != NULL)
            snprintf(names[n], strlen(de->d_name) + 2, "%s%s", de->d_name,
                     is_dir ? "/" : "");
        if (names[n] == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "store: out of memory");
            goto done;
        }
        n++;
    }
    if (n > 1)
        qsort(names, n, sizeof(*names), cmp_cstr);
    for (size_t i = 0; i < n && rc == 0; i++) {
        struct stat st;
        char full[PATH_MAX];
        size_t nl = strlen(names[i]);
        if (nl > 0 && names[i][nl - 1] == '/')
            names[i][nl - 1] = '\0';
        if (snprintf(child, sizeof(child), "%s%s%s", rel, rel[0] ? "/" : "",
                     names[i]) >= (int)sizeof(child) ||
            snprintf(full, sizeof(full), "%s/%s", root_of(store), child) >=
                (int)sizeof(full)) {
            rc = cnx_error_set(CNX_ENAME, 0, "store: path too long: %.100s",
                               names[i]);
            break;
        }
        if (lstat(full, &st) != 0) {
            if (errno == ENOENT)
                continue; /* removed while listing */
            rc = cnx_error_set(CNX_EIO, 1, "store: cannot stat %s: %s", full,
                               strerror(errno));
            break;
        }
        if (S_ISDIR(st.st_mode)) {
            rc = list_dir(store, child, fn, ctx, depth + 1);
        } else if (S_ISLNK(st.st_mode)) {
            if (stat(full, &st) == 0 && S_ISDIR(st.st_mode))
                continue;
            rc = fn(ctx, child);
        } else {
            rc = fn(ctx, child);
        }
    }
done:
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    closedir(dir);
    return rc;
}


static int file_list(cnx_store *store, const char *prefix,
                     cnx_store_list_fn fn, void *ctx)
{
    return list_dir(store, prefix != NULL ? prefix : "", fn, ctx, 0);
}

void cnx__store_file_abandon(void)
{
    pthread_mutex_lock(&inflight_lock);
    for (int i = 0; i < MAX_INFLIGHT; i++) {
        if (inflight[i] != NULL) {
            unlink(inflight[i]);
            free(inflight[i]);
            inflight[i] = NULL;
        }
    }
    pthread_mutex_unlock(&inflight_lock);
}

static void file_dispose(cnx_store *store)
{
    file_impl *impl = store->impl;
    if (impl == NULL)
        return;
    free(impl->root);
    free(impl);
    store->impl = NULL;
}

static const cnx__store_ops file_ops = {
    .put = file_put,
    .get = file_get,
    .get_range = file_get_range,
    .swap = file_swap,
    .exists = file_exists,
    .list = file_list,
    .dispose = file_dispose,
};

int cnx__store_open_file(cnx_store *store)
{
    file_impl *impl;

    assert(store->url.scheme == CNX_URL_FILE);
    /* The root is made by the first write (each put makes its object's
     * directories), not here: opening a mistyped dataset to read it must
     * leave nothing behind. */
    impl = calloc(1, sizeof(*impl));
    if (impl == NULL || (impl->root = strdup(store->url.path)) == NULL) {
        free(impl);
        return cnx_error_set(CNX_ENOMEM, 0, "store: out of memory");
    }
    /* The root "/" joins names as "//name": strip to "" so paths are
     * "/name". */
    if (strcmp(impl->root, "/") == 0)
        impl->root[0] = '\0';
    store->impl = impl;
    store->ops = &file_ops;
    return 0;
}
