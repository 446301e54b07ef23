/*
 * mesh_stage.c - the meshing stages (cnx/mesh.h, docs/mesh.md).
 *
 * "mesh" (map, halo >= 1; a task is any aligned run of whole chunks, read
 * once): for each chunk in raster order, marching cubes over every label
 * of the chunk plus one voxel of overlap on its high faces, optional
 * quadric simplification with the chunk-face vertices fixed, and one
 * Neuroglancer legacy fragment per label, mesh/<id>:0:<chunk>; the list of
 * ids, each with its fragment's digest, goes to
 * mesh_index/<scale>/<chunk>. A chunk is cropped from the task's read
 * exactly as a one-chunk task reads it, so its bytes do not depend on the
 * task size. "mesh-manifest" (reduce) reads every index and
 * writes each segment's manifest mesh/<id>:0 listing its fragments in
 * chunk order (z, y, x), and the directory's mesh/info; and, from the
 * fragments (read back against the digests in the indexes), each
 * segment's multi-resolution Draco mesh mesh_multires/<id>.index and
 * mesh_multires/<id>, and mesh_multires/info; or, with "multires_sharded",
 * those meshes as the shards mesh_multires/<shard>.shard (segment id as
 * chunk id).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/digest.h"
#include "cnx/error.h"
#include "cnx/mesh.h"
#include "cnx/stages.h"
#include "json_int.h"
#include "stage_int.h"

#define INDEX_DIR CNX_STAGE_MESH_INDEX_DIR
#define INDEX_MAX ((size_t)64 << 20)
#define FRAGMENT_MAX ((size_t)1 << 30)
#define MULTIRES_DIR "mesh_multires"
/* Each coarser level of the multi-resolution meshes keeps this fraction of
 * its finer level's triangles (at most; docs/mesh.md). */
#define MULTIRES_SIMPLIFY 0.25

int cnx__mesh_manifest_params(const char *text, int *sharded,
                              cnx_sharding_target *target)
{
    static const char *const keys[] = {"multires_sharded", "shard_bytes",
                                       "minishard_segments", NULL};
    static const char what[] = "mesh-manifest: parameters";
    int64_t bytes = 0, mini = 0;
    json_t *js = NULL;
    int rc;

    *sharded = 0;
    memset(target, 0, sizeof(*target));
    rc = cnx__json_params(&js, text, keys, what);
    if (rc == 0)
        rc = cnx__json_param_flag(js, "multires_sharded", what, sharded);
    if (rc == 0)
        rc = cnx__json_param_int(js, "shard_bytes", 1, INT64_MAX, what, &bytes);
    if (rc == 0)
        rc = cnx__json_param_int(js, "minishard_segments", 1, 1 << 20, what,
                                 &mini);
    if (rc == 0 && !*sharded && (bytes > 0 || mini > 0))
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "%s: shard_bytes and minishard_segments need "
                           "\"multires_sharded\": true",
                           what);
    target->shard_bytes = (uint64_t)bytes;
    target->minishard_chunks = (uint64_t)mini;
    json_decref(js);
    return rc;
}

/* Parameters: {} or {"simplify": fraction in (0, 1], "max_error": nm^2}. */
static int parse_mesh_params(const char *text, cnx_mesh_simplify_opts *o)
{
    static const char *const keys[] = {"simplify", "max_error", NULL};
    static const char what[] = "mesh: parameters";
    json_t *js = NULL;
    int rc;

    memset(o, 0, sizeof(*o));
    o->target_fraction = 1.0;
    o->max_error = INFINITY;
    rc = cnx__json_params(&js, text, keys, what);
    if (rc == 0)
        rc = cnx__json_param_number(js, "simplify", 0, 1, 1, what,
                                    &o->target_fraction);
    if (rc == 0)
        rc = cnx__json_param_number(js, "max_error", 0, 1e12, 0, what,
                                    &o->max_error);
    json_decref(js);
    return rc;
}

/* Write one fragment per mesh and the chunk's index of ids. */
static int write_fragments(cnx_stage_io *io, const cnx_task *task,
                           const cnx_box *chunk, cnx_mesh_set *set,
                           const cnx_mesh_simplify_opts *o)
{
    char box[128], name[512];
    size_t cap = set->n * (21 + CNX_DIGEST_LEN) + 1, at = 0;
    char *index = malloc(cap);
    int rc = cnx_box_format(chunk, box, sizeof(box));

    if (index == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh: out of memory");
    index[0] = '\0';
    for (size_t i = 0; i < set->n && rc == 0; i++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        if (o->target_fraction < 1 || isfinite(o->max_error))
            rc = cnx_mesh_simplify(&set->meshes[i], o);
        if (rc == 0)
            rc = cnx_mesh_legacy_encode(&set->meshes[i], &bytes, &len);
        snprintf(name, sizeof(name), "mesh/%" PRIu64 ":0:%s", set->labels[i],
                 box);
        if (rc == 0)
            rc = cnx_stage_put(io, name, bytes, len);
        if (rc == 0) {
            char digest[CNX_DIGEST_LEN];
            cnx_digest(bytes, len, digest);
            at += (size_t)snprintf(index + at, cap - at, "%" PRIu64 " %s\n",
                                   set->labels[i], digest);
        }
        free(bytes);
    }
    if (rc == 0)
        rc = cnx_side_object_name(INDEX_DIR, task->output_scale, chunk, name,
                                  sizeof(name));
    if (rc == 0)
        rc = cnx_stage_put(io, name, index, at);
    free(index);
    return rc;
}

/* The box a chunk's meshes read: the chunk plus one voxel on its high
 * faces, clipped to bounds. */
static cnx_box mesh_read_box(const cnx_box *chunk, const cnx_box *bounds)
{
    cnx_box r = *chunk;
    for (int i = 0; i < 3; i++)
        r.max[i] = cnx_imin(chunk->max[i] + 1, bounds->max[i]);
    return r;
}

/* One chunk of a mesh task, from vol (which holds its read box). */
static int one_mesh(cnx_stage_io *io, const cnx_task *task,
                    const cnx_volume *vol, const cnx_box *chunk,
                    const cnx_box *bounds, const double resolution[3],
                    cnx_mesh_simplify_opts *o)
{
    cnx_box rbox = mesh_read_box(chunk, bounds);
    cnx_volume *part = NULL;
    cnx_mesh_block b;
    cnx_mesh_set set;
    int rc;

    memset(&b, 0, sizeof(b));
    memset(&set, 0, sizeof(set));
    for (int i = 0; i < 3; i++) {
        b.cells.min[i] = chunk->min[i] - (chunk->min[i] == bounds->min[i]);
        b.cells.max[i] = chunk->max[i];
        b.origin[i] = rbox.min[i];
        b.size[i] = rbox.max[i] - rbox.min[i];
        b.resolution[i] = resolution[i];
    }
    cnx_mesh_block_planes(&b, o);
    /* At the volume's low face the chunk also polygonises the padding
     * cells below it; its own face stays fixed there too, so no triangle
     * crosses it and each lies in one cell of the multi-resolution octree
     * (the padding cells' plane holds no vertex). */
    for (int i = 0; i < 3; i++)
        if (chunk->min[i] == bounds->min[i])
            o->plane_at[2 * i] = ((double)chunk->min[i] + 0.5) * resolution[i];
    rc = cnx_volume_crop(&part, vol, &rbox);
    if (rc == 0) {
        b.labels = part->data;
        rc = cnx_mesh_block_run(&b, &set);
    }
    if (rc == 0)
        rc = write_fragments(io, task, chunk, &set, o);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(chunk));
    cnx_mesh_set_free(&set);
    cnx_volume_free(part);
    return rc;
}

static int run_mesh(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, "segmentation");
    cnx_layer *layer = cnx_stage_input_layer(io, "segmentation");
    const cnx_layer_info *info;
    cnx_mesh_simplify_opts o;
    cnx_volume *vol = NULL;
    cnx_box *chunks = NULL;
    size_t nchunks = 0;
    cnx_grid grid;
    cnx_box bounds, rbox;
    int s, rc;

    (void)ctx;
    if (in == NULL || layer == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh: inputs: must be exactly one role, "
                             "\"segmentation\"");
    info = cnx_layer_get_info(layer);
    s = cnx_info_find_scale(info, in->scale);
    if (s < 0 || info->dtype != CNX_DT_UINT64 || info->channels != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh: inputs.segmentation: must be a uint64 "
                             "segmentation scale");
    if (task->halo < 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh: halo: must be at least 1 (the overlap "
                             "on the high faces)");
    rc = parse_mesh_params(task->parameters, &o);
    if (rc == 0) {
        grid = cnx_info_grid(info, s);
        rc = cnx__stage_chunks(task, &grid, "mesh", &chunks, &nchunks);
    }
    if (rc != 0)
        return rc;
    /* Read once: every chunk's read box lies in the task's. */
    bounds = cnx_grid_bounds(&grid);
    rbox = mesh_read_box(&task->roi, &bounds);
    rc = cnx_stage_read(io, "segmentation", &rbox, &vol);
    for (size_t k = 0; k < nchunks && rc == 0; k++)
        rc = one_mesh(io, task, vol, &chunks[k], &bounds,
                      info->scales[s].resolution, &o);
    cnx_volume_free(vol);
    free(chunks);
    return rc;
}

const cnx_stage cnx_stage_mesh = {
    .name = "mesh",
    .kernel_version = CNX_MESH_VERSION,
    .run = run_mesh,
    .ctx = NULL,
    .help = "Meshes each chunk of the task (any aligned run of whole\n"
            "chunks; halo >= 1, derived as 1 by the planner): marching\n"
            "cubes over every label of input role \"segmentation\"\n"
            "(uint64) with one voxel of overlap on the chunk's high faces,\n"
            "optionally simplified with the chunk-face vertices fixed;\n"
            "writes one Neuroglancer legacy fragment per label,\n"
            "mesh/<id>:0:<chunk>, and the list of ids with their\n"
            "fragments' digests,\n"
            "mesh_index/<scale>/<chunk>; a chunk's bytes do not depend on\n"
            "the task size. Parameters: {} or {\"simplify\": fraction,\n"
            "\"max_error\": nm^2}. docs/mesh.md.",
};

/* ---- mesh-manifest ------------------------------------------------------- */

typedef struct frag_ref {
    uint64_t id;
    cnx_box box;
    char digest[CNX_DIGEST_LEN]; /* of the fragment mesh/<id>:0:<chunk> */
} frag_ref;

static int cmp_ref(const void *x, const void *y)
{
    const frag_ref *a = x, *b = y;
    if (a->id != b->id)
        return a->id < b->id ? -1 : 1;
    for (int i = 2; i >= 0; i--)
        if (a->box.min[i] != b->box.min[i])
            return a->box.min[i] < b->box.min[i] ? -1 : 1;
    return 0;
}

/* Append the ids of one index document (chunk box from its name). */
static int read_index(const char *name, const uint8_t *data, size_t len,
                      frag_ref **refs, size_t *n, size_t *cap)
{
    const char *slash = strrchr(name, '/');
    cnx_box box;
    size_t i = 0;
    if (slash == NULL || cnx_box_parse(slash + 1, &box) != 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh-manifest: %s: not a mesh index name", name);
    while (i < len) {
        uint64_t id = 0;
        size_t d = 0;
        while (i < len && data[i] >= '0' && data[i] <= '9' && d < 20) {
            id = id * 10 + (uint64_t)(data[i++] - '0');
            d++;
        }
        char digest[CNX_DIGEST_LEN];
        size_t k = 0;
        if (d > 0 && i < len && data[i] == ' ')
            for (i++; i < len && data[i] != '\n' && k + 1 < sizeof(digest);)
                digest[k++] = (char)data[i++];
        digest[k] = '\0';
        if (d == 0 || i >= len || data[i] != '\n' || id == 0 ||
            !cnx_digest_valid(digest))
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "mesh-manifest: %s: byte %zu: not a list "
                                 "of segment ids with their fragments' "
                                 "digests",
                                 name, i);
        i++;
        if (*n == *cap) {
            size_t c = *cap ? *cap * 2 : 1024;
            frag_ref *r = realloc(*refs, c * sizeof(*r));
            if (r == NULL)
                return cnx_error_set(CNX_ENOMEM, 0,
                                     "mesh-manifest: out of memory");
            *refs = r;
            *cap = c;
        }
        (*refs)[*n].id = id;
        (*refs)[*n].box = box;
        memcpy((*refs)[*n].digest, digest, sizeof(digest));
        (*n)++;
    }
    return 0;
}

/* Write mesh/<id>:0 for the run of refs with one id. */
static int write_manifest(cnx_stage_io *io, const frag_ref *r, size_t n)
{
    json_t *frags = json_array(), *doc;
    char name[64], box[128], frag[192];
    char *text = NULL;
    int rc = 0;
    for (size_t i = 0; frags != NULL && i < n && rc == 0; i++) {
        rc = cnx_box_format(&r[i].box, box, sizeof(box));
        snprintf(frag, sizeof(frag), "%" PRIu64 ":0:%s", r[i].id, box);
        if (rc == 0)
            json_array_append_new(frags, json_string(frag));
    }
    doc = json_pack("{s:o}", "fragments", frags);
    if (doc != NULL)
        text = cnx__json_canonical(doc);
    json_decref(doc);
    if (rc == 0 && text == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "mesh-manifest: out of memory");
    snprintf(name, sizeof(name), "mesh/%" PRIu64 ":0", r[0].id);
    if (rc == 0)
        rc = cnx_stage_put(io, name, text, strlen(text));
    free(text);
    return rc;
}

/* The layer's segment properties relative to a mesh directory ("" if
 * none). */
static void properties_path(cnx_stage_io *io, char *out, size_t cap)
{
    cnx_layer *layer = cnx_stage_output_layer(io);
    const cnx_layer_info *info = layer ? cnx_layer_get_info(layer) : NULL;
    out[0] = '\0';
    if (info != NULL && info->segment_properties[0] != '\0')
        snprintf(out, cap, "../%s", info->segment_properties);
}

/*
 * Put a mesh directory's info: doc (taken), with the layer's segment
 * properties, where it has them, as a path relative to the directory
 * (Neuroglancer reads them when the directory is loaded as a source on its
 * own). The one task of this reduce owns the directories, so it writes
 * each info once.
 */
static int put_mesh_dir_info(cnx_stage_io *io, json_t *doc, const char *name)
{
    char path[CNX_SCALE_KEY_MAX + 4];
    char *text = NULL;
    int rc;

    properties_path(io, path, sizeof(path));
    if (doc != NULL && path[0] != '\0')
        json_object_set_new(doc, "segment_properties", json_string(path));
    if (doc != NULL)
        text = cnx__json_canonical(doc);
    json_decref(doc);
    if (text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh-manifest: out of memory");
    rc = cnx_stage_put(io, name, text, strlen(text));
    free(text);
    return rc;
}

/* mesh/info: the legacy mesh directory's. */
static int write_mesh_info(cnx_stage_io *io)
{
    return put_mesh_dir_info(
        io, json_pack("{s:s}", "@type", "neuroglancer_legacy_mesh"),
        "mesh/info");
}

/* mesh_multires/info (neuroglancer_multilod_draco): positions in nm, so
 * the transform is the identity; spec: its sharding, or NULL. */
static int write_multires_info(cnx_stage_io *io, const cnx_sharding *spec)
{
    json_t *doc =
        json_pack("{s:s, s:i, s:[iiiiiiiiiiii], s:i}", "@type",
                  "neuroglancer_multilod_draco", "vertex_quantization_bits",
                  CNX_MESH_MR_BITS, "transform", 1, 0, 0, 0, 0, 1, 0, 0, 0, 0,
                  1, 0, "lod_scale_multiplier", 1);
    if (doc != NULL && spec != NULL)
        json_object_set_new(doc, "sharding", cnx__json_sharding(spec));
    return put_mesh_dir_info(io, doc, MULTIRES_DIR "/info");
}

/* The octree of the multi-resolution meshes: level-0 cells are the
 * chunks of the output scale, with one ring of cells below the volume's
 * low faces for the padding cells the low chunks polygonise. */
static int multires_params(cnx_stage_io *io, cnx_mesh_mr_params *p)
{
    cnx_layer *layer = cnx_stage_output_layer(io);
    const cnx_layer_info *info = layer ? cnx_layer_get_info(layer) : NULL;
    int s = cnx_stage_output_scale(io);
    cnx_grid grid;
    if (info == NULL || s < 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh-manifest: output: no segmentation scale "
                             "to take the mesh grid from");
    grid = cnx_info_grid(info, s);
    memset(p, 0, sizeof(*p));
    for (int i = 0; i < 3; i++) {
        p->cell[i] = grid.chunk[i];
        p->origin[i] = grid.offset[i] - grid.chunk[i];
        p->resolution[i] = info->scales[s].resolution[i];
    }
    p->simplify = MULTIRES_SIMPLIFY;
    return 0;
}

/* The built multi-resolution meshes of a sharded write: each segment's
 * manifest and fragment data, kept until every segment is built (the
 * shard a segment goes to depends on the spec, chosen from the total). */
typedef struct mr_built {
    uint64_t id;
    uint64_t shard;
    uint8_t *index, *data;
    size_t ilen, dlen;
} mr_built;

typedef struct mr_keep {
    mr_built *v;
    size_t n, cap;
} mr_keep;

static void mr_keep_free(mr_keep *k)
{
    for (size_t i = 0; i < k->n; i++) {
        free(k->v[i].index);
        free(k->v[i].data);
    }
    free(k->v);
}

/* Write mesh_multires/<id>.index and mesh_multires/<id> for the run of
 * refs with one id, from its legacy fragments (read back, digest-checked
 * against the mesh index); or, with keep, hand them to keep (the sharded
 * form). */
static int write_multires(cnx_stage_io *io, const cnx_mesh_mr_params *p,
                          const frag_ref *r, size_t n, mr_keep *keep)
{
    cnx_mesh *pieces = calloc(n ? n : 1, sizeof(*pieces));
    uint8_t *index = NULL, *data = NULL;
    size_t ilen = 0, dlen = 0;
    char name[512], box[128];
    int rc = 0;

    if (pieces == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "mesh-manifest: out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint8_t *bytes = NULL;
        size_t len = 0;
        rc = cnx_box_format(&r[i].box, box, sizeof(box));
        snprintf(name, sizeof(name), "mesh/%" PRIu64 ":0:%s", r[i].id, box);
        if (rc == 0)
            rc = cnx_stage_get_expect(io, "index", name, r[i].digest,
                                      FRAGMENT_MAX, &bytes, &len);
        if (rc == 0)
            rc = cnx_mesh_legacy_decode(bytes, len, &pieces[i]);
        if (rc != 0)
            rc = cnx_error_wrap("mesh-manifest: %s", name);
        free(bytes);
    }
    if (rc == 0) {
        rc = cnx_mesh_mr_build(pieces, n, p, &index, &ilen, &data, &dlen, NULL);
        if (rc != 0)
            rc = cnx_error_wrap("mesh-manifest: segment %" PRIu64, r[0].id);
    }
    if (rc == 0 && keep != NULL) {
        if (keep->n == keep->cap) {
            size_t c = keep->cap ? keep->cap * 2 : 256;
            mr_built *v = realloc(keep->v, c * sizeof(*v));
            if (v == NULL)
                rc = cnx_error_set(CNX_ENOMEM, 0,
                                   "mesh-manifest: out of memory");
            else {
                keep->v = v;
                keep->cap = c;
            }
        }
        if (rc == 0) {
            keep->v[keep->n++] =
                (mr_built){r[0].id, 0, index, data, ilen, dlen};
            index = NULL;
            data = NULL;
        }
        goto done;
    }
    snprintf(name, sizeof(name), MULTIRES_DIR "/%" PRIu64, r[0].id);
    if (rc == 0)
        rc = cnx_stage_put(io, name, data, dlen);
    snprintf(name, sizeof(name), MULTIRES_DIR "/%" PRIu64 ".index", r[0].id);
    if (rc == 0)
        rc = cnx_stage_put(io, name, index, ilen);
done:
    for (size_t i = 0; i < n; i++)
        cnx_mesh_free(&pieces[i]);
    free(pieces);
    free(index);
    free(data);
    return rc;
}

static int cmp_built(const void *x, const void *y)
{
    const mr_built *a = x, *b = y;
    if (a->shard != b->shard)
        return a->shard < b->shard ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/*
 * Write the kept multi-resolution meshes as shards
 * (neuroglancer_uint64_sharded_v1, chunk id = segment id): each segment's
 * manifest is its chunk, its fragment data stored raw immediately before
 * the manifest (a reader finds the data's start as the manifest's offset
 * less the sum of the fragment sizes). The spec comes from the count and
 * the total bytes (cnx_sharding_choose_ids); shards holding no segment
 * are not written. This one task owns every shard: each is written once.
 */
static int write_multires_sharded(cnx_stage_io *io, mr_keep *keep,
                                  const cnx_sharding_target *target,
                                  cnx_sharding *spec)
{
    uint64_t total = 0, minishard;
    cnx_shard_chunk *chunks = NULL;
    int rc;

    for (size_t i = 0; i < keep->n; i++)
        total += keep->v[i].ilen + keep->v[i].dlen;
    rc = cnx_sharding_choose_ids(keep->n, total, target, spec);
    if (rc == 0 && keep->n > 0 &&
        (chunks = malloc(keep->n * sizeof(*chunks))) == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0, "mesh-manifest: out of memory");
    for (size_t i = 0; i < keep->n && rc == 0; i++)
        cnx_sharding_locate(spec, keep->v[i].id, &keep->v[i].shard, &minishard);
    if (rc == 0 && keep->n > 1)
        qsort(keep->v, keep->n, sizeof(*keep->v), cmp_built);
    for (size_t i = 0; i < keep->n && rc == 0;) {
        size_t j = i;
        uint8_t *bytes = NULL;
        size_t len = 0;
        char name[sizeof(MULTIRES_DIR) + CNX_SHARD_NAME_MAX + 1],
            shard[CNX_SHARD_NAME_MAX];
        for (; j < keep->n && keep->v[j].shard == keep->v[i].shard; j++) {
            const mr_built *b = &keep->v[j];
            chunks[j - i] =
                (cnx_shard_chunk){b->id, b->index, b->ilen, b->data, b->dlen};
        }
        rc = cnx_shard_encode(spec, keep->v[i].shard, chunks, j - i, &bytes,
                              &len);
        cnx_sharding_shard_name(spec, keep->v[i].shard, shard);
        snprintf(name, sizeof(name), MULTIRES_DIR "/%s", shard);
        if (rc == 0)
            rc = cnx_stage_put(io, name, bytes, len);
        if (rc != 0)
            rc = cnx_error_wrap("mesh-manifest: %s", name);
        free(bytes);
        i = j;
    }
    free(chunks);
    return rc;
}

static int run_manifest(void *ctx, const cnx_task *task, cnx_stage_io *io)
{
    const cnx_task_input *in = cnx_task_input_get(task, "index");
    cnx_mesh_mr_params mr;
    cnx_sharding_target target;
    cnx_sharding spec;
    mr_keep keep = {NULL, 0, 0};
    frag_ref *refs = NULL;
    size_t n = 0, cap = 0;
    int sharded = 0, rc = 0;

    (void)ctx;
    if (in == NULL || task->ninputs != 1)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "mesh-manifest: inputs: must be exactly one "
                             "role, \"index\" (the mesh stage's indexes)");
    rc = cnx__mesh_manifest_params(task->parameters, &sharded, &target);
    if (rc == 0)
        rc = multires_params(io, &mr);
    for (size_t k = 0; k < in->nobjects && rc == 0; k++) {
        uint8_t *data = NULL;
        size_t len = 0;
        rc = cnx_stage_get(io, "index", in->objects[k].name, INDEX_MAX, &data,
                           &len);
        if (rc == 0)
            rc = read_index(in->objects[k].name, data, len, &refs, &n, &cap);
        free(data);
    }
    if (rc == 0 && n > 0)
        qsort(refs, n, sizeof(*refs), cmp_ref);
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i + 1;
        while (j < n && refs[j].id == refs[i].id)
            j++;
        rc = write_manifest(io, refs + i, j - i);
        if (rc == 0)
            rc = write_multires(io, &mr, refs + i, j - i,
                                sharded ? &keep : NULL);
        i = j;
    }
    if (rc == 0 && sharded)
        rc = write_multires_sharded(io, &keep, &target, &spec);
    if (rc == 0)
        rc = write_mesh_info(io);
    if (rc == 0)
        rc = write_multires_info(io, sharded ? &spec : NULL);
    if (rc == 0)
        cnx_stage_add_voxels(io, cnx_box_voxels(&task->roi));
    mr_keep_free(&keep);
    free(refs);
    return rc;
}

const cnx_stage cnx_stage_mesh_manifest = {
    .name = "mesh-manifest",
    .kernel_version = CNX_MESH_VERSION,
    .run = run_manifest,
    .ctx = NULL,
    .help = "Writes each segment's Neuroglancer legacy mesh manifest\n"
            "mesh/<id>:0 (one task per region): input role \"index\" lists\n"
            "the mesh stage's mesh_index/<scale>/<chunk> documents; a\n"
            "manifest names the segment's fragments in chunk order; and\n"
            "mesh/info (neuroglancer_legacy_mesh). From the fragments,\n"
            "each segment's multi-resolution Draco mesh\n"
            "mesh_multires/<id>.index and mesh_multires/<id>, and\n"
            "mesh_multires/info (neuroglancer_multilod_draco, unsharded).\n"
            "Parameters: {} or {\"multires_sharded\": true,\n"
            "\"shard_bytes\": N, \"minishard_segments\": M}: the\n"
            "multi-resolution meshes sharded instead (segment id as chunk\n"
            "id, fragment data just before each manifest), as\n"
            "mesh_multires/<shard>.shard with a \"sharding\" member in\n"
            "mesh_multires/info. docs/mesh.md.",
};
