"""The manifest's signature (opt-in, `manifest_key_env`; docs/job.md, "Signed manifests"):
an HMAC-SHA256, with a key only the job's driver holds, over the manifest's canonical
content, so that whoever can write to the output folder but holds no key cannot forge a
manifest the next run trusts.

Canonical content: the manifest as the next run reads it back (`json.loads` of what
`writes.put_json_atomic` wrote), without the `manifest_hmac` field, serialised by
`json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)` and encoded as ASCII.
The signature is the lowercase hex digest, in the manifest's `manifest_hmac` field.

The key is read from the driver's environment, once, before any work; it lives in a
`ManifestKey` that shows only the variable's name (`repr`) and refuses to be pickled, so it
cannot travel to a Ray worker, nor enter the config, a log line, an error or the manifest.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

from scoring.errors import UsageError

FIELD = "manifest_hmac"
MIN_KEY_BYTES = 32


class ManifestKey:
    """The driver's signing key, named by its environment variable; never shown or pickled."""

    __slots__ = ("_secret", "env")

    def __init__(self, env: str, secret: bytes) -> None:
        self.env = env
        self._secret = secret

    def __repr__(self) -> str:
        return f"ManifestKey(env={self.env!r})"

    def __reduce__(self):
        raise TypeError(f"the manifest key (${self.env}) stays on the driver: it is never pickled")

    def sign(self, manifest: dict[str, Any]) -> str:
        """The hex HMAC-SHA256 of `manifest`'s canonical content (module docstring)."""
        return hmac.new(self._secret, canonical(manifest), hashlib.sha256).hexdigest()

    def signed(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """`manifest` with its `manifest_hmac`."""
        body = {key: value for key, value in manifest.items() if key != FIELD}
        return {**body, FIELD: self.sign(body)}

    def problem(self, manifest: Any) -> str | None:
        """Why `manifest` (as read) is not one this key signed, or None when it is."""
        if not isinstance(manifest, dict):
            return f"it is not a JSON object, so it carries no '{FIELD}'"
        found = manifest.get(FIELD)
        if found is None:
            return (f"it carries no '{FIELD}' (written before manifest_key_env was set, or by someone "
                    f"without the key)")
        if not isinstance(found, str) or not hmac.compare_digest(found.encode("ascii", "replace"),
                                                                 self.sign(manifest).encode("ascii")):
            return f"its '{FIELD}' does not match its content (edited since it was written, or signed with another key)"
        return None


def canonical(manifest: dict[str, Any]) -> bytes:
    """The bytes signed: the manifest as read back from its JSON (`default=str`, as it is
    written), without `manifest_hmac`, sorted keys, no spaces, ASCII escapes."""
    body = {key: value for key, value in manifest.items() if key != FIELD}
    as_read = json.loads(json.dumps(body, default=str))
    return json.dumps(as_read, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def load_key(env: str | None, environ: dict[str, str] | None = None) -> ManifestKey | None:
    """The key held by the variable `env` names (None: signing off). A variable that is not
    set, empty or shorter than `MIN_KEY_BYTES` is a `UsageError` naming the variable, never
    its value."""
    if env is None:
        return None
    value = (os.environ if environ is None else environ).get(env)
    if value is None:
        raise UsageError(f"manifest_key_env: the environment variable {env} is not set on the driver "
                         f"(it must hold the manifest signing key, at least {MIN_KEY_BYTES} bytes)")
    secret = value.encode("utf-8", "surrogateescape")
    if len(secret) < MIN_KEY_BYTES:
        what = "is empty" if not secret else f"holds fewer than {MIN_KEY_BYTES} bytes"
        raise UsageError(f"manifest_key_env: the environment variable {env} {what}; the manifest signing key "
                         f"needs at least {MIN_KEY_BYTES} (e.g. `openssl rand -hex 32`)")
    return ManifestKey(env, secret)
