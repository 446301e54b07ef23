/*
 * bench_montage.c - the montage kernel on a cnx-synth stack, one thread,
 * and its pairwise registration beside scikit-image's.
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
 * plus accuracy against the true positions.
 * (b) Pairwise: the edge-neighbour pairs of the first PEER_SECTIONS
 * sections, registered by cnx_montage_register_pair and by
 * skimage.registration.phase_cross_correlation(upsample_factor=10)
 * (bench/montage_peer.py) on the two strips that can overlap within the
 * search (the same pixels ours reads), wrap-around resolved towards the
 * nominal offset. Reported: median / max error against the true offset,
 * share within 1 px, time per pair. A failing peer is reported, never
 * fatal.
 * usage: bench_montage [SECTIONS]; env CNX_SOURCE: repository root,
 * CNX_PYTHON: python (default /usr/bin/python3). Exit 0 unless we fail.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/montage.h"
#include "cnx/synth.h"

#define SIDE 1024
#define SEED 7
#define PEER_SECTIONS 2
#define SLAB 16

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

/* One pair for part (b). */
typedef struct bpair {
    const cnx_synth_tile *a, *b;
    int64_t true_dx, true_dy;
    double ours_dx, ours_dy;
} bpair;

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
    const int64_t d0x = p->b->nominal_x - p->a->nominal_x;
    const int64_t d0y = p->b->nominal_y - p->a->nominal_y;
    const int64_t W = p->a->width, H = p->a->height;
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

/* Run the peer on the pairs; prints its lines. */
static void run_peer(const bpair *pairs, size_t n, int64_t S)
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
                    p->a->pixels[(s.ay0 + y) * p->a->width + s.ax0 + x];
                db[y * wmax + x] =
                    p->b->pixels[(s.by0 + y) * p->b->width + s.bx0 + x];
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
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' '%s' 2>&1", py, peer, npy, meta);
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

int main(int argc, char **argv)
{
    const int64_t nz = argc > 1 ? strtoll(argv[1], NULL, 10) : 128;
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    cnx_montage_params p;
    uint8_t *canvas = malloc((size_t)SIDE * SIDE);
    bpair *pairs = NULL;
    size_t npairs = 0, cap = 0, total_pairs = 0, total_used = 0;
    double t_solve = 0, t_reg = 0, t_render = 0, t_gen = 0, t0;
    double worst_pos = 0;
    double *med = NULL;
    int64_t rows = 0, cols = 0;

    if (nz < 1 || nz > 1024 || canvas == NULL) {
        fprintf(stderr, "usage: bench_montage [SECTIONS 1..1024]\n");
        return 2;
    }
    med = calloc((size_t)nz, sizeof(*med));
    cnx_synth_params_init(&sp);
    sp.shape[0] = sp.shape[1] = SIDE;
    sp.shape[2] = SLAB;
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
    cnx_montage_params_default(&p);

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
        for (size_t i = 0; i < n; i++) {
            snprintf(ids[i], sizeof(ids[i]), "r%02lld-c%02lld",
                     (long long)st[i].row, (long long)st[i].col);
            mt[i] = (cnx_montage_tile){ids[i],          st[i].nominal_x,
                                       st[i].nominal_y, st[i].width,
                                       st[i].height,    st[i].pixels};
        }
        t0 = now();
        if (cnx_montage_solve(mt, n, &p, &r) != 0)
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
                                            &mt[r.pairs[k].b], &p, &q);
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
            if (!((dr == 0 && dc == 1) || (dr == 1 && dc == 0)))
                continue;
            if (npairs == cap) {
                cap = cap ? 2 * cap : 256;
                pairs = realloc(pairs, cap * sizeof(*pairs));
                if (pairs == NULL)
                    return 1;
            }
            pairs[npairs].a = a;
            pairs[npairs].b = b;
            pairs[npairs].true_dx = b->x - a->x;
            pairs[npairs].true_dy = b->y - a->y;
            npairs++;
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
        printf("ours   : median of per-section median residuals %.4f px; "
               "worst tile position error (mean translation removed) "
               "%.4f px\n",
               m, worst_pos);
    }

    /* (b) pairwise registration on the same pairs */
    {
        double *err = malloc(npairs * sizeof(*err)), tr, within = 0;
        t0 = now();
        for (size_t k = 0; k < npairs; k++) {
            cnx_montage_tile a = {"a",
                                  pairs[k].a->nominal_x,
                                  pairs[k].a->nominal_y,
                                  pairs[k].a->width,
                                  pairs[k].a->height,
                                  pairs[k].a->pixels};
            cnx_montage_tile b = {"b",
                                  pairs[k].b->nominal_x,
                                  pairs[k].b->nominal_y,
                                  pairs[k].b->width,
                                  pairs[k].b->height,
                                  pairs[k].b->pixels};
            cnx_montage_pair q;
            if (cnx_montage_register_pair(&a, &b, &p, &q) != 0)
                return fail("register");
            pairs[k].ours_dx = q.dx;
            pairs[k].ours_dy = q.dy;
        }
        tr = now() - t0;
        for (size_t k = 0; k < npairs; k++) {
            const double ex = pairs[k].ours_dx - (double)pairs[k].true_dx;
            const double ey = pairs[k].ours_dy - (double)pairs[k].true_dy;
            err[k] = sqrt(ex * ex + ey * ey);
            within += err[k] <= 1.0;
        }
        printf("pairs  : %zu edge-neighbour pairs of sections 0..%d, nominal "
               "errors up to 40 px relative, search %lld\n",
               npairs, PEER_SECTIONS - 1, (long long)p.search);
        bench_median(err, (int)npairs);
        printf("ours   : error vs truth median %.3f px, max %.3f px, "
               "%.1f %% within 1 px; %.3f ms/pair\n",
               err[npairs / 2], err[npairs - 1], 100 * within / npairs,
               1e3 * tr / npairs);
        free(err);
        run_peer(pairs, npairs, p.search);
    }
    free(pairs);
    free(med);
    free(canvas);
    cnx_synth_free(synth);
    return 0;
}
