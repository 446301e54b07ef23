/*
 * cnx/ingest.h - a stack of PNG/TIFF sections into a precomputed layer.
 *
 * One image file per section, in the order given (z = 0, 1, ...). An image
 * layer keeps the files' depth (uint8 or uint16, encoding raw); a
 * segmentation layer (uint64, compressed_segmentation) holds the
 * 4-connected components of each section's non-zero pixels, numbered
 * 1, 2, ... in z order and then in raster order of each component's first
 * pixel, so the same files always give the same ids. Sections are read and
 * written in z-slabs one chunk deep: memory stays at about one slab
 * (width * height * chunk depth voxels) whatever the stack's depth.
 */
#ifndef CNX_INGEST_H
#define CNX_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/precomputed.h"
#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Default chunk size, voxels per axis. */
#define CNX_INGEST_CHUNK 128
/** Most decoding threads chosen automatically. */
#define CNX_INGEST_MAX_THREADS 8

typedef struct cnx_ingest_config {
    const char *url;          /* output layer (file:///abs/dir or a path) */
    const char *const *files; /* sections in z order (borrowed) */
    size_t nfiles;
    double resolution[3]; /* nm per voxel; default 1, 1, 1 */
    int64_t chunk[3];     /* default 128, 128, 128 */
    int segmentation;     /* 1: connected-component labels, uint64 */
    int threads;          /* decoding threads, at most 32; 0: one per
                             CPU, at most 8 (the output does not depend
                             on it) */
    int quiet;            /* 1: no progress bar */
} cnx_ingest_config;

typedef struct cnx_ingest_result {
    cnx_layer_type type;
    cnx_dtype dtype;
    int64_t size[3];      /* width, height, sections */
    int64_t chunks;       /* chunk objects written */
    uint64_t voxel_bytes; /* uncompressed voxel data written */
    uint64_t stored_bytes; /* bytes of the chunk objects as stored */
    uint64_t segments;    /* segmentation: components (largest id) */
    double seconds;
} cnx_ingest_result;

/** Defaults: no files, resolution 1,1,1 nm, chunk 128^3, image layer,
 *  automatic threads, progress bar on. */
void cnx_ingest_config_init(cnx_ingest_config *cfg);

/**
 * Ingest cfg->files into the layer at cfg->url. Every file is probed before
 * anything is written: all must have the same width, height and depth.
 * The layer is created write-once (an identical existing info is fine) and
 * every chunk put write-once, so re-running the same ingest is a no-op.
 *
 * @param result   optional: filled on success
 * @param written  optional: receives every chunk written with its digest
 * @return 0; CNX_EINVAL for a bad config or a section whose size or depth
 *         differs from the first (the message names both files); the codes
 *         of cnx_image_read (the message names the file and section) and of
 *         cnx_layer_create / cnx_layer_write (CNX_EIMMUTABLE, CNX_EIO);
 *         CNX_ENOMEM.
 */
int cnx_ingest_stack(const cnx_ingest_config *cfg, cnx_ingest_result *result,
                     cnx_object_list *written);

#ifdef __cplusplus
}
#endif
#endif
