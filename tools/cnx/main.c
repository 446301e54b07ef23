/*
 * cnx - the umbrella command: `cnx <cmd> [args...]` runs `cnx-<cmd>` from
 * the directory this binary lives in (so a build tree or an install prefix
 * works without PATH changes), falling back to PATH. `cnx demo` runs the
 * main job, scripts/demo.sh of the source tree the binary was built from
 * (or $CNX_SOURCE's).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const commands[][2] = {
    {"synth", "make a deterministic synthetic EM dataset with ground truth"},
    {"ingest", "PNG/TIFF stacks and montage tile sets into layers"},
    {"broker", "development Kafka broker (librdkafka's mock cluster)"},
    {"keygen", "Ed25519 key pair that signs worker manifests"},
    {"controller", "the ledger's single writer: plans, releases, SLOs; "
                   "archives requests"},
    {"reprocess", "reprocess a region through a workflow, with its SLO"},
    {"replay", "finish a request whose tasks were dead-lettered"},
    {"submit", "publish the tasks of a stage over a region"},
    {"verify", "the auditor's tool: signatures, bytes, lineage, ledger"},
    {"report", "the run report of a request: HTML timeline, costs, SLO, "
               "Neuroglancer state"},
    {"tune", "fit the segmentation parameters to a ground-truth cube"},
    {"downsample", "worker: one mip level of a layer's pyramid per task"},
    {"montage", "worker: one stitched section per task"},
    {"align", "workers: section alignment (--stage align-match, "
              "align-solve, align-render)"},
    {"segment", "workers: segmentation (--stage segment, segment-join, "
                "segment-join-block, segment-relabel)"},
    {"mesh", "workers: meshes (--stage mesh, mesh-manifest)"},
    {"shard", "worker: one shard of a sharded layer per task"},
    {"synapses", "workers: synapses (--stage synapses, synapse-edges)"},
    {"demo", "the whole stack on this machine (scripts/demo.sh)"},
};

#ifndef CNX_SOURCE_DIR
#define CNX_SOURCE_DIR "."
#endif

/* Run scripts/demo.sh with the remaining arguments. */
static int demo(char **argv)
{
    const char *src = getenv("CNX_SOURCE");
    char script[PATH_MAX];
    snprintf(script, sizeof(script), "%s/scripts/demo.sh",
             src != NULL ? src : CNX_SOURCE_DIR);
    if (access(script, R_OK) != 0) {
        fprintf(stderr, "cnx demo: %s not found (set CNX_SOURCE to a cnx "
                        "source tree)\n", script);
        return 1;
    }
    argv[0] = "bash";
    argv[1] = script;
    execvp("bash", argv);
    fprintf(stderr, "cnx demo: cannot run bash: %s\n", strerror(errno));
    return 1;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: cnx <command> [arguments...]\n\n"
                 "Runs cnx-<command>. Commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-11s%s\n", commands[i][0], commands[i][1]);
    fprintf(out, "\n`cnx <command> --help` describes each.\n");
}

int main(int argc, char **argv)
{
    char self[PATH_MAX], path[PATH_MAX + 64], name[64];
    ssize_t n;
    char *slash;

    if (argc < 2 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "demo") == 0)
        return demo(argv);
    if (strchr(argv[1], '/') != NULL || strlen(argv[1]) > 40) {
        fprintf(stderr, "cnx: '%.40s' is not a command name\n", argv[1]);
        return 2;
    }
    snprintf(name, sizeof(name), "cnx-%s", argv[1]);
    argv[1] = name;
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(path, sizeof(path), "%s/%s", self, name);
            if (access(path, X_OK) == 0) {
                execv(path, argv + 1);
                fprintf(stderr, "cnx: cannot run %s: %s\n", path,
                        strerror(errno));
                return 1;
            }
        }
    }
    execvp(name, argv + 1);
    fprintf(stderr, "cnx: unknown command '%s' (%s not found); see cnx "
                    "--help\n", name + 4, name);
    return 2;
}
