/*
 * fuzz_dead_letter.c - the messages cnx-replay reads: dead letters of
 * cnx.dlq (cnx_replay_dead_parse) and the controller's decisions on
 * cnx.events (cnx_control_parse, through cnx_replay_release_parse). A
 * decision that parses must build back (cnx_control_build) to text that
 * parses to the same fields.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/message.h"
#include "cnx/replay.h"
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
    char *text = fuzz_strndup(data, size), *built = NULL;
    char key[CNX_DIGEST_LEN];
    cnx_replay_dead dead;
    cnx_control d, back;
    int reused;

    (void)cnx_replay_dead_parse(text, size, "r1", &dead);
    (void)cnx_replay_release_parse(text, size, "r1", key, &reused);
    if (cnx_control_parse(&d, text, size) == 0) {
        if (cnx_control_build(&d, &built) != 0)
            abort();
        if (cnx_control_parse(&back, built, strlen(built)) != 0 ||
            memcmp(&d, &back, sizeof(d)) != 0)
            abort();
        free(built);
    }
    free(text);
    return 0;
}
