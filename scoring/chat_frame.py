"""A chat template around one user turn, with the turn's content kept apart from the markup
(docs/metrics.md, "Prompted LM likelihood", G3; docs/security.md, "Special tokens in data").

Rendering the template around a text and tokenising the whole string would parse any
`<|im_end|>\\n<|im_start|>assistant\\n` inside the text into real turns. Instead the template is
rendered once around a placeholder (two different ones, which must give the same frame), the
rendering is cut at every occurrence of the placeholder, and each frame part is cut at its
control tokens. A prompt is then rendered for real (the template may strip, escape or
otherwise change its content); its rendered content is what lies between the frame parts, the
same at every occurrence. The ids: each control token of the frame as its id, and every run of
text between two of them (the frame's own text with the content inside it) tokenised
literally (`scoring.literal_tokens`), on its own, less the whitespace a control token marked
`lstrip` or `rstrip` takes from its side, as the tokenizer does.

Seams: the tokenizer itself splits a string at its special tokens and tokenises the runs
between them apart, so for byte-level BPE (GPT-2, Llama 3, Qwen) the ids of a prompt without
control-token strings are those of the whole rendered string. A Metaspace tokenizer that
prepends its `▁` only at the start of the string (`prepend_scheme: first`, Llama 2, Mistral)
differs: each run is tokenised as a string of its own, so it starts with `▁` where the whole
string had none (a run that starts with a space gets the same ids either way).
"""

from __future__ import annotations

from collections import Counter

from scoring.chat_render import ChatTemplateError, render_chat
from scoring.errors import UsageError
from scoring.literal_tokens import LiteralTokenizer

# digits survive what templates do to content (trim, escape, upper/lower, JSON); two of them
# expose a frame that depends on the content
PLACEHOLDERS = ("40912735861529307484", "73150864290371652918")
# the date a template that writes one (Llama 3.x: "Today Date: ..." from `date_string`, or from the
# clock when it is not given) renders, so a prompt's ids do not depend on the day it was scored;
# it is the value those templates fall back on without a clock
FIXED_DATE = "26 Jul 2024"
# whitespace as the tokenizers library (Rust's `char::is_whitespace`: Unicode White_Space) takes
# it beside an `lstrip`/`rstrip` token; Python's `str.strip` also takes U+001C-U+001F, which the
# tokenizers library keeps (a Python-backend tokenizer strips with `str.strip`, and so do we there)
UNICODE_WHITE_SPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
                       "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")


class ChatFrame:
    """`ids(content) -> (ids, problem)` for one user turn followed by the assistant's turn
    (`add_generation_prompt`)."""

    def __init__(self, tokenizer, model: str = "the model"):
        self.tokenizer = tokenizer
        self.model = model
        try:
            frames = [self._frame_parts(placeholder) for placeholder in PLACEHOLDERS]
        except ChatTemplateError as exc:
            raise UsageError(f"chat_template: the chat template of {model} cannot be used: {exc}") from None
        if frames[0] is None or frames[0] != frames[1]:
            raise UsageError(f"chat_template: the chat template of {model} does not write a user turn's content "
                             "as it is given, so its markup cannot be kept apart from the data (use chat_template: false)")
        self.literal = LiteralTokenizer(tokenizer, extra=frames[0])
        self._whitespace = UNICODE_WHITE_SPACE if getattr(tokenizer, "is_fast", False) else None
        self._set_frame(frames[0])

    def _set_frame(self, parts: list[str]) -> None:
        self.parts: list[str] = parts
        self.frame = [self.literal.split(part) for part in self.parts]
        # (lstrip, rstrip) of the frame's control tokens, read once: the tokenizer's table of added
        # tokens is rebuilt on every read (milliseconds with thousands of reserved tokens)
        decoder = self.tokenizer.added_tokens_decoder
        tokens = {item: decoder.get(item) for part in self.frame for item in part if isinstance(item, int)}
        self._strips = {item: (bool(getattr(token, "lstrip", False)), bool(getattr(token, "rstrip", False)))
                        for item, token in tokens.items()}

    def refresh(self) -> None:
        """The frame as the template renders it now. A template that reads the clock itself
        (`strftime_now` without `date_string`) renders another frame after midnight; a frame
        built the day before would make every later prompt "unlike the others" (a row error)."""
        try:
            parts = self._frame_parts(PLACEHOLDERS[0])
            if parts is not None and parts != self.parts and parts == self._frame_parts(PLACEHOLDERS[1]):
                self._set_frame(parts)
        except ChatTemplateError:  # a template that fails now fails each row's rendering too (a row error)
            pass

    def render(self, content: str) -> str:
        """The template around one user turn, as `apply_chat_template(..., tokenize=False,
        add_generation_prompt=True)` renders it, within the bounds of `scoring.chat_render`."""
        return render_chat(self.tokenizer, [{"role": "user", "content": content}], date_string=FIXED_DATE)

    def _frame_parts(self, placeholder: str) -> list[str] | None:
        template = self.tokenizer.chat_template
        if isinstance(template, str) and placeholder in template:
            return None
        parts = self.render(placeholder).split(placeholder)
        return parts if len(parts) >= 2 else None

    def content(self, content: str) -> str:
        """The content as the template renders it; ValueError when the rendering is not the
        frame around one text repeated at every placeholder."""
        rendered = self.render(content)
        count = len(self.parts) - 1
        extra = len(rendered) - sum(len(p) for p in self.parts)
        if extra >= 0 and extra % count == 0 and rendered.startswith(self.parts[0]):
            start = len(self.parts[0])
            inner = rendered[start : start + extra // count]
            if inner.join(self.parts) == rendered and not self._writes_markup(content, inner):
                return inner
        raise ValueError("is rendered by the chat template unlike other prompts (its markup depends on the "
                         "text), so the text cannot be kept apart from the markup")

    def _writes_markup(self, content: str, inner: str) -> bool:
        """Whether the template wrote control tokens into the content's place that the content
        does not hold (markup that depends on the text)."""
        pattern = self.literal.pattern
        if pattern is None:
            return False
        return bool(Counter(pattern.findall(inner)) - Counter(pattern.findall(content)))

    def ids(self, content: str) -> tuple[list[int], str | None]:
        """Prompt ids of one user turn holding `content` (module docstring), and a problem of
        the text (a control id its literal ids still hold, a frame that depends on it) or None."""
        return self.encode([content])[0]

    def encode(self, contents: list[str]) -> list[tuple[list[int], str | None]]:
        """`ids` of many contents, their text runs tokenised in one call."""
        from jinja2 import TemplateError

        self.refresh()
        streams: list[list[str | int] | str] = []
        for content in contents:
            try:
                inner = self.content(content)
            except ValueError as exc:
                streams.append(str(exc))
                continue
            except TemplateError as exc:  # the template's own `raise_exception`, for this text only
                streams.append(f"is refused by the chat template ({str(exc)[:200]})")
                continue
            stream: list[str | int] = list(self.frame[0])
            for part in self.frame[1:]:
                stream[-1] = stream[-1] + inner + part[0]  # the text run around the content, one literal piece
                stream += part[1:]
            streams.append(self._strip_around_controls(stream))
        texts = [item for stream in streams if not isinstance(stream, str) for item in stream if isinstance(item, str) and item]
        encoded = iter(self.literal.ids(texts))
        out: list[tuple[list[int], str | None]] = []
        for stream in streams:
            if isinstance(stream, str):
                out.append(([], stream))
                continue
            ids: list[int] = []
            problem = None
            for item in stream:
                if isinstance(item, int):
                    ids.append(item)
                elif item:
                    piece = next(encoded)
                    problem = problem or self.literal.problem(item, piece)
                    ids += piece
            out.append(([], problem) if problem is not None else (ids, None))
        return out

    def _strip_around_controls(self, stream: list[str | int]) -> list[str | int]:
        """Whitespace next to a control token marked `lstrip`/`rstrip` dropped from the runs
        beside it, as the tokenizer does in a whole string (Phi-3's `<|end|>` eats the newline
        after it), with the whitespace the tokenizer's backend strips (`UNICODE_WHITE_SPACE`)."""
        out = list(stream)
        space = self._whitespace
        for k, item in enumerate(out):
            if isinstance(item, int):
                lstrip, rstrip = self._strips[item]
                if k > 0 and lstrip:
                    out[k - 1] = out[k - 1].rstrip(space)
                if k + 1 < len(out) and rstrip:
                    out[k + 1] = out[k + 1].lstrip(space)
        return out

    def describe(self) -> str:
        return "chat frame: template markup parsed, text runs between its control tokens literal"
