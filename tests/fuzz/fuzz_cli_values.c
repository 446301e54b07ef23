/*
 * fuzz_cli_values.c - the small text values tools and messages carry:
 * RFC 3339 times (cnx_rfc3339_parse: every deadline and event time the
 * controller reads), durations and deadlines (cnx_duration_parse,
 * cnx_reprocess_deadline_parse), regions (cnx_reprocess_roi_parse), chunk
 * box names (cnx_box_parse: "x0-x1_y0-y1_z0-z1", from object names), sizes
 * (cnx_store_parse_size) and data types (cnx_dtype_parse). The whole
 * input goes to each. A box that parses must format to a name that
 * parses to the same box.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/geom.h"
#include "cnx/reprocess.h"
#include "cnx/store.h"
#include "cnx/task.h"
#include "cnx/volume.h"
#include "fuzz_common.h"

#define NOW 1795000000

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_strndup(data, size), buf[256];
    int64_t t, secs;
    uint64_t bytes;
    cnx_box box;
    cnx_dtype dtype;
    (void)cnx_rfc3339_parse(text, &t);
    (void)cnx_duration_parse(text, &secs);
    (void)cnx_reprocess_deadline_parse(text, NOW, &t);
    (void)cnx_reprocess_roi_parse(text, &box);
    (void)cnx_store_parse_size(text, &bytes);
    (void)cnx_dtype_parse(text, &dtype);
    if (cnx_box_parse(text, &box) == 0) {
        cnx_box again;
        if (cnx_box_format(&box, buf, sizeof(buf)) < 0 ||
            cnx_box_parse(buf, &again) != 0 ||
            memcmp(&again, &box, sizeof(box)) != 0)
            abort(); /* a box that does not format back */
    }
    free(text);
    return 0;
}
