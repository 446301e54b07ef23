/*
 * cnx-downsample - the downsample worker: one pyramid level per task.
 *
 * Thin: the common worker command line and run loop (cnx/worker.h) around
 * the downsample stage (cnx/stages.h, docs/downsample.md). Exit status as
 * cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    return cnx_worker_main(&cnx_stage_downsample, argc, argv);
}
