/*
 * test_align_io.c - the alignment documents (cnx/align_io.h): the stage
 * parameters, the match records (cnx.align-match/1) and the transforms
 * (cnx.align/1).
 *
 * Parameters: "{}" and NULL give the defaults; every key is read; an
 * unknown key, a wrong type, a value out of range, an overlap over half
 * the block, a non-object and malformed JSON are refused with
 * CNX_ESCHEMA and a message naming the key, and the output is left alone.
 * Documents: encode then decode gives bitwise the same doubles (awkward
 * ones included: -0, subnormals, 1/3, +-1e15) and the same fields; the
 * encoding is canonical (same bytes twice, and again after a round trip).
 * Decode refuses, with CNX_ECORRUPT naming the object and the field, each
 * of a table of documents edited one place at a time (wrong format, node
 * count, a non-number or out-of-range number, a bad flag, a valid count
 * that does not count the flags, z not increasing / not consecutive, a
 * bad status, ...), and leaves its output empty.
 */
#include <jansson.h>
#include <math.h>

#include "cnx/align.h"
#include "cnx/align_io.h"
#include "cnx/error.h"
#include "cnx_test.h"

/* ---- parameters ------------------------------------------------------------
 */

static void assert_params_equal(const cnx_align_params *a,
                                const cnx_align_params *b)
{
    assert_int_equal(a->stride, b->stride);
    assert_int_equal(a->patch, b->patch);
    assert_int_equal(a->search, b->search);
    assert_int_equal(a->patch_search, b->patch_search);
    assert_int_equal(a->bin, b->bin);
    assert_int_equal(a->highpass, b->highpass);
    assert_memory_equal(&a->min_peak_ratio, &b->min_peak_ratio, sizeof(double));
    assert_memory_equal(&a->max_deviation, &b->max_deviation, sizeof(double));
    assert_memory_equal(&a->min_valid, &b->min_valid, sizeof(double));
    assert_memory_equal(&a->stiffness, &b->stiffness, sizeof(double));
    assert_int_equal(a->block, b->block);
    assert_int_equal(a->overlap, b->overlap);
    assert_int_equal(a->normalize, b->normalize);
}

static void test_align_params_parse__empty_and_null_give_defaults(void **state)
{
    cnx_align_params def, p;
    (void)state;
    cnx_align_params_default(&def);
    memset(&p, 0x5a, sizeof(p));
    assert_int_equal(cnx_align_params_parse("{}", &p), 0);
    assert_params_equal(&p, &def);
    memset(&p, 0x5a, sizeof(p));
    assert_int_equal(cnx_align_params_parse(NULL, &p), 0);
    assert_params_equal(&p, &def);
    memset(&p, 0x5a, sizeof(p));
    assert_int_equal(cnx_align_params_parse(" { } ", &p), 0);
    assert_params_equal(&p, &def);
}

/* A field of p by its name, as a double. */
static double param_value(const cnx_align_params *p, const char *field)
{
    if (strcmp(field, "stride") == 0)
        return (double)p->stride;
    if (strcmp(field, "patch") == 0)
        return (double)p->patch;
    if (strcmp(field, "search") == 0)
        return (double)p->search;
    if (strcmp(field, "patch_search") == 0)
        return (double)p->patch_search;
    if (strcmp(field, "highpass") == 0)
        return (double)p->highpass;
    if (strcmp(field, "min_peak_ratio") == 0)
        return p->min_peak_ratio;
    if (strcmp(field, "max_deviation") == 0)
        return p->max_deviation;
    if (strcmp(field, "min_valid") == 0)
        return p->min_valid;
    if (strcmp(field, "stiffness") == 0)
        return p->stiffness;
    if (strcmp(field, "block") == 0)
        return (double)p->block;
    if (strcmp(field, "overlap") == 0)
        return (double)p->overlap;
    assert_string_equal(field, "normalize");
    return (double)p->normalize;
}

static void test_align_params_parse__every_key_is_read(void **state)
{
    static const struct {
        const char *json;
        const char *field;
        double want;
    } cases[] = {
        {"{\"stride\": 48}", "stride", 48},
        {"{\"stride\": 8}", "stride", 8},
        {"{\"stride\": 4096}", "stride", 4096},
        {"{\"patch\": 128}", "patch", 128},
        {"{\"search\": 0}", "search", 0},
        {"{\"search\": 4096}", "search", 4096},
        {"{\"patch_search\": 16}", "patch_search", 16},
        {"{\"highpass\": 0}", "highpass", 0},
        {"{\"highpass\": 256}", "highpass", 256},
        {"{\"min_peak_ratio\": 3.5}", "min_peak_ratio", 3.5},
        {"{\"min_peak_ratio\": 3}", "min_peak_ratio", 3},
        {"{\"min_peak_ratio\": 1}", "min_peak_ratio", 1},
        {"{\"max_deviation\": 0.5}", "max_deviation", 0.5},
        {"{\"min_valid\": 0}", "min_valid", 0},
        {"{\"min_valid\": 1}", "min_valid", 1},
        {"{\"stiffness\": 2e-3}", "stiffness", 2e-3},
        {"{\"block\": 16, \"overlap\": 8}", "block", 16},
        {"{\"block\": 16, \"overlap\": 8}", "overlap", 8},
        {"{\"overlap\": 64}", "overlap", 64},
        {"{\"normalize\": false}", "normalize", 0},
        {"{\"normalize\": 0}", "normalize", 0},
        {"{\"normalize\": true}", "normalize", 1},
        {"{\"normalize\": 1}", "normalize", 1},
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cnx_align_params p, want;
        double got;
        if (cnx_align_params_parse(cases[k].json, &p) != 0)
            fail_msg("%s: %s", cases[k].json, cnx_error_last()->message);
        cnx_align_params_default(&want);
        got = param_value(&p, cases[k].field);
        if (got != cases[k].want)
            fail_msg("%s: %s = %g, want %g", cases[k].json, cases[k].field, got,
                     cases[k].want);
        /* the other fields keep their defaults */
        if (strstr(cases[k].json, "stride") == NULL)
            assert_int_equal(p.stride, want.stride);
        if (strstr(cases[k].json, "patch\"") == NULL)
            assert_int_equal(p.patch, want.patch);
        if (strstr(cases[k].json, "normalize") == NULL)
            assert_int_equal(p.normalize, want.normalize);
    }
}

static void test_align_params_parse__all_keys_at_once(void **state)
{
    cnx_align_params p, want;
    (void)state;
    assert_int_equal(
        cnx_align_params_parse(
            "{\"stride\": 24, \"patch\": 40, \"search\": 100, "
            "\"patch_search\": 5, \"highpass\": 3, \"min_peak_ratio\": 1.25, "
            "\"max_deviation\": 7.5, \"min_valid\": 0.3, \"stiffness\": 9, "
            "\"block\": 50, \"overlap\": 25, \"normalize\": false, "
            "\"bin\": 2}",
            &p),
        0);
    want = (cnx_align_params){.stride = 24,
                              .patch = 40,
                              .search = 100,
                              .patch_search = 5,
                              .bin = 2,
                              .highpass = 3,
                              .min_peak_ratio = 1.25,
                              .max_deviation = 7.5,
                              .min_valid = 0.3,
                              .stiffness = 9,
                              .block = 50,
                              .overlap = 25,
                              .normalize = 0};
    assert_params_equal(&p, &want);
}

static void test_align_params_parse__bad_input_named_and_refused(void **state)
{
    static const struct {
        const char *json, *named;
    } cases[] = {
        {"{\"strides\": 32}", "unknown key 'strides'"},
        {"{\"Stride\": 32}", "unknown key 'Stride'"},
        {"{\"stride\": 32.0}", "parameters.stride:"},
        {"{\"stride\": \"32\"}", "parameters.stride:"},
        {"{\"stride\": null}", "parameters.stride:"},
        {"{\"stride\": 7}", "parameters.stride:"},
        {"{\"stride\": 4097}", "parameters.stride:"},
        {"{\"patch\": 15}", "parameters.patch:"},
        {"{\"patch\": [64]}", "parameters.patch:"},
        {"{\"search\": -1}", "parameters.search:"},
        {"{\"patch_search\": 0}", "parameters.patch_search:"},
        {"{\"patch_search\": 257}", "parameters.patch_search:"},
        {"{\"highpass\": 257}", "parameters.highpass:"},
        {"{\"highpass\": true}", "parameters.highpass:"},
        {"{\"min_peak_ratio\": 0.5}", "parameters.min_peak_ratio:"},
        {"{\"min_peak_ratio\": 2e6}", "parameters.min_peak_ratio:"},
        {"{\"min_peak_ratio\": \"2\"}", "parameters.min_peak_ratio:"},
        {"{\"max_deviation\": 0}", "parameters.max_deviation:"},
        {"{\"max_deviation\": -1}", "parameters.max_deviation:"},
        {"{\"min_valid\": 1.5}", "parameters.min_valid:"},
        {"{\"min_valid\": -0.1}", "parameters.min_valid:"},
        {"{\"stiffness\": 0}", "parameters.stiffness:"},
        {"{\"stiffness\": null}", "parameters.stiffness:"},
        {"{\"block\": 1}", "parameters.block:"},
        {"{\"block\": 1000001}", "parameters.block:"},
        {"{\"overlap\": 0}", "parameters.overlap:"},
        {"{\"normalize\": 2}", "parameters.normalize:"},
        {"{\"normalize\": \"yes\"}", "parameters.normalize:"},
        {"[]", "must be an object"},
        {"7", "align: parameters"},
        {"{", "align: parameters"},
        {"", "align: parameters"},
        {"{\"stride\": 8, \"stride\": 16}", "align: parameters"},
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cnx_align_params p, before;
        int rc;
        memset(&p, 0x5a, sizeof(p));
        before = p;
        rc = cnx_align_params_parse(cases[k].json, &p);
        if (rc != CNX_ESCHEMA)
            fail_msg("%s: rc %d, want CNX_ESCHEMA", cases[k].json, rc);
        if (strstr(cnx_error_last()->message, cases[k].named) == NULL)
            fail_msg("%s: message '%s' lacks '%s'", cases[k].json,
                     cnx_error_last()->message, cases[k].named);
        assert_memory_equal(&p, &before, sizeof(p));
    }
}

/* The one range that the JSON reader cannot check alone (overlap <= block
 * / 2) is refused by cnx_align_params_check; its message must survive the
 * recoding to CNX_ESCHEMA. */
static void
test_align_params_parse__overlap_over_half_block_is_named(void **state)
{
    static const char *const cases[] = {
        "{\"block\": 16, \"overlap\": 9}",
        "{\"block\": 16}", /* the default overlap, 32, is over 8 */
    };
    (void)state;
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        cnx_align_params p;
        memset(&p, 0x5a, sizeof(p));
        assert_int_equal(cnx_align_params_parse(cases[k], &p), CNX_ESCHEMA);
        if (strstr(cnx_error_last()->message, "parameters.overlap:") == NULL)
            fail_msg("%s: message '%s' does not name overlap", cases[k],
                     cnx_error_last()->message);
    }
}

/* ---- documents: fixtures
 * ----------------------------------------------------- */

/* Doubles that a decimal round trip gets wrong unless done with care
 * (within the +-1e15 that decode accepts). */
static const double awkward[] = {
    0.1,
    -0.0,
    1.0 / 3.0,
    5e-324,
    2.2250738585072014e-308,
    1e15,
    -1e15,
    123456.78901234567,
    -7.25,
    0.99999999999999989,
    1e-17,
    3.0,
    0.0,
    -2.5e-10,
    4503599627370497.0 / 8.0,
};
#define NAWK (sizeof(awkward) / sizeof(awkward[0]))

#define GNX 3
#define GNY 2
#define NODES (GNX * GNY)

static double awk(size_t i)
{
    return awkward[i % NAWK];
}

/* One match b = zb against za; values drawn from the awkward list. */
static void match_fill(cnx_align_match *m, int64_t za, int64_t zb, size_t k)
{
    static const uint8_t flags[] = {0, 1, 0, 2, 3, 4, 0, 0, 1};
    m->za = za;
    m->zb = zb;
    m->coarse[0] = awk(k + 1);
    m->coarse[1] = awk(k + 2);
    m->coarse_peak = awk(k + 3) < 0 ? -awk(k + 3) : awk(k + 3);
    m->nodes = NODES;
    m->dx = malloc(NODES * sizeof(double));
    m->dy = malloc(NODES * sizeof(double));
    m->peak = malloc(NODES * sizeof(double));
    m->flag = malloc(NODES);
    assert_non_null(m->dx);
    assert_non_null(m->dy);
    assert_non_null(m->peak);
    assert_non_null(m->flag);
    m->valid = 0;
    for (size_t n = 0; n < NODES; n++) {
        m->dx[n] = awk(3 * n + k);
        m->dy[n] = awk(3 * n + k + 5);
        m->peak[n] = awk(n + 2 * k + 7);
        m->flag[n] = flags[(n + k) % sizeof(flags)];
        m->valid += m->flag[n] == 0;
    }
}

/* Sections 5, 6, 7, 8; matches in the order decode gives them (by b's
 * section, then as written): 4->5, 3->5 (a before the slab), 5->6, 4->6,
 * 6->7, 5->7; section 8 has none. */
static void slab_make(cnx_align_slab_matches *s)
{
    static const int64_t pairs[][2] = {{4, 5}, {3, 5}, {5, 6},
                                       {4, 6}, {6, 7}, {5, 7}};
    memset(s, 0, sizeof(*s));
    s->grid = (cnx_align_grid){15.5, -184.5, 32.0, GNX, GNY};
    s->nsections = 4;
    s->z = malloc(4 * sizeof(*s->z));
    s->stats = malloc(4 * sizeof(*s->stats));
    s->nmatches = 6;
    s->matches = calloc(6, sizeof(*s->matches));
    assert_non_null(s->z);
    assert_non_null(s->stats);
    assert_non_null(s->matches);
    for (size_t k = 0; k < 4; k++) {
        s->z[k] = 5 + (int64_t)k;
        s->stats[k] = (cnx_align_stats){
            awk(k + 2), awk(k) < 0 ? -awk(k) : awk(k), (int64_t)(1000 * k)};
    }
    for (size_t m = 0; m < 6; m++)
        match_fill(&s->matches[m], pairs[m][0], pairs[m][1], m);
}

static void assert_same_doubles(const double *a, const double *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(double)) != 0)
            fail_msg("[%zu]: %.17g (%a) read back as %.17g (%a)", i, a[i], a[i],
                     b[i], b[i]);
}

static void assert_same_grid(const cnx_align_grid *a, const cnx_align_grid *b)
{
    assert_same_doubles(&a->x0, &b->x0, 1);
    assert_same_doubles(&a->y0, &b->y0, 1);
    assert_same_doubles(&a->step, &b->step, 1);
    assert_int_equal(a->nx, b->nx);
    assert_int_equal(a->ny, b->ny);
}

/* A solution of sections 10 .. 13 with every field set. */
static void solution_make(cnx_align_solution *s)
{
    static const int status[] = {CNX_ALIGN_SECTION_OK, CNX_ALIGN_SECTION_FAILED,
                                 CNX_ALIGN_SECTION_EMPTY, CNX_ALIGN_SECTION_OK};
    memset(s, 0, sizeof(*s));
    s->grid = (cnx_align_grid){-0.5, 7.25, 48.0, GNX, GNY};
    s->z0 = 10;
    s->nz = 4;
    s->nodes = NODES;
    s->blocks = 3;
    s->sections = calloc(4, sizeof(*s->sections));
    assert_non_null(s->sections);
    for (size_t k = 0; k < 4; k++) {
        cnx_align_section *c = &s->sections[k];
        c->z = 10 + (int64_t)k;
        c->status = status[k];
        c->dx = malloc(NODES * sizeof(double));
        c->dy = malloc(NODES * sizeof(double));
        assert_non_null(c->dx);
        assert_non_null(c->dy);
        for (size_t n = 0; n < NODES; n++) {
            c->dx[n] = awk(2 * n + k);
            c->dy[n] = awk(5 * n + k + 1);
        }
        c->gain = 1.0 + awk(k);
        c->offset = awk(k + 4);
        c->residual_median = awk(k + 6) < 0 ? -awk(k + 6) : awk(k + 6);
        c->residual_max = awk(k + 9) < 0 ? -awk(k + 9) : awk(k + 9);
        c->confidence = awk(k + 8);
        c->nodes_valid = 10 * k;
        c->nodes_rejected = k;
        c->pairs_used = k;
    }
}

static void assert_same_section(const cnx_align_section *a,
                                const cnx_align_section *b, size_t nodes)
{
    assert_int_equal(a->z, b->z);
    assert_int_equal(a->status, b->status);
    assert_same_doubles(a->dx, b->dx, nodes);
    assert_same_doubles(a->dy, b->dy, nodes);
    assert_same_doubles(&a->gain, &b->gain, 1);
    assert_same_doubles(&a->offset, &b->offset, 1);
    assert_same_doubles(&a->residual_median, &b->residual_median, 1);
    assert_same_doubles(&a->residual_max, &b->residual_max, 1);
    assert_same_doubles(&a->confidence, &b->confidence, 1);
    assert_int_equal(a->nodes_valid, b->nodes_valid);
    assert_int_equal(a->nodes_rejected, b->nodes_rejected);
    assert_int_equal(a->pairs_used, b->pairs_used);
}

/* ---- documents: round trips
 * ------------------------------------------------------ */

static void test_align_matches__round_trip_is_bitwise(void **state)
{
    cnx_align_slab_matches s, d;
    char *doc, *again;
    (void)state;
    slab_make(&s);
    assert_int_equal(cnx_align_matches_encode(&s, &doc), 0);
    assert_int_equal(cnx_align_matches_decode(doc, strlen(doc), "m", &d), 0);
    assert_same_grid(&s.grid, &d.grid);
    assert_int_equal(d.nsections, s.nsections);
    assert_int_equal(d.nmatches, s.nmatches);
    for (size_t k = 0; k < s.nsections; k++) {
        assert_int_equal(d.z[k], s.z[k]);
        assert_int_equal(d.stats[k].count, s.stats[k].count);
        assert_same_doubles(&s.stats[k].mean, &d.stats[k].mean, 1);
        assert_same_doubles(&s.stats[k].sd, &d.stats[k].sd, 1);
    }
    for (size_t m = 0; m < s.nmatches; m++) {
        const cnx_align_match *a = &s.matches[m], *b = &d.matches[m];
        assert_int_equal(b->za, a->za);
        assert_int_equal(b->zb, a->zb);
        assert_same_doubles(a->coarse, b->coarse, 2);
        assert_same_doubles(&a->coarse_peak, &b->coarse_peak, 1);
        assert_int_equal(b->nodes, a->nodes);
        assert_same_doubles(a->dx, b->dx, NODES);
        assert_same_doubles(a->dy, b->dy, NODES);
        assert_same_doubles(a->peak, b->peak, NODES);
        assert_memory_equal(a->flag, b->flag, NODES);
        assert_int_equal(b->valid, a->valid);
    }
    /* canonical: the decoded document encodes to the same bytes */
    assert_int_equal(cnx_align_matches_encode(&d, &again), 0);
    assert_string_equal(doc, again);
    free(again);
    /* and encoding twice gives the same bytes */
    assert_int_equal(cnx_align_matches_encode(&s, &again), 0);
    assert_string_equal(doc, again);
    free(again);
    free(doc);
    cnx_align_slab_matches_free(&s);
    cnx_align_slab_matches_free(&d);
    assert_null(d.matches);
    cnx_align_slab_matches_free(NULL);
}

static void test_align_matches__real_kernel_output_round_trips(void **state)
{
    /* a match as the kernel writes it (every flag, real doubles) */
    enum { SW = 160, SH = 128 };
    uint8_t *a = malloc(SW * SH), *b = malloc(SW * SH);
    uint64_t seed = 3;
    cnx_align_params p;
    cnx_align_slab_matches s, d;
    cnx_align_match m;
    int64_t z[1] = {9};
    cnx_align_stats st[1];
    char *doc;
    (void)state;
    assert_non_null(a);
    assert_non_null(b);
    for (int i = 0; i < SW * SH; i++)
        a[i] = (uint8_t)(1 + (cnx_test_rand(&seed) >> 56) % 255);
    for (int j = 0; j < SH; j++)
        for (int i = 0; i < SW; i++)
            b[j * SW + i] = i + 3 < SW && j >= 1 ? a[(j - 1) * SW + i + 3] : 0;
    cnx_align_params_default(&p);
    p.stride = 16;
    p.patch = 32;
    {
        const cnx_align_image ia = {0, 0, SW, SH, a}, ib = {0, 0, SW, SH, b};
        assert_int_equal(cnx_align_match_sections(&ia, &ib, &p, &m), 0);
        st[0] = cnx_align_stats_of(&ib);
    }
    assert_true(m.valid > 0);
    m.za = 8;
    m.zb = 9;
    s = (cnx_align_slab_matches){
        cnx_align_grid_of(0, 0, SW, SH, &p), 1, z, st, 1, &m};
    assert_int_equal(cnx_align_matches_encode(&s, &doc), 0);
    assert_int_equal(cnx_align_matches_decode(doc, strlen(doc), "m", &d), 0);
    assert_int_equal(d.nmatches, 1);
    assert_same_doubles(m.dx, d.matches[0].dx, m.nodes);
    assert_same_doubles(m.dy, d.matches[0].dy, m.nodes);
    assert_same_doubles(m.peak, d.matches[0].peak, m.nodes);
    assert_same_doubles(m.coarse, d.matches[0].coarse, 2);
    assert_memory_equal(m.flag, d.matches[0].flag, m.nodes);
    assert_same_doubles(&st[0].mean, &d.stats[0].mean, 1);
    assert_same_doubles(&st[0].sd, &d.stats[0].sd, 1);
    free(doc);
    cnx_align_slab_matches_free(&d);
    cnx_align_match_free(&m);
    free(a);
    free(b);
}

static void test_align_transforms__round_trip_is_bitwise(void **state)
{
    cnx_align_solution s, d;
    char *doc, *again;
    (void)state;
    solution_make(&s);
    assert_int_equal(cnx_align_transforms_encode(&s, 0, 4, &doc), 0);
    assert_int_equal(cnx_align_transforms_decode(doc, strlen(doc), "t", &d), 0);
    assert_same_grid(&s.grid, &d.grid);
    assert_int_equal(d.z0, 10);
    assert_int_equal(d.nz, 4);
    assert_int_equal(d.nodes, NODES);
    assert_int_equal(d.blocks, 3);
    for (size_t k = 0; k < 4; k++)
        assert_same_section(&s.sections[k], &d.sections[k], NODES);
    assert_int_equal(cnx_align_transforms_encode(&d, 0, 4, &again), 0);
    assert_string_equal(doc, again);
    free(again);
    assert_int_equal(cnx_align_transforms_encode(&s, 0, 4, &again), 0);
    assert_string_equal(doc, again);
    free(again);
    free(doc);
    cnx_align_solution_free(&d);

    /* a slab in the middle: z0 is its first section */
    assert_int_equal(cnx_align_transforms_encode(&s, 1, 2, &doc), 0);
    assert_int_equal(cnx_align_transforms_decode(doc, strlen(doc), "t", &d), 0);
    assert_int_equal(d.z0, 11);
    assert_int_equal(d.nz, 2);
    for (size_t k = 0; k < 2; k++)
        assert_same_section(&s.sections[1 + k], &d.sections[k], NODES);
    free(doc);
    cnx_align_solution_free(&d);
    cnx_align_solution_free(&s);
}

static void test_align_status_name__each_status(void **state)
{
    (void)state;
    assert_string_equal(cnx_align_status_name(CNX_ALIGN_SECTION_OK), "ok");
    assert_string_equal(cnx_align_status_name(CNX_ALIGN_SECTION_FAILED),
                        "failed");
    assert_string_equal(cnx_align_status_name(CNX_ALIGN_SECTION_EMPTY),
                        "empty");
}

/* ---- documents: refusals
 * ------------------------------------------------------- */

/* Replace (value != NULL) or delete the element at a dotted path of doc
 * ("sections.0.pairs.1.flag.2"); value is JSON text. */
static void edit(json_t *doc, const char *path, const char *value)
{
    char buf[256], *tok, *next, *save = NULL;
    json_t *cur = doc;
    snprintf(buf, sizeof(buf), "%s", path);
    tok = strtok_r(buf, ".", &save);
    while ((next = strtok_r(NULL, ".", &save)) != NULL) {
        cur = json_is_array(cur) ? json_array_get(cur, (size_t)atol(tok))
                                 : json_object_get(cur, tok);
        assert_non_null(cur);
        tok = next;
    }
    if (json_is_array(cur)) {
        const size_t i = (size_t)atol(tok);
        assert_true(i < json_array_size(cur));
        if (value == NULL)
            assert_int_equal(json_array_remove(cur, i), 0);
        else
            assert_int_equal(
                json_array_set_new(cur, i,
                                   json_loads(value, JSON_DECODE_ANY, NULL)),
                0);
    } else {
        assert_non_null(json_object_get(cur, tok));
        if (value == NULL)
            assert_int_equal(json_object_del(cur, tok), 0);
        else
            assert_int_equal(
                json_object_set_new(cur, tok,
                                    json_loads(value, JSON_DECODE_ANY, NULL)),
                0);
    }
}

/* The document doc with one edit, as text; "@BIG" in value becomes a
 * number too large for a double (1e400) in the text. */
static char *edited(const char *doc, const char *path, const char *value)
{
    json_t *js = json_loads(doc, 0, NULL);
    char *out, *at;
    const int big = value != NULL && strcmp(value, "@BIG") == 0;
    assert_non_null(js);
    if (path != NULL)
        edit(js, path, big ? "123456789.5" : value);
    out = json_dumps(js, JSON_SORT_KEYS | JSON_COMPACT);
    json_decref(js);
    assert_non_null(out);
    if (big) {
        at = strstr(out, "123456789.5");
        assert_non_null(at);
        memcpy(at, "1e400      ", 11); /* spaces are JSON whitespace */
    }
    return out;
}

typedef struct refusal {
    const char *path, *value; /* value NULL: delete */
    const char *named;        /* in the message after the object's name */
} refusal;

static void
test_align_matches__decode_refuses_naming_object_and_field(void **state)
{
    static const refusal cases[] = {
        {"format", "\"cnx.align-match/2\"", "format"},
        {"format", "\"cnx.align/1\"", "format"},
        {"format", NULL, "format"},
        {"sections", "{}", "sections"},
        {"grid.shape.0", "4", "pairs.dx"}, /* node count */
        {"grid.shape.1", "1", "pairs.dx"},
        {"grid.shape.0", "0", "grid.shape"},
        {"grid.shape.0", "2.0", "grid.shape"},
        {"grid.step", "0", "grid.step"},
        {"grid.step", "\"32\"", "grid.step"},
        {"grid.origin", "[1]", "grid"},
        {"grid.origin.1", "1e300", "grid.origin"},
        {"grid", NULL, "grid"},
        {"sections.0.z", "\"5\"", "sections.z"},
        {"sections.1.z", "5", "sections.z"}, /* not increasing */
        {"sections.1.z", "4", "sections.z"},
        {"sections.0.stats", NULL, "sections"},
        {"sections.0.pairs", NULL, "sections"},
        {"sections.0.stats.count", "-1", "stats.count"},
        {"sections.0.stats.mean", "\"m\"", "stats.mean"},
        {"sections.0.stats.sd", "null", "stats.sd"},
        {"sections.0.pairs.0.a", "5", "pairs.a"}, /* a = b */
        {"sections.0.pairs.0.a", "2", "pairs.a"}, /* b - 3 */
        {"sections.0.pairs.0.a", "4.0", "pairs.a"},
        {"sections.0.pairs.0.coarse", "[1]", "pairs.coarse"},
        {"sections.0.pairs.0.coarse.1", "true", "pairs.coarse"},
        {"sections.0.pairs.0.coarse_peak", "null", "pairs.coarse_peak"},
        {"sections.0.pairs.0.dx", "[1, 2, 3, 4, 5]", "pairs.dx"},
        {"sections.1.pairs.1.dy", NULL, "pairs.dy"},
        {"sections.2.pairs.0.peak", "[1, 2, 3, 4, 5, 6, 7]", "pairs.peak"},
        {"sections.0.pairs.0.dx.1", "1e300", "pairs.dx"},
        {"sections.0.pairs.0.dx.1", "-1.5e15", "pairs.dx"},
        {"sections.0.pairs.0.dx.2", "\"x\"", "pairs.dx"},
        {"sections.0.pairs.1.peak.3", "null", "pairs.peak"},
        {"sections.0.pairs.0.flag.0", "5", "pairs.flag"},
        {"sections.0.pairs.0.flag.0", "-1", "pairs.flag"},
        {"sections.0.pairs.0.flag.0", "1.0", "pairs.flag"},
        {"sections.0.pairs.0.flag", "[0, 0]", "pairs.flag"},
        {"sections.0.pairs.0.flag", NULL, "pairs.flag"},
        {"sections.0.pairs.0.valid", "0", "pairs.valid"},
        {"sections.2.pairs.1.valid", "6", "pairs.valid"},
        {"sections.0.pairs.0.valid", "\"3\"", "pairs.valid"},
    };
    cnx_align_slab_matches s;
    char *doc;
    (void)state;
    slab_make(&s);
    assert_int_equal(cnx_align_matches_encode(&s, &doc), 0);
    cnx_align_slab_matches_free(&s);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *bad = edited(doc, cases[k].path, cases[k].value);
        char want[128];
        cnx_align_slab_matches d;
        const int rc =
            cnx_align_matches_decode(bad, strlen(bad), "align/m/slab0", &d);
        if (rc != CNX_ECORRUPT)
            fail_msg("%s = %s: rc %d, want CNX_ECORRUPT", cases[k].path,
                     cases[k].value ? cases[k].value : "(deleted)", rc);
        snprintf(want, sizeof(want), "align/m/slab0: %s", cases[k].named);
        if (strstr(cnx_error_last()->message, want) == NULL)
            fail_msg("%s = %s: message '%s' lacks '%s'", cases[k].path,
                     cases[k].value ? cases[k].value : "(deleted)",
                     cnx_error_last()->message, want);
        assert_null(d.matches);
        assert_null(d.z);
        assert_int_equal(d.nmatches, 0);
        free(bad);
    }
    /* not JSON, a number too large for a double, an array */
    {
        const char *texts[] = {"{", "", "[]", "{\"format\": 1}"};
        cnx_align_slab_matches d;
        char *big = edited(doc, "sections.0.pairs.0.dx.0", "@BIG");
        assert_int_equal(
            cnx_align_matches_decode(big, strlen(big), "align/m/slab0", &d),
            CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "align/m/slab0"));
        free(big);
        for (size_t k = 0; k < 4; k++) {
            assert_int_equal(cnx_align_matches_decode(texts[k],
                                                      strlen(texts[k]),
                                                      "align/m/slab0", &d),
                             CNX_ECORRUPT);
            assert_non_null(strstr(cnx_error_last()->message, "align/m/slab0"));
        }
    }
    /* the unedited document still decodes */
    {
        char *same = edited(doc, NULL, NULL);
        cnx_align_slab_matches d;
        assert_int_equal(cnx_align_matches_decode(same, strlen(same), "m", &d),
                         0);
        cnx_align_slab_matches_free(&d);
        free(same);
    }
    free(doc);
}

static void
test_align_transforms__decode_refuses_naming_object_and_field(void **state)
{
    static const refusal cases[] = {
        {"format", "\"cnx.align/2\"", "format"},
        {"format", "\"cnx.align-match/1\"", "format"},
        {"sections", "7", "sections"},
        {"blocks", "-1", "blocks"},
        {"blocks", NULL, "blocks"},
        {"grid.shape.1", "3", "sections.dx"}, /* node count */
        {"grid.step", "-48", "grid.step"},
        {"sections.0.z", "null", "sections.z"},
        {"sections.1.z", "12", "sections.z"}, /* not consecutive */
        {"sections.1.z", "10", "sections.z"},
        {"sections.3.z", "12", "sections.z"},
        {"sections.0.status", "\"bogus\"", "sections.status"},
        {"sections.2.status", "\"OK\"", "sections.status"},
        {"sections.0.status", "0", "sections.status"},
        {"sections.0.status", NULL, "sections.status"},
        {"sections.0.dx", "[0, 0, 0]", "sections.dx"},
        {"sections.3.dy", NULL, "sections.dy"},
        {"sections.1.dy.5", "1e300", "sections.dy"},
        {"sections.1.dx.0", "\"0\"", "sections.dx"},
        {"sections.0.gain", "null", "sections.gain"},
        {"sections.0.offset", "\"1\"", "sections.offset"},
        {"sections.0.residual", NULL, "sections.residual.median"},
        {"sections.0.residual.max", "[]", "sections.residual.max"},
        {"sections.0.confidence", "false", "sections.confidence"},
        {"sections.0.nodes", NULL, "sections.nodes.valid"},
        {"sections.0.nodes.valid", "-1", "sections.nodes.valid"},
        {"sections.0.nodes.rejected", "1.5", "sections.nodes.rejected"},
        {"sections.0.pairs_used", "5", "sections.pairs_used"},
        {"sections.0.pairs_used", "-1", "sections.pairs_used"},
    };
    cnx_align_solution s;
    char *doc;
    (void)state;
    solution_make(&s);
    assert_int_equal(cnx_align_transforms_encode(&s, 0, 4, &doc), 0);
    cnx_align_solution_free(&s);
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        char *bad = edited(doc, cases[k].path, cases[k].value);
        char want[128];
        cnx_align_solution d;
        const int rc =
            cnx_align_transforms_decode(bad, strlen(bad), "align/t/slab1", &d);
        if (rc != CNX_ECORRUPT)
            fail_msg("%s = %s: rc %d, want CNX_ECORRUPT", cases[k].path,
                     cases[k].value ? cases[k].value : "(deleted)", rc);
        snprintf(want, sizeof(want), "align/t/slab1: %s", cases[k].named);
        if (strstr(cnx_error_last()->message, want) == NULL)
            fail_msg("%s = %s: message '%s' lacks '%s'", cases[k].path,
                     cases[k].value ? cases[k].value : "(deleted)",
                     cnx_error_last()->message, want);
        assert_null(d.sections);
        assert_int_equal(d.nz, 0);
        free(bad);
    }
    {
        cnx_align_solution d;
        char *big = edited(doc, "sections.2.gain", "@BIG");
        assert_int_equal(
            cnx_align_transforms_decode(big, strlen(big), "align/t/slab1", &d),
            CNX_ECORRUPT);
        assert_non_null(strstr(cnx_error_last()->message, "align/t/slab1"));
        free(big);
    }
    free(doc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_align_params_parse__empty_and_null_give_defaults),
        cmocka_unit_test(test_align_params_parse__every_key_is_read),
        cmocka_unit_test(test_align_params_parse__all_keys_at_once),
        cmocka_unit_test(test_align_params_parse__bad_input_named_and_refused),
        cmocka_unit_test(
            test_align_params_parse__overlap_over_half_block_is_named),
        cmocka_unit_test(test_align_matches__round_trip_is_bitwise),
        cmocka_unit_test(test_align_matches__real_kernel_output_round_trips),
        cmocka_unit_test(test_align_transforms__round_trip_is_bitwise),
        cmocka_unit_test(test_align_status_name__each_status),
        cmocka_unit_test(
            test_align_matches__decode_refuses_naming_object_and_field),
        cmocka_unit_test(
            test_align_transforms__decode_refuses_naming_object_and_field),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
