/*
 * verify_util.c - the small pieces cnx-verify's library is built from:
 * finding lists, a string index (open addressing, FNV-1a), the parallel
 * loop (threads pull item numbers from one atomic counter, so uneven
 * items balance themselves), and the streaming SHA-256 of stored objects.
 *
 * Hashing reads each file in large blocks into a per-thread buffer and
 * feeds OpenSSL's EVP SHA-256 (SHA-NI where the CPU has it), so a thread
 * runs near `openssl speed -evp sha256`; objects are spread over threads.
 */
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "verify_int.h"

/* ---- findings -------------------------------------------------------- */

int vf_add(vf_findings *list, const char *object, const char *check,
           const char *fmt, ...)
{
    char reason[1024];
    cnx_verify_finding *f;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 4;
        cnx_verify_finding *grown =
            realloc(list->items, cap * sizeof(*grown));
        if (grown == NULL)
            return CNX_ENOMEM;
        list->items = grown;
        list->cap = cap;
    }
    f = &list->items[list->n];
    f->object = strdup(object != NULL ? object : "?");
    f->check = strdup(check);
    f->reason = strdup(reason);
    if (f->object == NULL || f->check == NULL || f->reason == NULL) {
        free((char *)f->object);
        free((char *)f->check);
        free((char *)f->reason);
        return CNX_ENOMEM;
    }
    list->n++;
    return 0;
}

int vf_move(vf_findings *dst, vf_findings *src)
{
    if (src->n == 0)
        return 0;
    if (dst->n + src->n > dst->cap) {
        size_t cap = dst->cap ? dst->cap : 16;
        cnx_verify_finding *grown;
        while (cap < dst->n + src->n)
            cap *= 2;
        grown = realloc(dst->items, cap * sizeof(*grown));
        if (grown == NULL)
            return CNX_ENOMEM;
        dst->items = grown;
        dst->cap = cap;
    }
    memcpy(dst->items + dst->n, src->items, src->n * sizeof(*src->items));
    dst->n += src->n;
    free(src->items);
    memset(src, 0, sizeof(*src));
    return 0;
}

void vf_findings_dispose(vf_findings *list)
{
    for (size_t i = 0; i < list->n; i++) {
        free((char *)list->items[i].object);
        free((char *)list->items[i].check);
        free((char *)list->items[i].reason);
    }
    free(list->items);
    memset(list, 0, sizeof(*list));
}

/* ---- string index ---------------------------------------------------- */

static uint64_t fnv1a(const char *s)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (; *s != '\0'; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static int map_grow(vf_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    const char **keys = calloc(cap, sizeof(*keys));
    size_t *vals = calloc(cap, sizeof(*vals));
    if (keys == NULL || vals == NULL) {
        free(keys);
        free(vals);
        return CNX_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        size_t k;
        if (m->keys[i] == NULL)
            continue;
        k = (size_t)fnv1a(m->keys[i]) & (cap - 1);
        while (keys[k] != NULL)
            k = (k + 1) & (cap - 1);
        keys[k] = m->keys[i];
        vals[k] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return 0;
}

int vf_map_put(vf_map *m, const char *key, size_t val, size_t *old)
{
    size_t k;
    if ((m->n + 1) * 2 > m->cap && map_grow(m) != 0)
        return CNX_ENOMEM;
    k = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[k] != NULL) {
        if (strcmp(m->keys[k], key) == 0) {
            if (old != NULL)
                *old = m->vals[k];
            return 0;
        }
        k = (k + 1) & (m->cap - 1);
    }
    m->keys[k] = key;
    m->vals[k] = val;
    m->n++;
    return 1;
}

size_t *vf_map_get(const vf_map *m, const char *key)
{
    size_t k;
    if (m->cap == 0)
        return NULL;
    k = (size_t)fnv1a(key) & (m->cap - 1);
    while (m->keys[k] != NULL) {
        if (strcmp(m->keys[k], key) == 0)
            return &m->vals[k];
        k = (k + 1) & (m->cap - 1);
    }
    return NULL;
}

void vf_map_dispose(vf_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* ---- parallel loop --------------------------------------------------- */

typedef struct par {
    atomic_size_t next, done;
    size_t n;
    vf_task_fn fn;
    void *ctx;
    void (*progress)(void *ctx, size_t done);
} par;

typedef struct par_thread {
    par *p;
    int id;
} par_thread;

static void *par_main(void *arg)
{
    par_thread *pt = arg;
    par *p = pt->p;
    for (;;) {
        size_t i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        p->fn(p->ctx, i, pt->id);
        i = atomic_fetch_add(&p->done, 1) + 1;
        if (p->progress != NULL)
            p->progress(p->ctx, i);
    }
    return NULL;
}

void vf_parallel(int threads, size_t n, vf_task_fn fn, void *ctx,
                 void (*progress)(void *ctx, size_t done))
{
    pthread_t tid[256];
    par_thread pt[256];
    int started = 0;
    par p;
    atomic_init(&p.next, 0);
    atomic_init(&p.done, 0);
    p.n = n;
    p.fn = fn;
    p.ctx = ctx;
    p.progress = progress;
    if (threads < 1)
        threads = 1;
    if (threads > 256)
        threads = 256;
    if ((size_t)threads > n)
        threads = n > 0 ? (int)n : 1;
    for (int t = 0; t < threads; t++) {
        pt[t].p = &p;
        pt[t].id = t;
    }
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, par_main, &pt[t]) == 0)
            started++;
    par_main(&pt[0]);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
}

/* ---- hashing --------------------------------------------------------- */

int vf_url_path(const char *url, char *path, size_t cap)
{
    const char *p = url;
    if (strncmp(url, "file://", 7) == 0)
        p = url + 7;
    else if (strstr(url, "://") != NULL)
        return -1;
    if (p[0] != '/' || (size_t)snprintf(path, cap, "%s", p) >= cap)
        return -1;
    return 0;
}

void vf_hash_file(vf_hash_job *job, uint8_t *buf, size_t cap)
{
    static const char hex[] = "0123456789abcdef";
    char path[4200];
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = NULL;
    struct stat st;
    int fd;

    job->digest[0] = '\0';
    job->status = 0;
    job->size = 0;
    if (vf_url_path(job->url, path, sizeof(path)) != 0) {
        job->status = CNX_EUNSUPPORTED;
        snprintf(job->error, sizeof(job->error),
                 "cannot read it: only file:// URLs can be read");
        return;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        job->status = errno == ENOENT || errno == ENOTDIR ? CNX_ENOTFOUND
                                                          : CNX_EIO;
        snprintf(job->error, sizeof(job->error), "%s", strerror(errno));
        return;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        job->status = CNX_EIO;
        snprintf(job->error, sizeof(job->error), "not a regular file");
        close(fd);
        return;
    }
    (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    ctx = EVP_MD_CTX_new();
    if (ctx == NULL || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        job->status = CNX_ENOMEM;
        snprintf(job->error, sizeof(job->error), "out of memory");
        goto done;
    }
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            job->status = CNX_EIO;
            snprintf(job->error, sizeof(job->error), "read: %s",
                     strerror(errno));
            goto done;
        }
        if (n == 0)
            break;
        EVP_DigestUpdate(ctx, buf, (size_t)n);
        job->size += (uint64_t)n;
    }
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    memcpy(job->digest, "sha256:", 7);
    for (int i = 0; i < 32; i++) {
        job->digest[7 + 2 * i] = hex[md[i] >> 4];
        job->digest[8 + 2 * i] = hex[md[i] & 15];
    }
    job->digest[71] = '\0';
done:
    EVP_MD_CTX_free(ctx);
    close(fd);
}
