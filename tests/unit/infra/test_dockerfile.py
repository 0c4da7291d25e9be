"""infra/Dockerfile, built on paper: no Docker engine runs here, so the build's steps are read,
their build arguments substituted as `docker build` would, and what the image would install,
copy and run as is checked, for the default build and for a CUDA one."""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field

import pytest

from tests.fakes import REPO

DOCKERFILE = REPO / "infra" / "Dockerfile"
VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


@dataclass
class PaperImage:
    """What a build of the Dockerfile would do, in order."""

    args: dict[str, str] = field(default_factory=dict)
    steps: list[tuple[str, list[str]]] = field(default_factory=list)  # (instruction, argv)

    def runs(self, program: str) -> list[list[str]]:
        """Every `program ...` command of the RUN steps (split at `&&`), arguments resolved."""
        commands = []
        for kind, argv in self.steps:
            if kind != "RUN":
                continue
            command: list[str] = []
            for word in [*argv, "&&"]:
                if word == "&&":
                    if command[:1] == [program]:
                        commands.append(command)
                    command = []
                else:
                    command.append(word)
        return commands

    def of(self, kind: str) -> list[list[str]]:
        return [argv for step, argv in self.steps if step == kind]


def build(build_args: dict[str, str] | None = None) -> PaperImage:
    """Reads the Dockerfile's instructions in order, as `docker build --build-arg ...` would."""
    given = build_args or {}
    image = PaperImage()
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        kind, _, rest = line.strip().partition(" ")
        kind = kind.upper()
        if kind == "ARG":
            name, _, default = rest.partition("=")
            image.args[name] = given.get(name, default)
            continue
        resolved = VARIABLE.sub(lambda m: image.args.get(m[1] or m[2], m[0]), rest)
        argv = shlex.split(resolved) if kind in ("RUN", "COPY", "USER") else [resolved]
        image.steps.append((kind, argv))
    return image


def pinned_torch() -> str:
    pins = (REPO / "constraints.txt").read_text().splitlines()
    return next(line for line in pins if line.startswith("torch=="))


@pytest.mark.parametrize("variant", ["cpu", "cu128"])
def test_torch_comes_from_the_variants_index_at_the_projects_pin(variant: str) -> None:
    image = build({} if variant == "cpu" else {"TORCH_VARIANT": variant})
    torch_install = next(cmd for cmd in image.runs("pip") if any("torch==" in w for w in cmd))
    index = torch_install[torch_install.index("--index-url") + 1]
    assert index == f"https://download.pytorch.org/whl/{variant}"
    assert pinned_torch() in torch_install
    makefile = (REPO / "Makefile").read_text()
    assert f"TORCH_VERSION ?= {image.args['TORCH_VERSION']}" in makefile


def test_every_install_is_constrained_and_every_requirement_pinned() -> None:
    image = build()
    installs = image.runs("pip")
    assert installs
    for command in installs:
        assert command[:4] == ["pip", "install", "-c", "constraints.txt"], command
        requirements = [w for w in command[4:] if not w.startswith("-") and "://" not in w]
        for requirement in requirements:
            assert requirement == "." or re.fullmatch(r"[\w.-]+==[\w.+-]+", requirement), command


def test_the_constraints_arrive_before_the_first_install_and_the_project_comes_last() -> None:
    image = build()
    order = [
        ("copy", argv[0]) if kind == "COPY" else ("install", " ".join(argv))
        for kind, argv in image.steps
        if kind == "COPY" or (kind == "RUN" and "pip" in argv)
    ]
    assert order.index(("copy", "constraints.txt")) < min(
        i for i, (what, _) in enumerate(order) if what == "install"
    )
    last_install = image.runs("pip")[-1]
    assert last_install[4:6] == ["-e", "."]
    copied = {argv[0] for argv in image.of("COPY")}
    assert {"flows", "lightning_modules", "conf", "pyproject.toml"} <= copied


def test_the_image_runs_as_the_unprivileged_user_it_creates() -> None:
    image = build()
    (user,) = image.runs("useradd")
    uid = int(user[user.index("--uid") + 1])
    assert uid >= 1000
    assert image.of("USER")[-1] == [user[-1]]  # the last USER wins: the image's processes
    assert image.steps[-1][0] == "CMD" and image.steps[-2][0] == "USER"


def test_every_copied_path_exists_and_passes_the_build_context_filter() -> None:
    patterns = [
        line
        for line in (REPO / "infra" / "Dockerfile.dockerignore").read_text().splitlines()
        if line and not line.startswith("#")
    ]

    def sent(path: str) -> bool:  # the last matching pattern decides, as in .dockerignore
        included = True
        for pattern in patterns:
            negated = pattern.startswith("!")
            if fnmatch.fnmatch(path, pattern.removeprefix("!").rstrip("/")):
                included = negated
        return included

    assert not sent("mlruns") and not sent(".env")  # local runs and secrets stay out
    for argv in build().of("COPY"):
        for source in argv[:-1]:
            assert (REPO / source).exists() and sent(source), source
