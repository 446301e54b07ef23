/*
 * cnx-montage - the montage worker: one section per task, stitched from a
 * recorded tile set (cnx/stages.h, docs/montage.md). Exit status as
 * cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    return cnx_worker_main(&cnx_stage_montage, argc, argv);
}
