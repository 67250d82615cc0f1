"""URL redaction: the one function every printed URL goes through (errors, logs, manifests).

`redact_url` removes what a URL may carry as a secret:
- the userinfo (`s3://KEY:SECRET@bucket/key` -> `s3://***@bucket/key`), also when the secret
  holds a `/` (AWS secrets may: `s3://AKIA...:abc/def+ghi@bucket/k`), which a parser that
  ends the authority at the first `/` would miss;
- the values of query parameters that carry credentials (`?token=`, `X-Amz-Signature`,
  `X-Amz-Credential`, `X-Amz-Security-Token`, `sig`, `password`, ...), kept by name so the
  message still says what was there.

`redact_text` applies it to every URL inside a message (`scheme://...` up to whitespace or a
quote); `scoring.errors.one_line` calls it, so every one-line error is redacted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MASK = "***"

# query parameter names whose value is a secret (compared lower-case)
_SECRET_PARAMS = re.compile(
    r"(token|secret|signature|credential|password|passwd|pwd|apikey|api[-_]key|auth|session|^sig$|^key$|^code$)"
)
_URL = re.compile(r"""[A-Za-z][A-Za-z0-9+.-]*://[^\s'"<>`]+""")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.S)


def _userinfo_end(rest: str) -> int:
    """Index of the `@` that ends a userinfo part of `rest` (the URL after `scheme://`), or -1.

    The authority normally ends at the first `/`; an `@` before it ends a userinfo. A secret may
    hold `/`, so an `@` after a `/` also ends one when the text before that `/` reads as
    `user:password` (a colon followed by something that is not a port number)."""
    at = rest.find("@")
    if at < 0:
        return -1
    head = rest[:at]
    if "/" not in head and "?" not in head and "#" not in head:
        return at
    first = re.split(r"[/?#]", head, maxsplit=1)[0]
    if ":" in first and not first.split(":", 1)[1].isdigit():
        return at
    return -1


def _redact_query(query: str) -> str:
    """The query with each secret parameter's value masked. Backslashes that end a value are
    kept: in a JSON or Python-escaped text the URL stops at a quote, so a value ending in `\\`
    there ends in the first half of the escape `\\"`, which must not lose it."""
    parts = []
    for item in query.split("&"):
        name, sep, value = item.partition("=")
        if sep and _SECRET_PARAMS.search(name.lower().replace("%2d", "-")):
            escape_half = value[len(value.rstrip("\\")):]
            item = f"{name}={MASK}{escape_half}"
        parts.append(item)
    return "&".join(parts)


def redact_url(url: str | None) -> str | None:
    """`url` without its secrets (module docstring); None and URL-less text pass unchanged.
    A `user:password@host` without a scheme loses its userinfo too."""
    if not url:
        return url
    match = _SCHEME.match(url)
    scheme, rest = (match.group(1), match.group(2)) if match else ("", url)
    end = _userinfo_end(rest)
    if end >= 0 and (scheme or ":" in rest[:end]):
        rest = f"{MASK}@{rest[end + 1:]}"
    if "?" in rest:
        base, _, query = rest.partition("?")
        query, hash_, fragment = query.partition("#")
        rest = f"{base}?{_redact_query(query)}{hash_}{fragment}"
    return scheme + rest


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact_url`)."""
    if "://" not in text:
        return text
    return _URL.sub(lambda m: redact_url(m.group(0)) or "", text)


def redact_values(value):
    """`value` with every string in it, mapping keys included, redacted (`redact_text`):
    containers rebuilt (tuples as lists, as JSON would), everything else as it is."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        return {redact_values(key): redact_values(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_values(item) for item in value]
    return value
