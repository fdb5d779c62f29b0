"""Where the control-plane binaries live, and building them when they are missing."""

from __future__ import annotations

import os
import subprocess
import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

TOOL_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = TOOL_DIR.parent.parent
BUILD_SCRIPT = TOOL_DIR / "build.sh"
VERSIONS_FILE = TOOL_DIR / "versions.env"


def cache_dir() -> Path:
    """The git-ignored cache: binaries keyed by version, and one state folder per running cluster."""
    return Path(os.environ.get("MULTINODE_CACHE_DIR", REPO_ROOT / ".cache" / "localcluster"))


def read_versions() -> dict[str, str]:
    versions = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            versions[key] = value
    return versions


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path
    kwok: Path
    kwok_stages: Path
    helm: Path
    registry: Path  # the cluster's OCI registry (distribution)
    crane: Path  # pushes images to it (`make push`, `make release`)
    # Real nodes
    kubelet: Path
    kube_proxy: Path
    containerd: Path
    ctr: Path
    runc: Path
    cni_plugins: Path  # a folder: bridge, host-local, loopback, portmap
    coredns: Path
    pause: Path
    device_plugin: Path

    def missing(self) -> list[Path]:
        return [getattr(self, f.name) for f in fields(self) if not getattr(self, f.name).exists()]


def locate() -> Binaries:
    v = read_versions()
    bin_dir = cache_dir() / "bin"
    # One build (build.sh build_kubernetes): helm and kwok share Kubernetes' compiled packages.
    kube = bin_dir / f"kubernetes-{v['KUBE_VERSION']}-helm-{v['HELM_VERSION']}-kwok-{v['KWOK_VERSION']}"
    containerd = bin_dir / f"containerd-{v['CONTAINERD_VERSION']}"
    return Binaries(
        etcd=bin_dir / f"etcd-{v['ETCD_VERSION']}" / "etcd",
        kube_apiserver=kube / "kube-apiserver",
        kube_controller_manager=kube / "kube-controller-manager",
        kube_scheduler=kube / "kube-scheduler",
        kubectl=kube / "kubectl",
        kwok=kube / "kwok",
        kwok_stages=kube / "kwok-stages",
        helm=kube / "helm",
        registry=bin_dir / f"registry-{v['DISTRIBUTION_VERSION']}-{sources_hash('registry')}" / "registry",
        crane=bin_dir / f"crane-{v['GO_CONTAINERREGISTRY_VERSION']}" / "crane",
        kubelet=kube / "kubelet",
        kube_proxy=kube / "kube-proxy",
        containerd=containerd / "containerd",
        ctr=containerd / "ctr",
        runc=bin_dir / f"runc-{v['RUNC_VERSION']}" / "runc",
        cni_plugins=bin_dir / f"cni-plugins-{v['CNI_PLUGINS_VERSION']}",
        coredns=bin_dir / f"coredns-{v['COREDNS_VERSION']}-{sources_hash('coredns')}" / "coredns",
        pause=bin_dir / f"pause-{v['KUBE_VERSION']}" / "pause",
        device_plugin=(bin_dir / f"deviceplugin-{v['KUBE_VERSION']}-{sources_hash('deviceplugin')}"
                       / "fake-device-plugin"),
    )


def sources_hash(folder: str) -> str:
    """The key build.sh's local_main uses: the first 12 hex digits of sha256 over a main's Go sources."""
    sources = sorted((TOOL_DIR / folder).glob("*.go"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:12]


def ensure_built() -> Binaries:
    """Build whatever is missing (the build script itself skips cached components)."""
    binaries = locate()
    if binaries.missing():
        subprocess.run([str(BUILD_SCRIPT)], check=True)
        binaries = locate()
        if binaries.missing():
            raise RuntimeError(f"build finished but binaries are missing: {binaries.missing()}")
    return binaries


def bin_path_dirs() -> list[Path]:
    """Folders to put first on PATH so `kubectl` and `helm` are the pinned ones."""
    b = locate()
    return list(dict.fromkeys([b.kubectl.parent, b.helm.parent]))


def ensure(*components: str) -> None:
    """build.sh COMPONENT... (each skipped when cached): what one command needs, not the whole cluster."""
    subprocess.run([str(BUILD_SCRIPT), *components], check=True, stdout=subprocess.DEVNULL)


def _tool(component: str, version_key: str) -> Path:
    """A tool that no cluster needs, built first when it is not there: bin/<component>-<version>/<component>."""
    binary = cache_dir() / "bin" / f"{component}-{read_versions()[version_key]}" / component
    if not binary.exists():
        ensure(component)
    return binary


def actionlint() -> Path:
    """actionlint for `make lint` (seconds to relink, a minute cold)."""
    return _tool("actionlint", "ACTIONLINT_VERSION")


def syft() -> Path:
    """syft for `make release`'s SBOM (seconds to relink, about 5 minutes of CPU cold: `prepare --release`)."""
    return _tool("syft", "SYFT_VERSION")


def kstatus() -> Path:
    """tools/localcluster/kstatus built against cli-utils: Flux's health rules for the GitOps tests (a minute
    cold, seconds to relink)."""
    binary = (cache_dir() / "bin" / f"kstatus-{read_versions()['CLI_UTILS_VERSION']}-{sources_hash('kstatus')}"
              / "kstatus")
    if not binary.exists():
        ensure("kstatus")
    return binary


def gang_crds_dir() -> Path:
    """The gang schedulers' CRDs (Volcano's PodGroup and Queue, scheduler-plugins' PodGroup): build.sh gangcrds."""
    v = read_versions()
    return cache_dir() / "bin" / f"gang-crds-{v['VOLCANO_APIS_VERSION']}-{v['SCHEDULER_PLUGINS_VERSION']}"


def ensure_gang_crds() -> Path:
    """gang_crds_dir(), made first when it is not there (seconds once controller-gen is cached)."""
    folder = gang_crds_dir()
    if not (folder / "scheduling.x-k8s.io_podgroups.yaml").exists():
        subprocess.run([str(BUILD_SCRIPT), "gangcrds"], check=True)
    return folder
