"""A PNG of the Dagster UI for a reclock config: start the webserver, shoot it headless.

The webserver serves the ``reclock`` code location (``pipelines.definitions``) for the
config named on the command line, bound to 127.0.0.1 on a free port, and is always
stopped afterwards. Chromium must be installed (Debian: ``apt-get install chromium``).

    python -m benchmarks.screenshot --config demo/reclock.yaml --out ui.png \
        [--page /assets/users/changes]
    python -m benchmarks.screenshot --config demo/reclock.yaml --dagster-home demo/dagster \
        --tour docs/assets/screenshots      # every page the documentation's UI tour shows

``running_webserver`` is also what the webserver test uses, so both start it the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from pipelines.run_output import quiet_instance

PROJECT_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
CHROMIUM_TIMEOUT_S = 120.0
# The asset count query the UI itself needs: a location still loading has no asset nodes.
ASSETS_LOADED_QUERY = "{ assetNodes { id } }"


class WebserverFailed(RuntimeError):
    """The webserver exited or did not serve the code location within the time allowed."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def graphql(base_url: str, query: str, timeout_s: float = 30.0) -> Mapping[str, object]:
    """POST one GraphQL query; returns ``data`` and raises on GraphQL errors."""
    request = urllib.request.Request(
        f"{base_url}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = json.load(response)
    if body.get("errors"):
        raise RuntimeError(f"GraphQL errors: {body['errors']}")
    return body["data"]


@contextmanager
def running_webserver(
    config: Path, dagster_home: Path, *, timeout_s: float = READY_TIMEOUT_S
) -> Iterator[str]:
    """Yield the base URL of a webserver serving ``config``'s assets; stop it on exit.

    Ready means the code location has loaded and its assets are queryable, not merely
    that the port answers (the location loads in a subprocess after start-up).
    """
    quiet_instance(dagster_home)
    port = free_port()
    env = {
        **os.environ,
        "RECLOCK_CONFIG": str(Path(config).resolve()),
        "DAGSTER_HOME": str(dagster_home.resolve()),
        "RECLOCK_WEBSERVER_URL": f"http://{HOST}:{port}",  # the daily maintenance reloads it
    }
    command = [
        sys.executable, "-m", "dagster_webserver",
        "-h", HOST, "-p", str(port), "-m", "pipelines.definitions",
    ]
    log_path = dagster_home / "webserver.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base_url = f"http://{HOST}:{port}"
    try:
        wait_until_serving(base_url, process, log_path, timeout_s)
        yield base_url
    finally:
        stop(process)


def wait_until_serving(
    base_url: str, process: subprocess.Popen, log_path: Path, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise WebserverFailed(
                f"webserver exited with {process.returncode}:\n{log_tail(log_path)}"
            )
        try:
            if graphql(base_url, ASSETS_LOADED_QUERY, timeout_s=5)["assetNodes"]:
                return
        except (OSError, RuntimeError):
            pass  # not listening yet, or the code location is still loading
        time.sleep(1)
    raise WebserverFailed(f"no assets served after {timeout_s:.0f} s:\n{log_tail(log_path)}")


def log_tail(log_path: Path, lines: int = 40) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def stop(process: subprocess.Popen) -> None:
    """Stop the webserver and the code server it started (its whole process group)."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(STOP_TIMEOUT_S)


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(url: str, *options: str, size: tuple[int, int] = (1400, 900)) -> str:
    """Headless Chromium on ``url`` with ``options`` (e.g. ``--dump-dom``), after the page's
    scripts ran for up to 15 s of virtual time; returns what it printed."""
    chromium = find_chromium()
    if chromium is None:
        raise FileNotFoundError("chromium is not installed (Debian: apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="reclock-chromium-") as profile:
        done = subprocess.run(
            [
                chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                f"--window-size={size[0]},{size[1]}", "--virtual-time-budget=15000",
                *options, url,
            ],
            check=True, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S,
        )
    return done.stdout


def screenshot(url: str, out: Path, *, size: tuple[int, int] = (1400, 900)) -> Path:
    """A headless Chromium screenshot of ``url`` into ``out`` (PNG)."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    run_chromium(url, f"--screenshot={out}", size=size)
    if not out.exists():
        raise RuntimeError(f"chromium wrote no screenshot to {out}")
    return out


def rendered_text(url: str) -> str:
    """The page's DOM after its scripts ran, as Chromium serialises it (HTML)."""
    return run_chromium(url, "--dump-dom")


# The pages of the documentation's tour of the UI (docs/start/ui-tour.md), by file name.
TOUR = {
    "asset-groups.png": "/asset-groups",
    "users-lineage.png": "/locations/pipelines.definitions/asset-groups/users/lineage",
    "users-changes.png": "/assets/users/changes",
    "users-changes-partitions.png": (
        "/assets/users/changes?view=partitions&partition=2026-01-01T00:03:00"
    ),
    "users-changes-checks.png": "/assets/users/changes?view=checks",
    "users-changes-events.png": "/assets/users/changes?view=events",
    "runs.png": "/runs",
    "automation.png": "/automation",
}


def arguments() -> argparse.ArgumentParser:
    """The command's options."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.screenshot", description=__doc__)
    parser.add_argument("--config", type=Path, required=True, help="reclock config (YAML)")
    parser.add_argument("--out", type=Path, default=Path("reclock-ui.png"))
    parser.add_argument("--page", default="/asset-groups", help="UI path, e.g. /assets/users")
    parser.add_argument(
        "--dagster-home", type=Path, help="instance folder (default: a temporary one)"
    )
    parser.add_argument(
        "--tour", type=Path, metavar="DIR",
        help="shoot every page of the documentation's UI tour into DIR instead",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = arguments().parse_args(argv)
    shots = {args.tour / name: page for name, page in TOUR.items()} if args.tour else {
        args.out: args.page
    }
    with tempfile.TemporaryDirectory(prefix="reclock-dagster-") as scratch:
        home = args.dagster_home or Path(scratch)
        with running_webserver(args.config, home) as base_url:
            for out, page in shots.items():
                print(f"Screenshot of {page}: {screenshot(base_url + page, out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
