"""The operator's ledger key and the keyed hash of an author id: the ledger never holds a raw author id.

HMAC-SHA256 with a secret key the operator supplies (``--ledger-key-file`` or ``$TEXTDP_LEDGER_KEY``): without
the key, a ledger row cannot be tied to an author by hashing guessed ids (a plain hash could be). The ledger
stores only the key's fingerprint (an HMAC of a fixed label), so a run with another key is refused instead of
silently starting every author's budget from zero.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Optional

from textdp.errors import TextdpError

KEY_ENV = "TEXTDP_LEDGER_KEY"
MIN_KEY_BYTES = 16
FINGERPRINT_LABEL = b"textdp-ledger-key-fingerprint/1"


def load_key(path: Optional[str] = None, environ=None) -> bytes:
    """The key from ``path`` (its bytes, surrounding whitespace removed) or else from ``$TEXTDP_LEDGER_KEY``;
    TextdpError in one line when neither gives at least 16 bytes. The key is never printed."""
    environ = os.environ if environ is None else environ
    if path:
        import stat

        try:  # a pipe or device (/dev/urandom, <(openssl rand ...)) gives another key each time: a ledger made with it
            if not stat.S_ISREG(os.stat(path).st_mode):  # could never be read again (round 9, R9-4)
                raise TextdpError(f"--ledger-key-file {path!r} is not a regular file (a pipe or device gives another "
                                  "key at every run, and the ledger could never be read again): write the key to a file "
                                  "once, e.g. `head -c 32 /dev/urandom | base64 > ledger.key`, and keep it")
            with open(path, "rb") as handle:
                key = handle.read(1 << 16).strip()
        except OSError as exc:
            raise TextdpError(f"--ledger-key-file {path!r} cannot be read ({type(exc).__name__})") from None
        where = f"--ledger-key-file {path!r}"
    elif environ.get(KEY_ENV):
        key, where = environ[KEY_ENV].strip().encode("utf-8"), f"${KEY_ENV}"
    else:
        raise TextdpError(f"--ledger needs the operator's secret key: --ledger-key-file PATH or ${KEY_ENV} (at least "
                          f"{MIN_KEY_BYTES} bytes; e.g. `head -c 32 /dev/urandom | base64 > ledger.key`)")
    if len(key) < MIN_KEY_BYTES:
        raise TextdpError(f"the ledger key from {where} has {len(key)} bytes; it needs at least {MIN_KEY_BYTES}")
    if len(set(key)) < 4:  # 64 KiB of NULs from /dev/zero, "aaaa...": no secret at all
        raise TextdpError(f"the ledger key from {where} repeats {len(set(key))} byte value(s) only: it is no secret; "
                          "use random bytes, e.g. `head -c 32 /dev/urandom | base64 > ledger.key`")
    return key


def key_fingerprint(key: bytes) -> str:
    """What the ledger stores to recognise its key (not the key, and no author's hash)."""
    return hmac.new(key, FINGERPRINT_LABEL, hashlib.sha256).hexdigest()[:32]


def author_hash(key: bytes, identity) -> str:
    """The keyed hash of an author, from ``textdp.text.records.author_identity(value)`` (so 1 and 1.0 are one
    author, "1" another): HMAC-SHA256 over its canonical JSON, hex."""
    canonical = json.dumps(list(identity), sort_keys=True, default=str, ensure_ascii=False)
    return hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()
