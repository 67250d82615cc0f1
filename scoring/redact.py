"""URL redaction: the one function every printed URL goes through (errors, logs, manifests).

`redact_url` removes what a URL may carry as a secret, every byte of it (a little of the text
after a secret may be masked with it):
- the userinfo (`s3://KEY:SECRET@bucket/key` -> `s3://***@bucket/key`), also when the secret
  holds a `/` (AWS secrets may: `s3://AKIA...:abc/def+ghi@bucket/k`), which a parser that
  ends the authority at the first `/` would miss, or an `@` or a quote (the userinfo ends at
  the URL's last `@`); `user:password@host` without a scheme loses it too; when the text before
  that `@` also reads as a host and a query ending inside a secret value
  (`s3://host:9000/?token=ab@cd`), the `@` may be that secret's, and what either reading takes
  for a secret is masked (`s3://***`, where `s3://***@cd` showed the secret's end);
- the values of query parameters that carry credentials (`?token=`, `X-Amz-Signature`,
  `X-Amz-Credential`, `X-Amz-Security-Token`, `AWSAccessKeyId`, `sig`, `password`,
  `passphrase`, `private_key`, `jwt`, ...; names compared
  percent-decoded), kept by name so the message still says what was there; parameters split
  at `&` and `;`, the fragment's too (`#access_token=`). A value runs to the next parameter:
  a piece without `=` after it (a raw `&`, `;` or `#` inside the secret) is masked with it.
  A parameter whose value is itself a URL or a query carrying a secret (an OAuth
  `redirect_uri=https%3A%2F%2Fh%2F%3Ftoken%3D...`, `next=/x?token=...`, percent-decoded up to
  three times) has its whole value masked (`_holds_secret`).

`redact_text` applies it to every URL inside a message (`scheme://...`, and every token
`user:password@host` whose host reads as a network host: a dotted name, an IP address,
localhost, a name with a port, or a name followed by a `/` path: `KEY:SECRET@minio/`, and
`KEY:SECRET@bucket/key`, which s3fs prints for `s3://KEY:SECRET@bucket/key` with its scheme
cut off; an id such as `system:model@v2` is kept, so an error still names its row), and every
request target without scheme or host (a token starting with `/` that holds a `?` or `#`:
`Max retries exceeded with url: /p?X-Amz-Signature=...`, as urllib3 writes it; a relative
`a/b?token=` is not read as one). A token starts after whitespace, a control character, or a
character outside ASCII that is no word character (`“KEY:SECRET@host”`, an emoji, a lone
surrogate), also when a JSON text or a repr writes it as a backslash escape
(`"a\\nKEY:SECRET@host"`, `\\u00a0s3://...`), so a URL is read the same in every form of a
message; `scoring.errors.one_line` and `scoring.console_text.console_line` call it, so every
one-line error and console line is redacted. A URL ends at whitespace (a secret
holding whitespace is not a URL's) or at the quote that closes it (`_url_end`): the quote it
was opened with (`'...'` of a repr, `"..."`, `<...>`, backticks), at the same escaping depth,
or the unescaped `"` that ends the JSON string it lies in, followed by nothing but closing
punctuation up to whitespace. Every other quote, escaped (`\\"` in a JSON text) or not
(`s3://KEY:pa"ss@bucket`, `?token=ab'cd`), is part of the URL and masked with the secret.
A URL also ends where another starts inside it (`_after_userinfo`: URLs with no whitespace
between them, compact JSON `["https://a","s3://K:S@b"]`, `a,b`), each redacted on its own,
unless that start lies in its userinfo or in a secret value (then masked with it).
So a JSON text with a space after its commas (`json.dumps`'s default, or indented) stays valid
JSON, its strings redacted as `redact_values` redacts the decoded strings (the `--json`
summaries), and a repr keeps its quotes; a compact one may lose what follows a masked secret.
What stays ambiguous: inside a quoted URL, a secret ending in that quote and closing
punctuation (`'...?token=ab',`) reads as the URL's end; a secret value holding `&name=` or
`;name=` reads as a next parameter; a user name holding `/`, `?` or `#` (which a URL would
percent-encode) is not read as one, nor one that starts with `[` as an IPv6 host does
(`https://[a:b]/x@host`: the authority is `[a:b]`); outside `s3://`, a password that starts
with digits and then holds `/`, `?` or `#` (`https://KEY:12/ab@host`) reads as a port and a
path (only ASCII digits do: a port is never `²0`); a password holding both `@` and then `x://`,
or a `user:password@` token without a scheme whose password holds `://`, shows what comes
before that `x://`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from urllib.parse import unquote

MASK = "***"

# query parameter names whose value is a secret (compared lower-case, percent-decoded)
_SECRET_PARAMS = re.compile(
    r"(token|secret|signature|credential|password|passwd|passphrase|pwd|apikey|api[-_]key|access[-_]?key"
    r"|private[-_]?key|jwt|auth|session|^sig$|^key$|^code$)"
)
# what a parameter's name looks like: after a secret value, a part `name=...` with another name
# (`&=`, `&}=`, `&\\=`) is taken for more of that value
_NAME = re.compile(r"[\w.~%+\-\[\]]+")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)(.*)$", re.S)
# the backslash escapes of a character in a JSON text or a repr (`\n`, `\x1b`, `\u00a0`,
# `\U0001f600`), without the backslash: the character one stands for may be whitespace or a
# control, which ends a token. One pattern per length, as a look-behind must have one width:
# `_AFTER_ESCAPE` is one look-behind per length, where one over `_ESCAPE_BODY` fails to compile
_ESCAPE_BODIES = ("[ntrfvab0]", "x[0-9a-fA-F]{2}", "u[0-9a-fA-F]{4}", "U[0-9a-fA-F]{8}")
_ESCAPE_BODY = "(?:" + "|".join(_ESCAPE_BODIES) + ")"
_AFTER_ESCAPE = "|".join(rf"(?<=\\{body})" for body in _ESCAPE_BODIES)
# where a URL starts in a text: `scheme://`, or a word and a colon at the start of a token
# (`user:password@host` without a scheme; kept only when an `@` follows). A token starts after
# whitespace, a control character, punctuation that opens or separates, any character outside
# ASCII that is no word character (a curly quote, an emoji, a lone surrogate: the class lists
# what does not start one), or a backslash escape (`_AFTER_ESCAPE`), so a URL reads the same in
# a JSON text or a repr (`"a\ns3://..."`) as in the raw string. A match starts where a run of
# scheme characters starts (the scheme is the run from its first letter on, after an escape's
# letters), so that no search rescans a long run from each of its characters (quadratic). A
# request target without scheme or host (`/p?X-Amz-Signature=...`: urllib3's "Max retries
# exceeded with url: ...", an HTTP request line) starts at a `/` at the start of a token and
# holds a `?` or `#`; its path is read over characters that start no token (no backslash), so
# no search rescans it either
_START = re.compile(
    r"""(?<![A-Za-z0-9+.-])(?:(?<=\\)""" + _ESCAPE_BODY + r""")?[0-9+.-]*(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)"""
    r"""|(?:(?<![\w!#$%&)*+\-./:>?@\\\]^}~])|""" + _AFTER_ESCAPE + ")"
    r"""(?:(?P<bare>[\w.~%+-]+:(?!//))|(?P<path>/[\w!$%&)*+\-./:>@\]^}~]*[?#]))"""
)
# what follows the `@` of a `user:password@host` token without a scheme: a network host (a
# dotted name ending in a letter, an IP address, localhost, any name with a port, or any name
# (a bucket's too) followed by a `/` path); read at most a host name's length (253) after each
# of at most `_HOST_TRIES` `@`s of a token
_HOST = re.compile(
    r"(?:localhost|\[[0-9A-Fa-f:.]+\]|\d{1,3}(?:\.\d{1,3}){3}|(?:[A-Za-z0-9-]+\.)+[A-Za-z][A-Za-z0-9-]*"
    r"|[A-Za-z0-9.-]+:\d{1,5}|[A-Za-z0-9_.-]+(?=/))(?![A-Za-z0-9-])"
)
_HOST_LENGTH, _HOST_TRIES = 253, 64
# where a parameter's value ends at the latest, and how often a URL that seems to end inside a
# secret value is extended to the next URL after it (each try reads the URL again)
_PARAM_END = re.compile(r"[&;#]")
_PARAM_SEP = re.compile(r"[&;]")  # what separates two parameters
# inside a parameter's value: the names of a query it holds, and a URL's userinfo it holds
_INNER_NAME = re.compile(r"[?&;#]([^?&;#=\s]+)=")
_INNER_USERINFO = re.compile(r"://[^/?#@\s]*:[^/?#\s]*@")
_DECODINGS = 3
_RETRIES = 8
# where the authority of a URL normally ends; schemes whose authority has no port (a bucket)
_AUTHORITY_END = re.compile(r"[/?#]")
_PORTLESS = frozenset(("s3://", "s3a://", "s3n://"))
_WHITESPACE = re.compile(r"\s")
# characters that may follow the quote that closes a quoted URL (JSON, repr, prose)
_CLOSERS = frozenset(",;:.!?)]}>\"'`")
# the quote that closes a URL opened by each opening character
_PAIRS = {'"': '"', "'": "'", "`": "`", "<": ">"}
# a backslash escape or a double quote: the unescaped double quotes of a text, in order
_DQUOTE = re.compile(r'\\[\s\S]|"')


def _userinfo_end(rest: str, portless: bool = False) -> int:
    """Index of the `@` that ends a userinfo part of `rest` (the URL after `scheme://`), or -1.

    The authority normally ends at the first `/`; an `@` before it ends a userinfo. A secret may
    hold `/`, so an `@` after a `/` also ends one when the text before that `/` reads as
    `user:password` (a colon followed by something that is not a port number). A secret may
    hold `@` too: once the first `@` ends a userinfo, the last `@` of the URL does (a path
    holding an `@` after a userinfo is masked with it)."""
    at = rest.find("@")
    return rest.rfind("@") if at >= 0 and _ends_userinfo(rest, 0, at, portless) else -1


def _ends_userinfo(text: str, body: int, at: int, portless: bool = False) -> bool:
    """`_userinfo_end`'s rule for the URL whose text after the scheme starts at `body` and
    whose first `@` is at `at`: read up to the first `/`, `?` or `#` only. `portless`: an
    `s3://` URL, whose bucket has no port, so that any colon there is a userinfo's."""
    stop = _AUTHORITY_END.search(text, body, at)
    if stop is None:
        return True
    first = text[body:stop.start()]
    if first.startswith("[") and "]" in first:  # an IPv6 literal (`[::1]:8080`): its colons are a host's
        first = first[first.index("]") + 1:]
    if ":" not in first:
        return False
    port = first.split(":", 1)[1]  # a port is ASCII digits (`"²0".isdigit()` is true too)
    return portless or not (port.isascii() and port.isdigit())


def _value_spans(url: str, lo: int, hi: int, spans: list[tuple[int, int]]) -> bool:
    """Add to `spans` the secret parameters' values of the parameters `url[lo:hi]` (`a=1&token=x`,
    split at `&` and `;`); return whether the last one was secret. A part without `=`, or whose
    name is no name (`_NAME`), after a secret value is taken for the rest of that value (a raw
    `&` or `;` inside it) and masked too."""
    if lo >= hi:
        return False
    masking, pos = False, lo
    while True:
        sep = _PARAM_SEP.search(url, pos, hi)
        part_end = sep.start() if sep else hi
        eq = url.find("=", pos, part_end)
        value = pos
        if eq >= 0 and (not masking or _NAME.fullmatch(url, pos, eq)):
            masking, value = bool(_SECRET_PARAMS.search(unquote(url[pos:eq]).lower())), eq + 1
        if masking or (value > pos and _holds_secret(url[value:part_end])):
            spans.append((value, part_end))
        if sep is None:
            return masking
        pos = sep.end()


def _holds_secret(value: str) -> bool:
    """A parameter's value that is itself a URL or a query carrying a secret, as it is or
    percent-encoded up to `_DECODINGS` times (`next=https%3A%2F%2Fh%2F%3Ftoken%3DSECRET`,
    `next=/x?token=SECRET`, `url=https://KEY:SECRET@host`): a secret parameter after `?`, `&`,
    `;` or `#`, or a userinfo after `://`. One pass per decoding, no recursion (linear)."""
    for _ in range(_DECODINGS):
        if any(_SECRET_PARAMS.search(unquote(name).lower()) for name in _INNER_NAME.findall(value)):
            return True
        if _INNER_USERINFO.search(value):
            return True
        decoded = unquote(value)
        if decoded == value:
            return False
        value = decoded
    return True  # encoded more often than any URL is: masked


def _param_spans(url: str, lo: int, hi: int, spans: list[tuple[int, int]]) -> bool:
    """`_value_spans` for the URL text `url[lo:hi]` after its userinfo (`host/path?query#fragment`):
    its query's secret values, and its fragment's; a fragment after a query that ends in a
    secret value is masked whole. Returns whether the text ends inside a secret value."""
    hash_ = url.find("#", lo, hi)
    query_end = hi if hash_ < 0 else hash_
    question = url.find("?", lo, query_end)
    masking = question >= 0 and _value_spans(url, question + 1, query_end, spans)
    if hash_ >= 0:
        if masking and hash_ + 1 < hi:
            spans.append((hash_ + 1, hi))
        masking = masking or _value_spans(url, hash_ + 1, hi, spans)
    return masking


def _secret_spans(url: str) -> tuple[list[tuple[int, int]], bool]:
    """The spans of `url` to mask (its userinfo, its secret parameters' values), and whether it
    ends inside a secret value. When the userinfo's text, read as a host, path and query, ends
    inside a secret value (`s3://host:9000/?token=ab@cd`), the `@` may lie inside that secret
    rather than end a userinfo: what either reading takes for a secret is masked."""
    match = _SCHEME.match(url)
    body = match.end(1) if match else 0
    spans: list[tuple[int, int]] = []
    at = body + _userinfo_end(url[body:], url[:body].lower() in _PORTLESS)
    if at < body or not (body or ":" in url[:at]):
        return spans, _param_spans(url, body, len(url), spans)
    spans.append((body, at))
    masking = _param_spans(url, at + 1, len(url), spans)
    if _param_spans(url, body, at, []):  # the `@` may be a secret value's: read it that way too
        masking = _param_spans(url, body, len(url), spans) or masking
    return spans, masking


def _masked(url: str, spans: list[tuple[int, int]]) -> str:
    """`url` with each run of `spans` (overlapping or touching spans are one) replaced by `MASK`;
    an empty span (`?token=`) becomes a `MASK` too."""
    out, pos = [], 0
    for start, stop in sorted(spans):
        if out and start <= pos:
            pos = max(pos, stop)
            continue
        out += [url[pos:start], MASK]
        pos = stop
    out.append(url[pos:])
    return "".join(out)


def redact_url(url: str | None) -> str | None:
    """`url` without its secrets (module docstring); None and URL-less text pass unchanged.
    A `user:password@host` without a scheme loses its userinfo too."""
    if not url:
        return url
    return _redact(url)[0]


def _redact(url: str) -> tuple[str, bool]:
    """`redact_url`, and whether the URL ends inside a secret parameter's value (whose
    masking would run on into any text after it)."""
    spans, masking = _secret_spans(url)
    return _masked(url, spans), masking


def _depth(backslashes: int) -> int:
    """How many escapings deep a quote lies behind `backslashes` backslashes: 0 for `"` (and
    for `\\\\"`, an escaped backslash and a quote), 1 for `\\"` (a JSON string's quote inside
    a JSON text), 2 for `\\\\\\"`: the number of trailing one bits."""
    return (~backslashes & (backslashes + 1)).bit_length() - 1


def _backslashes(text: str, i: int) -> int:
    j = i
    while j > 0 and text[j - 1] == "\\":
        j -= 1
    return i - j


def _url_end(text: str, start: int, body: int, open_dquotes: bool) -> int:
    """Where the URL that starts at `start` (its text after the scheme at `body`) ends: at
    whitespace, or at the quote that closes a quoted URL. That quote is followed by nothing but
    closing punctuation up to whitespace (`"`, `",`, `'):`, `"]}`: JSON, a repr, prose; a quote
    followed by anything else is part of a secret) and is not doubled, and it is either the
    quote that opened the URL (the character before `start`, at the same escaping depth: in a
    JSON text `\\"https://..\\"` closes at `\\"`) or, for `"`, an unescaped one while
    `open_dquotes` (an odd number of unescaped `"` before `start`: the URL lies inside a JSON
    string, whose end it is). Any other quote is part of the URL, so a secret holding one is
    masked whole."""
    space = _WHITESPACE.search(text, body)
    run_end = space.start() if space else len(text)
    tail = run_end  # text[tail:run_end] is closing punctuation only
    while tail > body and text[tail - 1] in _CLOSERS:
        tail -= 1
    opener = text[start - 1] if start > 0 else ""
    closer = _PAIRS.get(opener)
    opener_depth = _depth(_backslashes(text, start - 1)) if closer in ('"', "'") else 0
    for i in range(max(body, tail - 1), run_end):
        ch = text[i]
        if ch not in "\"'`>" or text[i + 1:i + 2] == ch:
            continue
        depth = _depth(_backslashes(text, i)) if ch in ('"', "'") else 0
        if (ch == closer and depth == opener_depth) or (ch == '"' and depth == 0 and open_dquotes):
            return i - (1 << depth) + 1  # the backslashes that escape the closing quote are no URL's
    return run_end


def redact_text(text: str) -> str:
    """`text` with every URL in it redacted (`redact_url`; where a URL ends: `_url_end`), and
    every token `user:password@...` without a scheme."""
    if "://" not in text and "@" not in text and not ("/" in text and ("?" in text or "#" in text)):
        return text
    dquotes = [m.start() for m in _DQUOTE.finditer(text) if m.group() == '"'] if '"' in text else []
    ats = [m.start() for m in re.finditer("@", text)]
    # where a `user:password@` token ends at the latest: whitespace, or another URL's `://`
    stops = sorted([m.start() for m in _WHITESPACE.finditer(text)] + [m.start() for m in re.finditer("://", text)]) \
        if ats else []
    out, pos, inner = [], 0, 0  # inner: the unescaped `"` inside URLs so far, part of them
    outer_end = -1  # the end of the URL a URL found inside it lies in
    while (match := _START.search(text, pos)) is not None:
        scheme = match.group("scheme") is not None
        if match.group("bare") is not None and not _at_in_token(text, ats, stops, match.end(), len(text)):
            out.append(text[pos:match.end()])  # a word and a colon, no `@` after them in the token
            pos = match.end()
            continue
        start = match.start("scheme") if scheme else match.start()
        body = match.end() if scheme else start
        before = bisect.bisect_left(dquotes, start)
        end = outer_end if start < outer_end else _url_end(text, start, body, (before - inner) % 2 == 1)
        portless = text[start:body].lower() in _PORTLESS
        cut = _after_userinfo(text, body, end, ats, stops, match.end(), portless)
        shown, masking = _redact(text[start:cut])
        for _ in range(_RETRIES):  # its last secret value runs on to the next parameter: so does this URL
            if not masking or cut == end:
                break
            after = _PARAM_END.search(text, cut, end)
            cut = _after_userinfo(text, body, end, ats, stops, after.end(), portless) if after else end
            shown, masking = _redact(text[start:cut])
        if masking and cut < end:  # still in a secret value: the rest of the run is masked with it
            cut, shown = end, _redact(text[start:end])[0]
        outer_end = end if cut < end else -1
        inner += bisect.bisect_left(dquotes, cut) - before
        out.append(text[pos:start] + shown)
        pos = max(cut, match.end())
    out.append(text[pos:])
    return "".join(out)


def _after_userinfo(text: str, body: int, end: int, ats: list[int], stops: list[int], least: int,
                    portless: bool = False) -> int:
    """Where the URL `text[:end]` whose text after the scheme starts at `body` ends if another
    URL starts inside it (`_next_url`; else `end`). URLs with no whitespace between them
    (compact JSON, `a,b`) are each redacted, the first one's parameters or path not taken to
    run into the next. Its userinfo (`_userinfo_end`) ends at the last `@` before that next
    URL, which is looked for after its first `@` (a password may hold `://`), else after
    `least`."""
    k = bisect.bisect_left(ats, body)
    if k < len(ats) and ats[k] < end and _ends_userinfo(text, body, ats[k], portless):
        return _next_url(text, max(least, ats[k] + 1), end, ats, [])  # a `user:password@` token here is password
    return _next_url(text, least, end, ats, stops)


def _next_url(text: str, pos: int, end: int, ats: list[int], stops: list[int]) -> int:
    """Where the next URL (`_START`: a scheme, or a `user:password@` token, unless `stops` is
    empty) starts in `text[pos:end]`, or `end`."""
    while (match := _START.search(text, pos, end)) is not None:
        if match.group("scheme") is not None or (
                match.group("bare") is not None and stops and _at_in_token(text, ats, stops, match.end(), end)):
            return match.start()
        pos = match.end()
    return end


def _at_in_token(text: str, ats: list[int], stops: list[int], i: int, end: int) -> bool:
    """An `@` followed by a network host (`_HOST`) comes at or after `i`, before `end` and
    before the next of `stops` (whitespace, `://`; positions sorted): a `user:password@` token
    without a scheme. An id such as `system:model@v2` names no host and stays readable (an
    error names its row). Past `_HOST_TRIES` `@`s in one token, it counts as one (masked)."""
    k = bisect.bisect_left(ats, i)
    w = bisect.bisect_left(stops, i)
    limit = min(end, stops[w]) if w < len(stops) else end
    for tries, at in enumerate(ats[k:k + _HOST_TRIES + 1]):
        if at >= limit:
            return False
        if tries == _HOST_TRIES or _HOST.match(text, at + 1, min(at + 1 + _HOST_LENGTH, len(text))):
            return True
    return False


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
