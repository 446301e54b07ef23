/*
 * align_tool - the section-alignment kernel in one process, for tests and
 * benchmarks: reads a stack of 8-bit section images, matches every
 * section against the one and two below, solves the stack and (with
 * --render) renders the aligned sections, exactly as the align-match,
 * align-solve and align-render stages do (the same kernel calls and
 * documents, cnx/align_io.h).
 *
 *   align_tool --sections DIR --count N --out DIR [--params JSON]
 *              [--origin X,Y] [--render] [--time] [--reverse]
 *
 * DIR holds zNNNNN.png (or .tif), z = 0 .. N-1, all of one size; --origin
 * places pixel (0, 0) (default 0,0). Writes OUT/matches.json (every
 * section, cnx.align-match/1), OUT/transforms.json (cnx.align/1) and with
 * --render OUT/zNNNNN.png. --time prints, on stdout, the seconds spent
 * matching, solving and rendering and the megapixels matched. --reverse
 * matches the sections from the last to the first and hands the matches to
 * the solve in that order (the documents must not change).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/align.h"
#include "cnx/align_io.h"
#include "cnx/error.h"
#include "cnx/imageio.h"

static const char usage[] =
    "usage: align_tool --sections DIR --count N --out DIR [--params JSON]\n"
    "                  [--origin X,Y] [--render] [--time] [--reverse]\n"
    "Align a stack of sections DIR/zNNNNN.png (or .tif): writes\n"
    "OUT/matches.json, OUT/transforms.json and, with --render,\n"
    "OUT/zNNNNN.png.\n";

static int fail(const char *what)
{
    fprintf(stderr, "align_tool: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

static int write_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    int ok;
    if (f == NULL) {
        fprintf(stderr, "align_tool: cannot write %s\n", path);
        return 1;
    }
    ok = fwrite(data, 1, len, f) == len;
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, "align_tool: cannot write %s\n", path);
    return ok ? 0 : 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Read section z (png, else tif). */
static int read_section(const char *dir, int64_t z, cnx_image **img)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/z%05" PRId64 ".png", dir, z);
    if (cnx_image_read(img, path) == 0)
        return 0;
    snprintf(path, sizeof(path), "%s/z%05" PRId64 ".tif", dir, z);
    return cnx_image_read(img, path);
}

/* Matches by section, then the nearer one first. */
static int by_section(const void *pa, const void *pb)
{
    const cnx_align_match *a = pa, *b = pb;
    if (a->zb != b->zb)
        return a->zb < b->zb ? -1 : 1;
    return (a->za < b->za) - (a->za > b->za);
}

int main(int argc, char **argv)
{
    const char *sections = NULL, *out = NULL, *params = NULL;
    int64_t count = 0, ox = 0, oy = 0;
    int render = 0, timing = 0, reverse = 0;
    cnx_align_params p;
    cnx_align_slab_matches all;
    cnx_align_solution sol;
    cnx_image **img;
    cnx_align_image *sec;
    double t0, t_match, t_solve, t_render = 0.0;
    char path[4096], *doc = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--sections") == 0 && i + 1 < argc)
            sections = argv[++i];
        else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
            out = argv[++i];
        else if (strcmp(argv[i], "--params") == 0 && i + 1 < argc)
            params = argv[++i];
        else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc)
            count = strtoll(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--origin") == 0 && i + 1 < argc) {
            long long a, b;
            if (sscanf(argv[++i], "%lld,%lld", &a, &b) != 2) {
                fputs(usage, stderr);
                return 2;
            }
            ox = a;
            oy = b;
        } else if (strcmp(argv[i], "--render") == 0)
            render = 1;
        else if (strcmp(argv[i], "--time") == 0)
            timing = 1;
        else if (strcmp(argv[i], "--reverse") == 0)
            reverse = 1;
        else if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (sections == NULL || out == NULL || count < 1 || count > 100000) {
        fputs(usage, stderr);
        return 2;
    }
    if (cnx_align_params_parse(params, &p) != 0)
        return fail("--params");
    img = calloc((size_t)count, sizeof(*img));
    sec = calloc((size_t)count, sizeof(*sec));
    memset(&all, 0, sizeof(all));
    memset(&sol, 0, sizeof(sol));
    all.nsections = (size_t)count;
    all.z = calloc((size_t)count, sizeof(*all.z));
    all.stats = calloc((size_t)count, sizeof(*all.stats));
    all.matches = calloc((size_t)(2 * count), sizeof(*all.matches));
    if (img == NULL || sec == NULL || all.z == NULL || all.stats == NULL ||
        all.matches == NULL) {
        fprintf(stderr, "align_tool: out of memory\n");
        return 1;
    }
    for (int64_t z = 0; z < count; z++) {
        if (read_section(sections, z, &img[z]) != 0)
            return fail("section");
        if (img[z]->bits != 8 || img[z]->width != img[0]->width ||
            img[z]->height != img[0]->height) {
            fprintf(stderr,
                    "align_tool: section %" PRId64
                    ": not 8-bit or not the size of section 0\n",
                    z);
            return 1;
        }
        sec[z] = (cnx_align_image){ox, oy, img[z]->width, img[z]->height,
                                   img[z]->pixels};
    }
    t0 = now();
    all.grid = cnx_align_grid_of(ox, oy, sec[0].w, sec[0].h, &p);
    for (int64_t k = 0; k < count; k++) {
        const int64_t z = reverse ? count - 1 - k : k;
        all.z[z] = z;
        all.stats[z] = cnx_align_stats_of(&sec[z]);
        for (int64_t d = 1; d <= 2 && z - d >= 0; d++) {
            cnx_align_match *m = &all.matches[all.nmatches++];
            if (cnx_align_match_sections(&sec[z - d], &sec[z], &p, m) != 0)
                return fail("match");
            m->za = z - d;
            m->zb = z;
        }
    }
    t_match = now() - t0;
    t0 = now();
    if (cnx_align_solve(&all.grid, 0, count, all.matches, all.nmatches,
                        all.stats, &p, &sol) != 0)
        return fail("solve");
    t_solve = now() - t0;
    /* The document lists each section's matches as the forward run makes
     * them: z - 1, then z - 2. */
    qsort(all.matches, all.nmatches, sizeof(*all.matches), by_section);
    if (cnx_align_matches_encode(&all, &doc) != 0)
        return fail("matches");
    snprintf(path, sizeof(path), "%s/matches.json", out);
    if (write_file(path, doc, strlen(doc)) != 0)
        return 1;
    free(doc);
    if (cnx_align_transforms_encode(&sol, 0, (size_t)count, &doc) != 0)
        return fail("transforms");
    snprintf(path, sizeof(path), "%s/transforms.json", out);
    if (write_file(path, doc, strlen(doc)) != 0)
        return 1;
    free(doc);
    for (int64_t z = 0; render && z < count; z++) {
        cnx_image o = {sec[z].w, sec[z].h, 8, NULL};
        uint8_t *png = NULL;
        size_t len = 0;
        int64_t box[4];
        o.pixels = malloc((size_t)(o.width * o.height));
        if (o.pixels == NULL) {
            fprintf(stderr, "align_tool: out of memory\n");
            return 1;
        }
        box[0] = ox;
        box[1] = oy;
        box[2] = sec[z].w;
        box[3] = sec[z].h;
        t0 = now();
        if (cnx_align_render(&sec[z], &sol.grid, sol.sections[z].dx,
                             sol.sections[z].dy, sol.sections[z].gain,
                             sol.sections[z].offset, box, o.pixels) != 0)
            return fail("render");
        t_render += now() - t0;
        if (cnx_png_encode(&o, &png, &len) != 0)
            return fail("png");
        snprintf(path, sizeof(path), "%s/z%05" PRId64 ".png", out, z);
        if (write_file(path, png, len) != 0)
            return 1;
        free(png);
        free(o.pixels);
    }
    if (timing)
        printf("match_s %.6f solve_s %.6f render_s %.6f pairs %zu "
               "mpx_matched %.6f\n",
               t_match, t_solve, t_render, all.nmatches,
               (double)all.nmatches * (double)(sec[0].w * sec[0].h) / 1e6);
    cnx_align_solution_free(&sol);
    cnx_align_slab_matches_free(&all);
    for (int64_t z = 0; z < count; z++)
        cnx_image_free(img[z]);
    free(img);
    free(sec);
    return 0;
}
