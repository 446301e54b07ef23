/*
 * synth_io.c - writing a synthetic dataset: layers, JSON and montage tiles.
 *
 * cnx_synth_run puts synth.json (the parameters) first, so a directory that
 * holds a dataset made with other parameters fails at once with
 * CNX_EIMMUTABLE, before any work; then it generates the volumes, writes
 * the five precomputed layers chunk by chunk (chunks of params.chunk, the
 * only thing that depends on it), gt-synapses.json, every tile
 * PNG, tiles/sections.json (the section distortions), tiles/truth.json
 * and last tiles/tiles.json (a reader that finds the tile set finds all
 * its tiles); missing sections are left out of the tile set. Every object goes
 * through cnx_store_put, so writes are atomic and write-once and a re-run is a
 * no-op. Documents are canonical JSON. Tiles are cut, encoded and put by a few
 * threads, one section at a time; each file's bytes depend only on its section
 * and the documents are assembled in section order afterwards, so the output
 * does not depend on the thread count.
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/log.h"
#include "cnx/precomputed.h"
#include "cnx/store.h"
#include "cnx/synth.h"
#include "json_int.h"

#define TILE_THREADS_MAX 8

typedef struct writer {
    cnx_store *store;
    const char *url; /* canonical store URL */
    cnx_progress *bar;
    atomic_llong done;  /* progress units */
    atomic_llong files; /* objects put */
    atomic_llong bytes; /* their bytes */
} writer;

static void advance(writer *w, int64_t units)
{
    cnx_progress_update(w->bar,
                        (int64_t)atomic_fetch_add(&w->done, units) + units);
}

static int put(writer *w, cnx_store *store, const char *name, const void *data,
               size_t len)
{
    int rc = cnx_store_put(store, name, data, len, NULL);
    if (rc < 0)
        return rc;
    atomic_fetch_add(&w->files, 1);
    atomic_fetch_add(&w->bytes, (long long)len);
    return 0;
}

/* Serialise json canonically and put it; takes the reference to json. */
static int put_json(writer *w, const char *name, json_t *json)
{
    char *text;
    int rc;
    if (json == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    text = cnx__json_canonical(json);
    json_decref(json);
    if (text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    rc = put(w, w->store, name, text, strlen(text));
    free(text);
    return rc;
}

static json_t *ivec3(const int64_t v[3])
{
    return json_pack("[III]", (json_int_t)v[0], (json_int_t)v[1],
                     (json_int_t)v[2]);
}

/* A length in nm: whole numbers as integers, as info writes resolutions. */
static json_t *nm(double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *res3(const double res[3])
{
    return json_pack("[ooo]", nm(res[0]), nm(res[1]), nm(res[2]));
}

/* Voxel coordinates times the resolution: nm in the layer's frame. */
static json_t *nmvec3(const int64_t v[3], const double res[3])
{
    return json_pack("[ooo]", nm((double)v[0] * res[0]),
                     nm((double)v[1] * res[1]), nm((double)v[2] * res[2]));
}

static int default_chunk(const cnx_synth_params *p)
{
    return p->chunk[0] == CNX_SYNTH_DEFAULT_CHUNK &&
           p->chunk[1] == CNX_SYNTH_DEFAULT_CHUNK &&
           p->chunk[2] == CNX_SYNTH_DEFAULT_CHUNK;
}

static int cmp_i64(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* "distort": the strengths, only for distorted datasets; "missing": the
 * sorted missing sections, only when there are some. */
static int params_json_sections(json_t *doc, const cnx_synth_params *p)
{
    if (p->distort != CNX_SYNTH_DISTORT_NONE &&
        json_object_set_new(
            doc, "distort",
            json_pack("{s:s, s:f, s:f, s:f, s:i, s:i, s:i}", "mode",
                      cnx_synth_distort_name(p->distort), "translation",
                      p->distort_translation, "rotation", p->distort_rotation,
                      "warp", p->distort_warp, "grid", p->distort_grid,
                      "gain_milli", p->distort_gain_milli, "offset",
                      p->distort_offset)) != 0)
        return -1;
    if (p->nmissing > 0) {
        int64_t *sorted = malloc(p->nmissing * sizeof(*sorted));
        json_t *list = json_array();
        size_t k;
        int bad = sorted == NULL || list == NULL;
        if (!bad) {
            memcpy(sorted, p->missing, p->nmissing * sizeof(*sorted));
            qsort(sorted, p->nmissing, sizeof(*sorted), cmp_i64);
        }
        for (k = 0; k < p->nmissing && !bad; k++)
            bad = json_array_append_new(
                      list, json_integer((json_int_t)sorted[k])) != 0;
        free(sorted);
        if (bad || json_object_set_new(doc, "missing", list) != 0) {
            if (bad)
                json_decref(list);
            return -1;
        }
    }
    return 0;
}

/*
 * synth.json. The classic style with the default chunks and no distortion
 * writes exactly the document it always wrote; "style", "chunk",
 * "distort" and "missing" appear only when they are not the old
 * defaults, so that a directory made with other settings is refused at
 * once. The hard style leaves out the parameters it ignores.
 */
static json_t *params_json(const cnx_synth_params *p)
{
    json_t *doc, *params;
    if (p->style == CNX_SYNTH_STYLE_HARD)
        params = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "synapse_spacing",
                           p->synapse_spacing, "synapses_per_mvx",
                           p->synapses_per_mvx, "tile_side", p->tile_side,
                           "tile_overlap_percent", p->tile_overlap_percent,
                           "tile_jitter", p->tile_jitter, "tile_nominal_error",
                           p->tile_nominal_error);
    else
        params = json_pack(
            "{s:[ii], s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "radius",
            p->radius_min, p->radius_max, "fill_percent", p->fill_percent,
            "synapse_spacing", p->synapse_spacing, "synapses_per_mvx",
            p->synapses_per_mvx, "tile_side", p->tile_side,
            "tile_overlap_percent", p->tile_overlap_percent, "tile_jitter",
            p->tile_jitter, "tile_nominal_error", p->tile_nominal_error);
    doc = json_pack("{s:s, s:i, s:I, s:o, s:o, s:o}", "format", "cnx.synth/1",
                    "version", CNX_SYNTH_VERSION, "seed", (json_int_t)p->seed,
                    "shape", ivec3(p->shape), "resolution", res3(p->resolution),
                    "params", params);
    if (doc == NULL)
        return NULL;
    if ((p->style != CNX_SYNTH_STYLE_CLASSIC &&
         json_object_set_new(
             doc, "style", json_string(cnx_synth_style_name(p->style))) != 0) ||
        (!default_chunk(p) &&
         json_object_set_new(doc, "chunk", ivec3(p->chunk)) != 0) ||
        params_json_sections(doc, p) != 0) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}

static json_t *synapses_json(const cnx_synth *synth)
{
    const double *res = synth->params.resolution;
    json_t *list = json_array();
    size_t k;

    if (list == NULL)
        return NULL;
    for (k = 0; k < synth->nsynapses; k++) {
        const cnx_synth_synapse *s = &synth->synapses[k];
        /* The classic style gives the cleft radius in voxels, the hard
         * style in nm. */
        const int hard = synth->params.style == CNX_SYNTH_STYLE_HARD;
        json_t *item = json_pack(
            "{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:I, s:I, s:I, s:i}", "id",
            (json_int_t)s->id, "site", ivec3(s->site), "site_nm",
            nmvec3(s->site, res), "pre_site", ivec3(s->pre_site), "pre_site_nm",
            nmvec3(s->pre_site, res), "post_site", ivec3(s->post_site),
            "post_site_nm", nmvec3(s->post_site, res), "pre_id",
            (json_int_t)s->pre_id, "post_id", (json_int_t)s->post_id, "size",
            (json_int_t)s->size, hard ? "radius_nm" : "radius",
            hard ? s->radius_nm : s->radius);
        if (item == NULL || json_array_append_new(list, item) != 0) {
            json_decref(list);
            return NULL;
        }
    }
    return json_pack("{s:s, s:o, s:o}", "format", "cnx.synapses/1",
                     "resolution", res3(res), "synapses", list);
}

static int write_layer(writer *w, const char *name, cnx_layer_type type,
                       const cnx_volume *vol, const cnx_synth_params *p)
{
    const int64_t *chunk = p->chunk;
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_grid grid;
    char url[4096], *json = NULL;
    int64_t counts[3], g[3];
    int rc;

    if (snprintf(url, sizeof(url), "%s/%s", w->url, name) >= (int)sizeof(url))
        return cnx_error_set(CNX_EINVAL, 0, "synth: output URL too long");
    cnx_info_init(&info, type, vol->dtype, p->shape, p->resolution, chunk);
    rc = cnx_info_to_json(&info, &json);
    if (rc < 0)
        return rc;
    rc = cnx_layer_create(&layer, url, &info);
    if (rc < 0)
        goto done;
    atomic_fetch_add(&w->files, 1);
    atomic_fetch_add(&w->bytes, (long long)strlen(json));
    grid = cnx_info_grid(&info, 0);
    cnx_grid_counts(&grid, counts);
    for (g[2] = 0; g[2] < counts[2]; g[2]++) {
        for (g[1] = 0; g[1] < counts[1]; g[1]++) {
            for (g[0] = 0; g[0] < counts[0]; g[0]++) {
                const cnx_box box = cnx_grid_chunk_box(&grid, g);
                cnx_volume *part = NULL;
                uint8_t *bytes = NULL;
                size_t len = 0;
                char cname[256];

                rc = cnx_volume_crop(&part, vol, &box);
                if (rc == 0)
                    rc = cnx_chunk_encode(&info, 0, part, &bytes, &len);
                if (rc == 0)
                    rc = cnx_layer_chunk_name(&info, 0, &box, cname,
                                              sizeof(cname));
                if (rc == 0)
                    rc = put(w, cnx_layer_store(layer), cname, bytes, len);
                cnx_volume_free(part);
                free(bytes);
                if (rc < 0) {
                    cnx_error_wrap("layer %s", name);
                    goto done;
                }
                advance(w, 1);
            }
        }
    }
done:
    free(json);
    cnx_layer_free(layer);
    return rc;
}

/* What the documents need to know of one tile. */
typedef struct tile_meta {
    int64_t x, y, nominal_x, nominal_y;
    int gain_milli;
    int offset;
} tile_meta;

typedef struct tile_job {
    writer *w;
    const cnx_synth *synth;
    cnx_synth_tile_grid grid;
    tile_meta *meta;   /* sections * rows * cols, filled by the workers */
    atomic_llong next; /* next section to cut */
    atomic_int stop;
    pthread_mutex_t lock; /* guards the error fields */
    int64_t err_z;        /* lowest failing section, or -1 */
    int err_code;
    int err_retriable;
    char err_message[sizeof(((cnx_error *)0)->message)];
} tile_job;

static int section_tiles(tile_job *job, int64_t z)
{
    const int64_t per = job->grid.rows * job->grid.cols;
    cnx_synth_tile *tiles = NULL;
    size_t count = 0, k;
    int rc = cnx_synth_tiles(&tiles, &count, job->synth, z);

    for (k = 0; k < count && rc == 0; k++) {
        const cnx_synth_tile *t = &tiles[k];
        cnx_image img = {t->width, t->height, 8, t->pixels};
        tile_meta *m = &job->meta[z * per + (int64_t)k];
        uint8_t *png = NULL;
        size_t len = 0;
        char name[128];

        snprintf(name, sizeof(name),
                 "tiles/z%05" PRId64 "/r%02" PRId64 "-c%02" PRId64 ".png", z,
                 t->row, t->col);
        rc = cnx_png_encode(&img, &png, &len);
        if (rc == 0)
            rc = put(job->w, job->w->store, name, png, len);
        free(png);
        m->x = t->x;
        m->y = t->y;
        m->nominal_x = t->nominal_x;
        m->nominal_y = t->nominal_y;
        m->gain_milli = t->gain_milli;
        m->offset = t->offset;
    }
    cnx_synth_tiles_free(tiles, count);
    return rc;
}

static void *tile_worker(void *arg)
{
    tile_job *job = arg;
    const int64_t nz = job->synth->params.shape[2];
    for (;;) {
        const int64_t z = (int64_t)atomic_fetch_add(&job->next, 1);
        int rc;
        if (z >= nz || atomic_load(&job->stop))
            break;
        rc = section_tiles(job, z);
        if (rc < 0) {
            const cnx_error *e = cnx_error_last();
            pthread_mutex_lock(&job->lock);
            if (job->err_z < 0 || z < job->err_z) {
                job->err_z = z;
                job->err_code = rc;
                job->err_retriable = e->retriable;
                snprintf(job->err_message, sizeof(job->err_message), "%s",
                         e->message);
            }
            pthread_mutex_unlock(&job->lock);
            atomic_store(&job->stop, 1);
            break;
        }
        advance(job->w, 1);
    }
    return NULL;
}

static const char *tile_id(char buf[80], int64_t z, int64_t r, int64_t c)
{
    snprintf(buf, 80, "z%05" PRId64 "-r%02" PRId64 "-c%02" PRId64, z, r, c);
    return buf;
}

static json_t *real_array(const double *v, int64_t n)
{
    json_t *list = json_array();
    int64_t i;
    for (i = 0; i < n && list != NULL; i++) {
        if (json_array_append_new(list, json_real(v[i])) != 0) {
            json_decref(list);
            list = NULL;
        }
    }
    return list;
}

/* tiles/sections.json: every section's distortion (docs/synth.md). */
static json_t *sections_json(const cnx_synth_params *p)
{
    json_t *list = json_array();
    cnx_synth_section_warp wp;
    int64_t z;

    if (list == NULL)
        return NULL;
    for (z = 0; z < p->shape[2]; z++) {
        json_t *item;
        /* p was checked, z is in range: drawing cannot fail. */
        if (cnx_synth_section_warp_draw(&wp, p, z) != 0)
            goto fail;
        item = json_pack(
            "{s:I, s:f, s:[ff], s:{s:i, s:[ff], s:[ff], s:o, s:o}, s:f, s:f, "
            "s:b}",
            "z", (json_int_t)z, "sin", wp.sin_angle, "translation",
            wp.translation[0], wp.translation[1], "warp", "grid", wp.grid,
            "origin", wp.origin[0], wp.origin[1], "spacing", wp.spacing[0],
            wp.spacing[1], "dx", real_array(wp.dx, (int64_t)wp.grid * wp.grid),
            "dy", real_array(wp.dy, (int64_t)wp.grid * wp.grid), "gain",
            (double)wp.gain_milli / 1000.0, "offset",
            (double)wp.offset_milli / 1000.0, "missing",
            cnx_synth_section_is_missing(p, z));
        if (item == NULL || json_array_append_new(list, item) != 0)
            goto fail;
    }
    return json_pack("{s:s, s:[III], s:s, s:[ff], s:o}", "format",
                     "cnx.synth-sections/1", "shape", (json_int_t)p->shape[0],
                     (json_int_t)p->shape[1], (json_int_t)p->shape[2],
                     "distort", cnx_synth_distort_name(p->distort), "centre",
                     (double)(p->shape[0] - 1) / 2.0,
                     (double)(p->shape[1] - 1) / 2.0, "sections", list);
fail:
    json_decref(list);
    return NULL;
}

/* sections.json, truth.json and tiles.json (the tile set, nominal
 * positions); missing sections are in none but the first. */
static int tile_documents(writer *w, const tile_job *job)
{
    const cnx_synth_params *p = &job->synth->params;
    const cnx_synth_tile_grid *g = &job->grid;
    json_t *sections = json_array(), *truth = json_array();
    int64_t z, r, c, k;
    int rc;

    if (sections == NULL || truth == NULL)
        goto nomem;
    rc = put_json(w, "tiles/sections.json", sections_json(p));
    if (rc < 0) {
        json_decref(sections);
        json_decref(truth);
        return rc;
    }
    for (z = 0; z < p->shape[2]; z++) {
        json_t *tiles, *ttiles;
        if (cnx_synth_section_is_missing(p, z))
            continue;
        tiles = json_array();
        ttiles = json_array();
        k = z * g->rows * g->cols;
        if (tiles == NULL || ttiles == NULL ||
            json_array_append_new(sections,
                                  json_pack("{s:I, s:o}", "z", (json_int_t)z,
                                            "tiles", tiles)) != 0 ||
            json_array_append_new(truth,
                                  json_pack("{s:I, s:o}", "z", (json_int_t)z,
                                            "tiles", ttiles)) != 0)
            goto nomem;
        for (r = 0; r < g->rows; r++) {
            for (c = 0; c < g->cols; c++, k++) {
                const tile_meta *m = &job->meta[k];
                char id[80], file[96];
                tile_id(id, z, r, c);
                snprintf(file, sizeof(file),
                         "z%05" PRId64 "/r%02" PRId64 "-c%02" PRId64 ".png", z,
                         r, c);
                if (json_array_append_new(
                        tiles,
                        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "id", id,
                                  "file", file, "x", (json_int_t)m->nominal_x,
                                  "y", (json_int_t)m->nominal_y, "width",
                                  (json_int_t)g->width, "height",
                                  (json_int_t)g->height)) != 0 ||
                    json_array_append_new(
                        ttiles,
                        json_pack("{s:s, s:I, s:I, s:f, s:i}", "id", id, "x",
                                  (json_int_t)m->x, "y", (json_int_t)m->y,
                                  "gain", (double)m->gain_milli / 1000.0,
                                  "offset", m->offset)) != 0)
                    goto nomem;
            }
        }
    }
    rc = put_json(w, "tiles/truth.json",
                  json_pack("{s:s, s:o}", "format", "cnx.tileset-truth/1",
                            "sections", truth));
    truth = NULL;
    if (rc < 0) {
        json_decref(sections);
        return rc;
    }
    return put_json(w, "tiles/tiles.json",
                    json_pack("{s:s, s:o, s:s, s:o}", "format", "cnx.tileset/1",
                              "resolution", res3(p->resolution), "dtype",
                              "uint8", "sections", sections));
nomem:
    json_decref(sections);
    json_decref(truth);
    return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
}

static int write_tiles(writer *w, const cnx_synth *synth)
{
    const int64_t nz = synth->params.shape[2];
    pthread_t threads[TILE_THREADS_MAX];
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    int nthreads, started = 0, i, rc = 0;
    tile_job job;

    memset(&job, 0, sizeof(job));
    job.w = w;
    job.synth = synth;
    job.grid = cnx_synth_tile_layout(&synth->params);
    job.err_z = -1;
    atomic_init(&job.next, 0);
    atomic_init(&job.stop, 0);
    job.meta =
        calloc((size_t)(nz * job.grid.rows * job.grid.cols), sizeof(*job.meta));
    if (job.meta == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    pthread_mutex_init(&job.lock, NULL);
    nthreads = online < 1 ? 1
                          : (online > TILE_THREADS_MAX ? TILE_THREADS_MAX
                                                       : (int)online);
    for (i = 0; i < nthreads; i++) {
        if (pthread_create(&threads[i], NULL, tile_worker, &job) != 0)
            break;
        started++;
    }
    if (started == 0)
        tile_worker(&job); /* no thread to be had: do it here */
    for (i = 0; i < started; i++)
        pthread_join(threads[i], NULL);
    if (job.err_z >= 0)
        rc = cnx_error_set(job.err_code, job.err_retriable,
                           "section %" PRId64 " tiles: %s", job.err_z,
                           job.err_message);
    else
        rc = tile_documents(w, &job);
    pthread_mutex_destroy(&job.lock);
    free(job.meta);
    return rc;
}

typedef struct gen_ctx {
    writer *w;
    int64_t units; /* the bar's share for generation */
    int64_t reported;
} gen_ctx;

static void gen_progress(void *ctx, int64_t done, int64_t total)
{
    gen_ctx *g = ctx;
    const int64_t units = total > 0 ? done * g->units / total : 0;
    if (units > g->reported) {
        advance(g->w, units - g->reported);
        g->reported = units;
    }
}

int cnx_synth_run(const cnx_synth_params *p, const char *dir_url, int quiet,
                  cnx_synth_summary *summary)
{
    static const struct {
        const char *name;
        cnx_layer_type type;
    } layers[] = {{"gt", CNX_LAYER_SEGMENTATION},
                  {"image", CNX_LAYER_IMAGE},
                  {"boundary", CNX_LAYER_IMAGE},
                  {"cleft", CNX_LAYER_IMAGE},
                  {"psd", CNX_LAYER_IMAGE}};
    const double start = cnx_now();
    cnx_synth_params gp = *p;
    cnx_synth *synth = NULL;
    int64_t chunks = 1;
    gen_ctx gctx;
    writer w;
    size_t k;
    int rc, i;

    memset(&w, 0, sizeof(w));
    atomic_init(&w.done, 0);
    atomic_init(&w.files, 0);
    atomic_init(&w.bytes, 0);
    if (summary != NULL)
        memset(summary, 0, sizeof(*summary));
    rc = cnx_synth_params_check(p);
    if (rc < 0)
        return rc;
    rc = cnx_store_open(&w.store, dir_url);
    if (rc < 0)
        return rc;
    w.url = cnx_store_url(w.store);
    rc = put_json(&w, "synth.json", params_json(p));
    if (rc == CNX_EIMMUTABLE)
        cnx_error_wrap("%s holds a different dataset", w.url);
    if (rc < 0)
        goto done;

    for (i = 0; i < 3; i++)
        chunks *= (p->shape[i] + p->chunk[i] - 1) / p->chunk[i];
    /* Units: one per chunk written, one per section of tiles, and for
     * generation, which takes about as long as the writing, as many. */
    gctx.w = &w;
    gctx.units = 5 * chunks + p->shape[2];
    gctx.reported = 0;
    w.bar = cnx_progress_start("cnx-synth", 2 * gctx.units, quiet);
    gp.progress = gen_progress;
    gp.progress_ctx = &gctx;
    rc = cnx_synth_generate(&synth, &gp);
    if (rc < 0)
        goto done;
    CNX_DEBUG("synth", "generated in %.2f s", cnx_now() - start);
    for (k = 0; k < sizeof(layers) / sizeof(layers[0]); k++) {
        const cnx_volume *vols[] = {synth->gt, synth->image, synth->boundary,
                                    synth->cleft, synth->psd};
        rc = write_layer(&w, layers[k].name, layers[k].type, vols[k], p);
        if (rc < 0)
            goto done;
    }
    rc = put_json(&w, "gt-synapses.json", synapses_json(synth));
    if (rc < 0)
        goto done;
    CNX_DEBUG("synth", "layers written at %.2f s", cnx_now() - start);
    rc = write_tiles(&w, synth);
    if (rc < 0)
        goto done;
    CNX_DEBUG("synth", "tiles written at %.2f s", cnx_now() - start);
    if (summary != NULL) {
        const cnx_synth_tile_grid g = cnx_synth_tile_layout(p);
        summary->objects = synth->nobjects;
        summary->synapses = synth->nsynapses;
        summary->tiles = g.rows * g.cols * (p->shape[2] - (int64_t)p->nmissing);
        summary->files = (int64_t)atomic_load(&w.files);
        summary->bytes = (int64_t)atomic_load(&w.bytes);
        summary->seconds = cnx_now() - start;
    }
done:
    if (rc == 0)
        cnx_progress_finish(w.bar);
    else
        cnx_progress_abort(w.bar);
    cnx_synth_free(synth);
    cnx_store_free(w.store);
    return rc;
}
