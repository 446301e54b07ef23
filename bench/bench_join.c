/*
 * bench_join.c - memory and time of the join's reduce tasks, the one-task
 * join beside the join as a tree, on the face records a real run wrote.
 *
 *   build/bench/bench_join FRAGMENTS_LAYER_DIR [BLOCK]
 *
 * FRAGMENTS_LAYER_DIR is a fragments layer of the segmentation workflow on
 * local disk (fragments/vN: its info and faces/<scale>/<chunk>); BLOCK the
 * side of a level-1 block in voxels (default 512, whole chunks). Each task
 * runs in its own forked process, as a worker would run it, so its peak
 * resident memory (ru_maxrss of the child) is its own:
 *  - the one-task join (the peer): read every face record,
 *    cnx_segjoin_run, encode every chunk's mapping and the segment
 *    properties;
 *  - each level-1 block: read the records of its chunks and of the chunks
 *    beside it, cnx_segjoin_block, write the summary (to a temporary
 *    directory);
 *  - the top: read every summary, cnx_segjoin_merge over the region,
 *    cnx_segjoin_tree_open, then per block cnx_segjoin_tree_block and its
 *    chunks' mappings, and the properties.
 * Printed: per task kind the tasks, the median and largest peak RSS (MiB)
 * and wall seconds; an empty child's peak RSS (what every figure
 * includes); bytes read per task; and whether the mappings and properties
 * of the tree are byte for byte those of the one-task join (SHA-256 over
 * them in chunk order). Exit 1 if they differ.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bench_util.h"
#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/segjoin.h"
#include "cnx/segjoin_io.h"
#include "cnx/segment_io.h"

typedef struct rec {
    char path[2304];
    cnx_box box;
} rec;

static rec *recs;
static size_t nrecs;
static cnx_box region;
static cnx_segment_params params;
static char tmpdir[256];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *b = NULL;
    long n;
    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0 || (b = malloc((size_t)n + 1)) == NULL ||
        fread(b, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench_join: cannot read %s: %s\n", path,
                strerror(errno));
        exit(2);
    }
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* The scale's resolution and faces directory, the records' boxes. */
static void load_layer(const char *dir)
{
    char path[2048];
    json_error_t jerr;
    json_t *info, *sc;
    const char *key;
    DIR *d;
    struct dirent *e;
    snprintf(path, sizeof(path), "%s/info", dir);
    info = json_load_file(path, 0, &jerr);
    sc = info ? json_array_get(json_object_get(info, "scales"), 0) : NULL;
    key = sc ? json_string_value(json_object_get(sc, "key")) : NULL;
    if (key == NULL) {
        fprintf(stderr, "bench_join: %s: not a layer's info\n", path);
        exit(2);
    }
    {
        double res[3];
        for (int i = 0; i < 3; i++)
            res[i] = json_number_value(
                json_array_get(json_object_get(sc, "resolution"), i));
        if (cnx_segment_params_at(&params, "{}", res) != 0) {
            fprintf(stderr, "bench_join: %s\n", cnx_error_last()->message);
            exit(2);
        }
    }
    snprintf(path, sizeof(path), "%s/faces/%s", dir, key);
    d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "bench_join: %s: %s\n", path, strerror(errno));
        exit(2);
    }
    while ((e = readdir(d)) != NULL) {
        cnx_box b;
        if (cnx_box_parse(e->d_name, &b) != 0)
            continue;
        recs = realloc(recs, (nrecs + 1) * sizeof(*recs));
        snprintf(recs[nrecs].path, sizeof(recs[nrecs].path), "%s/%s", path,
                 e->d_name);
        recs[nrecs].box = b;
        region = nrecs == 0 ? b : cnx_box_hull(&region, &b);
        nrecs++;
    }
    closedir(d);
    json_decref(info);
    if (nrecs == 0) {
        fprintf(stderr, "bench_join: %s: no face records\n", path);
        exit(2);
    }
}

static int cmp_rec(const void *x, const void *y)
{
    const rec *p = x, *q = y;
    for (int i = 2; i >= 0; i--)
        if (p->box.min[i] != q->box.min[i])
            return p->box.min[i] < q->box.min[i] ? -1 : 1;
    return 0;
}

/* Read the records whose chunk meets box (grown by one voxel if near). */
static size_t read_recs(const cnx_box *box, int64_t grow,
                        cnx_segjoin_input **in, size_t *bytes)
{
    cnx_box g = cnx_box_grow(box, grow, &region);
    size_t n = 0;
    *in = calloc(nrecs, sizeof(**in));
    for (size_t k = 0; k < nrecs; k++) {
        cnx_box x = cnx_box_intersect(&recs[k].box, &g);
        if (cnx_box_empty(&x))
            continue;
        (*in)[n].data = slurp(recs[k].path, &(*in)[n].len);
        (*in)[n].name = recs[k].path;
        *bytes += (*in)[n].len;
        n++;
    }
    return n;
}

static void fail(const char *what)
{
    fprintf(stderr, "bench_join: %s: %s\n", what, cnx_error_last()->message);
    _exit(3);
}

/* Mappings by chunk order: collect (box, mapping digest) and sort. */
typedef struct maprow {
    cnx_box box;
    uint8_t digest[32];
} maprow;

static int cmp_maprow(const void *x, const void *y)
{
    const maprow *p = x, *q = y;
    for (int i = 2; i >= 0; i--)
        if (p->box.min[i] != q->box.min[i])
            return p->box.min[i] < q->box.min[i] ? -1 : 1;
    return 0;
}

static void add_rows(maprow *rows, size_t *n, const cnx_segjoin *j)
{
    for (size_t k = 0; k < j->nchunks; k++) {
        uint8_t *map;
        size_t len;
        if (cnx_segjoin_mapping_encode(j, k, &map, &len) != 0)
            fail("mapping");
        rows[*n].box = j->chunks[k];
        cnx_sha256(map, len, rows[(*n)++].digest);
        free(map);
    }
}

/* SHA-256 over the mappings' digests in chunk order, then the
 * properties'. */
static void digest_rows(maprow *rows, size_t n, const cnx_segjoin *segs,
                        uint8_t out[32])
{
    uint8_t *all = malloc(32 * (n + 1));
    char *json;
    qsort(rows, n, sizeof(*rows), cmp_maprow);
    for (size_t k = 0; k < n; k++)
        memcpy(all + 32 * k, rows[k].digest, 32);
    if (all == NULL ||
        cnx_segjoin_properties_json(segs, params.resolution, &json) != 0)
        fail("properties");
    cnx_sha256(json, strlen(json), all + 32 * n);
    cnx_sha256(all, 32 * (n + 1), out);
    free(json);
    free(all);
}

/* ---- the tasks (each in a child) ---------------------------------------- */

typedef struct result {
    uint8_t digest[32];
    double wall;
    size_t bytes;
    int ok;
} result;

static void task_single(result *r)
{
    cnx_segjoin_input *in;
    cnx_segjoin j;
    maprow *rows = calloc(nrecs, sizeof(*rows));
    size_t n = read_recs(&region, 0, &in, &r->bytes), nr = 0;
    if (cnx_segjoin_run(in, n, &params, &j) != 0)
        fail("one-task join");
    add_rows(rows, &nr, &j);
    digest_rows(rows, nr, &j, r->digest);
    r->ok = 1;
}

static void block_path(char *buf, size_t n, const cnx_box *b)
{
    char name[128];
    cnx_box_format(b, name, sizeof(name));
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

static void task_block(const cnx_box *blk, result *r)
{
    cnx_segjoin_input *in;
    uint8_t *out;
    size_t len, n = read_recs(blk, 1, &in, &r->bytes);
    char path[512];
    FILE *f;
    if (cnx_segjoin_block(in, n, blk, &region, &params, &out, &len) != 0)
        fail("block");
    block_path(path, sizeof(path), blk);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(out, 1, len, f) != len || fclose(f) != 0)
        fail("write summary");
    r->ok = 1;
}

static void task_top(const cnx_box *blocks, size_t nb, result *r)
{
    cnx_segjoin_input *in = calloc(nb, sizeof(*in)), top = {0};
    cnx_segjoin_tree *t;
    cnx_segjoin segs = {0};
    maprow *rows = calloc(nrecs, sizeof(*rows));
    uint8_t *bytes;
    size_t nr = 0;
    for (size_t k = 0; k < nb; k++) {
        static char names[4096][512];
        block_path(names[k % 4096], 512, &blocks[k]);
        in[k].name = names[k % 4096];
        in[k].data = slurp(in[k].name, &in[k].len);
        r->bytes += in[k].len;
    }
    if (cnx_segjoin_merge(in, nb, &region, &region, &params, &bytes,
                          &top.len) != 0)
        fail("merge");
    top.data = bytes;
    top.name = "top";
    if (cnx_segjoin_tree_open(&top, 1, &t) != 0 ||
        cnx_segjoin_tree_segments(t, &segs) != 0)
        fail("tree");
    for (size_t k = 0; k < nb; k++) {
        cnx_segjoin j = {0};
        if (cnx_segjoin_tree_block(t, &in[k], &j) != 0)
            fail("tree block");
        add_rows(rows, &nr, &j);
        cnx_segjoin_free(&j);
    }
    digest_rows(rows, nr, &segs, r->digest);
    r->ok = 1;
}

/* Run one task in a child: its result and its peak RSS (KiB). */
static long run_child(int kind, const cnx_box *blk, const cnx_box *blocks,
                      size_t nb, result *r)
{
    int fd[2];
    pid_t pid;
    int status;
    struct rusage ru;
    double t0 = now_s();
    memset(r, 0, sizeof(*r));
    if (pipe(fd) != 0)
        exit(2);
    pid = fork();
    if (pid == 0) {
        result mine = {0};
        close(fd[0]);
        if (kind == 1)
            task_single(&mine);
        else if (kind == 2)
            task_block(blk, &mine);
        else if (kind == 3)
            task_top(blocks, nb, &mine);
        else
            mine.ok = 1; /* the empty child */
        if (write(fd[1], &mine, sizeof(mine)) != (ssize_t)sizeof(mine))
            _exit(4);
        _exit(0);
    }
    close(fd[1]);
    if (read(fd[0], r, sizeof(*r)) != (ssize_t)sizeof(*r))
        r->ok = 0;
    close(fd[0]);
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
        r->ok = 0;
    r->wall = now_s() - t0;
    return ru.ru_maxrss;
}

static int cmp_long(const void *x, const void *y)
{
    long a = *(const long *)x, b = *(const long *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    int64_t side = 512, chunk[3];
    cnx_box *blocks;
    long *rss, single_rss, top_rss, empty_rss;
    size_t nb = 0, bytes_blocks = 0;
    result rs, rt, rb;
    double wall_blocks = 0;
    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        printf("usage: bench_join FRAGMENTS_LAYER_DIR [BLOCK]\n"
               "The one-task join beside the join as a tree (blocks of "
               "BLOCK^3 voxels,\ndefault 512): peak memory and wall time "
               "of each reduce task, each in its\nown process, and "
               "whether both give the same bytes.\n");
        return argc < 2 ? 2 : 0;
    }
    if (argc > 2)
        side = strtoll(argv[2], NULL, 10);
    load_layer(argv[1]);
    qsort(recs, nrecs, sizeof(*recs), cmp_rec);
    cnx_box_size(&recs[0].box, chunk);
    if (side <= 0 || side % chunk[0] || side % chunk[1] || side % chunk[2]) {
        fprintf(stderr, "bench_join: BLOCK %lld: not whole chunks of "
                        "%lld,%lld,%lld\n",
                (long long)side, (long long)chunk[0], (long long)chunk[1],
                (long long)chunk[2]);
        return 2;
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/bench_join.XXXXXX");
    if (mkdtemp(tmpdir) == NULL)
        return 2;
    blocks = calloc(nrecs, sizeof(*blocks));
    rss = calloc(nrecs, sizeof(*rss));
    for (int64_t z = region.min[2]; z < region.max[2]; z += side)
        for (int64_t y = region.min[1]; y < region.max[1]; y += side)
            for (int64_t x = region.min[0]; x < region.max[0]; x += side) {
                cnx_box b = cnx_box_make(x, y, z, x + side, y + side,
                                         z + side);
                blocks[nb++] = cnx_box_intersect(&b, &region);
            }
    printf("region %lld-%lld_%lld-%lld_%lld-%lld: %zu chunks of "
           "%lldx%lldx%lld, %zu blocks of %lld^3\n",
           (long long)region.min[0], (long long)region.max[0],
           (long long)region.min[1], (long long)region.max[1],
           (long long)region.min[2], (long long)region.max[2], nrecs,
           (long long)chunk[0], (long long)chunk[1], (long long)chunk[2], nb,
           (long long)side);
    empty_rss = run_child(0, NULL, NULL, 0, &rb);
    single_rss = run_child(1, NULL, NULL, 0, &rs);
    if (!rs.ok)
        return 3;
    for (size_t k = 0; k < nb; k++) {
        rss[k] = run_child(2, &blocks[k], NULL, 0, &rb);
        if (!rb.ok)
            return 3;
        wall_blocks += rb.wall;
        bytes_blocks += rb.bytes;
    }
    top_rss = run_child(3, NULL, blocks, nb, &rt);
    if (!rt.ok)
        return 3;
    qsort(rss, nb, sizeof(*rss), cmp_long);
    printf("%-26s %6s %12s %12s %10s %12s\n", "task", "tasks",
           "median MiB", "largest MiB", "wall s", "read MiB");
    printf("%-26s %6d %12.1f %12.1f %10.2f %12.1f\n", "empty process", 1,
           empty_rss / 1024.0, empty_rss / 1024.0, 0.0, 0.0);
    printf("%-26s %6d %12.1f %12.1f %10.2f %12.1f\n",
           "one-task join (peer)", 1, single_rss / 1024.0,
           single_rss / 1024.0, rs.wall, rs.bytes / 1048576.0);
    printf("%-26s %6zu %12.1f %12.1f %10.2f %12.1f\n", "tree: level-1 blocks",
           nb, rss[nb / 2] / 1024.0, rss[nb - 1] / 1024.0, wall_blocks,
           bytes_blocks / 1048576.0 / (double)nb);
    printf("%-26s %6d %12.1f %12.1f %10.2f %12.1f\n", "tree: top", 1,
           top_rss / 1024.0, top_rss / 1024.0, rt.wall,
           rt.bytes / 1048576.0);
    printf("largest tree task / one-task join: %.2f of its peak memory\n",
           (double)(rss[nb - 1] > top_rss ? rss[nb - 1] : top_rss) /
               (double)single_rss);
    printf("mappings and properties: %s\n",
           memcmp(rs.digest, rt.digest, 32) == 0
               ? "byte-identical (tree = one-task join)"
               : "DIFFER");
    return memcmp(rs.digest, rt.digest, 32) == 0 ? 0 : 1;
}
