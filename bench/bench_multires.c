/*
 * bench_multires.c - mesh sizes: the legacy single-resolution fragments
 * beside the multi-resolution Draco meshes (neuroglancer_multilod_draco),
 * per level of detail.
 *
 * Reads scale 0 of a uint64 segmentation layer (e.g. DIR/gt of cnx-synth),
 * meshes it chunk by chunk exactly as the mesh stage does (chunks of CHUNK
 * voxels, one voxel of overlap on the high faces, simplified to 0.25 with
 * the chunk faces fixed, the low volume faces' own planes fixed), writes
 * nothing, and prints: legacy fragments (bytes of the fragments plus the
 * manifests {"fragments": [...]}) and triangles; multi-resolution meshes
 * as the mesh-manifest stage builds them (coarser levels simplified to
 * 0.25 each): per level fragments, triangles and Draco bytes, the
 * manifests' bytes and the total.
 * usage: bench_multires SEG_LAYER [CHUNK]   (CHUNK default 64)
 * e.g. build/bin/cnx-synth --out /tmp/s256 --shape 256,256,256 --quiet &&
 *      build/bench/bench_multires /tmp/s256/gt
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/mesh.h"
#include "cnx/precomputed.h"

typedef struct piece {
    uint64_t id;
    int64_t chunk[3];
    cnx_mesh m;
} piece;

static int cmp_piece(const void *a, const void *b)
{
    const piece *p = a, *q = b;
    if (p->id != q->id)
        return p->id < q->id ? -1 : 1;
    for (int i = 2; i >= 0; i--)
        if (p->chunk[i] != q->chunk[i])
            return p->chunk[i] < q->chunk[i] ? -1 : 1;
    return 0;
}

int main(int argc, char **argv)
{
    cnx_layer *layer = NULL;
    cnx_volume *vol = NULL;
    const cnx_layer_info *info;
    int64_t C = argc > 2 ? atoll(argv[2]) : 64, v0[3], v1[3];
    double res[3];
    piece *ps = NULL;
    size_t np = 0, cap = 0;
    uint64_t legacy_bytes = 0, legacy_tris = 0, segs = 0, index_bytes = 0;
    cnx_mesh_mr_stats tot;
    cnx_box all;
    int rc;

    if (argc < 2 || C < 1) {
        fprintf(stderr, "usage: bench_multires SEG_LAYER [CHUNK]\n");
        return 2;
    }
    rc = cnx_layer_open(&layer, argv[1]);
    if (rc == 0) {
        info = cnx_layer_get_info(layer);
        for (int i = 0; i < 3; i++) {
            v0[i] = all.min[i] = info->scales[0].voxel_offset[i];
            v1[i] = all.max[i] = v0[i] + info->scales[0].size[i];
            res[i] = info->scales[0].resolution[i];
        }
        if (info->dtype != CNX_DT_UINT64)
            rc = cnx_error_set(CNX_EINVAL, 0, "%s: not uint64", argv[1]);
    }
    if (rc == 0)
        rc = cnx_layer_read(layer, 0, &all, 0, NULL, NULL, NULL, &vol);
    for (int64_t cz = v0[2]; rc == 0 && cz < v1[2]; cz += C)
        for (int64_t cy = v0[1]; rc == 0 && cy < v1[1]; cy += C)
            for (int64_t cx = v0[0]; rc == 0 && cx < v1[0]; cx += C) {
                int64_t a[3] = {cx, cy, cz};
                cnx_mesh_block b;
                cnx_mesh_set set;
                cnx_mesh_simplify_opts o = {0.25, INFINITY, 0, {0}, {0}};
                cnx_box rb;
                cnx_volume *part = NULL;
                memset(&b, 0, sizeof(b));
                for (int i = 0; i < 3; i++) {
                    int64_t hi = a[i] + C < v1[i] ? a[i] + C : v1[i];
                    rb.min[i] = a[i];
                    rb.max[i] = hi + 1 < v1[i] ? hi + 1 : v1[i];
                    b.cells.min[i] = a[i] - (a[i] == v0[i]);
                    b.cells.max[i] = hi;
                    b.origin[i] = a[i];
                    b.size[i] = rb.max[i] - rb.min[i];
                    b.resolution[i] = res[i];
                }
                rc = cnx_volume_crop(&part, vol, &rb);
                if (rc != 0)
                    break;
                b.labels = part->data;
                rc = cnx_mesh_block_run(&b, &set);
                cnx_mesh_block_planes(&b, &o);
                for (int i = 0; i < 3; i++)
                    if (a[i] == v0[i])
                        o.plane_at[2 * i] = ((double)a[i] + 0.5) * res[i];
                for (size_t k = 0; rc == 0 && k < set.n; k++) {
                    rc = cnx_mesh_simplify(&set.meshes[k], &o);
                    if (np == cap) {
                        cap = cap ? 2 * cap : 1024;
                        ps = realloc(ps, cap * sizeof(*ps));
                    }
                    ps[np].id = set.labels[k];
                    memcpy(ps[np].chunk, a, sizeof(a));
                    ps[np].m = set.meshes[k];
                    memset(&set.meshes[k], 0, sizeof(cnx_mesh));
                    legacy_bytes += 4 + 12 * (ps[np].m.nverts + ps[np].m.ntris);
                    legacy_tris += ps[np].m.ntris;
                    np++;
                }
                cnx_mesh_set_free(&set);
                cnx_volume_free(part);
            }
    if (rc == 0)
        qsort(ps, np, sizeof(*ps), cmp_piece);
    memset(&tot, 0, sizeof(tot));
    for (size_t i = 0; rc == 0 && i < np;) {
        size_t j = i;
        cnx_mesh *ms;
        cnx_mesh_mr_params p;
        cnx_mesh_mr_stats st;
        uint8_t *ix = NULL, *data = NULL;
        size_t ilen = 0, dlen = 0;
        while (j < np && ps[j].id == ps[i].id)
            j++;
        ms = malloc((j - i) * sizeof(*ms));
        for (size_t k = i; k < j; k++)
            ms[k - i] = ps[k].m;
        for (int a = 0; a < 3; a++) {
            p.origin[a] = v0[a] - C;
            p.cell[a] = C;
            p.resolution[a] = res[a];
        }
        p.simplify = 0.25;
        /* legacy manifest, canonical: {"fragments":["<id>:0:<box>",...]} */
        legacy_bytes += 16 + (j - i) - 1;
        for (size_t k = i; k < j; k++) {
            char box[128];
            cnx_box cb;
            for (int a = 0; a < 3; a++) {
                cb.min[a] = ps[k].chunk[a];
                cb.max[a] =
                    ps[k].chunk[a] + C < v1[a] ? ps[k].chunk[a] + C : v1[a];
            }
            cnx_box_format(&cb, box, sizeof(box));
            legacy_bytes += (uint64_t)snprintf(NULL, 0, "\"%" PRIu64 ":0:%s\"",
                                               ps[k].id, box);
        }
        rc = cnx_mesh_mr_build(ms, j - i, &p, &ix, &ilen, &data, &dlen, &st);
        if (rc == 0) {
            segs++;
            index_bytes += ilen;
            if (st.num_lods > tot.num_lods)
                tot.num_lods = st.num_lods;
            for (uint32_t l = 0; l < st.num_lods; l++) {
                tot.frags[l] += st.frags[l];
                tot.tris[l] += st.tris[l];
                tot.bytes[l] += st.bytes[l];
            }
        }
        free(ix);
        free(data);
        free(ms);
        i = j;
    }
    if (rc != 0) {
        fprintf(stderr, "bench_multires: %s\n", cnx_error_last()->message);
        return 1;
    }
    {
        uint64_t mr = index_bytes;
        printf("layer %s, %" PRId64 "^3-voxel chunks, %" PRIu64 " segments\n",
               argv[1], C, segs);
        printf("legacy (mesh/):          %10" PRIu64 " bytes  %9" PRIu64
               " triangles (one level)\n",
               legacy_bytes, legacy_tris);
        for (uint32_t l = 0; l < tot.num_lods; l++) {
            printf("multires lod %u:          %10" PRIu64 " bytes  %9" PRIu64
                   " triangles  %7" PRIu64 " fragments\n",
                   l, tot.bytes[l], tot.tris[l], tot.frags[l]);
            mr += tot.bytes[l];
        }
        printf("multires manifests:      %10" PRIu64 " bytes\n", index_bytes);
        printf("multires (mesh_multires/) %9" PRIu64 " bytes in all (%.2fx "
               "the legacy bytes; lod 0 alone %.2fx)\n",
               mr, (double)mr / (double)legacy_bytes,
               (double)tot.bytes[0] / (double)legacy_bytes);
    }
    for (size_t i = 0; i < np; i++)
        cnx_mesh_free(&ps[i].m);
    free(ps);
    cnx_volume_free(vol);
    cnx_layer_free(layer);
    return 0;
}
