/*
 * cnx/synth.h - synthetic EM datasets with ground truth.
 *
 * The kernel (cnx_synth_generate) turns a shape and a seed into volumes:
 * a dense uint64 segmentation of branching, touching neurite-like objects
 * (gt), an EM-like uint8 image, a uint8 boundary probability map, uint8
 * synaptic cleft and post-synaptic density maps, and the list of synapses.
 * Two styles: "classic" (geometry in voxels, a clean boundary map) and
 * "hard" (geometry in nm, sampled with the resolution, packed irregular
 * cells, and a boundary map with the failures of a real network).
 * cnx_synth_tiles cuts one z section of the image into an overlapping
 * montage tile set with known true positions. Both are pure: parameters in,
 * buffers out, no I/O. cnx_synth_run (libcnx/src/synth_io.c) writes a whole
 * dataset as Neuroglancer precomputed layers, JSON and PNG tiles.
 *
 * Determinism: the same parameters give the same bytes on every machine.
 * All randomness comes from the seed through our own generators, and no
 * libm transcendental function is on a path that decides output bytes.
 * See docs/synth.md for how each layer is made and the file layout.
 */
#ifndef CNX_SYNTH_H
#define CNX_SYNTH_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/volume.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Kernel version: bumped whenever output bytes are meant to change. */
#define CNX_SYNTH_VERSION 1

/** Largest extent accepted on any axis, voxels. */
#define CNX_SYNTH_MAX_SIDE 4096

/** Largest number of voxels accepted in total (2^31). */
#define CNX_SYNTH_MAX_VOXELS ((int64_t)1 << 31)

/** Largest chunk extent of the written layers on any axis, voxels. */
#define CNX_SYNTH_MAX_CHUNK 4096

/** Chunk extent of the written layers on every axis by default, voxels. */
#define CNX_SYNTH_DEFAULT_CHUNK 128

/** Resolution range the hard style accepts on every axis, nm. */
#define CNX_SYNTH_HARD_RES_MIN 2.0
#define CNX_SYNTH_HARD_RES_MAX 200.0

/** What kind of dataset cnx_synth_generate makes (docs/synth.md). */
typedef enum cnx_synth_style {
    /* Neurites of 3..10 voxels grown to fill the volume, isotropic in
     * voxels whatever the resolution, a clean boundary map. Its bytes
     * never change within a CNX_SYNTH_VERSION. */
    CNX_SYNTH_STYLE_CLASSIC = 0,
    /* Geometry in nm, sampled with the resolution: neurites of varying
     * radius (24..224 nm), irregular cells packed around them, and a
     * boundary map with blur, noise, gaps, false membranes and per-section
     * variation. radius_min, radius_max and fill_percent do not apply;
     * synapse_spacing and synapses_per_mvx count 8 nm reference voxels. */
    CNX_SYNTH_STYLE_HARD = 1,
} cnx_synth_style;

/** @return "classic" or "hard" (NULL for an unknown style). */
const char *cnx_synth_style_name(cnx_synth_style style);

/**
 * Parse a style name as cnx_synth_style_name writes it.
 * @return 0; CNX_EINVAL for any other text (out unchanged).
 */
int cnx_synth_style_parse(const char *name, cnx_synth_style *out);

/**
 * How cnx_synth_tiles records each section (docs/synth.md, "Section
 * distortions"): as the true section of the image, or distorted as a
 * microscope does (a rigid motion, a smooth non-rigid warp and an
 * intensity drift per section).
 */
typedef enum cnx_synth_distort {
    /* Tiles are cut from the image's sections themselves: the bytes of
     * the tile set before distortions existed. */
    CNX_SYNTH_DISTORT_NONE = 0,
    /* Tiles are cut from S_z = drift(I_z(U_z(p))), with U_z drawn per
     * section from the distort_* strengths. */
    CNX_SYNTH_DISTORT_DEFAULT = 1,
} cnx_synth_distort;

/** @return "none" or "default" (NULL for an unknown value). */
const char *cnx_synth_distort_name(cnx_synth_distort distort);

/**
 * Parse a name as cnx_synth_distort_name writes it.
 * @return 0; CNX_EINVAL for any other text (out unchanged).
 */
int cnx_synth_distort_parse(const char *name, cnx_synth_distort *out);

/** Largest control grid of the section warp, points per axis. */
#define CNX_SYNTH_WARP_GRID_MAX 16

/** Largest number of sections a dataset may leave out (--missing). */
#define CNX_SYNTH_MISSING_MAX 4096

/**
 * Progress callback: done of total units of generation work (total is the
 * same on every call, done never decreases). Called from the generating
 * thread only.
 */
typedef void (*cnx_synth_progress_fn)(void *ctx, int64_t done, int64_t total);

/** Generation parameters; fill with cnx_synth_params_init, then adjust. */
typedef struct cnx_synth_params {
    int64_t shape[3];         /* volume extent, voxels (x, y, z) */
    uint64_t seed;            /* 0 .. 2^63 - 1 */
    double resolution[3];     /* nm per voxel: nm coordinates, info, and
                                 (hard style) the geometry */
    cnx_synth_style style;    /* (CNX_SYNTH_STYLE_CLASSIC) */
    int64_t chunk[3];         /* chunk extent of every written layer,
                                 1..CNX_SYNTH_MAX_CHUNK per axis (128 each);
                                 cnx_synth_run only, the volumes do not
                                 depend on it */
    int radius_min;           /* neurite radius range, voxels (3) */
    int radius_max;           /* (10) */
    int fill_percent;         /* painted skeleton volume to reach, % (30) */
    int synapse_spacing;      /* minimum distance between sites, voxels (24) */
    int synapses_per_mvx;     /* target synapses per 10^6 voxels (4) */
    int tile_side;            /* target montage tile side, pixels (128) */
    int tile_overlap_percent; /* minimum overlap of neighbours, % (15) */
    int tile_jitter;          /* true position = grid +- this, pixels (3) */
    int tile_nominal_error;   /* nominal = true +- this, pixels (20) */
    /* Section distortions (docs/synth.md); the strengths apply only with
     * CNX_SYNTH_DISTORT_DEFAULT. */
    cnx_synth_distort distort;  /* (CNX_SYNTH_DISTORT_DEFAULT) */
    double distort_translation; /* tmax: t_z per axis in +-this, px (12),
                                   0..1000 */
    double distort_rotation;    /* smax: sin of the angle in +-this (0.01),
                                   0..0.5 */
    double distort_warp;        /* amax: control displacements in +-this
                                   per axis, px (1.5), 0..100 */
    int distort_grid;           /* G: G x G control points (6), 4..
                                   CNX_SYNTH_WARP_GRID_MAX */
    int distort_gain_milli;     /* gain in 1 +- this / 1000 (100), 0..500 */
    int distort_offset;         /* offset in +-this gray levels (10),
                                   0..100 */
    /* Sections that get no tiles at all (a lost section), in any order,
     * each in 0..shape[2]-1, no repeats, not every section; borrowed
     * (cnx_synth_generate keeps a copy). NULL / 0: none (the default). */
    const int64_t *missing;
    size_t nmissing;
    cnx_synth_progress_fn progress; /* optional */
    void *progress_ctx;
} cnx_synth_params;

/** Fill p with the defaults above, shape 256^3, seed 1, resolution 8 nm,
 *  classic style, 128^3 chunks, distorted sections, none missing:
 *  today's dataset. */
void cnx_synth_params_init(cnx_synth_params *p);

/**
 * Check parameters.
 * @return 0; CNX_EINVAL for a non-positive extent or resolution, a seed
 *         over 2^63 - 1, an unknown style, a hard-style resolution outside
 *         CNX_SYNTH_HARD_RES_MIN..MAX, a chunk extent outside
 *         1..CNX_SYNTH_MAX_CHUNK, inconsistent radii, spacing or tile
 *         settings, an unknown distort value or a strength out of its
 *         range, a missing section outside the volume or repeated, or
 *         every section missing;
 *         CNX_ERANGE for an extent over CNX_SYNTH_MAX_SIDE; CNX_ETOOBIG for
 *         more than CNX_SYNTH_MAX_VOXELS voxels. The message names the
 *         field.
 */
int cnx_synth_params_check(const cnx_synth_params *p);

/**
 * One synapse: a cleft between a pre- and a post-synaptic object. The cleft
 * is the set of voxels of pre_id or post_id that have a 6-neighbour of the
 * other, within radius of site; the PSD is the voxels of post_id within 3
 * voxels of the cleft. In the hard style distances are in nm (voxel
 * offsets times the resolution): the cleft lies within radius_nm of site
 * and the PSD within 24 nm of the cleft.
 */
typedef struct cnx_synth_synapse {
    uint64_t id;          /* 1..n, in (z, y, x) order of site */
    int64_t site[3];      /* cleft voxel nearest the cleft's centroid */
    int64_t pre_site[3];  /* voxel inside pre_id, 3-5 voxels (hard: 24-40
                             nm) from the cleft */
    int64_t post_site[3]; /* voxel inside post_id, as far from it */
    uint64_t pre_id;
    uint64_t post_id;
    int64_t size;  /* cleft voxels */
    int radius;    /* classic: cleft disk radius around site, voxels (4-6);
                      hard: 0 */
    int radius_nm; /* hard: cleft disk radius, nm (32-48); classic: 0 */
} cnx_synth_synapse;

/**
 * A generated dataset. All volumes cover [0, shape) and are owned by it;
 * free everything with cnx_synth_free.
 */
typedef struct cnx_synth {
    cnx_synth_params params; /* copy; progress fields cleared */
    cnx_volume *gt;          /* uint64, every voxel labelled 1..nobjects */
    cnx_volume *image;       /* uint8 EM-like image */
    cnx_volume *boundary;    /* uint8 boundary probability */
    cnx_volume *cleft;       /* uint8 synaptic cleft probability */
    cnx_volume *psd;         /* uint8 post-synaptic density probability */
    uint64_t nobjects;
    cnx_synth_synapse *synapses;
    size_t nsynapses;
    int64_t *missing; /* owned copy of the missing sections;
                         params.missing points at it */
} cnx_synth;

/**
 * Generate a dataset of p->style (p->chunk is not used). Single-threaded;
 * memory peaks at about 16 bytes per voxel (hard style: 17).
 * @param[out] out  caller frees with cnx_synth_free()
 * @return 0; as cnx_synth_params_check; CNX_ENOMEM.
 */
int cnx_synth_generate(cnx_synth **out, const cnx_synth_params *p);

/** Free a dataset. Accepts NULL. */
void cnx_synth_free(cnx_synth *synth);

/** The tile grid of one section: rows x cols tiles of width x height. */
typedef struct cnx_synth_tile_grid {
    int64_t rows;
    int64_t cols;
    int64_t width;
    int64_t height;
} cnx_synth_tile_grid;

/** @return the tile grid every section of a dataset with params p uses. */
cnx_synth_tile_grid cnx_synth_tile_layout(const cnx_synth_params *p);

/** One montage tile of a section. */
typedef struct cnx_synth_tile {
    int64_t row;
    int64_t col;
    int64_t x; /* true top-left, section pixels; tile inside */
    int64_t y;
    int64_t nominal_x; /* true + error, may lie outside the section */
    int64_t nominal_y;
    int64_t width;
    int64_t height;
    int gain_milli;  /* gain = gain_milli / 1000, in 850..1150 */
    int offset;      /* -15..15 */
    uint8_t *pixels; /* width * height, x fastest; owned */
} cnx_synth_tile;

/**
 * Cut section z into tiles, in row-major (row, col) order:
 * pixel = clamp(round(gain * section) + offset + noise, 0, 255), with noise
 * uniform in -2..2, where section is S_z (cnx_synth_distort_section of
 * synth->image's section z with the warp cnx_synth_section_warp_draw
 * gives) with CNX_SYNTH_DISTORT_DEFAULT, and the image's section itself
 * with CNX_SYNTH_DISTORT_NONE. A missing section gives no tiles (*out
 * NULL, *count 0). Sections are independent: any z, in any order, from
 * any thread gives the same tiles.
 * @param[out] out    array of count tiles; free with cnx_synth_tiles_free()
 * @return 0; CNX_EINVAL if z is outside the volume; CNX_ENOMEM.
 */
int cnx_synth_tiles(cnx_synth_tile **out, size_t *count, const cnx_synth *synth,
                    int64_t z);

/** Free tiles from cnx_synth_tiles. Accepts NULL. */
void cnx_synth_tiles_free(cnx_synth_tile *tiles, size_t count);

/** @return 1 if section z is one of p->missing, else 0. */
int cnx_synth_section_is_missing(const cnx_synth_params *p, int64_t z);

/**
 * The distortion of one section (docs/synth.md, "Section distortions"):
 * the map U_z from section pixel coordinates p (what the microscope
 * recorded; pixel centres at integers) to true volume coordinates,
 *
 *   U_z(p) = centre + R (p - centre) + translation + w(p),
 *
 * R the rotation with sin sin_angle and cos cos_angle = sqrt(1 - sin^2),
 * w a uniform cubic B-spline over grid x grid control points at
 * origin + (i, j) * spacing with displacements (dx, dy)[j * grid + i];
 * and the intensity drift v' = clamp(round(v * gain + offset), 0, 255),
 * gain = gain_milli / 1000, offset = offset_milli / 1000.
 * Plain data: a caller may fill one by hand.
 */
typedef struct cnx_synth_section_warp {
    int64_t width;    /* W, section pixels */
    int64_t height;   /* H */
    double centre[2]; /* ((W - 1) / 2, (H - 1) / 2) */
    double sin_angle; /* s_z */
    double cos_angle; /* sqrt(1 - s_z^2) */
    double translation[2];
    int grid;          /* G, 4..CNX_SYNTH_WARP_GRID_MAX */
    double origin[2];  /* (-spacing x, -spacing y) */
    double spacing[2]; /* (max(W - 1, 1) / (G - 3), likewise for H) */
    double dx[CNX_SYNTH_WARP_GRID_MAX * CNX_SYNTH_WARP_GRID_MAX];
    double dy[CNX_SYNTH_WARP_GRID_MAX * CNX_SYNTH_WARP_GRID_MAX];
    int gain_milli;   /* 1000: no gain change */
    int offset_milli; /* 0: no offset */
} cnx_synth_section_warp;

/**
 * Draw the distortion of section z of a dataset with parameters p (its
 * seed, section size shape[0] x shape[1], distort and strengths), from the
 * section's own random stream: the same (p, z) always gives the same
 * warp, whatever else is drawn. With CNX_SYNTH_DISTORT_NONE the identity
 * (no rotation, translation or warp, gain 1, offset 0). Missing sections
 * get a warp too (cnx_synth_tiles does not use it).
 * @param[out] out  the warp
 * @return 0; as cnx_synth_params_check; CNX_EINVAL if z is outside
 *         0..shape[2]-1.
 */
int cnx_synth_section_warp_draw(cnx_synth_section_warp *out,
                                const cnx_synth_params *p, int64_t z);

/**
 * U_z: where section pixel coordinates (px, py) lie in the true section,
 * (*tx, *ty). Defined for any real (px, py); the spline's end segments
 * extend outside [0, W-1] x [0, H-1]. Pure, thread-safe.
 */
void cnx_synth_section_map(const cnx_synth_section_warp *w, double px,
                           double py, double *tx, double *ty);

/**
 * S_z from the true section I_z: out(p) = drift(round(I_z(U_z(p)))),
 * I_z sampled bilinearly with mirror padding (reflection about the first
 * and last pixel, which are not repeated), rounded half up, then the
 * intensity drift. in and out are w->width x w->height, x fastest, and
 * must not overlap. The identity warp gives out == in exactly. Each
 * pixel's U_z is bit-identical to cnx_synth_section_map's.
 * @return 0; CNX_ENOMEM (out is then undefined).
 */
int cnx_synth_distort_section(uint8_t *out, const uint8_t *in,
                              const cnx_synth_section_warp *w);

/** What cnx_synth_run did. */
typedef struct cnx_synth_summary {
    uint64_t objects;
    size_t synapses;
    int64_t tiles;
    int64_t files; /* objects put into the store */
    int64_t bytes; /* their total size */
    double seconds;
} cnx_synth_summary;

/**
 * Generate a dataset and write it under dir_url (a store URL or a plain
 * path): synth.json, the layers gt, image, boundary, cleft and psd in
 * chunks of p->chunk, gt-synapses.json and tiles/ (see docs/synth.md). Every object is put
 * write-once, so re-running with the same parameters is a no-op and a
 * directory holding a different dataset fails without being changed.
 * @param quiet  1: no progress bar
 * @param[out] summary  optional
 * @return 0; as cnx_synth_generate; CNX_EIMMUTABLE if dir_url holds a
 *         different dataset; CNX_EIO (retriable) and other store errors.
 */
int cnx_synth_run(const cnx_synth_params *p, const char *dir_url, int quiet,
                  cnx_synth_summary *summary);

#ifdef __cplusplus
}
#endif
#endif
