/*
 * cnx-report - the run report of one request: an HTML page with SVG plots
 * made from the ledger (read-only) and a Neuroglancer state of the
 * request's layers (docs/report.md). This file parses the command line;
 * the rest is libcnx/src/report.c.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/report.h"

#define PROG "cnx-report"

static void usage(FILE *out)
{
    fprintf(out,
        "usage: " PROG " --ledger FILE --request ID --out DIR [options]\n\n"
        "Writes DIR/index.html, the run report of one request made from the\n"
        "ledger alone (opened read-only; the controller may run on): the\n"
        "timeline of every attempt per stage, throughput and cost per\n"
        "stage, task durations, the SLO and completions against the\n"
        "deadline, the bit-identity of repeated tasks, and a Neuroglancer\n"
        "link; DIR/neuroglancer.json holds the Neuroglancer state with\n"
        "every layer the request wrote. The page is self-contained (inline\n"
        "CSS and SVG, no script). docs/report.md.\n\n"
        "  --ledger FILE           the controller's ledger (required)\n"
        "  --request ID            the request (required)\n"
        "  --out DIR               where the report goes (required; made\n"
        "                          if missing, files in it replaced)\n"
        "  --layer-url-base URL    what layer paths are appended to in the\n"
        "                          Neuroglancer sources (default: the\n"
        "                          dataset's URL as it is: http(s), gs and\n"
        "                          s3 are read by Neuroglancer, a file://\n"
        "                          dataset must be served and named here)\n"
        "  --viewer URL            the Neuroglancer app the link opens\n"
        "                          (default " CNX_REPORT_VIEWER ")\n"
        "  --price-per-core-hour USD  for $/mm³ (default: the price the\n"
        "                          controller recorded, if any)\n"
        "  --help                  this text\n"
        "  --version               the build (version, commit, dirty flag)\n"
        "\n"
        "Exit status: 0 written; 1 the report could not be written; 2 bad\n"
        "arguments, no such ledger or no such request.\n");
}

#define fail_usage(...) cnx_cli_usage_error(PROG, CNX_REPORT_USAGE, __VA_ARGS__)

int main(int argc, char **argv)
{
    enum { O_LEDGER = 256, O_REQUEST, O_OUT, O_BASE, O_VIEWER, O_PRICE,
           O_HELP, O_VERSION };
    static const struct option longopts[] = {
        {"ledger", required_argument, NULL, O_LEDGER},
        {"request", required_argument, NULL, O_REQUEST},
        {"out", required_argument, NULL, O_OUT},
        {"layer-url-base", required_argument, NULL, O_BASE},
        {"viewer", required_argument, NULL, O_VIEWER},
        {"price-per-core-hour", required_argument, NULL, O_PRICE},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0}};
    cnx_report_opts o;
    double price;
    int c, rc;

    memset(&o, 0, sizeof(o));
    o.price_per_core_hour = -1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
        switch (c) {
        case O_LEDGER: o.ledger = optarg; break;
        case O_REQUEST: o.request = optarg; break;
        case O_OUT: o.out_dir = optarg; break;
        case O_BASE: o.layer_url_base = optarg; break;
        case O_VIEWER: o.viewer = optarg; break;
        case O_PRICE:
            if (cnx_cli_doubles(optarg, 0, 1e6, &price, 1) != 0)
                return fail_usage("--price-per-core-hour '%s': want a "
                                  "number of dollars, 0 to 1000000",
                                  optarg);
            o.price_per_core_hour = price;
            break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION: printf("%s\n", cnx_build_describe()); return 0;
        case ':':
            return fail_usage("%s: missing value", argv[optind - 1]);
        default:
            return fail_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return fail_usage("unexpected argument '%s'", argv[optind]);
    if (o.ledger == NULL)
        return fail_usage("missing --ledger");
    if (o.request == NULL || o.request[0] == '\0')
        return fail_usage("missing --request");
    if (o.out_dir == NULL || o.out_dir[0] == '\0')
        return fail_usage("missing --out");
    rc = cnx_report_write(&o);
    if (rc == 0) {
        printf("%s/index.html\n", o.out_dir);
        return CNX_REPORT_OK;
    }
    fprintf(stderr, PROG ": %s\n", cnx_error_last()->message);
    return rc == CNX_ENOTFOUND || rc == CNX_ECORRUPT ? CNX_REPORT_USAGE
                                                     : CNX_REPORT_FAILED;
}
