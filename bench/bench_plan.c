/*
 * bench_plan.c - workflow planning time, beside a brute-force reference.
 *
 * Makes an info-only image layer (4096^3 uint8, 128^3 chunks, 8 nm) in a
 * temporary directory and plans workflows/pyramid3.json (ds1 -> ds2 -> ds3,
 * 128^3 tasks) over all of it with cnx_plan_new: reading the info, deriving
 * the grids, widening, cutting tasks and counting every task's
 * dependencies. Figures: median of RUNS plans (ms), tasks per stage, total
 * dependency edges, peak RSS; the time to list every task's inputs with
 * cnx_plan_inputs; and, on 512^3, 1024^3 and 2048^3 regions, the lattice
 * count beside a brute-force count over all task pairs (the O(n^2)
 * reference the unit tests compare with), which must agree.
 * usage: bench_plan [WORKFLOW] ; env CNX_SOURCE: repository root.
 * Exit 0 unless planning fails or the two counts differ.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/precomputed.h"
#include "cnx/workflow.h"

#define RUNS 5
#define SIDE 4096
#define CHUNK 128

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void workflow_path(char *buf, size_t n, const char *arg)
{
    const char *src = getenv("CNX_SOURCE");
    if (arg != NULL) {
        snprintf(buf, n, "%s", arg);
    } else if (src != NULL && src[0] != '\0') {
        snprintf(buf, n, "%s/workflows/pyramid3.json", src);
    } else {
        /* bench/../workflows (CMake passes absolute source paths) */
        const char *f = __FILE__;
        const char *slash = strrchr(f, '/');
        int dlen = slash != NULL ? (int)(slash - f) : 1;
        snprintf(buf, n, "%.*s/../workflows/pyramid3.json", dlen,
                 slash != NULL ? f : ".");
    }
}

static int meets(const cnx_box *a, const cnx_box *b)
{
    for (int i = 0; i < 3; i++) {
        int64_t lo = a->min[i] > b->min[i] ? a->min[i] : b->min[i];
        int64_t hi = a->max[i] < b->max[i] ? a->max[i] : b->max[i];
        if (hi <= lo)
            return 0;
    }
    return 1;
}

/* Every pair (t, s): does t wait for s? The rule, without the lattice. */
static size_t brute_force_edges(const cnx_plan *p)
{
    size_t edges = 0;
    for (size_t t = 0; t < p->ntasks; t++) {
        const cnx_plan_task *task = &p->tasks[t];
        const cnx_wf_stage *st = &p->wf->stages[task->stage];
        const cnx_scale *sc = &p->stages[task->stage].in_scale;
        cnx_box bounds = {
            {sc->voxel_offset[0], sc->voxel_offset[1], sc->voxel_offset[2]},
            {sc->voxel_offset[0] + sc->size[0],
             sc->voxel_offset[1] + sc->size[1],
             sc->voxel_offset[2] + sc->size[2]}};
        cnx_box r =
            cnx_box_grow(&task->roi, p->stages[task->stage].halo, &bounds);
        for (size_t s = 0; s < p->ntasks; s++) {
            size_t src = p->tasks[s].stage;
            int dep = 0, input = 0;
            for (size_t k = 0; k < st->ndeps; k++)
                dep |= (size_t)st->deps[k] == src;
            for (size_t k = 0; k < st->ninputs; k++)
                input |= st->inputs[k].stage == (int)src;
            if (dep && (st->kind == CNX_WF_REDUCE || !input ||
                        meets(&p->tasks[s].write, &r)))
                edges++;
        }
    }
    return edges;
}

static size_t plan_edges(const cnx_plan *p)
{
    size_t edges = 0;
    for (size_t t = 0; t < p->ntasks; t++)
        edges += p->tasks[t].ndeps;
    return edges;
}

int main(int argc, char **argv)
{
    const int64_t size[3] = {SIDE, SIDE, SIDE};
    const int64_t chunk[3] = {CHUNK, CHUNK, CHUNK};
    const double res[3] = {8, 8, 8};
    char dir[] = "/tmp/bench_plan_XXXXXX", data[128], url[160], wpath[1024];
    char cmd[160];
    double times[RUNS], t0, list_ms;
    cnx_workflow *wf = NULL;
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_plan *p = NULL;
    struct rusage ru;
    size_t listed = 0;
    int status = 1;

    if (argc > 2 || (argc == 2 && argv[1][0] == '-')) {
        fprintf(stderr, "usage: bench_plan [WORKFLOW]\n");
        return 2;
    }
    workflow_path(wpath, sizeof(wpath), argc == 2 ? argv[1] : NULL);
    if (mkdtemp(dir) == NULL) {
        perror("bench_plan: mkdtemp");
        return 1;
    }
    snprintf(data, sizeof(data), "file://%s/data", dir);
    snprintf(url, sizeof(url), "%s/image", data);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    if (cnx_workflow_load(&wf, wpath) != 0 ||
        cnx_layer_create(&layer, url, &info) != 0) {
        fprintf(stderr, "bench_plan: %s\n", cnx_error_last()->message);
        goto done;
    }
    cnx_layer_free(layer);

    printf("plan   : %s over %dx%dx%d uint8 (chunks %d^3, 8 nm), "
           "cnx_plan_new, median of %d\n",
           wf->name, SIDE, SIDE, SIDE, CHUNK, RUNS);
    for (int r = 0; r < RUNS; r++) {
        cnx_plan_free(p);
        p = NULL;
        t0 = now_ms();
        if (cnx_plan_new(&p, wf, data, NULL) != 0) {
            fprintf(stderr, "bench_plan: %s\n", cnx_error_last()->message);
            goto done;
        }
        times[r] = now_ms() - t0;
    }
    for (size_t s = 0; s < p->nstages; s++)
        printf("plan   : stage %-4s %6zu tasks of %lldx%lldx%lld (%s -> %s)\n",
               wf->stages[s].name, p->stages[s].count,
               (long long)p->stages[s].task_size[0],
               (long long)p->stages[s].task_size[1],
               (long long)p->stages[s].task_size[2], p->stages[s].in_scale.key,
               p->stages[s].out_scale.key);
    getrusage(RUSAGE_SELF, &ru);
    printf("plan   : %zu tasks, %zu dependency edges, %.1f ms (peak RSS %ld "
           "MiB)\n",
           p->ntasks, plan_edges(p), bench_median(times, RUNS),
           ru.ru_maxrss / 1024);
    t0 = now_ms();
    for (size_t t = 0; t < p->ntasks; t++) {
        size_t *ids = NULL, n = 0;
        if (cnx_plan_inputs(p, t, &ids, &n) != 0) {
            fprintf(stderr, "bench_plan: %s\n", cnx_error_last()->message);
            goto done;
        }
        listed += n;
        free(ids);
    }
    list_ms = now_ms() - t0;
    printf("plan   : listing every task's inputs: %zu ids in %.1f ms\n", listed,
           list_ms);
    if (listed != plan_edges(p)) {
        fprintf(stderr, "bench_plan: listed %zu inputs, counted %zu\n", listed,
                plan_edges(p));
        goto done;
    }

    /* The lattice beside the brute-force reference, on growing regions:
     * the whole plan, then listing every task's inputs by lattice queries,
     * then the same edges by comparing every pair of tasks. */
    for (int64_t side = 512; side <= 2048; side *= 2) {
        cnx_box roi = {{0, 0, 0}, {side, side, side}};
        double lat[RUNS], lst[RUNS], brute;
        size_t want, got = 0;
        for (int r = 0; r < RUNS; r++) {
            cnx_plan_free(p);
            p = NULL;
            t0 = now_ms();
            if (cnx_plan_new(&p, wf, data, &roi) != 0) {
                fprintf(stderr, "bench_plan: %s\n", cnx_error_last()->message);
                goto done;
            }
            lat[r] = now_ms() - t0;
            t0 = now_ms();
            got = 0;
            for (size_t t = 0; t < p->ntasks; t++) {
                size_t *ids = NULL, n = 0;
                if (cnx_plan_inputs(p, t, &ids, &n) != 0) {
                    fprintf(stderr, "bench_plan: %s\n",
                            cnx_error_last()->message);
                    goto done;
                }
                got += n;
                free(ids);
            }
            lst[r] = now_ms() - t0;
        }
        t0 = now_ms();
        want = brute_force_edges(p);
        brute = now_ms() - t0;
        printf("region : %4lld^3: %5zu tasks, %5zu edges: plan %.2f ms; "
               "all inputs by lattice %.3f ms, by brute force %.2f ms "
               "(brute/lattice %.1fx)%s\n",
               (long long)side, p->ntasks, plan_edges(p),
               bench_median(lat, RUNS), bench_median(lst, RUNS), brute,
               brute / bench_median(lst, RUNS),
               want == plan_edges(p) && got == want ? "" : "  COUNTS DIFFER");
        if (want != plan_edges(p) || got != want)
            goto done;
    }
    status = 0;
done:
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_plan: could not remove %s\n", dir);
    return status;
}
