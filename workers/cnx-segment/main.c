/*
 * cnx-segment - the segmentation workers: fragments per chunk, the join
 * across chunk faces and the relabelling (cnx/stages.h, docs/segment.md).
 * "--stage segment|segment-join|segment-join-block|segment-relabel" picks
 * the one a process serves. Exit status as cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    static const cnx_stage *const stages[] = {
        &cnx_stage_segment, &cnx_stage_segment_join,
        &cnx_stage_segment_join_block,
        &cnx_stage_segment_relabel};
    return cnx_worker_main_multi("cnx-segment", stages, 4, argc, argv);
}
