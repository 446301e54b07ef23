/*
 * sharded_tool - reads what tests/py/sharded_ref.py writes, through
 * cnx/sharded.h, for tests/integration/sharded_ref.sh.
 *
 *   sharded_tool check DIR          every chunk of chunks.txt equal to
 *                                   expect/<id> byte for byte; every id of
 *                                   missing.txt reported CNX_ENOTFOUND
 *   sharded_tool corrupt DIR        case.txt's chunk refused with its error
 *                                   name and a message holding its text
 *   sharded_tool morton FILE        "gx gy gz x y z code" lines agree
 *   sharded_tool write DIR          the chunks of chunks.txt (bytes from
 *                                   expect/<id>) encoded with
 *                                   cnx_shard_encode into DIR/<key>/, one
 *                                   file a non-empty shard (the directory
 *                                   must not exist yet); tests/py's reader
 *                                   reads them back
 *   sharded_tool same URL_A URL_B   the first scale of both layers read
 *                                   whole through cnx_layer_read (no
 *                                   fill: every chunk must exist) holds
 *                                   the same voxels; prints the count
 *   sharded_tool reshard SRC DST BYTES [gzip]
 *                                   the unsharded layer SRC (a directory,
 *                                   its first scale) as a sharded layer
 *                                   DST: the spec cnx_sharding_choose picks
 *                                   for shards of BYTES (data gzip when
 *                                   asked), the chunk files as stored,
 *                                   what the shard stage does in a
 *                                   workflow; for third-party readers
 *   sharded_tool put DIR URL        every file of DIR (info, shards, ...)
 *                                   put into the store URL, same names
 *   sharded_tool volume DIR [URL]   the layer at URL (default file://DIR)
 *                                   read through cnx_layer_read over each
 *                                   box of boxes.txt equals volume.bin
 *                                   there, with CNX_READ_FILL_MISSING; and
 *                                   without it, ENOTFOUND exactly where
 *                                   the box touches a left-out chunk;
 *                                   on an object store, the first box
 *                                   costs at most one request a chunk
 *                                   plus two a minishard (index cache);
 *                                   then 4 threads read the whole volume
 *                                   3 times each through the same layer
 *
 * The sharding spec comes from DIR/info (scale 0) through cnx_info_parse;
 * shards are files DIR/<key>/<name>, served by a ranged read on stdio, or,
 * with check/corrupt DIR URL, objects <key>/<name> of the store URL read
 * through cnx_sharded_store_read (cnx/sharded.h).
 * Exit status 0 when all agree, 1 on any difference.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/sharded.h"
#include "cnx/store.h"

typedef struct file_ctx {
    const char *dir;           /* the scale's directory */
    int reads;
    cnx_sharded_source source; /* store != NULL: read through it instead */
} file_ctx;

static int store_read(void *ctx, const char *name, uint64_t offset,
                      uint64_t length, uint8_t **out)
{
    file_ctx *fc = ctx;
    fc->reads++;
    return cnx_sharded_store_read(&fc->source, name, offset, length, out);
}

static int file_read(void *ctx, const char *name, uint64_t offset,
                     uint64_t length, uint8_t **out)
{
    file_ctx *fc = ctx;
    char path[4096];
    struct stat st;
    FILE *f;
    uint8_t *buf;

    fc->reads++;
    *out = NULL;
    snprintf(path, sizeof(path), "%s/%s", fc->dir, name);
    f = fopen(path, "rb");
    if (f == NULL)
        return errno == ENOENT
                   ? cnx_error_set(CNX_ENOTFOUND, 0, "%s: no such file", path)
                   : cnx_error_set(CNX_EIO, 1, "%s: %s", path, strerror(errno));
    if (fstat(fileno(f), &st) != 0 || offset > (uint64_t)st.st_size ||
        length > (uint64_t)st.st_size - offset) {
        fclose(f);
        return cnx_error_set(CNX_ERANGE, 0, "%s: range past the end", path);
    }
    buf = malloc(length > 0 ? (size_t)length : 1);
    if (buf == NULL || fseeko(f, (off_t)offset, SEEK_SET) != 0 ||
        fread(buf, 1, (size_t)length, f) != (size_t)length) {
        free(buf);
        fclose(f);
        return cnx_error_set(CNX_EIO, 1, "%s: read failed", path);
    }
    fclose(f);
    *out = buf;
    return 0;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 &&
        fseek(f, 0, SEEK_SET) == 0) {
        buf = malloc((size_t)n + 1);
        if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        } else if (buf != NULL) {
            buf[n] = '\0';
            *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

/* The spec of DIR/info's first scale and that scale's directory. */
static int load_spec(const char *dir, cnx_sharding *spec, char *scale_dir,
                     size_t n, char key[256])
{
    char path[4096];
    size_t len;
    char *text;
    cnx_layer_info info;
    int rc;

    snprintf(path, sizeof(path), "%s/info", dir);
    text = slurp(path, &len);
    if (text == NULL) {
        fprintf(stderr, "sharded_tool: cannot read %s\n", path);
        return 1;
    }
    rc = cnx_info_parse(&info, text, len);
    free(text);
    if (rc != 0 || !info.scales[0].sharded) {
        fprintf(stderr, "sharded_tool: %s: %s\n", path,
                rc != 0 ? cnx_error_last()->message : "scale 0 not sharded");
        return 1;
    }
    *spec = info.scales[0].sharding;
    snprintf(scale_dir, n, "%s/%s", dir, info.scales[0].key);
    snprintf(key, 256, "%s", info.scales[0].key);
    return 0;
}

/* Open url (if not NULL) as fc's source, the scale's key its prefix. */
static int open_source(file_ctx *fc, const char *url, const char *key)
{
    if (url == NULL)
        return 0;
    if (cnx_store_open(&fc->source.store, url) != 0) {
        fprintf(stderr, "sharded_tool: %s: %s\n", url,
                cnx_error_last()->message);
        return 1;
    }
    fc->source.prefix = key;
    return 0;
}

static int check(const char *dir, const char *url)
{
    cnx_sharding spec;
    char scale_dir[4096], path[4096], line[64], key[256];
    file_ctx fc = {scale_dir, 0, {NULL, NULL}};
    cnx_shard_read_fn read_fn = url != NULL ? store_read : file_read;
    FILE *list;
    int bad = 0, found = 0, missing = 0;

    if (load_spec(dir, &spec, scale_dir, sizeof(scale_dir), key) != 0 ||
        open_source(&fc, url, key) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/chunks.txt", dir);
    list = fopen(path, "r");
    if (list == NULL) {
        cnx_store_free(fc.source.store);
        return fprintf(stderr, "sharded_tool: no %s\n", path), 1;
    }
    while (fgets(line, sizeof(line), list) != NULL) {
        uint64_t id = strtoull(line, NULL, 10);
        uint8_t *got;
        size_t got_len, want_len = 0;
        char *want;
        int rc =
            cnx_sharded_read_chunk(&spec, id, read_fn, &fc, &got, &got_len);
        snprintf(path, sizeof(path), "%s/expect/%" PRIu64, dir, id);
        want = slurp(path, &want_len);
        if (rc != 0) {
            fprintf(stderr, "%s: chunk %" PRIu64 ": %s\n", dir, id,
                    cnx_error_last()->message);
            bad++;
        } else if (want == NULL || got_len != want_len ||
                   memcmp(got, want, got_len) != 0) {
            fprintf(stderr,
                    "%s: chunk %" PRIu64 ": %zu bytes differ from "
                    "the %zu expected\n",
                    dir, id, got_len, want_len);
            bad++;
        } else {
            found++;
        }
        if (rc == 0)
            free(got);
        free(want);
    }
    fclose(list);
    snprintf(path, sizeof(path), "%s/missing.txt", dir);
    list = fopen(path, "r");
    if (list == NULL) {
        cnx_store_free(fc.source.store);
        return fprintf(stderr, "sharded_tool: no %s\n", path), 1;
    }
    while (fgets(line, sizeof(line), list) != NULL) {
        uint64_t id = strtoull(line, NULL, 10);
        uint8_t *got;
        size_t got_len;
        int rc =
            cnx_sharded_read_chunk(&spec, id, read_fn, &fc, &got, &got_len);
        if (rc != CNX_ENOTFOUND) {
            fprintf(stderr,
                    "%s: missing chunk %" PRIu64 ": %s, not "
                    "ENOTFOUND (%s)\n",
                    dir, id, cnx_error_name(rc),
                    rc == 0 ? "" : cnx_error_last()->message);
            if (rc == 0)
                free(got);
            bad++;
        } else {
            missing++;
        }
    }
    fclose(list);
    printf("%s%s%s: %d chunks equal, %d missing reported missing, %d reads, "
           "%d bad\n",
           dir, url ? " via " : "", url ? url : "", found, missing, fc.reads,
           bad);
    cnx_store_free(fc.source.store);
    return bad != 0 || found == 0;
}

static int corrupt(const char *dir, const char *url)
{
    cnx_sharding spec;
    char scale_dir[4096], path[4096], err[32], part[256], key[256];
    file_ctx fc = {scale_dir, 0, {NULL, NULL}};
    unsigned long long id;
    FILE *f;
    uint8_t *got = NULL;
    size_t got_len;
    int rc;

    if (load_spec(dir, &spec, scale_dir, sizeof(scale_dir), key) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/case.txt", dir);
    f = fopen(path, "r");
    if (f == NULL || fscanf(f, "%llu %31s %255[^\n]", &id, err, part) != 3) {
        if (f != NULL)
            fclose(f);
        return fprintf(stderr, "sharded_tool: bad %s\n", path), 1;
    }
    fclose(f);
    if (open_source(&fc, url, key) != 0)
        return 1;
    rc = cnx_sharded_read_chunk(&spec, id, url ? store_read : file_read, &fc,
                                &got, &got_len);
    if (rc == 0) {
        free(got);
        fprintf(stderr, "%s: chunk %llu read, expected %s\n", dir, id, err);
        rc = 1;
    } else if (strcmp(cnx_error_name(rc), err) != 0 ||
               strstr(cnx_error_last()->message, part) == NULL) {
        fprintf(stderr, "%s: got %s '%s', expected %s '...%s...'\n", dir,
                cnx_error_name(rc), cnx_error_last()->message, err, part);
        rc = 1;
    } else {
        printf("%s%s%s: %s: %s\n", dir, url ? " via " : "", url ? url : "",
               err, cnx_error_last()->message);
        rc = 0;
    }
    cnx_store_free(fc.source.store);
    return rc;
}

static int morton(const char *file)
{
    FILE *f = fopen(file, "r");
    unsigned long long v[7];
    int bad = 0, n = 0;
    if (f == NULL)
        return fprintf(stderr, "sharded_tool: no %s\n", file), 1;
    while (fscanf(f, "%llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                  &v[3], &v[4], &v[5], &v[6]) == 7) {
        uint64_t grid[3] = {v[0], v[1], v[2]}, pos[3] = {v[3], v[4], v[5]};
        uint64_t code;
        n++;
        if (cnx_sharding_morton(pos, grid, &code) != 0 || code != v[6]) {
            fprintf(stderr,
                    "morton: grid %llu %llu %llu pos %llu %llu "
                    "%llu: got %" PRIu64 ", expected %llu\n",
                    v[0], v[1], v[2], v[3], v[4], v[5], code, v[6]);
            bad++;
        }
    }
    fclose(f);
    printf("morton: %d codes, %d bad\n", n, bad);
    return bad != 0 || n == 0;
}

/* Put every regular file under dir/rel into store as rel/name. */
static int put_tree(cnx_store *store, const char *dir, const char *rel)
{
    char path[4096], child[2048];
    struct dirent *de;
    DIR *d;
    int bad = 0;

    snprintf(path, sizeof(path), "%s%s%s", dir, rel[0] ? "/" : "", rel);
    d = opendir(path);
    if (d == NULL)
        return fprintf(stderr, "sharded_tool: cannot list %s\n", path), 1;
    while ((de = readdir(d)) != NULL && !bad) {
        struct stat st;
        char full[8192];
        size_t len = 0;
        char *bytes;
        if (de->d_name[0] == '.')
            continue;
        snprintf(child, sizeof(child), "%s%s%s", rel, rel[0] ? "/" : "",
                 de->d_name);
        snprintf(full, sizeof(full), "%s/%s", dir, child);
        if (stat(full, &st) != 0) {
            bad = 1;
        } else if (S_ISDIR(st.st_mode)) {
            bad = put_tree(store, dir, child);
        } else if ((bytes = slurp(full, &len)) == NULL) {
            bad = 1;
        } else {
            if (cnx_store_put(store, child, bytes, len, NULL) != 0) {
                fprintf(stderr, "sharded_tool: put %s: %s\n", child,
                        cnx_error_last()->message);
                bad = 1;
            }
            free(bytes);
        }
    }
    closedir(d);
    return bad;
}

static int put(const char *dir, const char *url)
{
    cnx_store *store;
    int bad;
    if (cnx_store_open(&store, url) != 0)
        return fprintf(stderr, "sharded_tool: %s: %s\n", url,
                       cnx_error_last()->message),
               1;
    bad = put_tree(store, dir, "");
    cnx_store_free(store);
    return bad;
}

/* Box b of the volume read back equals the same box of the whole array. */
static int same_as_array(const cnx_volume *vol, const uint8_t *whole,
                         const cnx_scale *sc, int64_t channels)
{
    const cnx_box *b = &vol->box;
    const uint8_t *got = vol->data;
    size_t k = 0;
    for (int64_t c = 0; c < channels; c++)
        for (int64_t z = b->min[2]; z < b->max[2]; z++)
            for (int64_t y = b->min[1]; y < b->max[1]; y++)
                for (int64_t x = b->min[0]; x < b->max[0]; x++, k++) {
                    int64_t lx = x - sc->voxel_offset[0];
                    int64_t ly = y - sc->voxel_offset[1];
                    int64_t lz = z - sc->voxel_offset[2];
                    size_t i =
                        (size_t)(lx + sc->size[0] *
                                          (ly + sc->size[1] *
                                                    (lz + sc->size[2] * c)));
                    if (got[k] != whole[i]) {
                        fprintf(stderr,
                                "sharded_tool: voxel %" PRId64 ",%" PRId64
                                ",%" PRId64 " channel %" PRId64
                                ": read %u, written %u\n",
                                x, y, z, c, got[k], whole[i]);
                        return 1;
                    }
                }
    return 0;
}

typedef struct reader_arg {
    cnx_layer *layer;
    const uint8_t *whole;
    int bad;
} reader_arg;

/* One of several threads reading the whole volume through one layer (its
 * index cache shared). */
static void *reader(void *p)
{
    reader_arg *ra = p;
    const cnx_layer_info *info = cnx_layer_get_info(ra->layer);
    const cnx_scale *sc = &info->scales[0];
    cnx_box all = {
        {sc->voxel_offset[0], sc->voxel_offset[1], sc->voxel_offset[2]},
        {sc->voxel_offset[0] + sc->size[0], sc->voxel_offset[1] + sc->size[1],
         sc->voxel_offset[2] + sc->size[2]}};
    for (int i = 0; i < 3 && !ra->bad; i++) {
        cnx_volume *vol = NULL;
        if (cnx_layer_read(ra->layer, 0, &all, CNX_READ_FILL_MISSING, NULL,
                           NULL, NULL, &vol) != 0 ||
            same_as_array(vol, ra->whole, sc, info->channels) != 0)
            ra->bad = 1;
        cnx_volume_free(vol);
    }
    return NULL;
}

static int volume(const char *dir, const char *url)
{
    char path[4096], lurl[4200];
    cnx_layer *layer = NULL;
    const cnx_layer_info *info;
    uint8_t *whole = NULL;
    size_t len = 0;
    long long v[7];
    cnx_store_stats before, after;
    FILE *f = NULL;
    int bad = 0, n = 0;

    if (url == NULL) {
        snprintf(lurl, sizeof(lurl), "file://%s", dir);
        url = lurl;
    }
    if (cnx_layer_open(&layer, url) != 0)
        return fprintf(stderr, "sharded_tool: %s: %s\n", url,
                       cnx_error_last()->message),
               1;
    info = cnx_layer_get_info(layer);
    snprintf(path, sizeof(path), "%s/volume.bin", dir);
    whole = (uint8_t *)slurp(path, &len);
    snprintf(path, sizeof(path), "%s/boxes.txt", dir);
    f = fopen(path, "r");
    if (whole == NULL || f == NULL || info->dtype != CNX_DT_UINT8 ||
        len != (size_t)(info->scales[0].size[0] * info->scales[0].size[1] *
                        info->scales[0].size[2] * info->channels)) {
        fprintf(stderr, "sharded_tool: %s: bad volume.bin or boxes.txt\n", dir);
        bad = 1;
    }
    cnx_store_stats_get(&before);
    while (!bad && fscanf(f, "%lld %lld %lld %lld %lld %lld %lld", &v[0], &v[1],
                          &v[2], &v[3], &v[4], &v[5], &v[6]) == 7) {
        cnx_box box = {{v[0], v[1], v[2]}, {v[3], v[4], v[5]}};
        cnx_volume *vol = NULL;
        int rc;
        n++;
        rc = cnx_layer_read(layer, 0, &box, CNX_READ_FILL_MISSING, NULL, NULL,
                            NULL, &vol);
        if (rc != 0) {
            fprintf(stderr, "sharded_tool: box %d: %s\n", n,
                    cnx_error_last()->message);
            bad = 1;
        } else if (same_as_array(vol, whole, &info->scales[0],
                                 info->channels) != 0) {
            fprintf(stderr, "sharded_tool: %s box %d differs\n", dir, n);
            bad = 1;
        }
        cnx_volume_free(vol);
        vol = NULL;
        if (n == 1 && !bad && cnx_store_is_remote(cnx_layer_store(layer))) {
            /* The first box, read by a fresh layer: each minishard index
             * is read once (2 requests), then 1 request a chunk; without
             * the index cache it is 3 requests a chunk. */
            const cnx_scale *sc = &info->scales[0];
            cnx_grid grid = cnx_info_grid(info, 0);
            int64_t lo[3], hi[3];
            uint64_t chunks, limit, used;
            cnx_store_stats_get(&after);
            cnx_grid_chunk_range(&grid, &box, lo, hi);
            chunks =
                (uint64_t)((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]));
            limit = chunks + 2 * ((uint64_t)1 << (sc->sharding.minishard_bits +
                                                  sc->sharding.shard_bits));
            used = (after.requests - before.requests) -
                   (after.retries - before.retries);
            printf("sharded_tool: box 1: %" PRIu64 " chunks, %" PRIu64
                   " requests (at most %" PRIu64 ")\n",
                   chunks, used, limit);
            if (used > limit) {
                fprintf(stderr,
                        "sharded_tool: box 1: %" PRIu64
                        " requests, over %" PRIu64 "\n",
                        used, limit);
                bad = 1;
            }
        }
        rc = cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol);
        if (rc != (v[6] ? CNX_ENOTFOUND : 0)) {
            fprintf(stderr, "sharded_tool: box %d without fill: %s, want %s\n",
                    n, rc == 0 ? "ok" : cnx_error_last()->message,
                    v[6] ? "ENOTFOUND" : "ok");
            bad = 1;
        } else if (rc == 0 && same_as_array(vol, whole, &info->scales[0],
                                            info->channels) != 0) {
            bad = 1;
        }
        cnx_volume_free(vol);
    }
    if (!bad) {
        pthread_t th[4];
        reader_arg ra[4];
        for (int i = 0; i < 4; i++) {
            ra[i] = (reader_arg){layer, whole, 0};
            if (pthread_create(&th[i], NULL, reader, &ra[i]) != 0)
                return fprintf(stderr, "sharded_tool: no thread\n"), 1;
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            if (ra[i].bad) {
                fprintf(stderr, "sharded_tool: %s: thread %d read wrong\n", dir,
                        i);
                bad = 1;
            }
        }
    }
    if (!bad && n == 0) {
        fprintf(stderr, "sharded_tool: %s: no boxes\n", dir);
        bad = 1;
    }
    if (f != NULL)
        fclose(f);
    free(whole);
    cnx_layer_free(layer);
    if (!bad)
        printf("sharded_tool: %s: %d boxes read back\n", url, n);
    return bad;
}

/* The set's chunks, grouped by shard and encoded, one file a shard. */
static int write_set(const char *dir)
{
    cnx_sharding spec;
    char scale_dir[4096], path[4096], line[64], key[256];
    cnx_shard_chunk *chunks = NULL;
    char **bytes = NULL;
    uint64_t *shard_of = NULL;
    size_t n = 0, cap = 0;
    int bad = 0, files = 0;
    FILE *list;

    if (load_spec(dir, &spec, scale_dir, sizeof(scale_dir), key) != 0)
        return 1;
    snprintf(path, sizeof(path), "%s/chunks.txt", dir);
    list = fopen(path, "r");
    if (list == NULL)
        return fprintf(stderr, "sharded_tool: no %s\n", path), 1;
    while (!bad && fgets(line, sizeof(line), list) != NULL) {
        uint64_t id = strtoull(line, NULL, 10);
        size_t len = 0;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            chunks = realloc(chunks, cap * sizeof(*chunks));
            bytes = realloc(bytes, cap * sizeof(*bytes));
            shard_of = realloc(shard_of, cap * sizeof(*shard_of));
            if (chunks == NULL || bytes == NULL || shard_of == NULL) {
                fprintf(stderr, "sharded_tool: out of memory\n");
                return 1;
            }
        }
        snprintf(path, sizeof(path), "%s/expect/%" PRIu64, dir, id);
        bytes[n] = slurp(path, &len);
        if (bytes[n] == NULL) {
            fprintf(stderr, "sharded_tool: cannot read %s\n", path);
            bad = 1;
            break;
        }
        chunks[n] =
            (cnx_shard_chunk){id, (const uint8_t *)bytes[n], len, NULL, 0};
        {
            uint64_t m;
            cnx_sharding_locate(&spec, id, &shard_of[n], &m);
        }
        n++;
    }
    fclose(list);
    if (!bad && mkdir(scale_dir, 0777) != 0) {
        fprintf(stderr, "sharded_tool: mkdir %s: %s\n", scale_dir,
                strerror(errno));
        bad = 1;
    }
    /* Shard by shard, in the order they first appear (each chunk taken
     * once: its shard's group is gathered when first seen). */
    for (size_t i = 0; i < n && !bad; i++) {
        cnx_shard_chunk *mine;
        size_t k = 0, len;
        uint8_t *out;
        char name[CNX_SHARD_NAME_MAX], file[4096 + CNX_SHARD_NAME_MAX + 1];
        int seen = 0;
        FILE *f;
        for (size_t j = 0; j < i; j++)
            seen |= shard_of[j] == shard_of[i];
        if (seen)
            continue;
        mine = malloc(n * sizeof(*mine));
        if (mine == NULL)
            return fprintf(stderr, "sharded_tool: out of memory\n"), 1;
        for (size_t j = i; j < n; j++)
            if (shard_of[j] == shard_of[i])
                mine[k++] = chunks[j];
        if (cnx_shard_encode(&spec, shard_of[i], mine, k, &out, &len) != 0) {
            fprintf(stderr, "sharded_tool: %s: shard %" PRIu64 ": %s\n", dir,
                    shard_of[i], cnx_error_last()->message);
            free(mine);
            bad = 1;
            break;
        }
        free(mine);
        cnx_sharding_shard_name(&spec, shard_of[i], name);
        snprintf(file, sizeof(file), "%s/%s", scale_dir, name);
        f = fopen(file, "wb");
        if (f == NULL || fwrite(out, 1, len, f) != len) {
            fprintf(stderr, "sharded_tool: cannot write %s\n", file);
            bad = 1;
        }
        if (f != NULL && fclose(f) != 0)
            bad = 1;
        free(out);
        files++;
    }
    for (size_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
    free(chunks);
    free(shard_of);
    if (!bad)
        printf("%s: %zu chunks written in %d shards\n", dir, n, files);
    return bad;
}

/* Two layers' first scales read whole: the same geometry and voxels. */
static int same(const char *url_a, const char *url_b)
{
    cnx_layer *a = NULL, *b = NULL;
    cnx_volume *va = NULL, *vb = NULL;
    const cnx_scale *sa, *sb;
    cnx_box all;
    int bad = 1;

    if (cnx_layer_open(&a, url_a) != 0 || cnx_layer_open(&b, url_b) != 0) {
        fprintf(stderr, "sharded_tool: %s\n", cnx_error_last()->message);
        goto done;
    }
    sa = &cnx_layer_get_info(a)->scales[0];
    sb = &cnx_layer_get_info(b)->scales[0];
    if (memcmp(sa->size, sb->size, sizeof(sa->size)) != 0 ||
        memcmp(sa->voxel_offset, sb->voxel_offset, sizeof(sa->size)) != 0 ||
        cnx_layer_get_info(a)->dtype != cnx_layer_get_info(b)->dtype) {
        fprintf(stderr, "sharded_tool: %s and %s differ in geometry\n", url_a,
                url_b);
        goto done;
    }
    for (int i = 0; i < 3; i++) {
        all.min[i] = sa->voxel_offset[i];
        all.max[i] = sa->voxel_offset[i] + sa->size[i];
    }
    if (cnx_layer_read(a, 0, &all, 0, NULL, NULL, NULL, &va) != 0 ||
        cnx_layer_read(b, 0, &all, 0, NULL, NULL, NULL, &vb) != 0) {
        fprintf(stderr, "sharded_tool: read: %s\n", cnx_error_last()->message);
        goto done;
    }
    {
        size_t n = (size_t)cnx_box_voxels(&all) *
                   cnx_dtype_size(cnx_layer_get_info(a)->dtype) *
                   (size_t)cnx_layer_get_info(a)->channels;
        if (memcmp(va->data, vb->data, n) != 0) {
            fprintf(stderr, "sharded_tool: %s and %s hold different voxels\n",
                    url_a, url_b);
            goto done;
        }
        printf("sharded_tool: %" PRId64 " voxels (%s, %s scale '%s') "
               "equal\n",
               cnx_box_voxels(&all), sa->sharded ? "sharded" : "unsharded",
               sb->sharded ? "sharded" : "unsharded", sb->key);
    }
    bad = 0;
done:
    cnx_volume_free(va);
    cnx_volume_free(vb);
    cnx_layer_free(a);
    cnx_layer_free(b);
    return bad;
}

/* SRC's first scale re-stored as a sharded layer DST, chunk files as
 * stored (the shard stage's work, offline). */
static int reshard(const char *src, const char *dst, const char *bytes_arg,
                   int gzip)
{
    char path[4096], file[8192];
    cnx_layer_info info;
    cnx_scale *sc;
    cnx_sharding_target target = {0, 0};
    cnx_grid grid;
    int64_t counts[3], g[3];
    uint64_t grid_u[3], nshards;
    cnx_layer *out = NULL;
    char durl[4200];
    size_t len;
    char *text;
    int bad = 0, files = 0;

    snprintf(path, sizeof(path), "%s/info", src);
    text = slurp(path, &len);
    if (text == NULL || cnx_info_parse(&info, text, len) != 0) {
        free(text);
        return fprintf(stderr, "sharded_tool: %s: bad info\n", path), 1;
    }
    free(text);
    info.nscales = 1;
    sc = &info.scales[0];
    grid = cnx_info_grid(&info, 0);
    cnx_grid_counts(&grid, counts);
    for (int i = 0; i < 3; i++)
        grid_u[i] = (uint64_t)counts[i];
    target.shard_bytes = strtoull(bytes_arg, NULL, 10);
    if (sc->sharded ||
        cnx_sharding_choose(grid_u,
                            (uint64_t)(sc->chunk[0] * sc->chunk[1] *
                                       sc->chunk[2] * info.channels) *
                                cnx_dtype_size(info.dtype),
                            &target, &sc->sharding) != 0)
        return fprintf(stderr, "sharded_tool: %s: cannot shard\n", src), 1;
    sc->sharded = 1;
    if (gzip)
        sc->sharding.data_encoding = CNX_SHARD_ENC_GZIP;
    snprintf(durl, sizeof(durl), "file://%s", dst);
    if (cnx_layer_create(&out, durl, &info) != 0)
        return fprintf(stderr, "sharded_tool: %s: %s\n", durl,
                       cnx_error_last()->message),
               1;
    cnx_layer_free(out);
    snprintf(path, sizeof(path), "%s/%s", dst, sc->key);
    mkdir(path, 0777);
    nshards = sc->sharding.shard_bits >= 20
                  ? 0
                  : (uint64_t)1 << sc->sharding.shard_bits;
    /* shard by shard: every chunk of the grid, kept if in this shard */
    for (uint64_t shard = 0; shard < nshards && !bad; shard++) {
        cnx_shard_chunk *mine = NULL;
        char **keep = NULL;
        size_t k = 0, cap = 0, olen;
        uint8_t *obytes;
        char name[CNX_SHARD_NAME_MAX];
        for (g[2] = 0; g[2] < counts[2] && !bad; g[2]++)
            for (g[1] = 0; g[1] < counts[1] && !bad; g[1]++)
                for (g[0] = 0; g[0] < counts[0] && !bad; g[0]++) {
                    uint64_t pos[3] = {(uint64_t)g[0], (uint64_t)g[1],
                                       (uint64_t)g[2]};
                    uint64_t id, sh, m;
                    cnx_box box = cnx_grid_chunk_box(&grid, g);
                    char cname[256];
                    size_t clen = 0;
                    cnx_sharding_morton(pos, grid_u, &id);
                    cnx_sharding_locate(&sc->sharding, id, &sh, &m);
                    if (sh != shard)
                        continue;
                    cnx_layer_chunk_name(&info, 0, &box, cname, sizeof(cname));
                    snprintf(file, sizeof(file), "%s/%s", src, cname);
                    if (k == cap) {
                        cap = cap ? 2 * cap : 64;
                        mine = realloc(mine, cap * sizeof(*mine));
                        keep = realloc(keep, cap * sizeof(*keep));
                        if (mine == NULL || keep == NULL)
                            return fprintf(stderr, "out of memory\n"), 1;
                    }
                    keep[k] = slurp(file, &clen);
                    if (keep[k] == NULL)
                        continue; /* a chunk never written stays absent */
                    mine[k] = (cnx_shard_chunk){id, (uint8_t *)keep[k], clen,
                                                NULL, 0};
                    k++;
                }
        if (k > 0) {
            FILE *f;
            if (cnx_shard_encode(&sc->sharding, shard, mine, k, &obytes,
                                 &olen) != 0) {
                fprintf(stderr, "sharded_tool: %s\n",
                        cnx_error_last()->message);
                bad = 1;
            } else {
                cnx_sharding_shard_name(&sc->sharding, shard, name);
                snprintf(file, sizeof(file), "%s/%s/%s", dst, sc->key, name);
                f = fopen(file, "wb");
                if (f == NULL || fwrite(obytes, 1, olen, f) != olen)
                    bad = 1;
                if (f != NULL && fclose(f) != 0)
                    bad = 1;
                free(obytes);
                files++;
            }
        }
        for (size_t i = 0; i < k; i++)
            free(keep[i]);
        free(keep);
        free(mine);
    }
    if (nshards == 0)
        bad = fprintf(stderr, "sharded_tool: too many shards\n") > 0;
    if (!bad)
        printf("sharded_tool: %s -> %s: %d shards (preshift %d, minishard "
               "%d, shard %d bits)\n",
               src, dst, files, sc->sharding.preshift_bits,
               sc->sharding.minishard_bits, sc->sharding.shard_bits);
    return bad;
}

int main(int argc, char **argv)
{
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "check") == 0)
        return check(argv[2], argc == 4 ? argv[3] : NULL);
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "corrupt") == 0)
        return corrupt(argv[2], argc == 4 ? argv[3] : NULL);
    if (argc == 3 && strcmp(argv[1], "morton") == 0)
        return morton(argv[2]);
    if ((argc == 5 || argc == 6) && strcmp(argv[1], "reshard") == 0)
        return reshard(argv[2], argv[3], argv[4],
                       argc == 6 && strcmp(argv[5], "gzip") == 0);
    if (argc == 4 && strcmp(argv[1], "same") == 0)
        return same(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "write") == 0)
        return write_set(argv[2]);
    if (argc == 4 && strcmp(argv[1], "put") == 0)
        return put(argv[2], argv[3]);
    if ((argc == 3 || argc == 4) && strcmp(argv[1], "volume") == 0)
        return volume(argv[2], argc == 4 ? argv[3] : NULL);
    fprintf(stderr, "usage: sharded_tool check|corrupt|volume DIR [URL] | "
                    "morton FILE | write DIR | same URL URL | reshard SRC DST "
                    "BYTES [gzip] | put DIR URL\n");
    return 2;
}
