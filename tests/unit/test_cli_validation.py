"""A bad config value is refused before the heavy libraries load.

Validation needs the settings classes only; Lightning, MLflow and Prefect are imported once the
config is known to be good (they cost seconds to import), so a typo costs the user seconds too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("pytorch_lightning", "mlflow", "prefect")
PROGRAM = f"""
import sys
from flows.__main__ import main
code = main(["trainer.learning_rate=-1"])
print(code, sorted(name for name in {HEAVY!r} if name in sys.modules))
"""


def test_a_bad_value_is_refused_before_lightning_mlflow_or_prefect_are_imported() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert "error: trainer.learning_rate=-1 must be greater than 0" in result.stderr
    assert result.stdout.split("\n")[-2] == "2 []", result.stdout + result.stderr
