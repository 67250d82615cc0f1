"""Tokenising text from a dump as text: no string in it becomes a control token
(docs/security.md, "Special tokens in data").

A tokenizer called as usual parses the special-token strings it finds inside a text
(`<|endoftext|>`, `</s>`, `<|im_end|>`, `<|eot_id|>`, ...) into their special ids, so a text
could end a document, open a chat turn or pad itself by writing a string. `LiteralTokenizer`
tokenises with special-token parsing off (`split_special_tokens=True`), so such a string
becomes the pieces of its characters, as any other text does; a text without such strings
gets the ids it always had.

Two cases that switch does not cover are found, never passed on: a vocabulary that yields a
control piece from plain characters (a unigram model converted from sentencepiece holds `</s>`
as an ordinary piece), and a non-special added token that the chat template writes (the
switch skips only special tokens). A text whose literal ids still hold a control id is a
problem of that text (`LiteralTokenizer.problem`): its row's error, never a control token.

Control tokens: every special token but the unknown token (plain text yields it for
characters the vocabulary lacks), and every added token the chat template writes, in its
source or in what it renders (`extra`).
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence


def _template_text(tokenizer) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates
        return "\0".join(str(t) for t in template.values())
    return template if isinstance(template, str) else ""


def _added_tokens(tokenizer) -> dict:
    """The tokenizer's {id: added token}, or {} where it keeps none (mistral-common's backend
    raises NotImplementedError: its special tokens come from `all_special_tokens`)."""
    try:
        return getattr(tokenizer, "added_tokens_decoder", None) or {}
    except NotImplementedError:
        return {}


def control_tokens(tokenizer, extra: Iterable[str] = ()) -> dict[str, int]:
    """{string: id} of the tokenizer's control tokens (module docstring); `extra`: rendered
    template text in which non-special added tokens count as control tokens too."""
    written = "\0".join([_template_text(tokenizer), *extra])
    found: dict[str, int] = {}
    for index, token in _added_tokens(tokenizer).items():
        content = str(getattr(token, "content", token))
        if getattr(token, "special", False) or (content.strip() and content in written):
            found[content] = int(index)
    for content, index in zip(tokenizer.all_special_tokens, tokenizer.all_special_ids):
        found.setdefault(str(content), int(index))
    unknown = tokenizer.unk_token_id
    return {content: index for content, index in found.items() if content and index != unknown}


def control_pattern(strings: Iterable[str]) -> re.Pattern:
    """A pattern matching the longest of `strings` that starts at a position (as a tokenizer
    matches its added tokens), built as a trie: one branch per distinct next character, so a
    text is scanned in one step per character whatever the number of strings. (An alternation
    of all of them tried every string at every `<`: 2 s per 100,000 characters of hostile
    text with 6,000 reserved tokens.)"""
    trie: dict = {}
    for text in strings:
        node = trie
        for ch in text:
            node = node.setdefault(ch, {})
        node[None] = {}  # a string ends here

    def branches(node: dict) -> str:
        chain = ""  # characters with no choice after them, walked without recursing
        while None not in node and len(node) == 1:
            (ch, node), = node.items()
            chain += re.escape(ch)
        options = [re.escape(ch) + branches(child) for ch, child in sorted((c, n) for c, n in node.items() if c is not None)]
        if not options:
            return chain
        body = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        return chain + (f"(?:{body})?" if None in node else body)  # greedy: the longer string first

    return re.compile(branches(trie))


class LiteralTokenizer:
    """`tokenizer` for hostile text: `ids(texts)` with special-token parsing off, no special
    tokens added; `problem(text, ids)` says when the ids still hold a control token; `split`
    cuts a trusted text (a chat template's rendering) at its control tokens."""

    def __init__(self, tokenizer, extra: Iterable[str] = ()):
        self.tokenizer = tokenizer
        self.controls = control_tokens(tokenizer, extra)
        self.control_ids = frozenset(self.controls.values())
        # mistral-common's backend refuses the switch: it never parses control tokens from text
        # (`problem` still checks its ids)
        self._switch = {} if type(tokenizer).__name__ == "MistralCommonBackend" else {"split_special_tokens": True}
        self.pattern = control_pattern(self.controls) if self.controls else None

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Literal ids of each text (module docstring); check them with `problem`."""
        if not texts:
            return []
        encoded = self.tokenizer(list(texts), add_special_tokens=False, **self._switch)["input_ids"]
        return [list(row) for row in encoded]

    def first_control(self, text: str) -> str | None:
        """The first control-token string written in `text`, or None."""
        found = self.pattern.search(text) if self.pattern is not None else None
        return found.group() if found else None

    def problem(self, text: str, ids: Sequence[int]) -> str | None:
        """Why `ids` (the literal ids of `text`) cannot stand for the text, or None: a control id
        among them, which this tokenizer yields even with special-token parsing off."""
        if not self.control_ids.intersection(ids):
            return None
        found = self.first_control(text)
        what = repr(found) if found else f"id {next(i for i in ids if i in self.control_ids)}"
        return (f"holds the control token {what[:80]}, which this tokenizer yields even from plain text "
                f"(scored texts never carry control tokens)")

    def split(self, text: str) -> list[str | int]:
        """A trusted text cut at its control tokens: [text, id, text, id, ..., text]."""
        if self.pattern is None:
            return [text]
        out: list[str | int] = []
        start = 0
        for match in self.pattern.finditer(text):
            out += [text[start:match.start()], self.controls[match.group()]]
            start = match.end()
        return out + [text[start:]]

    def describe(self) -> str:
        """For signatures: how texts are tokenised."""
        return "literal (special-token strings in data are text; split_special_tokens)"
