"""`make release`: what .github/workflows/release.yml pushes on a version tag, run the same way anywhere.

    python -m localcluster release --registry HOST --chart-repository HOST/PATH --out FOLDER

After `make dist` (the wheel and sdist), it builds the operator image with gzip layers and pushes it as
<registry>/multinode/operator:<version>, packages the chart into FOLDER and pushes it as
oci://<chart repository>/multinode-operator, version <version>, and writes the image's SBOM (SPDX JSON, by
syft) into FOLDER. FOLDER/release.json says what was pushed, by digest, for the workflow's attestation.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from multinode import __version__

from localcluster import binaries, images, publish

SBOM_FORMAT = "spdx-json"
RELEASE_FILE = "release.json"


def sbom_name() -> str:
    return f"{publish.CHART_NAME}-{__version__}.spdx.json"


def write_sbom(image: images.BuiltImage, path: Path) -> Path:
    """syft's SPDX document of the image, read from its OCI layout: the Debian packages of the base layer and
    the Python distributions of the pylib layer, each with its version, licence and package URL."""
    command = [str(binaries.syft()), "scan", f"oci-dir:{image.layout}", "--quiet", "-o", f"{SBOM_FORMAT}={path}"]
    # syft would otherwise ask the network whether a newer syft exists
    env = {**os.environ, "SYFT_CHECK_FOR_APP_UPDATE": "false"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"syft failed ({done.returncode}): {done.stderr}")
    return path


def release(registry: str, chart_repository: str, out: Path) -> dict[str, str]:
    binaries.ensure("debs", "crane", "helm", "syft")  # debootstrap for the base layer; each skipped when there
    out.mkdir(parents=True, exist_ok=True)
    operator = images.build_images((images.OPERATOR,), compressed=True)[images.OPERATOR]
    reference = publish.image_reference(registry, images.OPERATOR)
    publish.push_image(operator, reference)
    package = publish.package_chart(out)
    chart_digest = publish.push_chart(package, chart_repository)
    sbom = write_sbom(operator, out / sbom_name())
    summary = {
        "version": __version__,
        "image": reference,
        "imageDigest": operator.manifest_digest,
        "chart": publish.chart_reference(chart_repository),
        "chartDigest": chart_digest,
        "chartPackage": package.name,
        "sbom": sbom.name,
    }
    (out / RELEASE_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def check_tag(tag: str) -> int:
    """The git tag a release is built from must name the version it releases: v<pyproject.toml's version>."""
    if tag == f"v{__version__}":
        return 0
    print(f"make release: RELEASE_TAG {tag!r} is not v{__version__}, the version in pyproject.toml", file=sys.stderr)
    return 2


def main(registry: str, chart_repository: str, out: Path) -> int:
    summary = release(registry, chart_repository, out)
    print(f"pushed {summary['image']} ({summary['imageDigest']})", file=sys.stderr)
    print(f"pushed {summary['chart']} --version {__version__} ({summary['chartDigest']})", file=sys.stderr)
    print(f"wrote {out / summary['chartPackage']}, {out / summary['sbom']} and {out / RELEASE_FILE}", file=sys.stderr)
    return 0
