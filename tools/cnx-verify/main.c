/*
 * cnx-verify - the auditor's tool: checks signed lineage against the bytes
 * in storage, the code repository and the ledger, trusting nothing but
 * the public keys it is given (docs/verify.md).
 *
 *   cnx-verify --trust DIR [--repo PATH [--ref REF]] [--ledger FILE]
 *              [--relocate OLD=NEW ...] [--json] [--threads N] [--quiet]
 *              (--manifest FILE ... | --request ID | --layer URL ...)
 *
 * Thin: arguments -> cnx_verify (libcnx/src/verify.c) -> one line per
 * finding, one per relocation in effect and a total on stdout (or one
 * JSON object). Exit 0 when nothing was found, 1 with findings, 2 for
 * usage, 3 when it could not run.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cnx/cli.h"
#include "cnx/error.h"
#include "cnx/verify.h"

#define PROG "cnx-verify"
#define EXIT_FINDINGS 1
#define EXIT_USAGE 2
#define EXIT_CANNOT 3
#define MAX_SOURCES 4096

static const char usage_text[] =
    "usage: " PROG " --trust DIR [--repo PATH [--ref REF]] [--ledger FILE]\n"
    "                  [--relocate OLD=NEW ...] [--json] [--threads N] "
    "[--quiet]\n"
    "                  (--manifest FILE ... | --request ID | --layer URL "
    "...)\n"
    "\n"
    "Checks signed lineage (DSSE envelopes of in-toto/SLSA statements):\n"
    "signatures, statements, every output against the bytes in storage,\n"
    "every input against the manifest that wrote it back to the raw data,\n"
    "that every stored object of a layer has a manifest, and, when given,\n"
    "the code commits against a git repository and the ledger's hash chain,\n"
    "rows and workflow parameters. Sources may be combined.\n"
    "\n"
    "  --trust DIR        trusted public keys: every *.pub and *.pem in DIR\n"
    "  --manifest FILE    one envelope file (repeatable)\n"
    "  --layer URL        a layer (file://, s3://, gs://, http(s):// URL or\n"
    "                     a path): every envelope in URL/lineage/, and every\n"
    "                     object stored in it must be covered by a verified\n"
    "                     manifest (repeatable). A layer copied or moved\n"
    "                     with its dataset verifies where it is now\n"
    "  --request ID       the request's manifests from the ledger\n"
    "                     (repeatable; needs --ledger)\n"
    "  --ledger FILE      the controller's SQLite ledger, read-only: hash\n"
    "                     chain, rows, outputs, workflow parameters\n"
    "  --repo PATH        git repository: every manifest's code commit must\n"
    "                     be in it, from a clean tree\n"
    "  --ref REF          ...and reachable from REF (branch, tag, commit)\n"
    "  --relocate OLD=NEW a dataset moved from URL OLD to URL NEW: names\n"
    "                     under OLD are read under NEW (for --manifest and\n"
    "                     --request; a --layer relocates itself). Repeatable,\n"
    "                     the longest OLD wins; split at the first '='\n"
    "  --threads N        threads (default: one per online core)\n"
    "  --json             one JSON object on stdout\n"
    "  -q, --quiet        no progress bar\n"
    "  -h, --help         this text\n"
    "\n"
    "Output: one line per finding, '<object>: <check>: <reason>', sorted,\n"
    "then one '" PROG ": relocated OLD -> NEW (...)' line per relocation in\n"
    "effect, then a total line. Checks: signature, statement, subject,\n"
    "input, coverage, commit, ledger, parameters.\n"
    "\n"
    "Exit status: 0 everything verifies, 1 findings, 2 usage error,\n"
    "3 could not run (no trusted key, unreadable ledger or repository,\n"
    "missing layer or request).\n";

static int usage_error(const char *fmt, const char *arg)
    __attribute__((format(printf, 1, 0)));

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see " PROG " --help)\n");
    return EXIT_USAGE;
}

static int cannot_run(void)
{
    fprintf(stderr, PROG ": cannot verify: %s\n", cnx_error_last()->message);
    return EXIT_CANNOT;
}

typedef struct source {
    int kind; /* 'm', 'l', 'r', 'x' (--relocate) */
    const char *arg;
} source;

/* --relocate OLD=NEW, split at the first '='. @return 0, or 2 (usage). */
static int add_relocation(cnx_verify *v, const char *arg)
{
    const char *eq = strchr(arg, '=');
    char *old;
    int rc;
    if (eq == NULL || eq == arg || eq[1] == '\0')
        return usage_error("--relocate: expected OLD=NEW, got '%s'", arg);
    old = strndup(arg, (size_t)(eq - arg));
    if (old == NULL)
        return cannot_run();
    rc = cnx_verify_add_relocation(v, old, eq + 1);
    free(old);
    if (rc == CNX_ENOMEM)
        return cannot_run();
    if (rc != 0)
        return usage_error("--relocate: %s", cnx_error_last()->message);
    return 0;
}

int main(int argc, char **argv)
{
    enum {
        OPT_TRUST = 1,
        OPT_REPO,
        OPT_REF,
        OPT_LEDGER,
        OPT_JSON,
        OPT_THREADS,
        OPT_MANIFEST,
        OPT_REQUEST,
        OPT_LAYER,
        OPT_RELOCATE
    };
    static const struct option options[] = {
        {"trust", required_argument, NULL, OPT_TRUST},
        {"repo", required_argument, NULL, OPT_REPO},
        {"ref", required_argument, NULL, OPT_REF},
        {"ledger", required_argument, NULL, OPT_LEDGER},
        {"json", no_argument, NULL, OPT_JSON},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"manifest", required_argument, NULL, OPT_MANIFEST},
        {"request", required_argument, NULL, OPT_REQUEST},
        {"layer", required_argument, NULL, OPT_LAYER},
        {"relocate", required_argument, NULL, OPT_RELOCATE},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    static source sources[MAX_SOURCES];
    cnx_verify_config cfg;
    cnx_verify *v = NULL;
    cnx_verify_stats stats;
    const cnx_verify_finding *f;
    const cnx_verify_relocation *rel;
    size_t nsources = 0, nf = 0, nrel = 0, nrelocs = 0;
    int64_t threads = 0;
    int json = 0, quiet = 0, requests = 0, opt, rc;

    cnx_verify_config_init(&cfg);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":qh", options, NULL)) != -1) {
        switch (opt) {
        case OPT_TRUST:
            cfg.trust_dir = optarg;
            break;
        case OPT_REPO:
            cfg.repo = optarg;
            break;
        case OPT_REF:
            cfg.ref = optarg;
            break;
        case OPT_LEDGER:
            cfg.ledger = optarg;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_THREADS:
            if (cnx_cli_int(optarg, 1, 256, &threads) != 0)
                return usage_error("--threads: expected an integer in "
                                   "[1, 256], got '%s'", optarg);
            break;
        case OPT_MANIFEST:
        case OPT_LAYER:
        case OPT_REQUEST:
        case OPT_RELOCATE:
            if (nsources == MAX_SOURCES)
                return usage_error("%s", "too many sources (4096 at most)");
            sources[nsources].kind = opt == OPT_MANIFEST   ? 'm'
                                     : opt == OPT_LAYER    ? 'l'
                                     : opt == OPT_RELOCATE ? 'x'
                                                           : 'r';
            nrelocs += opt == OPT_RELOCATE;
            sources[nsources++].arg = optarg;
            requests += opt == OPT_REQUEST;
            break;
        case 'q':
            quiet = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            return usage_error("%s needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return usage_error("unexpected argument '%s'", argv[optind]);
    if (cfg.trust_dir == NULL)
        return usage_error("%s", "--trust DIR is required");
    if (nsources == nrelocs)
        return usage_error("%s", "nothing to verify: give --manifest, "
                                 "--layer or --request");
    if (requests > 0 && cfg.ledger == NULL)
        return usage_error("%s", "--request needs --ledger");
    if (cfg.ref != NULL && cfg.repo == NULL)
        return usage_error("%s", "--ref needs --repo");
    cfg.threads = (int)threads;
    cfg.progress = !quiet && !json && isatty(STDERR_FILENO);

    if (cnx_verify_new(&v, &cfg) != 0)
        return cannot_run();
    for (size_t i = 0; i < nsources; i++) {
        rc = sources[i].kind == 'x' ? add_relocation(v, sources[i].arg) : 0;
        if (rc != 0) {
            cnx_verify_free(v);
            return rc;
        }
    }
    for (size_t i = 0; i < nsources; i++) {
        const source *s = &sources[i];
        if (s->kind == 'x')
            continue;
        rc = s->kind == 'm'   ? cnx_verify_add_file(v, s->arg)
             : s->kind == 'l' ? cnx_verify_add_layer(v, s->arg)
                              : cnx_verify_add_request(v, s->arg);
        if (rc != 0) {
            rc = cannot_run();
            cnx_verify_free(v);
            return rc;
        }
    }
    if (cnx_verify_run(v) != 0) {
        rc = cannot_run();
        cnx_verify_free(v);
        return rc;
    }
    f = cnx_verify_findings(v, &nf);
    rel = cnx_verify_relocations(v, &nrel);
    cnx_verify_get_stats(v, &stats);
    if (json) {
        char *text = NULL;
        if (cnx_verify_report_json(v, &text) != 0) {
            rc = cannot_run();
            cnx_verify_free(v);
            return rc;
        }
        printf("%s\n", text);
        free(text);
    } else {
        for (size_t i = 0; i < nf; i++)
            printf("%s: %s: %s\n", f[i].object, f[i].check, f[i].reason);
        for (size_t i = 0; i < nrel; i++) {
            if (rel[i].found != NULL)
                printf(PROG ": relocated %s -> %s (layer %s was written as "
                            "%s)\n",
                       rel[i].from, rel[i].to, rel[i].found, rel[i].written);
            else
                printf(PROG ": relocated %s -> %s (--relocate)\n", rel[i].from,
                       rel[i].to);
        }
        printf(PROG ": %zu manifests, %zu objects checked, %zu inputs "
                    "traced, %zu findings\n",
               stats.manifests, stats.objects, stats.inputs, nf);
    }
    if (fflush(stdout) != 0) {
        cnx_verify_free(v);
        return EXIT_CANNOT;
    }
    cnx_verify_free(v);
    return nf > 0 ? EXIT_FINDINGS : 0;
}
