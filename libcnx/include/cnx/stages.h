/*
 * cnx/stages.h - the stages libcnx ships, ready for cnx_worker_main().
 *
 * Each is a constant cnx_stage (name, kernel version, run function, help)
 * whose run() does its I/O through the worker runtime's cnx_stage_io and
 * its arithmetic in a pure kernel. A worker's main.c passes one of them to
 * cnx_worker_main() and does nothing else.
 */
#ifndef CNX_STAGES_H
#define CNX_STAGES_H

#include "cnx/worker.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * downsample: one level of a layer's pyramid per task (docs/downsample.md).
 * Input role "source" (the source scale), output {layer, next scale key};
 * roi in source-scale voxels; parameters {} or {"mode": "average"|"mode"}.
 * Adds the next scale to the output layer's info when it is missing.
 */
extern const cnx_stage cnx_stage_downsample;

#ifdef __cplusplus
}
#endif
#endif
