/*
 * bench_montage.c - the montage kernel on a cnx-synth stack, one thread,
 * and its pairwise registration beside scikit-image's, on synthetic tiles
 * and on real EM.
 *
 * (a) Montage: a 1024 x 1024 x Z cnx-synth stack (Z = 128 by default,
 * argv[1] to change), generated in memory as slabs of SLAB sections (seeds
 * 7, 8, ...: one cnx_synth_generate of 1024^2 x 128 takes minutes and
 * 2 GB, a slab of 16 about 3 s and 260 MB; not timed). Each section is
 * cut into its 10 x 10 tiles of 128 px (cnx_synth_tiles, nominal errors
 * up to 20 px) and stitched:
 * cnx_montage_solve (registration of every candidate pair + global solves)
 * then cnx_montage_render of the 1024 x 1024 section. Reported: the total,
 * section pixels per second on one core, and the split registration /
 * solve / render (registration timed again pair by pair with
 * cnx_montage_register_pair; "solve" is the rest of cnx_montage_solve),
 * the registration's and the whole montage's speed in Mpx/s per core of
 * tile pixels (the pixels of a section's tiles, each counted once, over
 * the registration seconds and the total), plus accuracy against the true
 * positions.
 * (b) Pairwise: the edge-neighbour pairs of the first PEER_SECTIONS
 * sections, registered by cnx_montage_register_pair and by
 * skimage.registration.phase_cross_correlation(upsample_factor=10)
 * (bench/montage_peer.py) on the two strips that can overlap within the
 * search (the same pixels ours reads), wrap-around resolved towards the
 * nominal offset. Reported: median / max error against the true offset,
 * share within 1 px, time per pair and Mpx/s per core (pixels of the two
 * strips the peer is given, the same count for both; the peer on one
 * thread). A
 * failing peer is reported, never fatal.
 * (c) Pairwise on real EM, as (b): the ISBI 2012 sections 00..29 cut by
 * tests/integration/montage_isbi.py (seed 2012; 3 x 3 tiles of 192 px,
 * 16.7 % overlap, jitter, gains, offsets, noise, nominal errors up to
 * 20 px; not timed) into a temporary directory, read back with
 * cnx_tileset_load and cnx_image_read; the 12 edge-neighbour pairs of each
 * section, scored against truth.json. The data is looked for in
 * $CNX_SHARED/data/isbi2012, else <source>/../shared/data/isbi2012; if it
 * is absent, or the cutter fails, part (c) says so in one line and the
 * exit status is unaffected. About 4 s.
 * usage: bench_montage [SECTIONS]   parts (a), (b), (c)
 *        bench_montage --isbi-only  part (c) alone
 * env CNX_SOURCE: repository root (default: the tree this file is in),
 * CNX_PYTHON: python (default /usr/bin/python3), CNX_SHARED: see (c).
 * Exit 0 unless we fail.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/montage.h"
#include "cnx/synth.h"
#include "cnx/tileset.h"

#define SIDE 1024
#define SEED 7
#define PEER_SECTIONS 2
#define SLAB 16
#define ISBI_SECTIONS 30
#define ISBI_SEED 2012

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_montage: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

/* One pair for parts (b) and (c): the tiles (pixels borrowed from the
 * part's own tiles) and the true offset of b's top-left from a's. */
typedef struct bpair {
    cnx_montage_tile a, b;
    int64_t true_dx, true_dy;
} bpair;

/* A growable list of pairs. */
typedef struct bpairs {
    bpair *v;
    size_t n, cap;
} bpairs;

static int bpairs_push(bpairs *l, const bpair *p)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        bpair *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *p;
    return 0;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}
static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The strips of a pair that can overlap within search (as the kernel
 * takes them, unbinned), cropped to a common size; lag0/lagt: nominal and
 * true offset of b's strip origin in a's strip. */
typedef struct strip {
    int64_t ax0, ay0, bx0, by0, w, h, lag0[2], lagt[2];
} strip;

static void strip_of(const bpair *p, int64_t S, strip *s)
{
    const int64_t d0x = p->b.x - p->a.x;
    const int64_t d0y = p->b.y - p->a.y;
    const int64_t W = p->a.width, H = p->a.height;
    const int64_t a1x = min64(W, d0x + S + W), b1x = min64(W, W - (d0x - S));
    const int64_t a1y = min64(H, d0y + S + H), b1y = min64(H, H - (d0y - S));
    s->ax0 = max64(0, d0x - S);
    s->bx0 = max64(0, -(d0x + S));
    s->ay0 = max64(0, d0y - S);
    s->by0 = max64(0, -(d0y + S));
    s->w = min64(a1x - s->ax0, b1x - s->bx0);
    s->h = min64(a1y - s->ay0, b1y - s->by0);
    s->lag0[0] = d0x - s->ax0 + s->bx0;
    s->lag0[1] = d0y - s->ay0 + s->by0;
    s->lagt[0] = p->true_dx - s->ax0 + s->bx0;
    s->lagt[1] = p->true_dy - s->ay0 + s->by0;
}

/* Run the peer on the pairs; prints its lines (its speed in strip_px, the
 * mean pixels of both strips of a pair, per second). */
static void run_peer(const bpair *pairs, size_t n, int64_t S, double strip_px)
{
    char dir[] = "/tmp/cnx-bench-montage-XXXXXX", npy[96], meta[96];
    char peer[1024], cmd[2048], line[512];
    const char *py;
    int64_t wmax = 0, hmax = 0, shape[3];
    uint8_t *stack = NULL;
    FILE *f, *pp;
    int st;

    if (bench_peer_setup(&py, peer, sizeof(peer), "montage_peer.py", dir) != 0)
        return;
    snprintf(npy, sizeof(npy), "%s/strips.npy", dir);
    snprintf(meta, sizeof(meta), "%s/pairs.txt", dir);
    for (size_t k = 0; k < n; k++) {
        strip s;
        strip_of(&pairs[k], S, &s);
        wmax = max64(wmax, s.w);
        hmax = max64(hmax, s.h);
    }
    shape[0] = wmax;
    shape[1] = hmax;
    shape[2] = (int64_t)(2 * n);
    stack = calloc((size_t)(wmax * hmax) * 2 * n, 1);
    f = fopen(meta, "w");
    if (stack == NULL || f == NULL) {
        printf("peer   : FAILED (cannot write inputs)\n");
        goto done;
    }
    for (size_t k = 0; k < n; k++) {
        const bpair *p = &pairs[k];
        uint8_t *da = stack + (2 * k) * (size_t)(wmax * hmax);
        uint8_t *db = da + (size_t)(wmax * hmax);
        strip s;
        strip_of(p, S, &s);
        for (int64_t y = 0; y < s.h; y++)
            for (int64_t x = 0; x < s.w; x++) {
                da[y * wmax + x] =
                    p->a.pixels[(s.ay0 + y) * p->a.width + s.ax0 + x];
                db[y * wmax + x] =
                    p->b.pixels[(s.by0 + y) * p->b.width + s.bx0 + x];
            }
        fprintf(f, "%lld %lld %lld %lld %lld %lld\n", (long long)s.h,
                (long long)s.w, (long long)s.lag0[1], (long long)s.lag0[0],
                (long long)s.lagt[1], (long long)s.lagt[0]);
    }
    if (fclose(f) != 0 || bench_write_npy(npy, stack, 1, "|u1", shape) != 0) {
        f = NULL;
        printf("peer   : FAILED (cannot write inputs)\n");
        goto done;
    }
    f = NULL;
    snprintf(cmd, sizeof(cmd),
             "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 '%s' '%s' '%s' '%s' "
             "%.0f 2>&1",
             py, peer, npy, meta, strip_px);
    pp = popen(cmd, "r");
    if (pp == NULL) {
        printf("peer   : FAILED (cannot start %s)\n", py);
        goto done;
    }
    while (fgets(line, sizeof(line), pp) != NULL)
        printf("peer   | %s", line);
    st = pclose(pp);
    if (st != 0)
        printf("peer   : FAILED (exit status %d)\n", st);
done:
    if (f != NULL)
        fclose(f);
    free(stack);
    unlink(npy);
    unlink(meta);
    rmdir(dir);
}

/* Parts (b) and (c) once their pairs are gathered: register each pair with
 * ours, print the error against the truth and the time per pair, then run
 * the peer on the same strips. @return 0, or 1 if we fail. */
static int pairwise(const bpair *pairs, size_t n, const cnx_montage_params *p)
{
    double *err = malloc((n ? n : 1) * sizeof(*err)), tr, within = 0, t0;
    double px = 0; /* pixels of both strips (the peer's input), summed */
    if (err == NULL || n == 0) {
        free(err);
        fprintf(stderr, "bench_montage: no pairs to register\n");
        return 1;
    }
    t0 = now();
    for (size_t k = 0; k < n; k++) {
        cnx_montage_pair q;
        double ex, ey;
        if (cnx_montage_register_pair(&pairs[k].a, &pairs[k].b, p, &q) != 0) {
            free(err);
            return fail("register");
        }
        ex = q.dx - (double)pairs[k].true_dx;
        ey = q.dy - (double)pairs[k].true_dy;
        err[k] = sqrt(ex * ex + ey * ey);
    }
    tr = now() - t0;
    for (size_t k = 0; k < n; k++) {
        within += err[k] <= 1.0;
        strip sk;
        strip_of(&pairs[k], p->search, &sk);
        px += (double)(2 * sk.w * sk.h);
    }
    bench_median(err, (int)n);
    printf("ours   : error vs truth median %.3f px, max %.3f px, "
           "%.1f %% within 1 px; %.3f ms/pair = %.2f Mpx/s per core (pixels "
           "of both strips)\n",
           err[n / 2], err[n - 1], 100 * within / (double)n,
           1e3 * tr / (double)n, px / tr / 1e6);
    free(err);
    run_peer(pairs, n, p->search, px / (double)n);
    return 0;
}

/* Parts (a) and (b). @return 0, or 1 if we fail. */
static int bench_synth(int64_t nz, const cnx_montage_params *p)
{
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    uint8_t *canvas = malloc((size_t)SIDE * SIDE);
    bpairs pairs = {0};
    size_t total_pairs = 0, total_used = 0;
    double tile_px = 0; /* pixels of a section's tiles */
    double t_solve = 0, t_reg = 0, t_render = 0, t_gen = 0, t0;
    double worst_pos = 0;
    double *med = calloc((size_t)nz, sizeof(*med));
    int64_t rows = 0, cols = 0;
    int rc;

    if (canvas == NULL || med == NULL)
        return 1;
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = SIDE;
    sp.shape[2] = SLAB;
    /* The figures in docs/montage.md were measured on tiles cut from the
     * image itself; keep them comparable (the section distortions change
     * the pixels, not the tile positions montage recovers). */
    sp.distort = CNX_SYNTH_DISTORT_NONE;
    {
        const cnx_synth_tile_grid g = cnx_synth_tile_layout(&sp);
        rows = g.rows;
        cols = g.cols;
        printf("input  : cnx-synth %dx%dx%lld as slabs of %d sections "
               "(seeds %d, %d, ...), %lld x %lld tiles of %lld px per "
               "section\n",
               SIDE, SIDE, (long long)nz, SLAB, SEED, SEED + 1, (long long)rows,
               (long long)cols, (long long)g.width);
    }

    for (int64_t z = 0; z < nz; z++) {
        if (z % SLAB == 0) {
            cnx_synth_free(synth); /* tiles are copies: safe */
            synth = NULL;
            sp.seed = SEED + (uint64_t)(z / SLAB);
            t0 = now();
            if (cnx_synth_generate(&synth, &sp) != 0)
                return fail("generate");
            t_gen += now() - t0;
        }
        cnx_synth_tile *st = NULL;
        size_t n = 0;
        cnx_montage_tile *mt;
        char(*ids)[24];
        cnx_montage_result r;
        double mx = 0, my = 0, t1;
        size_t placed = 0;

        if (cnx_synth_tiles(&st, &n, synth, z % SLAB) != 0)
            return fail("tiles");
        mt = calloc(n, sizeof(*mt));
        ids = calloc(n, sizeof(*ids));
        if (mt == NULL || ids == NULL)
            return 1;
        tile_px = 0;
        for (size_t i = 0; i < n; i++)
            tile_px += (double)(st[i].width * st[i].height);
        for (size_t i = 0; i < n; i++) {
            snprintf(ids[i], sizeof(ids[i]), "r%02lld-c%02lld",
                     (long long)st[i].row, (long long)st[i].col);
            mt[i] = (cnx_montage_tile){ids[i],          st[i].nominal_x,
                                       st[i].nominal_y, st[i].width,
                                       st[i].height,    st[i].pixels};
        }
        t0 = now();
        if (cnx_montage_solve(mt, n, p, &r) != 0)
            return fail("solve");
        t1 = now();
        t_solve += t1 - t0;
        if (cnx_montage_render(mt, n, &r, 0, 0, SIDE, SIDE, canvas) != 0)
            return fail("render");
        t_render += now() - t1;
        /* registration alone, pair by pair */
        t0 = now();
        for (size_t k = 0; k < r.npairs; k++) {
            cnx_montage_pair q;
            (void)cnx_montage_register_pair(&mt[r.pairs[k].a],
                                            &mt[r.pairs[k].b], p, &q);
        }
        t_reg += now() - t0;
        /* accuracy */
        for (size_t i = 0; i < n; i++)
            if (r.placed[i]) {
                mx += r.x[i] - (double)st[i].x;
                my += r.y[i] - (double)st[i].y;
                placed++;
            }
        mx /= (double)placed;
        my /= (double)placed;
        for (size_t i = 0; i < n; i++)
            if (r.placed[i]) {
                const double ex = r.x[i] - (double)st[i].x - mx;
                const double ey = r.y[i] - (double)st[i].y - my;
                const double e = sqrt(ex * ex + ey * ey);
                worst_pos = e > worst_pos ? e : worst_pos;
            } else {
                worst_pos = INFINITY;
            }
        med[z] = r.median_residual;
        total_pairs += r.npairs;
        for (size_t k = 0; k < r.npairs; k++)
            total_used += r.pairs[k].used != 0;
        /* edge neighbours of the first sections for part (b) */
        for (size_t k = 0; k < r.npairs && z < PEER_SECTIONS; k++) {
            const cnx_synth_tile *a = &st[r.pairs[k].a], *b = &st[r.pairs[k].b];
            const int64_t dr = b->row - a->row, dc = b->col - a->col;
            bpair bp;
            if (!((dr == 0 && dc == 1) || (dr == 1 && dc == 0)))
                continue;
            bp.a = (cnx_montage_tile){"a",      a->nominal_x, a->nominal_y,
                                      a->width, a->height,    a->pixels};
            bp.b = (cnx_montage_tile){"b",      b->nominal_x, b->nominal_y,
                                      b->width, b->height,    b->pixels};
            bp.true_dx = b->x - a->x;
            bp.true_dy = b->y - a->y;
            if (bpairs_push(&pairs, &bp) != 0)
                return 1;
        }
        cnx_montage_result_free(&r);
        free(mt);
        free(ids);
        if (z >= PEER_SECTIONS)
            cnx_synth_tiles_free(st, n);
        /* tiles of the first sections stay for part (b) (leaked to exit) */
    }
    {
        const double px = (double)SIDE * SIDE * (double)nz;
        const double total = t_solve + t_render;
        double m = bench_median(med, (int)nz);
        printf("input  : generation %.1f s (untimed below)\n", t_gen);
        printf("ours   : %lld sections, %zu pairs (%zu used): solve %.2f s "
               "(of which registration, re-run pair by pair: %.2f s = "
               "%.0f %%), render %.2f s; total %.2f s = %.1f ms/section, "
               "%.2f Mpx/s/core\n",
               (long long)nz, total_pairs, total_used, t_solve, t_reg,
               100 * t_reg / t_solve, t_render, total, 1e3 * total / (double)nz,
               px / total / 1e6);
        printf("ours   : in tile pixels (%.0f per section, each counted "
               "once): registration %.2f Mpx/s per core, the whole montage "
               "%.2f Mpx/s per core\n",
               tile_px, tile_px * (double)nz / t_reg / 1e6,
               tile_px * (double)nz / total / 1e6);
        printf("ours   : median of per-section median residuals %.4f px; "
               "worst tile position error (mean translation removed) "
               "%.4f px\n",
               m, worst_pos);
    }

    /* (b) pairwise registration on the edge neighbours */
    printf("pairs  : %zu edge-neighbour pairs of sections 0..%d, nominal "
           "errors up to 40 px relative, search %lld\n",
           pairs.n, (int)min64(nz, PEER_SECTIONS) - 1, (long long)p->search);
    rc = pairwise(pairs.v, pairs.n, p);
    free(pairs.v);
    free(med);
    free(canvas);
    cnx_synth_free(synth);
    return rc;
}

/* The repository root: $CNX_SOURCE, else the parent of this file's
 * directory (CMake passes absolute paths). */
static void source_root(char *buf, size_t n)
{
    const char *src = getenv("CNX_SOURCE");
    if (src != NULL && src[0] != '\0') {
        snprintf(buf, n, "%s", src);
    } else {
        char dir[1024];
        bench_peer_path(dir, sizeof(dir), ""); /* "<root>/bench/" */
        dir[strlen(dir) > 0 ? strlen(dir) - 1 : 0] = '\0';
        char *slash = strrchr(dir, '/');
        if (slash != NULL)
            *slash = '\0';
        snprintf(buf, n, "%s", slash != NULL ? dir : "..");
    }
}

/* The true top-left of tile id in section z of a cnx.tileset-truth/1
 * document. @return 0, or -1 if it is not there. */
static int truth_of(const json_t *truth, int64_t z, const char *id, int64_t *x,
                    int64_t *y)
{
    const json_t *secs = json_object_get(truth, "sections");
    for (size_t i = 0; i < json_array_size(secs); i++) {
        const json_t *sec = json_array_get(secs, i);
        const json_t *tiles = json_object_get(sec, "tiles");
        if (json_integer_value(json_object_get(sec, "z")) != z)
            continue;
        for (size_t j = 0; j < json_array_size(tiles); j++) {
            const json_t *t = json_array_get(tiles, j);
            const char *tid = json_string_value(json_object_get(t, "id"));
            if (tid == NULL || strcmp(tid, id) != 0)
                continue;
            if (!json_is_integer(json_object_get(t, "x")) ||
                !json_is_integer(json_object_get(t, "y")))
                return -1;
            *x = json_integer_value(json_object_get(t, "x"));
            *y = json_integer_value(json_object_get(t, "y"));
            return 0;
        }
    }
    return -1;
}

/* Part (c). @return 0 (also when skipped or the cutter fails), or 1 if we
 * fail. */
static int bench_isbi(const cnx_montage_params *p)
{
    char root[1024], data[1200], probe[1300], cutter[1200], path[1300];
    char dir[] = "/tmp/cnx-bench-montage-isbi-XXXXXX", cmd[4096];
    const char *shared = getenv("CNX_SHARED"), *py = getenv("CNX_PYTHON");
    cnx_tileset *ts = NULL;
    json_t *truth = NULL;
    json_error_t jerr;
    cnx_image **img = NULL;
    size_t nimg = 0, ntiles = 0;
    bpairs pairs = {0};
    double t0, t_cut;
    int st, rc = 1;

    source_root(root, sizeof(root));
    if (shared != NULL && shared[0] != '\0')
        snprintf(data, sizeof(data), "%s/data/isbi2012", shared);
    else
        snprintf(data, sizeof(data), "%s/../shared/data/isbi2012", root);
    snprintf(probe, sizeof(probe), "%s/image/%02d.png", data,
             ISBI_SECTIONS - 1);
    if (access(probe, R_OK) != 0) {
        printf("isbi   : skipped (no ISBI 2012 data at %s)\n", data);
        return 0;
    }
    if (py == NULL || py[0] == '\0')
        py = "/usr/bin/python3";
    snprintf(cutter, sizeof(cutter), "%s/tests/integration/montage_isbi.py",
             root);
    if (strchr(py, '\'') != NULL || strchr(cutter, '\'') != NULL ||
        strchr(data, '\'') != NULL) {
        printf("isbi   : FAILED (quote in a path)\n");
        return 0;
    }
    if (mkdtemp(dir) == NULL) {
        printf("isbi   : FAILED (no temporary directory)\n");
        return 0;
    }
    snprintf(cmd, sizeof(cmd),
             "'%s' '%s' cut --data '%s' --out '%s' --sections %d --seed %d "
             ">/dev/null",
             py, cutter, data, dir, ISBI_SECTIONS, ISBI_SEED);
    t0 = now();
    st = system(cmd);
    t_cut = now() - t0;
    if (st != 0) {
        printf("isbi   : FAILED (%s cut: exit status %d)\n", cutter,
               WIFEXITED(st) ? WEXITSTATUS(st) : st);
        rc = 0;
        goto done;
    }
    snprintf(path, sizeof(path), "%s/truth.json", dir);
    truth = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (truth == NULL) {
        printf("isbi   : FAILED (truth.json: %s)\n", jerr.text);
        rc = 0;
        goto done;
    }
    snprintf(path, sizeof(path), "%s/tiles.json", dir);
    if (cnx_tileset_load(&ts, path, CNX_TILESET_MAX_ERROR) != 0) {
        rc = fail("tileset");
        goto done;
    }
    for (size_t s = 0; s < ts->nsections; s++)
        ntiles += ts->sections[s].ntiles;
    img = calloc(ntiles, sizeof(*img));
    if (img == NULL)
        goto done;
    printf("input  : ISBI 2012 sections 00..%02d cut by %s (seed %d: 3 x 3 "
           "tiles of 192 px, 16.7 %% overlap, nominal errors up to 20 px) "
           "in %.1f s (untimed below)\n",
           ISBI_SECTIONS - 1, "tests/integration/montage_isbi.py", ISBI_SEED,
           t_cut);
    for (size_t s = 0; s < ts->nsections; s++) {
        const cnx_tile_section *sec = &ts->sections[s];
        const size_t first = nimg;
        for (size_t i = 0; i < sec->ntiles; i++) {
            const cnx_tile *t = &sec->tiles[i];
            snprintf(path, sizeof(path), "%s/%s", dir, t->file);
            if (cnx_image_read(&img[nimg], path) != 0) {
                rc = fail("read");
                goto done;
            }
            if (img[nimg]->bits != 8 || img[nimg]->width != t->width ||
                img[nimg]->height != t->height) {
                fprintf(stderr, "bench_montage: %s: not 8-bit %lld x %lld\n",
                        path, (long long)t->width, (long long)t->height);
                goto done;
            }
            nimg++;
        }
        /* edge neighbours: same row and next column, or the reverse */
        for (size_t i = 0; i < sec->ntiles; i++)
            for (size_t j = 0; j < sec->ntiles; j++) {
                const cnx_tile *ta = &sec->tiles[i], *tb = &sec->tiles[j];
                int ra, ca, rb, cb;
                int64_t ax, ay, bx, by;
                bpair bp;
                if (sscanf(ta->id, "z%*d-r%d-c%d", &ra, &ca) != 2 ||
                    sscanf(tb->id, "z%*d-r%d-c%d", &rb, &cb) != 2) {
                    fprintf(stderr,
                            "bench_montage: tile id %s or %s: not "
                            "zNNNNN-rRR-cCC\n",
                            ta->id, tb->id);
                    goto done;
                }
                if (!((rb == ra && cb == ca + 1) || (cb == ca && rb == ra + 1)))
                    continue;
                if (truth_of(truth, sec->z, ta->id, &ax, &ay) != 0 ||
                    truth_of(truth, sec->z, tb->id, &bx, &by) != 0) {
                    printf("isbi   : FAILED (truth.json lacks %s or %s)\n",
                           ta->id, tb->id);
                    rc = 0;
                    goto done;
                }
                bp.a = (cnx_montage_tile){ta->id,     ta->x,
                                          ta->y,      ta->width,
                                          ta->height, img[first + i]->pixels};
                bp.b = (cnx_montage_tile){tb->id,     tb->x,
                                          tb->y,      tb->width,
                                          tb->height, img[first + j]->pixels};
                bp.true_dx = bx - ax;
                bp.true_dy = by - ay;
                if (bpairs_push(&pairs, &bp) != 0)
                    goto done;
            }
    }
    printf("pairs  : ISBI 2012: %zu edge-neighbour pairs of sections "
           "00..%02d, nominal errors up to 40 px relative, search %lld\n",
           pairs.n, ISBI_SECTIONS - 1, (long long)p->search);
    rc = pairwise(pairs.v, pairs.n, p);
done:
    for (size_t i = 0; i < nimg; i++)
        cnx_image_free(img[i]);
    free(img);
    free(pairs.v);
    json_decref(truth);
    cnx_tileset_free(ts);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_montage: could not remove %s\n", dir);
    return rc;
}

int main(int argc, char **argv)
{
    const int isbi_only = argc > 1 && strcmp(argv[1], "--isbi-only") == 0;
    const int64_t nz =
        argc > 1 && !isbi_only ? strtoll(argv[1], NULL, 10) : 128;
    cnx_montage_params p;

    if (nz < 1 || nz > 1024 || argc > 2) {
        fprintf(stderr, "usage: bench_montage [SECTIONS 1..1024 | "
                        "--isbi-only]\n");
        return 2;
    }
    cnx_montage_params_default(&p);
    if (!isbi_only && bench_synth(nz, &p) != 0)
        return 1;
    return bench_isbi(&p);
}
