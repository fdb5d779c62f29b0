"""Push the images and the chart to an OCI registry, as an admin would: `make push` (the local cluster's
registry) and `make release` (any registry).

    python -m localcluster push --registry HOST[:PORT] [--images operator trainer] [--chart-repository REPO]

Images go to <registry>/multinode/<name>:<version> with crane, from the OCI layouts images.py writes; the
chart is packaged by helm and pushed with `helm push`, as oci://<chart repository>/multinode-operator, version
<version>. <version> is the package's (pyproject.toml's), which the chart's version and appVersion repeat.
A registry on a loopback address is spoken to in plain HTTP, as crane and Docker do by themselves (helm
needs `--plain-http` to push); any other needs TLS.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import sys
import tempfile
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from multinode import __version__
from multinode.render.settings import OPERATOR_IMAGE_REPOSITORY

from localcluster import binaries, images

CHART_DIR = binaries.REPO_ROOT / "charts" / "multinode-operator"
CHART_NAME = CHART_DIR.name
# ghcr.io/multinode/operator: the operator under the `multinode` namespace of a registry; every image beside it.
IMAGE_NAMESPACE = OPERATOR_IMAGE_REPOSITORY.split("/")[1]
# The pause image is the local cluster's sandbox image, not a release artifact: its tag is Kubernetes's.
PAUSE_TAG = "3.10"
PUSHED_IMAGES = (images.OPERATOR, images.TRAINER)  # `make push`; a release pushes the operator only
CHARTS_PATH = "charts"  # `make push`: the chart repository is <registry>/charts


def image_repository(registry: str, name: str) -> str:
    return f"{registry}/{IMAGE_NAMESPACE}/{name}"


def image_reference(registry: str, name: str) -> str:
    """Where an image is pushed: <registry>/multinode/<name>:<version> (the pause image: :3.10)."""
    return f"{image_repository(registry, name)}:{PAUSE_TAG if name == images.PAUSE else __version__}"


def chart_reference(chart_repository: str) -> str:
    """What `helm install` takes (with --version <version>): oci://<chart repository>/multinode-operator."""
    return f"oci://{chart_repository}/{CHART_NAME}"


def is_loopback(registry: str) -> bool:
    """Whether a registry (host[:port], a repository under it allowed) is on a loopback address."""
    host = urllib.parse.urlsplit("//" + registry).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stderr or done.stdout}")
    return done


def push_image(image: images.BuiltImage, reference: str) -> str:
    """crane push of the image's layout; returns <repository>@<digest>, the manifest digest the layout has."""
    pushed = _run([str(binaries.locate().crane), "push", str(image.layout), reference]).stdout.strip()
    if not pushed.endswith("@" + image.manifest_digest):
        raise RuntimeError(f"crane pushed {reference} as {pushed}, not {image.manifest_digest}")
    return pushed


def package_chart(destination: Path) -> Path:
    """helm package of the chart into destination: <destination>/multinode-operator-<version>.tgz."""
    destination.mkdir(parents=True, exist_ok=True)
    _run([str(binaries.locate().helm), "package", str(CHART_DIR), "--destination", str(destination)])
    return destination / f"{CHART_NAME}-{__version__}.tgz"


def push_chart(package: Path, chart_repository: str) -> str:
    """helm push of a packaged chart to oci://<chart repository>; returns the chart's manifest digest."""
    plain_http = ["--plain-http"] if is_loopback(chart_repository) else []
    done = _run([str(binaries.locate().helm), "push", str(package), f"oci://{chart_repository}", *plain_http])
    match = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", done.stderr, re.MULTILINE)  # helm reports on stderr
    if not match:
        raise RuntimeError(f"helm push printed no digest: {done.stderr}")
    return match.group(1)


@dataclass(frozen=True)
class Pushed:
    images: dict[str, str]  # name: <repository>@<digest>
    chart: str | None  # oci://<chart repository>/multinode-operator
    chart_digest: str | None


def push(registry: str, names: tuple[str, ...] = PUSHED_IMAGES, chart_repository: str | None = None,
         chart_package_dir: Path | None = None, compressed: bool = False) -> Pushed:
    """Build (or take from the cache) and push the named images, and the chart when chart_repository is set
    (packaged into chart_package_dir, a temporary folder by default)."""
    built = images.build_images(names, compressed=compressed)
    pushed = {name: push_image(built[name], image_reference(registry, name)) for name in names}
    if chart_repository is None:
        return Pushed(pushed, None, None)
    if chart_package_dir is None:
        with tempfile.TemporaryDirectory() as tmp:
            digest = push_chart(package_chart(Path(tmp)), chart_repository)
    else:
        digest = push_chart(package_chart(chart_package_dir), chart_repository)
    return Pushed(pushed, chart_reference(chart_repository), digest)


def push_for_local_cluster(registry: str) -> Pushed:
    """`make push`: the operator and trainer images and the chart, into the local cluster's registry."""
    return push(registry, PUSHED_IMAGES, f"{registry}/{CHARTS_PATH}")


def main(registry: str, names: list[str], chart_repository: str | None) -> int:
    binaries.ensure("debs", "crane", "helm")  # debootstrap for the images' base layer
    pushed = push(registry, tuple(names), chart_repository or f"{registry}/{CHARTS_PATH}")
    for name, reference in pushed.images.items():
        print(f"pushed {image_reference(registry, name)}  ({reference})", file=sys.stderr)
    print(f"pushed {pushed.chart} --version {__version__}  ({pushed.chart_digest})", file=sys.stderr)
    return 0
