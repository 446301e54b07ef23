/*
 * stage_util.c - what the per-chunk stages share: the chunks of a task.
 *
 * A map task covers an aligned run of whole chunks of its input grid; the
 * stages that write per-chunk objects loop over those chunks in raster
 * order and do for each what a one-chunk task would, so the bytes of a
 * chunk do not depend on the task size.
 */
#include <assert.h>
#include <stdlib.h>

#include "cnx/error.h"
#include "stage_int.h"

int cnx__stage_chunks(const cnx_task *task, const cnx_grid *grid,
                      const char *stage, cnx_box **chunks, size_t *n)
{
    int64_t lo[3], hi[3], g[3];
    size_t count = 1, k = 0;
    cnx_box *out;

    *chunks = NULL;
    *n = 0;
    if (cnx_box_empty(&task->roi) || !cnx_grid_is_aligned(grid, &task->roi))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: roi: not on the input's chunk grid (a "
                             "task is whole chunks)",
                             stage);
    cnx_grid_chunk_range(grid, &task->roi, lo, hi);
    for (int i = 0; i < 3; i++) {
        assert(hi[i] > lo[i]);
        count *= (size_t)(hi[i] - lo[i]);
    }
    out = malloc(count * sizeof(*out));
    if (out == NULL)
        return cnx_error_set(CNX_ENOMEM, 0, "%s: out of memory", stage);
    for (g[2] = lo[2]; g[2] < hi[2]; g[2]++)
        for (g[1] = lo[1]; g[1] < hi[1]; g[1]++)
            for (g[0] = lo[0]; g[0] < hi[0]; g[0]++)
                out[k++] = cnx_grid_chunk_box(grid, g);
    assert(k == count);
    *chunks = out;
    *n = count;
    return 0;
}
