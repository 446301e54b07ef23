/*
 * annotation.c - synapses as a Neuroglancer precomputed annotation
 * collection (cnx/annotation.h, docs/formats.md "Synapse annotations").
 *
 * Every object is a function of the set of synapses and the space only:
 * the synapses are sorted by id first, the relationship indexes list
 * their synapses in id order, a spatial cell lists its synapses in the
 * order of a 64-bit mix of their ids (the spec asks for a random order,
 * so that a prefix is a uniform subsample; a fixed one keeps reruns
 * bit-identical). Coordinates are voxels of the segmentation's scale,
 * a voxel's centre at i + 0.5, exact in float32 below 2^23. Everything is
 * in memory: one object per synapse, per partner id and per cell, ~60
 * bytes per synapse and index entry. Single-threaded, no shared state.
 */
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/annotation.h"
#include "cnx/error.h"
#include "json_int.h"

#define BY_ID "by_id"
#define REL_PRE "pre_synaptic_cell"
#define REL_POST "post_synaptic_cell"
#define SPATIAL "spatial0"

/* Coordinates up to 2^23 are exact in float32 with their + 0.5. */
#define COORD_LIMIT ((int64_t)1 << 23)

/* ---- little-endian encoders --------------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, sizeof(v));
    put_u32(p, v);
}

/* A voxel's centre. */
static float centre(int64_t v)
{
    return (float)((double)v + 0.5);
}

void cnx_annotation_record(const cnx_synapse *s,
                           uint8_t out[CNX_ANNOTATION_RECORD])
{
    uint8_t *p = out;
    assert(s != NULL && out != NULL);
    for (int i = 0; i < 3; i++, p += 4)
        put_f32(p, centre(s->site[i]));
    put_f32(p, (float)s->score);
    p += 4;
    put_u32(p, (uint32_t)s->size);
    p += 4;
    for (int i = 0; i < 3; i++, p += 4)
        put_f32(p, centre(s->pre_site[i]));
    for (int i = 0; i < 3; i++, p += 4)
        put_f32(p, centre(s->post_site[i]));
    assert(p == out + CNX_ANNOTATION_RECORD);
}

int cnx_annotation_encode_by_id(const cnx_synapse *s, uint8_t **out,
                                size_t *len)
{
    const uint64_t rel[2] = {s != NULL ? s->pre_id : 0,
                             s != NULL ? s->post_id : 0};
    size_t n = CNX_ANNOTATION_RECORD;
    uint8_t *buf, *p;
    if (s == NULL || out == NULL || len == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: NULL argument");
    for (int r = 0; r < 2; r++)
        n += 4 + (rel[r] != 0 ? 8 : 0);
    buf = malloc(n);
    if (buf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    cnx_annotation_record(s, buf);
    p = buf + CNX_ANNOTATION_RECORD;
    for (int r = 0; r < 2; r++) {
        put_u32(p, rel[r] != 0 ? 1 : 0);
        p += 4;
        if (rel[r] != 0) {
            put_u64(p, rel[r]);
            p += 8;
        }
    }
    assert(p == buf + n);
    *out = buf;
    *len = n;
    return 0;
}

int cnx_annotation_encode_list(const cnx_synapse *const *items, size_t n,
                               uint8_t **out, size_t *len)
{
    size_t bytes;
    uint8_t *buf, *p;
    if ((items == NULL && n > 0) || out == NULL || len == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: NULL argument");
    if (n > (SIZE_MAX - 8) / (CNX_ANNOTATION_RECORD + 8))
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    bytes = 8 + n * (CNX_ANNOTATION_RECORD + 8);
    buf = malloc(bytes);
    if (buf == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    put_u64(buf, (uint64_t)n);
    p = buf + 8;
    for (size_t i = 0; i < n; i++, p += CNX_ANNOTATION_RECORD)
        cnx_annotation_record(items[i], p);
    for (size_t i = 0; i < n; i++, p += 8)
        put_u64(p, items[i]->id);
    assert(p == buf + bytes);
    *out = buf;
    *len = bytes;
    return 0;
}

/* ---- the grid ----------------------------------------------------------- */

static int space_check(const cnx_annotation_space *sp)
{
    for (int i = 0; i < 3; i++) {
        if (!(sp->resolution[i] > 0.0 && sp->resolution[i] < 1e300))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "annotations: resolution must be positive");
        if (sp->upper[i] <= sp->lower[i] || sp->lower[i] < 0 ||
            sp->upper[i] > COORD_LIMIT)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "annotations: bounds [%" PRId64 ", %" PRId64
                                 ") on axis %d: must be non-empty within "
                                 "[0, 2^23]",
                                 sp->lower[i], sp->upper[i], i);
    }
    return 0;
}

int cnx_annotation_grid(const cnx_annotation_space *sp, int64_t grid[3])
{
    int64_t cells = 1;
    int rc;
    if (sp == NULL || grid == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: NULL argument");
    rc = space_check(sp);
    if (rc != 0)
        return rc;
    for (int i = 0; i < 3; i++) {
        int64_t extent = sp->upper[i] - sp->lower[i];
        grid[i] = (extent + CNX_ANNOTATION_CELL - 1) / CNX_ANNOTATION_CELL;
        cells *= grid[i];
    }
    if (cells > CNX_ANNOTATION_MAX_CELLS)
        return cnx_error_set(CNX_ERANGE, 0,
                             "annotations: %" PRId64 " spatial cells, over "
                             "%d (unsharded)",
                             cells, CNX_ANNOTATION_MAX_CELLS);
    return 0;
}

/* The cell of a point at voxel v + 0.5: floor((v + 0.5 - lo) * g / extent),
 * in integers. */
static int64_t cell_of(int64_t v, int64_t lo, int64_t hi, int64_t g)
{
    int64_t c = ((2 * (v - lo) + 1) * g) / (2 * (hi - lo));
    assert(c >= 0 && c < g);
    return c;
}

/* ---- building ----------------------------------------------------------- */

static int by_id_cmp(const void *a, const void *b)
{
    const cnx_synapse *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* splitmix64's finaliser: a fixed pseudo-random order. */
static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* An entry of an index: a key (segment id, cell number or hash) and a
 * synapse, sorted by key then by synapse id. */
typedef struct entry {
    uint64_t key, order;
    const cnx_synapse *s;
} entry;

static int entry_cmp(const void *a, const void *b)
{
    const entry *x = a, *y = b;
    uint64_t a_id = x->s != NULL ? x->s->id : 0;
    uint64_t b_id = y->s != NULL ? y->s->id : 0;
    if (x->key != y->key)
        return (x->key > y->key) - (x->key < y->key);
    if (x->order != y->order)
        return (x->order > y->order) - (x->order < y->order);
    return (a_id > b_id) - (a_id < b_id);
}

static int add_object(cnx_annotation_objects *o, size_t cap, char *name,
                      uint8_t *data, size_t len)
{
    cnx_annotation_object *it;
    assert(o->count < cap);
    (void)cap;
    it = &o->items[o->count++];
    snprintf(it->name, sizeof(it->name), "%s", name);
    it->data = data;
    it->len = len;
    return 0;
}

/* One object per run of equal keys in e (sorted): rel_<dir>/<key>, or
 * <dir>/<i>_<j>_<k> for cell number key of grid. */
static int add_runs(cnx_annotation_objects *o, size_t cap, const entry *e,
                    size_t n, const char *dir, const int64_t *grid)
{
    const cnx_synapse **items = NULL;
    int rc = 0;
    if (n > 0) {
        items = malloc(n * sizeof(*items));
        if (items == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    }
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i, len = 0;
        uint8_t *data = NULL;
        char name[64];
        while (j < n && e[j].key == e[i].key) {
            items[j - i] = e[j].s;
            j++;
        }
        if (grid != NULL) {
            uint64_t c = e[i].key;
            snprintf(name, sizeof(name), "%s/%" PRIu64 "_%" PRIu64 "_%" PRIu64,
                     dir, c % (uint64_t)grid[0],
                     c / (uint64_t)grid[0] % (uint64_t)grid[1],
                     c / (uint64_t)grid[0] / (uint64_t)grid[1]);
        } else {
            snprintf(name, sizeof(name), "rel_%s/%" PRIu64, dir, e[i].key);
        }
        rc =
            cnx_annotation_encode_list(e[i].s != NULL ? items : NULL,
                                       e[i].s != NULL ? j - i : 0, &data, &len);
        if (rc == 0)
            add_object(o, cap, name, data, len);
        i = j;
    }
    free(items);
    return rc;
}

static json_t *number(double v)
{
    if (v > -9007199254740992.0 && v < 9007199254740992.0 &&
        v == (double)(int64_t)v)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static json_t *property(const char *id, const char *type, const char *desc)
{
    return json_pack("{ss ss ss}", "id", id, "type", type, "description", desc);
}

static json_t *sharding_json(const cnx_sharding *sh)
{
    return json_pack(
        "{ss si si si ss ss ss}", "@type", "neuroglancer_uint64_sharded_v1",
        "preshift_bits", sh->preshift_bits, "minishard_bits",
        sh->minishard_bits, "shard_bits", sh->shard_bits, "hash",
        sh->hash == CNX_SHARD_HASH_MURMUR3 ? "murmurhash3_x86_128" : "identity",
        "minishard_index_encoding",
        sh->minishard_index_encoding == CNX_SHARD_ENC_GZIP ? "gzip" : "raw",
        "data_encoding",
        sh->data_encoding == CNX_SHARD_ENC_GZIP ? "gzip" : "raw");
}

/* An index's {"key"} (and "sharding" when specs is not NULL) member. */
static json_t *index_json(json_t *obj, const char *key,
                          const cnx_sharding *spec)
{
    if (obj == NULL)
        return NULL;
    if (json_object_set_new(obj, "key", json_string(key)) != 0 ||
        (spec != NULL &&
         json_object_set_new(obj, "sharding", sharding_json(spec)) != 0)) {
        json_decref(obj);
        return NULL;
    }
    return obj;
}

/* specs: by_id, rel pre, rel post, spatial0; NULL when unsharded. */
static int info_json(const cnx_annotation_space *sp, const int64_t grid[3],
                     int64_t limit, const cnx_sharding *specs, char **out)
{
    static const char *const axis[3] = {"x", "y", "z"};
    json_t *info = json_object(), *dims = json_object(), *lo = json_array(),
           *hi = json_array(), *props, *shape = json_array(),
           *size = json_array();
    static const char *const names[6] = {"pre_x",  "pre_y",  "pre_z",
                                         "post_x", "post_y", "post_z"};
    int bad = info == NULL || dims == NULL || lo == NULL || hi == NULL ||
              shape == NULL || size == NULL;
    for (int i = 0; i < 3 && !bad; i++) {
        bad |= json_object_set_new(
            dims, axis[i], json_pack("[os]", number(sp->resolution[i]), "nm"));
        bad |= json_array_append_new(lo, json_integer(sp->lower[i]));
        bad |= json_array_append_new(hi, json_integer(sp->upper[i]));
        bad |= json_array_append_new(shape, json_integer(grid[i]));
        bad |= json_array_append_new(
            size,
            number((double)(sp->upper[i] - sp->lower[i]) / (double)grid[i]));
    }
    props = json_pack("[oo]",
                      property("score", "float32",
                               "mean cleft value / 255 x the fraction of PSD "
                               "voxels in the post-synaptic segment"),
                      property("size", "uint32", "cleft voxels"));
    bad |= props == NULL;
    for (int i = 0; i < 6 && !bad; i++)
        bad |= json_array_append_new(
            props, property(names[i], "float32",
                            i < 3 ? "a point inside the pre-synaptic segment"
                                  : "a point inside the post-synaptic "
                                    "segment"));
    if (!bad) {
        bad |= json_object_set_new(info, "@type",
                                   json_string("neuroglancer_annotations_v1"));
        bad |=
            json_object_set_new(info, "annotation_type", json_string("POINT"));
        bad |= json_object_set(info, "dimensions", dims);
        bad |= json_object_set(info, "lower_bound", lo);
        bad |= json_object_set(info, "upper_bound", hi);
        bad |= json_object_set(info, "properties", props);
        bad |= json_object_set_new(
            info, "relationships",
            json_pack("[oo]",
                      index_json(json_pack("{ss}", "id", REL_PRE),
                                 "rel_" REL_PRE, specs ? &specs[1] : NULL),
                      index_json(json_pack("{ss}", "id", REL_POST),
                                 "rel_" REL_POST, specs ? &specs[2] : NULL)));
        bad |= json_object_set_new(
            info, "by_id",
            index_json(json_object(), BY_ID, specs ? &specs[0] : NULL));
        bad |= json_object_set_new(
            info, "spatial",
            json_pack("[o]", index_json(json_pack("{sO sO sI}", "grid_shape",
                                                  shape, "chunk_size", size,
                                                  "limit", (json_int_t)limit),
                                        SPATIAL, specs ? &specs[3] : NULL)));
    }
    *out = bad ? NULL : cnx__json_canonical(info);
    json_decref(info);
    json_decref(dims);
    json_decref(lo);
    json_decref(hi);
    json_decref(props);
    json_decref(shape);
    json_decref(size);
    if (*out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    return 0;
}

static int inside(const cnx_annotation_space *sp, const int64_t v[3])
{
    for (int i = 0; i < 3; i++)
        if (v[i] < sp->lower[i] || v[i] >= sp->upper[i])
            return 0;
    return 1;
}

/* Each synapse in range: its points inside the space, size and score
 * representable. sorted is in id order. */
static int check_synapses(const cnx_synapse *sorted, size_t n,
                          const cnx_annotation_space *sp)
{
    for (size_t i = 0; i < n; i++) {
        const cnx_synapse *s = &sorted[i];
        if (i > 0 && s->id == sorted[i - 1].id)
            return cnx_error_set(CNX_ECORRUPT, 0,
                                 "annotations: synapse %" PRIu64 " given "
                                 "twice",
                                 s->id);
        if (!inside(sp, s->site) || !inside(sp, s->pre_site) ||
            !inside(sp, s->post_site))
            return cnx_error_set(CNX_ERANGE, 0,
                                 "annotations: synapse %" PRIu64 ": a site "
                                 "lies outside the layer's bounds",
                                 s->id);
        if (s->size < 0 || s->size > (int64_t)UINT32_MAX)
            return cnx_error_set(CNX_ERANGE, 0,
                                 "annotations: synapse %" PRIu64 ": size "
                                 "%" PRId64 " outside [0, 2^32)",
                                 s->id, s->size);
        if (!(s->score >= 0.0 && s->score <= 1.0))
            return cnx_error_set(CNX_ERANGE, 0,
                                 "annotations: synapse %" PRIu64 ": score "
                                 "outside [0, 1]",
                                 s->id);
    }
    return 0;
}

/* ---- sharded indexes ---------------------------------------------------- */

static int ceil_log2(uint64_t v)
{
    int b = 0;
    while (b < 64 && ((uint64_t)1 << b) < v)
        b++;
    return b;
}

void cnx_annotation_sharding(uint64_t count, uint64_t bytes, cnx_sharding *out)
{
    uint64_t minishards = (count + CNX_ANNOTATION_MINISHARD_CHUNKS - 1) /
                          CNX_ANNOTATION_MINISHARD_CHUNKS;
    uint64_t shards =
        (bytes + CNX_ANNOTATION_SHARD_BYTES - 1) / CNX_ANNOTATION_SHARD_BYTES;
    int m = ceil_log2(minishards), sb = ceil_log2(shards);
    if (m > CNX_SHARD_MAX_MINISHARD_BITS + 20)
        m = CNX_SHARD_MAX_MINISHARD_BITS + 20;
    if (sb > m)
        sb = m;
    out->preshift_bits = 0;
    out->shard_bits = sb;
    out->minishard_bits = m - sb;
    out->hash = CNX_SHARD_HASH_MURMUR3;
    out->minishard_index_encoding = CNX_SHARD_ENC_GZIP;
    out->data_encoding = CNX_SHARD_ENC_GZIP;
}

/* The chunk id of an unsharded object's name (after its directory): a
 * decimal id, or "<i>_<j>_<k>" for a spatial cell (Morton code). */
static int chunk_id_of(const char *name, const int64_t *grid, uint64_t *id)
{
    const char *leaf = strchr(name, '/');
    if (leaf == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: object %s", name);
    leaf++;
    if (grid != NULL) {
        uint64_t pos[3], g[3];
        if (sscanf(leaf, "%" SCNu64 "_%" SCNu64 "_%" SCNu64, &pos[0], &pos[1],
                   &pos[2]) != 3)
            return cnx_error_set(CNX_EINVAL, 0, "annotations: object %s", name);
        for (int i = 0; i < 3; i++)
            g[i] = (uint64_t)grid[i];
        return cnx_sharding_morton(pos, g, id);
    }
    *id = strtoull(leaf, NULL, 10);
    return 0;
}

typedef struct keyed {
    uint64_t shard;
    cnx_shard_chunk chunk;
} keyed;

static int keyed_cmp(const void *a, const void *b)
{
    const keyed *x = a, *y = b;
    if (x->shard != y->shard)
        return (x->shard > y->shard) - (x->shard < y->shard);
    return (x->chunk.chunk_id > y->chunk.chunk_id) -
           (x->chunk.chunk_id < y->chunk.chunk_id);
}

/* Replace objects [a, b) of in (one index, directory dir) by its shard
 * files, appended to out; spec is chosen from them. */
static int shard_index(const cnx_annotation_objects *in, size_t a, size_t b,
                       const char *dir, const int64_t *grid, cnx_sharding *spec,
                       cnx_annotation_objects *out, size_t cap)
{
    size_t n = b - a;
    uint64_t bytes = 0;
    keyed *k = malloc((n ? n : 1) * sizeof(*k));
    cnx_shard_chunk *chunks = malloc((n ? n : 1) * sizeof(*chunks));
    int rc = 0;
    if (k == NULL || chunks == NULL) {
        free(k);
        free(chunks);
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    }
    for (size_t i = 0; i < n; i++)
        bytes += in->items[a + i].len;
    cnx_annotation_sharding((uint64_t)n, bytes, spec);
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint64_t id = 0, minishard;
        rc = chunk_id_of(in->items[a + i].name, grid, &id);
        k[i].chunk = (cnx_shard_chunk){.chunk_id = id,
                                       .data = in->items[a + i].data,
                                       .len = in->items[a + i].len};
        cnx_sharding_locate(spec, id, &k[i].shard, &minishard);
    }
    if (rc == 0)
        qsort(k, n, sizeof(*k), keyed_cmp);
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i, len = 0;
        uint8_t *data = NULL;
        char shard[CNX_SHARD_NAME_MAX], name[64];
        while (j < n && k[j].shard == k[i].shard) {
            chunks[j - i] = k[j].chunk;
            j++;
        }
        rc = cnx_shard_encode(spec, k[i].shard, chunks, j - i, &data, &len);
        if (rc == 0) {
            cnx_sharding_shard_name(spec, k[i].shard, shard);
            snprintf(name, sizeof(name), "%s/%s", dir, shard);
            add_object(out, cap, name, data, len);
        }
        i = j;
    }
    free(chunks);
    free(k);
    return rc;
}

int cnx_annotation_build(const cnx_synapse *s, size_t n,
                         const cnx_annotation_space *sp,
                         cnx_annotation_objects *out)
{
    return cnx_annotation_build_layout(s, n, sp, CNX_ANNOTATION_AUTO, out);
}

int cnx_annotation_build_layout(const cnx_synapse *s, size_t n,
                                const cnx_annotation_space *sp,
                                cnx_annotation_layout layout,
                                cnx_annotation_objects *out)
{
    static const char *const dirs[4] = {BY_ID, "rel_" REL_PRE, "rel_" REL_POST,
                                        SPATIAL};
    cnx_annotation_objects o = {NULL, 0}, sh = {NULL, 0};
    cnx_synapse *sorted = NULL;
    entry *e = NULL, *cells = NULL;
    cnx_sharding specs[4];
    size_t cap, nc = 0, bound[5];
    int64_t grid[3], limit = 1;
    char *info = NULL;
    int sharded, rc;

    if ((s == NULL && n > 0) || sp == NULL || out == NULL)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: NULL argument");
    if (layout != CNX_ANNOTATION_AUTO && layout != CNX_ANNOTATION_UNSHARDED &&
        layout != CNX_ANNOTATION_SHARDED)
        return cnx_error_set(CNX_EINVAL, 0, "annotations: layout %d",
                             (int)layout);
    sharded = layout == CNX_ANNOTATION_SHARDED ||
              (layout == CNX_ANNOTATION_AUTO && n >= CNX_ANNOTATION_SHARD_MIN);
    rc = cnx_annotation_grid(sp, grid);
    if (rc != 0)
        return rc;
    if (n > SIZE_MAX / 8 / sizeof(entry))
        return cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
    /* info, by_id, at most n ids per relationship, at most n cells */
    cap = 1 + 4 * n;
    sorted = malloc((n ? n : 1) * sizeof(*sorted));
    e = malloc((n ? n : 1) * sizeof(*e));
    cells = malloc((n ? n : 1) * sizeof(*cells));
    o.items = calloc(cap, sizeof(*o.items));
    if (sorted == NULL || e == NULL || cells == NULL || o.items == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
        goto done;
    }
    if (n > 0)
        memcpy(sorted, s, n * sizeof(*s));
    qsort(sorted, n, sizeof(*sorted), by_id_cmp);
    rc = check_synapses(sorted, n, sp);
    if (rc != 0)
        goto done;

    /* The spatial index first (its limit goes into the info): one entry
     * per synapse in its cell, in a fixed pseudo-random order. Cells with
     * no synapse are not written. */
    for (size_t i = 0; i < n; i++) {
        const int64_t *v = sorted[i].site;
        uint64_t c = 0;
        for (int a = 2; a >= 0; a--)
            c = c * (uint64_t)grid[a] +
                (uint64_t)cell_of(v[a], sp->lower[a], sp->upper[a], grid[a]);
        cells[nc++] = (entry){c, mix(sorted[i].id) | 1, &sorted[i]};
    }
    qsort(cells, nc, sizeof(*cells), entry_cmp);
    for (size_t i = 0, run = 1; i < nc; i++) {
        run = (i > 0 && cells[i].key == cells[i - 1].key) ? run + 1 : 1;
        if ((int64_t)run > limit)
            limit = (int64_t)run;
    }
    o.count = 1; /* the info goes first, once the indexes are known */
    bound[0] = o.count;
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint8_t *data = NULL;
        size_t len = 0;
        char name[64];
        snprintf(name, sizeof(name), BY_ID "/%" PRIu64, sorted[i].id);
        rc = cnx_annotation_encode_by_id(&sorted[i], &data, &len);
        if (rc == 0)
            add_object(&o, cap, name, data, len);
    }
    for (int r = 0; r < 2 && rc == 0; r++) {
        size_t m = 0;
        bound[1 + r] = o.count;
        for (size_t i = 0; i < n; i++) {
            uint64_t id = r == 0 ? sorted[i].pre_id : sorted[i].post_id;
            if (id != 0)
                e[m++] = (entry){id, 0, &sorted[i]};
        }
        qsort(e, m, sizeof(*e), entry_cmp);
        rc = add_runs(&o, cap, e, m, r == 0 ? REL_PRE : REL_POST, NULL);
    }
    bound[3] = o.count;
    if (rc == 0)
        rc = add_runs(&o, cap, cells, nc, SPATIAL, grid);
    bound[4] = o.count;
    if (rc == 0 && sharded) {
        /* every index as its shard files: at most one per object */
        sh.items = calloc(cap, sizeof(*sh.items));
        if (sh.items == NULL)
            rc = cnx_error_set(CNX_ENOMEM, 0, "annotations: out of memory");
        sh.count = 1;
        for (int k = 0; k < 4 && rc == 0; k++)
            rc = shard_index(&o, bound[k], bound[k + 1], dirs[k],
                             k == 3 ? grid : NULL, &specs[k], &sh, cap);
        if (rc == 0) {
            cnx_annotation_objects_free(&o);
            o = sh;
            sh.items = NULL;
            sh.count = 0;
        }
    }
    if (rc == 0)
        rc = info_json(sp, grid, limit, sharded ? specs : NULL, &info);
    if (rc == 0) {
        snprintf(o.items[0].name, sizeof(o.items[0].name), "info");
        o.items[0].data = (uint8_t *)info;
        o.items[0].len = strlen(info);
        info = NULL;
    }
done:
    cnx_annotation_objects_free(&sh);
    free(info);
    free(cells);
    free(e);
    free(sorted);
    if (rc != 0) {
        cnx_annotation_objects_free(&o);
        return rc;
    }
    *out = o;
    return 0;
}

void cnx_annotation_objects_free(cnx_annotation_objects *objs)
{
    if (objs == NULL)
        return;
    for (size_t i = 0; i < objs->count; i++)
        free(objs->items[i].data);
    free(objs->items);
    objs->items = NULL;
    objs->count = 0;
}
