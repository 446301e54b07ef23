/*
 * build_info.c - the build's identity for the fuzzing build, which does
 * not run cmake/buildinfo_gen: reported as built outside a git checkout
 * (cnx/lineage.h), so that nothing a harness does depends on the commit.
 */
#include "cnx/lineage.h"

const char *cnx_build_commit(void)
{
    return "";
}

int cnx_build_dirty(void)
{
    return 0;
}

const char *cnx_build_describe(void)
{
    return "cnx fuzz";
}
