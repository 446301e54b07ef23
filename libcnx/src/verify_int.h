/*
 * verify_int.h - what the parts of cnx-verify's library share: the
 * manifest records, the finding lists, a string index, the relocation of a
 * moved dataset's names, the parallel loop, reading stored objects, and
 * the ledger and git back ends (verify_ledger.c, verify_git.c), so that
 * sqlite3 and libgit2 types stay out of the public header.
 *
 * Threading: manifests are verified and objects hashed by worker threads,
 * each writing only its own record (a manifest's findings go to that
 * manifest's own list); every other step runs on the calling thread.
 */
#ifndef CNX_VERIFY_INT_H
#define CNX_VERIFY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"
#include "cnx/lineage.h"
#include "cnx/store.h"
#include "cnx/url.h"
#include "cnx/verify.h"

/* ---- findings -------------------------------------------------------- */

typedef struct vf_findings {
    cnx_verify_finding *items; /* strings malloc'd, owned */
    size_t n, cap;
} vf_findings;

/** Add a finding (formatted reason). @return 0 or CNX_ENOMEM. */
int vf_add(vf_findings *list, const char *object, const char *check,
           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/** Move every finding of src to the end of dst. */
int vf_move(vf_findings *dst, vf_findings *src);
void vf_findings_dispose(vf_findings *list);

/* ---- string index ---------------------------------------------------- */

/* Open addressing, keys borrowed (they must outlive the map). */
typedef struct vf_map {
    const char **keys;
    size_t *vals;
    size_t cap, n;
} vf_map;

/** Insert key -> val unless present. @return 1 inserted, 0 present (its
 * value in *old if not NULL), CNX_ENOMEM. */
int vf_map_put(vf_map *m, const char *key, size_t val, size_t *old);
/** @return the value's address, or NULL if absent. */
size_t *vf_map_get(const vf_map *m, const char *key);
void vf_map_dispose(vf_map *m);

/* ---- manifests ------------------------------------------------------- */

typedef struct vf_art {
    char *name;                  /* URL: layer + "/" + object, where it is
                                  * read (relocated, if its dataset moved) */
    char digest[CNX_DIGEST_LEN]; /* "sha256:<hex>" */
    char *layer;                 /* inputs: the task input's layer (owned,
                                  * relocated like name) */
    char *signed_name;           /* the name as signed, when relocated
                                  * (else NULL: name is) */
} vf_art;

/* ---- relocation (verify_util.c) ---------------------------------------- */

/*
 * A dataset moved or copied as a whole: every name under `from` (as the
 * manifests name it) is read under `to` instead. Given (--relocate), or
 * derived from a layer whose envelopes name another output layer: the
 * longest common suffix of whole path components of the layer as written
 * (L) and as found (L') is the layer's place in its dataset, and what
 * precedes it the dataset's root, D for L and D' for L'.
 */
typedef struct vf_reloc {
    char *from;    /* canonical URL: the root as written, D */
    char *to;      /* canonical URL: the root as found, D' */
    char *written; /* derived: the layer as its manifests name it (L) */
    char *found;   /* derived: the layer they were found under (L');
                    * NULL: given */
} vf_reloc;

void cnx__verify_reloc_dispose(vf_reloc *r);

/**
 * Derive the relocation of a layer written as `written` and found under
 * `found` (both canonical URLs).
 * @return 1 with from and to set; 0 when there is none (the same URL, or
 *         no common last component); CNX_EINVAL if either is no URL.
 */
int cnx__verify_reloc_derive(const char *written, const char *found,
                             char from[CNX_URL_MAX], char to[CNX_URL_MAX]);

/**
 * The relocation of list with the longest `from` that url lies under
 * (component-wise, cnx_url_under); the first of equals. NULL if none.
 */
const vf_reloc *cnx__verify_reloc_find(const vf_reloc *list, size_t n,
                                       const char *url);

/**
 * url moved by r: r->to + the part of url under r->from.
 * @param[out] out  free() it
 * @return 1 moved; 0 url is not under r->from (*out NULL); CNX_ENOMEM;
 *         CNX_ENAME if the rest is no valid object name.
 */
int cnx__verify_reloc_apply(const vf_reloc *r, const char *url, char **out);

typedef enum vf_origin {
    VF_GIVEN = 0,  /* --manifest, --layer, --request, or memory */
    VF_WALKED = 1, /* found walking inputs back to their producers */
} vf_origin;

typedef struct vf_manifest {
    char *origin;  /* file path, envelope URL or ledger row, for findings */
    vf_origin how;
    char *text;    /* envelope bytes (freed once verified) */
    size_t len;
    int unreadable;                    /* finding already made */
    char expect_digest[CNX_DIGEST_LEN]; /* from the file name or the row */
    char expect_key[CNX_DIGEST_LEN];    /* from the lineage/ directory */
    char *stored_layer;                 /* layer whose lineage/ held it */
    vf_reloc reloc; /* derived when stored_layer is not the task's output
                     * layer (from NULL: none) */
    int ledger_partition;               /* >= 0: from the ledger */
    int64_t ledger_offset;

    /* results (written by one verifying thread) */
    char env_digest[CNX_DIGEST_LEN];
    int sig_ok;  /* a trusted key verified it */
    int stmt_ok; /* statement well formed; the fields below are set */
    char task_key[CNX_DIGEST_LEN];
    char *request;
    char *stage;      /* the worker's stage (task.stage) */
    char *parameters; /* canonical */
    int64_t kernel_version;
    char *output_layer;
    vf_art *subjects;
    size_t nsubjects;
    vf_art *inputs;
    size_t ninputs;
    char commit[41]; /* "" if none */
    int dirty;
    vf_findings findings;
} vf_manifest;

/** Verify signature and statement of m (thread-safe per manifest), and
 * resolve its names: by its own derived relocation first, then by the
 * given relocations (read only; shared between threads). */
void vf_manifest_check(vf_manifest *m, cnx_key *const *keys, size_t nkeys,
                       const vf_reloc *given, size_t ngiven);
void vf_manifest_dispose(vf_manifest *m);

/** The output layer (*layer, free() it) and task key of an envelope's
 * payload, read without verifying its signature (for ledger rows).
 * @return 0, or -1 if it names none. */
int vf_envelope_locate(const char *text, size_t len, char **layer,
                       char key[CNX_DIGEST_LEN]);

/* ---- parallel loop --------------------------------------------------- */

typedef void (*vf_task_fn)(void *ctx, size_t i, int thread);
/** Run fn(ctx, i, thread) for i in [0, n) on up to threads threads
 * (thread in [0, threads)); progress (may be NULL) gets the count of
 * finished items, for a progress bar. */
void vf_parallel(int threads, size_t n, vf_task_fn fn, void *ctx,
                 void (*progress)(void *ctx, size_t done));

/* ---- hashing --------------------------------------------------------- */

typedef struct vf_hash_job {
    const char *url;
    const char *layer; /* an input's layer URL (borrowed) or NULL: an object
                        * not stored under url may be a chunk inside a
                        * shard of that layer (cnx_layer_object_digest) */
    cnx_store *store; /* the store that holds it (borrowed); NULL:
                       * status and error say why not */
    /* its name there; kept in the job (not pointed to: jobs live in an
     * array that grows and moves) */
    char name_buf[1040];
    char digest[CNX_DIGEST_LEN]; /* "" if not read */
    int status;                  /* 0 read, CNX_ENOTFOUND, CNX_EIO, ... */
    char error[512];
    uint64_t size;
} vf_hash_job;

/** Hash one stored object into job (job->store set). Thread-safe. */
void cnx__verify_hash_object(vf_hash_job *job);

/**
 * Open the store at a URL for reading only: a file:// directory that does
 * not exist is CNX_ENOTFOUND (cnx_store_open would create it), other
 * schemes open as cnx_store_open does.
 * @return 0; CNX_ENOTFOUND; CNX_EINVAL; CNX_EUNSUPPORTED; CNX_EIO.
 */
int cnx__verify_store_open(cnx_store **out, const char *url);

/* ---- ledger (verify_ledger.c) ----------------------------------------- */

typedef struct vf_ledger vf_ledger;

int vf_ledger_open(vf_ledger **out, const char *path);
void vf_ledger_close(vf_ledger *l);
const char *vf_ledger_path(const vf_ledger *l);

/** Callback per lineage row: envelope text, its digest and position. */
typedef int (*vf_row_fn)(void *ctx, int partition, int64_t offset,
                         const char *digest, int verified, const char *text,
                         size_t len);
/** Every lineage row of request (request NULL: every verified row). */
int vf_ledger_rows(vf_ledger *l, const char *request, vf_row_fn fn,
                   void *ctx);
/** @return 1 if the ledger has the request, 0 if not, <0 on error. */
int vf_ledger_has_request(vf_ledger *l, const char *request);
/* The archive file a request was moved to: 1 and its path in file; 0 if
 * it was not archived; CNX_EIO. */
int vf_ledger_archived(vf_ledger *l, const char *request, char *file,
                       size_t cap);
/** Recompute the lineage chain of every partition into findings. */
int vf_ledger_check_chain(vf_ledger *l, vf_findings *out, size_t *rows);
/** Is the envelope in the ledger, verified? 1 yes (row in *p, *o);
 * 0 absent; 2 present but not verified (error in why); <0 error. */
int vf_ledger_find_envelope(vf_ledger *l, const char *digest, int *p,
                            int64_t *o, char *why, size_t cap);
/** The outputs row's digest for (task key, object) into digest ("" if
 * none). @return 0 or <0. */
int vf_ledger_output(vf_ledger *l, const char *task_key, const char *object,
                     char digest[CNX_DIGEST_LEN]);
/** The workflow stage of (request, task key) into stage ("" if none) and
 * the request's workflow JSON (malloc'd, NULL if none). */
int vf_ledger_task_stage(vf_ledger *l, const char *request,
                         const char *task_key, char *stage, size_t cap);
int vf_ledger_workflow(vf_ledger *l, const char *request, char **json);

/* ---- git (verify_git.c) ----------------------------------------------- */

typedef struct vf_repo vf_repo;

int vf_repo_open(vf_repo **out, const char *path, const char *ref);
void vf_repo_close(vf_repo *r);
/** 0: exists (and reachable from the ref, if any); 1: no such commit;
 * 2: exists but not reachable from the ref; <0 error. */
int vf_repo_check(vf_repo *r, const char *commit);

#endif
