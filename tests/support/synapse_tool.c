/*
 * synapse_tool - run the synapse kernel (cnx/synapse.h) over a cnx-synth
 * dataset, chunk by chunk as the stage would, or on the whole volume at
 * once; for tests/integration/synapse_synth.sh and tuning.
 *
 *   synapse_tool DIR SEG OUT [--chunk N] [--halo H] [--order forward|reverse]
 *                [--threads T] [--whole] [--params JSON]
 *
 * DIR: a cnx-synth dataset (DIR/cleft, DIR/psd are read); SEG: a uint64 or
 * uint32 segmentation layer over the same volume (e.g. DIR/gt), or
 * raw:PATH, uint32 labels of the whole volume, x fastest (what
 * `segment_tool synth DIR PARAMS BOX OUT` writes). The three
 * layers are read once (cnx_layer_read); each chunk of N^3 voxels (128) is
 * then detected on its own copy of the chunk grown by H voxels (16),
 * clipped to the volume, in forward (z, y, x) or reverse order, by T
 * threads (1) taking chunks in that order. Writes OUT/chunks/<box>.jsonl
 * (each chunk's table, unless --whole), OUT/synapses.jsonl (all
 * synapses, sorted by id; an id reported twice is an error) and
 * OUT/edges.jsonl; prints "chunks", "synapses", "edges", the summed
 * statistics and "seconds" (kernel time, wall clock).
 *
 * Exit status 0, 1 on a failure (one line on stderr), 2 on bad arguments.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"
#include "cnx/synapse_io.h"

static const char usage[] =
    "usage: synapse_tool DIR SEG OUT [--chunk N] [--halo H]\n"
    "                    [--order forward|reverse] [--threads T] [--whole]\n"
    "                    [--params JSON]\n"
    "Detect synapses in a cnx-synth dataset DIR (cleft, psd layers) with\n"
    "the segmentation layer SEG (or raw:PATH, uint32), per chunk or\n"
    "whole; writes\n"
    "OUT/chunks/*.jsonl, OUT/synapses.jsonl and OUT/edges.jsonl.\n";

/* The whole volume in memory. */
typedef struct dataset {
    int64_t size[3];
    double resolution[3];
    uint8_t *cleft, *psd;
    uint64_t *seg;
} dataset;

/* One chunk's job and result. */
typedef struct job {
    cnx_box own, read;
    cnx_synapse *s;
    size_t n;
    cnx_synapse_stats st;
    int rc;
    char message[512];
} job;

typedef struct run {
    const dataset *ds;
    const cnx_synapse_params *p;
    const char *out;
    job *jobs;
    size_t njobs, next;
    int reverse, write_chunks;
    pthread_mutex_t lock;
} run;

static int read_layer(const char *url, cnx_dtype want, dataset *ds, void **data)
{
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    const cnx_scale *sc;
    cnx_box box;
    int rc = cnx_layer_open(&layer, url);
    if (rc != 0)
        goto done;
    sc = &cnx_layer_get_info(layer)->scales[0];
    for (int i = 0; i < 3; i++) {
        if (ds->size[i] != 0 && ds->size[i] != sc->size[i]) {
            rc = cnx_error_set(CNX_EINVAL, 0, "%s: not the same volume", url);
            goto done;
        }
        if (sc->voxel_offset[i] != 0) {
            rc = cnx_error_set(CNX_EINVAL, 0, "%s: voxel offset not 0", url);
            goto done;
        }
        ds->size[i] = sc->size[i];
        ds->resolution[i] = sc->resolution[i];
        box.min[i] = 0;
        box.max[i] = sc->size[i];
    }
    rc = cnx_layer_read(layer, 0, &box, 0, NULL, NULL, NULL, &vol);
    if (rc != 0)
        goto done;
    if (want == CNX_DT_UINT64 && vol->dtype == CNX_DT_UINT32) {
        /* Widen a uint32 segmentation. */
        const size_t n = (size_t)cnx_volume_voxels(vol);
        uint64_t *w = malloc(n * sizeof(*w));
        if (w == NULL) {
            rc = cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            w[i] = ((const uint32_t *)vol->data)[i];
        *data = w;
        goto done;
    }
    if (vol->dtype != want || vol->channels != 1) {
        rc = cnx_error_set(CNX_EINVAL, 0, "%s: not a one-channel %s layer", url,
                           cnx_dtype_name(want));
        goto done;
    }
    *data = vol->data;
    vol->data = NULL;
done:
    cnx_volume_free(vol);
    cnx_layer_free(layer);
    return rc;
}

/* uint32 little-endian labels of the whole volume from a raw file. */
static int read_raw_u32(const char *path, const dataset *ds, uint64_t **data)
{
    const size_t n = (size_t)(ds->size[0] * ds->size[1] * ds->size[2]);
    uint32_t *tmp = malloc(n * sizeof(*tmp));
    uint64_t *w = malloc(n * sizeof(*w));
    FILE *f = fopen(path, "rb");
    int ok = tmp != NULL && w != NULL && f != NULL &&
             fread(tmp, sizeof(*tmp), n, f) == n && fgetc(f) == EOF;
    if (f != NULL)
        fclose(f);
    if (ok) {
        for (size_t i = 0; i < n; i++)
            w[i] = tmp[i];
        *data = w;
    } else {
        free(w);
    }
    free(tmp);
    if (!ok)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s: not %zu uint32 labels (the volume)", path, n);
    return 0;
}

/* Copy box of the dataset into a block (buffers owned by the caller). */
static int make_block(const dataset *ds, const job *j, cnx_synapse_block *b)
{
    int64_t sz[3];
    size_t n, k = 0;
    uint8_t *cleft, *psd;
    uint64_t *seg;
    cnx_box_size(&j->read, sz);
    n = (size_t)(sz[0] * sz[1] * sz[2]);
    cleft = malloc(n);
    psd = malloc(n);
    seg = malloc(n * sizeof(*seg));
    if (cleft == NULL || psd == NULL || seg == NULL) {
        free(cleft);
        free(psd);
        free(seg);
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    for (int64_t z = j->read.min[2]; z < j->read.max[2]; z++)
        for (int64_t y = j->read.min[1]; y < j->read.max[1]; y++) {
            const size_t i =
                (size_t)(j->read.min[0] + ds->size[0] * (y + ds->size[1] * z));
            memcpy(cleft + k, ds->cleft + i, (size_t)sz[0]);
            memcpy(psd + k, ds->psd + i, (size_t)sz[0]);
            memcpy(seg + k, ds->seg + i, (size_t)sz[0] * sizeof(*seg));
            k += (size_t)sz[0];
        }
    memset(b, 0, sizeof(*b));
    b->cleft = cleft;
    b->psd = psd;
    b->seg = seg;
    for (int i = 0; i < 3; i++) {
        b->origin[i] = j->read.min[i];
        b->size[i] = sz[i];
        b->bounds.max[i] = ds->size[i];
        b->resolution[i] = ds->resolution[i];
    }
    b->own = j->own;
    return 0;
}

static int write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL && fwrite(data, 1, len, f) == len;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    if (!ok)
        return cnx_error_set(CNX_EIO, 1, "cannot write %s", path);
    return 0;
}

static int do_job(run *r, job *j)
{
    cnx_synapse_block b;
    char name[128], path[4096], *t = NULL;
    size_t len = 0;
    int rc = make_block(r->ds, j, &b);
    if (rc == 0)
        rc = cnx_synapse_detect(&b, r->p, &j->s, &j->n, &j->st);
    free((void *)b.cleft);
    free((void *)b.psd);
    free((void *)b.seg);
    if (rc == 0 && r->write_chunks) {
        cnx_box_format(&j->own, name, sizeof(name));
        snprintf(path, sizeof(path), "%s/chunks/%s.jsonl", r->out, name);
        rc = cnx_synapse_table_json(j->s, j->n, r->ds->resolution, &t, &len);
        if (rc == 0)
            rc = write_file(path, t, len);
        free(t);
    }
    return rc;
}

static void *worker(void *arg)
{
    run *r = arg;
    for (;;) {
        size_t k;
        job *j;
        pthread_mutex_lock(&r->lock);
        k = r->next++;
        pthread_mutex_unlock(&r->lock);
        if (k >= r->njobs)
            break;
        j = &r->jobs[r->reverse ? r->njobs - 1 - k : k];
        j->rc = do_job(r, j);
        if (j->rc != 0)
            snprintf(j->message, sizeof(j->message), "%s",
                     cnx_error_last()->message);
    }
    return NULL;
}

static int cmp_id(const void *a, const void *b)
{
    const uint64_t x = ((const cnx_synapse *)a)->id;
    const uint64_t y = ((const cnx_synapse *)b)->id;
    return (x > y) - (x < y);
}

static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    dataset ds;
    cnx_synapse_params p;
    run r;
    int64_t chunk = 128, halo = 16, threads = 1, counts[3];
    int whole = 0, reverse = 0, status = 1;
    const char *params = NULL;
    char url[4096];
    cnx_synapse *all = NULL;
    cnx_synapse_edge *e = NULL;
    cnx_synapse_stats sum = {0, 0, 0, 0};
    size_t nall = 0, ne = 0, len;
    char *t = NULL;
    double t0, secs;
    pthread_t tid[64];

    memset(&ds, 0, sizeof(ds));
    memset(&r, 0, sizeof(r));
    if (argc >= 2 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc < 4)
        goto bad;
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--whole") == 0) {
            whole = 1;
            continue;
        }
        if (v == NULL)
            goto bad;
        i++;
        if (strcmp(a, "--chunk") == 0) {
            if (parse_int(v, 1, 4096, &chunk) != 0)
                goto bad;
        } else if (strcmp(a, "--halo") == 0) {
            if (parse_int(v, 0, 4096, &halo) != 0)
                goto bad;
        } else if (strcmp(a, "--threads") == 0) {
            if (parse_int(v, 1, 64, &threads) != 0)
                goto bad;
        } else if (strcmp(a, "--order") == 0) {
            if (strcmp(v, "forward") != 0 && strcmp(v, "reverse") != 0)
                goto bad;
            reverse = strcmp(v, "reverse") == 0;
        } else if (strcmp(a, "--params") == 0) {
            params = v;
        } else {
            goto bad;
        }
    }
    if (cnx_synapse_params_parse(params, &p) != 0) {
        fprintf(stderr, "synapse_tool: %s\n", cnx_error_last()->message);
        return 2;
    }
    snprintf(url, sizeof(url), "%s/cleft", argv[1]);
    if (read_layer(url, CNX_DT_UINT8, &ds, (void **)&ds.cleft) != 0)
        goto fail;
    snprintf(url, sizeof(url), "%s/psd", argv[1]);
    if (read_layer(url, CNX_DT_UINT8, &ds, (void **)&ds.psd) != 0)
        goto fail;
    if (strncmp(argv[2], "raw:", 4) == 0
            ? read_raw_u32(argv[2] + 4, &ds, &ds.seg) != 0
            : read_layer(argv[2], CNX_DT_UINT64, &ds, (void **)&ds.seg) != 0)
        goto fail;
    snprintf(url, sizeof(url), "%s/chunks", argv[3]);
    if ((mkdir(argv[3], 0777) != 0 && errno != EEXIST) ||
        (!whole && mkdir(url, 0777) != 0 && errno != EEXIST)) {
        fprintf(stderr, "synapse_tool: cannot make %s\n", url);
        goto done;
    }

    /* The jobs, in z, y, x order. */
    {
        const cnx_box bounds =
            cnx_box_make(0, 0, 0, ds.size[0], ds.size[1], ds.size[2]);
        const int64_t c = whole ? 1 << 30 : chunk;
        for (int i = 0; i < 3; i++)
            counts[i] = (ds.size[i] + c - 1) / c;
        r.njobs = (size_t)(counts[0] * counts[1] * counts[2]);
        r.jobs = calloc(r.njobs, sizeof(*r.jobs));
        if (r.jobs == NULL) {
            fprintf(stderr, "synapse_tool: out of memory\n");
            goto done;
        }
        for (int64_t gz = 0, k = 0; gz < counts[2]; gz++)
            for (int64_t gy = 0; gy < counts[1]; gy++)
                for (int64_t gx = 0; gx < counts[0]; gx++, k++) {
                    job *j = &r.jobs[k];
                    j->own = cnx_box_make(gx * c, gy * c, gz * c,
                                          cnx_imin((gx + 1) * c, ds.size[0]),
                                          cnx_imin((gy + 1) * c, ds.size[1]),
                                          cnx_imin((gz + 1) * c, ds.size[2]));
                    j->read = cnx_box_grow(&j->own, whole ? 0 : halo, &bounds);
                }
    }
    r.ds = &ds;
    r.p = &p;
    r.out = argv[3];
    r.reverse = reverse;
    r.write_chunks = !whole;
    pthread_mutex_init(&r.lock, NULL);
    t0 = cnx_now();
    for (int64_t i = 0; i < threads; i++)
        if (pthread_create(&tid[i], NULL, worker, &r) != 0) {
            fprintf(stderr, "synapse_tool: cannot start a thread\n");
            return 1; /* exiting; threads and memory go with the process */
        }
    for (int64_t i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    secs = cnx_now() - t0;
    pthread_mutex_destroy(&r.lock);

    /* Merge in chunk order, sort by id; an id twice is a cleft reported by
     * two chunks. */
    for (size_t k = 0; k < r.njobs; k++) {
        job *j = &r.jobs[k];
        cnx_synapse *g;
        if (j->rc != 0) {
            char name[128];
            cnx_box_format(&j->own, name, sizeof(name));
            fprintf(stderr, "synapse_tool: chunk %s: %s\n", name, j->message);
            goto done;
        }
        sum.components += j->st.components;
        sum.too_small += j->st.too_small;
        sum.truncated += j->st.truncated;
        sum.owned_elsewhere += j->st.owned_elsewhere;
        g = realloc(all, (nall + j->n + 1) * sizeof(*all));
        if (g == NULL) {
            fprintf(stderr, "synapse_tool: out of memory\n");
            goto done;
        }
        all = g;
        if (j->n > 0)
            memcpy(all + nall, j->s, j->n * sizeof(*all));
        nall += j->n;
    }
    if (nall > 0)
        qsort(all, nall, sizeof(*all), cmp_id);
    for (size_t k = 1; k < nall; k++)
        if (all[k].id == all[k - 1].id) {
            fprintf(stderr, "synapse_tool: synapse %llu reported twice\n",
                    (unsigned long long)all[k].id);
            goto done;
        }
    snprintf(url, sizeof(url), "%s/synapses.jsonl", argv[3]);
    if (cnx_synapse_table_json(all, nall, ds.resolution, &t, &len) != 0 ||
        write_file(url, t, len) != 0)
        goto fail;
    free(t);
    t = NULL;
    snprintf(url, sizeof(url), "%s/edges.jsonl", argv[3]);
    if (cnx_synapse_edges(all, nall, &e, &ne) != 0 ||
        cnx_synapse_edges_json(e, ne, &t, &len) != 0 ||
        write_file(url, t, len) != 0)
        goto fail;
    printf("chunks %zu\nsynapses %zu\nedges %zu\ncomponents %lld\n"
           "too_small %lld\ntruncated %lld\nowned_elsewhere %lld\n"
           "seconds %.3f\n",
           r.njobs, nall, ne, (long long)sum.components,
           (long long)sum.too_small, (long long)sum.truncated,
           (long long)sum.owned_elsewhere, secs);
    status = 0;
    goto done;
bad:
    fputs(usage, stderr);
    return 2;
fail:
    fprintf(stderr, "synapse_tool: %s\n", cnx_error_last()->message);
done:
    for (size_t k = 0; k < r.njobs; k++)
        free(r.jobs[k].s);
    free(r.jobs);
    free(t);
    free(e);
    free(all);
    free(ds.cleft);
    free(ds.psd);
    free(ds.seg);
    return status;
}
