/*
 * cnx-synapses - the synapse workers: detection per chunk and the region's
 * connectivity (cnx/stages.h, docs/synapses.md). "--stage
 * synapses|synapse-edges" picks the one a process serves. Exit status as
 * cnx_worker_main() documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    static const cnx_stage *const stages[] = {&cnx_stage_synapses,
                                              &cnx_stage_synapse_edges};
    return cnx_worker_main_multi("cnx-synapses", stages, 2, argc, argv);
}
