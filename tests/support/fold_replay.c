/*
 * fold_replay.c - apply a captured log to a fresh ledger in a scrambled
 * order, for tests/integration/ledger_fold.sh.
 *
 *   fold_replay LEDGER TRUST_DIR CONTROLLER_KEY SEED FILE.jsonl
 *
 * FILE holds the messages of cnx.requests, cnx.events and cnx.lineage as
 * `kcat -J` prints them (topic, partition, offset, key, headers, payload:
 * the signatures ride in the headers and cover the key). They are
 * applied through the controller's own fold (cnx__ctl_apply_logged), in an
 * interleaving of the partitions drawn from SEED (each partition in its
 * own order, as Kafka delivers it), in transactions of random size; and
 * now and then a transaction is rolled back and every partition rewound
 * to the position the ledger stored, as when a controller dies and
 * restarts. As the live controller does with its own decisions (request
 * states, releases), these are now and then applied early, without a
 * position, ahead of the messages before them in their partition, which
 * are read later, and then read again in their turn. The result must
 * equal the live ledger: the test compares `sqlite3 .dump`s. Exit status
 * 0, or 1 with a message on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "cnx/error.h"
#include "controller_int.h"

typedef struct part {
    char topic[64];
    int32_t partition;
    size_t n, cap, next;
    size_t early; /* decisions before this index were applied early */
    int64_t *offsets;
    char **payloads;
    char **keys;              /* NULL: none */
    cnx_kafka_header **headers; /* the signature and its key id */
    size_t *nheaders;
} part;

static uint64_t rng;

static uint32_t draw(uint32_t n)
{
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)((rng >> 33) % n);
}

static part *find_part(part **parts, size_t *nparts, const char *topic,
                       int32_t p)
{
    for (size_t i = 0; i < *nparts; i++)
        if ((*parts)[i].partition == p && strcmp((*parts)[i].topic, topic) == 0)
            return &(*parts)[i];
    *parts = realloc(*parts, (*nparts + 1) * sizeof(**parts));
    if (*parts == NULL)
        exit(1);
    part *np = &(*parts)[(*nparts)++];
    memset(np, 0, sizeof(*np));
    snprintf(np->topic, sizeof(np->topic), "%s", topic);
    np->partition = p;
    return np;
}

/* Rewind every partition to the position the ledger stored. */
static void rewind_parts(ctl *c, part *parts, size_t nparts)
{
    for (size_t i = 0; i < nparts; i++) {
        sqlite3_stmt *st = ctl_stmt(c, "SELECT next_offset FROM positions "
                                       "WHERE topic = ? AND partition = ?");
        int64_t at = 0;
        ctl_bind_text(st, 1, parts[i].topic);
        sqlite3_bind_int(st, 2, parts[i].partition);
        if (sqlite3_step(st) == SQLITE_ROW)
            at = sqlite3_column_int64(st, 0);
        parts[i].next = 0;
        while (parts[i].next < parts[i].n &&
               parts[i].offsets[parts[i].next] < at)
            parts[i].next++;
        parts[i].early = parts[i].next;
    }
}

/* A decision of the controller: what it applies as soon as the broker has
 * acknowledged it, before reading it back. */
static int is_decision(const char *payload)
{
    return strstr(payload, "\"schema\":\"" CNX_REQUEST_STATE_SCHEMA "\"") !=
               NULL ||
           strstr(payload, "\"schema\":\"" CNX_CONTROL_SCHEMA "\"") != NULL;
}

/* Apply the partition's next decision at or after its early cursor, if
 * any, with no position (as controller_decide.c does). */
static void apply_early(ctl *c, part *p, size_t *applied)
{
    size_t i = p->early > p->next ? p->early : p->next;
    cnx_message m;
    while (i < p->n && !is_decision(p->payloads[i]))
        i++;
    if (i == p->n)
        return;
    memset(&m, 0, sizeof(m));
    m.topic = p->topic;
    m.partition = -1;
    m.offset = -1;
    m.value = p->payloads[i];
    m.len = strlen(p->payloads[i]);
    c->authentic = 1; /* as the live controller applies its own */
    if (ctl_apply(c, &m) != 0) {
        fprintf(stderr, "fold_replay: early: %s\n", cnx_error_last()->message);
        exit(1);
    }
    c->authentic = 0;
    p->early = i + 1;
    (*applied)++;
}

int main(int argc, char **argv)
{
    cnx_controller_opts opts;
    part *parts = NULL;
    size_t nparts = 0, total = 0, applied = 0, rollbacks = 0, early = 0;
    char line[1 << 16];
    FILE *f;
    ctl c;
    int in_txn = 0, txn_left = 0;

    if (argc != 6) {
        fprintf(stderr, "usage: fold_replay LEDGER TRUST_DIR CONTROLLER_KEY "
                        "SEED FILE\n");
        return 1;
    }
    rng = strtoull(argv[4], NULL, 10) * 2654435761ULL + 1;
    f = fopen(argv[5], "r");
    if (f == NULL) {
        perror(argv[5]);
        return 1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        json_error_t err;
        json_t *m = json_loads(line, 0, &err);
        const char *topic = json_string_value(json_object_get(m, "topic"));
        json_t *payload = json_object_get(m, "payload");
        if (m == NULL || topic == NULL || !json_is_string(payload)) {
            fprintf(stderr, "fold_replay: bad line: %.80s\n", line);
            return 1;
        }
        part *p = find_part(&parts, &nparts, topic,
                            (int32_t)json_integer_value(
                                json_object_get(m, "partition")));
        if (p->n == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 64;
            p->offsets = realloc(p->offsets, p->cap * sizeof(*p->offsets));
            p->payloads = realloc(p->payloads, p->cap * sizeof(*p->payloads));
            p->keys = realloc(p->keys, p->cap * sizeof(*p->keys));
            p->headers = realloc(p->headers, p->cap * sizeof(*p->headers));
            p->nheaders = realloc(p->nheaders, p->cap * sizeof(*p->nheaders));
        }
        p->offsets[p->n] = json_integer_value(json_object_get(m, "offset"));
        p->payloads[p->n] = strndup(json_string_value(payload),
                                    json_string_length(payload));
        {
            /* kcat -J: "key" a string or null, "headers" [name, value, ...]
             * (absent when none). */
            json_t *k = json_object_get(m, "key");
            json_t *hs = json_object_get(m, "headers");
            size_t nh = json_is_array(hs) ? json_array_size(hs) / 2 : 0;
            p->keys[p->n] = json_is_string(k) ? strdup(json_string_value(k))
                                              : NULL;
            p->headers[p->n] = calloc(nh + 1, sizeof(cnx_kafka_header));
            p->nheaders[p->n] = nh;
            for (size_t h = 0; h < nh; h++) {
                const char *hn = json_string_value(json_array_get(hs, 2 * h));
                const char *hv =
                    json_string_value(json_array_get(hs, 2 * h + 1));
                p->headers[p->n][h].name = strdup(hn ? hn : "");
                p->headers[p->n][h].value = strdup(hv ? hv : "");
            }
        }
        p->n++;
        total++;
        json_decref(m);
    }
    fclose(f);

    memset(&opts, 0, sizeof(opts));
    opts.ledger = argv[1];
    opts.trust_dir = argv[2];
    opts.key_path = argv[3];
    opts.batch = 1000;
    opts.price_per_core_hour = -1;
    if (cnx__ctl_open(&c, &opts) != 0) {
        fprintf(stderr, "fold_replay: %s\n", cnx_error_last()->message);
        return 1;
    }
    for (;;) {
        size_t live[512], nlive = 0;
        for (size_t i = 0; i < nparts && nlive < 512; i++)
            if (parts[i].next < parts[i].n)
                live[nlive++] = i;
        if (nlive == 0)
            break;
        if (!in_txn) {
            ctl_exec(&c, "BEGIN IMMEDIATE");
            in_txn = 1;
            txn_left = 1 + (int)draw(8);
        }
        part *p = &parts[live[draw((uint32_t)nlive)]];
        cnx_message m;
        if (draw(3) == 0) {
            apply_early(&c, p, &early);
            goto step;
        }
        memset(&m, 0, sizeof(m));
        m.topic = p->topic;
        m.partition = p->partition;
        m.offset = p->offsets[p->next];
        m.value = p->payloads[p->next];
        m.len = strlen(p->payloads[p->next]);
        m.key = p->keys[p->next];
        m.key_len = m.key ? strlen(p->keys[p->next]) : 0;
        m.headers = p->headers[p->next];
        m.nheaders = p->nheaders[p->next];
        if (cnx__ctl_apply_logged(&c, &m) != 0) {
            fprintf(stderr, "fold_replay: %s\n", cnx_error_last()->message);
            return 1;
        }
        p->next++;
        applied++;
    step:
        if (--txn_left == 0) {
            /* One transaction in four dies before its commit. */
            if (draw(4) == 0) {
                ctl_rollback(&c);
                rewind_parts(&c, parts, nparts);
                rollbacks++;
            } else {
                ctl_commit(&c);
            }
            in_txn = 0;
        }
    }
    if (in_txn)
        ctl_commit(&c);
    cnx__ctl_close(&c);
    printf("fold_replay: %zu messages in %zu partitions, %zu applications, "
           "%zu early, %zu rollbacks\n",
           total, nparts, applied, early, rollbacks);
    for (size_t i = 0; i < nparts; i++) {
        for (size_t k = 0; k < parts[i].n; k++) {
            free(parts[i].payloads[k]);
            free(parts[i].keys[k]);
            for (size_t h = 0; h < parts[i].nheaders[k]; h++) {
                free((char *)parts[i].headers[k][h].name);
                free((char *)parts[i].headers[k][h].value);
            }
            free(parts[i].headers[k]);
        }
        free(parts[i].payloads);
        free(parts[i].offsets);
        free(parts[i].keys);
        free(parts[i].headers);
        free(parts[i].nheaders);
    }
    free(parts);
    return 0;
}
