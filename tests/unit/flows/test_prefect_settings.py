"""Prefect reads its settings once, when it is first imported: the CLI must not import it before
`configure_services` has set them.

A module-level `from prefect... import` anywhere the CLI imports early froze Prefect's defaults:
5 client retries per call instead of 3 (a run that lost its Prefect server spent 137 s instead
of 75-80 s failing to report), and a 20 s temporary-server start-up budget instead of 120 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.fakes import REPO

PROBE = """
import sys
from pathlib import Path
import flows.__main__  # everything the CLI imports before it configures the services
assert not [name for name in sys.modules if name.split(".")[0] == "prefect"], "prefect imported"
from flows.core.paths import RunPaths, configure_services
configure_services(RunPaths(Path(sys.argv[1])), None, 30)
import flows.pipeline
from prefect.settings import PREFECT_CLIENT_MAX_RETRIES, PREFECT_HOME
from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS as STARTUP
print(PREFECT_CLIENT_MAX_RETRIES.value(), STARTUP.value(), PREFECT_HOME.value())
"""


def test_the_cli_configures_prefect_before_prefect_reads_its_settings(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PREFECT_")}
    env["PYTHONPATH"] = str(REPO)
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    retries, startup, home = probe.stdout.split()
    assert (retries, startup) == ("3", "120")
    assert Path(home) == tmp_path / "prefect"
