/*
 * bench_align.c - the section-alignment kernel (cnx/align.h) on the
 * distorted sections of a cnx-synth dataset, one thread, scored against
 * the truth; bench/align_bench.sh runs it beside scikit-image
 * (bench/align_peer.py) on the same section pairs.
 *
 * The dataset (256 x 256 x 16, seed 11, classic style, default
 * distortions unless told otherwise) is generated in memory and each
 * section is recorded as cnx-synth records it before cutting tiles:
 * S_z = cnx_synth_distort_section(I_z, U_z) (no montage, no tile gains or
 * noise). Not timed. Then, timed with CLOCK_MONOTONIC on this thread:
 *  - match: cnx_align_match_sections of every adjacent pair (a, b) =
 *    (z - 1, z), --repeat times each; Mpx/s per core = pixels of b /
 *    median seconds over every (pair, repeat). The (z - 2, z) pairs the
 *    solve also needs are matched once, untimed in that figure.
 *  - error of each adjacent pair at its valid nodes g (flag 0) against
 *    the truth: b's point g shows what a shows at p' with
 *    U_a(p') = U_b(g) (U_a inverted by fixed-point iteration with
 *    cnx_synth_section_map), so the true match is p' - g. Reported over
 *    every valid node and over those at least MARGIN px inside the
 *    section (the nodes align_peer.py scores), with median / p90 / p99 /
 *    max and the share of nodes rejected.
 *  - solve: cnx_align_solve of the whole stack (--repeat times, median),
 *    per section; and the solved stack's residual jump between adjacent
 *    sections at every node, |U_b(g + d_b(g)) - U_a(g + d_a(g))| (true
 *    px: how far apart the two sections' aligned pixel g lie in the true
 *    volume; a global motion of the stack does not change it), and its
 *    accuracy as align_check.py measures it: one rigid transform G
 *    (least squares) fitted to q -> T_z(q) = U_z(q + d_z(q)) over the
 *    nodes at least MARGIN px inside of every section, error
 *    |T_z(q) - G(q)| (what stays is drift along z: the pairs' errors add
 *    up from section to section, a random walk).
 *  - render: cnx_align_render of each whole section (--repeat times,
 *    median), per section.
 * With --out DIR the sections are written as DIR/zNNNNN.raw (uint8, x
 * fastest) and DIR/sections.json, the list align_peer.py --sections-from
 * reads. With --json FILE the figures go there too.
 *
 * usage: bench_align [--shape X,Y,Z] [--seed N] [--style classic|hard]
 *          [--resolution X,Y,Z] [--distort default|none] [--params JSON]
 *          [--repeat R] [--out DIR] [--json FILE]
 * Exit 0 unless we fail (1) or the arguments are bad (2).
 */
#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "cnx/align.h"
#include "cnx/align_io.h"
#include "cnx/error.h"
#include "cnx/synth.h"

#define MARGIN 32
#define INVERT_ITERS 60

static const char usage[] =
    "usage: bench_align [--shape X,Y,Z] [--seed N] [--style classic|hard]\n"
    "                   [--resolution X,Y,Z] [--distort default|none]\n"
    "                   [--params JSON] [--repeat R] [--out DIR] [--json "
    "FILE]\n";

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_align: %s: %s\n", what, cnx_error_last()->message);
    return 1;
}

/* Three comma-separated integers in lo..hi. */
static int parse_i3(const char *s, int64_t lo, int64_t hi, int64_t out[3])
{
    char *end;
    for (int k = 0; k < 3; k++) {
        long long v = strtoll(s, &end, 10);
        if (end == s || v < lo || v > hi)
            return -1;
        out[k] = v;
        if (k < 2 && *end != ',')
            return -1;
        s = end + (k < 2);
    }
    return *end == '\0' ? 0 : -1;
}

static int parse_d3(const char *s, double out[3])
{
    char *end;
    for (int k = 0; k < 3; k++) {
        out[k] = strtod(s, &end);
        if (end == s || !(out[k] > 0.0))
            return -1;
        if (k < 2 && *end != ',')
            return -1;
        s = end + (k < 2);
    }
    return *end == '\0' ? 0 : -1;
}

/* p' with U(p') = (tx, ty) by fixed-point iteration (U is a rotation by at
 * most a few degrees plus a small smooth warp: contracting); *res is the
 * distance |U(p') - t| left. */
static void invert(const cnx_synth_section_warp *w, double tx, double ty,
                   double *px, double *py, double *res)
{
    double x = tx, y = ty, ux, uy;
    for (int k = 0; k < INVERT_ITERS; k++) {
        cnx_synth_section_map(w, x, y, &ux, &uy);
        x += tx - ux;
        y += ty - uy;
    }
    cnx_synth_section_map(w, x, y, &ux, &uy);
    *px = x;
    *py = y;
    *res = hypot(tx - ux, ty - uy);
}

/* A growable list of doubles (node errors). */
typedef struct dlist {
    double *v;
    size_t n, cap;
} dlist;

static int dlist_push(dlist *l, double x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 1024;
        double *v = realloc(l->v, cap * sizeof(*v));
        if (v == NULL)
            return -1;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return 0;
}

/* Order statistic at fraction q of a sorted list (nearest rank). */
static double quantile(const dlist *l, double q)
{
    size_t k;
    if (l->n == 0)
        return 0.0;
    k = (size_t)ceil(q * (double)l->n);
    return l->v[k > 0 ? k - 1 : 0];
}

/* One rigid transform (rotation + translation) fitted by least squares
 * to n point pairs (qx, qy) -> (tx, ty); the residual of each pair is
 * appended to err. */
static int rigid_fit_errors(const double *qx, const double *qy,
                            const double *tx, const double *ty, size_t n,
                            dlist *err)
{
    double mqx = 0, mqy = 0, mtx = 0, mty = 0, A = 0, B = 0, c, sn, r;
    assert(n > 0);
    for (size_t i = 0; i < n; i++) {
        mqx += qx[i];
        mqy += qy[i];
        mtx += tx[i];
        mty += ty[i];
    }
    mqx /= (double)n;
    mqy /= (double)n;
    mtx /= (double)n;
    mty /= (double)n;
    for (size_t i = 0; i < n; i++) {
        const double ax = qx[i] - mqx, ay = qy[i] - mqy;
        const double bx = tx[i] - mtx, by = ty[i] - mty;
        A += ax * bx + ay * by;
        B += ax * by - ay * bx;
    }
    r = hypot(A, B);
    c = r > 0 ? A / r : 1.0;
    sn = r > 0 ? B / r : 0.0;
    for (size_t i = 0; i < n; i++) {
        const double ax = qx[i] - mqx, ay = qy[i] - mqy;
        const double gx = mtx + c * ax - sn * ay, gy = mty + sn * ax + c * ay;
        if (dlist_push(err, hypot(tx[i] - gx, ty[i] - gy)) != 0)
            return -1;
    }
    return 0;
}

typedef struct summary {
    size_t n;
    double median, p90, p99, max;
} summary;

static summary summarize(dlist *l)
{
    summary s = {l->n, 0.0, 0.0, 0.0, 0.0};
    if (l->n == 0)
        return s;
    qsort(l->v, l->n, sizeof(double), bench_cmp_double);
    s.median =
        l->n % 2 ? l->v[l->n / 2] : 0.5 * (l->v[l->n / 2 - 1] + l->v[l->n / 2]);
    s.p90 = quantile(l, 0.90);
    s.p99 = quantile(l, 0.99);
    s.max = l->v[l->n - 1];
    return s;
}

static int write_sections(const char *dir, uint8_t *const *sec, int64_t w,
                          int64_t h, int64_t nz)
{
    char path[4096];
    FILE *f;
    int ok = 1;
    snprintf(path, sizeof(path), "%s/sections.json", dir);
    f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "bench_align: cannot write %s\n", path);
        return 1;
    }
    fprintf(f, "{\"sections\": [");
    for (int64_t z = 0; z < nz; z++) {
        char name[64];
        FILE *r;
        snprintf(name, sizeof(name), "z%05" PRId64 ".raw", z);
        fprintf(f,
                "%s\n {\"z\": %" PRId64
                ", \"file\": \"%s\", \"width\": %" PRId64
                ", \"height\": %" PRId64 "}",
                z ? "," : "", z, name, w, h);
        snprintf(path, sizeof(path), "%s/%s", dir, name);
        r = fopen(path, "wb");
        if (r == NULL) {
            ok = 0;
            break;
        }
        ok &= fwrite(sec[z], 1, (size_t)(w * h), r) == (size_t)(w * h);
        ok &= fclose(r) == 0;
    }
    fprintf(f, "\n]}\n");
    ok &= fclose(f) == 0;
    if (!ok)
        fprintf(stderr, "bench_align: cannot write the sections to %s\n", dir);
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    cnx_synth_params sp;
    cnx_synth *synth = NULL;
    cnx_align_params p;
    const char *params = NULL, *out_dir = NULL, *json_path = NULL;
    int repeat = 3, rc = 1;
    int64_t W, H, NZ;
    cnx_synth_section_warp *warp = NULL;
    uint8_t **sec = NULL;
    cnx_align_image *img = NULL;
    cnx_align_stats *stats = NULL;
    cnx_align_match *matches = NULL;
    size_t nmatches = 0, zeros = 0, rejected = 0, rejected_in = 0, nodes_in = 0;
    cnx_align_solution sol;
    cnx_align_grid grid;
    dlist t_match = {0}, t_solve = {0}, t_render = {0}, err_all = {0},
          err_in = {0}, jump = {0}, jump_in = {0}, acc = {0};
    double *fq = NULL; /* rigid fit: qx, qy, tx, ty, 4 x nodes x sections */
    size_t nfit = 0;
    double inv_res = 0.0, t0, t_gen, bias[2] = {0.0, 0.0};
    uint8_t *rendered = NULL;

    memset(&sol, 0, sizeof(sol));
    cnx_synth_params_init(&sp);
    sp.shape[0] = 256;
    sp.shape[1] = 256;
    sp.shape[2] = 16;
    sp.seed = 11;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (strcmp(argv[i], "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (v == NULL) {
            fputs(usage, stderr);
            return 2;
        }
        i++;
        if (strcmp(argv[i - 1], "--shape") == 0) {
            if (parse_i3(v, 1, CNX_SYNTH_MAX_SIDE, sp.shape) != 0) {
                fputs(usage, stderr);
                return 2;
            }
        } else if (strcmp(argv[i - 1], "--seed") == 0) {
            unsigned long long s = strtoull(v, &end, 10);
            if (end == v || *end != '\0') {
                fputs(usage, stderr);
                return 2;
            }
            sp.seed = s;
        } else if (strcmp(argv[i - 1], "--style") == 0) {
            if (cnx_synth_style_parse(v, &sp.style) != 0) {
                fputs(usage, stderr);
                return 2;
            }
        } else if (strcmp(argv[i - 1], "--distort") == 0) {
            if (cnx_synth_distort_parse(v, &sp.distort) != 0) {
                fputs(usage, stderr);
                return 2;
            }
        } else if (strcmp(argv[i - 1], "--resolution") == 0) {
            if (parse_d3(v, sp.resolution) != 0) {
                fputs(usage, stderr);
                return 2;
            }
        } else if (strcmp(argv[i - 1], "--repeat") == 0) {
            long r = strtol(v, &end, 10);
            if (end == v || *end != '\0' || r < 1 || r > 1000) {
                fputs(usage, stderr);
                return 2;
            }
            repeat = (int)r;
        } else if (strcmp(argv[i - 1], "--params") == 0) {
            params = v;
        } else if (strcmp(argv[i - 1], "--out") == 0) {
            out_dir = v;
        } else if (strcmp(argv[i - 1], "--json") == 0) {
            json_path = v;
        } else {
            fputs(usage, stderr);
            return 2;
        }
    }
    if (sp.shape[2] < 2) {
        fprintf(stderr, "bench_align: need at least 2 sections\n");
        return 2;
    }
    if (cnx_align_params_parse(params, &p) != 0)
        return fail("--params");
    W = sp.shape[0];
    H = sp.shape[1];
    NZ = sp.shape[2];

    /* The recorded sections S_z (not timed). */
    t0 = now();
    if (cnx_synth_generate(&synth, &sp) != 0)
        return fail("cnx_synth_generate");
    warp = calloc((size_t)NZ, sizeof(*warp));
    sec = calloc((size_t)NZ, sizeof(*sec));
    img = calloc((size_t)NZ, sizeof(*img));
    stats = calloc((size_t)NZ, sizeof(*stats));
    matches = calloc((size_t)(2 * NZ), sizeof(*matches));
    rendered = malloc((size_t)(W * H));
    if (warp == NULL || sec == NULL || img == NULL || stats == NULL ||
        matches == NULL || rendered == NULL) {
        fprintf(stderr, "bench_align: out of memory\n");
        goto done;
    }
    for (int64_t z = 0; z < NZ; z++) {
        const uint8_t *in =
            (const uint8_t *)synth->image->data + (size_t)z * (size_t)(W * H);
        sec[z] = malloc((size_t)(W * H));
        if (sec[z] == NULL) {
            fprintf(stderr, "bench_align: out of memory\n");
            goto done;
        }
        if (cnx_synth_section_warp_draw(&warp[z], &sp, z) != 0 ||
            cnx_synth_distort_section(sec[z], in, &warp[z]) != 0) {
            fail("section");
            goto done;
        }
        for (int64_t i = 0; i < W * H; i++)
            zeros += sec[z][i] == 0;
        img[z] = (cnx_align_image){0, 0, W, H, sec[z]};
        stats[z] = cnx_align_stats_of(&img[z]);
    }
    t_gen = now() - t0;
    cnx_synth_free(synth);
    synth = NULL;
    if (out_dir != NULL && write_sections(out_dir, sec, W, H, NZ) != 0)
        goto done;
    printf("input  : cnx-synth %" PRId64 "x%" PRId64 "x%" PRId64
           " seed %" PRIu64 " %s %g,%g,%g nm, distort %s; sections S_z built "
           "in %.1f s (untimed); %.4f %% of pixels are 0 (no data)\n",
           W, H, NZ, sp.seed, cnx_synth_style_name(sp.style), sp.resolution[0],
           sp.resolution[1], sp.resolution[2],
           cnx_synth_distort_name(sp.distort), t_gen,
           100.0 * (double)zeros / (double)(W * H * NZ));
    printf("params : stride %" PRId64 " patch %" PRId64 " search %" PRId64
           " patch_search %" PRId64 " highpass %" PRId64
           " min_peak_ratio %g; repeat %d\n",
           p.stride, p.patch, p.search, p.patch_search, p.highpass,
           p.min_peak_ratio, repeat);

    /* Match: adjacent pairs timed, (z - 2, z) once for the solve. */
    grid = cnx_align_grid_of(0, 0, W, H, &p);
    for (int64_t z = 1; z < NZ; z++) {
        for (int64_t d = 1; d <= 2 && z - d >= 0; d++) {
            cnx_align_match *m = &matches[nmatches];
            for (int r = 0; r < (d == 1 ? repeat : 1); r++) {
                cnx_align_match_free(m);
                t0 = now();
                if (cnx_align_match_sections(&img[z - d], &img[z], &p, m) !=
                    0) {
                    fail("cnx_align_match_sections");
                    goto done;
                }
                t0 = now() - t0;
                if (d == 1 && dlist_push(&t_match, t0) != 0)
                    goto oom;
            }
            m->za = z - d;
            m->zb = z;
            nmatches++;
            if (d != 1)
                continue;
            /* Error of the adjacent pair at its nodes. */
            for (int64_t j = 0; j < grid.ny; j++) {
                for (int64_t i = 0; i < grid.nx; i++) {
                    const size_t n = (size_t)(j * grid.nx + i);
                    const double gx = grid.x0 + (double)i * grid.step;
                    const double gy = grid.y0 + (double)j * grid.step;
                    const int inside =
                        gx >= MARGIN && gx <= (double)(W - 1 - MARGIN) &&
                        gy >= MARGIN && gy <= (double)(H - 1 - MARGIN);
                    double tx, ty, px, py, res, e;
                    nodes_in += inside;
                    if (m->flag[n] != CNX_ALIGN_NODE_OK) {
                        rejected++;
                        rejected_in += inside;
                        continue;
                    }
                    cnx_synth_section_map(&warp[z], gx, gy, &tx, &ty);
                    invert(&warp[z - 1], tx, ty, &px, &py, &res);
                    if (res > inv_res)
                        inv_res = res;
                    e = hypot(m->dx[n] - (px - gx), m->dy[n] - (py - gy));
                    bias[0] += m->dx[n] - (px - gx);
                    bias[1] += m->dy[n] - (py - gy);
                    if (dlist_push(&err_all, e) != 0 ||
                        (inside && dlist_push(&err_in, e) != 0))
                        goto oom;
                }
            }
        }
    }

    /* Solve the stack. */
    for (int r = 0; r < repeat; r++) {
        cnx_align_solution_free(&sol);
        t0 = now();
        if (cnx_align_solve(&grid, 0, NZ, matches, nmatches, stats, &p, &sol) !=
            0) {
            fail("cnx_align_solve");
            goto done;
        }
        if (dlist_push(&t_solve, (now() - t0) / (double)NZ) != 0)
            goto oom;
    }
    /* Residual jump of the solved stack between adjacent sections. */
    for (int64_t z = 1; z < NZ; z++) {
        const cnx_align_section *sa = &sol.sections[z - 1],
                                *sb = &sol.sections[z];
        for (int64_t j = 0; j < grid.ny; j++) {
            for (int64_t i = 0; i < grid.nx; i++) {
                const size_t n = (size_t)(j * grid.nx + i);
                const double gx = grid.x0 + (double)i * grid.step;
                const double gy = grid.y0 + (double)j * grid.step;
                const int inside =
                    gx >= MARGIN && gx <= (double)(W - 1 - MARGIN) &&
                    gy >= MARGIN && gy <= (double)(H - 1 - MARGIN);
                double ax, ay, bx, by, e;
                cnx_synth_section_map(&warp[z - 1], gx + sa->dx[n],
                                      gy + sa->dy[n], &ax, &ay);
                cnx_synth_section_map(&warp[z], gx + sb->dx[n], gy + sb->dy[n],
                                      &bx, &by);
                e = hypot(bx - ax, by - ay);
                if (dlist_push(&jump, e) != 0 ||
                    (inside && dlist_push(&jump_in, e) != 0))
                    goto oom;
            }
        }
    }

    /* Accuracy of the solved stack after one global rigid transform. */
    fq = malloc(4 * (size_t)(NZ * grid.nx * grid.ny) * sizeof(double));
    if (fq == NULL)
        goto oom;
    for (int64_t z = 0; z < NZ; z++) {
        const cnx_align_section *sz = &sol.sections[z];
        const size_t cap = (size_t)(NZ * grid.nx * grid.ny);
        if (sz->status != CNX_ALIGN_SECTION_OK)
            continue;
        for (int64_t j = 0; j < grid.ny; j++) {
            for (int64_t i = 0; i < grid.nx; i++) {
                const size_t n = (size_t)(j * grid.nx + i);
                const double gx = grid.x0 + (double)i * grid.step;
                const double gy = grid.y0 + (double)j * grid.step;
                const double px = gx + sz->dx[n], py = gy + sz->dy[n];
                if (!(px >= MARGIN && px <= (double)(W - 1 - MARGIN) &&
                      py >= MARGIN && py <= (double)(H - 1 - MARGIN)))
                    continue;
                fq[nfit] = gx;
                fq[cap + nfit] = gy;
                cnx_synth_section_map(&warp[z], px, py, &fq[2 * cap + nfit],
                                      &fq[3 * cap + nfit]);
                nfit++;
            }
        }
        if (z == NZ - 1 && nfit > 0) {
            if (rigid_fit_errors(fq, fq + cap, fq + 2 * cap, fq + 3 * cap, nfit,
                                 &acc) != 0)
                goto oom;
        }
    }

    /* Render every section. */
    for (int64_t z = 0; z < NZ; z++) {
        const int64_t box[4] = {0, 0, W, H};
        for (int r = 0; r < repeat; r++) {
            t0 = now();
            if (cnx_align_render(&img[z], &sol.grid, sol.sections[z].dx,
                                 sol.sections[z].dy, sol.sections[z].gain,
                                 sol.sections[z].offset, box, rendered) != 0) {
                fail("cnx_align_render");
                goto done;
            }
            if (dlist_push(&t_render, now() - t0) != 0)
                goto oom;
        }
    }

    {
        const double mpx = (double)(W * H) / 1e6;
        const summary tm = summarize(&t_match), ts = summarize(&t_solve),
                      tr = summarize(&t_render), ea = summarize(&err_all),
                      ei = summarize(&err_in), ej = summarize(&jump),
                      eji = summarize(&jump_in), ac = summarize(&acc);
        const size_t pairs = (size_t)(NZ - 1);
        const size_t nodes = pairs * (size_t)(grid.nx * grid.ny);
        printf("ours   : match %.2f Mpx/s per core (%.1f ms per pair, median "
               "of %zu pairs x %d; p90 %.1f ms)\n",
               mpx / tm.median, 1e3 * tm.median, pairs, repeat, 1e3 * tm.p90);
        printf("ours   : error vs truth, %zu valid nodes of %zu (%.1f %% "
               "rejected): median %.3f px, p90 %.3f, p99 %.3f, max %.3f\n",
               ea.n, nodes, 100.0 * (double)rejected / (double)nodes, ea.median,
               ea.p90, ea.p99, ea.max);
        printf("ours   : mean signed error (bias) of the valid nodes: "
               "(%+.4f, %+.4f) px\n",
               ea.n ? bias[0] / (double)ea.n : 0.0,
               ea.n ? bias[1] / (double)ea.n : 0.0);
        printf("ours   : error vs truth, %zu valid nodes of %zu >= %d px "
               "inside (%zu rejected): median %.3f px, p90 %.3f, p99 %.3f, "
               "max %.3f\n",
               ei.n, nodes_in, MARGIN, rejected_in, ei.median, ei.p90, ei.p99,
               ei.max);
        printf("ours   : solve %.2f ms per section (stack of %" PRId64
               ", %zu matches, median of %d); render %.2f ms per section "
               "(%.1f Mpx/s)\n",
               1e3 * ts.median, NZ, nmatches, repeat, 1e3 * tr.median,
               mpx / tr.median);
        printf("ours   : residual jump between adjacent solved sections "
               "(true px), every node: median %.3f, p90 %.3f, max %.3f; "
               ">= %d px inside: median %.3f, p90 %.3f, max %.3f\n",
               ej.median, ej.p90, ej.max, MARGIN, eji.median, eji.p90, eji.max);
        printf("ours   : solved stack vs truth after one rigid G (%zu nodes "
               ">= %d px inside): median %.3f px, p90 %.3f, max %.3f\n",
               ac.n, MARGIN, ac.median, ac.p90, ac.max);
        printf("truth  : U_a inverted to %.1e px\n", inv_res);
        if (json_path != NULL) {
            FILE *f = fopen(json_path, "w");
            int ok;
            if (f == NULL) {
                fprintf(stderr, "bench_align: cannot write %s\n", json_path);
                goto done;
            }
            fprintf(f,
                    "{\"section\": [%" PRId64 ", %" PRId64 "], \"sections\": "
                    "%" PRId64 ", \"seed\": %" PRIu64 ", \"pairs\": %zu,\n"
                    " \"match_seconds_median\": %.9f, \"match_seconds_p90\": "
                    "%.9f, \"mpx_per_s\": %.6f,\n"
                    " \"nodes\": %zu, \"valid\": %zu, \"nodes_inside\": %zu, "
                    "\"valid_inside\": %zu, \"margin\": %d,\n"
                    " \"error_median\": %.6f, \"error_p90\": %.6f, "
                    "\"error_p99\": %.6f, \"error_max\": %.6f,\n"
                    " \"inside_error_median\": %.6f, \"inside_error_p90\": "
                    "%.6f, \"inside_error_p99\": %.6f, \"inside_error_max\": "
                    "%.6f,\n"
                    " \"solve_seconds_per_section\": %.9f, "
                    "\"render_seconds_per_section\": %.9f,\n"
                    " \"jump_median\": %.6f, \"jump_p90\": %.6f, "
                    "\"jump_max\": %.6f, \"inside_jump_median\": %.6f, "
                    "\"inside_jump_p90\": %.6f, \"inside_jump_max\": %.6f,\n"
                    " \"accuracy_median\": %.6f, \"accuracy_p90\": %.6f, "
                    "\"accuracy_max\": %.6f,\n"
                    " \"truth_inversion_residual\": %.3e}\n",
                    W, H, NZ, sp.seed, pairs, tm.median, tm.p90,
                    mpx / tm.median, nodes, ea.n, nodes_in, ei.n, MARGIN,
                    ea.median, ea.p90, ea.p99, ea.max, ei.median, ei.p90,
                    ei.p99, ei.max, ts.median, tr.median, ej.median, ej.p90,
                    ej.max, eji.median, eji.p90, eji.max, ac.median, ac.p90,
                    ac.max, inv_res);
            ok = fclose(f) == 0;
            if (!ok) {
                fprintf(stderr, "bench_align: cannot write %s\n", json_path);
                goto done;
            }
        }
    }
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "bench_align: out of memory\n");
done:
    cnx_synth_free(synth);
    cnx_align_solution_free(&sol);
    for (int64_t k = 0; matches != NULL && k < 2 * NZ; k++)
        cnx_align_match_free(&matches[k]); /* zeroed ones too */
    for (int64_t z = 0; sec != NULL && z < NZ; z++)
        free(sec[z]);
    free(sec);
    free(img);
    free(stats);
    free(warp);
    free(matches);
    free(rendered);
    free(t_match.v);
    free(t_solve.v);
    free(t_render.v);
    free(err_all.v);
    free(err_in.v);
    free(jump.v);
    free(jump_in.v);
    free(acc.v);
    free(fq);
    return rc;
}
