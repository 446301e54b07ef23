/*
 * plan_tool - plan a workflow over a dataset without a broker, as the
 * controller's plan step does (cnx_plan_new: external layers read from
 * storage, every worker's plan-time checks), for the tests and scripts:
 * one line per stage, or the refusal on stderr.
 *
 *   plan_tool --workflow FILE --dataset URL [--roi x0,y0,z0,x1,y1,z1]
 *             [--halo STAGE]
 *
 * Prints "<stage> worker=<w> halo=<h> pinned=<0|1> tasks=<n>" per stage,
 * or with --halo only the planned halo of that stage (what its task
 * messages carry). Exit 0; 2 when the plan is refused (the one-line
 * message on stderr); 1 on other errors.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/workflow.h"

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"workflow", required_argument, NULL, 'w'},
        {"dataset", required_argument, NULL, 'd'},
        {"roi", required_argument, NULL, 'r'},
        {"halo", required_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    const char *path = NULL, *dataset = NULL, *halo_of = NULL;
    int64_t roi[6];
    int have_roi = 0, c, rc;
    cnx_workflow *wf = NULL;
    cnx_plan *p = NULL;
    cnx_box box;

    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            path = optarg;
            break;
        case 'd':
            dataset = optarg;
            break;
        case 'h':
            halo_of = optarg;
            break;
        case 'r':
            if (cnx_cli_ints(optarg, roi, 6) != 0) {
                fprintf(stderr, "plan_tool: bad --roi '%s'\n", optarg);
                return 1;
            }
            have_roi = 1;
            break;
        default:
            return 1;
        }
    }
    if (path == NULL || dataset == NULL) {
        fprintf(stderr, "usage: plan_tool --workflow FILE --dataset URL "
                        "[--roi x0,y0,z0,x1,y1,z1] [--halo STAGE]\n");
        return 1;
    }
    if (cnx_workflow_load(&wf, path) != 0) {
        fprintf(stderr, "%s\n", cnx_error_last()->message);
        return 2;
    }
    if (have_roi)
        box = cnx_box_make(roi[0], roi[1], roi[2], roi[3], roi[4], roi[5]);
    rc = cnx_plan_new(&p, wf, dataset, have_roi ? &box : NULL);
    if (rc != 0) {
        fprintf(stderr, "%s\n", cnx_error_last()->message);
        cnx_workflow_free(wf);
        return rc == CNX_ESCHEMA || rc == CNX_EINVAL ? 2 : 1;
    }
    rc = 0;
    if (halo_of != NULL) {
        int s = cnx_workflow_find_stage(wf, halo_of);
        if (s < 0) {
            fprintf(stderr, "plan_tool: no stage '%s'\n", halo_of);
            rc = 1;
        } else {
            printf("%" PRId64 "\n", p->stages[s].halo);
        }
    } else {
        for (size_t s = 0; s < p->nstages; s++)
            printf("%s worker=%s halo=%" PRId64 " pinned=%d tasks=%zu\n",
                   wf->stages[s].name, wf->stages[s].worker, p->stages[s].halo,
                   wf->stages[s].halo_pinned, p->stages[s].count);
    }
    cnx_plan_free(p);
    cnx_workflow_free(wf);
    return rc;
}
