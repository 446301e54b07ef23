/*
 * cnx/report.h - the run report of one request (cnx-report, docs/report.md).
 *
 * The report is made from the ledger alone, opened read-only: an HTML page
 * (DIR/index.html: inline CSS and SVG, no script) with the timeline of
 * every attempt per stage, throughput and cost per stage, the task
 * durations, the SLO and what the ledger holds of the ETA, the
 * bit-identity of repeated tasks, and a Neuroglancer state
 * (DIR/neuroglancer.json) with every layer the request wrote.
 */
#ifndef CNX_REPORT_H
#define CNX_REPORT_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Exit statuses of cnx-report. */
enum {
    CNX_REPORT_OK = 0,
    CNX_REPORT_FAILED = 1, /* the report could not be written */
    CNX_REPORT_USAGE = 2,  /* bad arguments, no ledger, no such request */
};

typedef struct cnx_report_opts {
    const char *ledger;         /* the ledger file (required) */
    const char *request;        /* the request id (required) */
    const char *out_dir;        /* created if missing (required) */
    const char *layer_url_base; /* layers' URL base; NULL: from the dataset */
    const char *viewer;         /* Neuroglancer app URL; NULL: the default */
    double price_per_core_hour; /* < 0: the request's own, if any */
} cnx_report_opts;

/** The Neuroglancer app the link opens when no --viewer is given. */
#define CNX_REPORT_VIEWER "https://neuroglancer-demo.appspot.com/"

/**
 * Write o->out_dir/index.html and o->out_dir/neuroglancer.json for one
 * request of the ledger, each to a temporary name and renamed.
 * @return 0; CNX_ENOTFOUND (no ledger file, no such request) or
 *         CNX_ECORRUPT (not a cnx ledger) with the message naming it;
 *         CNX_EIO when the directory or a file cannot be written.
 */
int cnx_report_write(const cnx_report_opts *o);

/**
 * Write text to f with the five HTML specials (& < > " ') replaced by
 * character references, so that no string from the ledger can add markup.
 * NULL writes nothing.
 */
void cnx_report_html_escape(FILE *f, const char *text);

#ifdef __cplusplus
}
#endif
#endif
