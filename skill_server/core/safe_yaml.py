"""Loading untrusted YAML safely, in the dialect of whoever reads the file for real.

Two readers meet in AgentJet's pipeline and disagree on some scalars, so the loader takes a dialect:

* ``"omegaconf"`` (the default: every file Hydra composes, and configs in general): no timestamp type,
  OmegaConf's extra float spellings (``1e-5`` is a float), a duplicate key is an error, and only
  JSON-like values (explicit ``!!set``, ``!!omap``, ``!!pairs``, ``!!binary``, ``!!timestamp`` are
  refused); integers must fit in 64 bits.
* ``"pyyaml"``: exactly what ``yaml.safe_load`` returns (AgentJetJob reads a base YAML that way before
  its round trip through OmegaConf, see ``agentjet/yamltypes.py``): PyYAML's scalar rules, the last of
  duplicate keys wins, every safe tag is constructed (callers refuse what they cannot carry).

Both are bounded the same way (file size, alias references, expanded size, nesting depth, digits of an
integer), and every problem is one ``ToolInputError`` line naming the field and the place in the text.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from skill_server.core.errors import ToolInputError
from skill_server.core.fsutil import read_text_bounded

MAX_YAML_BYTES = 4 * 1024 * 1024
MAX_ALIASES = 1000
MAX_EXPANDED_NODES = 500_000
MAX_DEPTH = 100
#: Integers must fit in 64 bits in the omegaconf dialect: what configs, the engine and its tensors can hold.
MAX_ABS_INT = 2**63 - 1

Dialect = Literal["omegaconf", "pyyaml"]
FLOAT_TAG = "tag:yaml.org,2002:float"
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_REFUSED_TAGS = ("tag:yaml.org,2002:set", "tag:yaml.org,2002:omap", "tag:yaml.org,2002:pairs",
                 "tag:yaml.org,2002:binary", _TIMESTAMP)
#: OmegaConf's float rule, the one place it is written down: besides YAML 1.1's floats, digits with an
#: exponent and no dot (``1e5``), an exponent whose sign is optional, a leading dot, base-60 floats and
#: the inf/nan words (first match wins after PyYAML's own resolvers).
OMEGACONF_FLOAT = re.compile(r"""^(?:
     [-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""", re.VERBOSE | re.ASCII)
FLOAT_FIRST_CHARS = "-+0123456789."


class PyYAMLLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s reading, bounded: alias references, nesting depth, digits of an integer."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.alias_count = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.alias_count += 1
            if self.alias_count > MAX_ALIASES:
                raise ComposerError(None, None, f"more than {MAX_ALIASES} alias references", self._next_mark())
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", self._next_mark())
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def _next_mark(self) -> Any:
        """Where the next event starts: the position an error about it names."""
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]  # types-PyYAML leaves it untyped

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        try:
            return self.construct_yaml_int(node)
        except ValueError:  # Python refuses to parse integers of thousands of digits
            raise ConstructorError(None, None, "integer with too many digits", node.start_mark) from None


PyYAMLLoader.add_constructor("tag:yaml.org,2002:int", PyYAMLLoader.construct_bounded_int)


def parse_events(text: str) -> list[yaml.Event]:
    """The parser's events for ``text`` (reader, scanner and parser: most of what loading costs), to compose in
    more than one dialect (``replaying``) without reading the text again. Raises as loading would."""
    loader = PyYAMLLoader(text)
    try:
        events = []
        while loader.check_event():
            events.append(loader.get_event())  # type: ignore[no-untyped-call]  # PyYAML ships no annotations
        return events
    finally:
        loader.dispose()


class OmegaConfLoader(PyYAMLLoader):
    """OmegaConf's reading: its scalar rules, duplicate keys refused, JSON-like values, 64-bit integers."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if key_node.tag == yaml.resolver.BaseResolver.DEFAULT_SCALAR_TAG:
                if key_node.value in seen:
                    raise ConstructorError(None, None, f"duplicate key {key_node.value!r}", key_node.start_mark)
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        value = super().construct_bounded_int(node)
        if abs(value) > MAX_ABS_INT:
            raise ConstructorError(None, None, "integer out of range (more than 64 bits)", node.start_mark)
        return value

    def refuse_tag(self, node: yaml.Node) -> Any:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ConstructorError(None, None, f"the tag {tag} is not supported (config values are mappings, lists, "
                                           "strings, numbers, booleans or null)", node.start_mark)


OmegaConfLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != _TIMESTAMP]
    for first, resolvers in PyYAMLLoader.yaml_implicit_resolvers.items()
}
OmegaConfLoader.add_implicit_resolver(FLOAT_TAG, OMEGACONF_FLOAT, list(FLOAT_FIRST_CHARS))
OmegaConfLoader.add_constructor("tag:yaml.org,2002:int", OmegaConfLoader.construct_bounded_int)
for _tag in _REFUSED_TAGS:
    OmegaConfLoader.add_constructor(_tag, OmegaConfLoader.refuse_tag)

class _Replay(PyYAMLLoader):
    """A loader whose parser end answers from recorded events (``parse_events``) instead of reading a text."""

    def __init__(self, events: list[yaml.Event]) -> None:  # no reader, scanner or parser: the events stand in
        self._events = events
        self._next = 0
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self.alias_count = 0
        self.depth = 0

    def check_event(self, *choices: Any) -> bool:
        if self._next >= len(self._events):
            return False
        return not choices or isinstance(self._events[self._next], choices)

    def peek_event(self) -> Any:
        return self._events[self._next] if self._next < len(self._events) else None

    def get_event(self) -> Any:
        event = self.peek_event()
        self._next += 1
        return event


class _ReplayPyYAML(_Replay):
    pass


class _ReplayOmegaConf(_Replay, OmegaConfLoader):
    pass


def replaying(loader: type[PyYAMLLoader], events: list[yaml.Event]) -> PyYAMLLoader:
    """A ``loader`` (a dialect: its resolver, constructors and bounds) that composes ``events`` already parsed from
    a text: what ``loader(text)`` loads, errors included, since the parse is the same in every dialect."""
    return (_ReplayOmegaConf if issubclass(loader, OmegaConfLoader) else _ReplayPyYAML)(events)


_LOADERS: dict[str, type[PyYAMLLoader]] = {"omegaconf": OmegaConfLoader, "pyyaml": PyYAMLLoader}


def _check_expanded_size(data: Any, field: str) -> None:
    """Aliases share objects; a dump or deep copy would expand them. Refuse 'billion laughs' trees."""
    budget = MAX_EXPANDED_NODES
    stack = [data]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise ToolInputError(
                f"YAML expands to more than {MAX_EXPANDED_NODES} nodes (alias bomb or oversized document)", field=field
            )
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def parse_yaml_text(text: str, *, field: str, source: str = "the text", dialect: Dialect = "omegaconf") -> Any:
    """Parse YAML text in ``dialect`` with the limits above; errors name ``field`` and say where."""
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        raise ToolInputError(f"{source} is larger than {MAX_YAML_BYTES // (1024 * 1024)} MiB", field=field)
    loader: PyYAMLLoader | None = None
    try:
        loader = _LOADERS[dialect](text)  # the reader checks for control characters here
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ToolInputError(f"{source} is not valid YAML{yaml_error_text(exc)}", field=field) from None
    except RecursionError:
        raise ToolInputError(f"{source} is nested too deeply", field=field) from None
    except (ValueError, OverflowError, TypeError) as exc:
        raise ToolInputError(f"{source} is not usable YAML: {' '.join(str(exc).split())}", field=field) from None
    finally:
        if loader is not None:
            loader.dispose()
    _check_expanded_size(data, field)
    return data


def yaml_error_text(exc: yaml.YAMLError) -> str:
    """Where and what, e.g. `` at line 3, column 1: found character '\\t' that cannot start any token``."""
    return f"{_where(exc)}: {_problem(exc)}"


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    if mark is not None:
        return f" at line {mark.line + 1}, column {mark.column + 1}"
    position = getattr(exc, "position", None)  # a ReaderError (control character, bad encoding)
    return f" at character {position}" if isinstance(position, int) else ""


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        char = exc.character
        code = ord(char) if isinstance(char, str) else char
        shown = f"{code:#04x}" if isinstance(code, int) else repr(code)
        return f"it contains the unprintable character {shown}"
    problem = getattr(exc, "problem", None) or str(exc)
    return " ".join(str(problem).split())


def load_yaml_file(path: str | Path, *, field: str, require_mapping: bool = True,
                   dialect: Dialect = "omegaconf") -> Any:
    """Read and parse a YAML file; a missing, unreadable, oversized or non-mapping file is a clear error."""
    p, text = read_text_bounded(path, field=field, max_bytes=MAX_YAML_BYTES)
    data = parse_yaml_text(text, field=field, source=str(p), dialect=dialect)
    if data is None:
        data = {}
    if require_mapping and not isinstance(data, dict):
        raise ToolInputError(f"{p} must hold a YAML mapping at top level, not a {type(data).__name__}", field=field)
    return data


def key_lines_of_text(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line of that key in YAML text (mappings only, the first occurrence wins); {} for
    text that is not YAML. Bounded like every other read: the size, aliases (each node walked once) and a
    budget of keys."""
    if len(text.encode("utf-8", errors="replace")) > MAX_YAML_BYTES:
        return {}
    try:
        loader = PyYAMLLoader(text)
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except (yaml.YAMLError, RecursionError, ValueError):
        return {}
    out: dict[str, int] = {}
    budget = 200_000
    seen: set[int] = set()
    stack: list[tuple[Any, str]] = [(node, "")]
    while stack and budget > 0:
        n, prefix = stack.pop()
        if not isinstance(n, yaml.MappingNode) or id(n) in seen:
            continue
        seen.add(id(n))
        for k, v in n.value:
            budget -= 1
            if isinstance(k, yaml.ScalarNode):
                dotted = f"{prefix}{k.value}"
                out.setdefault(dotted, k.start_mark.line + 1)
                stack.append((v, dotted + "."))
    return out


def key_lines(path: str | Path) -> dict[str, int]:
    """:func:`key_lines_of_text` of a file ({} for a file that is missing, not regular, too large or unreadable)."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size > MAX_YAML_BYTES:
            return {}
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    return key_lines_of_text(text)
