/*
 * synth_tiles.c - a montage tile set cut from the synthetic image.
 *
 * Every z section is covered by the same grid of rows x cols tiles of a
 * fixed size: the regular grid spreads the tiles evenly from edge to edge
 * with at least tile_overlap_percent overlap even after jitter. A tile's
 * true position is its grid position plus up to +-tile_jitter pixels, kept
 * inside the section and flush with its edge for the outer rows and
 * columns, so the tiles cover every pixel; its nominal position (what a
 * microscope stage would report) is the true one plus up to
 * +-tile_nominal_error. Its pixels are the section's, times a per-tile
 * gain, plus a per-tile offset and uniform noise in -2..2. The section
 * they are cut from is the image's, distorted as a microscope does
 * (synth_sections.c) unless params.distort is none; a missing section has
 * no tiles. Draws come from a stream per section, so sections can be cut
 * in any order or in parallel.
 */
#include <stdlib.h>

#include "cnx/error.h"
#include "kernels/synth_int.h"

/* Tiles along one axis: count n of side t covering extent. */
static void axis_layout(int64_t extent, const cnx_synth_params *p, int64_t *n,
                        int64_t *t)
{
    int64_t overlap, step;
    *t = extent < p->tile_side ? extent : p->tile_side;
    if (extent <= *t) {
        *n = 1;
        return;
    }
    overlap = (*t * p->tile_overlap_percent + 99) / 100 + 2 * p->tile_jitter;
    step = *t - overlap < 1 ? 1 : *t - overlap;
    *n = 1 + (extent - *t + step - 1) / step;
}

/* Grid position of tile i of n along an axis, spread evenly. */
static int64_t axis_pos(int64_t i, int64_t n, int64_t extent, int64_t t)
{
    if (n <= 1)
        return 0;
    return (i * (extent - t) + (n - 1) / 2) / (n - 1);
}

cnx_synth_tile_grid cnx_synth_tile_layout(const cnx_synth_params *p)
{
    cnx_synth_tile_grid g;
    axis_layout(p->shape[0], p, &g.cols, &g.width);
    axis_layout(p->shape[1], p, &g.rows, &g.height);
    return g;
}

void cnx_synth_tiles_free(cnx_synth_tile *tiles, size_t count)
{
    size_t k;
    if (tiles == NULL)
        return;
    for (k = 0; k < count; k++)
        free(tiles[k].pixels);
    free(tiles);
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

int cnx_synth_tiles(cnx_synth_tile **out, size_t *count, const cnx_synth *synth,
                    int64_t z)
{
    const cnx_synth_params *p = &synth->params;
    const cnx_synth_tile_grid g = cnx_synth_tile_layout(p);
    const int64_t sx = p->shape[0], sy = p->shape[1];
    const uint64_t key = cnx_synth__hash_key(p->seed, SYNTH_STREAM_TILE_NOISE +
                                                          ((uint64_t)z << 8));
    const uint8_t *plane;
    uint8_t *distorted = NULL;
    cnx_synth_tile *tiles;
    int64_t r, c, px, py;
    size_t k = 0;
    synth_rng rng;

    *out = NULL;
    *count = 0;
    if (z < 0 || z >= p->shape[2])
        return cnx_error_set(CNX_EINVAL, 0,
                             "synth: section %lld is outside 0..%lld",
                             (long long)z, (long long)p->shape[2] - 1);
    if (cnx_synth_section_is_missing(p, z))
        return 0;
    plane = (const uint8_t *)synth->image->data + z * sx * sy;
    if (p->distort != CNX_SYNTH_DISTORT_NONE) {
        cnx_synth_section_warp warp;
        int rc = cnx_synth_section_warp_draw(&warp, p, z);
        if (rc < 0)
            return rc;
        distorted = malloc((size_t)(sx * sy));
        if (distorted == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
        rc = cnx_synth_distort_section(distorted, plane, &warp);
        if (rc < 0) {
            free(distorted);
            return rc;
        }
        plane = distorted;
    }
    tiles = calloc((size_t)(g.rows * g.cols), sizeof(*tiles));
    if (tiles == NULL) {
        free(distorted);
        return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
    }
    cnx_synth__rng_init(&rng, p->seed, SYNTH_STREAM_TILES + ((uint64_t)z << 8));
    for (r = 0; r < g.rows; r++) {
        for (c = 0; c < g.cols; c++, k++) {
            cnx_synth_tile *t = &tiles[k];
            const int64_t jx =
                cnx_synth__rng_range(&rng, -p->tile_jitter, p->tile_jitter);
            const int64_t jy =
                cnx_synth__rng_range(&rng, -p->tile_jitter, p->tile_jitter);
            const int64_t gain = cnx_synth__rng_range(&rng, 850, 1150);
            const int64_t offset = cnx_synth__rng_range(&rng, -15, 15);
            const int64_t ex = cnx_synth__rng_range(
                &rng, -p->tile_nominal_error, p->tile_nominal_error);
            const int64_t ey = cnx_synth__rng_range(
                &rng, -p->tile_nominal_error, p->tile_nominal_error);

            t->row = r;
            t->col = c;
            t->width = g.width;
            t->height = g.height;
            /* Tiles of the outer rows and columns stay flush with the
             * section's edges, so the tiles always cover the section. */
            t->x = clamp64(axis_pos(c, g.cols, sx, g.width) + jx,
                           c == g.cols - 1 ? sx - g.width : 0,
                           c == 0 ? 0 : sx - g.width);
            t->y = clamp64(axis_pos(r, g.rows, sy, g.height) + jy,
                           r == g.rows - 1 ? sy - g.height : 0,
                           r == 0 ? 0 : sy - g.height);
            t->nominal_x = t->x + ex;
            t->nominal_y = t->y + ey;
            t->gain_milli = (int)gain;
            t->offset = (int)offset;
            t->pixels = malloc((size_t)(g.width * g.height));
            if (t->pixels == NULL) {
                cnx_synth_tiles_free(tiles, (size_t)(g.rows * g.cols));
                free(distorted);
                return cnx_error_set(CNX_ENOMEM, 0, "synth: out of memory");
            }
            for (py = 0; py < g.height; py++) {
                const uint8_t *src = plane + (t->y + py) * sx + t->x;
                uint8_t *dst = t->pixels + py * g.width;
                for (px = 0; px < g.width; px++) {
                    const uint64_t h =
                        cnx_synth__mix(key + (((uint64_t)k << 32) |
                                              (uint64_t)(py * g.width + px)));
                    const int64_t noise = (int64_t)(((h >> 32) * 5) >> 32) - 2;
                    const int64_t v =
                        ((int64_t)src[px] * gain + 500) / 1000 + offset + noise;
                    dst[px] = (uint8_t)clamp64(v, 0, 255);
                }
            }
        }
    }
    free(distorted);
    *out = tiles;
    *count = k;
    return 0;
}
