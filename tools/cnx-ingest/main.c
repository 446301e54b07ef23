/*
 * cnx-ingest - PNG/TIFF stacks and tile sets into a store.
 *
 *   cnx-ingest --out URL [--resolution X,Y,Z] [--chunk X,Y,Z]
 *              [--segmentation] [--threads N] [--quiet] FILE...
 *   cnx-ingest --tiles tiles.json --out URL [--max-error PX] [--quiet]
 *
 * Thin: arguments -> cnx_ingest_config / tile set calls -> one summary line
 * on stdout. Errors are one line on stderr; exit 2 for usage, 1 for a
 * failure while working.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/ingest.h"
#include "cnx/log.h"
#include "cnx/tileset.h"

#define PROG "cnx-ingest"

static const char usage_text[] =
    "usage: " PROG " --out URL [options] FILE...\n"
    "       " PROG " --tiles TILES.json --out URL [--max-error PX]\n"
    "\n"
    "Ingest a stack of PNG/TIFF sections (one file per section, in the order\n"
    "given) into a Neuroglancer precomputed layer at URL, or check a tile set\n"
    "and record it (tiles and tiles.json with digests) in the store at URL.\n"
    "\n"
    "  --out URL            output: a plain path, file:///abs/dir,\n"
    "                       s3://bucket/prefix or gs://bucket/prefix\n"
    "  --resolution X,Y,Z   voxel size in nm (default 1,1,1)\n"
    "  --chunk X,Y,Z        chunk size in voxels (default 128,128,128)\n"
    "  --segmentation       write the 4-connected components of each\n"
    "                       section's non-zero pixels as a uint64\n"
    "                       compressed_segmentation layer\n"
    "  --threads N          decoding threads (default: one per CPU, max 8)\n"
    "  --tiles FILE         a tile set (cnx.tileset/1, see docs/tiles.md)\n"
    "  --max-error PX       tolerance on nominal tile positions (default 25)\n"
    "  -q, --quiet          no progress bar\n"
    "  -h, --help           this text\n"
    "\n"
    "Exit status: 0 success, 1 failure, 2 usage error.\n";

static int usage_error(const char *fmt, const char *arg)
    __attribute__((format(printf, 1, 0)));

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " PROG " --help)\n");
    return 2;
}

static int failure(void)
{
    fprintf(stderr, PROG ": error: %s\n", cnx_error_last()->message);
    return 1;
}

static int run_tiles(const char *path, const char *url, int64_t max_error)
{
    const double start = cnx_now();
    char base[4096];
    const char *slash = strrchr(path, '/');
    cnx_tileset *ts = NULL;
    cnx_tileset_stats stats;
    int rc;

    if (slash == NULL) {
        snprintf(base, sizeof(base), ".");
    } else {
        int n = slash == path ? 1 : (int)(slash - path);
        snprintf(base, sizeof(base), "%.*s", n, path);
    }
    rc = cnx_tileset_load(&ts, path, max_error);
    if (rc == 0)
        rc = cnx_tileset_record(ts, base, url, &stats);
    cnx_tileset_free(ts);
    if (rc != 0)
        return failure();
    printf(PROG ": tile set %s/%s: %zu sections, %zu tiles, %" PRIu64
                " bytes, %s, %.3f s\n",
           url, CNX_TILESET_NAME, stats.sections, stats.tiles, stats.bytes,
           stats.digest, cnx_now() - start);
    return 0;
}

int main(int argc, char **argv)
{
    enum {
        OPT_OUT = 1,
        OPT_RES,
        OPT_CHUNK,
        OPT_SEG,
        OPT_TILES,
        OPT_MAXERR,
        OPT_THREADS
    };
    static const struct option options[] = {
        {"out", required_argument, NULL, OPT_OUT},
        {"resolution", required_argument, NULL, OPT_RES},
        {"chunk", required_argument, NULL, OPT_CHUNK},
        {"segmentation", no_argument, NULL, OPT_SEG},
        {"tiles", required_argument, NULL, OPT_TILES},
        {"max-error", required_argument, NULL, OPT_MAXERR},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    cnx_ingest_config cfg;
    cnx_ingest_result res;
    const char *tiles = NULL;
    int64_t max_error = CNX_TILESET_MAX_ERROR, threads = 0;
    int stack_opts = 0, tile_opts = 0, opt;

    cnx_ingest_config_init(&cfg);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":qh", options, NULL)) != -1) {
        switch (opt) {
        case OPT_OUT:
            cfg.url = optarg;
            break;
        case OPT_RES:
            if (cnx_cli_doubles(optarg, 1e-300, 1e300, cfg.resolution, 3) != 0)
                return usage_error("--resolution: expected X,Y,Z positive "
                                   "numbers (nm), got '%s'",
                                   optarg);
            stack_opts = 1;
            break;
        case OPT_CHUNK:
            if (cnx_cli_ints_in(optarg, 1, (int64_t)1 << 20, cfg.chunk, 3) != 0)
                return usage_error("--chunk: expected X,Y,Z integers in "
                                   "[1, 1048576], got '%s'",
                                   optarg);
            stack_opts = 1;
            break;
        case OPT_SEG:
            cfg.segmentation = 1;
            stack_opts = 1;
            break;
        case OPT_THREADS:
            if (cnx_cli_int(optarg, 0, 256, &threads) != 0)
                return usage_error("--threads: expected an integer in "
                                   "[0, 256], got '%s'",
                                   optarg);
            cfg.threads = (int)threads;
            stack_opts = 1;
            break;
        case OPT_TILES:
            tiles = optarg;
            break;
        case OPT_MAXERR:
            if (cnx_cli_int(optarg, 0, 65536, &max_error) != 0)
                return usage_error("--max-error: expected an integer in "
                                   "[0, 65536] (pixels), got '%s'",
                                   optarg);
            tile_opts = 1;
            break;
        case 'q':
            cfg.quiet = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            return usage_error("%s needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (cfg.url == NULL)
        return usage_error("%s", "--out URL is required");

    if (tiles != NULL) {
        if (stack_opts)
            return usage_error("%s", "--resolution, --chunk, --segmentation "
                                     "and --threads do not apply to --tiles");
        if (optind < argc)
            return usage_error("unexpected argument '%s' with --tiles",
                               argv[optind]);
        return run_tiles(tiles, cfg.url, max_error);
    }
    if (tile_opts)
        return usage_error("%s", "--max-error applies only to --tiles");
    if (optind >= argc)
        return usage_error("%s", "no input files");

    cfg.files = (const char *const *)&argv[optind];
    cfg.nfiles = (size_t)(argc - optind);
    if (cnx_ingest_stack(&cfg, &res, NULL) != 0)
        return failure();
    printf(PROG ": %s layer %s: %s %lldx%lldx%lld, %lld chunks, %" PRIu64
                " voxel bytes stored in %" PRIu64 " bytes",
           res.type == CNX_LAYER_SEGMENTATION ? "segmentation" : "image",
           cfg.url, cnx_dtype_name(res.dtype), (long long)res.size[0],
           (long long)res.size[1], (long long)res.size[2],
           (long long)res.chunks, res.voxel_bytes, res.stored_bytes);
    if (res.type == CNX_LAYER_SEGMENTATION)
        printf(", %" PRIu64 " segments", res.segments);
    printf(", %.3f s\n", res.seconds);
    return 0;
}
