"""README.md and docs/*.md keep up with the code.

- every `advisor ...` command they show (in code blocks and inline code) parses with the
  real command line (``advisor.cli.main.parser``), and every `--option` they name alone
  is an option of some advisor command;
- every relative link lands on a file, and on a heading of it when it names one;
- every ``ADVISOR_*`` variable advisor reads is in README's table, and the table names
  none that advisor does not read;
- README's contract block names every function and constant the loader knows;
- README's explorer picture is the test screenshot (tests/tui/__snapshots__), line by
  line, with ``...`` where lines are left out;
- CI's command is where .ci/run takes it from, and README stays short.

Each check is also run on a made-up document it must reject, so that it can fail.
"""

from __future__ import annotations

import contextlib
import html
import io
import re
import shlex
from pathlib import Path

import pytest

from advisor.cli.main import COMMANDS, parser

from conftest import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README, *DOCS]
SNAPSHOT = REPO / "tests" / "tui" / "__snapshots__" / "test_tui_snapshots" / "test_main_screen[120x40].svg"
README_MAX_LINES = 420  # issue 30: "under about 400"

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
SPAN = re.compile(r"``(.+?)``|`([^`\n]+)`")
SHELL_BLOCKS = {"bash", "sh", "shell", "console"}


# ---- the text of a page: code blocks, inline code, links, headings ---------------------

def split_code(text: str) -> tuple[list[tuple[str, str]], str]:
    """(fenced blocks as (language, body)), and the text outside them."""
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    return blocks, FENCE.sub("", text)


def spans(prose: str) -> list[str]:
    """Inline code spans (table cells' escaped pipes as pipes)."""
    return [(a or b).strip().replace("\\|", "|") for a, b in SPAN.findall(prose)]


# ---- commands ---------------------------------------------------------------------------

def segments(line: str) -> list[str]:
    """The simple commands of a shell line: `$(...)` contents and the parts between
    &&, ||, ;, | (a comment after ' #' dropped)."""
    line = re.sub(r"\s#.*$", "", line)
    inner = re.findall(r"\$\(([^)]*)\)", line)
    line = re.sub(r"\$\([^)]*\)", " ", line)
    return [s.strip() for s in re.split(r"&&|\|\||;|\|", line) + inner if s.strip()]


def advisor_argv(segment: str, named: bool = False) -> list[str] | None:
    """The arguments after `advisor` when the segment runs it (a path to it included),
    up to a redirection; None when it does not, or (``named``: in prose) when it only
    names a command."""
    try:
        tokens = shlex.split(segment)
    except ValueError:
        return None
    if not tokens or tokens[0].rsplit("/", 1)[-1] != "advisor":
        return None
    argv = []
    for token in tokens[1:]:
        if re.match(r"^\d*[<>]", token):
            break
        argv.append(token)
    if not argv or not (argv[0] in COMMANDS or argv[0].startswith("-")):
        return None  # "advisor tune: error: ..." is output, not a command
    if named and len(argv) == 1 and argv[0] in COMMANDS:
        return None  # in prose, `advisor tune` names the command
    return argv


def shown_commands(text: str) -> list[str]:
    """Every advisor command line a page shows: in shell blocks every line, in other
    blocks the lines that start with `advisor` or `$ advisor` or run `$(advisor ...)`
    (not output that quotes one), and inline code."""
    blocks, prose = split_code(text)
    found = []
    for language, body in blocks:
        for line in body.splitlines():
            if language not in SHELL_BLOCKS and not re.match(r"^(\$ )?advisor |.*\$\(advisor ", line):
                continue
            found += [s for s in segments(line.removeprefix("$ ")) if advisor_argv(s) is not None]
    for span in spans(prose):
        found += [s for s in segments(span) if advisor_argv(s, named=True) is not None]
    return found


def parse_problem(command: str) -> str | None:
    """Why the real parser refuses the command, or None when it parses."""
    argv = advisor_argv(command)
    assert argv is not None, command
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser().parse_args(argv)
    except SystemExit as exc:
        if exc.code:
            return err.getvalue().strip().splitlines()[-1]
    return None


def command_problems(text: str, where: str) -> list[str]:
    return [f"{where}: `{c}`: {problem}" for c in shown_commands(text) if (problem := parse_problem(c))]


def known_options() -> set[str]:
    options = set()
    for action in parser()._actions:
        options.update(action.option_strings)
    for sub in parser()._subparsers._group_actions[0].choices.values():
        for action in sub._actions:
            options.update(action.option_strings)
    return options


# Options of other tools that the pages name alone, in inline code.
OTHER_TOOLS = {
    "--nproc-per-node", "--nproc_per_node", "--standalone", "--config_file",  # torchrun, accelerate
    "--snapshot-update",  # pytest-textual-snapshot
}


def option_problems(text: str, where: str, options: set[str]) -> list[str]:
    """`--option` (with or without a value) named alone in inline code, that no advisor
    command has. A page about the benchmarks names their scripts' options: those are only
    checked in inline code that runs an advisor command."""
    _, prose = split_code(text)
    problems = []
    for span in spans(prose):
        m = re.match(r"^(--[a-z][\w-]*)(?:[ =].*)?$", span)
        if m and m.group(1) not in options and m.group(1) not in OTHER_TOOLS:
            problems.append(f"{where}: `{span}`: no advisor command has {m.group(1)}")
    return problems


BENCHMARK_PAGES = {"benchmarks.md"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_command_shown_parses(page):
    problems = command_problems(page.read_text(), page.relative_to(REPO).as_posix())
    assert not problems, "\n".join(problems)


def test_the_pages_show_commands():
    """The check above has something to check: the quick start's commands among them."""
    shown = shown_commands(README.read_text())
    assert ".venv/bin/advisor tune examples/digits_cnn.py" in shown
    assert "advisor tune model.py --budget 30m" in shown
    assert "advisor export --study model-default --pick balanced -o best.yaml" in shown
    assert len([c for p in DOCS for c in shown_commands(p.read_text())]) >= 20


@pytest.mark.parametrize("page", [p for p in PAGES if p.name not in BENCHMARK_PAGES],
                         ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_option_named_exists(page):
    problems = option_problems(page.read_text(), page.relative_to(REPO).as_posix(), known_options())
    assert not problems, "\n".join(problems)


def test_the_command_check_catches_a_bad_command():
    page = """
```bash
advisor tune model.py --trails 40         # a typo
advisor export --pick fastest --format xml
.venv/bin/advisor tune model.py --budget 30m && advisor studies
```

```
next:   advisor tui --study x   (output, not a command)
advisor tune: error: output too
$ advisor confirm --pairs many
```

Run `advisor frobnicate --now`... no: `advisor trials --jsn`, and `advisor tune` alone names it.
"""
    problems = command_problems(page, "page")
    assert len(problems) == 4, problems
    assert "--trails" in problems[0] and "xml" in problems[1] and "many" in problems[2]
    assert "--jsn" in problems[3]
    assert option_problems("Use `--max-metric-drop 2%` or `--max-metrc-drop`.", "page", known_options()) == [
        "page: `--max-metrc-drop`: no advisor command has --max-metrc-drop"]


# ---- links ------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"`", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    _, prose = split_code(text)
    seen: dict[str, int] = {}
    out = set()
    for line in prose.splitlines():
        m = re.match(r"^#{1,6}\s+(.*)$", line)
        if m:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            out.add(a if n == 0 else f"{a}-{n}")
            seen[a] = n + 1
    return out


def link_problems(text: str, page: Path) -> list[str]:
    _, prose = split_code(text)
    problems = []
    for target in LINK.findall(prose):
        if re.match(r"^[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path, _, fragment = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if path and not file.exists():
            problems.append(f"{page.name}: ({target}): no file {path}")
        elif fragment and file.suffix == ".md" and fragment not in anchors(file.read_text() if path else text):
            problems.append(f"{page.name}: ({target}): no heading #{fragment} in {file.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_lands(page):
    problems = link_problems(page.read_text(), page)
    assert not problems, "\n".join(problems)


def test_readme_links_every_doc():
    text = README.read_text()
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in text]
    assert not missing, f"README.md links no docs/{missing}"


def test_the_link_check_catches_a_broken_link():
    page = """# Title: one `thing`
## Its part
[ok](#title-one-thing) [ok](#its-part) [ok](docs/reference.md#knobs) [ok](https://example.com)
[bad](#no-such-part) [bad](docs/nope.md) [bad](docs/reference.md#no-such-heading)
```
[not a link in code](missing.md)
```
"""
    problems = link_problems(page, README)
    assert len(problems) == 3, problems


# ---- environment variables ----------------------------------------------------------------

NOT_ENVIRONMENT = {"ADVISOR_APPLY"}  # a name in the script `advisor export --format hf` writes


def variables_read() -> set[str]:
    names = set()
    for source in [*(REPO / "advisor").rglob("*.py"), *(REPO / "tui").rglob("*.py")]:
        names.update(re.findall(r"\bADVISOR_[A-Z][A-Z_]*[A-Z]\b", source.read_text()))
    return names - NOT_ENVIRONMENT


def readme_table_variables(text: str) -> set[str]:
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(ADVISOR_[A-Z_]+)` \|", section, re.MULTILINE))


def test_every_environment_variable_is_in_the_readme():
    text = README.read_text()
    section = text.split("## Environment variables", 1)[1].split("\n## ", 1)[0]
    read = variables_read()
    assert "ADVISOR_STORAGE" in read and "ADVISOR_IMPORT_TIMEOUT" in read  # the scan finds them
    missing = sorted(name for name in read if name not in section)
    assert not missing, f"README's Environment variables does not name {missing}"
    stale = sorted(readme_table_variables(text) - read)
    assert not stale, f"README's Environment variables lists {stale}, which advisor does not read"


# ---- the contract, the explorer, CI, length -------------------------------------------------

def test_readme_contract_names_every_function():
    from advisor.workload.contract import _OPTIONAL, _REQUIRED

    section = README.read_text().split("## The model.py contract", 1)[1].split("\n## ", 1)[0]
    block = FENCE.search(section).group(2)
    missing = [f"{name}()" for name in (*_REQUIRED, *_OPTIONAL) if f"def {name}(" not in block]
    missing += [name for name in ("BASELINE", "LOSS", "METRIC") if f"{name} = " not in block]
    assert not missing, f"README's contract block lacks {missing}"


def svg_text(svg: str) -> list[str]:
    """The screen a Rich/Textual SVG screenshot shows, as lines of text."""
    rows: dict[int, dict[int, str]] = {}
    for m in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="[\d.]+" textLength="[\d.]+" '
                         r'clip-path="url\(#terminal-line-(\d+)\)">(.*?)</text>', svg):
        column, row = round(float(m.group(1)) / 12.2), int(m.group(2))
        for i, ch in enumerate(html.unescape(m.group(3)).replace("\xa0", " ")):
            rows.setdefault(row, {})[column + i] = ch
    return ["".join(r.get(i, " ") for i in range(max(r) + 1)).rstrip() for _, r in sorted(rows.items())]


def picture_problems(picture: list[str], screen: list[str]) -> list[str]:
    """Lines of the picture that are not the screen's next lines, in order ('...' skips)."""
    problems, at = [], 0
    for line in picture:
        if line == "...":
            continue
        try:
            at = screen.index(line.rstrip(), at) + 1
        except ValueError:
            problems.append(line)
    return problems


def test_readme_explorer_picture_is_the_screenshot():
    section = README.read_text().split("## The explorer", 1)[1].split("\n## ", 1)[0]
    picture = FENCE.search(section).group(2).splitlines()
    screen = svg_text(SNAPSHOT.read_text())
    assert len(screen) >= 39 and screen[0].startswith(" digits_cnn-cpu")
    problems = picture_problems(picture, screen)
    assert not problems, ("README's explorer picture has lines that are not in "
                          f"{SNAPSHOT.relative_to(REPO)} (in that order):\n" + "\n".join(problems))
    assert sum(line != "..." for line in picture) >= 20


def test_the_picture_check_catches_an_invented_line():
    screen = ["a", "b", "c"]
    assert picture_problems(["a", "...", "c"], screen) == []
    assert picture_problems(["c", "a"], screen) == ["a"]
    assert picture_problems(["a", "z"], screen) == ["z"]


def test_ci_takes_the_test_command_from_the_first_code_block():
    """.ci/run runs the line after '# 2. run the tests'; it must be the first block's."""
    text = README.read_text()
    first = FENCE.search(text).group(2).splitlines()
    assert first[0].startswith("# 1. tune the bundled example")
    assert first[1].endswith(".venv/bin/advisor tune examples/digits_cnn.py")
    assert first[2] == "# 2. run the tests"
    assert "python -m pytest" in first[3]
    assert text.count("# 2. run the tests") == 1
    assert "awk '/^# 2\\. run the tests/{getline; print; exit}' README.md" in (REPO / ".ci" / "run").read_text()


def test_readme_stays_short():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (f"README.md has {lines} lines (at most {README_MAX_LINES}): "
                                       "move reference material to docs/")
