"""Container images built without Docker: a Debian root filesystem from debootstrap, deterministic tar
layers, and an OCI layout per image that `crane push` sends to a registry (oci.py, publish.py).

Cached under .cache/localcluster/images/, keyed by their inputs, so a warm run reads a few small files:
  layers/<name>-<key>/layer.tar   base (debootstrap: minutes), pylib (multinode and its dependencies), pause, app
  layouts/<image>-<digest>/       one image's OCI layout; its layer blobs are hard links to the layer tars
The operator and trainer images share the base and pylib layers, so a node stores and pulls them once.
"""

from __future__ import annotations

import compileall
import hashlib
import os
import py_compile
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from localcluster import binaries, oci, processes
from localcluster.oci import BuiltImage, Image, Layer

# The images, by name: a registry holds each as multinode/<name> (publish.py).
PAUSE, OPERATOR, TRAINER = "pause", "operator", "trainer"

DEBIAN_SUITE = "bookworm"
DEBIAN_PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
PYTHON_VERSION = (3, 11)  # bookworm's python3: the pylib layer's wheels and .pyc files are made for it
RECIPE_VERSION = "1"  # part of every cache key: bump it when the way a layer is built or packed changes
# Every file's mtime in a layer: fixed so a tree always packs to the same digest; after 1980 because zip
# (so `pip wheel` of files from the image) rejects older timestamps.
LAYER_MTIME = 946684800  # 2000-01-01T00:00:00Z

PYLIB = "/opt/pylib"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PYTHON_ENV = [PATH_ENV, f"PYTHONPATH={PYLIB}", "PYTHONUNBUFFERED=1", "PYTHONDONTWRITEBYTECODE=1", "HOME=/tmp"]
# Wheels for any glibc up to bookworm's 2.36: pip does not expand manylinux_2_X to the older ones itself.
WHEEL_PLATFORMS = ["manylinux2014_x86_64"] + [f"manylinux_2_{minor}_x86_64" for minor in range(17, 37)]
# pyproject.toml's console script. pip --target would write one with the host's python in its shebang.
MULTINODE_SCRIPT = f"""#!/usr/bin/python3
import sys
if "{PYLIB}" not in sys.path:  # also with a cleared environment (env -i)
    sys.path.insert(0, "{PYLIB}")
from multinode.cli.main import main
sys.exit(main())
"""


def images_dir() -> Path:
    return binaries.cache_dir() / "images"



# ---- layers ----------------------------------------------------------------------------------------------

def _walk_sorted(root: str, rel: str = "") -> Iterator[tuple[str, str]]:
    """(path, name in the tar) of everything below root: depth first, names sorted."""
    with os.scandir(os.path.join(root, rel)) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            name = f"{rel}/{entry.name}" if rel else entry.name
            yield entry.path, name
            if entry.is_dir(follow_symlinks=False):
                yield from _walk_sorted(root, name)


def pack_layer(tree: Path, out: Path) -> Layer:
    """Write tree as an uncompressed layer tar, byte for byte the same for the same tree.

    Sorted entries, a fixed mtime, numeric owners only (the image's /etc/passwd is not the host's), and the
    GNU format, which spells long names without pax headers. tarfile stores symlinks as links, and every
    further path to an inode as a hard link to the first one.
    """
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        for path, name in _walk_sorted(str(tree)):
            info = tar.gettarinfo(path, name)
            if info is None:  # a socket: nothing an image can hold
                continue
            info.mtime, info.uname, info.gname = LAYER_MTIME, "", ""
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return Layer(out, oci.file_digest(out))


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()) + "/"
    with open("/proc/self/mountinfo") as f:
        return [p for p in (line.split()[4].replace("\\040", " ") for line in f) if p.startswith(prefix)]


def _remove(path: Path) -> None:
    # A debootstrap tree can hold mounts of the host's /proc, /sys or /dev: never delete through them.
    if mounts := _mounts_under(path):
        raise RuntimeError(f"refusing to delete {path}: still mounted there: {mounts}")
    shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()


def _remove_killed_builds(folder: Path) -> None:
    """Delete what builds killed midway left: .tmp-<pid>-* whose process is gone."""
    for tmp in folder.glob(".tmp-*"):
        pid = tmp.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _remove(tmp)


def _cached_layer(name: str, key: str, fill: Callable[[Path], None]) -> Layer:
    """The layer of the tree fill(tree) makes, taken from the cache when a build with this key finished.

    It is built in a temp folder renamed into place once complete, so a killed build never leaves
    something that looks cached.
    """
    folder = images_dir() / "layers"
    final = folder / f"{name}-{key[:16]}"
    if not (final / "diff_id").exists():
        folder.mkdir(parents=True, exist_ok=True)
        _remove_killed_builds(folder)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{os.getpid()}-{name}-", dir=folder))
        started = time.monotonic()
        try:
            tmp.chmod(0o755)
            (tmp / "tree").mkdir(mode=0o755)
            fill(tmp / "tree")
            layer = pack_layer(tmp / "tree", tmp / "layer.tar")
            _remove(tmp / "tree")
            (tmp / "diff_id").write_text(layer.diff_id + "\n")
            print(f"images: {name} layer: {layer.tar.stat().st_size / 1e6:.0f} MB in {time.monotonic() - started:.0f}s",
                  file=sys.stderr)
            try:
                tmp.rename(final)
            except OSError:  # a concurrent build of the same key finished first
                if not (final / "diff_id").exists():
                    raise
            for old in folder.glob(f"{name}-*"):  # earlier versions (each operator change makes one)
                if old != final:
                    _remove(old)
        finally:
            if tmp.exists():
                _remove(tmp)
    return Layer(final / "layer.tar", (final / "diff_id").read_text().strip())


def debian_mirror(suite: str = DEBIAN_SUITE, apt_dir: Path = Path("/etc/apt")) -> tuple[str, str | None]:
    """(URI, Signed-By keyring if it exists) of the first apt source serving suite, from apt's own files."""
    sources: list[tuple[list[str], str, str | None]] = []  # (suites, uri, keyring)
    for path in [apt_dir / "sources.list", *sorted((apt_dir / "sources.list.d").glob("*.list"))]:
        for line in path.read_text().splitlines() if path.exists() else []:  # deb [opt=v ...] uri suite comp...
            if match := re.match(r"\s*deb\s+(?:\[([^\]]*)\]\s*)?(\S+)\s+(\S+)", line):
                options = dict(option.partition("=")[::2] for option in (match[1] or "").split())
                sources.append(([match[3]], match[2], options.get("signed-by")))
    for path in sorted((apt_dir / "sources.list.d").glob("*.sources")):  # deb822: paragraphs of fields
        for paragraph in path.read_text().split("\n\n"):
            lines = [line.partition(":") for line in paragraph.splitlines() if not line.startswith(("#", " "))]
            fields = {key.strip().lower(): value.strip() for key, _, value in lines}
            if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes") != "no":
                sources += [(fields.get("suites", "").split(), uri, fields.get("signed-by"))
                            for uri in fields.get("uris", "").split()]
    for suites, uri, keyring in sources:
        if suite in suites:
            return uri, keyring if keyring and Path(keyring).exists() else None
    raise RuntimeError(f"no apt source in {apt_dir} serves {suite!r}: no mirror for debootstrap")


# Emptied: documentation, and what a container runtime mounts itself. Files deleted, folders kept (apt and
# dpkg expect them): downloaded .debs, package lists, logs. Translations go too (there is no "C" folder).
# ldconfig's aux-cache (inodes and mtimes) is the one file that differs between two debootstraps of the same
# packages: without it, any machine building from the same package versions gets the same base layer digest.
_EMPTIED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale", "dev", "proc", "sys", "tmp")
_FILES_DELETED = ("var/cache/apt", "var/lib/apt/lists", "var/log", "var/cache/ldconfig")


def _fill_base(root: Path) -> None:
    mirror, keyring = debian_mirror()
    print(f"images: debootstrap {DEBIAN_SUITE} from {mirror} (minutes; cached afterwards)", file=sys.stderr)
    # debootstrap mounts /proc, /sys and /dev in the target: in a private mount namespace they end with it.
    # It is the first process of its own pid namespace, and unshare dies with us, so killing this build
    # kills debootstrap and all its children: none goes on writing into a folder the next build deletes.
    cmd = ["unshare", "--mount", "--propagation", "private", "--pid", "--kill-child", "debootstrap",
           "--variant=minbase", *([f"--keyring={keyring}"] if keyring else []),
           f"--include={','.join(DEBIAN_PACKAGES)}", DEBIAN_SUITE, str(root), mirror]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          preexec_fn=processes._die_with_parent, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise RuntimeError(f"debootstrap failed ({done.returncode}):\n{tail}")
    if mounts := _mounts_under(root):
        raise RuntimeError(f"debootstrap left mounts behind: {mounts}")
    for child in (c for rel in _EMPTIED for c in (root / rel).iterdir()):
        _remove(child)
    for folder, _, files in (w for rel in _FILES_DELETED for w in os.walk(root / rel)):
        for file in files:
            os.unlink(os.path.join(folder, file))
    for rel in ("etc/hostname", "etc/resolv.conf"):  # the host's; the kubelet mounts the pod's
        (root / rel).unlink(missing_ok=True)
        (root / rel).touch(mode=0o644)
    # The fixed mtime makes Debian's timestamp-checked .pyc files stale, and Python would compile the standard
    # library at every start: hash-based unchecked .pyc files are used as they are.
    subprocess.run(["chroot", str(root), "/usr/bin/python3", "-m", "compileall", "-q", "-f", "--invalidation-mode",
                    "unchecked-hash", "/usr/lib/python{}.{}".format(*PYTHON_VERSION), "/usr/lib/python3/dist-packages"],
                   check=True)


def base_layer() -> Layer:
    key = oci.sha256(oci.canonical_json([RECIPE_VERSION, DEBIAN_SUITE, sorted(DEBIAN_PACKAGES), _EMPTIED,
                                         _FILES_DELETED]))
    return _cached_layer("base", key.removeprefix("sha256:"), _fill_base)


def _wheel_inputs() -> list[Path]:
    """What `pip wheel` reads: pyproject.toml, its readme, the package sources (not caches, not egg-info)."""
    root = binaries.REPO_ROOT
    skipped = ("__pycache__", ".egg-info")
    sources = [p for p in sorted((root / "operator").rglob("*"))
               if p.is_file() and not any(part.endswith(skipped) for part in p.relative_to(root).parts)]
    return [root / "pyproject.toml", root / "README.md", *sources]


def _fill_pylib(tree: Path) -> None:
    print(f"images: installing multinode-operator and its dependencies into {PYLIB}", file=sys.stderr)
    root, pip = binaries.REPO_ROOT, [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    with tempfile.TemporaryDirectory() as tmp:
        for path in _wheel_inputs():  # build from a copy: no build/ or egg-info lands in the repository
            (Path(tmp, "src") / path.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, Path(tmp, "src") / path.relative_to(root))
        subprocess.run([*pip, "wheel", "--no-deps", "-w", f"{tmp}/wheel", f"{tmp}/src"], check=True)
        [wheel] = Path(tmp, "wheel").glob("multinode_operator-*.whl")
        subprocess.run([*pip, "install", "--target", f"{tree}{PYLIB}", "--only-binary=:all:", "--no-compile",
                        *(f"--platform={p}" for p in WHEEL_PLATFORMS), "--implementation=cp",
                        "--python-version={}.{}".format(*PYTHON_VERSION), str(wheel)], check=True)
    shutil.rmtree(f"{tree}{PYLIB}/bin", ignore_errors=True)  # console scripts for the host's python
    if sys.version_info[:2] == PYTHON_VERSION:  # the same bytecode as the image's python3 (see _fill_base)
        compileall.compile_dir(f"{tree}{PYLIB}", ddir=PYLIB, quiet=1,
                               invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    (tree / "usr/local/bin").mkdir(parents=True)
    (tree / "usr/local/bin/multinode").write_text(MULTINODE_SCRIPT)
    os.chmod(tree / "usr/local/bin/multinode", 0o755)
    for path in tree.rglob("*"):  # readable by the operator's non-root user, whatever the umask
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & 0o7777 | (0o755 if path.is_dir() else 0o644))


def pylib_key() -> str:
    """Changes with the multinode sources (or the recipe); dependencies are resolved when the layer is built."""
    digest = hashlib.sha256(oci.canonical_json([RECIPE_VERSION, WHEEL_PLATFORMS, PYTHON_VERSION, MULTINODE_SCRIPT]))
    for path in _wheel_inputs():
        digest.update(oci.canonical_json(str(path.relative_to(binaries.REPO_ROOT)))
                      + oci.sha256(path.read_bytes()).encode())
    return digest.hexdigest()


def pylib_layer() -> Layer:
    return _cached_layer("pylib", pylib_key(), _fill_pylib)


def pause_layer() -> Layer:
    binary = binaries.cache_dir() / "bin" / f"pause-{binaries.read_versions()['KUBE_VERSION']}" / "pause"
    if not binary.exists():
        raise RuntimeError(f"{binary} is missing: build it with `tools/localcluster/build.sh pause`")

    def fill(tree: Path) -> None:
        shutil.copyfile(binary, tree / "pause")
        os.chmod(tree / "pause", 0o755)

    return _cached_layer("pause", oci.sha256(RECIPE_VERSION.encode() + binary.read_bytes())[7:], fill)


EXAMPLE_SCRIPT = binaries.REPO_ROOT / "examples" / "real" / "train.py"


def app_layer() -> Layer:
    """/app/train.py: the real example's training script, as a user's own image would carry theirs."""
    def fill(tree: Path) -> None:
        (tree / "app").mkdir(mode=0o755)
        shutil.copyfile(EXAMPLE_SCRIPT, tree / "app" / "train.py")
        os.chmod(tree / "app" / "train.py", 0o644)

    return _cached_layer("app", oci.sha256(RECIPE_VERSION.encode() + EXAMPLE_SCRIPT.read_bytes())[7:], fill)


# ---- images --------------------------------------------------------------------------------------------

IMAGE_CONFIGS = {
    # As registry.k8s.io/pause (build/pause/Dockerfile): the static binary, as an unprivileged user.
    PAUSE: {"Env": [PATH_ENV], "Entrypoint": ["/pause"], "User": "65535:65535"},
    # As images/operator/Dockerfile.
    OPERATOR: {"Env": PYTHON_ENV, "User": "65532:65532", "WorkingDir": "/tmp", "Entrypoint": ["multinode"],
               "Cmd": ["operator"]},
    # As images/trainer/Dockerfile: python3, run as root, can `import multinode`; /app/train.py.
    TRAINER: {"Env": PYTHON_ENV, "WorkingDir": "/app", "Cmd": ["python3"]},
}


def image_definition(name: str) -> Image:
    """One image; builds the layers it needs (and only those), or takes them from the cache."""
    if name not in IMAGE_CONFIGS:
        raise ValueError(f"no image named {name!r}: expected one of {', '.join(IMAGE_CONFIGS)}")
    if name == PAUSE:
        layers = (pause_layer(),)
    else:
        layers = (base_layer(), pylib_layer(), *((app_layer(),) if name == TRAINER else ()))
    return Image(name, layers, IMAGE_CONFIGS[name])


def build_images(names: tuple[str, ...] = tuple(IMAGE_CONFIGS), compressed: bool = False) -> dict[str, BuiltImage]:
    """Build what is missing; each image named with its OCI layout. A warm call takes a fraction of a second
    (a cold `compressed` one gzips the layers once: seconds per 100 MB)."""
    return {name: oci.write_layout(image_definition(name), images_dir() / "layouts", compressed) for name in names}
