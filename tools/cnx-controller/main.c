/*
 * cnx-controller - the single writer of the ledger: plans requests through
 * their workflows, releases tasks as their inputs become ready, verifies
 * manifests, retries lost work, keeps deadlines. See docs/controller.md.
 */
#include <string.h>

#include "cnx/controller.h"

int main(int argc, char **argv)
{
    cnx_controller_opts opts;
    int rc;
    if (argc > 1 && strcmp(argv[1], "archive") == 0)
        return cnx_controller_archive_main(argc - 1, argv + 1);
    rc = cnx_controller_parse_args(&opts, argc, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    return cnx_controller_run(&opts);
}
