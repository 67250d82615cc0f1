"""Property test of `scoring.redact`, by a seeded random generator (hypothesis is not among the
test tools): URLs, config lines and error messages carrying a secret in a userinfo, a query or
fragment parameter, a URL inside a parameter's value, a request target without a host, or a
`user:password@host` without a scheme; the secret percent-encoded or not, holding quotes,
backslashes and URL punctuation, with non-ASCII text and lone surrogates inside and around it;
each one as plain text, a repr and JSON texts. The properties: no run of 4 characters of the
secret (as written, or as the JSON text or repr escapes it) survives `redact_text` or
`redact_url`, the host and path stay readable, and a JSON text stays valid JSON.

What the generator leaves out is what the module docstring names as ambiguous (whitespace or
`&name=` inside a secret, a password starting with digits then `/`, a relative path
`a/b?token=`); each finding of an earlier run is a fixed example in tests/test_redact.py."""

from __future__ import annotations

import json
import random
from urllib.parse import quote

import pytest

from scoring.redact import redact_text, redact_url

pytestmark = [pytest.mark.unit, pytest.mark.timeout(120)]

SEEDS = range(6)
CASES_PER_SEED = 1000

# letters that occur only in secrets (no template, host or path below holds them)
SECRET_LETTERS = "QZJV"
PUNCTUATION = "@/:?#&;'\"\\%+-.,)]}>`<~!$*([{|^"
INSIDE = ("é", "\ud800", "\U0001f600", "\u202e")  # non-ASCII a secret may hold
PARAMS = ("token", "access_token", "key", "secret", "password", "sig", "signature", "X-Amz-Signature",
          "X-Amz-Credential", "X-Amz-Security-Token", "apikey", "api_key", "code", "session", "pwd", "auth",
          "client_secret", "refresh_token", "Signature", "x-api-key", "sessionToken", "private_key", "AWSAccessKeyId")
HOSTS = ("h.example", "h.example:8443", "10.0.0.1:9000", "localhost", "[::1]:8080", "minio:9000",
         "xn--bcher-kva.example")
BARE_HOSTS = ("db.example.com", "minio:9000", "10.0.0.1", "localhost", "minio")
PATH = "/pa/th"
# what may stand right before or after a URL: nothing, whitespace, controls, quotes, non-ASCII
# symbols and letters, lone surrogates, and backslash escapes as a JSON text or a repr writes them
AROUND = ("", " ", "é", "\u00a0", "\ud800", "\udfff", "\u202e", "\U0001f600", "\n", "\t", "\x1b", "(", "'", '"',
          "\\", "\\n", "\\u00a0", "\\x1b", "\u201c", "\u00ab")
TEMPLATES = ("{}", "cannot read {} - denied", "input {!r} missing", "[Errno 2] No such file: '{}'",
             "endpoint_url = {}", 's3.endpoint_url: "{}"', "({!r}, 3)", "see <{}> now", "ERR {}: boom",
             "--endpoint-url {}", "AWS_ENDPOINT_URL={}", 'Could not connect to the endpoint URL: "{}"',
             "ClientResponseError: 403, message='Forbidden', url=URL({!r})",
             "Max retries exceeded with url: {} (Caused by X)", "GET {} HTTP/1.1", "OSError: [Errno 5] {!r}: {!r}",
             "{{'endpoint_url': {!r}, 'n': 1}}", "url: {}\nnext: 1", 'url = "{}"', "--s3.endpoint_url={}",
             "Traceback:\n  File x\nValueError: {!r}\n\nDuring handling: {}", "{}.", "({})", "{},{}", "{}|{}", "{}{}")


def _secret(rng: random.Random, punctuation: str) -> str:
    chars = [rng.choice(SECRET_LETTERS) for _ in range(rng.randint(6, 14))]
    for _ in range(rng.randint(0, 4) if punctuation else 0):
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(punctuation))
    if punctuation and rng.random() < 0.1:
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(INSIDE))
    return "".join(chars)


def _percent_encoded(rng: random.Random, text: str) -> str:
    if rng.random() < 0.7:
        return text
    return "".join(quote(c, safe="") if rng.random() < 0.4 and not "\ud800" <= c <= "\udfff" else c for c in text)


def _url(rng: random.Random) -> tuple[str, str, str | None]:
    """A URL or token with a secret in it: (the URL, the secret as written in it, its host, or
    None where no reading of the URL names it)."""
    kind = rng.choice(("userinfo", "s3", "s3_query", "query", "query_raw", "encoded_name", "upper", "fragment", "nested",
                       "request_target", "bare"))
    host = rng.choice(HOSTS)
    in_value = PUNCTUATION.translate(str.maketrans("", "", "&;#"))  # no next parameter inside a value
    if kind == "userinfo":
        secret = "K" + _secret(rng, PUNCTUATION)  # a letter first: `12/ab` would read as a port
        return f"https://user:{secret}@{host}{PATH}?page=2", secret, host
    if kind == "s3":
        secret = _secret(rng, PUNCTUATION)
        return f"s3://AKIAKEY:{secret}@bucket{PATH}", secret, "bucket"
    if kind == "s3_query":  # `s3://minio:9000/...?token=a@b` reads as a userinfo up to the `@` too: all masked
        secret = _secret(rng, in_value)
        host = rng.choice(("bucket", "minio:9000"))
        return f"s3://{host}{PATH}?X-Amz-Security-Token={secret}", secret, None if "@" in secret and ":" in host else host
    if kind == "fragment":
        secret = _secret(rng, in_value)
        name = rng.choice(("access_token", "id_token", "/cb?token"))
        return f"https://{host}{PATH}#{name}={secret}&state=1", secret, host
    if kind == "nested":
        secret = _secret(rng, "")
        inner = f"https://inner.example/x?{rng.choice(PARAMS)}={secret}"
        return f"https://{host}{PATH}?next={quote(inner, safe='') if rng.random() < 0.5 else inner}&page=2", secret, host
    if kind == "bare":
        secret = "K" + _secret(rng, in_value.translate(str.maketrans("", "", "/?")))
        host = rng.choice(BARE_HOSTS)
        return f"admin:{secret}@{host}{PATH}", secret, host
    secret = _percent_encoded(rng, _secret(rng, PUNCTUATION if kind == "query_raw" else in_value))
    name = rng.choice(PARAMS)
    if kind == "encoded_name":
        name = "".join(f"%{ord(c):02X}" if rng.random() < 0.3 else c for c in name)
    if kind == "upper":
        host, name = host.upper(), name.upper()
    tail = rng.choice(("", "&page=2", "#frag", ";b=2"))
    prefix = "" if kind == "request_target" else ("HTTPS://" if kind == "upper" else "https://") + host
    return f"{prefix}{PATH}?a=1&{name}={secret}{tail}", secret, "" if kind == "request_target" else host


def _texts(rng: random.Random, url: str) -> tuple[list[str], list[str]]:
    """`url` in a message, and that message as a repr; that message in JSON texts."""
    before, after = rng.choice(AROUND), rng.choice(AROUND)
    if url.startswith("/"):  # a request target after a letter or a backslash is a relative path: not read
        before = rng.choice([a for a in AROUND if a not in ("é", "\\")])
    template = rng.choice(TEMPLATES)
    value = before + url + after
    count = template.count("{}") + template.count("{!r}")
    text = template.replace("{!r}", "{}").format(*[repr(value) if "{!r}" in template else value] * count)
    return [text, repr(text)], [json.dumps({"e": text, "n": 1}), json.dumps({"e": text}, indent=1),
                                json.dumps([text, "x"], ensure_ascii=False)]


def _runs(secret: str) -> set[str]:
    """Every run of 4 characters of `secret`, as written and as a JSON text or a repr escapes it."""
    return {form[i:i + 4] for form in (secret, json.dumps(secret)[1:-1], repr(secret)[1:-1])
            for i in range(len(form) - 3)}


@pytest.mark.parametrize("seed", SEEDS)
def test_no_run_of_a_secret_survives_and_hosts_stay_readable(seed):
    rng = random.Random(20261128 + seed)
    for _ in range(CASES_PER_SEED):
        url, secret, host = _url(rng)
        runs = _runs(secret)
        texts, documents = _texts(rng, url)
        for text in [url, *texts, *documents]:
            shown = redact_url(text) if text is url else redact_text(text)
            skeleton = text.replace(secret, "")  # a run that the text holds outside the secret may show
            leaked = sorted(run for run in runs if run in shown and run not in skeleton)
            assert not leaked, (text, shown, leaked)
            if host is not None:
                assert host.strip("[]").split(":")[0] in shown and PATH in shown, (text, shown)
            if text in documents:
                json.loads(shown)
