"""Every shell example of the README and the API guides runs as pasted against `bidder dev`.

`bidder dev` runs on the session's Redis and Postgres (it loads the demo inventory and makes the
demo key, as for a user); the `export` lines it prints give `BASE`, `API_KEY` and `ADMIN_TOKEN`.
The ```sh blocks of each document then run in order in one `sh -e` shell, as a reader pastes
them into one terminal, in a folder of their own (they write files such as `inventory.json`).
Blocks that are not examples against the service (the install commands, the benchmark) are
fenced as `text`.

`curl` is a shell function that also reports each answer's status: a call after a comment
`# NNN: ...` must answer NNN, every other call a 2xx. Everything runs twice against the same
service: the examples must work again on data the first run left (a registered screen, an
answered offer, a topped-up budget).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.processes import free_port, running
from tests.support.servers import ServerUrls

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = (
    "README.md",
    "docs/api-core.md",
    "docs/api-openrtb.md",
    "docs/migration-openrtb-to-core.md",
    "docs/reports.md",
)
_FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\S*)\s*$")
_EXPECTED = re.compile(r"^\s*#\s*(?P<status>[1-5]\d\d)\b")
_CURL = re.compile(r"(^|[\s($|;&])curl\s")
_STATUS = re.compile(r"^@@status (?P<code>\d{3}) (?P<method>\S+) (?P<url>\S+)$", re.MULTILINE)
#: Reports each answer's status on stderr (curl's `-w %{stderr}`), beside what the example does.
PRELUDE = """\
curl() { command curl -w '%{stderr}@@status %{http_code} %{method} %{url_effective}\\n' "$@"; }
"""


def sh_blocks(text: str) -> list[tuple[int, str]]:
    """The ```sh blocks of a Markdown text (indented ones in lists too): line number, code."""
    blocks: list[tuple[int, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        indent, start = len(fence["indent"]), i + 1
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            i += 1
        if fence["lang"] == "sh":
            blocks.append((start, "\n".join(line[indent:] for line in lines[start:i])))
        i += 1
    return blocks


def expected_statuses(code: str) -> list[int | None]:
    """For each curl call of `code` in order: the status its comment names, or None (a 2xx)."""
    expected: list[int | None] = []
    pending: int | None = None
    for line in code.splitlines():
        if line.lstrip().startswith("#"):
            found = _EXPECTED.match(line)
            pending = int(found["status"]) if found else pending
            continue
        for _ in _CURL.finditer(line.split(" # ", 1)[0]):
            expected.append(pending)
            pending = None
    return expected


def test_the_extraction_finds_blocks_and_expectations() -> None:
    text = "intro\n```sh\n# 404: gone\ncurl -s x\ncurl y | tee a\n```\n  ```sh\n  curl z\n  ```\n"
    blocks = sh_blocks(text)
    assert [code for _, code in blocks] == ["# 404: gone\ncurl -s x\ncurl y | tee a", "curl z"]
    assert expected_statuses(blocks[0][1]) == [404, None]
    assert expected_statuses("X=$(curl a \\\n  | python3)  # -> 201\n# (curl -d ...)\n") == [None]


@contextlib.contextmanager
def bidder_dev(servers: ServerUrls, folder: Path) -> Iterator[dict[str, str]]:
    """`bidder dev` on the session's servers, in `folder`; the variables it prints."""
    port = free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"ADMIN_TOKEN", "SIGNING_SECRETS", "PUBLIC_BASE_URL", "BIDDER_ENV"}
    }
    env.update(
        REDIS_URL=servers.redis_url,
        DATABASE_URL=servers.database_url,
        LOG_LEVEL="WARNING",
        INVENTORY_POLL_SECONDS="0.2",
    )
    log = folder / "dev.log"
    bidder = str(Path(sys.executable).with_name("bidder"))
    with running([bidder, "dev", "--port", str(port)], env, log):
        yield _printed(log, port)


def _printed(log: Path, port: int) -> dict[str, str]:
    """The `export NAME=value` lines `bidder dev` printed, once it serves."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        printed = dict(re.findall(r"^\s*export (\w+)=(\S+)$", log.read_text(), re.MULTILINE))
        if {"BASE", "API_KEY", "ADMIN_TOKEN"} <= set(printed):
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2)
            except httpx.HTTPError:
                ready = None
            if ready is not None and ready.status_code == 200:
                return printed
        time.sleep(0.2)
    pytest.fail("bidder dev did not start:\n" + log.read_text()[-3000:])


def _run_document(name: str, printed: dict[str, str], folder: Path) -> None:
    blocks = sh_blocks((ROOT / name).read_text())
    assert blocks, f"{name} has no shell examples"
    script = PRELUDE + "".join(
        f"echo '@@block {name}:{line}' >&2\n{code}\n" for line, code in blocks
    )
    expected = [status for _, code in blocks for status in expected_statuses(code)]
    folder.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        **printed,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["sh", "-e", "-c", script],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    story = f"{name}\n--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, story
    answers = [(int(m["code"]), m["method"], m["url"]) for m in _STATUS.finditer(done.stderr)]
    assert len(answers) == len(expected), story
    for (code, method, url), want in zip(answers, expected, strict=True):
        if want is None:
            assert 200 <= code < 300, f"{method} {url} answered {code}, a 2xx expected\n{story}"
        else:
            assert code == want, f"{method} {url} answered {code}, {want} expected\n{story}"


@pytest.mark.parametrize("runs", [2])
def test_every_shell_example_runs_as_pasted_against_bidder_dev(
    servers: ServerUrls, clean: None, tmp_path: Path, runs: int
) -> None:
    with bidder_dev(servers, tmp_path) as printed:
        assert printed["API_KEY"].startswith("dk_stg_")
        for run in range(runs):
            for name in DOCUMENTS:
                _run_document(name, printed, tmp_path / f"run{run}" / Path(name).stem)
