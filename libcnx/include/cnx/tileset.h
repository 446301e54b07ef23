/*
 * cnx/tileset.h - tile sets: the raw, unstitched input of montage.
 *
 * A tile set is a JSON document ("cnx.tileset/1", see docs/tiles.md) that
 * lists, per section z, the image tiles of that section with their nominal
 * top-left positions in section pixels and their sizes. cnx-synth writes
 * one; cnx-ingest checks one and records it in a store (every tile copied
 * write-once under tiles/, and tiles.json rewritten with each tile's SHA-256
 * and store name), which is what montage tasks then read and verify.
 */
#ifndef CNX_TILESET_H
#define CNX_TILESET_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The value of the document's "format" key. */
#define CNX_TILESET_FORMAT "cnx.tileset/1"
/** Default tolerance on nominal positions, pixels. */
#define CNX_TILESET_MAX_ERROR 25
/** Largest tiles.json accepted, bytes. */
#define CNX_TILESET_MAX_JSON ((size_t)16 << 20)
/** Longest tile id, bytes. */
#define CNX_TILESET_MAX_ID 255
/** Store directory the tiles are recorded under. */
#define CNX_TILESET_TILE_DIR "tiles"
/** Store name of the recorded tile set. */
#define CNX_TILESET_NAME "tiles.json"

typedef struct cnx_tile {
    char *id;   /* unique in the tile set */
    char *file; /* relative to the tile set's directory; a safe name */
    int64_t x;  /* nominal top-left in section pixels (may be negative) */
    int64_t y;
    int64_t width;
    int64_t height;
    /* "sha256:<hex>" of the file's bytes, or "" if the document gave none;
     * set for every tile by a successful cnx_tileset_check_files. */
    char sha256[CNX_DIGEST_LEN];
} cnx_tile;

typedef struct cnx_tile_section {
    int64_t z;
    size_t ntiles; /* >= 1 */
    cnx_tile *tiles;
} cnx_tile_section;

typedef struct cnx_tileset {
    double resolution[3]; /* nm per pixel x, y and per section z */
    cnx_dtype dtype;      /* CNX_DT_UINT8 or CNX_DT_UINT16 */
    size_t nsections;     /* >= 1, in document order */
    cnx_tile_section *sections;
} cnx_tileset;

/**
 * Parse a tile set and check everything that needs no file: format, keys
 * (unknown ones refused at every level), types and ranges, safe file names,
 * unique ids, files and z, and that each tile of a section with two or more
 * tiles overlaps another tile of it plausibly by nominal position: by 1
 * pixel to 90% of the smaller side on the axis they are offset along, each
 * bound widened by max_error pixels.
 *
 * @param what       names the document in messages ("tiles.json")
 * @param max_error  tolerance on nominal positions, >= 0 pixels
 * @param[out] out   caller frees with cnx_tileset_free()
 * @return 0; CNX_ESCHEMA for malformed JSON, a missing, unknown or mistyped
 *         key; CNX_ENAME for an unsafe file name; CNX_EINVAL for a repeated
 *         id, file or z, or a tile that overlaps nothing plausibly;
 *         CNX_ETOOBIG over CNX_TILESET_MAX_JSON; CNX_ENOMEM. The message
 *         names the document and the place in it.
 */
int cnx_tileset_parse(cnx_tileset **out, const char *json, size_t len,
                      const char *what, int64_t max_error);

/**
 * Check the tile files, relative to base_dir: each exists, decodes fully as
 * a PNG or TIFF of the tile's width, height and the set's depth, and matches
 * its sha256 where one is given. On success every tile's sha256 holds the
 * digest of the bytes that were checked.
 *
 * @return 0; CNX_ENOTFOUND; CNX_EINVAL for a size or depth mismatch;
 *         CNX_ECORRUPT / CNX_EUNSUPPORTED for a bad image; CNX_EDIGEST;
 *         CNX_ETOOBIG for a file over CNX_STORE_MAX_OBJECT; CNX_EIO. The
 *         message names the tile and its file.
 */
int cnx_tileset_check_files(cnx_tileset *ts, const char *base_dir);

/**
 * Read the tile set at path, parse it and check its files (relative to the
 * directory holding path).
 */
int cnx_tileset_load(cnx_tileset **out, const char *path, int64_t max_error);

/**
 * Serialise as canonical JSON (sorted keys, no whitespace); "sha256" is
 * written for the tiles that have one.
 * @param[out] out  caller frees with free()
 */
int cnx_tileset_to_json(const cnx_tileset *ts, char **out);

/** What cnx_tileset_record wrote. */
typedef struct cnx_tileset_stats {
    size_t sections;
    size_t tiles;
    uint64_t bytes;              /* tile bytes copied */
    char digest[CNX_DIGEST_LEN]; /* of the recorded tiles.json */
} cnx_tileset_stats;

/**
 * Record a checked tile set (cnx_tileset_check_files done) in the store at
 * url: every tile file is put write-once as "tiles/<file>" after its bytes
 * are checked again against its sha256, then "tiles.json" is put: this tile
 * set with files renamed to their store names, canonical JSON. tiles.json
 * goes last, so a reader that finds it finds every tile. Re-recording the
 * same set is a no-op success. On success ts holds the recorded form.
 *
 * @param stats  optional; filled on success
 * @return 0; CNX_EDIGEST if a file changed since it was checked;
 *         CNX_EIMMUTABLE if the store holds other bytes under a name;
 *         CNX_EIO; CNX_ENOMEM.
 */
int cnx_tileset_record(cnx_tileset *ts, const char *base_dir, const char *url,
                       cnx_tileset_stats *stats);

/** Free a tile set. Accepts NULL. */
void cnx_tileset_free(cnx_tileset *ts);

#ifdef __cplusplus
}
#endif
#endif
