"""URL redaction (`scoring.redact`) where a URL's end is unclear: a secret holding a quote,
an `@`, a `&`, a `;` or a `#`; a URL in JSON, repr or plain text; `user:password@host`
without a scheme. The rule: no byte of a secret is shown (a little trailing text may be
masked with it), and a JSON document stays valid JSON."""

from __future__ import annotations

import json
import random

import pytest

from scoring.console_text import console_json, console_line
from scoring.redact import redact_text, redact_url, redact_values

# (url, its secret parts, what the redacted url is)
SECRET_URLS = [
    ('s3://AKIAQUOTE1:pa"ssw0rd1@bucket/k', ["AKIAQUOTE1", "ssw0rd1"], "s3://***@bucket/k"),
    ("s3://AKIAQUOTE2:pa'ssw0rd2@bucket/k", ["AKIAQUOTE2", "ssw0rd2"], "s3://***@bucket/k"),
    ('s3://AKIAQUOTE3:ab/c"d,e\'f@bucket/k', ["AKIAQUOTE3", "ab/c", "d,e", "'f"], "s3://***@bucket/k"),
    ("https://h.example/?token=ab'cdsecret4", ["cdsecret4"], "https://h.example/?token=***"),
    ('https://h.example/?a=1&sig=ab"cdsecret5&page=2', ["cdsecret5"], "https://h.example/?a=1&sig=***&page=2"),
    ('https://h.example/?token=secret6"', ["secret6"], "https://h.example/?token=***"),
    ("https://h.example/?token=secret7\\", ["secret7", "\\"], "https://h.example/?token=***"),
    ("https://user8:p@ssw0rd8@host.example/x", ["user8", "ssw0rd8"], "https://***@host.example/x"),
    ("https://me9user@mail.example:pw9secret@host.example/x", ["me9user", "mail.example", "pw9secret"],
     "https://***@host.example/x"),
    ("https://h.example/?token=ab&cdsecret10&page=2", ["cdsecret10"], "https://h.example/?token=***&***&page=2"),
    ("https://h.example/?a=1;sig=semisecret11", ["semisecret11"], "https://h.example/?a=1;sig=***"),
    ("https://h.example/?to%6Ben=pctsecret12", ["pctsecret12"], "https://h.example/?to%6Ben=***"),
    ("https://h.example/cb#access_token=fragsecret13&state=1", ["fragsecret13"],
     "https://h.example/cb#access_token=***&state=1"),
    ("https://h.example/?token=ab#hashsecret14", ["hashsecret14"], "https://h.example/?token=***#***"),
    ("https://h.example/?sig=ab&}=curlysecret17&page=2", ["curlysecret17"], "https://h.example/?sig=***&***&page=2"),
    ("s3://AKIAPCT15:pa%22ss%27wd15@bucket/k", ["AKIAPCT15", "wd15"], "s3://***@bucket/k"),
    ("s3://AKIADIGITS18:1234/digsecret18@bucket/k", ["AKIADIGITS18", "digsecret18"], "s3://***@bucket/k"),
    ("S3://AKIADIGITS19:77#digsecret19@bucket/k", ["AKIADIGITS19", "digsecret19"], "S3://***@bucket/k"),
    ('admin16:hunter"2x16@head.example:10001', ["admin16", "2x16"], "***@head.example:10001"),
    # an `@` inside a secret value whose text before it also reads as a userinfo: both readings masked
    ("s3://host:9000/?token=ab@atsecret21", ["atsecret21"], "s3://***"),
    ("s3://host:9000/?token=ab@atsecret22&page=2", ["atsecret22"], "s3://***&page=2"),
    ("s3://AKIAAT23:pw@bucket/?sig=ab@atsecret23", ["AKIAAT23", "atsecret23"], "s3://***"),
    ("https://host:abc/?token=ab@atsecret24#f", ["atsecret24"], "https://***#***"),
]  # fmt: skip


@pytest.mark.parametrize(("url", "secrets", "redacted"), SECRET_URLS)
def test_redact_url_masks_every_byte_of_a_secret(url, secrets, redacted):
    assert redact_url(url) == redacted
    assert all(secret not in redacted for secret in secrets)


@pytest.mark.parametrize(("url", "secrets", "redacted"), SECRET_URLS)
@pytest.mark.parametrize("template", ["cannot read {} - denied", "{}", "input {!r} missing", "x={} y",
                                      "({!r}, 3)", "{{'at': {!r}}}", "see <{}> now", "see `{}` now"])
def test_redact_text_finds_the_whole_url_around_quotes(url, secrets, redacted, template):
    """In plain text (`one_line` errors) and in a repr (`{url!r}` in a message) a quote inside
    a secret does not end the URL; the quotes of a repr are kept."""
    text = template.format(url)
    shown = redact_text(text)
    assert all(secret not in shown for secret in secrets), (text, shown)
    quote = repr(url)[0]  # a repr quotes with the quote the URL does not hold
    assert shown == template.replace("{!r}", quote + "{}" + quote).format(redacted), (text, shown)


@pytest.mark.parametrize("text", [
    "see 's3://bucket/prefix/a@b.parquet' and https://host:8443/path@x now",
    '{"input": "s3://bucket/k", "n": 3, "at": "https://h.example/x?page=2"}',
    'time 12:30, mail a@b.example, C:\\data\\x.parquet, "key:value", url="https://h/x"',
    '{"a:b": "c@d", "ok": true}',
    "ray address 127.0.0.1:8265 and http://127.0.0.1:8265/api",
])  # fmt: skip
def test_redact_text_keeps_text_without_secrets(text):
    assert redact_text(text) == text


JSON_VALUES = [url for url, _, _ in SECRET_URLS] + [
    "'https://h.example/?token=ab'cdsecret20'",
    'he said "https://h.example/?token=quoted21", then left',
    "cannot read s3://AKIAMID22:x\"y'z@bucket/k: denied",
    "https://h.example/?token=päss23wörd",
    "https://h.example/?token=esc24\\\"aped",
]


@pytest.mark.parametrize("value", JSON_VALUES)
@pytest.mark.parametrize(("indent", "ascii_only"), [(None, False), (1, True), (2, False)])
def test_redacting_a_json_text_equals_redacting_its_values(value, indent, ascii_only):
    """A JSON document redacted as text (compare's document on stdout goes through
    `console_line` line by line) still parses, and its strings are what redacting the decoded
    strings gives (`redact_values`, the `--json` summaries): an escaped quote `\\"` inside a
    string is part of the URL, the unescaped `"` that ends the string is not."""
    document = {"system": value, "systems": [value, "plain"], "n": 3, value: {"k": value}}
    text = json.dumps(document, indent=indent, ensure_ascii=ascii_only)
    expected = redact_values(document)
    assert json.loads(redact_text(text)) == expected
    printed = "\n".join(console_line(line, None) for line in console_json(text).split("\n"))
    assert json.loads(printed) == expected
    for _, secrets, _ in SECRET_URLS:
        if any(secret in value for secret in secrets):
            assert all(secret not in printed for secret in secrets)
    for secret in ("cdsecret20", "quoted21", "AKIAMID22", "y'z", "ss23", "wörd", "aped"):
        assert secret not in printed


def test_a_secret_with_a_space_in_json_still_leaves_valid_json():
    """A URL ends at whitespace: a document holding one stays valid JSON (the text after the
    space is no URL any more)."""
    value = 'https://x.example/?token=abc", "injected": "1'
    text = json.dumps({"system": value, "n": 3}, indent=1)
    printed = json.loads(redact_text(text))
    assert set(printed) == {"system", "n"} and printed["n"] == 3
    assert "abc" not in printed["system"]


@pytest.mark.timeout(60)
def test_redaction_is_idempotent_and_linear():
    text = " ".join(url for url, _, _ in SECRET_URLS)
    once = redact_text(text)
    assert redact_text(once) == once
    hostile = 'https://h/?token=' + '"\\' * 200_000 + " " + "a:" * 200_000 + ' ' + '",' * 200_000
    assert len(redact_text(hostile)) < len(hostile)  # returns (a quadratic scan would not), masks


@pytest.mark.timeout(120)
def test_no_byte_of_a_random_secret_shows_in_any_quoting():
    """Seeded random secrets of URL punctuation, quotes and backslashes (no whitespace, no `=`:
    a secret holding `&name=` reads as a next parameter), as a password, a user or a secret
    parameter, in plain text, reprs, prose quotes and JSON documents: the markers that open
    and close each secret never show, and every JSON document still parses."""
    rng = random.Random(20261127)
    alphabet = "abcXYZ019\"'\\@&;#/:?,.)]}>`<%+-"
    forms = ["s3://AKIA:{}@bucket/k", "https://u:{}@h.example:8443/p?x=1", "https://h.example/p?token={}",
             "https://h.example/p?token={}&page=2", "https://h.example/p?a=1&X-Amz-Signature={}",
             "https://h.example/p#access_token={}", "admin:{}@head.example:10001"]
    templates = ["{}", "read {} now", "input {!r} missing", "({!r}, 3)", "see <{}>.", "x=`{}`", 'he said "{}", ok',
                 "'{}'", "{}.", '"{}",', "it's {}", 'say "hi" then {}', "[{!r}]"]
    for _ in range(3000):
        secret = "Q" + "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 10))) + "Z"
        url = rng.choice(forms).format(secret)
        text = rng.choice(templates).format(url)
        shown = [redact_url(url), redact_text(text)]
        for indent in (None, 1):
            document = json.dumps({"v": text, "l": [text, 1]}, indent=indent)
            shown.append(redact_text(document))
            json.loads(shown[-1])
        assert not any("Q" in out or "Z" in out for out in shown), (text, shown)


@pytest.mark.parametrize("text", [
    '{"a":"https://h.example/x","b":"s3://AKIA:runsecret1@bucket/k"}',
    '{"a":"https://h.example/x?a=1","b":"https://h.example/?sig=runsecret2"}',
    '{"a":"https://h.example/x","b":"admin:runsecret3@head.example"}',
    "see https://h.example/x,s3://AKIA:runsecret4@bucket/k now",
    "(https://h.example/x|https://h.example/p?a=1&b=2#c|s3://AKIA:runsecret5@bucket/k)",
    "https://h.example/x,1s3://AKIA:runsecret6@bucket/k",
    "https://h.example/p?token=ab#runsecret7https://h.example/x",
    '{"a":"https://h.example/?token=x:runsecret8&page=2","b":"a@b.example","c":"https://h.example/?sig=runsecret9"}',
    '{"a":"s3://AKIA:p@runsecret10@bucket/k","b":"https://h.example/?x=1&sig=runsecret11"}',
    "it's s3://AKIA:Q<@runsecret12\"<,`b:runsecret13@bucket/k",
    'x=https://h.example/p#f","x:y","https://h.example/p?token=Q%@\\+,runsecret14',
    "https://h.example/x|admin:runsecret15@head.example:10001|a@b.example",
])  # fmt: skip
def test_a_url_in_the_same_run_as_another_is_redacted_too(text):
    """URLs with no whitespace between them (compact JSON, a comma-joined list): a URL that
    lies in another's run is still redacted, and a compact JSON text keeps every key."""
    shown = redact_text(text)
    assert "runsecret" not in shown and "AKIA" not in shown, shown
    if text.startswith("{"):
        assert json.loads(shown) == redact_values(json.loads(text))


@pytest.mark.timeout(60)
def test_a_long_word_before_an_at_sign_costs_linear_time():
    """A long run of scheme characters (a base64 cell) in a text holding an `@` or a `://`
    elsewhere: no search that rescans the run from each of its characters (40,000 characters
    took 1.6 s, these 400,000 would take minutes: the timeout)."""
    for text in ("a" * 400_000 + " @", "a." * 200_000 + " ://", "a1" * 200_000 + " a@b",
                 "https://a" * 50_000, '"https://h/x",' * 30_000):
        assert redact_text(text).endswith(text[-3:])


@pytest.mark.parametrize("text", [
    "row 3 (id 'sys:a@b') failed", "id=system:model@v1.5", '{"id": "gen:run@2", "ok": true}',
    "ranked team:alpha@final, team:beta@semi", "at 12:30@2x",
])
def test_an_id_with_a_colon_and_an_at_sign_names_no_host_and_stays_readable(text):
    """Without a scheme, `a:b@c` is a credential only when `c` reads as a network host: a row id
    of that shape stays in the error that names it."""
    assert redact_text(text) == text


@pytest.mark.parametrize(("text", "secret"), [
    ("connect admin:hostsecret1@db.example.com now", "hostsecret1"),
    ("u:hostsecret2@10.0.0.1/x", "hostsecret2"),
    ("u:hostsecret3@minio:9000", "hostsecret3"),
    ("(u:hostsecret4@localhost)", "hostsecret4"),
    ("u:hostsecret5@[::1]:8080", "hostsecret5"),
    ('{"a": "admin:hostsecret6@head.example", "c": "a@b"}', "hostsecret6"),
    ("u:host@secret7@minio:9000", "secret7"),
])
def test_a_credential_before_a_network_host_is_masked_without_a_scheme(text, secret):
    shown = redact_text(text)
    assert secret not in shown and "***@" in shown, shown


@pytest.mark.parametrize(("value", "secret"), [
    ("line one\nadmin:escsecret1@db.example.com", "escsecret1"),  # `\n` before a bare credential
    ("\tKEY:escsecret2@minio:9000/x", "escsecret2"),
    ("\x1bu:escsecret3@10.0.0.1/x", "escsecret3"),  # a control character ends a token too
    ("\u00a0u:escsecret4@localhost", "escsecret4"),  # `\u00a0` in ASCII-only JSON
    ("\u00e9u:escsecret5@host.example", "escsecret5"),
    ("copy\ns3://AKIA:12/escsecret6@bucket/k", "escsecret6"),  # `\ns3://` read as the scheme `ns3`
    ("copy\u00a0s3://AKIA:12/escsecret7@bucket/k", "escsecret7"),
])
def test_a_credential_after_an_escaped_character_is_masked_in_json_and_repr(value, secret):
    """Found by fuzzing: in a JSON text or a repr, whitespace or a control character before a
    `user:password@host` token, or before `s3://`, is a backslash escape (`\\n`, `\\u00a0`), so
    the token no longer started after whitespace and its password was shown (and `\\ns3://` read
    as the scheme `ns3`, whose numeric password reads as a port). The raw string was masked."""
    assert secret not in redact_values(value)
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False), repr(value),
                 json.dumps({"error": value, "n": 1}, indent=2)):
        shown = redact_text(text)
        assert secret not in shown and "***@" in shown, (text, shown)
    document = {"error": value, "systems": [value, "plain"]}
    assert json.loads(redact_text(json.dumps(document, ensure_ascii=False))) == redact_values(document)


@pytest.mark.parametrize(("url", "secret"), [
    ("https://AKIA:\u00b2731905?@bucket/", "\u00b2731905"),  # a superscript two, then ASCII digits
    ("https://AKIA:\u0663\u0667\u0669/x@host.example/k", "\u0663\u0667\u0669"),  # Arabic-Indic digits
])
def test_a_password_of_unicode_digits_is_no_port(url, secret):
    """Found by fuzzing: `str.isdigit` is true for `\u00b2731905`, so such a password followed by
    `?` or `/` was read as a port and shown; a port is ASCII digits."""
    assert secret not in redact_url(url) and "***@" in redact_url(url)
    assert secret not in redact_text(f"cannot read {url}: denied")
    assert redact_url("https://host.example:8080/?a@b") == "https://host.example:8080/?a@b"  # a real port stays


@pytest.mark.parametrize("before", ["\u201c", "\u00ab", "\u2192", "\U0001f600", "\ud800", "\u202e", "e\u0301"])
@pytest.mark.parametrize("token", ["admin:quotesecret1@db.example.com", "KEY:quote@secret2@minio:9000/x",
                                   "AKIA:quotesecret3@mybucket/k"])
def test_a_credential_after_a_non_ascii_symbol_is_masked(before, token):
    """Found by fuzzing: a `user:password@host` token started only after whitespace, ASCII
    punctuation or a control, so one right after a curly quote (`“KEY:SECRET@host”`), a guillemet,
    an arrow, an emoji, a lone surrogate, a bidi control or a combining accent was shown whole.
    Any non-ASCII character that is no word character starts a token now; ASCII is read as before."""
    for text in (before + token, f"cannot read {before}{token}\u201d: denied"):
        shown = redact_text(text)
        assert "secret" not in shown and before + "***@" in shown, (text, shown)
    assert redact_text("\u201cid system:model@v2\u201d") == "\u201cid system:model@v2\u201d"


@pytest.mark.parametrize(("url", "redacted"), [
    ("https://[::1]:8080/p?a=1&token=ab@v6secret1#frag", "https://[::1]:8080/p?a=1&token=***#***"),
    ("https://[::1]/p?sig=ab@v6secret2", "https://[::1]/p?sig=***"),
    ("https://[fe80::1]:9000/p@x", "https://[fe80::1]:9000/p@x"),
    ("https://u:v6secret3@[::1]:8080/p", "https://***@[::1]:8080/p"),
])
def test_an_ipv6_host_is_no_userinfo(url, redacted):
    """Found by fuzzing: the colons of `[::1]:8080` were read as a userinfo's, so an `@` later in
    the URL ended a userinfo: the host was masked and the secret's end after the `@` was shown
    (`https://***@v6secret1#frag`)."""
    assert redact_url(url) == redacted
    assert redact_text(f"cannot read {url} - denied") == f"cannot read {redacted} - denied"


@pytest.mark.parametrize(("url", "redacted"), [
    ("https://h.example/p?next=https%3A%2F%2Fi.example%2Fx%3Fclient_secret%3Dnestsecret1&page=2",
     "https://h.example/p?next=***&page=2"),
    ("https://h.example/p?next=https://i.example/x?apikey=nestsecret2&page=2", "https://h.example/p?next=***&page=2"),
    ("https://h.example/p?next=/x?token=nestsecret3", "https://h.example/p?next=***"),
    ("https://h.example/p?url=https%3A%2F%2FKEY%3Anestsecret4%40h2.example%2F", "https://h.example/p?url=***"),
    ("https://h.example/p?next=https%253A%252F%252Fi.example%252F%253Ftoken%253Dnestsecret5&a=1",
     "https://h.example/p?next=***&a=1"),
    ("https://h.example/cb#state=x&redirect_uri=https%3A%2F%2Fi.example%2F%23access_token%3Dnestsecret6",
     "https://h.example/cb#state=x&redirect_uri=***"),
    ("https://h.example/p?next=https%3A%2F%2Fi.example%2Fx%3Fpage%3D2&q=a%3Db",  # nothing secret inside
     "https://h.example/p?next=https%3A%2F%2Fi.example%2Fx%3Fpage%3D2&q=a%3Db"),
])  # fmt: skip
def test_a_parameter_holding_a_url_with_a_secret_is_masked(url, redacted):
    """Found by fuzzing: a parameter whose value is itself a URL or a query (an OAuth
    `redirect_uri`, a proxy's `url=`), percent-encoded or not, showed that URL's secrets, since
    only the outer parameters' names were read (`redact_url`: a config's URL)."""
    assert redact_url(url) == redacted
    assert "nestsecret" not in redact_text(f"cannot read {url} - denied")


@pytest.mark.parametrize(("text", "redacted"), [
    ("HTTPSConnectionPool(host='h.example', port=443): Max retries exceeded with url: /p?token=pathsecret1&a=1 "
     "(Caused by X)",
     "HTTPSConnectionPool(host='h.example', port=443): Max retries exceeded with url: /p?token=***&a=1 (Caused by X)"),
    ("GET /b/k?X-Amz-Signature=pathsecret2 HTTP/1.1", "GET /b/k?X-Amz-Signature=*** HTTP/1.1"),
    ("redirected to '/cb#access_token=pathsecret3&state=1'", "redirected to '/cb#access_token=***&state=1'"),
    ('{"url": "/p/q?sig=pathsecret4", "n": 1}', '{"url": "/p/q?sig=***", "n": 1}'),
    ("see /data/x.parquet?raw and /a/b#c=1 now", "see /data/x.parquet?raw and /a/b#c=1 now"),
])  # fmt: skip
def test_a_request_target_without_a_host_loses_its_secrets(text, redacted):
    """Found by fuzzing: urllib3 (requests, huggingface_hub) reports `Max retries exceeded with
    url: /path?query`, the request target without scheme or host, and it was shown whole: a
    token starting with `/` that holds a `?` or `#` is read as a URL's path and query."""
    assert redact_text(text) == redacted
    assert json.loads(redact_text(json.dumps({"e": text}))) == {"e": redacted}


@pytest.mark.timeout(60)
def test_request_targets_cost_linear_time():
    for text in (" /" * 200_000 + "?", ",/a" * 200_000 + "?token=x", "\\n/a" * 200_000, "(/" + "a/" * 200_000 + "?"):
        assert redact_text(text).startswith(text[:2])


@pytest.mark.parametrize("name", ["private_key", "privateKey", "passphrase", "jwt", "AWSAccessKeyId", "access_key",
                                  "accessKey"])
def test_more_credential_parameter_names_are_masked(name):
    """Found by probing names beside the fuzzed ones: `?private_key=`, `?passphrase=`, `?jwt=`,
    and an access key id (`AWSAccessKeyId`, SigV2's form of what `X-Amz-Credential` carries)
    were shown."""
    url = f"https://h.example/p?a=1&{name}=namesecret1&page=2"
    assert redact_url(url) == f"https://h.example/p?a=1&{name}=***&page=2"
