"""The one place ctgscore starts or joins Ray.

    with ray_session(num_cpus=2) as owned:      # joins the Ray named, or starts a local one
        ...
    session = RaySession(address=..., num_cpus=...)   # lazy: starts on `ensure()`, if ever
    session.ensure(); ...; session.close()             # shuts down only a Ray it started

Where Ray comes from, in order: an already initialised Ray in this process; `address`;
`$RAY_ADDRESS` (set by `ray job submit`); else a new local Ray on this machine, always its own:
a Ray head started earlier on the machine (`ray start --head`) is joined only when named
(`address`, the job config's `ray.address`, `$RAY_ADDRESS`), never found and joined silently.

Authentication: Ray's own default. A new local Ray asks for a token (Ray 2.60: `RAY_AUTH_MODE`
unset means token for a local cluster) and starts no dashboard or job server; its GCS and
raylet ports listen on the machine's interfaces (Ray has no loopback-only option), and the
token is what refuses a stranger there (docs/security.md). The token comes from `$RAY_AUTH_TOKEN`, `$RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token`, which is created
here, readable by its owner only, when none exists (`ensure_local_token`). ctgscore never
sets `RAY_AUTH_MODE=disabled`; a caller may (the tests do). Joining a cluster needs its token
in the same variables (docs/job.md, "Token authentication").

Quiet by default: Ray's and Ray Data's own log lines go to Ray's log files (the session
directory's `logs/`), not the terminal; workers' output is not forwarded to the driver; Ray
Data's progress bars and progress log lines are off (ctgscore draws its own bars).

A local Ray keeps its Unix sockets under its temp folder (`ray.temp_dir`, else `$RAY_TMPDIR`,
`$TMPDIR` or /tmp, plus `ray`); a socket path has at most 107 bytes (103 on macOS), so a deep
folder is refused before Ray starts, naming the folder and the setting that fixes it
(`check_socket_room`), rather than with Ray's own error mid-start.

Credentials never travel through Ray: no `runtime_env` environment variables are set here.
Workers of a local Ray inherit this process's environment (so set `AWS_*` before the first
`ensure()`); workers of a cluster use their own (node environment, instance role, Kubernetes
secret; see `deploy/README.md`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import secrets
import sys
from typing import Any, Iterator

from ray_jobs.cluster_token import DEFAULT_OUT as RAY_TOKEN_FILE

QUIET_LOGGERS = ("ray", "ray.train", "ray.tune", "ray.serve")


#: the longest path of a Unix socket, in bytes (the kernel's buffer less its NUL)
SOCKET_PATH_MAX = (104 if sys.platform == "darwin" else 108) - 1
#: what a local Ray writes below its temp folder, its longest socket: the session folder
#: (start date and time to the microsecond, the driver's pid) and the object store's socket
_SESSION_SOCKET = "/session_0000-00-00_00-00-00_000000_{pid}/sockets/plasma_store"


def local_ray_temp_dir(temp_dir: str | None) -> str:
    """The folder a new local Ray keeps its sessions in: `temp_dir` (`~` expanded, made absolute:
    the folder Ray is given, which must be absolute), else Ray's default (`$RAY_TMPDIR`, on
    Linux `$TMPDIR`, else /tmp; then `ray`)."""
    if temp_dir:
        return os.path.abspath(os.path.expanduser(temp_dir))
    if "RAY_TMPDIR" in os.environ:
        base = os.environ["RAY_TMPDIR"]
    elif sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        base = os.environ["TMPDIR"]
    else:
        base = "/tmp"
    return os.path.join(base, "ray")


def check_socket_room(temp_dir: str | None) -> None:
    """A `UsageError` when a new local Ray's socket paths under `temp_dir` (module docstring)
    would pass `SOCKET_PATH_MAX` bytes."""
    if sys.platform == "win32":  # Ray uses TCP there
        return
    root = local_ray_temp_dir(temp_dir)
    longest = root.rstrip("/") + _SESSION_SOCKET.format(pid=os.getpid())
    size = len(longest.encode("utf-8", "surrogateescape"))
    if size > SOCKET_PATH_MAX:
        from scoring.display_names import quoted
        from scoring.errors import UsageError

        where = "'ray.temp_dir'" if temp_dir else ("$RAY_TMPDIR" if "RAY_TMPDIR" in os.environ else "$TMPDIR")
        raise UsageError(f"local Ray temp folder {quoted(root)} (from {where}) is too deep: Ray's sockets there "
                         f"would take {size} bytes, past the {SOCKET_PATH_MAX}-byte limit of a Unix socket path; "
                         "set 'ray.temp_dir' in the job config (or $RAY_TMPDIR) to a short folder such as /tmp/ray")


class RaySession:
    """Starts or joins Ray on the first `ensure()` (a run with nothing to do never does) and
    `close()` shuts down only a Ray this object started."""

    def __init__(
        self,
        address: str | None = None,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        temp_dir: str | None = None,
        object_store_memory: int | None = None,
        quiet: bool = True,
        capture_native_stderr: bool = True,
    ):
        self.capture_native_stderr = capture_native_stderr
        self.address = address
        self.num_cpus = num_cpus
        self.num_gpus = num_gpus
        self.temp_dir = temp_dir
        self.object_store_memory = object_store_memory
        self.quiet = quiet
        self.owned = False  # this object called ray.init (and will call ray.shutdown)
        self.local = False  # ... and that Ray is a local one (fixed size, no autoscaler)
        self.ready = False

    def ensure(self) -> "RaySession":
        if self.ready:
            return self
        import ray

        if self.quiet:
            quiet_ray_logging()
            divert_cluster_messages()
        if not ray.is_initialized():
            address = self.address or os.environ.get("RAY_ADDRESS") or None
            kwargs: dict[str, Any] = {"log_to_driver": not self.quiet}
            if self.quiet:
                kwargs["logging_level"] = logging.ERROR
            if address:
                ray.init(address=address, **kwargs)
            else:
                os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
                check_socket_room(self.temp_dir)
                ensure_local_token()
                kwargs["address"] = "local"  # a new Ray of its own, never one found on the machine
                kwargs["include_dashboard"] = False
                for key, value in (
                    ("num_cpus", self.num_cpus),
                    ("num_gpus", self.num_gpus),
                    ("object_store_memory", self.object_store_memory),
                    ("_temp_dir", local_ray_temp_dir(self.temp_dir) if self.temp_dir else None),
                ):
                    if value is not None:
                        kwargs[key] = value
                try:
                    ray.init(**kwargs)
                except ValueError as exc:  # Ray's own check of the sizes it is given, before it starts
                    if self.object_store_memory is None or "memory" not in str(exc):
                        raise
                    from scoring.errors import UsageError, first_line

                    raise UsageError(f"'ray.object_store_memory' {self.object_store_memory:.3g} bytes: Ray cannot start "
                                     f"with it ({first_line(exc)})") from None
                self.local = True
            self.owned = True
        if self.quiet:
            quiet_ray_data()
        if self.quiet and self.capture_native_stderr:
            self._stderr = NativeStderrToFile(_session_log("ctgscore-driver-stderr.log"))
            self._stderr.start()
        self.ready = True
        return self

    _stderr: "NativeStderrToFile | None" = None

    def close(self) -> None:
        try:
            if self.owned:
                import ray

                ray.shutdown()
        finally:
            if self._stderr is not None:
                self._stderr.stop()
                self._stderr = None
            self.owned = False
            self.ready = False


def ensure_local_token() -> pathlib.Path | None:
    """Before a new local Ray starts with token authentication (`RAY_AUTH_MODE` unset or
    `token`) and no token is configured (`$RAY_AUTH_TOKEN`, `$RAY_AUTH_TOKEN_PATH`, or an
    existing `~/.ray/auth_token`): write a new random token (256 bits, as Ray makes them) to
    `~/.ray/auth_token`, mode 0600 in a 0700 folder, so other users of the machine cannot read
    it (Ray would create the file with the process's umask). Returns the file it wrote, else
    None. An existing token file is never changed."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if (mode is not None and mode.strip().lower() != "token") or os.environ.get("RAY_AUTH_TOKEN") \
            or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return None
    path = pathlib.Path(RAY_TOKEN_FILE).expanduser()
    if path.exists():
        return None
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process wrote one just now: use that
        return None
    with os.fdopen(handle, "w", encoding="ascii") as out:
        out.write(secrets.token_hex(32))
    return path


@contextlib.contextmanager
def ray_session(
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    temp_dir: str | None = None,
    object_store_memory: int | None = None,
    quiet: bool = True,
) -> Iterator[bool]:
    """`with ray_session(...) as owned:` joins or starts Ray; on exit shuts down only a Ray
    it started. Yields whether it started one."""
    session = RaySession(address, num_cpus, num_gpus, temp_dir, object_store_memory, quiet)
    session.ensure()
    try:
        yield session.owned
    finally:
        session.close()


def quiet_ray_logging() -> None:
    """Ray's driver-side loggers print errors only; everything else stays in Ray's files."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def divert_cluster_messages() -> None:
    """The messages Ray's driver receives from the cluster (a raylet's "N PYTHON worker processes
    have been started" warning, other jobs' errors) go to `ctgscore-ray-messages.log` in the
    session's log folder, not to stdout: Ray prints them there whatever `log_to_driver` says
    (its error-listener thread calls `print_to_stdstream`). Nothing changes if this Ray has no
    such function."""
    from ray._private import worker as ray_worker

    current = getattr(ray_worker, "print_to_stdstream", None)
    if current is None or getattr(current, "ctgscore_diverted", False):
        return

    def to_session_log(data, ignore_prefix: bool = False) -> None:
        try:
            with open(_session_log("ctgscore-ray-messages.log"), "a", encoding="utf-8") as handle:
                for line in data.get("lines", []):
                    handle.write(f"({data.get('pid', '?')}) {line}\n")
        except OSError:
            pass  # a message lost is better than a message on ctgscore's console

    to_session_log.ctgscore_diverted = True
    ray_worker.print_to_stdstream = to_session_log


def quiet_ray_data() -> None:
    """No Ray Data progress bars or progress log lines, and the `ray.data` logger writes to
    its session file (`logs/ray-data/ray-data.log`) only, not to the console."""
    import ray.data
    from ray.data._internal.logging import SessionFileHandler

    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.enable_operator_progress_bars = False
    context.print_on_execution_start = False
    logger = logging.getLogger("ray.data")
    for handler in list(logger.handlers):
        if not isinstance(handler, (SessionFileHandler, logging.FileHandler)):
            logger.removeHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)  # still recorded in the session file


def _session_log(name: str) -> str:
    """A file in this Ray session's log folder (the local node's), else the temp folder."""
    import tempfile

    try:
        import ray

        node = ray._private.worker._global_node
        folder = os.path.join(node.get_session_dir_path(), "logs") if node is not None else None
    except Exception:  # noqa: BLE001 - joined through a client or an older Ray: no local session dir
        folder = None
    if not folder or not os.path.isdir(folder):
        folder = tempfile.gettempdir()
    return os.path.join(folder, name)


class NativeStderrToFile:
    """While Ray runs in this process, file descriptor 2 (where Ray's C++ core worker writes
    its warning and error lines, e.g. about actor arguments in the object store) goes to a
    log file in Ray's session folder; `sys.stderr`, where ctgscore's progress bars and
    messages go, keeps writing to the terminal through a duplicate of the original
    descriptor. `stop()` puts everything back."""

    def __init__(self, path: str):
        self.path = path
        self.saved_fd: int | None = None
        self.saved_stream = None

    def start(self) -> None:
        import sys

        if self.saved_fd is not None:
            return
        try:
            if sys.stderr.fileno() != 2:
                return  # stderr is not the process's (a notebook, a test capture): leave it alone
        except (AttributeError, ValueError, OSError):
            return
        try:
            sys.stderr.flush()
            self.saved_fd = os.dup(2)
            target = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError:
            self.saved_fd = None
            return
        os.dup2(target, 2)
        os.close(target)
        self.saved_stream = sys.stderr
        sys.stderr = open(os.dup(self.saved_fd), "w", buffering=1, encoding="utf-8", errors="replace", closefd=True)

    def stop(self) -> None:
        import sys

        if self.saved_fd is None:
            return
        try:
            sys.stderr.flush()
            sys.stderr.close()
        except (OSError, ValueError):
            pass
        sys.stderr = self.saved_stream
        os.dup2(self.saved_fd, 2)
        os.close(self.saved_fd)
        self.saved_fd = None
