/*
 * downsample.c - one pyramid step: 2x2x2 or 2x2x1 blocks to one voxel.
 *
 * Work goes output row by output row. The (up to four) input rows of the
 * block row are found first, z then y; averaging sums them per x column
 * into a scratch row (one pass, vectorisable) and then sums each x pair, so
 * every block count is a power of two and the rounded mean is a shift. A
 * uint64 sum is split into (v >> 3, v & 7) halves so it stays exact without
 * 128-bit integers. The mode gathers the block's at most 8 values and
 * counts them pairwise after an all-equal shortcut (most blocks of a
 * segmentation lie inside one object). Edge blocks are the same code with
 * fewer rows or a single column. Single-threaded and deterministic: float32
 * sums have one fixed order. Scratch: one row of accumulators per call.
 */
#include "cnx/downsample.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

void cnx_downsample_factor(const double res[3], int64_t factor[3])
{
    const double t = 2.0 * (res[0] < res[1] ? res[0] : res[1]);
    assert(res[0] > 0.0 && res[1] > 0.0 && res[2] > 0.0);
    factor[0] = 2;
    factor[1] = 2;
    /* Strictly closer, as neuroglancer's rule: a tie keeps z. */
    factor[2] = fabs(res[2] - t) > fabs(2.0 * res[2] - t) ? 2 : 1;
}

static int factor_ok(const int64_t factor[3])
{
    for (int i = 0; i < 3; i++)
        if (factor[i] != 1 && factor[i] != 2)
            return 0;
    return 1;
}

int cnx_downsample_box(const cnx_box *in, const int64_t factor[3], cnx_box *out)
{
    if (!factor_ok(factor))
        return cnx_error_set(CNX_EINVAL, 0,
                             "downsample: factor %lld,%lld,%lld: each must "
                             "be 1 or 2",
                             (long long)factor[0], (long long)factor[1],
                             (long long)factor[2]);
    if (cnx_box_empty(in))
        return cnx_error_set(CNX_EINVAL, 0, "downsample: empty input box");
    for (int i = 0; i < 3; i++) {
        if (in->min[i] % factor[i] != 0)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "downsample: input box min[%d] = %lld is "
                                 "not a multiple of the factor %lld",
                                 i, (long long)in->min[i],
                                 (long long)factor[i]);
        out->min[i] = in->min[i] / factor[i];
        out->max[i] = cnx_ceildiv(in->max[i], factor[i]);
    }
    return 0;
}

/* log2 of a row count in {1, 2, 4}. */
static int log2_rows(int nrows)
{
    assert(nrows == 1 || nrows == 2 || nrows == 4);
    return nrows == 4 ? 2 : nrows - 1;
}

/*
 * Average one output row for an unsigned type T whose block sums fit in A.
 * acc[x] holds the column sums of the nrows input rows; each output voxel
 * then adds fx columns. n = nrows * columns is a power of two, so
 * (sum + n/2) / n is a shift.
 */
#define DS_AVG_ROW(NAME, T, A)                                                 \
    static void NAME(T *out, const T *const *rows, int nrows, int64_t nx,      \
                     int64_t fx, A *acc)                                       \
    {                                                                          \
        const int rs = log2_rows(nrows);                                       \
        const T *r0 = rows[0], *r1 = rows[nrows > 1 ? 1 : 0];                  \
        const T *r2 = rows[nrows > 2 ? 2 : 0], *r3 = rows[nrows > 2 ? 3 : 0];  \
        int64_t x;                                                             \
        if (nrows == 1) {                                                      \
            for (x = 0; x < nx; x++)                                           \
                acc[x] = (A)r0[x];                                             \
        } else if (nrows == 2) {                                               \
            for (x = 0; x < nx; x++)                                           \
                acc[x] = (A)((A)r0[x] + (A)r1[x]);                             \
        } else {                                                               \
            for (x = 0; x < nx; x++)                                           \
                acc[x] = (A)((A)r0[x] + (A)r1[x] + (A)r2[x] + (A)r3[x]);       \
        }                                                                      \
        if (fx == 1) {                                                         \
            const A half = (A)((A)(1u << rs) >> 1);                            \
            for (x = 0; x < nx; x++)                                           \
                out[x] = (T)((A)(acc[x] + half) >> rs);                        \
        } else {                                                               \
            const int64_t nfull = nx / 2;                                      \
            const int sh = rs + 1;                                             \
            const A half = (A)(1u << rs);                                      \
            for (x = 0; x < nfull; x++)                                        \
                out[x] = (T)((A)(acc[2 * x] + acc[2 * x + 1] + half) >> sh);   \
            if (nx & 1) {                                                      \
                const A h1 = (A)((A)(1u << rs) >> 1);                          \
                out[nfull] = (T)((A)(acc[nx - 1] + h1) >> rs);                 \
            }                                                                  \
        }                                                                      \
    }

DS_AVG_ROW(avg_row_u8, uint8_t, uint16_t)
DS_AVG_ROW(avg_row_u16, uint16_t, uint32_t)
DS_AVG_ROW(avg_row_u32, uint32_t, uint64_t)

/*
 * uint64: a block sum can reach 8 * (2^64 - 1). Each value is split as
 * v = 8 * (v >> 3) + (v & 7); the high parts sum to H < 2^64 and the low
 * parts to L <= 56, and with n = 2^sh, sh <= 3,
 * (8H + L + n/2) >> sh == (H << (3 - sh)) + ((L + n/2) >> sh) exactly.
 */
static void avg_row_u64(uint64_t *out, const uint64_t *const *rows, int nrows,
                        int64_t nx, int64_t fx, uint64_t *hi, uint64_t *lo)
{
    const int rs = log2_rows(nrows);
    int64_t x;
    for (x = 0; x < nx; x++) {
        uint64_t h = 0, l = 0;
        for (int k = 0; k < nrows; k++) {
            h += rows[k][x] >> 3;
            l += rows[k][x] & 7;
        }
        hi[x] = h;
        lo[x] = l;
    }
    for (x = 0; x * fx < nx; x++) {
        const int64_t x0 = x * fx;
        const int cols = x0 + 1 < nx && fx == 2 ? 2 : 1;
        const int sh = rs + (cols == 2);
        uint64_t h = hi[x0], l = lo[x0];
        if (cols == 2) {
            h += hi[x0 + 1];
            l += lo[x0 + 1];
        }
        out[x] = (h << (3 - sh)) + ((l + ((UINT64_C(1) << sh) >> 1)) >> sh);
    }
}

/*
 * float32: each column is summed in double, rows in z-then-y order (left
 * to right, no reassociation: the build forbids fast-math and FMA
 * contraction), then the x pair; the mean is rounded once to float.
 */
static void avg_row_f32(float *out, const float *const *rows, int nrows,
                        int64_t nx, int64_t fx, double *acc)
{
    const float *r0 = rows[0], *r1 = rows[nrows > 1 ? 1 : 0];
    const float *r2 = rows[nrows > 2 ? 2 : 0], *r3 = rows[nrows > 2 ? 3 : 0];
    int64_t x;
    if (nrows == 1) {
        for (x = 0; x < nx; x++)
            acc[x] = (double)r0[x];
    } else if (nrows == 2) {
        for (x = 0; x < nx; x++)
            acc[x] = (double)r0[x] + (double)r1[x];
    } else {
        for (x = 0; x < nx; x++)
            acc[x] =
                (double)r0[x] + (double)r1[x] + (double)r2[x] + (double)r3[x];
    }
    for (x = 0; x * fx < nx; x++) {
        const int64_t x0 = x * fx;
        if (fx == 2 && x0 + 1 < nx)
            out[x] = (float)((acc[x0] + acc[x0 + 1]) / (double)(2 * nrows));
        else
            out[x] = (float)(acc[x0] / (double)nrows);
    }
}

/*
 * Mode of one output row: gather the block's values (rows in z-then-y
 * order, then x) and pick the most frequent, ties to the lowest value.
 * The order of the values does not change the result.
 */
#define DS_MODE_ROW(NAME, T)                                                   \
    static T NAME##_pick(const T *v, int n)                                    \
    {                                                                          \
        T best = v[0];                                                         \
        int bestc = 0;                                                         \
        for (int i = 0; i < n; i++) {                                          \
            int c = 0;                                                         \
            for (int j = 0; j < n; j++)                                        \
                c += v[j] == v[i];                                             \
            if (c > bestc || (c == bestc && v[i] < best)) {                    \
                bestc = c;                                                     \
                best = v[i];                                                   \
            }                                                                  \
        }                                                                      \
        return best;                                                           \
    }                                                                          \
    static void NAME(T *out, const T *const *rows, int nrows, int64_t nx,      \
                     int64_t fx)                                               \
    {                                                                          \
        int64_t x = 0;                                                         \
        if (nrows == 4 && fx == 2) {                                           \
            /* Whole 2x2x2 blocks: the common case, unrolled. */               \
            const T *r0 = rows[0], *r1 = rows[1], *r2 = rows[2];               \
            const T *r3 = rows[3];                                             \
            for (; 2 * x + 1 < nx; x++) {                                      \
                const int64_t a = 2 * x, b = 2 * x + 1;                        \
                const T v[8] = {r0[a], r0[b], r1[a], r1[b],                    \
                                r2[a], r2[b], r3[a], r3[b]};                   \
                if (((v[0] == v[1]) & (v[0] == v[2]) & (v[0] == v[3]) &        \
                     (v[0] == v[4]) & (v[0] == v[5]) & (v[0] == v[6]) &        \
                     (v[0] == v[7])) != 0)                                     \
                    out[x] = v[0];                                             \
                else                                                           \
                    out[x] = NAME##_pick(v, 8);                                \
            }                                                                  \
        }                                                                      \
        for (; x * fx < nx; x++) {                                             \
            const int64_t x0 = x * fx;                                         \
            const int cols = fx == 2 && x0 + 1 < nx ? 2 : 1;                   \
            T v[8];                                                            \
            int n = 0;                                                         \
            v[n++] = rows[0][x0];                                              \
            if (cols == 2)                                                     \
                v[n++] = rows[0][x0 + 1];                                      \
            for (int k = 1; k < nrows; k++) {                                  \
                v[n++] = rows[k][x0];                                          \
                if (cols == 2)                                                 \
                    v[n++] = rows[k][x0 + 1];                                  \
            }                                                                  \
            out[x] = NAME##_pick(v, n);                                        \
        }                                                                      \
    }

DS_MODE_ROW(mode_row_u8, uint8_t)
DS_MODE_ROW(mode_row_u16, uint16_t)
DS_MODE_ROW(mode_row_u32, uint32_t)
DS_MODE_ROW(mode_row_u64, uint64_t)

/* One output row: dispatch on type and mode. */
static void ds_row(cnx_dtype dtype, cnx_downsample_mode mode, void *out,
                   const void *const *rows, int nrows, int64_t nx, int64_t fx,
                   void *scratch)
{
    if (mode == CNX_DOWNSAMPLE_MODE) {
        switch (dtype) {
        case CNX_DT_UINT8:
            mode_row_u8(out, (const uint8_t *const *)rows, nrows, nx, fx);
            break;
        case CNX_DT_UINT16:
            mode_row_u16(out, (const uint16_t *const *)rows, nrows, nx, fx);
            break;
        case CNX_DT_UINT32:
            mode_row_u32(out, (const uint32_t *const *)rows, nrows, nx, fx);
            break;
        case CNX_DT_UINT64:
            mode_row_u64(out, (const uint64_t *const *)rows, nrows, nx, fx);
            break;
        default:
            assert(0);
        }
        return;
    }
    switch (dtype) {
    case CNX_DT_UINT8:
        avg_row_u8(out, (const uint8_t *const *)rows, nrows, nx, fx, scratch);
        break;
    case CNX_DT_UINT16:
        avg_row_u16(out, (const uint16_t *const *)rows, nrows, nx, fx, scratch);
        break;
    case CNX_DT_UINT32:
        avg_row_u32(out, (const uint32_t *const *)rows, nrows, nx, fx, scratch);
        break;
    case CNX_DT_UINT64:
        avg_row_u64(out, (const uint64_t *const *)rows, nrows, nx, fx, scratch,
                    (uint64_t *)scratch + nx);
        break;
    case CNX_DT_FLOAT32:
        avg_row_f32(out, (const float *const *)rows, nrows, nx, fx, scratch);
        break;
    default:
        assert(0);
    }
}

int cnx_downsample_into(cnx_volume *out, const cnx_volume *in,
                        const int64_t factor[3], cnx_downsample_mode mode)
{
    const size_t esize = cnx_dtype_size(in->dtype);
    int64_t isz[3], osz[3];
    cnx_box want;
    void *scratch;
    int rc;

    assert(out != NULL && in != NULL && out != in);
    if (esize == 0 || in->dtype != out->dtype || in->channels < 1 ||
        in->channels != out->channels)
        return cnx_error_set(CNX_EINVAL, 0,
                             "downsample: input and output must have one "
                             "known type and the same channels");
    if (mode != CNX_DOWNSAMPLE_AVERAGE && mode != CNX_DOWNSAMPLE_MODE)
        return cnx_error_set(CNX_EINVAL, 0, "downsample: unknown mode %d",
                             (int)mode);
    if (mode == CNX_DOWNSAMPLE_MODE && in->dtype == CNX_DT_FLOAT32)
        return cnx_error_set(CNX_EINVAL, 0,
                             "downsample: mode needs an integer type, not "
                             "float32");
    rc = cnx_downsample_box(&in->box, factor, &want);
    if (rc != 0)
        return rc;
    if (!cnx_box_equal(&want, &out->box))
        return cnx_error_set(CNX_EINVAL, 0,
                             "downsample: output box is not the input box "
                             "divided by the factor");
    cnx_box_size(&in->box, isz);
    cnx_box_size(&out->box, osz);
    /* Two uint64 or one double/uint64 accumulator per input column. */
    scratch = malloc((size_t)isz[0] * 2 * sizeof(uint64_t));
    if (scratch == NULL)
        return cnx_error_set(CNX_ENOMEM, 0,
                             "downsample: no memory for a %lld-voxel row",
                             (long long)isz[0]);
    for (int64_t c = 0; c < in->channels; c++) {
        const char *src =
            (const char *)in->data +
            (size_t)c * (size_t)(isz[0] * isz[1] * isz[2]) * esize;
        char *dst = (char *)out->data +
                    (size_t)c * (size_t)(osz[0] * osz[1] * osz[2]) * esize;
        for (int64_t oz = 0; oz < osz[2]; oz++) {
            const int64_t z0 = oz * factor[2];
            const int64_t nz = z0 + factor[2] <= isz[2] ? factor[2] : 1;
            for (int64_t oy = 0; oy < osz[1]; oy++) {
                const int64_t y0 = oy * factor[1];
                const int64_t ny = y0 + factor[1] <= isz[1] ? factor[1] : 1;
                const void *rows[4];
                int nrows = 0;
                for (int64_t dz = 0; dz < nz; dz++)
                    for (int64_t dy = 0; dy < ny; dy++)
                        rows[nrows++] =
                            src +
                            (size_t)(((z0 + dz) * isz[1] + y0 + dy) * isz[0]) *
                                esize;
                ds_row(in->dtype, mode,
                       dst + (size_t)((oz * osz[1] + oy) * osz[0]) * esize,
                       rows, nrows, isz[0], factor[0], scratch);
            }
        }
    }
    free(scratch);
    return 0;
}

int cnx_downsample_volume(cnx_volume **out, const cnx_volume *in,
                          const int64_t factor[3], cnx_downsample_mode mode)
{
    cnx_volume *vol = NULL;
    cnx_box box;
    int rc;

    *out = NULL;
    rc = cnx_downsample_box(&in->box, factor, &box);
    if (rc == 0)
        rc = cnx_volume_new(&vol, in->dtype, &box, in->channels);
    if (rc == 0)
        rc = cnx_downsample_into(vol, in, factor, mode);
    if (rc != 0) {
        cnx_volume_free(vol);
        return rc;
    }
    *out = vol;
    return 0;
}
