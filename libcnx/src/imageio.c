/*
 * imageio.c - grayscale PNG (libpng) and TIFF (libtiff) in and out, and
 * grayscale JPEG (libjpeg-turbo) in, from memory.
 *
 * A reader picks the codec from the file's magic bytes, reads the header,
 * checks the dimensions against CNX_IMAGE_MAX_SIDE and the pixel format
 * against what we accept, and only then allocates one buffer of image size
 * (uint8, or uint16 in native byte order). Every library failure lands in a
 * per-call context -- libpng's through its error callback and setjmp,
 * libtiff's through the per-handle handlers of TIFFOpenExt -- and becomes one
 * CNX_E* code whose message names the file. The PNG encoder pins every
 * setting that changes its output bytes. Load: one section or tile at a
 * time, up to 65536 pixels a side. Thread-safe: no shared mutable state
 * (libtiff's process-wide handlers are silenced once, before first use).
 */
#define _GNU_SOURCE /* memfd_create */
#include "cnx/imageio.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <png.h>
#include <setjmp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <jpeglib.h> /* after stdio.h: it uses FILE */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <tiffio.h>
#include <zlib.h>

#include "cnx/error.h"

/* The largest ancillary chunk libpng may buffer while reading a header. */
#define PNG_CHUNK_MAX ((png_alloc_size_t)8 << 20)

/* PNG encoder settings: changing any of them changes output bytes. */
#define PNG_ENC_LEVEL 6
#define PNG_ENC_MEM_LEVEL 8
#define PNG_ENC_WINDOW_BITS 15
#define PNG_ENC_STRATEGY Z_FILTERED
#define PNG_ENC_FILTER PNG_FILTER_PAETH
#define PNG_ENC_IDAT_SIZE 8192

typedef enum image_kind {
    KIND_PNG = 1,
    KIND_TIFF = 2,
} image_kind;

/* ------------------------------------------------------------------ */
/* Opening and sniffing                                                */

static int open_image(FILE **out, image_kind *kind, const char *path)
{
    static const uint8_t png_magic[8] = {0x89, 'P',  'N',  'G',
                                         '\r', '\n', 0x1a, '\n'};
    uint8_t magic[8];
    struct stat st;
    size_t n;
    FILE *fp;

    *out = NULL;
    fp = fopen(path, "rb");
    if (fp == NULL) {
        int err = errno;
        if (err == ENOENT || err == ENOTDIR)
            return cnx_error_set(CNX_ENOTFOUND, 0, "%s: no such file", path);
        return cnx_error_set(CNX_EIO, err != EACCES, "%s: cannot open: %s",
                             path, strerror(err));
    }
    if (fstat(fileno(fp), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(fp);
        return cnx_error_set(CNX_EINVAL, 0, "%s: not a regular file", path);
    }
    n = fread(magic, 1, sizeof(magic), fp);
    if (n < sizeof(magic) && ferror(fp)) {
        int err = errno;
        fclose(fp);
        return cnx_error_set(CNX_EIO, 1, "%s: cannot read: %s", path,
                             strerror(err));
    }
    if (n == sizeof(magic) && memcmp(magic, png_magic, 8) == 0) {
        *kind = KIND_PNG;
    } else if (n >= 4 &&
               ((magic[0] == 'I' && magic[1] == 'I' &&
                 (magic[2] == 42 || magic[2] == 43) && magic[3] == 0) ||
                (magic[0] == 'M' && magic[1] == 'M' && magic[2] == 0 &&
                 (magic[3] == 42 || magic[3] == 43)))) {
        *kind = KIND_TIFF;
    } else {
        fclose(fp);
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: not a PNG or TIFF file (unrecognised "
                             "signature)",
                             path);
    }
    rewind(fp);
    *out = fp;
    return 0;
}

static int check_side(const char *path, const char *what, int64_t w, int64_t h)
{
    if (w < 1 || h < 1)
        return cnx_error_set(CNX_ECORRUPT, 0, "%s: %s has size %lldx%lld", path,
                             what, (long long)w, (long long)h);
    if (w > CNX_IMAGE_MAX_SIDE || h > CNX_IMAGE_MAX_SIDE)
        return cnx_error_set(CNX_ETOOBIG, 0,
                             "%s: %lldx%lld pixels, over the limit of %d "
                             "per side",
                             path, (long long)w, (long long)h,
                             CNX_IMAGE_MAX_SIDE);
    return 0;
}

static int image_alloc(cnx_image **out, const char *path, int64_t w, int64_t h,
                       int bits)
{
    cnx_image *img = calloc(1, sizeof(*img));
    size_t bytes = (size_t)w * (size_t)h * (size_t)(bits / 8);
    *out = NULL;
    if (img == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", path);
    img->pixels = malloc(bytes);
    if (img->pixels == NULL) {
        free(img);
        return cnx_error_set(CNX_ENOMEM, 0,
                             "%s: out of memory for %lldx%lld pixels", path,
                             (long long)w, (long long)h);
    }
    img->width = w;
    img->height = h;
    img->bits = bits;
    *out = img;
    return 0;
}

void cnx_image_free(cnx_image *img)
{
    if (img == NULL)
        return;
    free(img->pixels);
    free(img);
}

/* A colour-mapped value becomes gray only if its entry has R = G = B. */
typedef struct gray_lut {
    uint8_t value[256];
    uint8_t gray[256]; /* 1 if the entry is gray */
} gray_lut;

/* ------------------------------------------------------------------ */
/* PNG reading                                                         */

/*
 * Everything the setjmp-protected decoder touches lives here, outside its
 * stack frame, so a longjmp leaves nothing indeterminate and the caller
 * frees whatever was allocated.
 */
typedef struct png_rctx {
    const char *path;
    FILE *fp;
    int header_only;
    int code; /* CNX_E* recorded by a callback before it longjmps */
    int retriable;
    char msg[256];
    png_structp png;
    png_infop info;
    cnx_image *img;
    uint8_t *tmp;
    png_bytep *rows;
    int64_t width;
    int64_t height;
    int bits;
} png_rctx;

static void png_rd_error(png_structp png, png_const_charp msg)
{
    png_rctx *ctx = png_get_error_ptr(png);
    if (ctx->code == 0) {
        ctx->code = CNX_ECORRUPT;
        snprintf(ctx->msg, sizeof(ctx->msg), "corrupt PNG: %s", msg);
    }
    png_longjmp(png, 1);
}

static void png_rd_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_rd_data(png_structp png, png_bytep data, size_t len)
{
    png_rctx *ctx = png_get_io_ptr(png);
    size_t n = fread(data, 1, len, ctx->fp);
    if (n == len)
        return;
    if (ferror(ctx->fp)) {
        ctx->code = CNX_EIO;
        ctx->retriable = 1;
        snprintf(ctx->msg, sizeof(ctx->msg), "read failed: %s",
                 strerror(errno));
    } else {
        ctx->code = CNX_ECORRUPT;
        snprintf(ctx->msg, sizeof(ctx->msg),
                 "truncated PNG (file ends inside a chunk)");
    }
    png_error(png, ctx->msg);
}

static int png_fail(png_rctx *ctx, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int png_fail(png_rctx *ctx, int code, const char *fmt, ...)
{
    va_list ap;
    ctx->code = code;
    va_start(ap, fmt);
    vsnprintf(ctx->msg, sizeof(ctx->msg), fmt, ap);
    va_end(ap);
    return code;
}

/* Check that the RGB pixels of one decoded row are gray; keep R. */
static int png_rgb_row(png_rctx *ctx, const uint8_t *src, uint8_t *dst,
                       int64_t y)
{
    const size_t bpp = (size_t)ctx->bits / 8;
    for (int64_t x = 0; x < ctx->width; x++) {
        const uint8_t *p = src + (size_t)x * 3 * bpp;
        if (memcmp(p, p + bpp, bpp) != 0 || memcmp(p, p + 2 * bpp, bpp) != 0)
            return png_fail(ctx, CNX_EUNSUPPORTED,
                            "true-colour PNG (pixel %lld,%lld has R, G, B "
                            "not all equal); only gray images are accepted",
                            (long long)x, (long long)y);
        memcpy(dst + (size_t)x * bpp, p, bpp);
    }
    return 0;
}

/*
 * The body of the decoder: libpng errors longjmp out of it (to png_decode),
 * so it keeps everything that must survive in ctx.
 */
static int png_decode_body(png_rctx *ctx)
{
    png_uint_32 w, h;
    int depth, color, interlace, rgb = 0, gray_palette = 0;
    gray_lut lut;
    size_t rowbytes, outrow;
    int64_t y;

    png_set_read_fn(ctx->png, ctx, png_rd_data);
    /* Our own side check below gives the better message; libpng's limit
     * only has to stay out of its way. */
    png_set_user_limits(ctx->png, 0x7fffffffu, 0x7fffffffu);
    png_set_chunk_malloc_max(ctx->png, PNG_CHUNK_MAX);
    png_read_info(ctx->png, ctx->info);
    png_get_IHDR(ctx->png, ctx->info, &w, &h, &depth, &color, &interlace, NULL,
                 NULL);
    ctx->width = (int64_t)w;
    ctx->height = (int64_t)h;
    if (w < 1 || h < 1)
        return png_fail(ctx, CNX_ECORRUPT, "PNG header has size %ux%u",
                        (unsigned)w, (unsigned)h);
    if (w > CNX_IMAGE_MAX_SIDE || h > CNX_IMAGE_MAX_SIDE)
        return png_fail(ctx, CNX_ETOOBIG,
                        "%ux%u pixels, over the limit of %d per side",
                        (unsigned)w, (unsigned)h, CNX_IMAGE_MAX_SIDE);

    switch (color) {
    case PNG_COLOR_TYPE_GRAY:
        if (depth < 8)
            png_set_expand_gray_1_2_4_to_8(ctx->png);
        break;
    case PNG_COLOR_TYPE_GRAY_ALPHA:
        png_set_strip_alpha(ctx->png);
        break;
    case PNG_COLOR_TYPE_PALETTE: {
        png_colorp palette = NULL;
        int count = 0;
        if (png_get_PLTE(ctx->png, ctx->info, &palette, &count) == 0)
            return png_fail(ctx, CNX_ECORRUPT, "palette PNG without PLTE");
        memset(&lut, 0, sizeof(lut));
        for (int i = 0; i < count && i < 256; i++) {
            lut.value[i] = palette[i].red;
            lut.gray[i] = palette[i].red == palette[i].green &&
                          palette[i].red == palette[i].blue;
        }
        if (depth < 8)
            png_set_packing(ctx->png);
        gray_palette = 1;
        break;
    }
    case PNG_COLOR_TYPE_RGB:
        rgb = 1;
        break;
    case PNG_COLOR_TYPE_RGB_ALPHA:
        png_set_strip_alpha(ctx->png);
        rgb = 1;
        break;
    default:
        return png_fail(ctx, CNX_EUNSUPPORTED, "PNG colour type %d", color);
    }
    ctx->bits = depth == 16 ? 16 : 8;
    if (ctx->header_only)
        return 0;

    if (interlace != PNG_INTERLACE_NONE)
        png_set_interlace_handling(ctx->png);
    png_read_update_info(ctx->png, ctx->info);
    rowbytes = png_get_rowbytes(ctx->png, ctx->info);
    outrow = (size_t)w * (size_t)(ctx->bits / 8);
    if (rowbytes != outrow * (rgb ? 3 : 1))
        return png_fail(ctx, CNX_EUNSUPPORTED,
                        "unexpected PNG row layout (%zu bytes for %u "
                        "pixels)",
                        rowbytes, (unsigned)w);

    if (image_alloc(&ctx->img, ctx->path, ctx->width, ctx->height, ctx->bits) !=
        0)
        return png_fail(ctx, CNX_ENOMEM, "out of memory for %ux%u pixels",
                        (unsigned)w, (unsigned)h);
    if (!rgb || interlace != PNG_INTERLACE_NONE) {
        /* Whole-image decode: straight into the pixels, or for interlaced
         * RGB into a full temporary image. */
        uint8_t *base = ctx->img->pixels;
        ctx->rows = malloc((size_t)h * sizeof(*ctx->rows));
        if (ctx->rows == NULL)
            return png_fail(ctx, CNX_ENOMEM, "out of memory");
        if (rgb) {
            ctx->tmp = malloc((size_t)h * rowbytes);
            if (ctx->tmp == NULL)
                return png_fail(ctx, CNX_ENOMEM, "out of memory");
            base = ctx->tmp;
        }
        for (y = 0; y < ctx->height; y++)
            ctx->rows[y] = base + (size_t)y * rowbytes;
        png_read_image(ctx->png, ctx->rows);
        if (rgb) {
            for (y = 0; y < ctx->height; y++) {
                uint8_t *dst = (uint8_t *)ctx->img->pixels + (size_t)y * outrow;
                if (png_rgb_row(ctx, ctx->rows[y], dst, y) != 0)
                    return ctx->code;
            }
        }
    } else {
        ctx->tmp = malloc(rowbytes);
        if (ctx->tmp == NULL)
            return png_fail(ctx, CNX_ENOMEM, "out of memory");
        for (y = 0; y < ctx->height; y++) {
            uint8_t *dst = (uint8_t *)ctx->img->pixels + (size_t)y * outrow;
            png_read_row(ctx->png, ctx->tmp, NULL);
            if (png_rgb_row(ctx, ctx->tmp, dst, y) != 0)
                return ctx->code;
        }
    }
    /* Read to IEND so that a file cut after its image data is caught. */
    png_read_end(ctx->png, NULL);

    if (gray_palette) {
        uint8_t *p = ctx->img->pixels;
        size_t n = (size_t)w * (size_t)h;
        for (size_t i = 0; i < n; i++) {
            if (!lut.gray[p[i]])
                return png_fail(ctx, CNX_EUNSUPPORTED,
                                "palette PNG with a colour entry (%u) in "
                                "use; only gray images are accepted",
                                (unsigned)p[i]);
            p[i] = lut.value[p[i]];
        }
    }
    if (ctx->bits == 16) {
        /* PNG stores big-endian samples; make them native uint16. */
        uint8_t *p = ctx->img->pixels;
        size_t n = (size_t)w * (size_t)h;
        for (size_t i = 0; i < n; i++) {
            uint16_t v = (uint16_t)((p[2 * i] << 8) | p[2 * i + 1]);
            memcpy(p + 2 * i, &v, 2);
        }
    }
    return 0;
}

/*
 * Decode ctx->fp. Returns 0 or a CNX code with ctx->msg set; a libpng error
 * comes back through setjmp with the code its callback recorded.
 */
static int png_decode(png_rctx *ctx)
{
    ctx->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, ctx, png_rd_error,
                                      png_rd_warning);
    if (ctx->png == NULL)
        return png_fail(ctx, CNX_ENOMEM, "out of memory");
    ctx->info = png_create_info_struct(ctx->png);
    if (ctx->info == NULL)
        return png_fail(ctx, CNX_ENOMEM, "out of memory");
    if (setjmp(png_jmpbuf(ctx->png)))
        return ctx->code != 0 ? ctx->code : CNX_ECORRUPT;
    return png_decode_body(ctx);
}

static int png_read_file(png_rctx *ctx)
{
    int rc = png_decode(ctx);
    png_destroy_read_struct(ctx->png ? &ctx->png : NULL,
                            ctx->info ? &ctx->info : NULL, NULL);
    free(ctx->rows);
    free(ctx->tmp);
    ctx->rows = NULL;
    ctx->tmp = NULL;
    if (rc != 0) {
        cnx_image_free(ctx->img);
        ctx->img = NULL;
        return cnx_error_set(rc, ctx->retriable, "%s: %s", ctx->path, ctx->msg);
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* TIFF reading                                                        */

typedef struct tiff_rctx {
    const char *path;
    char msg[256];
} tiff_rctx;

static pthread_once_t tiff_once = PTHREAD_ONCE_INIT;

/* libtiff's process-wide handlers print to stderr; every handle we open
 * reports through its own handlers instead, so silence the global ones. */
static void tiff_silence_globals(void)
{
    TIFFSetErrorHandler(NULL);
    TIFFSetWarningHandler(NULL);
}

static int tiff_on_error(TIFF *tif, void *user, const char *module,
                         const char *fmt, va_list ap)
{
    tiff_rctx *ctx = user;
    (void)tif;
    if (ctx->msg[0] == '\0') {
        char text[200];
        vsnprintf(text, sizeof(text), fmt, ap);
        snprintf(ctx->msg, sizeof(ctx->msg), "%s%s%s", module ? module : "",
                 module ? ": " : "", text);
    }
    return 1;
}

static int tiff_on_warning(TIFF *tif, void *user, const char *module,
                           const char *fmt, va_list ap)
{
    (void)tif;
    (void)user;
    (void)module;
    (void)fmt;
    (void)ap;
    return 1;
}

/* The pixel format of a TIFF, as far as we decode it. */
typedef struct tiff_fmt {
    uint32_t width;
    uint32_t height;
    uint16_t bits;
    uint16_t spp;
    uint16_t photometric;
    uint16_t planar;
    int rgb;
    int invert; /* MINISWHITE */
    int palette;
    gray_lut lut;
} tiff_fmt;

static int tiff_corrupt(tiff_rctx *ctx, const char *what)
{
    return cnx_error_set(CNX_ECORRUPT, 0, "%s: corrupt or truncated TIFF: %s",
                         ctx->path, ctx->msg[0] ? ctx->msg : what);
}

static int tiff_header(tiff_rctx *ctx, TIFF *tif, tiff_fmt *fmt)
{
    uint16_t sampleformat = SAMPLEFORMAT_UINT;
    uint16_t compression = COMPRESSION_NONE;
    tdir_t ndirs;
    int rc;

    memset(fmt, 0, sizeof(*fmt));
    if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &fmt->width) ||
        !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &fmt->height))
        return tiff_corrupt(ctx, "no image size");
    rc = check_side(ctx->path, "TIFF", fmt->width, fmt->height);
    if (rc != 0)
        return rc;
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &fmt->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &fmt->spp);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &fmt->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &sampleformat);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &fmt->photometric))
        fmt->photometric = PHOTOMETRIC_MINISBLACK;
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
    if (!TIFFIsCODECConfigured(compression))
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: TIFF compression %u is not supported by "
                             "this libtiff",
                             ctx->path, (unsigned)compression);
    if (fmt->bits != 8 && fmt->bits != 16)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: TIFF with %u bits per sample; 8 and 16 "
                             "are accepted",
                             ctx->path, (unsigned)fmt->bits);
    if (sampleformat != SAMPLEFORMAT_UINT)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: TIFF sample format %u; only unsigned "
                             "integers are accepted",
                             ctx->path, (unsigned)sampleformat);
    switch (fmt->photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE:
        fmt->invert = fmt->photometric == PHOTOMETRIC_MINISWHITE;
        if (fmt->spp < 1 || fmt->spp > 2)
            goto unsupported;
        break;
    case PHOTOMETRIC_RGB:
        fmt->rgb = 1;
        if (fmt->spp < 3 || fmt->spp > 4 || fmt->planar != PLANARCONFIG_CONTIG)
            goto unsupported;
        break;
    case PHOTOMETRIC_PALETTE: {
        uint16_t *r, *g, *b;
        int wide = 0;
        if (fmt->spp != 1 || fmt->bits != 8)
            goto unsupported;
        if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b))
            return tiff_corrupt(ctx, "palette TIFF without a colour map");
        /* Colour maps are 16-bit; some writers store 8-bit values. */
        for (int i = 0; i < 256; i++)
            wide |= r[i] > 255 || g[i] > 255 || b[i] > 255;
        for (int i = 0; i < 256; i++) {
            fmt->lut.value[i] = (uint8_t)(wide ? r[i] >> 8 : r[i]);
            fmt->lut.gray[i] = r[i] == g[i] && r[i] == b[i];
        }
        fmt->palette = 1;
        break;
    }
    default:
        goto unsupported;
    }
    ndirs = TIFFNumberOfDirectories(tif);
    if (ndirs > 1)
        return cnx_error_set(CNX_EUNSUPPORTED, 0,
                             "%s: multi-page TIFF (%u pages); give one file "
                             "per section",
                             ctx->path, (unsigned)ndirs);
    return 0;

unsupported:
    return cnx_error_set(CNX_EUNSUPPORTED, 0,
                         "%s: TIFF photometric %u with %u samples per pixel "
                         "(planar %u); only gray images are accepted",
                         ctx->path, (unsigned)fmt->photometric,
                         (unsigned)fmt->spp, (unsigned)fmt->planar);
}

/*
 * Convert n decoded pixels of one row (samples interleaved when contig)
 * into gray output at dst. stride is the distance in samples between
 * pixels: spp for contig data, 1 for a separate plane.
 */
static int tiff_row(tiff_rctx *ctx, const tiff_fmt *fmt, const uint8_t *src,
                    size_t stride, uint8_t *dst, int64_t n, int64_t x0,
                    int64_t y)
{
    int64_t i;
    if (fmt->bits == 8) {
        for (i = 0; i < n; i++) {
            const uint8_t *p = src + (size_t)i * stride;
            uint8_t v = p[0];
            if (fmt->rgb && (p[1] != v || p[2] != v))
                goto colour;
            if (fmt->palette) {
                if (!fmt->lut.gray[v])
                    goto colour;
                v = fmt->lut.value[v];
            }
            dst[i] = fmt->invert ? (uint8_t)(255 - v) : v;
        }
    } else {
        for (i = 0; i < n; i++) {
            uint16_t s[3];
            memcpy(s, src + (size_t)i * stride * 2, fmt->rgb ? 6 : 2);
            if (fmt->rgb && (s[1] != s[0] || s[2] != s[0]))
                goto colour;
            if (fmt->invert)
                s[0] = (uint16_t)(65535 - s[0]);
            memcpy(dst + (size_t)i * 2, &s[0], 2);
        }
    }
    return 0;

colour:
    return cnx_error_set(CNX_EUNSUPPORTED, 0,
                         "%s: true-colour TIFF (pixel %lld,%lld is not "
                         "gray); only gray images are accepted",
                         ctx->path, (long long)(x0 + i), (long long)y);
}

static int tiff_pixels(tiff_rctx *ctx, TIFF *tif, const tiff_fmt *fmt,
                       cnx_image *img)
{
    const size_t bps = fmt->bits / 8;
    const size_t stride = fmt->planar == PLANARCONFIG_CONTIG ? fmt->spp : 1;
    const size_t outrow = (size_t)fmt->width * bps;
    uint8_t *pixels = img->pixels;
    uint8_t *buf = NULL;
    int rc = 0;

    if (TIFFIsTiled(tif)) {
        uint32_t tw = 0, th = 0;
        tmsize_t tsize = TIFFTileSize(tif), trow = TIFFTileRowSize(tif);
        if (!TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw) ||
            !TIFFGetField(tif, TIFFTAG_TILELENGTH, &th) || tw == 0 || th == 0 ||
            tsize <= 0 || trow <= 0 || (uint64_t)trow * th > (uint64_t)tsize)
            return tiff_corrupt(ctx, "bad tile layout");
        buf = malloc((size_t)tsize);
        if (buf == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", ctx->path);
        for (uint32_t ty = 0; ty < fmt->height && rc == 0; ty += th) {
            for (uint32_t tx = 0; tx < fmt->width && rc == 0; tx += tw) {
                ttile_t t = TIFFComputeTile(tif, tx, ty, 0, 0);
                uint32_t nx = fmt->width - tx < tw ? fmt->width - tx : tw;
                uint32_t ny = fmt->height - ty < th ? fmt->height - ty : th;
                if (TIFFReadEncodedTile(tif, t, buf, tsize) != tsize) {
                    rc = tiff_corrupt(ctx, "short tile");
                    break;
                }
                for (uint32_t r = 0; r < ny && rc == 0; r++)
                    rc = tiff_row(
                        ctx, fmt, buf + (size_t)r * (size_t)trow, stride,
                        pixels + (size_t)(ty + r) * outrow + (size_t)tx * bps,
                        nx, tx, ty + r);
            }
        }
    } else {
        uint32_t rps = 0;
        tmsize_t line = TIFFScanlineSize(tif), ssize = TIFFStripSize(tif);
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
        if (rps == 0 || rps > fmt->height)
            rps = fmt->height;
        if (line <= 0 || ssize <= 0 || (uint64_t)line * rps > (uint64_t)ssize)
            return tiff_corrupt(ctx, "bad strip layout");
        buf = malloc((size_t)ssize);
        if (buf == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", ctx->path);
        for (uint32_t row = 0; row < fmt->height && rc == 0; row += rps) {
            uint32_t nrows = fmt->height - row < rps ? fmt->height - row : rps;
            tstrip_t s = TIFFComputeStrip(tif, row, 0);
            tmsize_t want = line * (tmsize_t)nrows;
            if (TIFFReadEncodedStrip(tif, s, buf, want) != want) {
                rc = tiff_corrupt(ctx, "short strip");
                break;
            }
            for (uint32_t r = 0; r < nrows && rc == 0; r++)
                rc = tiff_row(ctx, fmt, buf + (size_t)r * (size_t)line, stride,
                              pixels + (size_t)(row + r) * outrow, fmt->width,
                              0, row + r);
        }
    }
    free(buf);
    return rc;
}

/* Open path as TIFF; *fmt describes it. header_only skips the pixels. */
static int tiff_read_file(cnx_image **out, tiff_fmt *fmt, const char *path,
                          int header_only)
{
    tiff_rctx ctx;
    TIFFOpenOptions *opts;
    cnx_image *img = NULL;
    TIFF *tif;
    int rc;

    *out = NULL;
    memset(&ctx, 0, sizeof(ctx));
    ctx.path = path;
    pthread_once(&tiff_once, tiff_silence_globals);
    opts = TIFFOpenOptionsAlloc();
    if (opts == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", path);
    TIFFOpenOptionsSetErrorHandlerExtR(opts, tiff_on_error, &ctx);
    TIFFOpenOptionsSetWarningHandlerExtR(opts, tiff_on_warning, &ctx);
    /* "m": plain reads, no mapping, so a file cut short reads as short. */
    tif = TIFFOpenExt(path, "rm", opts);
    TIFFOpenOptionsFree(opts);
    if (tif == NULL)
        return tiff_corrupt(&ctx, "cannot read the header");
    rc = tiff_header(&ctx, tif, fmt);
    if (rc == 0 && !header_only) {
        rc = image_alloc(&img, path, fmt->width, fmt->height, fmt->bits);
        if (rc == 0)
            rc = tiff_pixels(&ctx, tif, fmt, img);
    }
    TIFFClose(tif);
    if (rc != 0) {
        cnx_image_free(img);
        return rc;
    }
    *out = img;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Public reading API                                                  */

int cnx_image_read(cnx_image **out, const char *path)
{
    image_kind kind;
    FILE *fp;
    int rc;

    *out = NULL;
    rc = open_image(&fp, &kind, path);
    if (rc != 0)
        return rc;
    if (kind == KIND_PNG) {
        png_rctx ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.path = path;
        ctx.fp = fp;
        rc = png_read_file(&ctx);
        fclose(fp);
        if (rc == 0)
            *out = ctx.img;
        return rc;
    } else {
        tiff_fmt fmt;
        fclose(fp);
        return tiff_read_file(out, &fmt, path, 0);
    }
}

/* ------------------------------------------------------------------ */
/* JPEG (libjpeg-turbo), from memory                                   */

typedef struct jpeg_rctx {
    struct jpeg_error_mgr mgr; /* first: libjpeg hands back its address */
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
} jpeg_rctx;

static void jpeg_rd_error(j_common_ptr cinfo)
{
    jpeg_rctx *ctx = (jpeg_rctx *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, ctx->msg);
    longjmp(ctx->jump, 1);
}

static void jpeg_rd_message(j_common_ptr cinfo)
{
    (void)cinfo; /* warnings (e.g. premature end) are caught below */
}

/* What a volatile-free setjmp body must keep: all in ctx or above it. */
static int jpeg_decode(cnx_image **out, const uint8_t *data, size_t len,
                       const char *what)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_rctx ctx;
    cnx_image *volatile img = NULL;
    int rc;

    *out = NULL;
    if (len > (size_t)ULONG_MAX)
        return cnx_error_set(CNX_ETOOBIG, 0, "%s: JPEG of %zu bytes", what,
                             len);
    memset(&ctx, 0, sizeof(ctx));
    cinfo.err = jpeg_std_error(&ctx.mgr);
    ctx.mgr.error_exit = jpeg_rd_error;
    ctx.mgr.output_message = jpeg_rd_message;
    if (setjmp(ctx.jump) != 0) {
        jpeg_destroy_decompress(&cinfo);
        cnx_image_free(img);
        return cnx_error_set(CNX_ECORRUPT, 0, "%s: corrupt JPEG: %s", what,
                             ctx.msg);
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.num_components != 1 || cinfo.jpeg_color_space != JCS_GRAYSCALE) {
        rc = cnx_error_set(CNX_EUNSUPPORTED, 0,
                           "%s: JPEG with %d components; only gray images "
                           "are accepted",
                           what, cinfo.num_components);
        jpeg_destroy_decompress(&cinfo);
        return rc;
    }
    if (cinfo.image_width < 1 || cinfo.image_height < 1 ||
        cinfo.image_width > CNX_IMAGE_MAX_SIDE ||
        cinfo.image_height > CNX_IMAGE_MAX_SIDE * 64) {
        rc = cnx_error_set(CNX_ETOOBIG, 0, "%s: JPEG of %ux%u pixels", what,
                           cinfo.image_width, cinfo.image_height);
        jpeg_destroy_decompress(&cinfo);
        return rc;
    }
    cinfo.out_color_space = JCS_GRAYSCALE;
    /* The default (islow) DCT: the one whose output every libjpeg and
     * libjpeg-turbo build gives to the bit. */
    cinfo.dct_method = JDCT_ISLOW;
    jpeg_start_decompress(&cinfo);
    img = calloc(1, sizeof(*img));
    if (img != NULL)
        img->pixels = malloc((size_t)cinfo.output_width * cinfo.output_height);
    if (img == NULL || img->pixels == NULL) {
        jpeg_destroy_decompress(&cinfo);
        cnx_image_free(img);
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", what);
    }
    img->width = cinfo.output_width;
    img->height = cinfo.output_height;
    img->bits = 8;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = (JSAMPROW)img->pixels +
                       (size_t)cinfo.output_scanline * cinfo.output_width;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    if (ctx.mgr.num_warnings > 0) {
        /* libjpeg pads a truncated stream with gray and warns. */
        jpeg_destroy_decompress(&cinfo);
        cnx_image_free(img);
        return cnx_error_set(CNX_ECORRUPT, 0,
                             "%s: corrupt JPEG (truncated or damaged data)",
                             what);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    *out = img;
    return 0;
}

/*
 * The decoders read files (libpng through stdio, libtiff by path), so a
 * buffer becomes an anonymous in-memory file, read through its
 * /proc/self/fd path: one decoding path for files and buffers.
 */
int cnx_image_decode(cnx_image **out, const void *data, size_t len,
                     const char *what)
{
    const uint8_t *p = data;
    char path[64];
    size_t done = 0;
    int fd, rc;

    *out = NULL;
    if (len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return jpeg_decode(out, p, len, what);
    fd = memfd_create("cnx-image", MFD_CLOEXEC);
    if (fd < 0)
        return cnx_error_set(CNX_EIO, 1, "%s: cannot make an in-memory file: %s",
                             what, strerror(errno));
    while (done < len) {
        ssize_t n = write(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = cnx_error_set(CNX_EIO, 1, "%s: in-memory file: %s", what,
                               strerror(errno));
            close(fd);
            return rc;
        }
        done += (size_t)n;
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    rc = cnx_image_read(out, path);
    close(fd);
    if (rc != 0) {
        const cnx_error *e = cnx_error_last();
        const char *msg = e->message;
        size_t n = strlen(path);
        char text[sizeof(e->message)];
        if (strncmp(msg, path, n) == 0 && msg[n] == ':')
            msg += n + 1;
        while (*msg == ' ')
            msg++;
        snprintf(text, sizeof(text), "%s", msg);
        rc = cnx_error_set(rc, e->retriable, "%s: %s", what, text);
    }
    return rc;
}

int cnx_image_probe(const char *path, int64_t *width, int64_t *height,
                    int *bits)
{
    image_kind kind;
    FILE *fp;
    int rc;

    rc = open_image(&fp, &kind, path);
    if (rc != 0)
        return rc;
    if (kind == KIND_PNG) {
        png_rctx ctx;
        memset(&ctx, 0, sizeof(ctx));
        ctx.path = path;
        ctx.fp = fp;
        ctx.header_only = 1;
        rc = png_read_file(&ctx);
        fclose(fp);
        if (rc != 0)
            return rc;
        *width = ctx.width;
        *height = ctx.height;
        *bits = ctx.bits;
    } else {
        tiff_fmt fmt;
        cnx_image *none;
        fclose(fp);
        rc = tiff_read_file(&none, &fmt, path, 1);
        if (rc != 0)
            return rc;
        *width = fmt.width;
        *height = fmt.height;
        *bits = fmt.bits;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* PNG encoding                                                        */

typedef struct png_wctx {
    int code;
    uint8_t *data;
    size_t len;
    size_t cap;
    uint8_t *row;
    png_structp png;
    png_infop info;
} png_wctx;

static void png_wr_error(png_structp png, png_const_charp msg)
{
    png_wctx *ctx = png_get_error_ptr(png);
    (void)msg;
    if (ctx->code == 0)
        ctx->code = CNX_EINVAL;
    png_longjmp(png, 1);
}

static void png_wr_data(png_structp png, png_bytep data, size_t len)
{
    png_wctx *ctx = png_get_io_ptr(png);
    if (len > ctx->cap - ctx->len) {
        size_t cap = ctx->cap ? ctx->cap : 4096;
        uint8_t *grown;
        while (cap - ctx->len < len)
            cap *= 2;
        grown = realloc(ctx->data, cap);
        if (grown == NULL) {
            ctx->code = CNX_ENOMEM;
            png_error(png, "out of memory");
        }
        ctx->data = grown;
        ctx->cap = cap;
    }
    memcpy(ctx->data + ctx->len, data, len);
    ctx->len += len;
}

static void png_wr_flush(png_structp png)
{
    (void)png;
}

static int png_encode(png_wctx *ctx, const cnx_image *img)
{
    const size_t rowbytes = (size_t)img->width * (size_t)(img->bits / 8);

    ctx->png = png_create_write_struct(PNG_LIBPNG_VER_STRING, ctx, png_wr_error,
                                       png_rd_warning);
    if (ctx->png == NULL)
        return CNX_ENOMEM;
    ctx->info = png_create_info_struct(ctx->png);
    if (ctx->info == NULL)
        return CNX_ENOMEM;
    if (img->bits == 16) {
        ctx->row = malloc(rowbytes);
        if (ctx->row == NULL)
            return CNX_ENOMEM;
    }
    if (setjmp(png_jmpbuf(ctx->png)))
        return ctx->code != 0 ? ctx->code : CNX_EINVAL;

    png_set_write_fn(ctx->png, ctx, png_wr_data, png_wr_flush);
    png_set_compression_level(ctx->png, PNG_ENC_LEVEL);
    png_set_compression_mem_level(ctx->png, PNG_ENC_MEM_LEVEL);
    png_set_compression_window_bits(ctx->png, PNG_ENC_WINDOW_BITS);
    png_set_compression_strategy(ctx->png, PNG_ENC_STRATEGY);
    png_set_compression_buffer_size(ctx->png, PNG_ENC_IDAT_SIZE);
    png_set_filter(ctx->png, PNG_FILTER_TYPE_BASE, PNG_ENC_FILTER);
    png_set_IHDR(ctx->png, ctx->info, (png_uint_32)img->width,
                 (png_uint_32)img->height, img->bits, PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(ctx->png, ctx->info);
    for (int64_t y = 0; y < img->height; y++) {
        const uint8_t *src =
            (const uint8_t *)img->pixels + (size_t)y * rowbytes;
        if (img->bits == 16) {
            /* Native uint16 to PNG's big-endian samples. */
            for (int64_t x = 0; x < img->width; x++) {
                uint16_t v;
                memcpy(&v, src + 2 * (size_t)x, 2);
                ctx->row[2 * x] = (uint8_t)(v >> 8);
                ctx->row[2 * x + 1] = (uint8_t)(v & 0xff);
            }
            png_write_row(ctx->png, ctx->row);
        } else {
            png_write_row(ctx->png, src);
        }
    }
    png_write_end(ctx->png, NULL);
    return 0;
}

int cnx_png_encode(const cnx_image *img, uint8_t **out, size_t *len)
{
    png_wctx ctx;
    int rc;

    *out = NULL;
    *len = 0;
    if (img == NULL || img->pixels == NULL ||
        (img->bits != 8 && img->bits != 16) || img->width < 1 ||
        img->height < 1 || img->width > CNX_IMAGE_MAX_SIDE ||
        img->height > CNX_IMAGE_MAX_SIDE)
        return cnx_error_set(CNX_EINVAL, 0,
                             "png encode: need an 8- or 16-bit image of 1 to "
                             "%d pixels a side",
                             CNX_IMAGE_MAX_SIDE);
    memset(&ctx, 0, sizeof(ctx));
    rc = png_encode(&ctx, img);
    if (ctx.png != NULL)
        png_destroy_write_struct(&ctx.png, ctx.info ? &ctx.info : NULL);
    free(ctx.row);
    if (rc != 0) {
        free(ctx.data);
        if (rc == CNX_ENOMEM)
            return cnx_error_set(rc, 0, "png encode: out of memory");
        return cnx_error_set(rc, 0, "png encode: libpng refused the image");
    }
    *out = ctx.data;
    *len = ctx.len;
    return 0;
}
