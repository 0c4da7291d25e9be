"""A bad config value is refused before the heavy libraries load.

Validation needs the settings classes only; Lightning, MLflow and Prefect are imported once the
config is known to be good (they cost seconds to import), so a typo costs the user seconds too.
"""

from __future__ import annotations

import subprocess
import sys

from tests.fakes import REPO

HEAVY = ("pytorch_lightning", "mlflow", "prefect")
PROGRAM = """
import sys
from flows.__main__ import main
code = main([{override!r}])
print(code, sorted(name for name in {heavy!r} if name in sys.modules))
"""


def run_cli(override: str) -> subprocess.CompletedProcess[str]:
    program = PROGRAM.format(override=override, heavy=HEAVY)
    return subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def test_a_bad_value_is_refused_before_lightning_mlflow_or_prefect_are_imported() -> None:
    result = run_cli("trainer.learning_rate=-1")
    assert "error: trainer.learning_rate=-1 must be greater than 0" in result.stderr
    assert result.stdout.split("\n")[-2] == "2 []", result.stdout + result.stderr


def test_a_typo_d_key_is_one_line_naming_the_nearest_keys_without_the_plus_advice() -> None:
    result = run_cli("trainer.max_stepz=5")
    assert result.stderr == (
        "error: unknown config key trainer.max_stepz; nearest valid keys: trainer.max_steps, "
        "trainer.max_tokens\n"
    )  # one line: no traceback, no "use +trainer.max_stepz=5"
    assert result.stdout.split("\n")[-2] == "2 []", result.stdout + result.stderr
