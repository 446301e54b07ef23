/*
 * stage_util.c - checks the stages share.
 */
#include <string.h>

#include "cnx/error.h"
#include "stage_int.h"

int cnx__stage_one_chunk(const cnx_task *task, const cnx_grid *grid,
                         const char *stage)
{
    int64_t lo[3], hi[3];
    cnx_box c;
    if (!cnx_grid_is_aligned(grid, &task->roi))
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: roi: not on the input's chunk grid", stage);
    cnx_grid_chunk_range(grid, &task->roi, lo, hi);
    c = cnx_grid_chunk_box(grid, lo);
    if (hi[0] - lo[0] != 1 || hi[1] - lo[1] != 1 || hi[2] - lo[2] != 1 ||
        memcmp(&c, &task->roi, sizeof(c)) != 0)
        return cnx_error_set(CNX_ESCHEMA, 0,
                             "%s: roi: a task is one chunk of the input (set "
                             "the stage's task_size to the chunk size)",
                             stage);
    return 0;
}
