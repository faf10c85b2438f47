"""`advisor completion bash|zsh|fish`: scripts generated from the parser, checked by the
shells themselves (bash -n, zsh -n, fish -n where installed) and, for bash and fish, by
asking them to complete real command lines."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from advisor.cli.main import COMMANDS

from conftest import REPO


def script(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "advisor", "completion", shell], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def scripts(tmp_path_factory):
    folder = tmp_path_factory.mktemp("completion")
    paths = {}
    for shell in ("bash", "zsh", "fish"):
        paths[shell] = folder / f"advisor.{shell}"
        paths[shell].write_text(script(shell))
    return paths


def test_bash_script_is_valid_and_names_every_command_and_option(scripts):
    text = scripts["bash"].read_text()
    subprocess.run(["bash", "-n", str(scripts["bash"])], check=True)
    for name in COMMANDS:
        assert f"        {name})" in text
    assert "--trials" in text and "--max-metric-drop" in text and "complete -o default -F _advisor advisor" in text


def complete_in_bash(path, words: list[str]) -> list[str]:
    """What bash offers for the last of ``words`` (the line typed so far)."""
    quoted = " ".join(f"'{w}'" for w in words)
    line = f'source {path}; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _advisor; printf "%s\\n" "${{COMPREPLY[@]}}"'
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True)
    return [w for w in done.stdout.splitlines() if w]


@pytest.mark.parametrize("words,offered", [
    (["advisor", ""], [*COMMANDS, "-h", "--help", "--version"]),
    (["advisor", "st"], ["studies"]),
    (["advisor", "tune", "--tri"], ["--trials", "--trial-timeout"]),
    (["advisor", "tune", "model.py", "--workload", ""], ["train", "inference"]),
    (["advisor", "export", "--format", "p"], ["python"]),
    (["advisor", "completion", ""], ["bash", "zsh", "fish"]),
    (["advisor", "trials", "--"], ["--help", "--study", "--storage", "--json"]),
])
def test_bash_completes_commands_options_and_choices(scripts, words, offered):
    assert complete_in_bash(scripts["bash"], words) == offered


def test_zsh_script_names_every_command(scripts):
    text = scripts["zsh"].read_text()
    assert text.startswith("#compdef advisor\n")
    for name in COMMANDS:
        assert f"\n        '{name}:" in text and f"\n                {name}) _arguments" in text
    assert "'--trials=[the study'\\''s total number of measured trials]:trials: '" in text
    assert "'--workload=[" in text and ":workload:(train inference)'" in text
    if shutil.which("zsh"):
        subprocess.run(["zsh", "-n", str(scripts["zsh"])], check=True)


def test_fish_script_names_every_command(scripts):
    text = scripts["fish"].read_text()
    for name in COMMANDS:
        assert f" -a {name} -d " in text and f'"__fish_seen_subcommand_from {name}"' in text
    assert "-l trials -x" in text
    if not shutil.which("fish"):
        pytest.skip("fish is not installed: its syntax and completions are not checked here")
    subprocess.run(["fish", "-n", str(scripts["fish"])], check=True)
    line = f'source {scripts["fish"]}; complete -C "advisor tune --tri"; complete -C "advisor completion "'
    done = subprocess.run(["fish", "-c", line],
                          capture_output=True, text=True, check=True)
    offered = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert offered == ["--trials", "--trial-timeout", "bash", "fish", "zsh"]


def test_an_unknown_shell_is_exit_2(capsys):
    from conftest import exit_status

    assert exit_status(["completion", "tcsh"]) == 2
    assert "invalid choice: 'tcsh'" in capsys.readouterr().err


def test_help_ends_with_examples(capsys):
    from conftest import exit_status

    assert exit_status(["completion", "--help"]) == 0
    out = capsys.readouterr().out.rstrip()
    assert "examples:" in out and out.splitlines()[-1].strip().startswith("advisor completion fish > ")
