/*
 * cnx-align - the section-alignment workers: matches per section pair, the
 * solve over the stack and the rendering of aligned sections (cnx/stages.h,
 * docs/align.md). "--stage align-match|align-solve|align-render" picks the
 * one a process serves. Exit status as cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    static const cnx_stage *const stages[] = {&cnx_stage_align_match,
                                              &cnx_stage_align_solve,
                                              &cnx_stage_align_render};
    return cnx_worker_main_multi("cnx-align", stages, 3, argc, argv);
}
