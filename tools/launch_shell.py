"""Turn a launch script into the words of its training command: shell variables, defaults, arrays, conditionals.

Real launch scripts (Megatron-LM ``examples/llama/train_llama3_8b_h100_fp8.sh``,
``examples/gpt3/train_gpt3_175b_distributed.sh``) keep their flags in variables and bash arrays
and pass them as ``${MODEL_ARGS[@]}``; Primus experiment YAMLs write ``${PRIMUS_TP:1}``.  This
module is a small, side-effect-free interpreter of the subset of bash those files use, run with
an empty environment so every variable takes the default the file gives it:

- assignments (``export``/``local``/``declare`` prefixes), ``NAME+=...``, arrays ``NAME=( ... )``
  over several lines and ``NAME+=( ... )``;
- expansions ``$NAME``, ``${NAME}``, ``${NAME:-x}``, ``${NAME-x}``, ``${NAME:=x}``, ``${NAME:+x}``,
  ``${#NAME}``, ``${NAME[@]}``, ``${NAME[i]}``, positional ``$1`` (unset), ``$((arithmetic))``;
  command substitution ``$(...)`` is not run (it expands to nothing and is reported);
- quoting (``'...'``, ``"..."``, backslash), comments, line continuations, word splitting of
  unquoted expansions, ``;``/``&&``/``||`` separators;
- ``if``/``elif``/``else``/``fi`` with ``[[ ]]``/``[ ]``/``test`` string, integer, ``-z``/``-n`` tests;
  a test it cannot decide (files, command status) counts as false and is reported.

:func:`command_words` gives the words after the training script (``*.py``) of the last command
that runs one (or, for a bare argument list, every word), for the flag parser of
:mod:`tools.launch_import`.  :func:`expand_primus` replaces Primus' ``${VAR:default}`` with the
default (Primus ``primus/core/config/yaml_loader.py`` reads ``${VAR:default}`` as "the
environment variable, else default").
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field

from projection.errors import ProjtuneError

MAX_SCRIPT_CHARS = 1_000_000  # a launch script is a few KB; bounded work on anything larger
MAX_EXPANSION_CHARS = 1_000_000
_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(rf"^(?:(?:export|local|readonly|declare(?:\s+-\w+)*)\s+)?({_NAME})(\+?)=(.*)$", re.DOTALL)
_SCRIPT = re.compile(r"\.py$")
_PRIMUS_VAR = re.compile(r"\$\{(" + _NAME + r")(?::([^}]*))?\}")


class ShellScriptError(ProjtuneError):
    """A launch script this reader cannot follow (unterminated quote, unbalanced array)."""


@dataclass
class ShellState:
    """Variables and arrays of a script run with an empty environment, and what could not be resolved."""

    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    unresolved: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        if what not in self.unresolved and len(self.unresolved) < 20:
            self.unresolved.append(what)


@dataclass
class Command:
    """One simple command: its expanded words and the script line it starts on."""

    words: list[str]
    line: int


# ---------------------------------------------------------------------------------------------- statements
def _statements(text: str) -> list[tuple[str, int]]:
    """Logical statements (comments removed, continuations joined, arrays kept whole) with their line numbers."""
    out: list[tuple[str, int]] = []
    buf: list[str] = []
    start = 1
    depth = 0  # open array parentheses
    quote = ""
    line_no = 1
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < n:
                buf.append(text[i:i + 2])
                line_no += text[i + 1] == "\n"
                i += 2
                continue
            if c == quote:
                quote = ""
            line_no += c == "\n"
            buf.append(c)
            i += 1
            continue
        if c == "\\" and i + 1 < n and text[i + 1] == "\n":
            buf.append(" ")
            line_no += 1
            i += 2
            continue
        if c == "\\" and i + 1 < n:
            buf.append(text[i:i + 2])
            i += 2
            continue
        if c in "'\"":
            quote = c
        elif c == "#" and (not buf or buf[-1] in " \t\n;(") and not "".join(buf[-2:]).endswith("$"):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c == "(" and depth == 0 and re.search(r"\+?=$", "".join(buf[-2:])):
            depth = 1
        elif c == "(" and depth:
            depth += 1
        elif c == ")" and depth:
            depth -= 1
        if c == "\n" and depth == 0:
            _push(out, buf, start)
            buf, start = [], line_no + 1
        elif c == ";" and depth == 0:
            _push(out, buf, start)
            buf, start = [], line_no
        else:
            buf.append(c)
        line_no += c == "\n"
        i += 1
    if quote:
        raise ShellScriptError(f"line {start}: unterminated {quote} quote")
    if depth:
        raise ShellScriptError(f"line {start}: array ( ... ) is not closed")
    _push(out, buf, start)
    return out


def _push(out: list[tuple[str, int]], buf: list[str], start: int) -> None:
    statement = "".join(buf).strip()
    if statement:
        out.append((statement, start))


# ---------------------------------------------------------------------------------------------- expansion
MAX_NESTING = 50  # ${...} / $(...) inside each other: real scripts nest two or three


def _closing(text: str, i: int, opening: str, closing: str) -> int:
    """Index of the bracket closing the one at ``i`` (quotes respected); -1 when there is none."""
    depth, quote = 0, ""
    for j in range(i, len(text)):
        c = text[j]
        if quote:
            if c == quote:
                quote = ""
            continue
        if c in "'\"":
            quote = c
        elif c == opening:
            depth += 1
            if depth > MAX_NESTING:
                raise ShellScriptError(f"expansions nested more than {MAX_NESTING} deep")
        elif c == closing:
            depth -= 1
            if depth == 0:
                return j
    return -1


def _value(state: ShellState, name: str) -> str | None:
    if name in state.scalars:
        return state.scalars[name]
    if name in state.arrays:
        return state.arrays[name][0] if state.arrays[name] else ""
    return None


_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Div: operator.floordiv, ast.Mod: operator.mod}


def _arithmetic(expression: str) -> int:
    """Integer arithmetic of ``$(( ))`` (+ - * / %, parentheses); raises ValueError on anything else."""
    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and abs(node.value) < 10**18:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            return -walk(node.operand) if isinstance(node.op, ast.USub) else walk(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            right = walk(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)) and right == 0:
                raise ValueError("division by zero")
            result = _BINARY[type(node.op)](walk(node.left), right)
            if abs(result) >= 10**18:
                raise ValueError("too large")
            return int(result)
        raise ValueError("not integer arithmetic")

    if len(expression) > 200:
        raise ValueError("too long")
    return walk(ast.parse(expression.strip().replace("//", "/").replace("/", "//"), mode="eval"))


def _dollar(text: str, i: int, state: ShellState) -> tuple[list[str] | str, int]:
    """Expand the ``$`` at ``i``: (a string, or a list of array elements for ``[@]``; index after it)."""
    rest = text[i + 1:]
    if rest.startswith("(("):
        end = text.find("))", i + 3)
        if end < 0:
            return "$", i + 1
        inner = _expand_word(text[i + 3:end], state, split=False)
        inner_text = "".join(inner) if isinstance(inner, list) else inner
        inner_text = re.sub(_NAME, lambda m: _value(state, m.group(0)) or "0", inner_text)
        try:
            return str(_arithmetic(inner_text)), end + 2
        except (ValueError, SyntaxError, RecursionError):
            state.note(f"$(({text[i + 3:end]}))")
            return "", end + 2
    if rest.startswith("("):
        end = _closing(text, i + 1, "(", ")")
        end = len(text) - 1 if end < 0 else end
        state.note(f"$({text[i + 2:end][:60]}) (command substitution is not run)")
        return "", end + 1
    if rest.startswith("{"):
        end = _closing(text, i + 1, "{", "}")
        if end < 0:
            raise ShellScriptError(f"unclosed ${{ in '{text[i:i + 40]}'")
        return _brace(text[i + 2:end], state), end + 1
    match = re.match(_NAME + r"|[0-9]|[@*#?$!-]", rest)
    if not match:
        return "$", i + 1
    name = match.group(0)
    if name in ("@", "*"):
        return [], i + 1 + len(name)
    value = _value(state, name)
    if value is None:
        if not name.isdigit() and name not in "#?$!-":
            state.note(f"${name} is not set in the file")
        value = "0" if name == "#" else ""
    return value, i + 1 + len(name)


def _brace(inner: str, state: ShellState) -> list[str] | str:
    """``${...}``: arrays, length, defaults."""
    if inner.startswith("#"):
        name = inner[1:].removesuffix("[@]").removesuffix("[*]")
        if name in state.arrays:
            return str(len(state.arrays[name]))
        return str(len(_value(state, name) or ""))
    match = re.match(rf"({_NAME}|[0-9]+)(?:\[([^\]]*)\])?(.*)$", inner, re.DOTALL)
    if not match:
        state.note(f"${{{inner[:40]}}}")
        return ""
    name, index, op = match.groups()
    if index in ("@", "*"):
        if name in state.arrays:
            return list(state.arrays[name])
        scalar = state.scalars.get(name)
        return [scalar] if scalar is not None else []
    if index is not None:
        elements = state.arrays.get(name, [])
        try:
            position = _arithmetic(re.sub(_NAME, lambda m: _value(state, m.group(0)) or "0", index))
            return elements[position] if -len(elements) <= position < len(elements) else ""
        except (ValueError, SyntaxError):
            return ""
    value = _value(state, name)
    for form in (":-", ":=", ":+", "-", "=", "+"):
        if op.startswith(form):
            word = _expand_word(op[len(form):], state, split=False)
            alternative = " ".join(word) if isinstance(word, list) else word
            empty = value is None or (form.startswith(":") and value == "")
            if form.endswith("+"):
                return "" if empty else alternative
            if empty and form.endswith("="):
                state.scalars[name] = alternative
            return alternative if empty else value  # type: ignore[return-value]
    if op:
        state.note(f"${{{inner[:40]}}} (unsupported expansion; read as ${{{name}}})")
    if value is None and not name.isdigit():
        state.note(f"${name} is not set in the file")
    return value or ""


def _expand_word(text: str, state: ShellState, *, split: bool) -> list[str] | str:
    """Expand quotes and ``$`` in ``text``.  ``split``: a list of words (word splitting, ``[@]`` as words);
    otherwise one string (assignment right-hand sides, default values)."""
    words: list[str] = []
    current: str | None = None
    i, n = 0, len(text)

    def add(piece: str) -> None:
        nonlocal current
        current = (current or "") + piece
        if len(current) > MAX_EXPANSION_CHARS:
            raise ShellScriptError("a variable expands to more than 1,000,000 characters")

    def end_word() -> None:
        nonlocal current
        if current is not None:
            words.append(current)
        current = None

    while i < n:
        c = text[i]
        if c in " \t\n" and split:
            end_word()
            i += 1
        elif c == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ShellScriptError(f"unterminated ' quote in '{text[i:i + 40]}'")
            add(text[i + 1:end])
            i = end + 1
        elif c == '"':
            i = _double_quoted(text, i, state, add, end_word, words, split)
        elif c == "\\" and i + 1 < n:
            add(text[i + 1])
            i += 2
        elif c == "$":
            value, i = _dollar(text, i, state)
            if isinstance(value, list):
                if not split:
                    add(" ".join(value))
                else:
                    for k, element in enumerate(value):
                        for j, part in enumerate(element.split()):
                            if j or k:
                                end_word()
                            add(part)
            elif split:
                parts = value.split()
                if value[:1].isspace():
                    end_word()
                for j, part in enumerate(parts):
                    if j:
                        end_word()
                    add(part)
                if value[-1:].isspace():
                    end_word()
            else:
                add(value)
        else:
            add(c)
            i += 1
    if not split:
        return current or ""
    end_word()
    return words


def _double_quoted(text: str, i: int, state: ShellState, add, end_word, words: list[str], split: bool) -> int:  # type: ignore[no-untyped-def]
    j = i + 1
    add("")
    while j < len(text) and text[j] != '"':
        c = text[j]
        if c == "\\" and j + 1 < len(text) and text[j + 1] in '"\\$`':
            add(text[j + 1])
            j += 2
        elif c == "$":
            value, j = _dollar(text, j, state)
            if isinstance(value, list):
                for k, element in enumerate(value):  # "${ARR[@]}": one word per element
                    if k and split:
                        end_word()
                    add(element if split else (" " if k else "") + element)
            else:
                add(value)
        else:
            add(c)
            j += 1
    if j >= len(text):
        raise ShellScriptError(f"unterminated \" quote in '{text[i:i + 40]}'")
    return j + 1


# ---------------------------------------------------------------------------------------------- conditions
def _test(words: list[str], state: ShellState) -> bool | None:
    """A ``[[ ]]`` / ``[ ]`` test of expanded words; None when it cannot be decided here."""
    if words[:1] == ["!"]:
        inner = _test(words[1:], state)
        return None if inner is None else not inner
    if len(words) == 2 and words[0] in ("-z", "-n"):
        return (words[1] == "") == (words[0] == "-z")
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 3:
        a, op, b = words
        if op in ("==", "="):
            return a == b
        if op == "!=":
            return a != b
        ints = {"-eq": operator.eq, "-ne": operator.ne, "-gt": operator.gt, "-lt": operator.lt,
                "-ge": operator.ge, "-le": operator.le}
        if op in ints:
            try:
                return ints[op](int(a), int(b))
            except ValueError:
                return None
    return None


def _condition(text: str, state: ShellState) -> bool | None:
    """``[[ a ]] || [[ b ]] && ...`` left to right, as bash does; None when a part cannot be decided."""
    parts = re.split(r"(\|\||&&)", text)
    result: bool | None = None
    joiner = ""
    for part in parts:
        if part in ("||", "&&"):
            joiner = part
            continue
        body = part.strip()
        match = re.fullmatch(r"\[\[(.*)\]\]|\[(.*)\]|test\s+(.*)", body, re.DOTALL)
        value = None
        if match:
            inner = next(g for g in match.groups() if g is not None)
            words = _expand_word(inner, state, split=True)
            value = _test(words if isinstance(words, list) else [words], state)  # type: ignore[arg-type]
        if value is None:
            state.note(f"condition '{body[:60]}' (read as false)")
            value = False
        if not joiner:
            result = value
        elif joiner == "||":
            result = bool(result) or value
        else:
            result = bool(result) and value
    return result


# ---------------------------------------------------------------------------------------------- interpreter
def run_script(text: str) -> tuple[list[Command], ShellState]:
    """Interpret ``text`` with an empty environment: the simple commands it runs (expanded) and its variables.

    Raises:
        ShellScriptError: a script over 1 MB, an unterminated quote, an unclosed array or ``${``.
    """
    if len(text) > MAX_SCRIPT_CHARS:
        raise ShellScriptError(f"the script has {len(text):,} characters (at most {MAX_SCRIPT_CHARS:,})")
    state = ShellState()
    commands: list[Command] = []
    # stack of (this branch runs, some branch of this if already ran, the enclosing block runs)
    stack: list[tuple[bool, bool, bool]] = []
    active = True
    for statement, line in _statements(text):
        try:
            active = _statement(statement, line, state, commands, stack, active)
        except ShellScriptError as err:
            raise ShellScriptError(f"line {line}: {err}") from err
        except RecursionError as err:
            raise ShellScriptError(f"line {line}: expansions nested too deep") from err
    return commands, state


def _statement(statement: str, line: int, state: ShellState, commands: list[Command],
               stack: list[tuple[bool, bool, bool]], active: bool) -> bool:
    keyword, _, rest = statement.partition(" ")
    if keyword == "if":
        taken = active and bool(_condition(rest, state))
        stack.append((taken, taken, active))
        return taken
    if keyword == "elif" and stack:
        _, done, outer = stack[-1]
        taken = outer and not done and bool(_condition(rest, state))
        stack[-1] = (taken, done or taken, outer)
        return taken
    if keyword == "else" and stack:
        _, done, outer = stack[-1]
        stack[-1] = (outer and not done, True, outer)
        rest = rest.strip()
        return _statement(rest, line, state, commands, stack, outer and not done) if rest else outer and not done
    if keyword == "fi" and stack:
        return stack.pop()[2]
    if keyword in ("then", "do"):
        rest = rest.strip()
        return _statement(rest, line, state, commands, stack, active) if rest else active
    if keyword in ("done", "esac", "{", "}", "for", "while", "until", "case", "function") or statement.endswith("()"):
        return active
    if not active:
        return active
    for part in re.split(r"\s(?:&&|\|\|)\s", statement):
        _simple(part.strip(), line, state, commands)
    return active


def _simple(statement: str, line: int, state: ShellState, commands: list[Command]) -> None:
    match = _ASSIGN.match(statement)
    if match:
        name, append, value = match.groups()
        value = value.strip()
        if value.startswith("(") and value.endswith(")"):
            words = _expand_word(value[1:-1], state, split=True)
            elements = list(words) if isinstance(words, list) else [words]
            state.arrays[name] = (state.arrays.get(name, []) if append else []) + elements
            state.scalars.pop(name, None)
        else:
            expanded = _expand_word(value, state, split=False)
            text = expanded if isinstance(expanded, str) else " ".join(expanded)
            if name in state.arrays and append:
                state.arrays[name][-1:] = [(state.arrays[name] or [""])[-1] + text]
            else:
                state.scalars[name] = (state.scalars.get(name, "") if append else "") + text
        return
    words = _expand_word(statement, state, split=True)
    if isinstance(words, list) and words:
        commands.append(Command(words=words, line=line))


def command_words(text: str) -> tuple[list[str], list[str]]:
    """The words after the training script of the last command that runs a ``*.py`` with ``--`` flags.

    A bare argument list (no script, e.g. a projtune export) gives every word of the commands
    that start with a flag.  Second value: what could not be resolved (unset variables without a
    default, command substitutions, undecidable conditions).
    """
    commands, state = run_script(text)
    for command in reversed(commands):
        scripts = [k for k, word in enumerate(command.words) if _SCRIPT.search(word)]
        if scripts and any(w.startswith("--") for w in command.words[scripts[0] + 1:]):
            return command.words[scripts[0] + 1:], state.unresolved
    words = [w for command in commands if command.words[0].startswith("--") for w in command.words]
    return words, state.unresolved


def expand_primus(text: str) -> tuple[str, list[str]]:
    """Primus YAML with every ``${VAR:default}`` replaced by its default (``${VAR}`` without one is kept and
    reported)."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        if match.group(2) is None:
            missing.append(match.group(1))
            return match.group(0)
        return match.group(2)

    return _PRIMUS_VAR.sub(replace, text), missing
