"""The command-line tools that make no artifact (chat, serve, trace, artifact, report cards) fail as the steps
do, through one wrapper (`nemotron.cli.one_line_errors`), and every boolean option is a plain switch."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nemotron.cli import EXIT_BAD_INPUT, one_line_errors, parse, run_tool
from nemotron.errors import NemotronError

SRC = Path(__file__).resolve().parents[1] / "src" / "nemotron"


def test_chat_history_is_a_switch_both_ways():
    from nemotron.chat.__main__ import main

    assert parse(main, ["runs/x", "--history"]).history  # was: "Missing value for argument '--history'"
    config = parse(main, ["runs/x", "--no-history"])
    assert config.no_history and not config.history
    assert not parse(main, ["runs/x"]).history and not parse(main, ["runs/x"]).no_history  # the model's default


def test_chat_refuses_both_history_switches_in_one_line(capsys):
    from nemotron.chat.__main__ import main

    with pytest.raises(SystemExit) as exit_:
        run_tool(main, ["runs/x", "--history", "--no-history"])
    assert exit_.value.code == EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: --history and --no-history ask for opposite things; give one of them\n"


def test_the_wrapper_says_one_line_and_exits_2_or_130(capsys):
    def failing(error: BaseException):
        with one_line_errors():
            raise error

    with pytest.raises(SystemExit) as exit_:
        failing(NemotronError("data.json: no 'text' field; name it with --text-field"))
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: data.json: no 'text' field; name it with --text-field\n"
    with pytest.raises(SystemExit) as exit_:
        failing(KeyboardInterrupt())
    assert exit_.value.code == 130 and capsys.readouterr().err == "error: interrupted\n"


def bool_fields_needing_a_value(source: str) -> list[str]:
    """Fields of the dataclasses in `source` that tyro would not make a switch: `bool | None`, Optional[bool],
    or a bool with FlagConversionOff (each wants `--flag True`)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef) or not any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            continue
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                annotation = ast.unparse(item.annotation)
                if "bool" in annotation and ("None" in annotation or "Optional" in annotation
                                             or "FlagConversionOff" in annotation):
                    found.append(f"{node.name}.{item.target.id}: {annotation}")
    return found


@pytest.mark.parametrize("path", sorted(SRC.rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_every_boolean_option_is_a_switch(path):
    wrong = bool_fields_needing_a_value(path.read_text())
    assert not wrong, f"{path.relative_to(SRC)}: {wrong} would want a value; make it a bool with a default"


def test_the_switch_check_finds_an_optional_bool():
    source = ("@dataclass\nclass Config:\n    history: bool | None = None\n    other: bool = True\n"
              "    off: tyro.conf.FlagCreatePairsOff[bool] = False\n    maybe: Optional[bool] = None\n")
    assert bool_fields_needing_a_value(source) == ["Config.history: bool | None", "Config.maybe: Optional[bool]"]


def test_no_tool_keeps_its_own_copy_of_the_wrapper():
    """`errors.print_error` is the one place an `error:` line is printed: `cli.one_line_errors` (every command
    line) and the uncaught-error hook of a bare `tyro.cli(main)` step (`errors.report_in_one_line`) both call it."""
    copies = [str(path.relative_to(SRC)) for path in sorted(SRC.rglob("*.py")) if path.name != "errors.py"
              and re.search(r"""print\(f?["']error: """, path.read_text())]
    assert not copies, f"{copies} print their own `error:` line; use nemotron.cli.one_line_errors or run_tool"
