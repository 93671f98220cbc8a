"""Slurm's text tools as people paste them: the table somewhere below a shell prompt and the
command that printed it, wrapped in another tool's output, with or without its header.

`table(text, tool, required)` finds the header (the first line naming the `required`
columns, even when it was pasted on the command line), reads the command's flags (`-n`,
`-b`, `-P`, `--delimiter`, `--format`/`-o`, `-j`), and cuts the rows the way the tool printed
them: by its delimiter (`-P`), by the dashes under a fixed-width header (`sacct`), by the
header words' positions, or by whitespace. Without a header the command's `--format`, else
the tool's documented default columns, name the cells. Ansible's `stdout_lines` /
`"stdout": "..."` and lines quoted by `kubectl exec ... -- sh -c` are unwrapped first.

Every pattern here is anchored and linear (no nested or adjacent quantifiers over
overlapping classes): a pasted line is untrusted input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

_STDOUT_LINES = re.compile(r'"stdout_lines"\s*:\s*\[')
_STDOUT = re.compile(r'"stdout"\s*:\s*("(?:[^"\\\n]|\\.)*")')
_QUOTED = re.compile(r'^\s*(?P<q>["\'])(?P<body>.*)(?P=q),?\s*$')
_DASHES = re.compile(r"^[ -]*-[ -]*$")
_PROMPT = re.compile(r"^\S*[$#>%\u279c]\s|^[\w.@:~\[\]() -]*[$#]\s*$")
_WIDTH = re.compile(r"%-?\d+$")

SACCT_DEFAULT = ["JobID", "JobName", "Partition", "Account", "AllocCPUS", "State", "ExitCode"]
SACCT_BRIEF = ["JobID", "State", "ExitCode"]
_SACCT_WIDTHS = {"JobID": 12, "JobName": 10, "Partition": 10, "Account": 10, "AllocCPUS": 10,
                 "State": 10, "ExitCode": 8}
SQUEUE_DEFAULT = ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES",
                  "NODELIST(REASON)"]


@dataclass
class Table:
    """The rows of one tool's output: (line number, raw line, cells by column name)."""

    columns: list[str]
    rows: list[tuple[int, str, dict[str, str]]] = field(default_factory=list)
    bad: list[tuple[int, str]] = field(default_factory=list)
    """Rows that did not fit the columns (not a prompt, not blank)."""
    flags: dict[str, str] = field(default_factory=dict)
    """The command's flags: `-j`, `--format`, `-b`, `-n`, `-P`, `--delimiter`."""
    header_line: int = 0


def unwrap(text: str) -> list[str]:
    """The tool's own lines out of Ansible's JSON output or `kubectl exec` quoting."""
    if _STDOUT_LINES.search(text):
        start = _STDOUT_LINES.search(text)
        assert start is not None
        out = []
        for line in text[start.end():].splitlines():
            stripped = line.strip()
            if stripped.startswith("]"):
                break
            if m := _QUOTED.match(stripped):
                try:
                    out.append(str(json.loads(f'"{m["body"]}"')))
                except ValueError:
                    out.append(m["body"])
        return out
    if m := _STDOUT.search(text):
        try:
            return str(json.loads(m.group(1))).splitlines()
        except ValueError:
            pass
    lines = text.splitlines()
    quoted = [m for line in lines if line.strip() and (m := _QUOTED.match(line))]
    if quoted and len(quoted) == sum(1 for line in lines if line.strip()):
        return [m["body"] for m in quoted]
    return lines


def is_prompt(line: str) -> bool:
    return bool(_PROMPT.match(line.strip() + " ")) if len(line) < 2000 else False


def _flags(command: str, tool: str) -> dict[str, str]:
    """The flags of the `tool ...` command in a pasted line (after any prompt); a quoted
    value holds its blanks (`-o "%.18i %.2t %R"`)."""
    tokens = _tokens(command)
    if tool not in tokens:
        return {}
    tokens = tokens[tokens.index(tool) + 1:]
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i].strip("'\"")
        name, eq, value = token.partition("=")
        value = value.strip("'\"")
        takes = name in ("-j", "--jobs", "--format", "-o", "-O", "--Format", "--delimiter",
                         "-u", "--user", "-t", "-p", "-S", "-E")
        if takes and not eq and i + 1 < len(tokens):
            value = tokens[i + 1].strip("'\"")
            i += 1
        out[name] = value
        i += 1
        if name == "|":
            break
    return out


def _tokens(command: str) -> list[str]:
    import shlex

    text = command[:4000].replace("\u201c", '"').replace("\u201d", '"')
    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote: the words as they are
        return text.split()


_TOOLS = ("sacct", "squeue", "sinfo", "scontrol", "sbatch", "srun", "salloc", "scancel")


def command_of(line: str) -> str:
    """The Slurm tool a pasted line runs (`$ sinfo -p gpu`, `[u@h ~]$ squeue -u u`, a bare
    `sacct --format=...`), else ''."""
    if len(line) > 4000:
        return ""
    words = line.split()
    for i, word in enumerate(words[:12]):
        if word in _TOOLS and (i == 0 or is_prompt(" ".join(words[:i])) or (
                i + 1 < len(words) and words[i + 1].startswith("-"))):
            return word  # at the start, after a prompt, or with its flags after it
    return ""


def _ends(line: str, tool: str) -> bool:
    """Whether `line` runs another Slurm tool, whose output is not this table's."""
    ran = command_of(line) if len(line) < 4000 and any(t in line for t in _TOOLS) else ""
    return bool(ran) and ran != tool


def _canonical(name: str) -> str:
    return _WIDTH.sub("", name.strip())


def _spans(rule: str) -> list[tuple[int, int]]:
    """Column spans from the dashes under a fixed-width header."""
    spans, start = [], None
    for i, ch in enumerate(rule + " "):
        if ch == "-" and start is None:
            start = i
        elif ch != "-" and start is not None:
            spans.append((start, i))
            start = None
    return spans


def _cut(line: str, spans: list[tuple[int, int]]) -> list[str]:
    cells = [line[a:b].strip() for a, b in spans[:-1]]
    cells.append(line[spans[-1][0]:].strip())
    return cells


def _header_index(lines: list[str], tool: str, required: tuple[str, ...],
                  limit: int = 50, delimiter: str = "") -> int | None:
    """The first line naming every `required` column; on the command line itself only as
    bare words (`sinfo -R REASON USER ...`), never inside a flag (`--format=JobID,State`)."""
    wanted = {r.lower() for r in required}
    for i, line in enumerate(lines[:limit]):
        if tool in line.split():
            words = {w.lower() for w in line.split() if not w.startswith("-") and "=" not in w}
        else:
            cells = line.split(delimiter) if delimiter else re.split(r"[\s|,;]+", line)
            words = {_canonical(w).lower() for w in cells if w.strip()}
        if wanted <= words:
            return i
    return None


def table(text: str, tool: str, required: tuple[str, ...],
          default: list[str] | None = None) -> Table | None:
    """The rows of `tool`'s table in `text`, or None when nothing in it looks like one."""
    lines = unwrap(text)
    first = next((line for line in lines[:50] if command_of(line) == tool), "")
    custom = _flags(first, tool).get("--delimiter", "") if first else ""
    at = _header_index(lines, tool, required, delimiter=custom)
    commands = [line for line in lines[:at if at is not None else 50]
                if command_of(line) == tool] or [
        line for line in lines[:at if at is not None else 50] if tool in line.split()]
    flags = _flags(commands[-1], tool) if commands else {}
    delimiter = flags.get("--delimiter") or ("|" if {"-P", "--parsable2", "--parsable", "-p"}
                                            & set(flags) and tool == "sacct" else "")
    if at is not None and tool in lines[at].split():
        # the header pasted on the command line (`sinfo -R REASON USER TIMESTAMP NODELIST`)
        header_words = lines[at].split()
        columns = header_words[next(i for i, w in enumerate(header_words)
                                    if w.lower() == required[0].lower()):]
        return _by_words(lines, at, columns, flags, tail=True, tool=tool)
    if at is None:
        columns, separator = _format_columns(flags, tool)
        delimiter = delimiter or separator
        if tool == "sacct" and not columns:
            columns = SACCT_BRIEF if ({"-b", "--brief"} & set(flags)) else list(
                default or SACCT_DEFAULT)
        elif not columns:
            columns = list(default or [])
        if not columns:
            return None
        start = next((i + 1 for i, line in enumerate(lines) if tool in line.split()), 0)
        return _headerless(lines, start, columns, flags, delimiter, tool)
    header = lines[at]
    if not delimiter:
        for sep in ("|", ",", ";", "\t"):
            if sep in header.strip().rstrip(sep):
                delimiter = sep
                break
    if delimiter:
        columns = [_canonical(c) for c in header.rstrip().rstrip(delimiter).split(delimiter)]
        out = Table(columns, flags=flags, header_line=at + 1)
        for number, line in enumerate(lines[at + 1:], start=at + 2):
            if _ends(line, tool):
                break  # another tool's command: its own table
            if not line.strip() or is_prompt(line) or _row_line(line, columns,
                                                                delimiter) is None:
                continue  # (prose, a Markdown fence: no row)
            cells = line.rstrip().split(delimiter)
            if len(cells) == len(columns) + 1 and cells[-1] == "":
                cells = cells[:-1]  # `--parsable` ends every line with the delimiter
            if len(cells) != len(columns):
                out.bad.append((number, line))
                continue
            out.rows.append((number, line, dict(zip(columns, cells, strict=True))))
        return out
    if at + 1 < len(lines) and _DASHES.match(lines[at + 1]):
        spans = _spans(lines[at + 1])
        columns = [_canonical(c) for c in _cut(header, spans)]
        out = Table(columns, flags=flags, header_line=at + 1)
        for number, line in enumerate(lines[at + 2:], start=at + 3):
            if _ends(line, tool):
                break  # another tool's command: its own table
            if not line.strip() or is_prompt(line) or _row_line(line, columns) is None:
                continue
            out.rows.append((number, line, dict(zip(columns, _cut(line, spans),
                                                   strict=True))))
        return out
    return _by_words(lines, at, [_canonical(w) for w in header.split()], flags, tool=tool)


def _by_words(lines: list[str], at: int, columns: list[str], flags: dict[str, str],
              tail: bool = False, tool: str = "") -> Table:
    """Rows split on blanks; the first column may hold blanks when every other column is
    one word (`sinfo -R`'s REASON) - `tail` - else the last one may (squeue's reasons)."""
    out = Table(columns, flags=flags, header_line=at + 1)
    for number, line in enumerate(lines[at + 1:], start=at + 2):
        if _ends(line, tool):
            break  # another tool's command: its own table
        if not line.strip() or is_prompt(line) or _row_line(line, columns) is None:
            continue
        words = line.split()
        if tail or (columns and columns[0].upper() == "REASON"):
            if len(words) < len(columns):
                out.bad.append((number, line))
                continue
            keep = len(columns) - 1
            cells = [" ".join(words[:len(words) - keep]), *words[len(words) - keep:]]
        else:
            cells = line.split(None, len(columns) - 1)
            if len(cells) == len(columns) - 1 and columns[-2].upper() == "STATE":
                cells.insert(-1, "")  # an empty STATE (`kubectl get`'s or squeue's)
            if len(cells) != len(columns):
                out.bad.append((number, line))
                continue
        out.rows.append((number, line, dict(zip(columns, cells, strict=True))))
    return out


_SQUEUE_CODES = {"i": "JOBID", "A": "JOBID", "F": "ARRAY_JOB_ID", "K": "ARRAY_TASK_ID",
                 "P": "PARTITION", "j": "NAME", "u": "USER", "a": "ACCOUNT", "q": "QOS",
                 "t": "ST", "T": "STATE", "M": "TIME", "l": "TIME_LIMIT", "L": "TIME_LEFT",
                 "D": "NODES", "C": "CPUS", "R": "NODELIST(REASON)", "N": "NODELIST",
                 "r": "REASON", "V": "SUBMIT_TIME", "S": "START_TIME", "e": "END_TIME",
                 "Q": "PRIORITY", "p": "PRIORITY", "k": "COMMENT", "b": "TRES_PER_NODE",
                 "m": "MIN_MEMORY", "Z": "WORK_DIR", "o": "COMMAND", "g": "GROUP"}
_SQUEUE_CODE = re.compile(r"%[.-]?\d{0,4}([A-Za-z])")
_JOB_ID = re.compile(r"^\d{1,12}(?:[_.+][\w\[\]\-,.+%]{0,400})?$")
_ID_COLUMNS = {"jobid", "jobidraw", "job_id"}


def _format_columns(flags: dict[str, str], tool: str) -> tuple[list[str], str]:
    """The columns a pasted command's format names, and the separator it prints between
    them: sacct's `--format=JobIdRaw,State` (widths `%20` taken off); squeue's `-o "%.18i
    %.2t %R"` (its codes, named as squeue's header names them; a `|` between them is the
    delimiter) or `-O jobid,state`."""
    if tool == "squeue":
        fmt = flags.get("--format") or flags.get("-o") or ""
        if "%" in fmt:
            codes = _SQUEUE_CODE.findall(fmt)
            return [_SQUEUE_CODES.get(c, c) for c in codes], \
                "|" if "|" in _SQUEUE_CODE.sub("", fmt) else ""
        fmt = flags.get("--Format") or flags.get("-O") or ""
        return [_canonical(c.split(":")[0]).upper() for c in fmt.split(",") if c.strip()], ""
    fmt = flags.get("--format", "") or flags.get("-o", "")
    return [_canonical(c) for c in fmt.split(",") if c.strip()], ""


def _row_line(line: str, columns: list[str], delimiter: str = "") -> str | None:
    """A line of a headerless table as the tool printed it, or None when it is not one
    (prose around the paste, a log line, the `'` of a Python repr): a table led by a job
    id column has a job id first. A repr's opening quote is taken off."""
    text = line.strip()
    if text[:1] in ("'", '"') and text[1:2].isdigit():
        line = line.replace(text[0], "", 1)
        text = text[1:]
    if not columns or columns[0].lower() not in _ID_COLUMNS:
        return line
    first = text.split(delimiter, 1)[0].strip() if delimiter else re.split(
        r"[\s|,;]", text, maxsplit=1)[0]
    return line if _JOB_ID.match(first) else None


def _headerless(lines: list[str], start: int, columns: list[str], flags: dict[str, str],
                delimiter: str, tool: str) -> Table:
    out = Table(columns, flags=flags)
    widths = [_SACCT_WIDTHS.get(c, 0) for c in columns]
    for number, line in enumerate(lines[start:], start=start + 1):
        if _ends(line, tool):
            break  # another tool's command: its own table
        if not line.strip() or is_prompt(line) or tool in line.split():
            continue
        if (row := _row_line(line, columns, delimiter)) is None:
            continue  # prose, not a row: a skipped line, never a job id
        line = row
        if delimiter or (tool == "sacct" and "|" in line):
            cells = line.rstrip().split(delimiter or "|")
            if len(cells) == len(columns) + 1 and cells[-1] == "":
                cells = cells[:-1]
        elif tool == "sacct" and all(widths) and len(line.split()) != len(columns):
            spans, pos = [], 0
            for w in widths:
                spans.append((pos, pos + w))
                pos += w + 1
            cells = _cut(line, spans)
        else:
            cells = line.split(None, len(columns) - 1)
        if len(cells) != len(columns):
            out.bad.append((number, line))
            continue
        out.rows.append((number, line, dict(zip(columns, cells, strict=True))))
    return out
