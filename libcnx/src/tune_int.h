/*
 * tune_int.h - what the files of the tune module (tune.c, tune_io.c,
 * tune_workflow.c) share; not public API.
 */
#ifndef CNX_TUNE_INT_H
#define CNX_TUNE_INT_H

#include "cnx/tune.h"

/** @return 1 if the search uses row k for parameters like p (RAW_ONLY
 *  rows only with raw_input). */
int cnx__tune_row_active(const cnx_tune_key *k, const cnx_segment_params *p);

/** The value of row k in p (a CHOICE row's enum as a double). */
double cnx__tune_get(const cnx_segment_params *p, const cnx_tune_key *k);

#endif
