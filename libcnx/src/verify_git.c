/*
 * verify_git.c - cnx-verify's commit check, with libgit2: does the commit
 * a manifest names exist in the auditor's repository and, given a
 * reference, is it that reference's commit or an ancestor of it? Answers
 * are cached per commit (a run names few commits, many times). libgit2's
 * errors become CNX_* codes here, in one place. Single-threaded.
 */
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnx/error.h"
#include "verify_int.h"

#define CACHE_MAX 256

struct vf_repo {
    git_repository *repo;
    int has_ref;
    git_oid ref;
    size_t ncache;
    char commits[CACHE_MAX][41];
    int answers[CACHE_MAX];
};

static const char *git_reason(void)
{
    const git_error *e = git_error_last();
    return e != NULL && e->message != NULL ? e->message : "unknown error";
}

int vf_repo_open(vf_repo **out, const char *path, const char *ref)
{
    vf_repo *r;
    git_object *obj = NULL, *peeled = NULL;
    int rc = 0;

    *out = NULL;
    git_libgit2_init();
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        git_libgit2_shutdown();
        return cnx_error_set(CNX_ENOMEM, 0, "out of memory");
    }
    if (git_repository_open_ext(&r->repo, path, GIT_REPOSITORY_OPEN_NO_SEARCH,
                                NULL) != 0) {
        rc = cnx_error_set(CNX_ENOTFOUND, 0,
                           "repository %s cannot be opened: %s", path,
                           git_reason());
        goto fail;
    }
    if (ref != NULL) {
        if (git_revparse_single(&obj, r->repo, ref) != 0 ||
            git_object_peel(&peeled, obj, GIT_OBJECT_COMMIT) != 0) {
            rc = cnx_error_set(CNX_ENOTFOUND, 0,
                               "reference %s is not a commit in %s: %s", ref,
                               path, git_reason());
            goto fail;
        }
        git_oid_cpy(&r->ref, git_object_id(peeled));
        r->has_ref = 1;
    }
    git_object_free(peeled);
    git_object_free(obj);
    *out = r;
    return 0;
fail:
    git_object_free(peeled);
    git_object_free(obj);
    vf_repo_close(r);
    return rc;
}

void vf_repo_close(vf_repo *r)
{
    if (r == NULL)
        return;
    git_repository_free(r->repo);
    free(r);
    git_libgit2_shutdown();
}

static int lookup(vf_repo *r, const char *commit)
{
    git_oid oid;
    git_commit *c = NULL;
    int rc;
    if (git_oid_fromstr(&oid, commit) != 0)
        return 1;
    rc = git_commit_lookup(&c, r->repo, &oid);
    if (rc == GIT_ENOTFOUND)
        return 1;
    if (rc != 0)
        return 1; /* not a commit (a blob or tree id) */
    git_commit_free(c);
    if (!r->has_ref || git_oid_equal(&oid, &r->ref))
        return 0;
    rc = git_graph_descendant_of(r->repo, &r->ref, &oid);
    if (rc < 0)
        return cnx_error_set(CNX_EIO, 0, "repository: %s", git_reason());
    return rc == 1 ? 0 : 2;
}

int vf_repo_check(vf_repo *r, const char *commit)
{
    int rc;
    for (size_t i = 0; i < r->ncache; i++)
        if (strcmp(r->commits[i], commit) == 0)
            return r->answers[i];
    rc = lookup(r, commit);
    if (rc >= 0 && r->ncache < CACHE_MAX) {
        snprintf(r->commits[r->ncache], 41, "%s", commit);
        r->answers[r->ncache++] = rc;
    }
    return rc;
}
