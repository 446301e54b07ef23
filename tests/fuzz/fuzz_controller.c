/*
 * fuzz_controller.c - every message the controller folds into its ledger
 * (controller_apply.c): requests (cnx.request/1) and request states
 * (cnx.request-state/1, with the plan they carry) on cnx.requests, worker
 * events (cnx.event/1) and control decisions (cnx.control/1: released,
 * reused, dead_lettered) on cnx.events, and signed manifests on
 * cnx.lineage, through cnx__ctl_apply_logged on an in-memory ledger that
 * trusts the fixed test key (fuzz_common.h).
 *
 * An input is up to 16 messages separated by NUL bytes, applied in order
 * in one transaction that is rolled back afterwards (so inputs are
 * independent), after the touched tasks are refreshed. The first byte of
 * each message picks its topic: 'R' cnx.requests and 'E' cnx.events with
 * the rest signed by the harness (the controller's and the workers' key
 * are both the test key here, so the fold past the signature check is
 * reached), 'r' and 'e' the same unsigned, 'L' cnx.lineage with the rest
 * signed by the harness as a statement (so the statement's fold is
 * reached), 'l' cnx.lineage as given (an envelope); any other byte picks
 * one of the six by its value. A malformed message
 * must become a `rejected` row, never a ledger failure: the controller
 * stops on CNX_EIO and would read the same message again at restart, so
 * the harness aborts on it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/controller.h"
#include "cnx/kafka.h"
#include "cnx/message.h"
#include "controller_int.h"
#include "fuzz_common.h"

#define MAX_MESSAGES 16

static ctl c;
static cnx_controller_opts opts;
static cnx_key *signer;

static void drop_plans(void)
{
    for (size_t i = 0; i < c.nplans; i++) {
        cnx_plan_free(c.plans[i].plan);
        cnx_workflow_free(c.plans[i].wf);
    }
    free(c.plans);
    c.plans = NULL;
    c.nplans = 0;
}

static void cleanup(void)
{
    drop_plans();
    cnx__ctl_close(&c);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char *dir, *pub, *key;
    (void)argc;
    (void)argv;
    fuzz_quiet();
    signer = fuzz_key_private();
    dir = fuzz_tmpdir();
    pub = fuzz_write_private(dir, "fuzz.pub", FUZZ_PUB_PEM);
    key = fuzz_write_private(dir, "fuzz.key", FUZZ_KEY_PEM);
    memset(&opts, 0, sizeof(opts));
    opts.ledger = ":memory:";
    opts.trust_dir = dir;
    opts.key_path = key;
    opts.batch = 1000;
    opts.progress_s = 1;
    opts.at_risk_margin = 0.1;
    opts.price_per_core_hour = -1;
    opts.quiet = 1;
    if (cnx__ctl_open(&c, &opts) != 0)
        fuzz_die("ledger");
    /* The keys are loaded: the directory is not needed any more. */
    unlink(pub);
    unlink(key);
    rmdir(dir);
    free(pub);
    free(key);
    atexit(cleanup);
    return 0;
}

static int apply_one(char *text, size_t len, int64_t offset)
{
    static const char *const topics[6] = {
        CNX_TOPIC_REQUESTS, CNX_TOPIC_EVENTS, CNX_TOPIC_LINEAGE,
        CNX_TOPIC_LINEAGE,  CNX_TOPIC_REQUESTS, CNX_TOPIC_EVENTS};
    cnx_message m;
    cnx_kafka_header h[1];
    char type[CNX_MSG_TYPE_MAX + 1], sig[CNX_DSSE_SIG_MAX];
    char *envelope = NULL;
    int pick, rc;
    if (len == 0)
        return 0;
    switch (text[0]) {
    case 'R': pick = 0; break;
    case 'E': pick = 1; break;
    case 'L': pick = 2; break;
    case 'l': pick = 3; break;
    case 'r': pick = 4; break;
    case 'e': pick = 5; break;
    default: pick = (unsigned char)text[0] % 6; break;
    }
    memset(&m, 0, sizeof(m));
    m.topic = topics[pick];
    m.partition = 0;
    m.offset = offset;
    m.value = text + 1;
    m.len = len - 1;
    if (pick == 2) {
        if (cnx_dsse_sign(signer, CNX_DSSE_PAYLOAD_TYPE, text + 1, len - 1,
                          &envelope) != 0)
            return 0;
        m.value = envelope;
        m.len = strlen(envelope);
    } else if (pick < 2) {
        if (cnx_msg_signed_type(type, m.topic, NULL, 0) != 0 ||
            cnx_dsse_sign_detached(signer, type, m.value, m.len, sig) != 0)
            return 0;
        h[0].name = CNX_MSG_HEADER_SIG;
        h[0].value = sig;
        m.headers = h;
        m.nheaders = 1;
    }
    rc = cnx__ctl_apply_logged(&c, &m);
    free(envelope);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *fields[MAX_MESSAGES], *buf = NULL;
    size_t lens[MAX_MESSAGES], n;
    int rc = 0;
    n = fuzz_split(data, size, '\0', fields, lens, MAX_MESSAGES, &buf);
    if (ctl_exec(&c, "BEGIN IMMEDIATE") != 0)
        fuzz_die("BEGIN");
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = apply_one(fields[i], lens[i], (int64_t)i);
    if (rc == 0)
        rc = ctl_flush_touched(&c);
    if (rc == CNX_EIO) {
        fprintf(stderr, "fuzz: the ledger failed on a message: %s\n",
                cnx_error_last()->message);
        abort();
    }
    ctl_rollback(&c);
    drop_plans();
    free(buf);
    return 0;
}
