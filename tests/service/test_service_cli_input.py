"""Every bad input to the installed ``gpusched``: one line on stderr, the documented exit code,
no traceback, never the Redis password (real subprocesses, run from outside the source tree,
against a password-protected redis-server).

Exit codes (docs/service.md): 2 bad input, bad usage or bad settings; 1 the service failed
(Redis unreachable or refusing, no live worker) or stdout was closed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from service.conftest import require_redis_server
from service.support import GIB, cluster, llm_request

from tasks.base.settings import Settings
from tasks.edges.client import ServiceClient
from tasks.edges.localrun import RedisServer, start_redis

pytestmark = pytest.mark.service

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
GPUSCHED = str(Path(sys.executable).with_name("gpusched"))
PASSWORD = "Pw-7f3kq9zz"  # must never appear in any output
#: Longest a case may run: the slowest waits ~6 s (no live worker); a hang fails its case.
CASE_TIMEOUT_S = 60
#: Commands run at once (each is a short process; most of its time is Python's start-up).
PARALLEL_RUNS = 4


@dataclass(frozen=True)
class Case:
    """One command line and what it must do.

    Attributes:
        args: arguments after ``gpusched`` (``{name}`` placeholders name files of :func:`_files`).
        code: the expected exit code.
        says: a fragment the stderr line must contain.
        env: environment overrides (``{url}`` is the server's URL, password included).
        stdin: ``closed`` (no stdin at all), or file contents to feed.
        stdout: ``closed`` (started without stdout) or ``broken`` (a pipe nobody reads).
    """

    args: tuple[str, ...]
    code: int
    says: str = ""
    env: dict[str, str] = field(default_factory=dict)
    stdin: str | None = None
    stdout: str | None = None


def _deep(levels: int) -> str:
    return "[" * levels + "]" * levels


def _files(tmp: Path) -> dict[str, Path]:
    """Bad (and a few good) input files, by name."""
    worker = cluster(1, 1)["workers"][0]
    semicolon = json.loads(json.dumps(worker))
    semicolon["status"]["gpu_devices"][0]["type"] = "x;2:cuda"
    texts = {
        "missing": None,
        "empty": "",
        "broken": '{"model": ',
        "deep": _deep(5000),
        "bigint": '{"request_id": "n", "model": {"weight_bytes": ' + "9" * 5000 + "}}",
        "list_of_strings": '["a", "b"]',
        "null": "null",
        "nan": '{"request_id": "nan-1", "model": {"name": "m", "weight_bytes": NaN}}',
        "surrogate": '{"request_id": "sur-1", "model": {"name": "m\\ud800"}}',
        "bad_id": json.dumps({**llm_request("x"), "request_id": "a;b"}),
        "long_id": json.dumps({**llm_request("x"), "request_id": "x" * 250}),
        "number_id": json.dumps({**llm_request("x"), "request_id": 42}),
        "empty_id": json.dumps({**llm_request("x"), "request_id": ""}),
        "deep_config": json.dumps({**llm_request("deep-cfg")}).replace(
            '"hf_config": {', '"hf_config": {"x": ' + _deep(200) + ", ", 1),
        "big_request": json.dumps({**llm_request("big-1"), "notes": "x" * 5000}),
        "rejected": '{"request_id": "edge-bad", "model": {"name": "m", "backend": "vLLM"}}',  # at the edge
        "good": json.dumps(llm_request("good-1")),
        "list_one_bad": json.dumps([llm_request("ok-2"),
                                    {"request_id": "bad-2", "model": {"backend": "vLLM"}}]),
        "snapshot_bad_row": '{"workers": [{"id": "x"}]}',
        "snapshot_semicolon": json.dumps({"workers": [semicolon], "model_instances": []}),
        "snapshot_dup": json.dumps({"workers": [worker, worker], "model_instances": []}),
        "snapshot_list": "[]",
        "snapshot_big": json.dumps(cluster(20, 1)),
        "snapshot_good": json.dumps(cluster(1, 1)),
        "event_kind": '{"kind": "nope"}',
        "event_no_kind": '{"worker_id": 1}',
        "event_unknown_worker": '{"kind": "worker_state", "worker_id": 99, "state": "ready"}',
        "event_bad_state": '{"kind": "worker_state", "worker_id": 1, "state": "sleepy"}',
        "event_bad_type": '{"kind": "worker_state", "worker_id": "one", "state": "ready"}',
        "event_extra": '{"kind": "worker_state", "worker_id": 1, "state": "ready", "typo": 1}',
        "event_gpu_index": json.dumps({"kind": "gpu_memory_changed", "worker_id": 1,
                                       "gpus": [{"index": 7, "total": 8 * GIB}]}),
        "event_gpu_type": json.dumps({"kind": "gpu_memory_changed", "worker_id": 1,
                                      "gpus": [{"type": "a=b", "index": 0, "total": 8 * GIB}]}),
        "event_instance_key": '{"kind": "instance_deleted", "instance_key": "x;y"}',
        "event_no_target": '{"kind": "instance_deleted"}',
        "event_list_second_bad": json.dumps([{"kind": "worker_state", "worker_id": 1, "state": "ready"},
                                             {"kind": "worker_removed", "worker_id": 42}]),
        "event_big": json.dumps({"kind": "worker_labels", "worker_id": 1, "labels": {"k": "v" * 5000}}),
        "tune_wrong": (EXAMPLES / "06-diffusion-qwen-image.json").read_text(),
        "tune_bad_gpus": (EXAMPLES / "tune" / "qwen-image.json").read_text().replace(
            '"num_gpus": 2', '"num_gpus": "many"'),
    }
    files: dict[str, Path] = {}
    for name, text in texts.items():
        path = tmp / f"{name}.json"
        if text is not None:
            path.write_text(text, encoding="utf-8")
        files[name] = path
    (tmp / "binary.json").write_bytes(b"\xff\xfe\x00{")
    files["binary"] = tmp / "binary.json"
    files["directory"] = tmp
    bad_config = tmp / "bad-config"
    bad_config.mkdir()
    (bad_config / "service.json").write_text('{"unreachable_grace": 3}')
    files["bad_config"] = bad_config
    broken_config = tmp / "broken-config"
    broken_config.mkdir()
    (broken_config / "service.json").write_text('{"max_crashes": ')
    files["broken_config"] = broken_config
    return files


def _reading(command: tuple[str, ...], extra: tuple[str, ...] = ()) -> list[Case]:
    """The same unreadable files for a command that reads one."""
    return [
        Case((*command, "{missing}", *extra), 2, "No such file"),
        Case((*command, "{directory}", *extra), 2, "Is a directory"),
        Case((*command, "{binary}", *extra), 2, "not UTF-8"),
        Case((*command, "{empty}", *extra), 2, "invalid JSON"),
        Case((*command, "{broken}", *extra), 2, "invalid JSON at line 1"),
        Case((*command, "{deep}", *extra), 2, "nested too deeply"),
        Case((*command, "{bigint}", *extra), 2, "4300 digits"),
        Case((*command, "-", *extra), 2, "standard input is closed", stdin="closed"),
        Case((*command, "-", *extra), 2, "not UTF-8", stdin="\udcff"),
    ]


USAGE = [
    Case((), 2, "required: COMMAND"),
    Case(("nosuch",), 2, "invalid choice"),
    Case(("schedule", "--nosuch", "a.json"), 2, "unrecognized arguments: --nosuch"),
    Case(("schedule",), 2, "required: REQUEST.json"),
    Case(("schedule", "a.json", "b.json"), 2, "unrecognized arguments"),
    Case(("tune",), 2, "required: FILE.json"),
    Case(("submit",), 2, "required: FILE.json"),
    Case(("submit", "{good}", "--timeout", "-1"), 2, "--timeout"),
    Case(("submit", "{good}", "--timeout", "0"), 2, "above 0"),
    Case(("submit", "{good}", "--timeout", "soon"), 2, "not a number"),
    Case(("submit", "{good}", "--timeout", "nan"), 2, "above 0"),
    Case(("submit", "{good}", "--timeout", "inf"), 2, "above 0"),
    Case(("replay", "--since", "garbage"), 2, "not a stream id"),
    Case(("replay", "--since", "1-2-3"), 2, "not a stream id"),
    Case(("replay", "--since", ""), 2, "not a stream id"),
    Case(("worker", "--concurrency", "0"), 2, "above 0"),
    Case(("worker", "--concurrency", "many"), 2, "not an integer"),
    Case(("worker", "--pool", "gevent"), 2, "invalid choice"),
    Case(("worker", "--loglevel", "LOUD"), 2, "invalid choice"),
    Case(("cluster",), 2, "required: ACTION"),
    Case(("cluster", "nope"), 2, "invalid choice"),
    Case(("cluster", "apply"), 2, "required: FILE.json"),
    Case(("cluster", "event"), 2, "required: FILE.json"),
    Case(("cluster", "show", "--limit", "-1"), 2, "argument --limit: '-1' must be 0 or more"),
    Case(("cluster", "show", "--limit", "many", "--json"), 2, "argument --limit: 'many' is not an integer"),
]

OFFLINE = [
    *_reading(("schedule",)),
    *_reading(("tune",)),
    Case(("schedule", "{null}"), 2, "rejected"),
    Case(("schedule", "{list_of_strings}"), 2, "rejected"),
    Case(("schedule", "{nan}"), 2, "model.weight_bytes"),
    Case(("schedule", "{surrogate}"), 2, "model.name"),
    Case(("tune", "{tune_wrong}"), 2, "invalid tune request: platform: Field required"),
    Case(("tune", "{tune_bad_gpus}"), 2, "invalid tune request: explicit_args.num_gpus: Input should be"),
    Case(("tune", "{null}"), 2, "invalid tune request"),
    Case(("schedule", str(EXAMPLES / "01-single-4090.json")), 1, "standard output is closed",
         stdout="closed"),
    Case(("schedule", str(EXAMPLES / "02-h100x8-tp8.json")), 1, "standard output was closed",
         stdout="broken"),
    Case(("tune", str(EXAMPLES / "tune" / "qwen-image.json")), 1, "standard output was closed",
         stdout="broken"),
]

SERVICE = [
    *_reading(("submit",)),
    *_reading(("cluster", "apply")),
    *_reading(("cluster", "event")),
    Case(("submit", "{rejected}"), 2, "edge-bad: model.backend"),
    Case(("submit", "{nan}"), 2, "model.weight_bytes"),
    Case(("submit", "{surrogate}"), 2, "model.name: is not valid Unicode"),
    Case(("submit", "{bad_id}"), 2, "request_id: must match"),
    # an id the core does not take: rejected (was accepted under a derived req-… id)
    Case(("submit", "{long_id}"), 2, "request_id: String should have at most 200 characters"),
    Case(("submit", "{number_id}"), 2, "request_id: Input should be a valid string"),
    Case(("submit", "{empty_id}"), 2, "request_id: String should have at least 1 character"),
    Case(("submit", "{deep_config}"), 2, "model.hf_config: nests more than 64 levels deep"),
    Case(("submit", "{big_request}"), 2, "max_request_bytes limit of 4096 bytes",
         env={"GPUSCHED_MAX_REQUEST_BYTES": "4096"}),
    Case(("submit", "{list_one_bad}"), 2, "bad-2: model.backend"),
    Case(("submit", "{null}"), 2, "rejected"),
    Case(("submit", "{good}"), 1, "standard output is closed", stdout="closed"),
    # a folder that cannot be written is bad input, not a service failure (it was exit 1)
    Case(("audit", "export", "/proc/no-such-folder"), 2, "cannot write to /proc/no-such-folder"),
    # an endless input is refused at the CLI's read limit (it grew to gigabytes before)
    *(Case((*command, "/dev/zero"), 2, "/dev/zero: more than 268435456 bytes")
      for command in (("submit",), ("schedule",))),
    Case(("cluster", "apply", "{snapshot_bad_row}"), 2, "workers.0.id"),
    Case(("cluster", "apply", "{snapshot_semicolon}"), 2, "workers.0.status.gpu_devices.0.type: must match"),
    Case(("cluster", "apply", "{snapshot_dup}"), 2, "workers.1.id: duplicate worker id"),
    Case(("cluster", "apply", "{snapshot_list}"), 2, "expected an object"),
    Case(("cluster", "apply", "{snapshot_big}"), 2, "max_snapshot_bytes limit of 4096 bytes",
         env={"GPUSCHED_MAX_SNAPSHOT_BYTES": "4096"}),
    Case(("cluster", "event", "{event_kind}"), 2, "kind: must be one of"),
    Case(("cluster", "event", "{event_no_kind}"), 2, "kind: must be one of"),
    Case(("cluster", "event", "{event_unknown_worker}"), 2, "worker_id: no worker 99 in the cluster"),
    Case(("cluster", "event", "{event_unknown_worker}", "--local"), 2, "worker_id: no worker 99"),
    Case(("cluster", "event", "{event_bad_state}"), 2, "state: unknown worker state"),
    Case(("cluster", "event", "{event_bad_type}"), 2, "worker_id: Input should be a valid integer"),
    Case(("cluster", "event", "{event_extra}"), 2, "typo: Extra inputs are not permitted"),
    Case(("cluster", "event", "{event_gpu_index}"), 2, "gpus.0.index: worker 1 has no GPU with index 7"),
    Case(("cluster", "event", "{event_gpu_type}"), 2, "gpus.0.type: must match"),
    Case(("cluster", "event", "{event_instance_key}"), 2, "instance_key: must be"),
    Case(("cluster", "event", "{event_no_target}"), 2, "instance_key: instance_deleted needs"),
    Case(("cluster", "event", "{event_list_second_bad}"), 2, "events.1.worker_id: no worker 42"),
    Case(("cluster", "event", "{event_big}"), 2, "max_event_bytes limit of 4096 bytes",
         env={"GPUSCHED_MAX_EVENT_BYTES": "4096"}),
    Case(("replay", "--request-id", "nosuch"), 2, "no decision of request nosuch"),
    Case(("describe",), 2, "required: REQUEST_ID"),
    Case(("describe", "nosuch"), 2, "no request 'nosuch'"),
    Case(("cancel", "nosuch"), 2, "no request 'nosuch'"),
    Case(("cluster", "show", "--sort", "nope"), 2, "invalid choice"),
    Case(("submit", "{good}", "--wait", "--timeout", "60"), 1, "no gpusched worker is alive"),
]

SETTINGS = [
    Case(("submit", "{good}"), 2, "GPUSCHED_UNREACHABLE_GRACE (did you mean GPUSCHED_UNREACHABLE_GRACE_S?)",
         env={"GPUSCHED_UNREACHABLE_GRACE": "3"}),
    Case(("submit", "{good}"), 2, "invalid setting max_crashes", env={"GPUSCHED_MAX_CRASHES": "many"}),
    Case(("submit", "{good}"), 2, "invalid setting task_time_limit_s: must stay below visibility_timeout_s",
         env={"GPUSCHED_VISIBILITY_TIMEOUT_S": "60"}),
    Case(("submit", "{good}"), 2, "invalid setting stuck_after_s: must exceed visibility_timeout_s",
         env={"GPUSCHED_STUCK_AFTER_S": "300"}),
    Case(("submit", "{good}"), 2, "invalid setting cluster", env={"GPUSCHED_CLUSTER": "bad id"}),
    Case(("submit", "{good}"), 2, "invalid setting log_format", env={"GPUSCHED_LOG_FORMAT": "xml"}),
    Case(("submit", "{good}"), 2, "invalid setting model_roots: GPUSCHED_MODEL_ROOTS must be a JSON list",
         env={"GPUSCHED_MODEL_ROOTS": "/models"}),
    # a typo stops the offline commands too (they never read the settings, but it is still a typo)
    *(Case(args, 2, "unknown setting in the environment: GPUSCHED_UNREACHABLE_GRACE (did you mean",
           env={"GPUSCHED_UNREACHABLE_GRACE": "5"})
      for args in (("schedule", str(EXAMPLES / "01-single-4090.json")),
                   ("tune", str(EXAMPLES / "tune" / "qwen-image.json")), ("--version",))),
    Case(("schedule", str(EXAMPLES / "01-single-4090.json")), 2, "invalid setting max_crashes",
         env={"GPUSCHED_MAX_CRASHES": "many"}),
    Case(("replay",), 2, "unknown setting in", env={"GPUSCHED_CONFIG_DIR": "{bad_config}"}),
    Case(("replay",), 2, "invalid JSON", env={"GPUSCHED_CONFIG_DIR": "{broken_config}"}),
    Case(("worker",), 2, "did you mean", env={"GPUSCHED_DRAIN_INTERVAL": "1"}),
]

CONNECTIONS = [
    *(Case(args, 1, "Authentication required", env={"GPUSCHED_REDIS_URL": "{url_without_password}"})
      for args in (("submit", "{good}"), ("cluster", "apply", "{snapshot_good}"),
                   ("cluster", "event", "{event_kind}"), ("replay",))),
    *(Case(args, 1, "invalid username-password pair", env={"GPUSCHED_REDIS_URL": "{url_wrong_password}"})
      for args in (("submit", "{good}"), ("replay",), ("describe", "x"), ("cluster", "show"))),
    Case(("health",), 1, "Redis does not answer", env={"GPUSCHED_REDIS_URL": "{url_without_password}"}),
    # the password from GPUSCHED_REDIS_PASSWORD (docs/security.md): past Redis, to the request's answer
    *(Case(args, 2, "no request 'nosuch'",
           env={"GPUSCHED_REDIS_URL": "{url_without_password}", "GPUSCHED_REDIS_PASSWORD": PASSWORD})
      for args in (("describe", "nosuch"), ("cancel", "nosuch"))),
    # health's first PING is bounded like every command's (it hung ~2 min on TLS to a plain server)
    Case(("health",), 1, "unhealthy: cannot reach Redis",
         env={"GPUSCHED_REDIS_URL": "{url_tls}", "GPUSCHED_REDIS_SOCKET_CONNECT_TIMEOUT_S": "1"}),
    *(Case(args, 1, "Connection refused", env={"GPUSCHED_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:1/0"})
      for args in (("submit", "{good}"), ("cluster", "event", "{event_kind}"), ("replay",))),
    Case(("submit", "{good}"), 2, "must be a redis://, rediss:// or unix:// URL",
         env={"GPUSCHED_REDIS_URL": f"http://:{PASSWORD}@127.0.0.1:6379/0"}),
    Case(("submit", "{good}"), 2, "is not a valid URL",
         env={"GPUSCHED_REDIS_URL": f"redis://:{PASSWORD}@127.0.0.1:port/0"}),
    # TLS to a plain server never finishes its handshake: bounded by the connect timeout
    Case(("submit", "{good}"), 1, "Timeout connecting",
         env={"GPUSCHED_REDIS_URL": "{url_tls}", "GPUSCHED_REDIS_SOCKET_CONNECT_TIMEOUT_S": "1"}),
    Case(("submit", "{good}"), 1, "cannot reach Redis",
         env={"GPUSCHED_REDIS_URL": f"unix://:{PASSWORD}@/nonexistent/redis.sock"}),
]

CASES = USAGE + OFFLINE + SERVICE + SETTINGS + CONNECTIONS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A password-protected redis-server holding a one-worker cluster (and no worker process)."""
    require_redis_server()
    started = start_redis(directory=tmp_path_factory.mktemp("redis-auth"), password=PASSWORD)
    client = ServiceClient(Settings(redis_url=started.url))
    client.apply_cluster(cluster(1, 1))
    client.close()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _files(tmp_path_factory.mktemp("inputs"))


def _run(
    case: Case, server: RedisServer, files: dict[str, Path], cwd: Path
) -> subprocess.CompletedProcess[str]:
    names = {name: str(path) for name, path in files.items()}
    names |= {
        "url": server.url,
        "url_without_password": server.url.replace(f":{PASSWORD}@", ""),
        "url_wrong_password": server.url.replace(PASSWORD, "not-the-password"),
        "url_tls": server.url.replace("redis://", "rediss://"),
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    env |= {"GPUSCHED_REDIS_URL": server.url, **{k: v.format(**names) for k, v in case.env.items()}}
    command = [GPUSCHED, *(arg.format(**names) for arg in case.args)]
    if case.stdout == "closed" or case.stdin == "closed":
        redirect = ">&-" if case.stdout == "closed" else "<&-"
        shell = " ".join(f"'{part}'" for part in command) + f" {redirect}"
        return subprocess.run(["bash", "-c", f"exec {shell}"], env=env, cwd=cwd, capture_output=True,
                              text=True, timeout=CASE_TIMEOUT_S, check=False)
    stdin = case.stdin.encode("utf-8", "surrogateescape") if case.stdin is not None else b""
    if case.stdout == "broken":
        reader, writer = os.pipe()
        os.close(reader)  # nobody will read: every write fails
        try:
            done = subprocess.run(command, env=env, cwd=cwd, input=stdin, stdout=writer,
                                  stderr=subprocess.PIPE, timeout=CASE_TIMEOUT_S, check=False)
        finally:
            os.close(writer)
        return subprocess.CompletedProcess(done.args, done.returncode, "", done.stderr.decode())
    done = subprocess.run(command, env=env, cwd=cwd, input=stdin, capture_output=True, timeout=CASE_TIMEOUT_S,
                          check=False)
    return subprocess.CompletedProcess(done.args, done.returncode, done.stdout.decode(errors="replace"),
                                       done.stderr.decode(errors="replace"))


@pytest.fixture(scope="module")
def outcomes(
    server: RedisServer, files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> list[subprocess.CompletedProcess[str]]:
    """Every case's run, a few at a time (the cases share nothing but the server's cluster)."""
    cwd = tmp_path_factory.mktemp("elsewhere")  # not the source tree
    def run(case: Case) -> subprocess.CompletedProcess[str]:
        try:
            return _run(case, server, files, cwd)
        except subprocess.TimeoutExpired as hung:  # a hang is this case's failure, not the table's
            return subprocess.CompletedProcess(hung.cmd, -1, "", f"hung for {hung.timeout:g} s")

    with ThreadPoolExecutor(max_workers=PARALLEL_RUNS) as pool:
        return list(pool.map(run, CASES))


@pytest.mark.parametrize("index", range(len(CASES)),
                         ids=[f"{i:03d}-{' '.join(c.args)[:50]}" for i, c in enumerate(CASES)])
def test_bad_input_gives_one_line_and_the_documented_exit_code(
    index: int, outcomes: list[subprocess.CompletedProcess[str]]
) -> None:
    case, done = CASES[index], outcomes[index]
    assert done.returncode == case.code, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.endswith("\n"), done.stderr
    assert done.stderr.startswith("gpusched: ") and case.says in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert PASSWORD not in done.stderr + done.stdout


def test_the_table_covers_about_a_hundred_cases() -> None:
    assert len(CASES) >= 100
