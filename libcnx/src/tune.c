/*
 * tune.c - the parameter search of cnx-tune (cnx/tune.h): a sweep of the
 * dominant parameter, then coordinate descent with halving steps, over a
 * table of rows that name cnx_segment_params fields; and cnx_tune_run,
 * which scores candidates with the kernel on buffers held in memory.
 *
 * Invariant: the current point is the best evaluation so far (a candidate
 * replaces it only when its VI split + merge is strictly lower), so a
 * point seen before can never improve on it and costs nothing. Every
 * decision compares doubles that the kernel and the metrics compute
 * deterministically, and the budget counts evaluations, never time: the
 * same inputs give the same evaluations in the same order.
 *
 * Load: one search per cnx-tune run, up to the budget (default 60)
 * evaluations, each a whole-cube kernel run (seconds for 256^3); the
 * search's own work is negligible beside it. Single-threaded.
 */
#include "cnx/tune.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "cnx/log.h"
#include "tune_int.h"

/* Steps halve at most this many times (the floor is step / 8). */
#define MAX_HALVINGS 3

/* ---- the table ----------------------------------------------------------- */

/* clang-format off */
#define ROW(field, kind, unit, lo, hi, step, flags)                           \
    {#field, offsetof(cnx_segment_params, field), kind, unit, lo, hi, step,   \
     NULL, 0, flags}
#define CHOICE(field, names, flags)                                           \
    {#field, offsetof(cnx_segment_params, field), CNX_TUNE_CHOICE,            \
     CNX_TUNE_PLAIN, 0, 0, 0, names,                                          \
     (int)(sizeof(names) / sizeof(names[0])), flags}
/* clang-format on */

/*
 * Search order: the dominant knob first, the cheap segmentation keys, the
 * filter keys (each new value costs a boundary map), the seed rule (the
 * "minima" rule is about twice as slow). Lengths are written in voxel
 * sides of the finest xy axis and volumes in voxels, so that the ranges
 * fit any resolution; the kernel's own ranges (cnx_segment_param_bounds)
 * still apply, and the choice names are the kernel table's.
 */
static const cnx_tune_key default_keys[] = {
    ROW(merge_threshold, CNX_TUNE_LINEAR, CNX_TUNE_PLAIN, 0.1, 0.9, 0.1,
        CNX_TUNE_SWEEP),
    ROW(seed_threshold, CNX_TUNE_LINEAR, CNX_TUNE_PLAIN, 0.1, 0.9, 0.1, 0),
    ROW(seed_distance_nm, CNX_TUNE_LINEAR, CNX_TUNE_VOXEL, 0.0, 6.0, 1.0, 0),
    ROW(min_size_nm3, CNX_TUNE_LOG, CNX_TUNE_VOXEL3, 4.0, 4096.0, 2.0, 0),
    ROW(filter_sigma_nm, CNX_TUNE_LINEAR, CNX_TUNE_VOXEL, 0.5, 4.0, 0.5,
        CNX_TUNE_FILTER | CNX_TUNE_RAW_ONLY),
    ROW(filter_ridge, CNX_TUNE_LINEAR, CNX_TUNE_PLAIN, 0.0, 1.0, 0.2,
        CNX_TUNE_FILTER | CNX_TUNE_RAW_ONLY),
    ROW(filter_background_nm, CNX_TUNE_LOG, CNX_TUNE_VOXEL, 2.0, 64.0, 2.0,
        CNX_TUNE_FILTER | CNX_TUNE_RAW_ONLY),
    CHOICE(seed_method, cnx_segment_seed_names, 0),
};

/* CHOICE rows read and write their enum field as an int. */
_Static_assert(sizeof(cnx_segment_seeds) == sizeof(int),
               "enum fields are int-sized");

const cnx_tune_key *cnx_tune_keys(size_t *n)
{
    *n = sizeof(default_keys) / sizeof(default_keys[0]);
    return default_keys;
}

void cnx_tune_config_init(cnx_tune_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->budget = 60;
}

void cnx_tune_result_free(cnx_tune_result *r)
{
    if (r == NULL)
        return;
    free(r->evals);
    free(r->curve);
    free(r);
}

/* ---- field access -------------------------------------------------------- */

double cnx__tune_get(const cnx_segment_params *p, const cnx_tune_key *k)
{
    const char *base = (const char *)p + k->offset;
    if (k->kind == CNX_TUNE_CHOICE) {
        int v;
        memcpy(&v, base, sizeof(v));
        return (double)v;
    } else {
        double v;
        memcpy(&v, base, sizeof(v));
        return v;
    }
}

static void set_value(cnx_segment_params *p, const cnx_tune_key *k, double v)
{
    char *base = (char *)p + k->offset;
    if (k->kind == CNX_TUNE_CHOICE) {
        int iv = (int)v;
        memcpy(base, &iv, sizeof(iv));
    } else {
        memcpy(base, &v, sizeof(v));
    }
}

/* v to 6 significant digits: the values the search tries are short
 * decimals, so the workflow it writes reads back as the same doubles. */
static double round6(double v)
{
    char buf[32];
    if (v == 0.0 || !isfinite(v))
        return v == 0.0 ? 0.0 : v;
    snprintf(buf, sizeof(buf), "%.6g", v);
    return strtod(buf, NULL);
}

int cnx__tune_row_active(const cnx_tune_key *k, const cnx_segment_params *p)
{
    return (k->flags & CNX_TUNE_RAW_ONLY) == 0 || p->raw_input;
}

/* The check of a table (one row at a time; the first bad one is named). */
static int check_table(const cnx_tune_key *keys, size_t n)
{
    if (keys == NULL || n == 0 || n > CNX_TUNE_MAX_KEYS)
        return cnx_error_set(CNX_EINVAL, 0,
                             "tune: the table must have 1..%d rows",
                             CNX_TUNE_MAX_KEYS);
    for (size_t i = 0; i < n; i++) {
        const cnx_tune_key *k = &keys[i];
        int ok = k->key != NULL &&
                 k->offset + sizeof(double) <= sizeof(cnx_segment_params);
        switch (k->kind) {
        case CNX_TUNE_LINEAR:
            ok = ok && k->lo <= k->hi && k->step > 0.0 && isfinite(k->hi) &&
                 isfinite(k->lo) && isfinite(k->step);
            break;
        case CNX_TUNE_LOG:
            ok = ok && k->lo > 0.0 && k->lo <= k->hi && k->step > 1.0 &&
                 isfinite(k->hi) && isfinite(k->step);
            break;
        case CNX_TUNE_CHOICE:
            ok = ok && k->names != NULL && k->nnames >= 2 &&
                 (k->flags & CNX_TUNE_SWEEP) == 0;
            for (int c = 0; ok && c < k->nnames; c++)
                ok = k->names[c] != NULL;
            break;
        default:
            ok = 0;
        }
        ok = ok && (unsigned)k->unit <= CNX_TUNE_VOXEL3;
        if (!ok)
            return cnx_error_set(CNX_EINVAL, 0,
                                 "tune: table row %zu (%s): "
                                 "bad range, step or kind",
                                 i, k->key != NULL ? k->key : "no key");
    }
    return 0;
}

/* ---- the search ---------------------------------------------------------- */

typedef struct row {
    const cnx_tune_key *key;
    double lo, hi, step; /* in the key's unit, around the base value */
    double floor_lo;     /* LOG: the table's lo, where 0 steps up to */
    int halvings;
} row;

typedef struct search {
    row rows[CNX_TUNE_MAX_KEYS];
    size_t nrows;
    int64_t budget;
    cnx_tune_eval_fn eval;
    void *eval_ctx;
    const cnx_tune_config *cfg;
    cnx_tune_result *r;
    size_t cap_evals, cap_curve;
    cnx_segment_params cur; /* == r->evals[r->best].params */
    double cur_obj;
    int stop; /* the budget is spent */
} search;

static double objective(const cnx_seg_scores *s)
{
    return s->vi_split + s->vi_merge;
}

/* Two candidates are the same point when every row's value is equal (the
 * other fields never change during a search). */
static int same_point(const search *s, const cnx_segment_params *a,
                      const cnx_segment_params *b)
{
    for (size_t i = 0; i < s->nrows; i++)
        if (cnx__tune_get(a, s->rows[i].key) !=
            cnx__tune_get(b, s->rows[i].key))
            return 0;
    return 1;
}

/* @return the evaluation of p, or NULL if it was never evaluated. */
static const cnx_tune_eval *seen(const search *s, const cnx_segment_params *p)
{
    for (size_t i = 0; i < s->r->nevals; i++)
        if (same_point(s, &s->r->evals[i].params, p))
            return &s->r->evals[i];
    return NULL;
}

static int grow(void **items, size_t *cap, size_t need, size_t size)
{
    void *p;
    size_t n;
    if (need <= *cap)
        return 0;
    n = *cap > 0 ? *cap * 2 : 64;
    while (n < need)
        n *= 2;
    p = realloc(*items, n * size);
    if (p == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
    *items = p;
    *cap = n;
    return 0;
}

/* Add a point to the curve of the row k (its value in p). */
static int add_curve(search *s, const cnx_tune_key *k, const cnx_tune_eval *e)
{
    cnx_tune_point *pt;
    int rc = grow((void **)&s->r->curve, &s->cap_curve, s->r->ncurve + 1,
                  sizeof(*s->r->curve));
    if (rc != 0)
        return rc;
    pt = &s->r->curve[s->r->ncurve++];
    pt->key = k->key;
    pt->value = cnx__tune_get(&e->params, k);
    pt->scores = e->scores;
    pt->nlabels = e->nlabels;
    return 0;
}

/*
 * Try candidate p: refused or seen before, nothing; otherwise evaluate it
 * (if the budget allows) and make it the current point if it is better.
 * curve: the sweep row whose curve gets the point (NULL: none).
 * @param[out] better  1 if p is the new current point
 * @return 0 or the evaluation's error.
 */
static int try_point(search *s, const cnx_segment_params *p,
                     const cnx_tune_key *curve, int *better)
{
    const cnx_tune_eval *old;
    cnx_tune_eval *e;
    int rc;

    *better = 0;
    if (s->stop)
        return 0;
    if (cnx_segment_params_check(p) != 0) {
        cnx_error_clear();
        return 0;
    }
    old = seen(s, p);
    if (old != NULL)
        return curve != NULL ? add_curve(s, curve, old) : 0;
    if ((int64_t)s->r->nevals >= s->budget) {
        s->stop = 1;
        return 0;
    }
    rc = grow((void **)&s->r->evals, &s->cap_evals, s->r->nevals + 1,
              sizeof(*s->r->evals));
    if (rc != 0)
        return rc;
    e = &s->r->evals[s->r->nevals];
    memset(e, 0, sizeof(*e));
    e->params = *p;
    rc = s->eval(s->eval_ctx, p, &e->scores, &e->nlabels);
    if (rc != 0)
        return rc;
    s->r->nevals++;
    if (s->cfg->progress != NULL)
        s->cfg->progress(s->cfg->progress_ctx, (int64_t)s->r->nevals,
                         s->budget);
    if (curve != NULL) {
        rc = add_curve(s, curve, e);
        if (rc != 0)
            return rc;
    }
    if (s->r->nevals == 1 || objective(&e->scores) < s->cur_obj) {
        s->r->best = s->r->nevals - 1;
        s->cur = *p;
        s->cur_obj = objective(&e->scores);
        *better = 1;
    }
    return 0;
}

/* The next value of a numeric row from x in direction dir (+1, -1). */
static double step_value(const row *rw, double x, int dir)
{
    double v = rw->key->kind == CNX_TUNE_LOG
                   ? (dir > 0 ? x * rw->step : x / rw->step)
                   : x + dir * rw->step;
    if (rw->key->kind == CNX_TUNE_LOG && x <= 0.0)
        v = dir > 0 ? rw->floor_lo : x; /* 0 (e.g. no cleanup) is a value */
    v = v < rw->lo ? rw->lo : v;
    v = v > rw->hi ? rw->hi : v;
    return round6(v);
}

/* The sweep of one row: its grid over [lo, hi] around the current point. */
static int sweep_row(search *s, row *rw)
{
    const cnx_tune_key *k = rw->key;
    const cnx_segment_params around = s->cur;
    double v = rw->lo;
    int better, rc;

    for (int i = 0; i < 10000 && v <= rw->hi * (1 + 1e-12); i++) {
        cnx_segment_params p = around;
        set_value(&p, k, round6(v));
        rc = try_point(s, &p, k, &better);
        if (rc != 0 || s->stop)
            return rc;
        v = k->kind == CNX_TUNE_LOG ? rw->lo * pow(rw->step, i + 1)
                                    : rw->lo + (i + 1) * rw->step;
    }
    /* The descent starts at half the grid step. */
    rw->step = k->kind == CNX_TUNE_LOG ? sqrt(rw->step) : rw->step / 2;
    rw->halvings = 1;
    return 0;
}

/* One descent move on a numeric row. @param[out] moved */
static int descend_numeric(search *s, row *rw, int *moved)
{
    *moved = 0;
    for (int dir = 1; dir >= -1 && !*moved; dir -= 2) {
        for (;;) {
            cnx_segment_params p = s->cur;
            double x = cnx__tune_get(&s->cur, rw->key);
            double v = step_value(rw, x, dir);
            int better, rc;
            if (v == x)
                break;
            set_value(&p, rw->key, v);
            rc = try_point(s, &p, NULL, &better);
            if (rc != 0)
                return rc;
            if (!better)
                break;
            *moved = 1; /* keep going this way while it improves */
        }
        if (s->stop)
            return 0;
    }
    if (!*moved && rw->halvings < MAX_HALVINGS) {
        rw->step =
            rw->key->kind == CNX_TUNE_LOG ? sqrt(rw->step) : rw->step / 2;
        rw->halvings++;
    }
    return 0;
}

/* One descent move on a CHOICE row: every other name. */
static int descend_choice(search *s, row *rw, int *moved)
{
    int cur = (int)cnx__tune_get(&s->cur, rw->key);
    *moved = 0;
    for (int c = 0; c < rw->key->nnames && !s->stop; c++) {
        cnx_segment_params p = s->cur;
        int better, rc;
        if (c == cur)
            continue;
        set_value(&p, rw->key, (double)c);
        rc = try_point(s, &p, NULL, &better);
        if (rc != 0)
            return rc;
        if (better) {
            *moved = 1;
            return 0;
        }
    }
    return 0;
}

static int descend(search *s)
{
    for (;;) {
        int improved = 0, floor = 1, rc;
        for (size_t i = 0; i < s->nrows && !s->stop; i++) {
            row *rw = &s->rows[i];
            int moved;
            rc = rw->key->kind == CNX_TUNE_CHOICE
                     ? descend_choice(s, rw, &moved)
                     : descend_numeric(s, rw, &moved);
            if (rc != 0)
                return rc;
            improved |= moved;
        }
        if (s->stop)
            return 0;
        for (size_t i = 0; i < s->nrows; i++)
            if (s->rows[i].key->kind != CNX_TUNE_CHOICE &&
                s->rows[i].halvings < MAX_HALVINGS)
                floor = 0;
        if (!improved && floor)
            return 0;
    }
}

/* A row's range and first step in the key's unit, holding the base value. */
static void init_row(row *rw, const cnx_tune_key *k,
                     const cnx_segment_params *base)
{
    const double *res = base->resolution;
    double scale = 1.0, x = cnx__tune_get(base, k);
    if (k->unit == CNX_TUNE_VOXEL)
        scale = res[0] < res[1] ? res[0] : res[1];
    else if (k->unit == CNX_TUNE_VOXEL3)
        scale = res[0] * res[1] * res[2];
    rw->key = k;
    rw->halvings = 0;
    if (k->kind == CNX_TUNE_CHOICE) {
        rw->lo = 0;
        rw->hi = k->nnames - 1;
        rw->step = 1;
        return;
    }
    rw->lo = round6(k->lo * scale);
    rw->hi = round6(k->hi * scale);
    rw->floor_lo = rw->lo;
    rw->step = k->kind == CNX_TUNE_LOG ? k->step : k->step * scale;
    rw->lo = x < rw->lo ? x : rw->lo;
    rw->hi = x > rw->hi ? x : rw->hi;
}

int cnx_tune_search(cnx_tune_result **out, const cnx_tune_config *cfg,
                    const cnx_segment_params *base, cnx_tune_eval_fn eval,
                    void *eval_ctx)
{
    search s;
    const cnx_tune_key *keys;
    size_t nkeys;
    double t0 = cnx_now();
    int better, rc;

    assert(out != NULL && cfg != NULL && base != NULL && eval != NULL);
    *out = NULL;
    if (cfg->budget < 1 || cfg->budget > CNX_TUNE_MAX_BUDGET)
        return cnx_error_set(CNX_EINVAL, 0, "tune: budget %lld: must be 1..%d",
                             (long long)cfg->budget, CNX_TUNE_MAX_BUDGET);
    keys = cfg->keys;
    nkeys = cfg->nkeys;
    if (keys == NULL)
        keys = cnx_tune_keys(&nkeys);
    rc = check_table(keys, nkeys);
    if (rc == 0)
        rc = cnx_segment_params_check(base);
    if (rc != 0)
        return rc;

    memset(&s, 0, sizeof(s));
    for (size_t i = 0; i < nkeys; i++)
        if (cnx__tune_row_active(&keys[i], base))
            init_row(&s.rows[s.nrows++], &keys[i], base);
    s.budget = cfg->budget;
    s.eval = eval;
    s.eval_ctx = eval_ctx;
    s.cfg = cfg;
    s.cur = *base;
    s.r = calloc(1, sizeof(*s.r));
    if (s.r == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");

    rc = try_point(&s, base, NULL, &better);
    for (size_t i = 0; rc == 0 && i < s.nrows && !s.stop; i++)
        if (s.rows[i].key->flags & CNX_TUNE_SWEEP)
            rc = sweep_row(&s, &s.rows[i]);
    if (rc == 0 && !s.stop)
        rc = descend(&s);
    if (rc != 0) {
        cnx_tune_result_free(s.r);
        return rc;
    }
    assert(s.r->nevals >= 1 && (int64_t)s.r->nevals <= s.budget);
    assert(same_point(&s, &s.r->evals[s.r->best].params, &s.cur));
    s.r->seconds = cnx_now() - t0;
    *out = s.r;
    return 0;
}

/* ---- the kernel as the evaluation ---------------------------------------- */

typedef struct slot {
    int valid;
    uint64_t used; /* clock of the last use: the older slot is replaced */
    cnx_segment_params key;
    float *b;
} slot;

typedef struct kernel_ctx {
    const cnx_tune_volume *vol;
    size_t n;
    const cnx_tune_key *keys;
    size_t nkeys;
    slot cache[2];
    uint64_t clock;
    uint32_t *labels;
    uint64_t *seg;
    int64_t boundary_maps;
} kernel_ctx;

/* Whether the boundary map of a serves b: with raw_input, every FILTER row
 * must agree; without, the map is the input rescaled, whatever the rest. */
static int same_boundary(const kernel_ctx *k, const cnx_segment_params *a,
                         const cnx_segment_params *b)
{
    if (a->raw_input != b->raw_input)
        return 0;
    if (!a->raw_input)
        return 1;
    for (size_t i = 0; i < k->nkeys; i++)
        if ((k->keys[i].flags & CNX_TUNE_FILTER) &&
            cnx__tune_get(a, &k->keys[i]) != cnx__tune_get(b, &k->keys[i]))
            return 0;
    return 1;
}

static int boundary_for(kernel_ctx *k, const cnx_segment_params *p,
                        const float **out)
{
    slot *sl = NULL;
    int rc;
    k->clock++;
    for (int i = 0; i < 2; i++)
        if (k->cache[i].valid && same_boundary(k, &k->cache[i].key, p)) {
            k->cache[i].used = k->clock;
            *out = k->cache[i].b;
            return 0;
        }
    sl = !k->cache[0].valid                    ? &k->cache[0]
         : !k->cache[1].valid                  ? &k->cache[1]
         : k->cache[0].used < k->cache[1].used ? &k->cache[0]
                                               : &k->cache[1];
    if (sl->b == NULL) {
        sl->b = malloc(k->n * sizeof(*sl->b));
        if (sl->b == NULL)
            return cnx_error_set(CNX_ENOMEM, 0, "tune: out of memory");
    }
    sl->valid = 0;
    rc = k->vol->dtype == CNX_DT_UINT8
             ? cnx_segment_boundary_u8(k->vol->input, k->vol->size, p, sl->b)
             : cnx_segment_boundary_f32(k->vol->input, k->vol->size, p, sl->b);
    if (rc != 0)
        return rc;
    sl->valid = 1;
    sl->used = k->clock;
    sl->key = *p;
    k->boundary_maps++;
    *out = sl->b;
    return 0;
}

static int kernel_eval(void *ctx, const cnx_segment_params *p,
                       cnx_seg_scores *scores, uint32_t *nlabels)
{
    kernel_ctx *k = ctx;
    const float *b = NULL;
    int rc = boundary_for(k, p, &b);
    if (rc == 0)
        rc = cnx_segment_volume(b, k->vol->size, p, k->labels, nlabels);
    if (rc != 0)
        return rc;
    for (size_t i = 0; i < k->n; i++)
        k->seg[i] = k->labels[i];
    return cnx_seg_scores_u64(k->seg, k->vol->gt, k->n, scores);
}

int cnx_tune_run(cnx_tune_result **out, const cnx_tune_config *cfg,
                 const cnx_segment_params *base, const cnx_tune_volume *vol)
{
    kernel_ctx k;
    int64_t voxels = 1;
    size_t i;
    int rc;

    assert(out != NULL && cfg != NULL && base != NULL && vol != NULL);
    *out = NULL;
    if (vol->input == NULL || vol->gt == NULL ||
        (vol->dtype != CNX_DT_UINT8 && vol->dtype != CNX_DT_FLOAT32))
        return cnx_error_set(CNX_EINVAL, 0,
                             "tune: the input must be uint8 "
                             "or float32, with a gt");
    for (int a = 0; a < 3; a++) {
        if (vol->size[a] < 1 || vol->size[a] > CNX_SEGMENT_MAX_SIDE)
            return cnx_error_set(CNX_EINVAL, 0, "tune: size[%d] is %lld", a,
                                 (long long)vol->size[a]);
        voxels *= vol->size[a];
        if (voxels > CNX_SEGMENT_MAX_VOXELS)
            return cnx_error_set(CNX_ETOOBIG, 0,
                                 "tune: the cube is over the kernel's "
                                 "limit of %lld voxels",
                                 (long long)CNX_SEGMENT_MAX_VOXELS);
    }
    memset(&k, 0, sizeof(k));
    k.vol = vol;
    k.n = (size_t)voxels;
    for (i = 0; i < k.n && vol->gt[i] == 0; i++)
        ;
    if (i == k.n)
        return cnx_error_set(CNX_EINVAL, 0,
                             "tune: the gt has no labelled "
                             "voxel in the cube");
    k.keys = cfg->keys;
    k.nkeys = cfg->nkeys;
    if (k.keys == NULL)
        k.keys = cnx_tune_keys(&k.nkeys);
    k.labels = malloc(k.n * sizeof(*k.labels));
    k.seg = malloc(k.n * sizeof(*k.seg));
    if (k.labels == NULL || k.seg == NULL)
        rc = cnx_error_set(CNX_ENOMEM, 0,
                           "tune: out of memory for %zu "
                           "voxels",
                           k.n);
    else
        rc = cnx_tune_search(out, cfg, base, kernel_eval, &k);
    if (rc == 0)
        (*out)->boundary_maps = k.boundary_maps;
    free(k.cache[0].b);
    free(k.cache[1].b);
    free(k.labels);
    free(k.seg);
    return rc;
}
