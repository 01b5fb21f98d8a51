"""Real tracking servers for tests: `mlflow server` on loopback over SQLite or a throwaway PostgreSQL.

    with PostgresCluster() as database, MlflowServer(tmp_path / "server", database.uri) as server:
        MlflowClient(server.uri) ...          # real HTTP, real store
        server.stop(kill=True)                # a crash: SIGKILL to the whole process group
        server.start()                        # back on the same port, over the same store

Every process started here runs in its own process group (`mlflow server` starts uvicorn as a child), and the
group is killed on the way out of a `with`, at `stop()`, and at interpreter exit for anything still running:
a failing test leaves no server behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

LOOPBACK_HOSTS = "127.0.0.1:*,localhost:*"  # MLflow 3 answers 403 to Host headers it was not told about
POSTGRES_MISSING = (
    "PostgreSQL's server binaries (initdb, postgres) are not installed: apt-get install postgresql "
    "(.ci/run installs it)"
)

_running: dict[int, Any] = {}  # id(object) -> MlflowServer / PostgresCluster still running, for atexit


def free_port(span: int = 1) -> int:
    """A port that is free now, with the `span - 1` ports after it (JAX's coordinator takes the rendezvous port +
    1), below the range Linux hands out for port 0 (32768 up by default): a server killed and started again on its
    port (a blink) leaves it free for seconds, and a port the system handed out (gloo's, a client's) must not take
    it meanwhile. Drawn from the system's randomness: a test that seeds `random` must not make two pytest workers
    draw the same."""
    draw = random.SystemRandom()
    for _ in range(1000):
        port = draw.randrange(20000, 32768 - span)
        with contextlib.ExitStack() as probes:
            try:
                for offset in range(span):
                    probes.enter_context(socket.socket()).bind(("127.0.0.1", port + offset))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port between 20000 and 32767")


def http_status(url: str, timeout: float = 2) -> int | None:
    """The HTTP status of GET url; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def group_processes(pgid: int) -> list[psutil.Process]:
    """Live (non-zombie) processes in process group `pgid`."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, ProcessLookupError):
            if os.getpgid(process.pid) == pgid and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


def kill_group(process: subprocess.Popen, sig: int = signal.SIGTERM, grace_s: float = 15) -> None:
    """Send `sig` to the process group led by `process`, SIGKILL whatever is left after `grace_s`, reap the
    leader, and wait until no member of the group is alive."""
    pgid = process.pid  # start_new_session=True: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace_s)
    deadline = time.monotonic() + grace_s
    while True:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=1)
        if process.returncode is not None and not group_processes(pgid):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"process group {pgid} survived SIGKILL: {group_processes(pgid)}")


def _server_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, **extra}


class MlflowServer:
    """A real `mlflow server` on a free loopback port over `store_uri` (default: a SQLite file in `folder`),
    with --serve-artifacts into `folder`/artifacts. `restart()` and `start()` after `stop()` reuse the same
    port and store, as a crashed server brought back by its supervisor would.

    MLflow's background job runner (GenAI scorers) is switched off: nothing here uses it, and its consumers
    cost a 2-core machine seconds at start."""

    def __init__(
        self,
        folder: Path,
        store_uri: str | None = None,
        *,
        allowed_hosts: str = LOOPBACK_HOSTS,
        options: Sequence[str] = (),
        startup_s: float = 120,
    ) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.store_uri = store_uri or f"sqlite:///{self.folder / 'mlflow.db'}"
        self.artifacts = self.folder / "artifacts"
        self.allowed_hosts = allowed_hosts
        self.options = list(options)
        self.startup_s = startup_s
        self.port = free_port()
        self.log_path = self.folder / "server.log"
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> MlflowServer:
        """Start and wait until /health answers 200; raises with the end of the server's log otherwise."""
        if self.running:
            raise RuntimeError(f"mlflow server on {self.uri} is already running")
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", self.store_uri,
            "--serve-artifacts", "--artifacts-destination", str(self.artifacts),
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
            "--allowed-hosts", self.allowed_hosts,
            *self.options,
        ]  # fmt: skip
        with self.log_path.open("a") as log:
            log.write(f"--- {' '.join(command)}\n")
            log.flush()
            self.process = subprocess.Popen(
                command,
                cwd=self.folder,
                env=_server_env({"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _running[id(self)] = self
        deadline = time.monotonic() + self.startup_s
        while http_status(f"{self.uri}/health") != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop(kill=True)
                raise RuntimeError(f"mlflow server did not answer on {self.uri}/health:\n{self.log_tail()}")
            time.sleep(0.25)
        return self

    def stop(self, kill: bool = False) -> None:
        """Stop the server and every process it started. kill=True sends SIGKILL at once (a crash: no
        shutdown handler runs); otherwise SIGTERM, then SIGKILL for what is left after 15 s."""
        if self.process is not None:
            kill_group(self.process, signal.SIGKILL if kill else signal.SIGTERM)
        _running.pop(id(self), None)

    def restart(self, kill: bool = False) -> MlflowServer:
        self.stop(kill=kill)
        return self.start()

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ------------------------------------------------------------------------------------------ a busy gateway


class BusyProxy:
    """A real HTTP proxy process on a free loopback port in front of `target` (a server's URI), as a gateway or a
    rate limiter is: it forwards every request, except during a window that `busy(seconds)` opens, when it
    answers 429 Too Many Requests (with Retry-After) for the first half and 503 Service Unavailable for the
    rest, without passing the request on."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.port = free_port()
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> BusyProxy:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "busy-proxy", str(self.port), self.target],
            env=_server_env({}),
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        _running[id(self)] = self
        deadline = time.monotonic() + 30
        while http_status(f"{self.uri}/health") != 200:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the proxy on {self.uri} did not forward /health to {self.target}")
            time.sleep(0.1)
        return self

    def busy(self, seconds: float) -> None:
        """From now on, for `seconds`: 429, then 503."""
        if http_status(f"{self.uri}{_BUSY_PATH}?seconds={seconds}") != 204:
            raise RuntimeError(f"the proxy on {self.uri} did not take the busy window")

    def stop(self, kill: bool = False) -> None:
        if self.process is not None:
            kill_group(self.process, signal.SIGKILL if kill else signal.SIGTERM)
        _running.pop(id(self), None)

    def __enter__(self) -> BusyProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_BUSY_PATH = "/__busy_proxy__/busy"


def _serve_busy_proxy(port: int, target: str) -> None:
    """The proxy's process (BusyProxy)."""
    import http.client
    import http.server
    import urllib.parse

    busy_until = [0.0, 0.0]  # [when the 429s end, when the 503s end], monotonic
    upstream = urllib.parse.urlsplit(target)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return

        def _answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            url = urllib.parse.urlsplit(self.path)
            if url.path == _BUSY_PATH:
                seconds = float(urllib.parse.parse_qs(url.query)["seconds"][0])
                now = time.monotonic()
                busy_until[:] = [now + seconds / 2, now + seconds]
                self._answer(204, {})
                return
            now = time.monotonic()
            if now < busy_until[0]:
                self._answer(429, {"Retry-After": "1", "Content-Type": "text/plain"}, b"Too Many Requests")
                return
            if now < busy_until[1]:
                self._answer(503, {"Content-Type": "text/plain"}, b"Service Unavailable")
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            connection = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            try:
                connection.request(self.command, self.path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                passed = {k: v for k, v in response.getheaders()
                          if k.lower() not in ("content-length", "transfer-encoding", "connection")}  # fmt: skip
                self._answer(response.status, passed, payload)
            except OSError:
                self._answer(502, {"Content-Type": "text/plain"}, b"Bad Gateway")
            finally:
                connection.close()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()


# ------------------------------------------------------------------------------------------------ PostgreSQL


def postgres_bin_dir() -> Path | None:
    """The folder with initdb and postgres: on PATH, else Debian's /usr/lib/postgresql/<newest>/bin."""
    initdb = shutil.which("initdb")
    if initdb and (Path(initdb).resolve().parent / "postgres").exists():
        return Path(initdb).resolve().parent
    found = [p.parent for p in Path("/usr/lib/postgresql").glob("*/bin/initdb") if (p.parent / "postgres").exists()]
    found.sort(key=lambda folder: int(folder.parent.name) if folder.parent.name.isdigit() else 0)
    return found[-1] if found else None


class PostgresCluster:
    """A throwaway PostgreSQL: initdb into a fresh temporary folder, the server on a free loopback port (and a
    unix socket in the same folder), one empty database, `uri` for SQLAlchemy with the psycopg (3) driver.

    PostgreSQL refuses to run as root, so under root the cluster belongs to the `postgres` system user that
    Debian's package creates. Durability is traded for speed (fsync off): the cluster lives for one test."""

    def __init__(self, database: str = "mlflow", startup_s: float = 60) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError(POSTGRES_MISSING)
        self.bin_dir = bin_dir
        self.database = database
        self.startup_s = startup_s
        self.port = free_port()
        self.folder: Path | None = None
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{self.database}"

    @property
    def socket_dir(self) -> Path | None:
        return self.folder

    def start(self) -> PostgresCluster:
        import psycopg

        # A short path of its own: unix socket paths are limited to ~100 bytes, and pytest's tmp_path is
        # neither short nor readable by another user.
        self.folder = Path(tempfile.mkdtemp(prefix="trainbench-pg-"))
        as_user = self._unprivileged()
        if as_user:
            os.chown(self.folder, as_user["user"], as_user["group"])
        _running[id(self)] = self
        data = self.folder / "data"
        created = subprocess.run(
            [str(self.bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust", "-E", "UTF8",
             "--no-sync", "--no-instructions"],
            cwd=self.folder, capture_output=True, text=True, env=self._env(), **as_user,
        )  # fmt: skip
        if created.returncode != 0:
            self.stop()
            raise RuntimeError(f"initdb failed:\n{created.stdout}\n{created.stderr}")
        log_path = self.folder / "postgres.log"
        with log_path.open("w") as log:
            self.process = subprocess.Popen(
                [str(self.bin_dir / "postgres"), "-D", str(data), "-p", str(self.port), "-k", str(self.folder),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off"],
                cwd=self.folder, env=self._env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                **as_user,
            )  # fmt: skip
        deadline = time.monotonic() + self.startup_s
        while True:
            try:
                with psycopg.connect(
                    host="127.0.0.1", port=self.port, user="postgres", dbname="postgres", connect_timeout=2,
                    autocommit=True,
                ) as connection:  # fmt: skip
                    connection.execute(f'CREATE DATABASE "{self.database}"')
                return self
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    tail = log_path.read_text(errors="replace")[-3000:]
                    self.stop()
                    raise RuntimeError(f"PostgreSQL did not start on port {self.port}:\n{tail}") from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, close connections), then remove the folder."""
        if self.process is not None:
            kill_group(self.process, signal.SIGINT)
            self.process = None
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
        _running.pop(id(self), None)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @staticmethod
    def _unprivileged() -> dict[str, int]:
        """Popen's user/group to run PostgreSQL as `postgres` when we are root; {} otherwise."""
        if os.geteuid() != 0:
            return {}
        try:
            account = pwd.getpwnam("postgres")
        except KeyError:
            raise RuntimeError("running as root and there is no `postgres` user: apt-get install postgresql") from None
        return {"user": account.pw_uid, "group": account.pw_gid}

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C.UTF-8"  # initdb takes the cluster's locale from here; C.UTF-8 exists everywhere
        if os.geteuid() == 0:
            env["HOME"] = str(self.folder)
        return env


@atexit.register
def _stop_everything() -> None:
    """Last resort for servers a test forgot: nothing outlives the test session."""
    for thing in list(_running.values()):
        with contextlib.suppress(Exception):
            thing.stop(kill=True) if isinstance(thing, (MlflowServer, BusyProxy)) else thing.stop()


if __name__ == "__main__" and sys.argv[1:2] == ["busy-proxy"]:
    _serve_busy_proxy(int(sys.argv[2]), sys.argv[3])
