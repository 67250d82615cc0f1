"""A model's chat template rendered within bounds (docs/security.md, "Models").

A chat template is Jinja code from the model folder. transformers renders it in Jinja's
immutable sandbox, which keeps it from Python's internals but not from loops, string products
or output that never end: `{{ 'x' * 10**10 }}` allocates ten gigabytes (while the template is
compiled, by constant folding), two nested loops over `range(100000)` run for hours. Here the
same template, with the same globals and filters as transformers gives it (`tojson`,
`raise_exception`, `strftime_now`, `namespace`, the `generation` tag), is compiled without
constant folding in a sandbox that counts its work:

- every loop iteration, call, filter and output piece is one step, and every `CHARS_PER_STEP`
  characters or items of a value a call, filter or operator builds one more; a rendering may
  take `MAX_STEPS` of them (so it builds at most about 100 million characters in all);
- no string, list or output it builds may pass `MAX_CHARS` items: `*`, `+` and `%` are checked
  before they run, a call's or filter's result after it; calls that can grow a value far past
  their inputs in one go (`replace`, `join`, `indent`, `wordwrap`, widths and paddings, `**`)
  are checked on their arguments first, and integer arguments past `MAX_CHARS` are refused
  (`tojson`'s indent past `MAX_JSON_INDENT`);
- `lipsum` is not there, nor are the str methods `translate` and `expandtabs`; the template
  source may be `MAX_SOURCE_CHARS` long.

Any failure of the template (its own `raise_exception`, a budget passed, an exception inside
it, an unparsable template) is a `ChatTemplateError` (a Jinja `TemplateError`) with one line.
"""

from __future__ import annotations

import contextvars
import functools
import re

import jinja2
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_STEPS = 100_000
# far above a prompt (a cell is at most 1,000,000 bytes by default), far below a memory blow-up
MAX_CHARS = 16_000_000
MAX_SOURCE_CHARS = 1_000_000
MAX_INT_BITS = 4_096
MAX_JSON_INDENT = 64
CHARS_PER_STEP = 1_024
# a width or precision of seven digits or more in a format string (`%9999999s`, `{:>9999999}`)
_WIDE_FORMAT = re.compile(r"\d{7,}")
_REFUSED_STR_METHODS = frozenset({"translate", "expandtabs", "maketrans"})


class ChatTemplateError(jinja2.TemplateError):
    """The chat template failed or passed a bound; the message is one line."""


class _Budget:
    def __init__(self) -> None:
        self.steps = 0

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > MAX_STEPS:
            raise ChatTemplateError(f"the chat template takes more than {MAX_STEPS:,} steps (loop iterations, calls, "
                                    f"output pieces, {CHARS_PER_STEP:,} characters built) to render one prompt")


_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("ctgscore_chat_budget", default=None)


def _step(count: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.step(count)


def _too_big(what: str, size: int) -> ChatTemplateError:
    return ChatTemplateError(f"the chat template builds {what} of {size:,} characters or items (at most {MAX_CHARS:,})")


def _check_size(value, what: str = "a value"):
    """`value` if it is within `MAX_CHARS` (and `MAX_INT_BITS`); a value built costs one step
    per `CHARS_PER_STEP` of its length, so a loop that builds large values stops sooner."""
    if isinstance(value, (str, list, tuple, dict, bytes)):
        if len(value) > MAX_CHARS:
            raise _too_big(what, len(value))
        _step(len(value) // CHARS_PER_STEP)
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_INT_BITS:
        raise ChatTemplateError(f"the chat template builds an integer of {value.bit_length():,} bits (at most {MAX_INT_BITS:,})")
    return value


def _check_arguments(args, kwargs) -> None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_CHARS:
            raise ChatTemplateError(f"the chat template passes the number {value} (at most {MAX_CHARS:,})")
        if isinstance(value, tuple):
            _check_arguments(value, {})


def _check_format(text) -> None:
    if isinstance(text, str) and _WIDE_FORMAT.search(text):
        raise ChatTemplateError("the chat template formats with a width or precision of 1,000,000 or more")


def _length(value) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _materialised(items):
    """The items a `join` is given, as a list when they come as an iterator (`map`, `select`),
    so that their joined length is known before the join."""
    return items if isinstance(items, (str, list, tuple, dict)) or not hasattr(items, "__iter__") else list(items)


def _grown_size(name: str, subject, args, kwargs, method: bool) -> int:
    """What a str method (`method`) or a filter that can outgrow its inputs would build (0: not one)."""
    def arg(position, key, default=None):
        return args[position] if len(args) > position else kwargs.get(key, default)

    if name == "join":  # str.join(items), or the filter: items|join(separator)
        items, separator = (arg(0, "iterable", ()), subject) if method else (subject, arg(0, "d", ""))
        if isinstance(items, (str, list, tuple)) and isinstance(separator, str):
            return sum(len(str(item)) for item in items) + len(separator) * max(len(items) - 1, 0)
        return 0
    if name == "tojson":
        indent = arg(0, "indent", None)
        if isinstance(indent, str):
            indent = len(indent)
        if isinstance(indent, int) and indent > MAX_JSON_INDENT:
            raise ChatTemplateError(f"the chat template indents JSON by {indent:,} (at most {MAX_JSON_INDENT})")
        return 0
    if not isinstance(subject, str):
        return 0
    if name == "replace":
        old, new = str(arg(0, "old", "")), str(arg(1, "new", ""))
        return len(subject) + (subject.count(old) if old else len(subject) + 1) * len(new)
    if name == "indent":
        width = arg(0, "width", 4)
        step = len(width) if isinstance(width, str) else int(width or 0)
        return len(subject) + (subject.count("\n") + 1) * max(step, 0)
    if name == "wordwrap":
        return len(subject) * (1 + len(str(arg(3, "wrapstring", "\n") or "\n")))
    return 0


def _checked_call(name: str, call, subject, args, kwargs, method: bool):
    """Run one call or filter counted, its arguments and its result checked."""
    _step()
    _check_arguments(args, kwargs)
    if name in ("format", "format_map"):
        _check_format(subject)
    grown = _grown_size(name, subject, args, kwargs, method)
    if grown > MAX_CHARS:
        raise _too_big(f"a string ({name})", grown)
    return _check_size(call(), f"a value ({name})")


def _checked_filter(name: str, function):
    @functools.wraps(function)
    def checked(*args, **kwargs):
        # filters get the value first, or the context/environment and then the value
        values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment, jinja2.nodes.EvalContext))]
        subject = values[0] if values else None
        if name == "join" and values:
            subject = _materialised(subject)
            args = tuple(subject if a is values[0] else a for a in args)
        return _checked_call(name, lambda: function(*args, **kwargs), subject, values[1:], kwargs, method=False)

    return checked


def _loop_items(iterable):
    """The items of a `{% for %}` loop, one step each."""
    for item in iterable:
        _step()
        yield item


def _bounded_join(pieces) -> str:
    """The environment's `concat`: the output of a template, macro or block, counted."""
    out, total = [], 0
    for piece in pieces:
        _step()
        total += len(piece)
        if total > MAX_CHARS:
            raise ChatTemplateError(f"the chat template writes more than {MAX_CHARS:,} characters")
        out.append(piece)
    return "".join(out)


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox with the bounds of the module docstring."""

    intercepted_binops = frozenset({"*", "**", "+", "%"})
    concat = staticmethod(_bounded_join)

    def call_binop(self, context, op, left, right):
        _step()
        if op == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(times, int) and len(seq) * max(times, 0) > MAX_CHARS:
                    raise _too_big("a sequence", len(seq) * times)
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_INT_BITS:
                raise ChatTemplateError(f"the chat template builds an integer of more than {MAX_INT_BITS:,} bits")
        elif op == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1:
            if right * left.bit_length() > MAX_INT_BITS:
                raise ChatTemplateError(f"the chat template builds an integer of more than {MAX_INT_BITS:,} bits")
        elif op == "+" and _length(left) + _length(right) > MAX_CHARS:
            raise _too_big("a sequence", _length(left) + _length(right))
        elif op == "%" and isinstance(left, str):
            _check_format(left)
            _check_arguments(right if isinstance(right, tuple) else (right,), {})
        return _check_size(super().call_binop(context, op, left, right))

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        name = getattr(__obj, "__name__", "")
        subject = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
        if isinstance(subject, str) and name in _REFUSED_STR_METHODS:
            raise ChatTemplateError(f"the chat template calls str.{name}, which is not allowed")
        if isinstance(subject, str) and name == "join" and args:
            args = (_materialised(args[0]), *args[1:])
        return _checked_call(name, lambda: ImmutableSandboxedEnvironment.call(__self, __context, __obj, *args, **kwargs),
                             subject, args, kwargs, method=isinstance(subject, str))

    def _parse(self, source, name, filename):
        """The template's tree with every loop's items counted and every `~` checked."""
        tree = super()._parse(source, name, filename)
        for loop in list(tree.find_all(nodes.For)):
            loop.iter = nodes.Filter(loop.iter, "ctgscore_loop_items", [], [], None, None, lineno=loop.lineno)
        for parent in list(tree.find_all(nodes.Node)):
            for field, value in parent.iter_fields():
                if isinstance(value, nodes.Concat):
                    setattr(parent, field, nodes.Filter(value, "ctgscore_checked", [], [], None, None, lineno=value.lineno))
                elif isinstance(value, list):
                    value[:] = [nodes.Filter(item, "ctgscore_checked", [], [], None, None, lineno=item.lineno)
                                if isinstance(item, nodes.Concat) else item for item in value]
        return tree


@functools.lru_cache(maxsize=1)
def _reference_environment():
    """The environment transformers renders chat templates in (its globals, filters, tags)."""
    from transformers.utils.chat_template_utils import _compile_jinja_template

    return _compile_jinja_template("").environment


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    """`source` compiled in a `BoundedSandbox` dressed as transformers' environment."""
    if not isinstance(source, str):
        raise ChatTemplateError("the chat template is not a string")
    if len(source) > MAX_SOURCE_CHARS:
        raise ChatTemplateError(f"the chat template is {len(source):,} characters long (at most {MAX_SOURCE_CHARS:,})")
    reference = _reference_environment()
    env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, optimized=False,
                         extensions=[type(extension) for extension in reference.extensions.values()])
    env.globals.update({k: v for k, v in reference.globals.items() if k != "lipsum"})
    env.globals.pop("lipsum", None)
    env.filters.update(reference.filters)
    env.filters = {name: _checked_filter(name, function) for name, function in env.filters.items()}
    env.filters["ctgscore_loop_items"] = _loop_items
    env.filters["ctgscore_checked"] = _check_size
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ChatTemplateError(f"the chat template does not parse (line {exc.lineno}: {exc.message})") from None
    except ChatTemplateError:
        raise
    except Exception as exc:  # noqa: BLE001 - anything the compiler meets in a hostile template
        raise ChatTemplateError(f"the chat template does not compile ({type(exc).__name__}: {_one_line(exc)})") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


def render_chat(tokenizer, messages: list[dict], **values) -> str:
    """The tokenizer's chat template rendered around `messages` with `add_generation_prompt`,
    as `tokenizer.apply_chat_template(..., tokenize=False)` renders it, within the bounds."""
    try:
        source = tokenizer.get_chat_template()
    except ValueError as exc:
        raise ChatTemplateError(_one_line(exc)) from None
    template = compile_template(source)
    budget = _BUDGET.set(_Budget())
    try:
        arguments = {**tokenizer.special_tokens_map, **values}
        return template.render(messages=messages, tools=None, documents=None, add_generation_prompt=True, **arguments)
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:  # the template's own raise_exception, a sandbox refusal
        raise ChatTemplateError(_one_line(exc) or type(exc).__name__) from None
    except RecursionError:
        raise ChatTemplateError("the chat template recurses too deeply") from None
    except MemoryError:
        raise ChatTemplateError("the chat template ran out of memory") from None
    except Exception as exc:  # noqa: BLE001 - any error inside a hostile template is the template's
        raise ChatTemplateError(f"the chat template fails ({type(exc).__name__}: {_one_line(exc)})") from None
    finally:
        _BUDGET.reset(budget)

