/*
 * cnx-synth - write a deterministic synthetic EM dataset with ground truth.
 *
 * Thin: arguments -> cnx_synth_params -> cnx_synth_run -> exit code
 * (0 done, 1 runtime failure, 2 bad usage). The dataset and its layout are
 * described in docs/synth.md.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/synth.h"

#define EXIT_USAGE 2

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cnx-synth --out DIR --shape X,Y,Z [--seed N]\n"
            "                 [--resolution X,Y,Z] [--style classic|hard]\n"
            "                 [--chunk X,Y,Z] [--distort none|default]\n"
            "                 [--missing Z[,Z...]] [--quiet]\n"
            "\n"
            "Write a synthetic EM dataset with ground truth under DIR: the\n"
            "precomputed layers gt (uint64 segmentation), image, boundary,\n"
            "cleft and psd (uint8), gt-synapses.json and a montage tile set\n"
            "in tiles/. The same arguments always give the same bytes.\n"
            "\n"
            "  --out URL            output: a directory, file:///dir, s3://B/P\n"
            "                       or gs://B/P (docs/storage.md); it may\n"
            "                       already hold this same dataset\n"
            "  --shape X,Y,Z        volume size in voxels, 1..%d each\n"
            "  --seed N             0..2^63-1 (default 1)\n"
            "  --resolution X,Y,Z   nm per voxel, positive (default 8,8,8);\n"
            "                       the hard style's geometry is in nm and\n"
            "                       needs %g..%g nm on each axis\n"
            "  --style S            classic (default): neurites of 3..10\n"
            "                       voxels, isotropic in voxels, clean maps;\n"
            "                       hard: neurites of 24..224 nm and irregular\n"
            "                       cells sampled with the resolution, and a\n"
            "                       boundary map with blur, noise, gaps, false\n"
            "                       membranes and per-section variation\n"
            "                       (fixed strengths, docs/synth.md)\n"
            "  --chunk X,Y,Z        chunk size of every layer, 1..%d each\n"
            "                       (default %d,%d,%d); voxels do not change\n"
            "  --distort D          default (the default): each section is\n"
            "                       recorded as a microscope does before its\n"
            "                       tiles are cut: rotated (sin up to 0.01),\n"
            "                       shifted (up to 12 px per axis), warped\n"
            "                       (6x6 cubic B-spline, up to 1.5 px) and\n"
            "                       its intensity drifted (gain 0.9..1.1,\n"
            "                       offset -10..10); none: tiles cut from the\n"
            "                       image itself (the bytes of earlier\n"
            "                       versions). Either way tiles/sections.json\n"
            "                       holds every section's true transform\n"
            "  --missing Z[,Z...]   sections with no tiles at all (lost\n"
            "                       sections), each 0..Z-1, not all of them\n"
            "  --quiet              no progress bar\n"
            "  --help               this text\n"
            "\n"
            "Exit status: 0 done, 1 failed, 2 bad arguments.\n",
            CNX_SYNTH_MAX_SIDE, CNX_SYNTH_HARD_RES_MIN, CNX_SYNTH_HARD_RES_MAX,
            CNX_SYNTH_MAX_CHUNK, CNX_SYNTH_DEFAULT_CHUNK,
            CNX_SYNTH_DEFAULT_CHUNK, CNX_SYNTH_DEFAULT_CHUNK);
}

static int bad_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "cnx-synth: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see cnx-synth --help)\n");
    return EXIT_USAGE;
}

/* A decimal integer in [lo, hi] spanning text[0, len) exactly. */
static int parse_int(const char *text, size_t len, int64_t lo, int64_t hi,
                     int64_t *out)
{
    char buf[32], *end;
    long long v;
    if (len == 0 || len >= sizeof(buf) || text[0] < '0' || text[0] > '9')
        return -1;
    memcpy(buf, text, len);
    buf[len] = '\0';
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

/* "X,Y,Z": three integers in 1..max. */
static int parse_triple(const char *text, int64_t max, int64_t out[3])
{
    const char *p = text;
    int i;
    for (i = 0; i < 3; i++) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if ((i < 2) != (end != NULL))
            return -1;
        if (parse_int(p, len, 1, max, &out[i]) != 0)
            return -1;
        p += len + 1;
    }
    return 0;
}

/* "X,Y,Z": three positive finite numbers up to 1e9. */
static int parse_resolution(const char *text, double out[3])
{
    const char *p = text;
    int i;
    for (i = 0; i < 3; i++) {
        char buf[64], *end;
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if ((i < 2) != (comma != NULL) || len == 0 || len >= sizeof(buf) ||
            !((p[0] >= '0' && p[0] <= '9') || p[0] == '.'))
            return -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        errno = 0;
        out[i] = strtod(buf, &end);
        if (errno != 0 || *end != '\0' || !isfinite(out[i]) ||
            !(out[i] > 0.0) || out[i] > 1e9)
            return -1;
        p += len + 1;
    }
    return 0;
}

/* "Z[,Z...]": up to CNX_SYNTH_MISSING_MAX integers 0..max-1 into out. */
static int parse_missing(const char *text, int64_t max, int64_t *out,
                         size_t *count)
{
    const char *p = text;
    *count = 0;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (*count >= CNX_SYNTH_MISSING_MAX ||
            parse_int(p, len, 0, max - 1, &out[*count]) != 0)
            return -1;
        (*count)++;
        if (end == NULL)
            return 0;
        p = end + 1;
    }
}

static int parse_seed(const char *text, uint64_t *out)
{
    unsigned long long v;
    char *end;
    if (text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > (unsigned long long)INT64_MAX)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const valued[] = {
        "--out",   "--shape", "--seed",    "--resolution",
        "--style", "--chunk", "--distort", "--missing"};
    static int64_t missing[CNX_SYNTH_MISSING_MAX];
    enum { NVALUED = sizeof(valued) / sizeof(valued[0]) };
    const char *values[NVALUED] = {NULL};
    cnx_synth_params params;
    cnx_synth_summary sum;
    int quiet = 0, i, k, rc;

    cnx_synth_params_init(&params);
    for (i = 1; i < argc; i++) {
        int matched = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) {
            quiet = 1;
            continue;
        }
        for (k = 0; k < NVALUED && !matched; k++) {
            const char *value = NULL;
            int m = cnx_cli_option(argc, argv, &i, valued[k], &value);
            if (m < 0)
                return bad_usage("%s needs a value", valued[k]);
            if (m > 0) {
                if (values[k] != NULL)
                    return bad_usage("%s given twice", valued[k]);
                values[k] = value;
                matched = 1;
            }
        }
        if (!matched)
            return bad_usage("unknown argument '%.100s'", argv[i]);
    }
    if (values[0] == NULL || values[0][0] == '\0')
        return bad_usage("%s", "--out DIR is required");
    if (values[1] == NULL)
        return bad_usage("%s", "--shape X,Y,Z is required");
    if (parse_triple(values[1], CNX_SYNTH_MAX_SIDE, params.shape) != 0)
        return bad_usage("--shape '%.100s' is not three integers 1..4096 "
                         "joined by commas",
                         values[1]);
    if (values[2] != NULL && parse_seed(values[2], &params.seed) != 0)
        return bad_usage("--seed '%.100s' is not an integer 0..2^63-1",
                         values[2]);
    if (values[3] != NULL &&
        parse_resolution(values[3], params.resolution) != 0)
        return bad_usage("--resolution '%.100s' is not three positive "
                         "numbers joined by commas",
                         values[3]);
    if (values[4] != NULL &&
        cnx_synth_style_parse(values[4], &params.style) != 0)
        return bad_usage("--style '%.100s' is not classic or hard", values[4]);
    if (values[5] != NULL &&
        parse_triple(values[5], CNX_SYNTH_MAX_CHUNK, params.chunk) != 0)
        return bad_usage("--chunk '%.100s' is not three integers 1..4096 "
                         "joined by commas",
                         values[5]);
    if (values[6] != NULL &&
        cnx_synth_distort_parse(values[6], &params.distort) != 0)
        return bad_usage("--distort '%.100s' is not none or default",
                         values[6]);
    if (values[7] != NULL) {
        if (parse_missing(values[7], params.shape[2], missing,
                          &params.nmissing) != 0)
            return bad_usage("--missing '%.100s' is not sections 0..Z-1 "
                             "joined by commas",
                             values[7]);
        params.missing = missing;
    }
    if (cnx_synth_params_check(&params) != 0)
        return bad_usage("%s", cnx_error_last()->message);

    rc = cnx_synth_run(&params, values[0], quiet, &sum);
    if (rc != 0) {
        fprintf(stderr, "cnx-synth: %s\n", cnx_error_last()->message);
        return 1;
    }
    printf("cnx-synth: %s: %" PRIu64 " objects, %zu synapses, %" PRId64
           " tiles, %" PRId64 " files, %" PRId64 " bytes in %.1f s\n",
           values[0], sum.objects, sum.synapses, sum.tiles, sum.files,
           sum.bytes, sum.seconds);
    return 0;
}
