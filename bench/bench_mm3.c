/*
 * bench_mm3.c - the plan of one cubic millimetre at 8 x 8 x 30 nm, computed
 * by the planner, with the costs this build measures.
 *
 *   build/bench/bench_mm3 [WORKFLOW [COMPLETIONS]]
 *
 * WORKFLOW (default bench/mm3_segmentation.json: workflows/segmentation.json
 * with map tasks of 512^3) is planned with cnx_plan_new over an info-only
 * uint8 layer "boundary" of 125000 x 125000 x 33334 voxels (1 mm^3 at
 * 8 x 8 x 30 nm), chunks of 128^3, in a temporary directory: no data.
 * Beside it, the same workflow with every map task one chunk is planned with
 * a cap of one task, so the planner's refusal gives the task counts of
 * today's default (nothing is cut).
 *
 * Measured in the same run, then projected onto the plan:
 *  - kernels: a 256^3 cnx-synth volume (hard style, seed 7, 8 x 8 x 30 nm,
 *    cnx_synth_generate) cut into 8 chunks of 128^3; per chunk, CPU time
 *    (CLOCK_PROCESS_CPUTIME_ID) of what each map stage runs per chunk:
 *    segment cnx_segjoin_chunk (the chunk grown by the derived halo),
 *    segment-relabel cnx_segjoin_relabel with the chunk's mapping, mesh
 *    cnx_mesh_block_run + cnx_mesh_simplify (the stage's planes and
 *    parameters) + cnx_mesh_legacy_encode; and the join (cnx_segjoin_run
 *    over the 8 face records). Kernels only: reading, decoding, encoding
 *    and writing the chunks, hashing and signing are not counted. Costs
 *    are per chunk, so a stage's core-hours are its region's chunks times
 *    that figure.
 *  - reduce memory: the join holds every chunk's face record; bytes per
 *    record (mean of the 8) and bytes per fragment of the join's result
 *    (glibc mallinfo2, allocated bytes while the result is held, over its
 *    fragments; the result's arrays under another allocator) give the
 *    single-reduce method's projected peak. The transient working set of
 *    the join is not counted. mesh-manifest holds a reference per mesh
 *    fragment of every chunk: meshes per chunk (measured) times
 *    MANIFEST_REF_BYTES. reduce_levels() gives the rows of a one-task
 *    reduce. A workflow with a segment-join-block stage (the join as a
 *    tree, bench/mm3_segmentation-tree.json) is projected as shipped:
 *    each block holds its chunks' face records and those beside it and
 *    its summary (bytes per fragment of a summary measured on the 8
 *    chunks); the top holds every summary and the result.
 *  - controller and ledger: bench_controller COMPLETIONS (default 2000),
 *    run as a child from this program's directory: its median
 *    completions/s (the rebuild fold: released + started + manifest +
 *    succeeded per task) and its ledger's bytes and rows per task.
 *  - messages per task: the task on cnx.tasks.<worker> and its released
 *    control message (controller), started, the signed manifest on
 *    cnx.lineage and succeeded (worker): 5; the controller ingests 4.
 *  - map task memory: the input over the task grown by its halo, held
 *    whole (the stages read their task's box once and cut chunks from
 *    it), plus one output chunk; a formula, not a measurement.
 *
 * Targets (printed as met / missed): controller work per mm^3 under one
 * hour (when missed: the task size that would meet it at the measured
 * rate); no task above 4 GiB. Exit 0 unless something fails to run.
 */
#define _GNU_SOURCE /* mallinfo2 */
#include <inttypes.h>
#include <libgen.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/mesh.h"
#include "cnx/precomputed.h"
#include "cnx/segjoin.h"
#include "cnx/segment.h"
#include "cnx/segment_io.h"
#include "cnx/synth.h"
#include "cnx/volume.h"
#include "cnx/workflow.h"

#define CHUNK 128
#define SYN 256 /* synthetic volume edge: 2 x 2 x 2 chunks */
#define NSYN ((SYN / CHUNK) * (SYN / CHUNK) * (SYN / CHUNK))
#define MESSAGES_PER_TASK 5
#define INGESTED_PER_TASK 4
#define TARGET_CONTROLLER_H 1.0
#define TARGET_TASK_GIB 4.0
#define GIB (1024.0 * 1024.0 * 1024.0)
/* What mesh-manifest holds per mesh fragment of every chunk's index while
 * it sorts them: mesh_stage.c's frag_ref (id 8 B, box 48 B, digest 72 B),
 * restated here, not measured. */
#define MANIFEST_REF_BYTES 128.0

/* What the kernels cost, measured on the synthetic chunks. */
typedef struct costs {
    double segment_s, relabel_s, mesh_s, join_s; /* CPU s per chunk */
    double face_bytes; /* mean face record per chunk */
    double frags_per_chunk;
    double frag_bytes;       /* join result bytes per fragment */
    double summary_bytes;    /* level-1 block summary bytes per fragment */
    double meshes_per_chunk; /* mesh fragments (labels) per chunk */
    const char *frag_source; /* how frag_bytes was measured */
    int64_t halo;            /* segment's derived halo */
} costs;

/* The controller's figures, from bench_controller. */
typedef struct ctl {
    double rate;       /* completions per second */
    double bytes_task; /* ledger bytes per task */
    double rows_task;  /* ledger rows per task */
} ctl;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void fail(const char *what)
{
    fprintf(stderr, "bench_mm3: %s: %s\n", what, cnx_error_last()->message);
    exit(1);
}

static void default_workflow(char *buf, size_t n)
{
    const char *src = getenv("CNX_SOURCE");
    if (src != NULL && src[0] != '\0') {
        snprintf(buf, n, "%s/bench/mm3_segmentation.json", src);
    } else { /* CMake passes absolute source paths */
        const char *f = __FILE__;
        const char *slash = strrchr(f, '/');
        int dlen = slash != NULL ? (int)(slash - f) : 1;
        snprintf(buf, n, "%.*s/mm3_segmentation.json", dlen,
                 slash != NULL ? f : ".");
    }
}

/* ---- the kernels ----------------------------------------------------- */

static void measure_kernels(costs *c)
{
    cnx_synth_params sp;
    cnx_synth *syn = NULL;
    cnx_segment_params p;
    cnx_box all = {{0, 0, 0}, {SYN, SYN, SYN}}, chunks[NSYN];
    uint64_t *labels[NSYN];
    uint8_t *faces[NSYN];
    size_t face_len[NSYN];
    cnx_segjoin_input in[NSYN];
    cnx_segjoin j;
    double t0, face_total = 0;
    size_t k = 0, held0;
    int rc;

    cnx_synth_params_init(&sp);
    sp.style = CNX_SYNTH_STYLE_HARD;
    sp.seed = 7;
    sp.resolution[0] = 8;
    sp.resolution[1] = 8;
    sp.resolution[2] = 30;
    for (int i = 0; i < 3; i++)
        sp.shape[i] = SYN;
    if (cnx_synth_generate(&syn, &sp) != 0)
        fail("cnx_synth_generate");
    if (cnx_segment_params_at(&p, "{}", sp.resolution) != 0)
        fail("segment parameters");
    c->halo = cnx_segment_halo(&p);
    for (int64_t z = 0; z < SYN; z += CHUNK)
        for (int64_t y = 0; y < SYN; y += CHUNK)
            for (int64_t x = 0; x < SYN; x += CHUNK, k++)
                chunks[k] =
                    (cnx_box){{x, y, z}, {x + CHUNK, y + CHUNK, z + CHUNK}};

    /* segment: per chunk, its input grown by the halo */
    t0 = cpu_s();
    for (k = 0; k < NSYN; k++) {
        cnx_box bbox = cnx_box_grow(&chunks[k], c->halo, &all);
        cnx_volume *part = NULL;
        labels[k] = malloc(CHUNK * CHUNK * CHUNK * sizeof(uint64_t));
        if (labels[k] == NULL ||
            cnx_volume_crop(&part, syn->boundary, &bbox) != 0)
            fail("segment input");
        rc = cnx_segjoin_chunk(part->data, CNX_DT_UINT8, &bbox, &chunks[k], &p,
                               labels[k], &faces[k], &face_len[k]);
        cnx_volume_free(part);
        if (rc != 0)
            fail("cnx_segjoin_chunk");
        face_total += (double)face_len[k];
        in[k] = (cnx_segjoin_input){faces[k], face_len[k], "synthetic"};
    }
    c->segment_s = (cpu_s() - t0) / NSYN;
    c->face_bytes = face_total / NSYN;

    /* the join, and what its result holds */
    held0 = mallinfo2().uordblks;
    t0 = cpu_s();
    if (cnx_segjoin_run(in, NSYN, &p, &j) != 0)
        fail("cnx_segjoin_run");
    c->join_s = (cpu_s() - t0) / NSYN;
    c->frags_per_chunk = (double)j.first[j.nchunks] / NSYN;
    size_t nfrag = j.first[j.nchunks] ? j.first[j.nchunks] : 1;
    size_t held = mallinfo2().uordblks - held0;
    c->frag_source = "mallinfo2";
    if (mallinfo2().uordblks == 0 || held == 0) {
        /* another allocator (a sanitizer's): the result's arrays */
        held = j.nchunks * (sizeof(*j.chunks) + sizeof(*j.first)) +
               sizeof(*j.first) + nfrag * (sizeof(*j.frag) + sizeof(*j.seg)) +
               j.nsegs * (sizeof(*j.seg_ids) + sizeof(*j.seg_size));
        c->frag_source = "the result's arrays; mallinfo2 gave 0";
    }
    c->frag_bytes = (double)held / (double)nfrag;
    {
        /* a level-1 block summary over the 8 chunks (the region's 2x2x2
         * middle block would leave everything open; this one leaves
         * nothing open, so it is the lower bound of a summary's bytes:
         * fragments, their segments and the voxel counts) */
        cnx_box blk = j.chunks[0], reg;
        uint8_t *sum = NULL;
        size_t slen = 0;
        for (k = 1; k < NSYN; k++)
            blk = cnx_box_hull(&blk, &j.chunks[k]);
        reg = blk;
        if (cnx_segjoin_block(in, NSYN, &blk, &reg, &p, &sum, &slen) != 0)
            fail("cnx_segjoin_block");
        c->summary_bytes = (double)slen / (double)nfrag;
        free(sum);
    }

    /* relabel: each chunk with its mapping (encoded untimed) */
    double relabel = 0;
    for (k = 0; k < NSYN; k++) {
        uint8_t *map = NULL;
        size_t len = 0;
        if (cnx_segjoin_mapping_encode(&j, k, &map, &len) != 0)
            fail("cnx_segjoin_mapping_encode");
        t0 = cpu_s();
        rc = cnx_segjoin_relabel(labels[k], CHUNK * CHUNK * CHUNK, map, len);
        relabel += cpu_s() - t0;
        free(map);
        if (rc != 0)
            fail("cnx_segjoin_relabel");
    }
    c->relabel_s = relabel / NSYN;
    cnx_segjoin_free(&j);

    /* mesh: the relabelled volume, each chunk and one voxel beyond its high
     * faces, as mesh_stage.c cuts it; simplify 0.25 (the workflow's) */
    cnx_volume *seg = NULL;
    if (cnx_volume_new(&seg, CNX_DT_UINT64, &all, 1) != 0)
        fail("mesh input");
    for (k = 0; k < NSYN; k++) {
        uint64_t *d = seg->data;
        for (int64_t z = 0; z < CHUNK; z++)
            for (int64_t y = 0; y < CHUNK; y++)
                memcpy(
                    &d[((chunks[k].min[2] + z) * SYN + chunks[k].min[1] + y) *
                           SYN +
                       chunks[k].min[0]],
                    &labels[k][(z * CHUNK + y) * CHUNK], CHUNK * 8);
    }
    c->meshes_per_chunk = 0;
    t0 = cpu_s();
    for (k = 0; k < NSYN; k++) {
        cnx_mesh_simplify_opts o = {0.25, INFINITY, 0, {0}, {0}};
        cnx_mesh_block b;
        cnx_mesh_set set;
        cnx_box rbox = chunks[k];
        cnx_volume *part = NULL;
        memset(&b, 0, sizeof(b));
        for (int i = 0; i < 3; i++) {
            rbox.max[i] = rbox.max[i] + 1 < SYN ? rbox.max[i] + 1 : SYN;
            b.cells.min[i] = chunks[k].min[i] - (chunks[k].min[i] == 0);
            b.cells.max[i] = chunks[k].max[i];
            b.origin[i] = rbox.min[i];
            b.size[i] = rbox.max[i] - rbox.min[i];
            b.resolution[i] = sp.resolution[i];
        }
        cnx_mesh_block_planes(&b, &o);
        for (int i = 0; i < 3; i++)
            if (chunks[k].min[i] == 0)
                o.plane_at[2 * i] = 0.5 * sp.resolution[i];
        if (cnx_volume_crop(&part, seg, &rbox) != 0)
            fail("mesh crop");
        b.labels = part->data;
        if (cnx_mesh_block_run(&b, &set) != 0)
            fail("cnx_mesh_block_run");
        c->meshes_per_chunk += (double)set.n / NSYN;
        for (size_t m = 0; m < set.n; m++) {
            uint8_t *bytes = NULL;
            size_t len = 0;
            if (cnx_mesh_simplify(&set.meshes[m], &o) != 0 ||
                cnx_mesh_legacy_encode(&set.meshes[m], &bytes, &len) != 0)
                fail("mesh simplify / encode");
            free(bytes);
        }
        cnx_mesh_set_free(&set);
        cnx_volume_free(part);
    }
    c->mesh_s = (cpu_s() - t0) / NSYN;
    cnx_volume_free(seg);
    for (k = 0; k < NSYN; k++) {
        free(labels[k]);
        free(faces[k]);
    }
    cnx_synth_free(syn);
}

/* ---- the controller -------------------------------------------------- */

static void measure_controller(ctl *r, const char *argv0, long n)
{
    char self[4096], cmd[4400], line[4096];
    FILE *f;
    snprintf(self, sizeof(self), "%s", argv0);
    snprintf(cmd, sizeof(cmd), "'%s/bench_controller' %ld 2>/dev/null",
             dirname(self), n);
    memset(r, 0, sizeof(*r));
    f = popen(cmd, "r");
    if (f == NULL) {
        perror("bench_mm3: bench_controller");
        exit(1);
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *m = strstr(line, "ingest : median of");
        const char *l = strstr(line, "ledger : ");
        double s, rate;
        if (m != NULL && sscanf(strchr(m, ':') + 1,
                                " median of %*d: %lf s, "
                                "%lf completions/s",
                                &s, &rate) == 2)
            r->rate = rate;
        if (l != NULL && strstr(line, "per task") != NULL) {
            const char *tail = strrchr(line, ':');
            sscanf(tail + 1, " %lf bytes and %lf rows", &r->bytes_task,
                   &r->rows_task);
        }
    }
    if (pclose(f) != 0 || r->rate <= 0 || r->bytes_task <= 0) {
        fprintf(stderr, "bench_mm3: %s: no rate or ledger figure\n", cmd);
        exit(1);
    }
}

/* ---- reduces --------------------------------------------------------- */

/* One level of a reduce: tasks, the items each joins, its peak memory. */
typedef struct reduce_level {
    int level;
    double tasks;
    double fan_in;
    double peak_bytes;
} reduce_level;

/*
 * The levels of a reduce over items leaves (chunks), each item_bytes held
 * while it is joined, and result_bytes for the whole result: rows into out
 * (at most cap), their number. The single-reduce method of today: one
 * level, one task holding every item and the whole result.
 */
static int reduce_levels(double items, double item_bytes, double result_bytes,
                         reduce_level *out, int cap)
{
    if (cap < 1)
        return 0;
    out[0] = (reduce_level){1, 1, items, items * item_bytes + result_bytes};
    return 1;
}

/* ---- the plan -------------------------------------------------------- */

static const char *human(double v, char *buf, size_t n)
{
    const char *unit[] = {"", "k", "M", "G", "T", "P"};
    int u = 0;
    while (v >= 1000 && u < 5) {
        v /= 1000;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f%s", v, unit[u]);
    return buf;
}

static double box_voxels_d(const cnx_box *b)
{
    return (double)(b->max[0] - b->min[0]) * (double)(b->max[1] - b->min[1]) *
           (double)(b->max[2] - b->min[2]);
}

/* The chunks of a stage's region on its input grid (partial ones count). */
static double region_chunks(const cnx_plan_stage *ps)
{
    double n = 1;
    for (int i = 0; i < 3; i++) {
        int64_t c = ps->in_scale.chunk[i], o = ps->in_scale.voxel_offset[i];
        int64_t lo = (ps->region.min[i] - o) / c;
        int64_t hi = (ps->region.max[i] - o + c - 1) / c;
        n *= (double)(hi - lo);
    }
    return n;
}

/* What a map task holds: its inputs of chunks over the task grown by the
 * halo (clipped to the input scale), plus one output chunk. */
static double map_task_bytes(const cnx_plan_stage *ps)
{
    double bytes = 0, grown = 1;
    for (int i = 0; i < 3; i++) {
        int64_t g = ps->task_size[i] + 2 * ps->halo;
        grown *= (double)(g < ps->in_scale.size[i] ? g : ps->in_scale.size[i]);
    }
    for (size_t i = 0; i < ps->ninputs; i++)
        if (ps->inputs[i].objects[0] == '\0' && !ps->inputs[i].tileset)
            bytes += grown * (double)cnx_dtype_size(ps->inputs[i].dtype) *
                     (double)ps->inputs[i].channels;
    return bytes + (double)ps->out_scale.chunk[0] * ps->out_scale.chunk[1] *
                       ps->out_scale.chunk[2] *
                       (double)cnx_dtype_size(ps->out_dtype) *
                       (double)ps->out_channels;
}

int main(int argc, char **argv)
{
    const int64_t size[3] = {125000, 125000, 33334};
    const int64_t chunk[3] = {CHUNK, CHUNK, CHUNK};
    const double res[3] = {8, 8, 30};
    char dir[] = "/tmp/bench_mm3_XXXXXX", data[128], url[160], wpath[2048];
    char cmd[160], h1[32], h2[32], h3[32];
    long ncompl = 2000;
    cnx_workflow *wf = NULL, *wf1 = NULL;
    cnx_layer_info info;
    cnx_layer *layer = NULL;
    cnx_plan *p = NULL, *one = NULL;
    cnx_plan_external *ext = NULL;
    size_t next = 0;
    costs c;
    ctl r;
    double t0, plan_ms, total_tasks = 0, total_core_h = 0, worst_task = 0;
    double total_rows = 0, total_bytes = 0, total_msgs = 0, worst_reduce = 0;
    double map_chunks = 0, map_tasks = 1;
    int nmap = 0, tree = 0;
    size_t tree_blocks = 0, tree_stage = 0;
    int status = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 3 || (argc >= 2 && argv[1][0] == '-') ||
        (argc == 3 && (ncompl = strtol(argv[2], NULL, 10)) < 100)) {
        fprintf(stderr, "usage: bench_mm3 [WORKFLOW [COMPLETIONS >= 100]]\n");
        return 2;
    }
    if (argc >= 2)
        snprintf(wpath, sizeof(wpath), "%s", argv[1]);
    else
        default_workflow(wpath, sizeof(wpath));
    if (mkdtemp(dir) == NULL) {
        perror("bench_mm3: mkdtemp");
        return 1;
    }
    snprintf(data, sizeof(data), "file://%s/data", dir);
    snprintf(url, sizeof(url), "%s/boundary", data);
    cnx_info_init(&info, CNX_LAYER_IMAGE, CNX_DT_UINT8, size, res, chunk);
    if (cnx_workflow_load(&wf, wpath) != 0 ||
        cnx_layer_create(&layer, url, &info) != 0) {
        fprintf(stderr, "bench_mm3: %s: %s\n", wpath,
                cnx_error_last()->message);
        goto done;
    }
    cnx_layer_free(layer);

    printf("mm3    : %s (%s) over boundary %lldx%lldx%lld uint8 at 8x8x30 "
           "nm (%.3f mm^3), chunks %d^3, info only\n",
           wf->name, wpath, (long long)size[0], (long long)size[1],
           (long long)size[2],
           (double)size[0] * size[1] * size[2] * 8 * 8 * 30 / 1e18, CHUNK);
    t0 = cnx_now();
    if (cnx_plan_new(&p, wf, data, NULL) != 0) {
        fprintf(stderr, "bench_mm3: plan: %s\n", cnx_error_last()->message);
        goto done;
    }
    plan_ms = (cnx_now() - t0) * 1e3;
    printf("plan   : cnx_plan_new: %zu tasks in %.0f ms\n", p->ntasks, plan_ms);
    for (size_t s = 0; s < p->nstages; s++)
        printf("plan   : stage %-10s %8zu tasks of %lldx%lldx%lld, halo %lld "
               "(%s -> %s)\n",
               wf->stages[s].name, p->stages[s].count,
               (long long)p->stages[s].task_size[0],
               (long long)p->stages[s].task_size[1],
               (long long)p->stages[s].task_size[2],
               (long long)p->stages[s].halo, p->stages[s].in_scale.key,
               p->stages[s].out_scale.key);

    /* Today's default, one chunk per map task: counted by the planner's
     * cap (nothing is cut). */
    if (cnx_workflow_load(&wf1, wpath) != 0 ||
        cnx_plan_read_externals(&ext, &next, wf1, data) != 0)
        fail("externals");
    for (size_t s = 0; s < wf1->nstages; s++)
        if (wf1->stages[s].kind == CNX_WF_MAP)
            for (int i = 0; i < 3; i++)
                wf1->stages[s].task_size[i] = CHUNK;
    if (cnx_plan_new_capped(&one, wf1, data, NULL, ext, next, 1) == 0) {
        printf("plan   : one chunk per map task: %zu tasks\n", one->ntasks);
    } else {
        printf("plan   : one chunk per map task, the planner's count "
               "(cap 1): %s\n",
               cnx_error_last()->message);
    }
    cnx_plan_free(one);
    free(ext);
    cnx_workflow_free(wf1);

    t0 = cnx_now();
    measure_kernels(&c);
    printf("kernel : %d chunks of %d^3 of cnx-synth (hard, seed 7, 8x8x30 "
           "nm), CPU s per chunk (kernels only, %.1f s in all): segment %.3f "
           "(halo %lld), join %.4f, relabel %.4f, mesh + simplify 0.25 + "
           "encode %.3f\n",
           NSYN, CHUNK, cnx_now() - t0, c.segment_s, (long long)c.halo,
           c.join_s, c.relabel_s, c.mesh_s);
    printf("kernel : join items: face record %.0f B per chunk, %.0f "
           "fragments per chunk, %.1f B per fragment in the join's result "
           "(%s); %.1f meshes per chunk\n",
           c.face_bytes, c.frags_per_chunk, c.frag_bytes, c.frag_source,
           c.meshes_per_chunk);

    t0 = cnx_now();
    measure_controller(&r, argv[0], ncompl);
    printf("ctl    : bench_controller %ld (%.0f s): %.0f completions/s "
           "(median of its runs), ledger %.0f B and %.2f rows per task\n",
           ncompl, cnx_now() - t0, r.rate, r.bytes_task, r.rows_task);

    printf("\n%-10s %-15s %-6s %9s %9s %9s %9s %10s %9s %10s %9s\n", "stage",
           "worker", "kind", "tasks", "messages", "ledger", "ledger",
           "ingest h", "core-h", "task GiB", "task");
    printf("%-10s %-15s %-6s %9s %9s %9s %9s %10s %9s %10s %9s\n", "", "", "",
           "", "", "rows", "bytes", "", "", "", "voxels");
    for (size_t s = 0; s < p->nstages; s++)
        if (strcmp(wf->stages[s].worker, "segment-join-block") == 0) {
            tree = 1;
            tree_blocks = p->stages[s].count;
            tree_stage = s;
        }
    for (size_t s = 0; s < p->nstages; s++) {
        const cnx_wf_stage *ws = &wf->stages[s];
        const cnx_plan_stage *ps = &p->stages[s];
        double tasks = (double)ps->count, vox = box_voxels_d(&ps->region);
        double chunks = region_chunks(ps);
        double per_chunk = -1, mem;
        const char *w = ws->worker;
        char core[32], memtxt[32];
        if (strcmp(w, "segment") == 0)
            per_chunk = c.segment_s;
        else if (strcmp(w, "segment-relabel") == 0)
            per_chunk = c.relabel_s;
        else if (strcmp(w, "mesh") == 0)
            per_chunk = c.mesh_s;
        else if (strcmp(w, "segment-join") == 0)
            per_chunk = c.join_s;
        if (ws->kind == CNX_WF_MAP && strcmp(w, "segment-join-block") != 0) {
            mem = map_task_bytes(ps);
            snprintf(memtxt, sizeof(memtxt), "%.2f", mem / GIB);
        } else if (strcmp(w, "segment-join-block") == 0) {
            /* the face records of the block's chunks and of those beside
             * it, and its summary */
            double bc = 1, bn = 1;
            for (int i = 0; i < 3; i++) {
                double k = (double)ps->task_size[i] / CHUNK;
                bc *= k;
                bn *= k + 2;
            }
            mem = (bn - (bn - bc) / 3.0) * c.face_bytes +
                  bc * c.frags_per_chunk * c.summary_bytes;
            snprintf(memtxt, sizeof(memtxt), "%.2f", mem / GIB);
            per_chunk = c.join_s;
        } else if (strcmp(w, "segment-join") == 0 && tree) {
            /* the top as shipped: every block summary held, the result;
             * the fragments are those of the blocks' chunks */
            mem = region_chunks(&p->stages[tree_stage]) * c.frags_per_chunk *
                  (c.summary_bytes + c.frag_bytes);
            snprintf(memtxt, sizeof(memtxt), "%.0f", mem / GIB);
        } else if (strcmp(w, "segment-join") == 0) {
            reduce_level lv[1];
            reduce_levels(chunks, c.face_bytes,
                          chunks * c.frags_per_chunk * c.frag_bytes, lv, 1);
            mem = lv[0].peak_bytes;
            snprintf(memtxt, sizeof(memtxt), "%.0f", mem / GIB);
        } else if (strcmp(w, "mesh-manifest") == 0) {
            reduce_level lv[1];
            reduce_levels(chunks, c.meshes_per_chunk * MANIFEST_REF_BYTES, 0,
                          lv, 1);
            mem = lv[0].peak_bytes;
            snprintf(memtxt, sizeof(memtxt), "%.0f", mem / GIB);
        } else {
            mem = 0;
            snprintf(memtxt, sizeof(memtxt), "n/m");
        }
        if (per_chunk >= 0) {
            double h = per_chunk * chunks / 3600;
            total_core_h += h;
            snprintf(core, sizeof(core), "%.0f", h);
        } else {
            snprintf(core, sizeof(core), "n/m");
        }
        if (ws->kind == CNX_WF_MAP) {
            nmap++;
            map_chunks = chunks > map_chunks ? chunks : map_chunks;
            map_tasks = tasks > map_tasks ? tasks : map_tasks;
        }
        if (ws->kind == CNX_WF_MAP && mem > worst_task)
            worst_task = mem;
        if (ws->kind == CNX_WF_REDUCE && mem > worst_reduce)
            worst_reduce = mem;
        total_tasks += tasks;
        total_msgs += tasks * MESSAGES_PER_TASK;
        total_rows += tasks * r.rows_task;
        total_bytes += tasks * r.bytes_task;
        printf("%-10s %-15s %-6s %9.0f %9s %9s %9s %10.3f %9s %10s %9s\n",
               ws->name, w, ws->kind == CNX_WF_MAP ? "map" : "reduce", tasks,
               human(tasks * MESSAGES_PER_TASK, h1, sizeof(h1)),
               human(tasks * r.rows_task, h2, sizeof(h2)),
               human(tasks * r.bytes_task, h3, sizeof(h3)),
               tasks / r.rate / 3600, core, memtxt,
               ws->kind == CNX_WF_MAP
                   ? human((double)ps->task_size[0] * ps->task_size[1] *
                               ps->task_size[2],
                           cmd, sizeof(cmd))
                   : human(vox, cmd, sizeof(cmd)));
    }
    printf("%-10s %-15s %-6s %9.0f %9s %9s %9s %10.3f %9.0f\n", "total", "", "",
           total_tasks, human(total_msgs, h1, sizeof(h1)),
           human(total_rows, h2, sizeof(h2)),
           human(total_bytes, h3, sizeof(h3)), total_tasks / r.rate / 3600,
           total_core_h);
    printf("(messages: %d per task, the controller ingests %d; ledger rows "
           "and bytes per task and the ingest rate from bench_controller; "
           "core-h: kernel CPU per chunk x chunks, n/m: not measured; task "
           "GiB: map = input over task + halo + one output chunk, reduce = "
           "the single-reduce method's projection below)\n",
           MESSAGES_PER_TASK, INGESTED_PER_TASK);

    printf("\nreduce : the single-reduce method of today (one task per "
           "reduce stage); rows of reduce_levels():\n");
    for (size_t s = 0; s < p->nstages; s++) {
        const cnx_plan_stage *ps = &p->stages[s];
        reduce_level lv[16];
        double chunks;
        int n;
        if (wf->stages[s].kind != CNX_WF_REDUCE)
            continue;
        chunks = region_chunks(ps);
        if (strcmp(wf->stages[s].worker, "mesh-manifest") == 0) {
            n = reduce_levels(chunks, c.meshes_per_chunk * MANIFEST_REF_BYTES,
                              0, lv, 16);
            for (int i = 0; i < n; i++)
                printf("reduce : %-8s level %d: %.0f task(s), fan-in %s "
                       "chunks, peak %.1f GiB (%s mesh references of %.0f "
                       "B: %.1f meshes per chunk measured; the per-segment "
                       "multi-resolution build not counted)\n",
                       wf->stages[s].name, lv[i].level, lv[i].tasks,
                       human(lv[i].fan_in, h1, sizeof(h1)),
                       lv[i].peak_bytes / GIB,
                       human(chunks * c.meshes_per_chunk, h2, sizeof(h2)),
                       MANIFEST_REF_BYTES, c.meshes_per_chunk);
            continue;
        }
        if (strcmp(wf->stages[s].worker, "segment-join") != 0) {
            printf("reduce : %-8s %zu task over %s chunks; peak memory not "
                   "measured here\n",
                   wf->stages[s].name, ps->count,
                   human(chunks, h1, sizeof(h1)));
            continue;
        }
        if (tree) {
            printf("reduce : %-8s the join as a tree: level 1: %zu map tasks "
                   "(join-blocks), each its block's and its neighbours' face "
                   "records (%.0f B each) and its summary (%.1f B per "
                   "fragment); top: 1 task holding every summary (%s "
                   "fragments) and the result (%.1f B per fragment): %.0f "
                   "GiB\n",
                   wf->stages[s].name, tree_blocks, c.face_bytes,
                   c.summary_bytes,
                   human(region_chunks(&p->stages[tree_stage]) *
                             c.frags_per_chunk,
                         h3, sizeof(h3)),
                   c.frag_bytes,
                   region_chunks(&p->stages[tree_stage]) * c.frags_per_chunk *
                       (c.summary_bytes + c.frag_bytes) / GIB);
            continue;
        }
        n = reduce_levels(chunks, c.face_bytes,
                          chunks * c.frags_per_chunk * c.frag_bytes, lv, 16);
        for (int i = 0; i < n; i++)
            printf("reduce : %-8s level %d: %.0f task(s), fan-in %s chunks, "
                   "peak %.1f GiB (%s face records of %.0f B + %s fragments "
                   "of %.1f B)\n",
                   wf->stages[s].name, lv[i].level, lv[i].tasks,
                   human(lv[i].fan_in, h1, sizeof(h1)), lv[i].peak_bytes / GIB,
                   human(chunks, h2, sizeof(h2)), c.face_bytes,
                   human(chunks * c.frags_per_chunk, h3, sizeof(h3)),
                   c.frag_bytes);
    }

    double ctl_h = total_tasks / r.rate / 3600;
    double big = worst_task > worst_reduce ? worst_task : worst_reduce;
    printf("\ntarget : controller work per mm^3 < %.0f h: %.2f h: %s\n",
           TARGET_CONTROLLER_H, ctl_h,
           ctl_h < TARGET_CONTROLLER_H ? "met" : "missed");
    if (ctl_h >= TARGET_CONTROLLER_H && nmap > 0) {
        double per_stage = r.rate * 3600 * TARGET_CONTROLLER_H / nmap;
        printf("target : at %.0f completions/s, %.0f h ingests %.0f tasks: "
               "%d map stages of %s chunks each need tasks of at least %.0f "
               "chunks (now %.1f on average, edge tasks included)\n",
               r.rate, TARGET_CONTROLLER_H, r.rate * 3600 * TARGET_CONTROLLER_H,
               nmap, human(map_chunks, h1, sizeof(h1)),
               ceil(map_chunks / per_stage), map_chunks / map_tasks);
    }
    printf("target : no task above %.0f GiB: largest map task %.2f GiB, "
           "largest reduce task %.0f GiB: %s\n",
           TARGET_TASK_GIB, worst_task / GIB, worst_reduce / GIB,
           big <= TARGET_TASK_GIB * GIB ? "met" : "missed");
    status = 0;
done:
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench_mm3: could not remove %s\n", dir);
    return status;
}
