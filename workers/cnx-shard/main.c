/*
 * cnx-shard - the shard worker: one shard of a sharded layer per task.
 *
 * Thin: the common worker command line and run loop (cnx/worker.h) around
 * the shard stage (cnx/stages.h, docs/formats.md "Writing shards"). Exit
 * status as cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    return cnx_worker_main(&cnx_stage_shard, argc, argv);
}
