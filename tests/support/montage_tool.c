/*
 * montage_tool - run the montage kernel (cnx/montage.h) on a tile set from
 * the command line, for tests/integration/montage_isbi.sh and the bench.
 *
 *   montage_tool --tiles TILES.json --out DIR [--section Z] [--params JSON]
 *                [--render]
 *
 * Loads the tile set (cnx_tileset_load: schema, overlap plausibility,
 * every file decoded and checked), then for each section (or only z = Z):
 * decodes its 8-bit tiles, solves, and writes DIR/zNNNNN.json, the report
 * (cnx_montage_report_json). With --render it also writes DIR/zNNNNN.png,
 * the rendered bounding box of the solved tiles, and DIR/zNNNNN.box.json,
 * {"x0":..,"y0":..,"width":..,"height":..} in section pixels. One line per
 * section on stdout: "z Z tiles N pairs P used U median_residual M
 * max_residual X seconds S" (S: the kernel's solve only).
 *
 * Exit status 0, 1 on a failure (one line on stderr), 2 on bad arguments.
 * Single-threaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/montage_io.h"
#include "cnx/tileset.h"

static const char usage[] =
    "usage: montage_tool --tiles TILES.json --out DIR [--section Z]\n"
    "                    [--params JSON] [--render]\n"
    "Stitch each section of a tile set; writes DIR/zNNNNN.json (the report)\n"
    "and, with --render, DIR/zNNNNN.png and DIR/zNNNNN.box.json.\n";

static int fail(const char *what)
{
    fprintf(stderr, "montage_tool: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (f == NULL) {
        fprintf(stderr, "montage_tool: cannot write %s\n", path);
        return 1;
    }
    ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, "montage_tool: cannot write %s\n", path);
    return ok ? 0 : 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t round_ll(double v)
{
    return v < 0 ? -(int64_t)(-v + 0.5) : (int64_t)(v + 0.5);
}

/* Render the bounding box of the solved tiles into DIR/zNNNNN.png. */
static int render(const cnx_montage_tile *tiles, size_t n,
                  const cnx_montage_result *r, const char *out, int64_t z)
{
    int64_t x0 = INT64_MAX, y0 = INT64_MAX, x1 = INT64_MIN, y1 = INT64_MIN;
    char path[4096], box[256];
    cnx_image img;
    uint8_t *png = NULL;
    size_t len = 0;
    int status;
    for (size_t i = 0; i < n; i++) {
        const int64_t tx = round_ll(r->x[i]), ty = round_ll(r->y[i]);
        x0 = tx < x0 ? tx : x0;
        y0 = ty < y0 ? ty : y0;
        x1 = tx + tiles[i].width > x1 ? tx + tiles[i].width : x1;
        y1 = ty + tiles[i].height > y1 ? ty + tiles[i].height : y1;
    }
    img.width = x1 - x0;
    img.height = y1 - y0;
    img.bits = 8;
    img.pixels = malloc((size_t)(img.width * img.height));
    if (img.pixels == NULL) {
        fprintf(stderr, "montage_tool: out of memory\n");
        return 1;
    }
    if (cnx_montage_render(tiles, n, r, x0, y0, img.width, img.height,
                           img.pixels) != 0 ||
        cnx_png_encode(&img, &png, &len) != 0) {
        free(img.pixels);
        return fail("render");
    }
    snprintf(path, sizeof(path), "%s/z%05lld.png", out, (long long)z);
    status = write_file(path, png, len);
    snprintf(box, sizeof(box),
             "{\"height\":%lld,\"width\":%lld,\"x0\":%lld,\"y0\":%lld}\n",
             (long long)img.height, (long long)img.width, (long long)x0,
             (long long)y0);
    snprintf(path, sizeof(path), "%s/z%05lld.box.json", out, (long long)z);
    if (status == 0)
        status = write_file(path, box, strlen(box));
    free(png);
    free(img.pixels);
    return status;
}

/* Load, solve and write one section. */
static int do_section(const cnx_tile_section *sec, const char *base,
                      const cnx_montage_params *p, const char *out,
                      int want_render)
{
    cnx_montage_tile *tiles = calloc(sec->ntiles, sizeof(*tiles));
    cnx_image **imgs = calloc(sec->ntiles, sizeof(*imgs));
    cnx_montage_result r;
    char path[4096], *json = NULL;
    size_t used = 0;
    double t0, t1;
    int status = 1;

    memset(&r, 0, sizeof(r));
    if (tiles == NULL || imgs == NULL) {
        fprintf(stderr, "montage_tool: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < sec->ntiles; i++) {
        const cnx_tile *t = &sec->tiles[i];
        if (snprintf(path, sizeof(path), "%s/%s", base, t->file) >=
            (int)sizeof(path)) {
            fprintf(stderr, "montage_tool: %s: path too long\n", t->file);
            goto done;
        }
        if (cnx_image_read(&imgs[i], path) != 0) {
            status = fail(path);
            goto done;
        }
        if (imgs[i]->bits != 8) {
            fprintf(stderr, "montage_tool: %s: %d-bit, montage takes 8\n", path,
                    imgs[i]->bits);
            goto done;
        }
        tiles[i] = (cnx_montage_tile){
            t->id,           t->x,           t->y, imgs[i]->width,
            imgs[i]->height, imgs[i]->pixels};
    }
    t0 = now();
    if (cnx_montage_solve(tiles, sec->ntiles, p, &r) != 0) {
        status = fail("solve");
        goto done;
    }
    t1 = now();
    if (cnx_montage_report_json(tiles, &r, sec->z, &json) != 0) {
        status = fail("report");
        goto done;
    }
    snprintf(path, sizeof(path), "%s/z%05lld.json", out, (long long)sec->z);
    if (write_file(path, json, strlen(json)) != 0)
        goto done;
    if (want_render && render(tiles, sec->ntiles, &r, out, sec->z) != 0)
        goto done;
    for (size_t k = 0; k < r.npairs; k++)
        used += r.pairs[k].used != 0;
    printf("z %lld tiles %zu pairs %zu used %zu median_residual %.4f "
           "max_residual %.4f seconds %.4f\n",
           (long long)sec->z, sec->ntiles, r.npairs, used, r.median_residual,
           r.max_residual, t1 - t0);
    status = 0;
done:
    for (size_t i = 0; imgs != NULL && i < sec->ntiles; i++)
        cnx_image_free(imgs[i]);
    free(imgs);
    free(tiles);
    free(json);
    cnx_montage_result_free(&r);
    return status;
}

int main(int argc, char **argv)
{
    const char *tiles_path = NULL, *out = NULL, *params = NULL;
    long long only = -1;
    int want_render = 0, status = 0, found = 0;
    cnx_montage_params p;
    cnx_tileset *ts = NULL;
    char base[4096];
    char *slash;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--tiles") == 0 && i + 1 < argc) {
            tiles_path = argv[++i];
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            out = argv[++i];
        } else if (strcmp(argv[i], "--params") == 0 && i + 1 < argc) {
            params = argv[++i];
        } else if (strcmp(argv[i], "--section") == 0 && i + 1 < argc) {
            char *end;
            only = strtoll(argv[++i], &end, 10);
            if (*end != '\0' || only < 0) {
                fputs(usage, stderr);
                return 2;
            }
        } else if (strcmp(argv[i], "--render") == 0) {
            want_render = 1;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (tiles_path == NULL || out == NULL) {
        fputs(usage, stderr);
        return 2;
    }
    if (cnx_montage_params_parse(params, &p) != 0) {
        fail("--params");
        return 2;
    }
    if (cnx_tileset_load(&ts, tiles_path, CNX_TILESET_MAX_ERROR * 2) != 0)
        return fail(tiles_path);
    snprintf(base, sizeof(base), "%s", tiles_path);
    slash = strrchr(base, '/');
    if (slash != NULL)
        *slash = '\0';
    else
        snprintf(base, sizeof(base), ".");
    for (size_t s = 0; s < ts->nsections && status == 0; s++) {
        if (only >= 0 && ts->sections[s].z != only)
            continue;
        found = 1;
        status = do_section(&ts->sections[s], base, &p, out, want_render);
    }
    if (status == 0 && !found) {
        fprintf(stderr, "montage_tool: no section %lld in %s\n", only,
                tiles_path);
        status = 1;
    }
    cnx_tileset_free(ts);
    return status;
}
