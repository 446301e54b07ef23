/*
 * cnx/imageio.h - 2D grayscale images in and out: PNG (libpng) and TIFF
 * (libtiff), 8- or 16-bit, one channel; JPEG (libjpeg-turbo) in, from memory. Used by ingest and by the synthetic
 * tile sets. Decoding checks the file's header against limits before
 * allocating, and a truncated or corrupt file is CNX_ECORRUPT naming it.
 */
#ifndef CNX_IMAGEIO_H
#define CNX_IMAGEIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Largest width or height accepted, pixels. */
#define CNX_IMAGE_MAX_SIDE 65536

typedef struct cnx_image {
    int64_t width;
    int64_t height;
    int bits;      /* 8 or 16 */
    void *pixels;  /* owned; row-major, x fastest; uint8_t or uint16_t */
} cnx_image;

/**
 * Read a PNG or TIFF file (chosen by its magic bytes, not its name).
 * Gray, gray+alpha (alpha dropped), palette-gray and RGB with R=G=B are
 * accepted; true colour is CNX_EUNSUPPORTED.
 * @param[out] out  caller frees with cnx_image_free()
 * @return 0; CNX_ENOTFOUND; CNX_ECORRUPT; CNX_EUNSUPPORTED; CNX_EIO.
 */
int cnx_image_read(cnx_image **out, const char *path);

/**
 * Decode a PNG, TIFF or JPEG held in memory (a tile read from a store and
 * checked against its digest; a jpeg-encoded chunk), as cnx_image_read does
 * a file. JPEG: 8-bit gray only (libjpeg-turbo, islow DCT), a colour JPEG
 * is CNX_EUNSUPPORTED, a truncated one CNX_ECORRUPT. Messages name what
 * instead of a path.
 * @param[out] out  caller frees with cnx_image_free()
 * @return as cnx_image_read; CNX_EIO if no in-memory file can be made.
 */
int cnx_image_decode(cnx_image **out, const void *data, size_t len,
                     const char *what);

/** Read only the width, height and bit depth of a PNG or TIFF file. */
int cnx_image_probe(const char *path, int64_t *width, int64_t *height,
                    int *bits);

/**
 * Encode an 8- or 16-bit gray image as PNG in memory, deterministically
 * (fixed zlib level and filter, no timestamp or text chunks).
 * @param[out] out  caller frees with free()
 */
int cnx_png_encode(const cnx_image *img, uint8_t **out, size_t *len);

/** Free an image. Accepts NULL. */
void cnx_image_free(cnx_image *img);

#ifdef __cplusplus
}
#endif
#endif
