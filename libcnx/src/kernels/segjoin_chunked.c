/*
 * segjoin_chunked.c - the three segmentation steps in one process over a
 * volume held in memory (cnx_segjoin_chunked): what the workers compute,
 * chunk by chunk, for tests, benchmarks and the acceptance references.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segjoin.h"

static int nomem(void)
{
    return cnx_error_set(CNX_ENOMEM, 0, "segjoin: out of memory");
}

/* Copy box b between a whole volume (size, x fastest) and a dense block
 * of it, elements of `elem` bytes: into the block if `in`, else out. */
static void copy_box(void *whole, const int64_t size[3], const cnx_box *b,
                     void *block, size_t elem, int in)
{
    size_t at = 0, row = (size_t)(b->max[0] - b->min[0]) * elem;
    for (int64_t z = b->min[2]; z < b->max[2]; z++)
        for (int64_t y = b->min[1]; y < b->max[1]; y++) {
            uint8_t *w = (uint8_t *)whole +
                         (size_t)(b->min[0] + size[0] * (y + size[1] * z)) *
                             elem;
            uint8_t *k = (uint8_t *)block + at;
            memcpy(in ? k : w, in ? w : k, row);
            at += row;
        }
}

typedef struct chunk_job {
    const float *boundary;
    const int64_t *size, *chunk;
    const int64_t *n;
    int64_t halo, nc;
    const cnx_segment_params *p;
    int reverse;
    cnx_segjoin_input *in;
    uint64_t *labels;
    atomic_llong next;
    atomic_int rc;
} chunk_job;

static cnx_box chunk_box(const chunk_job *j, int64_t k)
{
    int64_t c[3] = {k % j->n[0], (k / j->n[0]) % j->n[1],
                    k / (j->n[0] * j->n[1])};
    cnx_box roi;
    for (int i = 0; i < 3; i++) {
        roi.min[i] = c[i] * j->chunk[i];
        roi.max[i] = cnx_imin(roi.min[i] + j->chunk[i], j->size[i]);
    }
    return roi;
}

/* Segment chunk k into its fragments (written into labels) and record. */
static int one_chunk(chunk_job *j, int64_t k, int64_t slot)
{
    cnx_box bounds = {{0, 0, 0}, {j->size[0], j->size[1], j->size[2]}};
    cnx_box roi = chunk_box(j, k), bb = cnx_box_grow(&roi, j->halo, &bounds);
    float *blk = malloc((size_t)cnx_box_voxels(&bb) * sizeof(*blk));
    uint64_t *lab = malloc((size_t)cnx_box_voxels(&roi) * sizeof(*lab));
    uint8_t *face = NULL;
    int rc = blk && lab ? 0 : nomem();
    if (rc == 0) {
        copy_box((void *)j->boundary, j->size, &bb, blk, sizeof(*blk), 1);
        rc = cnx_segjoin_fragments(blk, &bb, &roi, j->p, lab, &face,
                                   &j->in[slot].len);
        j->in[slot].data = face;
    }
    if (rc == 0)
        copy_box(j->labels, j->size, &roi, lab, sizeof(*lab), 0);
    free(blk);
    free(lab);
    return rc;
}

static void *chunk_worker(void *arg)
{
    chunk_job *j = arg;
    for (;;) {
        int64_t i = atomic_fetch_add(&j->next, 1);
        if (i >= j->nc || atomic_load(&j->rc) != 0)
            break;
        int rc = one_chunk(j, j->reverse ? j->nc - 1 - i : i, i);
        if (rc != 0) {
            int zero = 0;
            atomic_compare_exchange_strong(&j->rc, &zero, rc);
        }
    }
    return NULL;
}

/* Relabel every chunk of labels through the join's mappings. */
static int relabel_all(const cnx_segjoin *sj, const int64_t size[3],
                       uint64_t *labels)
{
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < sj->nchunks; k++) {
        const cnx_box *roi = &sj->chunks[k];
        size_t nv = (size_t)cnx_box_voxels(roi);
        uint64_t *lab = malloc(nv * sizeof(*lab));
        uint8_t *map = NULL;
        size_t mlen = 0;
        if (lab == NULL)
            return nomem();
        copy_box(labels, size, roi, lab, sizeof(*lab), 1);
        rc = cnx_segjoin_mapping_encode(sj, k, &map, &mlen);
        if (rc == 0)
            rc = cnx_segjoin_relabel(lab, nv, map, mlen);
        if (rc == 0)
            copy_box(labels, size, roi, lab, sizeof(*lab), 0);
        free(map);
        free(lab);
    }
    return rc;
}

int cnx_segjoin_chunked(const float *boundary, const int64_t size[3],
                        const int64_t chunk[3], int64_t halo,
                        const cnx_segment_params *p,
                        const cnx_segjoin_schedule *sched, uint64_t *labels)
{
    int64_t n[3];
    int threads = sched && sched->threads > 1 ? sched->threads : 1;
    pthread_t tid[64];
    chunk_job job;
    cnx_segjoin sj;
    int rc = 0, started = 0;

    memset(&sj, 0, sizeof(sj));
    for (int i = 0; i < 3; i++) {
        if (chunk[i] < 1 || size[i] < 1)
            return cnx_error_set(CNX_EINVAL, 0, "segjoin: bad size or chunk");
        n[i] = (size[i] + chunk[i] - 1) / chunk[i];
    }
    memset(&job, 0, sizeof(job));
    job.boundary = boundary;
    job.size = size;
    job.chunk = chunk;
    job.n = n;
    job.halo = halo;
    job.nc = n[0] * n[1] * n[2];
    job.p = p;
    job.reverse = sched ? sched->reverse : 0;
    job.labels = labels;
    atomic_init(&job.next, 0);
    atomic_init(&job.rc, 0);
    job.in = calloc((size_t)job.nc, sizeof(*job.in));
    if (job.in == NULL)
        return nomem();
    if (threads > 64)
        threads = 64;
    for (int t = 1; t < threads; t++)
        if (pthread_create(&tid[started], NULL, chunk_worker, &job) == 0)
            started++;
    chunk_worker(&job);
    for (int t = 0; t < started; t++)
        pthread_join(tid[t], NULL);
    rc = atomic_load(&job.rc);
    if (rc == 0)
        rc = cnx_segjoin_run(job.in, (size_t)job.nc, p, &sj);
    if (rc == 0)
        rc = relabel_all(&sj, size, labels);
    cnx_segjoin_free(&sj);
    for (int64_t k = 0; k < job.nc; k++)
        free((void *)job.in[k].data);
    free(job.in);
    return rc;
}
