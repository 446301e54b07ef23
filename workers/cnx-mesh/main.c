/*
 * cnx-mesh - the meshing workers: fragments per chunk and the per-segment
 * manifests (cnx/stages.h, docs/mesh.md). "--stage mesh|mesh-manifest"
 * picks the one a process serves. Exit status as cnx_worker_main()
 * documents it.
 */
#include "cnx/stages.h"
#include "cnx/worker.h"

int main(int argc, char **argv)
{
    static const cnx_stage *const stages[] = {&cnx_stage_mesh,
                                              &cnx_stage_mesh_manifest};
    return cnx_worker_main_multi("cnx-mesh", stages, 2, argc, argv);
}
