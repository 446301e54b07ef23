/*
 * ingest.c - a stack of PNG/TIFF sections into a precomputed layer.
 *
 * First every file is probed (header only) so that a stack whose sections
 * differ in size or depth is refused before anything is written. Then the
 * stack is processed in z-slabs one chunk deep: the sections of a slab are
 * decoded (and, for a segmentation, labelled) by a few threads, each into
 * its own slice of the slab volume, and the slab -- chunk-aligned by
 * construction -- goes to cnx_layer_write. Segment ids are made global
 * after the threads finish, in z order (section z's local labels are offset
 * by the number of components in sections 0..z-1), so the output depends on
 * neither the thread count nor the scheduling. Memory: one slab plus, per
 * thread, one decoded section and its uint32 label scratch.
 */
#include "cnx/ingest.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/ccl.h"
#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/log.h"

/* The most threads a caller may ask for. */
#define THREADS_CAP 32

void cnx_ingest_config_init(cnx_ingest_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    for (int i = 0; i < 3; i++) {
        cfg->resolution[i] = 1.0;
        cfg->chunk[i] = CNX_INGEST_CHUNK;
    }
}

/* An error raised on a worker thread, carried back to the caller's. */
typedef struct section_error {
    int code;
    int retriable;
    char message[sizeof(((cnx_error *)0)->message)];
} section_error;

/* One slab's work, shared by its threads. */
typedef struct slab_job {
    const cnx_ingest_config *cfg;
    int64_t width;
    int64_t height;
    int bits;
    int64_t z0;
    int64_t z1;
    cnx_volume *vol;
    uint32_t *counts;      /* per section of the slab: components */
    section_error *errors; /* per section of the slab */
    atomic_llong next;     /* next section to take */
    atomic_llong *done;    /* sections finished, whole stack */
    cnx_progress *bar;
} slab_job;

static int do_section(slab_job *job, int64_t z, uint32_t **scratch)
{
    const cnx_ingest_config *cfg = job->cfg;
    const size_t npix = (size_t)job->width * (size_t)job->height;
    const size_t slot = (size_t)(z - job->z0);
    cnx_image *img = NULL;
    int rc;

    rc = cnx_image_read(&img, cfg->files[z]);
    if (rc != 0)
        return cnx_error_wrap("section %lld", (long long)z);
    if (img->width != job->width || img->height != job->height ||
        img->bits != job->bits) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "section %lld: %s is now %lldx%lld %d-bit, but "
                           "was %lldx%lld %d-bit when the stack was checked",
                           (long long)z, cfg->files[z], (long long)img->width,
                           (long long)img->height, img->bits,
                           (long long)job->width, (long long)job->height,
                           job->bits);
        cnx_image_free(img);
        return rc;
    }
    if (!cfg->segmentation) {
        const size_t bytes = npix * (size_t)(job->bits / 8);
        memcpy((uint8_t *)job->vol->data + slot * bytes, img->pixels, bytes);
    } else {
        uint64_t *out = (uint64_t *)job->vol->data + slot * npix;
        uint32_t count;
        if (*scratch == NULL) {
            *scratch = malloc(npix * sizeof(**scratch));
            if (*scratch == NULL) {
                cnx_image_free(img);
                return cnx_error_set(CNX_ENOMEM, 0,
                                     "section %lld: out of memory for "
                                     "labels",
                                     (long long)z);
            }
        }
        rc = cnx_ccl2d(*scratch, &count, img->pixels,
                       job->bits == 16 ? CNX_DT_UINT16 : CNX_DT_UINT8,
                       job->width, job->height);
        if (rc != 0) {
            cnx_image_free(img);
            return cnx_error_wrap("section %lld", (long long)z);
        }
        /* Local labels for now; made global in z order afterwards. */
        for (size_t i = 0; i < npix; i++)
            out[i] = (*scratch)[i];
        job->counts[slot] = count;
    }
    cnx_image_free(img);
    return 0;
}

static void *slab_worker(void *arg)
{
    slab_job *job = arg;
    uint32_t *scratch = NULL;
    for (;;) {
        int64_t z = (int64_t)atomic_fetch_add(&job->next, 1);
        if (z >= job->z1)
            break;
        /* Every section of the slab is tried even after a failure, so the
         * error reported (the lowest z) does not depend on scheduling. */
        if (do_section(job, z, &scratch) != 0) {
            section_error *e = &job->errors[z - job->z0];
            const cnx_error *last = cnx_error_last();
            e->code = last->code != 0 ? last->code : CNX_EIO;
            e->retriable = last->retriable;
            memcpy(e->message, last->message, sizeof(e->message));
        }
        cnx_progress_update(job->bar,
                            (int64_t)atomic_fetch_add(job->done, 1) + 1);
    }
    free(scratch);
    return NULL;
}

/* Decode (and label) the sections of a slab with up to nthreads threads. */
static int run_slab(slab_job *job, int nthreads)
{
    pthread_t threads[THREADS_CAP];
    int started = 0;

    atomic_store(&job->next, job->z0);
    if (nthreads > job->z1 - job->z0)
        nthreads = (int)(job->z1 - job->z0);
    for (int t = 1; t < nthreads; t++) {
        if (pthread_create(&threads[started], NULL, slab_worker, job) != 0)
            break; /* fewer threads is fine: the work is shared */
        started++;
    }
    slab_worker(job);
    for (int t = 0; t < started; t++)
        pthread_join(threads[t], NULL);
    for (int64_t z = job->z0; z < job->z1; z++) {
        const section_error *e = &job->errors[z - job->z0];
        if (e->code != 0)
            return cnx_error_set(e->code, e->retriable, "%s", e->message);
    }
    return 0;
}

static int check_config(const cnx_ingest_config *cfg)
{
    if (cfg->url == NULL || cfg->url[0] == '\0')
        return cnx_error_set(CNX_EINVAL, 0, "ingest: no output URL");
    if (cfg->nfiles == 0 || cfg->files == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "ingest: no input files");
    if (cfg->nfiles > (size_t)INT32_MAX)
        return cnx_error_set(CNX_EINVAL, 0,
                             "ingest: %zu sections, over "
                             "2^31 - 1",
                             cfg->nfiles);
    for (int i = 0; i < 3; i++) {
        if (cfg->chunk[i] < 1 || cfg->chunk[i] > ((int64_t)1 << 20))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "ingest: chunk size %lld on axis %d is "
                                 "outside [1, 2^20]",
                                 (long long)cfg->chunk[i], i);
        if (!(cfg->resolution[i] > 0.0) || !isfinite(cfg->resolution[i]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "ingest: resolution on axis %d must be a "
                                 "positive number",
                                 i);
    }
    if (cfg->threads < 0)
        return cnx_error_set(CNX_EINVAL, 0, "ingest: threads must be >= 0");
    return 0;
}

/* Probe every file: all must match the first one's size and depth. */
static int probe_stack(const cnx_ingest_config *cfg, int64_t *width,
                       int64_t *height, int *bits)
{
    for (size_t i = 0; i < cfg->nfiles; i++) {
        int64_t w, h;
        int b;
        int rc = cnx_image_probe(cfg->files[i], &w, &h, &b);
        if (rc != 0)
            return cnx_error_wrap("section %zu", i);
        if (i == 0) {
            *width = w;
            *height = h;
            *bits = b;
        } else if (w != *width || h != *height || b != *bits) {
            return cnx_error_set(CNX_EINVAL, 0,
                                 "section %zu: %s is %lldx%lld %d-bit, but "
                                 "section 0 (%s) is %lldx%lld %d-bit: all "
                                 "sections must have the same size and depth",
                                 i, cfg->files[i], (long long)w, (long long)h,
                                 b, cfg->files[0], (long long)*width,
                                 (long long)*height, *bits);
        }
    }
    return 0;
}

static int auto_threads(const cnx_ingest_config *cfg)
{
    long n;
    if (cfg->threads > 0)
        return cfg->threads < THREADS_CAP ? cfg->threads : THREADS_CAP;
    n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        n = 1;
    return n < CNX_INGEST_MAX_THREADS ? (int)n : CNX_INGEST_MAX_THREADS;
}

int cnx_ingest_stack(const cnx_ingest_config *cfg, cnx_ingest_result *result,
                     cnx_object_list *written)
{
    const double start = cnx_now();
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_progress *bar = NULL;
    cnx_volume *vol = NULL;
    slab_job job;
    atomic_llong done;
    int64_t width = 0, height = 0, depth, size[3], counts[3];
    uint64_t next_id = 1, stored = 0;
    cnx_object_list slab;
    size_t before;
    int bits = 0, nthreads, rc;
    cnx_dtype dtype;

    memset(&job, 0, sizeof(job));
    cnx_object_list_init(&slab);
    rc = check_config(cfg);
    if (rc == 0)
        rc = probe_stack(cfg, &width, &height, &bits);
    if (rc != 0)
        return rc;
    size[0] = width;
    size[1] = height;
    size[2] = (int64_t)cfg->nfiles;
    dtype = cfg->segmentation ? CNX_DT_UINT64
                              : (bits == 16 ? CNX_DT_UINT16 : CNX_DT_UINT8);
    cnx_info_init(&info,
                  cfg->segmentation ? CNX_LAYER_SEGMENTATION : CNX_LAYER_IMAGE,
                  dtype, size, cfg->resolution, cfg->chunk);
    rc = cnx_layer_create(&layer, cfg->url, &info);
    if (rc != 0)
        return cnx_error_wrap("layer %s", cfg->url);

    nthreads = auto_threads(cfg);
    job.cfg = cfg;
    job.width = width;
    job.height = height;
    job.bits = bits;
    depth = cfg->chunk[2] < size[2] ? cfg->chunk[2] : size[2];
    job.counts = calloc((size_t)depth, sizeof(*job.counts));
    job.errors = calloc((size_t)depth, sizeof(*job.errors));
    if (job.counts == NULL || job.errors == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "ingest: out of memory");
        goto done;
    }
    atomic_init(&done, 0);
    job.done = &done;
    bar = cnx_progress_start("ingest", size[2], cfg->quiet);
    job.bar = bar;

    for (int64_t z0 = 0; z0 < size[2]; z0 += cfg->chunk[2]) {
        const int64_t z1 =
            z0 + cfg->chunk[2] < size[2] ? z0 + cfg->chunk[2] : size[2];
        const cnx_box box = cnx_box_make(0, 0, z0, width, height, z1);
        const size_t npix = (size_t)width * (size_t)height;

        rc = cnx_volume_new(&vol, dtype, &box, 1);
        if (rc != 0)
            goto done;
        job.z0 = z0;
        job.z1 = z1;
        job.vol = vol;
        memset(job.errors, 0, (size_t)depth * sizeof(*job.errors));
        rc = run_slab(&job, nthreads);
        if (rc != 0)
            goto done;
        if (cfg->segmentation) {
            /* Global ids in z order: offset each section's local labels
             * by the components of all sections before it. */
            for (int64_t z = z0; z < z1; z++) {
                uint64_t *p = (uint64_t *)vol->data + (size_t)(z - z0) * npix;
                const uint64_t base = next_id - 1;
                if (base != 0)
                    for (size_t i = 0; i < npix; i++)
                        p[i] += p[i] != 0 ? base : 0;
                next_id += job.counts[z - z0];
            }
        }
        before = written != NULL ? written->count : 0;
        rc = cnx_layer_write(layer, 0, vol, written ? written : &slab);
        if (rc == 0) {
            const cnx_object_list *got = written ? written : &slab;
            for (size_t i = before; i < got->count; i++)
                stored += got->items[i].bytes;
            slab.count = 0;
        }
        if (rc != 0) {
            cnx_error_wrap("writing sections %lld-%lld", (long long)z0,
                           (long long)(z1 - 1));
            goto done;
        }
        cnx_volume_free(vol);
        vol = NULL;
    }

    if (result != NULL) {
        cnx_grid grid = cnx_info_grid(&info, 0);
        cnx_grid_counts(&grid, counts);
        memset(result, 0, sizeof(*result));
        result->type = info.type;
        result->dtype = dtype;
        memcpy(result->size, size, sizeof(size));
        result->chunks = counts[0] * counts[1] * counts[2];
        result->voxel_bytes = (uint64_t)width * (uint64_t)height *
                              (uint64_t)size[2] * cnx_dtype_size(dtype);
        result->stored_bytes = stored;
        result->segments = cfg->segmentation ? next_id - 1 : 0;
        result->seconds = cnx_now() - start;
    }

done:
    if (rc == 0)
        cnx_progress_finish(bar);
    else
        cnx_progress_abort(bar);
    cnx_object_list_dispose(&slab);
    cnx_volume_free(vol);
    cnx_layer_free(layer);
    free(job.counts);
    free(job.errors);
    return rc;
}
