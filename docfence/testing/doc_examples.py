"""The examples of README.md and docs/*.md as the tests read them: every fenced block with its language,
its info words (```sh runnable) and the marker comment right before it, the commands a shell block
holds, and the `docfence ...` commands written anywhere, checked against the CLI's own parser.

Markers (an HTML comment on the last non-blank line before the fence, invisible when rendered):
`<!-- not-run: WHY -->` the block is not run (its `docfence` options are still checked);
`<!-- run-commands[: GIVEN, ...] -->` each command of a shell block runs on its own, with the givens;
`<!-- run-with: GIVEN, ... -->` a TOML block runs with the files the givens name supplied by the test."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Command", "Example", "collect", "commands", "doc_files", "docfence_commands",
           "inline_commands", "merge", "toml_text", "unknown_options"]

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_MARKER = re.compile(r"<!--\s*(not-run|run-commands|run-with)\s*(?::\s*(.*?))?\s*-->\s*\Z", re.S)
_INLINE = re.compile(r"`((?:\.venv/bin/)?docfence [^`]+)`")
# `docfence SUB ...` where a command starts: line start, after a separator, `(`, `$(`, `&&`
_IN_SHELL = re.compile(r"(?:^|[;&|(]\s*|\$\(\s*)(?:\.venv/bin/)?(docfence\s[^\n;&|)#]*)", re.M)
_GLOBAL_FLAGS = {"--debug", "--version", "-h", "--help"}


@dataclass(frozen=True)
class Example:
    """One fenced block of a document."""

    source: str  # path relative to the repository, e.g. "docs/api.md"
    lang: str  # "sh", "toml", "json", "" ...
    number: int  # the n-th block of this language in its file, from 1
    line: int  # the fence's line number
    info: tuple[str, ...]  # words after the language ("runnable")
    text: str
    marker: str | None  # "not-run", "run-commands", "run-with" or None
    detail: str  # the not-run reason, or the givens as written

    @property
    def id(self) -> str:
        return f"{self.source}#{self.lang or 'text'}{self.number}"

    @property
    def runnable(self) -> bool:
        return "runnable" in self.info

    @property
    def givens(self) -> tuple[str, ...]:
        if self.marker not in ("run-commands", "run-with"):
            return ()
        return tuple(g.strip() for g in self.detail.split(",") if g.strip())


@dataclass(frozen=True)
class Command:
    """One logical command of a shell block: continuation lines joined, with the comment lines that
    follow it (a documented answer)."""

    text: str
    answer: tuple[str, ...]


def doc_files(root: Path) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def collect(root: Path) -> list[Example]:
    """Every fenced block of README.md and docs/*.md, in document order."""
    found: list[Example] = []
    for path in doc_files(root):
        text = path.read_text("utf-8")
        counts: dict[str, int] = {}
        for match in _FENCE.finditer(text):
            words = match.group(1).split()
            lang = words[0] if words else ""
            counts[lang] = counts.get(lang, 0) + 1
            before = text[:match.start()].rstrip()
            last = before.rsplit("\n", 1)[-1] if before else ""
            marker = _MARKER.search(last)
            found.append(Example(
                source=str(path.relative_to(root)), lang=lang, number=counts[lang],
                line=text.count("\n", 0, match.start()) + 1, info=tuple(words[1:]), text=match.group(2),
                marker=marker.group(1) if marker else None,
                detail=(marker.group(2) or "") if marker else ""))
    return found


def commands(script: str) -> list[Command]:
    """The commands of a shell block, in order: `\\`-continued lines joined, blank lines dropped;
    comment lines belong to the command before them (its documented answer), or are dropped."""
    out: list[Command] = []
    pending = ""
    for raw in script.splitlines():
        line = raw.rstrip()
        if pending:
            pending += " " + line.strip()
        elif line.lstrip().startswith("#"):
            if out:
                out[-1] = Command(out[-1].text, (*out[-1].answer, line.lstrip()[1:].strip()))
            continue
        elif line.strip():
            pending = line.strip()
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        if pending:
            out.append(Command(_strip_comment(pending), ()))
            pending = ""
    return out


def _strip_comment(line: str) -> str:
    """A trailing `  # ...` comment removed (a `#` inside quotes stays)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and i > 0 and line[i - 1] in " \t":
            return line[:i].rstrip()
    return line


def inline_commands(root: Path) -> list[tuple[str, str]]:
    """(source, command) for every `docfence ...` code span outside fenced blocks, once per source."""
    found: list[tuple[str, str]] = []
    for path in doc_files(root):
        prose = _FENCE.sub("", path.read_text("utf-8"))
        seen: set[str] = set()
        for span in _INLINE.findall(prose):
            if span not in seen:
                seen.add(span)
                found.append((str(path.relative_to(root)), span))
    return found


def docfence_commands(block: str) -> list[str]:
    """The `docfence ...` commands a shell block runs (comments and Python lines aside)."""
    found: list[str] = []
    for command in commands(block):
        found.extend(m.strip() for m in _IN_SHELL.findall(command.text))
    return found


def unknown_options(parser: argparse.ArgumentParser, written: str) -> list[str]:
    """What a written `docfence ...` command names that the parser does not know: a subcommand, or
    an `--option` of the (sub)command it reaches. `a/b` names two subcommands; `[...]` is optional."""
    words = [w.strip("[](),.;:") for w in written.split()]
    words = [w for w in words[1:] if w]  # the program name
    while words and words[0] in _GLOBAL_FLAGS:
        words.pop(0)
    parsers = [parser]
    while words and not words[0].startswith("-"):
        choices = _subcommands(parsers[0])
        if not choices:
            break
        names = words[0].split("/")
        missing = [n for n in names if n not in choices]
        if missing and len(names) == 1 and not _looks_like_command(words[0]):
            break  # a positional argument (a file, JOB) of the command reached so far
        if missing:
            return [f"unknown command {' / '.join(missing)!r}"]
        parsers = [choices[n] for n in names]
        words.pop(0)
    problems = []
    for word in words:
        if word.startswith("--") and len(word) > 2:
            flag = word.split("=", 1)[0]
            for sub in parsers:
                if flag not in sub._option_string_actions:
                    problems.append(f"{sub.prog}: unknown option {flag}")
    return problems


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _looks_like_command(word: str) -> bool:
    """A lower-case word (`ops`, `set-mode`), not a placeholder (`JOB`, `FILE`), path or value."""
    return bool(re.fullmatch(r"[a-z][a-z-]*(?:/[a-z][a-z-]*)*", word))


def merge(into: dict[str, Any], more: dict[str, Any], where: str = "") -> dict[str, Any]:
    """`more`'s tables merged into `into` (in place); a key both set differently raises ValueError, so
    two examples that disagree cannot be run as one configuration."""
    for key, value in more.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value, f"{where}{key}.")
        elif key in into and into[key] != value:
            raise ValueError(f"{where}{key}: set to {into[key]!r} and to {value!r}")
        else:
            into[key] = value
    return into


def toml_text(data: dict[str, Any]) -> str:
    """`data` written as TOML (strings, numbers, booleans, arrays of them, tables, arrays of tables):
    what tomllib reads back as `data`."""
    lines: list[str] = []
    _toml_table(data, [], lines)
    return "\n".join(lines) + "\n"


def _toml_table(table: dict[str, Any], path: list[str], lines: list[str]) -> None:
    plain = {k: v for k, v in table.items() if not _is_table(v) and not _is_table_array(v)}
    if path and (plain or not any(_is_table(v) or _is_table_array(v) for v in table.values())):
        lines.append(f"[{'.'.join(_toml_key(p) for p in path)}]")
    lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in plain.items())
    for key, value in table.items():
        if _is_table(value):
            _toml_table(value, [*path, key], lines)
        elif _is_table_array(value):
            for item in value:
                lines.append(f"[[{'.'.join(_toml_key(p) for p in [*path, key])}]]")
                lines.extend(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in item.items())


def _is_table(value: Any) -> bool:
    return isinstance(value, dict)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as a TOML value")
