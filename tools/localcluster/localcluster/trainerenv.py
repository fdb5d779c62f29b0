"""The trainer env: torch and numpy installed on the host, mounted read-only into real-node pods.

Torch is not baked into the node images: with its CUDA libraries it is about 5 GB (nvidia-* 3 GB,
torch 1.1 GB, triton 1 GB), and every image rebuild would copy it again. The host installs it once, with
`pip install --target`, into the git-ignored cache. Pods mount that folder (hostPath) at TRAINER_ENV_MOUNT
and put it on PYTHONPATH. The pods' python3 is Debian bookworm's 3.11, the host's is 3.11 too, so the
same cp311 wheels serve both.

    python -m localcluster.trainerenv     # prints the folder, installing it first if needed
"""

from __future__ import annotations

import fcntl
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from localcluster import binaries

# PyPI's torch for Linux x86_64 is the CUDA build (there is no CPU-only wheel under the plain name).
# It imports and trains on CPU without a GPU; the nvidia-* wheels it pulls in are just unused.
TORCH_VERSION = "2.15.0"
NUMPY_VERSION = "2.4.6"
PYTHON_TAG = "py311"  # the pods' interpreter; the wheels are cp311

TRAINER_ENV_MOUNT = "/opt/trainer-env"  # where pods mount the folder
COMPLETE_MARKER = ".complete"  # written last, inside the temp folder, before the rename
INSTALL_TIMEOUT_SECONDS = 3600


def cache_root() -> Path:
    # Resolved: torch's JIT build keys an op by its compiler flags, include paths among them, so the same
    # cache reached through a symlink (a git worktree's .cache) would rebuild the op under the lock others wait on.
    return (binaries.cache_dir().parent / "trainer-env").resolve()


def env_dir() -> Path:
    """The folder for the pinned versions: a new pin gets a new folder, the old one stays usable."""
    return cache_root() / f"torch-{TORCH_VERSION}-{PYTHON_TAG}"


def pod_pythonpath() -> str:
    """PYTHONPATH for a pod's trainer: `pip --target` puts the packages at the top of the folder."""
    return TRAINER_ENV_MOUNT


def is_complete(path: Path) -> bool:
    return (path / COMPLETE_MARKER).is_file()


def ensure_trainer_env(log=None) -> Path:
    """The installed folder for the pinned versions; installs it when missing. Safe to call concurrently."""
    def install(tmp: Path) -> dict:
        _pip_install(tmp)
        compile_folder(tmp)
        _portable_scripts(tmp / "bin")
        return {"torch": TORCH_VERSION, "numpy": NUMPY_VERSION}

    return install_once(env_dir(), f"torch=={TORCH_VERSION} numpy=={NUMPY_VERSION} (about 5 GB, minutes)",
                        install, log)


def install_once(final: Path, what: str, install: Callable[[Path], dict], log=None) -> Path:
    """`final`, made by `install(tmp)` into a temporary folder beside it and renamed into place, unless it
    is already complete. One installer at a time (a lock in the parent folder); a second caller waits and
    then finds the folder complete. `install` returns what its marker records."""
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    if is_complete(final):
        return final
    _check_interpreter()
    root = final.parent
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(final):
            return final
        # Leftovers of killed installs: nobody else can be installing while we hold the lock.
        for stale in root.glob(f".tmp-{final.name}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # not complete, so not ours; never reuse a half-made folder
            shutil.rmtree(final)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
        log(f"installing {what} into {final}")
        started = time.monotonic()
        marker = install(tmp)
        seconds = time.monotonic() - started
        marker.update(python=platform.python_version(), install_seconds=round(seconds, 1))
        (tmp / COMPLETE_MARKER).write_text(json.dumps(marker, indent=1) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it 0700; pods may run as another user
        # The rename is the commit: a killed install leaves only a .tmp-* folder, never `final`.
        tmp.rename(final)
        log(f"installed in {seconds:.0f} s")
    return final


def _check_interpreter() -> None:
    # pip picks wheels for the interpreter that runs it; the pods need cp311 manylinux x86_64.
    if sys.version_info[:2] != (3, 11) or platform.machine() != "x86_64" or sys.platform != "linux":
        raise RuntimeError(f"the trainer env is for CPython 3.11 on Linux x86_64 (the pods' python3); "
                           f"this is {platform.python_version()} on {sys.platform} {platform.machine()}")


def _pip_install(target: Path) -> None:
    cmd = [
        sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
        "--target", str(target),
        # Wheels only, so nothing is compiled on the host against the host's libraries.
        "--only-binary=:all:",
        "--no-compile",  # compile_folder does it, on both cores
        f"torch=={TORCH_VERSION}", f"numpy=={NUMPY_VERSION}",
    ]
    # pip's progress goes to stderr, so stdout of the CLI is only the path.
    result = subprocess.run(cmd, stdout=sys.stderr, timeout=INSTALL_TIMEOUT_SECONDS, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"pip install into {target} failed with exit code {result.returncode}")


def compile_folder(target: Path) -> None:
    """Write the .pyc files now: pods mount the folder read-only, so they could never cache them, and
    importing torch from source alone takes about 20 s instead of 6 s, in the launcher and in every worker.
    The exit code is not checked: a few files are for newer Pythons (torch's py312_intrinsics.py) and fail
    to compile here, which is harmless since 3.11 never imports them."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-q", "-j", "0", str(target)],
                   stdout=sys.stderr, timeout=INSTALL_TIMEOUT_SECONDS, check=False)


def _portable_scripts(bin_dir: Path) -> None:
    # pip writes this interpreter's path into the scripts' #! line, which pods do not have; with
    # /usr/bin/env, `torchrun` works in a pod that puts <mount>/bin on PATH.
    for script in bin_dir.iterdir() if bin_dir.is_dir() else []:
        lines = script.read_bytes().split(b"\n", 1)
        if len(lines) == 2 and lines[0].startswith(b"#!") and b"python" in lines[0]:
            script.write_bytes(b"#!/usr/bin/env python3\n" + lines[1])


def main() -> int:
    print(ensure_trainer_env())
    return 0


if __name__ == "__main__":
    sys.exit(main())
