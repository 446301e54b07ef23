/*
 * tileset.c - parse, check and record tile sets ("cnx.tileset/1").
 *
 * Checking runs in two steps: the document alone (schema, safe names,
 * uniqueness, plausible nominal overlaps; no I/O), then the files (each is
 * read, hashed and decoded in full, so a truncated tile is caught at the
 * door rather than by a montage task). Recording copies the very bytes that
 * were checked -- each file is re-hashed and compared with the digest the
 * check recorded -- into the store write-once, and writes tiles.json last.
 * Load: up to ~10^5 tiles (a 16 MiB document); the overlap check is
 * quadratic per section, which stays well under a second at 10^4 tiles per
 * section. Not thread-safe per tile set; distinct tile sets are independent.
 */
#include "cnx/tileset.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnx/error.h"
#include "cnx/imageio.h"
#include "cnx/store.h"
#include "json_int.h"

/* Nominal positions are bounded so that overlap arithmetic cannot overflow. */
#define TILE_POS_MAX ((int64_t)1 << 40)
#define TILE_Z_MAX ((int64_t)INT32_MAX)

void cnx_tileset_free(cnx_tileset *ts)
{
    if (ts == NULL)
        return;
    for (size_t s = 0; s < ts->nsections; s++) {
        cnx_tile_section *sec = &ts->sections[s];
        for (size_t t = 0; t < sec->ntiles; t++) {
            free(sec->tiles[t].id);
            free(sec->tiles[t].file);
        }
        free(sec->tiles);
    }
    free(ts->sections);
    free(ts);
}

/* ------------------------------------------------------------------ */
/* Parsing                                                             */

static int oom(const char *what)
{
    return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", what);
}

static int parse_tile(cnx_tile *tile, const json_t *obj, const char *where)
{
    static const char *const keys[] = {"id",    "file",   "x",      "y",
                                       "width", "height", "sha256", NULL};
    static const char *const required[] = {"id",    "file",   "x", "y",
                                           "width", "height", NULL};
    const json_t *v;
    const char *text;
    char stored[1100];
    int rc;

    if (!json_is_object(obj))
        return cnx_error_set(CNX_ESCHEMA, 0, "%s: must be an object", where);
    rc = cnx__json_only_keys(obj, keys, CNX_ESCHEMA, where);
    if (rc != 0)
        return rc;
    for (const char *const *k = required; *k != NULL; k++)
        if (json_object_get(obj, *k) == NULL)
            return cnx_error_set(CNX_ESCHEMA, 0, "%s: missing key '%s'", where,
                                 *k);

    v = json_object_get(obj, "id");
    text = json_string_value(v);
    if (text == NULL || text[0] == '\0' || strlen(text) > CNX_TILESET_MAX_ID)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.id: must be a string of 1 to %d bytes", where,
                             CNX_TILESET_MAX_ID);
    for (const char *p = text; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "%s.id: control character in '%.64s'", where,
                                 text);
    tile->id = strdup(text);
    if (tile->id == NULL)
        return oom(where);

    v = json_object_get(obj, "file");
    text = json_string_value(v);
    if (text == NULL)
        return cnx_error_set(CNX_ESCHEMA, 0, "%s.file: must be a string",
                             where);
    rc = cnx_store_check_name(text);
    if (rc == 0) {
        /* The store name it will be recorded under must be valid too. */
        snprintf(stored, sizeof(stored), "%s/%s", CNX_TILESET_TILE_DIR, text);
        rc = cnx_store_check_name(stored);
    }
    if (rc != 0)
        return cnx_error_wrap("%s.file", where);
    tile->file = strdup(text);
    if (tile->file == NULL)
        return oom(where);

    if (!cnx__json_int_in(json_object_get(obj, "x"), -TILE_POS_MAX,
                          TILE_POS_MAX) ||
        !cnx__json_int_in(json_object_get(obj, "y"), -TILE_POS_MAX,
                          TILE_POS_MAX))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: x and y must be integers in [-2^40, 2^40]",
                             where);
    tile->x = json_integer_value(json_object_get(obj, "x"));
    tile->y = json_integer_value(json_object_get(obj, "y"));
    if (!cnx__json_int_in(json_object_get(obj, "width"), 1,
                          CNX_IMAGE_MAX_SIDE) ||
        !cnx__json_int_in(json_object_get(obj, "height"), 1,
                          CNX_IMAGE_MAX_SIDE))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: width and height must be integers in "
                             "[1, %d]",
                             where, CNX_IMAGE_MAX_SIDE);
    tile->width = json_integer_value(json_object_get(obj, "width"));
    tile->height = json_integer_value(json_object_get(obj, "height"));

    v = json_object_get(obj, "sha256");
    if (v != NULL) {
        text = json_string_value(v);
        if (text == NULL || !cnx_digest_valid(text))
            return cnx_error_set(CNX_ESCHEMA, 0,
                                 "%s.sha256: must be \"sha256:\" and 64 "
                                 "lowercase hex digits",
                                 where);
        memcpy(tile->sha256, text, strlen(text) + 1);
    }
    return 0;
}

static int parse_section(cnx_tile_section *sec, const json_t *obj,
                         const char *what, size_t s)
{
    static const char *const keys[] = {"z", "tiles", NULL};
    char where[160], twhere[200];
    const json_t *tiles;
    int rc;

    snprintf(where, sizeof(where), "%s: sections[%zu]", what, s);
    if (!json_is_object(obj))
        return cnx_error_set(CNX_ESCHEMA, 0, "%s: must be an object", where);
    rc = cnx__json_only_keys(obj, keys, CNX_ESCHEMA, where);
    if (rc != 0)
        return rc;
    if (!cnx__json_int_in(json_object_get(obj, "z"), 0, TILE_Z_MAX))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.z: must be an integer in [0, %lld]", where,
                             (long long)TILE_Z_MAX);
    sec->z = json_integer_value(json_object_get(obj, "z"));
    tiles = json_object_get(obj, "tiles");
    if (!json_is_array(tiles) || json_array_size(tiles) == 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s.tiles: must be a non-empty array", where);
    sec->tiles = calloc(json_array_size(tiles), sizeof(*sec->tiles));
    if (sec->tiles == NULL)
        return oom(what);
    for (size_t t = 0; t < json_array_size(tiles); t++) {
        sec->ntiles = t + 1;
        snprintf(twhere, sizeof(twhere), "%s.tiles[%zu]", where, t);
        rc = parse_tile(&sec->tiles[t], json_array_get(tiles, t), twhere);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* A string or number of the document, with where it was found. */
typedef struct place {
    const char *key;
    int64_t z;
    size_t s;
    size_t t;
} place;

static int place_cmp_key(const void *a, const void *b)
{
    const place *pa = a, *pb = b;
    int c = strcmp(pa->key, pb->key);
    if (c != 0)
        return c;
    if (pa->s != pb->s)
        return pa->s < pb->s ? -1 : 1;
    return pa->t < pb->t ? -1 : pa->t > pb->t;
}

static int place_cmp_z(const void *a, const void *b)
{
    const place *pa = a, *pb = b;
    if (pa->z != pb->z)
        return pa->z < pb->z ? -1 : 1;
    return pa->s < pb->s ? -1 : pa->s > pb->s;
}

/* Ids, files (each across the whole set) and z must not repeat. */
static int check_unique(const cnx_tileset *ts, const char *what)
{
    size_t n = 0, k = 0;
    place *p;
    int rc = 0;

    for (size_t s = 0; s < ts->nsections; s++)
        n += ts->sections[s].ntiles;
    p = calloc(n > ts->nsections ? n : ts->nsections, sizeof(*p));
    if (p == NULL)
        return oom(what);

    for (int field = 0; field < 2 && rc == 0; field++) {
        k = 0;
        for (size_t s = 0; s < ts->nsections; s++)
            for (size_t t = 0; t < ts->sections[s].ntiles; t++) {
                const cnx_tile *tile = &ts->sections[s].tiles[t];
                p[k].key = field == 0 ? tile->id : tile->file;
                p[k].s = s;
                p[k].t = t;
                k++;
            }
        qsort(p, n, sizeof(*p), place_cmp_key);
        for (size_t i = 1; i < n; i++) {
            if (strcmp(p[i].key, p[i - 1].key) == 0) {
                rc = cnx_error_set(
                    CNX_EINVAL, 0,
                    "%s: sections[%zu].tiles[%zu]: %s '%.100s' repeats "
                    "sections[%zu].tiles[%zu]",
                    what, p[i].s, p[i].t,
                    field == 0 ? "duplicate id" : "duplicate file", p[i].key,
                    p[i - 1].s, p[i - 1].t);
                break;
            }
        }
    }
    if (rc == 0) {
        for (size_t s = 0; s < ts->nsections; s++) {
            p[s].z = ts->sections[s].z;
            p[s].s = s;
        }
        qsort(p, ts->nsections, sizeof(*p), place_cmp_z);
        for (size_t i = 1; i < ts->nsections; i++) {
            if (p[i].z == p[i - 1].z) {
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "%s: sections[%zu]: duplicate z %lld "
                                   "(also sections[%zu])",
                                   what, p[i].s, (long long)p[i].z, p[i - 1].s);
                break;
            }
        }
    }
    free(p);
    return rc;
}

enum { PAIR_APART = 0, PAIR_PLAUSIBLE = 1, PAIR_COINCIDE = 2 };

static int64_t i64min(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t i64max(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/*
 * How two tiles of a section relate by nominal position, each position
 * possibly off by e pixels. The overlap axis is the one with the smaller
 * overlap fraction (side-by-side tiles overlap fully on the other); the
 * overlap there must be able to lie in [1, 90% of the smaller side].
 */
static int pair_overlap(const cnx_tile *a, const cnx_tile *b, int64_t e)
{
    int64_t ox = i64min(a->x + a->width, b->x + b->width) - i64max(a->x, b->x);
    int64_t oy =
        i64min(a->y + a->height, b->y + b->height) - i64max(a->y, b->y);
    int64_t sx = i64min(a->width, b->width);
    int64_t sy = i64min(a->height, b->height);
    int64_t o, side;

    if (ox + e < 1 || oy + e < 1)
        return PAIR_APART;
    /* ox/sx <= oy/sy, in integers (|o| <= 2^41, side <= 2^16) */
    if (ox * sy <= oy * sx) {
        o = ox;
        side = sx;
    } else {
        o = oy;
        side = sy;
    }
    if (10 * (o - e) > 9 * side)
        return PAIR_COINCIDE;
    return PAIR_PLAUSIBLE;
}

static int check_overlaps(const cnx_tileset *ts, const char *what,
                          int64_t max_error)
{
    for (size_t s = 0; s < ts->nsections; s++) {
        const cnx_tile_section *sec = &ts->sections[s];
        if (sec->ntiles < 2)
            continue;
        for (size_t i = 0; i < sec->ntiles; i++) {
            const cnx_tile *a = &sec->tiles[i];
            int found = 0;
            for (size_t j = 0; j < sec->ntiles; j++) {
                int rel;
                if (j == i)
                    continue;
                rel = pair_overlap(a, &sec->tiles[j], max_error);
                if (rel == PAIR_COINCIDE)
                    return cnx_error_set(
                        CNX_EINVAL, 0,
                        "%s: sections[%zu] (z %lld): tiles '%.100s' and "
                        "'%.100s' overlap by more than 90%% of a side on "
                        "both axes",
                        what, s, (long long)sec->z, a->id, sec->tiles[j].id);
                if (rel == PAIR_PLAUSIBLE)
                    found = 1;
            }
            if (!found)
                return cnx_error_set(
                    CNX_EINVAL, 0,
                    "%s: sections[%zu] (z %lld): tile '%.100s' at (%lld, "
                    "%lld), %lldx%lld, overlaps no other tile of its "
                    "section by 1 px to 90%% of a side (nominal positions "
                    "+/- %lld px)",
                    what, s, (long long)sec->z, a->id, (long long)a->x,
                    (long long)a->y, (long long)a->width, (long long)a->height,
                    (long long)max_error);
        }
    }
    return 0;
}

static int parse_doc(cnx_tileset *ts, const json_t *root, const char *what,
                     int64_t max_error)
{
    static const char *const keys[] = {"format", "resolution", "dtype",
                                       "sections", NULL};
    const json_t *v, *sections;
    const char *text;
    int rc;

    if (!json_is_object(root))
        return cnx_error_set(CNX_ESCHEMA, 0, "%s: must be a JSON object", what);
    rc = cnx__json_only_keys(root, keys, CNX_ESCHEMA, what);
    if (rc != 0)
        return rc;
    for (const char *const *k = keys; *k != NULL; k++)
        if (json_object_get(root, *k) == NULL)
            return cnx_error_set(CNX_ESCHEMA, 0, "%s: missing key '%s'", what,
                                 *k);
    text = json_string_value(json_object_get(root, "format"));
    if (text == NULL || strcmp(text, CNX_TILESET_FORMAT) != 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: format: expected \"%s\", got %s%.64s%s", what,
                             CNX_TILESET_FORMAT, text ? "\"" : "",
                             text ? text : "a non-string", text ? "\"" : "");

    v = json_object_get(root, "resolution");
    if (!json_is_array(v) || json_array_size(v) != 3)
        goto bad_resolution;
    for (size_t i = 0; i < 3; i++) {
        const json_t *r = json_array_get(v, i);
        if (!json_is_number(r) || !(json_number_value(r) > 0.0) ||
            !isfinite(json_number_value(r)))
            goto bad_resolution;
        ts->resolution[i] = json_number_value(r);
    }

    text = json_string_value(json_object_get(root, "dtype"));
    if (text != NULL && strcmp(text, "uint8") == 0)
        ts->dtype = CNX_DT_UINT8;
    else if (text != NULL && strcmp(text, "uint16") == 0)
        ts->dtype = CNX_DT_UINT16;
    else
        return cnx_error_set(
            CNX_ESCHEMA, 0, "%s: dtype: must be \"uint8\" or \"uint16\"", what);

    sections = json_object_get(root, "sections");
    if (!json_is_array(sections) || json_array_size(sections) == 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: sections: must be a non-empty array", what);
    ts->sections = calloc(json_array_size(sections), sizeof(*ts->sections));
    if (ts->sections == NULL)
        return oom(what);
    for (size_t s = 0; s < json_array_size(sections); s++) {
        ts->nsections = s + 1;
        rc = parse_section(&ts->sections[s], json_array_get(sections, s), what,
                           s);
        if (rc != 0)
            return rc;
    }
    rc = check_unique(ts, what);
    if (rc != 0)
        return rc;
    return check_overlaps(ts, what, max_error);

bad_resolution:
    return cnx_error_set(CNX_ESCHEMA, 0,
                         "%s: resolution: must be an array of 3 positive "
                         "numbers (nm)",
                         what);
}

int cnx_tileset_parse(cnx_tileset **out, const char *json, size_t len,
                      const char *what, int64_t max_error)
{
    json_t *root = NULL;
    cnx_tileset *ts;
    int rc;

    *out = NULL;
    if (max_error < 0 || max_error > CNX_IMAGE_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "%s: max_error %lld is outside [0, %d]", what,
                             (long long)max_error, CNX_IMAGE_MAX_SIDE);
    if (len > CNX_TILESET_MAX_JSON)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "%s: %zu bytes, over the %zu byte limit", what,
                             len, CNX_TILESET_MAX_JSON);
    rc = cnx__json_parse(&root, json, len, CNX_ESCHEMA, what);
    if (rc != 0)
        return rc;
    ts = calloc(1, sizeof(*ts));
    if (ts == NULL) {
        json_decref(root);
        return oom(what);
    }
    rc = parse_doc(ts, root, what, max_error);
    json_decref(root);
    if (rc != 0) {
        cnx_tileset_free(ts);
        return rc;
    }
    *out = ts;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Files                                                               */

/* Read a whole regular file, at most max bytes. */
static int read_whole(const char *path, size_t max, uint8_t **data, size_t *len)
{
    struct stat st;
    uint8_t *buf;
    size_t got = 0;
    int fd;

    *data = NULL;
    *len = 0;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return cnx_error_set(CNX_ENOTFOUND, 0, "%s: no such file", path);
        return cnx_error_set(CNX_EIO, err != EACCES, "%s: cannot open: %s",
                             path, strerror(err));
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cnx_error_set(CNX_EINVAL, 0, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max) {
        close(fd);
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "%s: %lld bytes, over the %zu byte limit", path,
                             (long long)st.st_size, max);
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        close(fd);
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", path);
    }
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            int err = errno;
            free(buf);
            close(fd);
            if (n == 0)
                return cnx_error_set(CNX_EIO, 1,
                                     "%s: file shrank while being read", path);
            return cnx_error_set(CNX_EIO, 1, "%s: read failed: %s", path,
                                 strerror(err));
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    *data = buf;
    *len = got;
    return 0;
}

static int tile_path(char *buf, size_t n, const char *base_dir,
                     const char *file)
{
    int len = snprintf(buf, n, "%s/%s", base_dir, file);
    if (len < 0 || (size_t)len >= n)
        return cnx_error_set(CNX_ENAME, 0, "%s/%s: path too long", base_dir,
                             file);
    return 0;
}

static int check_tile(cnx_tile *tile, int bits, const char *base_dir)
{
    char path[PATH_MAX];
    char actual[CNX_DIGEST_LEN];
    cnx_image *img = NULL;
    uint8_t *data;
    size_t len;
    int rc;

    rc = tile_path(path, sizeof(path), base_dir, tile->file);
    if (rc != 0)
        return rc;
    rc = read_whole(path, CNX_STORE_MAX_OBJECT, &data, &len);
    if (rc != 0)
        return rc;
    cnx_digest(data, len, actual);
    if (tile->sha256[0] != '\0')
        rc = cnx_digest_check(data, len, tile->sha256, path);
    free(data);
    if (rc != 0)
        return rc;
    rc = cnx_image_read(&img, path);
    if (rc != 0)
        return rc;
    if (img->width != tile->width || img->height != tile->height)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "%s is %lldx%lld pixels, the tile set says "
                           "%lldx%lld",
                           path, (long long)img->width, (long long)img->height,
                           (long long)tile->width, (long long)tile->height);
    else if (img->bits != bits)
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "%s is %d-bit, the tile set says uint%d", path,
                           img->bits, bits);
    cnx_image_free(img);
    if (rc == 0)
        memcpy(tile->sha256, actual, sizeof(actual));
    return rc;
}

int cnx_tileset_check_files(cnx_tileset *ts, const char *base_dir)
{
    const int bits = ts->dtype == CNX_DT_UINT16 ? 16 : 8;
    for (size_t s = 0; s < ts->nsections; s++) {
        cnx_tile_section *sec = &ts->sections[s];
        for (size_t t = 0; t < sec->ntiles; t++) {
            int rc = check_tile(&sec->tiles[t], bits, base_dir);
            if (rc != 0)
                return cnx_error_wrap("tile '%.100s' (sections[%zu]."
                                      "tiles[%zu])",
                                      sec->tiles[t].id, s, t);
        }
    }
    return 0;
}

int cnx_tileset_load(cnx_tileset **out, const char *path, int64_t max_error)
{
    char base[PATH_MAX];
    const char *slash = strrchr(path, '/');
    cnx_tileset *ts = NULL;
    uint8_t *json;
    size_t len;
    int rc;

    *out = NULL;
    if (slash == NULL) {
        memcpy(base, ".", 2);
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof(base))
            return cnx_error_set(CNX_ENAME, 0, "%.100s: path too long", path);
        memcpy(base, path, n);
        base[n] = '\0';
    }
    rc = read_whole(path, CNX_TILESET_MAX_JSON, &json, &len);
    if (rc != 0)
        return rc;
    rc = cnx_tileset_parse(&ts, (const char *)json, len, path, max_error);
    free(json);
    if (rc != 0)
        return rc;
    rc = cnx_tileset_check_files(ts, base);
    if (rc != 0) {
        cnx_error_wrap("%s", path);
        cnx_tileset_free(ts);
        return rc;
    }
    *out = ts;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Serialising and recording                                           */

/* Build the document; prefix goes in front of every file name. */
static json_t *tileset_json(const cnx_tileset *ts, const char *prefix)
{
    json_t *root = json_object(), *res = json_array(), *secs = json_array();
    int bad = root == NULL || res == NULL || secs == NULL;

    for (int i = 0; i < 3 && !bad; i++) {
        double r = ts->resolution[i];
        /* Whole numbers stay integers, as people write them. */
        json_t *v = (r == floor(r) && r < 9007199254740992.0)
                        ? json_integer((json_int_t)r)
                        : json_real(r);
        bad |= v == NULL || json_array_append_new(res, v) != 0;
    }
    for (size_t s = 0; s < ts->nsections && !bad; s++) {
        const cnx_tile_section *sec = &ts->sections[s];
        json_t *so = json_object(), *tiles = json_array();
        bad |= so == NULL || tiles == NULL ||
               json_object_set_new(so, "z", json_integer(sec->z)) != 0;
        for (size_t t = 0; t < sec->ntiles && !bad; t++) {
            const cnx_tile *tile = &sec->tiles[t];
            json_t *to = json_object();
            char *file = malloc(strlen(prefix) + strlen(tile->file) + 1);
            if (to == NULL || file == NULL) {
                json_decref(to);
                free(file);
                bad = 1;
                break;
            }
            memcpy(file, prefix, strlen(prefix));
            memcpy(file + strlen(prefix), tile->file, strlen(tile->file) + 1);
            bad |= json_object_set_new(to, "id", json_string(tile->id)) != 0;
            bad |= json_object_set_new(to, "file", json_string(file)) != 0;
            bad |= json_object_set_new(to, "x", json_integer(tile->x)) != 0;
            bad |= json_object_set_new(to, "y", json_integer(tile->y)) != 0;
            bad |= json_object_set_new(to, "width",
                                       json_integer(tile->width)) != 0;
            bad |= json_object_set_new(to, "height",
                                       json_integer(tile->height)) != 0;
            if (tile->sha256[0] != '\0')
                bad |= json_object_set_new(to, "sha256",
                                           json_string(tile->sha256)) != 0;
            free(file);
            bad |= json_array_append_new(tiles, to) != 0;
        }
        if (so != NULL && tiles != NULL)
            bad |= json_object_set_new(so, "tiles", tiles) != 0;
        else
            json_decref(tiles);
        bad |= so == NULL || json_array_append_new(secs, so) != 0;
    }
    if (!bad) {
        bad |= json_object_set_new(root, "format",
                                   json_string(CNX_TILESET_FORMAT)) != 0;
        bad |= json_object_set_new(root, "resolution", res) != 0;
        res = NULL;
        bad |= json_object_set_new(root, "dtype",
                                   json_string(ts->dtype == CNX_DT_UINT16
                                                   ? "uint16"
                                                   : "uint8")) != 0;
        bad |= json_object_set_new(root, "sections", secs) != 0;
        secs = NULL;
    }
    json_decref(res);
    json_decref(secs);
    if (bad) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static int tileset_dump(const cnx_tileset *ts, const char *prefix, char **out)
{
    json_t *root = tileset_json(ts, prefix);
    *out = NULL;
    if (root == NULL)
        return oom("tile set");
    *out = cnx__json_canonical(root);
    json_decref(root);
    if (*out == NULL)
        return oom("tile set");
    return 0;
}

int cnx_tileset_to_json(const cnx_tileset *ts, char **out)
{
    return tileset_dump(ts, "", out);
}

int cnx_tileset_record(cnx_tileset *ts, const char *base_dir, const char *url,
                       cnx_tileset_stats *stats)
{
    const size_t plen = strlen(CNX_TILESET_TILE_DIR) + 1;
    cnx_tileset_stats st;
    cnx_store *store = NULL;
    char *json = NULL;
    int rc;

    memset(&st, 0, sizeof(st));
    rc = cnx_store_open(&store, url);
    if (rc != 0)
        return rc;
    for (size_t s = 0; s < ts->nsections && rc == 0; s++) {
        cnx_tile_section *sec = &ts->sections[s];
        for (size_t t = 0; t < sec->ntiles && rc == 0; t++) {
            cnx_tile *tile = &sec->tiles[t];
            char path[PATH_MAX], name[1100];
            uint8_t *data;
            size_t len;
            if (tile->sha256[0] == '\0') {
                rc = cnx_error_set(CNX_EINVAL, 0,
                                   "tile '%.100s' has no digest: check the "
                                   "files before recording",
                                   tile->id);
                break;
            }
            rc = tile_path(path, sizeof(path), base_dir, tile->file);
            if (rc == 0)
                rc = read_whole(path, CNX_STORE_MAX_OBJECT, &data, &len);
            if (rc != 0)
                break;
            /* The bytes recorded must be the bytes that were checked. */
            rc = cnx_digest_check(data, len, tile->sha256, path);
            if (rc == 0) {
                snprintf(name, sizeof(name), "%s/%s", CNX_TILESET_TILE_DIR,
                         tile->file);
                rc = cnx_store_put(store, name, data, len, NULL);
            }
            free(data);
            if (rc != 0) {
                cnx_error_wrap("tile '%.100s'", tile->id);
                break;
            }
            st.tiles++;
            st.bytes += len;
        }
        st.sections++;
    }
    if (rc == 0)
        rc = tileset_dump(ts, CNX_TILESET_TILE_DIR "/", &json);
    if (rc == 0)
        rc = cnx_store_put(store, CNX_TILESET_NAME, json, strlen(json),
                           st.digest);
    free(json);
    cnx_store_free(store);
    if (rc != 0)
        return rc;
    /* Now ts is the recorded form: files under their store names. */
    for (size_t s = 0; s < ts->nsections; s++) {
        cnx_tile_section *sec = &ts->sections[s];
        for (size_t t = 0; t < sec->ntiles; t++) {
            cnx_tile *tile = &sec->tiles[t];
            char *file = malloc(plen + strlen(tile->file) + 1);
            if (file == NULL)
                return oom("tile set");
            memcpy(file, CNX_TILESET_TILE_DIR "/", plen);
            memcpy(file + plen, tile->file, strlen(tile->file) + 1);
            free(tile->file);
            tile->file = file;
        }
    }
    if (stats != NULL)
        *stats = st;
    return 0;
}
