/*
 * tune_workflow.c - what cnx-tune writes: the tuned parameters as a JSON
 * object, and the base workflow with those parameters in its "segment"
 * and "segment-join" stages (cnx/tune.h).
 *
 * The workflow is edited as a jansson tree, which keeps the document's
 * key order, and printed in the layout of the files in workflows/: the top
 * level and each stage one key a line, every other value on one line with ", "
 * and ": " separators. A base file in that layout with nothing to change
 * comes back byte for byte. Reals are printed with 15 significant digits:
 * enough for every hand-written number and for the search's 6-digit
 * values to read back as the same doubles, without the 17-digit noise
 * ("0.55000000000000004") that would make the file unpleasant to edit;
 * only a parameter that needs more (a base value with 16 or 17 digits,
 * kept as the best) makes the whole file use 17.
 * Pure: strings in, strings out.
 */
#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/segment_io.h"
#include "cnx/tune.h"
#include "cnx/workflow.h"
#include "json_int.h"
#include "tune_int.h"

#define DUMP_FLAGS(digits) (JSON_ENCODE_ANY | JSON_REAL_PRECISION(digits))
#define NOTE_MARK "Parameters tuned by cnx-tune"

/* Significant digits that print every real of obj (an object or an
 * array, one level) so that it reads back exactly: 15, else 17. */
static int digits_for(const json_t *obj)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)obj, key, v)
    {
        char buf[40];
        if (!json_is_real(v))
            continue;
        snprintf(buf, sizeof(buf), "%.15g", json_real_value(v));
        if (strtod(buf, NULL) != json_real_value(v))
            return 17;
    }
    return 15;
}

/* A number as JSON: an integer when it is one (32768, not 32768.0). */
static json_t *number(double v)
{
    if (v == floor(v) && fabs(v) < 9007199254740992.0)
        return json_integer((json_int_t)v);
    return json_real(v);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Set key of out from src's value (a new reference is taken). */
static int copy_key(json_t *out, const json_t *src, const char *key)
{
    json_t *v = json_object_get(src, key);
    if (v == NULL || json_object_get(out, key) != NULL)
        return 0;
    return json_object_set(out, key, v);
}

/* Every row of the search and raw_input read back from text must equal
 * best's: the file says what was evaluated. */
static int check_round_trip(const char *text, const cnx_segment_params *best,
                            const cnx_tune_key *keys, size_t nkeys)
{
    cnx_segment_params q;
    cnx_segment_params_default(&q);
    memcpy(q.resolution, best->resolution, sizeof(q.resolution));
    if (cnx_segment_params_parse(&q, text) != 0)
        return cnx_error_wrap("tune: the tuned parameters");
    if (q.raw_input != best->raw_input)
        return cnx_error_set(CNX_EINVAL, 0,
                             "tune: raw_input does not read "
                             "back");
    for (size_t i = 0; i < nkeys; i++)
        if (cnx__tune_row_active(&keys[i], best) &&
            cnx__tune_get(&q, &keys[i]) != cnx__tune_get(best, &keys[i]))
            return cnx_error_set(CNX_EINVAL, 0,
                                 "tune: %s does not read back as %.17g",
                                 keys[i].key, cnx__tune_get(best, &keys[i]));
    return 0;
}

int cnx_tune_params_json(char **out, const char *base_json,
                         const cnx_segment_params *best,
                         const cnx_tune_config *cfg)
{
    cnx_segment_params check;
    const cnx_tune_key *keys = cfg->keys;
    size_t nkeys = cfg->nkeys, nrest = 0;
    json_t *base = NULL, *obj = NULL;
    const char **rest = NULL;
    const char *key;
    json_t *value;
    char *text = NULL;
    int rc;

    assert(out != NULL && best != NULL);
    *out = NULL;
    if (keys == NULL)
        keys = cnx_tune_keys(&nkeys);
    cnx_segment_params_default(&check);
    memcpy(check.resolution, best->resolution, sizeof(check.resolution));
    rc = cnx_segment_params_parse(&check, base_json);
    if (rc == 0)
        rc = cnx__json_parse(&base, base_json != NULL ? base_json : "{}",
                             base_json != NULL ? strlen(base_json) : 2,
                             CNX_ESCHEMA, "segment: parameters");
    obj = json_object();
    rest = calloc(json_object_size(base) + 1, sizeof(*rest));
    if (rc == 0 && (obj == NULL || rest == NULL))
        rc = cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
    if (rc != 0)
        goto done;

    /* raw_input, mode, the table's rows, then the rest sorted. */
    if (best->raw_input)
        rc = json_object_set_new(obj, "raw_input", json_true());
    rc |= copy_key(obj, base, "raw_input");
    rc |= copy_key(obj, base, "mode"); /* a "mode" row replaces it in place */
    for (size_t i = 0; i < nkeys; i++) {
        const cnx_tune_key *k = &keys[i];
        double v = cnx__tune_get(best, k);
        if (!cnx__tune_row_active(k, best))
            continue;
        value = k->kind == CNX_TUNE_CHOICE ? json_string(k->names[(int)v])
                                           : number(v);
        rc |= json_object_set_new(obj, k->key, value);
    }
    json_object_foreach(base, key, value) if (json_object_get(obj, key) == NULL)
        rest[nrest++] = key;
    qsort(rest, nrest, sizeof(*rest), by_name);
    for (size_t i = 0; i < nrest; i++)
        rc |= copy_key(obj, base, rest[i]);
    if (rc != 0) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
        goto done;
    }
    text = json_dumps(obj, DUMP_FLAGS(digits_for(obj)));
    if (text == NULL) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
        goto done;
    }
    rc = check_round_trip(text, best, keys, nkeys);
    if (rc == 0) {
        *out = text;
        text = NULL;
    }
done:
    free(text);
    free(rest);
    json_decref(obj);
    json_decref(base);
    return rc;
}

/* ---- the workflow -------------------------------------------------------- */

/* A growable string; on allocation failure it stays failed. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
    int digits; /* significant digits of reals */
} sbuf;

static void put(sbuf *b, const char *s, size_t n)
{
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap > 0 ? b->cap : 4096;
        char *p;
        while (cap < b->len + n + 1)
            cap *= 2;
        p = realloc(b->p, cap);
        if (p == NULL) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void puts_(sbuf *b, const char *s)
{
    put(b, s, strlen(s));
}

static void indent(sbuf *b, int n)
{
    for (int i = 0; i < n; i++)
        put(b, " ", 1);
}

/* A value on one line: {"a": 1, "b": [1, 2]}. */
static void inline_value(sbuf *b, const json_t *v)
{
    char *s = json_dumps(v, DUMP_FLAGS(b->digits));
    if (s == NULL) {
        b->failed = 1;
        return;
    }
    puts_(b, s);
    free(s);
}

static int objects_only(const json_t *arr)
{
    size_t i;
    json_t *v;
    if (!json_is_array(arr) || json_array_size(arr) == 0)
        return 0;
    json_array_foreach(arr, i, v) if (!json_is_object(v)) return 0;
    return 1;
}

/* An object one key a line at depth (spaces); at the top level, an array
 * of objects (the stages) one object after the other, each expanded. */
static void expanded(sbuf *b, const json_t *obj, int depth, int top)
{
    const char *key;
    json_t *v;
    size_t k = 0, n = json_object_size(obj);
    puts_(b, "{\n");
    json_object_foreach((json_t *)obj, key, v)
    {
        json_t *name = json_string(key);
        indent(b, depth + 2);
        if (name == NULL)
            b->failed = 1;
        else
            inline_value(b, name);
        json_decref(name);
        puts_(b, ": ");
        if (top && objects_only(v)) {
            size_t i;
            json_t *e;
            puts_(b, "[\n");
            json_array_foreach(v, i, e)
            {
                indent(b, depth + 4);
                expanded(b, e, depth + 4, 0);
                puts_(b, i + 1 < json_array_size(v) ? ",\n" : "\n");
            }
            indent(b, depth + 2);
            puts_(b, "]");
        } else {
            inline_value(b, v);
        }
        puts_(b, ++k < n ? ",\n" : "\n");
    }
    indent(b, depth);
    puts_(b, "}");
}

/* The description with an earlier tuning note cut off and note added. */
static int describe(json_t *root, const char *note)
{
    const json_t *d = json_object_get(root, "description");
    const char *old = json_is_string(d) ? json_string_value(d) : "";
    const char *mark = strstr(old, NOTE_MARK);
    size_t keep = mark != NULL ? (size_t)(mark - old) : strlen(old);
    size_t len;
    char *text;
    int rc;

    while (keep > 0 && old[keep - 1] == ' ')
        keep--;
    len = keep + 1 + strlen(note);
    text = malloc(len + 1);
    if (text == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
    snprintf(text, len + 1, "%.*s%s%s", (int)keep, old, keep > 0 ? " " : "",
             note);
    rc = json_object_set_new(root, "description", json_string(text));
    free(text);
    return rc == 0 ? 0 : cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
}

int cnx_tune_workflow(char **out, const char *base, size_t len,
                      const char *params_json, const char *note)
{
    cnx_workflow *wf = NULL;
    json_t *root = NULL, *params = NULL, *stages, *stage;
    sbuf b = {NULL, 0, 0, 0, 15};
    size_t i, nseg = 0;
    int rc;

    assert(out != NULL && base != NULL && params_json != NULL);
    *out = NULL;
    rc = cnx_workflow_parse(&wf, base, len);
    cnx_workflow_free(wf);
    wf = NULL;
    if (rc == 0)
        rc = cnx__json_parse(&root, base, len, CNX_ESCHEMA, "workflow");
    if (rc == 0)
        rc = cnx__json_parse(&params, params_json, strlen(params_json),
                             CNX_ESCHEMA, "tune: parameters");
    if (rc != 0)
        goto done;
    stages = json_object_get(root, "stages");
    json_array_foreach(stages, i, stage)
    {
        const char *worker =
            json_string_value(json_object_get(stage, "worker"));
        if (worker == NULL || (strcmp(worker, "segment") != 0 &&
                               strcmp(worker, "segment-join") != 0))
            continue;
        nseg += strcmp(worker, "segment") == 0;
        /* In place: the key keeps its position. */
        if (json_object_set_new(stage, "parameters", json_deep_copy(params)))
            rc = cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
    }
    if (rc == 0 && nseg == 0)
        rc = cnx_error_set(CNX_ESCHEMA, 0,
                           "workflow: no stage has worker \"segment\"");
    if (rc == 0 && note != NULL)
        rc = describe(root, note);
    if (rc != 0)
        goto done;
    b.digits = digits_for(params);
    expanded(&b, root, 0, 1);
    puts_(&b, "\n");
    if (b.failed) {
        rc = cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
        goto done;
    }
    rc = cnx_workflow_parse(&wf, b.p, b.len);
    if (rc != 0) {
        cnx_error_wrap("the tuned workflow");
        goto done;
    }
    *out = b.p;
    b.p = NULL;
done:
    cnx_workflow_free(wf);
    free(b.p);
    json_decref(params);
    json_decref(root);
    return rc;
}
