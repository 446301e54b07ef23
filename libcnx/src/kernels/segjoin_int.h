/*
 * segjoin_int.h - what segjoin.c (fragments, face records, mappings) and
 * segjoin_tree.c (the join) share: little-endian buffers, the parsed face
 * record and seam edges (private to libcnx).
 */
#ifndef CNX_SEGJOIN_INT_H
#define CNX_SEGJOIN_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/segjoin.h"

typedef struct sj_buf {
    uint8_t *data;
    size_t len, cap;
    int failed;
} sj_buf;

typedef struct sj_rd {
    const uint8_t *p;
    size_t left;
    int bad;
} sj_rd;

/* A face record, parsed in place (pointers into the record's bytes). */
typedef struct sj_face {
    cnx_box roi;
    size_t nfrag;
    const uint8_t *frags;   /* nfrag * 16 bytes: id, voxel count */
    size_t nruns[6];
    const uint8_t *runs[6]; /* nruns * 12 bytes */
    const uint8_t *vals[6]; /* face voxels */
} sj_face;

/* A seam edge between fragments a (the low chunk's) and b. */
typedef struct sj_edge {
    uint64_t a, b;
    uint64_t sum, n; /* of cnx_segment_pair_value over the face pairs */
} sj_edge;

typedef struct sj_edges {
    sj_edge *e;
    size_t n, cap;
} sj_edges;

int sj__nomem(void);
void sj__put(sj_buf *b, const void *p, size_t n);
void sj__put_u64(sj_buf *b, uint64_t v);
void sj__put_u32(sj_buf *b, uint32_t v);
uint64_t sj__get_u64(sj_rd *r);
uint32_t sj__get_u32(sj_rd *r);
const uint8_t *sj__get_bytes(sj_rd *r, size_t n);
uint64_t sj__le64(const uint8_t *p);
uint32_t sj__le32(const uint8_t *p);
int sj__cmp_u64(const void *x, const void *y);

/* The two axes of a face normal to axis a, in increasing order. */
void sj__face_axes(int a, int *u, int *v);
/* Every coordinate in [0, 2^21), min < max. */
int sj__box_ok(const cnx_box *b);
/* CNX_ECORRUPT "segjoin: face record <name>: <what>". */
int sj__corrupt(const char *name, const char *what);
int sj__parse_face(const cnx_segjoin_input *in, sj_face *f);
/* Expand face k's runs into labels[] (the face's voxel count). */
void sj__expand_face(const sj_face *f, int k, uint64_t *labels);
/* Append the edges across the face between lo (its high side on axis a)
 * and hi, summed per fragment pair and sorted by (a, b). */
int sj__face_edges(const sj_face *lo, const sj_face *hi, int a,
                   sj_edges *es);

#endif
