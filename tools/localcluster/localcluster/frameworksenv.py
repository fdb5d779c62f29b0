"""The frameworks env: HF Transformers, Accelerate and DeepSpeed for the tests in which the real frameworks
write checkpoints (tests/frameworks/checkpoints/test_real_hf.py, test_real_deepspeed.py).

It is layered on the trainer env (torch, numpy): a second `pip install --target` folder in the git-ignored
cache, keyed by every pinned version, holding only what the trainer env lacks. Tests put both folders on
PYTHONPATH (`pythonpath()`). pip's `--target` ignores what is already on the path and would install a
second torch, so the install first resolves the whole set with torch and numpy pinned to the trainer env's
versions (`pip install --dry-run --report`), then installs, without dependencies, what the trainer env
does not already hold.

DeepSpeed is published as an sdist only. Its setup.py imports torch only to pre-compile ops; in pip's
isolated build there is no torch, so it builds the pure-Python package (DS_BUILD_OPS=0 says so too) and
compiles ops just in time where they are used. On CPU its communication backend always loads one, the
shared-memory collectives (deepspeed_shm_comm, about 2-3 minutes of C++ on 2 cores). It is built once, into
a folder of its own beside the env (`TORCH_EXTENSIONS_DIR`); torch's JIT build does not survive being
moved, so that folder is built in place, under the same lock, and marked complete last.

    python -m localcluster.frameworksenv    # prints PYTHONPATH, installing the folder first if needed
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from localcluster.trainerenv import (
    COMPLETE_MARKER,
    INSTALL_TIMEOUT_SECONDS,
    NUMPY_VERSION,
    PYTHON_TAG,
    TORCH_VERSION,
    cache_root,
    compile_folder,
    ensure_trainer_env,
    install_once,
    is_complete,
)

TRANSFORMERS_VERSION = "5.24.0"
ACCELERATE_VERSION = "1.15.0"   # the HF Trainer needs it
DEEPSPEED_VERSION = "0.19.8"


def env_dir() -> Path:
    """One folder per set of pins, torch's included: a new pin gets a new folder."""
    return cache_root() / (f"frameworks-transformers-{TRANSFORMERS_VERSION}-accelerate-{ACCELERATE_VERSION}-"
                           f"deepspeed-{DEEPSPEED_VERSION}-torch-{TORCH_VERSION}-{PYTHON_TAG}")


def _requirements() -> list[str]:
    return [f"transformers=={TRANSFORMERS_VERSION}", f"accelerate=={ACCELERATE_VERSION}",
            f"deepspeed=={DEEPSPEED_VERSION}"]


def ensure_frameworks_env(log=None) -> Path:
    """The installed folder (installing the trainer env and then it when missing). Safe to call concurrently."""
    trainer_env = ensure_trainer_env(log)

    def install(tmp: Path) -> dict:
        missing = _resolve_missing(trainer_env)
        _pip(["install", "--target", str(tmp), "--no-deps", "--no-compile", "--prefer-binary", *missing])
        compile_folder(tmp)
        return {"transformers": TRANSFORMERS_VERSION, "accelerate": ACCELERATE_VERSION,
                "deepspeed": DEEPSPEED_VERSION, "torch": TORCH_VERSION, "installed": missing}

    return install_once(env_dir(), " ".join(_requirements()) + f" on torch=={TORCH_VERSION} (minutes)", install, log)


def process_env(log=None) -> dict[str, str]:
    """The variables a process that runs the frameworks needs (installing what is missing first)."""
    path = os.pathsep.join([str(ensure_frameworks_env(log)), str(ensure_trainer_env(log))])
    return {"PYTHONPATH": path, "TORCH_EXTENSIONS_DIR": str(_ensure_deepspeed_ops(path)), "DS_ACCELERATOR": "cpu"}


def _ensure_deepspeed_ops(path: str) -> Path:
    """DeepSpeed's CPU collectives op, built once into its own folder (in place: see the module's doc)."""
    folder = cache_root() / f"{env_dir().name}-torch-extensions"
    if is_complete(folder):
        return folder
    with open(cache_root() / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_complete(folder):
            return folder
        shutil.rmtree(folder, ignore_errors=True)   # a killed build: torch's own lock file in it never clears
        folder.mkdir()
        build = ("from deepspeed.accelerator import get_accelerator; "
                 "get_accelerator().create_op_builder('ShareMemCommBuilder').load()")
        env = dict(os.environ, PYTHONPATH=path, TORCH_EXTENSIONS_DIR=str(folder), DS_ACCELERATOR="cpu")
        subprocess.run([sys.executable, "-c", build], env=env, stdout=sys.stderr, check=True,
                       timeout=INSTALL_TIMEOUT_SECONDS)
        (folder / COMPLETE_MARKER).write_text(json.dumps({"deepspeed": DEEPSPEED_VERSION}) + "\n")
    return folder


def _resolve_missing(trainer_env: Path) -> list[str]:
    """`name==version` of every package the pins need that the trainer env does not hold."""
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        _pip(["install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report), *_requirements(),
              f"torch=={TORCH_VERSION}", f"numpy=={NUMPY_VERSION}"])
        resolved = [(item["metadata"]["name"], item["metadata"]["version"])
                    for item in json.loads(report.read_text())["install"]]
    present = _installed_names(trainer_env)
    return sorted(f"{name}=={version}" for name, version in resolved if _normalized(name) not in present)


def _installed_names(folder: Path) -> set[str]:
    # pip --target leaves one <name>-<version>.dist-info per package.
    return {_normalized(d.name.removesuffix(".dist-info").rsplit("-", 1)[0]) for d in folder.glob("*.dist-info")}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()   # PEP 503


def _pip(args: list[str]) -> None:
    cmd = [sys.executable, "-m", "pip", *args[:1], "--disable-pip-version-check", "--no-input", *args[1:]]
    # DS_BUILD_OPS=0: DeepSpeed's setup.py builds no C++/CUDA op ahead of time.
    result = subprocess.run(cmd, stdout=sys.stderr, timeout=INSTALL_TIMEOUT_SECONDS,
                            env=dict(os.environ, DS_BUILD_OPS="0"), check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {result.returncode}")


def main() -> int:
    print(process_env()["PYTHONPATH"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
