"""YAML for configuration: job configs, `--params @file`, `--set` and `--param` values.

`yaml.safe_load` builds no objects, but it still lets a file a stranger wrote do harm:
- aliases are shared references, so twenty lines (`&a [*b, *b, ...]`, "billion laughs") load
  into a value that reads as 10^9 items to whatever walks it (validation, error messages,
  signatures, the manifest's `json.dumps`), and an alias inside its own anchor is a cycle;
- a key written twice keeps the last value without a word (`metrics:` twice runs only the
  second list);
- an integer of more than 4,300 digits raises a bare `ValueError`, nesting hundreds deep a
  `RecursionError` in the first walker;
- an explicit tag on a scalar it cannot read (`!!int ''`, `!!bool x`, `!!timestamp 1`) raises a
  bare `IndexError`, `KeyError` or `AttributeError` from PyYAML's constructors;
- libyaml cannot encode a lone surrogate (what a byte of a command line that is not UTF-8
  decodes to, `--set x=$'\\xff'`) and raised a bare `UnicodeEncodeError`.

`load` reads the node graph first (libyaml's parser when installed, which also caps nesting
at 1,000) and refuses, with the file and line, a document whose aliases expand to more than
`MAX_EXPANDED` values, one that is nested deeper than `MAX_DEPTH`, an alias cycle and a
mapping that names one key twice (merge keys `<<` may still be overridden, as YAML means);
only then are the values built, a tagged scalar that its tag cannot read refused with its line.
Text holding a lone surrogate is no YAML (`YamlSyntaxError`, as PyYAML's own reader says of
it). Every refusal is one `UsageError` line (exit 2).
"""

from __future__ import annotations

from typing import Any

import yaml

from scoring.cell_types import first_lone_surrogate
from scoring.display_names import quoted
from scoring.errors import UsageError

#: values a document may expand to through its aliases (a plain document of any size is fine)
MAX_EXPANDED = 100_000
#: nesting of mappings and lists in a config (a job config needs about 6)
MAX_DEPTH = 64

_BASE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


class YamlSyntaxError(UsageError):
    """The text is no YAML at all (callers that read a bare word as text catch this one)."""


class _Loader(_BASE):  # type: ignore[misc, valid-type]
    """The safe loader, refusing a key a mapping names twice (`construct_mapping`)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the base class says so with its mark
                    break
                if first is not key_node:
                    raise _Refused(f"key {key!r} is given twice (lines {first.start_mark.line + 1} and "
                                   f"{key_node.start_mark.line + 1}); keep one", key_node)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node, deep=False):
        """The base class's, refusing with its line a scalar its explicit tag cannot read
        (PyYAML's constructors index, look up or match `!!int ''`, `!!bool x`,
        `!!timestamp 1` without a check)."""
        try:
            return super().construct_object(node, deep=deep)
        except (IndexError, KeyError, AttributeError):
            tag = node.tag.replace("tag:yaml.org,2002:", "!!")
            raise _Refused(f"{quoted(node.value)} is no valid {tag} value", node) from None


class _Refused(Exception):
    def __init__(self, message: str, node=None):
        super().__init__(message)
        self.node = node


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [item for pair in node.value for item in pair]
    return []


def _check_graph(root) -> None:
    """Expanded size, depth and cycles of a node graph, each node visited once (iterative:
    the check itself never recurses)."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}
    distinct = 0
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            on_path.discard(key)
            kids = _children(node)
            size[key] = 1 + sum(size[id(kid)] for kid in kids)
            height[key] = 1 + max((height[id(kid)] for kid in kids), default=0)
            if height[key] > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels", node)
            if size[key] > MAX_EXPANDED and size[key] > distinct:
                raise _Refused(f"its aliases expand to more than {MAX_EXPANDED:,} values (each use of an alias "
                               f"copies its anchor); write the values out or use fewer aliases", node)
            continue
        if key in size:
            continue
        if key in on_path:
            raise _Refused("an alias refers to a value that contains it (a cycle)", node)
        on_path.add(key)
        distinct += 1
        stack.append((node, True))
        stack.extend((kid, False) for kid in _children(node) if id(kid) not in size)


def _where(source: str, node) -> str:
    mark = getattr(node, "start_mark", None)
    return f"{source}, line {mark.line + 1}" if mark is not None else source


def load(text: str, source: str) -> Any:
    """The value of one YAML document `text` (JSON included); `source` names it in errors
    (a file path, `--params`, `--set pool.max_size`). Raises `UsageError` (`YamlSyntaxError`
    when the text does not parse)."""
    surrogate = first_lone_surrogate(text)
    if surrogate is not None:  # libyaml would raise a bare UnicodeEncodeError
        line = text.count("\n", 0, surrogate) + 1
        raise YamlSyntaxError(f"{source}, line {line}: not valid YAML: it holds a byte that is not UTF-8 "
                              f"(shown as {text[surrogate]!r})")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_graph(node)
        return loader.construct_document(node)
    except _Refused as exc:
        raise UsageError(f"{_where(source, exc.node)}: {exc}") from None
    except yaml.YAMLError as exc:
        parts = [getattr(exc, "context", None), getattr(exc, "problem", None)]
        first = "; ".join(part for part in parts if part) or (str(exc).splitlines() or [type(exc).__name__])[0]
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{source}, line {mark.line + 1}" if mark is not None else source
        raise YamlSyntaxError(f"{where}: not valid YAML: {first}") from None
    except ValueError as exc:  # an integer longer than Python converts (4,300 digits)
        raise UsageError(f"{source}: a value cannot be read ({' '.join(str(exc).split()) or type(exc).__name__})") from None
    except RecursionError:
        raise UsageError(f"{source}: nested too deep to read") from None
    finally:
        loader.dispose()
