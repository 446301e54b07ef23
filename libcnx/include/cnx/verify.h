/*
 * cnx/verify.h - the auditor's check of signed lineage (cnx-verify).
 *
 * A verification trusts nothing but a set of Ed25519 public keys and,
 * optionally, a git repository and a ledger. Manifests (DSSE envelopes of
 * in-toto/SLSA statements, docs/lineage.md) are added from files, from the
 * lineage/ directory of output layers, from the ledger or from memory;
 * cnx_verify_run() then checks each one (signature, statement, subjects
 * against storage, inputs against the manifests that wrote them, walking
 * the lineage back to raw data, coverage of every stored object, commit,
 * ledger chain and rows, workflow parameters) and records findings: one
 * per problem, each naming the object concerned, the check and the reason.
 * docs/verify.md lists every check and message.
 *
 * Thread-safety: one cnx_verify is used by one thread at a time; run()
 * spreads its work over cfg.threads threads itself.
 */
#ifndef CNX_VERIFY_H
#define CNX_VERIFY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Checks, for cnx_verify_config.checks (0 means every check that the
 * configuration allows: commit needs a repository, ledger and parameters
 * a ledger). */
#define CNX_VERIFY_SIGNATURE (1u << 0)
#define CNX_VERIFY_STATEMENT (1u << 1)
#define CNX_VERIFY_SUBJECT (1u << 2)   /* reads every subject's bytes */
#define CNX_VERIFY_INPUT (1u << 3)     /* walks lineage; reads root inputs */
#define CNX_VERIFY_COVERAGE (1u << 4)  /* --layer only */
#define CNX_VERIFY_COMMIT (1u << 5)    /* needs repo */
#define CNX_VERIFY_LEDGER (1u << 6)    /* needs ledger */
#define CNX_VERIFY_PARAMETERS (1u << 7) /* needs ledger */
#define CNX_VERIFY_ALL 0xffu

typedef struct cnx_verify_config {
    const char *trust_dir; /* every *.pub and *.pem in it is a trusted key */
    const char *repo;      /* git repository (NULL: no commit check) */
    const char *ref;       /* commits must be reachable from it (NULL: any) */
    const char *ledger;    /* SQLite ledger (NULL: no ledger checks) */
    unsigned checks;       /* CNX_VERIFY_* mask; 0 = all */
    int storage;           /* 0: never read storage (no subject digests, no
                            * root inputs, no layer discovery); default 1 */
    int threads;           /* 0: one per online core */
    int progress;          /* 1: progress bars on stderr */
} cnx_verify_config;

/** Defaults: every check, storage read, threads 0, no progress. */
void cnx_verify_config_init(cnx_verify_config *cfg);

typedef struct cnx_verify cnx_verify;

/** One finding. Strings are owned by the verification. */
typedef struct cnx_verify_finding {
    const char *object; /* manifest file/URL, object URL or ledger row */
    const char *check;  /* "signature", "statement", "subject", "input",
                         * "coverage", "commit", "ledger", "parameters" */
    const char *reason;
} cnx_verify_finding;

typedef struct cnx_verify_stats {
    size_t manifests;       /* manifests checked (given and walked to) */
    size_t manifests_given; /* from the sources (files, layers, ledger) */
    size_t objects;         /* distinct stored objects hashed */
    uint64_t bytes;         /* bytes hashed */
    size_t inputs;          /* input references checked */
    size_t layers;          /* layers whose lineage was read */
    double verify_s;        /* wall seconds: signatures and statements */
    double hash_s;          /* wall seconds: hashing stored objects */
    double total_s;         /* wall seconds of cnx_verify_run */
} cnx_verify_stats;

/**
 * Start a verification: load the trusted keys, open the repository and
 * the ledger (read-only).
 * @param[out] out  free with cnx_verify_free()
 * @return 0; CNX_ENOTFOUND (trust directory, repository or ledger
 *         missing, or no key in the trust directory); CNX_ECORRUPT or
 *         CNX_EUNSUPPORTED for an unusable key file, ledger or reference;
 *         CNX_EIO; CNX_ENOMEM. The message names what could not be used.
 */
int cnx_verify_new(cnx_verify **out, const cnx_verify_config *cfg);

/** Free a verification. Accepts NULL. */
void cnx_verify_free(cnx_verify *v);

/**
 * Add one envelope file. An unreadable file is a finding, not an error.
 * @return 0; CNX_ENOMEM.
 */
int cnx_verify_add_file(cnx_verify *v, const char *path);

/**
 * Add an envelope held in memory (copied). origin names it in findings.
 * @return 0; CNX_ENOMEM.
 */
int cnx_verify_add_envelope(cnx_verify *v, const char *origin,
                            const char *envelope, size_t len);

/**
 * Add a layer (a URL of any scheme cnx/store.h opens, or a path): every
 * envelope under its lineage/, and coverage of every object stored in it.
 * Envelopes whose task wrote the layer under another URL (the layer was
 * copied or moved with its dataset) relocate their names: the longest
 * common suffix of whole path components of the two layer URLs is the
 * layer's place in its dataset, and names under the old root are read
 * under the new one (none in common: a statement finding).
 * @return 0; CNX_EINVAL for a malformed URL; CNX_ENOTFOUND if nothing is
 *         stored under it; CNX_EUNSUPPORTED for a scheme that cannot be
 *         listed or that this build lacks; CNX_EIO; CNX_ENOMEM.
 */
int cnx_verify_add_layer(cnx_verify *v, const char *url);

/**
 * Read every name under old_url at new_url instead: a dataset moved or
 * copied as a whole, for sources that do not say where they are now
 * (--manifest files, --request rows), or inputs that moved elsewhere (or
 * stayed: old_url may equal new_url). A manifest found in a layer's
 * lineage/ relocates itself too (cnx_verify_add_layer). Each name moves
 * by the relocation with the longest root it lies under (the manifest's
 * own on a tie); a manifest's outputs always follow the layer it was
 * found in. Only names move: every digest is checked as signed. Call
 * before cnx_verify_run.
 * @param old_url, new_url  URLs or paths (cnx_url_parse with
 *                          CNX_URL_ALLOW_PATH), compared component-wise
 * @return 0; CNX_EINVAL for a malformed URL, or after the run;
 *         CNX_ENOMEM.
 */
int cnx_verify_add_relocation(cnx_verify *v, const char *old_url,
                              const char *new_url);

/**
 * Add a request's manifests from the ledger (every lineage row of the
 * request), and check that each verified row's envelope is still stored.
 * @return 0; CNX_EINVAL without a ledger; CNX_ENOTFOUND if the ledger has
 *         no such request; CNX_EIO; CNX_ENOMEM.
 */
int cnx_verify_add_request(cnx_verify *v, const char *request);

/**
 * Run every check on what was added. Findings accumulate in v and are
 * sorted (object, check, reason) when it returns.
 * @return 0 (whatever was found); CNX_EIO if the ledger or repository
 *         failed while reading; CNX_ENOMEM.
 */
int cnx_verify_run(cnx_verify *v);

/** The findings, sorted; valid until cnx_verify_free(). */
const cnx_verify_finding *cnx_verify_findings(const cnx_verify *v,
                                              size_t *count);

/** A relocation in effect: names under from were read under to. */
typedef struct cnx_verify_relocation {
    const char *from;    /* the dataset's root as the manifests name it */
    const char *to;      /* where it is now */
    const char *written; /* derived: a layer as its manifests name it; NULL
                          * for one given (cnx_verify_add_relocation) */
    const char *found;   /* derived: the layer they were found under */
} cnx_verify_relocation;

/**
 * The relocations of the last run: the given ones, then each one derived
 * from a layer (once per distinct from/to). Valid until cnx_verify_free();
 * none before a run.
 */
const cnx_verify_relocation *cnx_verify_relocations(const cnx_verify *v,
                                                    size_t *count);

/** Counts and timings of the last run. */
void cnx_verify_get_stats(const cnx_verify *v, cnx_verify_stats *out);

/**
 * The result as one JSON object:
 * {"ok":bool,"manifests":n,"objects":m,"bytes":b,"inputs":i,"layers":l,
 *  "relocations":[{"from","to","written","found"}...] (written and found
 *  null for a given one), "findings":[{"object","check","reason"}...]},
 *  canonical.
 * @param[out] out  free() it
 * @return 0; CNX_ENOMEM.
 */
int cnx_verify_report_json(const cnx_verify *v, char **out);

#ifdef __cplusplus
}
#endif
#endif
