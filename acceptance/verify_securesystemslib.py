#!/usr/bin/env python3
"""verify_securesystemslib.py PUBKEY ENVELOPE...

Checks cnx lineage envelopes (DSSE, Ed25519) with python3-securesystemslib's
key API and Python's standard library only: no cnx code is on the
verification path.

  - PUBKEY is a PEM SubjectPublicKeyInfo Ed25519 public key (a worker's
    cnx.pub). The raw 32-byte key is its DER minus the fixed 12-byte prefix
    30 2a 30 05 06 03 2b 65 70 03 21 00; it becomes a securesystemslib key
    dict with securesystemslib.keys.format_metadata_to_key().
  - For each envelope the DSSE pre-authentication encoding is built here,
        "DSSEv1" SP len(type) SP type SP len(payload) SP payload
    from its payloadType and its base64-decoded payload (standard or
    URL-safe alphabet, padding optional but correct if present), and each
    signature is checked with securesystemslib.keys.verify_signature().
    The envelope's keyid is only a hint and is not used to pick the key.
  - An envelope passes if any of its (at most 16) signatures verifies and
    its payloadType is $CNX_DSSE_TYPE (default application/vnd.in-toto+json).

Prints one line per envelope, "OK <file>" or "FAIL <file>: <why>", and a
count on stderr. With VERIFY_PAYLOAD_DIR set, each verified payload is
written to that directory as <envelope file name>.payload.
Exit status: 0 if every envelope verifies, 1 if any fails, 2 bad usage.
"""
import base64
import binascii
import hashlib
import json
import os
import re
import sys

try:
    import securesystemslib.exceptions
    import securesystemslib.keys
except ImportError as e:  # pragma: no cover - depends on the host
    sys.stderr.write("verify_securesystemslib.py: securesystemslib is not "
                     "importable (%s); apt-get install "
                     "python3-securesystemslib\n" % e)
    sys.exit(2)

PROG = "verify_securesystemslib.py"
WANT_TYPE = os.environ.get("CNX_DSSE_TYPE", "application/vnd.in-toto+json")
MAX_SIGS = 16
# DER SubjectPublicKeyInfo of an Ed25519 key, up to the 32 key bytes:
# SEQUENCE(42) { SEQUENCE(5) { OID 1.3.101.112 } BIT STRING(33) { 0 unused } }
ED25519_SPKI_PREFIX = bytes.fromhex("302a300506032b6570032100")
B64_TEXT = re.compile(r"[A-Za-z0-9+/]*")


class Bad(Exception):
    """An envelope that does not verify; the message says why."""


def load_public_key(path):
    """The PEM public key at path as (securesystemslib key dict, keyid hint
    'sha256:<hex of the DER>'); raises ValueError if it is not Ed25519."""
    with open(path, "rb") as f:
        text = f.read().decode("ascii")
    m = re.search(r"-----BEGIN PUBLIC KEY-----(.*?)-----END PUBLIC KEY-----",
                  text, re.S)
    if m is None:
        raise ValueError("no PEM PUBLIC KEY block")
    der = base64.b64decode("".join(m.group(1).split()), validate=True)
    if len(der) != 44 or not der.startswith(ED25519_SPKI_PREFIX):
        raise ValueError("not an Ed25519 SubjectPublicKeyInfo")
    key, _ = securesystemslib.keys.format_metadata_to_key({
        "keytype": "ed25519",
        "scheme": "ed25519",
        "keyval": {"public": der[len(ED25519_SPKI_PREFIX):].hex()},
    })
    return key, "sha256:" + hashlib.sha256(der).hexdigest()


def b64decode(text, what):
    """Standard or URL-safe base64, padding optional but correct if given."""
    if not isinstance(text, str):
        raise Bad("%s is not a string" % what)
    body = text.rstrip("=")
    pad = len(text) - len(body)
    body = body.replace("-", "+").replace("_", "/")
    if (pad > 2 or (pad and len(text) % 4) or len(body) % 4 == 1
            or not B64_TEXT.fullmatch(body)):
        raise Bad("%s is not base64" % what)
    try:
        return base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except binascii.Error as e:
        raise Bad("%s is not base64 (%s)" % (what, e)) from e


def no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise ValueError("duplicate member %r" % k)
        obj[k] = v
    return obj


def pae(payload_type, payload):
    """DSSE v1 pre-authentication encoding; lengths are byte counts."""
    t = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(payload), payload)


def check(path, key, keyid_hint, pubkey_path):
    """Verifies one envelope; returns its payload; raises Bad."""
    try:
        with open(path, "rb") as f:
            env = json.loads(f.read().decode("utf-8"),
                             object_pairs_hook=no_duplicates)
        payload_type = env["payloadType"]
        payload_text = env["payload"]
        sigs = env["signatures"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise Bad("not a DSSE envelope (payload, payloadType, "
                  "signatures[].sig): %s" % e) from e
    if not isinstance(payload_type, str):
        raise Bad("payloadType is not a string")
    if not isinstance(sigs, list) or not 1 <= len(sigs) <= MAX_SIGS:
        raise Bad("signatures is not a list of 1 to %d" % MAX_SIGS)
    if payload_type != WANT_TYPE:
        raise Bad("payloadType is not %s" % WANT_TYPE)
    payload = b64decode(payload_text, "payload")
    message = pae(payload_type, payload)
    named = False
    for i, s in enumerate(sigs):
        if not isinstance(s, dict) or "sig" not in s:
            raise Bad("signatures[%d] has no sig" % i)
        named = named or s.get("keyid") == keyid_hint
        try:
            raw = b64decode(s["sig"], "signatures[%d].sig" % i)
        except Bad:
            continue
        # The keyid in securesystemslib's signature dict must equal the key
        # dict's own (a hash of its metadata); the envelope's is a hint only.
        sig = {"keyid": key["keyid"], "sig": raw.hex()}
        try:
            if securesystemslib.keys.verify_signature(key, sig, message):
                return payload
        except securesystemslib.exceptions.Error:
            continue  # e.g. not 64 bytes: not an Ed25519 signature
    if named:
        why = "a signature names this key: payload, type or signature altered"
    else:
        why = "no signature names this key"
    raise Bad("no signature verifies with %s (%s)" % (pubkey_path, why))


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        sys.stderr.write("usage: %s PUBKEY ENVELOPE...\n" % PROG)
        return 2
    pubkey_path = argv[1]
    try:
        key, keyid_hint = load_public_key(pubkey_path)
    except (OSError, ValueError, UnicodeError,
            securesystemslib.exceptions.Error) as e:
        sys.stderr.write("%s: %s is not a PEM Ed25519 public key (%s)\n"
                         % (PROG, pubkey_path, e))
        return 2
    out_dir = os.environ.get("VERIFY_PAYLOAD_DIR", "")
    if out_dir and not os.path.isdir(out_dir):
        sys.stderr.write("%s: VERIFY_PAYLOAD_DIR %s is not a directory\n"
                         % (PROG, out_dir))
        return 2
    ok = bad = 0
    for path in argv[2:]:
        try:
            payload = check(path, key, keyid_hint, pubkey_path)
        except Bad as e:
            print("FAIL %s: %s" % (path, e))
            bad += 1
            continue
        if out_dir:
            name = os.path.join(out_dir, os.path.basename(path) + ".payload")
            with open(name, "wb") as f:
                f.write(payload)
        print("OK %s" % path)
        ok += 1
    sys.stdout.flush()
    sys.stderr.write("%s: %d verified, %d failed\n" % (PROG, ok, bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
