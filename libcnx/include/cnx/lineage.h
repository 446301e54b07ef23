/*
 * cnx/lineage.h - signed lineage: Ed25519 keys, DSSE envelopes, in-toto
 * Statements with SLSA provenance v1, and the build's identity.
 *
 * A worker signs, per successful attempt, a DSSE envelope whose payload is
 * an in-toto Statement v1 (subjects: every output object and its sha256)
 * with SLSA provenance v1 (external parameters: the task; resolved
 * dependencies: every input object, the code commit, the container digest;
 * run details: worker, invocation id, start and finish). The signature is
 * Ed25519 over the DSSE pre-authentication encoding (PAE), so `openssl
 * pkeyutl -verify -rawin` checks it without cnx code. Payloads are canonical
 * JSON, so the same provenance is the same bytes.
 */
#ifndef CNX_LINEAGE_H
#define CNX_LINEAGE_H

#include <stddef.h>
#include <stdint.h>

#include "cnx/digest.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CNX_DSSE_PAYLOAD_TYPE "application/vnd.in-toto+json"
#define CNX_STATEMENT_TYPE "https://in-toto.io/Statement/v1"
#define CNX_SLSA_PREDICATE "https://slsa.dev/provenance/v1"
#define CNX_BUILD_TYPE "https://cnx.dev/buildtypes/chunk-task/v1"
/** Most signatures cnx_dsse_verify accepts in one envelope. */
#define CNX_DSSE_MAX_SIGNATURES 16

/* Where a worker keeps each envelope, in the output layer it wrote:
 * CNX_LINEAGE_DIR "/<task key hex>/<envelope digest hex>" CNX_LINEAGE_SUFFIX */
#define CNX_LINEAGE_DIR "lineage"
#define CNX_LINEAGE_SUFFIX ".dsse.json"

/* ---- keys ---------------------------------------------------------- */

/*
 * An Ed25519 key: a key pair, or a public key only. Immutable once made, so
 * one key may be used by many threads at once.
 */
typedef struct cnx_key cnx_key;

/**
 * Generate a new Ed25519 key pair.
 * @param[out] out  free with cnx_key_free()
 * @return 0; CNX_ENOMEM if OpenSSL cannot make the key.
 */
int cnx_key_generate(cnx_key **out);
/**
 * Write DIR/cnx.key (PKCS#8 PEM, unencrypted, mode 0600) and DIR/cnx.pub
 * (SubjectPublicKeyInfo PEM, 0644), each created with O_EXCL and synced.
 * DIR is created (0700) if missing; its parent must exist. Nothing is overwritten, and a failure
 * leaves neither file behind.
 * @return 0; CNX_EIMMUTABLE if either file exists; CNX_EINVAL for a public
 *         key or a path too long; CNX_EIO.
 */
int cnx_key_write(const cnx_key *key, const char *dir);
/**
 * Load a private key (PEM, unencrypted Ed25519). Refused if the file (as
 * opened, after links) has any group or other permission bit.
 * @param[out] out  free with cnx_key_free()
 * @return 0; CNX_ENOTFOUND; CNX_EINVAL for a group/world accessible file;
 *         CNX_ECORRUPT if it is not a PEM private key; CNX_EUNSUPPORTED for
 *         a key other than Ed25519; CNX_EIO.
 */
int cnx_key_load_private(cnx_key **out, const char *path);
/** Load a public key (SubjectPublicKeyInfo PEM); errors as above. */
int cnx_key_load_public(cnx_key **out, const char *path);
/** Free a key. Accepts NULL. */
void cnx_key_free(cnx_key *key);
/** keyid: "sha256:<hex>" of the DER SubjectPublicKeyInfo, i.e. the sha256
 * of `openssl pkey -pubin -in cnx.pub -outform DER`. */
void cnx_key_id(const cnx_key *key, char out[CNX_DIGEST_LEN]);

/* ---- DSSE ---------------------------------------------------------- */

/**
 * PAE = "DSSEv1" SP len(type) SP type SP len(body) SP body, lengths in
 * bytes as ASCII decimal. *out is followed by a NUL not counted in
 * *out_len; free() it.
 * @return 0; CNX_ENOMEM.
 */
int cnx_dsse_pae(const char *type, const void *body, size_t len,
                 uint8_t **out, size_t *out_len);

/**
 * Sign body; produce the envelope as canonical JSON
 * {"payload": b64, "payloadType": type, "signatures":[{"keyid","sig"}]}
 * (standard base64 with padding; keyid is cnx_key_id()).
 * @param type  1 to 256 printable ASCII characters
 * @param[out] envelope  free() it
 * @return 0; CNX_EINVAL for a public key or a bad type; CNX_ETOOBIG if the
 *         envelope would exceed CNX_JSON_MAX; CNX_ENOMEM.
 */
int cnx_dsse_sign(const cnx_key *key, const char *type, const void *body,
                  size_t len, char **envelope);

/**
 * Verify an envelope against trusted public keys (standard or URL-safe
 * base64 accepted, padding optional; keyid only a hint: every signature is
 * tried with every trusted key). Succeeds if any signature verifies with
 * any trusted key. The envelope is untrusted: at most CNX_JSON_MAX bytes
 * and CNX_DSSE_MAX_SIGNATURES signatures; unknown members are refused.
 * The caller checks the payloadType it expects in the payload's use.
 * @param[out] payload  optional (NULL): the decoded body, followed by a NUL
 *                      not counted in *payload_len; free() it
 * @param[out] signer   optional: index in trusted of the key that verified
 * @return 0; CNX_ESCHEMA for a malformed envelope (message names the
 *         field); CNX_ETOOBIG over CNX_JSON_MAX; CNX_EDIGEST if no
 *         signature verifies with a trusted key (message says whether a
 *         trusted keyid was named, i.e. altered, or not, i.e. untrusted);
 *         CNX_EINVAL if ntrusted is 0; CNX_ENOMEM.
 */
int cnx_dsse_verify(const char *envelope, size_t len,
                    cnx_key *const *trusted, size_t ntrusted,
                    uint8_t **payload, size_t *payload_len, int *signer);

/**
 * As cnx_dsse_verify; on success, *type (if not NULL) receives the
 * envelope's payloadType, NUL-terminated (free() it), so that a caller can
 * check the type without parsing the envelope again.
 */
int cnx_dsse_verify_type(const char *envelope, size_t len,
                         cnx_key *const *trusted, size_t ntrusted,
                         uint8_t **payload, size_t *payload_len, int *signer,
                         char **type);

/** Room for a detached signature in base64 (88 characters) and its NUL. */
#define CNX_DSSE_SIG_MAX 96

/**
 * Sign the DSSE PAE of (type, body) and give the signature alone, as
 * standard base64 with padding: what a DSSE envelope's "sig" would hold,
 * for bodies that travel without an envelope (Kafka messages: the
 * signature rides in a header, docs/security.md).
 * @param type  1 to 256 printable ASCII characters
 * @return 0; CNX_EINVAL for a public key or a bad type; CNX_ENOMEM.
 */
int cnx_dsse_sign_detached(const cnx_key *key, const char *type,
                           const void *body, size_t len,
                           char sig[CNX_DSSE_SIG_MAX]);

/**
 * Check a detached signature (base64) of the PAE of (type, body) against
 * every trusted key.
 * @param[out] signer  optional: index in trusted of the key that verified
 * @return 0; CNX_EDIGEST if no trusted key verifies it; CNX_ESCHEMA if sig
 *         is not base64; CNX_EINVAL if ntrusted is 0; CNX_ENOMEM.
 */
int cnx_dsse_verify_detached(const char *type, const void *body, size_t len,
                             const char *sig, cnx_key *const *trusted,
                             size_t ntrusted, int *signer);

/* ---- provenance ---------------------------------------------------- */

/** One artifact: a URI-ish name ("<layer url>/<object>") and its digest. */
typedef struct cnx_artifact {
    const char *name;
    const char *digest; /* "sha256:<hex>" */
} cnx_artifact;

typedef struct cnx_provenance {
    const char *task_json;       /* the task, canonical JSON (external) */
    const char *task_key;        /* "sha256:..." */
    const char *stage;
    int64_t kernel_version;
    const cnx_artifact *outputs; /* subjects */
    size_t noutputs;
    const cnx_artifact *inputs;  /* resolved dependencies */
    size_t ninputs;
    const char *git_commit;      /* 40 hex, or "" (or NULL) if unknown */
    int git_dirty;
    const char *container_digest; /* "sha256:...", or NULL or "" if none */
    const char *worker;          /* builder id: worker instance */
    int attempt;                 /* >= 1 */
    double started;              /* Unix seconds */
    double finished;
} cnx_provenance;

/**
 * The in-toto Statement v1 with SLSA provenance v1, canonical JSON; the
 * fields are listed in docs/lineage.md. Subjects and dependencies keep the
 * caller's order (pass them sorted by name). invocationId is
 * "<task key>/<attempt>". The same provenance always gives the same bytes.
 * @param[out] out  free() it
 * @return 0; CNX_EINVAL naming the first bad field (malformed digest or
 *         task JSON, no outputs, attempt < 1, finished before started, a
 *         task whose stage or kernel_version differs, ...); CNX_ETOOBIG if
 *         the statement could not fit an envelope; CNX_ENOMEM.
 */
int cnx_provenance_statement(const cnx_provenance *prov, char **out);

/**
 * RFC 3339 UTC with milliseconds: "2026-11-22T10:00:00.123Z", rounded to
 * the nearest millisecond. Times before 1970 (and NaN) are written as
 * 1970-01-01T00:00:00.000Z, after 9999 as 9999-12-31T23:59:59.999Z.
 * Thread-safe and locale-independent.
 */
void cnx_rfc3339_format(double unix_seconds, char out[32]);

/* ---- base64 -------------------------------------------------------- */

/** Standard base64 with padding. free() it. NULL (error set) on failure. */
char *cnx_base64_encode(const void *data, size_t len);
/**
 * Decode standard or URL-safe base64 (padding optional, but correct if
 * present; no whitespace; unused trailing bits must be zero). *out is
 * followed by a NUL not counted in *out_len; free() it.
 * @return 0; CNX_EINVAL naming the offending character; CNX_ENOMEM.
 */
int cnx_base64_decode(const char *text, size_t len, uint8_t **out,
                      size_t *out_len);

/* ---- the build ----------------------------------------------------- */

/** Code commit of this build (40 hex) read with libgit2 at build time, or
 * "" when built outside a git checkout. */
const char *cnx_build_commit(void);
/** 1 if the tree had uncommitted changes to tracked files when built. */
int cnx_build_dirty(void);
/** "cnx <version> <commit>[-dirty]". */
const char *cnx_build_describe(void);

#ifdef __cplusplus
}
#endif
#endif
