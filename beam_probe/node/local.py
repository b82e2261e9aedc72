"""Start and stop throw-away Erlang nodes on this machine.

Used by ``beam-probe demo`` and by the test suite; never on a node
beam-probe inspects. Each node gets a unique name, a private HOME holding its
own ``.erlang.cookie`` (mode 400), and is stopped by its pid.
"""

from __future__ import annotations

from typing import Any

import os
import shutil
import socket
import subprocess
import tempfile
import time

from beam_probe.erldist import epmd
from beam_probe.errors import ProbeError


class NodeStartError(ProbeError):
    label = "cannot start node"


def short_host() -> str:
    return socket.gethostname().split(".")[0]


def compile_erl(sources: list[str], outdir: str, erlc: str = "erlc") -> None:
    """Compile .erl files into ``outdir`` with erlc."""
    result = subprocess.run([erlc, "-o", outdir, *sources],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise NodeStartError(f"erlc failed: {result.stdout}{result.stderr}"
                             .strip().splitlines()[-1])


class LocalNode:
    """One local node. ``with LocalNode(...) as node:`` starts and stops it."""

    def __init__(self, name: str, *, erl: str = "erl", cookie: str = "",
                 args: tuple[str, ...] = (), code_paths: tuple[str, ...] = (),
                 eval_expr: str | None = None, dist_port: int | None = None,
                 env: dict[str, str] | None = None,
                 long_host: str | None = None,
                 home_parent: str | None = None) -> None:
        self.name = name
        # -name name@long_host (long names) when given, else -sname.
        self.long_host = long_host
        self.node = f"{name}@{long_host or short_host()}"
        self.erl = erl
        self.cookie = cookie or f"bp{os.getpid()}x{time.monotonic_ns()}"
        self.args = tuple(args)
        self.code_paths = tuple(code_paths)
        self.eval_expr = eval_expr
        self.dist_port = dist_port
        self.env = env
        # Where the private HOME is made (default: the temporary directory).
        self.home_parent = home_parent
        self.home: str | None = None
        self.proc: subprocess.Popen[Any] | None = None

    @property
    def cookie_file(self) -> str:
        assert self.home is not None
        return os.path.join(self.home, ".erlang.cookie")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, timeout: float = 30.0) -> "LocalNode":
        self.home = tempfile.mkdtemp(prefix=f"{self.name}-home-",
                                     dir=self.home_parent)
        with open(self.cookie_file, "w") as f:
            f.write(self.cookie)
        os.chmod(self.cookie_file, 0o400)
        cmd = [self.erl, *(("-name", self.node) if self.long_host
                           else ("-sname", self.name)),
               "-noshell", "-noinput"]
        if self.dist_port:
            # EPMD-less: listen on a fixed port and register nowhere.
            cmd += ["-start_epmd", "false", "-erl_epmd_port",
                    str(self.dist_port)]
        for path in self.code_paths:
            cmd += ["-pa", path]
        cmd += list(self.args)
        if self.eval_expr:
            cmd += ["-eval", self.eval_expr]
        # A node that dies writes erl_crash.dump into its working
        # directory, which is whoever started it's: into its private HOME
        # instead, removed with it.
        env = dict(os.environ if self.env is None else self.env,
                   HOME=self.home,
                   ERL_CRASH_DUMP=os.path.join(self.home, "erl_crash.dump"))
        self._log = open(os.path.join(self.home, "node.log"), "w+")
        self.proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=self._log,
                                     stderr=subprocess.STDOUT)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                tail = self._log.read()[-500:].strip()
                self.stop()
                raise NodeStartError(f"{self.node} exited at start: {tail}")
            if self._registered():
                return
            time.sleep(0.05)
        self.stop()
        raise NodeStartError(f"{self.node} did not come up in {timeout:g} s")

    def _registered(self) -> bool:
        try:
            if self.dist_port:
                socket.create_connection(("127.0.0.1", self.dist_port),
                                         timeout=1).close()
            else:
                epmd.lookup(self.name, self.long_host or short_host(),
                            time.monotonic() + 1.0)
            return True
        except (ProbeError, OSError):
            return False

    def stop(self) -> None:
        """Stop the node by its pid and remove its private HOME."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "_log", None):
            self._log.close()
        if self.home:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None

    def __enter__(self) -> "LocalNode":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
