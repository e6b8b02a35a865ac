"""``make help`` lists every command of the Makefile, one line each."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAKEFILE = (ROOT / "Makefile").read_text()


def _targets():
    """The Makefile's own rules (not variables, not the venv's stamp)."""
    return [m.group(1) for m in re.finditer(
        r"^([a-z][a-z0-9-]*):(?!=)", MAKEFILE, re.MULTILINE)]


def _phony():
    declared = re.search(r"^\.PHONY:((?:.*\\\n)*.*)$", MAKEFILE,
                         re.MULTILINE).group(1)
    return declared.replace("\\\n", " ").split()


@pytest.fixture(scope="module")
def help_lines():
    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    result = subprocess.run(["make", "-s", "help"], cwd=ROOT,
                            capture_output=True, text=True, check=True)
    return result.stdout.splitlines()


def test_every_rule_is_a_declared_command():
    assert sorted(_targets()) == sorted(_phony()), (
        "the rules of the Makefile and its .PHONY list differ")


def test_make_help_lists_every_command_once(help_lines):
    listed = [line.split()[1] for line in help_lines]
    assert listed == _targets(), (
        "make help lists other commands than the Makefile has: give each "
        "rule a '## what it does' comment after its prerequisites")


def test_each_command_has_one_short_line(help_lines):
    for line in help_lines:
        assert re.match(r"^make [a-z-]+ +\S", line), line
        assert len(line) <= 79, f"too long for one line: {line}"
