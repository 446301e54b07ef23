/*
 * fuzz_request_state.c - request-state messages as cnx-reprocess reads
 * them from cnx.requests (cnx_request_state_parse), and what it makes of
 * a parsed one: the progress view (plain and terminal), and for a
 * finished request its exit status, its summary and its --json answer.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/reprocess.h"
#include "fuzz_common.h"

#define NOW 1795000000 /* a fixed "now": 2026-11-18 */

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cnx_request_state *st = NULL;
    cnx_reprocess_view *view = NULL;
    char *out = NULL;
    if (cnx_request_state_parse(&st, (const char *)data, size) != 0)
        return 0;
    for (int tty = 0; tty < 2; tty++) {
        if (cnx_reprocess_view_new(&view, tty) != 0)
            abort();
        if (cnx_reprocess_view_update(view, st, 100.0, NOW, &out) == 0)
            free(out);
        out = NULL;
        if (cnx_reprocess_view_tick(view, 107.0, NOW + 7, &out) == 0)
            free(out);
        out = NULL;
        cnx_reprocess_view_free(view);
        view = NULL;
    }
    if (st->type == CNX_STATE_FINISHED) {
        int code = cnx_reprocess_exit_code(st);
        if (cnx_reprocess_exit_name(code) == NULL)
            abort();
        if (cnx_reprocess_summary_text(st, &out) == 0)
            free(out);
        out = NULL;
        if (cnx_reprocess_result_json((const char *)data, size, NULL, 0, code,
                                      &out) == 0)
            free(out);
    }
    cnx_request_state_free(st);
    return 0;
}
