/*
 * stage_int.h - checks the stages share (private to libcnx).
 */
#ifndef CNX_STAGE_INT_H
#define CNX_STAGE_INT_H

#include "cnx/geom.h"
#include "cnx/task.h"

/*
 * The task's roi must be exactly one chunk of grid (stages whose side
 * objects are per chunk). @return 0, or CNX_ESCHEMA naming the stage.
 */
int cnx__stage_one_chunk(const cnx_task *task, const cnx_grid *grid,
                         const char *stage);

#endif
