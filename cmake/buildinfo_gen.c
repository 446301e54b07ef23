/*
 * buildinfo_gen - run at every build: reads the source tree's HEAD commit
 * and whether the tree is dirty (tracked files modified, or untracked files
 * that are not ignored) with libgit2, and writes a C file defining
 * cnx_build_commit(), cnx_build_dirty() and cnx_build_describe(). The file is
 * rewritten only when its content changes, so an unchanged tree does not
 * relink anything.
 *
 * usage: buildinfo_gen SOURCE_DIR OUTPUT_FILE VERSION
 */
#include <git2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int read_state(const char *src, char commit[41], int *dirty)
{
    git_repository *repo = NULL;
    git_object *head = NULL;
    git_status_list *status = NULL;
    git_status_options opts;
    int rc = -1;

    git_status_options_init(&opts, GIT_STATUS_OPTIONS_VERSION);
    commit[0] = '\0';
    *dirty = 0;
    if (git_repository_open_ext(&repo, src, 0, NULL) != 0)
        return -1;
    if (git_revparse_single(&head, repo, "HEAD") == 0)
        git_oid_tostr(commit, 41, git_object_id(head));
    opts.show = GIT_STATUS_SHOW_INDEX_AND_WORKDIR;
    opts.flags = GIT_STATUS_OPT_INCLUDE_UNTRACKED |
                 GIT_STATUS_OPT_RECURSE_UNTRACKED_DIRS |
                 GIT_STATUS_OPT_EXCLUDE_SUBMODULES;
    if (git_status_list_new(&status, repo, &opts) == 0) {
        *dirty = git_status_list_entrycount(status) > 0;
        rc = 0;
    }
    git_status_list_free(status);
    git_object_free(head);
    git_repository_free(repo);
    return rc;
}

int main(int argc, char **argv)
{
    char commit[41], text[2048], old[2048];
    int dirty = 0, n;
    FILE *f;

    if (argc != 4) {
        fprintf(stderr, "usage: buildinfo_gen SOURCE_DIR OUTPUT_FILE VERSION\n");
        return 2;
    }
    git_libgit2_init();
    if (read_state(argv[1], commit, &dirty) != 0)
        commit[0] = '\0';
    git_libgit2_shutdown();
    n = snprintf(text, sizeof(text),
                 "/* Generated at build time by cmake/buildinfo_gen.c. */\n"
                 "#include \"cnx/lineage.h\"\n\n"
                 "const char *cnx_build_commit(void)\n{\n"
                 "    return \"%s\";\n}\n\n"
                 "int cnx_build_dirty(void)\n{\n    return %d;\n}\n\n"
                 "const char *cnx_build_describe(void)\n{\n"
                 "    return \"cnx %s %s%s\";\n}\n",
                 commit, dirty, argv[3], commit[0] ? commit : "unknown",
                 dirty ? "-dirty" : "");
    if (n < 0 || (size_t)n >= sizeof(text))
        return 1;
    f = fopen(argv[2], "rb");
    if (f != NULL) {
        size_t got = fread(old, 1, sizeof(old) - 1, f);
        old[got] = '\0';
        fclose(f);
        if (strcmp(old, text) == 0)
            return 0;
    }
    f = fopen(argv[2], "wb");
    if (f == NULL || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(argv[2]);
        return 1;
    }
    return 0;
}
