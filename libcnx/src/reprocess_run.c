/*
 * reprocess_run.c - submit a request and follow the controller's answers
 * (cnx/reprocess_run.h): the Kafka loop of cnx-reprocess and cnx-replay.
 *
 * One reader on cnx.requests, started at the exact ends asked of the broker
 * before the request is produced, so a fast answer cannot be missed; one
 * producer for the request. Messages keyed by another request are skipped
 * unread; the request itself (another schema) is skipped; a malformed or
 * (with a controller key) unverified answer is reported once and skipped.
 * The first accepted and the first finished count; repeats are ignored.
 * Single-threaded; the caller's signal handler sets *interrupted.
 */
#include "cnx/reprocess_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnx/error.h"
#include "cnx/lineage.h"
#include "cnx/log.h"
#include "cnx/message.h"
#include "cnx/reprocess.h"

#define POLL_MS 200

/* Start positions for the reader: the ends taken just before producing. */
typedef struct ends {
    cnx_position *pos;
    size_t n;
} ends;

static int64_t start_at(void *ctx, const char *topic, int32_t partition)
{
    const ends *e = ctx;
    for (size_t i = 0; i < e->n; i++)
        if (e->pos[i].partition == partition &&
            strcmp(e->pos[i].topic, topic) == 0)
            return e->pos[i].offset;
    return CNX_OFFSET_END;
}

/*
 * A reader positioned at the current end of cnx.requests. An assignment
 * at "end" is resolved lazily by librdkafka, possibly after our request and
 * a fast answer are written; so ask for the ends first and start from those
 * exact offsets.
 */
static int open_reader(cnx_consumer **out, const cnx_kafka_opts *k,
                       int timeout_ms)
{
    static const char *const topics[] = {CNX_TOPIC_REQUESTS};
    cnx_consumer *probe = NULL;
    ends e = {NULL, 0};
    int rc = cnx_reader_new(&probe, k, topics, 1, NULL, NULL);
    if (rc == 0)
        rc = cnx_reader_ends(probe, &e.pos, &e.n, timeout_ms);
    cnx_consumer_free(probe);
    if (rc == 0)
        rc = cnx_reader_new(out, k, topics, 1, start_at, &e);
    free(e.pos);
    return rc;
}

/* The state of one follow. */
typedef struct follower {
    cnx_reprocess_run *r;
    cnx_key *ckey;   /* the controller's key, or NULL */
    char *plan;      /* the accepted message, JSON */
    size_t plan_len;
} follower;

static void put_text(const char *s)
{
    if (s != NULL && s[0] != '\0') {
        fputs(s, stderr);
        fflush(stderr);
    }
}

/* Print a result as JSON on stdout (--json). */
static void put_json(const follower *f, const cnx_message *msg, int code)
{
    char *out = NULL;
    if (cnx_reprocess_result_json(msg->value, msg->len, f->plan,
                                  f->plan_len, code, &out) == 0)
        printf("%s\n", out);
    else
        fprintf(stderr, "%s: %s\n", f->r->prog, cnx_error_last()->message);
    free(out);
}

/* Give up with exit status code. */
static int fail_code(const follower *f, const char *what, int code)
{
    fprintf(stderr, "%s: %s\n", f->r->prog, what);
    if (f->r->json) {
        char *out = NULL;
        if (cnx_reprocess_error_json(f->r->request, what, code, &out) == 0)
            printf("%s\n", out);
        free(out);
    }
    return code;
}

static int fail_runtime(const follower *f, const char *what)
{
    return fail_code(f, what, CNX_REPROCESS_ERROR);
}

static void report_accepted(const follower *f, const cnx_request_state *st)
{
    if (f->r->quiet || f->r->json)
        return;
    fprintf(stderr, "request %s: %lld task%s in %zu stage%s\n",
            st->request, (long long)st->tasks, st->tasks == 1 ? "" : "s",
            st->nstages, st->nstages == 1 ? "" : "s");
    for (size_t i = 0; i < st->nstages; i++) {
        const cnx_state_stage *s = &st->stages[i];
        fprintf(stderr,
                "  %s (%s, %s): %lld tasks over [%lld,%lld,%lld]-[%lld,"
                "%lld,%lld] at %s -> %s %s\n",
                s->stage, s->worker, s->reduce ? "reduce" : "map",
                (long long)s->tasks, (long long)s->region.min[0],
                (long long)s->region.min[1], (long long)s->region.min[2],
                (long long)s->region.max[0], (long long)s->region.max[1],
                (long long)s->region.max[2], s->scale, s->output_layer,
                s->output_scale);
    }
    for (size_t i = 0; i < st->nnotes; i++)
        fprintf(stderr, "  note: %s\n", st->notes[i]);
    fprintf(stderr, "  deadline %s\n", st->deadline);
}

/* Keep a copy of msg's value, NUL-terminated, in *dst. */
static int keep(char **dst, size_t *len, const cnx_message *msg)
{
    char *copy = malloc(msg->len + 1);
    if (copy == NULL)
        return CNX_ENOMEM;
    memcpy(copy, msg->value, msg->len);
    copy[msg->len] = '\0';
    free(*dst);
    *dst = copy;
    if (len != NULL)
        *len = msg->len;
    return 0;
}

/*
 * Follow the request until the answer (and with wait, the end). Returns
 * the exit status.
 */
static int follow(follower *f, cnx_consumer *reader, double answer_by,
                  double finish_by)
{
    cnx_reprocess_run *r = f->r;
    cnx_reprocess_view *view = NULL;
    int accepted = 0, warned = 0, code = -1;
    char why[600];

    if (cnx_reprocess_view_new(&view, r->tty) != 0)
        return fail_runtime(f, cnx_error_last()->message);
    while (code < 0) {
        cnx_message *msg = NULL;
        cnx_request_state *st = NULL;
        double mono = cnx_now();
        char *txt = NULL;
        int rc;

        if (r->interrupted != NULL && *r->interrupted) {
            snprintf(why, sizeof(why),
                     "interrupted; request %s goes on at the controller",
                     r->request);
            code = fail_runtime(f, why);
            break;
        }
        if (!accepted && mono > answer_by) {
            snprintf(why, sizeof(why),
                     "no answer from the controller within %d s (request "
                     "%s; is cnx-controller running?)",
                     r->timeout_s, r->request);
            code = fail_runtime(f, why);
            break;
        }
        if (mono > finish_by) {
            snprintf(why, sizeof(why),
                     "request %s not finished within %d s (it goes on at "
                     "the controller)",
                     r->request, r->timeout_s);
            code = fail_runtime(f, why);
            break;
        }
        if (r->wait && accepted && !r->quiet &&
            cnx_reprocess_view_tick(view, mono, (int64_t)time(NULL),
                                    &txt) == 0)
            put_text(txt);
        free(txt);
        txt = NULL;
        rc = cnx_consumer_poll(reader, POLL_MS, &msg);
        if (rc != 0 && !cnx_error_last()->retriable && msg == NULL) {
            snprintf(why, sizeof(why), "reading %s: %s", CNX_TOPIC_REQUESTS,
                     cnx_error_last()->message);
            code = fail_runtime(f, why);
            break;
        }
        if (msg == NULL)
            continue;
        if (msg->value == NULL ||
            (msg->key != NULL &&
             (msg->key_len != strlen(r->request) ||
              memcmp(msg->key, r->request, msg->key_len) != 0))) {
            cnx_message_free(msg);
            continue;
        }
        rc = cnx_request_state_parse(&st, msg->value, msg->len);
        if (rc == 0 && f->ckey != NULL &&
            cnx_msg_verify(msg, &f->ckey, 1, NULL) != 0)
            rc = CNX_EDIGEST;
        if (rc != 0) {
            /* Our own request (another schema) is expected; a malformed
             * or unverified answer is reported once and skipped. */
            if (rc != CNX_ENOTFOUND && !warned && !r->quiet) {
                fprintf(stderr, "%s: ignoring a %s message at %s [%d] "
                                "offset %lld: %s\n",
                        r->prog, rc == CNX_EDIGEST ? "unverified"
                                                   : "malformed",
                        msg->topic, (int)msg->partition,
                        (long long)msg->offset, cnx_error_last()->message);
                cnx_reprocess_view_detach(view);
                warned = 1;
            }
            cnx_request_state_free(st);
            cnx_message_free(msg);
            continue;
        }
        if (strcmp(st->request, r->request) != 0) {
            cnx_request_state_free(st);
            cnx_message_free(msg);
            continue;
        }
        switch (st->type) {
        case CNX_STATE_REFUSED:
            if (accepted)
                break;
            fprintf(stderr, "%s: request %s refused: %s\n", r->prog,
                    st->request, st->error);
            code = CNX_REPROCESS_USAGE;
            if (r->json)
                put_json(f, msg, code);
            break;
        case CNX_STATE_ACCEPTED:
            if (accepted)
                break;
            accepted = 1;
            if (keep(&f->plan, &f->plan_len, msg) != 0) {
                code = fail_runtime(f, "out of memory");
                break;
            }
            report_accepted(f, st);
            if (!r->wait) {
                code = CNX_REPROCESS_DONE;
                if (r->json)
                    put_json(f, msg, code);
                else
                    printf("%s\n", r->request);
            }
            break;
        case CNX_STATE_PROGRESS:
        case CNX_STATE_SLO:
            /* The controller answers in order (one key, one partition),
             * so this is past its acceptance (whose message we missed only
             * if it was lost). */
            accepted = 1;
            if (!r->wait) {
                code = CNX_REPROCESS_DONE;
                if (r->json)
                    put_json(f, msg, code);
                else
                    printf("%s\n", r->request);
                break;
            }
            if (!r->quiet && cnx_reprocess_view_update(
                                 view, st, mono, (int64_t)time(NULL),
                                 &txt) == 0)
                put_text(txt);
            free(txt);
            txt = NULL;
            break;
        case CNX_STATE_FINISHED:
            accepted = 1;
            code = cnx_reprocess_exit_code(st);
            if (!r->quiet &&
                cnx_reprocess_summary_text(st, &txt) == 0)
                put_text(txt);
            free(txt);
            txt = NULL;
            if (r->json)
                put_json(f, msg, code);
            if (keep(&r->finished, NULL, msg) != 0)
                CNX_WARN("reprocess", "out of memory keeping the summary");
            break;
        }
        cnx_request_state_free(st);
        cnx_message_free(msg);
    }
    cnx_reprocess_view_free(view);
    fflush(stdout);
    return code;
}

int cnx_reprocess_submit_follow(cnx_reprocess_run *run, const char *body)
{
    follower f = {run, NULL, NULL, 0};
    cnx_producer *producer = NULL;
    cnx_consumer *reader = NULL;
    int ms = (run->timeout_s < 30 ? run->timeout_s : 30) * 1000;
    int code;
    double t0;

    if (run->request == NULL || body == NULL || run->timeout_s < 1)
        return fail_code(&f, "internal error: no request to submit",
                         CNX_REPROCESS_ERROR);
    run->finished = NULL;
    if (run->controller_key != NULL &&
        cnx_key_load_public(&f.ckey, run->controller_key) != 0) {
        char why[600];
        snprintf(why, sizeof(why), "--controller-key %s: %s",
                 run->controller_key, cnx_error_last()->message);
        return fail_code(&f, why, CNX_REPROCESS_USAGE);
    }
    if (open_reader(&reader, &run->kafka, ms) != 0 ||
        cnx_producer_new(&producer, &run->kafka) != 0 ||
        cnx_producer_send(producer, CNX_TOPIC_REQUESTS, run->request, body,
                          strlen(body), NULL, 0) != 0 ||
        cnx_producer_flush(producer, ms) != 0) {
        code = fail_runtime(&f, cnx_error_last()->message);
        goto done;
    }
    t0 = cnx_now();
    code = follow(&f, reader, t0 + (double)run->timeout_s,
                  run->wait && !run->timeout_given
                      ? 1e300
                      : t0 + (double)run->timeout_s);
done:
    cnx_consumer_free(reader);
    cnx_producer_free(producer);
    cnx_key_free(f.ckey);
    free(f.plan);
    return code;
}
