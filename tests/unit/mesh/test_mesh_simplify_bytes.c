/*
 * The bytes cnx_mesh_simplify writes are part of CNX_MESH_VERSION: the
 * same input and options must give the same fragments in every release
 * of the same kernel version. This pins SHA-256 digests of the legacy
 * encoding of every simplified fragment of a Voronoi-like volume, meshed
 * as a worker meshes it (chunks with their faces fixed) and as one closed
 * block, under several targets and error limits (those of
 * CNX_MESH_VERSION 2). A change that makes other decisions, or the same
 * decisions with other floating-point operations, shows here; changing
 * the digests means bumping CNX_MESH_VERSION.
 */
#include "cnx_test.h"

#include <math.h>

#include "cnx/digest.h"
#include "cnx/mesh.h"
#include "mesh_check.h"

#define MAX_CHUNKS 64

static cnx_mesh_set sets[MAX_CHUNKS];
static cnx_mesh_block blocks[MAX_CHUNKS];

typedef struct pin {
    double fraction, max_error;
    const char *chunks; /* digest of all chunks' fragments, in order */
    const char *closed; /* digest of the closed block's fragments */
} pin;

static const pin pins[] = {
    /* what the workflow asks for */
    {0.25, INFINITY,
     "sha256:be290b25099f43c5be56050885b65be9b3b163455c73cc9982376b6619ea1170",
     "sha256:69fd98632dd75037478ab0d30642c30d1e0e08188d9fcc1ea59e2ba98bbdf72f"},
    /* the bench's figures */
    {0.1, 64,
     "sha256:e8453ce55b25c6b4311ffe12344456e2f654c360c4a6a65b485f3bcd78286214",
     "sha256:4c1e5b77b689df0c23cfb7f2403e0c464dddd7bd020532483f5c40a496da51bf"},
    {0.5, 64,
     "sha256:97e55bed9756f55b2b821dd145684715cac03f8b7ed481c8a21c36056fc89755",
     "sha256:5971dd61719b71d8e9df339579164c22dfb6afa7fb7224c13623b5f7fe2e69df"},
    {0.1, 1000,
     "sha256:6a84b8868be97859940dd9731a8523d989bd9ec8fa1262c909623720018909f3",
     "sha256:2dcc61ed5cd0e2e0c373ab24c690189d365b114eb0cdfc4ff982eb3fe7584889"},
    /* zero-error collapses only */
    {0, 0,
     "sha256:8491257a0adee7a1da10d2e17308350c606699a1f37baca49a4283ad9b594ed4",
     "sha256:6627c254d4b0cb48580ae7c4678225db22fceb4ed46fce053b699480348f5ab6"},
};

/*
 * Labels of a size[0] x size[1] x size[2] volume (x fastest): each voxel
 * the label of its nearest jittered seed on a grid of `spacing` voxels,
 * 0 within half a voxel of the boundary to the second nearest. Like
 * voronoi_labels() of mesh_check.h, but every value is sequenced, so the
 * volume does not depend on the compiler (the pins need the same input
 * in every build, sanitizers included).
 */
static uint64_t *pinned_labels(const int64_t size[3], int spacing,
                               uint64_t seed)
{
    const int g[3] = {(int)(size[0] / spacing) + 2,
                      (int)(size[1] / spacing) + 2,
                      (int)(size[2] / spacing) + 2};
    const size_t ns = (size_t)g[0] * (size_t)g[1] * (size_t)g[2];
    double *sp = malloc(3 * ns * sizeof(*sp));
    uint64_t *id = malloc(ns * sizeof(*id));
    uint64_t *v = malloc((size_t)(size[0] * size[1] * size[2]) * sizeof(*v));
    assert_non_null(sp);
    assert_non_null(id);
    assert_non_null(v);
    for (size_t i = 0; i < ns; i++) {
        const size_t c[3] = {i % (size_t)g[0], i / (size_t)g[0] % (size_t)g[1],
                             i / ((size_t)g[0] * (size_t)g[1])};
        uint64_t r, sh;
        for (int a = 0; a < 3; a++) {
            r = cnx_test_rand(&seed) % 1000;
            sp[3 * i + (size_t)a] =
                ((double)c[a] - 1.0 + (double)r / 1000.0) * spacing;
        }
        r = cnx_test_rand(&seed);
        sh = cnx_test_rand(&seed) % 40;
        id[i] = (r >> sh) | 1;
    }
    for (int64_t z = 0; z < size[2]; z++)
        for (int64_t y = 0; y < size[1]; y++)
            for (int64_t x = 0; x < size[0]; x++) {
                const int64_t p[3] = {x, y, z};
                const int c[3] = {(int)(x / spacing), (int)(y / spacing),
                                  (int)(z / spacing)};
                double d1 = 1e300, d2 = 1e300;
                uint64_t best = 0;
                for (int k = c[2]; k <= c[2] + 2 && k < g[2]; k++)
                    for (int j = c[1]; j <= c[1] + 2 && j < g[1]; j++)
                        for (int i = c[0]; i <= c[0] + 2 && i < g[0]; i++) {
                            const size_t s =
                                (size_t)i +
                                (size_t)g[0] *
                                    ((size_t)j + (size_t)g[1] * (size_t)k);
                            double d = 0;
                            for (int a = 0; a < 3; a++) {
                                const double e =
                                    (double)p[a] - sp[3 * s + (size_t)a];
                                d += e * e;
                            }
                            if (d < d1) {
                                d2 = d1;
                                d1 = d;
                                best = id[s];
                            } else if (d < d2) {
                                d2 = d;
                            }
                        }
                v[(z * size[1] + y) * size[0] + x] =
                    sqrt(d2) - sqrt(d1) < 1.0 ? 0 : best;
            }
    free(sp);
    free(id);
    return v;
}

/* Simplify a copy of every mesh of the n sets with o (planes of each
 * block when `planes`), feeding the encoded fragments to ctx. */
static void digest_sets(const cnx_mesh_set *s, const cnx_mesh_block *b,
                        size_t n, int planes, double fraction, double max_error,
                        char out[CNX_DIGEST_LEN])
{
    cnx_digest_ctx *ctx;
    assert_int_equal(cnx_digest_ctx_new(&ctx), 0);
    for (size_t c = 0; c < n; c++) {
        cnx_mesh_simplify_opts o;
        memset(&o, 0, sizeof(o));
        o.target_fraction = fraction;
        o.max_error = max_error;
        if (planes)
            cnx_mesh_block_planes(&b[c], &o);
        for (size_t i = 0; i < s[c].n; i++) {
            const cnx_mesh *src = &s[c].meshes[i];
            cnx_mesh m = {src->nverts, src->ntris, NULL, NULL};
            uint8_t *bytes;
            size_t len;
            m.verts = malloc(3 * m.nverts * sizeof(float) + 1);
            m.tris = malloc(3 * m.ntris * sizeof(uint32_t) + 1);
            assert_non_null(m.verts);
            assert_non_null(m.tris);
            memcpy(m.verts, src->verts, 3 * m.nverts * sizeof(float));
            memcpy(m.tris, src->tris, 3 * m.ntris * sizeof(uint32_t));
            assert_int_equal(cnx_mesh_simplify(&m, &o), 0);
            assert_int_equal(cnx_mesh_legacy_encode(&m, &bytes, &len), 0);
            cnx_digest_ctx_update(ctx, bytes, len);
            free(bytes);
            cnx_mesh_free(&m);
        }
    }
    cnx_digest_ctx_final(ctx, out);
    cnx_digest_ctx_free(ctx);
}

static void test_mesh_simplify_bytes__pinned_digests(void **state)
{
    const int64_t size[3] = {48, 40, 36}, chunk[3] = {24, 20, 18};
    const double res[3] = {8, 8, 12};
    uint64_t *v = pinned_labels(size, 10, 11);
    const size_t nch = mesh_chunks(v, size, chunk, res, sets, blocks);
    cnx_mesh_block whole;
    cnx_mesh_set closed;
    int bad = 0;
    (void)state;
    memset(&whole, 0, sizeof(whole));
    whole.labels = v;
    for (int a = 0; a < 3; a++) {
        whole.size[a] = size[a];
        whole.cells.min[a] = -1;
        whole.cells.max[a] = size[a];
        whole.resolution[a] = res[a];
    }
    assert_int_equal(cnx_mesh_block_run(&whole, &closed), 0);
    for (size_t i = 0; i < sizeof(pins) / sizeof(pins[0]); i++) {
        char dc[CNX_DIGEST_LEN], dw[CNX_DIGEST_LEN];
        digest_sets(sets, blocks, nch, 1, pins[i].fraction, pins[i].max_error,
                    dc);
        digest_sets(&closed, &whole, 1, 0, pins[i].fraction, pins[i].max_error,
                    dw);
        if (strcmp(dc, pins[i].chunks) != 0 ||
            strcmp(dw, pins[i].closed) != 0) {
            print_message("fraction %g, max_error %g: chunks %s, closed %s\n",
                          pins[i].fraction, pins[i].max_error, dc, dw);
            bad = 1;
        }
    }
    assert_false(bad);
    cnx_mesh_set_free(&closed);
    blocks_free(blocks, sets, nch);
    free(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_simplify_bytes__pinned_digests),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
