/*
 * controller.c - the controller's loop and the ledger it writes.
 *
 * Startup: open the ledger (creating the schema), load the trusted keys,
 * open a reader on cnx.requests, cnx.events and cnx.lineage at the
 * positions stored in the ledger, and apply everything up to the ends the
 * broker reports at that moment ("catching up"). Only then does the
 * controller decide anything, so that a decision it published just before
 * it was killed is seen, not made twice. Then: apply what arrives, in
 * transactions of up to opts->batch messages, each transaction also
 * storing the positions after the messages it applied; and between
 * transactions, a round of decisions (controller_decide.c). With --rebuild
 * it stops once caught up.
 *
 * Invariant: the ledger holds what the log says and nothing else. A
 * decision is published and acknowledged first, then applied through the
 * same code as a consumed message; when it comes back from the log the
 * second application changes nothing (every apply is idempotent), and the
 * derived columns are recomputed from base rows, so the order in which
 * partitions interleave does not matter either.
 */
#include "controller_int.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "cnx/message.h"
#include "cnx/url.h"
#include "worker_int.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    (void)sig;
    stop_signal = 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every *.pem / *.pub file in dir that holds an Ed25519 public key;
 * anything else (other files, private keys, unreadable) is ignored, with
 * a note for files that look like keys but are not public keys. */
static int load_trust(ctl *c)
{
    DIR *d = opendir(c->o->trust_dir);
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    if (d == NULL)
        return cnx_error_set(CNX_ENOTFOUND, 0, "--trust %s: cannot open "
                             "the directory", c->o->trust_dir);
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' ||
            !(ends_with(e->d_name, ".pem") || ends_with(e->d_name, ".pub")))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            char **grown = realloc(names, cap * sizeof(*names));
            if (grown == NULL)
                break;
            names = grown;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n > 0)
        qsort(names, n, sizeof(*names), cmp_str);
    c->trusted = calloc(n + 1, sizeof(*c->trusted));
    c->trusted_names = calloc(n + 1, sizeof(*c->trusted_names));
    if (c->trusted == NULL || c->trusted_names == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    for (size_t i = 0; i < n; i++) {
        char path[4096];
        cnx_key *key = NULL;
        snprintf(path, sizeof(path), "%s/%s", c->o->trust_dir, names[i]);
        if (names[i] != NULL && cnx_key_load_public(&key, path) == 0) {
            c->trusted[c->ntrusted] = key;
            c->trusted_names[c->ntrusted++] = names[i];
            continue;
        }
        CNX_INFO("controller", "--trust: ignoring %s (%s)", names[i] ?
                 names[i] : "?", cnx_error_last()->message);
        free(names[i]);
    }
    free(names);
    if (c->ntrusted == 0)
        return cnx_error_set(CNX_EINVAL, 0, "--trust %s: no Ed25519 public "
                             "key (*.pem, *.pub) in it", c->o->trust_dir);
    CNX_INFO("controller", "%zu trusted key(s) from %s", c->ntrusted,
             c->o->trust_dir);
    return 0;
}

/* ---- dataset roots ----------------------------------------------------- */

/* The --dataset-root URLs in canonical form, for cnx_url_under. */
static int load_roots(ctl *c)
{
    if (c->o->ndataset_roots == 0)
        return 0;
    c->roots = calloc(c->o->ndataset_roots, sizeof(*c->roots));
    if (c->roots == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    for (size_t i = 0; i < c->o->ndataset_roots; i++) {
        cnx_url *url = malloc(sizeof(*url));
        int rc =
            url ? cnx_url_parse(url, c->o->dataset_roots[i], CNX_URL_ALLOW_PATH)
                : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        if (rc == 0 && !cnx_url_writable(url->scheme))
            rc =
                cnx_error_set(CNX_EINVAL, 0,
                              "--dataset-root %s: the "
                              "controller cannot write %s:// stores",
                              url->canonical, cnx_url_scheme_name(url->scheme));
        if (rc == 0) {
            c->roots[c->nroots] = strdup(url->canonical);
            rc = c->roots[c->nroots]
                     ? 0
                     : cnx_error_set(CNX_ENOMEM, 0, "out of memory");
        }
        free(url);
        if (rc != 0)
            return rc;
        c->nroots++;
    }
    return 0;
}

/* ---- positions --------------------------------------------------------- */

static int64_t start_at(void *ctx, const char *topic, int32_t partition)
{
    ctl *c = ctx;
    sqlite3_stmt *st = ctl_stmt(c, "SELECT next_offset FROM positions "
                                   "WHERE topic = ? AND partition = ?");
    if (st == NULL)
        return CNX_OFFSET_BEGINNING;
    ctl_bind_text(st, 1, topic);
    sqlite3_bind_int(st, 2, partition);
    if (sqlite3_step(st) == SQLITE_ROW)
        return sqlite3_column_int64(st, 0);
    return CNX_OFFSET_BEGINNING;
}

static int store_position(ctl *c, const cnx_message *m)
{
    sqlite3_stmt *st = ctl_stmt(
        c, "INSERT INTO positions(topic, partition, next_offset) "
           "VALUES(?, ?, ?) ON CONFLICT(topic, partition) DO UPDATE SET "
           "next_offset = max(next_offset, excluded.next_offset)");
    if (st == NULL)
        return CNX_EIO;
    ctl_bind_text(st, 1, m->topic);
    sqlite3_bind_int(st, 2, m->partition);
    sqlite3_bind_int64(st, 3, m->offset + 1);
    return ctl_done(c, st);
}

/* ---- the loop ---------------------------------------------------------- */

/* The ledger offset of a log offset: + the partition's base, if its log
 * began again (check_log); 0 for most partitions and most ledgers. */
static int64_t offset_base(const ctl *c, const char *topic, int32_t partition)
{
    for (size_t i = 0; i < c->nbases; i++)
        if (c->bases[i].partition == partition &&
            strcmp(c->bases[i].topic, topic) == 0)
            return c->bases[i].base;
    return 0;
}

/* Read the `offset_base/<topic>/<partition>` rows of meta into c->bases. */
static int load_bases(ctl *c)
{
    sqlite3_stmt *st = ctl_stmt(c, "SELECT key, value FROM meta WHERE key "
                                   "LIKE 'offset_base/%'");
    size_t n = 0;
    if (st == NULL)
        return CNX_EIO;
    free(c->bases);
    c->bases = NULL;
    c->nbases = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        const char *slash = key != NULL ? strrchr(key, '/') : NULL;
        size_t len;
        ctl_base *grown;
        if (slash == NULL || slash - key <= 12)
            continue;
        if (n == c->nbases) {
            grown = realloc(c->bases, (2 * n + 16) * sizeof(*grown));
            if (grown == NULL) {
                sqlite3_reset(st);
                return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
            }
            c->bases = grown;
            n = 2 * n + 16;
        }
        len = (size_t)(slash - key) - 12;
        if (len >= sizeof(c->bases[0].topic))
            continue;
        memcpy(c->bases[c->nbases].topic, key + 12, len);
        c->bases[c->nbases].topic[len] = '\0';
        c->bases[c->nbases].partition = (int32_t)strtol(slash + 1, NULL, 10);
        c->bases[c->nbases++].base = sqlite3_column_int64(st, 1);
    }
    sqlite3_reset(st);
    return 0;
}

static int apply_logged(ctl *c, const cnx_message *m, ctl_verdict *v)
{
    cnx_message at = *m;
    int rc;
    at.offset += offset_base(c, m->topic, m->partition);
    rc = ctl_apply_verified(c, &at, v);
    if (rc == CNX_EIO || rc == CNX_ENOMEM)
        return rc; /* the ledger itself failed: stop, retry from the log */
    c->applied++;
    c->dirty = 1;
    return store_position(c, m);
}

int cnx__ctl_apply_logged(ctl *c, const cnx_message *m)
{
    return apply_logged(c, m, NULL);
}

/*
 * Publish this turn of the loop and the readiness (/healthz, /readyz).
 * Not ready: draining (SIGTERM seen), the ledger not open, catching up
 * on the log (at start, or after the broker came back with a shorter
 * log: nothing is decided meanwhile), or no broker has answered the
 * reader for --ready-timeout (the clock the --broker-timeout give-up
 * uses).
 */
static void publish_health(ctl *c)
{
    char why[256];
    double down = c->reader != NULL ? cnx_consumer_unreachable_s(c->reader)
                                    : 0;
    double limit = c->o->ready_timeout_s > 0 ? c->o->ready_timeout_s
                                             : CNX_KAFKA_READY_TIMEOUT_S;
    if (c->o->metrics_port <= 0)
        return;
    if (stop_signal)
        snprintf(why, sizeof(why), "draining: stop requested");
    else if (c->db == NULL)
        snprintf(why, sizeof(why), "ledger not open");
    else if (down > 0 && down >= limit)
        snprintf(why, sizeof(why), "broker unreachable for %.0f s "
                 "(bootstrap %s)", down,
                 c->o->kafka.brokers ? c->o->kafka.brokers : "?");
    else if (!c->live)
        snprintf(why, sizeof(why), "catching up on the log");
    else
        why[0] = '\0';
    cnx__http_health_update(why[0] != '\0' ? why : NULL);
}

/* Poll up to batch messages (waiting up to wait_ms for the first). */
static int poll_batch(ctl *c, ctl_batch *b, int wait_ms)
{
    b->n = 0;
    if (b->msgs == NULL) {
        b->msgs = calloc((size_t)c->o->batch, sizeof(*b->msgs));
        b->verdicts = calloc((size_t)c->o->batch, sizeof(*b->verdicts));
        if (b->msgs == NULL || b->verdicts == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    while (b->n < (size_t)c->o->batch) {
        cnx_message *m = NULL;
        int prc = cnx_consumer_poll(c->reader, b->n == 0 ? wait_ms : 0, &m);
        if (prc != 0 && m == NULL && !cnx_error_last()->retriable)
            return prc; /* the broker gone past --broker-timeout */
        if (prc != 0 && m == NULL) {
            CNX_WARN("controller", "%s", cnx_error_last()->message);
            break;
        }
        if (m == NULL)
            break;
        memset(&b->verdicts[b->n], 0, sizeof(b->verdicts[0]));
        b->msgs[b->n++] = m;
    }
    publish_health(c);
    return 0;
}

void cnx__ctl_batch_dispose(ctl_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        ctl_verdict_free(&b->verdicts[i]);
        cnx_message_free(b->msgs[i]);
    }
    free(b->msgs);
    free(b->verdicts);
    memset(b, 0, sizeof(*b));
}

/* Check the signatures of the read-ahead batch (c->next): pure, and most
 * of a manifest's cost, so they run ahead of the fold (apply_batch). */
static void *verify_next(void *arg)
{
    ctl *c = arg;
    for (size_t i = 0; i < c->next.n; i++)
        if (c->next.msgs[i]->value != NULL &&
            strcmp(c->next.msgs[i]->topic, CNX_TOPIC_LINEAGE) == 0)
            ctl_verify(c, c->next.msgs[i], &c->next.verdicts[i]);
    return NULL;
}

/*
 * Apply one batch in one transaction. Two stages overlap: while this
 * thread applies batch k, another checks the signatures of batch k + 1,
 * already read (signature checks are pure; the fold is not). Messages
 * read but not yet applied are only in memory: their positions are not
 * stored, so after a crash they are read again. *got: how many applied.
 */
static int apply_batch(ctl *c, int wait_ms, int *got)
{
    ctl_batch cur;
    pthread_t verifier;
    int verifying = 0, rc = 0;

    *got = 0;
    if (c->next.n == 0) {
        rc = poll_batch(c, &c->next, wait_ms);
        if (rc != 0 || c->next.n == 0)
            return rc;
        verify_next(c); /* nothing to overlap with yet */
    }
    cur = c->next;
    memset(&c->next, 0, sizeof(c->next));
    rc = poll_batch(c, &c->next, 0);
    if (rc == 0 && c->next.n > 0)
        verifying = pthread_create(&verifier, NULL, verify_next, c) == 0;
    if (rc == 0)
        rc = ctl_exec(c, "BEGIN IMMEDIATE");
    for (size_t i = 0; rc == 0 && i < cur.n; i++)
        rc = apply_logged(c, cur.msgs[i], &cur.verdicts[i]);
    if (rc == 0)
        rc = ctl_commit(c);
    else
        ctl_rollback(c);
    if (verifying)
        pthread_join(verifier, NULL);
    if (rc == 0)
        *got = (int)cur.n;
    cnx__ctl_batch_dispose(&cur);
    return rc;
}

/* --broker-timeout, or its default. */
static double broker_timeout(const ctl *c)
{
    return c->o->kafka.broker_timeout_s > 0 ? c->o->kafka.broker_timeout_s
                                            : CNX_KAFKA_BROKER_TIMEOUT_S;
}

/* Apply everything up to the ends the broker reports now (interrupted by
 * SIGTERM only if interruptible). */
static int catch_up(ctl *c, int interruptible)
{
    cnx_position *ends = NULL;
    size_t nends = 0;
    double t0 = cnx_now(), moved = t0;
    int rc;
    cnx__ctl_metrics_catching_up(1);
    rc = cnx_reader_ends(c->reader, &ends, &nends, 10000);
    if (rc != 0) {
        cnx__ctl_metrics_catching_up(0);
        return rc;
    }
    CNX_DEBUG("controller", "log ends of %zu partition(s) in %.3f s", nends,
              cnx_now() - t0);
    for (;;) {
        int behind = 0, got = 0;
        for (size_t i = 0; i < nends && !behind; i++) {
            int64_t at = start_at(c, ends[i].topic, ends[i].partition);
            behind = (at == CNX_OFFSET_BEGINNING ? 0 : at) < ends[i].offset;
        }
        if (!behind || (interruptible && stop_signal))
            break;
        rc = apply_batch(c, 500, &got);
        if (rc != 0)
            break;
        if (got > 0)
            moved = cnx_now();
        else if (cnx_now() - moved > broker_timeout(c)) {
            rc = cnx_error_set(CNX_EIO, 1, "catching up: the broker "
                               "(%s) delivered nothing for %g s before the "
                               "log's end", c->o->kafka.brokers,
                               broker_timeout(c));
            break;
        }
    }
    free(ends);
    cnx__ctl_metrics_catching_up(0);
    if (rc == 0)
        CNX_INFO("controller", "caught up: %lld message(s) applied in "
                 "%.2f s", (long long)c->applied, cnx_now() - t0);
    return rc;
}

static const char *const log_topics[] = {CNX_TOPIC_REQUESTS, CNX_TOPIC_EVENTS,
                                         CNX_TOPIC_LINEAGE};

/*
 * Did the log go backwards? A broker may come back as another cluster
 * (a new cluster id: cnx-broker restarted, its log kept in memory gone)
 * or with partitions that end before the positions the ledger stored (a
 * cluster rebuilt under the same id). Either way the stored positions
 * point at nothing: they are forgotten in one transaction, the reader
 * starts again from the log's start, and every task released before
 * now is released again (check_leases, by c->log_reset_at), since its
 * task message may be gone. The ledger itself stays: it is what the
 * old log said. The cluster id is recorded in `meta` (`cluster_id`).
 * Checked at start and whenever the reader reconnects.
 * *reset: whether the log was found reset.
 */
static int check_log(ctl *c, int *reset)
{
    char id[256] = "", stored[256] = "", why[600] = "";
    cnx_position *ends = NULL;
    size_t nends = 0;
    sqlite3_stmt *st;
    int rc;

    *reset = 0;
    if (c->bases == NULL && (rc = load_bases(c)) != 0)
        return rc;
    if (cnx_consumer_cluster_id(c->reader, id, sizeof(id), 10000) != 0)
        CNX_WARN("controller", "%s", cnx_error_last()->message);
    st = ctl_stmt(c, "SELECT value FROM meta WHERE key = 'cluster_id'");
    if (st == NULL)
        return CNX_EIO;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0) != NULL)
        snprintf(stored, sizeof(stored), "%s", sqlite3_column_text(st, 0));
    sqlite3_reset(st); /* a stepped statement holds a read transaction */
    if (id[0] != '\0' && stored[0] != '\0' && strcmp(id, stored) != 0)
        snprintf(why, sizeof(why), "the broker's cluster id changed from "
                 "%s to %s", stored, id);
    if (why[0] == '\0') {
        rc = cnx_reader_ends(c->reader, &ends, &nends, 10000);
        if (rc != 0)
            return rc;
        for (size_t i = 0; i < nends && why[0] == '\0'; i++) {
            int64_t at = start_at(c, ends[i].topic, ends[i].partition);
            if (at != CNX_OFFSET_BEGINNING && at > ends[i].offset)
                snprintf(why, sizeof(why), "%s [%d] ends at offset %lld, "
                         "before the position %lld the ledger stored",
                         ends[i].topic, (int)ends[i].partition,
                         (long long)ends[i].offset, (long long)at);
        }
        free(ends);
    }
    if (why[0] == '\0' && (id[0] == '\0' || strcmp(id, stored) == 0))
        return 0;
    rc = ctl_exec(c, "BEGIN IMMEDIATE");
    if (rc == 0 && id[0] != '\0') {
        st = ctl_stmt(c, "INSERT OR REPLACE INTO meta(key, value) "
                         "VALUES('cluster_id', ?)");
        if (st == NULL)
            rc = CNX_EIO;
        else {
            ctl_bind_text(st, 1, id);
            rc = ctl_done(c, st);
        }
    }
    /* The new log's offsets start again at 0: record them past the old
     * one's (offset_base), then forget the positions. */
    if (rc == 0 && why[0] != '\0')
        rc = ctl_exec(c, "INSERT OR REPLACE INTO meta(key, value) SELECT "
                         "'offset_base/' || p.topic || '/' || p.partition, "
                         "p.next_offset + coalesce((SELECT CAST(m.value AS "
                         "INTEGER) FROM meta m WHERE m.key = 'offset_base/' "
                         "|| p.topic || '/' || p.partition), 0) FROM "
                         "positions p");
    if (rc == 0 && why[0] != '\0')
        rc = ctl_exec(c, "DELETE FROM positions");
    if (rc == 0)
        rc = ctl_exec(c, "COMMIT");
    else
        ctl_exec(c, "ROLLBACK");
    if (rc == 0)
        rc = load_bases(c);
    if (rc != 0 || why[0] == '\0')
        return rc;
    CNX_WARN("controller", "the log went backwards: %s; reading it again "
             "from its start and releasing again every task released "
             "before now", why);
    *reset = 1;
    c->log_reset_at = ctl_wall();
    cnx__ctl_batch_dispose(&c->next);
    cnx_consumer_free(c->reader);
    c->reader = NULL;
    /* A broker that just came back may not have made its topics yet. */
    for (double until = cnx_now() + broker_timeout(c);;) {
        rc = cnx_reader_new(&c->reader, &c->o->kafka, log_topics, 3,
                            start_at, c);
        if (rc == 0 || !cnx_error_last()->retriable || cnx_now() > until)
            break;
        struct timespec pause = {0, 200 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    c->reconnects = c->reader != NULL ? cnx_consumer_reconnects(c->reader)
                                      : 0;
    return rc;
}

/* After the reader reconnected: check the log again (check_log) and, if
 * it was reset, catch up on the new one before deciding anything. A
 * check the broker does not answer (it went away again) is tried again
 * 5 s later; only a ledger failure, or a reader that cannot be made
 * again, stops the controller. */
static int recheck_log(ctl *c)
{
    unsigned n = cnx_consumer_reconnects(c->reader);
    int reset = 0, rc;
    if (n == c->reconnects || cnx_now() < c->recheck_after)
        return 0;
    rc = check_log(c, &reset);
    if (rc == 0 && reset) {
        c->live = 0;
        rc = catch_up(c, 1);
        c->live = 1;
        c->dirty = 1;
    } else if (rc == 0)
        c->reconnects = n;
    if (rc != 0 && c->reader != NULL && cnx_error_last()->retriable) {
        CNX_WARN("controller", "checking the log after a reconnect: %s "
                 "(trying again in 5 s)", cnx_error_last()->message);
        c->recheck_after = cnx_now() + 5.0;
        return 0;
    }
    return rc;
}

void cnx__ctl_close(ctl *c)
{
    for (size_t i = 0; i < CTL_MAX_STMTS && c->stmts[i].sql; i++)
        sqlite3_finalize(c->stmts[i].st);
    if (c->db != NULL)
        sqlite3_close(c->db);
    for (size_t i = 0; i < c->nroots; i++)
        free(c->roots[i]);
    free(c->roots);
    for (size_t i = 0; i < c->ntrusted; i++) {
        cnx_key_free(c->trusted[i]);
        free(c->trusted_names[i]);
    }
    cnx_key_free(c->self);
    free(c->trusted);
    free(c->trusted_names);
    for (size_t i = 0; i < c->nplans; i++) {
        cnx_plan_free(c->plans[i].plan);
        cnx_workflow_free(c->plans[i].wf);
    }
    free(c->plans);
    for (size_t i = 0; i < c->npending; i++)
        free(c->pending[i].text);
    free(c->pending);
    free(c->dirty_tasks);
    free(c->bases);
    cnx__ctl_batch_dispose(&c->next);
    for (size_t i = 0; i < sizeof(c->digests) / sizeof(c->digests[0]); i++)
        for (ctl_digest *d = c->digests[i], *next; d != NULL; d = next) {
            next = d->next;
            free(d->url);
            free(d);
        }
    cnx_consumer_free(c->reader);
    cnx_producer_free(c->producer);
    free(c->metrics);
    pthread_mutex_destroy(&c->mlock);
}

int cnx__ctl_open(ctl *c, const cnx_controller_opts *opts)
{
    int rc;
    memset(c, 0, sizeof(*c));
    c->o = opts;
    pthread_mutex_init(&c->mlock, NULL);
    rc = load_roots(c);
    if (rc == 0)
        rc = ctl_ledger_open(c);
    if (rc == 0)
        rc = load_trust(c);
    if (rc == 0 && opts->key_path == NULL)
        rc = cnx_error_set(CNX_EINVAL, 0, "the controller needs its signing "
                           "key (--key)");
    if (rc == 0)
        rc = cnx_key_load_private(&c->self, opts->key_path);
    if (rc == 0) {
        char id[CNX_DIGEST_LEN];
        cnx_key_id(c->self, id);
        for (size_t i = 0; i < c->ntrusted; i++) {
            char other[CNX_DIGEST_LEN];
            cnx_key_id(c->trusted[i], other);
            if (strcmp(id, other) == 0)
                CNX_WARN("controller", "--trust %s holds the controller's "
                         "own key: workers holding it could sign decisions "
                         "(docs/security.md)", c->trusted_names[i]);
        }
        CNX_INFO("controller", "signing decisions with %s", id);
    }
    return rc;
}

int cnx_controller_run(const cnx_controller_opts *opts)
{
    struct sigaction sa;
    ctl c;
    int rc, code = 0, reset = 0;
    double idle_since;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    rc = cnx__ctl_open(&c, opts);
    if (rc == 0)
        rc = cnx_reader_new(&c.reader, &opts->kafka, log_topics, 3, start_at,
                            &c);
    if (rc == 0)
        rc = check_log(&c, &reset);
    if (rc == 0 && !opts->rebuild)
        rc = cnx_producer_new(&c.producer, &opts->kafka);
    if (rc == 0 && opts->metrics_port > 0)
        rc = cnx__ctl_metrics_start(&c, opts->metrics_port);
    if (rc == 0)
        rc = catch_up(&c, 1);
    if (rc != 0) {
        fprintf(stderr, "cnx-controller: %s\n", cnx_error_last()->message);
        cnx__ctl_metrics_stop();
        cnx__ctl_close(&c);
        return 1;
    }
    if (opts->rebuild) {
        CNX_INFO("controller", "ledger %s rebuilt", opts->ledger);
        cnx__ctl_close(&c);
        return 0;
    }
    c.live = 1;
    c.dirty = 1;
    idle_since = cnx_now();
    CNX_INFO("controller", "running (ledger %s)", opts->ledger);
    while (!stop_signal) {
        int got = 0;
        rc = apply_batch(&c, 100, &got);
        if (rc == 0)
            rc = recheck_log(&c);
        if (rc == 0)
            rc = ctl_decide(&c);
        if (rc != 0) {
            /* The ledger or the broker failed: stop. Whatever was not
             * committed is read again from the log by the next run. */
            fprintf(stderr, "cnx-controller: %s\n",
                    cnx_error_last()->message);
            code = 1;
            break;
        }
        if (got > 0)
            idle_since = cnx_now();
        else if (opts->idle_exit_s > 0 &&
                 cnx_now() - idle_since > opts->idle_exit_s)
            break;
    }
    /* Read back what this run published (its last decisions), so that
     * the stored positions are the log's end: a stopped controller's
     * ledger then equals a rebuild of the same log. */
    if (code == 0 && catch_up(&c, 0) != 0) {
        fprintf(stderr, "cnx-controller: %s\n", cnx_error_last()->message);
        code = 1;
    }
    CNX_INFO("controller", "stopping after %lld message(s)",
             (long long)c.applied);
    cnx__ctl_metrics_stop();
    cnx__ctl_close(&c);
    return code;
}
