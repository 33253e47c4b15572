"""The console under test: a real ``gpusched console`` process and Debian's chromium driven by Playwright.

Skips locally when chromium or Playwright is missing, fails in CI (``make
test`` and ``.ci/run`` install both, ``tools/test-prereqs.sh``). Screenshots go
to ``$CONSOLE_SCREENSHOTS`` (default ``build/console-screenshots``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from service.support import GIB, worker_row

from tasks.edges.localrun import free_port

ROOT = Path(__file__).resolve().parents[2]
#: Debian's chromium (package ``chromium``); Playwright downloads no browser of its own.
CHROMIUM = "/usr/bin/chromium"
#: Flags that work in this sandbox (no GPU, no network beyond localhost).
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
H100 = 85_520_809_984  # 79.65 GiB: an H100 80GB HBM3 as nvidia-smi reports it
SCREENSHOTS = Path(os.environ.get("CONSOLE_SCREENSHOTS") or ROOT / "build" / "console-screenshots")


def require_browser() -> None:
    """Skip locally, fail in CI, when chromium or Playwright is missing."""
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(f"{CHROMIUM} (Debian package chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("playwright (pip install -e '.[test]')")
    if missing:
        message = "the console's browser tests need " + " and ".join(missing) + " (tools/test-prereqs.sh)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def h100_worker(wid: int, name: str, gpus: int = 8, **extra: Any) -> dict[str, Any]:
    """A worker row with ``gpus`` H100 80GB GPUs, labelled ``gpu=h100``."""
    row = worker_row(wid, gpus, H100, **extra)
    row["name"] = name
    row["labels"] = {"gpu": "h100", **extra.get("labels", {})}
    for device in row["status"]["gpu_devices"]:
        device["name"] = "NVIDIA H100 80GB HBM3"
    return row


def big_cluster(workers: int, gpus: int) -> dict[str, Any]:
    """``workers`` × ``gpus`` GPUs of three kinds, every tenth worker not ready (the map's scale case)."""
    rows = []
    for wid in range(1, workers + 1):
        row = worker_row(wid, gpus, [H100, 26_015_170_560, 48 * GIB][wid % 3])
        row["labels"] = {"gpu": ["h100", "4090", "l40s"][wid % 3], "rack": f"r{wid % 40:02d}"}
        for device in row["status"]["gpu_devices"]:
            device["name"] = ["NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "NVIDIA L40S"][wid % 3]
        if wid % 10 == 0:
            row["state"] = "not_ready"
        rows.append(row)
    return {"workers": rows, "model_instances": []}


@dataclass
class ConsoleProcess:
    """``gpusched console`` as a subprocess on a free port."""

    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> ConsoleProcess:
        command = [sys.executable, "-m", "tasks.edges.cli", "console", "--port", str(self.port)]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, env={**os.environ, **self.env}, cwd=ROOT, stdout=log,
                                            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the console exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/replay-status", timeout=2):
                    return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        raise RuntimeError(f"the console did not answer: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)


@contextmanager
def console_process(env: dict[str, str], logs: Path) -> Iterator[ConsoleProcess]:
    """A running console for the deployment whose environment is ``env``."""
    console = ConsoleProcess(env, logs / "console.log").start()
    try:
        yield console
    finally:
        console.stop()


@contextmanager
def browser() -> Iterator[Any]:
    """A Playwright browser context on Debian's chromium with a fresh profile."""
    require_browser()
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="gpusched-chromium-")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1400, "height": 900},
        )
        try:
            yield context
        finally:
            context.close()
            shutil.rmtree(profile, ignore_errors=True)


class WatchedPage:
    """A page whose console errors and uncaught exceptions are collected."""

    def __init__(self, context: Any) -> None:
        self.page = context.new_page()
        self.errors: list[str] = []
        self.page.on("console", lambda message: self.errors.append(message.text)
                     if message.type == "error" else None)
        self.page.on("pageerror", lambda error: self.errors.append(str(error)))

    def open(self, url: str, ready: str, timeout_ms: float = 20_000) -> WatchedPage:
        """Load ``url`` and wait for the selector ``ready``."""
        self.page.goto(url, wait_until="domcontentloaded")
        self.page.wait_for_selector(ready, timeout=timeout_ms, state="attached")
        return self

    def screenshot(self, name: str, full_page: bool = False) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page)
        return path


def feed_events_seen(client: Any, stream: str, timeout: float = 10.0) -> int:
    """How many events a page subscribing to a :class:`FeedHub` on ``client`` receives first (its backlog)."""
    import asyncio

    from tasks.edges.console.feed import FeedHub

    hub = FeedHub(lambda: client, stream)
    hub.start()

    async def first_events() -> int:
        subscriber = None
        deadline = time.monotonic() + timeout
        while subscriber is None or subscriber.queue.empty():
            if time.monotonic() > deadline:
                return 0
            if subscriber is None and hub.connected:
                subscriber = hub.subscribe(asyncio.get_running_loop())
            await asyncio.sleep(0.05)
        return subscriber.queue.qsize()

    try:
        return asyncio.run(first_events())
    finally:
        hub.stop()
