/*
 * metrics.c - variation of information and adapted Rand error of a
 * segmentation against a ground truth (formulas in cnx/metrics.h).
 *
 * One pass over the voxels fills an open-addressing hash table keyed by
 * (gt, seg) with the count n_ij; consecutive voxels with the same pair (the
 * common case in real volumes) are counted as one run. Two smaller tables
 * then sum the rows a_i and columns b_j from the K distinct pairs. The pair
 * counts S, A, B are exact uint64 sums (n < 2^32, so N(N-1) < 2^64); the
 * entropy terms n log2(a/n) are packed as (a << 32 | n), radix-sorted and
 * summed in that order, so the doubles depend only on the multiset of
 * (size, count) values: bit-identical under voxel permutation and
 * relabelling. Load: 256^3 volumes and single ISBI sections; memory O(K).
 */
#include "cnx/metrics.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"

/* (k1, k2) -> count; a slot is empty when its count is 0. */
typedef struct pair_slot {
    uint64_t k1, k2, count;
} pair_slot;

typedef struct pair_map {
    pair_slot *slots;
    size_t cap; /* power of two */
    size_t used;
} pair_map;

static uint64_t pair_hash(uint64_t k1, uint64_t k2)
{
    uint64_t z = k1 * UINT64_C(0x9E3779B97F4A7C15) ^ k2;
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static int map_init(pair_map *map, size_t cap)
{
    map->slots = calloc(cap, sizeof(*map->slots));
    map->cap = cap;
    map->used = 0;
    return map->slots != NULL ? 0 : CNX_ENOMEM;
}

static void map_dispose(pair_map *map)
{
    free(map->slots);
    map->slots = NULL;
}

/* Insert without growing; the table has a free slot. */
static void map_put(pair_map *map, uint64_t k1, uint64_t k2, uint64_t add)
{
    size_t mask = map->cap - 1;
    size_t i = (size_t)pair_hash(k1, k2) & mask;
    for (;;) {
        pair_slot *slot = &map->slots[i];
        if (slot->count == 0) {
            slot->k1 = k1;
            slot->k2 = k2;
            slot->count = add;
            map->used++;
            return;
        }
        if (slot->k1 == k1 && slot->k2 == k2) {
            slot->count += add;
            return;
        }
        i = (i + 1) & mask;
    }
}

/* Add to (k1, k2)'s count, doubling the table past half full. */
static int map_add(pair_map *map, uint64_t k1, uint64_t k2, uint64_t add)
{
    assert(add > 0);
    if ((map->used + 1) * 2 > map->cap) {
        pair_map grown;
        if (map->cap > SIZE_MAX / 2 / sizeof(pair_slot))
            return CNX_ENOMEM;
        if (map_init(&grown, map->cap * 2) != 0)
            return CNX_ENOMEM;
        for (size_t i = 0; i < map->cap; i++)
            if (map->slots[i].count != 0)
                map_put(&grown, map->slots[i].k1, map->slots[i].k2,
                        map->slots[i].count);
        map_dispose(map);
        *map = grown;
    }
    map_put(map, k1, k2, add);
    return 0;
}

/* The count stored for (k1, k2), which is present. */
static uint64_t map_get(const pair_map *map, uint64_t k1, uint64_t k2)
{
    size_t mask = map->cap - 1;
    size_t i = (size_t)pair_hash(k1, k2) & mask;
    while (map->slots[i].k1 != k1 || map->slots[i].k2 != k2) {
        assert(map->slots[i].count != 0);
        i = (i + 1) & mask;
    }
    return map->slots[i].count;
}

/* LSD radix sort of keys (8 bits a pass, skipping constant bytes). */
static void radix_sort(uint64_t *keys, uint64_t *tmp, size_t k)
{
    uint64_t *src = keys, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t hist[256] = {0};
        size_t sum = 0;
        for (size_t i = 0; i < k; i++)
            hist[(src[i] >> shift) & 0xFF]++;
        if (hist[(src[0] >> shift) & 0xFF] == k)
            continue; /* this byte is the same in every key */
        for (int b = 0; b < 256; b++) {
            size_t c = hist[b];
            hist[b] = sum;
            sum += c;
        }
        for (size_t i = 0; i < k; i++)
            dst[hist[(src[i] >> shift) & 0xFF]++] = src[i];
        uint64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != keys)
        memcpy(keys, src, k * sizeof(*keys));
}

/*
 * Sum of n log2(size / n) over keys (size << 32 | n), in sorted key order.
 * Sorts keys in place.
 */
static double entropy_sum(uint64_t *keys, uint64_t *tmp, size_t k)
{
    double sum = 0.0;
    radix_sort(keys, tmp, k);
    for (size_t i = 0; i < k; i++) {
        double size = (double)(keys[i] >> 32);
        double count = (double)(keys[i] & UINT32_MAX);
        sum += count * log2(size / count);
    }
    return sum;
}

/* Sum of c (c - 1) over a table's counts; exact, as sum c <= n < 2^32. */
static uint64_t pairs_of(const pair_map *map)
{
    uint64_t pairs = 0;
    for (size_t i = 0; i < map->cap; i++) {
        uint64_t c = map->slots[i].count;
        if (c != 0)
            pairs += c * (c - 1);
    }
    return pairs;
}

/* num / den, or 1 when there are no pairs to compare against. */
static double pair_ratio(uint64_t num, uint64_t den)
{
    return den == 0 ? 1.0 : (double)num / (double)den;
}

int cnx_seg_scores_u64(const uint64_t *seg, const uint64_t *gt, size_t n,
                       cnx_seg_scores *out)
{
    pair_map joint = {0}, rows = {0}, cols = {0};
    uint64_t *split_keys = NULL, *merge_keys = NULL, *tmp = NULL;
    uint64_t voxels = 0, s_pairs, a_pairs, b_pairs;
    size_t k = 0;
    int rc = CNX_ENOMEM;

    assert(out != NULL);
    if (n == 0)
        return cnx_error_set(CNX_EINVAL, 0, "metrics: empty volume");
    if (n > UINT32_MAX)
        return cnx_error_set(CNX_ERANGE, 0,
                             "metrics: %zu voxels, at most %u supported", n,
                             (unsigned)UINT32_MAX);
    assert(seg != NULL && gt != NULL);

    if (map_init(&joint, 1024) != 0)
        goto done;
    for (size_t i = 0; i < n;) {
        uint64_t g = gt[i], s = seg[i];
        size_t run = i + 1;
        while (run < n && gt[run] == g && seg[run] == s)
            run++;
        if (g != 0) {
            if (map_add(&joint, g, s, run - i) != 0)
                goto done;
            voxels += run - i;
        }
        i = run;
    }
    if (voxels == 0) {
        rc = cnx_error_set(CNX_EINVAL, 0,
                           "metrics: ground truth is 0 at every voxel");
        goto done;
    }

    /* Rows a_i keyed (gt, 0), columns b_j keyed (seg, 0). */
    if (map_init(&rows, 1024) != 0 || map_init(&cols, 1024) != 0)
        goto done;
    for (size_t i = 0; i < joint.cap; i++) {
        const pair_slot *slot = &joint.slots[i];
        if (slot->count == 0)
            continue;
        if (map_add(&rows, slot->k1, 0, slot->count) != 0 ||
            map_add(&cols, slot->k2, 0, slot->count) != 0)
            goto done;
    }

    split_keys = malloc(joint.used * sizeof(*split_keys));
    merge_keys = malloc(joint.used * sizeof(*merge_keys));
    tmp = malloc(joint.used * sizeof(*tmp));
    if (split_keys == NULL || merge_keys == NULL || tmp == NULL)
        goto done;
    for (size_t i = 0; i < joint.cap; i++) {
        const pair_slot *slot = &joint.slots[i];
        if (slot->count == 0)
            continue;
        uint64_t a = map_get(&rows, slot->k1, 0);
        uint64_t b = map_get(&cols, slot->k2, 0);
        split_keys[k] = a << 32 | slot->count;
        merge_keys[k] = b << 32 | slot->count;
        k++;
    }
    assert(k == joint.used);

    s_pairs = pairs_of(&joint);
    a_pairs = pairs_of(&rows);
    b_pairs = pairs_of(&cols);

    out->vi_split = entropy_sum(split_keys, tmp, k) / (double)voxels;
    out->vi_merge = entropy_sum(merge_keys, tmp, k) / (double)voxels;
    if (a_pairs == 0 && b_pairs == 0) {
        out->are = 0.0; /* all singletons on both sides: the same partition */
    } else {
        out->are = 1.0 - (double)s_pairs / (0.5 * (double)a_pairs +
                                            0.5 * (double)b_pairs);
    }
    out->precision = pair_ratio(s_pairs, a_pairs);
    out->recall = pair_ratio(s_pairs, b_pairs);
    out->voxels = (int64_t)voxels;
    rc = 0;

done:
    if (rc == CNX_ENOMEM)
        cnx_error_set(CNX_ENOMEM, 0, "metrics: out of memory (%zu pairs)",
                      joint.used);
    free(tmp);
    free(merge_keys);
    free(split_keys);
    map_dispose(&cols);
    map_dispose(&rows);
    map_dispose(&joint);
    return rc;
}
