/*
 * fuzz_synapse_table.c - synapse tables (cnx_synapse_table_parse), the
 * JSON lines the synapses stage writes per chunk and the edges stage
 * reads back. A table that parses must serialise (with the resolution
 * the harness picks, 1 nm) to text that parses to the same synapses, and
 * its connectivity edges must build and serialise.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/synapse_io.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const double res[3] = {1.0, 1.0, 1.0};
    cnx_synapse *s = NULL, *s2 = NULL;
    cnx_synapse_edge *e = NULL;
    size_t n = 0, n2 = 0, ne = 0, len = 0, len2 = 0;
    char *text = NULL, *text2 = NULL;
    if (cnx_synapse_table_parse((const char *)data, size, "fuzz", &s, &n) != 0)
        return 0;
    if (cnx_synapse_edges(s, n, &e, &ne) != 0)
        abort();
    if (cnx_synapse_edges_json(e, ne, &text, &len) == 0)
        free(text);
    text = NULL;
    if (cnx_synapse_table_json(s, n, res, &text, &len) == 0) {
        if (cnx_synapse_table_parse(text, len, "fuzz", &s2, &n2) != 0 ||
            n2 != n || cnx_synapse_table_json(s2, n2, res, &text2, &len2) != 0 ||
            len2 != len || memcmp(text, text2, len) != 0)
            abort(); /* canonical form is not a fixed point */
    }
    free(text2);
    free(text);
    free(s2);
    free(e);
    free(s);
    return 0;
}
