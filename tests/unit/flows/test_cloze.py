"""`cloze`: one console script, a subcommand per entry point, each with its own `--help`."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from flows.cloze import COMMANDS, main
from flows.deploy.cli import parse_args
from tests.fakes import REPO

OPTIONS = {  # each subcommand's --help lists its options
    "run": ["--until STAGE", "--cfg", "--multirun", "--verbose", "OVERRIDE"],
    "serve": ["--config CONFIG"],
    "deploy": ["--config CONFIG", "serve", "register"],
    "refresh": ["OVERRIDE", "refresh.domain"],
    "evaluate": ["--verbose", "OVERRIDE", "pretrain.init_from"],
    "compare": ["--last LAST", "--run RUN_ID", "--format", "--all", "--include-unfinished"],
    "lift": ["--experiment {pubmed,sst2}", "--via-transformers", "OVERRIDE"],
    "ui": ["--prefect-port PREFECT_PORT", "--mlflow-port MLFLOW_PORT"],
}


def test_the_console_script_is_cloze() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"cloze": "flows.cloze:main"}


def test_cloze_help_lists_every_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert set(OPTIONS) == set(COMMANDS)
    for name in COMMANDS:
        assert f"\n  {name} " in listed


@pytest.mark.parametrize("name", OPTIONS)
def test_each_subcommand_help_lists_its_options(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    shown = capsys.readouterr().out
    assert shown.startswith(f"usage: cloze {name} ")
    for option in OPTIONS[name]:
        assert option in shown


def test_cloze_serve_reads_as_one_command(capsys: pytest.CaptureFixture[str]) -> None:
    """`cloze serve --help` printed `cloze serve [-h] [--config CONFIG] {serve,register}`,
    which reads as `cloze serve serve` (issue 53, case 20)."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    usage = capsys.readouterr().out.splitlines()[0]
    assert usage == "usage: cloze serve [-h] [--config CONFIG]"
    assert parse_args(["--config", "team"], "cloze serve", "serve").command == "serve"


def test_an_unknown_command_or_stage_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trian"]) == 2
    assert "error: unknown command 'trian'; one of run, serve" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["run", "--until", "pretrian"])
    assert done.value.code == 2
    assert "argument --until: invalid choice: 'pretrian'" in capsys.readouterr().err


def test_a_refused_config_costs_no_torch_lightning_mlflow_or_prefect_import() -> None:
    heavy = ("torch", "pytorch_lightning", "mlflow", "prefect")
    program = (
        "import sys\nfrom flows.cloze import main\n"
        "code = main(['run', 'trainer.learning_rate=-1', '--until', 'shards'])\n"
        f"print(code, sorted(name for name in {heavy!r} if name in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert "error: trainer.learning_rate=-1 must be greater than 0" in result.stderr
    assert result.stdout.splitlines()[-1] == "2 []", result.stdout + result.stderr


def test_a_refresh_without_its_domain_is_refused_naming_the_key(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["refresh", "experiment=smoke"]) == 2
    assert capsys.readouterr().err == (
        "error: domain-refresh needs refresh.domain (e.g. refresh.domain=legal) and "
        "corpus=files with corpus.paths pointing at the growing corpus directory\n"
    )
