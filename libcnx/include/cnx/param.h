/*
 * cnx/param.h - a kernel's parameter bounds, as one table: a row per
 * field of its parameters struct (name, kind, range, default, unit). The
 * kernel fills its defaults and checks hand-set values from it; its I/O
 * module parses the JSON parameters object from it; cnx-tune reads its
 * choice names from it. So each range is written once (zstd's
 * ZSTD_cParam_getBounds serves the setter and the check the same way).
 * Pure: no I/O, no JSON; the rows are static and borrowed.
 */
#ifndef CNX_PARAM_H
#define CNX_PARAM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The type of a field and what values it takes. */
typedef enum cnx_param_kind {
    CNX_PARAM_FLAG = 0,   /* int, 0 or 1 (JSON: a boolean, or 0 or 1) */
    CNX_PARAM_INT = 1,    /* int in [lo, hi] (JSON: an integer) */
    CNX_PARAM_INT64 = 2,  /* int64_t in [lo, hi] (JSON: an integer) */
    CNX_PARAM_REAL = 3,   /* double in [lo, hi], (lo, hi] when open_lo */
    CNX_PARAM_CHOICE = 4, /* int-sized enum 0 .. nnames - 1 (JSON: names) */
} cnx_param_kind;

/** One field: its JSON key is its name. */
typedef struct cnx_param {
    const char *key;
    size_t offset; /* offsetof the field in the parameters struct */
    cnx_param_kind kind;
    double lo, hi;    /* INT, INT64, REAL (whole numbers for the integers) */
    int open_lo;      /* REAL: lo itself refused */
    double def;       /* the default (CHOICE: the index of the name) */
    const char *unit; /* "px", "nm", "nm^3", "voxels"; "" for none */
    const char *const *names; /* CHOICE: nnames names, in enum order */
    int nnames;
} cnx_param;

/* clang-format off */
/** A row of field of struct type (in a static table). */
#define CNX_PARAM_ROW(type, field, kind, lo, hi, open_lo, def, unit)          \
    {#field, offsetof(type, field), kind, lo, hi, open_lo, def, unit, NULL, 0}
/** A CHOICE row: names is an array of the enum's names, in enum order. */
#define CNX_PARAM_CHOICE_ROW(type, field, def, names)                         \
    {#field, offsetof(type, field), CNX_PARAM_CHOICE, 0, 0, 0, def, "",       \
     names, (int)(sizeof(names) / sizeof(names[0]))}
/* clang-format on */

/** Set every field of the table in p (a parameters struct) to its default. */
void cnx_param_defaults(const cnx_param *t, size_t n, void *p);

/**
 * Check every field of the table in p, in table order.
 * @param module  the message's prefix ("montage")
 * @return 0, or CNX_EINVAL "<module>: <key>: out of range" for the first
 *         field outside its range.
 */
int cnx_param_check(const cnx_param *t, size_t n, const void *p,
                    const char *module);

/** The value of row's field in p, as a double (CHOICE: the index). */
double cnx_param_get(const cnx_param *row, const void *p);

/** Set row's field in p to v (converted to the field's type). */
void cnx_param_set(const cnx_param *row, void *p, double v);

/** @return 1 if v is a value of row's field (the range check). */
int cnx_param_ok(const cnx_param *row, double v);

/** The row named key, or NULL. */
const cnx_param *cnx_param_find(const cnx_param *t, size_t n, const char *key);

#ifdef __cplusplus
}
#endif
#endif
