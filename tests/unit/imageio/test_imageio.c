/*
 * Image I/O: PNG round trips and determinism, PNG files built byte by byte
 * here (so byte order, palettes, colour types and limits are checked against
 * the format itself, not against our own encoder), TIFF files written with
 * libtiff in every layout we accept, and damaged files of every kind.
 */
#include "cnx_test.h"

#include <png.h>
#include <tiffio.h>

#include "cnx/error.h"
#include "cnx/imageio.h"

/* ------------------------------------------------------------------ */
/* Helpers                                                             */

typedef struct buf {
    uint8_t *data;
    size_t len;
} buf;

static void buf_add(buf *b, const void *data, size_t len)
{
    b->data = realloc(b->data, b->len + len + 1);
    assert_non_null(b->data);
    memcpy(b->data + b->len, data, len);
    b->len += len;
}

static void buf_be32(buf *b, uint32_t v)
{
    uint8_t x[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8),
                    (uint8_t)v};
    buf_add(b, x, 4);
}

static uint32_t crc32_of(const uint8_t *p, size_t n, uint32_t crc)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static void png_chunk(buf *b, const char *type, const uint8_t *data, size_t len)
{
    uint32_t crc = crc32_of((const uint8_t *)type, 4, 0);
    crc = crc32_of(data, len, crc);
    buf_be32(b, (uint32_t)len);
    buf_add(b, type, 4);
    if (len > 0)
        buf_add(b, data, len);
    buf_be32(b, crc);
}

/*
 * A PNG with the given header and rows, filter 0 on every row and the
 * image data in stored (uncompressed) deflate blocks: every byte of the
 * file is spelled out here.
 */
static buf make_png(uint32_t w, uint32_t h, int depth, int color,
                    const uint8_t *rows, size_t rowbytes, const uint8_t *plte,
                    size_t plte_len)
{
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    buf b = {0}, ihdr = {0}, raw = {0}, z = {0};
    uint32_t a = 1, s2 = 0;
    size_t off = 0;
    uint8_t zero = 0;

    buf_add(&b, sig, 8);
    buf_be32(&ihdr, w);
    buf_be32(&ihdr, h);
    {
        uint8_t rest[5] = {(uint8_t)depth, (uint8_t)color, 0, 0, 0};
        buf_add(&ihdr, rest, 5);
    }
    png_chunk(&b, "IHDR", ihdr.data, ihdr.len);
    if (plte != NULL)
        png_chunk(&b, "PLTE", plte, plte_len);
    for (uint32_t y = 0; y < h; y++) {
        buf_add(&raw, &zero, 1);
        buf_add(&raw, rows + (size_t)y * rowbytes, rowbytes);
    }
    {
        uint8_t zh[2] = {0x78, 0x01};
        buf_add(&z, zh, 2);
    }
    do {
        size_t n = raw.len - off > 65535 ? 65535 : raw.len - off;
        uint8_t hdr[5] = {(uint8_t)(off + n == raw.len), (uint8_t)(n & 0xff),
                          (uint8_t)(n >> 8), (uint8_t)(~n & 0xff),
                          (uint8_t)((~n >> 8) & 0xff)};
        buf_add(&z, hdr, 5);
        buf_add(&z, raw.data + off, n);
        off += n;
    } while (off < raw.len);
    for (size_t i = 0; i < raw.len; i++) {
        a = (a + raw.data[i]) % 65521;
        s2 = (s2 + a) % 65521;
    }
    buf_be32(&z, (s2 << 16) | a);
    png_chunk(&b, "IDAT", z.data, z.len);
    png_chunk(&b, "IEND", NULL, 0);
    free(ihdr.data);
    free(raw.data);
    free(z.data);
    return b;
}

static void write_file(const char *path, const void *data, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (len > 0)
        assert_int_equal(fwrite(data, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
}

static cnx_image *random_image(int64_t w, int64_t h, int bits, uint64_t seed)
{
    cnx_image *img = calloc(1, sizeof(*img));
    size_t n = (size_t)(w * h);
    assert_non_null(img);
    img->width = w;
    img->height = h;
    img->bits = bits;
    img->pixels = malloc(n * (size_t)(bits / 8));
    assert_non_null(img->pixels);
    for (size_t i = 0; i < n; i++) {
        uint64_t r = cnx_test_rand(&seed);
        if (bits == 8)
            ((uint8_t *)img->pixels)[i] = (uint8_t)r;
        else
            ((uint16_t *)img->pixels)[i] = (uint16_t)r;
    }
    return img;
}

static void assert_same_image(const cnx_image *a, const cnx_image *b)
{
    assert_int_equal(a->width, b->width);
    assert_int_equal(a->height, b->height);
    assert_int_equal(a->bits, b->bits);
    assert_memory_equal(a->pixels, b->pixels,
                        (size_t)(a->width * a->height) * (size_t)(a->bits / 8));
}

static void assert_error(int rc, int code, const char *needle)
{
    assert_int_equal(rc, code);
    assert_int_equal(cnx_error_last()->code, code);
    if (strstr(cnx_error_last()->message, needle) == NULL)
        fail_msg("message '%s' lacks '%s'", cnx_error_last()->message, needle);
}

typedef struct fixture {
    char dir[64];
    char path[128];
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    cnx_test_tmpdir(f->dir);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    cnx_test_rmtree(f->dir);
    free(f);
    return 0;
}

static const char *fpath(fixture *f, const char *name)
{
    snprintf(f->path, sizeof(f->path), "%s/%s", f->dir, name);
    return f->path;
}

/* ------------------------------------------------------------------ */
/* PNG                                                                 */

static void test_png__round_trip_is_exact_for_8_and_16_bits(void **state)
{
    static const int64_t sizes[][2] = {
        {1, 1}, {3, 7}, {300, 200}, {17, 1}, {1, 33}};
    fixture *f = *state;
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (int bits = 8; bits <= 16; bits += 8) {
            cnx_image *img = random_image(sizes[s][0], sizes[s][1], bits,
                                          s * 31 + (uint64_t)bits);
            cnx_image *back = NULL;
            uint8_t *png;
            size_t len;
            int64_t w, h;
            int b;
            assert_int_equal(cnx_png_encode(img, &png, &len), 0);
            write_file(fpath(f, "rt.png"), png, len);
            assert_int_equal(cnx_image_read(&back, f->path), 0);
            assert_same_image(img, back);
            assert_int_equal(cnx_image_probe(f->path, &w, &h, &b), 0);
            assert_int_equal(w, img->width);
            assert_int_equal(h, img->height);
            assert_int_equal(b, bits);
            free(png);
            cnx_image_free(img);
            cnx_image_free(back);
        }
    }
}

static void test_png__encode_is_deterministic_without_time_or_text(void **state)
{
    cnx_image *img = random_image(64, 48, 16, 7);
    uint8_t *a, *b;
    size_t alen, blen, off = 8;
    (void)state;
    assert_int_equal(cnx_png_encode(img, &a, &alen), 0);
    assert_int_equal(cnx_png_encode(img, &b, &blen), 0);
    assert_int_equal(alen, blen);
    assert_memory_equal(a, b, alen);
    /* Only IHDR, IDAT and IEND chunks. */
    while (off + 8 <= alen) {
        uint32_t n = ((uint32_t)a[off] << 24) | ((uint32_t)a[off + 1] << 16) |
                     ((uint32_t)a[off + 2] << 8) | a[off + 3];
        const char *t = (const char *)a + off + 4;
        if (memcmp(t, "IHDR", 4) != 0 && memcmp(t, "IDAT", 4) != 0 &&
            memcmp(t, "IEND", 4) != 0)
            fail_msg("unexpected chunk %.4s", t);
        off += 12 + n;
    }
    assert_int_equal(off, alen);
    free(a);
    free(b);
    cnx_image_free(img);
}

static void test_png__encode_refuses_bad_images(void **state)
{
    cnx_image img = {0, 0, 8, NULL};
    uint8_t px[4] = {0};
    uint8_t *out;
    size_t len;
    (void)state;
    assert_int_equal(cnx_png_encode(&img, &out, &len), CNX_EINVAL);
    img.width = 2;
    img.height = 2;
    img.pixels = px;
    img.bits = 12;
    assert_int_equal(cnx_png_encode(&img, &out, &len), CNX_EINVAL);
    img.bits = 8;
    img.width = CNX_IMAGE_MAX_SIDE + 1;
    assert_int_equal(cnx_png_encode(&img, &out, &len), CNX_EINVAL);
}

static void test_png__16_bit_big_endian_reads_as_native(void **state)
{
    fixture *f = *state;
    const uint8_t rows[] = {0x12, 0x34, 0xfe, 0x01, 0x00, 0xff};
    buf png = make_png(3, 1, 16, 0, rows, 6, NULL, 0);
    cnx_image *img;
    write_file(fpath(f, "be.png"), png.data, png.len);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_int_equal(img->bits, 16);
    assert_int_equal(((uint16_t *)img->pixels)[0], 0x1234);
    assert_int_equal(((uint16_t *)img->pixels)[1], 0xfe01);
    assert_int_equal(((uint16_t *)img->pixels)[2], 0x00ff);
    cnx_image_free(img);
    free(png.data);
}

static void test_png__gray_variants_read_as_gray(void **state)
{
    fixture *f = *state;
    cnx_image *img;
    /* gray + alpha: alpha dropped */
    const uint8_t ga[] = {10, 255, 20, 0, 30, 128};
    /* RGB with R = G = B */
    const uint8_t rgb[] = {5, 5, 5, 200, 200, 200};
    /* RGBA 16-bit with R = G = B */
    const uint8_t rgba16[] = {1, 2, 1, 2, 1, 2, 0, 0};
    /* 1-bit gray: 1 0 1 1 0 0 0 0 ... */
    const uint8_t bits1[] = {0xb0};
    /* 2-bit palette: indices 0 1 2 3 into a gray palette */
    const uint8_t pal_rows[] = {0x1b};
    const uint8_t plte[] = {0, 0, 0, 9, 9, 9, 90, 90, 90, 255, 255, 255};
    buf png;

    png = make_png(3, 1, 8, 4, ga, 6, NULL, 0);
    write_file(fpath(f, "ga.png"), png.data, png.len);
    free(png.data);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_memory_equal(img->pixels, "\x0a\x14\x1e", 3);
    cnx_image_free(img);

    png = make_png(2, 1, 8, 2, rgb, 6, NULL, 0);
    write_file(fpath(f, "rgb.png"), png.data, png.len);
    free(png.data);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_int_equal(img->bits, 8);
    assert_memory_equal(img->pixels, "\x05\xc8", 2);
    cnx_image_free(img);

    png = make_png(1, 1, 16, 6, rgba16, 8, NULL, 0);
    write_file(fpath(f, "rgba16.png"), png.data, png.len);
    free(png.data);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_int_equal(img->bits, 16);
    assert_int_equal(((uint16_t *)img->pixels)[0], 0x0102);
    cnx_image_free(img);

    png = make_png(5, 1, 1, 0, bits1, 1, NULL, 0);
    write_file(fpath(f, "bits1.png"), png.data, png.len);
    free(png.data);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_int_equal(img->bits, 8);
    assert_memory_equal(img->pixels, "\xff\x00\xff\xff\x00", 5);
    cnx_image_free(img);

    png = make_png(4, 1, 2, 3, pal_rows, 1, plte, sizeof(plte));
    write_file(fpath(f, "pal.png"), png.data, png.len);
    free(png.data);
    assert_int_equal(cnx_image_read(&img, f->path), 0);
    assert_memory_equal(img->pixels, "\x00\x09\x5a\xff", 4);
    cnx_image_free(img);
}

/* An Adam7-interlaced PNG written with libpng itself: gray, or RGB with
 * R = G = B, from the samples of img. */
static void write_interlaced(const char *path, const cnx_image *img, int rgb)
{
    const int spp = rgb ? 3 : 1, bps = img->bits / 8;
    const size_t rowbytes = (size_t)img->width * (size_t)(spp * bps);
    FILE *fp = fopen(path, "wb");
    png_structp png =
        png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    uint8_t *rows = malloc(rowbytes * (size_t)img->height);
    assert_non_null(fp);
    assert_non_null(png);
    assert_non_null(info);
    assert_non_null(rows);
    if (setjmp(png_jmpbuf(png)))
        fail_msg("libpng failed writing the fixture");
    for (int64_t i = 0; i < img->width * img->height; i++) {
        uint16_t v = img->bits == 8 ? ((uint8_t *)img->pixels)[i]
                                    : ((uint16_t *)img->pixels)[i];
        for (int s = 0; s < spp; s++) {
            uint8_t *p =
                rows + ((size_t)i * (size_t)spp + (size_t)s) * (size_t)bps;
            if (bps == 1) {
                p[0] = (uint8_t)v;
            } else {
                p[0] = (uint8_t)(v >> 8);
                p[1] = (uint8_t)v;
            }
        }
    }
    png_init_io(png, fp);
    png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height,
                 img->bits, rgb ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
                 PNG_INTERLACE_ADAM7, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int pass = png_set_interlace_handling(png); pass > 0; pass--)
        for (int64_t y = 0; y < img->height; y++)
            png_write_row(png, rows + (size_t)y * rowbytes);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    fclose(fp);
    free(rows);
}

static void test_png__interlaced_gray_and_rgb_read_exactly(void **state)
{
    fixture *f = *state;
    for (int rgb = 0; rgb <= 1; rgb++) {
        for (int bits = 8; bits <= 16; bits += 8) {
            cnx_image *img = random_image(29, 17, bits, 77 + (uint64_t)bits);
            cnx_image *back;
            write_interlaced(fpath(f, "adam7.png"), img, rgb);
            if (cnx_image_read(&back, f->path) != 0)
                fail_msg("%s", cnx_error_last()->message);
            assert_same_image(img, back);
            cnx_image_free(img);
            cnx_image_free(back);
        }
    }
}

static void test_png__true_colour_is_unsupported(void **state)
{
    fixture *f = *state;
    const uint8_t rgb[] = {5, 5, 5, 200, 201, 200};
    const uint8_t pal_rows[] = {0, 1};
    const uint8_t plte[] = {7, 7, 7, 255, 0, 0};
    cnx_image *img = (cnx_image *)&img;
    buf png = make_png(2, 1, 8, 2, rgb, 6, NULL, 0);
    write_file(fpath(f, "colour.png"), png.data, png.len);
    free(png.data);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "colour.png: true-colour PNG (pixel 1,0");
    assert_null(img);

    png = make_png(2, 1, 8, 3, pal_rows, 2, plte, sizeof(plte));
    write_file(fpath(f, "cpal.png"), png.data, png.len);
    free(png.data);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "colour entry (1)");
}

static void test_png__truncated_at_every_length_is_corrupt(void **state)
{
    fixture *f = *state;
    cnx_image *img = random_image(23, 19, 16, 3), *back;
    uint8_t *png;
    size_t len;
    assert_int_equal(cnx_png_encode(img, &png, &len), 0);
    for (size_t cut = 8; cut < len; cut++) {
        write_file(fpath(f, "cut.png"), png, cut);
        back = (cnx_image *)&back;
        assert_error(cnx_image_read(&back, f->path), CNX_ECORRUPT, "cut.png");
        assert_null(back);
    }
    free(png);
    cnx_image_free(img);
}

static void test_png__bad_crc_is_corrupt(void **state)
{
    fixture *f = *state;
    cnx_image *img = random_image(16, 16, 8, 4), *back;
    uint8_t *png;
    size_t len;
    assert_int_equal(cnx_png_encode(img, &png, &len), 0);
    png[len - 20] ^= 0x40; /* inside the last IDAT */
    write_file(fpath(f, "crc.png"), png, len);
    assert_error(cnx_image_read(&back, f->path), CNX_ECORRUPT,
                 "crc.png: corrupt PNG");
    free(png);
    cnx_image_free(img);
}

static void test_png__oversized_header_fails_before_allocating(void **state)
{
    fixture *f = *state;
    const uint8_t row[1] = {0};
    buf png = make_png(1, 1, 8, 0, row, 1, NULL, 0);
    cnx_image *img;
    int64_t w, h;
    int bits;
    /* Patch IHDR: width 70000, height 70000 (and fix its CRC). */
    uint8_t *ihdr = png.data + 8;
    const uint32_t side = 70000;
    for (int i = 0; i < 2; i++) {
        ihdr[8 + 4 * i] = (uint8_t)(side >> 24);
        ihdr[9 + 4 * i] = (uint8_t)(side >> 16);
        ihdr[10 + 4 * i] = (uint8_t)(side >> 8);
        ihdr[11 + 4 * i] = (uint8_t)side;
    }
    {
        uint32_t crc = crc32_of(ihdr + 4, 17, 0);
        ihdr[21] = (uint8_t)(crc >> 24);
        ihdr[22] = (uint8_t)(crc >> 16);
        ihdr[23] = (uint8_t)(crc >> 8);
        ihdr[24] = (uint8_t)crc;
    }
    write_file(fpath(f, "huge.png"), png.data, png.len);
    free(png.data);
    assert_error(cnx_image_probe(f->path, &w, &h, &bits), CNX_ETOOBIG,
                 "70000x70000 pixels");
    assert_error(cnx_image_read(&img, f->path), CNX_ETOOBIG, "huge.png");
}

static void test_image__missing_and_non_image_files(void **state)
{
    fixture *f = *state;
    cnx_image *img;
    int64_t w, h;
    int bits;
    assert_error(cnx_image_read(&img, fpath(f, "nope.png")), CNX_ENOTFOUND,
                 "nope.png: no such file");
    write_file(fpath(f, "text.png"), "hello, world\n", 13);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "text.png: not a PNG or TIFF file");
    assert_error(cnx_image_probe(f->path, &w, &h, &bits), CNX_EUNSUPPORTED,
                 "not a PNG or TIFF");
    write_file(fpath(f, "empty.tif"), "", 0);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED, "empty.tif");
    assert_error(cnx_image_read(&img, f->dir), CNX_EINVAL,
                 "not a regular file");
    cnx_image_free(NULL);
}

/* ------------------------------------------------------------------ */
/* TIFF                                                                */

typedef struct tiff_case {
    const char *name;
    int bits;
    int tiled;
    uint16_t compression;
    uint16_t photometric; /* MINISBLACK, MINISWHITE or RGB */
    uint32_t rows_per_strip;
} tiff_case;

static void write_tiff(const char *path, const cnx_image *img,
                       const tiff_case *c)
{
    const int spp = c->photometric == PHOTOMETRIC_RGB ? 3 : 1;
    const size_t bps = (size_t)c->bits / 8;
    const size_t w = (size_t)img->width, h = (size_t)img->height;
    uint8_t *px = malloc(w * h * bps * (size_t)spp);
    TIFF *tif = TIFFOpen(path, "w");
    assert_non_null(tif);
    assert_non_null(px);
    /* The stored samples: inverted for MINISWHITE, tripled for RGB. */
    for (size_t i = 0; i < w * h; i++) {
        uint16_t v = c->bits == 8 ? ((uint8_t *)img->pixels)[i]
                                  : ((uint16_t *)img->pixels)[i];
        if (c->photometric == PHOTOMETRIC_MINISWHITE)
            v = (uint16_t)((c->bits == 8 ? 255 : 65535) - v);
        for (int s = 0; s < spp; s++) {
            if (c->bits == 8)
                px[i * (size_t)spp + (size_t)s] = (uint8_t)v;
            else
                memcpy(px + (i * (size_t)spp + (size_t)s) * 2, &v, 2);
        }
    }
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, (uint32_t)w);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, (uint32_t)h);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, c->bits);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spp);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, c->photometric);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, c->compression);
    if (c->tiled) {
        const uint32_t tw = 16, th = 16;
        uint8_t *tile;
        TIFFSetField(tif, TIFFTAG_TILEWIDTH, tw);
        TIFFSetField(tif, TIFFTAG_TILELENGTH, th);
        tile = malloc((size_t)TIFFTileSize(tif));
        assert_non_null(tile);
        for (uint32_t ty = 0; ty < h; ty += th)
            for (uint32_t tx = 0; tx < w; tx += tw) {
                const size_t pb = bps * (size_t)spp;
                memset(tile, 0, (size_t)TIFFTileSize(tif));
                for (uint32_t r = 0; r < th && ty + r < h; r++)
                    for (uint32_t q = 0; q < tw && tx + q < w; q++)
                        memcpy(tile + ((size_t)r * tw + q) * pb,
                               px + ((ty + r) * w + tx + q) * pb, pb);
                assert_true(TIFFWriteTile(tif, tile, tx, ty, 0, 0) > 0);
            }
        free(tile);
    } else {
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, c->rows_per_strip);
        for (size_t y = 0; y < h; y++)
            assert_int_equal(TIFFWriteScanline(tif,
                                               px + y * w * bps * (size_t)spp,
                                               (uint32_t)y, 0),
                             1);
    }
    TIFFClose(tif);
    free(px);
}

/*
 * A one-strip gray TIFF spelled out byte by byte, directory first (as
 * tifffile writes it), in either byte order; samples are given as values
 * and stored in the file's order.
 */
static buf make_tiff(int big, uint32_t w, uint32_t h, int bits,
                     const uint16_t *values)
{
    static const uint16_t tags[9] = {256, 257, 258, 259, 262,
                                     273, 277, 278, 279};
    const uint32_t nbytes = w * h * (uint32_t)(bits / 8);
    const uint32_t data_off = 8 + 2 + 9 * 12 + 4;
    uint32_t vals[9] = {w, h, (uint32_t)bits, 1, 1, data_off, 1, h, nbytes};
    buf b = {0};
    uint8_t x[4];
#define PUT16(v)                                                               \
    do {                                                                       \
        uint16_t v_ = (uint16_t)(v);                                           \
        x[0] = (uint8_t)(big ? v_ >> 8 : v_);                                  \
        x[1] = (uint8_t)(big ? v_ : v_ >> 8);                                  \
        buf_add(&b, x, 2);                                                     \
    } while (0)
#define PUT32(v)                                                               \
    do {                                                                       \
        uint32_t v_ = (uint32_t)(v);                                           \
        for (int k_ = 0; k_ < 4; k_++)                                         \
            x[k_] = (uint8_t)(v_ >> (big ? 24 - 8 * k_ : 8 * k_));             \
        buf_add(&b, x, 4);                                                     \
    } while (0)
    buf_add(&b, big ? "MM" : "II", 2);
    PUT16(42);
    PUT32(8);
    PUT16(9);
    for (int i = 0; i < 9; i++) {
        int is_long = tags[i] == 256 || tags[i] == 257 || tags[i] == 273 ||
                      tags[i] == 278 || tags[i] == 279;
        PUT16(tags[i]);
        PUT16(is_long ? 4 : 3);
        PUT32(1);
        if (is_long) {
            PUT32(vals[i]);
        } else {
            PUT16(vals[i]);
            PUT16(0);
        }
    }
    PUT32(0);
    for (uint32_t i = 0; i < w * h; i++) {
        if (bits == 8) {
            x[0] = (uint8_t)values[i];
            buf_add(&b, x, 1);
        } else {
            PUT16(values[i]);
        }
    }
#undef PUT16
#undef PUT32
    return b;
}

static void test_tiff__either_byte_order_reads_as_native(void **state)
{
    fixture *f = *state;
    const uint16_t values[6] = {0x1234, 0xfe01, 0x00ff, 0, 65535, 300};
    for (int big = 0; big <= 1; big++) {
        buf tif = make_tiff(big, 3, 2, 16, values);
        cnx_image *img;
        write_file(fpath(f, big ? "mm.tif" : "ii.tif"), tif.data, tif.len);
        free(tif.data);
        if (cnx_image_read(&img, f->path) != 0)
            fail_msg("%s", cnx_error_last()->message);
        assert_int_equal(img->bits, 16);
        assert_memory_equal(img->pixels, values, sizeof(values));
        cnx_image_free(img);
    }
}

static void test_tiff__data_cut_after_the_directory_is_corrupt(void **state)
{
    fixture *f = *state;
    uint16_t values[64];
    buf tif;
    cnx_image *img;
    for (int i = 0; i < 64; i++)
        values[i] = (uint16_t)(i * 1000);
    tif = make_tiff(0, 8, 8, 16, values);
    for (size_t cut = tif.len - 1; cut > 122; cut -= 13) {
        write_file(fpath(f, "short.tif"), tif.data, cut);
        img = (cnx_image *)&img;
        assert_error(cnx_image_read(&img, f->path), CNX_ECORRUPT,
                     "short.tif: corrupt or truncated TIFF");
        assert_null(img);
    }
    free(tif.data);
}

static void test_tiff__every_accepted_layout_round_trips(void **state)
{
    static const tiff_case cases[] = {
        {"u8-strips", 8, 0, COMPRESSION_NONE, PHOTOMETRIC_MINISBLACK, 3},
        {"u16-strips", 16, 0, COMPRESSION_NONE, PHOTOMETRIC_MINISBLACK, 1},
        {"u16-lzw", 16, 0, COMPRESSION_LZW, PHOTOMETRIC_MINISBLACK, 8},
        {"u8-deflate", 8, 0, COMPRESSION_ADOBE_DEFLATE, PHOTOMETRIC_MINISBLACK,
         50},
        {"u8-tiled", 8, 1, COMPRESSION_NONE, PHOTOMETRIC_MINISBLACK, 0},
        {"u16-tiled-lzw", 16, 1, COMPRESSION_LZW, PHOTOMETRIC_MINISBLACK, 0},
        {"u8-white", 8, 0, COMPRESSION_NONE, PHOTOMETRIC_MINISWHITE, 4},
        {"u16-white", 16, 0, COMPRESSION_NONE, PHOTOMETRIC_MINISWHITE, 4},
        {"u8-rgb-gray", 8, 0, COMPRESSION_NONE, PHOTOMETRIC_RGB, 5},
        {"u16-rgb-gray-tiled", 16, 1, COMPRESSION_NONE, PHOTOMETRIC_RGB, 0},
    };
    fixture *f = *state;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cnx_image *img = random_image(37, 29, cases[i].bits, i + 100), *back;
        char name[64];
        int64_t w, h;
        int bits;
        snprintf(name, sizeof(name), "%s.tif", cases[i].name);
        write_tiff(fpath(f, name), img, &cases[i]);
        if (cnx_image_read(&back, f->path) != 0)
            fail_msg("%s: %s", cases[i].name, cnx_error_last()->message);
        assert_same_image(img, back);
        assert_int_equal(cnx_image_probe(f->path, &w, &h, &bits), 0);
        assert_int_equal(w, 37);
        assert_int_equal(h, 29);
        assert_int_equal(bits, cases[i].bits);
        cnx_image_free(img);
        cnx_image_free(back);
    }
}

static void test_tiff__truncated_is_corrupt(void **state)
{
    static const tiff_case c = {
        "t", 16, 0, COMPRESSION_NONE, PHOTOMETRIC_MINISBLACK, 4};
    fixture *f = *state;
    cnx_image *img = random_image(40, 40, 16, 9), *back;
    uint8_t *data;
    long len;
    FILE *fp;
    write_tiff(fpath(f, "full.tif"), img, &c);
    fp = fopen(f->path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    len = ftell(fp);
    rewind(fp);
    data = malloc((size_t)len);
    assert_int_equal(fread(data, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    /* libtiff writes the strips first and the directory last: cut into
     * the strips (keeping the header) and into the directory. */
    for (long cut = 8; cut < len; cut += 97) {
        int rc;
        write_file(fpath(f, "cut.tif"), data, (size_t)cut);
        back = (cnx_image *)&back;
        rc = cnx_image_read(&back, f->path);
        assert_int_equal(rc, CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "cut.tif: corrupt "
                                                          "or truncated "
                                                          "TIFF"));
        assert_null(back);
    }
    free(data);
    cnx_image_free(img);
}

static void test_tiff__colour_and_multipage_are_unsupported(void **state)
{
    fixture *f = *state;
    cnx_image *img;
    uint8_t px[6] = {1, 2, 3, 4, 4, 4};
    TIFF *tif = TIFFOpen(fpath(f, "colour.tif"), "w");
    assert_non_null(tif);
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 2u);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 1u);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 3);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFWriteScanline(tif, px, 0, 0);
    TIFFClose(tif);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "true-colour TIFF (pixel 0,0");

    tif = TIFFOpen(fpath(f, "pages.tif"), "w");
    assert_non_null(tif);
    for (int page = 0; page < 2; page++) {
        TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 2u);
        TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 1u);
        TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
        TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
        TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
        TIFFWriteScanline(tif, px, 0, 0);
        TIFFWriteDirectory(tif);
    }
    TIFFClose(tif);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "multi-page TIFF (2 pages)");

    tif = TIFFOpen(fpath(f, "float.tif"), "w");
    assert_non_null(tif);
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 1u);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 1u);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 32);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
    TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_IEEEFP);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
    TIFFWriteScanline(tif, px, 0, 0);
    TIFFClose(tif);
    assert_error(cnx_image_read(&img, f->path), CNX_EUNSUPPORTED,
                 "32 bits per sample");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_png__round_trip_is_exact_for_8_and_16_bits, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_png__encode_is_deterministic_without_time_or_text, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_png__encode_refuses_bad_images,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_png__16_bit_big_endian_reads_as_native, setup, teardown),
        cmocka_unit_test_setup_teardown(test_png__gray_variants_read_as_gray,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_png__interlaced_gray_and_rgb_read_exactly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_png__true_colour_is_unsupported,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_png__truncated_at_every_length_is_corrupt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_png__bad_crc_is_corrupt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_png__oversized_header_fails_before_allocating, setup,
            teardown),
        cmocka_unit_test_setup_teardown(test_image__missing_and_non_image_files,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tiff__every_accepted_layout_round_trips, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tiff__truncated_is_corrupt, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_tiff__either_byte_order_reads_as_native, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_tiff__data_cut_after_the_directory_is_corrupt, setup,
            teardown),
        cmocka_unit_test_setup_teardown(
            test_tiff__colour_and_multipage_are_unsupported, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
